"""A speculation schedule by batch size (vLLM's num_speculative_tokens_per_batch_size).

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specwatch.perf.acceptance import length_at_k
from specwatch.perf.steptime import StepTimeModel
from specwatch.perf.speedup import better_k, speedup


__all__ = [
    "SCHEDULE_MARGIN",
    "ScheduleRange",
    "SpeculationSchedule",
    "speculation_schedule",
]


# A range keeps speculation on only if its expected gain clears this margin over plain decoding:
# inside it the estimate's own error (datasheet level, noisy windows) could turn a gain into a loss.
SCHEDULE_MARGIN = 0.05


@dataclass(frozen=True)
class ScheduleRange:
    """Batch sizes start..end (inclusive) run with k draft tokens (0: speculation off)."""

    start: int
    end: int
    k: int
    length: float  # L(k) used for the range (1 for k = 0)
    speedup_vs_off: tuple[float, float]  # min, max over the range
    speedup_vs_current: tuple[float, float] | None  # against the static k in use, when one is
    extrapolated: bool  # beyond the observed batch sizes, or k beyond the measured chain
    evidence: str

    def to_dict(self) -> dict[str, object]:
        return {
            "start": self.start,
            "end": self.end,
            "k": self.k,
            "acceptance_length": round(self.length, 4),
            "speedup_vs_off": [round(v, 4) for v in self.speedup_vs_off],
            "speedup_vs_current": None if self.speedup_vs_current is None
            else [round(v, 4) for v in self.speedup_vs_current],
            "extrapolated": self.extrapolated,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class SpeculationSchedule:
    ranges: tuple[ScheduleRange, ...]
    max_batch: int
    k_max: int
    current_k: int | None

    @property
    def entries(self) -> list[list[int]]:
        """The schedule as vLLM takes it: inclusive [[start, end, k], ...] from batch size 1."""
        return [[r.start, r.end, r.k] for r in self.ranges]

    @property
    def never_pays(self) -> bool:
        return all(r.k == 0 for r in self.ranges)


def speculation_schedule(
    model: StepTimeModel,
    rates: Sequence[float],
    draft_ratio: float,
    context_per_sequence: float = 0.0,
    *,
    k_max: int | None = None,
    max_batch: int = 256,
    current_k: int | None = None,
    observed_batch: tuple[float, float] | None = None,
    margin: float = SCHEDULE_MARGIN,
    speedup_at: Callable[[float, int, float], float] | None = None,
) -> SpeculationSchedule:
    """For b = 1..max_batch, the k′ in 0..k_max with the highest S(b, k′), merged into ranges.

    L(k′) comes from the per-position rates (exact for k′ ≤ the measured k, extrapolated beyond).
    A batch size whose best gain does not clear `margin` gets k = 0. Ranges outside the observed
    batch sizes, or using a k′ beyond the measured chain, are marked extrapolated: there the step
    time is the prior's, not a measurement. `speedup_at(b, k, L)` replaces the plain S(b) with the
    shared decision's (draft roofline, attention, capacity), as `tune` passes it.
    """
    if speedup_at is None:
        def speedup_at(b: float, k: int, length: float) -> float:
            return speedup(model, b, k, length, draft_ratio, context_per_sequence)

    measured_k = len(rates)
    if measured_k == 0:
        raise ValueError("per-position rates must be non-empty")
    top = measured_k if k_max is None else int(k_max)
    if top < 0 or max_batch < 1:
        raise ValueError("k_max must be ≥ 0 and max_batch ≥ 1")
    lengths = {k: length_at_k(rates, k) for k in range(0, top + 1)}
    choices: list[tuple[int, float, float | None]] = []  # (k, S vs off, S vs current) per batch size
    for b in range(1, max_batch + 1):
        best_k, best_s = 0, 1.0
        for k in range(1, top + 1):
            s = speedup_at(b, k, lengths[k].length)
            if better_k(s, best_s, best_k):
                best_k, best_s = k, s
        if best_s < 1.0 + margin:
            best_k, best_s = 0, 1.0
        vs_current = None
        if current_k:
            current = speedup_at(b, current_k, length_at_k(rates, current_k).length)
            vs_current = best_s / current
        choices.append((best_k, best_s, vs_current))

    ranges: list[ScheduleRange] = []
    start = 1
    for b in range(2, max_batch + 2):
        if b <= max_batch and choices[b - 1][0] == choices[start - 1][0]:
            continue
        end = b - 1
        k = choices[start - 1][0]
        span = choices[start - 1:end]
        s_off = (min(c[1] for c in span), max(c[1] for c in span))
        s_cur = None
        if current_k:
            s_cur = (min(c[2] for c in span), max(c[2] for c in span))  # type: ignore[type-var]
        outside = observed_batch is None or start < observed_batch[0] or end > observed_batch[1]
        beyond_k = k > measured_k
        if observed_batch is None:
            evidence = "no batch sizes observed: step time from the prior"
        elif outside:
            evidence = (f"observed batch {observed_batch[0]:.0f}–{observed_batch[1]:.0f}: "
                        "outside it the step time is extrapolated")
        else:
            evidence = f"inside the observed batch sizes {observed_batch[0]:.0f}–{observed_batch[1]:.0f}"
        if k:
            evidence += f"; L({k}) = {lengths[k].length:.2f} from {lengths[k].basis} rates"
        else:
            evidence += f"; no k up to {top} gains {margin:.0%} here"
        ranges.append(ScheduleRange(start, end, k, lengths[k].length if k else 1.0, s_off, s_cur,
                                    outside or beyond_k, evidence))
        start = b
    return SpeculationSchedule(tuple(ranges), max_batch, top, current_k)
