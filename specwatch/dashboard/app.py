"""The Textual dashboard: the live (or replayed) view an operator reads at a glance.

    SnapshotSource ──read()──▶ poll worker ──Monitor.ingest (thread)──▶ SnapshotIngested ──▶ visible panels
                                          └──offer──▶ RecordingThread ──RecordingEvent──▶ header, notices

How it stays responsive (Harlequin / Dolphie style):
- The poll runs in an async worker on the app's loop (the sources are async: httpx, NVML in a
  thread), and the Monitor's CPU work runs in a thread. Results come back as typed messages.
- A poll is re-armed only after the previous one completed (a one-shot timer set when its result
  is handled), so a slow node never piles up requests, whatever the interval.
- Widgets only render the DashboardView they are given. After each poll, only the panels that are
  on screen (active tab, shown at this size, no modal on top, display not paused) get the new view;
  a tab that becomes visible is given the latest one.
- Collection and recording go on while the display is paused.
- The recording is written on its own thread (specwatch.dashboard.recording_thread): a poll only offers it
  the Snapshot, so a full or slow disk never keeps a reading from the panels. A writer that fails
  stops the recording, and the header says why.

Any SnapshotSource works. Replay controls are duck-typed: a source with pause(), resume(), seek(t),
step() (and optionally a `speed` property) gets the replay keys. A recorder is any object with
start(path), stop() and write(snapshot).

The app composes the parts, and its keys and message handlers hand the work to them:
- specwatch.dashboard.poll: the poll loop and its messages, under both controllers;
- specwatch.dashboard.live: the live controller (the interval, the header's clock);
- specwatch.dashboard.replay_control: the replay controller (pause, seek, step, speed, n / N);
- specwatch.dashboard.recording_control: the `r` key and what the recording thread reports;
- specwatch.dashboard.view_state: what is known and shown, and the DashboardView built from it;
- specwatch.dashboard.screens: the default screen's layout, its panels on screen, the help screen.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import TabbedContent
from textual.worker import Worker

from specwatch.advice.monitor import Monitor, TargetState
from specwatch.collectors.sources import SnapshotSource
from specwatch.dashboard.live import INTERVALS, LiveController
from specwatch.dashboard.poll import PollFailed, SnapshotIngested, SourceEnded, VerdictChanged
from specwatch.dashboard.recording_control import RecordingControl, RecordingReported
from specwatch.dashboard.replay_control import (
    ReplayController,
    VerdictIndexBuilt,
    VerdictIndexFailed,
    has_replay_controls,
)
from specwatch.dashboard.screens import TABS, PanelsOnScreen, compose_dashboard, is_shown, show_help
from specwatch.dashboard.verdict_index import VerdictIndex
from specwatch.dashboard.view_state import ViewState
from specwatch.telemetry.snapshot import Snapshot
from specwatch.widgets.header import LONG_INTERVAL_S, HeaderBar
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView, SourceInfo, SweepMarker

# The status of a command stopped by Ctrl-C (commands.options.ExitCode.INTERRUPTED, a layer above).
INTERRUPTED = 130

# what callers import from here: the app, run_app, its messages and the live intervals
__all__ = ["INTERVALS", "PollFailed", "SnapshotIngested", "SourceEnded", "SpecwatchApp", "VerdictChanged",
           "run_app", "source_is_synthetic"]


def source_is_synthetic(source: Any) -> bool:
    """A source says it is synthetic with a `synthetic` attribute, or in its description."""
    flag = getattr(source, "synthetic", None)
    if isinstance(flag, bool):
        return flag
    try:
        return "synthetic" in source.describe().lower()
    except Exception:  # noqa: BLE001 - a description is decoration; never let it stop the app
        return False


class SpecwatchApp(App[int]):
    """The dashboard over any SnapshotSource, with a Monitor doing the thinking."""

    CSS_PATH = "app.tcss"
    TITLE = "specwatch"
    # Three designed layouts: 80×24 (the verdict, engine and speculation), from 100×32 the GPUs and
    # trends join them on the overview, from 150×40 the roofline and the event log too.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (70, "-normal"), (100, "-medium"), (150, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-roomy"), (40, "-tall")]

    BINDINGS = [
        Binding("q", "quit", "quit"),
        # Ctrl-C quits as in any terminal program (Textual's own default only says how to quit),
        # with the status an interrupted command has (130), where q quits with 0
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
        Binding("question_mark", "help", "help"),
        # one key, two words: the footer says what the key will do (check_action shows one of them)
        Binding("space,p", "pause", "pause"),
        Binding("space,p", "resume", "resume"),
        Binding("plus,equals_sign", "interval(-1)", "faster", key_display="+"),
        Binding("minus", "interval(1)", "slower", key_display="-"),
        Binding("t", "next_target", "target", show=False),
        Binding("e", "next_engine", "engine", show=False),
        Binding("r", "toggle_recording", "record", show=False),
        Binding("1", "tab('overview')", "overview", show=False),
        Binding("2", "tab('gpus')", "GPUs", show=False),
        Binding("3", "tab('speculation')", "speculation", show=False),
        Binding("4", "tab('roofline')", "roofline", show=False),
        Binding("5", "tab('trends')", "trends", show=False),
        Binding("6", "tab('events')", "events", show=False),
        Binding("7", "tab('health')", "health", show=False),
        # priority: the tab bar would take the arrows otherwise; check_action lets them through to
        # it when the source is not a replay
        Binding("left", "seek(-1)", "back 10 s", show=False, priority=True),
        Binding("right", "seek(1)", "fwd 10 s", show=False, priority=True),
        Binding("left_square_bracket", "speed(-1)", "slower", show=False),
        Binding("right_square_bracket", "speed(1)", "faster", show=False),
        Binding("full_stop", "step", "step", show=False),
        Binding("n", "verdict_jump(1)", "next change", show=False),
        Binding("N", "verdict_jump(-1)", "previous change", show=False),
    ]

    def __init__(
        self,
        source: SnapshotSource,
        monitor: Monitor,
        *,
        title: str | None = None,
        recorder: Any | None = None,
        record_path: str | None = None,
        sweep: Any | None = None,
        history_minutes: float = 10.0,
        wall_clock: Callable[[], float] = time.time,
        freeze_heap: bool = False,
    ) -> None:
        super().__init__()
        self.wall_clock = wall_clock  # the header's ticking clock and countdown (tests pass their own)
        # once the first reading is on screen, start-up's objects leave the cyclic collector's walks
        # (specwatch.heap); a process running several apps in turn (the tests) leaves it off
        self.freeze_heap = freeze_heap
        self.header: HeaderBar | None = None
        if title:
            self.title = title
        self.source = source
        self.monitor = monitor
        self.replay = has_replay_controls(source)
        self.synthetic = source_is_synthetic(source)
        suggested = getattr(source, "interval_s", None)
        self.interval_s = float(suggested) if isinstance(suggested, (int, float)) and suggested >= 0 else 1.0
        self.paused = False
        self.ended = False
        self.polls = 0  # completed polls, for tests and the benchmark
        self.last_error: str | None = None
        # the parts: what is shown, the panels it is handed to, the recording, and the poll with
        # the keys that move it (a replay's, or the live interval's)
        self.view_state = ViewState(history_minutes, SweepMarker.from_results(sweep))
        self.panels_on_screen = PanelsOnScreen(self)
        self.recording_control = RecordingControl(self, recorder, record_path)
        self.controller: LiveController | ReplayController = \
            ReplayController(self) if self.replay else LiveController(self)

    # -- what callers read -----------------------------------------------------------------------

    @property
    def latest(self) -> Snapshot | None:
        return self.view_state.latest

    @property
    def states(self) -> dict[str, TargetState]:
        return self.view_state.states

    @property
    def target_urls(self) -> tuple[str, ...]:
        return self.view_state.target_urls

    @property
    def engine(self) -> str | None:
        return self.view_state.engine

    @property
    def recording(self) -> str | None:
        """The file being written, once the recording thread said so."""
        return self.recording_control.path

    @property
    def recording_stopped(self) -> str | None:
        """Why the last recording failed, until the next one."""
        return self.recording_control.stopped_why

    @property
    def verdict_index(self) -> VerdictIndex | None:
        controller = self.controller
        return controller.verdict_index if isinstance(controller, ReplayController) else None

    # -- layout --------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        self.header = HeaderBar(id="header")
        yield from compose_dashboard(self.header)

    def on_mount(self) -> None:
        self.panels_on_screen.show_everywhere(self.view())
        self.controller.mount()

    def tick_clock(self) -> None:
        """Move the header's wall clock and next-poll countdown on (once a second, live only). Under
        LONG_INTERVAL_S the polls themselves move the header's clock (the reading's time), and the
        tick costs nothing."""
        header = self.header
        # not yet (or no longer) on screen, or under a modal: nothing to move on
        if header is None or not (header.is_mounted and header.is_attached) or not self.screen_stack \
                or self.screen is not self.screen_stack[0]:
            return
        if self.interval_s < LONG_INTERVAL_S:
            if header.now is not None:  # the interval was just shortened: back to the reading's time
                header.tick(None, None)
            return
        header.tick(self.wall_clock(), self.controller.next_poll_at)

    # -- what the poll reports -----------------------------------------------------------------

    def on_snapshot_ingested(self, message: SnapshotIngested) -> None:
        controller = self.controller
        controller.landed()
        self.polls += 1
        if self.polls == 1 and self.freeze_heap:
            from specwatch.heap import freeze_start_up_objects

            self.call_after_refresh(freeze_start_up_objects)
        self.last_error = None
        self.view_state.take(message.snapshot, message.states)
        controller.arm()
        self.refresh_visible(force=controller.take_stepping())

    def on_verdict_changed(self, message: VerdictChanged) -> None:
        self.view_state.add_change(message.change)

    def on_poll_failed(self, message: PollFailed) -> None:
        self.controller.landed()
        self.last_error = message.error
        self.notify(message.error, title="poll failed", severity="error", timeout=4)
        self.controller.arm()

    def on_source_ended(self, _: SourceEnded) -> None:
        self.controller.landed()
        self.ended = True
        self.view_state.dirty = True
        self.refresh_visible()

    def on_verdict_index_built(self, message: VerdictIndexBuilt) -> None:
        assert isinstance(self.controller, ReplayController)  # only a replay indexes its verdict changes
        self.controller.index_built(message.index)

    def on_verdict_index_failed(self, message: VerdictIndexFailed) -> None:
        assert isinstance(self.controller, ReplayController)
        self.controller.index_failed(message.error)

    def on_recording_reported(self, message: RecordingReported) -> None:
        self.recording_control.reported(message.event)
        self.changed()

    # -- rendering -----------------------------------------------------------------------------

    def source_info(self) -> SourceInfo:
        try:
            description = self.source.describe()
        except Exception:  # noqa: BLE001
            description = ""
        speed = getattr(self.source, "speed", None) if self.replay else None
        return SourceInfo(
            kind=str(getattr(self.source, "kind", "LIVE")),
            description=description,
            synthetic=source_is_synthetic(self.source),  # a demo playlist mixes real and synthetic
            paused=self.paused,
            ended=self.ended,
            interval_s=self.interval_s,
            replay_speed=float(speed) if isinstance(speed, (int, float)) else None,
            recording=self.recording_control.path,
            recording_stopped=self.recording_control.stopped_why,
        )

    def view(self) -> DashboardView:
        """The view of the selected target and engine; rebuilt only after something changed."""
        return self.view_state.view(self.monitor, self.source_info)

    def panels(self) -> Iterable[Panel]:
        return self.panels_on_screen.panels()

    is_shown = staticmethod(is_shown)

    def refresh_visible(self, force: bool = False) -> None:
        """Hand the new view to the panels on screen; skipped while paused or under a modal."""
        self.panels_on_screen.refresh(force)

    @on(TabbedContent.TabActivated)
    def _tab_shown(self) -> None:
        # The newly shown panels hold the view they had when last shown (a tab never shown yet, the
        # start-up one, before any reading): hand them the latest one now, before the tab's first
        # frame. TabbedContent has already displayed the tab's pane when it posts this (its
        # ContentSwitcher does so first), so they count as shown. Handed after the refresh, as it
        # was, the tab was first painted from the old view: the Events tab said "no verdict changes
        # yet" over changes already logged (issue 45, item 19; see also Panel.CURRENT_WHILE_HIDDEN).
        self.refresh_visible()

    def on_resize(self) -> None:
        # A resize can cross a breakpoint and show panels that were hidden until now: once the new
        # classes apply (after this refresh), hand them the view and lay every shown panel out anew.
        self.call_after_refresh(self.panels_on_screen.after_resize)

    def on_screen_resume(self) -> None:
        self.call_after_refresh(self.refresh_visible)

    # -- actions -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("seek", "speed", "step", "verdict_jump") and not self.replay:
            return False
        if action in ("pause", "resume"):
            return self.paused == (action == "resume")
        return True

    def changed(self) -> None:
        """Something shown changed (a selection, a setting): a new view, to the panels on screen."""
        self.view_state.dirty = True
        self.refresh_visible()

    def action_help(self) -> None:
        show_help(self)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self.panels_on_screen.frozen = self.view() if self.paused else None
        self.controller.paused_changed(self.paused)
        self.refresh_bindings()  # the footer's "pause" becomes "resume", and back
        self.changed()

    def action_pause(self) -> None:
        if not self.paused:
            self.action_toggle_pause()

    def action_resume(self) -> None:
        if self.paused:
            self.action_toggle_pause()

    def action_interval(self, step: int) -> None:
        """Poll faster (step -1) or slower (step 1); a replay plays faster or slower."""
        self.controller.interval(step)

    def action_speed(self, step: int) -> None:
        self.controller.speed(step)

    def action_seek(self, direction: int) -> Worker[None] | None:
        return self.controller.seek(direction)

    def action_step(self) -> Worker[None] | None:
        return self.controller.step()

    def action_verdict_jump(self, direction: int) -> Worker[None] | None:
        return self.controller.verdict_jump(direction)

    def action_next_target(self) -> None:
        if self.view_state.next_target():
            self.changed()

    def select_target(self, url: str) -> None:
        if self.view_state.select_target(url):
            self.changed()

    def action_next_engine(self) -> None:
        if self.view_state.next_engine():
            self.changed()

    def select_engine(self, engine: str | None) -> None:
        self.view_state.engine = engine
        self.changed()

    def action_toggle_recording(self) -> None:
        latest = self.view_state.latest
        self.recording_control.toggle(latest.time if latest else None)

    async def action_quit(self, return_code: int = 0) -> None:
        self.workers.cancel_group(self, "poll")
        await self._close()
        self.exit(result=return_code, return_code=return_code)

    async def action_interrupt(self) -> None:
        """Ctrl-C: quit as q does, with the status of an interrupted command."""
        await self.action_quit(INTERRUPTED)

    async def on_unmount(self) -> None:
        await self.recording_control.finish()  # however the app ends, the file is finished

    async def _close(self) -> None:
        self.controller.close()
        await self.recording_control.finish()
        try:
            await self.source.aclose()
        except Exception:  # noqa: BLE001
            pass

    # -- command palette -----------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume", "Freeze the display (collection goes on)", self.action_toggle_pause)
        yield SystemCommand("Help", "Keys and what the panels show", self.action_help)
        for tab in TABS:
            yield SystemCommand(f"Show {tab}", f"Switch to the {tab} tab", lambda tab=tab: self.action_tab(tab))
        yield from self.controller.commands()  # a replay's verdict jumps, or the live intervals
        for url in self.view_state.target_urls:
            yield SystemCommand(f"Target {url}", "Show this server", lambda u=url: self.select_target(u))
        keys = self.view_state.engine_keys()
        if len(keys) > 1:
            yield SystemCommand("Engine: all", "Sum every engine of this target", lambda: self.select_engine(None))
            for key in keys:
                yield SystemCommand(f"Engine {key}", "Show one data-parallel engine",
                                    lambda k=key: self.select_engine(k))
        yield from self.recording_control.commands()

    def set_interval_s(self, seconds: float) -> None:
        self.controller.set_interval_s(seconds)
        self.changed()


def run_app(
    source: SnapshotSource,
    monitor: Monitor,
    *,
    title: str | None = None,
    recorder: Any | None = None,
    record_path: str | None = None,
    sweep: Any | None = None,
    history_minutes: float = 10.0,
) -> int:
    """Run the dashboard until the operator quits; returns the exit status (0 for q, 130 for Ctrl-C)."""
    app = SpecwatchApp(source, monitor, title=title, recorder=recorder, record_path=record_path, sweep=sweep,
                       history_minutes=history_minutes, freeze_heap=True)
    result = app.run()
    return int(result or 0) if app.return_code in (None, 0) else int(app.return_code)
