"""Where the shown verdict changes in a recording: the index a post-mortem jumps by.

Built on first open by one headless pass of the recording through a copy of the replay's own
Monitor (same advisor settings, same cadence, same dwell), so it holds the verdicts this replay
shows, whatever flags override the recording's settings, and works for every recording ever
written. (A verdict log written at record time could not: `specwatch record` runs no advisor,
replay flags change the verdicts, and a new line kind would break older readers.)

Each mark keeps the Monitor as it stood just after the changing reading, so a jump shows exactly
what the straight-through replay showed at that reading, dwell, hysteresis and fitted step time
included, and the replay goes on from there as if it had played to it. The checkpoint leaves out
the window's Snapshots (most of a Monitor's memory, about 0.25 MB at 8 GPUs): a restore reads them
again from the file, one member at most, and adds them to the window as the replay did.

Runs off the event loop (the dashboard starts it in a thread worker); `progress` and `cancelled`
let a caller show how far it got and stop it.
"""

from __future__ import annotations

import bisect
import copy
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specwatch.advice.monitor import Monitor, VerdictChange, is_verdict_change
from specwatch.recording import RecordingError, RecordingIndex, index_recording, open_snapshots
from specwatch.readings.window import Window

__all__ = ["VerdictMark", "VerdictIndex", "build_verdict_index", "monitor_template"]

# how often `progress` is called, in Snapshots
_PROGRESS_EVERY = 500


@dataclass(frozen=True)
class _Checkpoint:
    monitor: Monitor  # after the reading, with an empty window of the same length
    changes: tuple[VerdictChange, ...]  # what the reading changed
    window_start: float  # the time of the window's first Snapshot
    window_count: int  # and how many it held


@dataclass(frozen=True)
class VerdictMark:
    """One reading at which the shown verdict of a target changed (not its first verdict)."""

    time: float
    url: str
    previous: str
    speculation: str
    checkpoint: _Checkpoint


@dataclass(frozen=True)
class VerdictIndex:
    path: Path
    recording: RecordingIndex  # where each member of the file begins
    marks: tuple[VerdictMark, ...]  # in data time order
    readings: int  # Snapshots read
    build_s: float  # wall seconds the pass took
    warnings: tuple[str, ...] = ()  # damage met on the way: the index ends there

    def restore(self, mark: VerdictMark) -> tuple[Monitor, list[VerdictChange]]:
        """A Monitor of its own as it stood just after the mark's reading, and the changes that
        reading made. Reads the window's Snapshots from the file (so: off the event loop). Raises
        RecordingError when the file no longer holds them."""
        point = mark.checkpoint
        monitor, changes = copy.deepcopy((point.monitor, point.changes))
        window: Window = monitor.window
        _, snapshots = open_snapshots(self.path, [], start=self.recording.member_at(point.window_start))
        for snapshot in snapshots:
            if snapshot.time > mark.time:
                break
            if snapshot.time >= point.window_start:
                window.add(snapshot)
        if len(window) != point.window_count or window.latest is None or window.latest.time != mark.time:
            raise RecordingError(f"{self.path} changed since its verdict changes were indexed")
        return monitor, list(changes)

    def _of(self, url: str | None) -> list[VerdictMark]:
        return [m for m in self.marks if url is None or m.url == url]

    def next_after(self, data_time: float, url: str | None = None) -> VerdictMark | None:
        """The first change strictly after `data_time` (of `url`, or of any target)."""
        marks = self._of(url)
        i = bisect.bisect_right([m.time for m in marks], data_time)
        return marks[i] if i < len(marks) else None

    def previous_before(self, data_time: float, url: str | None = None) -> VerdictMark | None:
        """The last change strictly before `data_time`."""
        marks = self._of(url)
        i = bisect.bisect_left([m.time for m in marks], data_time)
        return marks[i - 1] if i > 0 else None

    def count(self, url: str | None = None) -> int:
        return len(self._of(url))

    def changes(self) -> list[VerdictChange]:
        """Every change of a shown verdict in the recording, as the straight replay made it."""
        return [c for m in self.marks for c in m.checkpoint.changes if c.url == m.url and is_verdict_change(c)]


def monitor_template(monitor: Monitor) -> Monitor:
    """A copy of the Monitor before it has read anything, to build the index with (take it before
    the first reading: the index is a pass from the recording's start)."""
    return copy.deepcopy(monitor)


def _checkpoint(monitor: Monitor, changes: list[VerdictChange]) -> _Checkpoint:
    window = monitor.window
    monitor.window = Window(window.seconds)  # the Snapshots stay in the file
    try:
        kept, kept_changes = copy.deepcopy((monitor, tuple(changes)))
    finally:
        monitor.window = window
    return _Checkpoint(kept, kept_changes, window.snapshots[0].time, len(window))


def build_verdict_index(
    path: str | os.PathLike[str],
    template: Monitor,
    *,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    start: float | None = None,
    end: float | None = None,
) -> VerdictIndex | None:
    """Play the recording at `path` through a copy of the Monitor `template` and mark every change
    of a shown verdict. `progress` gets the fraction of data time done (with the
    recording's `start` and `end` times given); None when `cancelled()` said stop. Raises
    RecordingError when the file is not a readable recording."""
    began = time.perf_counter()
    monitor = copy.deepcopy(template)
    warnings: list[str] = []
    recording = index_recording(path, [])
    _, snapshots = open_snapshots(path, warnings)
    marks: list[VerdictMark] = []
    readings = 0
    for snapshot in snapshots:
        readings += 1
        changes = monitor.ingest(snapshot)
        shown = [c for c in changes if is_verdict_change(c)]
        if shown:
            point = _checkpoint(monitor, changes)
            marks.extend(VerdictMark(c.time, c.url, c.previous or "", c.verdict.speculation, point) for c in shown)
        if readings % _PROGRESS_EVERY == 0:
            if cancelled is not None and cancelled():
                return None
            if progress is not None and start is not None and end is not None and end > start:
                progress(min(1.0, max(0.0, (snapshot.time - start) / (end - start))))
    return VerdictIndex(Path(path), recording, tuple(marks), readings, time.perf_counter() - began, tuple(warnings))
