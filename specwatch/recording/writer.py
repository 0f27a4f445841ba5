"""Writing a recording: gzip members of JSON Lines, sync-flushed, compact against the previous
Snapshot (the layout is described in specwatch.recording)."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import socket
import time
import zlib
from pathlib import Path
from typing import Any, Callable

from specwatch.recording.format import (
    DEFAULT_FLUSH_INTERVAL_S,
    DEFAULT_MEMBER_SECONDS,
    SAME,
    SNAPSHOT_KIND,
    RecordingError,
    RecordingHeader,
    against,
    encode_float,
    format_time,
)
from specwatch.telemetry.snapshot import EngineSample, GpuSample, Snapshot

__all__ = [
    "RecordingWriter",
    "write_recording",
]


class RecordingWriter:
    """Appends Snapshots to a new recording.

    The header is written with the first Snapshot, so targets and GPU names left empty are filled in
    from it. Writes are buffered and flushed (compressed, sync-flushed and written to the file) when
    a second of wall time has passed since the last flush, on `flush()` and on `close()`. Call
    `write()` at least once per interval: a live recorder does, once per poll.

    A write that fails (a full disk, a lost mount) truncates the file back to its last complete
    flush, so it stays valid, closes the writer and raises RecordingError saying so.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        header: RecordingHeader,
        *,
        overwrite: bool = False,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        member_seconds: float = DEFAULT_MEMBER_SECONDS,
        compression_level: int = 6,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.header = header
        self.flush_interval_s = flush_interval_s
        self.member_seconds = member_seconds
        self._level = compression_level
        self._clock = clock
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
        try:
            self._fd: int | None = os.open(self.path, flags, 0o600)
        except FileExistsError:
            raise RecordingError(f"{self.path} already exists (choose another name, or overwrite it)") from None
        except OSError as exc:
            raise RecordingError(f"cannot create {self.path}: {exc.strerror or exc}") from None
        try:
            os.fchmod(self._fd, 0o600)  # an overwritten file keeps its old mode otherwise
        except OSError:
            pass
        self._compressor: Any = None  # zlib compressobj of the member being written
        self._member_start: float | None = None
        self._previous: dict[str, list[Any]] | None = None  # the last Snapshot's entries, as dicts
        # per member: each engine's last reading, and each histogram's bucket bounds (format 2)
        self._engines: dict[tuple[str, str, str | None], EngineSample] = {}
        self._layouts: dict[tuple[Any, str], list[Any]] = {}
        self._previous_gpus: tuple[GpuSample, ...] = ()
        self._pending: list[bytes] = []
        self._last_flush = self._clock()
        self._good_size = 0  # bytes on disk that end on a complete flush
        self._last_flushed_time: float | None = None
        self._last_pending_time: float | None = None
        self.snapshots_written = 0

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._fd is None

    @property
    def bytes_written(self) -> int:
        return self._good_size

    def write(self, snapshot: Snapshot) -> None:
        if self._fd is None:
            raise RecordingError(f"{self.path} is closed")
        if self._member_start is not None and snapshot.time - self._member_start >= self.member_seconds:
            self._finish_member()
        if self._compressor is None:
            self._start_member(snapshot)
        self._pending.append(self._encode(snapshot))
        self._last_pending_time = snapshot.time
        self.snapshots_written += 1
        if self._clock() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        """Compress what is buffered and write it out, decodable on its own (a sync flush)."""
        if self._fd is None or self._compressor is None:
            return
        data = self._compressor.compress(b"".join(self._pending))
        data += self._compressor.flush(zlib.Z_SYNC_FLUSH)
        self._pending.clear()
        self._write_out(data)
        self._last_flush = self._clock()
        self._last_flushed_time = self._last_pending_time

    def close(self) -> None:
        if self._fd is None:
            return
        try:
            if self._compressor is not None:
                self._finish_member()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # -- internals ------------------------------------------------------------------------------

    def _start_member(self, snapshot: Snapshot) -> None:
        header = self.header
        if not header.targets or not header.gpus or header.created is None:
            header = RecordingHeader(
                data=header.data,
                host=header.host or socket.gethostname(),
                targets=header.targets or tuple(t.url for t in snapshot.targets),
                gpus=header.gpus or tuple(g.name for g in snapshot.gpus),
                notes=header.notes,
                interval_s=header.interval_s,
                created=header.created if header.created is not None else snapshot.time,
                advisor=header.advisor,
            )
            self.header = header
        # wbits 31: a gzip member (header, deflate, CRC and length trailer)
        self._compressor = zlib.compressobj(self._level, zlib.DEFLATED, 31)
        self._member_start = snapshot.time
        self._previous = None
        self._previous_gpus = ()
        self._engines = {}
        self._layouts = {}
        self._pending.append(_json_line(header.to_dict()))

    def _finish_member(self) -> None:
        data = self._compressor.compress(b"".join(self._pending)) + self._compressor.flush(zlib.Z_FINISH)
        self._pending.clear()
        self._compressor = None
        self._member_start = None
        self._previous = None
        self._previous_gpus = ()
        self._engines = {}
        self._layouts = {}
        self._write_out(data)
        self._last_flush = self._clock()
        self._last_flushed_time = self._last_pending_time

    def _encode(self, snapshot: Snapshot) -> bytes:
        current = {
            "targets": [t.to_dict() for t in snapshot.targets],
            "gpus": [g.to_dict() for g in snapshot.gpus],
            "sources": [s.to_dict() for s in snapshot.sources],
        }
        line: dict[str, Any] = {"kind": SNAPSHOT_KIND, "time": snapshot.time}
        previous = self._previous
        for name, entries in current.items():
            before = previous[name] if previous is not None else []
            marked = [SAME if i < len(before) and before[i] == e else e for i, e in enumerate(entries)]
            # a list whose every entry repeats the previous Snapshot's is one "same" (format 2)
            line[name] = SAME if entries and len(before) == len(entries) and all(m is SAME for m in marked) \
                else marked
        # Targets that changed: their engines are written against the engine's previous reading in
        # this member (format 2), the histograms against their bucket layout.
        targets = line["targets"]
        for i, target in enumerate(snapshot.targets):
            if targets is not SAME and targets[i] is not SAME and target.engines:
                targets[i] = dict(targets[i], engines=[self._encode_engine(target.url, e) for e in target.engines])
        # GPUs whose readings changed but nothing else: the changed values alone
        gpus, before_gpus = line["gpus"], self._previous_gpus
        if gpus is not SAME:
            for i, gpu in enumerate(snapshot.gpus):
                if gpus[i] is not SAME and i < len(before_gpus):
                    changed = _changed_values(before_gpus[i], gpu)
                    if changed is not None:
                        gpus[i] = {"changed": changed}
        self._previous = current
        self._previous_gpus = snapshot.gpus
        return _json_line(line)

    def _encode_engine(self, url: str, engine: EngineSample) -> dict[str, Any]:
        key = (url, engine.engine, engine.model_name)
        before = self._engines.get(key)
        self._engines[key] = engine
        histograms: dict[str, Any] = {}
        for name, h in engine.histograms.items():
            if before is not None and before.histograms.get(name) == h:
                histograms[name] = SAME
                continue
            counts = [c for _, c in h.buckets]
            compact: list[Any] = [h.sum, None if counts and h.count == counts[-1] else h.count]
            end = len(counts)
            while end > 1 and counts[end - 1] == counts[end - 2]:
                end -= 1  # cumulative counts plateau: the reader repeats the last one written
            compact += counts[:end]
            bounds = [encode_float(le) for le, _ in h.buckets]
            layout_key = (key, name)
            if self._layouts.get(layout_key) != bounds:
                self._layouts[layout_key] = bounds
                histograms[name] = {"le": bounds, "h": compact}
            else:
                histograms[name] = compact
        return {
            "engine": engine.engine,
            "model_name": engine.model_name,
            "counters": against(engine.counters, before.counters if before is not None else None),
            "gauges": against(engine.gauges, before.gauges if before is not None else None),
            # the same families in the same order as before: the values alone
            "histograms": list(histograms.values())
            if before is not None and list(before.histograms) == list(histograms) else histograms,
            "accepted_per_position": list(engine.accepted_per_position),
        }

    def _write_out(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            self._fail(exc)
        self._good_size += len(data)

    def _fail(self, exc: OSError) -> None:
        """Cut the file back to its last complete flush, close, and say what was kept."""
        fd, self._fd = self._fd, None
        self._compressor = None
        try:
            if fd is not None:
                os.ftruncate(fd, self._good_size)
        except OSError:
            pass
        finally:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            why = "the disk is full"
        else:
            why = exc.strerror or str(exc)
        kept = (f"it holds the Snapshots up to {format_time(self._last_flushed_time)}"
                if self._last_flushed_time is not None else "it holds no Snapshots")
        raise RecordingError(f"cannot write {self.path}: {why}; recording stopped. The file is valid: {kept}",
                             reason=why) from None


def _changed_values(before: GpuSample, gpu: GpuSample) -> dict[str, Any] | None:
    """The values of `gpu` that differ from `before`, when nothing else differs (the same fields
    read, in the same order); else None."""
    values, old = gpu.values, before.values
    if list(values) != list(old) or dataclasses.replace(before, values=values) != gpu:
        return None
    # a value equal to the earlier one but of the other sign of zero is written too
    return {k: encode_float(v) for k, v in values.items()
            if v != old[k] or (v == 0.0 and math.copysign(1.0, v) != math.copysign(1.0, old[k]))}




def _json_line(obj: dict[str, Any]) -> bytes:
    # allow_nan=False: Snapshot.to_dict() already spells non-finite floats as strings
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"




def write_recording(path: str | os.PathLike[str], header: RecordingHeader, snapshots: Any,
                    *, overwrite: bool = False) -> int:
    """Write all of `snapshots` (any iterable) to a new recording; returns how many were written."""
    with RecordingWriter(path, header, overwrite=overwrite) as writer:
        for snapshot in snapshots:
            writer.write(snapshot)
        return writer.snapshots_written
