"""Clocks: the SM and memory clocks at most (read once per device) and now (every poll), and the
clock-event reasons (formerly "throttle reasons"): why the clocks are held below their maximum.
"""

from __future__ import annotations

from specwatch.collectors.nvml_calls import REASON_FUNCTION_MISSING, NvmlCallFailed, NvmlCalls
from specwatch.collectors.nvml_device import DeviceState, read_fields
from specwatch.telemetry.gpu_events import decode_clock_event_reasons


class ClockReader:
    """Reads a GPU's clocks and clock-event reasons; a failed read is the field's reason."""

    def __init__(self, calls: NvmlCalls) -> None:
        self._calls = calls

    def read_max(self, dev: DeviceState) -> None:
        """The maximum clocks, into the device's static values (or static errors)."""
        nvml = self._calls.nvml
        sm_max = read_fields(self._calls, dev, dev.static_errors, ("sm_clock_max_mhz",),
                             "nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM)
        if sm_max is not None:
            dev.static_values["sm_clock_max_mhz"] = float(sm_max)
        mem_max = read_fields(self._calls, dev, dev.static_errors, ("mem_clock_max_mhz",),
                              "nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_MEM)
        if mem_max is not None:
            dev.static_values["mem_clock_max_mhz"] = float(mem_max)

    def read(self, dev: DeviceState, values: dict[str, float], errors: dict[str, str]) -> None:
        """The clocks now."""
        nvml = self._calls.nvml
        sm = read_fields(self._calls, dev, errors, ("sm_clock_mhz",), "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
        if sm is not None:
            values["sm_clock_mhz"] = float(sm)
        mem = read_fields(self._calls, dev, errors, ("mem_clock_mhz",), "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM)
        if mem is not None:
            values["mem_clock_mhz"] = float(mem)

    def read_event_reasons(self, dev: DeviceState, errors: dict[str, str]) -> tuple[str, ...]:
        """The clock-event reasons now, decoded; () with errors["throttle_reasons"] set when NVML
        cannot say."""
        try:
            mask = self._calls.call(dev.clock_reasons_function, dev.handle)
        except NvmlCallFailed as failed:
            if failed.lost:
                raise
            if failed.reason == REASON_FUNCTION_MISSING and dev.clock_reasons_function.endswith("EventReasons"):
                # Drivers before R535 only have the older, now deprecated, name.
                dev.clock_reasons_function = "nvmlDeviceGetCurrentClocksThrottleReasons"
                return self.read_event_reasons(dev, errors)
            errors["throttle_reasons"] = failed.reason
            return ()
        return decode_clock_event_reasons(int(mask))
