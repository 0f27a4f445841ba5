"""Fuzz the /metrics reader with atheris (coverage-guided), bounded by inputs or time.

    .venv/bin/python benchmarks/fuzz_exposition.py [-atheris_runs=200000] [--seconds 120] [libFuzzer flags]

Each input is decoded as the scraper decodes a body (UTF-8, errors replaced) and read by
parse_payload. A crash is any exception other than ExpositionError; a mismatch is a payload that
prometheus_client parses whole where select_samples disagrees with it on a wanted sample. Both are
counted (and saved under $SPECWATCH_FUZZ_DIR, default /tmp/specwatch-fuzz), not fatal, so one run reports every figure. The
seed corpus is tests/corpus/metrics plus the real captures in tests/data. Without atheris, a random
mutation loop over the same seeds stands in.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_common import parse_own_flags  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# findings and libFuzzer's working corpus go outside the repository
FINDINGS = Path(os.environ.get("SPECWATCH_FUZZ_DIR", Path(tempfile.gettempdir()) / "specwatch-fuzz")) / "exposition"

try:
    import atheris
except ImportError:  # pragma: no cover - the fallback
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["specwatch"]):
        from specwatch.telemetry.exposition import ExpositionError, parse_payload, select_samples
else:
    from specwatch.telemetry.exposition import ExpositionError, parse_payload, select_samples

sys.path.insert(0, str(ROOT / "tests"))  # the test suite's prometheus_client oracle
from exposition_oracle import full_parse_samples, same_values, samples_by_series  # noqa: E402

STATS = {"inputs": 0, "crashes": 0, "mismatches": 0, "rejected": 0, "accepted": 0}
LIMITS = {"runs": 200_000, "seconds": 120.0}
STARTED = time.monotonic()


def _save(kind: str, data: bytes, why: str) -> None:
    FINDINGS.mkdir(parents=True, exist_ok=True)
    name = f"{kind}-{hashlib.sha1(data).hexdigest()[:12]}"
    (FINDINGS / name).write_bytes(data)
    print(f"[fuzz_exposition] {kind}: {why} -> {FINDINGS / name}", file=sys.stderr, flush=True)


def _report_and_exit() -> None:
    took = time.monotonic() - STARTED
    print(f"[fuzz_exposition] inputs tried {STATS['inputs']} in {took:.0f} s; accepted {STATS['accepted']}, "
          f"rejected with ExpositionError {STATS['rejected']}; crashes {STATS['crashes']}; "
          f"oracle mismatches {STATS['mismatches']}", flush=True)
    os._exit(1 if STATS["crashes"] or STATS["mismatches"] else 0)


def test_one_input(data: bytes) -> None:
    STATS["inputs"] += 1
    text = data.decode("utf-8", errors="replace")
    try:
        parse_payload(text)
        STATS["accepted"] += 1
    except ExpositionError:
        STATS["rejected"] += 1
    except Exception as exc:  # noqa: BLE001 - this is what the fuzzer looks for
        STATS["crashes"] += 1
        _save("crash", data, f"{type(exc).__name__}: {exc}")
    try:
        oracle = samples_by_series(full_parse_samples(text))
    except Exception:  # noqa: BLE001 - the oracle refuses the payload: nothing to compare
        oracle = None
    if oracle is not None:
        try:
            fast = samples_by_series(select_samples(text))
        except ExpositionError:
            fast = None
        if fast is None or not same_values(fast, oracle):
            STATS["mismatches"] += 1
            _save("mismatch", data, "select_samples differs from prometheus_client")
    if STATS["inputs"] >= LIMITS["runs"] or time.monotonic() - STARTED >= LIMITS["seconds"]:
        _report_and_exit()


def _seeds() -> list[bytes]:
    paths = sorted((ROOT / "tests" / "corpus" / "metrics").iterdir()) + sorted((ROOT / "tests" / "data").glob("*.prom")) \
        + sorted((ROOT / "tests" / "data").glob("*.metrics.txt"))
    return [p.read_bytes()[:65536] for p in paths if p.is_file()]


def main() -> None:
    argv = parse_own_flags(sys.argv, LIMITS)
    if atheris is None:
        print("[fuzz_exposition] atheris is not installed: random mutation fallback", file=sys.stderr)
        rng = random.Random(0)
        seeds = _seeds()
        while True:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 8)):
                if data and rng.random() < 0.5:
                    i = rng.randrange(len(data))
                    data[i:i + rng.randint(0, 8)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))
                else:
                    data[rng.randint(0, len(data)):0] = rng.choice([b"\\", b'"', b"\n", b"{", b"}", b"NaN", b" 1e309",
                                                                  b"\r", b"\x00", b"# TYPE ", b"_total"])
            test_one_input(bytes(data))
    seed_dir = FINDINGS.parent / "seeds-exposition"
    seed_dir.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(_seeds()):
        (seed_dir / f"seed-{i:03d}").write_bytes(seed)
    atheris.Setup(argv + [str(seed_dir), "-max_len=65536"], test_one_input)
    atheris.Fuzz()
    _report_and_exit()  # libFuzzer ended on its own (a -runs= limit)


if __name__ == "__main__":
    main()
