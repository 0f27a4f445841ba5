"""Tests for specwatch.perf: acceptance algebra, draft cost, roofline signals, step-time fit, speedup."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch import perf as m
from specwatch.perf import steptime
from specwatch.perf.hardware import GPUS, MODELS

H100 = GPUS["H100-SXM"]
LLAMA_70B = MODELS["Llama-3.1-70B"]
LLAMA_8B = MODELS["Llama-3.1-8B"]

ks = st.integers(min_value=1, max_value=12)
alphas = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


# --------------------------------------------------------------------------------------------------
# Acceptance algebra
# --------------------------------------------------------------------------------------------------


def test_acceptance_length_and_rate_from_counters():
    # vLLM log line from PR #24127: ngram k=5, per-position rates sum to 4.44, mean length 5.44.
    assert m.acceptance_length(100, 444) == pytest.approx(5.44)
    assert m.acceptance_rate(500, 444) == pytest.approx(0.888)
    assert m.acceptance_length(0, 0) is None
    assert m.acceptance_rate(0, 3) is None
    assert m.acceptance_length(10, -1) is None


@given(k=ks, drafts=st.integers(1, 10_000), data=st.data())
def test_length_from_counters_lies_between_1_and_k_plus_1(k, drafts, data):
    accepted = data.draw(st.integers(0, k * drafts))
    length = m.acceptance_length(drafts, accepted)
    assert 1.0 <= length <= k + 1.0
    rate = m.acceptance_rate(k * drafts, accepted)
    assert m.length_from_rate(rate, k) == pytest.approx(length)


@given(alpha=alphas, k=ks)
def test_expected_length_bounds(alpha, k):
    length = m.expected_length(alpha, k)
    assert 1.0 - 1e-12 <= length <= k + 1.0 + 1e-12


@given(alpha=alphas, k=ks)
def test_expected_length_matches_closed_form(alpha, k):
    if alpha < 0.999:
        closed = (1 - alpha ** (k + 1)) / (1 - alpha)
        assert m.expected_length(alpha, k) == pytest.approx(closed, rel=1e-9)


@given(alpha=alphas, k=ks)
def test_alpha_round_trips(alpha, k):
    recovered = m.iid_alpha(m.expected_length(alpha, k), k)
    # The map α → L flattens near α = 0 only through its first-order term, so α is recoverable
    # everywhere to near float precision.
    assert recovered == pytest.approx(alpha, abs=1e-7)


@given(length=st.floats(1.0, 13.0), k=ks)
def test_alpha_solves_the_defining_sum(length, k):
    alpha = m.iid_alpha(length, k)
    assert 0.0 <= alpha <= 1.0
    clipped = min(max(length - 1, 0), k)
    assert sum(alpha**i for i in range(1, k + 1)) == pytest.approx(clipped, abs=1e-9)


def test_alpha_edge_cases():
    assert m.iid_alpha(1.0, 5) == 0.0
    assert m.iid_alpha(6.0, 5) == 1.0
    assert m.iid_alpha(0.7, 5) == 0.0  # below 1 (counter skew): clipped
    assert m.iid_alpha(6.3, 5) == 1.0
    assert m.iid_alpha(2.0, 1) == pytest.approx(1.0)
    assert m.iid_alpha(1.5, 1) == pytest.approx(0.5)
    # Leviathan Table 2, CNN/DM: α = 0.65 with k = 5 gives an i.i.d. bound of 2.64.
    assert m.expected_length(0.65, 5) == pytest.approx(2.64, abs=0.01)
    with pytest.raises(ValueError):
        m.iid_alpha(2.0, 0)
    with pytest.raises(ValueError):
        m.iid_alpha(float("nan"), 3)


@st.composite
def draft_outcomes(draw):
    """Accepted-prefix lengths of individual drafts, each 0..k, as the engine would see them."""
    k = draw(st.integers(1, 8))
    outcomes = draw(st.lists(st.integers(0, k), min_size=1, max_size=300))
    return k, outcomes


@given(draft_outcomes())
def test_length_at_shorter_k_is_exact_from_per_position_counters(sample):
    k, outcomes = sample
    drafts = len(outcomes)
    # vLLM's per-position counter a_i counts drafts whose first i+1 tokens were all accepted.
    per_position = [sum(1 for accepted in outcomes if accepted > i) for i in range(k)]
    rates = m.per_position_rates(drafts, per_position)
    assert np.all(np.diff(rates) <= 1e-12)  # non-increasing by construction
    for k_short in range(0, k + 1):
        # A chain of k′ stops drafting at k′: it would have accepted min(accepted, k′) tokens.
        truth = 1.0 + sum(min(accepted, k_short) for accepted in outcomes) / drafts
        estimate = m.length_at_k(rates, k_short)
        assert estimate.length == pytest.approx(truth, abs=1e-12)
        assert not estimate.extrapolated
    assert m.length_at_k(rates, k).length == pytest.approx(m.acceptance_length(drafts, sum(outcomes)))


def test_length_at_longer_k_is_extrapolated_from_the_last_conditional_rate():
    rates = [0.87, 0.67, 0.45]  # conditional 0.87, 0.77, 0.67
    estimate = m.length_at_k(rates, 5)
    assert estimate.extrapolated
    assert "extrapolated" in estimate.basis
    last = 0.45 / 0.67
    expected = 1 + sum(rates) + 0.45 * last + 0.45 * last**2
    assert estimate.length == pytest.approx(expected)
    assert m.conditional_acceptance(rates) == pytest.approx([0.87, 0.67 / 0.87, 0.45 / 0.67])


def test_length_at_k_iid_flags_extrapolation():
    assert m.length_at_k_iid(2.5, 4, 4).length == 2.5
    longer = m.length_at_k_iid(2.5, 4, 6)
    shorter = m.length_at_k_iid(2.5, 4, 2)
    assert longer.extrapolated and not shorter.extrapolated
    assert shorter.length < 2.5 < longer.length


def test_per_position_rates_guard_against_bad_input():
    assert m.per_position_rates(0, [1, 2]) is None
    assert m.per_position_rates(10, []) is None
    assert m.per_position_rates(10, [11, 5]) == pytest.approx([1.0, 0.5])


# --------------------------------------------------------------------------------------------------
# Draft cost and break-even
# --------------------------------------------------------------------------------------------------


def test_draft_cost_by_method():
    assert m.draft_cost("ngram").ratio == 0.0
    assert m.draft_cost("suffix").ratio == 0.0
    head = m.draft_cost("eagle3").ratio
    assert 0.0 < head < 0.1
    assert m.draft_cost("deepseek_mtp").method == "mtp"
    draft = m.draft_cost("draft_model", draft_params=1e9, target_params=70e9)
    assert draft.ratio == pytest.approx(1 / 70 + m.DRAFT_MODEL_FIXED_OVERHEAD)
    assert m.draft_cost("draft", override=0.3).ratio == 0.3
    with pytest.raises(ValueError):
        m.draft_cost("draft")
    with pytest.raises(ValueError):
        m.draft_cost("telepathy")
    with pytest.raises(ValueError):
        m.draft_cost("ngram", override=-0.1)


@given(k=ks, r1=st.floats(0, 2), r2=st.floats(0, 2))
def test_break_even_is_monotone_in_draft_cost(k, r1, r2):
    low, high = sorted((r1, r2))
    assert m.break_even_length(k, low) <= m.break_even_length(k, high)
    assert m.break_even_length(k, 0.0) == 1.0


# --------------------------------------------------------------------------------------------------
# Roofline signals
# --------------------------------------------------------------------------------------------------


def test_intensity_signal_against_the_ridge():
    assert m.intensity_signal(50e12, 1e12, 295).state == "memory"
    assert m.intensity_signal(600e12, 1e12, 295).state == "compute"
    assert m.intensity_signal(300e12, 1e12, 295).state == "balanced"
    signal = m.intensity_signal(50e12, 1e12, 295)
    assert signal.value == pytest.approx(50)
    assert m.intensity_signal(None, 1e12, 295).state == "unknown"
    assert m.intensity_signal(1e12, 0, 295).state == "unknown"


def test_counter_signal_signatures():
    assert m.counter_signal(0.7, 0.1).state == "memory"  # bandwidth busy, tensors idle
    assert m.counter_signal(0.3, 0.8).state == "compute"
    assert m.counter_signal(0.75, 0.9).state == "balanced"
    assert m.counter_signal(0.1, 0.05).state == "memory"  # latency-bound: compute to spare
    # issue 45: an idle GPU (no requests, DRAM and tensor at 0) is bound by nothing, not memory-bound
    idle = m.counter_signal(0.0, 0.0)
    assert idle.state == "unknown" and "idle" in idle.detail
    assert m.combine_bound([idle]).state == "unknown"
    assert m.counter_signal(0.03, 0.0).state == "memory"  # one sequence decoding streams the weights
    assert m.counter_signal(None, 0.5).state == "unknown"
    assert m.counter_signal(1.5, 0.5).state == "unknown"  # percentages not divided by 100


def test_tokens_per_step_signal_and_combiner():
    assert m.tokens_per_step_signal(20, 258).state == "memory"
    assert m.tokens_per_step_signal(1000, 258).state == "compute"
    assert m.tokens_per_step_signal(None, 258).state == "unknown"
    memory = m.counter_signal(0.7, 0.1)
    compute = m.intensity_signal(900e12, 1e12, 295)
    tokens_compute = m.tokens_per_step_signal(1000, 258)
    assert m.combine_bound([]).state == "unknown"
    assert m.combine_bound([m.intensity_signal(None, None, None)]).state == "unknown"
    assert m.combine_bound([memory]).state == "memory"
    assert m.combine_bound([compute, tokens_compute]).state == "compute"
    # Two direct measurements disagree: neither wins.
    assert m.combine_bound([memory, compute]).state == "balanced"
    combined = m.combine_bound([memory, compute, tokens_compute])
    assert combined.state == "balanced"  # weights 1, 1, 0.75: score 0.75/2.75 ≈ 0.27
    assert [signal["name"] for signal in combined.to_dict()["signals"]] == [
        "dram_vs_tensor",
        "mfu_intensity",
        "tokens_per_step",
    ]


# --------------------------------------------------------------------------------------------------
# Step time
# --------------------------------------------------------------------------------------------------


def test_datasheet_prior_levels_and_knee():
    prior = m.prior_for_model(H100, LLAMA_8B)
    # Weights 16 GB at 80 % of 3.35 TB/s ≈ 6 ms, plus 1 ms overhead.
    assert prior.step_time(1) == pytest.approx(16.06e9 / (0.8 * 3.35e12) + 1e-3, rel=0.02)
    # Knee: ridge 295 × 0.7/0.8 for bf16.
    assert prior.knee_tokens == pytest.approx(H100.ridge * 0.7 / 0.8, rel=1e-6)
    # Below the knee each token adds half its GEMM math (2 × 8.03e9 FLOPs at 70 % of 989.4 TFLOP/s,
    # ≈ 23 µs) that does not hide under the weight read, plus 2 µs of sampling and bookkeeping.
    per_token = 0.5 * 2 * 8.03e9 / (0.7 * 989.4e12) + 2e-6
    assert prior.step_time(64) - prior.step_time(1) == pytest.approx(63 * per_token, rel=0.05)
    assert prior.step_time(2000) / prior.step_time(1) > 4
    # TP splits bytes and FLOPs, so the knee stays; KV reads add per context token.
    assert m.prior_for_model(H100, LLAMA_70B, tp=4).knee_tokens == pytest.approx(prior.knee_tokens)
    assert prior.step_time(8, 8 * 32000) > 2 * prior.step_time(8, 0)
    # Weight-only int4 quarters the knee (model.md §2), and its dequantising GEMMs run at 0.7 of BF16's
    # rate, which moves it further left.
    int4 = m.prior_for_model(H100, LLAMA_8B, dtype="int4")
    assert int4.knee_tokens == pytest.approx(prior.knee_tokens / 4 * 0.7)


def test_moe_prior_reads_more_experts_as_tokens_grow():
    mixtral = m.prior_for_model(H100, MODELS["Mixtral-8x7B"])
    bytes_read = [mixtral.weight_bytes(n) for n in (1, 2, 4, 16, 64)]
    assert all(a < b for a, b in zip(bytes_read, bytes_read[1:]))
    assert bytes_read[-1] == pytest.approx(2 * 46.7e9, rel=0.01)
    # One token reads the shared weights plus 2 of 8 experts: the active parameters.
    assert bytes_read[0] == pytest.approx(2 * 12.9e9, rel=0.01)
    assert mixtral.knee_tokens > 3 * m.prior_for_model(H100, LLAMA_8B).knee_tokens


def _hinge_samples(truth: m.HingeParameters, tokens, rng, noise=0.03, context_per_token=50.0):
    samples = []
    for n in tokens:
        context = n * context_per_token * rng.uniform(0.5, 1.5)
        clean = truth.step_time(n, context)
        samples.append(m.StepSample(float(n), float(clean * (1 + noise * rng.standard_normal())), float(context)))
    return samples


def test_hinge_fit_recovers_a_known_knee_from_noisy_samples():
    rng = np.random.default_rng(7)
    prior = m.prior_for_model(H100, LLAMA_8B).hinge()
    # The node is slower than the datasheet and bends earlier than the prior says.
    truth = m.HingeParameters(
        base_s=prior.base_s * 1.3,
        knee=0.6 * prior.knee,
        slope_s_per_token=prior.slope_s_per_token * 1.4,
        kv_s_per_token=prior.kv_s_per_token * 1.2,
        per_token_s=3e-6,
    )
    tokens = np.geomspace(4, 1200, 60)
    fit = m.fit_step_time(_hinge_samples(truth, tokens, rng), prior)
    assert fit.knee_tokens == pytest.approx(truth.knee, rel=0.2)
    assert fit.knee_observed
    assert fit.n_samples == 60
    assert fit.tokens_min == pytest.approx(4) and fit.tokens_max == pytest.approx(1200)
    assert fit.coverage > 0.7
    for n in (8, 100, 600, 1000):
        assert fit.step_time(n, n * 50) == pytest.approx(truth.step_time(n, n * 50), rel=0.08)
    assert fit.confidence(100) > 0.6


def test_hinge_fit_confidence_drops_outside_its_data():
    rng = np.random.default_rng(11)
    prior = m.prior_for_model(H100, LLAMA_8B).hinge()
    truth = m.HingeParameters(prior.base_s, prior.knee, prior.slope_s_per_token, prior.kv_s_per_token, 2e-6)
    fit = m.fit_step_time(_hinge_samples(truth, np.geomspace(2, 48, 30), rng), prior)
    assert fit.tokens_max == pytest.approx(48)
    assert not fit.knee_observed
    assert fit.coverage < 0.6
    inside = fit.confidence(16)
    assert inside > 0.5
    assert fit.confidence(96) < inside
    assert fit.confidence(2000) < 0.1 * inside
    # With no data above the knee, the slope stays near the prior's.
    assert fit.parameters.slope_s_per_token == pytest.approx(prior.slope_s_per_token, rel=0.5)


def test_hinge_fit_without_samples_is_the_prior():
    prior = m.prior_for_model(H100, LLAMA_8B)
    fit = m.fit_step_time([m.StepSample(float("nan"), 0.01)], prior)
    assert fit.n_samples == 0
    assert fit.parameters == prior.hinge()
    assert fit.confidence(10) == m.DATASHEET_CONFIDENCE


# --------------------------------------------------------------------------------------------------
# Speedup under load
# --------------------------------------------------------------------------------------------------


def test_speedup_at_low_load_is_leviathans_rule():
    prior = m.prior_for_model(H100, LLAMA_70B, tp=4)
    assert m.speedup(prior, 1, 4, 2.5, 0.0) == pytest.approx(2.5, rel=0.02)
    assert m.speedup(prior, 1, 4, 2.5, 0.1) == pytest.approx(2.5 / 1.4, rel=0.02)
    assert m.break_even_length_at_load(prior, 1, 4, 0.1) == pytest.approx(1.4, rel=0.02)


@given(
    batch=st.floats(1, 512),
    k=st.integers(1, 8),
    r=st.floats(0, 0.5),
    context=st.floats(0, 32000),
    data=st.data(),
)
@settings(max_examples=50, deadline=None)
def test_speedup_consistency(batch, k, r, context, data):
    prior = m.prior_for_model(H100, LLAMA_8B)
    length = data.draw(st.floats(1.0, k + 1.0))
    value = m.speedup(prior, batch, k, length, r, context)
    needed = m.break_even_length_at_load(prior, batch, k, r, context)
    assert (value > 1) == (length > needed) or math.isclose(value, 1.0, rel_tol=1e-9)
    assert m.length_for_speedup(value, prior, batch, k, r, context) == pytest.approx(length)
    # Verifying more tokens never costs less than one: ρ_v ≥ 1.
    assert m.verify_ratio(prior, batch, k, context) >= 1.0


def test_crossover_concurrency():
    prior = m.prior_for_model(H100, LLAMA_70B, tp=4)
    crossing = m.crossover_concurrency(prior, 4, 2.5, 0.0, 0.0)
    assert crossing.state == "crosses"
    assert m.speedup(prior, crossing.concurrency, 4, 2.5, 0.0) == pytest.approx(1.0, abs=1e-6)
    assert m.speedup(prior, crossing.concurrency * 0.8, 4, 2.5, 0.0) > 1
    assert m.speedup(prior, crossing.concurrency * 1.2, 4, 2.5, 0.0) < 1
    # Better acceptance moves the crossover right.
    assert m.crossover_concurrency(prior, 4, 3.5, 0.0).concurrency > crossing.concurrency
    # Below break-even there is nothing to cross.
    assert m.crossover_concurrency(prior, 4, 1.2, 0.1).state == "never_pays"
    # Long contexts keep the step KV-bound: verification stays cheap at any batch (MagicDec).
    long_context = m.crossover_concurrency(m.prior_for_model(H100, LLAMA_8B), 3, 2.9, 0.05, 64000)
    assert long_context.state == "pays_throughout"
    assert long_context.concurrency is None


def test_best_k_shrinks_with_load():
    prior = m.prior_for_model(H100, LLAMA_8B)
    rates = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    low = m.best_k(prior, 1, 0.05, rates=rates)
    high = m.best_k(prior, 256, 0.05, rates=rates)
    overloaded = m.best_k(prior, 1024, 0.05, rates=rates)
    assert low.k == 6
    assert low.speedup == pytest.approx(m.speedup(prior, 1, 6, 1 + sum(rates), 0.05))
    assert high.k < low.k
    assert overloaded.k == 0 and overloaded.speedup == 1.0
    iid = m.best_k(prior, 1, 0.05, length=2.5, k=4)
    assert 1 <= iid.k <= 4
    with pytest.raises(ValueError):
        m.best_k(prior, 1, 0.05)


def _reference_hinge_fit(samples, prior):
    """The fit as first written: for each knee, every set of free parameters by lstsq (slow, plain)."""
    import itertools
    n = np.array([s.tokens_per_step for s in samples])
    c = np.array([s.context_tokens for s in samples])
    y = np.array([s.step_time_s for s in samples])
    w = np.array([s.weight for s in samples])
    w = w * (len(samples) / np.sum(w))
    sqrt_w = np.sqrt(w) / (m.SAMPLE_RELATIVE_NOISE * float(np.median(y)))
    coverage = steptime._axis_coverage(float(n.min()), float(n.max()), prior.knee)
    strength = m.PRIOR_SAMPLES * (1.0 - coverage) + m.PRIOR_FLOOR
    theta0 = prior.as_vector()
    floors = np.array([prior.base_s, prior.base_s / max(float(np.max(c)), 1.0), prior.base_s / prior.knee,
                       0.25 * prior.base_s / prior.knee])
    penalty = np.diag(math.sqrt(strength) / np.maximum(0.5 * np.abs(theta0), 0.5 * floors))
    best = None
    for knee in np.geomspace(prior.knee / 4.0, prior.knee * 2.0, m.KNEE_GRID_POINTS):
        design = np.vstack([np.column_stack([np.ones_like(n), c, np.maximum(0.0, n - knee), n]) * sqrt_w[:, None],
                            penalty])
        target = np.concatenate([y * sqrt_w, penalty @ theta0])
        knee_best = None
        for size in range(5):
            for free in itertools.combinations(range(4), size):
                theta = np.zeros(4)
                if free:
                    solution, *_ = np.linalg.lstsq(design[:, list(free)], target, rcond=None)
                    if np.any(solution < 0):
                        continue
                    theta[list(free)] = solution
                cost = float(np.sum((design @ theta - target) ** 2))
                if knee_best is None or cost < knee_best[0]:
                    knee_best = (cost, theta)
        cost = knee_best[0] + strength * (math.log(knee / prior.knee) / m.PRIOR_KNEE_LOG_SD) ** 2
        if best is None or cost < best[0]:
            best = (cost, float(knee), knee_best[1])
    return best[1], best[2]


def test_batched_hinge_fit_matches_the_plain_active_set_enumeration():
    rng = np.random.default_rng(5)
    prior = m.prior_for_model(H100, LLAMA_8B).hinge()
    for _ in range(25):
        truth = m.HingeParameters(prior.base_s * rng.uniform(0.6, 1.6), prior.knee * rng.uniform(0.3, 1.8),
                                  prior.slope_s_per_token * rng.uniform(0.5, 2), prior.kv_s_per_token * rng.uniform(0, 2),
                                  rng.uniform(0, 5e-6))
        low = rng.uniform(1, 200)
        tokens = np.geomspace(low, low * rng.uniform(1.5, 50), int(rng.integers(3, 120)))
        samples = [m.StepSample(s.tokens_per_step, s.step_time_s, s.context_tokens, float(rng.uniform(0.1, 1)))
                   for s in _hinge_samples(truth, tokens, rng, noise=0.05, context_per_token=rng.uniform(0, 300))]
        knee, theta = _reference_hinge_fit(samples, prior)
        fit = m.fit_step_time(samples, prior).parameters
        assert fit.knee == pytest.approx(knee, rel=1e-12)
        got = np.array([fit.base_s, fit.kv_s_per_token, fit.slope_s_per_token, fit.per_token_s])
        np.testing.assert_allclose(got, theta, rtol=1e-6, atol=1e-6 * np.max(np.abs(theta)))


def test_hinge_crossover_is_solved_exactly_and_agrees_with_the_scan():
    """A hinge (the advisor's model) takes the exact piecewise-linear solve; any other model the scan.
    Both find the same b× (and the same state) for the same step times."""

    class Opaque:  # the same step times, but not a HingeParameters: forces the scan and bisection
        def __init__(self, hinge):
            self.hinge = hinge
            self.knee_tokens = hinge.knee

        def step_time(self, n_tokens, context_tokens=0.0):
            return self.hinge.step_time(n_tokens, context_tokens)

        def confidence(self, n_tokens):
            return 0.5

    rng = np.random.default_rng(9)
    prior = m.prior_for_model(H100, LLAMA_70B, tp=4).hinge()
    states = set()
    for _ in range(300):
        hinge = m.HingeParameters(prior.base_s * rng.uniform(0.3, 3), prior.knee * rng.uniform(0.1, 4),
                                  prior.slope_s_per_token * rng.uniform(0, 3), prior.kv_s_per_token * rng.uniform(0, 3),
                                  float(rng.choice([0.0, rng.uniform(0, 2e-5)])))
        k = int(rng.integers(1, 8))
        length = float(rng.uniform(1, k + 1))
        r = float(rng.choice([0.0, rng.uniform(0, 0.3)]))
        context = float(rng.choice([0.0, rng.uniform(0, 1e5)]))
        exact = m.crossover_concurrency(hinge, k, length, r, context)
        scanned = m.crossover_concurrency(Opaque(hinge), k, length, r, context)
        assert exact.state == scanned.state
        states.add(exact.state)
        if exact.state == "crosses":
            assert exact.concurrency == pytest.approx(scanned.concurrency, rel=1e-9)
            assert m.speedup(hinge, exact.concurrency, k, length, r, context) == pytest.approx(1.0, abs=1e-9)
    assert states == {"crosses", "never_pays", "pays_throughout"}


def test_best_k_lengths_are_the_per_position_ones():
    prior = m.prior_for_model(H100, LLAMA_8B)
    rates = [0.9, 0.8, 1.2, -0.1]  # counter skew: clipped into 0..1 as length_at_k does
    for batch in (1, 16, 64, 256):
        best = m.best_k(prior, batch, 0.05, rates=rates)
        if best.k:
            assert best.length == pytest.approx(m.length_at_k(rates, best.k).length, rel=1e-15)


def test_a_fit_of_unknown_shape_learns_a_cpu_like_law_that_a_gpu_prior_would_keep_flat():
    """Step times from tests/step_law.py's law (not the hinge) on a CPU-like node, plain and
    verifying steps at several loads: with the shape unknown the fit follows them across their span;
    held to a datasheet-shaped prior (a knee at 256) it would stay flat, as a GPU below its knee."""
    from step_law import Forward, Gpu, LawNode

    node = LawNode(target=Forward(params=0.4e9, layers=16, kv_heads=2, head_dim=64, attention_heads=8,
                                  fixed_s=0.003),
                   gpu=Gpu(name="cpu", bandwidth=40e9, peak_flops=1.5e12, eff_max=0.5, eff_tokens=2.0),
                   context_per_sequence=0.0, noise=0.0)
    samples = []
    for b in (1, 2, 4, 8, 16):
        for speculative in (False, True):
            seconds, prompt, _ = node.step(b, speculative)
            samples.append(m.StepSample(prompt + b * ((node.k + 1) if speculative else 1), seconds))
    level = float(np.median([s.step_time_s for s in samples]))
    flat_prior = m.HingeParameters(base_s=level, knee=256.0, slope_s_per_token=level / 256.0,
                                      kv_s_per_token=0.0, per_token_s=0.0)
    learned = m.fit_step_time(samples, flat_prior, shape_known=False)
    held = m.fit_step_time(samples, flat_prior)
    for s in samples:
        assert learned.step_time(s.tokens_per_step) == pytest.approx(s.step_time_s, rel=0.12)
    assert learned.knee_tokens < 40
    # the datasheet-shaped fit cannot: it misses the largest step by far more
    largest = max(samples, key=lambda s: s.tokens_per_step)
    assert abs(held.step_time(largest.tokens_per_step) / largest.step_time_s - 1) > 0.3


def test_hinge_fit_from_rows_is_the_fit_from_samples():
    # the advisor refits from an array of rows; it must be the very fit the samples give
    rng = np.random.default_rng(3)
    prior = m.prior_for_model(H100, LLAMA_8B).hinge()
    samples = [m.StepSample(s.tokens_per_step, s.step_time_s, s.context_tokens, float(rng.uniform(0.2, 1.0)))
               for s in _hinge_samples(prior, np.geomspace(2, 900, 41), rng)]
    rows = np.array([(s.tokens_per_step, s.step_time_s, s.context_tokens, s.weight) for s in samples])
    assert m.fit_step_time_rows(rows, prior) == m.fit_step_time(samples, prior)
    assert m.fit_step_time_rows(rows, prior, shape_known=False) == m.fit_step_time(samples, prior, shape_known=False)
    assert m.fit_step_time_rows(np.empty((0, 4)), prior).n_samples == 0


@pytest.mark.parametrize("size", [1, 2, 7, 8, 240])
def test_step_time_median_is_numpys(size):
    values = np.random.default_rng(size).lognormal(-4.0, 1.0, size)
    assert steptime._median(values) == float(np.median(values))


def test_knee_grid_is_made_per_prior_knee():
    # the grid is kept between refits: a prior with another knee must get its own grid
    first = steptime._knee_grid(40.0, 320.0, 48)
    assert steptime._knee_grid(40.0, 320.0, 48) is first
    np.testing.assert_array_equal(first, np.geomspace(40.0, 320.0, 48))
    other = steptime._knee_grid(60.0, 480.0, 48)
    np.testing.assert_array_equal(other, np.geomspace(60.0, 480.0, 48))
    assert not first.flags.writeable
    # and a fit searches its own prior's grid: the knee it finds lies inside [knee/4, 2·knee]
    rng = np.random.default_rng(5)
    prior = m.prior_for_model(H100, LLAMA_8B).hinge()
    for knee in (prior.knee, prior.knee * 3.0):
        shifted = m.HingeParameters(prior.base_s, knee, prior.slope_s_per_token, prior.kv_s_per_token, 2e-6)
        fit = m.fit_step_time(_hinge_samples(shifted, np.geomspace(2, 4 * knee, 40), rng), shifted)
        assert knee / 4.0 <= fit.knee_tokens <= knee * 2.0
        assert fit.knee_tokens == pytest.approx(knee, rel=0.3)


def test_combined_bound_score_is_numpys_weighted_mean_for_every_mix_of_signals():
    # combine_bound sums in plain Python: exact only while weights and scores are quarters
    import itertools

    states = ("memory", "balanced", "compute", "unknown")
    for mix in itertools.product(states, repeat=3):
        signals = [m.BoundSignal(name, state, None, "") for name, state in zip(m.SIGNAL_WEIGHTS, mix)]
        known = [s for s in signals if s.state != "unknown"]
        estimate = m.combine_bound(signals)
        if not known:
            assert estimate.score is None
            continue
        weights = np.array([m.SIGNAL_WEIGHTS[s.name] for s in known])
        scores = np.array([{"memory": -1.0, "balanced": 0.0, "compute": 1.0}[s.state] for s in known])
        assert estimate.score == float(np.dot(weights, scores) / np.sum(weights))


@given(st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, math.nan, math.inf, -math.inf, 5e-324, -5e-324,
                                           1.0000000000000002]),
                          st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=8))
@settings(max_examples=300, deadline=None)
def test_clipped_rates_are_numpys_clip_to_the_bit(rates):
    from specwatch.perf.acceptance import clipped_rates

    given_array = np.asarray(rates, dtype=float)
    clipped = clipped_rates(given_array)
    assert clipped.tobytes() == np.clip(given_array, 0.0, 1.0).tobytes()  # -0.0 comes out +0.0, NaN stays
    assert clipped is not given_array  # a copy, as np.clip gives: the caller's array is never shared
    assert clipped_rates(tuple(rates)).tobytes() == clipped.tobytes()
