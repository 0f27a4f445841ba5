"""The Verdict: what the advisor says about one target at one instant (DESIGN §4), the one type the
dashboard, `check --json`, the exporter and the fleet view render. A value, with no logic beyond
its JSON form."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from specwatch import perf
from specwatch.hardware import GpuSpec

__all__ = ["ON", "OFF", "HOLD", "UNKNOWN", "VERDICT_STATES", "Verdict", "UNKNOWN_BOUND", "unknown_verdict",
           "replaced"]

ON, OFF, HOLD, UNKNOWN = "on", "off", "hold", "unknown"
VERDICT_STATES = (ON, OFF, HOLD, UNKNOWN)


@dataclass(frozen=True)
class Verdict:
    speculation: str  # on | off | hold | unknown
    confidence: float
    expected_speedup: float | None
    break_even_length: float | None  # at the current load: ρ_v + k·r (1 + k·r at low load)
    crossover_concurrency: float | None
    change_recommended: bool
    reasons: tuple[str, ...]
    bound: perf.BoundEstimate  # where the decode step sits on the roofline, and the signals behind it
    time: float | None = None
    configured: bool = False
    acceptance_length: float | None = None
    low_load_break_even: float | None = None
    required_acceptance_length: float | None = None
    best_k: int | None = None
    best_k_speedup: float | None = None
    running: float | None = None
    flags: tuple[str, ...] = ()  # misaligned_draft, prefill_tax, ttft_rising, extrapolated, ...
    details: dict[str, Any] = field(default_factory=dict)
    # The GPU the verdict reasons about: told, or read and scaled to its clock when a power or
    # thermal cap holds it down. Views draw the ridge from it, so it agrees with `bound`.
    gpu_spec: GpuSpec | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "speculation": self.speculation,
            "confidence": round(self.confidence, 3),
            "expected_speedup": _round(self.expected_speedup),
            "break_even_length": _round(self.break_even_length),
            "crossover_concurrency": _round(self.crossover_concurrency, 1),
            "change_recommended": self.change_recommended,
            "reasons": list(self.reasons),
            "acceptance_length": _round(self.acceptance_length),
            "low_load_break_even_length": _round(self.low_load_break_even),
            "required_acceptance_length": _round(self.required_acceptance_length),
            "best_k": self.best_k,
            "best_k_speedup": _round(self.best_k_speedup),
            "flags": list(self.flags),
        }


_FIELDS = frozenset(f.name for f in fields(Verdict))


def replaced(verdict: Verdict, **changes: Any) -> Verdict:
    """dataclasses.replace(verdict, **changes) without its walk over the fields and through __init__
    (the shown verdict makes one or two a evaluation): a Verdict is a plain frozen dataclass, every
    field an init field and no __post_init__, so its fields copied with the changes are that value."""
    unknown = changes.keys() - _FIELDS
    if unknown:
        raise TypeError(f"Verdict has no field {sorted(unknown)[0]!r}")
    copy = object.__new__(Verdict)
    values = copy.__dict__
    values.update(verdict.__dict__)
    values.update(changes)
    return copy


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


UNKNOWN_BOUND = perf.BoundEstimate("unknown", None, ())


def unknown_verdict(reason: str, time: float | None = None, bound: perf.BoundEstimate | None = None,
                    gpu_spec: GpuSpec | None = None) -> Verdict:
    return Verdict(UNKNOWN, 0.0, None, None, None, False, (reason,), bound or UNKNOWN_BOUND, time=time,
                   gpu_spec=gpu_spec)
