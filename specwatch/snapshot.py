"""The one data type that flows from sources to the window, the advisor and the widgets.

A Snapshot is the raw readings of one poll, as read: counters and gauges keep vLLM's own family
names (old and new spellings alike), so a recording made today can be re-interpreted by a later
specwatch. Interpretation (aliases, rates, quantiles) lives in `specwatch.window`.

Snapshots are immutable and round-trip through plain dicts (`to_dict`/`from_dict`), which is what
recordings and `check --json` are built from. SNAPSHOT_VERSION changes whenever the dict layout does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SNAPSHOT_VERSION = 1


class SnapshotFormatError(ValueError):
    """A dict that does not describe a Snapshot this version of specwatch can read."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative buckets as exposed: (upper bound, cumulative count), sorted by bound, +Inf last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def to_dict(self) -> dict[str, Any]:
        return {"buckets": [[_enc(le), c] for le, c in self.buckets], "sum": self.sum, "count": self.count}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Histogram:
        # Recordings hold 86 400 Snapshots a day, each with a few histograms of ~20 buckets: values
        # that JSON already decoded as floats are taken as they are (float() of a float is itself).
        return cls(
            buckets=tuple([(le if le.__class__ is float else _dec(le), c if c.__class__ is float else float(c))
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
            "counters": {k: _enc(v) for k, v in self.counters.items()},
            "gauges": {k: _enc(v) for k, v in self.gauges.items()},
            "histograms": {k: h.to_dict() for k, h in self.histograms.items()},
            "accepted_per_position": list(self.accepted_per_position),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineSample:
        return cls(
            engine=str(d["engine"]),
            model_name=d.get("model_name"),
            counters={k: v if v.__class__ is float else _dec(v) for k, v in d.get("counters", {}).items()},
            gauges={k: v if v.__class__ is float else _dec(v) for k, v in d.get("gauges", {}).items()},
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

    @property
    def ok(self) -> bool:
        return self.state == TARGET_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "state": self.state,
            "message": self.message,
            "version": self.version,
            "engines": [e.to_dict() for e in self.engines],
            "process_start_time": self.process_start_time,
            "scrape_seconds": self.scrape_seconds,
            "payload_bytes": self.payload_bytes,
        }

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
        )


# GPU field names, shared by every GPU source. Activity and utilisation fields are fractions in
# 0..1; power in W; clocks in MHz; memory in bytes; temperature in °C; PCIe/NVLink in bytes/s.
GPU_FIELDS = (
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_bw_util",
    "util_gpu",
    "util_memory",
    "power_w",
    "power_limit_w",
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
    mig_mode: bool | None = None

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "source": self.source,
            "values": {k: _enc(v) for k, v in self.values.items()},
            "errors": dict(self.errors),
            "lost": self.lost,
            "throttle_reasons": list(self.throttle_reasons),
            "processes": [[p.pid, p.name, p.used_memory_bytes] for p in self.processes],
            "compute_capability": list(self.compute_capability) if self.compute_capability else None,
            "mig_mode": self.mig_mode,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuSample:
        cc = d.get("compute_capability")
        return cls(
            index=int(d["index"]),
            name=str(d["name"]),
            uuid=d.get("uuid"),
            source=str(d.get("source", "nvml")),
            values={k: v if v.__class__ is float else _dec(v) for k, v in d.get("values", {}).items()},
            errors={str(k): str(v) for k, v in d.get("errors", {}).items()},
            lost=bool(d.get("lost", False)),
            throttle_reasons=tuple(d.get("throttle_reasons", ())),
            processes=tuple(GpuProcess(int(p[0]), str(p[1]), p[2]) for p in d.get("processes", ())),
            compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
            mig_mode=d.get("mig_mode"),
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
def _enc(v: float) -> float | str:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    return v


def _dec(v: float | str) -> float:
    return float(v)
