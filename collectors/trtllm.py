"""The TensorRT-LLM adapter: `trtllm-serve`'s Prometheus text at /prometheus/metrics, mapped onto the
EngineSample fields the window reads (vLLM's family names).

Names, types and labels follow TensorRT-LLM's collector (tensorrt_llm/metrics/collector.py, prefix
`trtllm_`, labels model_name and engine_type). The endpoint is mounted only with
`return_perf_metrics: true` in the `--extra_llm_api_options` YAML; the iteration-level gauges
(running, waiting, KV) need `enable_iter_perf_stats: true` too.

What maps onto what (TensorRT-LLM → the window's name):

  num_requests_running → vllm:num_requests_running   num_requests_waiting → vllm:num_requests_waiting
  kv_cache_utilization (0..1) → vllm:kv_cache_usage_perc
  kv_cache_max_blocks × kv_cache_tokens_per_block → KV capacity in tokens
  prompt_tokens_total, generation_tokens_total, prompt_cached_tokens_total, request_success_total
  time_to_first_token_seconds, time_per_output_token_seconds (per request: per token), and the request
  phase histograms (e2e, queue, prefill, decode, inference) under vLLM's names

Speculation, from counters only, never from the last-iteration gauge
`trtllm_spec_decode_acceptance_length` (it reads 0 after an iteration without drafts):

- the per-position counters `trtllm_spec_decode_{drafted,accepted}_tokens_total{token_position}`
  (counted when a request finishes): every draft has a position 0, so drafts = drafted at position 0,
  draft tokens = Σ drafted, accepted = Σ accepted, and accepted at position i is the window's
  per-position counter. Their children are created lazily (a position appears once a finished request
  drafted there): a position not yet seen has accepted nothing, and is written as 0 up to k;
- else the iteration counters `trtllm_spec_decode_num_{draft,accepted}_tokens_total` (summed over
  iterations as they run): draft tokens and accepted as they are, drafts = draft tokens / k, which is
  exact only where every draft has the full length k (no draft_len_schedule, no dynamic length).
  The per-position family, once exported (its HELP line shows before any child), is always preferred,
  so one target never mixes the two paths within a window.

k and the method come from `trtllm_speculative_config_info{spec_enabled, spec_method,
spec_num_tokens, spec_draft_model}`, the engine's own configuration (FROM_CONFIG_METRIC). A server that
says it speculates but exports no speculation counter (TensorRT-LLM before about 1.3, or the metrics
switched off), or one that exports neither the counters nor the configuration, gets no verdict:
TargetSample.unjudged says what to switch on.

The JSON endpoint `GET /metrics` (iteration stats) is never read here: it drains a buffer, so a second
reader steals iterations from whoever else reads it (collectors.vllm probes it at most once, to tell
the engine apart, and never when `--engine trtllm` is given).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specwatch.collectors.engines import TRTLLM, MetricsReading, claims
from specwatch.collectors.families import Series, read_series
from specwatch.readings.health import DECODE, E2E, INFERENCE, PREFILL, QUEUE
from specwatch.telemetry.urls import beside
from specwatch.telemetry.snapshot import (FROM_CONFIG_METRIC, TARGET_OK, EngineSample, Histogram, ParallelLayout,
                                         SpeculationConfig, TargetSample, parallel_layout_from, resolve_speculation)
from specwatch.readings.window import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    GENERATION_TOKENS,
    KV_CAPACITY_TOKENS,
    PROMPT_TOKENS,
    PROMPT_TOKENS_CACHED,
    REQUEST_SUCCESS,
    RUNNING,
    TTFT,
    WAITING,
)

PROMETHEUS_PATH = "/prometheus/metrics"
KV_USAGE = "vllm:kv_cache_usage_perc"
TPOT = "vllm:request_time_per_output_token_seconds"

COUNTERS = {
    "trtllm_prompt_tokens_total": PROMPT_TOKENS,
    "trtllm_generation_tokens_total": GENERATION_TOKENS,
    "trtllm_prompt_cached_tokens_total": PROMPT_TOKENS_CACHED,
    "trtllm_request_success_total": REQUEST_SUCCESS,
}
GAUGES = {
    "trtllm_num_requests_running": RUNNING,
    "trtllm_num_requests_waiting": WAITING,
    "trtllm_kv_cache_utilization": KV_USAGE,
}
HISTOGRAMS = {
    "trtllm_time_to_first_token_seconds": TTFT,
    "trtllm_time_per_output_token_seconds": TPOT,
    "trtllm_e2e_request_latency_seconds": E2E,
    "trtllm_request_queue_time_seconds": QUEUE,
    "trtllm_request_prefill_time_seconds": PREFILL,
    "trtllm_request_decode_time_seconds": DECODE,
    "trtllm_request_inference_time_seconds": INFERENCE,
}
# Kept under TensorRT-LLM's own names, for recordings and the reports; never judged from.
RAW_GAUGES = ("trtllm_spec_decode_acceptance_length", "trtllm_spec_decode_draft_overhead",
              "trtllm_iteration_latency_seconds", "trtllm_avg_decoded_tokens_per_iter",
              "trtllm_num_context_requests", "trtllm_num_generation_requests", "trtllm_kv_cache_hit_rate")
RAW_COUNTERS = ("trtllm_spec_decode_num_draft_tokens_total", "trtllm_spec_decode_num_accepted_tokens_total")

DRAFTED_BY_POSITION = "trtllm_spec_decode_drafted_tokens"
ACCEPTED_BY_POSITION = "trtllm_spec_decode_accepted_tokens"
NUM_DRAFT_TOKENS = "trtllm_spec_decode_num_draft_tokens"
NUM_ACCEPTED_TOKENS = "trtllm_spec_decode_num_accepted_tokens"
SPEC_CONFIG_INFO = "trtllm_speculative_config_info"
MODEL_CONFIG_INFO = "trtllm_model_config_info"

# spec_method (the decoding_type string) → the method names the performance model prices.
# AUTO drafts with n-gram lookup (TensorRT-LLM's blog 7).
METHODS = {"mtp": "mtp", "eagle": "eagle", "eagle3": "eagle3", "ngram": "ngram", "drafttarget": "draft",
           "draft_target": "draft", "medusa": "medusa", "auto": "ngram", "user_provided": "draft"}
# model_config_info's quantization → the weight formats specwatch prices (nvfp4 and the rest: none).
QUANTIZATION_WEIGHTS = {"fp8": "fp8", "fp8_block_scales": "fp8", "fp8_per_channel_per_token": "fp8",
                        "w4a16_awq": "awq", "w4a16_gptq": "gptq", "w8a16": "w8a16", "int8_weight_only": "w8a16",
                        "w4a16": "w4a16", "int4_weight_only": "w4a16", "w4a8_awq": "awq"}

# What the operator switches on, said once wherever the metrics are missing.
SWITCH_ON = ("set `return_perf_metrics: true` and `enable_iter_perf_stats: true` in the YAML given to "
             "trtllm-serve --extra_llm_api_options")
NO_COUNTERS = ("TensorRT-LLM exports no speculation counter here (trtllm_spec_decode_*: TensorRT-LLM 1.3 and "
               "newer, with the metrics on); its last-iteration acceptance gauge is never judged from, so no "
               "verdict: " + SWITCH_ON)
NO_CONFIG = ("TensorRT-LLM exports neither its speculation configuration (trtllm_speculative_config_info) nor "
             "speculation counters: whether it speculates cannot be read (TensorRT-LLM before about 1.3 shows it "
             "only in the draining JSON /metrics, which specwatch does not poll); " + SWITCH_ON + ", or upgrade")
NO_LOAD = ("TensorRT-LLM exports no running-request gauge (trtllm_num_requests_running, an iteration statistic): "
           "the load speculation is priced at cannot be read, so no verdict: " + SWITCH_ON)
NO_K = ("TensorRT-LLM's speculation counters have no per-position series and its configuration gives no k "
        "(spec_num_tokens): drafts cannot be counted; pass --k")


@dataclass(frozen=True)
class TrtllmReading:
    """One payload read: the engine samples and what it says of speculation and the weights."""

    reading: MetricsReading
    speculation: SpeculationConfig | None
    spec_enabled: bool | None  # the configuration's word; None where it is not exported
    unjudged: str | None
    weights: str | None
    parallel: ParallelLayout | None = None


def speculation_from_config_info(series: Series) -> tuple[SpeculationConfig | None, bool | None]:
    """trtllm_speculative_config_info → (the config, whether speculation is enabled); (None, None)
    where the gauge is not exported. Values of the wrong shape are left out, not guessed."""
    labels = series.labels_of(SPEC_CONFIG_INFO)
    if labels is None:
        return None, None
    enabled = labels.get("spec_enabled", "").strip().lower() in ("true", "1", "yes")
    if not enabled:
        return None, False
    raw_method = labels.get("spec_method", "").strip()
    method = METHODS.get(raw_method.lower().replace("-", ""), raw_method.lower()) if raw_method else None
    k_text = labels.get("spec_num_tokens", "").strip()
    k = int(k_text) if k_text.isdigit() and int(k_text) > 0 else None
    draft = labels.get("spec_draft_model", "").strip() or None
    config = SpeculationConfig.known(FROM_CONFIG_METRIC, method=method, k=k,
                                     draft_model=draft if method not in ("ngram", "mtp") else None)
    return (None if config.empty else config), True


PARALLEL_CONFIG_INFO = "trtllm_parallel_config_info"


def parallel_from_config_info(series: Series) -> ParallelLayout | None:
    """trtllm_parallel_config_info's tensor_parallel_size and expert_parallel_size (the experts
    spread over that many of the TP GPUs); it does not say whether attention runs data-parallel.
    None where the family or its tensor_parallel_size is missing."""
    labels = series.labels_of(PARALLEL_CONFIG_INFO) or {}
    return parallel_layout_from(labels.get("tensor_parallel_size"), labels.get("expert_parallel_size"), False,
                                PARALLEL_CONFIG_INFO)


def weights_from_config_info(series: Series) -> str | None:
    labels = series.labels_of(MODEL_CONFIG_INFO)
    quantization = (labels or {}).get("quantization", "").strip().lower()
    return QUANTIZATION_WEIGHTS.get(quantization)


def _positions(series: Series, name: str, model: str | None) -> dict[int, float]:
    out: dict[int, float] = {}
    for labels, value in series.series(name + "_total", lambda lb: lb.get("model_name") == model):
        position = labels.get("token_position", "")
        if position.isdigit():
            out[int(position)] = out.get(int(position), 0.0) + value
    return out


def _speculation_counters(series: Series, model: str | None, k: int | None) -> tuple[dict[str, float], tuple[float, ...]]:
    """The window's drafts, draft tokens and accepted counters, and accepted per position (see the
    module's docstring for the two paths); empty where the server exports neither."""
    of_model = (lambda lb: lb.get("model_name") == model)
    if series.has_family(DRAFTED_BY_POSITION) and series.has_family(ACCEPTED_BY_POSITION):
        drafted = _positions(series, DRAFTED_BY_POSITION, model)
        accepted = _positions(series, ACCEPTED_BY_POSITION, model)
        depth = max([k or 0, *(p + 1 for p in drafted), *(p + 1 for p in accepted)])
        per_position = tuple(accepted.get(i, 0.0) for i in range(depth))
        return ({DRAFTS: drafted.get(0, 0.0), DRAFT_TOKENS: float(sum(drafted.values())),
                 ACCEPTED: sum(per_position)}, per_position)
    draft_tokens = series.total(NUM_DRAFT_TOKENS + "_total", of_model)
    accepted_tokens = series.total(NUM_ACCEPTED_TOKENS + "_total", of_model)
    if draft_tokens is None or accepted_tokens is None or not k:
        return {}, ()
    return {DRAFTS: draft_tokens / k, DRAFT_TOKENS: draft_tokens, ACCEPTED: accepted_tokens}, ()


def _models(series: Series) -> list[str | None]:
    seen: dict[str | None, None] = {}
    for name, samples in series.samples.items():
        if name.startswith("trtllm_"):
            for labels, _ in samples:
                seen.setdefault(labels.get("model_name"), None)
    return list(seen) or [None]


def read_trtllm(text: str, declared_k: int | None = None) -> TrtllmReading:
    """The payload → one EngineSample per served model, with the speculation config and why it cannot
    be judged, where it cannot. `declared_k`: the operator's --k, for the iteration-counter path when
    the configuration gives none. Raises ValueError when the text is not Prometheus exposition."""
    series = read_series(text)
    if not claims(TRTLLM, text):
        return TrtllmReading(MetricsReading((), None, ("trtllm_",)), None, None, None, None)
    config, enabled = speculation_from_config_info(series)
    k = (config.k if config is not None else None) or declared_k
    engines = []
    counted = False
    for model in _models(series):
        of_model = (lambda lb, m=model: lb.get("model_name") == m)
        counters = {name: v for family, name in COUNTERS.items()
                    if (v := series.total(family, of_model)) is not None}
        counters.update({family[: -len("_total")]: v for family in RAW_COUNTERS
                         if (v := series.total(family, of_model)) is not None})
        gauges = {name: v for family, name in GAUGES.items() if (v := series.first(family, of_model)) is not None}
        gauges.update({family: v for family in RAW_GAUGES if (v := series.first(family, of_model)) is not None})
        blocks = series.first("trtllm_kv_cache_max_blocks", of_model)
        per_block = series.first("trtllm_kv_cache_tokens_per_block", of_model)
        if blocks is not None and per_block is not None:
            gauges[KV_CAPACITY_TOKENS] = blocks * per_block
        histograms: dict[str, Histogram] = {}
        for family, name in HISTOGRAMS.items():
            h = series.histogram(family, of_model)
            if h is not None:
                histograms[name] = h
        per_position: tuple[float, ...] = ()
        if enabled is not False:
            spec, per_position = _speculation_counters(series, model, k)
            counted = counted or bool(spec)
            counters.update(spec)
        engines.append(EngineSample("0" if len(engines) == 0 else str(len(engines)), model, counters, gauges,
                                    histograms, per_position))
    unjudged = None
    if enabled and not counted:
        has_counters = series.has_family(NUM_DRAFT_TOKENS) or series.has_family(DRAFTED_BY_POSITION)
        unjudged = NO_K if has_counters else NO_COUNTERS
    elif enabled is None and not counted:
        unjudged = NO_CONFIG
    if config is not None and config.k is None and per_position_depth(engines):
        config = dataclasses.replace(config, k=per_position_depth(engines),
                                     sources=config.sources + (("k", "metrics"),))
    if unjudged is None and not series.has_family("trtllm_num_requests_running"):
        unjudged = NO_LOAD
    return TrtllmReading(MetricsReading(tuple(engines)), config, enabled, unjudged,
                         weights_from_config_info(series), parallel_from_config_info(series))


def per_position_depth(engines: tuple[EngineSample, ...] | list[EngineSample]) -> int:
    return max((len(e.accepted_per_position) for e in engines), default=0)


def looks_like_iteration_stats(body: bytes) -> bool:
    """Whether a /metrics answer is trtllm-serve's JSON iteration stats (a JSON array), not
    Prometheus text: what tells TensorRT-LLM apart on its first, and only, read of that endpoint."""
    head = body[:64].lstrip()
    return head.startswith(b"[") and (head[1:].lstrip()[:1] in (b"{", b"]", b""))


def prometheus_urls(base: str, shown: str) -> tuple[str, str, str]:
    """(the Prometheus text's URL, the base URL requested, the base URL shown) of a trtllm-serve
    whose base URL is `base` (credentials kept) and `shown` (redacted). An operator's URL naming the
    Prometheus path itself splits with `/prometheus` in its base: that is taken off."""

    def bare(url: str) -> str:
        return url[: -len("/prometheus")] if url.endswith("/prometheus") else url

    return bare(base) + PROMETHEUS_PATH, bare(base), bare(shown)


# -- the scrape ------------------------------------------------------------------------------------


async def scrape_trtllm(client: Any, target: Any, text: str, payload_bytes: int, elapsed: float,
                        probe_info: bool, declared: SpeculationConfig | None) -> TargetSample:
    """A trtllm-serve's Prometheus text, already fetched, read with its /version (once per server
    start). The collector's transport handling (collectors.vllm) is shared by every engine."""
    info = target.info
    if not claims(TRTLLM, text):
        return TargetSample(target.url, "families_missing",
                            f"TensorRT-LLM at {target.url}: {PROMETHEUS_PATH} has no trtllm_ family ({SWITCH_ON})",
                            version=info.version, payload_bytes=payload_bytes, engine=TRTLLM)
    try:
        read = read_trtllm(text, declared.k if declared is not None else None)
    except ValueError as exc:
        return TargetSample(target.url, "not_prometheus", f"TensorRT-LLM at {target.url}: {exc}",
                            version=info.version, payload_bytes=payload_bytes, engine=TRTLLM)
    generated = read.reading.engines[0].counters.get(GENERATION_TOKENS) if read.reading.engines else None
    last_generated = target.adapter_state.values.get("generated")
    if generated is not None and last_generated is not None and generated < last_generated:
        info.probed = False  # a restarted server: its version may have changed
    target.adapter_state.values["generated"] = generated
    if probe_info and not info.probed:
        await probe_version(client, target)
    return TargetSample(
        url=target.url,
        state=TARGET_OK,
        version=info.version,
        engines=read.reading.engines,
        scrape_seconds=elapsed,
        payload_bytes=payload_bytes,
        speculation=resolve_speculation(read.speculation, declared),
        engine=TRTLLM,
        weights=read.weights,
        unjudged=read.unjudged,
        parallel=read.parallel,
    )


async def probe_version(client: Any, target: Any) -> None:
    """/version ({"version": ...}), bounded by the collector's whole-request deadline; asked again on
    a later poll when it could not be read."""
    import asyncio

    import httpx

    from specwatch.collectors.transport import DEFAULT_MAX_BYTES, PayloadTooLarge, deadline_s, get_bounded

    info = target.info
    info.probed = True
    try:
        async with asyncio.timeout(deadline_s(client)):
            r = await get_bounded(client, beside(target.request_base or target.url, "/version", target.metrics_url),
                                  DEFAULT_MAX_BYTES)
        if r.status_code == 200:
            body = r.json()
            version = body.get("version") if isinstance(body, dict) else None
            info.version = str(version) if version is not None else info.version
    except ValueError:
        pass  # a 200 that is not JSON: asking again will not change it
    except (TimeoutError, httpx.HTTPError, OSError, PayloadTooLarge):
        info.probed = False
