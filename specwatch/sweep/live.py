"""Running a live sweep: the same prompts against both servers, tier by tier."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import httpx

from specwatch.sweep import loadgen
from specwatch.collectors.vllm import VllmSource
from specwatch.sweep.common import DEFAULT_REPEAT, DEFAULT_TIERS, MAX_ROUNDS, MAX_TIERS, SIDES, SweepError
from specwatch.sweep.intervals import next_round, ratio_interval
from specwatch.sweep.noise import RoundConditions
from specwatch.sweep.report import SweepRecord, side_from_stats
from specwatch.sweep.probe import MetricsProbe
from specwatch.telemetry.urls import redact

__all__ = [
    "served_model",
    "sweep_two_servers",
    "SweepPlan",
    "Endpoint",
    "ProgressFn",
    "PROGRESS_EVERY_S",
    "LiveSweep",
    "round_order",
    "run_rounds",
    "run_tiers",
]


def round_order(round_index: int) -> tuple[str, str]:
    """Which side runs first in round `round_index` (0-based): A B, then B A, and so on (A B B A A B
    …). A slow drift of the host (warming up, a neighbour arriving) then weighs on both sides
    equally over each pair of rounds, where A B A B would always give the later slot to B."""
    return SIDES if round_index % 2 == 0 else (SIDES[1], SIDES[0])


@dataclass(frozen=True)
class SweepPlan:
    """How each tier runs."""

    tiers: tuple[int, ...] = DEFAULT_TIERS
    requests: int | None = None  # per tier; None: max(16, 4 × concurrency) unless a duration is given
    duration_s: float | None = None
    warmup: int | None = None  # per tier and side, before its first round; None: one request per worker
    scrape_interval_s: float = 1.0
    repeat: int = DEFAULT_REPEAT  # rounds per tier; with a budget, the rounds before the adaptive stop may stop
    budget_s: float | None = None  # the whole sweep's wall time for adaptive rounds; None: exactly `repeat`
    max_rounds: int = MAX_ROUNDS

    def __post_init__(self) -> None:
        if not self.tiers or len(self.tiers) > MAX_TIERS:
            raise ValueError(f"give 1..{MAX_TIERS} concurrency tiers")
        if len(set(self.tiers)) != len(self.tiers):
            raise ValueError("concurrency tiers must be distinct")
        if not (math.isfinite(self.scrape_interval_s) and 0.05 <= self.scrape_interval_s <= 60):
            raise ValueError("the scrape interval must be in 0.05..60 s")
        if not 1 <= self.repeat <= self.max_rounds:
            raise ValueError(f"--repeat must be in 1..{self.max_rounds}")
        if self.budget_s is not None and not (math.isfinite(self.budget_s) and self.budget_s > 0):
            raise ValueError("the budget must be a positive number of seconds")
        for c in self.tiers:
            self.tier(c)  # validates every tier's plan up front

    def tier(self, concurrency: int) -> loadgen.TierPlan:
        requests = self.requests
        if requests is None and self.duration_s is None:
            requests = max(16, 4 * concurrency)
        return loadgen.TierPlan(concurrency, requests, self.duration_s, 0)

    def warmup_plan(self, concurrency: int) -> loadgen.TierPlan | None:
        """The warm-up, run on its own before a side's first round at a tier, so that neither its
        requests nor the /metrics counters it moves reach any figure."""
        warmup = concurrency if self.warmup is None else self.warmup
        return loadgen.TierPlan(concurrency, warmup, None, 0) if warmup else None


@dataclass
class Endpoint:
    """One server under test."""

    side: str
    url: str
    model: str | None = None  # the served model name; asked of /v1/models when None


ProgressFn = Callable[[str], None]
PROGRESS_EVERY_S = 10.0


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def served_model(client: httpx.AsyncClient, url: str) -> str:
    """The first model /v1/models lists; SweepError when the server cannot be asked."""
    try:
        response = await client.get(url + "/v1/models", timeout=httpx.Timeout(30.0))
    except (httpx.HTTPError, OSError) as exc:
        from specwatch.collectors.vllm import describe_http_error

        raise SweepError(describe_http_error(exc, url)[1]) from None
    if response.status_code != 200:
        raise SweepError(f"{url}/v1/models answered HTTP {response.status_code} (is this an OpenAI-compatible server?)")
    try:
        data = response.json()["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise SweepError(f"{url}/v1/models did not list a model (give --served-model)") from None


class LiveSweep:
    """Drives the tiers against the endpoints and keeps the record up to date."""

    def __init__(self, record: SweepRecord, plan: SweepPlan, prompts: Sequence[loadgen.Prompt],
                 request: loadgen.RequestSettings, *, token: str | None = None, verify: Any = True,
                 progress: ProgressFn | None = stderr_progress,
                 on_tier: Callable[[SweepRecord], None] | None = None,
                 gpu_poll: Callable[[], Any] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.record = record
        self.plan = plan
        self.prompts = list(prompts)
        self.request = request
        self.token = token
        self.verify = verify
        self.progress = progress or (lambda line: None)
        self.on_tier = on_tier or (lambda record: None)
        self.gpu_poll = gpu_poll
        self.clock = clock
        self.warmed: set[tuple[str, int]] = set()
        record.planned_tiers = tuple(plan.tiers)

    def _client(self) -> httpx.AsyncClient:
        headers = {"User-Agent": "specwatch-sweep"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        limits = httpx.Limits(max_connections=max(self.plan.tiers) + 8, max_keepalive_connections=max(self.plan.tiers) + 8)
        return httpx.AsyncClient(headers=headers, verify=self.verify, limits=limits, trust_env=False,
                                 follow_redirects=False, timeout=httpx.Timeout(self.request.timeout_s))

    async def prepare(self, endpoint: Endpoint) -> None:
        """Learn the served model name and the version; SweepError when the server does not answer."""
        async with self._client() as client:
            if endpoint.model is None:
                endpoint.model = await served_model(client, endpoint.url)
        info: dict[str, Any] = {"url": redact(endpoint.url), "model": endpoint.model}  # stored: no credentials
        source = VllmSource([endpoint.url], token=self.token, verify=self.verify)
        async with source:
            sample = (await source.scrape())[0]
            target_info = source.info(source.targets[0].url)
        info["version"] = sample.version
        info["metrics_state"] = sample.state
        if target_info is not None and target_info.speculative_config:
            info["speculative_config"] = target_info.speculative_config
        self.record.servers[endpoint.side].update(info)

    async def run_tier(self, endpoint: Endpoint, concurrency: int) -> bool:
        """One tier on one server, recorded. False when the sweep must stop (dead server, no success)."""
        assert endpoint.model is not None
        plan = self.plan.tier(concurrency)
        settings = loadgen.RequestSettings(
            model=endpoint.model, api=self.request.api, max_tokens=self.request.max_tokens,
            temperature=self.request.temperature, ignore_eos=self.request.ignore_eos,
            timeout_s=self.request.timeout_s, max_response_bytes=self.request.max_response_bytes)
        warmup = self.plan.warmup_plan(concurrency) if (endpoint.side, concurrency) not in self.warmed else None
        self.progress(f"[{endpoint.side}] concurrency {concurrency}: "
                      f"{plan.requests or 'open'} requests{f' / {plan.duration_s:g} s' if plan.duration_s else ''}"
                      f"{f' after {warmup.requests} warm-up' if warmup else ''} …")
        if warmup is not None:
            async with self._client() as client:
                await loadgen.run_tier(client, endpoint.url, self.prompts, warmup, settings)
            self.warmed.add((endpoint.side, concurrency))
        conditions = RoundConditions(self.gpu_poll, self.plan.scrape_interval_s)
        done = asyncio.Event()
        source = VllmSource([endpoint.url], token=self.token, verify=self.verify)
        probe = MetricsProbe(source, self.plan.scrape_interval_s)
        counts = {"ok": 0, "failed": 0}
        last_line = time.monotonic()

        def on_result(result: loadgen.RequestResult) -> None:
            # a line every PROGRESS_EVERY_S inside long tiers, so a slow node does not look stuck
            nonlocal last_line
            if result.warmup:
                return
            counts["ok" if result.ok else "failed"] += 1
            if time.monotonic() - last_line >= PROGRESS_EVERY_S:
                last_line = time.monotonic()
                of = f"/{plan.requests}" if plan.requests else ""
                self.progress(f"[{endpoint.side}] concurrency {concurrency}: "
                              f"{counts['ok'] + counts['failed']}{of} done, {counts['failed']} failed …")

        async with source, self._client() as client:
            conditions.start()
            await probe.begin()
            probe_task = asyncio.create_task(probe.run_until(done))
            try:
                run = await loadgen.run_tier(client, endpoint.url, self.prompts, plan, settings,
                                             on_result=on_result)
            finally:
                done.set()
                await probe_task
        stats = loadgen.tier_stats(run)
        figures = side_from_stats(stats, probe.figures())
        figures["wall_s"] = run.wall_s
        self.record.put(concurrency, endpoint.side, figures,
                        await conditions.finish(stats.requests_failed, stats.output_tokens,
                                                figures.get("server_generation_tokens")))
        self.progress(_progress_line(endpoint.side, concurrency, figures))
        self.on_tier(self.record)
        if run.server_dead:
            self.record.stopped = redact(f"{endpoint.side}: {run.dead_message}")  # stored: no credentials
            return False
        if stats.requests_ok == 0:
            why = stats.first_failure or "no request finished"
            self.record.stopped = redact(f"{endpoint.side}: every request at concurrency {concurrency} failed "
                                         f"({stats.requests_failed}); the first: {why}")
            return False
        return True


def _progress_line(side: str, concurrency: int, f: dict) -> str:
    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value * 1000:.1f} ms"

    tps = f.get("output_tokens_per_s")
    parts = [f"[{side}] concurrency {concurrency}: {f['requests_ok']} ok, {f['requests_failed']} failed",
             f"{tps:.1f} tok/s" if tps is not None else "— tok/s",
             f"TPOT p50 {ms(f.get('tpot_p50_s'))}", f"TTFT p50 {ms(f.get('ttft_p50_s'))}"]
    if f.get("acceptance_length") is not None:
        parts.append(f"L {f['acceptance_length']:.2f}")
    if f.get("running_mean") is not None:
        parts.append(f"running {f['running_mean']:.1f}")
    if f.get("failures"):
        parts.append("failures " + ", ".join(f"{k} {v}" for k, v in sorted(f["failures"].items())))
    return ", ".join(parts)


async def run_rounds(sweep: LiveSweep, endpoints: dict[str, Endpoint], concurrency: int, *,
                     budget_left_s: float | None) -> bool:
    """One tier in interleaved rounds until the adaptive stop says enough (see `next_round`).
    False when the sweep must stop."""
    plan = sweep.plan
    started = sweep.clock()
    done = 0
    while True:
        rounds = [r for r in sweep.record.rounds.get(concurrency, [])
                  if r["baseline"] is not None and r["speculative"] is not None]
        speedup = ratio_interval([r["speculative"].get("output_tokens_per_s") for r in rounds],
                                 [r["baseline"].get("output_tokens_per_s") for r in rounds])
        elapsed = sweep.clock() - started
        round_s = elapsed / done if done else None
        left = None if budget_left_s is None else budget_left_s - elapsed
        decision = next_round(done, speedup, min_rounds=plan.repeat, max_rounds=plan.max_rounds,
                              budget_left_s=left, round_s=round_s)
        if not decision.go_on:
            sweep.record.tier_notes[concurrency] = {"rounds": done, "stopped_because": decision.reason,
                                                    "round_s": round_s}
            return True
        for side in round_order(done):
            if not await sweep.run_tier(endpoints[side], concurrency):
                return False
        done += 1
        if done > 1 or plan.repeat > 1:
            sweep.progress(f"concurrency {concurrency}: round {done} done")


async def sweep_two_servers(sweep: LiveSweep, baseline: Endpoint, speculative: Endpoint) -> SweepRecord:
    """Two running servers: each tier in rounds of both sides, interleaved (`round_order`), so a
    sweep that stops early still holds complete rounds for the tiers before. With a budget, each
    tier gets an equal share of what is left of it when the tier starts."""
    try:
        await sweep.prepare(baseline)
        await sweep.prepare(speculative)
    except SweepError as exc:
        sweep.record.stopped = redact(str(exc))
        return sweep.record
    await run_tiers(sweep, {baseline.side: baseline, speculative.side: speculative})
    return sweep.record


async def run_tiers(sweep: LiveSweep, endpoints: dict[str, Endpoint]) -> bool:
    """Every tier in rounds; with a budget, each tier's share is an equal part of what is left of
    it when the tier starts (a tier resolved early leaves more for the later ones). False when the
    sweep stopped."""
    started = sweep.clock()
    tiers = list(sweep.plan.tiers)
    for i, concurrency in enumerate(tiers):
        share = None
        if sweep.plan.budget_s is not None:
            share = max(sweep.plan.budget_s - (sweep.clock() - started), 0.0) / (len(tiers) - i)
        if not await run_rounds(sweep, endpoints, concurrency, budget_left_s=share):
            return False
    return True
