"""The shown verdict under load, on telemetry from a step-time law that is not specwatch's own
(tests/step_law.py): ramps flip within one tier of the law's true crossover, a stationary load at
the boundary holds still, one failed scrape changes nothing, and a stalled engine is never ON."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from prometheus_client import generate_latest

from specwatch.advice.advisor import AdvisorConfig
from specwatch.outputs.export import ExportAgent, build_registry
from specwatch.advice.monitor import DEFAULT_DWELL_S, Monitor
from specwatch.commands.check import exit_status
from specwatch.commands.options import ExitCode
from specwatch.telemetry.snapshot import TargetSample
from ramp_legs import RAMP_NODES, ramp_legs
from step_law import Forward, Gpu, LawNode, generate, tiers_load, true_crossover

START = 1_900_000_000.0
TIERS = [16, 32, 64, 96, 128, 192, 256, 384]
TIER_DWELL_S = 360  # longer than the banner's dwell, so each tier can show its own verdict

CASES = {
    # n-gram, k=4, L = 1.87: the law's crossover is about 135 running
    "ngram": RAMP_NODES["ngram"],
    # a 1B draft model for an 8B target, k=3, L = 2.25: about 122 running; the draft's own forwards
    # (its weights, its KV, its fixed overhead) are in the law's step
    "draft_model": RAMP_NODES["draft_k3"],
}


def shown_timeline(snapshots, config: AdvisorConfig) -> list[tuple[float, float, object]]:
    """(data time, running, shown verdict) at every evaluation of a Monitor."""
    monitor = Monitor(window_s=30.0, advisor_config=config)
    out = []
    for snap in snapshots:
        before = monitor.states.get(snap.targets[0].url)
        monitor.ingest(snap)
        state = monitor.states[snap.targets[0].url]
        if before is None or state is not before:
            running = snap.targets[0].engines[0].gauges["vllm:num_requests_running"] if snap.targets[0].ok else None
            out.append((snap.time - START, running, state.verdict))
    return out


def first_decision(timeline, wanted: str, after: float = -1.0):
    return next(((t, b) for t, b, v in timeline if t > after and v.speculation == wanted), None)


def tier_index(b: float) -> int:
    return TIERS.index(int(b))


@pytest.mark.parametrize("case", sorted(CASES))
def test_ramp_up_and_down_flips_within_one_tier_of_the_true_crossover(case):
    node, config = CASES[case]
    crossover = true_crossover(node)
    above = next(i for i, t in enumerate(TIERS) if t > crossover)  # the first tier where it costs
    below = above - 1  # the first tier, on the way down, where it pays again
    load = tiers_load(TIERS + TIERS[::-1][1:], TIER_DWELL_S)
    timeline = shown_timeline(generate(node, load), config)
    on = first_decision(timeline, "on")
    assert on is not None and on[1] == TIERS[0]
    off = first_decision(timeline, "off")
    assert off is not None, f"never turned off; the law's crossover is {crossover:.0f}"
    assert off[0] < len(TIERS) * TIER_DWELL_S, "turned off only on the way down"
    assert abs(tier_index(off[1]) - above) <= 1, f"off at {off[1]}, the law crosses at {crossover:.0f}"
    # the shown figures hold still within a tier, and follow the cost when the load moves it
    def break_even_at_end_of(tier_number: int) -> float:
        end = (tier_number + 1) * TIER_DWELL_S - 1
        return [v.break_even_length for t, _, v in timeline if t <= end and v.break_even_length][-1]
    assert break_even_at_end_of(TIERS.index(256)) > 1.1 * break_even_at_end_of(TIERS.index(64))
    back_on = first_decision(timeline, "on", after=off[0])
    assert back_on is not None, "never turned back on"
    assert abs(tier_index(back_on[1]) - below) <= 1, f"on again at {back_on[1]}, the law crosses at {crossover:.0f}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_cold_start_at_high_load_is_off_and_turns_on_within_one_tier(case):
    node, config = CASES[case]
    crossover = true_crossover(node)
    below = max(i for i, t in enumerate(TIERS) if t < crossover)
    timeline = shown_timeline(generate(node, tiers_load(TIERS[::-1], TIER_DWELL_S)), config)
    decisions = [v.speculation for _, _, v in timeline if v.speculation in ("on", "off")]
    assert decisions[0] == "off"
    on = first_decision(timeline, "on")
    assert on is not None and abs(tier_index(on[1]) - below) <= 1


def test_one_minute_ramp_legs_flip_within_one_tier_of_the_true_crossover():
    """The issue's bar on this law: with a minute of data a tier, the shown verdict flips within one
    tier of the law's crossover on at least 20 of 21 legs (up, down, and a cold start at the top) of
    the seven nodes it was set on, and the A10G node's three legs since. It does on all 24. Before a sample's context was its steps' own, the drafter's share came off as
    the decision prices it and a draft model ran its own roofline, it did on 17: three n-gram legs
    on the way down stayed off two tiers too long (their KV read learned too cheap from windows
    across a step in the load), and a draft model's way up turned off a tier late."""
    legs = [leg for name in RAMP_NODES for leg in ramp_legs(name)]
    missed = [leg.words for leg in legs if not leg.shown_ok]
    print(f"{len(legs) - len(missed)} of {len(legs)} legs; missed: {missed}")
    assert len(legs) == 24 and len(missed) <= 1, missed


def _banner_changes(timeline) -> list[tuple[float, str, str]]:
    changes = []
    previous = None
    for t, _, v in timeline:
        if v.speculation == "unknown":
            continue
        if previous is not None and v.speculation != previous:
            changes.append((t, previous, v.speculation))
        previous = v.speculation
    return changes


def _stationary(node: LawNode, minutes: int, seed: int = 3) -> list[float]:
    """Running requests jittering by a few around the law's crossover."""
    rng = np.random.default_rng(seed)
    centre = round(true_crossover(node))
    return [float(centre + j) for j in rng.integers(-3, 4, size=minutes * 60)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_stationary_load_at_the_boundary_holds_the_banner_and_the_figures(case):
    node, config = CASES[case]
    timeline = shown_timeline(generate(node, _stationary(node, 20), seed=5), config)
    changes = _banner_changes(timeline)
    print(case, changes)
    # at most one change of the banner per 5 minutes, hold ↔ on/off included
    assert len(changes) <= 4
    for (t1, _, _), (t2, _, _) in itertools.pairwise(changes):
        assert t2 - t1 >= DEFAULT_DWELL_S
    # the shown break-even moves only when its inputs move: acceptance and cost are constant here
    shown = [v.break_even_length for t, _, v in timeline if t >= 120 and v.break_even_length is not None]
    moves = sum(1 for a, b in itertools.pairwise(shown) if a != b)
    print(case, "break-even moves", moves, "of", len(shown), sorted(set(round(x, 3) for x in shown)))
    assert moves <= 6
    assert max(shown) / min(shown) < 1.1


def _with_failed_readings(snapshots, failed_times: set[float]):
    for snap in snapshots:
        if snap.time - START in failed_times:
            url = snap.targets[0].url
            failed = TargetSample(url, "timeout", f"vLLM at {url}: no answer within the timeout")
            yield dataclasses.replace(snap, targets=(failed,))
        else:
            yield snap


def _change_log(snapshots, config):
    monitor = Monitor(window_s=30.0, advisor_config=config)
    log = []
    for snap in snapshots:
        log += [(c.time - START, c.verdict.speculation) for c in monitor.ingest(snap)]
    return log, monitor


def test_one_failed_scrape_at_an_evaluation_instant_changes_nothing_and_persisting_failures_do():
    node, config = CASES["ngram"]
    load = tiers_load([64, 128, 192, 256], TIER_DWELL_S)
    clean, _ = _change_log(generate(node, load), config)
    # 600 s is an evaluation instant: the Monitor evaluates every 5 s of data time from the first
    one_failure, _ = _change_log(_with_failed_readings(generate(node, load), {600.0}), config)
    assert one_failure == clean
    # the verdict shown at the failed instant is the last one, marked as such
    _, before = _change_log(generate(node, load[:596]), config)
    last_shown = before.states[node.url].verdict
    monitor = Monitor(window_s=30.0, advisor_config=config)
    for snap in _with_failed_readings(generate(node, load[:601]), {600.0}):
        monitor.ingest(snap)
    state = monitor.states[node.url]
    assert state.verdict.speculation == last_shown.speculation != "unknown"
    assert "reading_failed" in state.verdict.flags
    assert state.reachable  # one failure is not news
    assert state.verdict.reasons[0].startswith("the latest reading failed")
    # failures that persist show unknown, and that is news in the timeline
    persisting, _ = _change_log(_with_failed_readings(generate(node, load), {600.0 + s for s in range(16)}),
                                config)
    assert (605.0, "unknown") in persisting


def _stalled_tail(snapshots, stall_after: int, stall_for: int):
    """The Snapshots, then the last reading's counters frozen for `stall_for` seconds while its
    requests stay running: the server answers, its engine does not advance."""
    snaps = list(snapshots)[:stall_after]
    last = snaps[-1]
    frozen = [dataclasses.replace(last, time=last.time + i) for i in range(1, stall_for + 1)]
    return snaps + frozen


def test_a_stalled_engine_is_unknown_never_on_exits_3_and_raises_the_exported_flag():
    node, config = CASES["ngram"]
    snaps = _stalled_tail(generate(node, tiers_load([16], 120)), 120, 90)
    monitor = Monitor(window_s=30.0, advisor_config=config)
    agent = ExportAgent(None, monitor, node="n1", mode="replay", clock=itertools.count().__next__)
    shown = []
    for snap in snaps:
        agent.ingest(snap)
        shown.append((snap.time - START, monitor.states[node.url].verdict))
    before = [v for t, v in shown if t < 119]
    assert before[-1].speculation == "on"
    stalled = [v for t, v in shown if t >= 119 + 31]  # a whole window after the last step
    assert stalled and all(v.speculation == "unknown" for v in stalled)
    v = stalled[-1]
    assert "engine_stalled" in v.flags and v.reasons[0].startswith("engine stalled")
    assert "stale_acceptance" not in v.flags
    assert exit_status(True, v.to_dict()) == ExitCode.UNREADABLE
    text = generate_latest(build_registry(agent, process_metrics=False)).decode()
    assert f'specwatch_engine_stalled{{node="n1",target="{node.url}"}} 1.0' in text
    assert f'specwatch_verdict{{node="n1",state="on",target="{node.url}"}} 0.0' in text


def test_requests_arriving_at_an_idle_engine_are_not_a_stall():
    node, config = CASES["ngram"]
    idle = list(generate(node, [0.0] * 60))
    last = idle[-1]
    # the last reading: one request running, no token out yet (the window began idle)
    engine = last.targets[0].engines[0]
    arrived = dataclasses.replace(engine, gauges=dict(engine.gauges, **{"vllm:num_requests_running": 1.0}))
    snap = dataclasses.replace(last, time=last.time + 1,
                               targets=(dataclasses.replace(last.targets[0], engines=(arrived,)),))
    monitor = Monitor(window_s=30.0, advisor_config=config)
    for s in idle + [snap]:
        monitor.ingest(s)
    assert "engine_stalled" not in monitor.states[node.url].verdict.flags


def test_the_law_is_not_the_advisors_hinge():
    """The law's step time bends smoothly: no flat stretch then a straight line, as the hinge has."""
    node = LawNode()
    times = [node.step(b, False)[0] for b in (8, 16, 32, 64, 128, 256, 512)]
    slopes = [(t2 - t1) for t1, t2 in itertools.pairwise(times)]
    # every doubling adds time (a hinge adds none below its knee), and more with every doubling
    assert all(s > 0 for s in slopes) and all(b > a for a, b in itertools.pairwise(slopes))


# A node whose accelerator nothing identifies (no NVML, no dcgm-exporter, no --gpu), with a CPU's
# shape: a knee near ten tokens, so verifying k+1 positions per sequence costs compute from a few
# running sequences up. The advisor's prior knows no knee here; its fit must find it in the data.
CPU_LIKE = Gpu(name="unlisted accelerator", bandwidth=40e9, peak_flops=1.5e12, eff_max=0.5, eff_tokens=2.0,
               attention_efficiency=0.2)
TINY_TARGET = Forward(params=0.4e9, layers=16, kv_heads=2, head_dim=64, attention_heads=8, fixed_s=0.003)
CPU_NODE = LawNode(target=TINY_TARGET, gpu=CPU_LIKE, per_position=(0.7, 0.5, 0.35, 0.2), per_token_s=2e-5,
                   context_per_sequence=300.0, model_name="tiny-llama")
CPU_TIERS = [1, 2, 4, 8, 16, 32]


def test_an_unidentified_cpu_like_node_is_learned_from_its_loads_and_turns_off_past_its_crossover():
    crossover = true_crossover(CPU_NODE)
    assert crossover is not None and 8 < crossover < 16  # the law's own answer, not the advisor's
    timeline = shown_timeline(generate(CPU_NODE, tiers_load(CPU_TIERS, TIER_DWELL_S)),
                              AdvisorConfig(method="ngram"))
    off = first_decision(timeline, "off")
    assert off is not None, "never turned off: the step-time fit kept a GPU's flat line"
    assert off[1] == 16, f"off at {off[1]} running; the law crosses at {crossover:.1f}"
    # below the crossover it stays on, and the speedup it expects there follows the law's
    on_at_4 = [v for t, b, v in timeline if b == 4 and v.speculation == "on"]
    assert on_at_4, "not on at 4 running, far below the crossover"
    assert on_at_4[-1].expected_speedup == pytest.approx(CPU_NODE.speedup(4), rel=0.15)


@pytest.mark.parametrize("case", sorted(CASES))
def test_while_the_load_ramps_the_reasons_quote_the_figures_the_banner_shows(case):
    """The banner shows steadied figures (a median at this load, held within a tolerance band); the
    reasons beside it quote the same ones. Before, they quoted the evaluation's own, and while the
    load ramped the screen named two break-evens at once (1.26 in the banner, 2.09 in the reason
    under it, in the demo)."""
    import re

    node, config = CASES[case]
    ramp = [16.0 + t / 2 for t in range(480)]  # one more request every 2 s: 16 → 255 in 8 minutes
    timeline = shown_timeline(generate(node, ramp, seed=5), config)
    checked = 0
    for t, running, v in timeline:
        if v.speculation == "unknown" or v.break_even_length is None:
            continue
        quoted = re.search(r"break-even (\d+\.\d+) at", v.reasons[0])
        assert quoted is not None and quoted[1] == f"{v.break_even_length:.2f}", (t, v.reasons[0])
        assert f"expected speedup {v.expected_speedup:.2f}× at this load" in v.reasons, (t, v.reasons)
        checked += 1
    assert checked > 60


def test_the_banner_figure_is_a_median_over_evaluations_at_this_load_only():
    """A minute of evaluations at 10 running and break-even 1.2, then one at 100 running and 2.0: the
    banner shows 2.0 at once (the median over every load, 1.2, is a break-even at another load)."""
    from specwatch.advice.monitor import ShownVerdict
    from specwatch.advice.verdict import UNKNOWN_BOUND, Verdict

    def evaluation(t: float, running: float, break_even: float) -> Verdict:
        return Verdict("on", 0.9, 1.5, break_even, 200.0, False, ("r",), UNKNOWN_BOUND, time=t,
                       configured=True, acceptance_length=2.5, low_load_break_even=1.1, running=running)

    shown = ShownVerdict()
    for t in range(0, 55, 5):
        assert shown.show(evaluation(t, 10.0 + t % 2, 1.2), t, True).break_even_length == 1.2
    assert shown.show(evaluation(55, 100.0, 2.0), 55, True).break_even_length == 2.0
    # at a steady load the median still holds the banner still against one outlying evaluation
    for t in range(60, 120, 5):
        shown.show(evaluation(t, 100.0, 2.0), t, True)
    assert shown.show(evaluation(120, 101.0, 2.5), 120, True).break_even_length == 2.0


def test_a_small_gpu_whose_steps_outgrow_vllms_default_budget_is_judged_at_once():
    """An A10G with a 0.5B draft at k = 5 and 512 running: its steps compute about 3,100 tokens, more
    than vLLM's default budget on a 24 GB GPU (2048), so that default is not what the server runs.
    Priced with it, a verify step's positions alone overfilled the budget and the decision raised a
    math domain error: the banner said UNKNOWN for over three minutes. Now the default is set aside
    (the reason says why) and the first judged verdict, OFF (the law's speedup there is 0.66), comes
    from the window's first seconds."""
    node, config = RAMP_NODES["a10g_draft_k5"]
    assert node.speedup(512) < 0.7
    timeline = shown_timeline(generate(node, tiers_load([512], 60), seed=0), config)
    first = next((t, v) for t, _, v in timeline if v.speculation != "unknown")
    assert first[0] - START <= 10.0 and first[1].speculation == "off", first
    for _, _, verdict in timeline:
        assert not any("math domain" in r for r in verdict.reasons), verdict.reasons
    assert any("more than vLLM's default budget of 2048" in r for r in timeline[-1][2].reasons)
