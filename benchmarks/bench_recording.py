"""The recording budget: a 24 h, 1 Hz recording of one node with 8 GPUs must take at most 50 MB
(issue 6), replay headless through the Window and the Advisor (the Monitor) in at most 5 s with a
peak memory under 200 MB, and a seek to any hour in the dashboard must take at most 0.5 s (issue 19).

    python benchmarks/bench_recording.py [--hours 24] [--evaluate-every 5] [--keep FILE]

Generates the telemetry with specwatch.collectors.synthetic (an 8× H100 node, Llama-3.1-70B at TP=8 as the
datasheet prior, n-gram k=4, the load ramping 1 → 256 → 1 every 20 minutes, with noise), writes it
with the recorder as a live recorder would (one flush per Snapshot: the worst case for size), then
times (a) reading the file back and (b) the headless replay: reading plus the Monitor, evaluating
every --evaluate-every seconds of data time, in wall time (the budget) and in this process's CPU
time (the same on an idle machine; on a busy one, the part that is specwatch's), (c) the streamed
replay's index (built on open) and a seek to the start of every hour through ReplaySource, (d)
the peak memory of a headless `specwatch replay` of the file in a child process, (e) the verdict
index the dashboard builds on open (one pass through a copy of the Monitor: its time, its changes
and the bytes its checkpoints take), and (f) the dashboard's seeks: to every hour as a paused
dashboard seeks (the source to a window before the hour, the window's readings through the
Monitor, then the reading at the hour), and a jump to every verdict change (restore the change's
checkpoint, seek, read that reading). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import copy
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from specwatch import perf
from specwatch.perf.hardware import lookup, lookup_model
from specwatch.advice.monitor import DEFAULT_EVALUATE_EVERY_S
from specwatch.recording import RecordingHeader, RecordingWriter, open_snapshots
from specwatch.commands.replay import replay_monitor
from specwatch.collectors.synthetic import SyntheticNode, generate, ramp
from specwatch.dashboard.verdict_index import build_verdict_index, monitor_template

BUDGET_BYTES = 50_000_000
BUDGET_REPLAY_S = 5.0
BUDGET_PEAK_MB = 200.0
BUDGET_SEEK_S = 0.5


class StepClock:
    """The writer's wall clock, one second per Snapshot: every write is flushed, as live at 1 Hz."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


DAY_GPUS = 8


def write_day(path: Path, hours: float, notes: str) -> Path:
    """The node's telemetry, `hours` long, written as a live recorder writes it (also the day whose
    verdicts tests/verdict_hashes.py digests)."""
    gpu, model = lookup("H100"), lookup_model("Llama-3.1-70B")
    node = SyntheticNode(step=perf.prior_for_model(gpu, model, tp=8).hinge(), gpus=DAY_GPUS,
                         per_position=(0.6, 0.4, 0.25, 0.15))
    cycle = ramp(1, 256, 35)  # 17 levels up and down, 35 s each: about 20 minutes
    load = [cycle[i % len(cycle)] for i in range(int(hours * 3600))]
    header = RecordingHeader(data="synthetic", notes=notes, interval_s=1.0,
                             advisor={"method": "ngram", "model": "Llama-3.1-70B", "tp": 8})
    with RecordingWriter(path, header, overwrite=True, clock=StepClock()) as writer:
        for snapshot in generate(node, load, seed=1):
            writer.write(snapshot)
    return path


def replay_split(path: Path, evaluate_every: float) -> dict[str, float]:
    """Where the headless replay's CPU goes, from one more replay with a CPU clock read around the
    Window's figures (Window.target) and the advisor's evaluation (Advisor._judge, which `update`
    and `assess` share), the rest of the Monitor (adding to the window, the shown verdict and the
    explanation of each change) and the reading being what is left. The
    clocks cost some time of their own: the parts' shares matter here, the replay_s above is the
    budget's figure."""
    from specwatch.advice.advisor import Advisor
    from specwatch.readings.window import Window

    spent = {"window_figures": 0.0, "advisor": 0.0}
    originals = {Window: Window.target, Advisor: Advisor._judge}

    def clocked(function: Any, part: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[part] += time.process_time() - started
        return run

    Window.target = clocked(Window.target, "window_figures")  # type: ignore[method-assign]
    Advisor._judge = clocked(Advisor._judge, "advisor")  # type: ignore[method-assign]
    try:
        header, snapshots = open_snapshots(path)
        monitor = replay_monitor(header, argparse.Namespace(evaluate_every=evaluate_every), changes_only=True)
        cpu = time.process_time()
        reading = 0.0
        iterator = iter(snapshots)
        while True:
            started = time.process_time()
            snapshot = next(iterator, None)
            reading += time.process_time() - started
            if snapshot is None:
                break
            monitor.ingest(snapshot)
        total = time.process_time() - cpu
    finally:
        Window.target, Advisor._judge = originals[Window], originals[Advisor]  # type: ignore[method-assign]
    rest = total - reading - spent["window_figures"] - spent["advisor"]
    return {"read": round(reading, 2), **{k: round(v, 2) for k, v in spent.items()},
            "monitor_rest": round(rest, 2), "total": round(total, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--evaluate-every", type=float, default=DEFAULT_EVALUATE_EVERY_S,
                        help="the Monitor's cadence in seconds of data time "
                             f"(default: the Monitor's, {DEFAULT_EVALUATE_EVERY_S:g}, as live)")
    parser.add_argument("--keep", type=Path, help="keep the recording at this path")
    args = parser.parse_args()
    seconds = int(args.hours * 3600)
    path = args.keep or Path(tempfile.mkdtemp(prefix="specwatch-bench-")) / "24h.swrec"
    t = time.perf_counter()
    write_day(path, args.hours, notes="benchmark")
    write_s = time.perf_counter() - t
    size = os.path.getsize(path)

    t, cpu = time.perf_counter(), time.process_time()
    read_header, snapshots = open_snapshots(path)
    count = sum(1 for _ in snapshots)
    read_s, read_cpu_s = time.perf_counter() - t, time.process_time() - cpu

    t, cpu = time.perf_counter(), time.process_time()
    read_header, snapshots = open_snapshots(path)
    # the Monitor `replay --headless` reads through: the verdict changes alone (evaluations that
    # change nothing are not explained)
    monitor = replay_monitor(read_header, args, changes_only=True)
    changes = 0
    for snapshot in snapshots:
        changes += len(monitor.ingest(snapshot))
    replay_s, replay_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    split = replay_split(path, args.evaluate_every)
    from specwatch.collectors.replay import ReplaySource

    t = time.perf_counter()
    source = ReplaySource(path, speed=100.0, paused=True)
    index_s = time.perf_counter() - t
    seeks = []
    for hour in range(int(args.hours) or 1):
        t = time.perf_counter()
        # the last second of a member (10 min each): every Snapshot of that member is decoded
        source.seek(source.start + hour * 3600 + 599)
        source.step()
        asyncio.run(source.read())
        seeks.append(time.perf_counter() - t)

    # a headless replay as a user runs it, alone in its process: its peak resident memory (run
    # before this process holds the verdict index: a child's peak counts the parent it forked from)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "specwatch", "replay", str(path), "--headless", "--json"],
                   check=True, stdout=subprocess.DEVNULL)
    headless_s = time.perf_counter() - t
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss

    # the verdict index, as the dashboard builds it on open (in a thread there; here alone)
    template = monitor_template(replay_monitor(read_header, args))
    t = time.perf_counter()
    verdicts = build_verdict_index(path, template)
    verdict_index_s = time.perf_counter() - t
    # the memory its checkpoints hold: that of a copy of each (tracing the build would slow it)
    tracemalloc.start()
    copies = [copy.deepcopy(c) for c in {id(m.checkpoint): m.checkpoint for m in verdicts.marks}.values()]
    index_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del copies

    # the dashboard's seek while paused (ReplayController.seek and _read_one, in specwatch.dashboard.
    # replay_control): the source to a window before the position, the readings up to it through the
    # Monitor, then the one shown
    dashboard_seeks = []
    monitor = copy.deepcopy(template)
    for hour in range(int(args.hours) or 1):
        position = source.start + hour * 3600 + 599
        t = time.perf_counter()
        source.seek(position - monitor.window.seconds)
        while True:
            source.step()
            snapshot = asyncio.run(source.read())
            if snapshot is None:
                break
            monitor.ingest(snapshot)
            if snapshot.time >= position:
                break
        dashboard_seeks.append(time.perf_counter() - t)
    # a jump to a verdict change (ReplayController.verdict_jump): the checkpoint, seek, one read
    jumps = []
    for mark in verdicts.marks:
        t = time.perf_counter()
        monitor, _ = verdicts.restore(mark)
        source.seek(mark.time)
        source.step()
        asyncio.run(source.read())
        jumps.append(time.perf_counter() - t)

    evaluations = seconds / args.evaluate_every
    result = {
        "hours": args.hours, "snapshots": count, "gpus": DAY_GPUS,
        "bytes": size, "bytes_per_snapshot": round(size / count, 1),
        "bytes_24h_equivalent": round(size * 86400 / seconds),
        "size_budget_met": size * 86400 / seconds <= BUDGET_BYTES,
        "write_s": round(write_s, 2), "read_s": round(read_s, 2),
        "evaluate_every_s": args.evaluate_every, "evaluations": round(evaluations),
        "replay_s": round(replay_s, 2),
        "monitor_ms_per_evaluation": round(1000 * (replay_s - read_s) / evaluations, 3),
        "replay_s_24h_equivalent": round(replay_s * 86400 / seconds, 1),
        # CPU time of this process: what the replay costs when the machine is shared (wall time
        # then also counts the time other processes held the CPU)
        "read_cpu_s": round(read_cpu_s, 2), "replay_cpu_s": round(replay_cpu_s, 2),
        "replay_budget_met": replay_s * 86400 / seconds <= BUDGET_REPLAY_S,
        "replay_cpu_split_s": split,
        "verdict_changes": changes,
        "index_s": round(index_s, 2),
        "seek_s_max": round(max(seeks), 3), "seek_s_median": round(sorted(seeks)[len(seeks) // 2], 3),
        "headless_replay_command_s": round(headless_s, 2),
        "headless_replay_peak_mb": round(peak_kib / 1024, 1),
        "verdict_index_s": round(verdict_index_s, 2), "verdict_index_changes": len(verdicts.marks),
        "verdict_index_mb": round(index_bytes / 1e6, 1),
        "dashboard_seek_s_max": round(max(dashboard_seeks), 3),
        "dashboard_seek_s_median": round(sorted(dashboard_seeks)[len(dashboard_seeks) // 2], 3),
        "peak_budget_met": peak_kib / 1024 < BUDGET_PEAK_MB,
        "seek_budget_met": max(dashboard_seeks) <= BUDGET_SEEK_S,
        "verdict_jump_s_max": round(max(jumps), 3) if jumps else None,
    }
    print(json.dumps(result, indent=2))
    if not args.keep:
        path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
