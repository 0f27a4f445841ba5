"""Recordings: Snapshots on disk, append-only, for post-mortems, `replay` and the bundled demo.

Format version 2 (`.swrec`), written by this specwatch:

- The file is a sequence of gzip members, so `zcat FILE | head` shows it. Each member holds JSON
  Lines and begins with a header line, so every member describes itself:

      {"kind": "specwatch-recording", "format_version": 2, "specwatch_version": "0.1.0",
       "snapshot_version": 1, "created": 1800000000.0, "host": "gpu-node-7",
       "targets": ["http://localhost:8000"], "gpus": ["NVIDIA H100 80GB HBM3", ...],
       "data": "real" | "synthetic", "notes": "...", "interval_s": 1.0, "advisor": {...}}

  then one line per Snapshot: `{"kind": "snapshot", "time": T, "targets": [...], "gpus": [...],
  "sources": [...]}` with the entries of Snapshot.to_dict(), except as follows. Every reference
  below is to earlier lines of the same member.
  - An entry identical to the entry at the same index of the previous Snapshot is the string
    "same" (entries are otherwise objects, so the marker cannot be confused with data); a list
    whose every entry is "same", with as many entries as before, is itself the string "same".
  - A GPU whose readings changed but nothing else (the same fields read, in the same order; the
    same errors, processes, ...) is `{"changed": {field: value, ...}}`: the previous Snapshot's GPU
    at that index, with those values.
  - In a target that changed, each engine is written against the engine's previous reading (the
    last one with the same target URL, engine label and model name): its "counters" and "gauges"
    are "same" (unchanged), or a list of the values alone when the names are those of the previous
    reading in the same order, or the whole object. Its "histograms" are a list, in the previous
    reading's order, when the families are the same, else an object by family; each histogram is
    "same" (unchanged since the previous reading), or `{"le": [bounds...], "h": H}` the first time
    in the member or when its bucket bounds change, and H alone after that, where H is
    `[sum, count, c1, c2, ...]`: the cumulative bucket counts in the order of the bounds, with
    the counts that repeat the last one written left off (cumulative counts plateau) and count
    null when it equals the last bucket's count. Numbers are written as in format 1 (non-finite
    floats as strings), so every value reads back exactly.
  This keeps the file small, and the reader's work small: most of a line used to be the buckets.
- Within a member the deflate stream is sync-flushed at least once per second of wall time, so
  everything written before the last flush can be decoded even if the process is killed: a kill -9
  loses at most the last second, and a truncated file replays up to the damage (`zcat` then says
  "unexpected end of file" after printing what it could). One compressor per member keeps the
  previous Snapshots in deflate's window, which is what makes a 24 h recording of 8 GPUs small.
- A new member starts every `member_seconds` of data time (10 min by default), with a fresh header
  and no references into the previous member: seeking can start at any member, and damage inside
  one member never changes how the earlier ones decode.
- Files are created with mode 0600: they carry host names and target URLs.

A target may hold a "speculation" object (SpeculationConfig.to_dict: method, k, draft model, ...,
and where each came from) and an "engine" name ("sglang"; absent for vLLM); recordings made before
they existed lack them and read as they always did.

Format version 1 is format 2 without the compact forms: entries (whole) or "same" per entry, and
every engine and histogram written whole. Format 2 readers read such lines too.

Reading is versioned: `_READERS` maps each released format version to its reader, and one file per
released version is kept in tests/data/ so that old recordings stay readable. Bad files (empty,
foreign, corrupt, truncated, from a newer specwatch) raise RecordingError, or become warnings when
some Snapshots could be read before the damage; never a traceback.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
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
    EngineSample,
    GpuSample,
    Histogram,
    Snapshot,
    SnapshotFormatError,
    SourceStatus,
    TargetSample,
    speculation_from_dict,
)

FORMAT_VERSION = 2
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


# JSON has no NaN or infinities: they are written as the strings Snapshot.to_dict uses ("NaN",
# "+Inf", "-Inf"), which float() reads back (test_recording checks the two spellings agree)
def _encode_float(v: float) -> float | str:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    return v


def _decode_float(v: float | str) -> float:
    return float(v)


class RecordingError(Exception):
    """A file that cannot be read or written as a recording; the message says why, in plain words.

    `reason` is the cause alone ("the disk is full"), short enough for a status line."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


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
            bounds = [_encode_float(le) for le, _ in h.buckets]
            layout_key = (key, name)
            if self._layouts.get(layout_key) != bounds:
                self._layouts[layout_key] = bounds
                histograms[name] = {"le": bounds, "h": compact}
            else:
                histograms[name] = compact
        return {
            "engine": engine.engine,
            "model_name": engine.model_name,
            "counters": _against(engine.counters, before.counters if before is not None else None),
            "gauges": _against(engine.gauges, before.gauges if before is not None else None),
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
    return {k: _encode_float(v) for k, v in values.items()
            if v != old[k] or (v == 0.0 and math.copysign(1.0, v) != math.copysign(1.0, old[k]))}


def _against(values: dict[str, float], before: dict[str, float] | None) -> Any:
    """Counters or gauges against the engine's previous reading: "same", the values alone when the
    names are those of before in the same order, else the whole object."""
    if before is not None:
        if before == values:
            return SAME
        if list(before) == list(values):
            return [_encode_float(v) for v in values.values()]
    return {k: _encode_float(v) for k, v in values.items()}


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


_scan_once = json.JSONDecoder().scan_once


def _loads_line(line: bytes) -> Any:
    """json.loads(line), without its per-call overhead for the lines the writer makes (one object,
    UTF-8, no surrounding whitespace). Anything else, errors included, goes through json.loads."""
    if line[:1] == b"{":
        try:
            text = line.decode()
            obj, end = _scan_once(text, 0)
            if end == len(text):
                return obj
        except Exception:  # noqa: BLE001 - json.loads below says what is wrong, as it always did
            pass
    return json.loads(line)


def _read_v1(path: Path, lines: Iterator[tuple[int, bytes]], header: RecordingHeader,
             warnings: list[str], decoder: _SnapshotDecoderV1 | None = None) -> Iterator[Snapshot]:
    """Format version 1: header lines open each member; Snapshot lines may refer to the previous one."""
    if header.snapshot_version != SNAPSHOT_VERSION:
        raise RecordingError(
            f"{path} holds snapshot layout {header.snapshot_version}; this specwatch reads layout "
            f"{SNAPSHOT_VERSION} (recorded by specwatch {header.specwatch_version})"
        )
    decoder = decoder or _SnapshotDecoderV1()
    current_member = 0
    last_time: float | None = None
    for member, line in lines:
        if member != current_member:
            current_member = member
            decoder.reset()
        try:
            obj = _loads_line(line)
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


def _gpu(written: Any, before: tuple[GpuSample, ...], i: int) -> GpuSample:
    """A GPU as written: whole, or as the values that changed since the earlier reading."""
    changed = written.get("changed")
    if changed is None:
        return GpuSample.from_dict(written)
    old = before[i]  # IndexError when there is no earlier reading: a bad file
    values = dict(old.values)
    if not changed.keys() <= values.keys():
        raise ValueError("a GPU value that was not read before")
    for k, v in changed.items():
        values[k] = v if v.__class__ is float else _decode_float(v)
    return GpuSample(index=old.index, name=old.name, uuid=old.uuid, source=old.source, values=values,
                     errors=old.errors, lost=old.lost, throttle_reasons=old.throttle_reasons,
                     processes=old.processes, compute_capability=old.compute_capability, mig_mode=old.mig_mode)


def _values_against(written: Any, before: dict[str, float] | None) -> dict[str, float]:
    """Counters or gauges as written by _against."""
    if written.__class__ is list:
        if len(before) != len(written):  # TypeError when there is no earlier reading: a bad file
            raise ValueError("values do not match the engine's earlier reading")
        return dict(zip(before, [v if v.__class__ is float else _decode_float(v) for v in written]))
    if written == SAME:
        if before is None:
            raise ValueError("\"same\" with no earlier reading")
        return before
    return {k: v if v.__class__ is float else _decode_float(v) for k, v in written.items()}


class _SnapshotDecoderV2(_SnapshotDecoderV1):
    """Format 2: format 1, plus engines written against their previous reading in the member and
    histograms as compact lists against their bucket bounds (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._engines: dict[tuple[str, str, Any], EngineSample] = {}
        self._layouts: dict[tuple[Any, str], tuple[float, ...]] = {}
        # url → (the "speculation" entry as written, its reading): it is the same on almost every line
        self._speculation: dict[str, tuple[Any, Any]] = {}

    def reset(self) -> None:
        super().reset()
        self._engines = {}
        self._layouts = {}
        self._speculation = {}

    def decode(self, obj: Any) -> Snapshot:
        if not isinstance(obj, dict) or obj.get("kind") != SNAPSHOT_KIND:
            raise SnapshotFormatError("a line that is not a Snapshot")
        try:
            previous = self._previous
            out = []
            for name, decode in (("targets", self._target), ("gpus", None), ("sources", SourceStatus.from_dict)):
                raw = obj.get(name, ())
                if raw == SAME:
                    entries = previous[name]  # KeyError when there is no previous Snapshot: a bad file
                else:
                    before = previous.get(name, ())
                    # IndexError when a "same" points nowhere: a bad file
                    entries = tuple([before[i] if e == SAME else decode(e) if decode is not None
                                     else _gpu(e, before, i) for i, e in enumerate(raw)])
                previous[name] = entries
                out.append(entries)
            return Snapshot(time=float(obj["time"]), targets=out[0], gpus=out[1], sources=out[2])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
            raise SnapshotFormatError(f"malformed snapshot: {exc!r}") from None

    def _target(self, d: dict[str, Any]) -> TargetSample:
        url = str(d["url"])
        return TargetSample(
            url=url,
            state=str(d["state"]),
            message=str(d.get("message", "")),
            version=d.get("version"),
            engines=tuple([self._engine(url, e) for e in d.get("engines", ())]),
            process_start_time=d.get("process_start_time"),
            scrape_seconds=d.get("scrape_seconds"),
            payload_bytes=d.get("payload_bytes"),
            speculation=self._speculation_of(url, d.get("speculation")),
            engine=None if d.get("engine") is None else str(d["engine"]),
        )

    def _speculation_of(self, url: str, written: Any) -> Any:
        before = self._speculation.get(url)
        if before is not None and before[0] == written:
            return before[1]
        config = speculation_from_dict(written)
        self._speculation[url] = (written, config)
        return config

    def _engine(self, url: str, d: dict[str, Any]) -> EngineSample:
        engine, model_name = str(d["engine"]), d.get("model_name")
        key = (url, engine, model_name)
        before = self._engines.get(key)
        # AttributeError below when there is no earlier reading to refer to: a bad file
        counters = _values_against(d.get("counters", {}), before.counters if before is not None else None)
        gauges = _values_against(d.get("gauges", {}), before.gauges if before is not None else None)
        histograms = {}
        layouts = self._layouts
        written = d.get("histograms", {})
        if written.__class__ is list:  # the families of the earlier reading, in its order
            names = before.histograms
            if len(names) != len(written):
                raise ValueError("histograms do not match the engine's earlier reading")
            written = zip(names, written)
        else:
            written = written.items()
        for name, h in written:
            if h.__class__ is list:
                bounds = layouts[key, name]  # KeyError when no bounds were written: a bad file
            elif h == SAME:
                histograms[name] = before.histograms[name]
                continue
            elif "le" in h:
                bounds = layouts[key, name] = tuple([le if le.__class__ is float else _decode_float(le) for le in h["le"]])
                h = h["h"]
            else:
                histograms[name] = Histogram.from_dict(h)  # written whole, as in format 1
                continue
            # [sum, count or null (= the last bucket's), cumulative counts...]: counts not written
            # repeat the last one written
            counts = [c if c.__class__ is float else float(c) for c in h[2:]]
            missing = len(bounds) - len(counts)
            if missing > 0:
                counts += [counts[-1]] * missing  # IndexError when none was written: a bad file
            elif missing < 0:
                raise ValueError("more bucket counts than bucket bounds")
            count = h[1]
            histograms[name] = Histogram(tuple(zip(bounds, counts)), float(h[0]),
                                         counts[-1] if count is None else float(count))
        sample = EngineSample(
            engine=engine,
            model_name=model_name,
            counters=counters,
            gauges=gauges,
            histograms=histograms,
            accepted_per_position=tuple([v if v.__class__ is float else float(v)
                                         for v in d.get("accepted_per_position", ())]),
        )
        self._engines[key] = sample
        return sample


def _read_v2(path: Path, lines: Iterator[tuple[int, bytes]], header: RecordingHeader,
             warnings: list[str]) -> Iterator[Snapshot]:
    """Format version 2: format 1's layout, with engines and histograms written compactly."""
    return _read_v1(path, lines, header, warnings, _SnapshotDecoderV2())


_READERS: dict[int, Callable[[Path, Iterator[tuple[int, bytes]], RecordingHeader, list[str]], Iterator[Snapshot]]] = {
    1: _read_v1,
    2: _read_v2,
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
