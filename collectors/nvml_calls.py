"""One NVML call, as a value or a reason: the wrapper that every part of the NVML collector calls
the driver through, and the table that turns an NVML error into a short, plain reason.

`NvmlCalls.call` raises `NvmlCallFailed` (a reason, and whether the GPU is lost) in place of
whatever the binding raised; the parts turn that into a field's reason, and only a lost GPU goes
further, up to the collector. It holds no lock: the collector's lock serialises every call.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

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


class NvmlCallFailed(Exception):
    """An NVML call failed; carries the reason and whether the GPU is lost."""

    def __init__(self, reason: str, lost: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.lost = lost


class NvmlCalls:
    """Calls into the nvml module (the real `pynvml`, or a test double) by function name. Warns on
    `log` once per function that is missing or raises something other than an NVML error."""

    def __init__(self, nvml: ModuleType | Any, log: logging.Logger) -> None:
        self.nvml = nvml
        self._log = log
        self._logged_missing: set[str] = set()

    def call(self, function: str, *args: Any) -> Any:
        """Call one NVML function; raise NvmlCallFailed with a reason instead of the NVML error."""
        fn = getattr(self.nvml, function, None)
        if fn is None:
            # Bindings older than the function: same meaning as FunctionNotFound.
            self._log_missing(function)
            raise NvmlCallFailed(REASON_FUNCTION_MISSING, lost=False)
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - NVMLError, the binding's mismatch error, ctypes trouble
            reason = nvml_error_reason(exc)
            if reason == REASON_FUNCTION_MISSING:
                self._log_missing(function)
            elif not isinstance(exc, self.nvml.NVMLError) and function not in self._logged_missing:
                # Not an NVML error: a binding/driver incompatibility or a specwatch bug. Say so once.
                self._logged_missing.add(function)
                self._log.warning("NVML call %s raised %r", function, exc)
            raise NvmlCallFailed(reason, lost=is_gpu_lost_error(exc)) from None

    def quiet(self, function: str, *args: Any) -> None:
        try:
            self.call(function, *args)
        except NvmlCallFailed:
            pass

    def reason_for_code(self, code: int) -> str:
        """Reason for a bare nvmlReturn code (GPM metrics and field values fail one by one)."""
        try:
            return nvml_error_reason(self.nvml.NVMLError(code))
        except Exception:  # noqa: BLE001 - an unknown code must still give a reason
            return f"NVML error code {code}"

    def _log_missing(self, function: str) -> None:
        if function not in self._logged_missing:
            self._logged_missing.add(function)
            self._log.warning("NVML function %s is missing: check that nvidia-ml-py matches the driver", function)
