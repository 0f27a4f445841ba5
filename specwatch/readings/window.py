"""The sliding window of Snapshots: per target and per engine, the figures over the window (see
specwatch.readings.figures for the counter arithmetic) and since the server started.

Nothing here does I/O or reads a clock: time comes from the Snapshots.
"""

from __future__ import annotations

import operator
from collections import deque
from itertools import islice
from dataclasses import dataclass, field
from typing import Sequence

from specwatch.telemetry.snapshot import GPU_ENERGY, TARGET_OK, EngineSample, Snapshot, TargetSample
from specwatch.readings.figures import *  # noqa: F401,F403 - the figures are read through the window too
from specwatch.readings.health import HealthFigures, energy_counter_increase, health_figures
from specwatch.readings.figures import ACCEPTANCE_RATE_V0, DRAFTS, EMITTED_V0, EngineFigures, Increases, RUNNING, acceptance, engine_figures, engine_restarted, increases_between, lifetime_increases, negative_zero, sum_increases


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
    # all engines' increases over the window (None with fewer than two readings): what goodput
    # against an SLO is computed from
    increases: Increases | None = field(default=None, repr=False, compare=False)
    # the window's length (the span it keeps): a span that reaches it holds all the evidence the
    # window ever will at this load, so waiting does not narrow the verdict's interval
    window_s: float | None = field(default=None, repr=False, compare=False)
    _lifetime: list = field(default_factory=list, repr=False, compare=False)

    @property
    def health(self) -> HealthFigures | None:
        """Latency breakdown, request shape and finish reasons over the window."""
        return health_figures(self.increases) if self.increases is not None and self.seconds > 0 else None

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
        # Per target URL, the last TargetWindow made and the window it was made of (its first and
        # last Snapshot, by identity, and its length): the advisor's evaluation and the dashboard's
        # view of the same poll ask for the same window.
        self._made: dict[str, tuple[Snapshot, Snapshot, int, TargetWindow]] = {}

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
            self._made.clear()
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
        """The window for one target; None if the latest Snapshot does not list it. Made once per
        state of the window: asked again before a Snapshot is added, it is the same object."""
        snapshots = self._snapshots
        if not snapshots:
            return None
        made = self._made.get(url)
        if made is not None and made[0] is snapshots[0] and made[1] is snapshots[-1] and made[2] == len(snapshots):
            return made[3]
        made_of = (snapshots[0], snapshots[-1], len(snapshots))
        window = self._target(url)
        if window is not None:
            if len(self._made) > 16 + 2 * len(snapshots[-1].targets):
                self._made.clear()  # URLs that are no longer read
            self._made[url] = (*made_of, window)
        return window

    def _target(self, url: str) -> TargetWindow | None:
        latest_snap = self.latest
        if latest_snap is None:
            return None
        latest = latest_snap.target(url)
        if latest is None:
            return None
        walk = self._walk(url)
        times, targets = walk.times, walk.readings  # of the successful readings, in order
        currents = walk.engines
        # whether the first reading was steady with one before the window does not matter
        steady = all(islice(walk.steady, 1, None))

        pairs: dict[str, list[tuple[EngineSample, EngineSample, bool]]] = {}
        first_time: dict[str, float] = {}
        last_time: dict[str, float] = {}
        if steady and len(times) >= 2:
            # The usual case: every reading has the same engines, and nothing restarted. Counters are
            # cumulative, so what happened is the last reading less the first, for each engine.
            first, last = currents[0], currents[-1]
            t0, t1 = times[0], times[-1]
            for key, e in first.items():
                pairs[key] = [(e, last[key], False)]
                first_time[key] = t0
                last_time[key] = t1
        else:
            self._pair_readings(list(zip(times, targets)), currents, pairs, first_time, last_time)

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
        if len(per_engine_inc) == 1 and not negative_zero(*per_engine_inc.values()):
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
        ref_engines = list(latest_engines.values()) or [e for t in targets[-1:] for e in t.engines]
        running_at_start = None
        if len(times) >= 2:
            first_running = [e.gauges[RUNNING] for e in targets[0].engines if RUNNING in e.gauges]
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
            increases=total_inc,
            window_s=self.seconds,
        )

    def gpu_energy(self) -> tuple[dict[int, float], float]:
        """Each GPU's energy over the window in joules (by GPU index), from its cumulative energy
        counter, and the seconds it covers. Pair by pair: a pair where the counter went down (a
        driver reset) or a reading is missing adds nothing, and a GPU with no usable pair is absent."""
        joules: dict[int, float] = {}
        first_t = last_t = None
        prev: Snapshot | None = None
        for snap in self._snapshots:
            if prev is not None:
                before = {g.index: g.get(GPU_ENERGY) for g in prev.gpus if not g.lost}
                for g in snap.gpus:
                    if g.lost:
                        continue
                    delta = energy_counter_increase(before.get(g.index), g.get(GPU_ENERGY))
                    if delta is not None:
                        joules[g.index] = joules.get(g.index, 0.0) + delta
                        first_t = prev.time if first_t is None else first_t
                        last_t = snap.time
            prev = snap
        return joules, (last_t - first_t) if first_t is not None and last_t is not None else 0.0
