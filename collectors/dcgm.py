"""GPU telemetry from a dcgm-exporter (/metrics on port 9400), and its merge with NVML's.

dcgm-exporter is how Volta/Ampere/Ada datacenter GPUs get SM, tensor and DRAM activity (NVML's
GPM only exists on Hopper and newer). Its payload is small (tens of series per GPU), so
prometheus_client's parser is fast enough here.

Units: DCGM_FI_PROF_* ratios are already 0..1; DCGM_FI_DEV_GPU_UTIL and MEM_COPY_UTIL are
percentages; power is W; clocks MHz; framebuffer MiB; PCIe/NVLink PROF fields bytes/s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specwatch.telemetry.exposition import LABEL_PAIR, METRIC_NAME, PLAIN_PAIR, PLAIN_VALUE, split_at_values, value_line_heads
from specwatch.telemetry.gpu_events import decode_clock_event_reasons
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuSample, SourceStatus
from specwatch.telemetry.urls import redact

DEFAULT_DCGM_URL = "http://localhost:9400/metrics"
SOURCE = "dcgm"
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024  # a 16-GPU node with every field is well under 1 MiB
MIB = 1024 * 1024

# exporter family → (GPU field, factor to specwatch units)
DCGM_FIELD_MAP: dict[str, tuple[str, float]] = {
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 1.0),
    # DRAM_ACTIVE is the fraction of cycles the memory interface moves data, GPM's DRAM_BW_UTIL
    # is bandwidth used over peak: the same question, answered at the same 0..1 scale.
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_bw_util", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", 0.01),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_memory", 0.01),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    # cumulative energy since the driver loaded, in mJ (dcgm_fields.h): joules over a span
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 0.001),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("mem_clock_max_mhz", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("memory_total_bytes", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_bytes_per_s", 1.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_bytes_per_s", 1.0),
}
# Families that feed something other than a plain field.
_FB_FREE = "DCGM_FI_DEV_FB_FREE"
_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
_THROTTLE_FAMILIES = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
# Integer-typed DCGM fields: the exporter prints DCGM's int32 "blank" sentinels for them.
_INT32_FIELDS = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_SM_CLOCK",
                           "DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MAX_MEM_CLOCK",
                           "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_TOTAL", _FB_FREE, _FB_RESERVED,
                           "DCGM_FI_DEV_GPU_TEMP"})
DCGM_INT32_BLANK_MIN = 0x7FFFFFF0  # dcgm_structs.h: DCGM_INT32_BLANK and the NOT_FOUND/... above it
DCGM_FP64_BLANK = 140737488355328.0  # 2**47; the int64 blanks (≈9.2e18) are above it too

# Reasons
REASON_NOT_EXPORTED = "not exported by this dcgm-exporter (add it to the counters file)"
REASON_BLANK = "DCGM has no value (blank)"
REASON_NAN = "dcgm-exporter reported NaN"
REASON_MIG_ONLY = "reported per MIG instance only"


@dataclass(frozen=True, slots=True)
class DcgmReading:
    """What one exporter payload says: one GpuSample per GPU, plus the host it runs on."""

    samples: tuple[GpuSample, ...]
    hostname: str | None = None
    series: int = 0  # DCGM_FI_* series read, all GPUs together


class DcgmParseError(ValueError):
    """The payload is not Prometheus text, or holds no DCGM GPU series."""


@dataclass
class _GpuAccumulator:
    index: int
    uuid: str | None
    name: str
    values: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    mig_only: set[str] = field(default_factory=set)
    fb_free: float | None = None
    fb_reserved: float | None = None
    throttle_mask: int | None = None


def _is_blank(family: str, value: float) -> bool:
    if value >= DCGM_FP64_BLANK:
        return True
    return family in _INT32_FIELDS and DCGM_INT32_BLANK_MIN <= value <= 0x7FFFFFFF


def parse_dcgm_metrics(text: str) -> DcgmReading:
    """Parse a dcgm-exporter payload into GpuSamples (source "dcgm"), one per GPU.

    Series without a `gpu` index label are skipped (NVLink/NVSwitch series, foreign metrics).
    Series carrying a MIG instance (`GPU_I_ID`) are not whole-GPU readings, so they are skipped
    too; a field seen only on MIG instances gets a reason saying so. Raises DcgmParseError when
    the text is not Prometheus exposition format or holds no DCGM GPU series at all.
    """
    if "\x00" in text:
        raise DcgmParseError("binary data, not Prometheus text")
    samples = _exporter_samples(text)
    if samples is None:
        try:
            samples = [(s.name, s.labels, s.value, f.type) for f in text_string_to_metric_families(text)
                       for s in f.samples]
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise DcgmParseError(f"not Prometheus text: {exc}") from None

    gpus: dict[str, _GpuAccumulator] = {}
    hostname: str | None = None
    series = 0
    for name, labels, value, family_type in samples:
        if not name.startswith("DCGM_FI_"):
            continue
        if name.endswith("_total") and family_type == "counter" and name not in DCGM_FIELD_MAP:
            # the exporter types the energy field a counter without `_total`; the parser adds it
            name = name[: -len("_total")]
        index_text = labels.get("gpu")
        if index_text is None or not index_text.strip().isdigit():
            continue
        series += 1
        hostname = hostname or labels.get("Hostname") or labels.get("hostname") or None
        uuid = labels.get("UUID") or labels.get("uuid") or None
        key = uuid or f"gpu:{index_text.strip()}"
        acc = gpus.get(key)
        if acc is None:
            acc = gpus[key] = _GpuAccumulator(
                index=int(index_text), uuid=uuid,
                name=labels.get("modelName") or labels.get("model_name") or "unknown GPU",
            )
        mig_instance = bool(labels.get("GPU_I_ID"))
        _add_series(acc, name, float(value), mig_instance)
    if not gpus:
        raise DcgmParseError("no DCGM_FI_* series with a gpu label (is this a dcgm-exporter?)")
    samples = tuple(_finish(acc) for acc in sorted(gpus.values(), key=lambda a: a.index))
    return DcgmReading(samples=samples, hostname=hostname, series=series)


# A sample line as dcgm-exporter writes every one: `NAME{k="v",...} VALUE`, label values without
# escapes, no timestamp. A payload of such lines, each under its own family's # TYPE line, is read
# by _exporter_samples; anything else by prometheus_client's parser, which reads every valid
# exposition and says why a payload is not one.
_EXPORTER_LINE = re.compile(f"({METRIC_NAME.pattern})(?:\\{{((?:{PLAIN_PAIR},?)*)\\}})? ({PLAIN_VALUE.pattern})")
_FAMILY_TYPES = frozenset(("counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset",
                           "gaugehistogram"))


def _exporter_samples(text: str) -> list[tuple[str, dict[str, str], float, str]] | None:
    """(sample name, labels, value, family type) of each sample, as prometheus_client's parser gives
    them, for a payload written the way dcgm-exporter writes one; None for any other (the caller
    parses it with prometheus_client). A dcgm-exporter payload of eight GPUs is read here in a
    fifth of the time: it is read once a second.

    An exporter repeats the text between its values on every scrape: once read line by line, a
    payload's shape (that text) keeps each sample's name, labels and type, and a later payload of
    the same shape has only its values read."""
    literals, values = split_at_values(text)
    shape = _SHAPES.get(literals)
    if shape is not None:
        return [(name, labels, float(values[i]), kind) for i, name, labels, kind in shape]
    samples = _exporter_lines(text)
    if samples is not None:
        positions = _sample_positions(literals, values)
        if positions is not None and len(positions) == len(samples):
            if len(_SHAPES) >= _SHAPES_MAX:
                _SHAPES.clear()
            _SHAPES[literals] = [(i, name, labels, kind) for i, (name, labels, _, kind) in zip(positions, samples)]
    return samples


def _sample_positions(literals: tuple[str, ...], values: list[str]) -> list[int] | None:
    """Which split values are the sample lines' (the others end comment lines); None when one ends a
    comment the reader reads it in: `# HELP NAME` or `# TYPE NAME` with nothing after the name,
    where another number would be another family (in help text, or any other comment, it is
    nothing the reader reads)."""
    positions = []
    for j, head in enumerate(value_line_heads(literals)):
        if head[:1] != "#":
            positions.append(j)
            continue
        comment = f"{head} {values[j]}".split(" ", 3)
        if len(comment) < 4 and comment[1:2] in (["TYPE"], ["HELP"]):
            return None
    return positions


# dcgm-exporter payload shapes seen (the text between their values) → each sample's split value,
# name, labels and family type. One per exporter read; bounded, as each key holds a payload's text.
_SHAPES: dict[tuple[str, ...], list[tuple[int, str, dict[str, str], str]]] = {}
_SHAPES_MAX = 8


def _exporter_lines(text: str) -> list[tuple[str, dict[str, str], float, str]] | None:
    """_exporter_samples read line by line."""
    samples: list[tuple[str, dict[str, str], float, str]] = []
    typed: set[str] = set()
    family, family_type = "", "unknown"
    labels_of: dict[str, dict[str, str]] = {}
    for line in text.split("\n"):
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                if parts[2] != family:
                    family, family_type = parts[2], "unknown"
                if parts[1] == "TYPE":
                    if len(parts) != 4 or parts[3] not in _FAMILY_TYPES or family in typed:
                        return None
                    typed.add(family)
                    family_type = parts[3]
            continue
        match = _EXPORTER_LINE.fullmatch(line)
        if match is None:
            return None
        name, label_text, value = match.groups()
        # prometheus_client names a counter's samples NAME_total, and files a sample that is not of
        # the family above it in a family of its own: the one case not read here
        if name == family:
            if family_type == "counter":
                name += "_total"
        elif not (family_type == "counter" and name == family + "_total"):
            return None
        labels = labels_of.get(label_text or "")
        if labels is None:
            labels = labels_of[label_text or ""] = dict(LABEL_PAIR.findall(label_text or ""))
        samples.append((name, labels, float(value), family_type))
    return samples


def _add_series(acc: _GpuAccumulator, family: str, value: float, mig_instance: bool) -> None:
    mapped = DCGM_FIELD_MAP.get(family)
    target = mapped[0] if mapped else family
    if mig_instance:
        acc.mig_only.add(target)
        return
    if math.isnan(value):
        if mapped:
            acc.errors.setdefault(target, REASON_NAN)
        return
    if math.isinf(value) or _is_blank(family, value):
        if mapped:
            acc.errors.setdefault(target, REASON_BLANK)
        return
    if mapped:
        acc.values[target] = value * mapped[1]
        acc.errors.pop(target, None)
    elif family == _FB_FREE:
        acc.fb_free = value * MIB
    elif family == _FB_RESERVED:
        acc.fb_reserved = value * MIB
    elif family in _THROTTLE_FAMILIES and value >= 0:
        acc.throttle_mask = int(value)


def _finish(acc: _GpuAccumulator) -> GpuSample:
    values, errors = dict(acc.values), dict(acc.errors)
    # The exporter's default counters have FB_USED/FB_FREE/FB_RESERVED but no total.
    if "memory_total_bytes" not in values and "memory_used_bytes" in values and acc.fb_free is not None:
        values["memory_total_bytes"] = values["memory_used_bytes"] + acc.fb_free + (acc.fb_reserved or 0.0)
    for name in GPU_FIELDS:
        if name not in values and name not in errors:
            errors[name] = REASON_MIG_ONLY if name in acc.mig_only else REASON_NOT_EXPORTED
    return GpuSample(
        index=acc.index,
        name=acc.name,
        uuid=acc.uuid,
        source=SOURCE,
        values=values,
        errors=errors,
        throttle_reasons=decode_clock_event_reasons(acc.throttle_mask) if acc.throttle_mask is not None else (),
    )


def _status_name(url: str) -> str:
    return f"{SOURCE} {url}"


async def fetch_dcgm(
    client: httpx.AsyncClient, url: str | None = None, timeout: float = 2.0
) -> tuple[tuple[GpuSample, ...], SourceStatus]:
    """Scrape one dcgm-exporter. Never raises for network or payload trouble.

    `url=None` probes the default http://localhost:9400/metrics: nothing listening there is the
    normal case on most nodes, so it gives state "absent" with no alarm in the message. An
    explicitly given URL that fails gives a clear error state instead: "connection_refused",
    "timeout", "dns_failure", "tls_error", "http_401|403|404|5xx|error", "payload_too_large",
    "network_error" or "not_prometheus".
    """
    explicit = url is not None
    target = url if url is not None else DEFAULT_DCGM_URL
    shown = redact(target)  # messages and the source name show no credentials
    name = _status_name(shown)
    try:
        async with client.stream("GET", target, timeout=timeout,
                                 headers={"Accept": "text/plain;version=0.0.4"}) as response:
            if response.status_code >= 400:
                return (), SourceStatus(name, _http_state(response.status_code),
                                        f"dcgm-exporter at {shown} answered HTTP {response.status_code}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_PAYLOAD_BYTES:
                    return (), SourceStatus(name, "payload_too_large",
                                            f"{shown} sent more than {MAX_PAYLOAD_BYTES // MIB} MiB")
                chunks.append(chunk)
    except httpx.ConnectError as exc:
        if not explicit:
            return (), SourceStatus(name, "absent", "no dcgm-exporter on this node")
        if _looks_like_dns(exc):
            return (), SourceStatus(name, "dns_failure", f"cannot resolve the host of {shown}: {exc}")
        if _looks_like_tls(exc):
            return (), SourceStatus(name, "tls_error", f"TLS failed for {shown}: {exc}")
        return (), SourceStatus(name, "connection_refused", f"nothing is listening at {shown} ({exc})")
    except httpx.TimeoutException:
        if not explicit:
            return (), SourceStatus(name, "absent", "no dcgm-exporter on this node (probe timed out)")
        return (), SourceStatus(name, "timeout", f"dcgm-exporter at {shown} did not answer within {timeout:g} s")
    except httpx.HTTPError as exc:
        return (), SourceStatus(name, "network_error", f"reading {shown} failed: {type(exc).__name__}: {exc}")

    body = b"".join(chunks)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return (), SourceStatus(name, "not_prometheus", f"{shown} sent binary data, not Prometheus text")
    try:
        reading = parse_dcgm_metrics(text)
    except DcgmParseError as exc:
        return (), SourceStatus(name, "not_prometheus", f"{shown}: {exc}")
    n = len(reading.samples)
    host = f" on {reading.hostname}" if reading.hostname else ""
    return reading.samples, SourceStatus(name, "ok", f"{n} GPU{'s' if n != 1 else ''}{host}")


def _http_state(status: int) -> str:
    if status in (401, 403, 404):
        return f"http_{status}"
    if 500 <= status <= 599:
        return "http_5xx"
    return "http_error"


def _looks_like_dns(exc: Exception) -> bool:
    text = str(exc).lower()
    return "name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text \
        or "temporary failure in name resolution" in text


def _looks_like_tls(exc: Exception) -> bool:
    text = str(exc).lower()
    return "ssl" in text or "certificate" in text or "tls" in text


# ---------------------------------------------------------------------------------------------
# Merge


def merge_gpu_samples(nvml: Sequence[GpuSample], dcgm: Sequence[GpuSample]) -> tuple[GpuSample, ...]:
    """One GpuSample per GPU: NVML's readings, with DCGM filling in the fields NVML lacks.

    GPUs are matched by UUID (by index only when NVML could not read a UUID). A GPU that took a
    field from DCGM gets source "nvml+dcgm", and that field's NVML reason is dropped. A lost GPU
    takes nothing: the exporter's last values for it are stale. When NVML sees no GPUs at all (no
    driver in this container, say), the list is DCGM's. DCGM GPUs that NVML does not list are not
    added otherwise: an explicit exporter URL may well describe another node.
    """
    if not nvml:
        return tuple(dcgm)
    by_uuid = {s.uuid: s for s in dcgm if s.uuid}
    by_index = {s.index: s for s in dcgm}
    merged: list[GpuSample] = []
    for sample in nvml:
        other = by_uuid.get(sample.uuid) if sample.uuid else by_index.get(sample.index)
        if other is None or sample.lost:
            merged.append(sample)
            continue
        values = dict(sample.values)
        errors = dict(sample.errors)
        filled = False
        for name, value in other.values.items():
            if name not in values:
                values[name] = value
                errors.pop(name, None)
                filled = True
        updates: dict[str, Any] = {}
        if not sample.throttle_reasons and other.throttle_reasons and "throttle_reasons" in sample.errors:
            updates["throttle_reasons"] = other.throttle_reasons
            errors.pop("throttle_reasons", None)
            filled = True
        if filled:
            merged.append(replace(sample, values=values, errors=errors, source="nvml+dcgm", **updates))
        else:
            merged.append(sample)
    return tuple(merged)
