"""Synthetic telemetry: Snapshots a node would produce under a given load, from the roofline model.

Used by the advisor's tests (scripted ramps with a known crossover) and by the demo's scenario
generator. Deterministic for a seed. Every Snapshot is labelled synthetic by the caller's recording
header; nothing here pretends to be a real reading.

The node: a hinge step time T(N, C) (flat below the knee, rising above), k draft tokens with fixed
per-position acceptance, draft cost r per draft token. At b running sequences a speculative step
verifies b·(k+1) positions and emits b·L tokens; with speculation off a step decodes b positions and
emits b. Requests finish and are replaced at the rate their output allows, and each new request's
prompt is prefilled within the decode steps (chunked prefill), so a step computes N = its prompt
tokens + its decode positions and takes T(N, C) (+ k·r·T(b, C) for the drafter).

The counters follow vLLM V1's semantics (window.StepTokens): each request's first token comes from
its prefill and counts in generation_tokens; `vllm:iteration_tokens_total` observes, per step, the
prompt tokens computed plus the tokens emitted (not the positions verified); drafts, draft tokens
and accepted tokens count as vLLM's spec-decode counters do.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from specwatch.perf import HingeParameters
from specwatch.telemetry.snapshot import EngineSample, GpuSample, Histogram, Snapshot, SourceStatus, TargetSample

ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
                     16384.0, math.inf)
# vLLM's request-length buckets (1, 2, 5 per decade up to its max_model_len; here to 100k)
LENGTH_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
                  20000.0, 50000.0, 100000.0, math.inf)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0, 20.0, 40.0, 80.0, math.inf)


@dataclass(frozen=True)
class SyntheticNode:
    step: HingeParameters
    k: int = 4
    per_position: tuple[float, ...] = (0.7, 0.5, 0.35, 0.25)  # P(first i+1 drafts accepted)
    draft_ratio: float = 0.0
    speculation: bool = True
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    gpus: int = 1
    model_name: str = "meta-llama/Llama-3.1-70B-Instruct"
    context_per_sequence: float = 1500.0
    kv_capacity_tokens: float = 400_000.0
    prompt_tokens_per_request: float = 1000.0
    output_tokens_per_request: float = 300.0
    # the share of each prompt served from the prefix cache (a shared system prompt): counted in
    # vllm:prompt_tokens and vllm:prompt_tokens_cached, never computed
    prompt_cached_fraction: float = 0.0
    noise: float = 0.03  # relative scatter of step times
    power_limit_w: float = 700.0
    url: str = "http://synthetic-node:8000"
    version: str = "0.32.0"

    @property
    def acceptance_length(self) -> float:
        return 1.0 + sum(self.per_position[: self.k])


@dataclass
class _Totals:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: list[float] = field(default_factory=list)
    generation: float = 0.0
    prompt: float = 0.0
    prompt_cached: float = 0.0
    finished: float = 0.0
    steps: float = 0.0
    step_tokens: float = 0.0
    step_buckets: list[float] = field(default_factory=lambda: [0.0] * len(ITERATION_BUCKETS))
    ttft: list[float] = field(default_factory=lambda: [0.0] * len(LATENCY_BUCKETS))
    ttft_sum: float = 0.0
    tpot: list[float] = field(default_factory=lambda: [0.0] * len(LATENCY_BUCKETS))
    tpot_sum: float = 0.0
    itl: list[float] = field(default_factory=lambda: [0.0] * len(LATENCY_BUCKETS))
    itl_sum: float = 0.0
    e2e: list[float] = field(default_factory=lambda: [0.0] * len(LATENCY_BUCKETS))
    e2e_sum: float = 0.0
    prompt_lengths: list[float] = field(default_factory=lambda: [0.0] * len(LENGTH_BUCKETS))
    output_lengths: list[float] = field(default_factory=lambda: [0.0] * len(LENGTH_BUCKETS))
    energy_j: float = 1.0e6  # the GPUs' total-energy counters (each GPU draws the same)


def _observe(buckets: list[float], bounds: Sequence[float], value: float, count: float) -> None:
    for i, le in enumerate(bounds):
        if value <= le:
            buckets[i] += count


def _histogram(buckets: Sequence[float], bounds: Sequence[float], total: float) -> Histogram:
    return Histogram(tuple(zip(bounds, buckets)), total, buckets[-1])


def generate(
    node: SyntheticNode,
    load: Sequence[float],
    start_time: float = 1_800_000_000.0,
    interval_s: float = 1.0,
    seed: int = 0,
) -> Iterator[Snapshot]:
    """One Snapshot per entry of `load` (running sequences), `interval_s` apart."""
    rng = np.random.default_rng(seed)
    totals = _Totals(per_position=[0.0] * node.k)
    length = node.acceptance_length if node.speculation else 1.0
    for i, running in enumerate(load):
        b = max(0.0, float(running))
        context = b * node.context_per_sequence
        tokens_per_step = 0.0
        if b > 0:
            plain = float(node.step.step_time(b, context))
            decode_positions = b * (node.k + 1) if node.speculation else b
            # requests started per step: one replaces each that finished; a request emits its first
            # token from its prefill and the rest from decode steps, L per step
            started_per_step = b * length / max(1.0, node.output_tokens_per_request - 1.0)
            prompt_per_step = started_per_step * node.prompt_tokens_per_request * (1.0 - node.prompt_cached_fraction)
            tokens_per_step = prompt_per_step + decode_positions
            step_time = float(node.step.step_time(tokens_per_step, context))
            if node.speculation:
                step_time += node.k * node.draft_ratio * plain
            step_time *= math.exp(node.noise * rng.standard_normal())
            steps = interval_s / step_time
            decode_emitted = steps * b * length
            started = steps * started_per_step
            totals.steps += steps
            # vLLM observes prompt tokens computed + tokens emitted (first tokens included) per step
            observed = prompt_per_step + b * length + started_per_step
            totals.step_tokens += steps * observed
            _observe(totals.step_buckets, ITERATION_BUCKETS, observed, steps)
            if node.speculation:
                totals.drafts += steps * b
                totals.draft_tokens += steps * b * node.k
                totals.accepted += steps * b * (length - 1.0)
                for p in range(node.k):
                    totals.per_position[p] += steps * b * node.per_position[p]
            totals.generation += decode_emitted + started
            totals.finished += started
            totals.prompt += started * node.prompt_tokens_per_request
            totals.prompt_cached += started * node.prompt_tokens_per_request * node.prompt_cached_fraction
            # TTFT: a prefill of the prompt at the plain step's pace, plus queueing that grows with load
            ttft = plain * (1 + node.prompt_tokens_per_request / max(node.step.knee, 1.0)) * (1 + b / 64)
            _observe(totals.ttft, LATENCY_BUCKETS, ttft, started)
            totals.ttft_sum += ttft * started
            tpot = step_time / length
            _observe(totals.tpot, LATENCY_BUCKETS, tpot, started)
            totals.tpot_sum += tpot * started
            _observe(totals.itl, LATENCY_BUCKETS, step_time, steps * b)
            totals.itl_sum += step_time * steps * b
            e2e = ttft + tpot * max(0.0, node.output_tokens_per_request - 1.0)
            _observe(totals.e2e, LATENCY_BUCKETS, e2e, started)
            totals.e2e_sum += e2e * started
            _observe(totals.prompt_lengths, LENGTH_BUCKETS, node.prompt_tokens_per_request, started)
            _observe(totals.output_lengths, LENGTH_BUCKETS, node.output_tokens_per_request, started)
        t = start_time + i * interval_s
        gpus = _gpus(node, b, context, tokens_per_step)
        totals.energy_j += gpus[0].values["power_w"] * interval_s if gpus else 0.0
        gpus = tuple(dataclasses.replace(g, values={**g.values, "energy_j": totals.energy_j}) for g in gpus)
        yield Snapshot(time=t, targets=(_target(node, totals, b, context),), gpus=gpus,
                       sources=(SourceStatus("nvml", "ok", "synthetic"),))


def _target(node: SyntheticNode, totals: _Totals, running: float, context: float) -> TargetSample:
    counters = {
        "vllm:generation_tokens": totals.generation,
        "vllm:prompt_tokens": totals.prompt,
        "vllm:prompt_tokens_cached": totals.prompt_cached,
        # as vLLM V1 counts them: prompt tokens looked up in the prefix cache, and those found
        "vllm:prefix_cache_queries": totals.prompt,
        "vllm:prefix_cache_hits": totals.prompt_cached,
        "vllm:request_success": totals.finished,
        # every synthetic request ends at its end-of-sequence token, none at a length cap
        "vllm:request_success:stop": totals.finished,
        "vllm:num_preemptions": 0.0,
    }
    if node.speculation:
        counters |= {
            "vllm:spec_decode_num_drafts": totals.drafts,
            "vllm:spec_decode_num_draft_tokens": totals.draft_tokens,
            "vllm:spec_decode_num_accepted_tokens": totals.accepted,
        }
    gauges = {
        "vllm:num_requests_running": running,
        "vllm:num_requests_waiting": max(0.0, running - 192.0),
        "vllm:kv_cache_usage_perc": min(1.0, context / node.kv_capacity_tokens),
        "vllm:cache_config_info:kv_cache_size_tokens": node.kv_capacity_tokens,
    }
    histograms = {
        "vllm:iteration_tokens_total": _histogram(totals.step_buckets, ITERATION_BUCKETS, totals.step_tokens),
        "vllm:time_to_first_token_seconds": _histogram(totals.ttft, LATENCY_BUCKETS, totals.ttft_sum),
        "vllm:request_time_per_output_token_seconds": _histogram(totals.tpot, LATENCY_BUCKETS, totals.tpot_sum),
        "vllm:inter_token_latency_seconds": _histogram(totals.itl, LATENCY_BUCKETS, totals.itl_sum),
        "vllm:e2e_request_latency_seconds": _histogram(totals.e2e, LATENCY_BUCKETS, totals.e2e_sum),
        "vllm:request_prompt_tokens": _histogram(totals.prompt_lengths, LENGTH_BUCKETS,
                                                 totals.finished * node.prompt_tokens_per_request),
        "vllm:request_generation_tokens": _histogram(totals.output_lengths, LENGTH_BUCKETS,
                                                     totals.finished * node.output_tokens_per_request),
    }
    engine = EngineSample(
        engine="0",
        model_name=node.model_name,
        counters=counters,
        gauges=gauges,
        histograms=histograms,
        accepted_per_position=tuple(totals.per_position) if node.speculation else (),
    )
    return TargetSample(node.url, "ok", version=node.version, engines=(engine,), process_start_time=1.0)


def _gpus(node: SyntheticNode, running: float, context: float, n: float) -> tuple[GpuSample, ...]:
    """Counter signatures from the same model: DRAM busy while the weight read dominates the step,
    tensor pipes busy once the GEMMs do."""
    if running <= 0:
        values = {"sm_active": 0.0, "tensor_active": 0.0, "dram_bw_util": 0.0, "util_gpu": 0.0,
                  "power_w": 0.12 * node.power_limit_w}
    else:
        h = node.step
        total = float(h.step_time(n, context))
        memory = h.base_s + h.kv_s_per_token * context
        compute = h.base_s * n / max(h.knee, 1.0)
        values = {
            "sm_active": min(0.98, 0.6 + 0.4 * min(1.0, compute / total)),
            "tensor_active": min(0.95, 0.9 * compute / total),
            "dram_bw_util": min(0.8, 0.8 * memory / total),
            "util_gpu": 1.0,
            "power_w": node.power_limit_w * min(1.0, 0.45 + 0.55 * compute / total),
        }
    values |= {"power_limit_w": node.power_limit_w, "memory_total_bytes": 80e9, "memory_used_bytes": 76e9}
    return tuple(
        GpuSample(index=i, name=node.gpu_name, uuid=f"GPU-synthetic-{i}", source="nvml", values=dict(values))
        for i in range(node.gpus)
    )


def ramp(low: int, high: int, dwell: int, down: bool = True) -> list[float]:
    """Running sequences stepping low → high (doubling, then through the midpoints) and back."""
    levels = sorted({int(round(x)) for x in np.geomspace(low, high, 2 * int(math.log2(high / low)) + 1)})
    up = [float(level) for level in levels for _ in range(dwell)]
    return up + up[::-1] if down else up


# -- a Dynamo deployment ---------------------------------------------------------------------------


def generate_deployment(
    decode: Sequence[SyntheticNode],
    prefill: SyntheticNode,
    load: Sequence[float],
    frontend_url: str,
    namespace: str = "dynamo",
    start_time: float = 1_800_000_000.0,
    seed: int = 0,
) -> Iterator[Snapshot]:
    """A disaggregated Dynamo deployment: each decode worker runs `load` (running sequences each)
    as a node of its own; the prefill worker computes the prompts of the requests they start; the
    frontend sees the sum. Each Snapshot holds the decode workers, then the prefill worker, then the
    frontend, placed as collectors.dynamo places them, and the GPUs of the first decode worker (the
    node the watch runs on). Worker ids are written as the frontend writes them (decimal)."""
    from specwatch.collectors.dynamo import DECODE, FRONTEND, FRONTEND_UNJUDGED, PREFILL, PREFILL_UNJUDGED

    ids = [str(10_000_000_000_000_000_000 + 7919 * i) for i in range(len(decode) + 1)]
    prefill_load = [len(decode) * max(0.0, level) * prefill.output_tokens_per_request
                    / max(1.0, decode[0].output_tokens_per_request) for level in load]
    streams = [generate(node, load, start_time, seed=seed + i) for i, node in enumerate(decode)]
    streams.append(generate(prefill, prefill_load, start_time, seed=seed + len(decode)))
    for snapshots in zip(*streams):
        targets = [dataclasses.replace(s.targets[0], deployment=namespace, role=DECODE if i < len(decode) else PREFILL,
                                       workers=(ids[i],), unjudged=None if i < len(decode) else PREFILL_UNJUDGED)
                   for i, s in enumerate(snapshots)]
        front = _frontend_engine([t.engines[0] for t in targets[: len(decode)]], targets[-1].engines[0])
        listed = tuple(f"{ids[i]} ({DECODE if i < len(decode) else PREFILL})" for i in range(len(targets)))
        targets.append(TargetSample(frontend_url, "ok", engines=(front,), engine="dynamo", deployment=namespace,
                                    role=FRONTEND, unjudged=FRONTEND_UNJUDGED, workers=listed))
        yield Snapshot(time=snapshots[0].time, targets=tuple(targets), gpus=snapshots[0].gpus,
                       sources=snapshots[0].sources)


def _frontend_engine(decoders: Sequence[EngineSample], prefiller: EngineSample) -> EngineSample:
    """What a Dynamo frontend sees of its workers: the requests and tokens of all of them, TTFT from
    the prefill worker, and the time between tokens (one observation per token) from the decoders."""

    def summed(name: str) -> Histogram:
        parts = [e.histograms[name] for e in decoders]
        buckets = tuple((le, sum(p.buckets[j][1] for p in parts)) for j, (le, _) in enumerate(parts[0].buckets))
        return Histogram(buckets, sum(p.sum for p in parts), sum(p.count for p in parts))

    counters = {name: sum(e.counters.get(name, 0.0) for e in decoders)
                for name in ("vllm:generation_tokens", "vllm:request_success")}
    counters["vllm:prompt_tokens"] = prefiller.counters.get("vllm:prompt_tokens", 0.0)
    running = sum(e.gauges.get("vllm:num_requests_running", 0.0) for e in decoders)
    waiting = sum(e.gauges.get("vllm:num_requests_waiting", 0.0) for e in decoders)
    return EngineSample("0", decoders[0].model_name, counters,
                        {"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting},
                        {"vllm:time_to_first_token_seconds": prefiller.histograms["vllm:time_to_first_token_seconds"],
                         "vllm:request_time_per_output_token_seconds":
                             summed("vllm:request_time_per_output_token_seconds")})
