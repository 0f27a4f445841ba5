"""The recording thread: requests in order, failures as events, a full queue as dropped readings."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from specwatch.recording import RecordingError
from specwatch.dashboard.recording_thread import (
    ReadingsDropped,
    RecordingNotStarted,
    RecordingStarted,
    RecordingStopped,
    RecordingThread,
)
from specwatch.collectors.synthetic import generate
from test_recording import NODE

SNAPSHOTS = list(generate(NODE, [4.0] * 12))


class ListRecorder:
    """A recorder that keeps the calls it got; `fail` makes a call raise."""

    def __init__(self, fail: dict[str, BaseException] | None = None, fail_after_writes: int | None = None) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail = fail or {}
        self.fail_after_writes = fail_after_writes

    def start(self, path: str) -> None:
        if "start" in self.fail:
            raise self.fail["start"]
        self.calls.append(("start", path))

    def write(self, snapshot) -> None:
        writes = sum(1 for c in self.calls if c[0] == "write")
        if self.fail_after_writes is not None and writes >= self.fail_after_writes:
            raise self.fail["write"]
        self.calls.append(("write", snapshot.time))

    def stop(self) -> None:
        self.calls.append(("stop", None))


def run(recorder, requests, capacity: int = 64):
    events: list = []
    thread = RecordingThread(recorder, events.append, capacity=capacity)
    requests(thread)
    assert thread.close(timeout=30.0)
    return events, thread


def test_requests_run_in_order_and_close_writes_what_is_queued():
    recorder = ListRecorder()

    def requests(t: RecordingThread) -> None:
        t.offer(SNAPSHOTS[0])  # before any start: not recorded
        t.start("a.swrec")
        for s in SNAPSHOTS[1:5]:
            t.offer(s)
        t.stop()
        t.offer(SNAPSHOTS[5])  # after the stop
        t.start("b.swrec")
        for s in SNAPSHOTS[6:8]:
            t.offer(s)

    events, _ = run(recorder, requests)
    times = [s.time for s in SNAPSHOTS]
    assert recorder.calls == [("start", "a.swrec"), *[("write", x) for x in times[1:5]], ("stop", None),
                              ("start", "b.swrec"), *[("write", x) for x in times[6:8]], ("stop", None)]
    assert events == [RecordingStarted("a.swrec"), RecordingStopped("a.swrec"), RecordingStarted("b.swrec"),
                      RecordingStopped("b.swrec")]


@pytest.mark.parametrize(("error", "why"), [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), os.strerror(errno.ENOSPC)),
    (OSError(errno.EIO, os.strerror(errno.EIO)), os.strerror(errno.EIO)),
    (RecordingError("cannot write x.swrec: the disk is full; recording stopped. The file is valid: ...",
                    reason="the disk is full"), "the disk is full"),
])
def test_a_failing_writer_stops_the_recording_and_says_why(error, why):
    recorder = ListRecorder(fail={"write": error}, fail_after_writes=2)
    seen = threading.Event()

    def requests(t: RecordingThread) -> None:
        t.start("x.swrec")
        for s in SNAPSHOTS[:6]:
            t.offer(s)
        # the failure arrives on the thread; once it has, the thread takes no more readings
        for _ in range(3000):
            if not t.wanted:
                seen.set()
                break
            seen.wait(0.01)
        t.offer(SNAPSHOTS[6])

    events, thread = run(recorder, requests)
    assert seen.is_set()
    assert [c[0] for c in recorder.calls] == ["start", "write", "write", "stop"]
    assert events[0] == RecordingStarted("x.swrec")
    assert events[1].path == "x.swrec" and events[1].why == why
    # the whole account: what a RecordingError says the file still holds
    assert events[1].detail == (str(error) if isinstance(error, RecordingError) else why)
    assert len(events) == 2 and not thread.wanted


def test_a_start_that_fails_is_said_and_nothing_is_recorded():
    recorder = ListRecorder(fail={"start": PermissionError(errno.EACCES, "Permission denied", "/ro/x.swrec")})

    def requests(t: RecordingThread) -> None:
        t.start("/ro/x.swrec")
        t.offer(SNAPSHOTS[0])

    events, thread = run(recorder, requests)
    assert events == [RecordingNotStarted("/ro/x.swrec", "Permission denied (/ro/x.swrec)")]
    assert recorder.calls == [] and not thread.wanted


def test_a_stalled_disk_drops_readings_past_the_queue_and_counts_them():
    entered, release = threading.Event(), threading.Event()

    class StallingRecorder(ListRecorder):
        def write(self, snapshot) -> None:
            entered.set()
            release.wait(30.0)
            super().write(snapshot)

    recorder = StallingRecorder()

    def requests(t: RecordingThread) -> None:
        t.start("slow.swrec")
        t.offer(SNAPSHOTS[0])
        assert entered.wait(30.0)  # the thread holds the first reading, stuck in the disk
        for s in SNAPSHOTS[1:6]:  # two fit the queue, three do not
            t.offer(s)
        release.set()

    events, _ = run(recorder, requests, capacity=2)
    assert [c[1] for c in recorder.calls if c[0] == "write"] == [s.time for s in SNAPSHOTS[:3]]
    assert events == [RecordingStarted("slow.swrec"), ReadingsDropped("slow.swrec", 3),
                      RecordingStopped("slow.swrec")]
