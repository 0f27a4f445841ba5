"""The dashboard's recorder: the `r` key starts and stops a recording of what the session reads.

It adapts RecordingWriter to what the app expects (start(path), write(snapshot), stop()), and stores
the session's advisor settings in the header, so a replay of the file judges as the session did.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from specwatch.recording import FILE_SUFFIX, RecordingError, RecordingHeader, RecordingWriter
from specwatch.telemetry.snapshot import Snapshot


class SessionRecorder:
    def __init__(self, header: RecordingHeader, directory: str | Path = ".") -> None:
        self.header = header
        self.directory = Path(directory)
        self._writer: RecordingWriter | None = None
        self.error: str | None = None

    def default_path(self) -> str:
        return str(self.directory / f"specwatch-{time.strftime('%Y%m%d-%H%M%S')}{FILE_SUFFIX}")

    def start(self, path: str) -> None:
        if self._writer is not None:
            raise RecordingError(f"already recording to {self._writer.path}")
        header = dataclasses.replace(self.header, created=time.time())
        self._writer = RecordingWriter(path, header)
        self.error = None

    def write(self, snapshot: Snapshot) -> None:
        writer = self._writer
        if writer is None:
            return
        try:
            writer.write(snapshot)
        except RecordingError as exc:
            # the writer has cut the file back to its last complete flush and closed it: say so once
            self._writer = None
            self.error = str(exc)
            raise

    def stop(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    @property
    def recording(self) -> bool:
        return self._writer is not None
