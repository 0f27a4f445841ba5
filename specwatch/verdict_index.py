"""Where the shown verdict changes in a recording: the index a post-mortem jumps by.

Built on first open by one headless pass of the recording through a copy of the replay's own
Monitor (same advisor settings, same cadence, same dwell), so it holds the verdicts this replay
shows, whatever flags override the recording's settings, and works for every recording ever
written. (A verdict log written at record time could not: `specwatch record` runs no advisor,
replay flags change the verdicts, and a new line kind would break older readers.)

Each mark keeps the Monitor as it stood just after the changing reading (pickled, compressed), so a
jump shows exactly what the straight-through replay showed at that reading, dwell, hysteresis and
fitted step time included, and the replay goes on from there as if it had played to it.

Runs off the event loop (the dashboard starts it in a thread worker); `progress` and `cancelled`
let a caller show how far it got and stop it.
"""

from __future__ import annotations

import bisect
import os
import pickle
import time
import zlib
from dataclasses import dataclass
from typing import Callable

from specwatch.monitor import Monitor, VerdictChange
from specwatch.recording import open_snapshots
from specwatch.snapshot import Snapshot

__all__ = ["VerdictMark", "VerdictIndex", "build_verdict_index", "monitor_template"]

# zlib level 1: a checkpoint (the window's Snapshots and the advisors) shrinks about 4× in a millisecond
_CHECKPOINT_LEVEL = 1
# how often `progress` is called, in Snapshots
_PROGRESS_EVERY = 500


@dataclass(frozen=True)
class VerdictMark:
    """One reading at which the shown verdict of a target changed (not its first verdict)."""

    time: float
    url: str
    previous: str
    speculation: str
    _checkpoint: bytes  # the Monitor after this reading, and the reading's changes

    def restore(self) -> tuple[Monitor, list[VerdictChange]]:
        """A fresh Monitor as it stood just after this reading, and the changes that reading made."""
        monitor, changes = pickle.loads(zlib.decompress(self._checkpoint))
        return monitor, changes


@dataclass(frozen=True)
class VerdictIndex:
    marks: tuple[VerdictMark, ...]  # in data time order
    readings: int  # Snapshots read
    build_s: float  # wall seconds the pass took
    warnings: tuple[str, ...] = ()  # damage met on the way: the index ends there

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


def monitor_template(monitor: Monitor) -> bytes:
    """The Monitor's settings before it has read anything, to build the index with (call it before
    the first reading: the index is a pass from the recording's start)."""
    return pickle.dumps(monitor, protocol=pickle.HIGHEST_PROTOCOL)


def _is_change(change: VerdictChange) -> bool:
    return change.previous is not None and change.previous != change.verdict.speculation


def build_verdict_index(
    path: str | os.PathLike[str],
    template: bytes,
    *,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    start: float | None = None,
    end: float | None = None,
) -> VerdictIndex | None:
    """Play the recording at `path` through a copy of the Monitor pickled in `template` and mark
    every change of a shown verdict. `progress` gets the fraction of data time done (with the
    recording's `start` and `end` times given); None when `cancelled()` said stop. Raises
    RecordingError when the file is not a readable recording."""
    began = time.perf_counter()
    monitor: Monitor = pickle.loads(template)
    warnings: list[str] = []
    _, snapshots = open_snapshots(path, warnings)
    marks: list[VerdictMark] = []
    readings = 0
    snapshot: Snapshot
    for snapshot in snapshots:
        readings += 1
        changes = monitor.ingest(snapshot)
        shown = [c for c in changes if _is_change(c)]
        if shown:
            checkpoint = zlib.compress(pickle.dumps((monitor, changes), protocol=pickle.HIGHEST_PROTOCOL),
                                       _CHECKPOINT_LEVEL)
            marks.extend(VerdictMark(c.time, c.url, c.previous or "", c.verdict.speculation, checkpoint)
                         for c in shown)
        if readings % _PROGRESS_EVERY == 0:
            if cancelled is not None and cancelled():
                return None
            if progress is not None and start is not None and end is not None and end > start:
                progress(min(1.0, max(0.0, (snapshot.time - start) / (end - start))))
    return VerdictIndex(tuple(marks), readings, time.perf_counter() - began, tuple(warnings))
