"""Triton Inference Server's TensorRT-LLM backend: its `nv_trt_llm_*` families (on :8002/metrics, on
by default since Triton 23.11), mapped onto the EngineSample fields the window reads.

The reporter (TensorRT-LLM's triton_backend custom_metrics_reporter) exports gauges keyed by a
category label, each labelled by `model` and `version`:

  nv_trt_llm_request_metrics{request_type="active"}   → vllm:num_requests_running
  nv_trt_llm_request_metrics{request_type="waiting"}  → vllm:num_requests_waiting
  nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} → vllm:kv_cache_usage_perc
  ...{kv_cache_block_type="max"} × ...{"tokens_per"}  → KV capacity in tokens
  nv_inference_request_success{model=…} (Triton's own counter) → vllm:request_success

No speculation family exists among them (nor a token counter, nor a latency histogram per token), so
speculation cannot be judged here: TargetSample.unjudged says so, and the verdict is unknown.
"""

from __future__ import annotations

from typing import Any

from specwatch.collectors.engines import TRITON, MetricsReading, claims
from specwatch.collectors.families import read_series
from specwatch.readings.window import KV_CAPACITY_TOKENS, REQUEST_SUCCESS, RUNNING, WAITING
from specwatch.telemetry.snapshot import TARGET_OK, EngineSample, SpeculationConfig, TargetSample

KV_USAGE = "vllm:kv_cache_usage_perc"
REQUESTS = "nv_trt_llm_request_metrics"
KV_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
BATCHER = "nv_trt_llm_inflight_batcher_metrics"
# request_type → the window's name; "scheduled", "context" and "max" are kept under Triton's names
REQUEST_TYPES = {"active": RUNNING, "waiting": WAITING}
RAW = {REQUESTS: "request_type", KV_BLOCKS: "kv_cache_block_type", BATCHER: "inflight_batcher_specific_metric"}

UNJUDGED = ("Triton's TensorRT-LLM backend exports no speculation family (nv_trt_llm_* holds load, queue and "
            "KV only): acceptance cannot be read, so no verdict. Serve the engine with trtllm-serve "
            "(return_perf_metrics: true) to have it judged")


def read_triton(text: str) -> MetricsReading:
    """The payload → one EngineSample per TensorRT-LLM model. Raises ValueError when the text is not
    Prometheus exposition."""
    series = read_series(text)
    if not claims(TRITON, text):
        return MetricsReading((), None, ("nv_trt_llm_",))
    models = list(dict.fromkeys(labels.get("model") for labels, _ in series.series(REQUESTS)))
    engines = []
    for i, model in enumerate(models or [None]):
        def of_model(labels: dict[str, str], m: str | None = model) -> bool:
            return labels.get("model") == m

        gauges: dict[str, float] = {}
        for family, category in RAW.items():
            for labels, value in series.series(family, of_model):
                kind = labels.get(category, "")
                gauges[f"{family}:{kind}"] = value
                if family == REQUESTS and kind in REQUEST_TYPES:
                    gauges[REQUEST_TYPES[kind]] = value
        fraction = gauges.get(f"{KV_BLOCKS}:fraction")
        if fraction is not None:
            gauges[KV_USAGE] = fraction
        blocks, per_block = gauges.get(f"{KV_BLOCKS}:max"), gauges.get(f"{KV_BLOCKS}:tokens_per")
        if blocks is not None and per_block is not None:
            gauges[KV_CAPACITY_TOKENS] = blocks * per_block
        counters = {}
        success = series.total("nv_inference_request_success", of_model)
        if success is None:
            success = series.total("nv_inference_request_success_total", of_model)
        if success is not None:
            counters[REQUEST_SUCCESS] = success
        engines.append(EngineSample(str(i), model, counters, gauges))
    return MetricsReading(tuple(engines))


def scrape_triton(target: Any, text: str, payload_bytes: int, elapsed: float,
                  declared: SpeculationConfig | None) -> TargetSample:
    """Triton's /metrics, already fetched by the shared transport (collectors.vllm)."""
    if not claims(TRITON, text):
        return TargetSample(target.url, "families_missing",
                            f"Triton at {target.url}: /metrics has no nv_trt_llm_ family (is the TensorRT-LLM "
                            "backend loaded? Triton serves its metrics on :8002)",
                            payload_bytes=payload_bytes, engine=TRITON)
    try:
        reading = read_triton(text)
    except ValueError as exc:
        return TargetSample(target.url, "not_prometheus", f"Triton at {target.url}: {exc}",
                            payload_bytes=payload_bytes, engine=TRITON)
    return TargetSample(target.url, TARGET_OK, engines=reading.engines, scrape_seconds=elapsed,
                        payload_bytes=payload_bytes, speculation=declared, engine=TRITON, unjudged=UNJUDGED)
