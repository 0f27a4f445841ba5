"""What can skew a round, recorded while it runs, and the rounds whose two sides ran under
different conditions.

Per side of a round: the host's CPU steal and busy share over the round (/proc/stat deltas), the
1-minute load average at its end (os.getloadavg), and, where NVML answers, the GPUs' SM clock
(lowest and mean over the polls), the clock-event reasons that limit performance (power cap,
thermal, ... as `specwatch.telemetry.gpu_events` classes them), and the processes on the GPUs. A host with no
/proc/stat or no GPU gives None for those parts, never an error.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Sequence

from specwatch.telemetry.gpu_events import PERFORMANCE_LIMITING_REASONS

__all__ = [
    "read_proc_stat",
    "cpu_shares",
    "RoundConditions",
    "condition_flags",
    "STEAL_DIFFERENCE_PCT",
    "LOAD_DIFFERENCE_PER_CPU",
    "CLOCK_DIFFERENCE",
    "OTHER_TRAFFIC_SHARE",
]

# Side-to-side differences that flag a round. Steal of a few percent moves a CPU-bound tokens/s by as
# much; one extra runnable process per core is a neighbour; 5 % of SM clock is 5 % of decode speed.
STEAL_DIFFERENCE_PCT = 5.0
LOAD_DIFFERENCE_PER_CPU = 0.5
CLOCK_DIFFERENCE = 0.05
# Tokens the server generated over a side beyond those its requests received, as a share of the
# latter: other clients on the server (its figures are then not the sweep's alone), or requests that
# failed after generating. A few percent is the size of the effects a sweep resolves.
OTHER_TRAFFIC_SHARE = 0.02


def read_proc_stat(path: str = "/proc/stat") -> tuple[float, float, float] | None:
    """(total, idle incl. iowait, steal) jiffies of the aggregate `cpu` line; None when unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            line = f.readline()
    except OSError:
        return None
    parts = line.split()
    if not parts or parts[0] != "cpu" or len(parts) < 5:
        return None
    try:
        values = [float(v) for v in parts[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is already in user
    total = sum(values[:8])
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)
    steal = values[7] if len(values) > 7 else 0.0
    return total, idle, steal


def cpu_shares(before: tuple[float, float, float] | None,
               after: tuple[float, float, float] | None) -> tuple[float | None, float | None]:
    """(steal %, busy %) between two /proc/stat readings."""
    if before is None or after is None:
        return None, None
    total = after[0] - before[0]
    if total <= 0:
        return None, None
    steal = 100.0 * (after[2] - before[2]) / total
    busy = 100.0 * (total - (after[1] - before[1]) - (after[2] - before[2])) / total
    return steal, busy


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


class RoundConditions:
    """Records one side of one round: `start()` before its requests, `await finish()` after.

    `gpu_poll` is a synchronous function returning (gpu samples, source statuses), as
    `specwatch.collectors.gpus.GpuPoller.poll_nvml` does; it runs in a worker thread every
    `interval_s` while the round runs. None skips the GPUs.
    """

    def __init__(self, gpu_poll: Callable[[], tuple[Sequence[Any], Sequence[Any]]] | None = None,
                 interval_s: float = 1.0, stat_reader: Callable[[], tuple[float, float, float] | None] = read_proc_stat,
                 load_reader: Callable[[], float | None] = _load_average) -> None:
        self.gpu_poll = gpu_poll
        self.interval_s = interval_s
        self.stat_reader = stat_reader
        self.load_reader = load_reader
        self._stat_before: tuple[float, float, float] | None = None
        self._samples: list[Any] = []
        self._gpu_state: str | None = None
        self._task: asyncio.Task | None = None
        self._done = asyncio.Event()

    async def _poll_once(self) -> None:
        assert self.gpu_poll is not None
        try:
            gpus, statuses = await asyncio.to_thread(self.gpu_poll)
        except Exception as exc:  # noqa: BLE001 - a GPU poll must never end a sweep
            self._gpu_state = f"error: {exc}"
            return
        states = [getattr(s, "state", "ok") for s in statuses]
        self._gpu_state = states[0] if states else "ok"
        self._samples.extend(g for g in gpus if not getattr(g, "lost", False))

    async def _poll_loop(self) -> None:
        await self._poll_once()
        while not self._done.is_set():
            try:
                await asyncio.wait_for(self._done.wait(), timeout=self.interval_s)
            except asyncio.TimeoutError:
                await self._poll_once()
        await self._poll_once()

    def start(self) -> None:
        self._stat_before = self.stat_reader()
        if self.gpu_poll is not None:
            self._task = asyncio.create_task(self._poll_loop())

    async def finish(self, failed_requests: int = 0, tokens_received: int | None = None,
                     server_tokens: float | None = None) -> dict[str, Any]:
        """The side's conditions. `server_tokens`: the server's generation-token increase over the side
        (None where its counter was not read), set against the `tokens_received` by its requests."""
        self._done.set()
        if self._task is not None:
            await self._task
        steal, busy = cpu_shares(self._stat_before, self.stat_reader())
        out: dict[str, Any] = {
            "cpu_steal_pct": steal,
            "cpu_busy_pct": busy,
            "load_1m": self.load_reader(),
            "cpus": os.cpu_count(),
            "requests_failed": failed_requests,
            "tokens_received": tokens_received,
            "unrequested_tokens": (server_tokens - tokens_received
                                   if server_tokens is not None and tokens_received is not None else None),
            "gpu": None,
            "gpu_state": self._gpu_state if self.gpu_poll is not None else "not polled",
        }
        if self._samples:
            clocks = [s.values["sm_clock_mhz"] for s in self._samples if "sm_clock_mhz" in s.values]
            reasons = sorted({r for s in self._samples for r in s.throttle_reasons
                              if r in PERFORMANCE_LIMITING_REASONS or r.startswith("unknown")})
            processes = sorted({f"{p.pid} {p.name}" for s in self._samples for p in s.processes})
            out["gpu"] = {
                "polls": len(self._samples),
                "sm_clock_mhz_min": min(clocks) if clocks else None,
                "sm_clock_mhz_mean": sum(clocks) / len(clocks) if clocks else None,
                "throttle_reasons": reasons,
                "processes": processes,
            }
        return out


def condition_flags(baseline: dict | None, speculative: dict | None) -> list[str]:
    """Why a round's two sides may not be comparable: a throttle, a neighbour, steal, load, a
    clock or failures on one side and not (or much less) on the other."""
    if not baseline or not speculative:
        return []
    flags: list[str] = []
    gb, gs = baseline.get("gpu") or {}, speculative.get("gpu") or {}
    rb, rs = set(gb.get("throttle_reasons") or ()), set(gs.get("throttle_reasons") or ())
    for side, only in (("baseline", rb - rs), ("speculative", rs - rb)):
        if only:
            flags.append(f"GPU throttled on the {side} side only ({', '.join(sorted(only))})")
    cb, cs = gb.get("sm_clock_mhz_mean"), gs.get("sm_clock_mhz_mean")
    if cb and cs and abs(cb - cs) / max(cb, cs) > CLOCK_DIFFERENCE:
        flags.append(f"SM clock differs: {cb:.0f} MHz baseline, {cs:.0f} MHz speculative")
    if gb and gs and set(gb.get("processes") or ()) != set(gs.get("processes") or ()):
        flags.append("the processes on the GPUs changed between the sides")
    sb, ss = baseline.get("cpu_steal_pct"), speculative.get("cpu_steal_pct")
    if sb is not None and ss is not None and abs(sb - ss) > STEAL_DIFFERENCE_PCT:
        flags.append(f"CPU steal differs: {sb:.1f} % baseline, {ss:.1f} % speculative")
    lb, ls = baseline.get("load_1m"), speculative.get("load_1m")
    cpus = baseline.get("cpus") or 1
    if lb is not None and ls is not None and abs(lb - ls) / cpus > LOAD_DIFFERENCE_PER_CPU:
        flags.append(f"host load differs: {lb:.1f} baseline, {ls:.1f} speculative ({cpus} CPUs)")
    for side, conditions in (("baseline", baseline), ("speculative", speculative)):
        extra, received = conditions.get("unrequested_tokens"), conditions.get("tokens_received")
        if extra is not None and received and extra > OTHER_TRAFFIC_SHARE * received:
            flags.append(f"the {side} server generated {extra:.0f} tokens its requests did not receive "
                         f"(other clients on it, or failed requests): its figures are not the sweep's alone")
    fb, fs = baseline.get("requests_failed") or 0, speculative.get("requests_failed") or 0
    if bool(fb) != bool(fs):
        flags.append(f"requests failed on one side only ({fb} baseline, {fs} speculative)")
    return flags
