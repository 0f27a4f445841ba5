"""tests/step_law.py's noisy node (`generate_noisy`) is honest about its noise: the running count
fluctuates around the load it is asked for, acceptance is the law's over a long window and visibly
not over one second at low load, the counters keep vLLM V1's semantics and never decrease, and a
seed gives the same Snapshots again. The verdict it feeds is measured, not asserted, by
benchmarks/bench_ramp_legs.py --noisy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ramp_legs import RAMP_NODES
from step_law import generate, generate_noisy, tiers_load

NGRAM, _ = RAMP_NODES["ngram"]
DRAFT_K5, _ = RAMP_NODES["draft_k5"]
TIER_S = 120


def _engine(snap):
    return snap.targets[0].engines[0]


def _running(snaps) -> np.ndarray:
    return np.array([_engine(s).gauges["vllm:num_requests_running"] for s in snaps])


def _acceptance_length(first, last) -> float:
    a, b = _engine(first).counters, _engine(last).counters
    drafts = b["vllm:spec_decode_num_drafts"] - a["vllm:spec_decode_num_drafts"]
    return 1.0 + (b["vllm:spec_decode_num_accepted_tokens"] - a["vllm:spec_decode_num_accepted_tokens"]) / drafts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_running_fluctuates_around_each_tier(seed):
    tiers = [16, 64, 128, 512]
    running = _running(generate_noisy(NGRAM, tiers_load(tiers, TIER_S), seed))
    for n, tier in enumerate(tiers):
        settled = running[n * TIER_S + 30:(n + 1) * TIER_S]  # past the change of load
        assert settled.std() > 0.3 * np.sqrt(tier), (tier, settled.std())  # Poisson-like, not held still
        assert abs(settled.mean() - tier) < 0.15 * tier, (tier, settled.mean())


def test_at_a_load_of_one_or_two_the_running_count_is_a_few_and_often_none():
    for tier in (1, 2):
        running = _running(generate_noisy(NGRAM, [float(tier)] * 300, seed=4))
        assert set(np.unique(running)) >= {0.0, 1.0, 2.0, 3.0}
        assert running.max() <= 10 and abs(running.mean() - tier) < 0.5
        assert (running == 0).mean() > 0.05


@pytest.mark.parametrize("node", [NGRAM, DRAFT_K5], ids=["ngram", "draft_k5"])
def test_acceptance_is_the_laws_over_a_long_window_and_noisy_over_a_second_at_low_load(node):
    snaps = list(generate_noisy(node, [128.0] * 300, seed=7))
    assert _acceptance_length(snaps[0], snaps[-1]) == pytest.approx(node.acceptance_length, rel=0.05)
    low = list(generate_noisy(node, [2.0] * 300, seed=7))
    per_second = [_acceptance_length(a, b) for a, b in itertools.pairwise(low)
                  if _engine(b).counters["vllm:spec_decode_num_drafts"]
                  > _engine(a).counters["vllm:spec_decode_num_drafts"]]
    assert len(per_second) > 100
    assert np.std(per_second) > 0.1 * (node.acceptance_length - 1.0), np.std(per_second)
    assert max(per_second) - min(per_second) > 0.5 * (node.acceptance_length - 1.0)
    # and over the whole low-load stretch it still comes back to the law's, more loosely
    assert _acceptance_length(low[0], low[-1]) == pytest.approx(node.acceptance_length, rel=0.1)


def test_the_same_seed_gives_the_same_snapshots_and_another_seed_others():
    load = tiers_load([16, 128], 30)
    first = [s.to_dict() for s in generate_noisy(NGRAM, load, seed=11)]
    assert first == [s.to_dict() for s in generate_noisy(NGRAM, load, seed=11)]
    other = [s.to_dict() for s in generate_noisy(NGRAM, load, seed=12)]
    assert len(other) == len(first) and other != first
    assert [s["time"] for s in other] != [s["time"] for s in first]


def test_counters_never_decrease_and_keep_vllm_v1_semantics():
    load = [0.0] * 20 + tiers_load([2, 16, 128, 512, 64], 20) + [0.0] * 20  # idle, a ramp, idle again
    snaps = list(generate_noisy(DRAFT_K5, load, seed=3))
    assert len(snaps) == len(load)
    times = [s.time for s in snaps]
    gaps = np.diff(times)
    assert gaps.min() >= 0.8 - 1e-9 and gaps.max() <= 1.2 + 1e-9 and gaps.std() > 0.05  # 1 s ± 0.2 s
    shape = _engine(next(iter(generate(DRAFT_K5, [16.0]))))
    for before, after in itertools.pairwise(snaps):
        a, b = _engine(before), _engine(after)
        assert all(b.counters[name] >= a.counters[name] for name in a.counters)
        assert all(y >= x for x, y in zip(a.accepted_per_position, b.accepted_per_position))
        for name, h in a.histograms.items():
            g = b.histograms[name]
            assert g.count >= h.count and g.sum >= h.sum
            assert all(y >= x for (_, x), (_, y) in zip(h.buckets, g.buckets))
    cuts = []
    for snap in snaps:
        e = _engine(snap)
        assert set(e.counters) == set(shape.counters) and set(e.gauges) == set(shape.gauges)
        assert set(e.histograms) == set(shape.histograms)
        assert [le for le, _ in e.histograms["vllm:iteration_tokens_total"].buckets] \
            == [le for le, _ in shape.histograms["vllm:iteration_tokens_total"].buckets]
        c = e.counters
        # V1: a draft of k tokens per decoding request a step, emitting 1 + accepted; first tokens
        # from the prefill, one per request (the TTFT histogram's count); the accepted tokens past a
        # request's end are counted, not emitted: at most k a finished request
        assert c["vllm:spec_decode_num_draft_tokens"] == DRAFT_K5.k * c["vllm:spec_decode_num_drafts"]
        first_tokens = e.histograms["vllm:time_to_first_token_seconds"].count
        cut = (c["vllm:spec_decode_num_drafts"] + c["vllm:spec_decode_num_accepted_tokens"] + first_tokens
               - c["vllm:generation_tokens"])
        assert -1e-6 <= cut <= DRAFT_K5.k * c["vllm:request_success"] + 1e-6
        cuts.append(cut)
        assert sum(e.accepted_per_position) == pytest.approx(c["vllm:spec_decode_num_accepted_tokens"])
        assert all(y <= x for x, y in itertools.pairwise(e.accepted_per_position))
        steps = e.histograms["vllm:iteration_tokens_total"]
        assert steps.sum == pytest.approx(c["vllm:prompt_tokens"] + c["vllm:generation_tokens"])
        assert steps.buckets[-1][1] == steps.count
        assert c["vllm:request_success"] <= first_tokens  # finished: each begun here (the load began at 0)
    assert cuts[-1] > 0  # requests finished inside a step's accepted tokens: some were cut
    idle = _running(snaps[-10:])
    assert (idle == 0).all()  # the load went away and the running set drained
    assert _engine(snaps[-1]).counters == _engine(snaps[-2]).counters


def test_calibration_counts_a_situation_once_when_asked():
    """The benchmark's calibration by situation: a stay at one load judged 3 times (wrong each time)
    and another judged once (right) are one wrong and one right judgement, where per evaluation they
    are 1 right in 4; calls split across bins carry their share of their situation."""
    from ramp_legs import Call, calibration

    stay = ("ngram", 0, "held", 0)
    calls = [Call("on", 0.65, False, situation=stay) for _ in range(3)]
    calls += [Call("off", 0.62, True, situation=("ngram", 0, "cold", 1))]
    calls += [Call("on", 0.95, True, situation=("ngram", 0, "cold", 2)),
              Call("on", 0.55, False, situation=("ngram", 0, "cold", 2))]
    per_call = {row["bin"]: row for row in calibration(calls)}
    per_situation = {row["bin"]: row for row in calibration(calls, by_situation=True)}
    assert per_call["0.6-0.7"] == {"bin": "0.6-0.7", "calls": 4, "right": 0.25}
    assert per_situation["0.6-0.7"] == {"bin": "0.6-0.7", "calls": 2.0, "right": 0.5}
    assert per_situation["0.9-1.0"]["calls"] == per_situation["0.5-0.6"]["calls"] == 0.5
    assert (per_situation["0.9-1.0"]["right"], per_situation["0.5-0.6"]["right"]) == (1.0, 0.0)
    assert per_situation["0.7-0.8"] == {"bin": "0.7-0.8", "calls": 0.0, "right": None}
