"""Intervals from a sweep's rounds, the verdict they support, and when to stop adding rounds.

Pure: numbers in, numbers out (no clock, no I/O).

Each figure of one side (tokens/s, TPOT p50/p95, TTFT p50) gets a Student-t 95 % interval on its
mean over the rounds. The speedup gets a t-interval on the mean of log(speculative ÷ baseline)
taken per round, then exponentiated: the rounds are paired (each round runs both sides back to
back), a ratio is symmetric on the log scale, and the point estimate is the geometric mean of the
per-round ratios. A t-interval rather than a bootstrap because a sweep has few rounds (2 to a dozen):
a percentile bootstrap of 2 or 3 values can only return the values themselves and is far too
narrow there, while the t-interval's width at small n is honest about how little is known.

The 97.5 % Student-t quantiles come from the standard table for 1..30 degrees of freedom (scipy is
not a dependency); above 30 the Cornish–Fisher expansion around the normal quantile (error < 1e-4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

__all__ = [
    "CONFIDENCE",
    "PAYS",
    "COSTS",
    "WITHIN_NOISE",
    "ONE_ROUND",
    "Interval",
    "t_quantile_975",
    "mean_interval",
    "ratio_interval",
    "verdict",
    "rounds_to_resolve",
    "RoundsDecision",
    "next_round",
]

CONFIDENCE = 0.95

# Verdicts of a speedup interval.
PAYS = "pays"  # the whole interval above 1
COSTS = "costs"  # the whole interval below 1
WITHIN_NOISE = "within_noise"  # the interval holds 1
ONE_ROUND = "one_round"  # no interval: a single round says nothing about its spread

# Student-t 0.975 quantiles, df = 1..30 (any statistics table).
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def t_quantile_975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom (a two-sided 95 % interval)."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = NormalDist().inv_cdf(0.975)
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95 % interval from `n` rounds; low/high are None below two rounds."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n}

    @property
    def half_width(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)


def mean_interval(values: Sequence[float | None]) -> Interval:
    """The mean of the rounds' values and its t-interval (None values are rounds without the figure)."""
    x = _finite(values)
    if x.size == 0:
        return Interval(None, None, None, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, None, None, int(x.size))
    half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(mean, mean - half, mean + half, int(x.size))


def ratio_interval(numerators: Sequence[float | None], denominators: Sequence[float | None]) -> Interval:
    """The geometric mean of the paired ratios num_i ÷ den_i and its t-interval on the log scale.
    Pairs where either side is missing or not positive are left out."""
    logs = [math.log(n / d) for n, d in zip(numerators, denominators)
            if n is not None and d is not None and n > 0 and d > 0 and math.isfinite(n) and math.isfinite(d)]
    inner = mean_interval(logs)
    if inner.estimate is None:
        return Interval(None, None, None, 0)
    if inner.low is None:
        return Interval(math.exp(inner.estimate), None, None, inner.n)
    return Interval(math.exp(inner.estimate), math.exp(inner.low), math.exp(inner.high), inner.n)


def verdict(interval: Interval) -> str | None:
    """Pays, costs or within noise, from the interval alone (never from the point estimate)."""
    if interval.estimate is None:
        return None
    if interval.low is None or interval.high is None:
        return ONE_ROUND
    if interval.low > 1.0:
        return PAYS
    if interval.high < 1.0:
        return COSTS
    return WITHIN_NOISE


def rounds_to_resolve(interval: Interval) -> int | None:
    """How many rounds in all would bring the speedup's interval clear of 1, if the spread stays as
    measured: the log-scale half-width shrinks as 1/√n, so n' = n · (half-width ÷ |log estimate|)².
    None when it cannot be said (under two rounds, or an estimate of exactly 1)."""
    if interval.estimate is None or interval.low is None or interval.high is None or interval.n < 2:
        return None
    centre = math.log(interval.estimate)
    half = (math.log(interval.high) - math.log(interval.low)) / 2
    if centre == 0.0:
        return None
    if half < abs(centre):
        return interval.n
    return max(interval.n + 1, math.ceil(interval.n * (half / abs(centre)) ** 2))


@dataclass(frozen=True)
class RoundsDecision:
    go_on: bool
    reason: str


def next_round(rounds_done: int, speedup: Interval, *, min_rounds: int, max_rounds: int,
               budget_left_s: float | None, round_s: float | None) -> RoundsDecision:
    """Whether a tier gets one more round: always up to `min_rounds`; then, only with a budget,
    while the speedup's interval holds 1, the cap allows, and one more round (of the length the
    rounds so far took) fits in what is left of the tier's share of the budget."""
    if rounds_done < min_rounds:
        return RoundsDecision(True, "minimum rounds")
    if budget_left_s is None:
        return RoundsDecision(False, "rounds done")
    if verdict(speedup) in (PAYS, COSTS):
        return RoundsDecision(False, "resolved")
    if rounds_done >= max_rounds:
        return RoundsDecision(False, "round cap")
    if round_s is not None and round_s > budget_left_s:
        return RoundsDecision(False, "budget spent")
    return RoundsDecision(True, "unresolved")
