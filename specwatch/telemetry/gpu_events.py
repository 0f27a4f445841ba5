"""The clock-event vocabulary of a GpuSample: what the reason bits are called, and which of them
cost a busy GPU performance.

NVML (nvmlClocksEventReason*) and dcgm-exporter (DCGM_FI_DEV_CLOCKS_EVENT_REASONS, formerly
..._CLOCK_THROTTLE_REASONS) report the same bit mask; both collectors decode it here into the
names a GpuSample carries in `throttle_reasons`, and the advisor and the widgets read those names
with `is_performance_limited`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable


__all__ = [
    "CLOCK_EVENT_REASONS",
    "PERFORMANCE_LIMITING_REASONS",
    "decode_clock_event_reasons",
    "is_performance_limited",
]

# Clock-event ("throttle") reason bits, nvml.h nvmlClocksEventReason*. Several can be set at once.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "idle"),
    (0x2, "applications clocks"),
    (0x4, "power cap"),
    (0x8, "hardware slowdown"),
    (0x10, "sync boost"),
    (0x20, "software thermal"),
    (0x40, "hardware thermal"),
    (0x80, "power brake"),
    (0x100, "display clock"),
    (0x200, "board limit"),
    (0x400, "reliability"),
)
KNOWN_CLOCK_EVENT_BITS = 0
for _bit, _ in CLOCK_EVENT_REASONS:
    KNOWN_CLOCK_EVENT_BITS |= _bit

# Reasons that hold clocks below what the workload asks for. "idle" and the settings-driven
# reasons lower clocks without costing a busy GPU anything, so they do not count as throttling.
PERFORMANCE_LIMITING_REASONS = frozenset(
    {"power cap", "hardware slowdown", "sync boost", "software thermal", "hardware thermal", "power brake",
     "board limit", "reliability"}
)


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """The names of the bits set in an nvmlClocksEventReason mask, lowest bit first.

    Unknown bits (newer drivers add some) come out as one "unknown (0x…)" entry rather than
    being dropped, so a new kind of throttling is visible before specwatch learns its name.
    """
    if mask < 0:
        raise ValueError(f"a clock-event mask is unsigned, got {mask}")
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    unknown = mask & ~KNOWN_CLOCK_EVENT_BITS
    if unknown:
        names.append(f"unknown (0x{unknown:x})")
    return tuple(names)


def is_performance_limited(reasons: Iterable[str]) -> bool:
    """Whether any decoded reason caps clocks below demand (power, thermal, sync boost, ...)."""
    return any(r in PERFORMANCE_LIMITING_REASONS for r in reasons)
