"""Scraping each server's /metrics during a tier: acceptance and running batch."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from specwatch.collectors.vllm import VllmSource
from specwatch.telemetry.snapshot import Snapshot
from specwatch.readings.figures import GENERATION_TOKENS
from specwatch.readings.window import RUNNING, Window

__all__ = [
    "MetricsProbe",
]


class MetricsProbe:
    """Scrapes one server's /metrics through a tier: the acceptance over it and the running batch.

    One scrape before the tier's first request (`begin`), one every `interval_s` while requests are
    in flight, one after the last has finished. The acceptance comes from the counter increases
    between the first and the last (as `check` computes it). The running batch is the time average
    over that span from the engine's own per-request times (EngineFigures.running_time_mean), which
    counts every request of the tier; the in-flight scrapes' gauge readings are kept beside it and
    stand in only for an engine without those times: the gauge is read at an instant, and on a fast
    engine with short requests it reads 0 at most scrapes while the tier runs. A server whose
    /metrics cannot be read gives no figures and a message, never an error.
    """

    def __init__(self, source: VllmSource, interval_s: float = 1.0) -> None:
        self.source = source
        self.interval_s = interval_s
        self.window = Window(seconds=366 * 86400.0)
        self.running: list[float] = []
        self.last_state = "ok"
        self.last_message = ""

    async def scrape(self, in_flight: bool) -> None:
        samples = await self.source.scrape()
        snapshot = Snapshot(time=time.time(), targets=samples)
        target = samples[0]
        self.last_state, self.last_message = target.state, target.message
        if not target.ok:
            return
        self.window.add(snapshot)
        if in_flight:
            values = [e.gauges[RUNNING] for e in target.engines if RUNNING in e.gauges]
            if values:
                self.running.append(sum(values))

    async def begin(self) -> None:
        """The scrape the tier's increases start from: awaited before its first request is sent."""
        await self.scrape(in_flight=False)

    async def run_until(self, done: asyncio.Event) -> None:
        """The in-flight scrapes until `done`, then the closing one."""
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), timeout=self.interval_s)
            except asyncio.TimeoutError:
                await self.scrape(in_flight=True)
        await self.scrape(in_flight=False)

    def figures(self) -> dict[str, Any]:
        url = self.source.targets[0].url
        tw = self.window.target(url) if len(self.window) >= 2 else None
        total = tw.total if tw is not None else None
        acc = total.acceptance if total is not None else None
        per_step = total.per_decode_step() if total is not None else None
        gauge_mean = float(np.mean(self.running)) if self.running else None
        time_mean = total.running_time_mean if total is not None else None
        running_mean, running_from = ((time_mean, "request_times") if time_mean is not None
                                      else (gauge_mean, "gauge") if gauge_mean is not None else (None, None))
        return {
            "acceptance_length": acc.acceptance_length if acc else None,
            "acceptance_rate": acc.acceptance_rate if acc else None,
            "drafts": acc.drafts if acc else None,
            "k": tw.k if tw is not None else None,
            "running_mean": running_mean,
            "running_from": running_from,
            "running_gauge_mean": gauge_mean,
            "server_generation_tokens_per_s": total.generation_tokens_per_s if total is not None else None,
            # the same counter's increase over the tier: set against the tokens the requests received
            "server_generation_tokens": (tw.increases.counter(GENERATION_TOKENS)
                                         if tw is not None and tw.increases is not None else None),
            # the engine's own timing over the tier: its step period (inter-token latency), the
            # positions a step computed, and the share of the tier it spent stepping
            "step_period_s": total.itl_mean_s if total is not None else None,
            "computed_tokens_per_step": total.computed_tokens_per_step_mean if total is not None else None,
            "busy_share": total.busy_share if total is not None else None,
            # per sequence per decode step, n-gram misses included (EngineFigures.per_decode_step)
            "emitted_per_sequence_step": per_step[0] if per_step else None,
            "verified_per_sequence_step": per_step[1] if per_step else None,
            "metrics_state": self.last_state,
            "metrics_message": self.last_message or None,
        }
