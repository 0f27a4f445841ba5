"""The performance model: pure functions over numbers (numpy), no I/O, no clock, no mutable globals.

Four parts, each following DESIGN §3 and reference/model.md §1–5:

1. Acceptance algebra: from vLLM's spec-decode counters to the mean acceptance length L, the
   i.i.d. acceptance α, and L for other chain lengths k′.
2. Draft cost r per method and the low-load break-even length 1 + k·r.
3. Roofline position from three independent signals (MFU-counter intensity, DRAM-vs-tensor counter
   signature, tokens per step vs the knee) and a combiner.
4. Step time T(N, C) (N tokens per step, C context tokens in the batch): a datasheet prior, an online
   hinge fit regularised toward it, and from either the speedup S(b), the crossover concurrency b×,
   the acceptance length needed at a load, and the best k′ at a load.

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from specwatch.hardware import GpuSpec, ModelSpec

__all__ = [
    # acceptance
    "acceptance_length",
    "acceptance_rate",
    "length_from_rate",
    "per_position_rates",
    "conditional_acceptance",
    "expected_length",
    "iid_alpha",
    "LengthAtK",
    "length_at_k",
    "length_at_k_iid",
    # draft cost
    "DraftCost",
    "canonical_method",
    "draft_cost",
    "break_even_length",
    # roofline
    "BoundSignal",
    "BoundEstimate",
    "intensity_signal",
    "counter_signal",
    "tokens_per_step_signal",
    "combine_bound",
    # step time
    "StepTimeModel",
    "StepTimePrior",
    "HingeParameters",
    "StepSample",
    "StepTimeFit",
    "datasheet_prior",
    "prior_for_model",
    "fit_step_time",
    # speedup under load
    "speedup",
    "verify_ratio",
    "break_even_length_at_load",
    "length_for_speedup",
    "Crossover",
    "crossover_concurrency",
    "KChoice",
    "best_k",
]

# ==================================================================================================
# 1. Acceptance algebra
# ==================================================================================================


def acceptance_length(drafts: float, accepted: float) -> float | None:
    """Mean acceptance length L = 1 + A/D (tokens committed per verify step, bonus included).

    None when there were no drafts in the window: L is undefined, not 1.
    """
    if not (math.isfinite(drafts) and math.isfinite(accepted)) or drafts <= 0 or accepted < 0:
        return None
    return 1.0 + accepted / drafts


def acceptance_rate(draft_tokens: float, accepted: float) -> float | None:
    """Draft acceptance rate A/T (vLLM's "draft acceptance rate"; not the i.i.d. α)."""
    if not (math.isfinite(draft_tokens) and math.isfinite(accepted)) or draft_tokens <= 0 or accepted < 0:
        return None
    return accepted / draft_tokens


def length_from_rate(rate: float, k: int) -> float:
    """L from the acceptance rate A/T: every draft proposes k tokens, so A/D = k·(A/T)."""
    _check_k(k)
    if not math.isfinite(rate) or rate < 0 or rate > 1:
        raise ValueError(f"acceptance rate must be in 0..1, got {rate!r}")
    return 1.0 + k * rate


def per_position_rates(drafts: float, accepted_per_position: Sequence[float]) -> np.ndarray | None:
    """p_i = a_i / D: the chance that the first i+1 drafted tokens were all accepted.

    Values are clipped into 0..1; counters read at slightly different instants can overshoot by a
    count or two. None when there were no drafts.
    """
    if not math.isfinite(drafts) or drafts <= 0:
        return None
    counts = np.asarray(accepted_per_position, dtype=float)
    if counts.ndim != 1 or counts.size == 0 or not np.all(np.isfinite(counts)):
        return None
    return np.clip(counts / drafts, 0.0, 1.0)


def conditional_acceptance(rates: Sequence[float]) -> np.ndarray:
    """α_i = p_i / p_{i−1} (p_{−1} = 1): acceptance at position i given all earlier ones accepted.

    Where p_{i−1} is 0 the position was never reached, and α_i is reported as 0.
    """
    p = np.asarray(rates, dtype=float)
    previous = np.concatenate(([1.0], p[:-1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(previous > 0, p / np.where(previous > 0, previous, 1.0), 0.0)
    return np.clip(alpha, 0.0, 1.0)


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k (draft tokens per step) must be an integer ≥ 1, got {k!r}")


def expected_length(alpha: float, k: int) -> float:
    """E[L] = (1 − α^(k+1)) / (1 − α) = Σ_{i=0..k} α^i for i.i.d. acceptance α (Leviathan Eq. 1).

    Summed directly rather than through the closed form, which loses precision as α → 1.
    """
    if k == 0:
        return 1.0
    _check_k(k)
    if not math.isfinite(alpha) or alpha < 0 or alpha > 1:
        raise ValueError(f"α must be in 0..1, got {alpha!r}")
    return float(np.sum(alpha ** np.arange(k + 1)))


def iid_alpha(length: float, k: int) -> float:
    """The i.i.d. acceptance α that solves Σ_{i=1..k} α^i = L − 1.

    The left side rises monotonically from 0 (α = 0) to k (α = 1), so bisection always converges.
    L is clipped into [1, k+1] first: a measured L a hair outside (counter skew) maps to the edge,
    L = 1 gives 0 and L = k+1 gives 1.
    """
    _check_k(k)
    if not math.isfinite(length):
        raise ValueError(f"acceptance length must be finite, got {length!r}")
    target = min(max(length - 1.0, 0.0), float(k))
    if target <= 0.0:
        return 0.0
    if target >= k:
        return 1.0
    powers = np.arange(1, k + 1)
    low, high = 0.0, 1.0
    for _ in range(200):  # 2^-200: far below float resolution, stops early below
        middle = 0.5 * (low + high)
        if float(np.sum(middle**powers)) < target:
            low = middle
        else:
            high = middle
        if high - low < 1e-15:
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class LengthAtK:
    """L for a chain of k draft tokens, and how it was obtained."""

    k: int
    length: float
    extrapolated: bool  # True when k exceeds the measured chain, so the value is a model, not data
    basis: str  # "per-position" (exact), "per-position, extrapolated" or "i.i.d. α"


def length_at_k(rates: Sequence[float], k_new: int) -> LengthAtK:
    """L(k′) from per-position rates measured with a chain of k = len(rates).

    For k′ ≤ k it is exact: 1 + Σ_{i<k′} p_i (a shorter chain stops drafting where the longer one
    would have gone on, and the first k′ positions were accepted with exactly these rates). For
    k′ > k it is extrapolated: later positions keep the last conditional acceptance α_{k−1}
    (model.md §1.5), which is as far as the data can speak.
    """
    p = np.asarray(rates, dtype=float)
    if p.ndim != 1 or p.size == 0:
        raise ValueError("per-position rates must be a non-empty sequence")
    if isinstance(k_new, bool) or not isinstance(k_new, (int, np.integer)) or k_new < 0:
        raise ValueError(f"k′ must be an integer ≥ 0, got {k_new!r}")
    p = np.clip(p, 0.0, 1.0)
    k = p.size
    if k_new <= k:
        return LengthAtK(int(k_new), 1.0 + float(np.sum(p[:k_new])), False, "per-position")
    last_alpha = float(conditional_acceptance(p)[-1])
    extra = p[-1] * last_alpha ** np.arange(1, k_new - k + 1)
    return LengthAtK(int(k_new), 1.0 + float(np.sum(p)) + float(np.sum(extra)), True, "per-position, extrapolated")


def length_at_k_iid(length: float, k: int, k_new: int) -> LengthAtK:
    """L(k′) when only the mean length L at k is known: through the i.i.d. α.

    Under-predicts bursty acceptance (E[L] is convex in α), so prefer per-position data.
    """
    if isinstance(k_new, bool) or not isinstance(k_new, (int, np.integer)) or k_new < 0:
        raise ValueError(f"k′ must be an integer ≥ 0, got {k_new!r}")
    if k_new == k:
        return LengthAtK(int(k_new), min(max(length, 1.0), k + 1.0), False, "measured")
    alpha = iid_alpha(length, k)
    return LengthAtK(int(k_new), expected_length(alpha, int(k_new)), k_new > k, "i.i.d. α")


# ==================================================================================================
# 2. Draft cost and break-even
# ==================================================================================================

# Lookup proposers (n-gram / prompt lookup, suffix trees) run no model forward; their CPU work
# overlaps the GPU step, so to first order they cost nothing (DESIGN §3).
LOOKUP_DRAFT_RATIO = 0.0
# EAGLE/EAGLE-3/MTP/Medusa heads are about one decoder layer plus (a slice of) the LM head run per
# draft token: for Llama-3.1-8B that is ~4 % with EAGLE-3's reduced vocabulary, for 70B ~3 %.
HEAD_DRAFT_RATIO = 0.05
# A separate draft model pays its own per-forward fixed cost (kernel launches, sampling, scheduling,
# TP collectives) that does not shrink with its size; measured small-draft ratios in vLLM sit well
# above bytes(draft)/bytes(target). 0.05 per draft token is a middle value; override when measured.
DRAFT_MODEL_FIXED_OVERHEAD = 0.05

_METHODS = {
    "ngram": "ngram",
    "ngram_gpu": "ngram",
    "prompt_lookup": "ngram",
    "suffix": "suffix",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "mtp": "mtp",
    "medusa": "medusa",
    "mlp_speculator": "mtp",
    "draft": "draft",
    "draft_model": "draft",
}


# How the reasons name each method.
METHOD_WORDS = {
    "ngram": "n-gram lookup",
    "suffix": "suffix lookup",
    "eagle": "an EAGLE head",
    "eagle3": "an EAGLE-3 head",
    "mtp": "an MTP head",
    "medusa": "Medusa heads",
    "draft": "a draft model",
}


def canonical_method(method: str) -> str:
    """Map vLLM's method spellings onto the ones this model prices; ValueError on unknown methods."""
    key = method.strip().lower().replace("-", "_")
    if key.endswith("_mtp"):  # vLLM's per-architecture MTP types (deepseek_mtp, qwen3_next_mtp, ...)
        key = "mtp"
    if key not in _METHODS:
        raise ValueError(f"unknown speculation method {method!r}; known: {', '.join(sorted(set(_METHODS)))}")
    return _METHODS[key]


@dataclass(frozen=True)
class DraftCost:
    """Draft cost r per draft token, relative to one plain target step at the same load."""

    method: str
    ratio: float
    basis: str  # plain words: where the number comes from


def draft_cost(
    method: str,
    *,
    draft_params: float | None = None,
    target_params: float | None = None,
    override: float | None = None,
) -> DraftCost:
    """r for a speculation method, or the explicit override when given.

    A draft model costs about its weight bytes over the target's (both steps are weight-read-bound
    at low load) plus a fixed per-forward overhead; it needs draft and target parameter counts.
    """
    name = canonical_method(method)
    if override is not None:
        if not math.isfinite(override) or override < 0:
            raise ValueError(f"draft cost ratio must be ≥ 0, got {override!r}")
        return DraftCost(name, float(override), "given")
    if name in ("ngram", "suffix"):
        return DraftCost(name, LOOKUP_DRAFT_RATIO, "lookup proposer: no model forward")
    if name in ("eagle", "eagle3", "mtp", "medusa"):
        return DraftCost(name, HEAD_DRAFT_RATIO, "draft head ≈ one decoder layer")
    if draft_params is None or target_params is None:
        raise ValueError("a draft model's cost needs its parameter count (or an explicit draft ratio)")
    if not (draft_params > 0 and target_params > 0):
        raise ValueError("draft and target parameter counts must be positive")
    ratio = draft_params / target_params + DRAFT_MODEL_FIXED_OVERHEAD
    return DraftCost(
        name,
        ratio,
        f"draft/target params {draft_params / target_params:.3f} + fixed overhead {DRAFT_MODEL_FIXED_OVERHEAD:.2f}",
    )


def break_even_length(k: int, draft_ratio: float, verify_ratio: float = 1.0) -> float:
    """The acceptance length at which speculation breaks even: ρ_v + k·r.

    With the memory-bound target of low load, verifying k+1 tokens costs what one token does
    (ρ_v = 1) and this is Leviathan's 1 + k·r.
    """
    _check_k(k)
    if not math.isfinite(draft_ratio) or draft_ratio < 0:
        raise ValueError(f"draft cost ratio must be ≥ 0, got {draft_ratio!r}")
    return verify_ratio + k * draft_ratio


# ==================================================================================================
# 3. Roofline position
# ==================================================================================================

BOUND_STATES = ("memory", "compute", "balanced", "unknown")
# Below 0.75× the ridge or knee the step is memory-bound, above 1.25× compute-bound. Real GEMMs
# bend smoothly through the ridge, so a band around it is "balanced" rather than a coin flip.
RIDGE_BAND_LOW = 0.75
RIDGE_BAND_HIGH = 1.25
# DRAM_ACTIVE tops out near 0.8 in practice (DCGM profiling docs), so it is normalised by that.
DRAM_PRACTICAL_PEAK = 0.8
DRAM_HIGH = 0.6  # normalised DRAM at or above this is heavy memory traffic
TENSOR_LOW = 0.3  # tensor activity at or below this leaves most of the tensor pipes idle
TENSOR_HIGH = 0.5  # at or above this the tensor pipes are the busy resource


@dataclass(frozen=True)
class BoundSignal:
    """One roofline signal: its state, the number behind it, and that number in words."""

    name: str
    state: str
    value: float | None
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "state": self.state, "value": self.value, "detail": self.detail}


def _band_state(ratio: float) -> str:
    if ratio < RIDGE_BAND_LOW:
        return "memory"
    if ratio > RIDGE_BAND_HIGH:
        return "compute"
    return "balanced"


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float, np.floating, np.integer)) and math.isfinite(value)


def intensity_signal(delta_flops: float | None, delta_bytes: float | None, ridge: float | None) -> BoundSignal:
    """(a) The engine's own arithmetic intensity Δflops/Δbytes (vLLM MFU counters) against the ridge."""
    name = "mfu_intensity"
    if not (_finite(delta_flops) and _finite(delta_bytes) and _finite(ridge)) or delta_bytes <= 0 or ridge <= 0:
        return BoundSignal(name, "unknown", None, "no MFU counters (start vLLM with --enable-mfu-metrics)")
    if delta_flops < 0:
        return BoundSignal(name, "unknown", None, "MFU counters went backwards")
    intensity = delta_flops / delta_bytes
    state = _band_state(intensity / ridge)
    return BoundSignal(name, state, intensity, f"intensity {intensity:.0f} FLOP/B vs ridge {ridge:.0f}")


def counter_signal(dram_bw_fraction: float | None, tensor_fraction: float | None) -> BoundSignal:
    """(b) The DRAM-bandwidth vs tensor-activity signature (GPM / DCGM), both fractions 0..1.

    High DRAM with idle tensor pipes is memory-bound; busy tensor pipes are compute-bound; both high
    is the ridge. Both low is latency-bound (launch/scheduling gaps): compute and bandwidth are both
    spare, so for speculation it behaves as memory-bound and is reported so. The value is tensor
    activity over normalised DRAM activity.
    """
    name = "dram_vs_tensor"
    if not (_finite(dram_bw_fraction) and _finite(tensor_fraction)):
        return BoundSignal(name, "unknown", None, "no DRAM/tensor activity counters (needs GPM or DCGM profiling)")
    if not (0.0 <= dram_bw_fraction <= 1.0 and 0.0 <= tensor_fraction <= 1.0):
        return BoundSignal(name, "unknown", None, "activity fractions outside 0..1")
    dram = min(dram_bw_fraction / DRAM_PRACTICAL_PEAK, 1.0)
    tensor = float(tensor_fraction)
    value = tensor / dram if dram > 0 else (math.inf if tensor > 0 else 0.0)
    words = f"DRAM {dram_bw_fraction:.2f} ({dram:.2f} of practical peak), tensor {tensor:.2f}"
    if tensor >= TENSOR_HIGH and dram >= DRAM_HIGH:
        state, why = "balanced", "both busy: near the ridge"
    elif tensor >= TENSOR_HIGH:
        state, why = "compute", "tensor pipes busy"
    elif dram >= DRAM_HIGH and tensor <= TENSOR_LOW:
        state, why = "memory", "bandwidth busy, tensor pipes idle"
    elif dram < DRAM_HIGH and tensor <= TENSOR_LOW:
        state, why = "memory", "both low: latency-bound, compute to spare"
    else:
        state, why = "balanced", "tensor pipes partly busy"
    return BoundSignal(name, state, value if math.isfinite(value) else None, f"{words}: {why}")


def tokens_per_step_signal(tokens_per_step: float | None, knee_tokens: float | None) -> BoundSignal:
    """(c) Tokens per step N against the step-time knee N* (bf16: ≈ the ridge in FLOP/B)."""
    name = "tokens_per_step"
    if not (_finite(tokens_per_step) and _finite(knee_tokens)) or knee_tokens <= 0 or tokens_per_step < 0:
        return BoundSignal(name, "unknown", None, "tokens per step or knee unknown")
    state = _band_state(tokens_per_step / knee_tokens)
    return BoundSignal(name, state, float(tokens_per_step), f"{tokens_per_step:.0f} tokens per step vs knee {knee_tokens:.0f}")


@dataclass(frozen=True)
class BoundEstimate:
    """The combined bound state and the signals behind it."""

    state: str
    score: float | None  # −1 all memory … +1 all compute; None when no signal is known
    signals: tuple[BoundSignal, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        return {"state": self.state, "signals": [signal.to_dict() for signal in self.signals]}


# Counter-based signals measure the GPU directly; tokens per step is arithmetic against a
# datasheet knee, so it counts a little less when they disagree.
SIGNAL_WEIGHTS = {"mfu_intensity": 1.0, "dram_vs_tensor": 1.0, "tokens_per_step": 0.75}
_STATE_SCORE = {"memory": -1.0, "balanced": 0.0, "compute": 1.0}


def combine_bound(signals: Sequence[BoundSignal]) -> BoundEstimate:
    """A bound state from whichever signals are known: a weighted vote (memory −1, balanced 0,
    compute +1); the mean decides, with the middle third reported as balanced."""
    known = [signal for signal in signals if signal.state in _STATE_SCORE]
    if not known:
        return BoundEstimate("unknown", None, tuple(signals))
    weights = np.array([SIGNAL_WEIGHTS.get(signal.name, 1.0) for signal in known])
    scores = np.array([_STATE_SCORE[signal.state] for signal in known])
    score = float(np.dot(weights, scores) / np.sum(weights))
    if score < -1.0 / 3.0:
        state = "memory"
    elif score > 1.0 / 3.0:
        state = "compute"
    else:
        state = "balanced"
    return BoundEstimate(state, score, tuple(signals))


# ==================================================================================================
# 4. Step time T(N, C)
# ==================================================================================================

# Efficiencies that turn datasheet roofs into what a decode step sees (model.md §2, gpu.md §3):
# DRAM reaches about 80 % of peak in practice (DCGM profiling docs); GEMMs at M ≈ 32–256 tokens
# run at 40–70 % of the tensor peak, of which 0.7 is the upper end a tuned engine reaches near the
# knee. The resulting knee sits at 0.7/0.8 ≈ 0.875 of the datasheet ridge (H100 SXM ≈ 258).
BANDWIDTH_EFFICIENCY = 0.8
FLOPS_EFFICIENCY = 0.7
# Fixed cost of one engine step beyond reading the weights: scheduling, kernel launches (with CUDA
# graphs), sampling set-up. About 1 ms in vLLM on a single GPU; rough, the online fit replaces it.
STEP_OVERHEAD_S = 1.0e-3
# Cost per token in the step that is not a GEMM: sampling, rejection, bookkeeping. Rough.
PER_TOKEN_OVERHEAD_S = 2.0e-6
# Tensor parallelism: two all-reduces per layer (attention output, MLP output); each costs a launch
# latency plus a ring transfer of 2(tp−1)/tp of the activations.
ALLREDUCE_LATENCY_S = 8.0e-6
# Soft maximum exponent for the weight-read vs GEMM-compute overlap (model.md §2: p ≈ 4).
SOFT_MAX_POWER = 4.0
# A datasheet prior is right in shape but 20–70 % off in level (model.md §0), so it earns a modest
# confidence on its own.
DATASHEET_CONFIDENCE = 0.4


@runtime_checkable
class StepTimeModel(Protocol):
    """Anything that gives a step time T(N, C) in seconds, its knee and a confidence per N."""

    @property
    def knee_tokens(self) -> float: ...

    def step_time(self, n_tokens: float | np.ndarray, context_tokens: float | np.ndarray = 0.0) -> float | np.ndarray: ...

    def confidence(self, n_tokens: float) -> float: ...


def _as_output(value: np.ndarray) -> float | np.ndarray:
    return float(value) if np.ndim(value) == 0 else value


@dataclass(frozen=True)
class HingeParameters:
    """T(N, C) = base + kv·C + per_token·N + slope·max(0, N − knee).

    `base` is the flat step time below the knee with no context (weights read + fixed overhead),
    `kv` the seconds per context token read, `per_token` the per-token overheads that make speedups
    decay before the knee, and `slope` the marginal GEMM cost per token above it (model.md §5.2,
    written with the flat part folded into `base`).
    """

    base_s: float
    knee: float
    slope_s_per_token: float
    kv_s_per_token: float
    per_token_s: float

    @property
    def knee_tokens(self) -> float:
        return self.knee

    def step_time(self, n_tokens: float | np.ndarray, context_tokens: float | np.ndarray = 0.0) -> float | np.ndarray:
        if isinstance(n_tokens, (int, float)) and isinstance(context_tokens, (int, float)):
            # Scalars take plain arithmetic: the advisor calls this a few hundred times per verdict
            # (crossover search, best k), where numpy's per-call overhead would dominate.
            return (self.base_s + self.kv_s_per_token * context_tokens + self.per_token_s * n_tokens
                    + self.slope_s_per_token * max(0.0, n_tokens - self.knee))
        n = np.asarray(n_tokens, dtype=float)
        c = np.asarray(context_tokens, dtype=float)
        value = (
            self.base_s
            + self.kv_s_per_token * c
            + self.per_token_s * n
            + self.slope_s_per_token * np.maximum(0.0, n - self.knee)
        )
        return _as_output(value)

    def confidence(self, n_tokens: float) -> float:
        return DATASHEET_CONFIDENCE

    def as_vector(self) -> np.ndarray:
        return np.array([self.base_s, self.kv_s_per_token, self.slope_s_per_token, self.per_token_s])

    def to_dict(self) -> dict[str, float]:
        return {
            "base_s": self.base_s,
            "knee_tokens": self.knee,
            "slope_s_per_token": self.slope_s_per_token,
            "kv_s_per_token": self.kv_s_per_token,
            "per_token_s": self.per_token_s,
        }


@dataclass(frozen=True)
class StepTimePrior:
    """The datasheet step-time model, per GPU (everything already divided by the TP degree).

    T(N, C) = overhead + smax(weights(N)/BW_e, flops_per_token·N/F_e) + C·kv/BW_e + comm(N) + c_p·N

    with smax(x, y) = (x^p + y^p)^(1/p): the weight read and the GEMM math overlap, and the soft
    maximum bends through the knee as measured GEMMs do. Attention FLOPs are left out: attention
    intensity is about q·(GQA group) ≪ ridge, so the KV read time covers it. For MoE models the
    bytes read depend on N through the union of experts the step's tokens touch.
    """

    shared_weight_bytes: float  # bytes read every step (dense: all weights)
    expert_weight_bytes: float  # routed-expert bytes (0 for dense)
    experts: int | None
    experts_per_token: int | None
    flops_per_token: float  # 2 · active params / tp
    kv_bytes_per_token: float  # per context token, per GPU
    bandwidth: float  # effective bytes/s
    flops: float  # effective FLOP/s
    overhead_s: float = STEP_OVERHEAD_S
    per_token_s: float = PER_TOKEN_OVERHEAD_S
    allreduce_count: int = 0  # all-reduces per step (2 per layer when tp > 1)
    allreduce_bytes_per_token: float = 0.0  # ring bytes per token per all-reduce
    link_bandwidth: float | None = None

    def weight_bytes(self, n_tokens: float | np.ndarray) -> float | np.ndarray:
        n = np.asarray(n_tokens, dtype=float)
        if not self.experts or not self.experts_per_token or self.expert_weight_bytes <= 0:
            return _as_output(np.full_like(n, self.shared_weight_bytes))
        # Uniform routing: each layer's N tokens touch E·(1 − (1 − k_e/E)^N) of its E experts.
        untouched = (1.0 - self.experts_per_token / self.experts) ** np.maximum(n, 1.0)
        return _as_output(self.shared_weight_bytes + self.expert_weight_bytes * (1.0 - untouched))

    def _comm_time(self, n: np.ndarray) -> np.ndarray:
        if self.allreduce_count == 0:
            return np.zeros_like(n)
        transfer = 0.0
        if self.link_bandwidth:
            transfer = self.allreduce_bytes_per_token * n / self.link_bandwidth
        return self.allreduce_count * (ALLREDUCE_LATENCY_S + transfer)

    def step_time(self, n_tokens: float | np.ndarray, context_tokens: float | np.ndarray = 0.0) -> float | np.ndarray:
        n = np.asarray(n_tokens, dtype=float)
        c = np.asarray(context_tokens, dtype=float)
        read = np.asarray(self.weight_bytes(n)) / self.bandwidth
        math_time = self.flops_per_token * n / self.flops
        gemm = (read**SOFT_MAX_POWER + math_time**SOFT_MAX_POWER) ** (1.0 / SOFT_MAX_POWER)
        value = self.overhead_s + gemm + c * self.kv_bytes_per_token / self.bandwidth
        value = value + self._comm_time(n) + self.per_token_s * n
        return _as_output(value)

    @property
    def knee_tokens(self) -> float:
        """N where GEMM math time equals the (all-experts) weight read time."""
        return (self.shared_weight_bytes + self.expert_weight_bytes) / self.bandwidth / (self.flops_per_token / self.flops)

    def confidence(self, n_tokens: float) -> float:
        return DATASHEET_CONFIDENCE

    def hinge(self) -> HingeParameters:
        """The prior as hinge parameters, to regularise the online fit toward.

        MoE bytes use the all-experts figure: from a few dozen tokens per step every expert is
        touched anyway.
        """
        link_term = 0.0
        if self.allreduce_count and self.link_bandwidth:
            link_term = self.allreduce_count * self.allreduce_bytes_per_token / self.link_bandwidth
        return HingeParameters(
            base_s=self.overhead_s
            + (self.shared_weight_bytes + self.expert_weight_bytes) / self.bandwidth
            + self.allreduce_count * ALLREDUCE_LATENCY_S,
            knee=self.knee_tokens,
            slope_s_per_token=self.flops_per_token / self.flops,
            kv_s_per_token=self.kv_bytes_per_token / self.bandwidth,
            per_token_s=self.per_token_s + link_term,
        )


# Bytes per weight and compute precision for the serving dtypes predict accepts. Weight-only
# quantisation (w8a16, w4a16) reads fewer bytes but computes in bf16, so its knee moves left.
WEIGHT_FORMATS: dict[str, tuple[float, str]] = {
    "bf16": (2.0, "bf16"),
    "fp16": (2.0, "bf16"),
    "fp8": (1.0, "fp8"),  # W8A8: FP8 weights and FP8 GEMMs
    "w8a8": (1.0, "fp8"),
    "int8": (1.0, "bf16"),  # W8A16
    "w8a16": (1.0, "bf16"),
    "int4": (0.5, "bf16"),  # W4A16: AWQ / GPTQ
    "w4a16": (0.5, "bf16"),
    "awq": (0.5, "bf16"),
    "gptq": (0.5, "bf16"),
}


def datasheet_prior(
    gpu: GpuSpec,
    *,
    params: float,
    kv_bytes_per_token: float,
    active_params: float | None = None,
    tp: int = 1,
    dtype: str = "bf16",
    layers: int | None = None,
    hidden_size: int | None = None,
    experts: int | None = None,
    experts_per_token: int | None = None,
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY,
    flops_efficiency: float = FLOPS_EFFICIENCY,
) -> StepTimePrior:
    """The datasheet step-time prior for a model on `tp` GPUs of one kind.

    Tensor parallelism divides weights, FLOPs and KV bytes across the GPUs (so it leaves the knee
    where it is) and adds two all-reduces per layer when the layer count is known.
    `kv_bytes_per_token` is the whole model's BF16 KV bytes per context token.
    """
    if dtype.lower() not in WEIGHT_FORMATS:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(WEIGHT_FORMATS)}")
    if not (params > 0 and math.isfinite(params)):
        raise ValueError("params must be a positive number")
    if kv_bytes_per_token < 0 or not math.isfinite(kv_bytes_per_token):
        raise ValueError("KV bytes per token must be ≥ 0")
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ValueError(f"tp must be an integer ≥ 1, got {tp!r}")
    active = params if active_params is None else active_params
    if not (0 < active <= params):
        raise ValueError("active params must be positive and at most the total params")
    bytes_per_weight, precision = WEIGHT_FORMATS[dtype.lower()]
    total_bytes = bytes_per_weight * params / tp
    if experts and experts_per_token and active < params:
        # Solve shared + routed/E·k_e = active, shared + routed = total for the routed share.
        routed_params = (params - active) / (1.0 - experts_per_token / experts)
        expert_bytes = bytes_per_weight * routed_params / tp
    else:
        expert_bytes = 0.0
        experts = experts_per_token = None
    allreduces = 2 * layers if (tp > 1 and layers) else 0
    ring_bytes = (2.0 * (tp - 1) / tp) * hidden_size * 2.0 if (tp > 1 and hidden_size) else 0.0
    return StepTimePrior(
        shared_weight_bytes=total_bytes - expert_bytes,
        expert_weight_bytes=expert_bytes,
        experts=experts,
        experts_per_token=experts_per_token,
        flops_per_token=2.0 * active / tp,
        kv_bytes_per_token=kv_bytes_per_token / tp,
        bandwidth=gpu.memory_bandwidth * bandwidth_efficiency,
        flops=gpu.peak_flops(precision) * flops_efficiency,
        allreduce_count=allreduces,
        allreduce_bytes_per_token=ring_bytes,
        link_bandwidth=gpu.interconnect_bandwidth,
    )


def prior_for_model(gpu: GpuSpec, model: ModelSpec, *, tp: int = 1, dtype: str = "bf16") -> StepTimePrior:
    """The datasheet prior for a model from the architecture table."""
    return datasheet_prior(
        gpu,
        params=model.params,
        active_params=model.active_params,
        kv_bytes_per_token=model.kv_bytes_per_token,
        tp=tp,
        dtype=dtype,
        layers=model.layers,
        hidden_size=model.hidden_size,
        experts=model.experts,
        experts_per_token=model.experts_per_token,
    )


@dataclass(frozen=True)
class StepSample:
    """One window's observation: mean tokens per step, mean step time, context tokens in the batch."""

    tokens_per_step: float
    step_time_s: float
    context_tokens: float = 0.0
    weight: float = 1.0  # the caller's forgetting factor (the model reads no clock)


# Fit settings. The prior's parameters are believed within about ±50 % (datasheet level error),
# the knee within a factor of about 2. PRIOR_SAMPLES is the prior's strength in samples when the
# data cover none of the N-axis; it fades as coverage grows, down to PRIOR_FLOOR.
PRIOR_RELATIVE_SD = 0.5
PRIOR_KNEE_LOG_SD = math.log(2.0)
PRIOR_SAMPLES = 20.0
PRIOR_FLOOR = 0.5
KNEE_GRID_POINTS = 48
# Typical scatter of one window's mean step time around the curve (relative). Residuals are
# measured in these units, so one sample counts as one unit against the prior's penalty.
SAMPLE_RELATIVE_NOISE = 0.05
# The N-axis that matters: single tokens up to a few times the knee (b·(k+1) at high load).
AXIS_KNEE_MULTIPLE = 4.0


@dataclass(frozen=True)
class StepTimeFit:
    """An online hinge fit of T(N, C) and what its data can support."""

    parameters: HingeParameters
    prior: HingeParameters
    n_samples: int
    tokens_min: float | None  # span of the N-axis the data cover
    tokens_max: float | None
    coverage: float  # fraction of the log N-axis [1, 4·prior knee] the data span, 0..1
    knee_observed: bool  # data on both sides of the fitted knee
    relative_rmse: float | None  # residual scatter relative to the median step time
    quality: float  # 0..1, confidence inside the data span

    @property
    def knee_tokens(self) -> float:
        return self.parameters.knee

    def step_time(self, n_tokens: float | np.ndarray, context_tokens: float | np.ndarray = 0.0) -> float | np.ndarray:
        return self.parameters.step_time(n_tokens, context_tokens)

    def confidence(self, n_tokens: float) -> float:
        """Confidence in T at N: the fit's quality inside its data, halving per doubling beyond it.

        Past the largest N seen, a knee the data never reached adds another halving: the slope
        there is the prior's, not a measurement.
        """
        if self.n_samples == 0 or self.tokens_min is None or self.tokens_max is None:
            return self.quality
        n = max(float(n_tokens), 1e-9)
        if n < self.tokens_min:
            distance = math.log2(self.tokens_min / n)
        elif n > self.tokens_max:
            distance = math.log2(n / self.tokens_max)
            if not self.knee_observed and n > self.parameters.knee:
                distance += 1.0
        else:
            distance = 0.0
        return self.quality * 0.5**distance

    def to_dict(self) -> dict[str, object]:
        return {
            "parameters": self.parameters.to_dict(),
            "prior": self.prior.to_dict(),
            "n_samples": self.n_samples,
            "tokens_min": self.tokens_min,
            "tokens_max": self.tokens_max,
            "coverage": self.coverage,
            "knee_observed": self.knee_observed,
            "relative_rmse": self.relative_rmse,
            "quality": self.quality,
        }


def _axis_coverage(tokens_min: float, tokens_max: float, prior_knee: float) -> float:
    top = math.log(max(AXIS_KNEE_MULTIPLE * prior_knee, 2.0))
    low = max(math.log(max(tokens_min, 1.0)), 0.0)
    high = min(math.log(max(tokens_max, 1.0)), top)
    return float(min(max((high - low) / top, 0.0), 1.0))


# The 15 non-empty sets of free parameters of the 4-parameter hinge, grouped by size: a least
# squares with θ ≥ 0 is solved exactly by the best feasible solution over these (and θ = 0).
_FREE_SETS = {
    size: np.array(list(itertools.combinations(range(4), size)), dtype=np.intp) for size in range(1, 5)
}


def _hinge_costs(n: np.ndarray, c: np.ndarray, y: np.ndarray, sqrt_w: np.ndarray, knees: np.ndarray,
                 penalty: np.ndarray, theta0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every knee: min ‖W(Xθ − y)‖² + ‖P(θ − θ0)‖² over θ ≥ 0, X = [1, C, max(0, N − knee), N].

    Returns the costs (one per knee) and the minimisers (knees × 4). All knees are solved at once
    from their normal equations: only the hinge column depends on the knee, so the 4×4 Gram
    matrices cost one (knees × samples) product. The non-negativity is exact, as an active-set
    enumeration: every set of free parameters is solved, the others held at zero, and the cheapest
    feasible solution is kept (when the unconstrained one is feasible it is that one). Columns are
    scaled to unit diagonal before solving, which keeps the small systems well conditioned.
    """
    hinge = np.maximum(0.0, n[None, :] - knees[:, None]) * sqrt_w  # knees × samples
    shared = np.column_stack([sqrt_w, c * sqrt_w, n * sqrt_w])  # samples × 3: the 1, C, N columns
    yw = y * sqrt_w
    count = knees.size
    gram = np.empty((count, 4, 4))
    rhs = np.empty((count, 4))
    shared_gram = shared.T @ shared
    cross = hinge @ shared  # knees × 3
    order = (0, 1, 3)  # where the shared columns sit among (base, kv, slope, per-token)
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            gram[:, a, b] = shared_gram[i, j]
        gram[:, a, 2] = gram[:, 2, a] = cross[:, i]
    gram[:, 2, 2] = np.einsum("ks,ks->k", hinge, hinge)
    rhs[:, list(order)] = shared.T @ yw
    rhs[:, 2] = hinge @ yw
    penalty_sq = penalty * penalty
    gram[:, range(4), range(4)] += penalty_sq
    rhs += penalty_sq * theta0
    total = float(yw @ yw) + float(penalty_sq @ (theta0 * theta0))
    scale = 1.0 / np.sqrt(gram[:, range(4), range(4)])  # > 0: every column has its penalty row
    gram *= scale[:, :, None] * scale[:, None, :]
    rhs *= scale

    best_cost = np.full(count, total)  # θ = 0 is always feasible
    best_theta = np.zeros((count, 4))
    for size, sets in _FREE_SETS.items():
        # knees × sets × size × size systems, solved in one call
        sub_gram = gram[:, sets[:, :, None], sets[:, None, :]]
        sub_rhs = rhs[:, sets]
        z = np.linalg.solve(sub_gram, sub_rhs[..., None])[..., 0]
        cost = total - np.einsum("ksi,ksi->ks", z, sub_rhs)  # at the optimum: ‖b‖² − zᵀg
        cost = np.where(np.all(z >= 0.0, axis=2), cost, np.inf)
        pick = np.argmin(cost, axis=1)
        picked_cost = cost[np.arange(count), pick]
        better = picked_cost < best_cost
        if np.any(better):
            theta = np.zeros((count, 4))
            rows = np.arange(count)[:, None]
            theta[rows, sets[pick]] = z[np.arange(count), pick]
            best_cost = np.where(better, picked_cost, best_cost)
            best_theta = np.where(better[:, None], theta * scale, best_theta)
    return best_cost, best_theta


def fit_step_time(samples: Sequence[StepSample], prior: HingeParameters | StepTimePrior) -> StepTimeFit:
    """Fit the hinge T(N, C) to live samples, regularised toward the datasheet prior.

    For each knee on a log grid over [prior/4, 2·prior] (model.md §5.2) it solves a non-negative,
    prior-regularised least squares for (base, kv, slope, per-token) and keeps the knee with the
    lowest total cost. The prior's weight falls as the data cover more of the N-axis, so a node that
    has only ever run small batches keeps the datasheet slope above the knee, and says so through
    `coverage`, `knee_observed` and `confidence(N)`.
    """
    prior_hinge = prior.hinge() if isinstance(prior, StepTimePrior) else prior
    # One array of (N, T, C, weight) rows, filtered at once: the advisor refits from a few hundred.
    data = np.array([(sample.tokens_per_step, sample.step_time_s, sample.context_tokens, sample.weight)
                     for sample in samples], dtype=float).reshape(-1, 4)
    n, y, c, w = data.T
    with np.errstate(invalid="ignore"):
        keep = np.all(np.isfinite(data), axis=1) & (n > 0) & (y > 0) & (c >= 0) & (w > 0)
    usable_count = int(np.count_nonzero(keep))
    if not usable_count:
        return StepTimeFit(prior_hinge, prior_hinge, 0, None, None, 0.0, False, None, DATASHEET_CONFIDENCE)

    n, y, c, w = n[keep], y[keep], c[keep], w[keep]
    w = w * (usable_count / np.sum(w))  # weights are relative; the sample count sets the data's say
    y_scale = float(np.median(y))
    sqrt_w = np.sqrt(w) / (SAMPLE_RELATIVE_NOISE * y_scale)

    coverage = _axis_coverage(float(n.min()), float(n.max()), prior_hinge.knee)
    prior_strength = PRIOR_SAMPLES * (1.0 - coverage) + PRIOR_FLOOR
    theta0 = prior_hinge.as_vector()
    # Scales for the prior penalty: half the prior value, with floors so that a near-zero prior
    # (per-token overhead) does not pin its parameter to zero.
    floors = np.array(
        [
            prior_hinge.base_s,
            prior_hinge.base_s / max(float(np.max(c)), 1.0),
            prior_hinge.base_s / prior_hinge.knee,
            0.25 * prior_hinge.base_s / prior_hinge.knee,
        ]
    )
    scales = np.maximum(PRIOR_RELATIVE_SD * np.abs(theta0), PRIOR_RELATIVE_SD * floors)
    penalty_rows = np.diag(math.sqrt(prior_strength) / scales)

    knees = np.geomspace(prior_hinge.knee / 4.0, prior_hinge.knee * 2.0, KNEE_GRID_POINTS)
    costs, thetas = _hinge_costs(n, c, y, sqrt_w, knees, np.diag(penalty_rows), theta0)
    costs = costs + prior_strength * (np.log(knees / prior_hinge.knee) / PRIOR_KNEE_LOG_SD) ** 2
    best_index = int(np.argmin(costs))  # the first of equal costs, as a scan keeping strict improvements
    knee, theta = float(knees[best_index]), thetas[best_index]
    fitted = HingeParameters(
        base_s=float(theta[0]),
        knee=knee,
        slope_s_per_token=float(theta[2]),
        kv_s_per_token=float(theta[1]),
        per_token_s=float(theta[3]),
    )
    residual = y - np.asarray(fitted.step_time(n, c))
    relative_rmse = float(np.sqrt(np.average(residual**2, weights=w)) / y_scale)
    knee_observed = bool(np.any(n < 0.8 * knee) and np.any(n > 1.25 * knee))
    # Quality inside the data: grows with the sample count, falls with scatter (10 % relative
    # scatter costs about a third).
    quality = (1.0 - math.exp(-usable_count / 8.0)) * math.exp(-relative_rmse / 0.25)
    quality = max(quality, DATASHEET_CONFIDENCE * 0.5)
    return StepTimeFit(
        parameters=fitted,
        prior=prior_hinge,
        n_samples=usable_count,
        tokens_min=float(n.min()),
        tokens_max=float(n.max()),
        coverage=coverage,
        knee_observed=knee_observed,
        relative_rmse=relative_rmse,
        quality=float(min(quality, 1.0)),
    )


# ==================================================================================================
# 5. Speedup under load
# ==================================================================================================


def _check_load(batch: float, k: int, draft_ratio: float, context_per_sequence: float) -> None:
    _check_k(k)
    if not math.isfinite(batch) or batch <= 0:
        raise ValueError(f"batch must be a positive number, got {batch!r}")
    if not math.isfinite(draft_ratio) or draft_ratio < 0:
        raise ValueError(f"draft cost ratio must be ≥ 0, got {draft_ratio!r}")
    if not math.isfinite(context_per_sequence) or context_per_sequence < 0:
        raise ValueError(f"context per sequence must be ≥ 0, got {context_per_sequence!r}")


def verify_ratio(model: StepTimeModel, batch: float, k: int, context_per_sequence: float = 0.0) -> float:
    """ρ_v = T(b·(k+1), C) / T(b, C): what verifying k+1 tokens per sequence costs over one.

    The context C = b·s̄ is the same for both: verification reads each sequence's KV cache once.
    """
    _check_load(batch, k, 0.0, context_per_sequence)
    context = batch * context_per_sequence
    return float(model.step_time(batch * (k + 1), context)) / float(model.step_time(batch, context))


def speedup(
    model: StepTimeModel,
    batch: float,
    k: int,
    length: float,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
) -> float:
    """S(b) = L·T(b, C) / (T(b·(k+1), C) + k·r·T(b, C)), with C = b·s̄ (DESIGN §3)."""
    _check_load(batch, k, draft_ratio, context_per_sequence)
    if not math.isfinite(length) or length < 1:
        raise ValueError(f"acceptance length must be ≥ 1, got {length!r}")
    context = batch * context_per_sequence
    plain = float(model.step_time(batch, context))
    speculative = float(model.step_time(batch * (k + 1), context)) + k * draft_ratio * plain
    return length * plain / speculative


def break_even_length_at_load(
    model: StepTimeModel, batch: float, k: int, draft_ratio: float, context_per_sequence: float = 0.0
) -> float:
    """The acceptance length that pays at this load: ρ_v(b) + k·r. At low load it is 1 + k·r."""
    _check_load(batch, k, draft_ratio, context_per_sequence)
    return break_even_length(k, draft_ratio, verify_ratio(model, batch, k, context_per_sequence))


def length_for_speedup(
    target_speedup: float,
    model: StepTimeModel,
    batch: float,
    k: int,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
) -> float:
    """The acceptance length that would give `target_speedup` at this load (S is linear in L).

    May exceed k+1, meaning no acceptance can reach it with this k.
    """
    if not math.isfinite(target_speedup) or target_speedup <= 0:
        raise ValueError("target speedup must be positive")
    return target_speedup * break_even_length_at_load(model, batch, k, draft_ratio, context_per_sequence)


@dataclass(frozen=True)
class Crossover:
    """Where S(b) falls through 1 as concurrency rises."""

    concurrency: float | None  # b× with S(b×) = 1; None when it does not cross in range
    state: str  # "crosses", "never_pays" (S < 1 from b = 1) or "pays_throughout" (S ≥ 1 up to max_batch)
    max_batch: float


def crossover_concurrency(
    model: StepTimeModel,
    k: int,
    length: float,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
    max_batch: float = 1024.0,
) -> Crossover:
    """The concurrency b× at which S(b×) = 1, for b in [1, max_batch] with context per sequence fixed.

    Scans a log grid for the first fall through 1, then bisects. Long contexts can keep S ≥ 1 over
    the whole range (KV reads dominate and verification stays cheap): then there is no crossover.
    """
    _check_load(1.0, k, draft_ratio, context_per_sequence)
    if not math.isfinite(max_batch) or max_batch < 1:
        raise ValueError("max_batch must be ≥ 1")

    def excess(b: float) -> float:
        return speedup(model, b, k, length, draft_ratio, context_per_sequence) - 1.0

    if excess(1.0) < 0:
        return Crossover(None, "never_pays", max_batch)
    hinge = model.parameters if isinstance(model, StepTimeFit) else model
    if isinstance(hinge, HingeParameters) and _plain_hinge(hinge):
        crossing = _hinge_crossing(hinge, k, length, draft_ratio, context_per_sequence, max_batch)
        if crossing is None:
            return Crossover(None, "pays_throughout", max_batch)
        return Crossover(crossing, "crosses", max_batch)
    grid = np.geomspace(1.0, max_batch, 96)
    previous = 1.0
    for b in grid[1:]:
        if excess(float(b)) < 0:
            low, high = previous, float(b)
            for _ in range(60):
                middle = 0.5 * (low + high)
                if excess(middle) >= 0:
                    low = middle
                else:
                    high = middle
            return Crossover(0.5 * (low + high), "crosses", max_batch)
        previous = float(b)
    return Crossover(None, "pays_throughout", max_batch)


def _plain_hinge(h: HingeParameters) -> bool:
    """A hinge with finite, non-negative terms and a positive base: T > 0 for every N."""
    values = (h.base_s, h.knee, h.slope_s_per_token, h.kv_s_per_token, h.per_token_s)
    return all(math.isfinite(v) and v >= 0 for v in values) and h.base_s > 0


def _hinge_crossing(h: HingeParameters, k: int, length: float, draft_ratio: float,
                    context_per_sequence: float, max_batch: float) -> float | None:
    """The first b in (1, max_batch] where S(b) falls below 1, solved exactly for a hinge.

    S(b) < 1 ⇔ g(b) = (L − k·r)·T(b, b·s̄) − T(b·(k+1), b·s̄) < 0, and for a hinge g is piecewise
    linear in b with breaks where b or b·(k+1) reaches the knee: on each piece the root is one
    division. The caller has checked S(1) ≥ 1. None when S stays ≥ 1 up to max_batch.
    """
    gain = length - k * draft_ratio
    wide = k + 1.0
    linear = h.kv_s_per_token * context_per_sequence  # seconds per unit of b from the context

    def g(b: float) -> float:
        plain = h.base_s + linear * b + h.per_token_s * b + h.slope_s_per_token * max(0.0, b - h.knee)
        verify = (h.base_s + linear * b + h.per_token_s * wide * b
                  + h.slope_s_per_token * max(0.0, wide * b - h.knee))
        return gain * plain - verify

    breaks = sorted({b for b in (h.knee / wide, h.knee) if 1.0 < b < max_batch})
    low, g_low = 1.0, g(1.0)
    for high in (*breaks, max_batch):
        g_high = g(high)
        if g_high < 0:
            if g_low < 0:  # only at b = 1 itself, within rounding of the caller's check
                return low
            # linear on [low, high]: g(low) ≥ 0 > g(high)
            root = low + (high - low) * g_low / (g_low - g_high)
            return min(max(root, low), high)
        low, g_low = high, g_high
    return None


@dataclass(frozen=True)
class KChoice:
    """The best chain length k′ at a load and what it would give (k′ = 0 means speculation off)."""

    k: int
    length: float
    speedup: float
    extrapolated: bool


def best_k(
    model: StepTimeModel,
    batch: float,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
    *,
    rates: Sequence[float] | None = None,
    length: float | None = None,
    k: int | None = None,
    k_max: int | None = None,
) -> KChoice:
    """The k′ in 0..k_max (default: the measured k, so no extrapolation) with the highest S at b.

    Uses exact per-position data when given (`rates`), else the i.i.d. α from (`length`, `k`).
    """
    if rates is not None:
        measured_k = len(rates)
        if measured_k == 0:
            raise ValueError("per-position rates must be non-empty")
    elif length is not None and k is not None:
        _check_k(k)
        measured_k = int(k)
    else:
        raise ValueError("best_k needs per-position rates, or a length and its k")
    top = measured_k if k_max is None else int(k_max)
    best = KChoice(0, 1.0, 1.0, False)
    exact: list[float] = []  # L(k′) for k′ ≤ the measured k: 1 + the first k′ rates (length_at_k)
    if rates is not None:
        total = 0.0
        for p in rates:
            total += min(max(float(p), 0.0), 1.0)  # as np.clip, NaN included
            exact.append(1.0 + total)
    for candidate in range(1, top + 1):
        if candidate <= len(exact):
            estimate = LengthAtK(candidate, exact[candidate - 1], False, "per-position")
        elif rates is not None:
            estimate = length_at_k(rates, candidate)
        else:
            estimate = length_at_k_iid(length, measured_k, candidate)
        value = speedup(model, batch, candidate, estimate.length, draft_ratio, context_per_sequence)
        if value > best.speedup:
            best = KChoice(candidate, estimate.length, value, estimate.extrapolated)
    return best


# ==================================================================================================
# 6. A speculation schedule by batch size (vLLM's num_speculative_tokens_per_batch_size)
# ==================================================================================================

# A range keeps speculation on only if its expected gain clears this margin over plain decoding:
# inside it the estimate's own error (datasheet level, noisy windows) could turn a gain into a loss.
SCHEDULE_MARGIN = 0.05


@dataclass(frozen=True)
class ScheduleRange:
    """Batch sizes start..end (inclusive) run with k draft tokens (0: speculation off)."""

    start: int
    end: int
    k: int
    length: float  # L(k) used for the range (1 for k = 0)
    speedup_vs_off: tuple[float, float]  # min, max over the range
    speedup_vs_current: tuple[float, float] | None  # against the static k in use, when one is
    extrapolated: bool  # beyond the observed batch sizes, or k beyond the measured chain
    evidence: str

    def to_dict(self) -> dict[str, object]:
        return {
            "start": self.start,
            "end": self.end,
            "k": self.k,
            "acceptance_length": round(self.length, 4),
            "speedup_vs_off": [round(v, 4) for v in self.speedup_vs_off],
            "speedup_vs_current": None if self.speedup_vs_current is None
            else [round(v, 4) for v in self.speedup_vs_current],
            "extrapolated": self.extrapolated,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class SpeculationSchedule:
    ranges: tuple[ScheduleRange, ...]
    max_batch: int
    k_max: int
    current_k: int | None

    @property
    def entries(self) -> list[list[int]]:
        """The schedule as vLLM takes it: inclusive [[start, end, k], ...] from batch size 1."""
        return [[r.start, r.end, r.k] for r in self.ranges]

    @property
    def never_pays(self) -> bool:
        return all(r.k == 0 for r in self.ranges)


def speculation_schedule(
    model: StepTimeModel,
    rates: Sequence[float],
    draft_ratio: float,
    context_per_sequence: float = 0.0,
    *,
    k_max: int | None = None,
    max_batch: int = 256,
    current_k: int | None = None,
    observed_batch: tuple[float, float] | None = None,
    margin: float = SCHEDULE_MARGIN,
) -> SpeculationSchedule:
    """For b = 1..max_batch, the k′ in 0..k_max with the highest S(b, k′), merged into ranges.

    L(k′) comes from the per-position rates (exact for k′ ≤ the measured k, extrapolated beyond).
    A batch size whose best gain does not clear `margin` gets k = 0. Ranges outside the observed
    batch sizes, or using a k′ beyond the measured chain, are marked extrapolated: there the step
    time is the prior's, not a measurement.
    """
    measured_k = len(rates)
    if measured_k == 0:
        raise ValueError("per-position rates must be non-empty")
    top = measured_k if k_max is None else int(k_max)
    if top < 0 or max_batch < 1:
        raise ValueError("k_max must be ≥ 0 and max_batch ≥ 1")
    lengths = {k: length_at_k(rates, k) for k in range(0, top + 1)}
    choices: list[tuple[int, float, float | None]] = []  # (k, S vs off, S vs current) per batch size
    for b in range(1, max_batch + 1):
        best_k, best_s = 0, 1.0
        for k in range(1, top + 1):
            s = speedup(model, b, k, lengths[k].length, draft_ratio, context_per_sequence)
            if s > best_s:
                best_k, best_s = k, s
        if best_s < 1.0 + margin:
            best_k, best_s = 0, 1.0
        vs_current = None
        if current_k:
            current = speedup(model, b, current_k, length_at_k(rates, current_k).length, draft_ratio,
                              context_per_sequence)
            vs_current = best_s / current
        choices.append((best_k, best_s, vs_current))

    ranges: list[ScheduleRange] = []
    start = 1
    for b in range(2, max_batch + 2):
        if b <= max_batch and choices[b - 1][0] == choices[start - 1][0]:
            continue
        end = b - 1
        k = choices[start - 1][0]
        span = choices[start - 1:end]
        s_off = (min(c[1] for c in span), max(c[1] for c in span))
        s_cur = None
        if current_k:
            s_cur = (min(c[2] for c in span), max(c[2] for c in span))  # type: ignore[type-var]
        outside = observed_batch is None or start < observed_batch[0] or end > observed_batch[1]
        beyond_k = k > measured_k
        if observed_batch is None:
            evidence = "no batch sizes observed: step time from the prior"
        elif outside:
            evidence = (f"observed batch {observed_batch[0]:.0f}–{observed_batch[1]:.0f}: "
                        "outside it the step time is extrapolated")
        else:
            evidence = f"inside the observed batch sizes {observed_batch[0]:.0f}–{observed_batch[1]:.0f}"
        if k:
            evidence += f"; L({k}) = {lengths[k].length:.2f} from {lengths[k].basis} rates"
        else:
            evidence += f"; no k up to {top} gains {margin:.0%} here"
        ranges.append(ScheduleRange(start, end, k, lengths[k].length if k else 1.0, s_off, s_cur,
                                    outside or beyond_k, evidence))
        start = b
    return SpeculationSchedule(tuple(ranges), max_batch, top, current_k)
