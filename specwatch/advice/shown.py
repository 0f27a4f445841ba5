"""What one target's banner shows: the advisor's verdicts, moved on evidence rather than on a clock.

The advisor judges each evaluation on its own. The banner is what an operator acts on, so it must be
both steady (a stationary load at the crossover does not flap it) and prompt (a load that rises
through the crossover shows OFF within the minute it is there, and ON again when it falls back). It
reads the same evaluations and asks of them:

- **what the evidence says**: the median expected speedup S̃ of the last minute of evaluations made
  at this load (the load the banner names; a ramp's earlier tiers do not count) against the band
  the latest evaluation's evidence gives (perf.Evidence: S·exp(±z·σ), σ from the acceptance's and
  the step times' sampling errors), so the band narrows as the window sees more requests, drafts
  and step times; the fixed δ only where a verdict carries no evidence. Below 1/(1 + δ) it costs,
  above 1 + δ it pays, between them the answer is "hold: keep the current setting", a state of its
  own with its own confidence (that the speedup lies inside the band). A verdict with no speedup
  (speculation not configured, judged by the acceptance length it would need) points where the
  advisor points.
- **a dead band**: a banner showing ON leaves it only once S̃ is at or below 1 (not merely inside the
  band), OFF only once S̃ is at or above 1; entering ON or OFF takes the band's edge. A speedup that
  wanders inside the band therefore never moves the banner back and forth.
- **a short confirmation, scaled by how far from 1**: the evidence must point the same new way for
  `confirmation_s(S̃)` of data time, 10 s (two evaluations) when S̃ is far from 1, up to 45 s at the
  band's edge. While it confirms, the banner keeps what it shows (its figures and confidence those
  of its last agreeing evaluation, so ON never sits beside a speedup below 1) and says what is
  pending and what the current figures say.
- **one change per dwell at a load that has not moved**: a second change at the load of the last
  one (within SAME_LOAD, or within the running count's own noise: LOAD_NOISE_Z) waits until
  `dwell_s` has passed since it. A load that moves is news, and is shown without that wait: a first
  verdict while the load fills, or a ramp through the crossover and back, is never held by a clock.
  Nor is the correction of a first judged verdict (made on a window's first seconds): it waits its
  confirmation alone.

Unknown (no reading, no traffic, a stalled engine) is shown at once, and the first judged verdict
after it is shown at once too: there is nothing to be steady against. One failed reading keeps the
last verdict (flag `reading_failed`); PERSISTENT_FAILURES in a row show the advisor's unknown.

The figures beside the state (break-even, crossover, expected speedup) are the median of the last
FIGURE_SPAN_S of explained evaluations at this load, and move only when that median leaves its
tolerance band; the reasons quote those same figures. Data time only (the Snapshots' clock), so a
replay shows what the live run showed. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import fields
from typing import Any, Callable

from specwatch.advice.judging import band_confidence
from specwatch.advice.verdict import HOLD, HOLD_PREFIX, OFF, ON, UNKNOWN, QuotedFigures, Verdict, hold_words
from specwatch.perf import direction_confidence, evidence_interval

# At a load that has not moved, the banner changes at most once in this much data time.
DEFAULT_DWELL_S = 300.0
# δ: the band around a speedup of 1 inside which the answer is "hold", where a verdict carries no
# evidence interval (the advisor's hysteresis setting); the evidence's own band otherwise.
DEFAULT_BAND = 0.05
# The confirmation a change needs, in data time: CONFIRM_AT_EDGE_S when S̃ is one band's width from
# 1, shorter in proportion as it is further (a 0.85× speedup is clear sooner than a 0.96× one),
# never under two evaluations at the default cadence nor over MAX_CONFIRM_S.
CONFIRM_AT_EDGE_S = 15.0
MIN_CONFIRM_S = 10.0
MAX_CONFIRM_S = 45.0
# The evidence and the shown figures are medians over the last minute at this load: a refit or a
# noisy gauge does not move them, a change of acceptance or cost does (break-even and speedup
# within a few %, the crossover within its coarser resolution).
FIGURE_SPAN_S = 60.0
FIGURE_TOLERANCE = {"break_even_length": 0.03, "low_load_break_even": 0.03, "expected_speedup": 0.03,
                    "crossover_concurrency": 0.10}
# ... over the evaluations made at this load only (running within this fraction of the latest, or
# one request): break-even and speedup are figures *at a load*, and while the load ramps, a minute's
# median of them lags the load the banner names.
SAME_LOAD = 0.10
# The dwell's own test of a load that has not moved: SAME_LOAD, or within what arrivals alone move
# the running count by. Requests that arrive at random and run a while are as many at once as a
# Poisson count (an M/G/∞ queue), whose SD is the square root of its mean: on a slow GPU whose
# requests outlast the 30 s window, a held offered load of 64 reads anywhere from about 50 to 80,
# across a crossover at 77, and a 10 % test took each swing for a move and let the banner change
# with it. At 128 running the test spans 2.5·√128 ≈ 28 requests where 10 % spans 13. Ramps move
# further (tiers a third or more apart) and are still news.
LOAD_NOISE_Z = 2.5
# Failed readings in a row (at evaluation instants) before the verdict turns unknown: one failed
# scrape keeps the last verdict, marked as such, and adds nothing to the timeline.
PERSISTENT_FAILURES = 2

_VERDICT_FIELDS = frozenset(f.name for f in fields(Verdict))


def requote(evaluated: Verdict, shown: Verdict) -> tuple[str, ...]:
    """`evaluated`'s reasons, those that quote its figures rewritten with `shown`'s figures (the same
    evaluation with steadied figures): what the banner shows beside them."""
    quoted = evaluated.details.get("quoted")
    if not isinstance(quoted, QuotedFigures):
        return evaluated.reasons
    before = quoted.words(evaluated.break_even_length, evaluated.low_load_break_even, evaluated.expected_speedup,
                          evaluated.crossover_concurrency)
    after = quoted.words(shown.break_even_length, shown.low_load_break_even, shown.expected_speedup,
                         shown.crossover_concurrency)
    rewritten = {before[name]: after[name] for name in before.keys() & after.keys() if before[name] != after[name]}
    if not rewritten:
        return evaluated.reasons
    return tuple(rewritten.get(reason, reason) for reason in evaluated.reasons)


def replaced(verdict: Verdict, **changes: Any) -> Verdict:
    """dataclasses.replace(verdict, **changes) without its walk over the fields and through __init__
    (the shown verdict makes one or two a evaluation): a Verdict is a plain frozen dataclass, every
    field an init field and no __post_init__, so its fields copied with the changes are that value."""
    unknown = changes.keys() - _VERDICT_FIELDS
    if unknown:
        raise TypeError(f"Verdict has no field {sorted(unknown)[0]!r}")
    copy = object.__new__(Verdict)
    values = copy.__dict__
    values.update(verdict.__dict__)
    values.update(changes)
    return copy


def confirmation_s(speedup: float | None, band: float = DEFAULT_BAND) -> float:
    """Seconds of data the evidence must hold before the banner follows it."""
    if speedup is None or not speedup > 0 or not math.isfinite(speedup):
        return CONFIRM_AT_EDGE_S
    distance = abs(math.log(speedup))
    if distance <= 0.0:
        return MAX_CONFIRM_S
    return min(MAX_CONFIRM_S, max(MIN_CONFIRM_S, CONFIRM_AT_EDGE_S * math.log1p(band) / distance))


def _same_load(running: float | None, other: float | None) -> bool:
    if running is None or other is None:
        return running is None and other is None
    return abs(running - other) <= max(1.0, SAME_LOAD * other)


def _load_unmoved(running: float | None, at_change: float | None) -> bool:
    """Whether the load has not moved since the banner's last change, for the dwell (each the load
    offered about a reading, `ShownVerdict._offered`): `_same_load`, or within the running count's
    own noise at a held offered load (LOAD_NOISE_Z)."""
    if _same_load(running, at_change):
        return True
    if running is None or at_change is None:
        return False
    return abs(running - at_change) <= LOAD_NOISE_Z * math.sqrt(max(at_change, 0.0))


class ShownVerdict:
    """One target's banner (see the module docstring)."""

    def __init__(self, dwell_s: float = DEFAULT_DWELL_S, band: float = DEFAULT_BAND) -> None:
        self.dwell_s = dwell_s
        self.band = band
        self.state: str | None = None
        self.since: float | None = None  # when the banner last changed
        # the load offered then (`_offered`: not the swing of arrivals the change happened at)
        self.load_at_change: float | None = None
        # whether the banner's last change was its first judged verdict (from nothing, or unknown)
        self._first_judged = False
        self.failures = 0
        self.last: Verdict | None = None
        # the last shown verdict whose state the evidence agreed with: what a pending change shows
        self._agreeing: Verdict | None = None
        self._candidate: str | None = None  # the state the evidence points to, while it confirms
        self._candidate_since: float | None = None
        # (time, running, expected speedup) of every evaluation in the last FIGURE_SPAN_S: the evidence
        self._speedups: deque[tuple[float, float | None, float]] = deque()
        # (time, running) of every evaluation in the last FIGURE_SPAN_S: the load offered
        self._loads: deque[tuple[float, float]] = deque()
        # (time, running, figures) of each explained evaluation in the last FIGURE_SPAN_S
        self._recent: deque[tuple[float, float | None, tuple[float | None, ...]]] = deque()
        self._figures: dict[str, float | None] = {}
        self._current_band = band  # the latest evaluation's (_band_of)

    def show(self, verdict: Verdict, time: float, reading_ok: bool,
             explain: Callable[[], Verdict] | None = None) -> Verdict:
        """The verdict to show for this evaluation. `explain`, when given, makes the advisor's verdict
        whole (Advisor.assess): it is called only when the shown state changes, and a verdict that
        changes nothing is shown as the banner stands (its figures are not read until the next
        change, which starts them over)."""
        if not reading_ok:
            self.failures += 1
            if self.failures < PERSISTENT_FAILURES and self.last is not None and self.last.speculation != UNKNOWN:
                held = self.last
                return replaced(
                    held,
                    reasons=(f"the latest reading failed ({verdict.reasons[0] if verdict.reasons else 'no answer'}): "
                             "showing the last verdict until the next one",) + held.reasons,
                    flags=tuple(dict.fromkeys(held.flags + ("reading_failed",))),
                )
        else:
            self.failures = 0
        if verdict.running is not None:
            loads = self._loads
            loads.append((time, verdict.running))
            while loads[0][0] < time - FIGURE_SPAN_S:
                loads.popleft()
        if verdict.speculation == UNKNOWN:
            # health and missing data are shown at once; the evidence and figures start over after them
            self._move(UNKNOWN, time, verdict.running)
            self._speedups.clear()
            self.last = self._agreeing = verdict
            return verdict
        speedup = self._evidence_speedup(verdict, time)
        self._current_band = self._band_of(verdict)
        wanted = self._evidence(verdict, speedup)
        if self.state in (None, UNKNOWN) or wanted == self.state:
            self._candidate = self._candidate_since = None
            if wanted != self.state:  # the first judged verdict, or the first after unknown: at once
                self._move(wanted, time, verdict.running)
                return self._shown(verdict if explain is None else explain(), wanted, time, speedup)
            if explain is not None:
                # nothing changes and nobody reads the explanation (a headless timeline): the state alone
                shown = verdict if verdict.speculation == wanted else replaced(verdict, speculation=wanted)
                self.last = shown
                return shown
            return self._shown(verdict, wanted, time, speedup)
        if wanted != self._candidate:
            self._candidate, self._candidate_since = wanted, time
        ready_at = self._ready_at(speedup, verdict.running)
        if time >= ready_at:
            self._candidate = self._candidate_since = None
            self._move(wanted, time, verdict.running)
            return self._shown(verdict if explain is None else explain(), wanted, time, speedup)
        return self._pending(verdict, wanted, speedup, ready_at - time)

    # -- the evidence ----------------------------------------------------------------------------

    def _evidence_speedup(self, verdict: Verdict, time: float) -> float | None:
        """The median expected speedup of the last minute at this load, this evaluation's included."""
        s = verdict.expected_speedup
        speedups = self._speedups
        if s is None or not verdict.configured:
            return None
        speedups.append((time, verdict.running, s))
        while speedups and speedups[0][0] < time - FIGURE_SPAN_S:
            speedups.popleft()
        running = verdict.running
        alike = [x for _, r, x in speedups if _same_load(r, running)]
        return statistics.median(alike)

    def _band_of(self, verdict: Verdict) -> float:
        """δ for this evaluation: the half-width of its evidence interval (perf.Evidence), which
        shrinks as the window sees more; the fixed band where the verdict carries none."""
        evidence = verdict.details.get("evidence")
        if evidence is not None and math.isfinite(evidence.error):
            return evidence.band
        return self.band

    def _evidence(self, verdict: Verdict, speedup: float | None) -> str:
        """The state the evidence points to, given what the banner shows (the dead band)."""
        if speedup is None:
            return verdict.speculation
        band = self._band_of(verdict)
        high, low = 1.0 + band, 1.0 / (1.0 + band)
        if self.state == ON:
            return ON if speedup > 1.0 else OFF if speedup <= low else HOLD
        if self.state == OFF:
            return OFF if speedup < 1.0 else ON if speedup >= high else HOLD
        return ON if speedup >= high else OFF if speedup <= low else HOLD

    def _ready_at(self, speedup: float | None, running: float | None) -> float:
        """When the pending change may be shown: after its confirmation, and at an unmoved load not
        before a dwell has passed since the last change. A step-time fit still learning a new load
        can swing its estimate across the band within a minute (a synthetic step from 1 to 200
        running did, 50 s after the banner turned off): at a load that has not moved, that is not
        news until it has lasted."""
        assert self._candidate_since is not None
        ready = self._candidate_since + confirmation_s(speedup, self._current_band)
        if self.since is not None and not self._first_judged \
                and _load_unmoved(self._offered(running), self.load_at_change):
            ready = max(ready, self.since + self.dwell_s)
        return ready

    def _move(self, state: str, time: float, running: float | None) -> None:
        # A first judged verdict rests on the first seconds of a window: its correction is the
        # evidence catching up, not a flap, and waits only its confirmation (the dwell holds every
        # change after it).
        self._first_judged = self.state in (None, UNKNOWN) and state != UNKNOWN
        self.state, self.since, self.load_at_change = state, time, self._offered(running)
        self._recent.clear()
        self._figures.clear()

    def _offered(self, running: float | None) -> float | None:
        """The load offered around this reading: the median of the minute's readings within its
        noise (`_load_unmoved`). A ramp's earlier tiers are not in it; a held load's swings are, so
        a reading at the top of one stands for the load it swings about."""
        if running is None:
            return None
        alike = [r for _, r in self._loads if _load_unmoved(r, running)]
        return statistics.median(alike) if alike else running

    # -- what the banner shows -------------------------------------------------------------------

    def _shown(self, verdict: Verdict, state: str, time: float, speedup: float | None) -> Verdict:
        """The explained verdict under the shown state, with steadied figures and one story."""
        if verdict.speculation != state or state == HOLD:
            verdict = self._restated(verdict, state, speedup)
        shown = self._steady_figures(verdict, time)
        self.last = self._agreeing = shown
        return shown

    def _restated(self, verdict: Verdict, state: str, speedup: float | None) -> Verdict:
        """The advisor's verdict told as the evidence's state: its own evaluation sits on the other
        side of a band's edge than the minute's median, which the banner follows."""
        own_hold = tuple(r for r in verdict.reasons if r.startswith(HOLD_PREFIX))
        reasons = tuple(r for r in verdict.reasons if not r.startswith(HOLD_PREFIX))
        confidence = verdict.confidence
        level_error = verdict.details.get("level_error")
        cap = verdict.details.get("confidence_cap", 1.0)
        band = self._band_of(verdict)
        if state == HOLD:
            # the evaluation's own why where it held too, else the minute's evidence against the band
            evidence = verdict.details.get("evidence")
            if own_hold:
                reasons += own_hold
            elif evidence is not None and speedup is not None:
                low, high = evidence_interval(speedup, evidence.error)
                reasons += (f"{HOLD_PREFIX}the last minute at this load: {speedup:.2f}× [{low:.2f}, {high:.2f}] "
                            "does not leave 1 on the side the banner would move to; keep the current setting",)
            else:
                reasons += (hold_words(self.band),)
        if speedup is not None and isinstance(level_error, float):
            # the confidence of what is shown: inside the band for a hold, the direction otherwise
            confidence = min(cap, band_confidence(speedup, level_error, band) if state == HOLD
                             else direction_confidence(speedup, level_error))
        change = (state == OFF and verdict.configured) or (state == ON and not verdict.configured)
        return replaced(verdict, speculation=state, confidence=confidence, change_recommended=change,
                        reasons=reasons)

    def _pending(self, verdict: Verdict, wanted: str, speedup: float | None, wait_s: float) -> Verdict:
        """The banner as it stands, saying what the evidence now points to and when it will show."""
        held = self._agreeing or self.last or verdict
        current = (f"{speedup:.2f}× expected at {verdict.running:.0f} running"
                   if speedup is not None and verdict.running is not None else
                   f"{speedup:.2f}× expected" if speedup is not None else "the current figures")
        note = (f"change pending: {current} points {wanted}; showing {self.state} until it has held for "
                f"{wait_s:.0f} s more")
        # after the reasons the banner's figures quote, which stay the held verdict's
        shown = replaced(held, reasons=tuple(r for r in held.reasons if not r.startswith("change pending")) + (note,),
                         flags=tuple(dict.fromkeys(held.flags + ("pending",))), time=verdict.time,
                         details={**held.details, "pending": {"state": wanted, "expected_speedup": speedup,
                                                              "in_s": wait_s}})
        self.last = shown
        return shown

    def _steady_figures(self, verdict: Verdict, time: float) -> Verdict:
        recent = self._recent
        # each evaluation's figures, in FIGURE_TOLERANCE's order, read once rather than once per median
        figures = tuple([getattr(verdict, name) for name in FIGURE_TOLERANCE])
        running = verdict.running
        recent.append((time, running, figures))
        while recent and recent[0][0] < time - FIGURE_SPAN_S:
            recent.popleft()
        alike = [f for _, r, f in recent if _same_load(r, running)]
        shown: dict[str, float | None] = {}
        for i, (name, tolerance) in enumerate(FIGURE_TOLERANCE.items()):
            values = [f[i] for f in alike if f[i] is not None]
            if figures[i] is None or not values:
                shown[name] = figures[i]
                continue
            median = statistics.median(values)
            before = self._figures.get(name)
            if before is not None and abs(median - before) <= tolerance * abs(before):
                shown[name] = before
            else:
                shown[name] = median
        self._figures = shown
        steady = replaced(verdict, expected_speedup=shown["expected_speedup"],
                          break_even_length=shown["break_even_length"],
                          low_load_break_even=shown["low_load_break_even"],
                          crossover_concurrency=shown["crossover_concurrency"])
        # the reasons quote the figures the banner shows beside them, not this evaluation's own
        reasons = requote(verdict, steady)
        return steady if reasons is verdict.reasons else replaced(steady, reasons=reasons)
