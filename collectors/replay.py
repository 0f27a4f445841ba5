"""A recording played back as a SnapshotSource: pause, resume, seek by time, speed, step, loop.

Snapshots are released when they are due: the gap between two recorded times divided by the
speed. `read()` waits on an event with a timeout, so pausing, seeking or changing speed while a read
is waiting takes effect at once, and the event loop is never blocked: the only blocking work, reading
the file, happens in `ReplaySource.open()` in a worker thread (or in the constructor, for callers
that already run off the loop).

A recording given by path is streamed: `RecordingIndex` (built by decompressing the file once on
open, without decoding it) says where each gzip member begins and its first data time, so memory
stays bounded whatever the recording's length, and a seek decodes at most one member (10 minutes
of data by default). A Recording already in memory is played from its list.

Time goes backwards when a replay loops or seeks back; the Window and the Monitor start their
windows over when that happens, so nothing mixes two passes.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import os
import time
from pathlib import Path
from typing import Callable

from specwatch.recording import (
    Recording,
    RecordingError,
    RecordingHeader,
    RecordingIndex,
    format_time,
    index_recording,
    open_snapshots,
)
from specwatch.telemetry.snapshot import Snapshot

MIN_SPEED = 0.5
MAX_SPEED = 100.0


class _ListCursor:
    """The Snapshots of a Recording in memory, one after another."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.header = recording.header
        self._snapshots = recording.snapshots
        self._times = [s.time for s in self._snapshots]
        self._index = 0
        self.start = self._times[0] if self._times else None
        self.end = self._times[-1] if self._times else None
        self.count = len(self._times)

    @property
    def warnings(self) -> list[str]:
        return list(self.recording.warnings)

    def peek(self) -> Snapshot | None:
        return self._snapshots[self._index] if self._index < len(self._snapshots) else None

    def advance(self) -> None:
        self._index += 1

    def seek(self, data_time: float) -> None:
        self._index = min(bisect.bisect_left(self._times, data_time), max(0, len(self._times) - 1))


class _FileCursor:
    """A recording streamed from its file: one member's reader open at a time, one Snapshot ahead."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._index_warnings: list[str] = []
        self._stream_warnings: list[str] = []
        self.index: RecordingIndex = index_recording(path, self._index_warnings)
        self.header, self._snapshots = open_snapshots(path, self._stream_warnings)
        self._next: Snapshot | None = None
        self._fill()
        self.start = self.index.start if self.index.start is not None else (
            self._next.time if self._next is not None else None)
        self.end = self.index.end if self.index.end is not None else self.start
        self.count = self.index.count

    @property
    def warnings(self) -> list[str]:
        # the index and the stream meet the same damage, in the same words: say it once
        return list(dict.fromkeys(self._index_warnings + self._stream_warnings))

    def _fill(self) -> None:
        try:
            self._next = next(self._snapshots, None)
        except (RecordingError, OSError) as exc:
            self._stream_warnings.append(f"{self._path} could not be read on: {exc}")
            self._next = None

    def peek(self) -> Snapshot | None:
        return self._next

    def advance(self) -> None:
        self._fill()

    def seek(self, data_time: float) -> None:
        if self.start is None:
            return
        data_time = min(max(data_time, self.start), self.end if self.end is not None else data_time)
        # a fresh list: damage met before is met again on the way, and said once
        warnings: list[str] = []
        try:
            _, self._snapshots = open_snapshots(self._path, warnings, start=self.index.member_at(data_time))
        except RecordingError as exc:
            self._stream_warnings.append(str(exc))
            self._next = None
            return
        self._stream_warnings = warnings
        self._fill()
        last = self._next
        while self._next is not None and self._next.time < data_time:
            last = self._next
            self._fill()
        if self._next is None and last is not None:
            # past the last Snapshot that could be read: play that one, as a seek to the end does
            self._next = last
            self._snapshots = iter(())


class ReplaySource:
    """Plays one recording. Control methods are meant to be called from the event loop's thread."""

    kind = "REPLAY"

    def __init__(
        self,
        recording: Recording | str | os.PathLike[str],
        *,
        speed: float = 1.0,
        loop: bool = False,
        paused: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(recording, Recording):
            self._cursor: _ListCursor | _FileCursor = _ListCursor(recording)
            self._path = recording.path
        else:
            self._path = Path(recording)
            self._cursor = _FileCursor(self._path)
        self._speed = _check_speed(speed)
        self.loop = loop
        self._paused = paused
        self._clock = clock
        self._steps = 0  # single steps requested while paused
        self._anchor: tuple[float, float] | None = None  # (wall clock, data time) of the pacing origin
        self._changed: asyncio.Event | None = None
        self._closed = False
        self.loops = 0  # how many times the recording wrapped around
        self.last: Snapshot | None = None

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **kwargs: object) -> ReplaySource:
        """Index the file in a worker thread, then build the source: for use from the event loop."""
        return await asyncio.to_thread(lambda: cls(path, **kwargs))  # type: ignore[arg-type]

    # -- what the front end shows -----------------------------------------------------------------

    @property
    def header(self) -> RecordingHeader:
        return self._cursor.header

    @property
    def path(self) -> Path:
        return self._path

    @property
    def warnings(self) -> list[str]:
        return self._cursor.warnings

    @property
    def start(self) -> float | None:
        return self._cursor.start

    @property
    def end(self) -> float | None:
        return self._cursor.end

    def first_snapshot(self) -> Snapshot | None:
        """The recording's first Snapshot (read again from the file when streamed)."""
        if isinstance(self._cursor, _ListCursor):
            return self._cursor.recording.snapshots[0] if self._cursor.count else None
        _, snapshots = open_snapshots(self._path, [])
        return next(snapshots, None)

    @property
    def position(self) -> float | None:
        """The data time of the last Snapshot released (the replay's "now")."""
        return self.last.time if self.last is not None else self.start

    @property
    def finished(self) -> bool:
        return not self.loop and self._cursor.peek() is None

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def speed(self) -> float:
        return self._speed

    @speed.setter
    def speed(self, value: float) -> None:
        self.set_speed(value)

    # read() waits until each Snapshot is due, so a front end should read again at once
    paces_itself = True

    @property
    def synthetic(self) -> bool:
        return self.header.synthetic

    @property
    def interval_s(self) -> float:
        if self.header.interval_s:
            return self.header.interval_s
        start, end, count = self._cursor.start, self._cursor.end, self._cursor.count
        if start is None or end is None or count < 2 or end <= start:
            return 1.0
        return (end - start) / (count - 1)

    def describe(self) -> str:
        label = "SYNTHETIC data" if self.header.synthetic else "real data"
        gpus = f"{len(self.header.gpus)} GPU" + ("s" if len(self.header.gpus) != 1 else "") \
            if self.header.gpus else "no GPU"
        span = f"{format_time(self.start)} – {format_time(self.end)}" if self.start is not None else "no Snapshots"
        host = f" from {self.header.host}" if self.header.host else ""
        return f"replay of {self.path.name}{host}, recorded {span} · {label} · {gpus} · {self._speed:g}×"

    # -- control -----------------------------------------------------------------------------------

    def pause(self) -> None:
        self._paused = True
        self._wake()

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._anchor = None  # pace from now, not from before the pause
            self._wake()

    def toggle_pause(self) -> None:
        self.resume() if self._paused else self.pause()

    def set_speed(self, speed: float) -> None:
        self._speed = _check_speed(speed)
        self._anchor = None
        self._wake()

    def seek(self, data_time: float) -> None:
        """Continue from the first Snapshot at or after `data_time` (clamped to the recording)."""
        self._cursor.seek(data_time)
        self._anchor = None
        self._wake()

    def seek_relative(self, seconds: float) -> None:
        base = self.position
        if base is not None:
            self.seek(base + seconds)

    def step(self, count: int = 1) -> None:
        """Release the next `count` Snapshots at once; meant for a paused replay."""
        self._steps += max(0, count)
        self._wake()

    async def read(self) -> Snapshot | None:
        while True:
            if self._closed or self._cursor.start is None:
                return None
            snapshot = self._cursor.peek()
            if snapshot is None:
                if not self.loop:
                    return None
                self._cursor.seek(self._cursor.start)
                self._anchor = None
                self.loops += 1
                snapshot = self._cursor.peek()
                if snapshot is None:
                    return None
            if self._steps > 0:
                self._steps -= 1
                self._anchor = None
                return self._release(snapshot)
            if self._paused:
                await self._wait(None)
                continue
            now = self._clock()
            if self._anchor is None:
                self._anchor = (now, snapshot.time)
            wall0, data0 = self._anchor
            delay = wall0 + (snapshot.time - data0) / self._speed - now
            if delay > 0:
                await self._wait(delay)
                continue
            return self._release(snapshot)

    async def aclose(self) -> None:
        self._closed = True
        self._wake()

    # -- internals ------------------------------------------------------------------------------

    def _release(self, snapshot: Snapshot) -> Snapshot:
        self._cursor.advance()
        self.last = snapshot
        return snapshot

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def _wait(self, timeout: float | None) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass


def _check_speed(speed: float) -> float:
    speed = float(speed)
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise ValueError(f"replay speed must be between {MIN_SPEED:g}× and {MAX_SPEED:g}×, not {speed:g}×")
    return speed


class PlaylistSource:
    """Several recordings played one after another, round and round: the demo.

    Each recording plays on its own clock, at the times it was recorded at: a real run's wall clock
    is what the operator would have seen, not a time made up to follow the synthetic story. Moving
    from one recording to the next may step the clock back; the Window starts over then, as after a
    seek, and the Monitor starts over the advisor of a recording's target that returns on an earlier
    clock. The header says which recording is playing, and whether it is real or synthetic, at every
    moment.
    """

    kind = "REPLAY"
    paces_itself = True

    def __init__(self, sources: list[ReplaySource], names: list[str] | None = None) -> None:
        if not sources:
            raise ValueError("a playlist needs at least one recording")
        self.sources = sources
        self.names = names or [s.path.name for s in sources]
        if len(set(self.names)) != len(self.names):
            raise ValueError("playlist names must differ: they keep the recordings' targets apart")
        self.index = 0
        self.rounds = 0

    @property
    def current(self) -> ReplaySource:
        return self.sources[self.index]

    @staticmethod
    def target_url(url: str, name: str) -> str:
        """The URL a recording's target is shown under in the playlist."""
        return f"{url}#{name}"

    @property
    def synthetic(self) -> bool:
        return self.current.header.synthetic

    @property
    def interval_s(self) -> float:
        return self.current.interval_s

    @property
    def speed(self) -> float:
        return self.current.speed

    @speed.setter
    def speed(self, value: float) -> None:
        for source in self.sources:
            source.set_speed(value)

    @property
    def paused(self) -> bool:
        return self.current.paused

    def describe(self) -> str:
        nxt = self.names[(self.index + 1) % len(self.sources)]
        playing = f"demo {self.index + 1}/{len(self.sources)}: {self.current.describe()}"
        return playing if len(self.sources) == 1 else f"{playing} · next: {nxt}"

    def pause(self) -> None:
        self.current.pause()

    def resume(self) -> None:
        self.current.resume()

    def toggle_pause(self) -> None:
        self.current.toggle_pause()

    def seek(self, data_time: float) -> None:
        self.current.seek(data_time)

    def seek_relative(self, seconds: float) -> None:
        self.current.seek_relative(seconds)

    def step(self, count: int = 1) -> None:
        self.current.step(count)

    async def read(self) -> Snapshot | None:
        for _ in range(len(self.sources) + 1):
            snapshot = await self.current.read()
            if snapshot is not None:
                # Each recording's targets are tagged with its name: two recordings of one URL are
                # still two nodes to the Monitor, each judged under its own recording's settings.
                name = self.names[self.index]
                targets = tuple(dataclasses.replace(t, url=self.target_url(t.url, name)) for t in snapshot.targets)
                return dataclasses.replace(snapshot, targets=targets)
            # this recording is done: the next one starts from its beginning, on its own clock
            paused = self.current.paused
            self.index = (self.index + 1) % len(self.sources)
            self.rounds += self.index == 0
            nxt = self.current
            nxt.seek(nxt.start if nxt.start is not None else 0.0)
            if paused:
                nxt.pause()
        return None

    async def aclose(self) -> None:
        for source in self.sources:
            await source.aclose()
