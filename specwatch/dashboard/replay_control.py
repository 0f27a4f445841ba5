"""The replay's controller: pause, seek, step, speed and the jumps between verdict changes.

Replay controls are duck-typed: a source with pause(), resume(), seek(t), step() (and optionally a
`speed` property) gets the replay keys, and this controller instead of the live one. The poll is
specwatch.dashboard.poll's; a paused replay arms none, and a seek, step or jump shown while paused
reads one reading and shows it although the display stays paused.

The verdict changes of a replay of one recording are indexed in a thread on mount
(specwatch.dashboard.verdict_index), so that n / N jump between them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from textual.app import SystemCommand
from textual.message import Message
from textual.worker import Worker, get_current_worker

from specwatch.advice.monitor import Monitor
from specwatch.dashboard.poll import PollFailed, PollLoop, SnapshotIngested, SourceEnded, VerdictChanged, next_in
from specwatch.dashboard.verdict_index import VerdictIndex, build_verdict_index, monitor_template
from specwatch.telemetry.snapshot import Snapshot
from specwatch.widgets.format import clock

if TYPE_CHECKING:
    from specwatch.dashboard.app import SpecwatchApp

# Replay speeds offered by [ and ].
SPEEDS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
SEEK_STEP_S = 10.0
REPLAY_METHODS = ("pause", "resume", "seek", "step")

log = logging.getLogger(__name__)


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


def has_replay_controls(source: Any) -> bool:
    return all(callable(getattr(source, name, None)) for name in REPLAY_METHODS)


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ReplayController(PollLoop):
    """Plays a replay source at its own pace, and moves it about at the operator's keys."""

    def __init__(self, app: SpecwatchApp) -> None:
        super().__init__(app)
        # where the shown verdict changes in the recording (n / N), built in a thread on mount
        self.verdict_index: VerdictIndex | None = None
        self.verdict_index_error: str | None = None
        self.verdict_index_done = 0.0  # fraction of the recording indexed so far

    def mount(self) -> None:
        self._start_verdict_index()  # before the first reading: the index starts from the Monitor's start
        self.start()

    def close(self) -> None:
        super().close()
        self.app.workers.cancel_group(self.app, "verdict-index")

    def held(self) -> bool:
        return self.app.paused

    def own_interval(self) -> float:
        try:
            return max(0.0, float(self.app.source.interval_s))
        except (AttributeError, TypeError, ValueError):
            return self.app.interval_s

    def paused_changed(self, paused: bool) -> None:
        app = self.app
        try:
            (app.source.pause if paused else app.source.resume)()
        except Exception as exc:  # noqa: BLE001
            app.notify(f"replay: {exc}", severity="error")
        if not paused:
            self.start()
        else:
            if self.timer is not None:
                self.timer.stop()
                self.timer = None
            if self.in_flight and self.reading:
                # A paused replay may hold its read until resumed: give it up so that step
                # works. A read is cancellation-safe (the source hands nothing over until it
                # returns); an ingest already under way is left to finish.
                app.workers.cancel_group(app, "poll")
                self.landed()

    def interval(self, step: int) -> None:
        self.speed(-step)  # + and - are faster and slower for a replay too

    def speed(self, step: int) -> None:
        app = self.app
        if not hasattr(app.source, "speed"):
            super().speed(step)
            return
        current = float(getattr(app.source, "speed", 1.0) or 1.0)
        try:
            app.source.speed = next_in(SPEEDS, current, step)
        except (AttributeError, TypeError, ValueError) as exc:
            app.notify(f"replay speed: {exc}", severity="error")
            return
        if self.timer is not None:
            self.arm()
        app.changed()

    # -- seek and step -------------------------------------------------------------------------

    def seek(self, direction: int) -> Worker[None]:
        return self.app.run_worker(partial(self._seek, direction), name="seek", group="control",
                                   exit_on_error=False, description=f"seek({direction})")

    async def _seek(self, direction: int) -> None:
        """Ten seconds back or forward from the reading shown: playing, paused or ended alike.

        Paused or ended, the reading at the new position is read and shown at once (the display
        stays paused), so ← ← ← walks back through a post-mortem one screen at a time; an ended
        replay plays again from there unless paused."""
        app = self.app
        await self.until_landed()  # an ingest under way: seek from the reading it shows
        latest = app.view_state.latest
        if latest is None:
            return
        position = latest.time + direction * SEEK_STEP_S
        still = app.paused
        try:
            # Shown at once while paused: start a window early, so that the screen at the new
            # position has the window of readings a verdict needs (a seek back restarts it).
            await maybe_await(app.source.seek(position - (app.monitor.window.seconds if still else 0.0)))
        except Exception as exc:  # noqa: BLE001
            app.notify(f"seek: {exc}", severity="error")
            return
        if app.ended:
            app.ended = False
            app.view_state.dirty = True
        if still:
            await self._read_one("seek", until=position)
        elif not self.in_flight:
            self.start()

    def step(self) -> Worker[None]:
        return self.app.run_worker(self._step, name="step", group="control", exit_on_error=False,
                                   description="step()")

    async def _step(self) -> None:
        """While a replay is paused: one reading forward."""
        if not self.app.paused:
            return
        await self.until_landed()
        if self.app.paused and not self.in_flight:
            await self._read_one("step")

    async def _step_source(self) -> Snapshot | None:
        """The replay's next reading, one step on: step() may hand back the Snapshot, or ready the
        next read()."""
        source = self.app.source
        result = await maybe_await(source.step())
        return result if isinstance(result, Snapshot) else await source.read()

    async def _read_one(self, what: str, until: float | None = None) -> None:
        """Read and show one reading of a paused replay. With `until`, readings before that data
        time go into the Monitor (and their verdict changes into Events) and the first one at or
        after it is shown."""
        if self.in_flight:
            return
        app = self.app
        self.in_flight = True
        try:
            while True:
                snapshot = await self._step_source()
                if snapshot is None or until is None or snapshot.time >= until:
                    break
                _, changes = await asyncio.to_thread(self.ingest, snapshot)
                for change in changes:
                    app.post_message(VerdictChanged(change))
        except Exception as exc:  # noqa: BLE001
            app.post_message(PollFailed(f"{what}: {type(exc).__name__}: {exc}"))
            return
        if snapshot is None:
            app.post_message(SourceEnded())
            return
        self.stepping = True  # this one reading reaches the panels although the display is paused
        await self.ingest_and_post(snapshot)

    # -- verdict changes: the index and the jumps ----------------------------------------------

    def indexable_recording(self) -> Path | None:
        """The file of a replay of one recording (a playlist of several has none)."""
        path = getattr(self.app.source, "path", None)
        if not isinstance(path, Path) or getattr(self.app.source, "start", None) is None:
            return None
        return path if path.is_file() else None

    def _start_verdict_index(self) -> None:
        path = self.indexable_recording()
        if path is None:
            return
        try:
            template = monitor_template(self.app.monitor)
        except Exception as exc:  # noqa: BLE001 - the jumps are lost, not the replay
            self.verdict_index_error = f"the Monitor cannot be copied ({type(exc).__name__}: {exc})"
            return
        source = self.app.source
        self.app.run_worker(partial(self._build_verdict_index, path, template, source.start, source.end),
                            name="verdict-index", group="verdict-index", exit_on_error=False, thread=True,
                            description="index verdict changes")

    def _build_verdict_index(self, path: Path, template: Monitor, start: float, end: float | None) -> None:
        worker = get_current_worker()

        def progress(done: float) -> None:
            self.verdict_index_done = done

        try:
            index = build_verdict_index(path, template, progress=progress, cancelled=lambda: worker.is_cancelled,
                                        start=start, end=end)
        except Exception as exc:  # noqa: BLE001
            self.app.post_message(VerdictIndexFailed(f"{type(exc).__name__}: {exc}"))
            return
        if index is not None:
            self.app.post_message(VerdictIndexBuilt(index))

    def index_built(self, index: VerdictIndex) -> None:
        self.verdict_index, self.verdict_index_done = index, 1.0
        # the log shows the recording's changes from now on, whatever the seeking
        self.app.view_state.use_recorded_changes(index.changes())
        log.info("%d verdict changes indexed in %.1f s", index.count(), index.build_s)

    def index_failed(self, error: str) -> None:
        self.verdict_index_error = error
        log.warning("verdict changes not indexed: %s", error)

    def verdict_jump(self, direction: int) -> Worker[None]:
        return self.app.run_worker(partial(self._verdict_jump, direction), name="verdict_jump", group="control",
                                   exit_on_error=False, description=f"verdict_jump({direction})")

    async def _verdict_jump(self, direction: int) -> None:
        """To the next (1) or previous (-1) reading at which the shown target's verdict changed.

        The screen shows that reading with the Monitor as the straight-through replay had it just
        after it (the index's checkpoint): the banner shows the new verdict, and the replay goes on
        from there, paused or playing as it was."""
        app, shown = self.app, self.app.view_state
        index = self.verdict_index
        if index is None:
            if self.verdict_index_error is not None:
                why = f"verdict changes could not be indexed: {self.verdict_index_error}"
            elif self.indexable_recording() is None:
                why = "jumping between verdict changes needs the replay of one recording file"
            else:
                why = f"no index yet: indexing verdict changes… {100 * self.verdict_index_done:.0f} %"
            app.notify(why, title="verdict changes", severity="warning", timeout=4)
            return
        await self.until_landed()  # a reading being taken in: jump from the one it shows
        url = shown.url
        here = shown.latest.time if shown.latest is not None else getattr(app.source, "start", None)
        if here is None:
            return
        mark = index.next_after(here, url) if direction > 0 else index.previous_before(here, url)
        if mark is None:
            total = index.count(url)
            where = "after" if direction > 0 else "before"
            whose = f" of {url}" if len(shown.target_urls) > 1 else ""
            app.notify(f"no verdict change{whose} {where} {clock(here)} ({total} in the recording)"
                       if total else f"the verdict{whose} never changes in this recording",
                       title="verdict changes", timeout=4)
            return
        if self.in_flight:  # a read waiting for its time: give it up (it hands nothing over)
            app.workers.cancel_group(app, "poll")
            self.in_flight = self.reading = False
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
        self.in_flight = True
        try:
            await maybe_await(app.source.seek(mark.time))
            snapshot = await self._step_source()
            monitor, changes = await asyncio.to_thread(index.restore, mark)
        except Exception as exc:  # noqa: BLE001
            app.post_message(PollFailed(f"jump: {type(exc).__name__}: {exc}"))
            return
        if snapshot is None or snapshot.time != mark.time:
            app.post_message(PollFailed(f"jump: the recording has no reading at {clock(mark.time)} any more"))
            return
        app.monitor = monitor
        if app.ended:
            app.ended = False
        self.stepping = True  # shown although the display is paused
        for change in changes:
            app.post_message(VerdictChanged(change))
        app.post_message(SnapshotIngested(snapshot, monitor.states, changes))

    def commands(self) -> Iterable[SystemCommand]:
        if self.indexable_recording() is not None:
            yield SystemCommand("Next verdict change", "Jump to the next reading where the verdict changed (n)",
                                lambda: self.app.action_verdict_jump(1))
            yield SystemCommand("Previous verdict change", "Jump to the previous one (N)",
                                lambda: self.app.action_verdict_jump(-1))
