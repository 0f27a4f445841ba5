"""NVML calls and collector time per poll for 8 simulated GPUs (through the test double).

The time measured is the collector's own Python overhead: the double answers instantly, while a
real driver spends microseconds to milliseconds per call, so on hardware the call count is what
matters. Run: python benchmarks/bench_nvml.py [--polls N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from nvml_double import FakeClock, FakeNvml, ampere_gpu, hopper_gpu  # noqa: E402

from specwatch.collectors.nvml import NvmlCollector  # noqa: E402

GPUS = 8


def run(label: str, make_gpus, polls: int) -> tuple[str, int, float, float, float, float, Counter[str]]:
    clock = FakeClock()
    nvml = FakeNvml(make_gpus(), clock=clock)
    collector = NvmlCollector(nvml, clock=clock, proc_root="/nonexistent")
    for i, gpu in enumerate(nvml.gpus):
        gpu.processes = [(10_000 + i, 70 * 2**30)]
    collector.poll()  # init, static reads, GPM warm-up
    first_poll_calls = nvml.total_calls
    clock.advance(1.0)
    before = Counter(nvml.calls)
    times = []
    for _ in range(polls):
        start = time.perf_counter()
        collector.poll()
        times.append(time.perf_counter() - start)
        clock.advance(1.0)
    steady = Counter(nvml.calls)
    steady.subtract(before)
    per_poll = sum(steady.values()) / polls
    collector.close()
    times_ms = sorted(t * 1e3 for t in times)
    return (label, first_poll_calls, per_poll, statistics.mean(times_ms), times_ms[len(times_ms) // 2],
            times_ms[int(len(times_ms) * 0.99) - 1], steady)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=300)
    args = parser.parse_args()
    rows = [
        run("8x H100 (GPM, NVLink)", lambda: [hopper_gpu(i) for i in range(GPUS)], args.polls),
        run("8x A100 (no GPM, NVLink)", lambda: [ampere_gpu(i) for i in range(GPUS)], args.polls),
        run("8x L4-like (no GPM/NVLink, old PCIe)",
            lambda: [ampere_gpu(i, nvlink_links=0, pcie_counters_supported=False, compute_capability=(8, 9))
                     for i in range(GPUS)], args.polls),
    ]
    print(f"{GPUS} simulated GPUs, {args.polls} polls each; times are collector overhead only\n")
    header = f"{'devices':38} {'1st poll calls':>14} {'calls/poll':>10} {'per GPU':>8} {'mean ms':>8} {'p50 ms':>7} {'p99 ms':>7}"
    print(header)
    print("-" * len(header))
    for label, first, per_poll, mean, p50, p99, _ in rows:
        print(f"{label:38} {first:14d} {per_poll:10.1f} {per_poll / GPUS:8.1f} {mean:8.3f} {p50:7.3f} {p99:7.3f}")
    print("\nsteady-state calls per poll, per GPU (8x H100):")
    for name, count in sorted(rows[0][6].items(), key=lambda kv: (-kv[1], kv[0])):
        if count == 0:
            continue  # read once at start-up
        print(f"  {name:45} {count / args.polls / GPUS:.1f}")


if __name__ == "__main__":
    main()
