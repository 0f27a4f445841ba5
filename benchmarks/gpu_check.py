"""Check specwatch's GPU collector on a real NVIDIA GPU: idle, memory-bound copy, tensor-bound matmul.

Run on a machine with a GPU, a driver and PyTorch with CUDA:

    python benchmarks/gpu_check.py readings.jsonl [--seconds 4] [--interval 0.5] [--device 0] [--dcgm URL]

Three phases, each `--seconds` long, with the collector polling every `--interval`:
  idle    nothing runs (expect every activity field near 0),
  copy    device-to-device copies of a large buffer (expect DRAM bandwidth high, tensor low),
  matmul  a large bf16 matmul in a loop (expect tensor activity high).
It prints what each field read (median over the phase, first poll of each phase dropped, since it
spans the change of load) and writes every poll as one Snapshot dict per line (JSON Lines) to the
given path, plus `<path>.phases.json` with each phase's start and end time.

Exit status: 0 all expectations met, 1 some were not (the table says which), 2 no GPU, no driver
or no CUDA PyTorch (the message says which).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specwatch.collectors.gpus import GpuPoller
from specwatch.collectors.nvml import NvmlCollector
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuSample, Snapshot

# What each phase should show where the field exists (GPM on Hopper+, or DCGM). Loose bounds on
# purpose: this checks that the fields mean what specwatch thinks, not the GPU's speed.
EXPECTATIONS: dict[str, list[tuple[str, str, float]]] = {
    "idle": [("sm_active", "<", 0.10), ("tensor_active", "<", 0.05), ("dram_bw_util", "<", 0.10)],
    "copy": [("dram_bw_util", ">", 0.50), ("tensor_active", "<", 0.10), ("util_gpu", ">", 0.80)],
    "matmul": [("tensor_active", ">", 0.50), ("sm_active", ">", 0.80), ("util_gpu", ">", 0.80)],
}
SHOWN_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util", "util_gpu", "util_memory",
                "power_w", "sm_clock_mhz", "mem_clock_mhz", "temperature_c", "memory_used_bytes",
                "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")


class NoGpu(RuntimeError):
    """This machine cannot run the check; the message says why."""


def load_torch(device: int) -> Any:
    """Import torch only now, so the collector part of this file runs without it."""
    try:
        import torch
    except ImportError as exc:
        raise NoGpu(f"PyTorch is not installed ({exc}); install a CUDA build of torch to run the load phases") from None
    if not torch.cuda.is_available():
        raise NoGpu("PyTorch sees no CUDA GPU (torch.cuda.is_available() is False)")
    if device >= torch.cuda.device_count():
        raise NoGpu(f"CUDA device {device} does not exist (this machine has {torch.cuda.device_count()})")
    return torch


def cuda_uuid(torch: Any, device: int) -> str | None:
    """The NVML-style UUID ("GPU-…") of a CUDA device, to find it in NVML's order (PCI order)."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


class Workload:
    """Runs a CUDA loop in a thread until stopped. torch releases the GIL while it waits on the GPU."""

    def __init__(self, step: Callable[[], None], synchronize: Callable[[], None]) -> None:
        self._step = step
        self._synchronize = synchronize
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-check-load", daemon=True)
        self.steps = 0
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for _ in range(8):  # queue a few kernels, then wait, so the queue never runs dry or floods
                    self._step()
                self._synchronize()
                self.steps += 8
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def __enter__(self) -> Workload:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def copy_workload(torch: Any, device: int, gib: float = 4.0) -> Workload:
    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device=f"cuda:{device}")
    dst = torch.empty_like(src)
    src.fill_(1)
    return Workload(lambda: dst.copy_(src), lambda: torch.cuda.synchronize(device))


def matmul_workload(torch: Any, device: int, n: int = 8192) -> Workload:
    a = torch.randn(n, n, dtype=torch.bfloat16, device=f"cuda:{device}")
    b = torch.randn(n, n, dtype=torch.bfloat16, device=f"cuda:{device}")
    out = torch.empty(n, n, dtype=torch.bfloat16, device=f"cuda:{device}")
    return Workload(lambda: torch.matmul(a, b, out=out), lambda: torch.cuda.synchronize(device))


async def poll_for(poller: GpuPoller, client: Any, seconds: float, interval: float) -> list[Snapshot]:
    snapshots = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        gpus, sources = await poller.poll(client)
        snapshots.append(Snapshot(time=time.time(), gpus=gpus, sources=sources))
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    return snapshots


def pick_gpu(snapshot: Snapshot, uuid: str | None, index: int) -> GpuSample | None:
    for gpu in snapshot.gpus:
        if uuid is not None and gpu.uuid == uuid:
            return gpu
    return next((g for g in snapshot.gpus if g.index == index), None) if uuid is None else None


def summarise(snapshots: list[Snapshot], uuid: str | None, index: int) -> dict[str, float | str]:
    """Median of each field over a phase, dropping its first poll; a reason where never read."""
    readings = [pick_gpu(s, uuid, index) for s in snapshots[1:]]
    readings = [r for r in readings if r is not None]
    out: dict[str, float | str] = {}
    for name in GPU_FIELDS:
        values = [r.values[name] for r in readings if name in r.values]
        if values:
            out[name] = statistics.median(values)
        else:
            reasons = {r.errors.get(name, "not read") for r in readings}
            out[name] = "; ".join(sorted(reasons)) or "no polls"
    return out


def check(phase: str, summary: dict[str, float | str]) -> list[str]:
    failures = []
    for name, op, bound in EXPECTATIONS[phase]:
        value = summary.get(name)
        if not isinstance(value, float | int):
            continue  # N/A on this GPU: nothing to check, the table shows the reason
        ok = value < bound if op == "<" else value > bound
        if not ok:
            failures.append(f"{phase}: {name} = {value:.3f}, expected {op} {bound}")
    return failures


def fmt(value: float | str) -> str:
    if isinstance(value, str):
        return f"N/A ({value})"
    if abs(value) >= 1e6:
        return f"{value:.4g}"
    return f"{value:.3f}"


async def main_async(args: argparse.Namespace) -> int:
    import httpx

    collector = NvmlCollector()
    probe, status = await asyncio.to_thread(collector.poll)
    if status.state not in ("ok", "gpu_lost"):
        print(f"gpu_check: NVML is not usable here: {status.state}: {status.message}", file=sys.stderr)
        return 2
    try:
        torch = load_torch(args.device)
    except NoGpu as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    uuid = cuda_uuid(torch, args.device)
    target = pick_gpu(Snapshot(time=0.0, gpus=probe), uuid, args.device)
    if target is None:
        print(f"gpu_check: NVML does not list CUDA device {args.device} (uuid {uuid})", file=sys.stderr)
        return 2
    print(f"GPU {target.index}: {target.name} ({target.uuid}), compute capability {target.compute_capability}, "
          f"MIG {target.mig_mode}; NVML sees {len(probe)} GPU(s)")

    poller = GpuPoller(collector, args.dcgm, dcgm=args.dcgm is not None)
    out_path = Path(args.output)
    phases: list[dict[str, Any]] = []
    summaries: dict[str, dict[str, float | str]] = {}
    all_snapshots: list[Snapshot] = []
    async with httpx.AsyncClient() as client:
        for phase in ("idle", "copy", "matmul"):
            if phase == "idle":
                workload = None
            elif phase == "copy":
                workload = copy_workload(torch, args.device)
            else:
                workload = matmul_workload(torch, args.device)
            start = time.time()
            if workload is None:
                snapshots = await poll_for(poller, client, args.seconds, args.interval)
                steps = 0
            else:
                with workload:
                    await asyncio.sleep(0.2)  # let the queue fill before the phase's first poll
                    snapshots = await poll_for(poller, client, args.seconds, args.interval)
                if workload.error is not None:
                    print(f"gpu_check: the {phase} workload failed: {workload.error!r}", file=sys.stderr)
                    return 2
                steps = workload.steps
                del workload
                torch.cuda.empty_cache()
            phases.append({"phase": phase, "start": start, "end": time.time(), "polls": len(snapshots),
                           "steps": steps})
            summaries[phase] = summarise(snapshots, target.uuid, target.index)
            all_snapshots += snapshots
    poller.close()

    with out_path.open("w", encoding="utf-8") as f:
        for snap in all_snapshots:
            f.write(json.dumps(snap.to_dict()) + "\n")
    Path(str(out_path) + ".phases.json").write_text(json.dumps(phases, indent=1) + "\n")

    width = max(len(n) for n in SHOWN_FIELDS)
    print(f"\n{'field':{width}}  " + "  ".join(f"{p:>26}" for p in summaries))
    for name in SHOWN_FIELDS:
        print(f"{name:{width}}  " + "  ".join(f"{fmt(summaries[p][name])[:26]:>26}" for p in summaries))
    last = pick_gpu(all_snapshots[-1], target.uuid, target.index) if all_snapshots else None
    if last is not None:
        print(f"\nthrottle reasons (last poll): {', '.join(last.throttle_reasons) or 'none'}")
        print("processes (last poll): " + (", ".join(f"{p.pid} {p.name} {p.used_memory_bytes}" for p in last.processes)
                                           or "none"))
        print("source: " + last.source + "; sources: " + ", ".join(f"{s.name}={s.state}" for s in all_snapshots[-1].sources))
    for p in phases:
        print(f"phase {p['phase']}: {p['polls']} polls, {p['steps']} workload steps")
    failures = [f for phase in summaries for f in check(phase, summaries[phase])]
    print(f"\nwrote {len(all_snapshots)} snapshots to {out_path}")
    if failures:
        print("EXPECTATIONS NOT MET:\n  " + "\n  ".join(failures))
        return 1
    print("all expectations met (fields that are N/A on this GPU were not checked)")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description="Check specwatch's GPU collector on a real GPU.")
    parser.add_argument("output", help="JSON Lines file for the Snapshot dicts")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each phase (default 4)")
    parser.add_argument("--interval", type=float, default=0.5, help="poll interval, >= 0.1 for GPM (default 0.5)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device to load (default 0)")
    parser.add_argument("--dcgm", default=None, help="also read this dcgm-exporter URL and merge it")
    args = parser.parse_args()
    if args.interval < 0.1:
        parser.error("--interval must be at least 0.1 s: GPM needs 100 ms between samples")
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
