"""GPU telemetry from NVML (nvidia-ml-py, imported as `pynvml`).

Every NVML call becomes a value or N/A with a reason; nothing here raises into the caller. The
collector initialises NVML lazily, once, on the first poll. Without a driver it reports a
SourceStatus with state "no_driver" and no GPUs.

Threading: `NvmlCollector` is synchronous. NVML calls block (PCIe throughput alone can sleep
20 ms in the driver), so run `poll()` in a worker thread (`asyncio.to_thread`, a Textual
thread worker). A lock serialises polls, so two threads never interleave the per-device GPM
state, but polls are meant to come from one thread at a time.

GPM (Hopper and newer): a metric is the average between two GPM samples. The collector keeps
the previous poll's sample per device, so one poll costs one `nvmlGpmSampleGet` per device, and
the first poll has no GPM values yet ("warming up").

The pynvml module is a constructor argument, so tests hand in a double (tests/nvml_double.py).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from specwatch.telemetry.gpu_events import decode_clock_event_reasons
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuProcess, GpuSample, MigInstance, SourceStatus

log = logging.getLogger(__name__)

SOURCE_NAME = "nvml"

# GPM metric ids (nvml.h). Hard-coded because older bindings lack the NVML_GPM_METRIC_* names,
# and the ids are part of the C ABI, so they never change.
GPM_METRIC_SM_UTIL = 2
GPM_METRIC_SM_OCCUPANCY = 3
GPM_METRIC_ANY_TENSOR_UTIL = 5
GPM_METRIC_DRAM_BW_UTIL = 10
# Field order matters only for the struct we fill; every GPM metric is a 0..100 percentage.
GPM_FIELDS: tuple[tuple[int, str], ...] = (
    (GPM_METRIC_SM_UTIL, "sm_active"),
    (GPM_METRIC_SM_OCCUPANCY, "sm_occupancy"),
    (GPM_METRIC_ANY_TENSOR_UTIL, "tensor_active"),
    (GPM_METRIC_DRAM_BW_UTIL, "dram_bw_util"),
)
# nvml.h: the two nvmlGpmSampleGet calls "should be greater than 100ms" apart.
GPM_MIN_INTERVAL_S = 0.1

# Field-value ids (nvml.h), hard-coded for the same reason as the GPM ids.
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # cumulative KiB
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_PCIE_COUNT_TX_BYTES = 197  # cumulative bytes
FI_PCIE_COUNT_RX_BYTES = 198
# scopeId UINT_MAX asks for the sum over all NVLink links.
SCOPE_ALL_LINKS = 0xFFFFFFFF

# nvmlReturn codes we need without an NVMLError at hand.
NVML_SUCCESS = 0
NVML_DEVICE_MIG_ENABLE = 1

# Reasons that a field is N/A. The NotSupported text is part of the contract with the UI.
REASON_NOT_SUPPORTED = "not supported on this GPU"
REASON_GPU_LOST = "GPU is lost"
REASON_WARMING_UP = "warming up"
REASON_NO_NVLINK = "no NVLink on this GPU"
REASON_COUNTER_RESET = "counter went backwards (driver reset)"
REASON_FUNCTION_MISSING = "not in this driver (the NVML function is missing; driver older than nvidia-ml-py)"
REASON_NOT_FOUND = "not found"

MIB_BYTES = 1024 * 1024
# A MIG device's name as NVML gives it: "NVIDIA H100 80GB HBM3 MIG 3g.40gb" (the profile last)
_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")

# One reason per NVML error class (gpu.md §1d). Keyed by class name so that any binding version,
# and the test double, map the same way.
_REASON_BY_ERROR_CLASS: dict[str, str] = {
    "NVMLError_NotSupported": REASON_NOT_SUPPORTED,
    "NVMLError_GpuIsLost": REASON_GPU_LOST,
    "NVMLError_NoPermission": "no permission (needs root, or the container hides it)",
    "NVMLError_FunctionNotFound": REASON_FUNCTION_MISSING,
    "NVMLError_LibRmVersionMismatch": "driver and kernel module versions differ: reboot or reload the nvidia module",
    "NVMLError_LibraryNotFound": "no NVIDIA driver (NVML library not found)",
    "NVMLError_DriverNotLoaded": "no NVIDIA driver (kernel module not loaded)",
    "NVMLError_Uninitialized": "NVML is not initialised",
    "NVMLError_Unknown": "unknown NVML error (the GPU may have fallen off the bus)",
    "NVMLError_Timeout": "NVML call timed out",
    "NVMLError_NoData": "no data yet",
    "NVMLError_NotReady": "not ready yet",
    "NVMLError_InvalidArgument": "NVML rejected the arguments (binding and driver disagree)",
    "NVMLError_ArgumentVersionMismatch": "NVML struct version mismatch (binding and driver disagree)",
    "NVMLError_ResetRequired": "GPU needs a reset",
    "NVMLError_InsufficientPower": "GPU power cables are not connected properly",
    "NVMLError_Memory": "NVML ran out of host memory",
    "NVMLError_CorruptedInforom": "corrupted infoROM",
    "NVMLError_InUse": "in use by another client",
    "NVMLError_OperatingSystem": "blocked by the operating system",
    "NVMLError_IrqIssue": "driver interrupt problem",
    "NVMLError_NotFound": "not found",
    "NVMLError_GpuNotFound": "GPU not found",
    "NVMLError_AlreadyInitialized": "NVML is already initialised",
    "NVMLError_InsufficientSize": "NVML buffer too small (binding and driver disagree)",
    "NVMLError_InsufficientResources": "the driver is out of resources",
    "NVMLError_InvalidState": "the GPU is in a state that does not allow this",
    "NVMLError_FreqNotSupported": "clock frequency not supported",
    "NVMLError_Deprecated": "deprecated in this driver",
    "NVMLError_VgpuEccNotSupported": "not supported with ECC on this vGPU",
    "NVMLError_ResetTypeNotSupported": "this reset type is not supported",
}

# Init failures → SourceStatus state. Everything else is "error".
_INIT_STATE_BY_ERROR_CLASS: dict[str, str] = {
    "NVMLError_LibraryNotFound": "no_driver",
    "NVMLError_DriverNotLoaded": "no_driver",
    "NVMLError_LibRmVersionMismatch": "driver_mismatch",
    "NVMLError_NoPermission": "no_permission",
}

# ---------------------------------------------------------------------------------------------
# Pure helpers


def nvml_error_reason(exc: BaseException) -> str:
    """A short, plain reason for an NVML error, for `GpuSample.errors`."""
    for cls in type(exc).__mro__:
        reason = _REASON_BY_ERROR_CLASS.get(cls.__name__)
        if reason is not None:
            return reason
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return REASON_FUNCTION_MISSING
    return f"NVML error: {exc}"


def is_gpu_lost_error(exc: BaseException) -> bool:
    return any(cls.__name__ == "NVMLError_GpuIsLost" for cls in type(exc).__mro__)


def counter_rate(previous: tuple[float, float] | None, current: tuple[float, float]) -> tuple[float | None, str]:
    """Rate per second between two (counter value, seconds) readings, or None and the reason."""
    if previous is None:
        return None, REASON_WARMING_UP
    (v0, t0), (v1, t1) = previous, current
    if t1 <= t0:
        return None, REASON_WARMING_UP
    if v1 < v0:
        return None, REASON_COUNTER_RESET
    return (v1 - v0) / (t1 - t0), ""


_PYTHON_NAMES = ("python", "pypy")


def process_display_name(comm: str | None, cmdline: Sequence[str]) -> str:
    """A name an operator recognises: "VLLM::EngineCore", "python3: vllm", "python3: sglang.launch_server".

    /proc/<pid>/comm is cut at 15 characters, which truncates setproctitle names such as vLLM's
    "VLLM::EngineCore"; the full name is then argv[0]. A bare interpreter name says nothing, so
    append the script or `-m` module it runs.
    """
    comm = (comm or "").strip()
    argv0 = cmdline[0] if cmdline else ""
    if comm and len(comm) == 15 and argv0.startswith(comm) and argv0.split():
        return argv0.split()[0]
    name = comm or os.path.basename(argv0)
    if not name:
        return ""
    if name.startswith(_PYTHON_NAMES) and len(cmdline) > 1:
        args = list(cmdline[1:])
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-m" and i + 1 < len(args):
                return f"{name}: {args[i + 1]}"
            if arg.startswith("-m") and len(arg) > 2:
                return f"{name}: {arg[2:]}"
            if arg == "-c":  # inline code: nothing more telling than the interpreter
                return name
            if arg in ("-X", "-W"):  # options that take a value
                i += 2
                continue
            if arg.startswith("-"):
                i += 1
                continue
            return f"{name}: {os.path.basename(arg)}"
    return name


def read_process_name(pid: int, proc_root: str = "/proc") -> str:
    """The display name of a host process, or "pid not visible" (another PID namespace)."""
    base = os.path.join(proc_root, str(pid))
    try:
        with open(os.path.join(base, "comm"), encoding="utf-8", errors="replace") as f:
            comm = f.read().strip()
    except OSError:
        return "pid not visible"
    cmdline: list[str] = []
    try:
        with open(os.path.join(base, "cmdline"), "rb") as f:
            raw = f.read()
        cmdline = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    except OSError:
        pass
    return process_display_name(comm, cmdline) or "pid not visible"


def _text(value: Any) -> str:
    # Old bindings return bytes from the string calls.
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# ---------------------------------------------------------------------------------------------
# The collector


class _Failed(Exception):
    """Internal: an NVML call failed; carries the reason and whether the GPU is lost."""

    def __init__(self, reason: str, lost: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.lost = lost


@dataclass
class _DeviceState:
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
    # GPM: previous sample and a spare buffer, so a poll allocates nothing.
    gpm_reason: str | None = None  # None: GPM is supported
    gpm_previous: Any = None
    gpm_previous_time: float = 0.0
    gpm_spare: Any = None
    gpm_last_values: dict[str, float] = field(default_factory=dict)
    gpm_last_errors: dict[str, str] = field(default_factory=dict)
    # Throughput: "counters" (cumulative field values, diffed) or "throughput" (the 20 ms call).
    pcie_mode: str = "counters"
    nvlink_links: int = 0
    nvlink_reason: str = REASON_NO_NVLINK
    counters: dict[str, tuple[float, float, bool]] = field(default_factory=dict)  # value, time, driver time?
    clock_reasons_function: str = "nvmlDeviceGetCurrentClocksEventReasons"
    # On a MIG device: the GPU it is a slice of, and its ids and share.
    parent: _DeviceState | None = None
    mig: MigInstance | None = None


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
        self._clock = clock
        self._proc_root = proc_root
        self._read_processes = read_processes
        self._lock = threading.Lock()
        self._initialised = False
        self._init_status: SourceStatus | None = None
        self._devices: list[_DeviceState] = []
        self._mig_devices: list[_DeviceState] = []  # the MIG devices of MIG-enabled GPUs, after them
        self._logged_missing: set[str] = set()
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Free GPM buffers and shut NVML down (once). Safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for dev in self._devices:
                for sample in (dev.gpm_previous, dev.gpm_spare):
                    if sample is not None:
                        self._quiet("nvmlGpmSampleFree", sample)
                dev.gpm_previous = dev.gpm_spare = None
            if self._initialised:
                self._quiet("nvmlShutdown")
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
                tuple(self._poll_mig_device(dev) for dev in self._mig_devices)
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
                self._mig_devices += self._read_mig_devices(dev, count + len(self._mig_devices))
        return SourceStatus(SOURCE_NAME, "ok", f"{count} GPUs")

    # -- one NVML call ----------------------------------------------------------------------------

    def _call(self, function: str, *args: Any) -> Any:
        """Call one NVML function; raise _Failed with a reason instead of the NVML error."""
        fn = getattr(self._nvml, function, None)
        if fn is None:
            # Bindings older than the function: same meaning as FunctionNotFound.
            self._log_missing(function)
            raise _Failed(REASON_FUNCTION_MISSING, lost=False)
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - NVMLError, the binding's mismatch error, ctypes trouble
            reason = nvml_error_reason(exc)
            if reason == REASON_FUNCTION_MISSING:
                self._log_missing(function)
            elif not isinstance(exc, self._nvml.NVMLError) and function not in self._logged_missing:
                # Not an NVML error: a binding/driver incompatibility or a specwatch bug. Say so once.
                self._logged_missing.add(function)
                log.warning("NVML call %s raised %r", function, exc)
            raise _Failed(reason, lost=is_gpu_lost_error(exc)) from None

    def _quiet(self, function: str, *args: Any) -> None:
        try:
            self._call(function, *args)
        except _Failed:
            pass

    def _log_missing(self, function: str) -> None:
        if function not in self._logged_missing:
            self._logged_missing.add(function)
            log.warning("NVML function %s is missing: check that nvidia-ml-py matches the driver", function)

    # -- static, read once per device --------------------------------------------------------------

    def _read_static(self, index: int) -> _DeviceState:
        nvml = self._nvml
        try:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
        except _Failed as failed:
            dev = _DeviceState(index=index, handle=None, lost=True)
            dev.static_errors["handle"] = failed.reason
            return dev
        dev = _DeviceState(index=index, handle=handle)
        try:
            self._read_static_fields(dev, nvml)
        except _Failed as failed:  # only a lost GPU escapes the per-field handling
            dev.lost = True
            dev.static_errors["handle"] = failed.reason
        return dev

    def _read_static_fields(self, dev: _DeviceState, nvml: Any) -> None:
        h = dev.handle

        def read(function: str, *args: Any, field_name: str | None = None) -> Any:
            try:
                return self._call(function, h, *args)
            except _Failed as failed:
                if failed.lost:
                    raise
                if field_name:
                    dev.static_errors[field_name] = failed.reason
                return None

        name = read("nvmlDeviceGetName")
        if name is not None:
            dev.name = _text(name)
        uuid = read("nvmlDeviceGetUUID")
        dev.uuid = _text(uuid) if uuid is not None else None
        cc = read("nvmlDeviceGetCudaComputeCapability")
        if cc is not None:
            dev.compute_capability = (int(cc[0]), int(cc[1]))
        memory = read("nvmlDeviceGetMemoryInfo", field_name="memory_total_bytes")
        if memory is not None:
            dev.static_values["memory_total_bytes"] = float(memory.total)
        sm_max = read("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM, field_name="sm_clock_max_mhz")
        if sm_max is not None:
            dev.static_values["sm_clock_max_mhz"] = float(sm_max)
        mem_max = read("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_MEM, field_name="mem_clock_max_mhz")
        if mem_max is not None:
            dev.static_values["mem_clock_max_mhz"] = float(mem_max)
        limit_mw = read("nvmlDeviceGetEnforcedPowerLimit", field_name="power_limit_w")
        if limit_mw is not None:
            dev.static_values["power_limit_w"] = float(limit_mw) / 1000.0
        mig = read("nvmlDeviceGetMigMode")
        if mig is not None:
            dev.mig_mode = int(mig[0]) == NVML_DEVICE_MIG_ENABLE

        try:
            support = self._call("nvmlGpmQueryDeviceSupport", h)
            dev.gpm_reason = None if int(getattr(support, "isSupportedDevice", 0)) else REASON_NOT_SUPPORTED
        except _Failed as failed:
            if failed.lost:
                raise
            dev.gpm_reason = failed.reason  # NotSupported on Ampere/Ada, FunctionNotFound before R525

        links = self._field_values(h, [FI_NVLINK_LINK_COUNT]).get(FI_NVLINK_LINK_COUNT)
        if isinstance(links, tuple) and int(links[0]) > 0:
            dev.nvlink_links, dev.nvlink_reason = int(links[0]), ""
        else:
            dev.nvlink_links, dev.nvlink_reason = 0, REASON_NO_NVLINK

    # -- MIG devices, read once at start --------------------------------------------------------------

    def _read_mig_devices(self, parent: _DeviceState, first_index: int) -> list[_DeviceState]:
        """The MIG devices (compute instances) of a MIG-enabled GPU, numbered from `first_index`
        on, after the whole GPUs. A layout changed later (instances made or destroyed while
        specwatch runs) is not followed: its calls fail, and say so."""
        try:
            slots = int(self._call("nvmlDeviceGetMaxMigDeviceCount", parent.handle))
        except _Failed as failed:
            parent.static_errors["mig_devices"] = failed.reason
            return []
        devices: list[_DeviceState] = []
        for slot in range(slots):
            try:
                handle = self._call("nvmlDeviceGetMigDeviceHandleByIndex", parent.handle, slot)
            except _Failed as failed:
                if failed.reason != REASON_NOT_FOUND:  # an empty slot is NotFound: nothing to say
                    parent.static_errors["mig_devices"] = failed.reason
                if failed.lost:
                    break
                continue
            devices.append(self._read_mig_static(parent, handle, first_index + len(devices), slots))
        return devices

    def _read_mig_static(self, parent: _DeviceState, handle: Any, index: int, slots: int) -> _DeviceState:
        dev = _DeviceState(index=index, handle=handle, parent=parent, compute_capability=parent.compute_capability)

        def read(function: str, key: str) -> Any:
            try:
                return self._call(function, handle)
            except _Failed as failed:
                dev.static_errors[key] = failed.reason
                if failed.lost:
                    dev.lost = True
                return None

        raw_name = read("nvmlDeviceGetName", "name")
        uuid = read("nvmlDeviceGetUUID", "uuid")
        dev.uuid = _text(uuid) if uuid is not None else None
        gpu_instance = read("nvmlDeviceGetGpuInstanceId", "mig_gpu_instance_id")
        compute_instance = read("nvmlDeviceGetComputeInstanceId", "mig_compute_instance_id")
        attributes = read("nvmlDeviceGetAttributes", "mig_shares")
        memory = read("nvmlDeviceGetMemoryInfo", "memory_total_bytes")
        if memory is not None:
            dev.static_values["memory_total_bytes"] = float(memory.total)

        profile = None
        match = _MIG_PROFILE.search(_text(raw_name)) if raw_name is not None else None
        if match:
            profile = match.group(1)
        elif attributes is not None and int(attributes.gpuInstanceSliceCount) > 0:
            profile = f"{int(attributes.gpuInstanceSliceCount)}g.{int(attributes.memorySizeMB) / 1024:.0f}gb"
        sm_fraction = memory_fraction = None
        if attributes is not None:
            # MIG guide: an instance's SMs are its compute slices out of the GPU's (7 on A100/H100,
            # as many as MIG devices it can hold); its memory and bandwidth are its memory slices'
            compute_slices = int(attributes.computeInstanceSliceCount)
            if slots > 0 and 0 < compute_slices <= slots:
                sm_fraction = compute_slices / slots
            parent_memory = parent.static_values.get("memory_total_bytes")
            instance_memory = float(attributes.memorySizeMB) * MIB_BYTES
            if parent_memory and 0 < instance_memory <= parent_memory:
                memory_fraction = instance_memory / parent_memory
            if sm_fraction is None or memory_fraction is None:
                dev.static_errors["mig_shares"] = (
                    f"NVML gave {compute_slices} of {slots} compute slices and {attributes.memorySizeMB} MiB of "
                    f"{(parent_memory or 0) / MIB_BYTES:.0f} MiB: no share to scale the GPU's peaks by")
        dev.name = f"{parent.name} · MIG {profile or 'device'} (GPU {parent.index})"
        dev.mig = MigInstance(
            parent_index=parent.index, parent_name=parent.name, profile=profile,
            gpu_instance_id=int(gpu_instance) if gpu_instance is not None else None,
            compute_instance_id=int(compute_instance) if compute_instance is not None else None,
            sm_count=int(attributes.multiprocessorCount) if attributes is not None else None,
            sm_fraction=sm_fraction, memory_fraction=memory_fraction)
        return dev

    def _poll_mig_device(self, dev: _DeviceState) -> GpuSample:
        """A MIG device's own readings: its memory and its processes. Power, clocks, temperature,
        PCIe and NVLink belong to the whole GPU (its parent's sample); utilisation and GPM are not
        given per instance by these calls."""
        parent = dev.parent
        if dev.lost or (parent is not None and parent.lost):
            dev.lost = True
            return self._lost_sample(dev)
        values: dict[str, float] = dict(dev.static_values)
        errors: dict[str, str] = dict(dev.static_errors)
        processes: tuple[GpuProcess, ...] = ()
        try:
            memory = self._read(dev, errors, ("memory_used_bytes",), "nvmlDeviceGetMemoryInfo")
            if memory is not None:
                values["memory_used_bytes"] = float(memory.used)
                values["memory_total_bytes"] = float(memory.total)
                errors.pop("memory_total_bytes", None)
            if self._read_processes:
                processes = self._poll_processes(dev, errors)
        except _Failed:
            dev.lost = True
            return self._lost_sample(dev)
        whole_gpu = f"per GPU, not per MIG device: see GPU {parent.index}" if parent is not None else \
            "per GPU, not per MIG device"
        for name in GPU_FIELDS:
            if name not in values and name not in errors:
                errors[name] = whole_gpu
        return GpuSample(index=dev.index, name=dev.name, uuid=dev.uuid, source=SOURCE_NAME, values=values,
                         errors=errors, processes=processes, compute_capability=dev.compute_capability,
                         mig=dev.mig)

    # -- field values ----------------------------------------------------------------------------

    def _field_values(self, handle: Any, ids: Sequence[int | tuple[int, int]]
                      ) -> dict[int, tuple[float, float] | str]:
        """Batch-read field values: {fieldId: (number, driver timestamp in s, 0 if none) or a reason}.

        Raises _Failed only when the GPU is lost; the call succeeds when any value was filled in,
        so each entry carries its own nvmlReturn.
        """
        try:
            values = self._call("nvmlDeviceGetFieldValues", handle, list(ids))
        except _Failed as failed:
            if failed.lost:
                raise
            return {(i[0] if isinstance(i, tuple) else i): failed.reason for i in ids}
        out: dict[int, tuple[float, float] | str] = {}
        for fv in values:
            if int(fv.nvmlReturn) != NVML_SUCCESS:
                out[int(fv.fieldId)] = self._reason_for_code(int(fv.nvmlReturn))
            else:
                stamp_us = int(fv.timestamp)
                out[int(fv.fieldId)] = (_field_value_number(fv), stamp_us / 1e6 if stamp_us > 0 else 0.0)
        return out

    def _reason_for_code(self, code: int) -> str:
        """Reason for a bare nvmlReturn code (GPM metrics and field values fail one by one)."""
        try:
            return nvml_error_reason(self._nvml.NVMLError(code))
        except Exception:  # noqa: BLE001 - an unknown code must still give a reason
            return f"NVML error code {code}"

    # -- per poll ----------------------------------------------------------------------------------

    def _poll_device(self, dev: _DeviceState) -> GpuSample:
        if dev.lost:
            return self._lost_sample(dev)
        values: dict[str, float] = dict(dev.static_values)
        errors: dict[str, str] = dict(dev.static_errors)
        reasons: tuple[str, ...] = ()
        processes: tuple[GpuProcess, ...] = ()
        try:
            self._poll_basic(dev, values, errors)
            reasons = self._poll_clock_reasons(dev, errors)
            self._poll_throughput(dev, values, errors)
            self._poll_gpm(dev, values, errors)
            if self._read_processes:
                processes = self._poll_processes(dev, errors)
        except _Failed:
            dev.lost = True
            self._release_gpm(dev)
            return self._lost_sample(dev)
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

    def _lost_sample(self, dev: _DeviceState) -> GpuSample:
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

    def _read(self, dev: _DeviceState, errors: dict[str, str], fields: Sequence[str], function: str,
              *args: Any) -> Any:
        """One call for one or more fields: the result, or None with each field's reason set."""
        try:
            return self._call(function, dev.handle, *args)
        except _Failed as failed:
            if failed.lost:
                raise
            reason = failed.reason
            if reason == REASON_NOT_SUPPORTED and dev.mig_mode and function == "nvmlDeviceGetUtilizationRates":
                reason = "not supported with MIG enabled"
            for name in fields:
                errors[name] = reason
            return None

    def _poll_basic(self, dev: _DeviceState, values: dict[str, float], errors: dict[str, str]) -> None:
        nvml = self._nvml
        util = self._read(dev, errors, ("util_gpu", "util_memory"), "nvmlDeviceGetUtilizationRates")
        if util is not None:
            values["util_gpu"] = float(util.gpu) / 100.0
            values["util_memory"] = float(util.memory) / 100.0
        power_mw = self._read(dev, errors, ("power_w",), "nvmlDeviceGetPowerUsage")
        if power_mw is not None:
            values["power_w"] = float(power_mw) / 1000.0
        # cumulative energy since the driver loaded, in mJ (Volta and newer): joules over a span
        energy_mj = self._read(dev, errors, ("energy_j",), "nvmlDeviceGetTotalEnergyConsumption")
        if energy_mj is not None:
            values["energy_j"] = float(energy_mj) / 1000.0
        sm = self._read(dev, errors, ("sm_clock_mhz",), "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
        if sm is not None:
            values["sm_clock_mhz"] = float(sm)
        mem = self._read(dev, errors, ("mem_clock_mhz",), "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM)
        if mem is not None:
            values["mem_clock_mhz"] = float(mem)
        memory = self._read(dev, errors, ("memory_used_bytes",), "nvmlDeviceGetMemoryInfo")
        if memory is not None:
            values["memory_used_bytes"] = float(memory.used)
            values["memory_total_bytes"] = float(memory.total)
            errors.pop("memory_total_bytes", None)
        temp = self._read(dev, errors, ("temperature_c",), "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)
        if temp is not None:
            values["temperature_c"] = float(temp)

    def _poll_clock_reasons(self, dev: _DeviceState, errors: dict[str, str]) -> tuple[str, ...]:
        try:
            mask = self._call(dev.clock_reasons_function, dev.handle)
        except _Failed as failed:
            if failed.lost:
                raise
            if failed.reason == REASON_FUNCTION_MISSING and dev.clock_reasons_function.endswith("EventReasons"):
                # Drivers before R535 only have the older, now deprecated, name.
                dev.clock_reasons_function = "nvmlDeviceGetCurrentClocksThrottleReasons"
                return self._poll_clock_reasons(dev, errors)
            errors["throttle_reasons"] = failed.reason
            return ()
        return decode_clock_event_reasons(int(mask))

    def _poll_throughput(self, dev: _DeviceState, values: dict[str, float], errors: dict[str, str]) -> None:
        now = self._clock()
        ids: list[int | tuple[int, int]] = []
        if dev.pcie_mode == "counters":
            ids += [FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES]
        if dev.nvlink_links:
            ids += [(FI_NVLINK_THROUGHPUT_DATA_TX, SCOPE_ALL_LINKS), (FI_NVLINK_THROUGHPUT_DATA_RX, SCOPE_ALL_LINKS)]
        read = self._field_values(dev.handle, ids) if ids else {}

        if dev.pcie_mode == "counters":
            tx, rx = read.get(FI_PCIE_COUNT_TX_BYTES), read.get(FI_PCIE_COUNT_RX_BYTES)
            if isinstance(tx, tuple) and isinstance(rx, tuple):
                self._rate(dev, values, errors, "pcie_tx_bytes_per_s", tx, now, 1.0)
                self._rate(dev, values, errors, "pcie_rx_bytes_per_s", rx, now, 1.0)
            else:
                # The cumulative counters are newer than the 20 ms throughput call; fall back for good.
                dev.pcie_mode = "throughput"
        if dev.pcie_mode == "throughput":
            nvml = self._nvml
            for name, counter in (("pcie_tx_bytes_per_s", nvml.NVML_PCIE_UTIL_TX_BYTES),
                                  ("pcie_rx_bytes_per_s", nvml.NVML_PCIE_UTIL_RX_BYTES)):
                kb_per_s = self._read(dev, errors, (name,), "nvmlDeviceGetPcieThroughput", counter)
                if kb_per_s is not None:
                    values[name] = float(kb_per_s) * 1000.0  # nvml.h: KB/s

        if not dev.nvlink_links:
            errors["nvlink_tx_bytes_per_s"] = errors["nvlink_rx_bytes_per_s"] = dev.nvlink_reason
            return
        for name, fid in (("nvlink_tx_bytes_per_s", FI_NVLINK_THROUGHPUT_DATA_TX),
                          ("nvlink_rx_bytes_per_s", FI_NVLINK_THROUGHPUT_DATA_RX)):
            kib = read.get(fid)
            if isinstance(kib, tuple):
                self._rate(dev, values, errors, name, kib, now, 1024.0)  # cumulative KiB
            else:
                errors[name] = kib if isinstance(kib, str) else "NVML returned no value"

    def _rate(self, dev: _DeviceState, values: dict[str, float], errors: dict[str, str], name: str,
              reading: tuple[float, float], now: float, scale: float) -> None:
        counter, stamp = reading
        # Prefer the driver's own timestamp: it is when the counter was read, not when we asked.
        # Never diff a driver timestamp against our clock: they have different origins.
        t = stamp if stamp > 0 else now
        previous = dev.counters.get(name)
        if previous is not None and previous[2] != (stamp > 0):
            previous = None
        rate, reason = counter_rate(previous[:2] if previous else None, (counter, t))
        dev.counters[name] = (counter, t, stamp > 0)
        if rate is None:
            errors[name] = reason
        else:
            values[name] = rate * scale

    def _poll_gpm(self, dev: _DeviceState, values: dict[str, float], errors: dict[str, str]) -> None:
        if dev.gpm_reason is not None:
            for _, name in GPM_FIELDS:
                errors[name] = dev.gpm_reason
            return
        now = self._clock()
        if dev.gpm_previous is not None and now - dev.gpm_previous_time < GPM_MIN_INTERVAL_S:
            # Polled again too soon for a valid pair: repeat the last interval's averages.
            values.update(dev.gpm_last_values)
            errors.update(dev.gpm_last_errors)
            if not dev.gpm_last_values and not dev.gpm_last_errors:
                for _, name in GPM_FIELDS:
                    errors[name] = REASON_WARMING_UP
            return
        try:
            sample = dev.gpm_spare if dev.gpm_spare is not None else self._call("nvmlGpmSampleAlloc")
            dev.gpm_spare = sample  # ours until it becomes the previous sample: freed on any failure
            self._call("nvmlGpmSampleGet", dev.handle, sample)
            dev.gpm_spare = None
        except _Failed as failed:
            if failed.lost:
                raise
            self._gpm_failed(dev, errors, failed.reason)
            return
        previous, dev.gpm_previous, dev.gpm_previous_time = dev.gpm_previous, sample, now
        if previous is None:
            for _, name in GPM_FIELDS:
                errors[name] = REASON_WARMING_UP
            return
        dev.gpm_spare = previous  # reused as the next poll's buffer
        gpm_values, gpm_errors = self._gpm_metrics(previous, sample)
        dev.gpm_last_values, dev.gpm_last_errors = gpm_values, gpm_errors
        values.update(gpm_values)
        errors.update(gpm_errors)

    def _gpm_metrics(self, sample1: Any, sample2: Any) -> tuple[dict[str, float], dict[str, str]]:
        nvml = self._nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(GPM_FIELDS)
        request.sample1 = sample1
        request.sample2 = sample2
        for i, (metric_id, _) in enumerate(GPM_FIELDS):
            request.metrics[i].metricId = metric_id
        values: dict[str, float] = {}
        errors: dict[str, str] = {}
        try:
            result = self._call("nvmlGpmMetricsGet", request)
        except _Failed as failed:
            if failed.lost:
                raise
            return {}, {name: failed.reason for _, name in GPM_FIELDS}
        for i, (metric_id, name) in enumerate(GPM_FIELDS):
            metric = result.metrics[i]
            code = int(metric.nvmlReturn)
            if code != NVML_SUCCESS:
                errors[name] = self._reason_for_code(code)
            elif int(metric.metricId) != metric_id:
                errors[name] = f"NVML returned GPM metric {int(metric.metricId)} in place of {metric_id}"
            else:
                values[name] = float(metric.value) / 100.0
        return values, errors

    def _gpm_failed(self, dev: _DeviceState, errors: dict[str, str], reason: str) -> None:
        for _, name in GPM_FIELDS:
            errors[name] = reason
        if reason in (REASON_NOT_SUPPORTED, REASON_FUNCTION_MISSING):
            # Support said yes but sampling says no (vGPU, MIG): stop trying.
            dev.gpm_reason = reason
            self._release_gpm(dev)

    def _release_gpm(self, dev: _DeviceState) -> None:
        for sample in (dev.gpm_previous, dev.gpm_spare):
            if sample is not None:
                self._quiet("nvmlGpmSampleFree", sample)
        dev.gpm_previous = dev.gpm_spare = None

    def _poll_processes(self, dev: _DeviceState, errors: dict[str, str]) -> tuple[GpuProcess, ...]:
        try:
            procs = self._call("nvmlDeviceGetComputeRunningProcesses", dev.handle)
        except _Failed as failed:
            if failed.lost:
                raise
            errors["processes"] = failed.reason
            return ()
        out = []
        for p in procs:
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(pid=pid, name=read_process_name(pid, self._proc_root),
                                  used_memory_bytes=int(used) if used is not None else None))
        return tuple(sorted(out, key=lambda p: -(p.used_memory_bytes or 0)))


_FIELD_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value_number(fv: Any) -> float:
    """The number in a c_nvmlFieldValue_t, read through the union member its valueType names."""
    kind = int(fv.valueType)
    member = _FIELD_VALUE_MEMBERS[kind] if 0 <= kind < len(_FIELD_VALUE_MEMBERS) else "ullVal"
    return float(getattr(fv.value, member))
