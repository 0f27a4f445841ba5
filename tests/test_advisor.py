"""The advisor on scripted telemetry from the roofline model (specwatch.collectors.synthetic)."""

import dataclasses

import pytest

from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.perf.hardware import lookup
from specwatch.perf import HingeParameters
from specwatch.telemetry.snapshot import Snapshot, TargetSample
from specwatch.collectors.synthetic import SyntheticNode, generate, ramp
from specwatch.readings.window import Window

# An A100-80GB-like node: flat 20 ms steps up to a knee of 134 tokens per step, then compute-bound.
# n-gram, k=4, L=2.0. Each request has a 1000-token prompt, 950 of them from the prefix cache, and
# 300 output tokens: a step also prefills 50·L/299 ≈ 0.33 tokens per running sequence with
# speculation (0.17 without). S(b) = 2·T(1.17b)/T(5.33b), which crosses 1 at b = 2·134/5.33 ≈ 50.
STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0,
                       per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                     context_per_sequence=0.0, prompt_cached_fraction=0.95)
TRUE_CROSSOVER = 2 * 134 / (5 + 2 * 50 / 299)


def run(node, load, config=AdvisorConfig(method="ngram"), window_s=10.0, seed=0):
    window = Window(window_s)
    advisor = Advisor(config)
    out = []
    for snap in generate(node, load, seed=seed):
        window.add(snap)
        verdict = advisor.update(window.target(node.url), snap.gpus)
        out.append((snap.targets[0].engines[0].gauges["vllm:num_requests_running"], verdict))
    return out


def decisions(seq):
    """The on/off decisions in order, holds and unknowns left out, repeats collapsed."""
    out = []
    for _, v in seq:
        if v.speculation in ("on", "off") and (not out or out[-1] != v.speculation):
            out.append(v.speculation)
    return out


@pytest.fixture(scope="module")
def ramp_run():
    return run(NODE, ramp(1, 128, 20))


def test_ramp_flips_off_once_near_the_crossover_and_back_on_once(ramp_run):
    assert decisions(ramp_run) == ["on", "off", "on"]
    flips = [(b, v) for (b, v), (_, prev) in zip(ramp_run[1:], ramp_run) if v.speculation == "off"
             and prev.speculation != "off"]
    (b_off, v_off), = flips
    # the ramp's levels are 45, 64, 91: the flip must come on the first level past the crossover
    assert 45 < b_off <= 64
    assert v_off.crossover_concurrency == pytest.approx(TRUE_CROSSOVER, rel=0.15)
    assert v_off.change_recommended and v_off.expected_speedup < 0.95
    back_on = [b for (b, v), (_, prev) in zip(ramp_run[1:], ramp_run) if v.speculation == "on"
               and prev.speculation != "on" and prev.speculation != "unknown"]
    assert len(back_on) == 1 and 32 <= back_on[0] < TRUE_CROSSOVER


def test_low_load_verdict_and_reasons(ramp_run):
    b, v = ramp_run[30]
    assert b == 2 and v.speculation == "on"
    assert v.expected_speedup == pytest.approx(2.0, rel=0.05)
    assert v.break_even_length == pytest.approx(1.0, abs=0.02)
    assert any("acceptance length 2.00 is above break-even" in r for r in v.reasons)
    assert any("A100 80GB SXM knee" in r for r in v.reasons)
    assert v.bound.state == "memory"


def test_high_load_is_compute_bound(ramp_run):
    b, v = max(ramp_run, key=lambda bv: bv[0])
    assert b == 128 and v.speculation == "off"
    assert v.bound.state == "compute"
    assert any("past the" in r for r in v.reasons)


def test_no_flapping_under_stationary_load_at_the_crossover():
    """Noisy load sitting right at b×: never more than one decision change."""
    load = [54.0] * 400
    seq = run(dataclasses.replace(NODE, noise=0.08), load)
    assert len(decisions(seq)) <= 1
    speedups = [v.expected_speedup for _, v in seq[50:]]
    assert all(0.8 < s < 1.2 for s in speedups)


def test_replay_gives_the_same_verdicts():
    load = ramp(1, 64, 10)
    a = [v.to_dict() for _, v in run(NODE, load, seed=3)]
    b = [v.to_dict() for _, v in run(NODE, load, seed=3)]
    assert a == b


def test_node_without_speculation_reports_the_length_it_would_need():
    node = dataclasses.replace(NODE, speculation=False)
    seq = run(node, [4.0] * 30 + [120.0] * 30, config=AdvisorConfig())
    _, low = seq[25]
    _, high = seq[-1]
    assert low.configured is False
    assert low.required_acceptance_length == pytest.approx(1.15, abs=0.05)  # 1 + 3·0.05 (draft head)
    assert low.speculation == "on" and low.change_recommended
    assert "would pay above an acceptance length of" in low.reasons[0]
    assert high.required_acceptance_length > 2.5
    assert high.speculation == "off" and not high.change_recommended


def test_misaligned_draft_is_flagged_and_turned_off():
    node = dataclasses.replace(NODE, per_position=(0.01, 0.0, 0.0, 0.0), draft_ratio=0.1)
    seq = run(node, [2.0] * 30, config=AdvisorConfig(method="draft_model", draft_ratio=0.1))
    _, v = seq[-1]
    assert "misaligned_draft" in v.flags
    assert v.speculation == "off" and v.change_recommended
    assert any(r.startswith("misaligned draft") for r in v.reasons)
    assert any("below break-even 1.40" in r for r in v.reasons)


def test_prefill_tax_warning():
    node = dataclasses.replace(NODE, prompt_tokens_per_request=8000, output_tokens_per_request=100)
    _, v = run(node, [4.0] * 20)[-1]
    assert "prefill_tax" in v.flags
    assert any("prefill-heavy traffic (80 prompt tokens per output token)" in r for r in v.reasons)


def test_unknown_states_say_what_is_missing():
    advisor = Advisor()
    assert advisor.update(None).speculation == "unknown"
    down = Window(10)
    down.add(Snapshot(1.0, (TargetSample("http://x", "connection_refused", "vLLM at http://x: connection refused"),)))
    v = advisor.update(down.target("http://x"))
    assert v.speculation == "unknown" and "connection refused" in v.reasons[0]
    one = Window(10)
    one.add(next(generate(NODE, [4.0])))
    v = advisor.update(one.target(NODE.url))
    assert v.speculation == "unknown" and "two scrapes" in v.reasons[0]
    idle = run(NODE, [0.0] * 5)[-1][1]
    assert idle.speculation == "unknown" and "no requests running" in idle.reasons[0]


def test_unknown_method_lowers_confidence_and_says_so():
    _, known = run(NODE, [4.0] * 20)[-1]
    _, unknown = run(NODE, [4.0] * 20, config=AdvisorConfig())[-1]
    # the assumed draft cost widens the error the confidence rests on (both are capped here, by the
    # extrapolated step model at 4 running: a low confidence said in words is a low figure too)
    assert "method_assumed" in unknown.flags and unknown.confidence <= known.confidence
    assert unknown.details["level_error"] > known.details["level_error"]
    assert any("pass --method" in r for r in unknown.reasons)


def test_power_capped_clock_lowers_the_knee():
    from specwatch.advice.node import throttled_spec
    from specwatch.perf.hardware import lookup
    from specwatch.telemetry.snapshot import GpuSample

    spec = lookup("NVIDIA H100 80GB HBM3")
    capped = GpuSample(0, spec.name, values={"sm_clock_mhz": 990.0, "sm_clock_max_mhz": 1980.0},
                       throttle_reasons=("power cap",))
    idle = GpuSample(0, spec.name, values={"sm_clock_mhz": 345.0, "sm_clock_max_mhz": 1980.0},
                     throttle_reasons=("idle",))
    assert throttled_spec(spec, capped).ridge == pytest.approx(spec.ridge / 2)
    assert throttled_spec(spec, idle) is spec


def test_an_engine_whose_k_cannot_be_read_is_not_judged_with_a_guessed_k():
    # an old engine that counts drafts and accepted tokens but neither draft tokens nor positions:
    # L = 1 + accepted/drafts is known, k is not, and a guessed k = 1 would set L against k+1 = 2
    def strip(snap):
        engines = tuple(dataclasses.replace(
            e, accepted_per_position=(),
            counters={n: v for n, v in e.counters.items() if not n.startswith("vllm:spec_decode_num_draft_tokens")})
            for e in snap.targets[0].engines)
        return dataclasses.replace(snap, targets=(dataclasses.replace(snap.targets[0], engines=engines),))

    window, advisor = Window(10.0), Advisor(AdvisorConfig(method="ngram"))
    for snap in generate(NODE, [8.0] * 12):
        window.add(strip(snap))
        verdict = advisor.update(window.target(NODE.url), snap.gpus)
    assert window.target(NODE.url).k is None
    assert verdict.speculation == "unknown"
    assert "cannot be read" in verdict.reasons[0]


def test_with_no_gpu_identified_a_speedup_that_flips_with_the_hardware_claims_no_more_than_a_coin_flip():
    # A CPU-like node (every token costs compute: T = 2 ms + 1 ms per token) with no GPU name and
    # speculation on at one load. The data cannot show what a plain step costs, and the answer flips
    # between "below a GPU's knee" (S = L) and "compute-bound" (S ≈ L/(k+1)): the true S here is
    # L·T(1)/T(5) = 2.25·3/7 ≈ 0.96, so an optimistic ON at 0.99 would mislead: the verdict says the range and
    # claims no more than a coin flip.
    cpu = HingeParameters(base_s=0.002, knee=0.0, slope_s_per_token=0.0, kv_s_per_token=0.0, per_token_s=0.001)
    node = SyntheticNode(step=cpu, gpu_name="", per_position=(0.5, 0.35, 0.25, 0.15), context_per_sequence=0.0,
                         prompt_cached_fraction=0.95)
    verdict = run(node, [1.0] * 90)[-1][1]
    assert "gpu_unidentified" in verdict.flags and verdict.confidence <= 0.5
    (words,) = [r for r in verdict.reasons if r.startswith("the device is not known")]
    assert "between 0.45×" in words
    # told the GPU, the advisor reasons with its roofline again (and the flag is gone)
    told = run(node, [1.0] * 90, config=AdvisorConfig(method="ngram", gpu=lookup("H100")))[-1][1]
    assert told.speculation in ("on", "off", "hold") and "gpu_unidentified" not in told.flags


def test_the_verdict_names_the_slo_and_what_speculation_does_to_it():
    config = AdvisorConfig(method="ngram", slo_ttft_s=2.0, slo_tpot_s=0.01)
    window = Window(10.0)
    advisor = Advisor(config)
    for snap in generate(NODE, [4.0] * 30):
        window.add(snap)
        verdict = advisor.update(window.target(NODE.url), snap.gpus)
    assert verdict.speculation == "on"  # at 4 running, far below the crossover
    (words,) = [r for r in verdict.reasons if r.startswith("SLO ")]
    assert "TTFT ≤ 2 s, TPOT ≤ 10 ms" in words and "estimated from histogram buckets" in words
    g = verdict.details["goodput"]
    assert (g.slo_ttft_s, g.slo_tpot_s) == (2.0, 0.01)
    # on at low load speculation pays: switched off, every token is slower, so no more requests
    # meet the TPOT target than now; TTFT (the prefill) is the same either way
    assert g.tpot_share_if_toggled is not None and g.tpot_share_if_toggled <= g.tpot_share
    assert "with speculation off at this load" in words
    # without an SLO the reasons say nothing of one
    plain = run(NODE, [4.0] * 12)[-1][1]
    assert not any(r.startswith("SLO ") for r in plain.reasons) and "goodput" not in plain.details


def test_the_draft_pricing_is_kept_while_the_draft_cost_stands_and_follows_a_new_one():
    from specwatch import perf

    advisor = Advisor(AdvisorConfig())
    ngram = perf.draft_cost("ngram")
    priced = advisor.drafter.pricing(ngram)
    assert priced == perf.draft_pricing("ngram")
    assert advisor.drafter.pricing(ngram) is priced  # the same cost: made once
    given = perf.draft_cost("draft_model", override=0.12)
    assert advisor.drafter.pricing(given) == perf.DraftPricing("draft", "ratio", 0.12, given.basis)
    assert advisor.drafter.pricing(None) == perf.draft_pricing(None)
    assert advisor.drafter.pricing(ngram) == priced  # and back


def test_the_roofline_prior_is_made_from_the_samples_at_each_refit_and_only_then(monkeypatch):
    # With no model the prior's level is the median of the samples' levels: made when a refit needs
    # it (not at every update), from the samples as they stand then.
    from specwatch import perf

    advisor = Advisor(AdvisorConfig(method="ngram"))  # no model: the roofline prior
    window = Window(10.0)
    made, fitted = [], []
    roofline = advisor.step_samples.roofline_prior

    def counted(knee):
        prior = roofline(knee)
        made.append(prior)
        return prior

    real_fit = perf.fit_step_time_rows

    def fit(rows, prior, shape_known=True):
        # the samples the fit is given, as its (N, T, C, weight) rows
        levels = sorted(float(t) / max(1.0, float(n) / prior.knee) for n, t, _, _ in rows)
        fitted.append((prior, levels[len(levels) // 2], len(rows)))
        return real_fit(rows, prior, shape_known=shape_known)

    monkeypatch.setattr(advisor.step_samples, "roofline_prior", counted)
    monkeypatch.setattr(perf, "fit_step_time_rows", fit)
    updates = 0
    for snap in generate(NODE, ramp(1, 64, 8)):
        window.add(snap)
        advisor.update(window.target(NODE.url), snap.gpus)
        updates += 1
    assert len(fitted) >= 3 and len(made) < updates / 4  # one per refit (and before the first fit)
    assert len({count for _, _, count in fitted}) > 1  # the samples grew between refits
    for prior, median_level, _ in fitted:
        assert prior.base_s == median_level and prior.slope_s_per_token == median_level / prior.knee


def test_the_prefill_the_steps_carry_is_priced_in_them():
    # 8000 uncached prompt tokens per 100 output tokens: the steps prefill 80 prompt tokens per token
    # they emit, and the decision prices its steps with that prefill in them.
    node = dataclasses.replace(NODE, prompt_tokens_per_request=8000, output_tokens_per_request=100,
                               prompt_cached_fraction=0.0)
    window = Window(10.0)
    advisor = Advisor(AdvisorConfig(method="ngram"))
    for snap in generate(node, [16.0] * 30, seed=0):
        window.add(snap)
        advisor.update(window.target(node.url), snap.gpus)
    inputs = advisor.last_inputs
    assert inputs is not None and inputs.prompt_per_output == pytest.approx(80.0, rel=0.1)
    assert inputs.decision_inputs(length=2.0).prompt_per_output == inputs.prompt_per_output
