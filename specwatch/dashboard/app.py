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

The panels draw what the advisor reasoned with: the GPU spec (scaled to a capped clock) comes on
the Verdict, and the advisor's assumed knee and unconfigured k come in the DashboardView.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, TabbedContent, TabPane
from textual.worker import get_current_worker

from specwatch import perf
from specwatch.advice.advisor import GENERIC_KNEE_TOKENS, UNCONFIGURED_K
from specwatch.advice.monitor import Monitor, TargetState, VerdictChange
from specwatch.dashboard.recording_thread import (
    ReadingsDropped,
    RecordingEvent,
    RecordingNotStarted,
    RecordingStarted,
    RecordingStopped,
    RecordingThread,
)
from specwatch.telemetry.snapshot import Snapshot, SpeculationConfig
from specwatch.collectors.sources import SnapshotSource
from specwatch.dashboard.verdict_index import VerdictIndex, build_verdict_index, monitor_template
from specwatch.widgets.engine import EnginePanel
from specwatch.widgets.events import EventLog
from specwatch.widgets.format import clock
from specwatch.widgets.gpu import GpuPanel
from specwatch.widgets.health import HealthPanel
from specwatch.widgets.header import LONG_INTERVAL_S, HeaderBar
from specwatch.widgets.help import HelpScreen
from specwatch.widgets.panel import Panel
from specwatch.widgets.roofline import RooflinePanel
from specwatch.widgets.speculation import SpeculationPanel
from specwatch.widgets.trends import TrendsPanel
from specwatch.widgets.verdict import VerdictBanner
from specwatch.widgets.view import (
    DashboardView,
    History,
    SourceInfo,
    SweepMarker,
    TargetEvent,
    snapshot_engine_keys,
    trend_values,
)

# Poll intervals offered by + and - (seconds), and replay speeds offered by [ and ].
INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
SPEEDS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
SEEK_STEP_S = 10.0
MAX_EVENTS = 500
TABS = ("overview", "gpus", "speculation", "roofline", "trends", "events", "health")
REPLAY_METHODS = ("pause", "resume", "seek", "step")
CLOSE_RECORDING_TIMEOUT_S = 10.0  # on quit, for the recording thread to write what is queued

log = logging.getLogger(__name__)


# -- messages --------------------------------------------------------------------------------------

class SnapshotIngested(Message):
    """A poll completed: the Snapshot read, the Monitor's states after it, and its verdict changes."""

    def __init__(self, snapshot: Snapshot, states: dict[str, TargetState], changes: list[VerdictChange]) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.states = states
        self.changes = changes


class VerdictChanged(Message):
    """The verdict of one target changed (posted once per change, after its SnapshotIngested)."""

    def __init__(self, change: VerdictChange) -> None:
        super().__init__()
        self.change = change


class PollFailed(Message):
    """The source raised instead of returning a Snapshot; polling goes on."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class SourceEnded(Message):
    """The source has no more Snapshots (a replay played out)."""


class VerdictIndexBuilt(Message):
    """The replay's verdict changes are indexed: n / N can jump between them."""

    def __init__(self, index: VerdictIndex) -> None:
        super().__init__()
        self.index = index


class VerdictIndexFailed(Message):
    """The verdict changes could not be indexed (the replay itself goes on)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class RecordingReported(Message):
    """The recording thread says what happened: started, stopped (and why), dropped readings."""

    def __init__(self, event: RecordingEvent) -> None:
        super().__init__()
        self.event = event


# -- helpers ---------------------------------------------------------------------------------------

def has_replay_controls(source: Any) -> bool:
    return all(callable(getattr(source, name, None)) for name in REPLAY_METHODS)


def source_is_synthetic(source: Any) -> bool:
    """A source says it is synthetic with a `synthetic` attribute, or in its description."""
    flag = getattr(source, "synthetic", None)
    if isinstance(flag, bool):
        return flag
    try:
        return "synthetic" in source.describe().lower()
    except Exception:  # noqa: BLE001 - a description is decoration; never let it stop the app
        return False


def next_in(values: tuple[float, ...], current: float, step: int) -> float:
    """The next value up (step 1) or down (step -1) from current in a sorted tuple."""
    if step > 0:
        return next((v for v in values if v > current + 1e-9), values[-1])
    return next((v for v in reversed(values) if v < current - 1e-9), values[0])


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def default_recording_path(recorder: Any, data_time: float | None) -> str:
    """The recorder's own default when it has one, else specwatch-<data time>.rec here."""
    suggest = getattr(recorder, "default_path", None)
    if callable(suggest):
        return str(suggest())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(data_time if data_time is not None else 0))
    return str(Path.cwd() / f"specwatch-{stamp}.rec")


# -- the app ---------------------------------------------------------------------------------------

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
        # Ctrl-C quits as in any terminal program (Textual's own default only says how to quit)
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("question_mark", "help", "help"),
        Binding("space,p", "toggle_pause", "pause"),
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
        self._next_poll_at: float | None = None  # on wall_clock; None while none is scheduled
        self._header: HeaderBar | None = None
        self._clock_timer: Timer | None = None  # live only: the header's once-a-second clock
        # the last health block made (_health_report), with the evaluation's window it is over
        self._health_made: tuple[object, Callable[[bool], dict]] | None = None
        if title:
            self.title = title
        self.source = source
        self.monitor = monitor
        self.recorder = recorder
        self.record_path = record_path
        self.sweep = SweepMarker.from_results(sweep)
        self.history_minutes = history_minutes
        self.replay = has_replay_controls(source)
        self.synthetic = source_is_synthetic(source)
        suggested = getattr(source, "interval_s", None)
        self.interval_s = float(suggested) if isinstance(suggested, (int, float)) and suggested >= 0 else 1.0
        self.paused = False
        # while paused, the view every panel on screen holds: a tab or panel shown during the pause
        # gets it too, not the view it last had (minutes older, beside a banner of the pause's time)
        self._frozen: DashboardView | None = None
        self.ended = False
        self.recording: str | None = None  # the file being written, once the thread said so
        self.recording_stopped: str | None = None  # why the last recording failed, until the next one
        self.polls = 0  # completed polls, for tests and the benchmark
        self.last_error: str | None = None
        self.latest: Snapshot | None = None
        self.states: dict[str, TargetState] = {}
        self.target_urls: tuple[str, ...] = ()
        self.target_index = 0
        self.engine: str | None = None
        self.events: deque[VerdictChange | TargetEvent] = deque(maxlen=MAX_EVENTS)
        self._started_at: dict[str, float] = {}  # url → the server's process start time, as last read
        self._histories: dict[str, History] = {}
        self._last_good: dict[str, float] = {}  # url → data time of its last successful reading
        self._down_since: dict[str, float] = {}  # url → data time of its first failure after one
        self._poll_timer: Timer | None = None
        self._poll_in_flight = False
        self._recording_thread: RecordingThread | None = None
        self._view: DashboardView | None = None
        self._view_dirty = True
        self._stepping = False
        # a poll is started and has not yet had its reading from source.read() (not yet ingesting):
        # set when the poll is started, so that a pause landing before its worker runs gives it up
        self._reading = False
        self._landed: asyncio.Event | None = None  # set whenever a poll, step or seek has landed
        self._poll_started = 0.0  # event-loop time the last poll began
        # where the shown verdict changes in the recording (n / N), built in a thread on mount
        self.verdict_index: VerdictIndex | None = None
        self.verdict_index_error: str | None = None
        self.verdict_index_done = 0.0  # fraction of the recording indexed so far
        self._panels: tuple[Panel, ...] = ()  # the default screen's panels, found once (see panels())

    # -- layout --------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        self._header = HeaderBar(id="header")
        yield self._header
        yield VerdictBanner(id="verdict")
        with TabbedContent(id="tabs", initial="overview"):
            with TabPane("Overview", id="overview"):
                with VerticalScroll():
                    with Horizontal(id="overview-top"):
                        yield EnginePanel(id="ov-engine")
                        yield SpeculationPanel(id="ov-speculation")
                        yield RooflinePanel(id="ov-roofline", classes="wide-only")
                    yield GpuPanel(id="ov-gpus", classes="roomy-only", summary_from=4)
                    yield TrendsPanel(id="ov-trends", classes="roomy-only")
                    yield EventLog(id="ov-events", classes="wide-only", latest=2)
            with TabPane("GPUs", id="gpus"):
                with VerticalScroll():
                    yield GpuPanel(id="gpu-panel")
            with TabPane("Speculation", id="speculation"):
                with VerticalScroll():
                    with Container(id="speculation-pair"):
                        yield SpeculationPanel(id="speculation-panel")
                        yield EnginePanel(id="engine-panel")
            with TabPane("Roofline", id="roofline"):
                yield RooflinePanel(id="roofline-panel")
            with TabPane("Trends", id="trends"):
                yield TrendsPanel(id="trends-panel", fill=True)
            with TabPane("Events", id="events"):
                with VerticalScroll():
                    yield EventLog(id="events-panel")
            with TabPane("Health", id="health"):
                with VerticalScroll():
                    yield HealthPanel(id="health-panel")
        yield Footer()

    def on_mount(self) -> None:
        self._show_everywhere(self.view())
        self._start_verdict_index()  # before the first reading: the index starts from the Monitor's start
        self._start_poll()
        if not self.replay:
            # the header's clock and countdown only: no panel is given a view on this tick. Below
            # LONG_INTERVAL_S the polls move the clock, and the timer does not fire at all.
            self._clock_timer = self.set_interval(1.0, self.tick_clock, name="clock",
                                                  pause=self.interval_s < LONG_INTERVAL_S)

    def tick_clock(self) -> None:
        """Move the header's wall clock and next-poll countdown on (once a second, live only). Under
        LONG_INTERVAL_S the polls themselves move the header's clock (the reading's time), and the
        tick costs nothing."""
        header = self._header
        # not yet (or no longer) on screen, or under a modal: nothing to move on
        if header is None or not (header.is_mounted and header.is_attached) or not self.screen_stack \
                or self.screen is not self.screen_stack[0]:
            return
        if self.interval_s < LONG_INTERVAL_S:
            if header.now is not None:  # the interval was just shortened: back to the reading's time
                header.tick(None, None)
            return
        header.tick(self.wall_clock(), self._next_poll_at)

    def _clock_follows_interval(self) -> None:
        """The clock ticks on its own only at intervals from LONG_INTERVAL_S: a shorter interval
        pauses it (and puts the reading's time back on the header), a longer one resumes it."""
        timer = self._clock_timer
        if timer is None:
            return
        if self.interval_s < LONG_INTERVAL_S:
            timer.pause()
            self.tick_clock()
        else:
            timer.resume()

    # -- polling -------------------------------------------------------------------------------

    def poll_delay(self) -> float:
        """Seconds until the next read: a replay source's own pace (it knows its speed), else ours."""
        if getattr(self.source, "paces_itself", False):
            return 0.0  # its read() waits until the next Snapshot is due
        if self.replay:
            try:
                return max(0.0, float(self.source.interval_s))
            except (AttributeError, TypeError, ValueError):
                return self.interval_s
        return self.interval_s

    def _arm_poll(self) -> None:
        """Schedule the next poll; called only once the previous one has been handled."""
        if self._poll_timer is not None:
            self._poll_timer.stop()
        self._poll_timer = None
        self._next_poll_at = None
        if self.ended or (self.paused and self.replay) or self._poll_in_flight:
            return
        interval = self.poll_delay()
        # Keep the cadence (a 1 s interval reads once a second, not once per 1 s + scrape time), but
        # after a slow read still leave the node a tenth of the interval before asking again.
        elapsed = asyncio.get_running_loop().time() - self._poll_started
        delay = max(interval - elapsed, 0.1 * interval)
        if delay <= 0:
            self.call_later(self._start_poll)  # as fast as the source gives (a replay at full speed)
        else:
            self._poll_timer = self.set_timer(delay, self._start_poll, name="poll")
            self._next_poll_at = self.wall_clock() + delay

    def _start_poll(self) -> None:
        self._poll_timer = None
        self._next_poll_at = None
        if self._poll_in_flight or self.ended:
            return
        self._poll_in_flight = True
        self._reading = True
        self._poll_started = asyncio.get_running_loop().time()
        self._poll()

    @work(group="poll", exit_on_error=False, description="read the source and ingest")
    async def _poll(self) -> None:
        try:
            snapshot = await self.source.read()
        except Exception as exc:  # noqa: BLE001 - a source must never take the dashboard down
            self.post_message(PollFailed(f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self._reading = False
        if snapshot is None:
            self.post_message(SourceEnded())
            return
        await self._ingest_and_post(snapshot)

    async def _ingest_and_post(self, snapshot: Snapshot) -> None:
        if self._recording_thread is not None:
            self._recording_thread.offer(snapshot)  # never blocks: the disk is the thread's business
        try:
            # Between evaluations a reading only joins the window: less work than a thread's round trip
            if self.monitor.evaluates(snapshot):
                states, changes = await asyncio.to_thread(self._ingest, snapshot)
            else:
                states, changes = self._ingest(snapshot)
        except Exception as exc:  # noqa: BLE001
            self.post_message(PollFailed(f"ingest failed: {type(exc).__name__}: {exc}"))
            return
        # the changes first: the view the Snapshot's message builds then holds them (a paused
        # screen shows a step or a seek with its events, not the events without their reading)
        for change in changes:
            self.post_message(VerdictChanged(change))
        self.post_message(SnapshotIngested(snapshot, states, changes))

    def _ingest(self, snapshot: Snapshot) -> tuple[dict[str, TargetState], list[VerdictChange]]:
        """The Monitor's work, in a thread when it evaluates. Polls never overlap, so the Monitor is
        only ever used from one thread at a time."""
        changes = self.monitor.ingest(snapshot)
        return self.monitor.states, changes

    def _poll_landed(self) -> None:
        """Nothing is in flight any more: a key press waiting for the last reading goes on."""
        self._poll_in_flight = self._reading = False
        if self._landed is not None:
            self._landed.set()

    async def _until_landed(self) -> None:
        """Wait while a reading is being taken in (ingested): a seek or step then starts from the
        reading it shows instead of being dropped. A poll still waiting for its reading is no wait:
        it hands nothing over, and a seek wakes it."""
        while self._poll_in_flight and not self._reading:
            if self._landed is None:
                self._landed = asyncio.Event()
            self._landed.clear()
            await self._landed.wait()

    def on_snapshot_ingested(self, message: SnapshotIngested) -> None:
        self._poll_landed()
        self.polls += 1
        if self.polls == 1 and self.freeze_heap:
            from specwatch.heap import freeze_start_up_objects

            self.call_after_refresh(freeze_start_up_objects)
        self.last_error = None
        snapshot = message.snapshot
        self.latest = snapshot
        self.states = message.states
        urls = tuple(t.url for t in snapshot.targets)
        if urls != self.target_urls:
            current = self.target_urls[self.target_index] if self.target_urls else None
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
        self._view_dirty = True
        self._arm_poll()
        stepping, self._stepping = self._stepping, False
        self.refresh_visible(force=stepping)

    def on_verdict_changed(self, message: VerdictChanged) -> None:
        self.events.appendleft(message.change)
        self._view_dirty = True

    def on_poll_failed(self, message: PollFailed) -> None:
        self._poll_landed()
        self.last_error = message.error
        self.notify(message.error, title="poll failed", severity="error", timeout=4)
        self._arm_poll()

    def on_source_ended(self, _: SourceEnded) -> None:
        self._poll_landed()
        self.ended = True
        self._view_dirty = True
        self.refresh_visible()

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
            recording=self.recording,
            recording_stopped=self.recording_stopped,
        )

    def _health_report(self, url: str | None) -> Callable[[bool], dict] | None:
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
        config = self.monitor.advisor_config
        # the window holds the evaluation's readings until the next poll is ingested (polls never
        # overlap, and this runs on the message that the ingest finished): its energy is over them
        gpu_joules, _ = self.monitor.window.gpu_energy()
        tokens = node_output_tokens(s.window.increases for s in self.states.values() if s.window is not None)
        speedup = state.verdict.expected_speedup

        def report(breakdown: bool) -> dict:
            return health_report(tw.increases, tw.seconds, gpu_joules, config.slo_ttft_s, config.slo_tpot_s,
                                 tw.speculation_configured, speedup, tokens, breakdown=breakdown,
                                 kv_capacity_tokens=tw.total.kv_capacity_tokens if tw.total else None)
        self._health_made = (tw, report)
        return report

    def view(self) -> DashboardView:
        """The view of the selected target and engine; rebuilt only after something changed."""
        if self._view is not None and not self._view_dirty:
            return self._view
        snapshot = self.latest
        url = self.target_urls[self.target_index] if self.target_urls else None
        engine_keys = snapshot_engine_keys(snapshot, url)
        if self.engine is not None and self.engine not in engine_keys:
            self.engine = None
        speculation = self._speculation(snapshot, url)
        # the method the verdict was judged with: the server's /server_info, else the operator's flag
        method = (speculation.method if speculation is not None and speculation.method
                  else getattr(self.monitor.advisor_config, "method", None))
        self._view = DashboardView(
            source=self.source_info(),
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
            speculation=speculation,
            sweep=self.sweep,
            assumed_knee_tokens=GENERIC_KNEE_TOKENS,
            unconfigured_k=UNCONFIGURED_K,
            window_s=self.monitor.window.seconds,
            history_minutes=self.history_minutes,
            health_report=self._health_report(url),
            last_good=self._last_good.get(url) if url else None,
            down_since=self._down_since.get(url) if url else None,
            others_down=tuple(t.url for t in snapshot.targets if not t.ok and t.url != url)
            if snapshot is not None else (),
        )
        self._view_dirty = False
        return self._view

    def _speculation(self, snapshot: Snapshot | None, url: str | None) -> SpeculationConfig | None:
        """The config the target's verdict was judged with; the target's own before the first verdict."""
        advisor = self.monitor.advisor_of(url) if url else None
        if advisor is not None and advisor.speculation is not None:
            return advisor.speculation
        target = snapshot.target(url) if snapshot is not None and url else None
        return target.speculation if target is not None else None

    def panels(self) -> Iterable[Panel]:
        # compose() makes every panel once and none is added or removed later: a CSS query of the
        # whole DOM after every poll would find the same ones
        if not self._panels and self.screen_stack:
            self._panels = tuple(self.screen_stack[0].query(Panel))
        return self._panels

    @staticmethod
    def is_shown(widget: Panel) -> bool:
        """On screen now: it and every container above it displayed (inactive tabs are not)."""
        node: Any = widget
        while node is not None and not isinstance(node, Screen):
            if not node.display:
                return False
            node = node.parent
        return True

    def refresh_visible(self, force: bool = False) -> None:
        """Hand the new view to the panels on screen; skipped while paused or under a modal."""
        if not self.screen_stack or self.screen is not self.screen_stack[0]:
            return
        if self.paused and not force:
            # the header still says PAUSED, and where a replay stands; the rest stays at the pause
            header = self._header
            if header is not None and header.is_attached:
                header.show(self.view())
            self._hand_view(self._frozen or self.view(), but=header)
            return
        # The header line changes on every poll, and so do panels far below it (the GPU rows): one
        # frame draws them all. Textual renders only the changed lines of a frame (not the rows
        # between them), so a frame of the header's own only added a frame's fixed cost to every
        # poll: 5-10 % of the dashboard's CPU with one engine and with eight (benchmarks/
        # bench_terminal.py, side by side), and more bytes to the terminal.
        view = self.view()
        if self.paused:  # a step, seek or jump shown while paused: the pause now stands there
            self._frozen = view
        self._hand_view(view)

    def _hand_view(self, view: DashboardView, but: Panel | None = None) -> None:
        """Give `view` to every panel on screen that does not hold it yet (`but` one)."""
        with self.batch_update():
            for panel in self.panels():
                if panel is not but and panel.view is not view and self.is_shown(panel):
                    panel.show(view)

    def _show_everywhere(self, view: DashboardView) -> None:
        for panel in self.panels():
            panel.show(view)

    @on(TabbedContent.TabActivated)
    def _tab_shown(self) -> None:
        # the newly shown panels have not seen the latest view; ContentSwitcher updates display
        # before the next refresh, so hand it over after that
        self.call_after_refresh(self.refresh_visible)

    def on_resize(self) -> None:
        # A resize can cross a breakpoint and show panels that were hidden until now: once the new
        # classes apply (after this refresh), hand them the view and lay every shown panel out anew.
        self.call_after_refresh(self._after_resize)

    def _after_resize(self) -> None:
        self.refresh_visible()
        for panel in self.panels():
            if self.is_shown(panel):
                panel.refresh(layout=True)

    def on_screen_resume(self) -> None:
        self.call_after_refresh(self.refresh_visible)

    # -- actions -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("seek", "speed", "step", "verdict_jump") and not self.replay:
            return False
        return True

    def _changed(self) -> None:
        self._view_dirty = True
        self.refresh_visible()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(replay=self.replay, recorder=self.recorder is not None),
                         callback=lambda _: self.call_after_refresh(self.refresh_visible))

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self._frozen = self.view() if self.paused else None
        if self.replay:
            try:
                (self.source.pause if self.paused else self.source.resume)()
            except Exception as exc:  # noqa: BLE001
                self.notify(f"replay: {exc}", severity="error")
            if not self.paused:
                self._start_poll()
            else:
                if self._poll_timer is not None:
                    self._poll_timer.stop()
                    self._poll_timer = None
                if self._poll_in_flight and self._reading:
                    # A paused replay may hold its read until resumed: give it up so that step
                    # works. A read is cancellation-safe (the source hands nothing over until it
                    # returns); an ingest already under way is left to finish.
                    self.workers.cancel_group(self, "poll")
                    self._poll_landed()
        self._changed()

    def action_interval(self, step: int) -> None:
        """Poll faster (step -1) or slower (step 1). Takes effect at once, even mid-wait."""
        if self.replay:
            self.action_speed(-step)
            return
        self.interval_s = next_in(INTERVALS, self.interval_s, step)
        try:
            self.source.interval_s = self.interval_s  # LiveSource takes it; others may not
        except (AttributeError, TypeError):
            pass
        self._clock_follows_interval()
        if self._poll_timer is not None:
            self._arm_poll()
        self.notify(f"polling every {self.interval_s:g} s", timeout=2)
        self._changed()

    def action_speed(self, step: int) -> None:
        if not self.replay or not hasattr(self.source, "speed"):
            self.notify("speed applies to a replay", severity="warning", timeout=2)
            return
        current = float(getattr(self.source, "speed", 1.0) or 1.0)
        try:
            self.source.speed = next_in(SPEEDS, current, step)
        except (AttributeError, TypeError, ValueError) as exc:
            self.notify(f"replay speed: {exc}", severity="error")
            return
        if self._poll_timer is not None:
            self._arm_poll()
        self._changed()

    @work(group="control", exit_on_error=False)
    async def action_seek(self, direction: int) -> None:
        """Ten seconds back or forward from the reading shown: playing, paused or ended alike.

        Paused or ended, the reading at the new position is read and shown at once (the display
        stays paused), so ← ← ← walks back through a post-mortem one screen at a time; an ended
        replay plays again from there unless paused."""
        if not self.replay:
            return
        await self._until_landed()  # an ingest under way: seek from the reading it shows
        if self.latest is None:
            return
        position = self.latest.time + direction * SEEK_STEP_S
        still = self.paused
        try:
            # Shown at once while paused: start a window early, so that the screen at the new
            # position has the window of readings a verdict needs (a seek back restarts it).
            await maybe_await(self.source.seek(position - (self.monitor.window.seconds if still else 0.0)))
        except Exception as exc:  # noqa: BLE001
            self.notify(f"seek: {exc}", severity="error")
            return
        if self.ended:
            self.ended = False
            self._view_dirty = True
        if still:
            await self._read_one("seek", until=position)
        elif not self._poll_in_flight:
            self._start_poll()

    @work(group="control", exit_on_error=False)
    async def action_step(self) -> None:
        """While a replay is paused: one reading forward."""
        if not self.replay or not self.paused:
            return
        await self._until_landed()
        if self.paused and not self._poll_in_flight:
            await self._read_one("step")

    async def _step_source(self) -> Snapshot | None:
        """The replay's next reading, one step on: step() may hand back the Snapshot, or ready the
        next read()."""
        result = await maybe_await(self.source.step())
        return result if isinstance(result, Snapshot) else await self.source.read()

    async def _read_one(self, what: str, until: float | None = None) -> None:
        """Read and show one reading of a paused replay. With `until`, readings before that data
        time go into the Monitor (and their verdict changes into Events) and the first one at or
        after it is shown."""
        if self._poll_in_flight:
            return
        self._poll_in_flight = True
        try:
            while True:
                snapshot = await self._step_source()
                if snapshot is None or until is None or snapshot.time >= until:
                    break
                _, changes = await asyncio.to_thread(self._ingest, snapshot)
                for change in changes:
                    self.post_message(VerdictChanged(change))
        except Exception as exc:  # noqa: BLE001
            self.post_message(PollFailed(f"{what}: {type(exc).__name__}: {exc}"))
            return
        if snapshot is None:
            self.post_message(SourceEnded())
            return
        self._stepping = True  # this one reading reaches the panels although the display is paused
        await self._ingest_and_post(snapshot)

    # -- verdict changes: the index and the jumps ----------------------------------------------

    def _indexable_recording(self) -> Path | None:
        """The file of a replay of one recording (a playlist of several has none)."""
        path = getattr(self.source, "path", None)
        if not self.replay or not isinstance(path, Path) or getattr(self.source, "start", None) is None:
            return None
        return path if path.is_file() else None

    def _start_verdict_index(self) -> None:
        path = self._indexable_recording()
        if path is None:
            return
        try:
            template = monitor_template(self.monitor)
        except Exception as exc:  # noqa: BLE001 - the jumps are lost, not the replay
            self.verdict_index_error = f"the Monitor cannot be copied ({type(exc).__name__}: {exc})"
            return
        self._build_verdict_index(path, template, self.source.start, self.source.end)

    @work(thread=True, group="verdict-index", exit_on_error=False, description="index verdict changes")
    def _build_verdict_index(self, path: Path, template: Monitor, start: float, end: float | None) -> None:
        worker = get_current_worker()

        def progress(done: float) -> None:
            self.verdict_index_done = done

        try:
            index = build_verdict_index(path, template, progress=progress, cancelled=lambda: worker.is_cancelled,
                                        start=start, end=end)
        except Exception as exc:  # noqa: BLE001
            self.post_message(VerdictIndexFailed(f"{type(exc).__name__}: {exc}"))
            return
        if index is not None:
            self.post_message(VerdictIndexBuilt(index))

    def on_verdict_index_built(self, message: VerdictIndexBuilt) -> None:
        self.verdict_index, self.verdict_index_done = message.index, 1.0
        log.info("%d verdict changes indexed in %.1f s", message.index.count(), message.index.build_s)

    def on_verdict_index_failed(self, message: VerdictIndexFailed) -> None:
        self.verdict_index_error = message.error
        log.warning("verdict changes not indexed: %s", message.error)

    @work(group="control", exit_on_error=False)
    async def action_verdict_jump(self, direction: int) -> None:
        """To the next (1) or previous (-1) reading at which the shown target's verdict changed.

        The screen shows that reading with the Monitor as the straight-through replay had it just
        after it (the index's checkpoint): the banner shows the new verdict, and the replay goes on
        from there, paused or playing as it was."""
        if not self.replay:
            return
        index = self.verdict_index
        if index is None:
            if self.verdict_index_error is not None:
                why = f"verdict changes could not be indexed: {self.verdict_index_error}"
            elif self._indexable_recording() is None:
                why = "jumping between verdict changes needs the replay of one recording file"
            else:
                why = f"no index yet: indexing verdict changes… {100 * self.verdict_index_done:.0f} %"
            self.notify(why, title="verdict changes", severity="warning", timeout=4)
            return
        await self._until_landed()  # a reading being taken in: jump from the one it shows
        url = self.target_urls[self.target_index] if self.target_urls else None
        here = self.latest.time if self.latest is not None else getattr(self.source, "start", None)
        if here is None:
            return
        mark = index.next_after(here, url) if direction > 0 else index.previous_before(here, url)
        if mark is None:
            total = index.count(url)
            where = "after" if direction > 0 else "before"
            whose = f" of {url}" if len(self.target_urls) > 1 else ""
            self.notify(f"no verdict change{whose} {where} {clock(here)} ({total} in the recording)"
                        if total else f"the verdict{whose} never changes in this recording",
                        title="verdict changes", timeout=4)
            return
        if self._poll_in_flight:  # a read waiting for its time: give it up (it hands nothing over)
            self.workers.cancel_group(self, "poll")
            self._poll_in_flight = self._reading = False
        if self._poll_timer is not None:
            self._poll_timer.stop()
            self._poll_timer = None
        self._poll_in_flight = True
        try:
            await maybe_await(self.source.seek(mark.time))
            snapshot = await self._step_source()
            monitor, changes = await asyncio.to_thread(index.restore, mark)
        except Exception as exc:  # noqa: BLE001
            self.post_message(PollFailed(f"jump: {type(exc).__name__}: {exc}"))
            return
        if snapshot is None or snapshot.time != mark.time:
            self.post_message(PollFailed(f"jump: the recording has no reading at {clock(mark.time)} any more"))
            return
        self.monitor = monitor
        if self.ended:
            self.ended = False
        self._stepping = True  # shown although the display is paused
        for change in changes:
            self.post_message(VerdictChanged(change))
        self.post_message(SnapshotIngested(snapshot, monitor.states, changes))

    def action_next_target(self) -> None:
        if len(self.target_urls) > 1:
            self.target_index = (self.target_index + 1) % len(self.target_urls)
            self.engine = None
            self._changed()

    def select_target(self, url: str) -> None:
        if url in self.target_urls:
            self.target_index = self.target_urls.index(url)
            self.engine = None
            self._changed()

    def action_next_engine(self) -> None:
        keys = snapshot_engine_keys(self.latest, self.target_urls[self.target_index] if self.target_urls else None)
        if len(keys) < 2:
            return
        choices: list[str | None] = [None, *keys]
        self.engine = choices[(choices.index(self.engine) + 1) % len(choices)] if self.engine in choices else None
        self._changed()

    def select_engine(self, engine: str | None) -> None:
        self.engine = engine
        self._changed()

    def action_toggle_recording(self) -> None:
        """Start or stop recording. The thread does the file work and says how it went."""
        if self.recorder is None:
            self.notify("no recorder in this session", severity="warning", timeout=3)
            return
        if self._recording_thread is None:
            self._recording_thread = RecordingThread(self.recorder, self._report_recording)
        if self._recording_thread.wanted:
            self._recording_thread.stop()
            return
        path = self.record_path or default_recording_path(self.recorder, self.latest.time if self.latest else None)
        self._recording_thread.start(path)

    def _report_recording(self, event: RecordingEvent) -> None:
        self.post_message(RecordingReported(event))  # called on the recording thread; thread-safe

    def on_recording_reported(self, message: RecordingReported) -> None:
        event = message.event
        if isinstance(event, RecordingStarted):
            self.recording, self.recording_stopped = event.path, None
            self.notify(f"recording to {event.path}", timeout=3)
        elif isinstance(event, RecordingStopped):
            self.recording = None
            if event.why is None:
                self.notify("recording stopped", timeout=3)
            else:
                self.recording_stopped = event.why
                log.error("recording to %s stopped: %s", event.path, event.detail or event.why)
                self.notify(f"{event.detail or event.why}. The panels keep updating.",
                            title="recording stopped", severity="error", timeout=30)
        elif isinstance(event, RecordingNotStarted):
            log.error("cannot record to %s: %s", event.path, event.why)
            self.notify(f"cannot record to {event.path}: {event.why}", title="recording", severity="error")
        elif isinstance(event, ReadingsDropped):
            log.warning("recording to %s fell behind: %d readings left out", event.path, event.count)
            self.notify(f"the disk fell behind: {event.count} readings left out of {event.path}",
                        title="recording", severity="warning", timeout=10)
        self._changed()

    async def action_quit(self) -> None:
        self.workers.cancel_group(self, "poll")
        await self._close()
        self.exit(0)

    async def on_unmount(self) -> None:
        await self._finish_recording()  # however the app ends, the file is finished

    async def _finish_recording(self) -> None:
        thread, self._recording_thread = self._recording_thread, None
        if thread is not None:
            # what is queued is written and the file closed; a disk that hangs is not waited for
            if not await asyncio.to_thread(thread.close, CLOSE_RECORDING_TIMEOUT_S):
                log.error("the recording thread did not finish within %.0f s", CLOSE_RECORDING_TIMEOUT_S)
            self.recording = None

    async def _close(self) -> None:
        if self._poll_timer is not None:
            self._poll_timer.stop()
        self.workers.cancel_group(self, "verdict-index")
        await self._finish_recording()
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
        if self._indexable_recording() is not None:
            yield SystemCommand("Next verdict change", "Jump to the next reading where the verdict changed (n)",
                                lambda: self.action_verdict_jump(1))
            yield SystemCommand("Previous verdict change", "Jump to the previous one (N)",
                                lambda: self.action_verdict_jump(-1))
        if not self.replay:
            for seconds in INTERVALS:
                yield SystemCommand(f"Poll every {seconds:g} s", "Change the refresh interval",
                                    lambda s=seconds: self.set_interval_s(s))
        for url in self.target_urls:
            yield SystemCommand(f"Target {url}", "Show this vLLM server", lambda u=url: self.select_target(u))
        keys = snapshot_engine_keys(self.latest, self.target_urls[self.target_index] if self.target_urls else None)
        if len(keys) > 1:
            yield SystemCommand("Engine: all", "Sum every engine of this target", lambda: self.select_engine(None))
            for key in keys:
                yield SystemCommand(f"Engine {key}", "Show one data-parallel engine",
                                    lambda k=key: self.select_engine(k))
        if self.recorder is not None:
            recording = self._recording_thread is not None and self._recording_thread.wanted
            yield SystemCommand("Stop recording" if recording else "Start recording",
                                "Record the Snapshots to a file", self.action_toggle_recording)

    def set_interval_s(self, seconds: float) -> None:
        self.interval_s = seconds
        try:
            self.source.interval_s = seconds
        except (AttributeError, TypeError):
            pass
        self._clock_follows_interval()
        if self._poll_timer is not None:
            self._arm_poll()
        self._changed()


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
    """Run the dashboard until the operator quits; returns the exit status (0)."""
    app = SpecwatchApp(source, monitor, title=title, recorder=recorder, record_path=record_path, sweep=sweep,
                       history_minutes=history_minutes, freeze_heap=True)
    result = app.run()
    return int(result or 0) if app.return_code in (None, 0) else int(app.return_code)
