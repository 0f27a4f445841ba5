"""The pipeline every front end shares: Snapshots in, per-target windows and verdicts out.

    Source ──Snapshot──▶ Monitor.ingest ──▶ {url: TargetState} + [VerdictChange]

`check`, the TUI (live or replay), headless replay, and the exporter all drive one Monitor, so the
same Snapshots give the same verdicts whichever of them is reading. Pure: no I/O, no clock.

The advisor is evaluated on a fixed cadence of data time (`evaluate_every_s`), not on every
Snapshot: a 1 Hz live poll and a 100× replay then evaluate at the same instants, which is what
makes a replay reproduce the live verdicts exactly. The default cadence is every 5 s of data time:
responsive enough for an operator (a flip needs `confirm_windows` evaluations, 15 s), and cheap
enough that a 24 h recording replays headless in seconds (issue 6's budget).

A headless timeline reads only the verdict changes, a few in a thousand evaluations: its Monitor
(`changes_only`) explains, with reasons, crossover, best k and bound, only the evaluations that
change a shown verdict, and its changes are the Verdicts the dashboard's Monitor gives.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.advice.verdict import OFF, ON, UNKNOWN, Verdict, replaced, requote, unknown_verdict
from specwatch.telemetry.snapshot import Snapshot
from specwatch.advice.sweep_evidence import SweepIdentity
from specwatch.readings.window import TargetWindow, Window


# Seconds of data time between evaluations of the advisor, live and in replay alike.
DEFAULT_EVALUATE_EVERY_S = 5.0
# The shown verdict (on/off/hold) changes at most once in this much data time: an operator acts on
# the banner, and a banner that goes hold→off→hold→on in half a minute is one nobody can act on.
# Changes to and from unknown (no reading, no traffic, a stalled engine) are shown at once.
DEFAULT_DWELL_S = 300.0
# The shown figures are the median of the last minute of evaluations, and move only when that moves
# beyond these fractions: a refit or a noisy gauge does not move them, a change of acceptance or
# cost does (break-even and speedup within a few %, the crossover within its coarser resolution).
FIGURE_SPAN_S = 60.0
FIGURE_TOLERANCE = {"break_even_length": 0.03, "low_load_break_even": 0.03, "expected_speedup": 0.03,
                    "crossover_concurrency": 0.10}
# ... and the median is over the evaluations made at this load only (running within this fraction of
# the latest, or one request): break-even and speedup are figures *at a load*, and while the load
# ramps, a minute's median of them lags the load the banner names (the demo's opening ramp showed a
# break-even of 1.26 beside the reasons' 2.09 at 91 running).
SAME_LOAD = 0.10
# Failed readings in a row (at evaluation instants) before the verdict turns unknown: one failed
# scrape keeps the last verdict, marked as such, and adds nothing to the timeline.
PERSISTENT_FAILURES = 2


@dataclass(frozen=True)
class TargetState:
    url: str
    window: TargetWindow | None
    verdict: Verdict
    reachable: bool = True  # the target's latest reading succeeded


@dataclass(frozen=True)
class VerdictChange:
    """The verdict for a target changed (speculation on/off/hold/unknown), with its reasons."""

    time: float
    url: str
    previous: str | None
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "time": self.time,
            "target": self.url,
            "previous": self.previous,
            "speculation": v.speculation,
            "confidence": round(v.confidence, 3),
            "expected_speedup": None if v.expected_speedup is None else round(v.expected_speedup, 4),
            "reasons": list(v.reasons),
        }


class ShownVerdict:
    """What one target's banner shows: the advisor's verdicts, held still under stationary load.

    - the state (on/off/hold) changes at most once per `dwell_s` of data time; a change the advisor
      asks for within the dwell is said in the reasons and shown once the dwell has passed (if the
      advisor still asks for it);
    - break-even, crossover and expected speedup are the median of the last FIGURE_SPAN_S of
      evaluations made at this load (SAME_LOAD), and the shown value moves only when that median
      leaves its tolerance band;
    - one failed reading keeps the last verdict (flag `reading_failed`); failures in a row beyond
      PERSISTENT_FAILURES − 1 show the advisor's unknown.
    Data time only (the Snapshots' clock), so a replay shows what the live run showed.
    """

    def __init__(self, dwell_s: float = DEFAULT_DWELL_S) -> None:
        self.dwell_s = dwell_s
        self.state: str | None = None
        self.since: float | None = None
        self.failures = 0
        self.last: Verdict | None = None
        # (time, running, figures) of each evaluation in the last FIGURE_SPAN_S
        self._recent: deque[tuple[float, float | None, tuple[float | None, ...]]] = deque()
        self._figures: dict[str, float | None] = {}

    def show(self, verdict: Verdict, time: float, reading_ok: bool,
             explain: Callable[[], Verdict] | None = None) -> Verdict:
        """The verdict to show for this evaluation. `explain`, when given, makes the advisor's verdict
        whole (Advisor.assess): it is called only when the shown state changes, and a verdict that
        changes nothing is shown unexplained, its figures left out of the steadied ones (they are
        only read after the next change, which starts them over)."""
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
        if verdict.speculation == UNKNOWN:
            # health and missing data are shown at once; the figures start over after them
            self.state, self.since = UNKNOWN, time
            self._recent.clear()
            self._figures.clear()
            self.last = verdict
            return verdict
        if explain is not None:
            if not self._moves_to(verdict.speculation, time):
                held = self.state
                shown = verdict if verdict.speculation == held else replaced(verdict, speculation=held)
                self.last = shown
                return shown
            verdict = explain()
        shown = self._steady_state(verdict, time)
        shown = self._steady_figures(shown, time)
        self.last = shown
        return shown

    def _moves_to(self, wanted: str, time: float) -> bool:
        """Whether the banner changes to `wanted` now: it shows another state, and the dwell has
        passed (or it showed nothing, or unknown)."""
        return wanted != self.state and (self.state in (None, UNKNOWN) or self.since is None
                                         or time - self.since >= self.dwell_s)

    def _steady_state(self, verdict: Verdict, time: float) -> Verdict:
        wanted = verdict.speculation
        if wanted == self.state:
            return verdict
        if self._moves_to(wanted, time):
            self.state, self.since = wanted, time
            self._recent.clear()
            self._figures.clear()
            return verdict
        # within the dwell: keep the banner; the reasons say what the advisor now points to
        held = self.state
        wait = self.dwell_s - (time - self.since)
        note = (f"showing {held} (since {time - self.since:.0f} s): the advisor now points {wanted}; a change of "
                f"the banner is shown at most once per {self.dwell_s / 60:.0f} min, so in {wait:.0f} s if it holds")
        change = verdict.change_recommended if held in (ON, OFF) and held == wanted else (
            (held == OFF and verdict.configured) or (held == ON and not verdict.configured))
        return replaced(verdict, speculation=held, change_recommended=change, reasons=verdict.reasons + (note,),
                        flags=tuple(dict.fromkeys(verdict.flags + ("dwell",))))

    def _steady_figures(self, verdict: Verdict, time: float) -> Verdict:
        recent = self._recent
        # each evaluation's figures, in FIGURE_TOLERANCE's order, read once rather than once per median
        figures = tuple([getattr(verdict, name) for name in FIGURE_TOLERANCE])
        running = verdict.running
        recent.append((time, running, figures))
        while recent and recent[0][0] < time - FIGURE_SPAN_S:
            recent.popleft()
        if running is None:
            alike = [f for _, r, f in recent if r is None]
        else:
            band = max(1.0, SAME_LOAD * running)
            alike = [f for _, r, f in recent if r is not None and abs(r - running) <= band]
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


class Monitor:
    def __init__(
        self,
        window_s: float = 30.0,
        advisor_config: AdvisorConfig | None = None,
        evaluate_every_s: float = DEFAULT_EVALUATE_EVERY_S,
        target_configs: Mapping[str, AdvisorConfig] | None = None,
        dwell_s: float = DEFAULT_DWELL_S,
        changes_only: bool = False,
    ) -> None:
        """`changes_only`: the reader takes the VerdictChanges alone (a headless timeline), so an
        evaluation that changes no shown verdict is not explained (Advisor.assess): its TargetState
        holds the verdict's state and load but not its reasons, figures or bound. The changes are the
        Verdicts they would be otherwise; the explanations are most of an evaluation's cost."""
        self.dwell_s = dwell_s
        self.changes_only = changes_only
        self._shown: dict[str, ShownVerdict] = {}
        self.window = Window(window_s)
        self.advisor_config = advisor_config or AdvisorConfig()
        # Targets judged under settings of their own (the demo's scenarios differ in method).
        self.target_configs = dict(target_configs or {})
        self.evaluate_every_s = evaluate_every_s
        self._advisors: dict[str, Advisor] = {}
        # A saved sweep of the node (watch --sweep): each target's advisor reconciles its crossover.
        self.sweep: SweepIdentity | None = None
        self._states: dict[str, TargetState] = {}
        self._next_evaluation: float | None = None

    @property
    def states(self) -> dict[str, TargetState]:
        return dict(self._states)

    @property
    def latest(self) -> Snapshot | None:
        return self.window.latest

    def advisor_of(self, url: str) -> Advisor | None:
        """The advisor judging `url`, once it has been read: what its verdicts rest on (tune)."""
        return self._advisors.get(url)

    def _advisor(self, url: str) -> Advisor:
        advisor = self._advisors.get(url)
        if advisor is None:
            advisor = self._advisors[url] = Advisor(self.target_configs.get(url, self.advisor_config))
            advisor.sweep = self.sweep
        return advisor

    def evaluates(self, snapshot: Snapshot) -> bool:
        """Whether ingesting `snapshot` next runs the advisors: its evaluation is due, or the timeline
        restarted (a seek back), which evaluates at once. Otherwise ingesting it only adds it to the
        window."""
        latest = self.window.latest
        if latest is not None and snapshot.time < latest.time:
            return True
        return self._next_evaluation is None or snapshot.time >= self._next_evaluation

    def ingest(self, snapshot: Snapshot) -> list[VerdictChange]:
        """Add one Snapshot; returns the verdict changes it caused (empty between evaluations)."""
        previous_latest = self.window.latest
        due = self.evaluates(snapshot)
        self.window.add(snapshot)
        if previous_latest is not None and snapshot.time < previous_latest.time:
            # A target that returns on an earlier clock after being away is a new pass over its
            # recording (the demo playlist's next round): its advisor's samples and its banner's
            # dwell are from a pass that is over, and would hold it still until the clock caught up.
            # A target rewound while present (a seek) keeps them, as it keeps its place on screen.
            present = {t.url for t in previous_latest.targets}
            for target in snapshot.targets:
                if target.url not in present:
                    self._advisors.pop(target.url, None)
                    self._shown.pop(target.url, None)
        if not due:
            return []
        self._next_evaluation = snapshot.time + self.evaluate_every_s
        changes: list[VerdictChange] = []
        for target in snapshot.targets:
            tw = self.window.target(target.url)
            explain = None
            if tw is None:
                verdict = unknown_verdict("no reading yet", snapshot.time)
            elif self.changes_only:
                verdict, explain = self._advisor(target.url).assess(tw, snapshot.gpus)
            else:
                verdict = self._advisor(target.url).update(tw, snapshot.gpus)
            shown = self._shown.get(target.url)
            if shown is None:
                shown = self._shown[target.url] = ShownVerdict(self.dwell_s)
            verdict = shown.show(verdict, snapshot.time, target.ok, explain)
            # one failed reading is not news (the last verdict stands, marked); failures that persist are
            reachable = target.ok or "reading_failed" in verdict.flags
            before = self._states.get(target.url)
            # A target going down (or coming back) is news even when the verdict word stays
            # "unknown": an idle node and a dead one must not look alike in the timeline.
            if before is None or before.verdict.speculation != verdict.speculation \
                    or before.reachable != reachable:
                changes.append(VerdictChange(snapshot.time, target.url,
                                             before.verdict.speculation if before else None, verdict))
            self._states[target.url] = TargetState(target.url, tw, verdict, reachable)
        return changes
