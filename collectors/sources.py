"""Sources of Snapshots behind one small protocol, so front ends cannot tell them apart.

- LiveSource: vLLM targets over HTTP plus NVML/dcgm-exporter (this module);
- ReplaySource: a recording played back (specwatch.collectors.replay);
(`fleet` reads remote nodes' verdicts through Prometheus queries, specwatch.collectors.prometheus,
not through Snapshots.)

A front end awaits `read()` for the next Snapshot, re-arming its poll only after the previous read
completed (so a slow node never piles up requests), and closes the source when done.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any, Protocol, Sequence, runtime_checkable

import httpx

from specwatch.telemetry.snapshot import Snapshot


@runtime_checkable
class SnapshotSource(Protocol):
    """What every source offers."""

    #: "LIVE", "REPLAY" or "PROMETHEUS": shown in the header
    kind: str

    def describe(self) -> str:
        """One line for the header: where the data come from (and, for a replay, whether real)."""
        ...

    @property
    def interval_s(self) -> float:
        """Seconds between reads that the source suggests (the poll interval, or the recording's)."""
        ...

    async def read(self) -> Snapshot | None:
        """The next Snapshot; None when the source has ended (a replay played out)."""
        ...

    async def aclose(self) -> None:
        ...


class LiveSource:
    """vLLM targets and the local GPUs, read concurrently into one Snapshot per call."""

    kind = "LIVE"

    def __init__(self, vllm: Any, gpus: Any | None = None, interval_s: float = 1.0,
                 gpu_timeout_s: float = 2.0) -> None:
        self.vllm = vllm  # specwatch.collectors.vllm.VllmSource
        self.gpus = gpus  # specwatch.collectors.gpus.GpuPoller, or None
        self._interval_s = interval_s
        self._gpu_client: httpx.AsyncClient | None = None
        self._gpu_timeout_s = gpu_timeout_s

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self._interval_s = max(0.1, float(value))

    @property
    def urls(self) -> Sequence[str]:
        return [t.url for t in self.vllm.targets]

    def describe(self) -> str:
        return ", ".join(self.urls)

    async def read(self) -> Snapshot:
        if self.gpus is None:
            return Snapshot(time=time.time(), targets=await self.vllm.scrape())
        if self._gpu_client is None:
            self._gpu_client = httpx.AsyncClient(timeout=self._gpu_timeout_s, trust_env=False)
        targets, (gpus, sources) = await asyncio.gather(self.vllm.scrape(), self.gpus.poll(self._gpu_client))
        return Snapshot(time=time.time(), targets=targets, gpus=gpus, sources=sources)

    async def aclose(self) -> None:
        await self.vllm.aclose()
        if self._gpu_client is not None:
            await self._gpu_client.aclose()
            self._gpu_client = None
        if self.gpus is not None:
            await asyncio.to_thread(self.gpus.close)


class StopRequest(asyncio.Event):
    """An Event that also says which signal set it: Ctrl-C (SIGINT) ends a command with status 130,
    a service manager's SIGTERM is an ordinary stop."""

    signum: int | None = None

    def request(self, signum: int) -> None:
        self.signum = signum
        self.set()

    @property
    def interrupted(self) -> bool:
        return self.signum == signal.SIGINT


def stop_on_signals() -> StopRequest:
    """A StopRequest that SIGTERM or SIGINT sets, for the headless commands (record, export): a stop
    request then ends their loop between polls, so the last reading is handled whole. Call it from
    the running loop. Where signals cannot be caught here (not the main thread), Ctrl-C arrives as
    KeyboardInterrupt instead."""
    stop = StopRequest()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop.request, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    return stop
