"""GPM (GPU Performance Monitoring, Hopper and newer): SM activity and occupancy, tensor-pipe
activity and DRAM bandwidth use, each a 0..1 fraction.

A GPM metric is the average between two GPM samples. The sampler keeps the previous poll's sample
per device, so one poll costs one `nvmlGpmSampleGet` per device, and the first poll has no GPM
values yet ("warming up"). The sample buffers stay on the device (`gpm_previous`, `gpm_spare`)
until `release` frees them: when the GPU is lost, when sampling is refused for good, and at close.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specwatch.collectors.nvml_calls import (
    NVML_SUCCESS,
    REASON_FUNCTION_MISSING,
    REASON_NOT_SUPPORTED,
    REASON_WARMING_UP,
    NvmlCallFailed,
    NvmlCalls,
)
from specwatch.collectors.nvml_device import DeviceState

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


class GpmSampler:
    """Samples GPM once per poll per device and answers the averages since the previous sample."""

    def __init__(self, calls: NvmlCalls, clock: Callable[[], float]) -> None:
        self._calls = calls
        self._clock = clock

    def query_support(self, dev: DeviceState) -> None:
        """Whether the GPU has GPM, read once: sets `dev.gpm_reason` (None when supported)."""
        try:
            support = self._calls.call("nvmlGpmQueryDeviceSupport", dev.handle)
            dev.gpm_reason = None if int(getattr(support, "isSupportedDevice", 0)) else REASON_NOT_SUPPORTED
        except NvmlCallFailed as failed:
            if failed.lost:
                raise
            dev.gpm_reason = failed.reason  # NotSupported on Ampere/Ada, FunctionNotFound before R525

    def read(self, dev: DeviceState, values: dict[str, float], errors: dict[str, str]) -> None:
        """The GPM fractions since the previous poll, or each field's reason."""
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
            sample = dev.gpm_spare if dev.gpm_spare is not None else self._calls.call("nvmlGpmSampleAlloc")
            dev.gpm_spare = sample  # ours until it becomes the previous sample: freed on any failure
            self._calls.call("nvmlGpmSampleGet", dev.handle, sample)
            dev.gpm_spare = None
        except NvmlCallFailed as failed:
            if failed.lost:
                raise
            self._failed(dev, errors, failed.reason)
            return
        previous, dev.gpm_previous, dev.gpm_previous_time = dev.gpm_previous, sample, now
        if previous is None:
            for _, name in GPM_FIELDS:
                errors[name] = REASON_WARMING_UP
            return
        dev.gpm_spare = previous  # reused as the next poll's buffer
        gpm_values, gpm_errors = self._metrics(previous, sample)
        dev.gpm_last_values, dev.gpm_last_errors = gpm_values, gpm_errors
        values.update(gpm_values)
        errors.update(gpm_errors)

    def release(self, dev: DeviceState) -> None:
        """Free the device's sample buffers (a lost GPU, or the collector closing)."""
        for sample in (dev.gpm_previous, dev.gpm_spare):
            if sample is not None:
                self._calls.quiet("nvmlGpmSampleFree", sample)
        dev.gpm_previous = dev.gpm_spare = None

    def _metrics(self, sample1: Any, sample2: Any) -> tuple[dict[str, float], dict[str, str]]:
        nvml = self._calls.nvml
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
            result = self._calls.call("nvmlGpmMetricsGet", request)
        except NvmlCallFailed as failed:
            if failed.lost:
                raise
            return {}, {name: failed.reason for _, name in GPM_FIELDS}
        for i, (metric_id, name) in enumerate(GPM_FIELDS):
            metric = result.metrics[i]
            code = int(metric.nvmlReturn)
            if code != NVML_SUCCESS:
                errors[name] = self._calls.reason_for_code(code)
            elif int(metric.metricId) != metric_id:
                errors[name] = f"NVML returned GPM metric {int(metric.metricId)} in place of {metric_id}"
            else:
                values[name] = float(metric.value) / 100.0
        return values, errors

    def _failed(self, dev: DeviceState, errors: dict[str, str], reason: str) -> None:
        for _, name in GPM_FIELDS:
            errors[name] = reason
        if reason in (REASON_NOT_SUPPORTED, REASON_FUNCTION_MISSING):
            # Support said yes but sampling says no (vGPU, MIG): stop trying.
            dev.gpm_reason = reason
            self.release(dev)
