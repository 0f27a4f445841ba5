"""Engine adapters: what one serving engine's /metrics and info endpoints give, mapped onto the Snapshot.

The window, the advisor and every front end read an EngineSample by vLLM's family names (see
specwatch.readings.window): `vllm:num_requests_running`, `vllm:generation_tokens`, the spec-decode counters,
... An adapter is what turns another engine's payload into those fields, so nothing downstream needs
to know which engine it reads; TargetSample.engine says which one it was, for the reports.

The protocol (EngineAdapter) an engine follows:

- `name` ("vllm", "sglang") is what `--engine` takes and what TargetSample.engine holds; `label`
  ("vLLM", "SGLang") is how messages name it.
- `claims(text)`: whether a /metrics payload is this engine's (its family prefix at a line start).
- `read_metrics(text, state, now)`: the payload → a MetricsReading (engines, the server's start time
  when exposed, the families that are missing). `state` is the adapter's own per-target memory
  (what a gauge-only engine needs to build counters from successive readings); `now` is a monotonic
  clock reading in seconds, taken by the collector, so the mapping itself stays pure.
- `info_paths`: the endpoints read once per server start for the version and the speculation setup.

What the mapping must respect: a counter stays a counter (cumulative, going down only on a restart);
a gauge the engine averages over its own interval (SGLang's acceptance length) is not a counter and
is windowed by the adapter (see collectors.sglang); a field the engine does not expose stays absent
rather than guessed (the window then reports None and the advisor says what it could not judge).

The adapters: VllmAdapter (specwatch.collectors.vllm, its info probe `probe_target_info`) and
SglangAdapter (specwatch.collectors.sglang, its info probe `probe_sglang_info`). TensorRT-LLM,
Triton's TensorRT-LLM backend and Dynamo are read by module functions whose readings say more than
the protocol carries (the speculation configuration from a config-info metric, why a target cannot be
judged, where it sits in a deployment): collectors.trtllm.read_trtllm (/prometheus/metrics),
collectors.triton.read_triton, collectors.dynamo.read_frontend and read_planner; collectors.dynamo
also places a worker in its deployment around whichever reader reads the engine it wraps. The
transport (the bounded GET, the deadline, the failure states) is shared: collectors.vllm fetches
/metrics, then `choose_engine` names the engine, and collectors.engine_scrape the reader of any
engine but vLLM. A new engine adds a module beside collectors/sglang.py, its prefix in _PREFIX and
ENGINE_CHOICES, and its branch in collectors.engine_scrape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from specwatch.telemetry.snapshot import EngineSample

AUTO = "auto"
VLLM = "vllm"
SGLANG = "sglang"
TRTLLM = "trtllm"
TRITON = "triton"
DYNAMO = "dynamo"  # a Dynamo frontend; a Dynamo worker is read as the engine it wraps
ENGINE_CHOICES = (AUTO, VLLM, SGLANG, TRTLLM, TRITON, DYNAMO)
LABELS = {VLLM: "vLLM", SGLANG: "SGLang", TRTLLM: "TensorRT-LLM", TRITON: "Triton (TensorRT-LLM backend)",
          DYNAMO: "Dynamo"}


@dataclass(frozen=True)
class MetricsReading:
    """One engine payload, read: its engines, the server's start time, and what it lacks."""

    engines: tuple[EngineSample, ...]
    process_start_time: float | None = None
    missing: tuple[str, ...] = ()


@dataclass
class AdapterState:
    """An adapter's memory of one target between scrapes (reset when the target is rebuilt)."""

    values: dict[str, Any] = field(default_factory=dict)


class EngineAdapter(Protocol):
    name: str
    label: str
    info_paths: tuple[str, ...]

    def claims(self, text: str) -> bool: ...

    def read_metrics(self, text: str, state: AdapterState, now: float) -> MetricsReading: ...


# A family of the engine at the start of a line (a sample, or its # HELP / # TYPE line): a prefix
# inside a label value (a model called "sglang:...") does not count.
_PREFIX = {
    VLLM: re.compile(r"^(?:# (?:HELP|TYPE) )?vllm:", re.MULTILINE),
    SGLANG: re.compile(r"^(?:# (?:HELP|TYPE) )?sglang:", re.MULTILINE),
    TRTLLM: re.compile(r"^(?:# (?:HELP|TYPE) )?trtllm_", re.MULTILINE),
    TRITON: re.compile(r"^(?:# (?:HELP|TYPE) )?nv_trt_llm_", re.MULTILINE),
    DYNAMO: re.compile(r"^(?:# (?:HELP|TYPE) )?dynamo_frontend_", re.MULTILINE),
}
# A Dynamo worker's system port: its own families, beside the engine's passed through; and the
# planner's (PLANNER_PROMETHEUS_PORT).
_DYNAMO_WORKER = re.compile(r"^(?:# (?:HELP|TYPE) )?dynamo_component_", re.MULTILINE)
_DYNAMO_PLANNER = re.compile(r"^(?:# (?:HELP|TYPE) )?dynamo_planner_", re.MULTILINE)


def dynamo_planner(text: str) -> bool:
    """Whether a payload is a Dynamo planner's (dynamo_planner_* families)."""
    return _DYNAMO_PLANNER.search(text) is not None


def dynamo_worker(text: str) -> bool:
    """Whether a payload is a Dynamo worker's system port (dynamo_component_* families)."""
    return _DYNAMO_WORKER.search(text) is not None


def claims(engine: str, text: str) -> bool:
    return _PREFIX[engine].search(text) is not None


def detect_engine(text: str) -> str | None:
    """The engine whose families the payload holds: vLLM when it has any (a vLLM payload is read as
    before), else SGLang, TensorRT-LLM, Triton's TensorRT-LLM backend, a Dynamo frontend, in that
    order; else None (not a known engine's payload). A Dynamo worker's system port holds the engine's
    own families beside Dynamo's (dynamo_worker): it is read as that engine; one with Dynamo's
    alone (a mocker, or an engine whose metrics are off) is read as Dynamo."""
    for engine in (VLLM, SGLANG, TRTLLM, TRITON, DYNAMO):
        if claims(engine, text):
            return engine
    return DYNAMO if dynamo_worker(text) or dynamo_planner(text) else None


def choose_engine(forced: str, text: str) -> str:
    """The adapter to read a payload with: the one forced by `--engine`, else the one detected, else
    vLLM (whose reader then names the families it misses). `--engine dynamo` reads a frontend or a
    planner as Dynamo, and a worker's system port as the engine it passes through."""
    if forced == DYNAMO and not claims(DYNAMO, text):
        # a Dynamo worker's system port is read as the engine it wraps, when it passes one through
        return detect_engine(text) or DYNAMO
    if forced != AUTO:
        return forced
    return detect_engine(text) or VLLM


def check_engine_choice(engine: str) -> str:
    if engine not in ENGINE_CHOICES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINE_CHOICES)}")
    return engine
