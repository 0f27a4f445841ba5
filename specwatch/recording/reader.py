"""Reading a recording, up to any damage, through one reader per released format version."""

from __future__ import annotations

import bisect
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from specwatch import __version__
from specwatch.recording.format import (
    HEADER_KIND,
    SAME,
    SNAPSHOT_KIND,
    Recording,
    RecordingError,
    RecordingHeader,
    decode_float,
    format_time,
)
from specwatch.recording.lines import iter_lines
from specwatch.telemetry.snapshot import (
    SNAPSHOT_VERSION,
    EngineSample,
    GpuSample,
    Histogram,
    Snapshot,
    SnapshotFormatError,
    SourceStatus,
    ParallelLayout,
    TargetSample,
    server_word_from_dict,
    workers_from_dict,
    speculation_from_dict,
    token_budget_from_dict,
)

__all__ = [
    "RecordingIndex",
    "index_recording",
    "iter_lines",
    "open_snapshots",
    "read_recording",
]


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

try:
    # A recording is 86 400 lines a day: orjson parses one in a sixth of the stdlib's time, which was
    # most of a headless replay's reading. It reads strict JSON into the same values (floats
    # correctly rounded, as the stdlib's); what it refuses (NaN, lone surrogates, bad UTF-8, a line
    # that is not one value) goes through the stdlib below, which accepts it or says what is wrong.
    # One difference: an integer beyond 64 bits comes back as the nearest float, not as an int. No
    # recorder writes one (counters are floats; indices, pids and byte counts fit), and the reader
    # passes numbers through float() (the same float either way) or int() (inf or a huge int alike
    # make a GPU index no collector gives).
    from orjson import loads as _fast_loads
except ImportError:  # a platform without its wheel: the stdlib alone
    _fast_loads = None


def _loads_line(line: bytes) -> Any:
    """json.loads(line), without its per-call overhead for the lines the writer makes (one object,
    UTF-8, no surrounding whitespace). Anything else, errors included, goes through json.loads."""
    if line[:1] == b"{":
        try:
            if _fast_loads is not None:
                return _fast_loads(line)
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


def _slots_maker(cls: type, fields: tuple[str, ...] | None = None) -> Callable[..., Any]:
    """cls(*fields), in the dataclass's field order (or `fields`' own), set through its slots: a
    frozen dataclass's __init__ sets each field through object.__setattr__, which costs twice as
    much. A line of an 8-GPU node makes a dozen such objects (86 400 lines a day); the fields are
    the dataclass's own, so a field added later is set too (and one not given fails at once)."""
    names = tuple(cls.__dataclass_fields__) if fields is None else fields
    # a slot may be a base class's (a Histogram's sum under _WrittenHistogram)
    setters = tuple(inspect.getattr_static(cls, f).__set__ for f in names)
    count = len(setters)

    def make(*values: Any) -> Any:
        if len(values) != count:
            raise TypeError(f"{cls.__name__} takes {count} fields, {len(values)} given")
        obj = _new_object(cls)
        for set_, value in zip(setters, values):
            set_(obj, value)
        return obj

    return make


_new_object = object.__new__
_sum = sum
_make_target = _slots_maker(TargetSample)
_make_engine = _slots_maker(EngineSample)
_make_snapshot = _slots_maker(Snapshot)

# A GpuSample with another `values`: 8 GPUs a line, most written as the one value that changed (the
# energy counter): the other fields are copied through their slots.
_GPU_KEPT = tuple((GpuSample.__dict__[f].__get__, GpuSample.__dict__[f].__set__)
                  for f in GpuSample.__dataclass_fields__ if f != "values")
_GPU_SET_VALUES = GpuSample.__dict__["values"].__set__


def _gpu_with_values(old: GpuSample, values: dict[str, float]) -> GpuSample:
    sample = _new_object(GpuSample)
    for get, set_ in _GPU_KEPT:
        set_(sample, get(old))
    _GPU_SET_VALUES(sample, values)
    return sample


def _gpu_readings(written: Any, before: tuple[tuple[GpuSample, ...], tuple[dict[str, float] | None, ...]],
                  ) -> tuple[tuple[GpuSample, ...], tuple[dict[str, float] | None, ...]]:
    """The GPUs of a line as written (each whole, "same", or the values that changed since the
    earlier reading), as each GPU's last reading written whole and what changed since (None when
    nothing did): the GpuSamples, and their values whole, are made when the Snapshot's `gpus` are
    first read (see _ReadSnapshot). Keeping only the changes: a GPU's line is its energy counter
    alone, and copying all of its values on every line (eight GPUs, 86 400 lines a day, while a
    headless replay reads the GPUs of one line in five) was a fifth of reading a line."""
    bases, changes = before
    out_bases: list[GpuSample] = []
    out_changes: list[dict[str, float] | None] = []
    for i, e in enumerate(written):
        if e == SAME:
            base, since = bases[i], changes[i]  # IndexError when a "same" points nowhere: a bad file
        else:
            changed = e.get("changed")
            if changed is None:
                base = GpuSample.from_dict(e)
                since = None
            else:
                base = bases[i]  # IndexError when there is no earlier reading: a bad file
                if not changed.keys() <= base.values.keys():
                    raise ValueError("a GPU value that was not read before")
                for v in changed.values():
                    if v.__class__ is not float:  # text ("NaN") as written, or a number no recorder wrote
                        changed = {k: v if v.__class__ is float else decode_float(v) for k, v in changed.items()}
                        break
                earlier = changes[i]
                since = changed if earlier is None else {**earlier, **changed}
        out_bases.append(base)
        out_changes.append(since)
    return tuple(out_bases), tuple(out_changes)


_SNAPSHOT_GPUS = Snapshot.__dict__["gpus"]  # the dataclass's slot, under the property below


class _ReadSnapshot(Snapshot):
    """A Snapshot of a format-2 line whose GPUs changed since the line before: its GpuSamples are
    made when `gpus` is first read. Eight GPUs a line and 86 400 lines a day, while a headless
    replay reads the GPUs of one line in five (at the advisor's evaluations): making them all was a
    third of reading a line. Equal to, hashed, shown and copied as the Snapshot it stands for."""

    __slots__ = ("_gpu_source",)

    def __init__(self, time: float, targets: tuple[TargetSample, ...] = (), gpus: tuple[GpuSample, ...] = (),
                 sources: tuple[SourceStatus, ...] = (), version: int = SNAPSHOT_VERSION) -> None:
        # Snapshot's own fields, all read (dataclasses.replace() makes one of these from another)
        _make_snapshot_fields(self, time, targets, gpus, sources, version)
        _READ_SNAPSHOT_SOURCE(self, None)

    @property
    def gpus(self) -> tuple[GpuSample, ...]:  # type: ignore[override]
        try:
            return _SNAPSHOT_GPUS.__get__(self)
        except AttributeError:
            pass
        bases, changes = self._gpu_source
        gpus = tuple([base if since is None else _gpu_with_values(base, {**base.values, **since})
                      for base, since in zip(bases, changes)])
        _SNAPSHOT_GPUS.__set__(self, gpus)
        return gpus

    def _fields(self) -> tuple[Any, ...]:
        return self.time, self.targets, self.gpus, self.sources, self.version

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return self._fields() == (other.time, other.targets, other.gpus, other.sources, other.version)

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"Snapshot(time={self.time!r}, targets={self.targets!r}, gpus={self.gpus!r}, "
                f"sources={self.sources!r}, version={self.version!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return Snapshot, self._fields()


_READ_SNAPSHOT_SOURCE = _ReadSnapshot.__dict__["_gpu_source"].__set__
_SNAPSHOT_SETTERS = tuple(Snapshot.__dict__[f].__set__ for f in Snapshot.__dataclass_fields__)


def _make_snapshot_fields(snapshot: Snapshot, *values: Any) -> None:
    for set_, value in zip(_SNAPSHOT_SETTERS, values, strict=True):
        set_(snapshot, value)


# _ReadSnapshot(time, targets, sources, version, gpu source), its GPUs left unset (made when read)
_make_read_snapshot = _slots_maker(_ReadSnapshot, ("time", "targets", "sources", "version", "_gpu_source"))


_HISTOGRAM_BUCKETS = Histogram.__dict__["buckets"]  # the dataclass's slot, under the property below


class _WrittenHistogram(Histogram):
    """A Histogram as a format-2 line writes it (counts against the bucket bounds of its layout):
    the (bound, count) pairs are made when first read. Seven histograms a line, 86 400 lines a day,
    and a Window reads the buckets of few of them (the first and last reading of a window at each
    evaluation), while pairing them was a fifth of reading a line. Equal to, hashed, shown and
    copied as the Histogram it stands for."""

    __slots__ = ("_bounds", "_counts")

    def __init__(self, bounds: tuple[float, ...], counts: list[float], sum: float, count: float) -> None:
        set_ = object.__setattr__
        set_(self, "_bounds", bounds)
        set_(self, "_counts", counts)  # as many as bounds, or fewer: the rest repeat the last
        set_(self, "sum", sum)
        set_(self, "count", count)

    @property
    def buckets(self) -> tuple[tuple[float, float], ...]:  # type: ignore[override]
        try:
            return _HISTOGRAM_BUCKETS.__get__(self)
        except AttributeError:
            pass
        bounds = self._bounds
        counts = [c if c.__class__ is float else float(c) for c in self._counts]
        missing = len(bounds) - len(counts)
        buckets = tuple(zip(bounds, counts + [counts[-1]] * missing if missing else counts))
        _HISTOGRAM_BUCKETS.__set__(self, buckets)
        return buckets

    @property
    def bucket_count(self) -> int:
        return len(self._bounds)  # the counts not written repeat the last: one a bound

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (self.buckets, self.sum, self.count) == (other.buckets, other.sum, other.count)

    def __hash__(self) -> int:
        return hash((self.buckets, self.sum, self.count))

    def __repr__(self) -> str:
        return f"Histogram(buckets={self.buckets!r}, sum={self.sum!r}, count={self.count!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Histogram, (self.buckets, self.sum, self.count)


# _WrittenHistogram's setters, in its __init__'s order (seven histograms a line, made in line)
_WRITTEN_HISTOGRAM_SETTERS = tuple(inspect.getattr_static(_WrittenHistogram, f).__set__
                                   for f in ("_bounds", "_counts", "sum", "count"))


def _values_against(written: Any, before: dict[str, float] | None) -> dict[str, float]:
    """Counters or gauges as written by against."""
    if written.__class__ is list:
        if len(before) != len(written):  # TypeError when there is no earlier reading: a bad file
            raise ValueError("values do not match the engine's earlier reading")
        # float() is decode_float, in C: a float as written comes back as itself, text ("NaN") as its float
        return dict(zip(before, map(float, written)))
    if written == SAME:
        if before is None:
            raise ValueError("\"same\" with no earlier reading")
        return before
    return {k: v if v.__class__ is float else decode_float(v) for k, v in written.items()}


class _SnapshotDecoderV2(_SnapshotDecoderV1):
    """Format 2: format 1, plus engines written against their previous reading in the member and
    histograms as compact lists against their bucket bounds (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._engines: dict[tuple[str, str, Any], EngineSample] = {}
        # engine key → histogram name → its bucket bounds
        self._layouts: dict[tuple[str, str, Any], dict[str, tuple[float, ...]]] = {}
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
                elif decode is None:
                    entries = _gpu_readings(raw, previous.get(name, ((), ())))
                else:
                    before = previous.get(name, ())
                    # IndexError when a "same" points nowhere: a bad file
                    entries = tuple([before[i] if e == SAME else decode(e) for i, e in enumerate(raw)])
                previous[name] = entries
                out.append(entries)
            time = float(obj["time"])
            bases, changes = out[1]
            for since in changes:
                if since is not None:
                    return _make_read_snapshot(time, out[0], out[2], SNAPSHOT_VERSION, out[1])
            return _make_snapshot(time, out[0], bases, out[2], SNAPSHOT_VERSION)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
            raise SnapshotFormatError(f"malformed snapshot: {exc!r}") from None

    def _target(self, d: dict[str, Any]) -> TargetSample:
        url = str(d["url"])
        engine = d.get("engine")
        return _make_target(  # TargetSample's fields, in order
            url,
            str(d["state"]),
            str(d.get("message", "")),
            d.get("version"),
            tuple([self._engine(url, e) for e in d.get("engines", ())]),
            d.get("process_start_time"),
            d.get("scrape_seconds"),
            d.get("payload_bytes"),
            self._speculation_of(url, d.get("speculation")),
            None if engine is None else str(engine),
            token_budget_from_dict(d.get("token_budget")),  # absent before it was read: None
            server_word_from_dict(d.get("device")),
            server_word_from_dict(d.get("weights")),
            server_word_from_dict(d.get("deployment")),
            server_word_from_dict(d.get("role")),
            server_word_from_dict(d.get("unjudged")),
            workers_from_dict(d.get("workers")),
            ParallelLayout.from_dict(d.get("parallel")),  # absent before it was read: None
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
        layouts = self._layouts.get(key)
        if layouts is None:
            layouts = self._layouts[key] = {}
        new, written_histogram = _new_object, _WrittenHistogram
        set_bounds, set_counts, set_sum, set_count = _WRITTEN_HISTOGRAM_SETTERS
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
                bounds = layouts[name]  # KeyError when no bounds were written: a bad file
            elif h == SAME:
                histograms[name] = before.histograms[name]
                continue
            elif "le" in h:
                bounds = layouts[name] = tuple([le if le.__class__ is float else decode_float(le) for le in h["le"]])
                h = h["h"]
            else:
                histograms[name] = Histogram.from_dict(h)  # written whole, as in format 1
                continue
            # [sum, count or null (= the last bucket's), cumulative counts...]: counts not written
            # repeat the last one written. They are floats as written: summing them (in C) checks
            # that each is a number, and _WrittenHistogram.buckets makes floats of any other
            # (an int, from a file no recorder wrote) when read; a count written as text ("NaN")
            # fails the sum and is read here, as is anything that is no count (a bad file).
            counts = h[2:]
            try:
                _sum(counts, 0.0)
            except TypeError:
                counts = [c if c.__class__ is float else float(c) for c in counts]
            missing = len(bounds) - len(counts)
            if missing > 0:
                counts[-1]  # noqa: B018 - IndexError when none was written: a bad file
            elif missing < 0:
                raise ValueError("more bucket counts than bucket bounds")
            count, total = h[1], h[0]
            if count is None:
                count = counts[-1]  # IndexError when no bucket was written either: a bad file
            if count.__class__ is not float:
                count = float(count)
            # _WrittenHistogram(bounds, counts, sum, count), set through its slots in line: a call
            # less per histogram
            histogram = new(written_histogram)
            set_bounds(histogram, bounds)
            set_counts(histogram, counts)
            set_sum(histogram, total if total.__class__ is float else float(total))
            set_count(histogram, count)
            histograms[name] = histogram
        sample = _make_engine(  # EngineSample's fields, in order
            engine,
            model_name,
            counters,
            gauges,
            histograms,
            tuple(map(float, d.get("accepted_per_position", ()))),
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


def open_snapshots(path: str | os.PathLike[str], warnings: list[str] | None = None, start: int = 0,
                   ) -> tuple[RecordingHeader, Iterator[Snapshot]]:
    """The header, and a lazy iterator over the Snapshots: for long recordings read as a stream.

    `start` is the byte offset of a member to begin at (RecordingIndex.offsets): every member
    begins with a header and refers to nothing before it.

    Raises RecordingError when the file is not a readable recording at all; damage found later is
    appended to `warnings` and ends the iteration.
    """
    p = Path(path)
    warnings = warnings if warnings is not None else []
    lines = iter_lines(p, warnings, start)
    try:
        first = next(lines, None)
    except EOFError:
        first = None
    if first is None:
        if warnings:
            # the damage that ended the reading, without what it says of the replay (there is none)
            cause = warnings[-1].split(": replayed", 1)[0].removeprefix(f"{p} ")
            raise RecordingError(f"{p} was cut off before its header ended, so nothing in it can be replayed "
                                 f"({p.stat().st_size} bytes; it {cause})")
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


@dataclass(frozen=True)
class RecordingIndex:
    """Where each member of a recording begins, and the data time of its first Snapshot: enough to
    start reading at any time without decoding what comes before it.

    `offsets[i]` is the byte offset of the i-th member holding Snapshots, `times[i]` its first
    Snapshot's time; `end` is the last Snapshot's time and `count` the number of Snapshots."""

    offsets: tuple[int, ...]
    times: tuple[float, ...]
    end: float | None
    count: int

    @property
    def start(self) -> float | None:
        return self.times[0] if self.times else None

    def member_at(self, data_time: float) -> int:
        """The byte offset of the member that holds the first Snapshot at or after `data_time`
        (the last member starting at or before it)."""
        i = max(0, bisect.bisect_right(self.times, data_time) - 1)
        return self.offsets[i] if self.offsets else 0


def _snapshot_time(line: bytes) -> float | None:
    try:
        obj = _loads_line(line)
        return float(obj["time"]) if obj.get("kind") == SNAPSHOT_KIND else None
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError, RecursionError):
        return None


def _last_time(line: bytes, before: float | None) -> float | None:
    t = _snapshot_time(line) if line else None
    return before if t is None else t


def index_recording(path: str | os.PathLike[str], warnings: list[str] | None = None) -> RecordingIndex:
    """Index a recording by decompressing it once, decoding only the first and last Snapshot line of
    each member: the members' offsets and first times, the last time and the count. Memory stays
    bounded by one read chunk.

    Raises RecordingError as open_snapshots does; damage found on the way becomes `warnings`, as the
    reader words it, and ends the index where the reader would stop."""
    p = Path(path)
    warnings = warnings if warnings is not None else []
    open_snapshots(p, [])  # says plainly what is wrong with a file that is no recording
    member_offsets: list[int] = []
    offsets: list[int] = []
    times: list[float] = []
    count = 0
    end: float | None = None
    current = -1
    last_line = b""
    for member, line in iter_lines(p, warnings, member_offsets=member_offsets):
        if member != current:
            end = _last_time(last_line, end)
            current, last_line = member, b""
            continue  # a member's first line is its header
        if not last_line:
            t = _snapshot_time(line)
            if t is not None:
                offsets.append(member_offsets[member])
                times.append(t)
        last_line = line
        count += 1
    end = _last_time(last_line, end)
    return RecordingIndex(tuple(offsets), tuple(times), end, count)
