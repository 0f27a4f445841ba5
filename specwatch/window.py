"""Rates and quantiles over a sliding window of Snapshots, and the figures derived from them.

Counters are turned into increases the way Prometheus' increase() does: pair by pair, and a counter
that went down (or a server whose start time changed) restarted from zero, so its increase over that
pair is its new value. A restarted server therefore never yields a negative rate. Histogram
quantiles come from bucket deltas, interpolated linearly inside the bucket, as histogram_quantile().

Nothing here does I/O or reads a clock: time comes from the Snapshots.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from itertools import islice
from operator import itemgetter
from operator import lt as _lt
from operator import sub as _sub
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from specwatch.snapshot import TARGET_OK, EngineSample, Histogram, Snapshot, TargetSample

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


_first, _second = itemgetter(0), itemgetter(1)


def counter_increase(prev: float, cur: float, restarted: bool = False) -> float:
    """Prometheus increase() for one pair: a drop, or a known restart, means it began again at 0."""
    if restarted or cur < prev:
        return cur
    return cur - prev


def histogram_increase(prev: Histogram, cur: Histogram, restarted: bool = False) -> Histogram:
    if restarted or cur.count < prev.count or len(prev.buckets) != len(cur.buckets):
        return cur
    prev_buckets, cur_buckets = prev.buckets, cur.buckets
    bounds = list(map(_first, cur_buckets))
    if bounds == list(map(_first, prev_buckets)):
        # the usual case, the same bounds in the same order: pair the buckets by position
        deltas = map(_sub, map(_second, cur_buckets), map(_second, prev_buckets))
        buckets = tuple([(le, d if d > 0.0 else 0.0) for le, d in zip(bounds, deltas)])
    else:
        prev_by_le = dict(prev_buckets)
        buckets = tuple((le, max(0.0, c - prev_by_le.get(le, 0.0))) for le, c in cur_buckets)
    return Histogram(buckets, max(0.0, cur.sum - prev.sum), cur.count - prev.count)


def histogram_quantile(q: float, h: Histogram | None) -> float | None:
    """The q-quantile of a (delta) histogram, as PromQL's histogram_quantile() computes it."""
    if h is None or not h.buckets or h.count <= 0:
        return None
    total = h.buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in h.buckets:
        if count >= rank:
            if math.isinf(le):
                # the quantile is past the last finite bound: report that bound, as Prometheus does
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


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
    histograms: dict[str, Histogram] = field(default_factory=dict)
    restarts: int = 0

    def counter(self, name: str) -> float | None:
        return self.counters.get(name)

    def histogram(self, *names: str) -> Histogram | None:
        for n in names:
            h = self.histograms.get(n)
            if h is not None:
                return h
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


def _segment_increase(first: EngineSample, last: EngineSample, from_zero: bool,
                      counters: dict[str, float], per_pos: list[float], histograms: dict[str, Histogram]) -> None:
    """Add what happened from `first` to `last` with no restart in between (counters are cumulative,
    so that is last − first), or from zero to `last` when the segment began with a restart."""
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
    _segment_increase(first, pairs[-1][1], from_zero, counters, per_pos, histograms)
    return Increases(0.0, counters, tuple(per_pos), histograms, restarts)


def lifetime_increases(engine: EngineSample) -> Increases:
    """Totals since the server started: the counters as they stand."""
    return Increases(0.0, dict(engine.counters), engine.accepted_per_position, dict(engine.histograms))


def sum_increases(parts: Iterable[Increases], seconds: float) -> Increases:
    counters: dict[str, float] = {}
    per_pos: list[float] = []
    histograms: dict[str, Histogram] = {}
    restarts = 0
    for inc in parts:
        for n, v in inc.counters.items():
            counters[n] = counters.get(n, 0.0) + v
        for i, v in enumerate(inc.accepted_per_position):
            if i >= len(per_pos):
                per_pos.append(0.0)
            per_pos[i] += v
        for n, h in inc.histograms.items():
            histograms[n] = _add_histograms(histograms.get(n), h)
        restarts += inc.restarts
    return Increases(seconds, counters, tuple(per_pos), histograms, restarts)


def _negative_zero(inc: Increases) -> bool:
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


def _mean(h: Histogram | None) -> float | None:
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
    - plain decode: Δgeneration − (Δdrafts + Δaccepted) − first tokens. A verify step emits
      1 + accepted per draft; the first token of each request comes from its prefill, whose
      positions are the prompt's (counted once per request by the TTFT histogram's _count; without
      it, by finished requests).
    Not visible in any counter: the positions a preempted request recomputes when it resumes.
    """

    steps: float
    computed: float  # positions the target's forward passes computed
    prompt_computed: float
    verified: float  # positions computed by verify steps: draft tokens + one per draft
    plain_decode: float
    emitted: float  # output tokens (vllm:generation_tokens)
    prompt_and_emitted: float  # what iteration_tokens_total sums: prompt computed + emitted

    @property
    def computed_per_step(self) -> float | None:
        return self.computed / self.steps if self.steps > 0 else None

    @property
    def prompt_and_emitted_per_step(self) -> float | None:
        return self.prompt_and_emitted / self.steps if self.steps > 0 else None


def step_tokens(inc: Increases) -> StepTokens | None:
    """The tokens the steps of a span computed and emitted; None without a step count or the
    token counters."""
    steps_h = inc.histogram(ITERATION_TOKENS)
    generation = inc.counter(GENERATION_TOKENS)
    prompt = inc.counter(PROMPT_TOKENS)
    if steps_h is None or generation is None or prompt is None:
        return None
    prompt_computed = max(0.0, prompt - (inc.counter(PROMPT_TOKENS_CACHED) or 0.0))
    acc = acceptance(inc)
    verified = verify_emitted = 0.0
    if acc is not None:
        verified = acc.draft_tokens + acc.drafts
        verify_emitted = acc.drafts + acc.accepted_tokens
    ttft = inc.histogram(TTFT)
    first_tokens = ttft.count if ttft is not None else (inc.counter(REQUEST_SUCCESS) or 0.0)
    plain = max(0.0, generation - verify_emitted - first_tokens)
    return StepTokens(
        steps=float(steps_h.count),
        computed=prompt_computed + verified + plain,
        prompt_computed=prompt_computed,
        verified=verified,
        plain_decode=plain,
        emitted=generation,
        prompt_and_emitted=prompt_computed + generation,
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
    steps = inc.histogram(ITERATION_TOKENS)
    tokens = step_tokens(inc)
    gen = inc.counter(GENERATION_TOKENS)
    prompt = inc.counter(PROMPT_TOKENS)
    flops = inc.counter(MFU_FLOPS)
    moved = None
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
        tpot_mean_s=_mean(inc.histogram(*TPOT)),
        itl_mean_s=_mean(inc.histogram(*ITL)),
        generation_tokens_per_s=_ratio(gen, seconds),
        prompt_tokens_per_s=_ratio(prompt, seconds),
        prompt_to_output_ratio=_ratio(prompt, gen),
        computed_tokens_per_step_mean=tokens.computed_per_step if tokens is not None else None,
        prompt_and_emitted_tokens_per_step_mean=_mean(steps),
        steps_per_s=_ratio(steps.count if steps is not None else None, seconds),
        mfu_intensity=_ratio(flops, moved),
        mfu_flops_per_s=_ratio(flops, seconds),
        requests_finished=inc.counter(REQUEST_SUCCESS),
        preemptions=inc.counter(PREEMPTIONS),
        kv_capacity_tokens=capacity,
        context_tokens=context,
        acceptance=acceptance(inc),
        restarts=inc.restarts,
        step_tokens=tokens,
    )


@dataclass(frozen=True, slots=True)
class TargetWindow:
    """One target over the window: per engine and in total, plus the lifetime totals.

    `lifetime` is computed when first read (most evaluations never need it) from the latest engines.
    """

    url: str
    time: float  # the latest Snapshot's time
    latest: TargetSample
    seconds: float
    engines: dict[str, EngineFigures]  # by engine label
    total: EngineFigures | None
    speculation_configured: bool
    k: int | None
    # requests running at the window's first successful reading (None with fewer than two readings):
    # with the latest figure, whether requests were running throughout (a stall, not an arrival)
    running_at_start: float | None = None
    # the engines of the latest reading (when it succeeded), and the lifetime figures once computed
    latest_engines: tuple[EngineSample, ...] = field(default=(), repr=False, compare=False)
    _lifetime: list = field(default_factory=list, repr=False, compare=False)

    @property
    def lifetime(self) -> EngineFigures | None:
        cache = self._lifetime
        if not cache:
            engines = self.latest_engines
            figures = None
            if engines:
                life_inc = sum_increases((lifetime_increases(e) for e in engines), 0.0)
                figures = engine_figures(life_inc, [e.gauges for e in engines])
            cache.append(figures)
        return cache[0]


def _engine_key(e: EngineSample) -> str:
    return e.engine if e.model_name is None else f"{e.model_name}/{e.engine}"


def speculation_configured(engine: EngineSample) -> bool:
    """The spec-decode families exist iff speculation is configured (vllm.md §0)."""
    return (
        DRAFTS in engine.counters
        or bool(engine.accepted_per_position)
        or ACCEPTANCE_RATE_V0 in engine.gauges
        or EMITTED_V0 in engine.counters
    )


def k_of(engines: Sequence[EngineSample], inc: Increases | None) -> int | None:
    """k from the position labels (created at start-up for 0..k-1), else from T/D (V0 servers): over
    the window, else since the server started (a V0 server idle over the window still has its k)."""
    ks = [len(e.accepted_per_position) for e in engines if e.accepted_per_position]
    if ks:
        return max(ks)
    lifetime = sum_increases((lifetime_increases(e) for e in engines), 0.0) if engines else None
    for counted in (inc, lifetime):
        acc = acceptance(counted) if counted is not None else None
        if acc is not None and acc.drafts > 0 and acc.draft_tokens > 0:
            return max(1, round(acc.draft_tokens / acc.drafts))
    return None


@dataclass(slots=True)
class _Walk:
    """Window._walk's columns: per Snapshot of the window, whether it holds a successful reading of
    the target; per such reading, its time, the reading, its engines by key and its steadiness."""

    snaps: list[Snapshot]
    read: list[bool]
    times: list[float]
    readings: list[TargetSample]
    engines: list[dict[str, EngineSample]]
    steady: list[bool]


class Window:
    """The last `seconds` of Snapshots, and what happened over them.

    Adding is O(1) amortised; `target()` works out each Snapshot once while it is in the window (see
    _walk), and in the usual case (the same engines throughout, no restart) subtracts the first
    reading from the last.
    """

    def __init__(self, seconds: float = 60.0) -> None:
        if seconds <= 0:
            raise ValueError("the window must be longer than 0 s")
        self.seconds = seconds
        self._snapshots: deque[Snapshot] = deque()
        # engine_restarted(earlier, later) per pair of engine readings, worked out once while the pair
        # is in the window (it stays there for many evaluations): keyed by the id of the later
        # reading and checked by identity, so a reused id never matches; forgotten when the later
        # reading leaves the window.
        self._restarts: dict[int, tuple[EngineSample, EngineSample, bool]] = {}
        # Per target URL, what target() worked out for each Snapshot of the window when it last ran
        # (see _walk): it only works out the Snapshots added since.
        self._walks: dict[str, _Walk] = {}

    def __len__(self) -> int:
        return len(self._snapshots)

    @property
    def snapshots(self) -> tuple[Snapshot, ...]:
        return tuple(self._snapshots)

    @property
    def latest(self) -> Snapshot | None:
        return self._snapshots[-1] if self._snapshots else None

    def add(self, snapshot: Snapshot) -> None:
        if self._snapshots and snapshot.time < self._snapshots[-1].time:
            # a clock step backwards (NTP, a replay seek): start over rather than mix timelines
            self._snapshots.clear()
            self._restarts.clear()
            self._walks.clear()
        self._snapshots.append(snapshot)
        # keep one snapshot at or before the window's start, so the span covers the whole window
        while len(self._snapshots) > 2 and self._snapshots[1].time <= snapshot.time - self.seconds:
            self._forget(self._snapshots.popleft())

    def _forget(self, snapshot: Snapshot) -> None:
        """Drop what was worked out for a reading that left the window (and let it be freed)."""
        restarts = self._restarts
        for t in snapshot.targets:
            for e in t.engines:
                restarts.pop(id(e), None)

    def _walk(self, url: str) -> _Walk:
        """The window's successful readings of `url`: their times, the readings, their engines by key,
        and whether each is steady with the reading before it (_steady_pair). Kept between calls:
        Snapshots only leave from the front and join at the back (the window starts over on a step
        back in time, and a walk that does not line up is rebuilt), so only those added since the
        last call are worked out."""
        window = self._snapshots
        walk = self._walks.get(url)
        if walk is not None:
            snaps = walk.snaps
            first = window[0]
            gone = next((i for i, snap in enumerate(snaps) if snap is first), None)
            kept = len(snaps) - gone if gone is not None else 0
            if gone is None or kept > len(window) \
                    or not all(map(operator.is_, islice(window, 0, kept), islice(snaps, gone, None))):
                walk = None
            elif gone:
                read = sum(walk.read[:gone])
                del snaps[:gone], walk.read[:gone]
                del walk.times[:read], walk.readings[:read], walk.engines[:read], walk.steady[:read]
        if walk is None:
            if len(self._walks) > 16 + 2 * len(window[-1].targets):
                self._walks.clear()  # URLs that are no longer read
            walk = self._walks[url] = _Walk([], [], [], [], [], [])
        prev_t = walk.readings[-1] if walk.readings else None
        prev_cur = walk.engines[-1] if walk.engines else {}
        for snap in islice(window, len(walk.snaps), None):
            walk.snaps.append(snap)
            for t in snap.targets:
                if t.url == url:
                    break
            else:
                walk.read.append(False)
                continue
            if t.state != TARGET_OK:
                walk.read.append(False)
                continue
            current = {_engine_key(e): e for e in t.engines}
            walk.read.append(True)
            walk.times.append(snap.time)
            walk.readings.append(t)
            walk.engines.append(current)
            walk.steady.append(prev_t is None or self._steady_pair(prev_t, t, prev_cur, current))
            prev_t, prev_cur = t, current
        return walk

    def _restarted(self, prev: EngineSample, cur: EngineSample) -> bool:
        """engine_restarted(prev, cur), computed once per pair while the pair is in the window."""
        hit = self._restarts.get(id(cur))
        if hit is not None and hit[0] is prev and hit[1] is cur:
            return hit[2]
        result = engine_restarted(prev, cur)
        self._restarts[id(cur)] = (prev, cur, result)
        return result

    def _steady_pair(self, prev_t: TargetSample, t: TargetSample, prev_cur: dict[str, EngineSample],
                     cur: dict[str, EngineSample]) -> bool:
        """Whether two consecutive readings list the same engines, in the same order, with no restart
        (of the server or of an engine) between them."""
        if list(cur) != list(prev_cur):
            return False
        if prev_t.process_start_time is not None and t.process_start_time is not None \
                and t.process_start_time != prev_t.process_start_time:
            return False
        for k, e in cur.items():
            if self._restarted(prev_cur[k], e):
                return False
        return True

    def _pair_readings(self, readings: list[tuple[float, TargetSample]], currents: list[dict[str, EngineSample]],
                       pairs: dict[str, list[tuple[EngineSample, EngineSample, bool]]],
                       first_time: dict[str, float], last_time: dict[str, float]) -> None:
        """Pair each engine's consecutive readings; a change of start time marks a restart."""
        prev_target: TargetSample | None = None
        prev_engines: dict[str, EngineSample] = {}
        for (time, t), current in zip(readings, currents):
            restarted = (
                prev_target is not None
                and prev_target.process_start_time is not None
                and t.process_start_time is not None
                and t.process_start_time != prev_target.process_start_time
            )
            for key, e in current.items():
                if key in prev_engines:
                    prev_e = prev_engines[key]
                    pairs.setdefault(key, []).append((prev_e, e, restarted or self._restarted(prev_e, e)))
                    last_time[key] = time
                else:
                    first_time.setdefault(key, time)
                    last_time.setdefault(key, time)
            # an engine missing from one reading keeps its previous sample to pair with later
            prev_engines.update(current)
            prev_target = t
            for key in current:
                first_time.setdefault(key, time)

    def target_urls(self) -> list[str]:
        latest = self.latest
        return [t.url for t in latest.targets] if latest else []

    def target(self, url: str) -> TargetWindow | None:
        """The window for one target; None if the latest Snapshot does not list it."""
        latest_snap = self.latest
        if latest_snap is None:
            return None
        latest = latest_snap.target(url)
        if latest is None:
            return None
        walk = self._walk(url)
        readings = list(zip(walk.times, walk.readings))
        currents = walk.engines
        # whether the first reading was steady with one before the window does not matter
        steady = all(islice(walk.steady, 1, None))

        pairs: dict[str, list[tuple[EngineSample, EngineSample, bool]]] = {}
        first_time: dict[str, float] = {}
        last_time: dict[str, float] = {}
        if steady and len(readings) >= 2:
            # The usual case: every reading has the same engines, and nothing restarted. Counters are
            # cumulative, so what happened is the last reading less the first, for each engine.
            first, last = currents[0], currents[-1]
            t0, t1 = readings[0][0], readings[-1][0]
            for key, e in first.items():
                pairs[key] = [(e, last[key], False)]
                first_time[key] = t0
                last_time[key] = t1
        else:
            self._pair_readings(readings, currents, pairs, first_time, last_time)

        latest_engines = {_engine_key(e): e for e in latest.engines} if latest.ok else {}
        per_engine_inc: dict[str, Increases] = {}
        for key, ps in pairs.items():
            inc = increases_between(ps, restarts_checked=True)
            if inc is not None:
                span = last_time[key] - first_time[key]
                per_engine_inc[key] = Increases(span, inc.counters, inc.accepted_per_position,
                                                inc.histograms, inc.restarts)
        engines: dict[str, EngineFigures] = {}
        for key, inc in per_engine_inc.items():
            gauges = [latest_engines[key].gauges] if key in latest_engines else []
            engines[key] = engine_figures(inc, gauges)
        seconds = max((inc.seconds for inc in per_engine_inc.values()), default=0.0)
        total_inc: Increases | None = None
        total = None
        if len(per_engine_inc) == 1 and not _negative_zero(*per_engine_inc.values()):
            # one engine: the total is that engine's increases (sum_increases of one part adds
            # each to 0.0, which changes nothing but a −0.0), and its figures are the engine's when
            # the latest gauges are that engine's alone
            (key, total_inc), = per_engine_inc.items()
            if seconds > 0:
                if len(latest_engines) == 1 and key in latest_engines:
                    total = engines[key]
                else:
                    total = engine_figures(total_inc, [e.gauges for e in latest_engines.values()])
        elif per_engine_inc:
            total_inc = sum_increases(per_engine_inc.values(), seconds)
            if seconds > 0:
                total = engine_figures(total_inc, [e.gauges for e in latest_engines.values()])
        ref_engines = list(latest_engines.values()) or [e for _, t in readings[-1:] for e in t.engines]
        running_at_start = None
        if len(readings) >= 2:
            first_running = [e.gauges[RUNNING] for e in readings[0][1].engines if RUNNING in e.gauges]
            running_at_start = sum(first_running) if first_running else None
        return TargetWindow(
            url=url,
            time=latest_snap.time,
            latest=latest,
            seconds=seconds,
            engines=engines,
            total=total,
            speculation_configured=any(speculation_configured(e) for e in ref_engines),
            k=k_of(ref_engines, total_inc),
            running_at_start=running_at_start,
            latest_engines=tuple(latest_engines.values()),
        )
