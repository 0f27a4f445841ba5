"""One GPU poll: NVML (in a worker thread) plus an optional dcgm-exporter, merged by UUID."""

from __future__ import annotations

import asyncio

import httpx

from specwatch.collectors.dcgm import fetch_dcgm, merge_gpu_samples
from specwatch.collectors.nvml import NvmlCollector
from specwatch.telemetry.snapshot import GpuSample, SourceStatus

GpuPoll = tuple[tuple[GpuSample, ...], tuple[SourceStatus, ...]]


class GpuPoller:
    """Owns the NVML collector and the DCGM settings; returns (gpus, sources) per poll.

    `dcgm_url=None` probes the default exporter address and reports "absent" quietly when none
    runs; a given URL that fails is reported as an error. `dcgm=False` skips DCGM entirely.
    """

    def __init__(
        self,
        collector: NvmlCollector | None = None,
        dcgm_url: str | None = None,
        *,
        dcgm: bool = True,
        dcgm_timeout: float = 1.0,
    ) -> None:
        self.collector = collector if collector is not None else NvmlCollector()
        self.dcgm_url = dcgm_url
        self.dcgm_enabled = dcgm
        self.dcgm_timeout = dcgm_timeout

    def poll_nvml(self) -> GpuPoll:
        """NVML only, synchronously: call it from a worker thread."""
        gpus, status = self.collector.poll()
        return gpus, (status,)

    async def _poll_collector(self) -> tuple[tuple[GpuSample, ...], SourceStatus]:
        # NVML calls block (milliseconds each): in a thread, unless the collector reads no device
        if getattr(self.collector, "reads_devices", True):
            return await asyncio.to_thread(self.collector.poll)
        return self.collector.poll()

    async def poll(self, client: httpx.AsyncClient) -> GpuPoll:
        """NVML in a thread and DCGM over HTTP, concurrently, then merged."""
        nvml_task = self._poll_collector()
        if not self.dcgm_enabled:
            gpus, status = await nvml_task
            return gpus, (status,)
        (nvml_gpus, nvml_status), (dcgm_gpus, dcgm_status) = await asyncio.gather(
            nvml_task, fetch_dcgm(client, self.dcgm_url, self.dcgm_timeout)
        )
        return merge_gpu_samples(nvml_gpus, dcgm_gpus), (nvml_status, dcgm_status)

    def close(self) -> None:
        self.collector.close()

