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

Reading is versioned: `_READERS` (specwatch.recording.reader) maps each released format version to its reader, and one file per
released version is kept in tests/data/ so that old recordings stay readable. Bad files (empty,
foreign, corrupt, truncated, from a newer specwatch) raise RecordingError, or become warnings when
some Snapshots could be read before the damage; never a traceback.
"""

from __future__ import annotations

from specwatch.recording.format import *  # noqa: F401,F403
from specwatch.recording.reader import *  # noqa: F401,F403
from specwatch.recording.writer import *  # noqa: F401,F403
