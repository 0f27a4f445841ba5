"""From counters to figures: increases that survive counter resets and restarts, histogram
quantiles from bucket deltas, acceptance, the tokens the engine's steps computed (vLLM's counter
semantics), and one engine's figures over a span.

Counters are turned into increases the way Prometheus' increase() does: pair by pair, and a counter
that went down (or a server whose start time changed) restarted from zero, so its increase over that
pair is its new value. A restarted server therefore never yields a negative rate. Histogram
quantiles come from bucket deltas, interpolated linearly inside the bucket, as histogram_quantile(),
and held to Markov's bound from the sum and count (a q-quantile ≤ mean/(1 − q)).

Nothing here does I/O or reads a clock.
"""

from __future__ import annotations


import math
from operator import lt as _lt
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from specwatch.telemetry.snapshot import EngineSample, Histogram
from specwatch.readings.cut import tokens_cut


__all__ = [
    "DRAFTS",
    "DRAFT_TOKENS",
    "ACCEPTED",
    "EMITTED_V0",
    "ACCEPTANCE_RATE_V0",
    "PROMPT_TOKENS",
    "PROMPT_TOKENS_CACHED",
    "AT_MOST",
    "AT_LEAST",
    "histogram_quantile_bound",
    "INFERENCE",
    "QUEUE",
    "GENERATION_TOKENS",
    "RUNNING",
    "WAITING",
    "KV_USAGE",
    "KV_CAPACITY_TOKENS",
    "KV_BLOCKS",
    "KV_BLOCK_SIZE",
    "TTFT",
    "TPOT",
    "ITL",
    "ITERATION_TOKENS",
    "MFU_FLOPS",
    "MFU_READ",
    "MFU_WRITE",
    "REQUEST_SUCCESS",
    "PREEMPTIONS",
    "counter_increase",
    "histogram_increase",
    "histogram_quantile",
    "markov_bound",
    "HistogramDeltas",
    "SummedHistograms",
    "HistogramTotals",
    "histogram_increase_totals",
    "Increases",
    "engine_restarted",
    "increases_between",
    "lifetime_increases",
    "sum_increases",
    "negative_zero",
    "Acceptance",
    "acceptance",
    "StepTokens",
    "step_tokens",
    "EngineFigures",
    "engine_figures",
]

# Family names, with the newer spelling first: the first one present is used.
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
EMITTED_V0 = "vllm:spec_decode_num_emitted_tokens"
ACCEPTANCE_RATE_V0 = "vllm:spec_decode_draft_acceptance_rate"
PROMPT_TOKENS = "vllm:prompt_tokens"
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached"
GENERATION_TOKENS = "vllm:generation_tokens"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
KV_CAPACITY_TOKENS = "vllm:cache_config_info:kv_cache_size_tokens"
KV_BLOCKS = "vllm:cache_config_info:num_gpu_blocks"
KV_BLOCK_SIZE = "vllm:cache_config_info:block_size"
TTFT = "vllm:time_to_first_token_seconds"
# Per-token decode time: the per-request TPOT histogram (0.11+) is per token even under speculation;
# the step-level ITL histograms are the fallback (they measure time between steps, see vllm.md §1.4).
TPOT = ("vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds")
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
# One observation per engine step of prompt tokens computed + tokens emitted: see computed_tokens.
ITERATION_TOKENS = "vllm:iteration_tokens_total"
MFU_FLOPS = "vllm:estimated_flops_per_gpu"
MFU_READ = "vllm:estimated_read_bytes_per_gpu"
MFU_WRITE = "vllm:estimated_write_bytes_per_gpu"
REQUEST_SUCCESS = "vllm:request_success"
PREEMPTIONS = "vllm:num_preemptions"
# Each finished request's time in the engine's running set (prefill + decode) and in its queue.
INFERENCE = "vllm:request_inference_time_seconds"
QUEUE = "vllm:request_queue_time_seconds"
# EngineFigures.judged_running: the longest mean request, as a share of the window, beside which the
# window's time average is the load rather than the gauge read at its end.
TIME_AVERAGE_MAX_REQUEST_SHARE = 0.25


def counter_increase(prev: float, cur: float, restarted: bool = False) -> float:
    """Prometheus increase() for one pair: a drop, or a known restart, means it began again at 0."""
    if restarted or cur < prev:
        return cur
    return cur - prev


class HistogramTotals(NamedTuple):
    """A histogram's sum and count: what a mean reads, without the buckets."""

    sum: float
    count: float


def _taken_whole(prev: Histogram, cur: Histogram, restarted: bool = False) -> bool:
    """Whether the increase from `prev` to `cur` is `cur` itself: after a restart, a count that went
    down, or another number of buckets."""
    return restarted or cur.count < prev.count or prev.bucket_count != cur.bucket_count


def _delta_totals(prev: Histogram, cur: Histogram) -> HistogramTotals:
    return HistogramTotals(max(0.0, cur.sum - prev.sum), cur.count - prev.count)


def histogram_increase_totals(prev: Histogram, cur: Histogram) -> HistogramTotals:
    """histogram_increase(prev, cur)'s sum and count, without pairing the buckets."""
    return HistogramTotals(cur.sum, cur.count) if _taken_whole(prev, cur) else _delta_totals(prev, cur)


def histogram_increase(prev: Histogram, cur: Histogram, restarted: bool = False) -> Histogram:
    if _taken_whole(prev, cur, restarted):
        return cur
    prev_buckets, cur_buckets = prev.buckets, cur.buckets
    # the usual case, the same bounds in the same order: pair the buckets by position, in one pass
    buckets = []
    append = buckets.append
    for (le, c), (prev_le, p) in zip(cur_buckets, prev_buckets):
        if le is not prev_le and le != prev_le:  # (is: as a list comparison takes the same object)
            prev_by_le = dict(prev_buckets)
            buckets = [(le, max(0.0, c - prev_by_le.get(le, 0.0))) for le, c in cur_buckets]
            break
        d = c - p
        append((le, d if d > 0.0 else 0.0))
    return Histogram(tuple(buckets), *_delta_totals(prev, cur))


# How a quantile's figure stands to the quantile (histogram_quantile_bound): the figure is the most
# it can be (held to the Markov bound), or the least (it lies past the last finite bucket bound).
AT_MOST, AT_LEAST = "at_most", "at_least"


def histogram_quantile(q: float, h: Histogram | None) -> float | None:
    """The q-quantile of a (delta) histogram, as PromQL's histogram_quantile() computes it, held to
    what the histogram's sum and count say (markov_bound): linear interpolation inside a wide bucket
    can put a quantile far above every observation (all in le="0.3" with a mean of 0.04 ms reads as a
    p50 of 150 ms), and a figure no set of observations with that mean can have is not shown."""
    return histogram_quantile_bound(q, h)[0]


def histogram_quantile_bound(q: float, h: Histogram | None) -> tuple[float | None, str | None]:
    """`histogram_quantile`, and whether its figure is a bound rather than an estimate: AT_MOST where
    the Markov bound held it (every observation in a wide first bucket, say), AT_LEAST where the
    quantile lies in the +Inf bucket (the last finite bound is reported), None otherwise."""
    if h is None or not h.buckets or h.count <= 0:
        return None, None
    total = h.buckets[-1][1]
    if total <= 0:
        return None, None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    mark = None
    for le, count in h.buckets:
        if count >= rank:
            if math.isinf(le):
                # the quantile is past the last finite bound: report that bound, as Prometheus does
                value, mark = prev_le, AT_LEAST
            elif count == prev_count:
                value = le
            else:
                value = prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
            break
        prev_le, prev_count = le, count
    else:
        value, mark = prev_le, AT_LEAST
    bound = markov_bound(q, h)
    return (value, mark) if bound is None or value <= bound else (bound, AT_MOST)


def markov_bound(q: float, h: Histogram | None) -> float | None:
    """The most the q-quantile of non-negative observations can be, given their mean: by Markov's
    inequality P(X ≥ t) ≤ mean/t, so the q-quantile is at most mean/(1 − q) (p50 ≤ 2×, p90 ≤ 10×,
    p99 ≤ 100× the mean). None where the mean is not known: no observations, q ≥ 1, or a sum that is
    not a positive finite number (an exposition without its _sum line reads as a sum of 0, and no
    latency or length is 0 on every observation)."""
    if h is None or h.count <= 0 or not 0.0 <= q < 1.0 or not 0.0 < h.sum < math.inf:
        return None
    return (h.sum / h.count) / (1.0 - q)


def _add_histograms(a: Histogram | None, b: Histogram) -> Histogram:
    if a is None:
        return b
    if [le for le, _ in a.buckets] != [le for le, _ in b.buckets]:
        return b if b.count >= a.count else a  # bucket layouts changed mid-window: keep the larger
    return Histogram(
        tuple((le, ca + cb) for (le, ca), (_, cb) in zip(a.buckets, b.buckets)), a.sum + b.sum, a.count + b.count
    )


@dataclass(frozen=True, slots=True)
class Increases:
    """What one engine (or a sum of engines) did over a span: counter increases and histogram deltas."""

    seconds: float
    counters: dict[str, float] = field(default_factory=dict)
    accepted_per_position: tuple[float, ...] = ()
    # a dict, or a Mapping that works each histogram out when read (HistogramDeltas, SummedHistograms)
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    restarts: int = 0

    def counter(self, name: str) -> float | None:
        return self.counters.get(name)

    def histogram(self, *names: str) -> Histogram | None:
        for n in names:
            h = self.histograms.get(n)
            if h is not None:
                return h
        return None

    def histogram_totals(self, *names: str) -> HistogramTotals | None:
        """`histogram(*names)`'s sum and count, without working out its buckets when they are not yet
        (a mean, a count of steps or of requests needs none)."""
        histograms = self.histograms
        for n in names:
            if n in histograms:
                if isinstance(histograms, HistogramDeltas):
                    return histograms.totals(n)
                h = histograms[n]
                return HistogramTotals(h.sum, h.count)
        return None


def engine_restarted(prev: EngineSample, cur: EngineSample) -> bool:
    """One counter (or histogram count) going down means the engine restarted: every counter began
    again at zero, even those that have already climbed past their old values."""
    cur_counters, prev_counters = cur.counters, prev.counters
    if cur_counters is not prev_counters:
        if list(cur_counters) == list(prev_counters):
            # the usual case, the same counters in the same order: compare them by position
            if any(map(_lt, cur_counters.values(), prev_counters.values())):
                return True
        else:
            for name, value in prev_counters.items():
                if cur_counters.get(name, math.inf) < value:
                    return True
    for name, h in cur.histograms.items():
        before = prev.histograms.get(name)
        if before is not None and h.count < before.count:
            return True
    return False


class _HistogramsWhenRead(Mapping[str, Histogram]):
    """Histograms under a known set of names, each worked out when first read (by the subclass's
    __getitem__): equal to, iterated and shown as the dict of them all."""

    __slots__ = ("_names",)
    _names: Mapping[str, Any]  # the names, in order

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class HistogramDeltas(_HistogramsWhenRead):
    """An engine's histograms over one stretch with no restart (each later reading less the earlier
    one, as `_segment_increase` adds them), each worked out when first read: an evaluation reads a
    few of an engine's histograms (TTFT, TPOT, steps, request lengths), the health view all of them."""

    __slots__ = ("_earlier", "_later", "_deltas")

    def __init__(self, earlier: Mapping[str, Histogram], later: Mapping[str, Histogram]) -> None:
        self._earlier = earlier
        self._later = self._names = later
        self._deltas: dict[str, Histogram] = {}

    def __getitem__(self, name: str) -> Histogram:
        delta = self._deltas.get(name)
        if delta is None:
            later = self._later[name]
            earlier = self._earlier.get(name)
            delta = self._deltas[name] = later if earlier is None else histogram_increase(earlier, later)
        return delta

    def get(self, name: str, default: Any = None) -> Any:  # Mapping.get would go through a KeyError
        delta = self._deltas.get(name)
        if delta is not None:
            return delta
        return self[name] if name in self._later else default

    def totals(self, name: str) -> HistogramTotals:
        """self[name]'s sum and count, without pairing its buckets when they are not paired yet."""
        delta = self._deltas.get(name)
        if delta is not None:
            return HistogramTotals(delta.sum, delta.count)
        later = self._later[name]
        earlier = self._earlier.get(name)
        return HistogramTotals(later.sum, later.count) if earlier is None else histogram_increase_totals(earlier, later)


class SummedHistograms(_HistogramsWhenRead):
    """Several engines' histograms added name by name, in the engines' order (as sum_increases added
    them eagerly, with _add_histograms), each sum worked out when first read: an evaluation of a
    node of eight engines reads a few of its histograms, not the twenty-odd each engine carries."""

    __slots__ = ("_parts", "_sums")

    def __init__(self, parts: list[Mapping[str, Histogram]]) -> None:
        self._parts = parts
        names: dict[str, None] = {}
        for part in parts:
            names.update(dict.fromkeys(part))
        self._names = names  # in the order the engines first list them
        self._sums: dict[str, Histogram] = {}

    def __getitem__(self, name: str) -> Histogram:
        total = self._sums.get(name)
        if total is None:
            if name not in self._names:
                raise KeyError(name)
            for part in self._parts:
                h = part.get(name)
                if h is not None:
                    total = _add_histograms(total, h)
            self._sums[name] = total  # type: ignore[assignment]
        return total  # type: ignore[return-value]

    def get(self, name: str, default: Any = None) -> Any:  # Mapping.get would go through a KeyError
        return self[name] if name in self._names else default


def _counters_increase(first: EngineSample, last: EngineSample, from_zero: bool,
                       counters: dict[str, float], per_pos: list[float]) -> None:
    """Add the counters' increases from `first` to `last` (see _segment_increase)."""
    before = {} if from_zero else first.counters
    for name, value in last.counters.items():
        prev = before.get(name, 0.0)
        # counter_increase(prev, value), inline: a drop means the counter began again at zero
        counters[name] = counters.get(name, 0.0) + (value if value < prev else value - prev)
    before_pos = () if from_zero else first.accepted_per_position
    for i, value in enumerate(last.accepted_per_position):
        if i >= len(per_pos):
            per_pos.append(0.0)
        per_pos[i] += counter_increase(before_pos[i] if i < len(before_pos) else 0.0, value)


def _segment_increase(first: EngineSample, last: EngineSample, from_zero: bool,
                      counters: dict[str, float], per_pos: list[float], histograms: dict[str, Histogram]) -> None:
    """Add what happened from `first` to `last` with no restart in between (counters are cumulative,
    so that is last − first), or from zero to `last` when the segment began with a restart."""
    _counters_increase(first, last, from_zero, counters, per_pos)
    for name, h in last.histograms.items():
        before_h = None if from_zero else first.histograms.get(name)
        delta = h if before_h is None else histogram_increase(before_h, h)
        histograms[name] = _add_histograms(histograms.get(name), delta)


def increases_between(pairs: Sequence[tuple[EngineSample, EngineSample, bool]],
                      restarts_checked: bool = False) -> Increases | None:
    """What one engine did over consecutive readings. Each pair is (earlier, later, server_restarted).
    With `restarts_checked` the flags already include engine restarts (engine_restarted), as the
    Window computes them once per pair rather than once per pair per evaluation.

    The same as summing Prometheus' increase() pair by pair, computed per stretch between restarts:
    within a stretch the counters are cumulative, so only its ends matter, and a sliding window costs
    one subtraction per stretch rather than one per pair.
    """
    if not pairs:
        return None
    counters: dict[str, float] = {}
    per_pos: list[float] = []
    histograms: dict[str, Histogram] = {}
    restarts = 0
    first, from_zero = pairs[0][0], False
    for prev, cur, restarted in pairs:
        if restarted or (not restarts_checked and engine_restarted(prev, cur)):
            _segment_increase(first, prev, from_zero, counters, per_pos, histograms)
            restarts += 1
            first, from_zero = cur, True
    last = pairs[-1][1]
    if not restarts:
        # one stretch (the usual case): its histograms' deltas are worked out when read
        _counters_increase(first, last, False, counters, per_pos)
        return Increases(0.0, counters, tuple(per_pos), HistogramDeltas(first.histograms, last.histograms), 0)
    _segment_increase(first, last, from_zero, counters, per_pos, histograms)
    return Increases(0.0, counters, tuple(per_pos), histograms, restarts)


def lifetime_increases(engine: EngineSample) -> Increases:
    """Totals since the server started: the counters as they stand."""
    return Increases(0.0, dict(engine.counters), engine.accepted_per_position, dict(engine.histograms))


def sum_increases(parts: Iterable[Increases], seconds: float) -> Increases:
    counters: dict[str, float] = {}
    per_pos: list[float] = []
    histograms: list[Mapping[str, Histogram]] = []
    restarts = 0
    for inc in parts:
        for n, v in inc.counters.items():
            counters[n] = counters.get(n, 0.0) + v
        for i, v in enumerate(inc.accepted_per_position):
            if i >= len(per_pos):
                per_pos.append(0.0)
            per_pos[i] += v
        histograms.append(inc.histograms)
        restarts += inc.restarts
    return Increases(seconds, counters, tuple(per_pos), SummedHistograms(histograms), restarts)


def negative_zero(inc: Increases) -> bool:
    return any(v == 0.0 and math.copysign(1.0, v) < 0.0
               for v in (*inc.counters.values(), *inc.accepted_per_position))


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Speculative-decoding acceptance over a span (DESIGN §3)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float | None  # A/T
    acceptance_length: float | None  # 1 + A/D, bonus token included
    per_position: tuple[float, ...]  # a_i / D

    def to_dict(self) -> dict:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length,
            "per_position": list(self.per_position),
        }


def acceptance(inc: Increases) -> Acceptance | None:
    """Acceptance from V1 counters, or from V0's emitted-tokens counter when that is all there is."""
    accepted = inc.counter(ACCEPTED)
    draft_tokens = inc.counter(DRAFT_TOKENS)
    drafts = inc.counter(DRAFTS)
    if drafts is None and accepted is not None and inc.counter(EMITTED_V0) is not None:
        # V0: emitted = accepted + one bonus token per draft, so drafts = emitted − accepted.
        drafts = max(0.0, inc.counters[EMITTED_V0] - accepted)
    if accepted is None or drafts is None:
        return None
    draft_tokens = draft_tokens if draft_tokens is not None else 0.0
    return Acceptance(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
        acceptance_length=1.0 + accepted / drafts if drafts > 0 else None,
        per_position=tuple(a / drafts for a in inc.accepted_per_position) if drafts > 0 else (),
    )


def _mean(h: Histogram | HistogramTotals | None) -> float | None:
    return h.sum / h.count if h is not None and h.count > 0 else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den is not None and den > 0 else None


@dataclass(frozen=True, slots=True)
class StepTokens:
    """What the engine steps of a span computed and emitted, from the counters (vllm.md §1.3, §1.4).

    vLLM V1 observes `vllm:iteration_tokens_total` once per engine step with the prompt tokens that
    step prefilled (cached prefix tokens excluded) plus the tokens it EMITTED: on a speculative step
    that is 1 + accepted per request, whatever the verifier computed. Its _count is the number of
    steps, its _sum is Δprompt − Δprompt_cached + Δgeneration, and its mean is not what a step cost.

    The positions the target's forward pass computed are counted from the counters instead:
    - prompt: Δprompt_tokens − Δprompt_tokens_cached (the counter counts cached prefix tokens too);
    - verified: Δdraft_tokens + Δdrafts. A request with a draft is verified over its draft tokens
      plus one position (the bonus/correction token); a request whose drafter proposed nothing (an
      n-gram miss) is not counted in drafts and decodes one position plainly; an n-gram proposal
      shorter than k counts only its own tokens in draft_tokens. So draft_tokens, not drafts·k, is the
      right count, and drafts·(k+1) holds only when every proposal is full length (a draft model);
    - plain decode: Δgeneration − (Δdrafts + Δaccepted − cut) − first tokens. A verify step emits
      1 + accepted per draft; the first token of each request comes from its prefill, whose
      positions are the prompt's (counted once per request by the TTFT histogram's _count; without
      it, by finished requests);
    - cut: vLLM counts a draft's accepted tokens before it cuts the step's output at the request's
      end (max_tokens or a stop string or token: Scheduler.update_from_output takes the accepted
      count from the sampled tokens, then _update_request_with_output trims them), so Δaccepted
      holds tokens no one received, and without them the plain decodes come out short by as many.
      No counter gives the cut: it is estimated (readings.cut.tokens_cut).
    Not visible in any counter: the positions a preempted request recomputes when it resumes.
    """

    steps: float
    computed: float  # positions the target's forward passes computed
    prompt_computed: float
    verified: float  # positions computed by verify steps: draft tokens + one per draft
    plain_decode: float
    emitted: float  # output tokens (vllm:generation_tokens)
    prompt_and_emitted: float  # what iteration_tokens_total sums: prompt computed + emitted
    verify_emitted: float = 0.0  # tokens the verify steps emitted: Δdrafts + Δaccepted − cut
    cut: float = 0.0  # accepted tokens counted past the requests' ends (estimated: cut.tokens_cut)

    @property
    def computed_per_step(self) -> float | None:
        return self.computed / self.steps if self.steps > 0 else None

    @property
    def prompt_and_emitted_per_step(self) -> float | None:
        return self.prompt_and_emitted / self.steps if self.steps > 0 else None


def step_tokens(inc: Increases) -> StepTokens | None:
    """The tokens the steps of a span computed and emitted; None without a step count or the
    token counters."""
    return _step_tokens(inc, acceptance(inc))


def _step_tokens(inc: Increases, acc: Acceptance | None) -> StepTokens | None:
    """step_tokens(inc), with acceptance(inc) already worked out (engine_figures reads both)."""
    steps_h = inc.histogram_totals(ITERATION_TOKENS)
    generation = inc.counter(GENERATION_TOKENS)
    prompt = inc.counter(PROMPT_TOKENS)
    if steps_h is None or generation is None or prompt is None:
        return None
    prompt_computed = max(0.0, prompt - (inc.counter(PROMPT_TOKENS_CACHED) or 0.0))
    ttft = inc.histogram(TTFT)
    finished = inc.counter(REQUEST_SUCCESS)
    first_tokens = ttft.count if ttft is not None else (finished or 0.0)
    verified = verify_emitted = cut = 0.0
    if acc is not None:
        verified = acc.draft_tokens + acc.drafts
        cut = tokens_cut(acc.drafts, acc.accepted_tokens, acc.per_position, generation - first_tokens,
                         finished or 0.0)
        verify_emitted = acc.drafts + acc.accepted_tokens - cut
    plain = max(0.0, generation - verify_emitted - first_tokens)
    return StepTokens(
        steps=float(steps_h.count),
        computed=prompt_computed + verified + plain,
        prompt_computed=prompt_computed,
        verified=verified,
        plain_decode=plain,
        emitted=generation,
        prompt_and_emitted=prompt_computed + generation,
        verify_emitted=verify_emitted,
        cut=cut,
    )


@dataclass(frozen=True, slots=True)
class EngineFigures:
    """The engine-level figures specwatch shows and the advisor reads, for one engine or a total."""

    seconds: float
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    tpot_mean_s: float | None
    itl_mean_s: float | None  # time between engine steps, as seen by a request
    generation_tokens_per_s: float | None
    prompt_tokens_per_s: float | None
    prompt_to_output_ratio: float | None
    # positions the target computed per step (prompt + verified + plain decode: StepTokens)
    computed_tokens_per_step_mean: float | None
    # vllm:iteration_tokens_total's mean: prompt tokens computed + tokens emitted, per step
    prompt_and_emitted_tokens_per_step_mean: float | None
    steps_per_s: float | None
    mfu_intensity: float | None  # estimated FLOPs per byte moved (--enable-mfu-metrics)
    mfu_flops_per_s: float | None
    requests_finished: float | None
    preemptions: float | None
    kv_capacity_tokens: float | None  # the KV cache's size, from cache_config_info
    context_tokens: float | None  # tokens held in the KV cache now: usage × capacity
    acceptance: Acceptance | None
    restarts: int = 0
    step_tokens: StepTokens | None = None
    # the share of the window each engine spent in decode steps: steps per second per engine × the
    # step period its decoding requests saw (the inter-token latency: vLLM observes, per request, the
    # time between consecutive engine outputs, one a step while it decodes; tests/test_engine_busy.py).
    # The part speculation can speed. Below 1 the engine idled, or prefilled, or waited on the API
    # server, the tokenizer or the clients.
    busy_share: float | None = None
    # Requests in the engine's running set and in its queue on the window's time average (Little's
    # law: the increase of Σ time each request spent there, over the window's seconds). The gauges
    # are read at an instant: with short requests on a fast engine they read 0 at most scrapes while
    # work flows (tests/test_engine_sweep.py). Only requests that finished in the window count, so
    # None when none did, and low in a window shorter than a request.
    running_time_mean: float | None = None
    waiting_time_mean: float | None = None
    request_inference_mean_s: float | None = None  # a finished request's mean time in the running set

    def judged_running(self) -> tuple[float | None, str | None]:
        """The load a verdict is judged at, and where it came from: the window's time average
        ("time_average") where the requests that finished in it were short beside it, else the gauge
        at the window's end ("gauge"). A request still running at the window's end is not in the
        time average, and one that began before it counts whole: beside requests that last a
        quarter of the window or more, those edges outweigh the instant the gauge was read."""
        mean_s = self.request_inference_mean_s
        if (self.running_time_mean is not None and mean_s is not None
                and mean_s <= TIME_AVERAGE_MAX_REQUEST_SHARE * self.seconds):
            return self.running_time_mean, "time_average"
        return (self.running, "gauge") if self.running is not None else (None, None)

    def sequences_per_step(self) -> float | None:
        """The sequences a step decoded, on the window's mean (each verified once a speculative step,
        or decoded plain), or None without the counts."""
        tokens = self.step_tokens
        if tokens is None or tokens.steps <= 0:
            return None
        drafts = self.acceptance.drafts if self.acceptance is not None else 0.0
        return (drafts + tokens.plain_decode) / tokens.steps

    def per_decode_step(self) -> tuple[float, float] | None:
        """(tokens emitted, positions verified) per sequence per decode step over the window, or None.
        A drafter that proposes nothing for a sequence (an n-gram miss) leaves that sequence's step a
        plain decode of one position and one token: the acceptance length, per draft, overstates what
        a step emits wherever that happens."""
        tokens, acc = self.step_tokens, self.acceptance
        if tokens is None or acc is None or acc.drafts <= 0:
            return None
        steps = acc.drafts + tokens.plain_decode
        return ((tokens.verify_emitted + tokens.plain_decode) / steps, (tokens.verified + tokens.plain_decode) / steps)


def engine_figures(inc: Increases, gauges: Sequence[dict[str, float]]) -> EngineFigures:
    """Figures from increases over `inc.seconds` and the latest gauges of the engines summed."""
    seconds = inc.seconds

    def gauge_sum(*names: str) -> float | None:
        vals = [next((g[n] for n in names if n in g), None) for g in gauges]
        vals = [v for v in vals if v is not None]
        return sum(vals) if vals else None

    kv = [next((g[n] for n in KV_USAGE if n in g), None) for g in gauges]
    kv = [v for v in kv if v is not None]
    capacity = None
    context = None
    for g in gauges:
        cap = g.get(KV_CAPACITY_TOKENS)
        if cap is None and KV_BLOCKS in g and KV_BLOCK_SIZE in g:
            cap = g[KV_BLOCKS] * g[KV_BLOCK_SIZE]
        usage = next((g[n] for n in KV_USAGE if n in g), None)
        if cap is not None:
            capacity = (capacity or 0.0) + cap
            if usage is not None:
                context = (context or 0.0) + usage * cap
    ttft = inc.histogram(TTFT)
    steps = inc.histogram_totals(ITERATION_TOKENS)
    accepted = acceptance(inc)
    tokens = _step_tokens(inc, accepted)
    gen = inc.counter(GENERATION_TOKENS)
    prompt = inc.counter(PROMPT_TOKENS)
    flops = inc.counter(MFU_FLOPS)
    step_rate = _ratio(steps.count if steps is not None else None, seconds)
    itl = _mean(inc.histogram_totals(*ITL))
    busy = None
    if step_rate is not None and itl is not None and gauges:
        busy = min(1.0, step_rate * itl / len(gauges))
    moved = None
    in_engine, queued = inc.histogram_totals(INFERENCE), inc.histogram_totals(QUEUE)
    if inc.counter(MFU_READ) is not None:
        moved = inc.counters[MFU_READ] + inc.counters.get(MFU_WRITE, 0.0)
    return EngineFigures(
        seconds=seconds,
        running=gauge_sum(RUNNING),
        waiting=gauge_sum(WAITING),
        # engines are equal shares of one pool each: the node's usage is their mean
        kv_cache_usage=sum(kv) / len(kv) if kv else None,
        ttft_p50_s=histogram_quantile(0.5, ttft),
        ttft_p95_s=histogram_quantile(0.95, ttft),
        tpot_mean_s=_mean(inc.histogram_totals(*TPOT)),
        itl_mean_s=itl,
        generation_tokens_per_s=_ratio(gen, seconds),
        prompt_tokens_per_s=_ratio(prompt, seconds),
        prompt_to_output_ratio=_ratio(prompt, gen),
        computed_tokens_per_step_mean=tokens.computed_per_step if tokens is not None else None,
        prompt_and_emitted_tokens_per_step_mean=_mean(steps),
        steps_per_s=step_rate,
        mfu_intensity=_ratio(flops, moved),
        mfu_flops_per_s=_ratio(flops, seconds),
        requests_finished=inc.counter(REQUEST_SUCCESS),
        preemptions=inc.counter(PREEMPTIONS),
        kv_capacity_tokens=capacity,
        context_tokens=context,
        acceptance=accepted,
        restarts=inc.restarts,
        step_tokens=tokens,
        busy_share=busy,
        running_time_mean=_time_mean(in_engine, seconds),
        request_inference_mean_s=_mean(in_engine),
        waiting_time_mean=_time_mean(queued, seconds),
    )


def _time_mean(totals: HistogramTotals | None, seconds: float) -> float | None:
    """Σ time spent in a state, per second of the window: the mean number in that state."""
    if totals is None or totals.count <= 0 or seconds <= 0:
        return None
    return totals.sum / seconds
