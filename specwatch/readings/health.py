"""The node's general health over a span, each figure tied to the speculation question: the latency
breakdown of a request's life, the request shape (prompt and output lengths), finish reasons,
goodput against an SLO, and energy per output token.

Every distribution figure comes from histogram bucket deltas (specwatch.readings.figures), so it is an
estimate: within a bucket the observations are taken as spread evenly, as PromQL's
histogram_quantile() assumes. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from specwatch.readings.figures import (
    GENERATION_TOKENS, INFERENCE, PREEMPTIONS, QUEUE, REQUEST_SUCCESS, TTFT, Increases, histogram_quantile,
    histogram_quantile_bound, step_tokens,
)
from specwatch.telemetry.snapshot import Histogram

__all__ = [
    "E2E", "QUEUE", "PREFILL", "DECODE", "INFERENCE", "REQUEST_TPOT", "ITL_V1",
    "PROMPT_LENGTH", "OUTPUT_LENGTH", "LATENCY_FAMILIES",
    "LatencyRow", "latency_table", "share_at_or_below",
    "RequestShape", "request_shape", "finish_reasons", "share_over_ratio_bounds", "share_range_words",
    "Goodput", "goodput",
    "GpuEnergy", "Energy", "energy_per_token", "energy_counter_increase",
    "HealthFigures", "health_figures", "decode_positions_per_token", "health_report",
    "node_output_tokens",
]

E2E = "vllm:e2e_request_latency_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
# Per request: decode time over its output tokens less one (0.11+); per token under speculation too.
REQUEST_TPOT = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
# Between engine steps as a request sees them (V1 name first, V0's name after).
ITL_V1 = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
# vLLM V1's prefix-cache counters: prompt tokens looked up in the cache, and those found there
# the prefix cache's lookups and hits, in tokens: the names since 0.9.2 first, then those before
PREFIX_QUERIES = ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")
PREFIX_HITS = ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")
PROMPT_LENGTH = "vllm:request_prompt_tokens"
OUTPUT_LENGTH = "vllm:request_generation_tokens"

# (row name, families, newest first): the latency table, in the order of a request's life.
LATENCY_FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("e2e", (E2E,)),
    ("queue", (QUEUE,)),
    ("ttft", (TTFT,)),
    ("prefill", (PREFILL,)),
    ("decode", (DECODE,)),
    ("tpot", REQUEST_TPOT),
    ("itl", ITL_V1),
)
QUANTILES = (0.5, 0.9, 0.99)
# A prompt over this many times its output pays mostly prefill: speculation speeds only the decode.
PREFILL_HEAVY_RATIO = 10.0
# A share's bounds this close together are shown as one figure (their midpoint, "about").
SHARE_POINT_WIDTH = 0.05


@dataclass(frozen=True, slots=True)
class LatencyRow:
    name: str
    count: float  # observations (requests, or steps for itl) over the span
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    # the quantiles whose figure is a bound, not an estimate ("p50_s" → AT_MOST or AT_LEAST)
    bounds: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        d = {"count": self.count, "mean_s": self.mean_s, "p50_s": self.p50_s, "p90_s": self.p90_s,
             "p99_s": self.p99_s}
        if self.bounds:
            d["bounds"] = dict(self.bounds)
        return d


def latency_table(inc: Increases) -> tuple[LatencyRow, ...]:
    """One row per latency family the engine exposes, with observations over the span."""
    rows = []
    for name, families in LATENCY_FAMILIES:
        h = inc.histogram(*families)
        if h is None or h.count <= 0:
            continue
        (p50, m50), (p90, m90), (p99, m99) = (histogram_quantile_bound(q, h) for q in QUANTILES)
        bounds = tuple((key, mark) for key, mark in (("p50_s", m50), ("p90_s", m90), ("p99_s", m99)) if mark)
        rows.append(LatencyRow(name, h.count, h.sum / h.count, p50, p90, p99, bounds))
    return tuple(rows)


def share_at_or_below(h: Histogram | None, threshold: float) -> float | None:
    """The share of observations at or below `threshold`, interpolated linearly inside its bucket
    (the inverse of histogram_quantile). Past the last finite bound nothing is known of the +Inf
    bucket's observations: they count as above any threshold there."""
    if h is None or not h.buckets or h.count <= 0 or not math.isfinite(threshold):
        return None
    total = h.buckets[-1][1]
    if total <= 0:
        return None
    prev_le, prev_count = 0.0, 0.0
    for le, count in h.buckets:
        if threshold < le:
            if math.isinf(le) or threshold <= prev_le:
                return min(1.0, prev_count / total)
            inside = (count - prev_count) * (threshold - prev_le) / (le - prev_le)
            return min(1.0, (prev_count + inside) / total)
        prev_le, prev_count = le, count
    return min(1.0, prev_count / total)


def _integer_atoms(h: Histogram) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Each bucket's count placed at the smallest whole number it can hold, and at the largest (both
    in one pass): a token count in the bucket (prev, le] lies in floor(prev)+1 .. floor(le); the
    first bucket starts at 0 and the +Inf bucket has no top."""
    low_atoms, high_atoms = [], []
    prev_le, prev_count = None, 0.0
    floor, isinf = math.floor, math.isinf
    for le, count in h.buckets:
        # count − prev_count > 0 exactly when count > prev_count (and the running count is their max)
        if count > prev_count:
            mass = count - prev_count
            low_atoms.append((0.0 if prev_le is None else floor(prev_le) + 1.0, mass))
            high_atoms.append((math.inf if isinf(le) else float(floor(le)), mass))
            prev_count = count
        prev_le = le
    return low_atoms, high_atoms


def _forced_share(xs: list[tuple[float, float]], ys: list[tuple[float, float]], ratio: float,
                  strict: bool) -> float:
    """The least share of pairs with x > ratio·y (`strict`) or x ≤ ratio·y over every coupling of the
    two discrete distributions (value, mass): the Makarov bound max(0, P(X ∈ A) + P(Y ∈ B) − 1), over
    every upper set A of x and lower set B of y (for `strict`; the reverse otherwise) in which each x
    and y are so related. It is sharp: some coupling puts no more mass on the relation."""
    x_total, y_total = sum([m for _, m in xs]), sum([m for _, m in ys])
    # strict: X ≥ x and Y ≤ y with x > ratio·y; otherwise X ≤ x and Y ≥ y with x ≤ ratio·y
    # (each y's share does not depend on x: worked out once, not once per x; and each x's only
    # once some y is so related to it)
    if strict:
        y_shares = [(ratio * y, sum([m for v, m in ys if v <= y]) / y_total) for y, _ in ys]
    else:
        y_shares = [(ratio * y, sum([m for v, m in ys if v >= y]) / y_total) for y, _ in ys]
    best = 0.0
    for x, _ in xs:
        x_share = None
        for scaled_y, y_share in y_shares:
            if not (x > scaled_y) if strict else not (x <= scaled_y):
                continue
            if x_share is None:
                x_share = sum([m for v, m in xs if (v >= x if strict else v <= x)]) / x_total
            best = max(best, x_share + y_share - 1.0)
    return min(1.0, best)


def share_over_ratio_bounds(prompt: Histogram | None, output: Histogram | None,
                            ratio: float = PREFILL_HEAVY_RATIO) -> tuple[float, float] | None:
    """Bounds on the share of requests whose prompt is over `ratio` times their output, from the two
    length histograms alone (None without observations in both).

    The histograms are marginals: which prompt went with which output is not exported, so the share
    itself cannot be known, only the range it lies in over every pairing of prompts with outputs
    (Makarov/Fréchet bounds). Within a bucket a length can be any whole number: the low bound places
    prompts at their buckets' bottoms and outputs at their tops, the high bound the reverse, so each
    bound holds for every placement too. The histograms' sums are not used, so the bounds may be
    wider than the data allows, never narrower."""
    if prompt is None or output is None or prompt.count <= 0 or output.count <= 0:
        return None
    if not prompt.buckets or not output.buckets or prompt.buckets[-1][1] <= 0 or output.buckets[-1][1] <= 0:
        return None
    prompt_low, prompt_high = _integer_atoms(prompt)
    output_low, output_high = _integer_atoms(output)
    low = _forced_share(prompt_low, output_high, ratio, strict=True)
    high = 1.0 - _forced_share(prompt_high, output_low, ratio, strict=False)
    return max(0.0, low), min(1.0, max(low, high))


def share_range_words(low: float, high: float) -> str:
    """A share known between two bounds: one figure when they are close, else the range."""
    if high - low < 0.005:
        return f"{high:.0%}"
    if high - low <= SHARE_POINT_WIDTH:
        return f"about {(low + high) / 2:.0%}"
    return f"between {low:.0%} and {high:.0%}"


@dataclass(frozen=True, slots=True)
class RequestShape:
    requests: float
    prompt_mean_tokens: float | None
    output_mean_tokens: float | None
    input_output_ratio: float | None  # mean prompt over mean output, per finished request
    prompt_p50: float | None
    prompt_p90: float | None
    output_p50: float | None
    output_p90: float | None
    # bounds on the share of requests whose prompt is over PREFILL_HEAVY_RATIO times their output
    prefill_heavy_share_low: float | None = None
    prefill_heavy_share_high: float | None = None

    def to_dict(self) -> dict:
        return {"requests": self.requests, "prompt_mean_tokens": self.prompt_mean_tokens,
                "output_mean_tokens": self.output_mean_tokens, "input_output_ratio": self.input_output_ratio,
                "prompt_p50": self.prompt_p50, "prompt_p90": self.prompt_p90,
                "output_p50": self.output_p50, "output_p90": self.output_p90,
                "prefill_heavy_ratio": PREFILL_HEAVY_RATIO,
                "prefill_heavy_share_low": self.prefill_heavy_share_low,
                "prefill_heavy_share_high": self.prefill_heavy_share_high}

    @property
    def prefill_heavy(self) -> bool:
        return self.input_output_ratio is not None and self.input_output_ratio > PREFILL_HEAVY_RATIO

    def prefill_heavy_share_words(self) -> str | None:
        """"between 12% and 60% of requests have a prompt over 10× their output", or None."""
        if self.prefill_heavy_share_low is None or self.prefill_heavy_share_high is None:
            return None
        return prefill_heavy_share_words(self.prefill_heavy_share_low, self.prefill_heavy_share_high)


def prefill_heavy_share_words(low: float, high: float) -> str:
    """"between 12% and 60% of requests have a prompt over 10× their output"."""
    return f"{share_range_words(low, high)} of requests have a prompt over {PREFILL_HEAVY_RATIO:.0f}× their output"


def prefill_heavy_share(inc: Increases) -> tuple[float, float] | None:
    """`request_shape(inc)`'s bounds on the share of prefill-heavy requests, without the rest of the
    shape (what the advisor reads at each evaluation)."""
    return share_over_ratio_bounds(inc.histogram(PROMPT_LENGTH), inc.histogram(OUTPUT_LENGTH))


def request_shape(inc: Increases) -> RequestShape | None:
    prompt, output = inc.histogram(PROMPT_LENGTH), inc.histogram(OUTPUT_LENGTH)
    if (prompt is None or prompt.count <= 0) and (output is None or output.count <= 0):
        return None
    p_mean = prompt.sum / prompt.count if prompt is not None and prompt.count > 0 else None
    o_mean = output.sum / output.count if output is not None and output.count > 0 else None
    share = share_over_ratio_bounds(prompt, output)
    return RequestShape(
        requests=max(prompt.count if prompt else 0.0, output.count if output else 0.0),
        prompt_mean_tokens=p_mean,
        output_mean_tokens=o_mean,
        input_output_ratio=p_mean / o_mean if p_mean is not None and o_mean else None,
        prompt_p50=histogram_quantile(0.5, prompt), prompt_p90=histogram_quantile(0.9, prompt),
        output_p50=histogram_quantile(0.5, output), output_p90=histogram_quantile(0.9, output),
        prefill_heavy_share_low=share[0] if share else None,
        prefill_heavy_share_high=share[1] if share else None,
    )


def finish_reasons(inc: Increases) -> dict[str, float]:
    """Finished requests by reason (stop, length, abort, ...) over the span, reasons with none left out."""
    prefix = REQUEST_SUCCESS + ":"
    return {name[len(prefix):]: value for name, value in sorted(inc.counters.items())
            if name.startswith(prefix) and value > 0}


@dataclass(frozen=True, slots=True)
class Goodput:
    """The share of requests inside the SLO over the span: an estimate from bucket boundaries.

    With both a TTFT and a TPOT target the histograms give each share, not the share meeting both:
    that lies between `share_low` (max(0, a + b − 1)) and `share_high` (min(a, b)); with one target
    the two are equal. `*_if_toggled` are the same shares with speculation switched the other way
    at this load: TPOT scaled by the predicted per-token time ratio, TTFT unchanged (the first token
    comes from the prefill, which speculation does not speed).
    """

    slo_ttft_s: float | None
    slo_tpot_s: float | None
    requests: float
    ttft_share: float | None
    tpot_share: float | None
    share_low: float | None
    share_high: float | None
    tpot_share_if_toggled: float | None = None
    share_low_if_toggled: float | None = None
    share_high_if_toggled: float | None = None

    def to_dict(self) -> dict:
        return {"slo_ttft_s": self.slo_ttft_s, "slo_tpot_s": self.slo_tpot_s, "requests": self.requests,
                "ttft_share": self.ttft_share, "tpot_share": self.tpot_share,
                "share_low": self.share_low, "share_high": self.share_high,
                "tpot_share_if_toggled": self.tpot_share_if_toggled,
                "share_low_if_toggled": self.share_low_if_toggled,
                "share_high_if_toggled": self.share_high_if_toggled,
                "estimate": "from histogram bucket boundaries"}


def _joint(a: float | None, b: float | None) -> tuple[float | None, float | None]:
    if a is None and b is None:
        return None, None
    if a is None or b is None:
        single = a if a is not None else b
        return single, single
    return max(0.0, a + b - 1.0), min(a, b)


def goodput(inc: Increases, slo_ttft_s: float | None, slo_tpot_s: float | None,
            tpot_ratio_if_toggled: float | None = None) -> Goodput | None:
    """Goodput over the span; None without an SLO or without requests in the histograms.

    `tpot_ratio_if_toggled`: per-token time with speculation switched over per-token time now (the
    advisor's speedup: 1/s when turning it on, s when turning it off)."""
    if slo_ttft_s is None and slo_tpot_s is None:
        return None
    ttft_h = inc.histogram(TTFT)
    tpot_h = inc.histogram(*REQUEST_TPOT)
    ttft = share_at_or_below(ttft_h, slo_ttft_s) if slo_ttft_s is not None else None
    tpot = share_at_or_below(tpot_h, slo_tpot_s) if slo_tpot_s is not None else None
    if ttft is None and tpot is None:
        return None
    low, high = _joint(ttft, tpot)
    tpot_t = low_t = high_t = None
    if tpot_ratio_if_toggled is not None and tpot_ratio_if_toggled > 0:
        if slo_tpot_s is not None:
            # a request with TPOT x now has x·ratio toggled: inside the SLO iff x ≤ slo / ratio
            tpot_t = share_at_or_below(tpot_h, slo_tpot_s / tpot_ratio_if_toggled)
        low_t, high_t = _joint(ttft, tpot_t if slo_tpot_s is not None else None)
    counts = [h.count for h in (ttft_h, tpot_h) if h is not None]
    return Goodput(slo_ttft_s, slo_tpot_s, max(counts) if counts else 0.0, ttft, tpot, low, high,
                   tpot_t, low_t, high_t)


@dataclass(frozen=True, slots=True)
class GpuEnergy:
    index: int
    joules: float  # energy over the span
    joules_per_token: float | None  # that GPU's energy per output token of the node


@dataclass(frozen=True, slots=True)
class Energy:
    """Energy per output token over the span, per GPU and for the node.

    `joules_per_token_if_toggled`: the same with speculation switched the other way at this load,
    at the same power draw, so energy per token follows time per token (divided by the predicted
    speedup of the switch). `computed_per_emitted` is what the target computes per token it emits:
    above 1 the rejected draft positions are energy spent on nothing.
    """

    seconds: float
    output_tokens: float
    joules: float
    joules_per_token: float | None
    gpus: tuple[GpuEnergy, ...]
    computed_per_emitted: float | None = None
    joules_per_token_if_toggled: float | None = None

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "output_tokens": self.output_tokens, "joules": self.joules,
                "joules_per_token": self.joules_per_token,
                "joules_per_token_if_toggled": self.joules_per_token_if_toggled,
                "computed_per_emitted": self.computed_per_emitted,
                "gpus": [{"index": g.index, "joules": g.joules, "joules_per_token": g.joules_per_token}
                         for g in self.gpus]}


def energy_per_token(gpu_joules: Mapping[int, float], output_tokens: float | None, seconds: float,
                     computed_per_emitted: float | None = None,
                     speedup_if_toggled: float | None = None) -> Energy | None:
    """Energy per output token from each GPU's energy over the span (joules, by GPU index) and the
    node's output tokens over the same span. None without an energy reading."""
    if not gpu_joules:
        return None
    total = sum(gpu_joules.values())
    per_token = total / output_tokens if output_tokens else None
    gpus = tuple(GpuEnergy(i, j, j / output_tokens if output_tokens else None)
                 for i, j in sorted(gpu_joules.items()))
    toggled = None
    if per_token is not None and speedup_if_toggled is not None and speedup_if_toggled > 0:
        toggled = per_token / speedup_if_toggled
    return Energy(seconds, output_tokens or 0.0, total, per_token, gpus, computed_per_emitted, toggled)


def energy_counter_increase(first: float | None, last: float | None) -> float | None:
    """A GPU's energy over a span from its cumulative counter: None when either reading is missing
    or the counter went down (a driver reload reset it, and the span's energy is unknown)."""
    if first is None or last is None or last < first:
        return None
    return last - first


@dataclass(frozen=True, slots=True)
class HealthFigures:
    latency: tuple[LatencyRow, ...]
    shape: RequestShape | None
    finish_reasons: dict[str, float]
    output_tokens: float | None

    @property
    def truncated_share(self) -> float | None:
        """The share of finished requests cut at their max_tokens (finished_reason="length")."""
        total = sum(self.finish_reasons.values())
        return self.finish_reasons.get("length", 0.0) / total if total > 0 else None

    def to_dict(self) -> dict:
        return {"latency": {r.name: r.to_dict() for r in self.latency},
                "request_shape": self.shape.to_dict() if self.shape is not None else None,
                "finish_reasons": dict(self.finish_reasons),
                "truncated_share": self.truncated_share}


def traffic(inc: Increases | None, seconds: float, kv_capacity_tokens: float | None = None) -> dict:
    """The load the node carried over the span: requests finished and preemptions per second, the
    prefix cache's hit rate (prompt tokens found in the cache over those looked up) and the KV
    cache's size in tokens. A figure the server does not export is None."""
    def rate(name: str) -> float | None:
        value = inc.counter(name) if inc is not None else None
        return value / seconds if value is not None and seconds > 0 else None

    def first(names: tuple[str, ...]) -> float | None:
        # a server of either era exports one pair, never both
        return next((v for v in map(inc.counter, names) if v is not None), None) if inc is not None else None

    queries, hits = first(PREFIX_QUERIES), first(PREFIX_HITS)
    return {"requests_per_s": rate(REQUEST_SUCCESS), "preemptions_per_s": rate(PREEMPTIONS),
            "prefix_cache_queries": queries, "prefix_cache_hits": hits,
            "prefix_cache_hit_rate": hits / queries if hits is not None and queries else None,
            "kv_capacity_tokens": kv_capacity_tokens}


def health_figures(inc: Increases) -> HealthFigures:
    return HealthFigures(latency_table(inc), request_shape(inc), finish_reasons(inc),
                         inc.counter(GENERATION_TOKENS))



def decode_positions_per_token(inc: Increases) -> float | None:
    """Decode positions the target computed per output token: verified (draft tokens + one per draft)
    plus plain decode, over the tokens emitted. Near 1 without speculation; with it, above 1 by the
    rejected draft positions: the compute (and energy) spent on tokens never emitted."""
    tokens = step_tokens(inc)
    if tokens is None or tokens.emitted <= 0:
        return None
    return (tokens.verified + tokens.plain_decode) / tokens.emitted


def health_report(inc: Increases | None, seconds: float, gpu_joules: Mapping[int, float],
                  slo_ttft_s: float | None, slo_tpot_s: float | None,
                  speculation_on: bool, expected_speedup: float | None,
                  node_output_tokens: float | None = None, breakdown: bool = True,
                  kv_capacity_tokens: float | None = None) -> dict:
    """The health block of `check --json` (and what the exporter serves): latency breakdown, request
    shape, finish reasons, goodput and energy per output token over the window.

    `breakdown=False` leaves out the latency breakdown, request shape and finish reasons (the
    costly part: a quantile walk per histogram): the block of a screen that shows only the
    goodput and energy lines.

    `expected_speedup` is the advisor's per-token speedup of speculation at this load; with
    speculation on, switching it off makes each token `expected_speedup` times slower, and with it
    off, switching it on makes each token that much faster. `node_output_tokens`: the output tokens
    of every target on the node's GPUs over the window (the energy is all of theirs); this target's
    when None. `kv_capacity_tokens`: the KV cache's size (a gauge, not an increase), for `traffic`."""
    toggled_tpot_ratio = toggled_speed = None
    if expected_speedup is not None and expected_speedup > 0:
        toggled_tpot_ratio = expected_speedup if speculation_on else 1.0 / expected_speedup
        toggled_speed = 1.0 / toggled_tpot_ratio
    block: dict = {"window_s": seconds, "speculation_toggled_to": "off" if speculation_on else "on",
                   "latency": {}, "request_shape": None, "finish_reasons": {}, "truncated_share": None,
                   "goodput": None, "energy": None, "traffic": traffic(inc, seconds, kv_capacity_tokens)}
    if inc is None:
        return block
    if breakdown:
        block.update(health_figures(inc).to_dict())
    g = goodput(inc, slo_ttft_s, slo_tpot_s, toggled_tpot_ratio)
    block["goodput"] = g.to_dict() if g is not None else None
    tokens = node_output_tokens if node_output_tokens is not None else inc.counter(GENERATION_TOKENS)
    e = energy_per_token(gpu_joules, tokens, seconds,
                         decode_positions_per_token(inc), toggled_speed)
    block["energy"] = e.to_dict() if e is not None else None
    return block


def node_output_tokens(increases: Iterable[Increases | None]) -> float | None:
    """The output tokens of every target over the window: what the node's GPU energy bought."""
    values = [inc.counter(GENERATION_TOKENS) for inc in increases if inc is not None]
    values = [v for v in values if v is not None]
    return sum(values) if values else None
