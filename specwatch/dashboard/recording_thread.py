"""The dashboard's recording, on a thread of its own.

    poll ──Snapshot──▶ Monitor ──▶ panels
      └──offer()──▶ bounded queue ──▶ recording thread ──recorder.write──▶ file
                                            └──RecordingStarted / RecordingStopped / ReadingsDropped──▶ report()

The poll only offers each Snapshot to the queue and moves on: a slow or full disk never delays the
panels, and a writer that fails (disk full, I/O error, permission) ends the recording with its
reason instead of failing the poll. The thread says what happened through typed events handed to
`report`, which is called on the recording thread (the app posts them to itself as messages).

The recorder is any object with start(path), write(snapshot) and stop() (SessionRecorder).
"""

from __future__ import annotations

import errno
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Union

from specwatch.telemetry.snapshot import Snapshot

# Readings the queue holds before it drops new ones: minutes of 1 Hz polls, so only a stalled disk
# ever fills it.
DEFAULT_CAPACITY = 256


@dataclass(frozen=True)
class RecordingStarted:
    path: str


@dataclass(frozen=True)
class RecordingStopped:
    """The recording ended: as asked (why is None), or because the writer failed: `why` is the
    cause in a few words ("the disk is full"), `detail` the writer's whole account (what the file
    still holds)."""

    path: str
    why: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class RecordingNotStarted:
    path: str
    why: str


@dataclass(frozen=True)
class ReadingsDropped:
    """The writer fell behind by a full queue: this many readings were left out of the file."""

    path: str
    count: int


RecordingEvent = Union[RecordingStarted, RecordingStopped, RecordingNotStarted, ReadingsDropped]


def failure_words(exc: BaseException) -> tuple[str, str]:
    """Why a write failed: (the cause in a few words, the whole account). An OSError gives its
    strerror ("No space left on device"); a RecordingError its reason and message."""
    if isinstance(exc, OSError) and exc.errno is not None:
        words = exc.strerror or errno.errorcode.get(exc.errno, str(exc.errno))
        return words, f"{words} ({exc.filename})" if exc.filename else words
    text = str(exc) or type(exc).__name__
    reason = getattr(exc, "reason", None)
    return (reason if isinstance(reason, str) and reason else text), text


class RecordingThread:
    """Runs a recorder's start, write and stop on one daemon thread, in the order they were asked."""

    def __init__(self, recorder: Any, report: Callable[[RecordingEvent], None],
                 capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("the queue must hold at least one reading")
        self._recorder = recorder
        self._report = report
        self._capacity = capacity
        self._lock = threading.Condition()
        self._commands: deque[tuple[str, Any]] = deque()
        self._queued_writes = 0
        self._dropped = 0
        self._wanted = False  # a recording was asked for and has not failed or been stopped since
        self._closing = False
        self._path: str | None = None  # the file being written; the thread's own
        self._thread = threading.Thread(target=self._run, name="specwatch-recording", daemon=True)
        self._thread.start()

    @property
    def wanted(self) -> bool:
        """Whether the last request was to record, and the writer has not failed since."""
        with self._lock:
            return self._wanted

    # -- requests (from any thread; none of them blocks on the disk) ---------------------------------

    def start(self, path: str) -> None:
        self._put("start", path, wanted=True)

    def stop(self) -> None:
        self._put("stop", None, wanted=False)

    def offer(self, snapshot: Snapshot) -> None:
        """Queue a reading for the file; dropped (and counted) when the queue is full."""
        with self._lock:
            if not self._wanted or self._closing:
                return
            if self._queued_writes >= self._capacity:
                self._dropped += 1
                return
            self._queued_writes += 1
            self._commands.append(("write", snapshot))
            self._lock.notify()

    def close(self, timeout: float | None = 10.0) -> bool:
        """Write what is queued, stop any recording and end the thread. False when it did not end
        within `timeout` (a disk that hangs): the daemon thread is then left behind."""
        self._put("close", None, wanted=False)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _put(self, kind: str, argument: Any, *, wanted: bool) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = kind == "close"
            self._wanted = wanted
            self._commands.append((kind, argument))
            self._lock.notify()

    # -- the thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._commands:
                    self._lock.wait()
                kind, argument = self._commands.popleft()
                if kind == "write":
                    self._queued_writes -= 1
                dropped, self._dropped = self._dropped, 0
            if dropped and self._path is not None:
                self._report(ReadingsDropped(self._path, dropped))
            if kind == "write":
                self._write(argument)
            elif kind == "start":
                self._start(argument)
            else:
                self._stop()
                if kind == "close":
                    return

    def _start(self, path: str) -> None:
        if self._path is not None:
            self._stop()
        try:
            self._recorder.start(path)
        except Exception as exc:  # noqa: BLE001 - any failure to start is said, never raised
            self._give_up()
            self._report(RecordingNotStarted(path, failure_words(exc)[1]))
            return
        self._path = path
        self._report(RecordingStarted(path))

    def _write(self, snapshot: Snapshot) -> None:
        path = self._path
        if path is None:
            return  # queued before a failure or a stop
        try:
            self._recorder.write(snapshot)
        except Exception as exc:  # noqa: BLE001 - a failing writer ends the recording, not the poll
            why, detail = failure_words(exc)
            try:
                self._recorder.stop()
            except Exception:  # noqa: BLE001 - the file is already lost to the same failure
                pass
            self._path = None
            self._give_up()
            self._report(RecordingStopped(path, why, detail))

    def _stop(self) -> None:
        path, self._path = self._path, None
        if path is None:
            return
        try:
            self._recorder.stop()
        except Exception as exc:  # noqa: BLE001
            self._report(RecordingStopped(path, *failure_words(exc)))
            return
        self._report(RecordingStopped(path))

    def _give_up(self) -> None:
        """After a failure: stop taking readings, and forget those queued for the lost file (a
        start asked for meanwhile still stands)."""
        with self._lock:
            if any(kind == "start" for kind, _ in self._commands):
                return
            self._wanted = False
            self._commands = deque(c for c in self._commands if c[0] != "write")
            self._queued_writes = 0
