"""A verdict that knows how sure it is (issue 46): the window's evidence as an interval around the
speedup, ON or OFF only when the interval leaves 1, and a hold that says what would settle it.

The sampling errors are checked against arithmetic written out here (a chain of Bernoulli
acceptances, a mean over requests), not against the product's own functions; the commit rule on
the advisor (a fresh start from one request holds, the same speedup over many requests commits),
and on the banner (a node truly at 0.96 turns off once its interval is narrow).
"""

from __future__ import annotations

import math
import random

import pytest

from specwatch import perf
from specwatch.advice.advisor import AdvisorConfig
from specwatch.advice.monitor import Monitor
from specwatch.advice.shown import ShownVerdict
from specwatch.advice.verdict import HOLD, OFF, ON, UNKNOWN_BOUND, Verdict
from specwatch.perf.hardware import lookup_model
from step_law import LLAMA_1B, LawNode, generate


def test_a_drafts_variance_comes_from_the_per_position_rates_as_a_chain_of_acceptances():
    """vLLM counts position i accepted only after every one before it, so p_i = P(A ≥ i). Simulated
    here: each draft accepts position i with the conditional rate p_i / p_(i-1)."""
    rates = (0.7, 0.45, 0.25, 0.1)
    rng = random.Random(7)
    counts = []
    for _ in range(200_000):
        a, before = 0, 1.0
        for p in rates:
            if rng.random() >= p / before:
                break
            a, before = a + 1, p
        counts.append(a)
    mean = sum(counts) / len(counts)
    variance = sum((c - mean) ** 2 for c in counts) / len(counts)
    length = 1.0 + sum(rates)
    assert mean == pytest.approx(sum(rates), abs=0.01)
    # drafts many, requests many: the within-draft term alone, √(Var/D)/L
    drafts = 10_000.0
    got = perf.acceptance_error(length, rates, drafts, requests=1e12)
    assert got == pytest.approx(math.sqrt(variance / drafts) / length, rel=0.02)


def test_a_window_of_one_request_measured_that_request_not_the_traffic():
    one = perf.acceptance_error(2.2, (0.6, 0.4, 0.2), drafts=40, requests=1)
    many = perf.acceptance_error(2.2, (0.6, 0.4, 0.2), drafts=40 * 100, requests=100)
    assert one >= perf.REQUEST_ACCEPTANCE_SPREAD  # however many drafts one request made
    assert many == pytest.approx(one / 10, rel=0.05)  # 1/√n in drafts and requests alike


def test_the_interval_commits_only_when_it_leaves_1_and_says_what_would_settle_it():
    thin = perf.evidence(0.9, acceptance=0.25, steps=0.0)
    assert thin.state == HOLD and thin.low < 1 < thin.high
    # the error that would exclude 1 at 0.9×, and the evidence it takes: (σ / σ_needed)² times as much
    needed = abs(math.log(0.9)) / perf.EVIDENCE_Z
    assert thin.more_acceptance_needed() == pytest.approx((0.25 / needed) ** 2)
    assert perf.evidence(0.9, acceptance=0.02, steps=0.01).state == OFF
    assert perf.evidence(1.5, acceptance=0.2, steps=0.05).state == ON
    # the step times alone keep 1 inside: more acceptance cannot settle it
    assert perf.evidence(0.97, acceptance=0.001, steps=0.05).more_acceptance_needed() is None


_NGRAM = AdvisorConfig(method="ngram", model=lookup_model("Llama-3.1-8B"))


def _first_judged(node: LawNode, load: list[float], config: AdvisorConfig = _NGRAM) -> list[Verdict]:
    monitor = Monitor(window_s=30.0, advisor_config=config)
    out = []
    for snap in generate(node, load):
        monitor.ingest(snap)
        v = monitor.states[node.url].verdict
        if v.speculation != "unknown":
            out.append(v)
    return out


def test_a_fresh_start_from_one_request_holds_and_says_how_many_more_requests_would_settle_it():
    """The issue's case: a draft model k=4 on an 8B target, one running request with long outputs, its
    acceptance below the break-even by less than one request's spread: a hold, not OFF."""
    node = LawNode(draft=LLAMA_1B, k=4, per_position=(0.45, 0.25, 0.12, 0.06), output_tokens=4000.0)
    config = AdvisorConfig(method="draft_model", draft_params=LLAMA_1B.params, model=lookup_model("Llama-3.1-8B"))
    first = _first_judged(node, [1.0] * 12, config)[0]
    assert first.speculation == HOLD, (first.expected_speedup, first.reasons)
    low, high = first.to_dict()["speedup_interval"]
    assert low < 1 < high
    settle = first.to_dict()["settle"]
    assert settle["kind"] == "thin_evidence" and settle["more_requests"] > 1
    hold = [r for r in first.reasons if r.startswith("hold: not sure yet")]
    assert hold and "more request" in hold[0] and "would settle it" in hold[0], first.reasons


def test_the_same_speedup_over_many_requests_commits():
    node = LawNode(per_position=(0.45, 0.25, 0.12, 0.05))
    verdicts = _first_judged(node, [8.0] * 40)
    last = verdicts[-1].to_dict()
    assert last["speculation"] == ON and last["speedup_interval"][0] > 1
    assert last["evidence_error"] < 0.05 and last["settle"] is None
    # the interval is around the speedup shown
    low, high = last["speedup_interval"]
    assert math.sqrt(low * high) == pytest.approx(last["expected_speedup"], rel=1e-3)


def _at(t: float, speedup: float, error: float) -> Verdict:
    evidence = perf.evidence(speedup, acceptance=error, steps=0.0)
    return Verdict(evidence.state, 0.9, speedup, 2.0, 150.0, evidence.state == OFF, ("r",), UNKNOWN_BOUND, time=t,
                   configured=True, acceptance_length=2.0, low_load_break_even=1.2, running=160.0,
                   details={"level_error": 0.1, "evidence": evidence})


def test_a_node_truly_at_0_96_turns_off_once_its_interval_is_narrow_and_holds_while_it_is_wide():
    """The issue's 'hold that never ends': with a fixed ±5 % band, 0.96 stayed inside it for good."""
    narrow, wide = ShownVerdict(), ShownVerdict()
    for shown in (narrow, wide):
        shown.show(_at(0, 1.3, 0.01), 0, True)
    for t in range(5, 400, 5):
        v_narrow = narrow.show(_at(t, 0.96, 0.01), t, True)
        v_wide = wide.show(_at(t, 0.96, 0.05), t, True)
    assert v_narrow.speculation == OFF
    assert v_wide.speculation == HOLD
    assert any(r.startswith("hold: ") for r in v_wide.reasons)


def test_the_exporter_serves_the_interval_around_the_speedup_it_serves():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specwatch.outputs.export import ExportAgent, build_registry

    node = LawNode(per_position=(0.45, 0.25, 0.12, 0.05))
    agent = ExportAgent(source=None, monitor=Monitor(30.0, _NGRAM), node="n", mode="replay", clock=lambda: 0.0)
    for snapshot in generate(node, [8.0] * 40):
        agent.ingest(snapshot)
    text = generate_latest(build_registry(agent, process_metrics=False)).decode()
    served = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    one = (("node", "n"), ("target", node.url))
    speedup = served[("specwatch_expected_speedup_ratio", one)]
    low = served[("specwatch_expected_speedup_interval_ratio", (("bound", "low"),) + one)]
    high = served[("specwatch_expected_speedup_interval_ratio", (("bound", "high"),) + one)]
    assert low < speedup < high and math.sqrt(low * high) == pytest.approx(speedup)
    verdict = agent.monitor.states[node.url].verdict.to_dict()
    assert [low, high] == pytest.approx(verdict["speedup_interval"], abs=1e-4)
