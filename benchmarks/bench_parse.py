"""The scrape path's parse against a full prometheus_client parse, measured in one run.

    python benchmarks/bench_parse.py [--repeat N]

Payloads: the real vLLM 0.32 capture (one engine, n-gram k=4), and an 8-engine payload built from it
the way vLLM exposes data-parallel engines. Both sides are timed alternately, in the same process,
so machine noise hits them alike; the ratios are the figures to read. "scrape path" is the steady
state (label texts seen on an earlier scrape); "first scrape" clears that cache every time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from payloads import NGRAM_K4, multi_engine_payload, read  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from specwatch.telemetry import exposition  # noqa: E402
from specwatch.telemetry.exposition import parse_payload  # noqa: E402


def full_parse(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def scrape_parse(text: str) -> int:
    return len(parse_payload(text).engines)


def cold_scrape_parse(text: str) -> int:
    """The first scrape of a server: no label text seen before."""
    exposition._LABEL_CACHE.clear()
    return scrape_parse(text)


def best_of(fn, text: str, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)
    payloads = {"1 engine (real, 57 KB)": read(NGRAM_K4), "8 engines (built, ~400 KB)": multi_engine_payload(8)}
    print(f"{'payload':28} {'bytes':>8} {'full parse':>12} {'scrape path':>12} {'ratio':>7} "
          f"{'first scrape':>13} {'ratio':>7}")
    for name, text in payloads.items():
        # interleave the two so drift in machine load affects both
        full, fast, cold = [], [], []
        for _ in range(args.repeat):
            full.append(best_of(full_parse, text, 1)[0])
            cold.append(best_of(cold_scrape_parse, text, 1)[0])
            fast.append(best_of(scrape_parse, text, 1)[0])
        f, s, c = statistics.median(full), statistics.median(fast), statistics.median(cold)
        print(f"{name:28} {len(text.encode()):>8} {f * 1e3:>9.2f} ms {s * 1e3:>9.2f} ms {f / s:>6.1f}× "
              f"{c * 1e3:>10.2f} ms {f / c:>6.1f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
