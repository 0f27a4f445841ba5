"""A node's telemetry from a step-time law that is NOT specwatch's own (test-only).

specwatch models a step as a hinge (flat weight read, then compute-bound past a knee). This law is
built differently, so a test that passes on it shows the advisor tracking physics it was not
handed:
- kernels run in sequence, as a serving engine runs them: the GEMMs (weight read and math overlap
  smoothly, (W⁴ + G⁴)^¼, not max(W, G)), then attention (its KV read and its FLOPs, overlapping
  the same way), each forward's time the sum of the two. An earlier version put the KV read in one
  soft maximum with the GEMM math, which hides a step's attention under its GEMMs past the knee:
  no engine serves that way (overlapping the two takes a scheduler built for it, as NanoFlow's
  nano-batches or POD-Attention's fused kernels), and on it a hinge with its KV read priced apart
  is optimistic at high load by construction (kept as `kernels_in_sequence=False`, for
  benchmarks/bench_ramp_legs.py's comparison);
- GEMM efficiency rises smoothly with the tokens in a step, eff(N) = eff_max·(1 − e^(−N/n₀)), so
  small steps run far below peak;
- a fixed per-step overhead, and a per-token cost (sampling, rejection, scheduling) linear in N;
- attention: the KV cache of every running sequence is read once a step, and its FLOPs grow with
  the query positions (k+1 per sequence when verifying) times the context, at a low efficiency;
- a draft model runs k forwards of its own at the running batch, each with its own weights, KV
  cache and roofline step; n-gram proposes on the CPU for a small fixed cost.

The counters follow vLLM V1's semantics (window.StepTokens): each request's first token comes from
its prefill; `vllm:iteration_tokens_total` observes prompt tokens computed + tokens emitted per
step; drafts, draft tokens and accepted tokens as vLLM's spec-decode counters count them. The true
crossover is found numerically from the same law (`true_crossover`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from specwatch.telemetry.snapshot import EngineSample, GpuSample, Histogram, Snapshot, SourceStatus, TargetSample

BF16 = 2.0


@dataclass(frozen=True)
class Forward:
    """One model's forward pass on one GPU."""

    params: float
    layers: int
    kv_heads: int
    head_dim: int
    attention_heads: int
    fixed_s: float  # launch and framework overhead per forward

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * BF16

    def time(self, gpu: "Gpu", queries: float, context_tokens: float, context_per_query: float,
             in_sequence: bool = True) -> float:
        """Seconds for a forward over `queries` positions, with `context_tokens` of KV read once and
        each query attending over `context_per_query` tokens; `in_sequence=False` is the earlier law,
        every read in one soft maximum with every FLOP."""
        weights = self.params * BF16 / gpu.bandwidth
        gemm = queries * 2 * self.params / (gpu.peak_flops * gpu.efficiency(queries))
        kv = self.kv_bytes_per_token * context_tokens / gpu.bandwidth
        attention = (queries * context_per_query * 4 * self.layers * self.attention_heads * self.head_dim
                     / (gpu.peak_flops * gpu.attention_efficiency))
        if not in_sequence:
            return self.fixed_s + ((weights + kv) ** 4 + (gemm + attention) ** 4) ** 0.25
        return self.fixed_s + (weights ** 4 + gemm ** 4) ** 0.25 + (kv ** 4 + attention ** 4) ** 0.25


@dataclass(frozen=True)
class Gpu:
    name: str = "NVIDIA H100 80GB HBM3"
    bandwidth: float = 3.35e12 * 0.85
    peak_flops: float = 989e12
    eff_max: float = 0.72
    eff_tokens: float = 110.0  # n₀: the tokens at which a GEMM reaches 63 % of eff_max
    attention_efficiency: float = 0.25

    def efficiency(self, tokens: float) -> float:
        return self.eff_max * (1.0 - math.exp(-max(tokens, 1e-9) / self.eff_tokens))


LLAMA_8B = Forward(params=8.03e9, layers=32, kv_heads=8, head_dim=128, attention_heads=32, fixed_s=0.0015)
LLAMA_1B = Forward(params=1.24e9, layers=16, kv_heads=8, head_dim=64, attention_heads=32, fixed_s=0.0006)


@dataclass(frozen=True)
class LawNode:
    target: Forward = LLAMA_8B
    draft: Forward | None = None  # a draft model; None for n-gram (a CPU proposer)
    gpu: Gpu = Gpu()
    k: int = 4
    per_position: tuple[float, ...] = (0.6, 0.4, 0.25, 0.15)  # P(first i+1 draft tokens accepted)
    per_token_s: float = 2.5e-6  # sampling, rejection and scheduling, per token in the step
    proposer_s: float = 0.0003  # n-gram lookup on the CPU, per step
    context_per_sequence: float = 800.0
    prompt_tokens: float = 32.0
    output_tokens: float = 512.0
    kv_capacity_tokens: float = 400_000.0
    noise: float = 0.02
    kernels_in_sequence: bool = True  # False: the earlier law (Forward.time)
    url: str = "http://law-node:8000"
    model_name: str = "meta-llama/Llama-3.1-8B-Instruct"

    @property
    def acceptance_length(self) -> float:
        return 1.0 + sum(self.per_position[: self.k])

    def step(self, b: float, speculative: bool) -> tuple[float, float, float]:
        """(seconds, prompt tokens, tokens emitted by decode) of one step at b running."""
        length = self.acceptance_length if speculative else 1.0
        prompt = b * length / (self.output_tokens - 1.0) * self.prompt_tokens
        context = b * self.context_per_sequence
        queries = prompt + (b * (self.k + 1) if speculative else b)
        seconds = self.target.time(self.gpu, queries, context, self.context_per_sequence,
                                   self.kernels_in_sequence) + self.per_token_s * queries
        if speculative:
            if self.draft is None:
                seconds += self.proposer_s
            else:
                seconds += self.k * (self.draft.time(self.gpu, b, context, self.context_per_sequence,
                                                     self.kernels_in_sequence)
                                     + self.per_token_s * b)
        return seconds, prompt, b * length

    def speedup(self, b: float) -> float:
        """Output tokens per second with speculation over without, at b running."""
        t_spec, _, out_spec = self.step(b, True)
        t_plain, _, out_plain = self.step(b, False)
        return (out_spec / t_spec) / (out_plain / t_plain)


def true_crossover(node: LawNode, low: float = 1.0, high: float = 2048.0) -> float | None:
    """The running batch where speculation stops paying under the law, by bisection."""
    if node.speedup(low) <= 1.0 or node.speedup(high) >= 1.0:
        return None
    for _ in range(80):
        mid = math.sqrt(low * high)
        if node.speedup(mid) > 1.0:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)


ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, math.inf)
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, math.inf)


def generate(node: LawNode, load: Sequence[float], start_time: float = 1_900_000_000.0,
             seed: int = 0) -> Iterator[Snapshot]:
    """One Snapshot a second per entry of `load` (running sequences), speculation on."""
    rng = np.random.default_rng(seed)
    k = node.k
    c = dict.fromkeys(("generation", "prompt", "success", "drafts", "draft_tokens", "accepted", "steps",
                       "step_sum", "ttft_sum"), 0.0)
    per_pos = [0.0] * k
    step_buckets = [0.0] * len(ITERATION_BUCKETS)
    ttft_buckets = [0.0] * len(TTFT_BUCKETS)
    length = node.acceptance_length
    for i, running in enumerate(load):
        b = float(running)
        if b > 0:
            seconds, prompt, emitted = node.step(b, True)
            seconds *= float(np.exp(node.noise * rng.standard_normal()))
            steps = 1.0 / seconds
            started = steps * emitted / (node.output_tokens - 1.0)
            observed = prompt + emitted + emitted / (node.output_tokens - 1.0)
            c["steps"] += steps
            c["step_sum"] += steps * observed
            for j, le in enumerate(ITERATION_BUCKETS):
                if observed <= le:
                    step_buckets[j] += steps
            c["drafts"] += steps * b
            c["draft_tokens"] += steps * b * k
            c["accepted"] += steps * b * (length - 1.0)
            for p in range(k):
                per_pos[p] += steps * b * node.per_position[p]
            c["generation"] += steps * emitted + started
            c["prompt"] += started * node.prompt_tokens
            c["success"] += started
            ttft = 0.08
            c["ttft_sum"] += ttft * started
            for j, le in enumerate(TTFT_BUCKETS):
                if ttft <= le:
                    ttft_buckets[j] += started
        engine = EngineSample(
            engine="0", model_name=node.model_name,
            counters={
                "vllm:generation_tokens": c["generation"], "vllm:prompt_tokens": c["prompt"],
                "vllm:prompt_tokens_cached": 0.0, "vllm:request_success": c["success"],
                "vllm:num_preemptions": 0.0,
                "vllm:spec_decode_num_drafts": c["drafts"], "vllm:spec_decode_num_draft_tokens": c["draft_tokens"],
                "vllm:spec_decode_num_accepted_tokens": c["accepted"],
            },
            gauges={
                "vllm:num_requests_running": b, "vllm:num_requests_waiting": 0.0,
                "vllm:kv_cache_usage_perc": min(1.0, b * node.context_per_sequence / node.kv_capacity_tokens),
                "vllm:cache_config_info:kv_cache_size_tokens": node.kv_capacity_tokens,
            },
            histograms={
                "vllm:iteration_tokens_total": Histogram(tuple(zip(ITERATION_BUCKETS, step_buckets)),
                                                         c["step_sum"], step_buckets[-1]),
                "vllm:time_to_first_token_seconds": Histogram(tuple(zip(TTFT_BUCKETS, ttft_buckets)),
                                                              c["ttft_sum"], ttft_buckets[-1]),
            },
            accepted_per_position=tuple(per_pos),
        )
        target = TargetSample(node.url, "ok", version="0.32.0", engines=(engine,), process_start_time=1.0)
        gpu = GpuSample(index=0, name=node.gpu.name, uuid="GPU-law-0", source="nvml",
                        values={"util_gpu": 1.0 if b > 0 else 0.0})
        yield Snapshot(time=start_time + i, targets=(target,), gpus=(gpu,),
                       sources=(SourceStatus("nvml", "ok", "law"),))


def tiers_load(tiers: Sequence[float], dwell_s: int) -> list[float]:
    return [float(t) for t in tiers for _ in range(dwell_s)]
