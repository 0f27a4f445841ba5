"""GPU telemetry from NVML (nvidia-ml-py, imported as `pynvml`).

Every NVML call becomes a value or N/A with a reason; nothing here raises into the caller. The
collector initialises NVML lazily, once, on the first poll. Without a driver it reports a
SourceStatus with state "no_driver" and no GPUs.

Threading: `NvmlCollector` is synchronous. NVML calls block (PCIe throughput alone can sleep
20 ms in the driver), so run `poll()` in a worker thread (`asyncio.to_thread`, a Textual
thread worker). A lock serialises polls, so two threads never interleave the per-device GPM
state, but polls are meant to come from one thread at a time.

The collector finds the devices, reads what does not change once, and composes each poll from
parts split by what they read, all calling NVML through one `NvmlCalls` (nvml_calls.py):
clocks and clock-event reasons (nvml_clocks.py), field values and the PCIe/NVLink rates
(nvml_fields.py), GPM activity on Hopper+ (nvml_gpm.py), processes (nvml_processes.py) and MIG
devices (nvml_mig.py). Each device's state between polls is a `DeviceState` (nvml_device.py).

The pynvml module is a constructor argument, so tests hand in a double (tests/nvml_double.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from specwatch.collectors.nvml_calls import (
    NVML_DEVICE_MIG_ENABLE,
    REASON_COUNTER_RESET,
    REASON_FUNCTION_MISSING,
    REASON_GPU_LOST,
    REASON_NO_NVLINK,
    REASON_NOT_FOUND,
    REASON_NOT_SUPPORTED,
    REASON_WARMING_UP,
    NvmlCallFailed,
    NvmlCalls,
    is_gpu_lost_error,
    nvml_error_reason,
)
from specwatch.collectors.nvml_clocks import ClockReader
from specwatch.collectors.nvml_device import SOURCE_NAME, DeviceState, lost_sample, read_fields, text
from specwatch.collectors.nvml_fields import ThroughputCounters, counter_rate
from specwatch.collectors.nvml_gpm import GpmSampler
from specwatch.collectors.nvml_mig import MigDevices
from specwatch.collectors.nvml_processes import ProcessReader, process_display_name, read_process_name
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuProcess, GpuSample, SourceStatus

# What callers import from here, as before the parts moved out: the collector, the reasons and the
# pure helpers.
__all__ = [
    "REASON_COUNTER_RESET",
    "REASON_FUNCTION_MISSING",
    "REASON_GPU_LOST",
    "REASON_NOT_FOUND",
    "REASON_NOT_SUPPORTED",
    "REASON_NO_NVLINK",
    "REASON_WARMING_UP",
    "SOURCE_NAME",
    "NvmlCollector",
    "counter_rate",
    "is_gpu_lost_error",
    "nvml_error_reason",
    "process_display_name",
    "read_process_name",
]

# The collector's logger, which NvmlCalls warns on: the warnings keep the name they had when the
# calls were made from this module.
log = logging.getLogger(__name__)

# Init failures → SourceStatus state. Everything else is "error".
_INIT_STATE_BY_ERROR_CLASS: dict[str, str] = {
    "NVMLError_LibraryNotFound": "no_driver",
    "NVMLError_DriverNotLoaded": "no_driver",
    "NVMLError_LibRmVersionMismatch": "driver_mismatch",
    "NVMLError_NoPermission": "no_permission",
}


class NvmlCollector:
    """Reads every local NVIDIA GPU through NVML. See the module docstring for threading."""

    def __init__(
        self,
        nvml: ModuleType | Any | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        proc_root: str = "/proc",
        read_processes: bool = True,
    ) -> None:
        if nvml is None:
            import pynvml as nvml  # the real bindings; imported lazily so tests never need them
        self._nvml = nvml
        self._calls = NvmlCalls(nvml, log)
        self._clocks = ClockReader(self._calls)
        self._throughput = ThroughputCounters(self._calls, clock)
        self._gpm = GpmSampler(self._calls, clock)
        self._processes = ProcessReader(self._calls, proc_root) if read_processes else None
        self._mig = MigDevices(self._calls, self._processes)
        self._lock = threading.Lock()
        self._initialised = False
        self._init_status: SourceStatus | None = None
        self._devices: list[DeviceState] = []
        self._mig_devices: list[DeviceState] = []  # the MIG devices of MIG-enabled GPUs, after them
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Free GPM buffers and shut NVML down (once). Safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for dev in self._devices:
                self._gpm.release(dev)
            if self._initialised:
                self._calls.quiet("nvmlShutdown")
                self._initialised = False

    def __enter__(self) -> NvmlCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def device_count(self) -> int:
        return len(self._devices)

    # -- polling --------------------------------------------------------------------------------

    @property
    def reads_devices(self) -> bool:
        """Whether poll() may call into the driver (and block): not once NVML is known to be
        unusable here (no driver, no GPU) or the collector is closed."""
        status = self._init_status
        return not self._closed and (status is None or status.state == "ok")

    def poll(self) -> tuple[tuple[GpuSample, ...], SourceStatus]:
        """Read every GPU once. Never raises; failures become reasons and states."""
        with self._lock:
            if self._closed:
                return (), SourceStatus(SOURCE_NAME, "closed", "the NVML collector was closed")
            if self._init_status is None:
                self._init_status = self._initialise()
            if self._init_status.state != "ok":
                # no driver, no GPUs, or NVML could not even count them: nothing to poll
                return (), self._init_status
            samples = tuple(self._poll_device(dev) for dev in self._devices) + \
                tuple(self._mig.poll(dev) for dev in self._mig_devices)
        return samples, self._status(samples)

    def _status(self, samples: Sequence[GpuSample]) -> SourceStatus:
        gpus = [s for s in samples if s.mig is None]
        lost = [s.index for s in gpus if s.lost]
        n = len(gpus)
        migs = len(samples) - n
        mig_words = f", {migs} MIG device{'s' if migs != 1 else ''}" if migs else ""
        if lost:
            which = ", ".join(str(i) for i in lost)
            return SourceStatus(
                SOURCE_NAME,
                "gpu_lost",
                f"GPU {which} fell off the bus (NVML: GPU is lost); {n - len(lost)} of {n} still polled",
            )
        return SourceStatus(SOURCE_NAME, "ok", f"{n} GPU{'s' if n != 1 else ''}{mig_words}")

    def _initialise(self) -> SourceStatus:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - any failure here is a state, never a traceback
            state = "error"
            for cls in type(exc).__mro__:
                state = _INIT_STATE_BY_ERROR_CLASS.get(cls.__name__, state)
                if state != "error":
                    break
            if state == "no_driver":
                message = f"no NVIDIA driver ({exc})"
            elif state == "driver_mismatch":
                message = f"NVIDIA driver and kernel module differ ({exc}): reboot or reload the nvidia module"
            elif state == "no_permission":
                message = f"no permission to use NVML ({exc})"
            else:
                message = f"NVML failed to initialise: {exc}"
            return SourceStatus(SOURCE_NAME, state, message)
        self._initialised = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            return SourceStatus(SOURCE_NAME, "error", f"NVML could not count GPUs: {nvml_error_reason(exc)}")
        if count == 0:
            return SourceStatus(SOURCE_NAME, "no_gpus", "the NVIDIA driver is loaded but sees no GPUs")
        self._devices = [self._read_static(i) for i in range(count)]
        for dev in self._devices:
            if dev.mig_mode and not dev.lost:
                self._mig_devices += self._mig.discover(dev, count + len(self._mig_devices))
        return SourceStatus(SOURCE_NAME, "ok", f"{count} GPUs")

    # -- static, read once per device --------------------------------------------------------------

    def _read_static(self, index: int) -> DeviceState:
        try:
            handle = self._calls.call("nvmlDeviceGetHandleByIndex", index)
        except NvmlCallFailed as failed:
            dev = DeviceState(index=index, handle=None, lost=True)
            dev.static_errors["handle"] = failed.reason
            return dev
        dev = DeviceState(index=index, handle=handle)
        try:
            self._read_static_fields(dev)
        except NvmlCallFailed as failed:  # only a lost GPU escapes the per-field handling
            dev.lost = True
            dev.static_errors["handle"] = failed.reason
        return dev

    def _read_static_fields(self, dev: DeviceState) -> None:
        h = dev.handle

        def read(function: str, *args: Any, field_name: str | None = None) -> Any:
            try:
                return self._calls.call(function, h, *args)
            except NvmlCallFailed as failed:
                if failed.lost:
                    raise
                if field_name:
                    dev.static_errors[field_name] = failed.reason
                return None

        name = read("nvmlDeviceGetName")
        if name is not None:
            dev.name = text(name)
        uuid = read("nvmlDeviceGetUUID")
        dev.uuid = text(uuid) if uuid is not None else None
        cc = read("nvmlDeviceGetCudaComputeCapability")
        if cc is not None:
            dev.compute_capability = (int(cc[0]), int(cc[1]))
        memory = read("nvmlDeviceGetMemoryInfo", field_name="memory_total_bytes")
        if memory is not None:
            dev.static_values["memory_total_bytes"] = float(memory.total)
        self._clocks.read_max(dev)
        limit_mw = read("nvmlDeviceGetEnforcedPowerLimit", field_name="power_limit_w")
        if limit_mw is not None:
            dev.static_values["power_limit_w"] = float(limit_mw) / 1000.0
        mig = read("nvmlDeviceGetMigMode")
        if mig is not None:
            dev.mig_mode = int(mig[0]) == NVML_DEVICE_MIG_ENABLE
        self._gpm.query_support(dev)
        self._throughput.read_nvlink_links(dev)

    # -- per poll ----------------------------------------------------------------------------------

    def _poll_device(self, dev: DeviceState) -> GpuSample:
        if dev.lost:
            return lost_sample(dev)
        values: dict[str, float] = dict(dev.static_values)
        errors: dict[str, str] = dict(dev.static_errors)
        reasons: tuple[str, ...] = ()
        processes: tuple[GpuProcess, ...] = ()
        try:
            self._poll_basic(dev, values, errors)
            reasons = self._clocks.read_event_reasons(dev, errors)
            self._throughput.read(dev, values, errors)
            self._gpm.read(dev, values, errors)
            if self._processes is not None:
                processes = self._processes.read(dev, errors)
        except NvmlCallFailed:
            dev.lost = True
            self._gpm.release(dev)
            return lost_sample(dev)
        for name in GPU_FIELDS:
            if name not in values and name not in errors:
                errors[name] = "not read"  # a field no NVML path covers; should stay empty
        return GpuSample(
            index=dev.index,
            name=dev.name,
            uuid=dev.uuid,
            source=SOURCE_NAME,
            values=values,
            errors=errors,
            throttle_reasons=reasons,
            processes=processes,
            compute_capability=dev.compute_capability,
            mig_mode=dev.mig_mode,
        )

    def _poll_basic(self, dev: DeviceState, values: dict[str, float], errors: dict[str, str]) -> None:
        """The whole GPU's utilisation, power, energy counter, clocks, memory and temperature."""
        calls, nvml = self._calls, self._nvml
        util = read_fields(calls, dev, errors, ("util_gpu", "util_memory"), "nvmlDeviceGetUtilizationRates")
        if util is not None:
            values["util_gpu"] = float(util.gpu) / 100.0
            values["util_memory"] = float(util.memory) / 100.0
        power_mw = read_fields(calls, dev, errors, ("power_w",), "nvmlDeviceGetPowerUsage")
        if power_mw is not None:
            values["power_w"] = float(power_mw) / 1000.0
        # cumulative energy since the driver loaded, in mJ (Volta and newer): joules over a span
        energy_mj = read_fields(calls, dev, errors, ("energy_j",), "nvmlDeviceGetTotalEnergyConsumption")
        if energy_mj is not None:
            values["energy_j"] = float(energy_mj) / 1000.0
        self._clocks.read(dev, values, errors)
        memory = read_fields(calls, dev, errors, ("memory_used_bytes",), "nvmlDeviceGetMemoryInfo")
        if memory is not None:
            values["memory_used_bytes"] = float(memory.used)
            values["memory_total_bytes"] = float(memory.total)
            errors.pop("memory_total_bytes", None)
        temp = read_fields(calls, dev, errors, ("temperature_c",), "nvmlDeviceGetTemperature",
                           nvml.NVML_TEMPERATURE_GPU)
        if temp is not None:
            values["temperature_c"] = float(temp)
