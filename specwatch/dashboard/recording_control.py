"""The recording control: the `r` key starts and stops recording what the session reads.

The file work is specwatch.dashboard.recording_thread's, on a thread of its own: a poll only offers
it the Snapshot (PollLoop reads `thread`), so a full or slow disk never keeps a reading from the
panels. The thread says how it went through RecordingEvents, which come to the app as
RecordingReported messages; this turns them into the header's state and the notices. A writer that
fails stops the recording, and the header says why.

A recorder is any object with start(path), stop() and write(snapshot) (SessionRecorder).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from textual.app import SystemCommand
from textual.message import Message

from specwatch.dashboard.recording_thread import (
    ReadingsDropped,
    RecordingEvent,
    RecordingNotStarted,
    RecordingStarted,
    RecordingStopped,
    RecordingThread,
)

if TYPE_CHECKING:
    from specwatch.dashboard.app import SpecwatchApp

CLOSE_RECORDING_TIMEOUT_S = 10.0  # on quit, for the recording thread to write what is queued

log = logging.getLogger(__name__)


class RecordingReported(Message):
    """The recording thread says what happened: started, stopped (and why), dropped readings."""

    def __init__(self, event: RecordingEvent) -> None:
        super().__init__()
        self.event = event


def default_recording_path(recorder: Any, data_time: float | None) -> str:
    """The recorder's own default when it has one, else specwatch-<data time>.rec here."""
    suggest = getattr(recorder, "default_path", None)
    if callable(suggest):
        return str(suggest())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(data_time if data_time is not None else 0))
    return str(Path.cwd() / f"specwatch-{stamp}.rec")


class RecordingControl:
    """Starts and stops the session's recording, and keeps what the header says about it."""

    def __init__(self, app: SpecwatchApp, recorder: Any | None, record_path: str | None) -> None:
        self.app = app
        self.recorder = recorder
        self.record_path = record_path
        self.thread: RecordingThread | None = None
        self.path: str | None = None  # the file being written, once the thread said so
        self.stopped_why: str | None = None  # why the last recording failed, until the next one

    @property
    def wanted(self) -> bool:
        """Recording, or asked to: what `r` stops."""
        return self.thread is not None and self.thread.wanted

    def toggle(self, data_time: float | None) -> None:
        """Start or stop recording. The thread does the file work and says how it went."""
        if self.recorder is None:
            self.app.notify("no recorder in this session", severity="warning", timeout=3)
            return
        if self.thread is None:
            self.thread = RecordingThread(self.recorder, self._report)
        if self.thread.wanted:
            self.thread.stop()
            return
        path = self.record_path or default_recording_path(self.recorder, data_time)
        self.thread.start(path)

    def _report(self, event: RecordingEvent) -> None:
        self.app.post_message(RecordingReported(event))  # called on the recording thread; thread-safe

    def reported(self, event: RecordingEvent) -> None:
        """What the thread said, on the app's loop: the state the header shows, and a notice."""
        app = self.app
        if isinstance(event, RecordingStarted):
            self.path, self.stopped_why = event.path, None
            app.notify(f"recording to {event.path}", timeout=3)
        elif isinstance(event, RecordingStopped):
            self.path = None
            if event.why is None:
                app.notify("recording stopped", timeout=3)
            else:
                self.stopped_why = event.why
                log.error("recording to %s stopped: %s", event.path, event.detail or event.why)
                app.notify(f"{event.detail or event.why}. The panels keep updating.",
                           title="recording stopped", severity="error", timeout=30)
        elif isinstance(event, RecordingNotStarted):
            log.error("cannot record to %s: %s", event.path, event.why)
            app.notify(f"cannot record to {event.path}: {event.why}", title="recording", severity="error")
        elif isinstance(event, ReadingsDropped):
            log.warning("recording to %s fell behind: %d readings left out", event.path, event.count)
            app.notify(f"the disk fell behind: {event.count} readings left out of {event.path}",
                       title="recording", severity="warning", timeout=10)

    async def finish(self) -> None:
        thread, self.thread = self.thread, None
        if thread is not None:
            # what is queued is written and the file closed; a disk that hangs is not waited for
            if not await asyncio.to_thread(thread.close, CLOSE_RECORDING_TIMEOUT_S):
                log.error("the recording thread did not finish within %.0f s", CLOSE_RECORDING_TIMEOUT_S)
            self.path = None

    def commands(self) -> Iterable[SystemCommand]:
        if self.recorder is not None:
            yield SystemCommand("Stop recording" if self.wanted else "Start recording",
                                "Record the Snapshots to a file", self.app.action_toggle_recording)
