"""Which GPU the advisor reasons about: the datasheet spec read from NVML or DCGM names (or told),
a MIG slice's share of its parent, and the clock a power or thermal cap holds it to. Pure: no I/O.
"""

from __future__ import annotations

from specwatch.perf.hardware import GpuSpec, scale_for_clock
from specwatch.telemetry.gpu_events import is_performance_limited
from specwatch.telemetry.snapshot import GpuSample


def throttled_spec(spec: GpuSpec, gpu: GpuSample) -> GpuSpec:
    """The spec at the clock the GPU runs at, when a power or thermal cap holds it down.

    An idle GPU also runs slow clocks, but for want of work, not because it is capped: only capped
    clocks move the ridge. The factor is rounded to 5 % so that clock jitter does not refit the
    step-time model on every update.
    """
    current, maximum = gpu.values.get("sm_clock_mhz"), gpu.values.get("sm_clock_max_mhz")
    if current is None or not maximum or not is_performance_limited(gpu.throttle_reasons):
        return spec
    factor = min(1.0, max(0.05, round(current / maximum / 0.05) * 0.05))
    return scale_for_clock(spec, factor * maximum, maximum)
