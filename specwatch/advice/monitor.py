"""The pipeline every front end shares: Snapshots in, per-target windows and verdicts out.

    Source ──Snapshot──▶ Monitor.ingest ──▶ {url: TargetState} + [VerdictChange]

`check`, the TUI (live or replay), headless replay, and the exporter all drive one Monitor, so the
same Snapshots give the same verdicts whichever of them is reading. Pure: no I/O, no clock.

The advisor is evaluated on a fixed cadence of data time (`evaluate_every_s`), not on every
Snapshot: a 1 Hz live poll and a 100× replay then evaluate at the same instants, which is what
makes a replay reproduce the live verdicts exactly. The default cadence is every 5 s of data time:
responsive enough for an operator (the banner follows a clear change within 10-45 s of data, see
`specwatch.advice.shown`), and cheap enough that a 24 h recording replays headless in seconds.

A headless timeline reads only the verdict changes, a few in a thousand evaluations: its Monitor
(`changes_only`) explains, with reasons, crossover, best k and bound, only the evaluations that
change a shown verdict, and its changes are the Verdicts the dashboard's Monitor gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.advice.shown import DEFAULT_DWELL_S, ShownVerdict
from specwatch.advice.verdict import Verdict
from specwatch.telemetry.snapshot import Snapshot
from specwatch.advice.sweep_evidence import SweepIdentity
from specwatch.readings.window import TargetWindow, Window


# Seconds of data time between evaluations of the advisor, live and in replay alike.
DEFAULT_EVALUATE_EVERY_S = 5.0


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


def is_verdict_change(event: object) -> bool:
    """Whether `event` is a change of a shown verdict's word: not a target's first verdict, nor a
    change of its reachability alone (the Monitor reports both as VerdictChanges too)."""
    return (isinstance(event, VerdictChange) and event.previous is not None
            and event.previous != event.verdict.speculation)


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
            # the window holds every target of the Snapshot just added (the advisor answers one it
            # has not read yet all the same)
            tw = self.window.target(target.url)
            advisor = self._advisor(target.url)
            explain = None
            if self.changes_only:
                verdict, explain = advisor.assess(tw, snapshot.gpus, snapshot.sources)
            else:
                verdict = advisor.update(tw, snapshot.gpus, snapshot.sources)
            shown = self._shown.get(target.url)
            if shown is None:
                band = self.target_configs.get(target.url, self.advisor_config).hysteresis
                shown = self._shown[target.url] = ShownVerdict(self.dwell_s, band)
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
