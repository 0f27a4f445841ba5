"""Step time T(N, C) (N tokens per step, C context tokens in the batch): a datasheet prior and an
online hinge fit regularised toward it.

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

import math
import itertools
from functools import lru_cache
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from specwatch.perf.hardware import GpuSpec, ModelSpec
from specwatch.perf.formats import WEIGHT_FORMATS, WEIGHT_ONLY_GEMM_EFFICIENCY, weight_format_key
from specwatch.perf.layout import (ALLTOALL_LATENCY_S, EP_IMBALANCE, GPUS_PER_NODE, NIC_BANDWIDTH,
                                   NVLINK_ALLTOALL_EFFICIENCY, parallel_layout)


__all__ = [
    "BANDWIDTH_EFFICIENCY",
    "FLOPS_EFFICIENCY",
    "STEP_OVERHEAD_S",
    "STEP_FIXED_OVERHEAD_S",
    "LAYER_OVERHEAD_S",
    "step_overhead_s",
    "PER_TOKEN_OVERHEAD_S",
    "SMALL_GEMM_FRACTION",
    "ALLREDUCE_LATENCY_S",
    "MOE_LAYER_LATENCY_S",
    "EXPERT_BANDWIDTH_EFFICIENCY",
    "ASSUMED_DEPTH",
    "SOFT_MAX_POWER",
    "DATASHEET_CONFIDENCE",
    "StepTimeModel",
    "HingeParameters",
    "StepTimePrior",
    "WEIGHT_FORMATS",
    "WEIGHT_ONLY_GEMM_EFFICIENCY",
    "weight_format_key",
    "datasheet_prior",
    "prior_for_model",
    "StepSample",
    "PRIOR_RELATIVE_SD",
    "PRIOR_KNEE_LOG_SD",
    "PRIOR_SAMPLES",
    "PRIOR_FLOOR",
    "KNEE_GRID_POINTS",
    "SAMPLE_RELATIVE_NOISE",
    "AXIS_KNEE_MULTIPLE",
    "UNKNOWN_SHAPE_KNEE_LOG_SD",
    "StepTimeFit",
    "fit_step_time",
    "fit_step_time_rows",
]


# Efficiencies that turn datasheet roofs into what a decode step sees (model.md §2, gpu.md §3):
# DRAM reaches about 80 % of peak in practice (DCGM profiling docs); GEMMs at M ≈ 32–256 tokens
# run at 40–70 % of the tensor peak, of which 0.7 is the upper end a tuned engine reaches near the
# knee. The resulting knee sits at 0.7/0.8 ≈ 0.875 of the datasheet ridge (H100 SXM ≈ 258).
BANDWIDTH_EFFICIENCY = 0.8
FLOPS_EFFICIENCY = 0.7
# Fixed cost of one engine step beyond reading the weights: scheduling, kernel launches (with CUDA
# graphs), sampling set-up. About 1 ms in vLLM on a single GPU for a 32-layer model; rough, the
# online fit replaces it. When the depth is known it is split into a part per step (the scheduler,
# input preparation, sampling set-up) and a part per layer: with CUDA graphs each layer's 8–10
# kernels leave a launch-and-tail gap of 2–3 µs each, about 15 µs a layer, so an 80-layer model
# pays about 1.6 ms where a 32-layer one pays 0.9 ms.
STEP_OVERHEAD_S = 1.0e-3
STEP_FIXED_OVERHEAD_S = 0.4e-3
LAYER_OVERHEAD_S = 15.0e-6
# Cost per token in the step that is not a GEMM: sampling, rejection, bookkeeping. Rough.
PER_TOKEN_OVERHEAD_S = 2.0e-6
# Below the knee a decode GEMM is bound by the weight read, but the math does not hide under it
# completely: tiles wait on their loads, and GEMMs at M ≈ 16–256 reach only 40–70 % of the tensor
# peak. Half of the math time showing on top of the read is the middle of that range; it is the
# per-token engine cost that makes speedups fall well before the knee. The online fit's per-token
# term measures it on the node.
SMALL_GEMM_FRACTION = 0.5
# Tensor parallelism: two all-reduces per layer (attention output, MLP output); each costs a launch
# latency plus a ring transfer of 2(tp−1)/tp of the activations.
ALLREDUCE_LATENCY_S = 8.0e-6
# A MoE layer's expert block costs a fixed latency and then its reads, one after the other: a dozen
# kernels besides attention (the router GEMM, the top-k or grouped top-k, the token sort that lays
# tokens out per expert, the activations' quantisation, two grouped GEMMs and the activation
# between, the weighted combine, and on several GPUs the collective after it) pay their launches
# and tails however little they read, and the grouped GEMMs then stream the experts the step's
# tokens touch. 45 µs a MoE layer, and the expert bandwidth below, hold two published step-time
# series from different engines, models and GPUs within 7 % at every load (benchmarks/
# moe_step_times.py): DeepSeek-R1 FP8 on 8×H200 in SGLang 0.5.7 at 8–64 running (SemiAnalysis
# InferenceX issue #870: 12.7 / 18.4 / 26.5 / 34.9 ms against 12.8 / 17.2 / 25.6 / 34.6) and
# gpt-oss-120b MXFP4 on 8×H100 in vLLM at 4–64 (InferenceX issue #828: 3.68 ms at 4 against 3.72,
# 7.22 at 64 against 7.36). The law before (a 150 µs floor the reads hid under) fitted the first
# and priced the second 1.9× too dear at 4 running, with a rise from 4 to 64 a fifth of the
# published one. Reads in series also price a verify step's extra experts at low load: TensorRT-
# LLM's DeepSeek-R1 MTP sweep on 8×B200 (tech blog 1) leaves its drafts 0.97 of their own roofline
# where the floor needed 1.31, and Kimi-K2.6's 2.03× at concurrency 1 on GB200 (vLLM blog,
# EAGLE 3.1) asks an acceptance length of 2.9 (its EAGLE-3 predecessor's card: 3.0) where the floor
# asked 2.2.
# Engines differ a great deal in the fixed part (SGLang ran DeepSeek-V3 at 22.9 ms a step at batch
# 1 on 8×H200 in early 2025, where this law says 6.4): a published baseline step anchors it
# (`predict --tpot-ms`), and the online fit moves the level.
MOE_LAYER_LATENCY_S = 45.0e-6
# Grouped GEMMs over many small experts read their weights at a lower rate than one dense GEMM:
# each expert is a few MB a GPU, its tile rows padded to the tile, and the launch and tail are paid
# per expert block. About 0.55 of the datasheet bandwidth (0.8 for a dense read) is what the
# published step times above rise by with the number of experts touched.
EXPERT_BANDWIDTH_EFFICIENCY = 0.55
# The depth a prior assumes where the layer count is not known (STEP_OVERHEAD_S is a 32-layer
# model's): a custom MoE from --params pays 32 layers' expert-block latencies.
ASSUMED_DEPTH = 32
# Soft maximum exponent for the weight-read vs GEMM-compute overlap (model.md §2: p ≈ 4).
SOFT_MAX_POWER = 4.0
# A datasheet prior is right in shape but 20–70 % off in level (model.md §0), so it earns a modest
# confidence on its own.
DATASHEET_CONFIDENCE = 0.4


def step_overhead_s(layers: int | None = None) -> float:
    """The fixed cost of one engine step: the part per step and per layer when the depth is known,
    else the whole of a 32-layer model's (see STEP_OVERHEAD_S)."""
    return STEP_FIXED_OVERHEAD_S + LAYER_OVERHEAD_S * layers if layers else STEP_OVERHEAD_S


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
            above = n_tokens - self.knee  # max(0.0, above), without the call (NaN and −0.0 alike give 0.0)
            return (self.base_s + self.kv_s_per_token * context_tokens + self.per_token_s * n_tokens
                    + self.slope_s_per_token * (above if above > 0.0 else 0.0))
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
    small_gemm_fraction: float = 0.0  # share of the GEMM math not hidden under the weight read
    moe_layers: int = 0  # layers that route over experts (each expert block a fixed latency and its reads)
    expert_latency_s: float = 0.0  # a MoE layer's expert block's fixed latency, beside its reads (MOE_LAYER_LATENCY_S)
    expert_bandwidth: float | None = None  # the rate grouped GEMMs read experts at (None: bandwidth)
    # Tokens the MoE layers see per token of this rank: the data-parallel attention ranks whose
    # tokens meet in the experts (1 without DP attention).
    expert_token_scale: float = 1.0
    alltoall_count: int = 0  # dispatch-and-combine pairs per step (one per MoE layer under EP)
    alltoall_bytes_per_token: float = 0.0  # dispatch and combine bytes a token sends
    alltoall_bandwidth: float | None = None
    expert_gpus: int = 1  # the GPUs the routed experts are spread over under expert parallelism (1: none)

    def weight_bytes(self, n_tokens: float | np.ndarray) -> float | np.ndarray:
        n = np.asarray(n_tokens, dtype=float)
        if not self.experts or not self.experts_per_token or self.expert_weight_bytes <= 0:
            return _as_output(np.full_like(n, self.shared_weight_bytes))
        # Uniform routing: each layer's N tokens touch E·(1 − (1 − k_e/E)^N) of its E experts (with
        # DP attention, N is every DP rank's tokens: they meet in the experts).
        untouched = (1.0 - self.experts_per_token / self.experts) ** (np.maximum(n, 1.0) * self.expert_token_scale)
        return _as_output(self.shared_weight_bytes + self.expert_weight_bytes * (1.0 - untouched))

    def _comm_time(self, n: np.ndarray) -> np.ndarray:
        return self.allreduce_s(n) + self.alltoall_s(n)

    def allreduce_s(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """The tensor-parallel all-reduces of a step of N tokens: a launch each and the ring's bytes."""
        n = np.asarray(n_tokens, dtype=float)
        if self.allreduce_count == 0:
            return np.zeros_like(n)
        transfer = 0.0
        if self.link_bandwidth:
            transfer = self.allreduce_bytes_per_token * n / self.link_bandwidth
        return self.allreduce_count * (ALLREDUCE_LATENCY_S + transfer)

    def alltoall_s(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """Expert parallelism's dispatch and combine of a step of N tokens: their volume grows with
        the tokens, verified positions included."""
        n = np.asarray(n_tokens, dtype=float)
        if self.alltoall_count == 0 or not self.alltoall_bandwidth:
            return np.zeros_like(n)
        return self.alltoall_count * (2.0 * ALLTOALL_LATENCY_S + self.alltoall_bytes_per_token * n
                                      / self.alltoall_bandwidth)

    def expert_bytes(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """The routed experts' bytes a step of N tokens reads (the union they touch), per GPU."""
        return np.asarray(self.weight_bytes(n_tokens)) - self.shared_weight_bytes

    def expert_blocks_s(self, n_tokens: float | np.ndarray) -> np.ndarray:
        """Seconds the MoE layers' expert blocks take at N tokens: each layer's fixed latency, then
        its grouped GEMMs' read of the experts touched at the expert bandwidth (MOE_LAYER_LATENCY_S)."""
        n = np.asarray(n_tokens, dtype=float)
        if self.moe_layers <= 0:
            return np.zeros_like(n)
        reads = self.expert_bytes(n) / (self.expert_bandwidth or self.bandwidth)
        return self.moe_layers * self.expert_latency_s + reads

    def step_time(self, n_tokens: float | np.ndarray, context_tokens: float | np.ndarray = 0.0) -> float | np.ndarray:
        n = np.asarray(n_tokens, dtype=float)
        c = np.asarray(context_tokens, dtype=float)
        if self.moe_layers > 0:
            read = self.shared_weight_bytes / self.bandwidth + self.expert_blocks_s(n)
        else:
            read = np.asarray(self.weight_bytes(n)) / self.bandwidth
        math_time = self.flops_per_token * n / self.flops
        # Below the knee a share of the math shows on top of the read; past it the math is the
        # whole GEMM cost, counted once.
        exposed = read + self.small_gemm_fraction * math_time
        gemm = (exposed**SOFT_MAX_POWER + math_time**SOFT_MAX_POWER) ** (1.0 / SOFT_MAX_POWER)
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
        alltoall_base = 0.0
        if self.alltoall_count and self.alltoall_bandwidth:
            link_term += self.alltoall_count * self.alltoall_bytes_per_token / self.alltoall_bandwidth
            alltoall_base = self.alltoall_count * 2.0 * ALLTOALL_LATENCY_S
        read_s = (self.shared_weight_bytes / self.bandwidth + float(self.expert_blocks_s(1e9))  # every expert touched
                  if self.moe_layers > 0 else (self.shared_weight_bytes + self.expert_weight_bytes) / self.bandwidth)
        math_per_token = self.flops_per_token / self.flops
        hidden = 1.0 - self.small_gemm_fraction
        # max(W + f·g·N, g·N) as a hinge: f·g per token throughout, (1 − f)·g more past W/((1 − f)·g).
        return HingeParameters(
            base_s=self.overhead_s + read_s + self.allreduce_count * ALLREDUCE_LATENCY_S + alltoall_base,
            knee=read_s / (hidden * math_per_token) if hidden > 0 else self.knee_tokens,
            slope_s_per_token=hidden * math_per_token,
            kv_s_per_token=self.kv_bytes_per_token / self.bandwidth,
            per_token_s=self.per_token_s + link_term + self.small_gemm_fraction * math_per_token,
        )


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
    moe_layers: int | None = None,
    kv_replicated: bool = False,
    ep: int | None = None,
    dp_attention: bool = False,
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY,
    flops_efficiency: float = FLOPS_EFFICIENCY,
) -> StepTimePrior:
    """The datasheet step-time prior for a model on `tp` GPUs of one kind.

    Tensor parallelism divides weights, FLOPs and KV bytes across the GPUs (so it leaves the knee
    where it is) and adds two all-reduces per layer when the layer count is known. A mixture of
    experts' MoE layers (`moe_layers`, else all of them, else ASSUMED_DEPTH) read their experts in
    grouped GEMMs after a fixed latency each (MOE_LAYER_LATENCY_S) at EXPERT_BANDWIDTH_EFFICIENCY.
    `kv_bytes_per_token` is the whole model's BF16 KV bytes per context token; `kv_replicated` says
    every rank holds that cache whole (MLA's latent), so it is not split.

    Expert parallelism (`ep`, a MoE only) spreads the routed experts over `ep` GPUs, each holding
    its share whole, and trades the MoE layers' all-reduce for a dispatch and a combine. Without
    `dp_attention` the experts live on the `tp` GPUs (`ep` divides `tp`; the rest of the split is
    each expert's tensor parallelism, as TensorRT-LLM's TP 8 × EP 2). With it, the deployment is `ep`
    GPUs, attention runs data-parallel in groups of `tp` (1: every GPU its own requests, with the
    non-expert weights whole) and the prior is one such rank's: its tokens N are its own, the
    experts see every rank's.
    """
    dtype = weight_format_key(dtype)
    if not (params > 0 and math.isfinite(params)):
        raise ValueError("params must be a positive number")
    if kv_bytes_per_token < 0 or not math.isfinite(kv_bytes_per_token):
        raise ValueError("KV bytes per token must be ≥ 0")
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ValueError(f"tp must be an integer ≥ 1, got {tp!r}")
    active = params if active_params is None else active_params
    if not (0 < active <= params):
        raise ValueError("active params must be positive and at most the total params")
    bytes_per_weight, precision = WEIGHT_FORMATS[dtype]
    weight_only = precision == "bf16" and bytes_per_weight < 2.0
    gemm_rate = WEIGHT_ONLY_GEMM_EFFICIENCY if weight_only else 1.0
    moe = bool(experts and experts_per_token and active < params)
    gpus, ranks = parallel_layout(tp, ep, dp_attention, moe, experts)
    if moe:
        # Solve shared + routed/E·k_e = active, shared + routed = total for the routed share.
        routed_params = (params - active) / (1.0 - experts_per_token / experts)
        routed_layers = moe_layers or layers or ASSUMED_DEPTH
    else:
        routed_params = 0.0
        experts = experts_per_token = None
        routed_layers = 0
    routed_active = routed_params * experts_per_token / experts if moe else 0.0
    expert_parallel = bool(ep and ep > 1)
    # The busiest expert-parallel rank's share of the expert math: the tokens meeting in the experts
    # (every DP rank's), spread over the GPUs holding them, unevenly.
    expert_math = routed_active * ranks / gpus * (EP_IMBALANCE if expert_parallel else 1.0)
    if expert_parallel:
        # attention's all-reduce only, where its tensor parallelism has one; the MoE's is an all-to-all
        allreduces = layers if (tp > 1 and layers) else 0
    else:
        allreduces = 2 * layers if (tp > 1 and layers) else 0
    ring_bytes = (2.0 * (tp - 1) / tp) * hidden_size * 2.0 if (tp > 1 and hidden_size) else 0.0
    alltoalls, alltoall_bytes, alltoall_bandwidth = 0, 0.0, None
    if expert_parallel and hidden_size:
        alltoalls = routed_layers
        # each token goes to the ranks of its top-k experts (at most ep of them), FP8 out, BF16 back
        alltoall_bytes = min(experts_per_token, ep) * hidden_size * (1.0 + 2.0)
        alltoall_bandwidth = (NIC_BANDWIDTH if gpus > GPUS_PER_NODE or not gpu.interconnect_bandwidth
                              else gpu.interconnect_bandwidth * NVLINK_ALLTOALL_EFFICIENCY)
    overhead = step_overhead_s(layers)
    return StepTimePrior(
        overhead_s=overhead,
        shared_weight_bytes=bytes_per_weight * (params - routed_params) / tp,
        expert_weight_bytes=bytes_per_weight * routed_params / gpus,
        experts=experts,
        experts_per_token=experts_per_token,
        flops_per_token=2.0 * ((active - routed_active) / tp + expert_math),
        kv_bytes_per_token=kv_bytes_per_token if kv_replicated else kv_bytes_per_token / tp,
        bandwidth=gpu.memory_bandwidth * bandwidth_efficiency,
        flops=gpu.peak_flops(precision) * flops_efficiency * gemm_rate,
        per_token_s=PER_TOKEN_OVERHEAD_S,
        small_gemm_fraction=SMALL_GEMM_FRACTION,
        allreduce_count=allreduces,
        allreduce_bytes_per_token=ring_bytes,
        link_bandwidth=gpu.interconnect_bandwidth,
        moe_layers=routed_layers,
        expert_latency_s=MOE_LAYER_LATENCY_S if routed_layers else 0.0,
        expert_bandwidth=gpu.memory_bandwidth * EXPERT_BANDWIDTH_EFFICIENCY if routed_layers else None,
        expert_token_scale=float(ranks),
        alltoall_count=alltoalls,
        alltoall_bytes_per_token=alltoall_bytes,
        alltoall_bandwidth=alltoall_bandwidth,
        expert_gpus=gpus if expert_parallel else 1,
    )


def prior_for_model(gpu: GpuSpec, model: ModelSpec, *, tp: int = 1, dtype: str = "bf16", ep: int | None = None,
                    dp_attention: bool = False) -> StepTimePrior:
    """The datasheet prior for a model from the architecture table (with expert parallelism and DP
    attention as `datasheet_prior` lays them out)."""
    return datasheet_prior(
        gpu,
        params=model.params,
        active_params=model.active_params,
        kv_bytes_per_token=model.kv_bytes_per_token,
        kv_replicated=model.kv_replicated_under_tp,
        tp=tp,
        dtype=dtype,
        layers=model.layers,
        hidden_size=model.hidden_size,
        experts=model.experts,
        experts_per_token=model.experts_per_token,
        moe_layers=model.moe_layers or None,
        ep=ep,
        dp_attention=dp_attention,
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
# When the prior's shape is not known (no GPU identified: a CPU, an unlisted accelerator, a sweep
# fitted from its own points), the knee may lie anywhere from one token up, and a token past it, or
# below it, may cost up to a whole flat step: the prior then keeps only its level, and the data's
# curvature decides where the knee is and how steep the rise.
UNKNOWN_SHAPE_KNEE_LOG_SD = math.log(16.0)


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


# The 14 proper non-empty sets of free parameters of the 4-parameter hinge, grouped by size: a least
# squares with θ ≥ 0 is solved exactly by the best feasible solution over these, all four free, and
# θ = 0.
_FREE_SETS = {
    size: np.array(list(itertools.combinations(range(4), size)), dtype=np.intp) for size in range(1, 4)
}
# Where the columns shared by every knee (1, C, N) sit among (base, kv, slope, per-token), and the
# diagonal of the 4×4 systems.
_SHARED = np.array([0, 1, 3], dtype=np.intp)
_DIAGONAL = np.arange(4)


def _hinge_costs(n: np.ndarray, c: np.ndarray, y: np.ndarray, sqrt_w: np.ndarray, knees: np.ndarray,
                 penalty: np.ndarray, theta0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every knee: min ‖W(Xθ − y)‖² + ‖P(θ − θ0)‖² over θ ≥ 0, X = [1, C, max(0, N − knee), N].

    Returns the costs (one per knee) and the minimisers (knees × 4). All knees are solved at once
    from their normal equations: only the hinge column depends on the knee, so the 4×4 Gram
    matrices cost one (knees × samples) product. The non-negativity is exact, as an active-set
    enumeration: every set of free parameters is solved, the others held at zero, and the cheapest
    feasible solution is kept (when the unconstrained one is feasible it is that one, and the others
    are not solved). Columns are scaled to unit diagonal before solving, which keeps the small
    systems well conditioned.
    """
    hinge = np.maximum(0.0, n[None, :] - knees[:, None]) * sqrt_w  # knees × samples
    shared = np.column_stack([sqrt_w, c * sqrt_w, n * sqrt_w])  # samples × 3: the 1, C, N columns
    yw = y * sqrt_w
    count = knees.size
    gram = np.empty((count, 4, 4))
    rhs = np.empty((count, 4))
    shared_gram = shared.T @ shared
    cross = hinge @ shared  # knees × 3
    gram[:, _SHARED[:, None], _SHARED[None, :]] = shared_gram  # the same for every knee
    gram[:, _SHARED, 2] = cross
    gram[:, 2, _SHARED] = cross
    gram[:, 2, 2] = np.einsum("ks,ks->k", hinge, hinge)
    rhs[:, _SHARED] = shared.T @ yw
    rhs[:, 2] = hinge @ yw
    penalty_sq = penalty * penalty
    gram[:, _DIAGONAL, _DIAGONAL] += penalty_sq
    rhs += penalty_sq * theta0
    total = float(yw @ yw) + float(penalty_sq @ (theta0 * theta0))
    scale = 1.0 / np.sqrt(gram[:, _DIAGONAL, _DIAGONAL])  # > 0: every column has its penalty row
    gram *= scale[:, :, None] * scale[:, None, :]
    rhs *= scale

    # The unconstrained minimiser first: the problem is convex, so where it is feasible (θ ≥ 0; most
    # knees, since the prior pulls toward a positive θ0) it is the constrained minimiser too, and the
    # smaller sets are solved only for the knees where it is not (a third of a refit's cost).
    whole = np.linalg.solve(gram, rhs[..., None])[..., 0]
    feasible = (whole >= 0.0).all(axis=1)
    best_cost = np.where(feasible, total - np.einsum("ki,ki->k", whole, rhs), total)  # θ = 0 is always feasible
    best_theta = np.where(feasible[:, None], whole * scale, 0.0)
    if feasible.all():
        return best_cost, best_theta
    rows = np.flatnonzero(~feasible)
    gram, rhs, scale = gram[rows], rhs[rows], scale[rows]
    count = rows.size
    rows_cost = np.full(count, total)
    rows_theta = np.zeros((count, 4))
    knee_rows = np.arange(count)
    for sets in _FREE_SETS.values():
        # knees × sets × size × size systems, solved in one call
        sub_gram = gram[:, sets[:, :, None], sets[:, None, :]]
        sub_rhs = rhs[:, sets]
        z = np.linalg.solve(sub_gram, sub_rhs[..., None])[..., 0]
        cost = total - np.einsum("ksi,ksi->ks", z, sub_rhs)  # at the optimum: ‖b‖² − zᵀg
        cost = np.where((z >= 0.0).all(axis=2), cost, np.inf)
        pick = cost.argmin(axis=1)
        picked_cost = cost[knee_rows, pick]
        better = picked_cost < rows_cost
        if better.any():
            theta = np.zeros((count, 4))
            theta[knee_rows[:, None], sets[pick]] = z[knee_rows, pick]
            rows_cost = np.where(better, picked_cost, rows_cost)
            rows_theta = np.where(better[:, None], theta * scale, rows_theta)
    best_cost[rows] = rows_cost
    best_theta[rows] = rows_theta
    return best_cost, best_theta


def _median(values: np.ndarray) -> float:
    """np.median of a non-empty array of finite numbers, with the same arithmetic (the middle value,
    or the mean of the middle two) and without np.median's generic machinery, which costs more than
    the sort."""
    ordered = np.sort(values)
    middle = ordered.size // 2
    if ordered.size % 2:
        return float(ordered[middle])
    return float((ordered[middle - 1] + ordered[middle]) / 2.0)


@lru_cache(maxsize=16)
def _knee_grid(low: float, high: float, points: int) -> np.ndarray:
    """np.geomspace(low, high, points), made once per prior knee (the advisor refits every minute
    against the same prior), read-only since it is shared."""
    grid = np.geomspace(low, high, points)
    grid.flags.writeable = False
    return grid


def fit_step_time(samples: Sequence[StepSample], prior: HingeParameters | StepTimePrior, *,
                  shape_known: bool = True) -> StepTimeFit:
    """Fit the hinge T(N, C) to live samples, regularised toward the datasheet prior.

    For each knee on a log grid over [prior/4, 2·prior] (model.md §5.2) it solves a non-negative,
    prior-regularised least squares for (base, kv, slope, per-token) and keeps the knee with the
    lowest total cost. The prior's weight falls as the data cover more of the N-axis, so a node that
    has only ever run small batches keeps the datasheet slope above the knee, and says so through
    `coverage`, `knee_observed` and `confidence(N)`.

    `shape_known=False` says the prior's shape is a guess (no datasheet behind it): its knee is
    searched from one token up under a wide log prior, and the per-token and above-knee costs are
    held only to a whole flat step per token, so a law linear from N = 1 (a CPU) is learned from a
    few loads instead of being pulled back to a GPU's flat line.
    """
    # One array of (N, T, C, weight) rows, filtered at once.
    rows = np.array([(sample.tokens_per_step, sample.step_time_s, sample.context_tokens, sample.weight)
                     for sample in samples], dtype=float)
    return fit_step_time_rows(rows, prior, shape_known=shape_known)


def fit_step_time_rows(rows: np.ndarray, prior: HingeParameters | StepTimePrior, *,
                       shape_known: bool = True) -> StepTimeFit:
    """`fit_step_time` from an array of (N, T, C, weight) rows, one per sample: the advisor refits
    from a few hundred samples a minute, and builds this array without a StepSample for each."""
    prior_hinge = prior.hinge() if isinstance(prior, StepTimePrior) else prior
    data = np.asarray(rows, dtype=float).reshape(-1, 4)
    n, y, c, w = data.T
    with np.errstate(invalid="ignore"):
        keep = np.all(np.isfinite(data), axis=1) & (n > 0) & (y > 0) & (c >= 0) & (w > 0)
    usable_count = int(np.count_nonzero(keep))
    if not usable_count:
        return StepTimeFit(prior_hinge, prior_hinge, 0, None, None, 0.0, False, None, DATASHEET_CONFIDENCE)

    n, y, c, w = n[keep], y[keep], c[keep], w[keep]
    w = w * (usable_count / np.sum(w))  # weights are relative; the sample count sets the data's say
    y_scale = _median(y)
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
    if not shape_known:
        floors[2] = floors[3] = prior_hinge.base_s
    scales = np.maximum(PRIOR_RELATIVE_SD * np.abs(theta0), PRIOR_RELATIVE_SD * floors)
    penalty = math.sqrt(prior_strength) / scales  # the diagonal of the prior's penalty rows

    if shape_known:
        knees = _knee_grid(prior_hinge.knee / 4.0, prior_hinge.knee * 2.0, KNEE_GRID_POINTS)
        knee_log_sd = PRIOR_KNEE_LOG_SD
    else:
        knees = _knee_grid(1.0, max(prior_hinge.knee * 2.0, 2.0), 2 * KNEE_GRID_POINTS)
        knee_log_sd = UNKNOWN_SHAPE_KNEE_LOG_SD
    costs, thetas = _hinge_costs(n, c, y, sqrt_w, knees, penalty, theta0)
    costs = costs + prior_strength * (np.log(knees / prior_hinge.knee) / knee_log_sd) ** 2
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
