"""A recording played back as a SnapshotSource: pause, resume, seek by time, speed, step, loop.

Snapshots are released when they are due: the gap between two recorded times divided by the
speed. `read()` waits on an event with a timeout, so pausing, seeking or changing speed while a read
is waiting takes effect at once, and the event loop is never blocked: the only blocking work, reading
the file, happens in `ReplaySource.open()` in a worker thread (or in the constructor, for callers
that already run off the loop).

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

from specwatch.recording import Recording, RecordingHeader, format_time, read_recording
from specwatch.snapshot import Snapshot

MIN_SPEED = 0.5
MAX_SPEED = 100.0


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
        self.recording = recording if isinstance(recording, Recording) else read_recording(recording)
        self._snapshots = self.recording.snapshots
        self._times = [s.time for s in self._snapshots]
        self._speed = _check_speed(speed)
        self.loop = loop
        self._paused = paused
        self._clock = clock
        self._index = 0  # the next Snapshot to release
        self._steps = 0  # single steps requested while paused
        self._anchor: tuple[float, float] | None = None  # (wall clock, data time) of the pacing origin
        self._changed: asyncio.Event | None = None
        self._closed = False
        self.loops = 0  # how many times the recording wrapped around
        self.last: Snapshot | None = None

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **kwargs: object) -> ReplaySource:
        """Read the file in a worker thread, then build the source: for use from the event loop."""
        recording = await asyncio.to_thread(read_recording, path)
        return cls(recording, **kwargs)  # type: ignore[arg-type]

    # -- what the front end shows -----------------------------------------------------------------

    @property
    def header(self) -> RecordingHeader:
        return self.recording.header

    @property
    def path(self) -> Path:
        return self.recording.path

    @property
    def warnings(self) -> list[str]:
        return list(self.recording.warnings)

    @property
    def start(self) -> float | None:
        return self._times[0] if self._times else None

    @property
    def end(self) -> float | None:
        return self._times[-1] if self._times else None

    @property
    def position(self) -> float | None:
        """The data time of the last Snapshot released (the replay's "now")."""
        return self.last.time if self.last is not None else self.start

    @property
    def finished(self) -> bool:
        return not self.loop and self._index >= len(self._snapshots)

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
        gaps = sorted(b - a for a, b in zip(self._times, self._times[1:]) if b > a)
        return gaps[len(gaps) // 2] if gaps else 1.0

    def describe(self) -> str:
        label = "SYNTHETIC data" if self.header.synthetic else "real data"
        gpus = f"{len(self.header.gpus)} GPU" + ("s" if len(self.header.gpus) != 1 else "") \
            if self.header.gpus else "no GPU"
        span = f"{format_time(self.start)} – {format_time(self.end)}" if self._times else "no Snapshots"
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
        self._index = min(bisect.bisect_left(self._times, data_time), max(0, len(self._times) - 1))
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
            if self._closed or not self._snapshots:
                return None
            if self._index >= len(self._snapshots):
                if not self.loop:
                    return None
                self._index = 0
                self._anchor = None
                self.loops += 1
            snapshot = self._snapshots[self._index]
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
        self._index += 1
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

    Each recording's times are shifted to carry on from the previous one's end, so the Window sees
    one continuous timeline; the header says which recording is playing, and whether it is real or
    synthetic, at every moment.
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
        self.offset = 0.0  # added to the playing recording's times
        self._last_time: float | None = None
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
        self.current.seek(data_time - self.offset)

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
                shifted = Snapshot(time=snapshot.time + self.offset, targets=targets,
                                   gpus=snapshot.gpus, sources=snapshot.sources, version=snapshot.version)
                self._last_time = shifted.time
                return shifted
            # this recording is done: the next one carries on a beat after it
            paused = self.current.paused
            self.index = (self.index + 1) % len(self.sources)
            self.rounds += self.index == 0
            nxt = self.current
            nxt.seek(nxt.start if nxt.start is not None else 0.0)
            if paused:
                nxt.pause()
            if nxt.start is not None and self._last_time is not None:
                self.offset = self._last_time + nxt.interval_s - nxt.start
        return None

    async def aclose(self) -> None:
        for source in self.sources:
            await source.aclose()
