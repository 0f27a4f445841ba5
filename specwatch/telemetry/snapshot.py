"""The one data type that flows from sources to the window, the advisor and the widgets.

A Snapshot is the raw readings of one poll, as read: counters and gauges keep vLLM's own family
names (old and new spellings alike), so a recording made today can be re-interpreted by a later
specwatch. Interpretation (aliases, rates, quantiles) lives in `specwatch.readings.window`.

Snapshots are immutable and round-trip through plain dicts (`to_dict`/`from_dict`), which is what
recordings and `check --json` are built from. SNAPSHOT_VERSION changes whenever the dict layout changes
in a way an older reader would misread. Keys added since layout 1 are optional and written only when
they hold something (a target's "speculation", its "token_budget", its "device"), so dicts without them still
read, and older readers skip them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from specwatch.telemetry.urls import is_loopback, url_host

SNAPSHOT_VERSION = 1


class SnapshotFormatError(ValueError):
    """A dict that does not describe a Snapshot this version of specwatch can read."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative buckets as exposed: (upper bound, cumulative count), sorted by bound, +Inf last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    @property
    def bucket_count(self) -> int:
        """len(buckets): a recording's reader gives it without pairing the buckets (the window asks
        it of every histogram it subtracts, and reads the buckets of few)."""
        return len(self.buckets)

    def to_dict(self) -> dict[str, Any]:
        return {"buckets": [[encode_float(le), c] for le, c in self.buckets], "sum": self.sum, "count": self.count}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Histogram:
        # Recordings hold 86 400 Snapshots a day, each with a few histograms of ~20 buckets: values
        # that JSON already decoded as floats are taken as they are (float() of a float is itself).
        return cls(
            buckets=tuple([(le if le.__class__ is float else decode_float(le), c if c.__class__ is float else float(c))
                           for le, c in d["buckets"]]),
            sum=float(d["sum"]),
            count=float(d["count"]),
        )


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One data-parallel engine of one vLLM target, as read in one scrape.

    counters/gauges map vLLM family names (e.g. "vllm:num_requests_running") to values; series that
    carry extra labels (finished_reason, source, ...) are summed. `accepted_per_position[i]` is the
    spec-decode per-position counter for position i; its length is k.
    """

    engine: str
    model_name: str | None
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    accepted_per_position: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "model_name": self.model_name,
            "counters": {k: encode_float(v) for k, v in self.counters.items()},
            "gauges": {k: encode_float(v) for k, v in self.gauges.items()},
            "histograms": {k: h.to_dict() for k, h in self.histograms.items()},
            "accepted_per_position": list(self.accepted_per_position),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineSample:
        return cls(
            engine=str(d["engine"]),
            model_name=d.get("model_name"),
            counters={k: v if v.__class__ is float else decode_float(v) for k, v in d.get("counters", {}).items()},
            gauges={k: v if v.__class__ is float else decode_float(v) for k, v in d.get("gauges", {}).items()},
            histograms={k: Histogram.from_dict(h) for k, h in d.get("histograms", {}).items()},
            accepted_per_position=tuple([v if v.__class__ is float else float(v)
                                         for v in d.get("accepted_per_position", ())]),
        )


# Target states. "ok" means the payload was read and held the families specwatch needs.
TARGET_OK = "ok"
TARGET_STATES = (
    TARGET_OK,
    "connection_refused",
    "timeout",
    "dns_failure",
    "tls_error",
    "http_401",
    "http_403",
    "http_404",
    "http_5xx",
    "http_error",
    "not_prometheus",
    "payload_too_large",
    "families_missing",
    "network_error",
)


# Where a speculation setting came from. The server's own /server_info is the fact; the operator's
# flags fill in what the server does not expose; the metrics give k (the per-position series).
FROM_SERVER_INFO = "server_info"
FROM_FLAGS = "flags"
FROM_METRICS = "metrics"
# The engine's own configuration, exported as an info metric (TensorRT-LLM's
# trtllm_speculative_config_info): what the server runs, as much a fact as /server_info.
FROM_CONFIG_METRIC = "config_metric"
# What the engine runs on, read from the host rather than said: a loopback server on a machine with
# no NVIDIA driver (inferred_device).
FROM_HOST = "host"
SPECULATION_SOURCES = (FROM_SERVER_INFO, FROM_FLAGS, FROM_METRICS, FROM_CONFIG_METRIC)
SPECULATION_FIELDS = ("method", "k", "draft_model", "draft_params", "prompt_lookup_min", "prompt_lookup_max",
                      "token_tree")
# How a disagreement names the operator's side of each field.
_DECLARED_AS = {"method": "--method", "k": "--k", "draft_model": "--draft-model", "draft_params": "--draft-params"}
# How a disagreement names the server's side, by where its value came from.
_SAID_BY = {FROM_SERVER_INFO: "the server's /server_info says", FROM_METRICS: "the server's metrics say",
            FROM_CONFIG_METRIC: "the server's configuration metric says"}
# The sources that say what the server runs: they win over the operator's declaration.
_SERVER_FACTS = (FROM_SERVER_INFO, FROM_CONFIG_METRIC)


def canonical_method_name(method: str) -> str:
    """The method as the performance model spells it (eagle3, ngram, draft, mtp, ...), or as given
    when the model does not know it (a newer vLLM's method is still worth showing)."""
    from specwatch.perf import canonical_method  # the model pulls numpy: only when a method is named

    try:
        return canonical_method(method)
    except ValueError:
        return method.strip()


@dataclass(frozen=True, slots=True)
class SpeculationConfig:
    """How a target speculates: method, k, draft model and its size, and where each came from.

    `sources` pairs each known field with its origin (SPECULATION_SOURCES). `disagreements` are the
    operator's declarations that the server contradicted, in words for the verdict's reasons.
    """

    method: str | None = None  # canonical where known (canonical_method_name)
    k: int | None = None  # num_speculative_tokens
    draft_model: str | None = None  # the draft model's name or path; None for lookup methods
    draft_params: float | None = None  # the draft model's parameter count
    prompt_lookup_min: int | None = None  # n-gram window, when the server gives it
    prompt_lookup_max: int | None = None
    token_tree: str | None = None  # vLLM's speculative_token_tree (tree drafting), as written
    sources: tuple[tuple[str, str], ...] = ()
    disagreements: tuple[str, ...] = ()

    def source_of(self, name: str) -> str | None:
        for field_name, source in self.sources:
            if field_name == name:
                return source
        return None

    @property
    def source(self) -> str | None:
        """Where the method came from (or, without one, the first field known)."""
        return self.source_of("method") or (self.sources[0][1] if self.sources else None)

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in SPECULATION_FIELDS)

    @classmethod
    def known(cls, source: str, disagreements: tuple[str, ...] = (), **values: Any) -> SpeculationConfig:
        """The fields given (None values left out), all from one source."""
        present = {k: v for k, v in values.items() if v is not None}
        unknown = set(present) - set(SPECULATION_FIELDS)
        if unknown:
            raise TypeError(f"not a speculation field: {', '.join(sorted(unknown))}")
        if "method" in present:
            present["method"] = canonical_method_name(str(present["method"]))
        return cls(**present, sources=tuple((k, source) for k in SPECULATION_FIELDS if k in present),
                   disagreements=disagreements)

    @classmethod
    def from_flags(cls, method: str | None = None, draft_model: str | None = None,
                   draft_params: float | None = None, k: int | None = None) -> SpeculationConfig | None:
        """What the operator declared (--method, --k, --draft-model, --draft-params); None when nothing."""
        config = cls.known(FROM_FLAGS, method=method or None, k=k or None, draft_model=draft_model or None,
                           draft_params=draft_params)
        return None if config.empty else config

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {name: getattr(self, name) for name in SPECULATION_FIELDS
                             if getattr(self, name) is not None}
        d["sources"] = dict(self.sources)
        if self.disagreements:
            d["disagreements"] = list(self.disagreements)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeculationConfig:
        if not isinstance(d, dict):
            raise TypeError(f"a speculation config must be an object, not {type(d).__name__}")

        def integer(name: str) -> int | None:
            value = d.get(name)
            return None if value is None else int(value)

        sources = d.get("sources", {})
        if not isinstance(sources, dict):
            raise TypeError("a speculation config's sources must be an object")
        return cls(
            method=None if d.get("method") is None else str(d["method"]),
            k=integer("k"),
            draft_model=None if d.get("draft_model") is None else str(d["draft_model"]),
            draft_params=None if d.get("draft_params") is None else float(d["draft_params"]),
            prompt_lookup_min=integer("prompt_lookup_min"),
            prompt_lookup_max=integer("prompt_lookup_max"),
            token_tree=None if d.get("token_tree") is None else str(d["token_tree"]),
            sources=tuple((str(k), str(v)) for k, v in sources.items() if k in SPECULATION_FIELDS),
            disagreements=tuple(str(x) for x in d.get("disagreements", ())),
        )


def resolve_speculation(observed: SpeculationConfig | None,
                        declared: SpeculationConfig | None) -> SpeculationConfig | None:
    """One config from what was observed (a sample's, or /server_info's) and what the operator
    declared. Field by field: the server's /server_info wins, since it is what the server runs, and so
    does a k its metrics count (the per-position series); else the declaration; else the rest of what
    was observed (older flags). Each declaration the server contradicts becomes a disagreement, said in
    the verdict's reasons."""
    if declared is None or declared.empty:
        return observed
    if observed is None or observed.empty:
        return declared
    values: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []
    disagreements = list(observed.disagreements)
    for name in SPECULATION_FIELDS:
        seen, seen_from = getattr(observed, name), observed.source_of(name)
        told, told_from = getattr(declared, name), declared.source_of(name)
        if seen is not None and (seen_from in _SERVER_FACTS or (seen_from == FROM_METRICS and name == "k")):
            values[name], source = seen, seen_from
            if told is not None and told != seen:
                disagreements.append(
                    f"{_DECLARED_AS.get(name, name)} {_words(told)} was given, but {_SAID_BY[seen_from]} "
                    f"{_words(seen)}: judged with {_words(seen)}")
        elif told is not None:
            values[name], source = told, told_from
        elif seen is not None:
            values[name], source = seen, seen_from
        else:
            continue
        sources.append((name, source or FROM_FLAGS))
    for note in declared.disagreements:
        disagreements.append(note)
    return SpeculationConfig(**values, sources=tuple(sources), disagreements=tuple(dict.fromkeys(disagreements)))


def _words(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """How a server lays its model out, as its own config says: tensor parallelism, expert
    parallelism (the GPUs its routed experts are spread over; None: none) and DP attention."""

    tp: int = 1
    ep: int | None = None
    dp_attention: bool = False
    source: str = ""  # where it was read, in words ("/server_info", "trtllm_parallel_config_info", ...)

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "ep": self.ep, "dp_attention": self.dp_attention, "source": self.source}

    @classmethod
    def from_dict(cls, d: Any) -> ParallelLayout | None:
        """A target's "parallel" entry: absent in Snapshots written before it existed."""
        if d is None:
            return None
        if not isinstance(d, dict):
            raise ValueError(f"a target's parallel layout must be an object, not {type(d).__name__}")
        tp, ep = d.get("tp", 1), d.get("ep")
        if not (isinstance(tp, int) and tp >= 1) or not (ep is None or (isinstance(ep, int) and ep >= 1)):
            raise ValueError(f"a target's parallel layout has tp {tp!r} and ep {ep!r}: whole numbers ≥ 1")
        return cls(tp, ep, bool(d.get("dp_attention")), str(d.get("source", "")))


def parallel_layout_from(tp: Any, ep: Any, dp_attention: Any, source: str) -> ParallelLayout | None:
    """A server's layout from its own figures, where they are whole numbers ≥ 1 (an ep of 1 is no
    expert parallelism); None where tp is not usable, not guessed."""
    def whole(value: Any) -> int | None:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    tp_value, ep_value = whole(tp), whole(ep)
    if tp_value is None:
        return None
    ep_value = ep_value if ep_value is not None and ep_value > 1 else None
    return ParallelLayout(tp_value, ep_value, bool(dp_attention) and ep_value is not None, source)


@dataclass(frozen=True, slots=True)
class TargetSample:
    """One vLLM server (one /metrics URL) in one poll: its state, and its engines when readable."""

    url: str
    state: str
    message: str = ""
    version: str | None = None
    engines: tuple[EngineSample, ...] = ()
    # process_start_time_seconds of the API server, when exposed: a change means a restart, which
    # the window treats as a counter reset even if the new counters already exceed the old ones.
    process_start_time: float | None = None
    scrape_seconds: float | None = None
    payload_bytes: int | None = None
    # The speculation setup: the server's /server_info merged with the operator's declaration.
    speculation: SpeculationConfig | None = None
    # The engine the payload was read as (collectors.engines): None is vLLM, as in every Snapshot
    # written before other engines were read; "sglang" for SGLang.
    engine: str | None = None
    # The engine's token budget per step as the server's own config gives it (vLLM's scheduler
    # budget, from /server_info in dev mode): the running decodes, each with its verified positions,
    # take it first and the prefill chunks get what is left, which is how speculation slows the
    # prefill once the budget binds. None where the server does not expose it (the operator's
    # --max-num-batched-tokens then stands in, in the advisor's config). Last, so that the fields
    # before it keep their places.
    token_budget: int | None = None
    # The device the engine runs on as the server's own config names it (vLLM's device_config.device,
    # from /server_info in dev mode): "cpu" tells the advisor that every position a step computes
    # costs compute from the first token, which no GPU's roofline says. None where not exposed.
    device: str | None = None
    # The served weights' format as the server's own config names its quantisation (vLLM's
    # model_config.quantization, from /server_info in dev mode, as a perf.WEIGHT_FORMATS name:
    # collectors.vllm.weights_from_server_info): what the advisor's datasheet prior reads per weight.
    # None where not exposed, unquantised, or a method whose format its name does not tell.
    weights: str | None = None
    # Where the target sits in a deployment (NVIDIA Dynamo): its namespace as the worker's or the
    # frontend's labels name it, None for a bare server.
    deployment: str | None = None
    # The target's part in that deployment: "frontend", "prefill" or "decode" (disaggregated
    # workers), "aggregated" (a worker doing both); None for a bare server. The speculation verdict
    # belongs to decode and aggregated workers.
    role: str | None = None
    # Why speculation cannot be judged from this target's metrics although it was read (Triton's
    # TensorRT-LLM backend exports no speculation family; a TensorRT-LLM too old to export its
    # counters; a Dynamo frontend, which sees no drafts), in words that say what would let it be
    # judged. The advisor then gives `unknown` with this reason, never a verdict on guesses.
    unjudged: str | None = None
    # The workers a Dynamo frontend's own metrics list (worker_id, and its worker_type where
    # labelled as "ID (type)"), so that the workers not being read can be named.
    workers: tuple[str, ...] = ()
    # How the server lays the model out over its GPUs, as its own config says (vLLM's parallel_config,
    # SGLang's server arguments, TensorRT-LLM's trtllm_parallel_config_info): what the advisor's
    # datasheet prior is laid out by, over the operator's --tp/--ep/--dp-attention. None where not said.
    parallel: ParallelLayout | None = None

    @property
    def ok(self) -> bool:
        return self.state == TARGET_OK

    @property
    def engine_name(self) -> str:
        return self.engine or "vllm"

    def to_dict(self) -> dict[str, Any]:
        d = {
            "url": self.url,
            "state": self.state,
            "message": self.message,
            "version": self.version,
            "engines": [e.to_dict() for e in self.engines],
            "process_start_time": self.process_start_time,
            "scrape_seconds": self.scrape_seconds,
            "payload_bytes": self.payload_bytes,
        }
        if self.speculation is not None:
            d["speculation"] = self.speculation.to_dict()
        if self.engine is not None:
            d["engine"] = self.engine
        if self.token_budget is not None:
            d["token_budget"] = self.token_budget
        if self.device is not None:
            d["device"] = self.device
        if self.weights is not None:
            d["weights"] = self.weights
        for name in ("deployment", "role", "unjudged"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.workers:
            d["workers"] = list(self.workers)
        if self.parallel is not None:
            d["parallel"] = self.parallel.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TargetSample:
        return cls(
            url=str(d["url"]),
            state=str(d["state"]),
            message=str(d.get("message", "")),
            version=d.get("version"),
            engines=tuple(EngineSample.from_dict(e) for e in d.get("engines", ())),
            process_start_time=d.get("process_start_time"),
            scrape_seconds=d.get("scrape_seconds"),
            payload_bytes=d.get("payload_bytes"),
            speculation=speculation_from_dict(d.get("speculation")),
            engine=None if d.get("engine") is None else str(d["engine"]),
            token_budget=token_budget_from_dict(d.get("token_budget")),
            device=server_word_from_dict(d.get("device")),
            weights=server_word_from_dict(d.get("weights")),
            deployment=server_word_from_dict(d.get("deployment")),
            role=server_word_from_dict(d.get("role")),
            unjudged=server_word_from_dict(d.get("unjudged")),
            workers=workers_from_dict(d.get("workers")),
            parallel=ParallelLayout.from_dict(d.get("parallel")),
        )


def workers_from_dict(value: Any) -> tuple[str, ...]:
    """A frontend's "workers" entry: absent in Snapshots written before it existed."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"a target's workers must be a list, not {type(value).__name__}")
    return tuple(str(w) for w in value)


def speculation_from_dict(d: Any) -> SpeculationConfig | None:
    """A target's "speculation" entry, absent in Snapshots written before it existed."""
    return None if d is None else SpeculationConfig.from_dict(d)


def server_word_from_dict(value: Any) -> str | None:
    """A target's word from its server's config ("device", "weights"), as text: absent (None) in
    Snapshots written before the entry existed, and where the server did not say it."""
    return None if value is None else str(value)


def resolve_device(observed: str | None, declared: str | None,
                   inferred: str | None = None) -> tuple[str | None, str | None]:
    """What the engine runs on and where that came from: the server's own word (`observed`, from its
    /server_info) wins over the operator's --device (`declared`), as in resolve_speculation, and both
    over what the host says (`inferred`: `inferred_device`). (None, None) where nothing says it."""
    if observed is not None:
        return observed, FROM_SERVER_INFO
    if declared is not None:
        return declared, FROM_FLAGS
    return (inferred, FROM_HOST) if inferred is not None else (None, None)


def inferred_device(url: str, sources: Sequence[SourceStatus], gpus: Sequence[GpuSample]) -> str | None:
    """"cpu" where the reading itself shows the engine has no NVIDIA GPU: the server is on this
    machine (a loopback URL), and this machine has no NVIDIA driver (NVML says so) and no GPU read
    from anywhere (no GPU sample, no dcgm-exporter answering). None otherwise: a remote server's
    device is not known from here, whatever this machine has."""
    host = url_host(url)
    if host is None or not is_loopback(host) or gpus:
        return None
    states = {s.name.split(" ", 1)[0]: s.state for s in sources}
    if states.get("nvml") != "no_driver" or any(s.name.startswith("dcgm") and s.state == "ok" for s in sources):
        return None
    return "cpu"


def token_budget_from_dict(value: Any) -> int | None:
    """A target's "token_budget" entry, absent in Snapshots written before it existed (and where the
    server did not say it). Anything but a whole number of at least 1 is a malformed Snapshot, not a
    budget guessed at: a ValueError, which the readers report as a damaged line."""
    if value is None:
        return None
    if value.__class__ is not int or value < 1:
        raise ValueError(f"a token budget must be a whole number ≥ 1, not {value!r}")
    return value


# GPU field names, shared by every GPU source. Activity and utilisation fields are fractions in
# 0..1; power in W; clocks in MHz; memory in bytes; temperature in °C; PCIe/NVLink in bytes/s.
GPU_ENERGY = "energy_j"
GPU_FIELDS = (
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_bw_util",
    "util_gpu",
    "util_memory",
    "power_w",
    "power_limit_w",
    "energy_j",  # cumulative since the driver loaded: an increase over a span is that span's energy
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_mhz",
    "mem_clock_max_mhz",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    name: str
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class MigInstance:
    """What makes a GpuSample a MIG device (a compute instance of a GPU instance) rather than a GPU:
    its parent, its ids and profile, and its share of the parent, which the performance model
    scales the parent's peaks by. A share NVML did not give is None, and the verdict says the
    step-time shape is assumed rather than scale by a guess."""

    parent_index: int
    parent_name: str  # the parent's NVML name: what identifies the hardware
    profile: str | None = None  # "3g.40gb"
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    sm_count: int | None = None
    sm_fraction: float | None = None  # compute slices / the parent's slices (MIG guide: fraction of SMs)
    memory_fraction: float | None = None  # instance memory / parent memory (memory slices, and their bandwidth)

    def to_dict(self) -> dict[str, Any]:
        return {"parent_index": self.parent_index, "parent_name": self.parent_name, "profile": self.profile,
                "gpu_instance_id": self.gpu_instance_id, "compute_instance_id": self.compute_instance_id,
                "sm_count": self.sm_count, "sm_fraction": self.sm_fraction, "memory_fraction": self.memory_fraction}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MigInstance:
        def number(key: str) -> float | None:
            value = d.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        def whole(key: str) -> int | None:
            value = d.get(key)
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(parent_index=int(d["parent_index"]), parent_name=str(d["parent_name"]),
                   profile=d.get("profile") if isinstance(d.get("profile"), str) else None,
                   gpu_instance_id=whole("gpu_instance_id"), compute_instance_id=whole("compute_instance_id"),
                   sm_count=whole("sm_count"), sm_fraction=number("sm_fraction"),
                   memory_fraction=number("memory_fraction"))


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU in one poll. Every field is a value, or absent with a reason in `errors`.

    `values` holds only fields that were read; `errors[field]` says why a field is N/A (for example
    "not supported on this GPU", "GPU is lost"). `lost` marks a GPU that fell off the bus while the
    others keep polling. `source` is "nvml", "dcgm" or "nvml+dcgm".
    """

    index: int
    name: str
    uuid: str | None = None
    source: str = "nvml"
    values: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lost: bool = False
    throttle_reasons: tuple[str, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    compute_capability: tuple[int, int] | None = None
    mig_mode: bool | None = None  # on a GPU: MIG enabled; its MIG devices are samples of their own
    mig: MigInstance | None = None  # on a MIG device: its parent and share

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "source": self.source,
            "values": {k: encode_float(v) for k, v in self.values.items()},
            "errors": dict(self.errors),
            "lost": self.lost,
            "throttle_reasons": list(self.throttle_reasons),
            "processes": [[p.pid, p.name, p.used_memory_bytes] for p in self.processes],
            "compute_capability": list(self.compute_capability) if self.compute_capability else None,
            "mig_mode": self.mig_mode,
            # only on MIG devices: recordings of whole GPUs read as before
            **({"mig": self.mig.to_dict()} if self.mig is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuSample:
        cc = d.get("compute_capability")
        return cls(
            index=int(d["index"]),
            name=str(d["name"]),
            uuid=d.get("uuid"),
            source=str(d.get("source", "nvml")),
            values={k: v if v.__class__ is float else decode_float(v) for k, v in d.get("values", {}).items()},
            errors={str(k): str(v) for k, v in d.get("errors", {}).items()},
            lost=bool(d.get("lost", False)),
            throttle_reasons=tuple(d.get("throttle_reasons", ())),
            processes=tuple(GpuProcess(int(p[0]), str(p[1]), p[2]) for p in d.get("processes", ())),
            compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
            mig_mode=d.get("mig_mode"),
            mig=MigInstance.from_dict(d["mig"]) if isinstance(d.get("mig"), dict) else None,
        )


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """The health of one source that is not a vLLM target (NVML, a dcgm-exporter, ...)."""

    name: str  # "nvml", "dcgm http://localhost:9400/metrics", ...
    state: str  # "ok", "no_driver", "absent", "connection_refused", ...
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "message": self.message}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceStatus:
        return cls(name=str(d["name"]), state=str(d["state"]), message=str(d.get("message", "")))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything read in one poll. `time` is the source's own clock (unix seconds)."""

    time: float
    targets: tuple[TargetSample, ...] = ()
    gpus: tuple[GpuSample, ...] = ()
    sources: tuple[SourceStatus, ...] = ()
    version: int = SNAPSHOT_VERSION

    def target(self, url: str) -> TargetSample | None:
        for t in self.targets:
            if t.url == url:
                return t
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "time": self.time,
            "targets": [t.to_dict() for t in self.targets],
            "gpus": [g.to_dict() for g in self.gpus],
            "sources": [s.to_dict() for s in self.sources],
        }

    @classmethod
    def from_dict(cls, d: Any) -> Snapshot:
        if not isinstance(d, dict):
            raise SnapshotFormatError(f"a snapshot must be an object, not {type(d).__name__}")
        version = d.get("version")
        if version != SNAPSHOT_VERSION:
            raise SnapshotFormatError(
                f"snapshot version {version!r} is not readable by this specwatch "
                f"(it reads version {SNAPSHOT_VERSION})"
            )
        try:
            return cls(
                time=float(d["time"]),
                targets=tuple(TargetSample.from_dict(t) for t in d.get("targets", ())),
                gpus=tuple(GpuSample.from_dict(g) for g in d.get("gpus", ())),
                sources=tuple(SourceStatus.from_dict(s) for s in d.get("sources", ())),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise SnapshotFormatError(f"malformed snapshot: {exc!r}") from exc


# JSON has no NaN or infinities; encode them as strings so snapshots survive a JSON round trip.
def encode_float(v: float) -> float | str:
    """JSON has no spelling for non-finite floats: they are written as "NaN", "+Inf", "-Inf"."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    return v


def decode_float(v: float | str) -> float:
    return float(v)
