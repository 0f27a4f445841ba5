"""NVIDIA Dynamo: its frontend's `dynamo_frontend_*` families, and the deployment labels of a worker's
system port, around the adapter of the engine the worker wraps.

A Dynamo deployment is one frontend and its workers. The frontend (`python -m dynamo.frontend`,
/metrics on its HTTP port) sees requests, queueing, TTFT and the time between tokens per model, but
no draft: Dynamo adds no speculation metric of its own. Each worker's system port (`DYN_SYSTEM_PORT`,
off by default) serves `dynamo_component_*` and passes the engine's own families through verbatim
(`vllm:spec_decode_*`, `sglang:spec_accept_*`, `trtllm_spec_decode_*`), with or without Dynamo's
hierarchy labels (dynamo_namespace, dynamo_component, dynamo_endpoint). So:

- a frontend is read here (read_frontend): one EngineSample per model, and the verdict is unknown with
  the reason that the drafts show only on the workers (TargetSample.unjudged);
- a worker is read by the vLLM, SGLang or TensorRT-LLM adapter as the bare engine would be, and this
  module adds where it sits (worker_identity): the deployment's namespace and its role. A worker
  whose port has Dynamo's families alone (the mocker, or an engine with its metrics off) is read from
  `dynamo_component_*` (load and KV), with no verdict.

What maps onto what, for the frontend (Dynamo → the window's name):

  active_requests (inflight_requests before) − queued → vllm:num_requests_running
  queued_requests (Σ stage_requests where exported)   → vllm:num_requests_waiting
  time_to_first_token_seconds                          → vllm:time_to_first_token_seconds
  inter_token_latency_seconds (one observation per token, OSL − 1 a request: its mean is the
      per-token decode time, comparable with speculation on and off) → the window's TPOT
  output_tokens_total → vllm:generation_tokens;  input_sequence_tokens' sum → vllm:prompt_tokens
  requests_total{status="success"} → vllm:request_success;  request_duration_seconds → e2e

The frontend lower-cases the model label on request series while its model_* gauges keep the case:
models are joined case-folded. Its per-worker gauges (`dynamo_frontend_worker_*{worker_id, dp_rank,
worker_type}`) list the workers it routes to: TargetSample.workers, so that the workers not being
read can be named.

A worker's role: Dynamo's worker_type / dynamo_component label where it says prefill or decode
("prefill" components are prefill workers in Dynamo's disaggregated examples), else the operator's
--prefill flag; a worker that says neither is "aggregated". The speculation verdict belongs to decode
and aggregated workers; a prefill worker is not judged (it verifies no drafts) and shows the prefill
tax: its TTFT and prompt throughput.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from specwatch.collectors.engines import DYNAMO, MetricsReading, claims, dynamo_planner, dynamo_worker
from specwatch.collectors.families import Series, read_series
from specwatch.readings.health import E2E
from specwatch.readings.window import GENERATION_TOKENS, PROMPT_TOKENS, REQUEST_SUCCESS, RUNNING, TTFT, WAITING
from specwatch.telemetry.snapshot import TARGET_OK, EngineSample, Histogram, SpeculationConfig, TargetSample

KV_USAGE = "vllm:kv_cache_usage_perc"
TPOT = "vllm:request_time_per_output_token_seconds"
FRONTEND = "frontend"
PLANNER = "planner"
PREFILL = "prefill"
DECODE = "decode"
AGGREGATED = "aggregated"
ROLES = (FRONTEND, PLANNER, PREFILL, DECODE, AGGREGATED)
# A deployment's members never judged by design (their decode workers are): their `unknown` lacks
# no data, and needs nobody
NOT_JUDGED_ROLES = (FRONTEND, PLANNER, PREFILL)
# The planner's gauges shown beside the verdict (planner_metrics.py, prefix dynamo_planner): its
# observed and estimated latencies, and the pools it sizes. Its SLA targets (ttft_ms, itl_ms) are in
# its configuration, not in its metrics.
PLANNER_GAUGES = ("observed_ttft_ms", "observed_itl_ms", "estimated_ttft_ms", "estimated_itl_ms",
                  "observed_requests_per_second", "num_prefill_replicas", "num_decode_replicas",
                  "predicted_num_prefill_replicas", "predicted_num_decode_replicas")
PLANNER_UNJUDGED = ("the Dynamo planner sizes the prefill and decode pools and sees no drafts: its latencies "
                    "are shown beside the workers' verdicts")

MODEL_READY = "dynamo_frontend_model_ready"
FRONTEND_UNJUDGED = ("a Dynamo frontend sees no drafts (Dynamo exports no speculation metric; the engine's own "
                     "counters show only on each worker's system port, DYN_SYSTEM_PORT): add the workers with "
                     "--url to have them judged")
PREFILL_UNJUDGED = ("a prefill worker verifies no drafts: the speculation verdict belongs to the decode workers; "
                    "this one shows the prefill tax (TTFT, prompt throughput)")
PARTIAL_VLLM_UNJUDGED = ("this Dynamo worker passes through vLLM's load gauges but not {missing} (Dynamo's mocker, which "
                         "simulates vLLM's scheduler, exports no token or speculation counter): load and latency are "
                         "read, speculation cannot be judged")
WORKER_UNJUDGED = ("this Dynamo worker's system port passes no engine metrics through (dynamo_component_* only: a "
                   "mocker, or an engine with its metrics off): load and KV are read, acceptance cannot be")

# (family, the window's name): the frontend's histograms
_HISTOGRAMS = (
    ("dynamo_frontend_time_to_first_token_seconds", TTFT),
    ("dynamo_frontend_inter_token_latency_seconds", TPOT),
    ("dynamo_frontend_request_duration_seconds", E2E),
)


def _fold(model: str | None) -> str | None:
    return model.casefold() if model is not None else None


def _frontend_models(series: Series) -> list[str | None]:
    seen: dict[str | None, str | None] = {}
    for name, samples in series.samples.items():
        if name.startswith("dynamo_frontend_") and not name.startswith("dynamo_frontend_worker_"):
            for labels, _ in samples:
                if "model" in labels:
                    seen.setdefault(_fold(labels["model"]), labels["model"])
    return list(seen.values()) or [None]


def frontend_workers(series: Series) -> tuple[str, ...]:
    """The workers the frontend routes to, from its per-worker gauges: "ID" or "ID (type)", with
    ":rank" for a data-parallel rank other than 0."""
    out: dict[str, None] = {}
    for name, samples in series.samples.items():
        if name.startswith("dynamo_frontend_worker_"):
            for labels, _ in samples:
                worker = labels.get("worker_id")
                if not worker:
                    continue
                rank = labels.get("dp_rank", "0")
                kind = labels.get("worker_type")
                ranked = f":{rank}" if rank not in ("", "0", "none") else ""
                out[worker + ranked + (f" ({kind})" if kind else "")] = None
    return tuple(sorted(out))


def read_frontend(text: str) -> tuple[MetricsReading, tuple[str, ...], str | None]:
    """A frontend's payload → (one EngineSample per model, the workers it lists, its namespace when
    labelled). Raises ValueError when the text is not Prometheus exposition."""
    series = read_series(text)
    if not claims(DYNAMO, text):
        return MetricsReading((), None, ("dynamo_frontend_",)), (), None
    engines = []
    for i, model in enumerate(_frontend_models(series)):
        def of_model(labels: dict[str, str], m: str | None = _fold(model)) -> bool:
            return m is None or _fold(labels.get("model")) == m

        active = series.total("dynamo_frontend_active_requests", of_model)
        if active is None:
            active = series.total("dynamo_frontend_inflight_requests", of_model)
        # queued_requests (deprecated, still served by 1.6) is per model; the stage gauges that replace
        # it carry no model label in 1.6.1 (real capture): they stand in only where it is gone
        queued = series.total("dynamo_frontend_queued_requests", of_model)
        if queued is None:
            queued = series.total("dynamo_frontend_stage_requests")
        gauges: dict[str, float] = {}
        if active is not None:
            gauges[RUNNING] = max(0.0, active - (queued or 0.0))
        if queued is not None:
            gauges[WAITING] = queued
        for family in (MODEL_READY, "dynamo_frontend_model_workers", "dynamo_frontend_model_total_kv_blocks",
                       "dynamo_frontend_model_max_num_seqs", "dynamo_frontend_model_kv_cache_block_size"):
            value = series.first(family, of_model)
            if value is not None:
                gauges[family] = value
        counters: dict[str, float] = {}
        generated = series.total("dynamo_frontend_output_tokens_total", of_model)
        if generated is not None:
            counters[GENERATION_TOKENS] = generated
        prompt = series.total("dynamo_frontend_input_sequence_tokens_sum", of_model)
        if prompt is not None:
            counters[PROMPT_TOKENS] = prompt
        success = series.total("dynamo_frontend_requests_total",
                               lambda lb, f=of_model: f(lb) and lb.get("status", "success") == "success")
        if success is not None:
            counters[REQUEST_SUCCESS] = success
        histograms: dict[str, Histogram] = {}
        for family, name in _HISTOGRAMS:
            h = series.histogram(family, of_model)
            if h is not None:
                histograms[name] = h
        engines.append(EngineSample(str(i), model, counters, gauges, histograms))
    namespace = next((labels["dynamo_namespace"] for samples in series.samples.values() for labels, _ in samples
                      if labels.get("dynamo_namespace")), None)
    return MetricsReading(tuple(engines)), frontend_workers(series), namespace


@dataclass(frozen=True)
class WorkerIdentity:
    """Where a worker's system port sits: its namespace, component, role, and its id as the frontend
    writes it (decimal; the worker's own port writes it in hex)."""

    namespace: str | None
    component: str | None
    role: str
    worker_id: str | None = None


def decimal_worker_id(text: str | None) -> str | None:
    """A worker's port writes its id in hex, the frontend in decimal (Dynamo 1.6.1): the frontend's
    spelling, so the two can be matched; None where it is not hex."""
    try:
        return str(int(text, 16)) if text else None
    except ValueError:
        return None


def worker_identity(text: str, prefill: bool = False) -> WorkerIdentity | None:
    """The deployment labels of a worker's system port (None when the payload is not one). `prefill`:
    the operator said so (--prefill), which wins where the labels say nothing."""
    if not dynamo_worker(text):
        return None
    series = read_series(text)
    labels = next((lb for name, samples in series.samples.items() if name.startswith("dynamo_component_")
                   for lb, _ in samples if lb.get("dynamo_namespace") or lb.get("dynamo_component")), {})
    component = labels.get("dynamo_component")
    said = " ".join(filter(None, (component, labels.get("worker_type"), labels.get("dynamo_endpoint")))).lower()
    if prefill or PREFILL in said:
        role = PREFILL
    elif DECODE in said:
        role = DECODE
    else:
        role = AGGREGATED
    return WorkerIdentity(labels.get("dynamo_namespace"), component, role,
                          decimal_worker_id(labels.get("worker_id")))


def read_bare_worker(text: str) -> MetricsReading:
    """A worker's port with Dynamo's families alone: its in-flight requests and KV usage."""
    series = read_series(text)
    gauges: dict[str, float] = {}
    inflight = series.total("dynamo_component_inflight_requests",
                            lambda lb: lb.get("dynamo_endpoint", "generate") == "generate")
    if inflight is not None:
        gauges[RUNNING] = inflight
    usage = series.first("dynamo_component_gpu_cache_usage_percent")
    if usage is None:
        usage = series.first("dynamo_component_kvstats_gpu_cache_usage_percent")
    if usage is not None:
        gauges[KV_USAGE] = usage
    blocks = series.first("dynamo_component_total_blocks")
    if blocks is None:
        blocks = series.first("dynamo_component_kvstats_total_blocks")
    if blocks is not None:
        gauges["dynamo_component_total_blocks"] = blocks
    counters = {}
    requests = series.total("dynamo_component_requests_total",
                            lambda lb: lb.get("dynamo_endpoint", "generate") == "generate")
    if requests is not None:
        counters[REQUEST_SUCCESS] = requests
    model = next((lb.get("model") for name, samples in series.samples.items()
                  if name.startswith("dynamo_component_") for lb, _ in samples if lb.get("model")), None)
    return MetricsReading((EngineSample("0", model, counters, gauges),))



# -- the scrape ------------------------------------------------------------------------------------


def read_planner(text: str) -> MetricsReading:
    """A planner's payload → one EngineSample holding its gauges under their own names
    (`dynamo_planner_observed_ttft_ms`, ...), summed over a model label where it carries one."""
    series = read_series(text)
    gauges = {f"dynamo_planner_{name}": value for name in PLANNER_GAUGES
              if (value := series.total(f"dynamo_planner_{name}")) is not None}
    model = next((lb.get("model_name") for samples in series.samples.values() for lb, _ in samples
                  if lb.get("model_name")), None)
    return MetricsReading((EngineSample("0", model, {}, gauges),))


def scrape_dynamo(target: Any, text: str, payload_bytes: int, elapsed: float,
                  declared: SpeculationConfig | None) -> TargetSample:
    """A Dynamo frontend's /metrics, a worker's system port with Dynamo's families alone, or the
    planner's."""
    try:
        if dynamo_planner(text) and not claims(DYNAMO, text):
            return TargetSample(target.url, TARGET_OK, engines=read_planner(text).engines, scrape_seconds=elapsed,
                                payload_bytes=payload_bytes, engine=DYNAMO, deployment=DYNAMO, role=PLANNER,
                                unjudged=PLANNER_UNJUDGED)
        if claims(DYNAMO, text):
            reading, workers, namespace = read_frontend(text)
            return TargetSample(target.url, TARGET_OK, engines=reading.engines, scrape_seconds=elapsed,
                                payload_bytes=payload_bytes, speculation=declared, engine=DYNAMO,
                                deployment=namespace or DYNAMO, role=FRONTEND, unjudged=FRONTEND_UNJUDGED,
                                workers=workers)
        if dynamo_worker(text):
            sample = TargetSample(target.url, TARGET_OK, engines=read_bare_worker(text).engines,
                                  scrape_seconds=elapsed, payload_bytes=payload_bytes, speculation=declared,
                                  engine=DYNAMO, unjudged=WORKER_UNJUDGED)
            return placed_in_deployment(target, text, sample)
    except ValueError as exc:
        return TargetSample(target.url, "not_prometheus", f"Dynamo at {target.url}: {exc}",
                            payload_bytes=payload_bytes, engine=DYNAMO)
    return TargetSample(target.url, "families_missing",
                        f"Dynamo at {target.url}: /metrics has neither dynamo_frontend_ nor dynamo_component_ "
                        "families (a worker's system port needs DYN_SYSTEM_PORT)",
                        payload_bytes=payload_bytes, engine=DYNAMO)


def placed_in_deployment(target: Any, text: str, sample: TargetSample) -> TargetSample:
    """The sample with where its target sits: a Dynamo worker's namespace and role from its labels,
    or a prefill worker the operator named (--prefill). A prefill worker is not judged."""
    if not sample.ok:
        return sample
    identity = worker_identity(text, target.prefill) if "dynamo_component_" in text else None
    workers = sample.workers
    if identity is None:
        if not target.prefill:
            return sample
        deployment, role = sample.deployment, PREFILL
    else:
        deployment, role = identity.namespace or DYNAMO, identity.role
        workers = (identity.worker_id,) if identity.worker_id else workers
    # a prefill worker's reason comes first: whatever else it lacks, it is not where drafts are verified
    unjudged = PREFILL_UNJUDGED if role == PREFILL else sample.unjudged
    return dataclasses.replace(sample, deployment=deployment, role=role, unjudged=unjudged, workers=workers)


def disaggregated_roles(samples: Sequence[TargetSample]) -> tuple[TargetSample, ...]:
    """The samples of one poll, with each worker a frontend of its deployment lists as a decode worker
    beside a prefill worker placed as "decode": a decode worker's own labels say "backend", as an
    aggregated worker's do (Dynamo 1.6.1), and only its frontend tells the two apart."""
    decode: set[tuple[str | None, str]] = set()
    for s in samples:
        if s.role == FRONTEND and any(w.endswith(f"({PREFILL})") for w in s.workers):
            decode.update((s.deployment, w.split(" ")[0]) for w in s.workers if w.endswith(f"({DECODE})"))
    if not decode:
        return tuple(samples)
    return tuple(dataclasses.replace(s, role=DECODE)
                 if s.role == AGGREGATED and any((s.deployment, w) in decode for w in s.workers) else s
                 for s in samples)
