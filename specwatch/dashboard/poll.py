"""The dashboard's poll: one read of the source at a time, re-armed only after it landed.

    SnapshotSource ──read()──▶ poll worker ──Monitor.ingest (thread)──▶ SnapshotIngested ──▶ the app
                                          └──offer──▶ RecordingThread

`PollLoop` reads the source in an async worker on the app's loop, offers each Snapshot to the
recording thread, runs the Monitor's CPU work in a thread when it evaluates, and posts what came of
it to the app as typed messages (SnapshotIngested, VerdictChanged, PollFailed, SourceEnded). The app
handles them and calls `arm()` to schedule the next read: a slow node never piles up requests.

It is the base of both controllers (specwatch.dashboard.live, specwatch.dashboard.replay_control),
and its public methods are the small protocol the app drives them by: what a live session does with
a replay key is nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Iterable

from textual.app import SystemCommand
from textual.message import Message
from textual.timer import Timer
from textual.worker import Worker

from specwatch.advice.monitor import TargetState, VerdictChange
from specwatch.telemetry.snapshot import Snapshot

if TYPE_CHECKING:
    from specwatch.dashboard.app import SpecwatchApp


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


def next_in(values: tuple[float, ...], current: float, step: int) -> float:
    """The next value up (step 1) or down (step -1) from current in a sorted tuple."""
    if step > 0:
        return next((v for v in values if v > current + 1e-9), values[-1])
    return next((v for v in reversed(values) if v < current - 1e-9), values[0])


# -- the poll --------------------------------------------------------------------------------------

class PollLoop:
    """Reads the app's source one Snapshot at a time and hands the app what came of it.

    The session's settings and what is shown stay on the app (source, monitor, paused, ended,
    interval_s); this holds the poll's own timer and flags."""

    def __init__(self, app: SpecwatchApp) -> None:
        self.app = app
        self.timer: Timer | None = None
        self.in_flight = False
        self.next_poll_at: float | None = None  # on the app's wall_clock; None while none is scheduled
        # a poll is started and has not yet had its reading from source.read() (not yet ingesting):
        # set when the poll is started, so that a pause landing before its worker runs gives it up
        self.reading = False
        self.stepping = False  # the reading on its way reaches the panels although the display is paused
        self._landed: asyncio.Event | None = None  # set whenever a poll, step or seek has landed
        self._started = 0.0  # event-loop time the last poll began

    # -- the protocol the app drives: live and replay alike ------------------------------------

    def mount(self) -> None:
        """The app is on screen: the first poll."""
        self.start()

    def paused_changed(self, paused: bool) -> None:
        """The display was paused or resumed (collection goes on)."""

    def interval(self, step: int) -> None:
        """+ and -: poll faster (step -1) or slower (step 1)."""

    def speed(self, step: int) -> None:
        """[ and ]: a replay's speed."""
        self.app.notify("speed applies to a replay", severity="warning", timeout=2)

    def seek(self, direction: int) -> Worker[None] | None:
        """← and →: a replay's position."""
        return None

    def step(self) -> Worker[None] | None:
        """.: a paused replay's next reading."""
        return None

    def verdict_jump(self, direction: int) -> Worker[None] | None:
        """n and N: a replay's verdict changes."""
        return None

    def commands(self) -> Iterable[SystemCommand]:
        """The command palette's entries of this kind of session."""
        return ()

    def clock_follows_interval(self) -> None:
        """The interval changed: the header's clock may tick on its own, or stop (live only)."""

    def set_interval_s(self, seconds: float) -> None:
        app = self.app
        app.interval_s = seconds
        try:
            app.source.interval_s = seconds
        except (AttributeError, TypeError):
            pass
        self.clock_follows_interval()
        if self.timer is not None:
            self.arm()

    def close(self) -> None:
        """The app is quitting: no poll after this."""
        if self.timer is not None:
            self.timer.stop()

    # -- polling -------------------------------------------------------------------------------

    def held(self) -> bool:
        """No poll is armed while this holds (a paused replay)."""
        return False

    def own_interval(self) -> float:
        return self.app.interval_s

    def poll_delay(self) -> float:
        """Seconds until the next read: a replay source's own pace (it knows its speed), else ours."""
        if getattr(self.app.source, "paces_itself", False):
            return 0.0  # its read() waits until the next Snapshot is due
        return self.own_interval()

    def arm(self) -> None:
        """Schedule the next poll; called only once the previous one has been handled."""
        if self.timer is not None:
            self.timer.stop()
        self.timer = None
        self.next_poll_at = None
        if self.app.ended or self.held() or self.in_flight:
            return
        interval = self.poll_delay()
        # Keep the cadence (a 1 s interval reads once a second, not once per 1 s + scrape time), but
        # after a slow read still leave the node a tenth of the interval before asking again.
        elapsed = asyncio.get_running_loop().time() - self._started
        delay = max(interval - elapsed, 0.1 * interval)
        if delay <= 0:
            self.app.call_later(self.start)  # as fast as the source gives (a replay at full speed)
        else:
            self.timer = self.app.set_timer(delay, self.start, name="poll")
            self.next_poll_at = self.app.wall_clock() + delay

    def start(self) -> None:
        self.timer = None
        self.next_poll_at = None
        # held: a replay paused after this start was queued (arm's call_later) and before it ran; its
        # read would wait for a resume, and every step and seek queued behind it with it
        if self.in_flight or self.app.ended or self.held():
            return
        self.in_flight = True
        self.reading = True
        self._started = asyncio.get_running_loop().time()
        self.app.run_worker(self._poll, name="poll", group="poll", exit_on_error=False,
                            description="read the source and ingest")

    async def _poll(self) -> None:
        try:
            snapshot = await self.app.source.read()
        except Exception as exc:  # noqa: BLE001 - a source must never take the dashboard down
            self.app.post_message(PollFailed(f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self.reading = False
        if snapshot is None:
            self.app.post_message(SourceEnded())
            return
        await self.ingest_and_post(snapshot)

    async def ingest_and_post(self, snapshot: Snapshot) -> None:
        app = self.app
        recording = app.recording_control.thread
        if recording is not None:
            recording.offer(snapshot)  # never blocks: the disk is the thread's business
        try:
            # Between evaluations a reading only joins the window: less work than a thread's round trip
            if app.monitor.evaluates(snapshot):
                states, changes = await asyncio.to_thread(self.ingest, snapshot)
            else:
                states, changes = self.ingest(snapshot)
        except Exception as exc:  # noqa: BLE001
            app.post_message(PollFailed(f"ingest failed: {type(exc).__name__}: {exc}"))
            return
        # the changes first: the view the Snapshot's message builds then holds them (a paused
        # screen shows a step or a seek with its events, not the events without their reading)
        for change in changes:
            app.post_message(VerdictChanged(change))
        app.post_message(SnapshotIngested(snapshot, states, changes))

    def ingest(self, snapshot: Snapshot) -> tuple[dict[str, TargetState], list[VerdictChange]]:
        """The Monitor's work, in a thread when it evaluates. Polls never overlap, so the Monitor is
        only ever used from one thread at a time."""
        changes = self.app.monitor.ingest(snapshot)
        return self.app.monitor.states, changes

    def landed(self) -> None:
        """Nothing is in flight any more: a key press waiting for the last reading goes on."""
        self.in_flight = self.reading = False
        if self._landed is not None:
            self._landed.set()

    async def until_landed(self) -> None:
        """Wait while a reading is being taken in (ingested): a seek or step then starts from the
        reading it shows instead of being dropped. A poll still waiting for its reading is no wait:
        it hands nothing over, and a seek wakes it."""
        while self.in_flight and not self.reading:
            if self._landed is None:
                self._landed = asyncio.Event()
            self._landed.clear()
            await self._landed.wait()

    def take_stepping(self) -> bool:
        """Whether the reading just landed is to be shown although the display is paused (once)."""
        stepping, self.stepping = self.stepping, False
        return stepping
