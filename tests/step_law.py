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
from bisect import bisect_left
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
# a 0.5B draft (Qwen2.5-0.5B's shape: 24 layers, 2 KV heads of 64)
QWEN_05B = Forward(params=0.49e9, layers=24, kv_heads=2, head_dim=64, attention_heads=14, fixed_s=0.0006)
# an A10G (AWS G5): 600 GB/s of GDDR6 and about 70 TFLOPS of dense BF16
A10G = Gpu(name="NVIDIA A10G", bandwidth=600e9 * 0.85, peak_flops=70e12)


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


def _law_snapshot(node: LawNode, time: float, running: float, c: dict[str, float], per_position: tuple[float, ...],
                  steps: Histogram, ttft: Histogram) -> Snapshot:
    """One reading of the node as vLLM V1 exports it: the counters `c` (generation, prompt, success,
    drafts, draft_tokens, accepted), the running gauge, the per-position accepts and the two histograms."""
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
            "vllm:num_requests_running": running, "vllm:num_requests_waiting": 0.0,
            "vllm:kv_cache_usage_perc": min(1.0, running * node.context_per_sequence / node.kv_capacity_tokens),
            "vllm:cache_config_info:kv_cache_size_tokens": node.kv_capacity_tokens,
        },
        histograms={"vllm:iteration_tokens_total": steps, "vllm:time_to_first_token_seconds": ttft},
        accepted_per_position=per_position,
    )
    target = TargetSample(node.url, "ok", version="0.32.0", engines=(engine,), process_start_time=1.0)
    gpu = GpuSample(index=0, name=node.gpu.name, uuid="GPU-law-0", source="nvml",
                    values={"util_gpu": 1.0 if running > 0 else 0.0})
    return Snapshot(time=time, targets=(target,), gpus=(gpu,), sources=(SourceStatus("nvml", "ok", "law"),))


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
        yield _law_snapshot(node, start_time + i, b, c, tuple(per_pos),
                            Histogram(tuple(zip(ITERATION_BUCKETS, step_buckets)), c["step_sum"], step_buckets[-1]),
                            Histogram(tuple(zip(TTFT_BUCKETS, ttft_buckets)), c["ttft_sum"], ttft_buckets[-1]))


def tiers_load(tiers: Sequence[float], dwell_s: int) -> list[float]:
    return [float(t) for t in tiers for _ in range(dwell_s)]


# --- the noisy node: counters from a simulation, not from expectations -----------------------------

def _lognormal_clipped_mean(mean: float, sigma: float, low: float, high: float) -> float:
    """E[clip(Y, low, high)] for Y lognormal with E[Y] = mean and σ of ln Y = sigma."""
    mu = math.log(mean) - sigma ** 2 / 2

    def phi(z: float) -> float:
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))

    la, lb = math.log(low), math.log(high)
    inside = mean * (phi((lb - mu - sigma ** 2) / sigma) - phi((la - mu - sigma ** 2) / sigma))
    return inside + low * phi((la - mu) / sigma) + high * (1.0 - phi((lb - mu) / sigma))


@dataclass(frozen=True)
class Noise:
    """How `generate_noisy` draws a node's traffic. The defaults are the benchmark's."""

    scrape_jitter_s: float = 0.2  # scrapes 1 s ± this apart (uniform)
    output_sigma: float = 0.5  # σ of ln(output tokens), lognormal with mean node.output_tokens
    output_range: tuple[float, float] = (16.0, 4.0)  # clipped to [low tokens, high × node.output_tokens]
    prompt_sigma: float = 0.5  # σ of ln(prompt tokens), lognormal with mean node.prompt_tokens
    prompt_range: tuple[float, float] = (1.0, 8.0)  # clipped to [low tokens, high × node.prompt_tokens]
    # a request's first-position acceptance x ~ Beta with mean per_position[0] and this α + β
    # (smaller: prompts differ more); its per-position acceptances are per_position · x / per_position[0]
    acceptance_concentration: float = 4.0
    warmup_s: float = 30.0  # the node serves at load[0] this long before the first Snapshot


def generate_noisy(node: LawNode, load: Sequence[float], seed: int | Sequence[int], start_time: float = 1_900_000_000.0,
                   noise: Noise = Noise()) -> Iterator[Snapshot]:
    """One Snapshot per entry of `load` (the mean running sequences wanted over that scrape's
    interval), speculation on, from a step-by-step simulation of the node's traffic, reproducible
    from `seed` (an int, or ints numpy's SeedSequence mixes). What `generate` gives as expectations is drawn here:

    - arrivals: Poisson, at the rate that holds `load[i]` running on average (Little's law, counted
      in steps): a step of the law's duration t(b) at b running brings a Poisson count of mean
      load/S, S = 1.5 + (E[output] − 1)/L the steps a request spends in the running set (its prefill
      step, its drafts, the last one cut short); in wall-clock time that is a Poisson process at rate
      load/(S·t(b)), and while the engine idles at load/(S·t(1)). So the running set is an M/G/∞
      queue in steps: Poisson around the load (0-3 at a load of 1-2), a request's lifetime its
      correlation time. A rate fixed in wall-clock time is not used: past the knee t(b) grows almost
      as b, so a fixed-rate queue is near critical there (b = λ·D(b), λ·dD/db ≈ 0.8-0.95 from 128
      running up) and swings by ±40 % for minutes; a tier would not hold its load.
    - an arrival joins the running set at the next step's start (so `vllm:num_requests_waiting`
      stays 0, as in `generate`), is prefilled in that step (its first token at the step's end, its
      TTFT from its arrival), then decodes one draft a step until its output is done, and leaves;
    - request lengths: output tokens lognormal around node.output_tokens, prompt tokens around
      node.prompt_tokens, both clipped (`Noise`);
    - acceptance: each request draws its own first-position acceptance x ~ Beta (mean
      per_position[0]) and accepts position i of a draft with P(first i+1 accepted) =
      per_position[i]·x/per_position[0]; each draft's accepted count is drawn position by position
      (position i is accepted only if i − 1 was, with the conditional rate). Arrivals draw x from the
      Beta weighted by their acceptance length (a request accepting more finishes in fewer drafts),
      so the drafts of a long window, and the requests running at an instant, accept on average as
      node.per_position says; over a few dozen drafts, from one or two requests, they do not;
    - a step's time: node.step at the running set's size (the new arrivals' prefill included), with
      the lognormal noise of `generate`;
    - scrapes: 1 s ± `scrape_jitter_s` apart; the counters are those of the steps finished by then,
      the gauges those of the step under way.

    The counters keep vLLM V1's semantics as `generate` counts them (module docstring): one draft of
    k tokens a decoding request a step, accepted counts as the verifier accepted them (vLLM counts
    them before it cuts a step's output at the request's end; generation counts what was kept),
    `vllm:iteration_tokens_total` observed per step with the prompt tokens it prefilled and the
    tokens it emitted (the first tokens of the requests it prefilled included), `request_success`
    when a request finishes. The Snapshot carries the same families as `generate`'s. The node starts
    serving `noise.warmup_s` before the first Snapshot, from the running set a steady state holds
    (a Poisson count, output lengths size-biased, each part-way through), so a cold start at high
    load is a monitor arriving at a busy node.
    """
    rng = np.random.default_rng(seed)
    k = node.k
    p = np.asarray(node.per_position[:k], dtype=float)
    p0 = float(p[0])
    conditional = np.concatenate(([1.0], p[1:] / p[:-1]))  # column 0 is each request's own x
    span = float(p.sum()) / p0  # a request's acceptance length is 1 + x·span
    kappa = noise.acceptance_concentration
    out_low, out_high = noise.output_range[0], noise.output_range[1] * node.output_tokens
    pr_low, pr_high = noise.prompt_range[0], noise.prompt_range[1] * node.prompt_tokens
    mean_output = _lognormal_clipped_mean(node.output_tokens, noise.output_sigma, out_low, out_high)
    steps_per_request = 1.5 + (mean_output - 1.0) / node.acceptance_length

    step_cache: dict[int, float] = {}

    def law_s(b: int) -> float:
        s = step_cache.get(b)
        if s is None:
            s = step_cache[b] = node.step(float(b), True)[0]
        return s

    def draw_lengths(n: int, mean: float, sigma: float, low: float, high: float) -> np.ndarray:
        y = mean * np.exp(sigma * rng.standard_normal(n) - sigma ** 2 / 2)
        return np.rint(np.clip(y, low, high)).astype(np.int64)

    def draw_x(n: int, weighted: bool) -> np.ndarray:
        """Requests' first-position acceptance: the Beta itself (weighted=False: the requests
        running at an instant), or weighted by 1 + x·span (the requests arriving)."""
        out = np.empty(0)
        while out.size < n:
            x = rng.beta(p0 * kappa, (1.0 - p0) * kappa, size=2 * (n - out.size) + 8)
            if weighted:
                x = x[rng.random(x.size) * (1.0 + span) < 1.0 + x * span]
            out = np.concatenate((out, x))
        return out[:n]

    class Arrivals:
        """The arriving requests' draws, in pools: outputs still to decode after the first token,
        prompt tokens, x."""

        def __init__(self) -> None:
            self.at = self.size = 0

        def take(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            if self.at + count > self.size:
                size = max(1024, count)
                self.rem = np.maximum(draw_lengths(size, node.output_tokens, noise.output_sigma, out_low,
                                                   out_high), 2) - 1
                self.prompt = draw_lengths(size, node.prompt_tokens, noise.prompt_sigma, pr_low, pr_high)
                self.x = draw_x(size, weighted=True)
                self.at, self.size = 0, size
            a, self.at = self.at, self.at + count
            return self.rem[a:self.at], self.prompt[a:self.at], self.x[a:self.at]

    arrivals = Arrivals()

    n = len(load)
    if n == 0:
        return
    gaps = 1.0 + rng.uniform(-noise.scrape_jitter_s, noise.scrape_jitter_s, size=n)
    gaps[0] = 1.0
    scrape = (start_time - 1.0 + np.cumsum(gaps)).tolist()

    # the running set a steady state holds at load[0]: a Poisson count, x from the Beta, output
    # lengths size-biased by the steps they take, each part-way through
    initial = int(rng.poisson(float(load[0]))) if load[0] > 0 else 0
    outputs = np.empty(0, dtype=np.int64)
    while outputs.size < initial:
        o = draw_lengths(4 * initial, node.output_tokens, noise.output_sigma, out_low, out_high)
        outputs = np.concatenate((outputs, o[rng.random(o.size) * out_high < o - 1]))
    outputs = np.maximum(outputs[:initial], 2)
    rem = (rng.random(initial) * (outputs - 1)).astype(np.int64) + 1  # tokens still to decode
    x = draw_x(initial, weighted=False)

    c = dict.fromkeys(("generation", "prompt", "success", "drafts", "draft_tokens", "accepted", "steps",
                       "step_sum", "ttft_sum"), 0.0)
    per_pos = np.zeros(k)
    step_raw = [0.0] * len(ITERATION_BUCKETS)
    ttft_raw = [0.0] * len(TTFT_BUCKETS)

    def snapshot(i: int, running: int) -> Snapshot:
        return _law_snapshot(node, scrape[i], float(running), c, tuple(per_pos.tolist()),
                             Histogram(tuple(zip(ITERATION_BUCKETS, np.cumsum(step_raw).tolist())), c["step_sum"],
                                       c["steps"]),
                             Histogram(tuple(zip(TTFT_BUCKETS, np.cumsum(ttft_raw).tolist())), c["ttft_sum"],
                                       float(sum(ttft_raw))))

    t = start_time - 1.0 - noise.warmup_s
    pending: list[float] = []  # arrival times of requests waiting for the next step
    i = 0  # the next scrape; the load of its interval is the one wanted now
    while i < n:
        wanted = float(load[i])
        b = rem.size + len(pending)
        if b == 0:  # idle until the next arrival; scrapes before it read an idle engine
            rate = wanted / (steps_per_request * law_s(1)) if wanted > 0 else 0.0
            upcoming = t + rng.exponential(1.0 / rate) if rate > 0 else math.inf
            if upcoming >= scrape[i]:  # memoryless: drawn again at the next interval's rate
                t = scrape[i]
                yield snapshot(i, 0)
                i += 1
            else:
                t = upcoming
                pending.append(t)
            continue
        law = law_s(b)
        end = t + law * math.exp(node.noise * rng.standard_normal())
        while i < n and scrape[i] < end:  # read while this step runs: its batch, the counters before it
            yield snapshot(i, b)
            i += 1
        observed = 0.0
        decoding = rem.size
        if decoding:
            u = rng.random((decoding, k))
            accept = u < conditional
            accept[:, 0] = u[:, 0] < x
            # vLLM counts what the verifier accepted, then cuts the step's output at the request's
            # end: the spec-decode counters count the accepted tokens past it, generation does not
            counted = np.logical_and.accumulate(accept, axis=1).sum(axis=1)
            accepted = np.minimum(counted, rem - 1)
            counts = np.bincount(counted, minlength=k + 1)
            per_pos += counts[::-1].cumsum()[::-1][1:]  # position j is accepted where accepted > j
            total = float(accepted.sum())
            c["drafts"] += decoding
            c["draft_tokens"] += decoding * k
            c["accepted"] += float(counted.sum())
            c["generation"] += decoding + total
            observed += decoding + total
            rem = rem - 1 - accepted
            done = rem <= 0
            finished = int(done.sum())
            if finished:
                c["success"] += finished
                keep = ~done
                rem, x = rem[keep], x[keep]
        if pending:
            new_rem, new_prompt, new_x = arrivals.take(len(pending))
            prompts = float(new_prompt.sum())
            c["prompt"] += prompts
            c["generation"] += len(pending)
            observed += prompts + len(pending)
            for arrived in pending:
                ttft = end - arrived
                c["ttft_sum"] += ttft
                ttft_raw[bisect_left(TTFT_BUCKETS, ttft)] += 1.0
            rem = np.concatenate((rem, new_rem))
            x = np.concatenate((x, new_x))
        c["steps"] += 1.0
        c["step_sum"] += observed
        step_raw[bisect_left(ITERATION_BUCKETS, observed)] += 1.0
        # the requests arriving while this step ran wait for the next one
        count = rng.poisson(wanted / steps_per_request * (end - t) / law) if wanted > 0 else 0
        pending = sorted(rng.uniform(t, end, size=count).tolist()) if count else []
        t = end
