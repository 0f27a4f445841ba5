"""The Verdict: what the advisor says about one target at one instant (DESIGN §4), the one type the
dashboard, `check --json`, the exporter and the fleet view render. A value, with no logic beyond
its JSON form."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specwatch import perf
from specwatch.perf.hardware import GpuSpec

__all__ = ["ON", "OFF", "HOLD", "UNKNOWN", "VERDICT_STATES", "Verdict", "UNKNOWN_BOUND", "unknown_verdict",
           "QuotedFigures", "HOLD_PREFIX"]

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
            **self._interval(),
            **self._speedups(),
        }

    def _interval(self) -> dict[str, Any]:
        """The expected speedup's interval from the window's evidence (perf.Evidence: two-sided 90 %)
        around the speedup shown, its σ of ln S, and for a hold what would settle it. Absent where the
        verdict rests on no measured acceptance (unknown, not configured)."""
        evidence = self.details.get("evidence")
        if evidence is None or self.expected_speedup is None or not self.expected_speedup > 0:
            return {}
        low, high = perf.evidence_interval(self.expected_speedup, evidence.error)
        settle = self.details.get("settle") if self.speculation == HOLD else None
        return {"speedup_interval": [_round(low), _round(high)], "evidence_error": _round(evidence.error),
                "settle": None if settle is None else {key: _round(value) if isinstance(value, float) else value
                                                       for key, value in settle.items()}}

    def interval_words(self) -> str | None:
        """'1.12× [0.97, 1.28]': the speedup shown and its evidence interval, for the screens."""
        evidence = self.details.get("evidence")
        if evidence is None or self.expected_speedup is None or not self.expected_speedup > 0:
            return None
        low, high = perf.evidence_interval(self.expected_speedup, evidence.error)
        return f"{self.expected_speedup:.2f}× [{low:.2f}, {high:.2f}]"

    def _speedups(self) -> dict[str, Any]:
        """The speedups behind the expected one, where the decision priced them: the engine's (what the
        verdict follows, before the busy share), its decode steps', the requests' per second and one
        request's end to end (null where the traffic's shape was not read)."""
        details = self.details
        if "engine_speedup" not in details:
            return {}
        return {"speedups": {"engine": _round(details.get("engine_speedup")),
                             "decode": _round(details.get("decode_speedup")),
                             "requests_per_s": _round(details.get("throughput_speedup")),
                             "request_end_to_end": _round(details.get("request_speedup"))}}


@dataclass(frozen=True)
class QuotedFigures:
    """What the reasons that quote the verdict's figures (break-even, the expected speedup, the
    crossover) are made of besides those figures: the advisor writes those reasons through `words`,
    and the banner, which shows steadied figures (monitor.ShownVerdict), has them rewritten through
    it with the figures it shows, so the screen never names two break-evens at once."""

    configured: bool  # the reason is "L is above/below break-even", else "would pay above L of"
    length: float | None  # the acceptance length measured (configured)
    running: float | None
    method_words: str
    k: int
    waiting: bool = False
    crossover_quoted: bool = False  # "stops paying above about N running" is among the reasons

    def words(self, break_even: float | None, low_load_break_even: float | None, speedup: float | None,
              crossover: float | None) -> dict[str, str]:
        """The quoting reasons, by the figure they quote, with these figures."""
        out: dict[str, str] = {}
        if break_even is None:
            return out
        if not self.configured:
            out["break_even_length"] = (
                f"speculation is not configured: at {self.running:.0f} running, {self.method_words} with k={self.k} "
                f"would pay above an acceptance length of {break_even:.2f} (at most {self.k + 1} is possible)")
            return out
        if self.length is None or low_load_break_even is None or speedup is None:
            return out
        relation = "above" if self.length > break_even else "below"
        at_load = f" at {self.running:.0f} running" if self.running else ""
        out["break_even_length"] = (
            f"acceptance length {self.length:.2f} is {relation} break-even {break_even:.2f}{at_load} for "
            f"{self.method_words} with k={self.k}"
            + (f" ({low_load_break_even:.2f} at low load)" if abs(break_even - low_load_break_even) > 0.005 else ""))
        out["expected_speedup"] = (f"expected speedup {speedup:.2f}× at this load"
                                   + (" (throughput at the batch each mode holds: requests are waiting)"
                                      if self.waiting else ""))
        if self.crossover_quoted and crossover is not None:
            out["crossover_concurrency"] = f"speculation stops paying above about {crossover:.0f} running"
        return out


# Every reason that says why a verdict holds starts so (judging.hold_settle, hold_words): the banner
# tells them from the others by it, and replaces them when it restates a verdict.
HOLD_PREFIX = "hold: "


def hold_words(band: float) -> str:
    """The reason a hold gives where no evidence interval was worked out: the fixed band."""
    return f"{HOLD_PREFIX}within ±{band:.0%} of break-even: keep the current setting"


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


UNKNOWN_BOUND = perf.BoundEstimate("unknown", None, ())


def unknown_verdict(reason: str, time: float | None = None, bound: perf.BoundEstimate | None = None,
                    gpu_spec: GpuSpec | None = None) -> Verdict:
    return Verdict(UNKNOWN, 0.0, None, None, None, False, (reason,), bound or UNKNOWN_BOUND, time=time,
                   gpu_spec=gpu_spec)
