"""The shared decision (specwatch.perf.decide) and its cost terms, against cases worked out by hand
from the physics (not from the code), and the agreement of every command that takes it."""

from __future__ import annotations

import argparse
import io
import math

import pytest

from specwatch import perf
from specwatch.perf import DecisionInputs, HingeParameters, decide

# A flat 10 ms step (weights read) with a far-away knee: every step below the knee costs the same.
FLAT = HingeParameters(base_s=0.010, knee=1e9, slope_s_per_token=0.0, kv_s_per_token=0.0, per_token_s=0.0)
LOOKUP = perf.draft_pricing("ngram")


def inputs(**values) -> DecisionInputs:
    base = dict(step_model=FLAT, k=4, draft=LOOKUP, running=8.0, length=2.5)
    base.update(values)
    return DecisionInputs(**base)


def test_a_free_proposer_below_the_knee_gains_exactly_its_acceptance_length():
    # every step costs 10 ms whether it carries 8 or 40 tokens, and commits L tokens per sequence
    assert decide(inputs()).expected_speedup == pytest.approx(2.5)


def test_a_given_draft_ratio_costs_k_times_r_plain_steps():
    # T_spec = 10 ms + 4 × 0.1 × 10 ms = 14 ms, so S = 2.1 × 10 / 14 = 1.5 and break-even is 1.4
    d = decide(inputs(draft=perf.draft_pricing("draft", ratio=0.1), length=2.1))
    assert d.expected_speedup == pytest.approx(1.5)
    assert d.break_even_length == pytest.approx(1.4)
    assert d.state == "on" and d.carried_by == "acceptance"


def test_per_token_engine_cost_makes_verification_cost_before_the_knee():
    # 20 µs per token: plain step at b=8 is 10 + 0.16 = 10.16 ms, verify over 40 tokens 10 + 0.8 ms
    step = HingeParameters(0.010, 1e9, 0.0, 0.0, 20e-6)
    d = decide(inputs(step_model=step))
    assert d.expected_speedup == pytest.approx(2.5 * 10.16 / 10.8)


def test_verification_attention_costs_a_tenth_of_the_kv_read_per_extra_position():
    # b=10 sequences × 1,000 tokens × 0.1 µs = 1 ms of KV read on 10 ms of weights: plain 11 ms.
    # Verifying k+1 = 4 positions reads the KV once, plus 3 × 0.1 × 1 ms: 11.3 ms.
    step = HingeParameters(0.010, 1e9, 0.0, 1e-7, 0.0)
    d = decide(inputs(step_model=step, k=3, running=10.0, length=2.0, context_per_sequence=1000.0))
    assert d.terms["attention_s"] == pytest.approx(0.3e-3)
    assert d.expected_speedup == pytest.approx(2.0 * 11.0 / 11.3)
    # a step model fitted on speculative steps already holds it
    fitted = decide(inputs(step_model=step, k=3, running=10.0, length=2.0, context_per_sequence=1000.0,
                           fitted_on_speculative_steps=True))
    assert fitted.expected_speedup == pytest.approx(2.0)


def test_a_draft_model_pays_its_own_roofline_per_forward():
    # A 1 GB draft at 1 TB/s reads its weights in 1 ms and pays a 1 ms forward overhead; its math is
    # negligible at these token counts. k=3 forwards: 6 ms on a flat 10 ms target, S = L × 10 / 16.
    draft = perf.StepTimePrior(shared_weight_bytes=1e9, expert_weight_bytes=0.0, experts=None,
                               experts_per_token=None, flops_per_token=1.0, kv_bytes_per_token=0.0,
                               bandwidth=1e12, flops=1e18, per_token_s=0.0)
    pricing = perf.draft_pricing("draft", draft_model=draft)
    d = decide(inputs(k=3, draft=pricing, length=2.4))
    assert d.terms["draft_s"] == pytest.approx(6e-3, rel=1e-3)
    assert d.expected_speedup == pytest.approx(2.4 * 10 / 16, rel=1e-3)
    assert d.carried_by == "acceptance"
    # twice as slow as its roofline (a measured scale): 12 ms of drafting, S = 2.4 × 10 / 22
    slow = decide(inputs(k=3, draft=perf.draft_pricing("draft", draft_model=draft, scale=2.0), length=2.4))
    assert slow.expected_speedup == pytest.approx(2.4 * 10 / 22, rel=1e-3)


def test_a_full_node_loses_the_kv_slots_speculation_takes():
    # The KV cache holds 100,000 tokens (counted in tokens): 100 sequences of 1,000 without
    # speculation, 100,000 / 1,005 ≈ 99.5 with k+1 = 5 lookahead slots each. With requests waiting
    # the node runs full in both modes, and with flat steps the throughput ratio is 0.995·L.
    d = decide(inputs(running=100.0, waiting=20.0, context_per_sequence=1000.0, kv_budget_bytes=100_000.0,
                      target_kv_bytes_per_token=1.0))
    assert d.capacity.plain == pytest.approx(100.0)
    assert d.capacity.speculative == pytest.approx(100_000 / 1005)
    assert d.expected_speedup == pytest.approx(2.5 * 1000 / 1005)


def test_a_cap_on_running_requests_under_speculation():
    # 64 requests, at most 32 running under speculation: plain runs 64 per 10 ms step, speculation
    # 32 × L per step. With L = 3: 96 / 64 = 1.5.
    d = decide(inputs(running=64.0, length=3.0, max_running=32.0))
    assert d.expected_speedup == pytest.approx(1.5)
    assert d.carried_by == "acceptance"
    # with L = 1.5 the cap turns a gain into a loss, and the capacity term says so
    loss = decide(inputs(running=64.0, length=1.5, max_running=32.0))
    assert loss.expected_speedup == pytest.approx(0.75) and loss.carried_by == "KV capacity"


def test_verified_positions_past_the_token_budget_step_only_what_it_holds():
    """vLLM V1 schedules the running decodes first, each with its k + 1 positions, within the step's
    token budget: 600 running at k = 4 want 3,000 positions of a 2,048 budget, so a speculative step
    takes 2048 / 5 ≈ 410 sequences and the rest wait. With T(N) = 10 ms + 20 µs a token past 256:
    (409.6 × 2 / T(2048)) / (600 / T(600)) = (819.2 / 45.84 ms) / (600 / 16.88 ms) ≈ 0.503. (It
    raised a math domain error here, and a verdict stayed unknown for minutes.)"""
    step = HingeParameters(base_s=0.010, knee=256.0, slope_s_per_token=2e-5, kv_s_per_token=0.0, per_token_s=0.0)
    d = decide(DecisionInputs(step_model=step, k=4, draft=perf.draft_pricing("ngram"), running=600.0, length=2.0,
                              token_budget=2048, token_budget_from="from --max-num-batched-tokens"))
    expected = (409.6 * 2.0 / (0.010 + 2e-5 * (2048 - 256))) / (600.0 / (0.010 + 2e-5 * (600 - 256)))
    assert d.expected_speedup == pytest.approx(expected, rel=1e-6) and d.state == "off"
    assert any(r.startswith("the step's token budget (2048, from --max-num-batched-tokens) holds 5 verified positions "
                            "for about 410 of the 600 running sequences") for r in d.reasons), d.reasons
    # the plain engine past the budget and the speculative one held under it by its own cap (300
    # running): the plain engine steps 2,048 of its 3,000 a T(2048) step, the speculative one all 300
    plain_over = decide(DecisionInputs(step_model=step, k=4, draft=perf.draft_pricing("ngram"), running=3000.0,
                                       length=2.0, token_budget=2048, max_running=300.0))
    T = lambda n: 0.010 + 2e-5 * max(0.0, n - 256)  # noqa: E731
    assert plain_over.expected_speedup == pytest.approx((300 * 2.0 / T(1500)) / (2048 / T(2048)), rel=1e-6)
    # a budget that holds every position leaves the decode steps to decide
    roomy = decide(DecisionInputs(step_model=step, k=4, draft=perf.draft_pricing("ngram"), running=600.0,
                                  length=2.0, token_budget=4096))
    assert not any("verified positions for about" in r for r in roomy.reasons)


def test_tree_drafts_verify_more_positions_than_k_plus_one():
    # 20 µs per token, b = 4, k = 3: a chain verifies 16 tokens, a 10-token tree 40
    step = HingeParameters(0.010, 1e9, 0.0, 0.0, 20e-6)
    chain = decide(inputs(step_model=step, k=3, running=4.0, length=2.5))
    tree = decide(inputs(step_model=step, k=3, running=4.0, length=2.5, tree_tokens=10))
    plain = 0.010 + 4 * 20e-6
    assert chain.expected_speedup == pytest.approx(2.5 * plain / (0.010 + 16 * 20e-6))
    assert tree.expected_speedup == pytest.approx(2.5 * plain / (0.010 + 40 * 20e-6))


def test_moe_reads_more_experts_as_tokens_per_step_grow():
    # top-2 of 8 experts: one token reads 2; four tokens read 8·(1 − (6/8)^4) ≈ 5.47 on average
    prior = perf.StepTimePrior(shared_weight_bytes=0.0, expert_weight_bytes=8e9, experts=8, experts_per_token=2,
                               flops_per_token=1.0, kv_bytes_per_token=0.0, bandwidth=1e12, flops=1e18)
    assert prior.weight_bytes(1) == pytest.approx(2e9)
    assert prior.weight_bytes(4) == pytest.approx(8e9 * (1 - 0.75**4))


def test_the_prefill_tax_judges_the_whole_request():
    # 1 s of prefill, 100 output tokens at 10 ms: 2 s plain; a 2× decode speedup makes it 1.5 s
    assert perf.request_speedup(2.0, 0.010, 4000, 100, 1.0, 0.0) == pytest.approx(2.0 / 1.5)
    # a draft model prefilling too (0.2 s) eats into it: 2 / 1.7
    assert perf.request_speedup(2.0, 0.010, 4000, 100, 1.0, 0.2) == pytest.approx(2.0 / 1.7)
    from specwatch.advice.predict import predict

    long_prompt = predict("H100", model="Llama-3.1-8B", batch=4, k=3, acceptance_length=2.5, method="eagle3",
                          prompt_tokens=8000, output_tokens=200)
    verdict = long_prompt["verdict"]
    assert 1.0 < verdict["request_speedup"] < verdict["expected_speedup"]
    assert any("end to end" in reason for reason in verdict["reasons"])


def test_unknown_method_is_one_stated_assumption():
    assumed = perf.draft_pricing(None)
    assert assumed.assumed and assumed.kind == "head" and assumed.ratio == perf.HEAD_DRAFT_RATIO
    assert decide(inputs(draft=assumed)).assumptions == (perf.UNKNOWN_METHOD_WORDS,)


def test_confidence_is_the_chance_the_direction_is_right():
    # ln 1.5 / 0.21 ≈ 1.93 standard deviations: Φ(1.93) ≈ 0.973
    assert perf.direction_confidence(1.5, 0.21) == pytest.approx(0.973, abs=0.002)
    assert perf.direction_confidence(1.0, 0.21) == pytest.approx(0.5)
    far = decide(inputs(length=4.0))
    near = decide(inputs(length=1.1))
    assert far.confidence > near.confidence


# --------------------------------------------------------------------------------------------------
# predict: acceptance forms, refusals, MoE agreement
# --------------------------------------------------------------------------------------------------


def _run_predict(argv: list[str]) -> tuple[int, str, str]:
    from specwatch.commands.predict import add_arguments, run

    parser = argparse.ArgumentParser(prog="specwatch predict")
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    return run(parser.parse_args(argv), out=out, err=err), out.getvalue(), err.getvalue()


BASE = ["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "4", "--k", "3", "--method", "eagle3"]


def test_acceptance_rate_and_alpha_mean_what_they_say():
    from specwatch.advice.predict import predict

    # vLLM's rate accepted/draft tokens: L = 1 + k·rate = 1 + 4 × 0.5
    assert predict("H100", model="Llama-3.1-8B", batch=1, k=4, acceptance_rate=0.5,
                   method="ngram")["inputs"]["acceptance_length"] == pytest.approx(3.0)
    # the papers' α: L = 1 + 0.8 + 0.64 + 0.512 for k = 3
    assert predict("H100", model="Llama-3.1-8B", batch=1, k=3, alpha=0.8,
                   method="ngram")["inputs"]["acceptance_length"] == pytest.approx(2.952)


@pytest.mark.parametrize("extra,message", [
    (["--acceptance-rate", "1.2"], "between 0 and 1"),
    (["--alpha", "1.5"], "alpha"),
    (["--acceptance-length", "6"], "between 1 and k+1 = 4"),
    (["--acceptance-length", "2", "--alpha", "0.5"], "not both"),
    (["--acceptance-length", "nan"], "'nan'"),
    (["--acceptance-rate", "-0.1"], "between 0 and 1"),
    (["--context", "-5"], "context must be ≥ 0"),
    (["--waiting", "-1"], "waiting must be ≥ 0"),
    (["--tree-tokens", "3"], "at least k+1 = 4"),
    (["--max-running", "0"], "max running"),
    (["--prompt-tokens", "1000"], "--output-tokens"),
    (["--draft-scale", "0"], "draft scale must be positive"),
    (["--peak-flops", "inf", "--memory-bandwidth", "1e12"], "'inf'"),
])
def test_predict_refuses_impossible_figures_with_one_line(extra, message):
    status, out, err = _run_predict(BASE + extra)
    assert status == 64 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_predict_says_when_the_batch_does_not_fit_in_memory():
    # 70B on 4 H100s of 81,559 MiB (NVML's total, 85.52e9 B): 0.9 × 85.52 − 35.3 GB of weights
    # leaves ≈ 41.7 GB per GPU for KV, 81,920 B per context token per GPU: ≈ 509 K tokens, 15.9
    # sequences of 32 K. 256 of them do not fit.
    status, out, _ = _run_predict(["--gpu", "H100", "--model", "Llama-3.1-70B", "--tp", "4", "--batch", "256",
                                   "--k", "3", "--context", "32000", "--acceptance-length", "2.5",
                                   "--method", "eagle"])
    assert "do not fit the GPUs' KV memory (about 16 do)" in out


def test_a_gpu_given_by_its_peak_figures_and_memory():
    status, out, err = _run_predict(["--peak-flops", "149.7e12", "--memory-bandwidth", "696e9", "--gpu-memory",
                                     "48e9", "--model", "Qwen2.5-7B", "--batch", "1", "--k", "4",
                                     "--acceptance-rate", "0.88", "--draft-model", "Qwen2.5-7B", "--draft-dtype",
                                     "int4", "--dtype", "fp16", "--json"])
    assert status == 0, err
    assert '"gpu": "custom"' in out


def test_a_moe_models_crossover_agrees_with_its_verdict():
    from specwatch.advice.predict import predict

    speedups = []
    for batch in (1, 4, 16, 64, 256, 1024):
        result = predict("H100", model="Mixtral-8x7B", tp=2, batch=batch, k=3, acceptance_length=2.4,
                         method="eagle", context=500)
        verdict = result["verdict"]
        crossover = verdict["crossover_concurrency"]
        speedups.append(verdict["expected_speedup"])
        if verdict["speculation"] == "on":
            assert crossover is None or crossover > batch
        elif verdict["speculation"] == "off":
            assert crossover is not None and crossover < batch
    # more tokens per step read more experts: at one sequence verifying 4 tokens reads
    # 8·(1 − (6/8)^4) ≈ 5.5 experts per layer against 2 for one token, so verification is dear; by 16
    # sequences every step reads all 8 and the speedup is L-bound; at high load compute takes it
    assert speedups[0] < speedups[2] and speedups[-1] < speedups[2]


def test_an_moe_speedup_below_1_at_one_sequence_is_searched_on_to_where_it_pays_and_stops():
    """S below 1 at one sequence is not below 1 everywhere: a MoE's verify step at a few sequences wakes
    experts a plain step leaves idle, and from a dozen on every step reads them all. The crossover search
    once stopped at S(1) < 1 and said "never pays" beside an ON 2.0× verdict at 16 running. Checked here
    against the speedups predict gives at each batch, not against the search's own arithmetic."""
    from specwatch.advice.predict import predict

    def at(batch: float) -> dict:
        return predict("H100", model="Mixtral-8x7B", tp=2, batch=batch, k=3, acceptance_length=1.8,
                       method="eagle", context=500)

    low = at(1)
    assert low["verdict"]["expected_speedup"] < 1 and low["verdict"]["speculation"] == "off"
    assert low["details"]["crossover_state"] == "crosses"
    fall = low["verdict"]["crossover_concurrency"]
    rise_words = [r for r in low["verdict"]["reasons"] if r.startswith("below about ")]
    assert len(rise_words) == 1 and "wakes experts" in rise_words[0], low["verdict"]["reasons"]
    rise = float(rise_words[0].split()[2])
    assert 1 < rise < 16 < fall < 1024
    # the speedup each side of both ends, as predict prices a load there
    assert at(rise * 0.8)["verdict"]["expected_speedup"] < 1 < at(rise * 1.25)["verdict"]["expected_speedup"]
    assert at(fall * 0.9)["verdict"]["expected_speedup"] > 1 > at(fall * 1.1)["verdict"]["expected_speedup"]
    middle = at(16)["verdict"]
    assert middle["speculation"] == "on" and middle["crossover_concurrency"] == pytest.approx(fall)
    assert not any("does not pay even with a single" in r for r in middle["reasons"])


def test_the_rise_through_one_is_found_in_the_first_cell_that_rises():
    from specwatch.perf.speedup import first_rise_through_one

    # S − 1 = (b − 3)(b − 40) / 400: below 0 at 1, rising through 0 at 3, falling again at 40
    def excess(b):
        return -(b - 3.0) * (b - 40.0) / 400.0

    assert first_rise_through_one(excess, 1024.0, 48, 34) == pytest.approx(3.0, rel=1e-6)
    assert first_rise_through_one(lambda b: -1.0, 1024.0, 48, 34) is None


# --------------------------------------------------------------------------------------------------
# One configuration, every command: the same expected speedup
# --------------------------------------------------------------------------------------------------


def test_predict_check_watch_sweep_and_tune_give_the_same_expected_speedup():
    from specwatch.advice.advisor import AdvisorConfig
    from specwatch.perf.hardware import lookup
    from specwatch.advice.monitor import Monitor
    from specwatch.advice.predict import predict
    from specwatch.sweep.predicted import PredictionInputs, predicted_curve
    from specwatch.collectors.synthetic import SyntheticNode, generate
    from specwatch.advice.tune import tune_report

    # check and watch: the Advisor, driven through the Monitor by synthetic Snapshots
    step = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0,
                           per_token_s=2e-5)
    node = SyntheticNode(step=step, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                         context_per_sequence=0.0, noise=0.0)
    monitor = Monitor(window_s=10.0, advisor_config=AdvisorConfig(method="ngram"), evaluate_every_s=0.0)
    for snapshot in generate(node, [16.0] * 40):
        monitor.ingest(snapshot)
    verdict = monitor.states[node.url].verdict
    advisor = monitor.advisor_of(node.url)
    said = verdict.expected_speedup
    assert said is not None and verdict.speculation in ("on", "off", "hold")
    running, length, fitted = verdict.running, verdict.acceptance_length, advisor.last_inputs.step_model

    # tune, from the same Advisor's inputs
    report = tune_report(advisor.last_inputs, observed_batch=advisor.observed_batch, max_batch=64)
    assert report["expected_speedup"] == pytest.approx(said, rel=1e-9)
    in_range = next(r for r in report["ranges"] if r["start"] <= 16 <= r["end"])
    if in_range["k"] == 4:
        assert in_range["speedup_vs_off"][0] <= said * (1 + 1e-9)

    # predict, given the same step time, load and acceptance (on 2 GPUs: one 80 GB A100 cannot hold
    # the 70B's 141 GB of BF16 weights, and predict gives no verdict for a setup that cannot load)
    predicted = predict(lookup("A100"), model="Llama-3.1-70B", tp=2, batch=running, k=4, acceptance_length=length,
                        method="ngram", step_model=fitted, prompt_per_output=advisor.last_inputs.prompt_per_output)
    assert predicted["verdict"]["expected_speedup"] == pytest.approx(said, rel=1e-9)

    # sweep's predicted curve at the same concurrency
    tiers = [{"concurrency": running, "speculative": {"k": 4, "acceptance_length": length},
              "baseline": {"prompt_tokens_mean": 0.0}}]
    curve, note = predicted_curve(tiers, PredictionInputs(method="ngram", k=4, step_model=fitted,
                                                                    prompt_per_output=advisor.last_inputs.prompt_per_output), max_tokens=0.0)
    assert curve is not None, note
    assert curve["points"][0]["speedup"] == pytest.approx(said, rel=1e-9)
    assert math.isfinite(curve["points"][0]["speedup"])


def test_the_advisor_weighs_the_prefill_of_long_prompt_short_output_traffic():
    import dataclasses

    from specwatch.advice.advisor import AdvisorConfig
    from specwatch.advice.monitor import Monitor
    from specwatch.collectors.synthetic import SyntheticNode, generate

    step = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0,
                           per_token_s=2e-5)
    node = SyntheticNode(step=step, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                         context_per_sequence=0.0, noise=0.0)
    node = dataclasses.replace(node, prompt_tokens_per_request=20000.0, output_tokens_per_request=100.0)
    monitor = Monitor(window_s=10.0, advisor_config=AdvisorConfig(method="ngram"), evaluate_every_s=0.0)
    for snapshot in generate(node, [4.0] * 40):
        monitor.ingest(snapshot)
    verdict = monitor.states[node.url].verdict
    assert "prefill_tax" in verdict.flags
    # the request's own prefill is not sped up: the end-to-end speedup lies between 1 and the decode's
    # (here a wash: 200 prompt tokens per output token keep every step past the knee with prefill)
    request = verdict.details["request_speedup"]
    expected = verdict.expected_speedup
    assert request is not None and min(1.0, expected) < request < max(1.0, expected)
    assert abs(math.log(request)) < abs(math.log(expected))
    assert any(reason.startswith("end to end") for reason in verdict.reasons)


def test_a_step_model_with_no_usable_step_time_is_refused_not_a_traceback():
    zero = HingeParameters(0.0, 1e9, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="no usable step time"):
        decide(inputs(step_model=zero))


def test_the_advisor_is_evaluated_on_its_cadence_only(monkeypatch):
    """A 1 Hz poll does not re-judge the node every second: the advisor runs every
    `evaluate_every_s` of data time, and the readings between only join the window."""
    from specwatch.advice.advisor import Advisor
    from specwatch.advice.monitor import Monitor
    from specwatch.collectors.synthetic import SyntheticNode, generate

    evaluated: list[float] = []
    update = Advisor.update

    def counting_update(self, window, gpus, sources=()):
        evaluated.append(window.time)
        return update(self, window, gpus, sources)

    monkeypatch.setattr(Advisor, "update", counting_update)
    node = SyntheticNode(step=HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134,
                                              kv_s_per_token=0.0, per_token_s=0.0),
                         gpu_name="NVIDIA A100-SXM4-80GB", k=2, per_position=(0.6, 0.4), context_per_sequence=0.0)
    monitor = Monitor(window_s=10, evaluate_every_s=5)
    snapshots = list(generate(node, [8.0] * 21, interval_s=1.0))
    said_due = []
    # readings 0-12, then a seek back to 3 (evaluated at once), then on from 4
    for snap in snapshots[:13] + snapshots[3:]:
        said_due.append(monitor.evaluates(snap))  # what the dashboard asks before choosing a thread
        before = len(evaluated)
        monitor.ingest(snap)
        assert said_due[-1] == (len(evaluated) > before)
    start = snapshots[0].time
    assert [t - start for t in evaluated] == [0.0, 5.0, 10.0, 3.0, 8.0, 13.0, 18.0]


@pytest.mark.parametrize("rates", [(0.6, 0.4, 0.25, 0.15), (0.9,), (1.0, 0.0, 0.5), (0.3, -0.0, 1.2, math.nan),
                                   (0.71, 0.52, 0.330000000000001, 0.1, 0.05, 0.01)])
def test_the_best_k_search_reads_each_chain_length_as_length_at_k_does(rates):
    """The search's lengths for k′ up to the measured k, and past it, are length_at_k's to the bit."""
    from specwatch.perf.acceptance import length_at_k
    from specwatch.perf.acceptance import LengthsAtK

    inputs = DecisionInputs(step_model=HingeParameters(0.01, 256.0, 2e-5, 1e-8, 2e-5), k=len(rates),
                            draft=perf.draft_pricing("ngram"), running=8.0, rates=rates)
    lengths = LengthsAtK(inputs.rates, inputs.length, inputs.k)
    for k_new in range(1, len(rates) + 3):
        expected = length_at_k(rates, k_new)
        assert repr(lengths.at(k_new)) == repr((expected.length, expected.extrapolated))
