"""The recording format's vocabulary: versions, kinds, the header, errors and the float spelling
(the layout is described in specwatch.recording)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch import __version__
from specwatch.telemetry.snapshot import SNAPSHOT_VERSION, Snapshot, decode_float, encode_float

__all__ = [
    "format_time",
    "against",
    "FORMAT_VERSION",
    "HEADER_KIND",
    "SNAPSHOT_KIND",
    "SAME",
    "DATA_KINDS",
    "FILE_SUFFIX",
    "DEFAULT_FLUSH_INTERVAL_S",
    "DEFAULT_MEMBER_SECONDS",
    "GZIP_MAGIC",
    "READ_CHUNK",
    "MAX_HEADER_BYTES",
    "encode_float",
    "decode_float",
    "RecordingError",
    "RecordingHeader",
    "Recording",
]


FORMAT_VERSION = 2
HEADER_KIND = "specwatch-recording"
SNAPSHOT_KIND = "snapshot"
SAME = "same"
DATA_KINDS = ("real", "synthetic")

FILE_SUFFIX = ".swrec"
DEFAULT_FLUSH_INTERVAL_S = 1.0
DEFAULT_MEMBER_SECONDS = 600.0
GZIP_MAGIC = b"\x1f\x8b"
READ_CHUNK = 1 << 20
# A header line longer than this is not a header: stops a foreign gzip file (a compressed log, a
# tarball) from being read to its end in search of a newline.
MAX_HEADER_BYTES = 1 << 20


# JSON has no NaN or infinities: they are written as the strings Snapshot.to_dict uses ("NaN",
# "+Inf", "-Inf"), which float() reads back (test_recording checks the two spellings agree)
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
    # model, tp, max_num_batched_tokens, ...): a replay uses them unless told otherwise, so it judges
    # as the live run did.
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

def against(values: dict[str, float], before: dict[str, float] | None) -> Any:
    """Counters or gauges against the engine's previous reading: "same", the values alone when the
    names are those of before in the same order, else the whole object."""
    if before is not None:
        if before == values:
            return SAME
        if list(before) == list(values):
            return [encode_float(v) for v in values.values()]
    return {k: encode_float(v) for k, v in values.items()}

def format_time(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 10)}"
