"""The pipeline every front end shares: Snapshots in, per-target windows and verdicts out.

    Source ──Snapshot──▶ Monitor.ingest ──▶ {url: TargetState} + [VerdictChange]

`check`, the TUI (live or replay), headless replay, and the exporter all drive one Monitor, so the
same Snapshots give the same verdicts whichever of them is reading. Pure: no I/O, no clock.

The advisor is evaluated on a fixed cadence of data time (`evaluate_every_s`), not on every
Snapshot: a 1 Hz live poll and a 100× replay then evaluate at the same instants, which is what
makes a replay reproduce the live verdicts exactly. The default cadence is every 5 s of data time:
responsive enough for an operator (a flip needs `confirm_windows` evaluations, 15 s), and cheap
enough that a 24 h recording replays headless in seconds (issue 6's budget).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from specwatch.advisor import Advisor, AdvisorConfig, Verdict, unknown_verdict
from specwatch.snapshot import Snapshot
from specwatch.window import TargetWindow, Window


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


class Monitor:
    def __init__(
        self,
        window_s: float = 30.0,
        advisor_config: AdvisorConfig | None = None,
        evaluate_every_s: float = DEFAULT_EVALUATE_EVERY_S,
        target_configs: Mapping[str, AdvisorConfig] | None = None,
    ) -> None:
        self.window = Window(window_s)
        self.advisor_config = advisor_config or AdvisorConfig()
        # Targets judged under settings of their own (the demo's scenarios differ in method).
        self.target_configs = dict(target_configs or {})
        self.evaluate_every_s = evaluate_every_s
        self._advisors: dict[str, Advisor] = {}
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
        return advisor

    def ingest(self, snapshot: Snapshot) -> list[VerdictChange]:
        """Add one Snapshot; returns the verdict changes it caused (empty between evaluations)."""
        previous_latest = self.window.latest
        self.window.add(snapshot)
        if previous_latest is not None and snapshot.time < previous_latest.time:
            self._next_evaluation = None  # the timeline restarted (a seek back): evaluate at once
        if self._next_evaluation is not None and snapshot.time < self._next_evaluation:
            return []
        self._next_evaluation = snapshot.time + self.evaluate_every_s
        changes: list[VerdictChange] = []
        for target in snapshot.targets:
            tw = self.window.target(target.url)
            verdict = self._advisor(target.url).update(tw, snapshot.gpus) if tw is not None \
                else unknown_verdict("no reading yet", snapshot.time)
            before = self._states.get(target.url)
            # A target going down (or coming back) is news even when the verdict word stays
            # "unknown": an idle node and a dead one must not look alike in the timeline.
            if before is None or before.verdict.speculation != verdict.speculation \
                    or before.reachable != target.ok:
                changes.append(VerdictChange(snapshot.time, target.url,
                                             before.verdict.speculation if before else None, verdict))
            self._states[target.url] = TargetState(target.url, tw, verdict, target.ok)
        return changes
