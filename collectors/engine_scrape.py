"""The scrape of every engine but vLLM, after the shared transport (collectors.vllm) fetched the
payload and `choose_engine` named its engine: the adapter that reads it, its info probe, and where the
target sits in a deployment (a Dynamo worker's labels, or the operator's --prefill)."""

from __future__ import annotations

from typing import Any

from specwatch.collectors.engines import DYNAMO, SGLANG, TRITON, TRTLLM
from specwatch.telemetry.snapshot import SpeculationConfig, TargetSample


async def scrape_engine(client: Any, target: Any, text: str, payload_bytes: int, elapsed: float,
                        probe_info: bool, declared: SpeculationConfig | None) -> TargetSample:
    from specwatch.collectors.dynamo import placed_in_deployment, scrape_dynamo

    engine = target.detected
    if engine == SGLANG:
        from specwatch.collectors.sglang import scrape_sglang

        sample = await scrape_sglang(client, target, text, payload_bytes, elapsed, probe_info, declared)
    elif engine == TRTLLM:
        from specwatch.collectors.trtllm import scrape_trtllm

        sample = await scrape_trtllm(client, target, text, payload_bytes, elapsed, probe_info, declared)
    elif engine == TRITON:
        from specwatch.collectors.triton import scrape_triton

        sample = scrape_triton(target, text, payload_bytes, elapsed, declared)
    elif engine == DYNAMO:
        return scrape_dynamo(target, text, payload_bytes, elapsed, declared)
    else:
        raise ValueError(f"no adapter for the engine {engine!r}")
    return placed_in_deployment(target, text, sample)

