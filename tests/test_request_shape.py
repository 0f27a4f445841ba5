"""The share of prefill-heavy requests (prompt over 10× the output), bounded from the two length
histograms, against data the bounds did not make: hand-counted pairings, every pairing of small
request sets enumerated (the extremes of that enumeration must be the bounds exactly), per-request
lengths bucketed by prometheus_client's own Histogram, and the advisor's reason."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client import Histogram as PromHistogram

from payloads import NGRAM_K4, read
from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.telemetry.exposition import parse_payload
from specwatch.readings.figures import lifetime_increases
from specwatch.readings.health import (OUTPUT_LENGTH, PROMPT_LENGTH, health_report, request_shape, share_over_ratio_bounds,
                              share_range_words)
from specwatch.telemetry.snapshot import Histogram
from specwatch.collectors.synthetic import generate
from specwatch.readings.window import Window
from test_advisor import NODE

# vLLM's request_prompt_tokens / request_generation_tokens buckets for a 2048-token model (1-2-5)
VLLM_LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)


def bucketed(lengths: list[int], buckets=VLLM_LENGTH_BUCKETS) -> Histogram:
    """The lengths as prometheus_client's Histogram counts them (cumulative `le` buckets)."""
    registry = CollectorRegistry()
    h = PromHistogram("lengths", "lengths", buckets=buckets, registry=registry)
    for n in lengths:
        h.observe(n)
    (family,) = registry.collect()
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    bounds = [float(b) for b in buckets] + [float("inf")]
    cumulative = tuple((le, samples[("lengths_bucket", "+Inf" if le == float("inf") else str(le))]) for le in bounds)
    return Histogram(cumulative, samples[("lengths_sum", None)], samples[("lengths_count", None)])


def heavy_share(prompts: list[int], outputs: list[int]) -> float:
    return sum(p > 10 * o for p, o in zip(prompts, outputs)) / len(prompts)


def test_the_capture_has_no_prefill_heavy_request():
    # prompts: (20,50] 10, (50,100] 5, (100,200] 5; outputs: (20,50] 3, (50,100] 17. The longest
    # prompt is at most 200 and the shortest output at least 21 (210 > 200): no pairing has one
    (engine,) = parse_payload(read(NGRAM_K4)).engines
    shape = request_shape(lifetime_increases(engine))
    assert (shape.prefill_heavy_share_low, shape.prefill_heavy_share_high) == (0.0, 0.0)
    assert shape.prefill_heavy_share_words() == "0% of requests have a prompt over 10× their output"


def test_a_hand_counted_case():
    # prompts: three in (500, 1000], one in (1, 2]; outputs: two in (5, 10], two in (50, 100].
    # Fewest heavy: the three long prompts take both outputs over 50 (at most 100: 1000 is not over
    # 1000) and one output of at most 10 (501 > 100: heavy), the short prompt the other: 1 of 4.
    # Most heavy: the long prompts (up to 1000) take both short outputs (≥ 6) and one long (≥ 51,
    # 510 < 1000: heavy too), the short prompt (≤ 2) the other long one: 3 of 4.
    prompts = bucketed([700, 800, 900, 2])
    outputs = bucketed([7, 8, 60, 70])
    assert share_over_ratio_bounds(prompts, outputs) == (pytest.approx(0.25), pytest.approx(0.75))
    assert share_range_words(0.25, 0.75) == "between 25% and 75%"
    assert share_range_words(0.30, 0.34) == "about 32%"
    assert share_range_words(0.5, 0.5) == "50%"
    assert share_over_ratio_bounds(prompts, None) is None
    assert share_over_ratio_bounds(bucketed([]), outputs) is None


def test_the_exact_threshold_is_not_over_it():
    # a prompt of 100 over an output of 10 is 10×, not over it; 101 over 10 is; whole tokens make
    # the bucket edges decide: (50, 100] against (5, 10] can go either way, (100, 200] cannot
    assert share_over_ratio_bounds(bucketed([100]), bucketed([10])) == (0.0, 1.0)
    assert share_over_ratio_bounds(bucketed([101]), bucketed([10])) == (1.0, 1.0)
    assert share_over_ratio_bounds(bucketed([1000]), bucketed([100])) == (0.0, 1.0)


def _pairing_extremes(prompts: list[int], outputs: list[int]) -> tuple[float, float]:
    shares = [heavy_share(prompts, [outputs[j] for j in order]) for order in itertools.permutations(range(len(outputs)))]
    return min(shares), max(shares)


def _bucket_bottom(n: int) -> int:
    below = [b for b in VLLM_LENGTH_BUCKETS if b < n]
    return below[-1] + 1 if below else 0


def _bucket_top(n: int) -> int:
    return next(b for b in VLLM_LENGTH_BUCKETS if n <= b)


lengths = st.one_of(st.integers(0, 40), st.integers(0, 2000))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(st.lists(lengths, min_size=n, max_size=n),
                                                     st.lists(lengths, min_size=n, max_size=n))))
def test_bounds_hold_for_every_pairing_and_are_reached(case):
    prompts, outputs = case
    low, high = share_over_ratio_bounds(bucketed(prompts), bucketed(outputs))
    # every pairing of these very requests (a coupling of n equal masses is a mix of pairings)
    fewest, most = _pairing_extremes(prompts, outputs)
    assert low - 1e-9 <= fewest and most <= high + 1e-9
    # sharp: lengths at their buckets' extremes, consistent with the same histograms, reach the bounds
    fewest_possible, _ = _pairing_extremes([_bucket_bottom(p) for p in prompts], [_bucket_top(o) for o in outputs])
    _, most_possible = _pairing_extremes([_bucket_top(p) for p in prompts], [_bucket_bottom(o) for o in outputs])
    assert low == pytest.approx(fewest_possible)
    assert high == pytest.approx(most_possible)


@pytest.mark.parametrize("seed", range(5))
def test_the_true_share_of_correlated_traffic_lies_inside(seed):
    # requests whose output length follows the prompt's (summaries, RAG answers) or opposes it:
    # whatever the pairing, the per-request share must sit inside the bounds
    rng = random.Random(seed)
    prompts, outputs = [], []
    for _ in range(2000):
        prompt = int(rng.lognormvariate(5.5, 1.2)) + 1
        if rng.random() < 0.5:
            output = max(1, int(prompt * rng.uniform(0.02, 0.3)))
        else:
            output = max(1, int(rng.lognormvariate(4.0, 1.0)))
        prompts.append(min(prompt, 2048))
        outputs.append(min(output, 2048))
    low, high = share_over_ratio_bounds(bucketed(prompts), bucketed(outputs))
    assert low <= heavy_share(prompts, outputs) <= high
    assert 0.0 <= low < high <= 1.0


def test_the_share_is_in_the_health_block():
    (engine,) = parse_payload(read(NGRAM_K4)).engines
    block = health_report(lifetime_increases(engine), 60.0, {}, None, None, True, None)
    shape = block["request_shape"]
    assert shape["prefill_heavy_ratio"] == 10.0
    assert shape["prefill_heavy_share_low"] == 0.0 and shape["prefill_heavy_share_high"] == 0.0


def _with_lengths(snapshots, prompts: Histogram, outputs: Histogram):
    """The synthetic node's Snapshots with their length histograms replaced by these, grown by the
    same amount at each reading (the lengths of every reading's finished requests)."""
    for i, snap in enumerate(snapshots, start=1):
        (target,) = snap.targets
        (engine,) = target.engines

        def times(h: Histogram) -> Histogram:
            return Histogram(tuple((le, c * i) for le, c in h.buckets), h.sum * i, h.count * i)

        histograms = {**engine.histograms, PROMPT_LENGTH: times(prompts), OUTPUT_LENGTH: times(outputs)}
        engine = dataclasses.replace(engine, histograms=histograms)
        yield dataclasses.replace(snap, targets=(dataclasses.replace(target, engines=(engine,)),))


def test_most_requests_prefill_heavy_raise_the_tax_below_the_mean_ratio():
    # 9 in 10 requests: a 1000-token prompt, a 10-token answer; 1 in 10: a 100-token prompt, a
    # 2000-token answer. Mean prompt 910 over mean output 209: 4.4, under the 10 of the tax; yet at
    # least 80% of requests (the long prompts take 90%, the short answers 90%: 0.9 + 0.9 − 1) are
    # surely prefill-heavy, and at most 90% (the long answers are never heavy).
    prompts = bucketed([1000] * 9 + [100])
    outputs = bucketed([10] * 9 + [2000])
    node = dataclasses.replace(NODE, prompt_tokens_per_request=910.0, output_tokens_per_request=209.0)
    window, advisor = Window(10.0), Advisor(AdvisorConfig(method="ngram"))
    for snap in _with_lengths(generate(node, [4.0] * 20), prompts, outputs):
        window.add(snap)
        verdict = advisor.update(window.target(node.url), snap.gpus)
    assert "prefill_tax" in verdict.flags
    (reason,) = [r for r in verdict.reasons if r.startswith("prefill-heavy")]
    assert "(4 prompt tokens per output token)" in reason
    assert "between 80% and 90% of requests have a prompt over 10× their output" in reason


def test_an_even_mix_raises_no_tax():
    # every prompt 200, every answer 100: no request is prefill-heavy, nor is the mean
    prompts, outputs = bucketed([200] * 10), bucketed([100] * 10)
    node = dataclasses.replace(NODE, prompt_tokens_per_request=200.0, output_tokens_per_request=100.0)
    window, advisor = Window(10.0), Advisor(AdvisorConfig(method="ngram"))
    for snap in _with_lengths(generate(node, [4.0] * 20), prompts, outputs):
        window.add(snap)
        verdict = advisor.update(window.target(node.url), snap.gpus)
    assert "prefill_tax" not in verdict.flags
    assert not any(r.startswith("prefill-heavy") for r in verdict.reasons)



def test_the_health_tab_shows_the_range_and_a_point_only_when_narrow():
    from specwatch.widgets.health import prefill_share_line

    shape = {"requests": 4.0, "prompt_mean_tokens": 600.0, "output_mean_tokens": 36.0, "input_output_ratio": 16.7,
             "prefill_heavy_ratio": 10.0, "prefill_heavy_share_low": 0.25, "prefill_heavy_share_high": 0.75}
    block = {"request_shape": shape, "finish_reasons": {"stop": 4.0}}
    line = prefill_share_line(block).plain
    assert line == "prefill  25%–75% of requests: prompt > 10× output (bounds; lengths unpaired)"
    narrow = {**shape, "prefill_heavy_share_low": 0.30, "prefill_heavy_share_high": 0.34}
    assert "≈32% of requests" in prefill_share_line({**block, "request_shape": narrow}).plain
    exact = {**shape, "prefill_heavy_share_low": 0.0, "prefill_heavy_share_high": 0.0}
    assert "bounds" not in prefill_share_line({**block, "request_shape": exact}).plain
    unknown = {**shape, "prefill_heavy_share_low": None, "prefill_heavy_share_high": None}
    assert prefill_share_line({**block, "request_shape": unknown}) is None
