"""A test double for nvidia-ml-py (`pynvml`) that behaves like the real bindings on a GPU node.

It is a module-like object: the same function names and signatures the collector calls, the
real `pynvml.NVMLError` hierarchy (errors are raised as `pynvml.NVMLError(code)`, which picks the
same `NVMLError_*` subclass the bindings raise), and the real ctypes structs for the results
(c_nvmlUtilization_t, c_nvmlMemory_t, c_nvmlFieldValue_t arrays, c_nvmlGpmSupport_t,
c_nvmlGpmMetricsGet_t, c_nvmlGpmSample_t pointers). Constants and struct types not defined here
are forwarded from the real module; NVML functions that are not modelled raise AttributeError,
so a collector calling something unmodelled fails loudly instead of silently.

Behaviour modelled after NVML:
- calls before `nvmlInit` or after the last `nvmlShutdown` raise Uninitialized;
- GPM samples are opaque pointers; `nvmlGpmMetricsGet` averages each metric over the time
  between the two samples (activity is integrated over the double's clock), rejects unfilled,
  freed, swapped or cross-device samples with InvalidArgument, and reports per-metric failures
  in `metrics[i].nvmlReturn`;
- PCIe and NVLink counters are cumulative and advance with the configured rates;
- a GPU can be lost mid-run: every later call on its handle raises GpuIsLost.
"""

from __future__ import annotations

import ctypes
import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 1024 * 1024
GIB = 1024 * MIB


class FakeClock:
    """A clock the test moves by hand; shared by the double and the collector."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeMigDevice:
    """One MIG device (a compute instance in a GPU instance) of a MIG-enabled FakeGpu, as NVML gives
    it on its own handle: a name with the profile, ids, nvmlDeviceGetAttributes, memory, processes."""

    name: str
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    sm_count: int
    gpu_instance_slices: int
    compute_instance_slices: int
    memory_mb: int  # nvmlDeviceAttributes_t.memorySizeMB (MiB)
    memory_used: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # function name -> nvmlReturn code


def h100_mig_3g(gpu_instance_id: int = 1, **overrides: Any) -> FakeMigDevice:
    """The 3g.40gb profile of an H100 80GB: 3 of 7 compute slices, 4 of 8 memory slices (MIG user
    guide), 60 SMs, 40 GB."""
    values: dict[str, Any] = dict(
        name="NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        uuid=f"MIG-00000000-0000-4000-8000-{gpu_instance_id:012d}",
        gpu_instance_id=gpu_instance_id, compute_instance_id=0, sm_count=60,
        gpu_instance_slices=3, compute_instance_slices=3, memory_mb=40 * 1024, memory_used=30 * GIB)
    values.update(overrides)
    return FakeMigDevice(**values)


@dataclass
class FakeGpu:
    """One simulated GPU. Rates and percentages are what NVML would report, in NVML's units."""

    name: str
    uuid: str
    compute_capability: tuple[int, int]
    memory_total: int
    memory_used: int = 0
    util_gpu_pct: int = 0
    util_memory_pct: int = 0
    power_mw: int = 60_000
    energy_mj: int = 5_000_000  # the total-energy counter, in mJ
    power_limit_mw: int = 700_000
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    sm_clock_max_mhz: int = 1980
    mem_clock_max_mhz: int = 2619
    temperature_c: int = 35
    clocks_event_reasons: int = 0
    mig_mode: tuple[int, int] | None = (0, 0)  # None: the GPU has no MIG (NotSupported)
    max_mig_devices: int = 7  # nvmlDeviceGetMaxMigDeviceCount with MIG enabled (A100/H100: 7 slices)
    mig_devices: list[FakeMigDevice | None] = field(default_factory=list)  # by slot; None: an empty slot
    gpm_supported: bool = False
    # GPM activity in percent, integrated over time so two samples give the interval's average.
    gpm_percent: dict[int, float] = field(default_factory=dict)
    gpm_metric_errors: dict[int, int] = field(default_factory=dict)  # metric id -> nvmlReturn code
    pcie_tx_bytes_per_s: float = 0.0
    pcie_rx_bytes_per_s: float = 0.0
    pcie_counters_supported: bool = True  # fields 197/198 (newer drivers)
    nvlink_links: int = 0
    nvlink_tx_bytes_per_s: float = 0.0
    nvlink_rx_bytes_per_s: float = 0.0
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes | None)
    errors: dict[str, int] = field(default_factory=dict)  # function name -> nvmlReturn code
    lost: bool = False
    # integrals: metric/counter key -> accumulated "percent·s" or bytes, and when last advanced
    _integrals: dict[Any, float] = field(default_factory=dict)
    _advanced_to: float | None = None

    def advance(self, now: float) -> None:
        if self._advanced_to is not None and now > self._advanced_to:
            dt = now - self._advanced_to
            for metric_id, pct in self.gpm_percent.items():
                self._integrals[metric_id] = self._integrals.get(metric_id, 0.0) + pct * dt
            for key, rate in (("pcie_tx", self.pcie_tx_bytes_per_s), ("pcie_rx", self.pcie_rx_bytes_per_s),
                              ("nvlink_tx", self.nvlink_tx_bytes_per_s), ("nvlink_rx", self.nvlink_rx_bytes_per_s)):
                self._integrals[key] = self._integrals.get(key, 0.0) + rate * dt
        self._advanced_to = now if self._advanced_to is None else max(now, self._advanced_to)


def hopper_gpu(index: int = 0, **overrides: Any) -> FakeGpu:
    """An H100 SXM with GPM and NVLink."""
    values: dict[str, Any] = dict(
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-00000000-0000-4000-8000-{index:012d}",
        compute_capability=(9, 0),
        memory_total=80 * GIB,
        memory_used=72 * GIB,
        gpm_supported=True,
        gpm_percent={2: 0.0, 3: 0.0, 5: 0.0, 10: 0.0},
        nvlink_links=18,
    )
    values.update(overrides)
    return FakeGpu(**values)


def ampere_gpu(index: int = 0, **overrides: Any) -> FakeGpu:
    """An A100 SXM 80 GB: no GPM (Ampere), NVLink, MIG-capable."""
    values: dict[str, Any] = dict(
        name="NVIDIA A100-SXM4-80GB",
        uuid=f"GPU-aaaaaaaa-0000-4000-8000-{index:012d}",
        compute_capability=(8, 0),
        memory_total=80 * GIB,
        memory_used=70 * GIB,
        power_limit_mw=400_000,
        sm_clock_mhz=1410,
        sm_clock_max_mhz=1410,
        mem_clock_mhz=1593,
        mem_clock_max_mhz=1593,
        gpm_supported=False,
        nvlink_links=12,
    )
    values.update(overrides)
    return FakeGpu(**values)


class _Handle:
    """An opaque device handle, as c_nvmlDevice_t is to callers."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


class _MigHandle:
    """A MIG device's handle (also a c_nvmlDevice_t to callers): its parent GPU and slot."""

    __slots__ = ("parent", "slot")

    def __init__(self, parent: int, slot: int) -> None:
        self.parent, self.slot = parent, slot

    def __repr__(self) -> str:
        return f"<fake MIG nvmlDevice {self.parent}:{self.slot}>"


@dataclass
class _GpmSampleRecord:
    device: int | None = None
    time: float | None = None
    integrals: dict[Any, float] = field(default_factory=dict)
    freed: bool = False


def _pointer_address(sample: Any) -> int | None:
    return ctypes.cast(sample, ctypes.c_void_p).value


class FakeNvml:
    """Stands in for the `pynvml` module. Counts every NVML call in `calls`."""

    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: Iterable[FakeGpu],
        *,
        clock: Callable[[], float] | None = None,
        init_error: int | None = None,
        count_error: int | None = None,
        function_not_found: Iterable[str] = (),
        absent_functions: Iterable[str] = (),
    ) -> None:
        self.gpus = list(gpus)
        self.clock = clock or FakeClock()
        self.init_error = init_error
        self.count_error = count_error
        self.function_not_found = set(function_not_found)  # newer bindings, older driver
        self.absent_functions = set(absent_functions)  # older bindings: no such Python function
        self.calls: Counter[str] = Counter()
        self.calls_by_device: Counter[int] = Counter()  # calls that named a device handle
        self.refcount = 0
        self._gpm_samples: dict[int, _GpmSampleRecord] = {}
        # fake, never-dereferenced addresses for the opaque GPM sample pointers
        self._next_address = itertools.count(0x10000, 0x100)

    # -- test controls ----------------------------------------------------------------------------

    def lose_gpu(self, index: int) -> None:
        """The GPU falls off the bus: every later call on its handle raises GpuIsLost."""
        self.gpus[index].lost = True

    def set_gpm(self, index: int, percent: dict[int, float]) -> None:
        """Change GPM activity from now on (earlier time keeps the earlier activity)."""
        gpu = self.gpus[index]
        gpu.advance(self.clock())
        gpu.gpm_percent = dict(percent)

    def set_rates(self, index: int, **rates: float) -> None:
        gpu = self.gpus[index]
        gpu.advance(self.clock())
        for name, value in rates.items():
            setattr(gpu, name, value)

    @property
    def live_gpm_samples(self) -> int:
        return sum(1 for r in self._gpm_samples.values() if not r.freed)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    # -- module-like behaviour --------------------------------------------------------------------

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name[4:5].isupper():
            if name in object.__getattribute__(self, "absent_functions"):
                raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined here: forward constants, errors and struct types.
        if name.startswith("nvml") and callable(getattr(pynvml, name, None)):
            raise AttributeError(f"the NVML double does not model {name}")
        return getattr(pynvml, name)

    def _enter(self, function: str, handle: _Handle | None = None) -> FakeGpu | None:
        self.calls[function] += 1
        if function in self.function_not_found:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if self.refcount <= 0 and function not in ("nvmlInit",):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if handle is None:
            return None
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.calls_by_device[handle.index] += 1
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        code = gpu.errors.get(function)
        if code:
            raise pynvml.NVMLError(code)
        gpu.advance(self.clock())
        return gpu

    def _enter_mig(self, function: str, handle: _MigHandle) -> FakeMigDevice:
        """A call on a MIG device's handle: the parent's loss and the device's own errors apply."""
        self._enter(function)
        if not 0 <= handle.parent < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.parent]
        self.calls_by_device[handle.parent] += 1
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        device = gpu.mig_devices[handle.slot] if handle.slot < len(gpu.mig_devices) else None
        if device is None:  # destroyed since the handle was given out
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        code = device.errors.get(function)
        if code:
            raise pynvml.NVMLError(code)
        return device

    # -- MIG --------------------------------------------------------------------------------------

    def nvmlDeviceGetMaxMigDeviceCount(self, device: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetMaxMigDeviceCount", device)
        if gpu.mig_mode is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        # nvml.h: zero when MIG is not enabled
        return gpu.max_mig_devices if gpu.mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: _Handle, index: int) -> _MigHandle:
        gpu = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if gpu.mig_mode is None or gpu.mig_mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < gpu.max_mig_devices:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig_devices) or gpu.mig_devices[index] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # no compute instance in this slot
        return _MigHandle(device.index, index)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        if not isinstance(device, _MigHandle):
            self._enter("nvmlDeviceGetGpuInstanceId", device)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # only MIG device handles have one
        return self._enter_mig("nvmlDeviceGetGpuInstanceId", device).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        if not isinstance(device, _MigHandle):
            self._enter("nvmlDeviceGetComputeInstanceId", device)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._enter_mig("nvmlDeviceGetComputeInstanceId", device).compute_instance_id

    def nvmlDeviceGetAttributes(self, device: Any) -> Any:
        if not isinstance(device, _MigHandle):
            self._enter("nvmlDeviceGetAttributes", device)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # "currently only MIG device handles"
        mig = self._enter_mig("nvmlDeviceGetAttributes", device)
        attributes = pynvml.c_nvmlDeviceAttributes()
        attributes.multiprocessorCount = mig.sm_count
        attributes.gpuInstanceSliceCount = mig.gpu_instance_slices
        attributes.computeInstanceSliceCount = mig.compute_instance_slices
        attributes.memorySizeMB = mig.memory_mb
        return attributes

    # -- init ------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.refcount -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        if self.count_error is not None:
            raise pynvml.NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return _Handle(index)

    # -- static ------------------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: _Handle | _MigHandle) -> str:
        if isinstance(handle, _MigHandle):
            return self._enter_mig("nvmlDeviceGetName", handle).name
        return self._enter("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle | _MigHandle) -> str:
        if isinstance(handle, _MigHandle):
            return self._enter_mig("nvmlDeviceGetUUID", handle).uuid
        return self._enter("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        return self._enter("nvmlDeviceGetCudaComputeCapability", handle).compute_capability

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: A002 - pynvml's name
        gpu = self._enter("nvmlDeviceGetMaxClockInfo", handle)
        return self._clock_of(gpu, type, maximum=True)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._enter("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:
        gpu = self._enter("nvmlDeviceGetMigMode", device)
        if gpu.mig_mode is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(gpu.mig_mode)

    def nvmlGpmQueryDeviceSupport(self, device: _Handle) -> Any:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", device)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if gpu.gpm_supported else 0
        return support

    # -- per poll ------------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        if gpu.mig_mode is not None and gpu.mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # nvml.h: not on MIG
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu.util_gpu_pct, gpu.util_memory_pct
        return util

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._enter("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return self._enter("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: A002
        return self._clock_of(self._enter("nvmlDeviceGetClockInfo", handle), type, maximum=False)

    @staticmethod
    def _clock_of(gpu: FakeGpu, clock_type: int, *, maximum: bool) -> int:
        if clock_type == pynvml.NVML_CLOCK_SM or clock_type == pynvml.NVML_CLOCK_GRAPHICS:
            return gpu.sm_clock_max_mhz if maximum else gpu.sm_clock_mhz
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return gpu.mem_clock_max_mhz if maximum else gpu.mem_clock_mhz
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle | _MigHandle, version: int | None = None) -> Any:
        memory = pynvml.c_nvmlMemory_t()
        if isinstance(handle, _MigHandle):
            mig = self._enter_mig("nvmlDeviceGetMemoryInfo", handle)
            memory.total, memory.used = mig.memory_mb * MIB, mig.memory_used
            memory.free = memory.total - memory.used
            return memory
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        memory.total, memory.used = gpu.memory_total, gpu.memory_used
        memory.free = gpu.memory_total - gpu.memory_used
        return memory

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        gpu = self._enter("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle).clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:
        return self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clocks_event_reasons

    def nvmlDeviceGetPcieThroughput(self, device: _Handle, counter: int) -> int:
        gpu = self._enter("nvmlDeviceGetPcieThroughput", device)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return int(gpu.pcie_tx_bytes_per_s / 1000)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return int(gpu.pcie_rx_bytes_per_s / 1000)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetFieldValues(self, handle: _Handle, fieldIds: list[Any]) -> Any:  # noqa: N803
        gpu = self._enter("nvmlDeviceGetFieldValues", handle)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        stamp_us = int(self.clock() * 1e6)
        filled = 0
        for i, requested in enumerate(fieldIds):
            fid, scope = requested if isinstance(requested, tuple) else (requested, 0)
            fv = values[i]
            fv.fieldId, fv.scopeId, fv.timestamp = fid, scope, stamp_us
            value = self._field_value(gpu, fid, scope)
            if value is None:
                fv.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            fv.nvmlReturn = pynvml.NVML_SUCCESS
            fv.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            fv.value.ullVal = int(value)
            filled += 1
        if fieldIds and not filled:
            # the call "succeeds if any values were populated"
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return values

    @staticmethod
    def _field_value(gpu: FakeGpu, fid: int, scope: int) -> float | None:
        if fid == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return gpu.nvlink_links if gpu.nvlink_links else None
        if fid in (197, 198):  # NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES
            if not gpu.pcie_counters_supported:
                return None
            return gpu._integrals.get("pcie_tx" if fid == 197 else "pcie_rx", 0.0)
        if fid in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
            if not gpu.nvlink_links or scope != 0xFFFFFFFF:
                return None
            key = "nvlink_tx" if fid == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else "nvlink_rx"
            return gpu._integrals.get(key, 0.0) / 1024  # KiB
        return None

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle | _MigHandle) -> list[Any]:
        if isinstance(handle, _MigHandle):
            owner: Any = self._enter_mig("nvmlDeviceGetComputeRunningProcesses", handle)
        else:
            owner = self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        out = []
        for pid, used in owner.processes:
            info = pynvml.c_nvmlProcessInfo_v3_t()
            info.pid = pid
            info.usedGpuMemory = used if used is not None else pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
            obj = pynvml.nvmlStructToFriendlyObject(info)
            if obj.usedGpuMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None  # what the bindings do for WDDM / unavailable
            out.append(obj)
        return out

    # -- GPM --------------------------------------------------------------------------------------

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        address = next(self._next_address)
        self._gpm_samples[address] = _GpmSampleRecord()
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:  # noqa: N803
        self._enter("nvmlGpmSampleFree")
        record = self._gpm_samples.get(_pointer_address(gpmSample) or 0)
        if record is None or record.freed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        record.freed = True

    def nvmlGpmSampleGet(self, device: _Handle, gpmSample: Any) -> Any:  # noqa: N803
        gpu = self._enter("nvmlGpmSampleGet", device)
        if not gpu.gpm_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        record = self._gpm_samples.get(_pointer_address(gpmSample) or 0)
        if record is None or record.freed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        # the time the integrals were advanced to, so the average is exact
        record.device, record.time = device.index, gpu._advanced_to
        record.integrals = {k: v for k, v in gpu._integrals.items() if isinstance(k, int)}
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:  # noqa: N803
        self._enter("nvmlGpmMetricsGet")
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self._gpm_samples.get(_pointer_address(metricsGet.sample1) or 0)
        second = self._gpm_samples.get(_pointer_address(metricsGet.sample2) or 0)
        for record in (first, second):
            if record is None or record.freed or record.time is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        assert first is not None and second is not None
        if first.device != second.device or second.time <= first.time:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[second.device]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        elapsed = second.time - first.time
        for i in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[i]
            metric_id = int(metric.metricId)
            code = gpu.gpm_metric_errors.get(metric_id)
            if code:
                metric.nvmlReturn = code
            elif metric_id not in gpu.gpm_percent and metric_id not in second.integrals:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                metric.nvmlReturn = pynvml.NVML_SUCCESS
                metric.value = (second.integrals.get(metric_id, 0.0) - first.integrals.get(metric_id, 0.0)) / elapsed
        return metricsGet
