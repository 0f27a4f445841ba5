"""TensorRT-LLM payloads built the way trtllm-serve builds them: prometheus_client families with the
names, types, labels and buckets of TensorRT-LLM's MetricsCollector (tensorrt_llm/metrics/collector.py),
exposed by prometheus_client's own generate_latest, at two versions:

- `current` (1.3 and newer, return_perf_metrics and enable_iter_perf_stats on): the per-request
  families, the iteration gauges, the speculation counters (per position, created lazily, and the
  iteration totals) and the config-info gauges;
- `basic` (the 1.1-era build Dynamo's January 2026 capture shows; 1.3 release candidates had no more
  than 14 trtllm_ families): per-request success and latency, tokens, no iteration gauges, no
  speculation family, no config info.

The values are set by the tests; the expected figures are worked out by hand in the tests from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LABELS = {"model_name": "deepseek-r1", "engine_type": "pytorch"}
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0]


@dataclass
class TrtllmState:
    """What a trtllm-serve has counted so far (the tests move it between scrapes)."""

    requests: int = 0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    running: float = 0.0
    waiting: float = 0.0
    kv_utilization: float = 0.0
    kv_max_blocks: float = 18432.0
    kv_tokens_per_block: float = 32.0
    drafted: dict[int, float] = field(default_factory=dict)  # per position, only positions seen
    accepted: dict[int, float] = field(default_factory=dict)
    num_draft_tokens: float = 0.0  # the iteration path
    num_accepted_tokens: float = 0.0
    last_acceptance_length: float = 0.0  # the last iteration's gauge
    spec: dict[str, str] | None = None  # speculative_config_info's labels; None: not logged
    per_position: bool = True  # the per-position families (TensorRT-LLM PR #12636 added them)
    quantization: str = "fp8"


def current(state: TrtllmState) -> str:
    r = CollectorRegistry()
    names = list(LABELS)
    Counter("trtllm_request_success_total", "Count of successfully processed requests.",
            [*names, "finished_reason"], registry=r).labels(**LABELS, finished_reason="stop").inc(state.requests)
    _per_request(r, state)
    for name, value in (("num_requests_running", state.running), ("num_requests_waiting", state.waiting),
                        ("kv_cache_utilization", state.kv_utilization), ("kv_cache_max_blocks", state.kv_max_blocks),
                        ("kv_cache_tokens_per_block", state.kv_tokens_per_block),
                        ("spec_decode_acceptance_length", state.last_acceptance_length),
                        ("iteration_latency_seconds", 0.0231)):
        Gauge("trtllm_" + name, name, names, registry=r).labels(**LABELS).set(value)
    Counter("trtllm_spec_decode_num_draft_tokens_total", "Total number of draft tokens in speculative decoding",
            names, registry=r).labels(**LABELS).inc(state.num_draft_tokens)
    Counter("trtllm_spec_decode_num_accepted_tokens_total", "Total number of accepted tokens in speculative decoding",
            names, registry=r).labels(**LABELS).inc(state.num_accepted_tokens)
    for family, by_position in (("trtllm_spec_decode_drafted_tokens_total", state.drafted),
                                ("trtllm_spec_decode_accepted_tokens_total", state.accepted))[:2 * state.per_position]:
        counter = Counter(family, "Total tokens per speculative decoding position.", [*names, "token_position"],
                          registry=r)
        for position, value in sorted(by_position.items()):  # children created lazily, as the collector does
            counter.labels(**LABELS, token_position=str(position)).inc(value)
    if state.spec is not None:
        info = {**LABELS, **state.spec}
        Gauge("trtllm_speculative_config_info", "Speculative decoding configuration info", list(info),
              registry=r).labels(**info).set(1)
    model = {**LABELS, "model": "deepseek-ai/DeepSeek-R1", "dtype": "bfloat16", "quantization": state.quantization,
             "gpu_type": "NVIDIA H200"}
    Gauge("trtllm_model_config_info", "Model configuration info", list(model), registry=r).labels(**model).set(1)
    return generate_latest(r).decode()


def basic(state: TrtllmState) -> str:
    r = CollectorRegistry()
    Counter("trtllm_request_success_total", "Count of successfully processed requests.",
            [*LABELS, "finished_reason"], registry=r).labels(**LABELS, finished_reason="length").inc(state.requests)
    _per_request(r, state)
    return generate_latest(r).decode()


def _per_request(r: CollectorRegistry, state: TrtllmState) -> None:
    names = list(LABELS)
    Counter("trtllm_prompt_tokens_total", "prompt", names, registry=r).labels(**LABELS).inc(state.prompt_tokens)
    Counter("trtllm_generation_tokens_total", "generation", names, registry=r).labels(**LABELS).inc(
        state.generation_tokens)
    ttft = Histogram("trtllm_time_to_first_token_seconds", "ttft", names, buckets=TTFT_BUCKETS, registry=r)
    for v in state.ttft:
        ttft.labels(**LABELS).observe(v)
    tpot = Histogram("trtllm_time_per_output_token_seconds", "tpot", names, buckets=TPOT_BUCKETS, registry=r)
    for v in state.tpot:
        tpot.labels(**LABELS).observe(v)
