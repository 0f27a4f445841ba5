"""One NVML device (a whole GPU or a MIG device) as the collector keeps it between polls, and the
two ways a device's reads end up in a sample: a call's result, or its reason on each field it
stood for; and a lost device's sample, every field "GPU is lost".

The state is one record shared by every part of the collector; the fields a part keeps between
polls are grouped below under its module's name. The collector's lock keeps every read and write
of it to one thread at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specwatch.collectors.nvml_calls import (
    REASON_GPU_LOST,
    REASON_NO_NVLINK,
    REASON_NOT_SUPPORTED,
    NvmlCallFailed,
    NvmlCalls,
)
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuSample, MigInstance

SOURCE_NAME = "nvml"


def text(value: Any) -> str:
    # Old bindings return bytes from the string calls.
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@dataclass
class DeviceState:
    """What the collector keeps per device between polls."""

    index: int
    handle: Any
    name: str = "unknown GPU"
    uuid: str | None = None
    compute_capability: tuple[int, int] | None = None
    mig_mode: bool | None = None
    static_values: dict[str, float] = field(default_factory=dict)
    static_errors: dict[str, str] = field(default_factory=dict)
    lost: bool = False
    # GPM (nvml_gpm.py): previous sample and a spare buffer, so a poll allocates nothing.
    gpm_reason: str | None = None  # None: GPM is supported
    gpm_previous: Any = None
    gpm_previous_time: float = 0.0
    gpm_spare: Any = None
    gpm_last_values: dict[str, float] = field(default_factory=dict)
    gpm_last_errors: dict[str, str] = field(default_factory=dict)
    # Throughput (nvml_fields.py): "counters" (cumulative field values, diffed) or "throughput" (the 20 ms call).
    pcie_mode: str = "counters"
    nvlink_links: int = 0
    nvlink_reason: str = REASON_NO_NVLINK
    counters: dict[str, tuple[float, float, bool]] = field(default_factory=dict)  # value, time, driver time?
    # Clock-event reasons (nvml_clocks.py): the function to call, the older name on drivers before R535.
    clock_reasons_function: str = "nvmlDeviceGetCurrentClocksEventReasons"
    # On a MIG device (nvml_mig.py): the GPU it is a slice of, and its ids and share.
    parent: DeviceState | None = None
    mig: MigInstance | None = None


def read_fields(calls: NvmlCalls, dev: DeviceState, errors: dict[str, str], fields: Sequence[str], function: str,
                *args: Any) -> Any:
    """One call for one or more fields: the result, or None with each field's reason set.

    Raises NvmlCallFailed only when the GPU is lost."""
    try:
        return calls.call(function, dev.handle, *args)
    except NvmlCallFailed as failed:
        if failed.lost:
            raise
        reason = failed.reason
        if reason == REASON_NOT_SUPPORTED and dev.mig_mode and function == "nvmlDeviceGetUtilizationRates":
            reason = "not supported with MIG enabled"
        for name in fields:
            errors[name] = reason
        return None


def lost_sample(dev: DeviceState) -> GpuSample:
    return GpuSample(
        index=dev.index,
        name=dev.name,
        uuid=dev.uuid,
        source=SOURCE_NAME,
        values={},
        errors={name: REASON_GPU_LOST for name in GPU_FIELDS},
        lost=True,
        compute_capability=dev.compute_capability,
        mig_mode=dev.mig_mode,
        mig=dev.mig,
    )
