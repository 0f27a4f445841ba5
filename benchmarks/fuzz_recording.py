"""Fuzz the recording reader with atheris (coverage-guided), bounded by inputs or time.

    .venv/bin/python benchmarks/fuzz_recording.py [-atheris_runs=200000] [--seconds 120] [libFuzzer flags]

The first byte of each input picks how the rest becomes a file: as raw bytes (gzip framing, magic,
members), or gzip-compressed (so the fuzzer works on the JSON lines inside: headers, Snapshots and
"same" references). read_recording must return a Recording (perhaps with warnings) or raise
RecordingError; anything else is a crash, counted and saved under $SPECWATCH_FUZZ_DIR (default
/tmp/specwatch-fuzz). Seeds: tests/corpus/recordings, the released format-1 file in tests/data, and
their decompressed text. Without atheris, a random mutation loop over the same seeds stands in.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_common import parse_own_flags  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = Path(os.environ.get("SPECWATCH_FUZZ_DIR", Path(tempfile.gettempdir()) / "specwatch-fuzz")) / "recording"

try:
    import atheris
except ImportError:  # pragma: no cover - the fallback
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["specwatch"]):
        from specwatch.recording import RecordingError, read_recording
else:
    from specwatch.recording import RecordingError, read_recording

STATS = {"inputs": 0, "crashes": 0, "read": 0, "with_warnings": 0, "refused": 0, "snapshots": 0}
LIMITS = {"runs": 200_000, "seconds": 120.0}
STARTED = time.monotonic()
WORK = Path(tempfile.mkdtemp(prefix="specwatch-fuzz-rec-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
TARGET = WORK / "input.swrec"


def _save(data: bytes, why: str) -> None:
    FINDINGS.mkdir(parents=True, exist_ok=True)
    path = FINDINGS / f"crash-{hashlib.sha1(data).hexdigest()[:12]}"
    path.write_bytes(data)
    print(f"[fuzz_recording] crash: {why} -> {path}", file=sys.stderr, flush=True)


def _report_and_exit() -> None:
    took = time.monotonic() - STARTED
    print(f"[fuzz_recording] inputs tried {STATS['inputs']} in {took:.0f} s; read {STATS['read']} "
          f"({STATS['with_warnings']} with warnings, {STATS['snapshots']} Snapshots in all), refused with "
          f"RecordingError {STATS['refused']}; crashes {STATS['crashes']}", flush=True)
    os._exit(1 if STATS["crashes"] else 0)


def test_one_input(data: bytes) -> None:
    STATS["inputs"] += 1
    body = data[1:]
    mode = data[0] % 3 if data else 0
    if mode == 1:
        body = gzip.compress(body, compresslevel=1, mtime=0)
    elif mode == 2:  # two members: damage in the second must not change the first
        half = len(body) // 2
        body = gzip.compress(body[:half], 1, mtime=0) + gzip.compress(body[half:], 1, mtime=0)
    TARGET.write_bytes(body)
    try:
        rec = read_recording(TARGET)
        STATS["read"] += 1
        STATS["snapshots"] += len(rec.snapshots)
        STATS["with_warnings"] += bool(rec.warnings)
    except RecordingError:
        STATS["refused"] += 1
    except Exception as exc:  # noqa: BLE001 - this is what the fuzzer looks for
        STATS["crashes"] += 1
        _save(data, f"{type(exc).__name__}: {exc}")
    if STATS["inputs"] >= LIMITS["runs"] or time.monotonic() - STARTED >= LIMITS["seconds"]:
        _report_and_exit()


def _seeds() -> list[bytes]:
    files = sorted((ROOT / "tests" / "corpus" / "recordings").iterdir()) + sorted((ROOT / "tests" / "data").glob("*.swrec"))
    seeds = []
    for p in files:
        raw = p.read_bytes()[:65536]
        seeds.append(b"\x00" + raw)
        try:
            seeds.append(b"\x01" + zlib.decompressobj(31).decompress(raw)[:65536])
        except zlib.error:
            pass
    return seeds


def main() -> None:
    argv = parse_own_flags(sys.argv, LIMITS)
    if atheris is None:
        print("[fuzz_recording] atheris is not installed: random mutation fallback", file=sys.stderr)
        rng = random.Random(0)
        seeds = _seeds()
        while True:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 8)):
                i = rng.randint(1, max(1, len(data)))
                data[i:i + rng.randint(0, 8)] = rng.choice([b'"same"', b"1e999", b"[", b"{}", b"\n", b"null",
                                                           bytes(rng.randrange(256) for _ in range(4))])
            test_one_input(bytes(data))
    seed_dir = WORK / "corpus"
    seed_dir.mkdir()
    for i, seed in enumerate(_seeds()):
        (seed_dir / f"seed-{i:03d}").write_bytes(seed)
    atheris.Setup(argv + [str(seed_dir), "-max_len=65536"], test_one_input)
    atheris.Fuzz()
    _report_and_exit()


if __name__ == "__main__":
    main()
