"""The dashboard's own cost: CPU at a 1 Hz poll with 8 engines and 8 GPUs, and time to first frame.

    python benchmarks/bench_tui.py [--seconds 60] [--size 200x50] [--tab overview]

The app runs headless (App.run_test) over scripted Snapshots from specwatch.collectors.synthetic: one vLLM
target with 8 data-parallel engines and 8 GPUs, read once a second exactly as a live source would be.
Everything the TUI does is counted: the Monitor's window and advisor (in a thread), the history, the
views and the rendering of every visible panel. CPU is this process's CPU time (all threads) over
the steady-state wall time, after the first frame; goal ≤ 2 % of one core. Time to first frame is from
the start of the app to the first screen painted with data (goal ≤ 1 s); it excludes Python's own
start-up and imports, which are reported apart.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from typing import Iterator

IMPORT_STARTED = time.perf_counter()
from specwatch.advice.advisor import AdvisorConfig  # noqa: E402
from specwatch.dashboard.app import SnapshotIngested, SpecwatchApp  # noqa: E402
from specwatch.perf import HingeParameters  # noqa: E402
from specwatch.advice.monitor import Monitor  # noqa: E402
from specwatch.telemetry.snapshot import Snapshot  # noqa: E402
from specwatch.collectors.synthetic import SyntheticNode, generate  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - IMPORT_STARTED

# An H100-class node serving a 70B model with n-gram k=4, 8 GPUs, busy enough that every figure moves.
STEP = HingeParameters(base_s=0.02, knee=260.0, slope_s_per_token=0.02 / 260, kv_s_per_token=2e-8,
                       per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpus=8, per_position=(0.6, 0.4, 0.25, 0.15))
ENGINES = 8


def with_engines(snapshot: Snapshot, engines: int) -> Snapshot:
    """The synthetic target as vLLM exposes data-parallel engines: one sample per engine label."""
    target = snapshot.targets[0]
    base = target.engines[0]
    copies = tuple(dataclasses.replace(base, engine=str(i)) for i in range(engines))
    return dataclasses.replace(snapshot, targets=(dataclasses.replace(target, engines=copies),))


def load(seconds: int) -> list[float]:
    """A slow swing between 16 and 96 running, so the advisor and the trends keep working."""
    return [56 + 40 * ((i % 120) / 60 - 1 if (i // 120) % 2 else 1 - (i % 120) / 60) for i in range(seconds)]


class TimedMonitor(Monitor):
    """The Monitor, with the CPU its ingest takes (it runs in a worker thread) added up, so the
    pipeline's share can be told from the TUI's own."""

    ingest_cpu_s = 0.0

    def ingest(self, snapshot: Snapshot):  # type: ignore[override]
        started = time.thread_time()
        try:
            return super().ingest(snapshot)
        finally:
            self.ingest_cpu_s += time.thread_time() - started


class PacedSource:
    """Scripted Snapshots behind the SnapshotSource protocol, read at the app's 1 Hz like a live node."""

    kind = "LIVE"
    interval_s = 1.0

    def __init__(self, snapshots: Iterator[Snapshot]) -> None:
        self._snapshots = snapshots

    def describe(self) -> str:
        return "scripted benchmark node (synthetic)"

    async def read(self) -> Snapshot | None:
        return next(self._snapshots, None)

    async def aclose(self) -> None:
        pass


async def measure(seconds: float, size: tuple[int, int], tab: str) -> dict[str, float]:
    snapshots = (with_engines(s, ENGINES) for s in generate(NODE, load(int(seconds) + 30)))
    first_frame: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    started = time.perf_counter()

    def hook(message: object) -> None:
        if isinstance(message, SnapshotIngested) and not first_frame.done():
            first_frame.set_result(time.perf_counter())

    monitor = TimedMonitor(30.0, AdvisorConfig(method="ngram"))
    app = SpecwatchApp(PacedSource(snapshots), monitor)
    async with app.run_test(size=size, message_hook=hook) as pilot:
        await first_frame
        await pilot.pause()  # the frame that message produced has been painted
        first_frame_s = time.perf_counter() - started
        if tab != "overview":
            await pilot.press(str(1 + ("overview", "gpus", "speculation", "roofline", "trends", "events").index(tab)))
        polls_before = app.polls
        cpu0, wall0, ingest0 = time.process_time(), time.perf_counter(), monitor.ingest_cpu_s
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        ingest = monitor.ingest_cpu_s - ingest0
        polls = app.polls - polls_before
        await pilot.press("q")
    return {"first_frame_s": first_frame_s, "cpu_s": cpu, "wall_s": wall, "polls": polls,
            "cpu_fraction": cpu / wall, "cpu_ms_per_poll": 1000 * cpu / max(polls, 1),
            "ingest_fraction": ingest / wall, "ui_fraction": (cpu - ingest) / wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="steady-state seconds measured (default 60)")
    parser.add_argument("--size", default="200x50", help="terminal size, COLSxROWS (default 200x50)")
    parser.add_argument("--tab", default="overview",
                        choices=("overview", "gpus", "speculation", "roofline", "trends", "events"))
    args = parser.parse_args(argv)
    cols, rows = (int(v) for v in args.size.lower().split("x"))
    r = asyncio.run(measure(args.seconds, (cols, rows), args.tab))
    print(f"specwatch TUI, {ENGINES} engines × {NODE.gpus} GPUs, 1 Hz, {cols}×{rows}, tab {args.tab}")
    print(f"  imports (specwatch.dashboard.app and the pipeline): {IMPORT_SECONDS:.2f} s")
    print(f"  time to first frame with data: {r['first_frame_s']:.2f} s   (goal ≤ 1 s)")
    print(f"  CPU: {100 * r['cpu_fraction']:.2f} % of one core over {r['wall_s']:.0f} s, {r['polls']:.0f} polls, "
          f"{r['cpu_ms_per_poll']:.1f} ms CPU per poll   (goal ≤ 2 %)")
    print(f"    of which the Monitor (Window + Advisor, shared with check/replay): {100 * r['ingest_fraction']:.2f} %;"
          f" the TUI itself: {100 * r['ui_fraction']:.2f} %")
    ok = r["first_frame_s"] <= 1.0 and r["cpu_fraction"] <= 0.02
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
