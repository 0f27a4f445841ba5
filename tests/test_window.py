import copy
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from payloads import NGRAM_K4, read
from specwatch.telemetry.exposition import parse_payload
from specwatch.telemetry.snapshot import EngineSample, Histogram, Snapshot, TargetSample
from specwatch.readings.figures import HistogramDeltas
from specwatch.readings.window import (
    Window,
    counter_increase,
    histogram_increase,
    histogram_quantile,
)

URL = "http://node:8000"


def engine(drafts, draft_tokens, accepted, per_pos, gen=0.0, prompt=0.0, running=0.0, engine_id="0",
           ttft=None):
    hist = {}
    if ttft is not None:
        hist["vllm:time_to_first_token_seconds"] = ttft
    return EngineSample(
        engine=engine_id, model_name="m",
        counters={"vllm:spec_decode_num_drafts": drafts, "vllm:spec_decode_num_draft_tokens": draft_tokens,
                  "vllm:spec_decode_num_accepted_tokens": accepted, "vllm:generation_tokens": gen,
                  "vllm:prompt_tokens": prompt},
        gauges={"vllm:num_requests_running": running, "vllm:num_requests_waiting": 0.0,
                "vllm:kv_cache_usage_perc": 0.5},
        histograms=hist,
        accepted_per_position=tuple(per_pos),
    )


def snap(t, *engines, start=100.0, state="ok"):
    target = TargetSample(URL, state, engines=tuple(engines) if state == "ok" else (),
                          process_start_time=start if state == "ok" else None)
    return Snapshot(time=t, targets=(target,))


def test_acceptance_over_the_window():
    w = Window(60)
    w.add(snap(0, engine(100, 400, 150, [80, 40, 20, 10], gen=1000)))
    w.add(snap(10, engine(200, 800, 330, [170, 90, 45, 25], gen=1500, running=7)))
    tw = w.target(URL)
    acc = tw.total.acceptance
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (100, 400, 180)
    assert acc.acceptance_rate == pytest.approx(180 / 400)
    assert acc.acceptance_length == pytest.approx(1 + 180 / 100)
    assert acc.per_position == pytest.approx((0.9, 0.5, 0.25, 0.15))
    assert tw.k == 4 and tw.speculation_configured
    assert tw.total.generation_tokens_per_s == pytest.approx(50.0)
    assert tw.total.running == 7
    assert tw.lifetime.acceptance.acceptance_length == pytest.approx(1 + 330 / 200)


def test_counter_reset_is_not_negative():
    w = Window(60)
    w.add(snap(0, engine(1000, 4000, 2000, [900, 600, 300, 200], gen=9000), start=100))
    # restarted: counters dropped
    w.add(snap(5, engine(10, 40, 20, [9, 6, 3, 2], gen=90), start=200))
    w.add(snap(10, engine(30, 120, 60, [27, 18, 9, 6], gen=270), start=200))
    tw = w.target(URL)
    acc = tw.total.acceptance
    assert acc.drafts == 30 and acc.accepted_tokens == 60
    assert tw.total.generation_tokens_per_s == pytest.approx(27.0)
    assert tw.total.restarts == 1


def test_restart_caught_by_start_time_even_when_counters_grew_past_old_values():
    w = Window(60)
    w.add(snap(0, engine(10, 40, 20, [9, 6, 3, 2], gen=100), start=100))
    w.add(snap(5, engine(50, 200, 100, [45, 30, 15, 10], gen=500), start=200))
    acc = w.target(URL).total.acceptance
    assert acc.drafts == 50  # not 40: the new server counted from zero


def test_unreachable_reading_in_the_middle_is_skipped():
    w = Window(60)
    w.add(snap(0, engine(100, 400, 200, [90, 60, 30, 20])))
    w.add(snap(5, state="connection_refused"))
    w.add(snap(10, engine(110, 440, 220, [99, 66, 33, 22])))
    tw = w.target(URL)
    assert tw.total.acceptance.drafts == 10
    assert tw.latest.ok


def test_window_slides():
    w = Window(10)
    for t in range(0, 31):
        w.add(snap(t, engine(t * 10, t * 40, t * 20, [t * 9, t * 6, t * 3, t * 2])))
    tw = w.target(URL)
    assert tw.seconds == pytest.approx(10)
    assert tw.total.acceptance.drafts == pytest.approx(100)
    assert len(w) <= 12


def test_several_engines_sum_and_stay_apart():
    w = Window(60)
    w.add(snap(0, engine(0, 0, 0, [0, 0], engine_id="0"), engine(0, 0, 0, [0, 0], engine_id="1")))
    w.add(snap(10, engine(10, 20, 10, [7, 3], engine_id="0", running=3),
               engine(30, 60, 6, [5, 1], engine_id="1", running=4)))
    tw = w.target(URL)
    assert set(tw.engines) == {"m/0", "m/1"}
    assert tw.engines["m/0"].acceptance.acceptance_length == pytest.approx(2.0)
    assert tw.engines["m/1"].acceptance.acceptance_length == pytest.approx(1.2)
    assert tw.total.acceptance.acceptance_length == pytest.approx(1 + 16 / 40)
    assert tw.total.running == 7


def test_no_speculation():
    e = EngineSample("0", "m", counters={"vllm:generation_tokens": 5.0}, gauges={"vllm:num_requests_running": 1})
    w = Window(60)
    w.add(snap(0, e))
    tw = w.target(URL)
    assert not tw.speculation_configured and tw.k is None


def test_v0_emitted_tokens_give_drafts():
    def v0(emitted, accepted, tokens):
        return EngineSample("0", "m", counters={"vllm:spec_decode_num_emitted_tokens": emitted,
                                                "vllm:spec_decode_num_accepted_tokens": accepted,
                                                "vllm:spec_decode_num_draft_tokens": tokens},
                            gauges={"vllm:spec_decode_draft_acceptance_rate": 0.5})
    w = Window(60)
    w.add(snap(0, v0(0, 0, 0)))
    w.add(snap(10, v0(300, 200, 400)))
    tw = w.target(URL)
    assert tw.speculation_configured and tw.k == 4
    assert tw.total.acceptance.acceptance_length == pytest.approx(3.0)


def test_histogram_quantile_like_promql():
    h = Histogram(((0.1, 10.0), (0.5, 60.0), (1.0, 100.0), (math.inf, 100.0)), 40.0, 100.0)
    assert histogram_quantile(0.5, h) == pytest.approx(0.1 + 0.4 * (50 - 10) / 50)
    assert histogram_quantile(0.95, h) == pytest.approx(0.5 + 0.5 * 35 / 40)
    past = Histogram(((0.1, 1.0), (math.inf, 10.0)), 40.0, 10.0)
    assert histogram_quantile(0.95, past) == 0.1
    assert histogram_quantile(0.5, Histogram((), 0, 0)) is None


def test_histogram_delta_and_reset():
    a = Histogram(((1.0, 5.0), (math.inf, 10.0)), 12.0, 10.0)
    b = Histogram(((1.0, 9.0), (math.inf, 20.0)), 30.0, 20.0)
    d = histogram_increase(a, b)
    assert d.buckets == ((1.0, 4.0), (math.inf, 10.0)) and d.count == 10 and d.sum == 18
    assert histogram_increase(b, a) == a  # went down: a restart


def test_histogram_delta_pairs_buckets_by_bound_when_the_layouts_differ():
    a = Histogram(((0.5, 3.0), (1.0, 5.0), (math.inf, 10.0)), 12.0, 10.0)
    b = Histogram(((1.0, 9.0), (2.0, 15.0), (math.inf, 20.0)), 30.0, 20.0)  # 0.5 gone, 2.0 new
    assert histogram_increase(a, b).buckets == ((1.0, 4.0), (2.0, 15.0), (math.inf, 10.0))
    # a bucket that went down (counters read at slightly different instants) adds nothing
    c = Histogram(((0.5, 2.0), (1.0, 9.0), (math.inf, 20.0)), 30.0, 20.0)
    assert histogram_increase(a, c).buckets == ((0.5, 0.0), (1.0, 4.0), (math.inf, 10.0))


def test_histogram_deltas_are_worked_out_when_read_and_equal_the_eager_ones():
    ttft, tpot = "vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds"
    earlier = {ttft: Histogram(((1.0, 5.0), (math.inf, 10.0)), 12.0, 10.0)}
    later = {ttft: Histogram(((1.0, 9.0), (math.inf, 20.0)), 30.0, 20.0),
             tpot: Histogram(((0.1, 3.0), (math.inf, 4.0)), 0.2, 4.0)}  # new since: taken whole
    deltas = HistogramDeltas(earlier, later)
    eager = {ttft: histogram_increase(earlier[ttft], later[ttft]), tpot: later[tpot]}
    assert deltas._deltas == {}  # nothing worked out before it is read
    assert deltas.get(ttft) == eager[ttft] and deltas.get(ttft) is deltas[ttft]  # then kept
    assert list(deltas._deltas) == [ttft]
    assert deltas.get("vllm:e2e_request_latency_seconds") is None and "vllm:e2e" not in deltas
    assert dict(deltas) == eager and deltas == eager and list(deltas) == [ttft, tpot] and len(deltas) == 2
    assert repr(deltas) == repr(eager)
    copied = copy.deepcopy(deltas)  # the verdict index keeps copies of the Monitor
    assert copied == eager and copied is not deltas


def test_a_window_without_restart_reads_only_the_histograms_asked_for():
    zero = Histogram(((1.0, 0.0), (math.inf, 0.0)), 0.0, 0.0)
    later = Histogram(((1.0, 2.0), (math.inf, 3.0)), 1.5, 3.0)
    w = Window(60)
    w.add(snap(0, engine(0, 0, 0, [0] * 4, ttft=zero)))
    w.add(snap(5, engine(4, 16, 6, [3, 2, 1, 0], gen=30, ttft=later)))
    increases = w.target(URL).increases
    assert isinstance(increases.histograms, HistogramDeltas)
    assert increases.histogram("vllm:time_to_first_token_seconds") == histogram_increase(zero, later)


def test_ttft_p95_over_the_window_from_real_buckets():
    h0 = parse_payload(read(NGRAM_K4)).engines[0].histograms["vllm:time_to_first_token_seconds"]
    zero = Histogram(tuple((le, 0.0) for le, _ in h0.buckets), 0.0, 0.0)
    w = Window(60)
    w.add(snap(0, engine(0, 0, 0, [0] * 4, ttft=zero)))
    w.add(snap(5, engine(1, 4, 1, [1, 0, 0, 0], ttft=h0)))
    p95 = w.target(URL).total.ttft_p95_s
    assert p95 == histogram_quantile(0.95, h0) and p95 > 0


def test_clock_going_back_starts_over():
    w = Window(60)
    w.add(snap(10, engine(10, 40, 20, [9, 6, 3, 2])))
    w.add(snap(5, engine(20, 80, 40, [18, 12, 6, 4])))
    assert len(w) == 1


@given(st.lists(st.tuples(st.floats(0, 1e9), st.booleans()), min_size=2, max_size=30))
def test_increases_are_never_negative(values):
    """Any sequence of counter values, with or without restarts, gives non-negative increases."""
    total = 0.0
    for (prev, _), (cur, restarted) in zip(values, values[1:]):
        inc = counter_increase(prev, cur, restarted)
        assert inc >= 0
        total += inc
    assert total >= 0


@given(st.lists(st.integers(0, 50), min_size=2, max_size=20), st.integers(1, 4))
def test_acceptance_length_bounded_by_k_plus_one(accepts, k):
    """Drafts accepting 0..k tokens each give 1 ≤ L ≤ k+1 and non-increasing per-position rates."""
    w = Window(3600)
    drafts = tokens = acc = 0
    per_pos = [0] * k
    w.add(snap(0, engine(0, 0, 0, per_pos)))
    for i, a in enumerate(accepts):
        a = a % (k + 1)
        drafts += 1
        tokens += k
        acc += a
        for p in range(a):
            per_pos[p] += 1
        w.add(snap(i + 1, engine(drafts, tokens, acc, list(per_pos))))
    a = w.target(URL).total.acceptance
    assert 1.0 <= a.acceptance_length <= k + 1
    assert all(x >= y for x, y in zip(a.per_position, a.per_position[1:]))
    assert a.acceptance_length == pytest.approx(1 + sum(a.per_position))


def test_a_window_read_every_step_agrees_with_a_fresh_one():
    """The Window remembers which pairs of readings were restarts; reading it after every add must
    give what a Window filled at once gives, restarts and histograms included."""
    readings = []
    for t in range(40):
        drafts = (t % 17) * 10.0 if t >= 20 else t * 10.0  # the counters drop at t = 20 and 34: restarts
        readings.append(snap(float(t), engine(drafts, 4 * drafts, 2 * drafts, [drafts, drafts / 2],
                                              gen=3 * drafts, running=float(t % 5))))
    live = Window(12)
    restarts = 0
    for i, s in enumerate(readings):
        live.add(s)
        fresh = Window(12)
        for earlier in readings[: i + 1]:
            fresh.add(earlier)
        assert live.target(URL) == fresh.target(URL)
        assert live.target(URL) == live.target(URL)
        restarts += live.target(URL).total.restarts if live.target(URL).total else 0
    assert restarts > 0


def test_the_window_of_one_state_is_made_once():
    """The advisor's evaluation and the dashboard's view of one poll share one TargetWindow; any
    Snapshot added (or a step back in time) makes a new one."""
    readings = [snap(float(t), engine(t * 10.0, t * 40.0, t * 20.0, [t * 10.0, t * 5.0], gen=t * 30.0))
                for t in range(0, 30, 10)]
    w = Window(60)
    w.add(readings[0])
    w.add(readings[1])
    first = w.target(URL)
    assert w.target(URL) is first
    w.add(readings[2])
    second = w.target(URL)
    assert second is not first and second.time == 20.0
    w.add(readings[0])  # back in time: the window starts over
    w.add(readings[1])
    again = w.target(URL)
    assert again is not first and again == first


def test_step_tokens_on_a_real_capture_follow_vllms_semantics():
    """A real vLLM 0.32 capture (n-gram, k=4, 20 requests of 57 tokens): iteration_tokens_total's sum
    is prompt computed + tokens emitted, and the positions the steps computed are counted apart."""
    from specwatch.readings.window import lifetime_increases, step_tokens

    engine, = parse_payload(NGRAM_K4.read_text()).engines
    tokens = step_tokens(lifetime_increases(engine))
    steps = engine.histograms["vllm:iteration_tokens_total"]
    c = engine.counters
    assert tokens.steps == steps.count == 94
    # the histogram's sum, a figure of its own in the capture, is prompt − cached + generation
    assert tokens.prompt_and_emitted == steps.sum == c["vllm:prompt_tokens"] + c["vllm:generation_tokens"]
    # drafts verify their draft tokens plus one position; an n-gram proposal is often shorter than k
    assert c["vllm:spec_decode_num_draft_tokens"] < 4 * c["vllm:spec_decode_num_drafts"]
    assert tokens.verified == 1037 + 301
    # the 20 first tokens came from prefills; what verify steps emitted (their accepted tokens less
    # those vLLM counted past a request's end) and did not, was decoded plainly
    assert 0 < tokens.cut <= 20 * 4
    assert tokens.verify_emitted == pytest.approx(301 + 272 - tokens.cut)
    assert tokens.plain_decode == pytest.approx(1144 - (301 + 272 - tokens.cut) - 20)
    assert tokens.computed == pytest.approx(1194 + 1037 + 301 + tokens.plain_decode)
    assert tokens.computed_per_step > tokens.prompt_and_emitted_per_step


def test_histogram_totals_are_the_deltas_sum_and_count_without_their_buckets():
    from specwatch.readings.figures import Increases, histogram_increase_totals

    name = "vllm:request_time_per_output_token_seconds"
    earlier = Histogram(((0.1, 3.0), (math.inf, 5.0)), 0.4, 5.0)
    cases = {
        "grew": Histogram(((0.1, 7.0), (math.inf, 12.0)), 1.1, 12.0),
        "went down (a restart)": Histogram(((0.1, 1.0), (math.inf, 2.0)), 0.1, 2.0),
        "another layout": Histogram(((0.1, 7.0), (0.5, 9.0), (math.inf, 12.0)), 1.1, 12.0),
        "sum went down": Histogram(((0.1, 7.0), (math.inf, 12.0)), 0.2, 12.0),
    }
    for case, later in cases.items():
        delta = histogram_increase(earlier, later)
        assert histogram_increase_totals(earlier, later) == (delta.sum, delta.count), case
        deltas = HistogramDeltas({name: earlier}, {name: later})
        inc = Increases(5.0, {}, (), deltas)
        assert inc.histogram_totals("absent", name) == (delta.sum, delta.count), case
        assert deltas._deltas == {}, case  # no bucket paired for a mean
        inc.histogram(name)
        assert inc.histogram_totals(name) == (delta.sum, delta.count), case  # and once paired, the same
        assert Increases(5.0, {}, (), {name: delta}).histogram_totals(name) == (delta.sum, delta.count)
    assert Increases(5.0).histogram_totals(name) is None


def test_summed_histograms_are_worked_out_when_read_and_equal_the_eager_sums():
    """Engines' histograms summed name by name, in engine order: the same Histograms the eager
    fold gives (a layout that differs keeps the larger, a name one engine lacks is the others'),
    each summed only when read."""
    from specwatch.readings.figures import SummedHistograms, _add_histograms

    ttft, tpot, e2e = ("vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds",
                       "vllm:e2e_request_latency_seconds")
    parts = [
        {ttft: Histogram(((1.0, 5.0), (math.inf, 10.0)), 12.0, 10.0),
         tpot: Histogram(((0.1, 3.0), (math.inf, 4.0)), 0.2, 4.0)},
        {e2e: Histogram(((2.0, 1.0), (math.inf, 1.0)), 1.5, 1.0),
         ttft: Histogram(((1.0, 2.0), (math.inf, 3.0)), 2.5, 3.0)},
        {ttft: Histogram(((1.0, 1.0), (math.inf, 1.0)), 0.5, 1.0),
         tpot: Histogram(((0.1, 1.0), (0.5, 6.0), (math.inf, 9.0)), 0.9, 9.0)},  # another layout, larger
    ]
    eager: dict[str, Histogram] = {}
    for part in parts:
        for name, h in part.items():
            eager[name] = _add_histograms(eager.get(name), h)
    summed = SummedHistograms(parts)
    assert summed._sums == {}  # nothing summed before it is read
    assert summed.get(ttft) == eager[ttft] == Histogram(((1.0, 8.0), (math.inf, 14.0)), 15.0, 14.0)
    assert summed[tpot] == eager[tpot] == parts[2][tpot]
    assert list(summed._sums) == [ttft, tpot]
    assert summed.get("absent") is None and "absent" not in summed and e2e in summed
    assert list(summed) == [ttft, tpot, e2e] == list(eager) and len(summed) == 3
    assert dict(summed) == eager and summed == eager and repr(summed) == repr(eager)
    assert copy.deepcopy(summed) == eager


def test_a_node_of_several_engines_sums_the_histogram_asked_for():
    from specwatch.readings.figures import SummedHistograms

    zero = Histogram(((1.0, 0.0), (math.inf, 0.0)), 0.0, 0.0)
    later = Histogram(((1.0, 2.0), (math.inf, 3.0)), 1.5, 3.0)
    w = Window(60)
    w.add(snap(0, *(engine(0, 0, 0, [0] * 4, engine_id=str(i), ttft=zero) for i in range(3))))
    w.add(snap(5, *(engine(4, 16, 6, [3, 2, 1, 0], gen=30, engine_id=str(i), ttft=later) for i in range(3))))
    increases = w.target(URL).increases
    assert isinstance(increases.histograms, SummedHistograms)
    assert increases.histogram("vllm:time_to_first_token_seconds") == Histogram(
        ((1.0, 6.0), (math.inf, 9.0)), 4.5, 9.0)


# The real CPU vLLM 0.32 (n-gram, k = 4, the tiny Llama, echo prompts), 8 requests one at a time at
# each output length: the spec-decode counters and the engine's own step count. One request at a
# time, the engine's decode steps are its steps less one prefill a request; the counters' decode
# steps (drafts + plain decodes worked out from generation_tokens) came short by the accepted tokens
# vLLM counted past each request's end: 8, 14, 4 and 10 at 16, 32, 64 and 128 tokens a request.
REAL_CUTS = [
    # (max_tokens, finished, generation, drafts, accepted, per-position rates, engine steps)
    (16, 8, 128, 24, 54, (0.92, 0.75, 0.33, 0.25), 82),
    (32, 8, 256, 56, 128, (0.82, 0.71, 0.46, 0.29), 142),
    (64, 8, 512, 132, 260, (0.71, 0.56, 0.39, 0.30), 256),
    (128, 8, 1024, 288, 582, (0.72, 0.56, 0.41, 0.33), 452),
]


def test_the_tokens_vllm_counts_past_a_requests_end_are_estimated_where_the_engine_counted_them():
    """tokens_cut against what the real engine's step count shows was cut: within a quarter over
    the four lengths together (33.6 estimated for 36), and each length within 8 tokens (8 requests
    a length: a request's cut is 0 to 4 tokens)."""
    from specwatch.readings.cut import tokens_cut

    estimated = counted = 0.0
    for max_tokens, finished, generation, drafts, accepted, rates, steps in REAL_CUTS:
        plain_by_counters = generation - finished - (drafts + accepted)
        cut_by_engine = (steps - finished) - (drafts + plain_by_counters)
        cut = tokens_cut(drafts, accepted, rates, generation - finished, finished)
        assert abs(cut - cut_by_engine) <= 8, (max_tokens, cut, cut_by_engine)
        estimated += cut
        counted += cut_by_engine
    assert counted == 36
    assert abs(estimated - counted) <= 0.25 * counted, estimated


def test_the_cut_estimate_against_drawn_requests():
    """Independent of the estimate's algebra: requests drawn draft by draft (a chain of acceptances
    at the given per-position rates, the n-gram misses' plain decodes among them), each ending at its
    length with its last step's extra tokens cut, counted as vLLM counts them. Over 2,000 requests of
    each shape the estimate is within 10 % of the tokens cut."""
    import random

    from specwatch.readings.cut import tokens_cut

    rng = random.Random(7)
    for rates, miss, length in (((0.8, 0.6, 0.4, 0.2), 0.0, 64), ((0.9, 0.8, 0.7, 0.6), 0.3, 200),
                                ((0.5, 0.2), 0.1, 40), ((0.95, 0.9, 0.85, 0.8, 0.75, 0.7), 0.0, 33)):
        conditional = [rates[0]] + [rates[i] / rates[i - 1] for i in range(1, len(rates))]
        drafts = accepted = generation = cut = 0
        per_position = [0] * len(rates)
        for _ in range(2000):
            left = length - 1  # the first token comes from the prefill
            generation += 1
            while left > 0:
                if rng.random() < miss:  # no proposal: a plain decode of one token
                    left -= 1
                    generation += 1
                    continue
                a = 0
                while a < len(rates) and rng.random() < conditional[a]:
                    per_position[a] += 1
                    a += 1
                drafts += 1
                accepted += a
                kept = min(1 + a, left)
                cut += 1 + a - kept
                generation += kept
                left -= kept
        estimate = tokens_cut(drafts, accepted, [p / drafts for p in per_position], generation - 2000, 2000)
        assert abs(estimate - cut) <= 0.1 * cut, (rates, miss, length, estimate, cut)
