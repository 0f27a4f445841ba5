"""What the dashboard knows and shows: the DashboardView the panels are handed, and what it is built from.

The latest reading and the Monitor's states after it, the selected target and engine, each target's
trend history, the event log (verdict changes, server restarts), and when each target was last up
or first down. The view is rebuilt only after something changed (`dirty`); the panels only render it.

The panels draw what the advisor reasoned with: the GPU spec (scaled to a capped clock) comes on
the Verdict, and the advisor's assumed knee and unconfigured k come in the DashboardView.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, Callable, Sequence

from specwatch import perf
from specwatch.advice.advisor import GENERIC_KNEE_TOKENS, UNCONFIGURED_K
from specwatch.advice.monitor import Monitor, TargetState, VerdictChange, is_verdict_change
from specwatch.telemetry.snapshot import Snapshot, SpeculationConfig
from specwatch.widgets.format import clock
from specwatch.widgets.view import (
    DashboardView,
    History,
    SourceInfo,
    SweepMarker,
    TargetEvent,
    snapshot_engine_keys,
    trend_values,
)

MAX_EVENTS = 500


class ViewState:
    """The dashboard's state between polls, and the DashboardView of the selected target and engine."""

    def __init__(self, history_minutes: float, sweep: SweepMarker | None) -> None:
        self.history_minutes = history_minutes
        self.sweep = sweep
        self.latest: Snapshot | None = None
        self.states: dict[str, TargetState] = {}
        self.target_urls: tuple[str, ...] = ()
        self.target_index = 0
        self.engine: str | None = None
        self.events: deque[VerdictChange | TargetEvent] = deque(maxlen=MAX_EVENTS)
        # a replay's verdict changes as its recording holds them (use_recorded_changes), their times,
        # and how many of them the log holds
        self._recorded: tuple[VerdictChange, ...] | None = None
        self._recorded_times: list[float] = []
        self._recorded_shown = 0
        self._started_at: dict[str, float] = {}  # url → the server's process start time, as last read
        self._histories: dict[str, History] = {}
        self._last_good: dict[str, float] = {}  # url → data time of its last successful reading
        self._down_since: dict[str, float] = {}  # url → data time of its first failure after one
        self._view: DashboardView | None = None
        self.dirty = True  # something changed since the view was built
        # the last health block made (_health_report), with the evaluation's window it is over
        self._health_made: tuple[object, Callable[[bool], dict]] | None = None

    @property
    def url(self) -> str | None:
        """The selected target's URL (None before the first reading)."""
        return self.target_urls[self.target_index] if self.target_urls else None

    # -- what comes in -------------------------------------------------------------------------

    def take(self, snapshot: Snapshot, states: dict[str, TargetState]) -> None:
        """A reading has been ingested: it, and the Monitor's states after it."""
        self._drop_after(snapshot.time)  # a replay that went back: the log is a timeline up to here
        if self._recorded is not None:
            self._show_recorded(snapshot.time)
        self.latest = snapshot
        self.states = states
        urls = tuple(t.url for t in snapshot.targets)
        if urls != self.target_urls:
            current = self.url
            self.target_urls = urls
            self.target_index = urls.index(current) if current in urls else 0
        for target in snapshot.targets:
            started = target.process_start_time
            if target.ok and started is not None:
                before = self._started_at.get(target.url)
                if before is not None and started > before:
                    self.events.appendleft(TargetEvent(snapshot.time, target.url,
                                                       f"server restarted (its process started {clock(started)})"))
                self._started_at[target.url] = started
            if target.ok:
                self._last_good[target.url] = snapshot.time
                self._down_since.pop(target.url, None)
            elif target.url in self._last_good:
                earlier = self._down_since.get(target.url)
                if earlier is None or earlier > snapshot.time:  # a replay seeks back: start over
                    self._down_since[target.url] = snapshot.time
        for url in urls:
            history = self._histories.get(url)
            if history is None:
                history = self._histories[url] = History(self.history_minutes)
            history.add(snapshot.time, trend_values(self.states.get(url), snapshot.gpus))
        self.dirty = True

    def add_change(self, change: VerdictChange) -> None:
        """A verdict change the Monitor made. The log is a timeline up to the reading shown: a change
        dated before what it holds is a replay that went back (a seek re-reads the readings before
        its position), so what the log holds after it is dropped, to be logged again as the replay
        passes it; the same change twice is logged once. Once the recording's own changes are known
        (`use_recorded_changes`), its verdict changes come from them alone."""
        if self._recorded is not None and is_verdict_change(change):
            return
        self._drop_after(change.time)
        if any(isinstance(e, VerdictChange) and e.time == change.time and e.url == change.url
               and e.previous == change.previous and e.verdict.speculation == change.verdict.speculation
               for e in self.events):
            return
        self.events.appendleft(change)
        self.dirty = True

    def use_recorded_changes(self, changes: Sequence[VerdictChange]) -> None:
        """A replay's verdict changes as its recording holds them (the verdict index: one pass of the
        same Monitor through the file): from now on the log shows those up to the reading shown,
        whatever the seeking. A Monitor whose window a seek restarted makes changes a straight
        replay never made (ON → UNKNOWN "one reading so far", and back): none of them is logged."""
        self._recorded = tuple(sorted(changes, key=lambda c: c.time))
        self._recorded_times = [c.time for c in self._recorded]
        self.events = deque((e for e in self.events if not is_verdict_change(e)), maxlen=MAX_EVENTS)
        self._recorded_shown = 0
        if self.latest is not None:
            self._show_recorded(self.latest.time)
        self.dirty = True

    def _show_recorded(self, time: float) -> None:
        """The recorded verdict changes up to data time `time` in the log, in time order with the rest."""
        assert self._recorded is not None
        shown = bisect.bisect_right(self._recorded_times, time)
        if shown == self._recorded_shown:
            return
        kept = [e for e in self.events if not is_verdict_change(e)]
        merged = sorted([*kept, *self._recorded[:shown]], key=lambda e: e.time, reverse=True)
        self.events = deque(merged, maxlen=MAX_EVENTS)
        self._recorded_shown = shown
        self.dirty = True

    def _drop_after(self, time: float) -> None:
        """Forget what the log holds after data time `time` (newest first: only a replay that went back
        has any)."""
        if self.events and self.events[0].time > time:
            self.events = deque((e for e in self.events if e.time <= time), maxlen=MAX_EVENTS)
            if self._recorded is not None:
                self._recorded_shown = sum(1 for e in self.events if is_verdict_change(e))
            self.dirty = True

    # -- what the operator selects -------------------------------------------------------------

    def next_target(self) -> bool:
        """t: the next target; False when there is no other."""
        if len(self.target_urls) > 1:
            self.target_index = (self.target_index + 1) % len(self.target_urls)
            self.engine = None
            return True
        return False

    def select_target(self, url: str) -> bool:
        if url in self.target_urls:
            self.target_index = self.target_urls.index(url)
            self.engine = None
            return True
        return False

    def engine_keys(self) -> tuple[str, ...]:
        """The selected target's data-parallel engines in the latest reading."""
        return snapshot_engine_keys(self.latest, self.url)

    def next_engine(self) -> bool:
        """e: the next engine, or all of them; False when the target has only one."""
        keys = self.engine_keys()
        if len(keys) < 2:
            return False
        choices: list[str | None] = [None, *keys]
        self.engine = choices[(choices.index(self.engine) + 1) % len(choices)] if self.engine in choices else None
        return True

    # -- the view ------------------------------------------------------------------------------

    def _health_report(self, monitor: Monitor, url: str | None) -> Callable[[bool], dict] | None:
        """The selected target's health block, to be worked out when a panel reads it (None before
        two readings). It is over the window of the Monitor's last evaluation, as every other window
        figure on screen is: between evaluations the same block stands (working out the window
        anew at each poll cost more than all the panels together with 8 engines)."""
        from specwatch.readings.health import health_report, node_output_tokens

        state = self.states.get(url) if url else None
        tw = state.window if state is not None else None
        if tw is None or tw.increases is None:
            return None
        made = self._health_made
        if made is not None and made[0] is tw:
            return made[1]
        config = monitor.advisor_config
        # the window holds the evaluation's readings until the next poll is ingested (polls never
        # overlap, and this runs on the message that the ingest finished): its energy is over them
        gpu_joules, _ = monitor.window.gpu_energy()
        tokens = node_output_tokens(s.window.increases for s in self.states.values() if s.window is not None)
        speedup = state.verdict.expected_speedup

        def report(breakdown: bool) -> dict:
            return health_report(tw.increases, tw.seconds, gpu_joules, config.slo_ttft_s, config.slo_tpot_s,
                                 tw.speculation_configured, speedup, tokens, breakdown=breakdown,
                                 kv_capacity_tokens=tw.total.kv_capacity_tokens if tw.total else None)
        self._health_made = (tw, report)
        return report

    def view(self, monitor: Monitor, source_info: Callable[[], SourceInfo]) -> DashboardView:
        """The view of the selected target and engine; rebuilt only after something changed."""
        if self._view is not None and not self.dirty:
            return self._view
        snapshot = self.latest
        url = self.url
        engine_keys = snapshot_engine_keys(snapshot, url)
        if self.engine is not None and self.engine not in engine_keys:
            self.engine = None
        speculation = self._speculation(monitor, snapshot, url)
        # the method the verdict was judged with: the server's /server_info, else the operator's flag
        method = (speculation.method if speculation is not None and speculation.method
                  else getattr(monitor.advisor_config, "method", None))
        self._view = DashboardView(
            source=source_info(),
            time=snapshot.time if snapshot is not None else None,
            target_urls=self.target_urls,
            target_index=self.target_index,
            state=self.states.get(url) if url else None,
            target=snapshot.target(url) if snapshot is not None and url else None,
            engine_keys=engine_keys,
            engine=self.engine,
            gpus=snapshot.gpus if snapshot is not None else (),
            sources=snapshot.sources if snapshot is not None else (),
            history=self._histories.get(url) if url else None,
            events=tuple(self.events),
            method=method,
            method_words=perf.method_words(method),
            from_recording=getattr(getattr(monitor, "target_configs", {}).get(url) or monitor.advisor_config,
                                   "from_recording", frozenset()),
            speculation=speculation,
            sweep=self.sweep,
            **self._knee(monitor, url),
            unconfigured_k=UNCONFIGURED_K,
            window_s=monitor.window.seconds,
            history_minutes=self.history_minutes,
            health_report=self._health_report(monitor, url),
            last_good=self._last_good.get(url) if url else None,
            down_since=self._down_since.get(url) if url else None,
            others_down=tuple(t.url for t in snapshot.targets if not t.ok and t.url != url)
            if snapshot is not None else (),
            gpu_told=self._gpu_told(monitor, url),
        )
        self.dirty = False
        return self._view

    @staticmethod
    def _knee(monitor: Monitor, url: str | None) -> dict[str, Any]:
        """The step time's knee the target's last verdict quoted, and whether it was fitted from the
        node's steps or assumed: the knee the advisor assumes before its first verdict."""
        advisor = monitor.advisor_of(url) if url else None
        inputs = advisor.last_inputs if advisor is not None else None
        if inputs is None:
            return {"knee_tokens": GENERIC_KNEE_TOKENS, "knee_words": "assumed (no GPU identified)"}
        model = inputs.step_model
        fitted = isinstance(model, perf.StepTimeFit) and model.n_samples > 0
        return {"knee_tokens": model.knee_tokens,
                "knee_words": f"{'fitted to this node' if fitted else 'assumed'} (no GPU identified)"}

    @staticmethod
    def _gpu_told(monitor: Monitor, url: str | None) -> Any:
        """The GPU spec the target's advisor was told (--gpu), not read; None when it reads its GPU."""
        advisor = monitor.advisor_of(url) if url else None
        if advisor is not None:
            return advisor.gpu_identity.told
        return getattr(monitor.advisor_config, "gpu", None)

    @staticmethod
    def _speculation(monitor: Monitor, snapshot: Snapshot | None, url: str | None) -> SpeculationConfig | None:
        """The config the target's verdict was judged with; the target's own before the first verdict."""
        advisor = monitor.advisor_of(url) if url else None
        if advisor is not None and advisor.speculation is not None:
            return advisor.speculation
        target = snapshot.target(url) if snapshot is not None and url else None
        return target.speculation if target is not None else None
