"""Recordings: Snapshots on disk, append-only, for post-mortems, `replay` and the bundled demo.

Format version 1 (`.swrec`):

- The file is a sequence of gzip members, so `zcat FILE | head` shows it. Each member holds JSON
  Lines and begins with a header line, so every member describes itself:

      {"kind": "specwatch-recording", "format_version": 1, "specwatch_version": "0.1.0",
       "snapshot_version": 1, "created": 1800000000.0, "host": "gpu-node-7",
       "targets": ["http://localhost:8000"], "gpus": ["NVIDIA H100 80GB HBM3", ...],
       "data": "real" | "synthetic", "notes": "...", "interval_s": 1.0, "advisor": {...}}

  then one line per Snapshot: `{"kind": "snapshot", "time": T, "targets": [...], "gpus": [...],
  "sources": [...]}` with the entries of Snapshot.to_dict(). An entry that is identical to the
  entry at the same index of the previous Snapshot in the same member is written as the string
  "same" (entries are otherwise always objects, so the marker cannot be confused with data). GPU and
  source readings repeat a lot; this keeps files small and decoding fast.
- Within a member the deflate stream is sync-flushed at least once per second of wall time, so
  everything written before the last flush can be decoded even if the process is killed: a kill -9
  loses at most the last second, and a truncated file replays up to the damage (`zcat` then says
  "unexpected end of file" after printing what it could). One compressor per member keeps the
  previous Snapshots in deflate's window, which is what makes a 24 h recording of 8 GPUs small.
- A new member starts every `member_seconds` of data time (10 min by default), with a fresh header
  and no "same" references into the previous member: seeking can start at any member, and damage
  inside one member never changes how the earlier ones decode.
- Files are created with mode 0600: they carry host names and target URLs.

Reading is versioned: `_READERS` maps each released format version to its reader, and one file per
released version is kept in tests/data/ so that old recordings stay readable. Bad files (empty,
foreign, corrupt, truncated, from a newer specwatch) raise RecordingError, or become warnings when
some Snapshots could be read before the damage; never a traceback.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from specwatch import __version__
from specwatch.snapshot import (
    SNAPSHOT_VERSION,
    GpuSample,
    Snapshot,
    SnapshotFormatError,
    SourceStatus,
    TargetSample,
)

FORMAT_VERSION = 1
HEADER_KIND = "specwatch-recording"
SNAPSHOT_KIND = "snapshot"
SAME = "same"
DATA_KINDS = ("real", "synthetic")
FILE_SUFFIX = ".swrec"
DEFAULT_FLUSH_INTERVAL_S = 1.0
DEFAULT_MEMBER_SECONDS = 600.0
_GZIP_MAGIC = b"\x1f\x8b"
_READ_CHUNK = 1 << 20
# A header line longer than this is not a header: stops a foreign gzip file (a compressed log, a
# tarball) from being read to its end in search of a newline.
_MAX_HEADER_BYTES = 1 << 20


class RecordingError(Exception):
    """A file that cannot be read or written as a recording; the message says why, in plain words."""


@dataclass(frozen=True)
class RecordingHeader:
    """What a recording says about itself. `data` is "real" or "synthetic"."""

    data: str
    host: str = ""
    targets: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    notes: str = ""
    interval_s: float | None = None
    created: float | None = None
    # The advisor settings the recording was made under (method, draft_ratio, draft_params, gpu,
    # model, tp): a replay uses them unless told otherwise, so it judges as the live run did.
    advisor: dict[str, Any] = field(default_factory=dict)
    specwatch_version: str = __version__
    snapshot_version: int = SNAPSHOT_VERSION
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.data not in DATA_KINDS:
            raise ValueError(f"data must be one of {DATA_KINDS}, not {self.data!r}")

    @property
    def synthetic(self) -> bool:
        return self.data == "synthetic"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": HEADER_KIND,
            "format_version": self.format_version,
            "specwatch_version": self.specwatch_version,
            "snapshot_version": self.snapshot_version,
            "created": self.created,
            "host": self.host,
            "targets": list(self.targets),
            "gpus": list(self.gpus),
            "data": self.data,
            "notes": self.notes,
            "interval_s": self.interval_s,
            "advisor": dict(self.advisor),
        }


@dataclass
class Recording:
    """A recording read into memory: its header, its Snapshots, and what went wrong on the way."""

    path: Path
    header: RecordingHeader
    snapshots: list[Snapshot]
    warnings: list[str]

    @property
    def start(self) -> float | None:
        return self.snapshots[0].time if self.snapshots else None

    @property
    def end(self) -> float | None:
        return self.snapshots[-1].time if self.snapshots else None


# ==================================================================================================
# Writing
# ==================================================================================================


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
        self._pending.append(_json_line(header.to_dict()))

    def _finish_member(self) -> None:
        data = self._compressor.compress(b"".join(self._pending)) + self._compressor.flush(zlib.Z_FINISH)
        self._pending.clear()
        self._compressor = None
        self._member_start = None
        self._previous = None
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
            line[name] = [SAME if i < len(before) and before[i] == e else e for i, e in enumerate(entries)]
        self._previous = current
        return _json_line(line)

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
        raise RecordingError(f"cannot write {self.path}: {why}; recording stopped. The file is valid: {kept}") \
            from None


def _json_line(obj: dict[str, Any]) -> bytes:
    # allow_nan=False: Snapshot.to_dict() already spells non-finite floats as strings
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def format_time(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 10)}"


def write_recording(path: str | os.PathLike[str], header: RecordingHeader, snapshots: Any,
                    *, overwrite: bool = False) -> int:
    """Write all of `snapshots` (any iterable) to a new recording; returns how many were written."""
    with RecordingWriter(path, header, overwrite=overwrite) as writer:
        for snapshot in snapshots:
            writer.write(snapshot)
        return writer.snapshots_written


# ==================================================================================================
# Reading
# ==================================================================================================


def iter_lines(path: Path, warnings: list[str]) -> Iterator[tuple[int, bytes]]:
    """(member index, line) for every complete line, across gzip members.

    Damage (a corrupt or truncated member) ends the iteration with a warning: what came before it
    was already yielded. A line cut off by truncation is dropped.
    """
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise RecordingError(f"cannot open {path}: {exc.strerror or exc}") from None
    with f:
        first = f.read(2)
        if not first:
            raise RecordingError(f"{path} is empty: it is not a recording (nothing was ever written to it)")
        if first != _GZIP_MAGIC:
            raise RecordingError(f"{path} is not a specwatch recording (it is not gzip-compressed)")
        f.seek(0)
        member = 0
        decompressor = zlib.decompressobj(31)
        fed = False  # whether the current member has been given any bytes
        seen_first_line = False
        partial = b""
        pending = b""
        while True:
            chunk = pending or f.read(_READ_CHUNK)
            pending = b""
            if not chunk:
                break
            fed = True
            try:
                data = decompressor.decompress(chunk)
            except zlib.error as exc:
                if member == 0 and not seen_first_line:
                    raise RecordingError(f"{path} is not a readable recording: its compressed data are corrupt "
                                         f"({exc})") from None
                warnings.append(f"{path} is damaged in part {member + 1} ({exc}): replayed up to the damage")
                return
            if not seen_first_line and (partial + data)[:1] not in (b"", b"{"):
                raise RecordingError(f"{path} is not a specwatch recording (a gzip file, but not of JSON lines)")
            lines = (partial + data).split(b"\n")
            partial = lines.pop()
            for line in lines:
                seen_first_line = True
                if line:
                    yield member, line
            if not seen_first_line and len(partial) > _MAX_HEADER_BYTES:
                raise RecordingError(f"{path} is not a specwatch recording (no header line)")
            if decompressor.eof:
                rest = decompressor.unused_data
                if partial:
                    warnings.append(f"{path}: part {member + 1} ends inside a line; that line was dropped")
                    partial = b""
                member += 1
                decompressor = zlib.decompressobj(31)
                fed = False
                if rest:
                    if rest[:2] != _GZIP_MAGIC[:len(rest[:2])]:
                        warnings.append(f"{path} has unreadable data after part {member}: ignored")
                        return
                    pending = rest
        if fed and not decompressor.eof:
            # the last member never finished: a recorder still running, killed, or a cut copy
            if partial:
                warnings.append(f"{path} is truncated (its last line is incomplete and was dropped): "
                                "replayed up to the damage")
            else:
                warnings.append(f"{path} ends without its closing marker (the recorder was stopped abruptly "
                                "or is still running): replayed everything written")


def _parse_header(path: Path, line: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: absurdly nested JSON
        obj = None
    if not isinstance(obj, dict) or obj.get("kind") != HEADER_KIND:
        raise RecordingError(f"{path} is not a specwatch recording (a gzip file, but without a specwatch header)")
    return obj


def _header_from_dict(path: Path, d: dict[str, Any]) -> RecordingHeader:
    try:
        return RecordingHeader(
            data=str(d["data"]),
            host=str(d.get("host") or ""),
            targets=tuple(str(t) for t in d.get("targets") or ()),
            gpus=tuple(str(g) for g in d.get("gpus") or ()),
            notes=str(d.get("notes") or ""),
            interval_s=None if d.get("interval_s") is None else float(d["interval_s"]),
            created=None if d.get("created") is None else float(d["created"]),
            advisor=dict(d.get("advisor") or {}),
            specwatch_version=str(d.get("specwatch_version", "?")),
            snapshot_version=int(d["snapshot_version"]),
            format_version=int(d["format_version"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Overflow: int(1e999)
        raise RecordingError(f"{path} has a malformed header ({exc!s})") from None


class _SnapshotDecoderV1:
    """Format 1 Snapshot lines → Snapshots, reusing the objects of entries marked "same"."""

    def __init__(self) -> None:
        self._previous: dict[str, tuple[Any, ...]] = {}

    def reset(self) -> None:
        self._previous = {}

    def decode(self, obj: Any) -> Snapshot:
        if not isinstance(obj, dict) or obj.get("kind") != SNAPSHOT_KIND:
            raise SnapshotFormatError("a line that is not a Snapshot")
        try:
            targets = self._entries(obj, "targets", TargetSample.from_dict)
            gpus = self._entries(obj, "gpus", GpuSample.from_dict)
            sources = self._entries(obj, "sources", SourceStatus.from_dict)
            return Snapshot(time=float(obj["time"]), targets=targets, gpus=gpus, sources=sources)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
            raise SnapshotFormatError(f"malformed snapshot: {exc!r}") from None

    def _entries(self, obj: dict[str, Any], name: str, decode: Callable[[Any], Any]) -> tuple[Any, ...]:
        before = self._previous.get(name, ())
        out = []
        for i, entry in enumerate(obj.get(name, ())):
            if entry == SAME:
                out.append(before[i])  # IndexError when the reference points nowhere: a bad file
            else:
                out.append(decode(entry))
        entries = tuple(out)
        self._previous[name] = entries
        return entries


def _read_v1(path: Path, lines: Iterator[tuple[int, bytes]], header: RecordingHeader,
             warnings: list[str]) -> Iterator[Snapshot]:
    """Format version 1: header lines open each member; Snapshot lines may refer to the previous one."""
    if header.snapshot_version != SNAPSHOT_VERSION:
        raise RecordingError(
            f"{path} holds snapshot layout {header.snapshot_version}; this specwatch reads layout "
            f"{SNAPSHOT_VERSION} (recorded by specwatch {header.specwatch_version})"
        )
    decoder = _SnapshotDecoderV1()
    current_member = 0
    last_time: float | None = None
    for member, line in lines:
        if member != current_member:
            current_member = member
            decoder.reset()
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            warnings.append(f"{path} has an unreadable line after {format_time(last_time)}: replayed up to it")
            return
        if isinstance(obj, dict) and obj.get("kind") == HEADER_KIND:
            continue  # each member repeats the header
        try:
            snapshot = decoder.decode(obj)
        except SnapshotFormatError as exc:
            warnings.append(f"{path} has a damaged Snapshot after {format_time(last_time)} ({exc}): "
                            "replayed up to it")
            return
        last_time = snapshot.time
        yield snapshot


_READERS: dict[int, Callable[[Path, Iterator[tuple[int, bytes]], RecordingHeader, list[str]], Iterator[Snapshot]]] = {
    1: _read_v1,
}


def open_snapshots(path: str | os.PathLike[str], warnings: list[str] | None = None
                   ) -> tuple[RecordingHeader, Iterator[Snapshot]]:
    """The header, and a lazy iterator over the Snapshots: for long recordings read as a stream.

    Raises RecordingError when the file is not a readable recording at all; damage found later is
    appended to `warnings` and ends the iteration.
    """
    p = Path(path)
    warnings = warnings if warnings is not None else []
    lines = iter_lines(p, warnings)
    try:
        first = next(lines, None)
    except EOFError:
        first = None
    if first is None:
        if warnings:
            raise RecordingError(f"{p} is not a readable recording: {warnings[-1]}")
        raise RecordingError(f"{p} is not a specwatch recording, or was cut off before its header ended")
    raw = _parse_header(p, first[1])
    version = raw.get("format_version")
    if not isinstance(version, int):
        raise RecordingError(f"{p} has a malformed header (no format version)")
    reader = _READERS.get(version)
    if reader is None:
        newest = max(_READERS)
        if version > newest:
            raise RecordingError(f"{p} was recorded in format {version} by specwatch "
                                 f"{raw.get('specwatch_version', '?')}; this specwatch ({__version__}) reads "
                                 f"formats up to {newest}: upgrade specwatch to replay it")
        raise RecordingError(f"{p} is in format {version}, which no released specwatch wrote")
    header = _header_from_dict(p, raw)
    return header, reader(p, lines, header, warnings)


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """The whole recording in memory. Raises RecordingError; damage becomes `warnings`."""
    warnings: list[str] = []
    header, snapshots = open_snapshots(path, warnings)
    try:
        items = list(snapshots)
    except RecordingError:
        raise
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    return Recording(Path(path), header, items, warnings)
