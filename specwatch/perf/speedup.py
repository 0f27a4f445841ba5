"""Speedup under load: S(b), the crossover concurrency b×, the acceptance length needed at a load
and the best k′ at a load, from any step-time model.

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


from specwatch.perf.acceptance import LengthAtK, check_k, length_at_k, length_at_k_iid
from specwatch.perf.draft import break_even_length
from specwatch.perf.steptime import HingeParameters, StepTimeFit, StepTimeModel


__all__ = [
    "LONGER_K_MARGIN",
    "better_k",
    "by_k_words",
    "first_fall_through_one",
    "first_rise_through_one",
    "verify_ratio",
    "speedup",
    "break_even_length_at_load",
    "length_for_speedup",
    "Crossover",
    "crossover_concurrency",
    "KChoice",
    "best_k",
    "node_speedup",
]

# A longer draft is chosen over a shorter one, and another k over the one running, only where it
# gains this much more: the estimate's level error is common to both, but the cost of each extra
# draft forward is not known to better than a factor of about 1.5 (measured MTP forwards on a
# mixture of experts cost 1.4× the priced ones: benchmarks/published.py), a few % of the speedup
# per extra position at a draft of about 5 % of a step. 2 %, the gain predict has long asked of
# another k before it names it. Within it the shorter draft is the safer choice: it loses less when
# the acceptance drops and when the load rises (published k sweeps on large MoEs peak at 2–3).
LONGER_K_MARGIN = 0.02


def better_k(speedup: float, best_speedup: float, best_k: int) -> bool:
    """Whether a longer draft's speedup beats the best shorter one's: by LONGER_K_MARGIN over a
    draft, by anything over speculation off (k = 0, whose own margin is the caller's)."""
    return speedup > best_speedup * (1.0 + LONGER_K_MARGIN if best_k > 0 else 1.0)




def node_speedup(engine_speedup: float, busy_share: float | None, *, speculating: bool,
                 added_share: float = 0.0) -> float:
    """What a speedup of the engine's steps does to the node, when the engine is busy only
    `busy_share` of the time (Amdahl): the rest — the API server, tokenizing, the clients — is
    untouched by speculation.

    The share is measured under the configuration that runs now. Measured without speculation
    (u of each request's time is engine work), speculation takes it to u/S: the node goes
    1/((1−u) + u/S) as fast. Measured with speculation, switching it off takes it to u·S, and the
    speedup speculation brings is (1−u) + u·S. A share of None or 1 leaves the speedup as it is.
    Either way the node gains exactly when the engine does: the share moves the size, never the side
    of 1. `added_share` (measured without speculation only, as a sweep measures both servers) is
    what speculation adds outside the decode steps, as a share of a plain request's time: a slower
    prefill on the speculative server (its first token later by that much)."""
    if not (engine_speedup > 0 and math.isfinite(engine_speedup)):
        return engine_speedup
    u = busy_share if busy_share is not None and 0.0 < busy_share < 1.0 else 1.0
    if speculating:
        return (1.0 - u) + u * engine_speedup
    return 1.0 / ((1.0 - u) + u / engine_speedup + max(0.0, added_share))


def _check_load(batch: float, k: int, draft_ratio: float, context_per_sequence: float) -> None:
    check_k(k)
    if not math.isfinite(batch) or batch <= 0:
        raise ValueError(f"batch must be a positive number, got {batch!r}")
    if not math.isfinite(draft_ratio) or draft_ratio < 0:
        raise ValueError(f"draft cost ratio must be ≥ 0, got {draft_ratio!r}")
    if not math.isfinite(context_per_sequence) or context_per_sequence < 0:
        raise ValueError(f"context per sequence must be ≥ 0, got {context_per_sequence!r}")


def verify_ratio(model: StepTimeModel, batch: float, k: int, context_per_sequence: float = 0.0) -> float:
    """ρ_v = T(b·(k+1), C) / T(b, C): what verifying k+1 tokens per sequence costs over one.

    The context C = b·s̄ is the same for both: verification reads each sequence's KV cache once.
    """
    _check_load(batch, k, 0.0, context_per_sequence)
    context = batch * context_per_sequence
    return float(model.step_time(batch * (k + 1), context)) / float(model.step_time(batch, context))


def speedup(
    model: StepTimeModel,
    batch: float,
    k: int,
    length: float,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
) -> float:
    """S(b) = L·T(b, C) / (T(b·(k+1), C) + k·r·T(b, C)), with C = b·s̄ (DESIGN §3)."""
    _check_load(batch, k, draft_ratio, context_per_sequence)
    if not math.isfinite(length) or length < 1:
        raise ValueError(f"acceptance length must be ≥ 1, got {length!r}")
    context = batch * context_per_sequence
    plain = float(model.step_time(batch, context))
    speculative = float(model.step_time(batch * (k + 1), context)) + k * draft_ratio * plain
    return length * plain / speculative


def break_even_length_at_load(
    model: StepTimeModel, batch: float, k: int, draft_ratio: float, context_per_sequence: float = 0.0
) -> float:
    """The acceptance length that pays at this load: ρ_v(b) + k·r. At low load it is 1 + k·r."""
    _check_load(batch, k, draft_ratio, context_per_sequence)
    return break_even_length(k, draft_ratio, verify_ratio(model, batch, k, context_per_sequence))


def length_for_speedup(
    target_speedup: float,
    model: StepTimeModel,
    batch: float,
    k: int,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
) -> float:
    """The acceptance length that would give `target_speedup` at this load (S is linear in L).

    May exceed k+1, meaning no acceptance can reach it with this k.
    """
    if not math.isfinite(target_speedup) or target_speedup <= 0:
        raise ValueError("target speedup must be positive")
    return target_speedup * break_even_length_at_load(model, batch, k, draft_ratio, context_per_sequence)


@dataclass(frozen=True)
class Crossover:
    """Where S(b) falls through 1 as concurrency rises."""

    concurrency: float | None  # b× with S(b×) = 1; None when it does not cross in range
    # "crosses", "never_pays" (S < 1 at every b from 1 to max_batch) or "pays_throughout" (S ≥ 1 up
    # to max_batch, from `pays_from` where that is set)
    state: str
    max_batch: float
    # Where S first rises through 1 when it is below 1 at b = 1 (an MoE: one sequence's verification
    # wakes experts a plain step leaves idle, a few sequences' steps read them all anyway); the state
    # and concurrency then describe S from there on. None when S(1) ≥ 1, or it never rises.
    pays_from: float | None = None


def crossover_concurrency(
    model: StepTimeModel,
    k: int,
    length: float,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
    max_batch: float = 1024.0,
) -> Crossover:
    """The concurrency b× at which S(b×) = 1, for b in [1, max_batch] with context per sequence fixed.

    Scans a log grid for the first fall through 1, then bisects. Long contexts can keep S ≥ 1 over
    the whole range (KV reads dominate and verification stays cheap): then there is no crossover.
    """
    _check_load(1.0, k, draft_ratio, context_per_sequence)
    if not math.isfinite(max_batch) or max_batch < 1:
        raise ValueError("max_batch must be ≥ 1")

    def excess(b: float) -> float:
        return speedup(model, b, k, length, draft_ratio, context_per_sequence) - 1.0

    if excess(1.0) < 0:
        return Crossover(None, "never_pays", max_batch)
    hinge = model.parameters if isinstance(model, StepTimeFit) else model
    if isinstance(hinge, HingeParameters) and _plain_hinge(hinge):
        crossing = _hinge_crossing(hinge, k, length, draft_ratio, context_per_sequence, max_batch)
        if crossing is None:
            return Crossover(None, "pays_throughout", max_batch)
        return Crossover(crossing, "crosses", max_batch)
    return first_fall_through_one(excess, max_batch, grid_points=96, bisections=60)


@lru_cache(maxsize=16)
def _log_grid(max_batch: float, grid_points: int) -> tuple[tuple[float, ...], np.ndarray]:
    points = tuple(max_batch ** (step / grid_points) for step in range(1, grid_points + 1))
    array = np.array(points)
    array.flags.writeable = False
    return points, array


def first_rise_through_one(excess, max_batch: float, grid_points: int, bisections: int,
                           excess_on_grid: Callable[[np.ndarray], np.ndarray | None] | None = None,
                           excess_at_one: float | None = None) -> float | None:
    """The first b in (1, max_batch] where `excess(b)` = S(b) − 1 rises to 0 or above, for an S below 1
    at b = 1 (the caller's to check): the same log grid as first_fall_through_one, then the root in
    the first cell that rises. None when S stays below 1 on the whole grid."""
    points, grid = _log_grid(float(max_batch), grid_points)
    values = excess_on_grid(grid) if excess_on_grid is not None else None
    previous = 1.0
    low_value = excess(1.0) if excess_at_one is None else excess_at_one
    for j, b in enumerate(points):
        value = float(values[j]) if values is not None else excess(b)
        if value >= 0:
            # the fall of −excess in (previous, b]: −excess ≥ 0 at the low end, < 0 at the high one
            # (a value of exactly 0 at b is where it rises)
            if value == 0:
                return b
            return _fall_in_cell(lambda x: -excess(x), previous, b, -low_value, -value, bisections)
        previous, low_value = b, value
    return None


def first_fall_through_one(excess, max_batch: float, grid_points: int, bisections: int,
                           excess_on_grid: Callable[[np.ndarray], np.ndarray | None] | None = None,
                           excess_at_one: float | None = None) -> Crossover:
    """The first b in (1, max_batch] where `excess(b)` = S(b) − 1 falls below 0 (S(1) ≥ 1 is the
    caller's to check): a log grid of `grid_points`, then a root search inside the first cell that
    falls, to the precision `bisections` halvings of that cell give. S is not monotone in general
    (KV reads, caps), so the grid finds the first fall.

    `excess_on_grid`, when given, prices the whole grid at once (an array of the same values, or
    None to scan it point by point); `excess_at_one`, when given, is excess(1.0), which the caller
    has already priced."""
    points, grid = _log_grid(float(max_batch), grid_points)
    values = excess_on_grid(grid) if excess_on_grid is not None else None
    if values is not None:
        falls = (values < 0).ravel()
        j = int(falls.argmax())  # the first fall, or 0 where none falls
        if not falls[j]:
            return Crossover(None, "pays_throughout", max_batch)
        low, low_value = (points[j - 1], float(values[j - 1])) if j else (
            1.0, excess(1.0) if excess_at_one is None else excess_at_one)
        return Crossover(_fall_in_cell(excess, low, points[j], low_value, float(values[j]), bisections),
                         "crosses", max_batch)
    previous, excess_previous = 1.0, None
    for b in points:
        value = excess(b)
        if value < 0:
            low_value = excess_previous if excess_previous is not None else (
                excess(previous) if excess_at_one is None else excess_at_one)  # previous is 1.0 here
            return Crossover(_fall_in_cell(excess, previous, b, low_value, value, bisections),
                             "crosses", max_batch)
        previous, excess_previous = b, value
    return Crossover(None, "pays_throughout", max_batch)


# ITP's truncation constants (Oliveira & Takahashi, ACM TOMS 47(1), 2020): κ1 = 0.2 / width, κ2 = 2
# and one step of slack over bisection (n0 = 1)
_ITP_KAPPA1 = 0.2
_ITP_SLACK = 1


def _fall_in_cell(excess, low: float, high: float, excess_low: float, excess_high: float,
                  bisections: int) -> float:
    """Where `excess` falls through 0 in [low, high] (excess(low) ≥ 0 > excess(high)): the middle
    of a bracket `bisections` halvings narrow, as bisection would give, found by the ITP method.

    ITP steps toward the regula falsi point while that keeps bisection's worst case (one step more
    at most), so a smooth S takes a handful of evaluations instead of `bisections`. The bracket
    keeps bisection's invariant (excess ≥ 0 at its low end, < 0 at its high end), so the answer is
    a fall through 0 within the same precision.
    """
    width = high - low
    epsilon = width * 2.0 ** -(bisections + 1)  # half the final bracket bisection leaves
    kappa1 = _ITP_KAPPA1 / width
    most = bisections + _ITP_SLACK
    for j in range(most):
        if high - low <= 2.0 * epsilon:
            break
        middle = 0.5 * (low + high)
        radius = epsilon * 2.0 ** (most - j) - 0.5 * (high - low)
        delta = kappa1 * (high - low) ** 2
        # regula falsi on excess (≥ 0 at low, < 0 at high)
        falsi = (low * excess_high - high * excess_low) / (excess_high - excess_low)
        if not (low <= falsi <= high):  # rounding at a nearly flat end
            falsi = middle
        sigma = 1.0 if middle >= falsi else -1.0
        truncated = falsi + sigma * delta if delta <= abs(middle - falsi) else middle
        x = truncated if abs(truncated - middle) <= radius else middle - sigma * radius
        if not (low < x < high):
            x = middle
        value = excess(x)
        if value >= 0:
            low, excess_low = x, value
        else:
            high, excess_high = x, value
    return 0.5 * (low + high)


def _plain_hinge(h: HingeParameters) -> bool:
    """A hinge with finite, non-negative terms and a positive base: T > 0 for every N."""
    values = (h.base_s, h.knee, h.slope_s_per_token, h.kv_s_per_token, h.per_token_s)
    return all(math.isfinite(v) and v >= 0 for v in values) and h.base_s > 0


def _hinge_crossing(h: HingeParameters, k: int, length: float, draft_ratio: float,
                    context_per_sequence: float, max_batch: float) -> float | None:
    """The first b in (1, max_batch] where S(b) falls below 1, solved exactly for a hinge.

    S(b) < 1 ⇔ g(b) = (L − k·r)·T(b, b·s̄) − T(b·(k+1), b·s̄) < 0, and for a hinge g is piecewise
    linear in b with breaks where b or b·(k+1) reaches the knee: on each piece the root is one
    division. The caller has checked S(1) ≥ 1. None when S stays ≥ 1 up to max_batch.
    """
    gain = length - k * draft_ratio
    wide = k + 1.0
    linear = h.kv_s_per_token * context_per_sequence  # seconds per unit of b from the context

    def g(b: float) -> float:
        plain = h.base_s + linear * b + h.per_token_s * b + h.slope_s_per_token * max(0.0, b - h.knee)
        verify = (h.base_s + linear * b + h.per_token_s * wide * b
                  + h.slope_s_per_token * max(0.0, wide * b - h.knee))
        return gain * plain - verify

    breaks = sorted({b for b in (h.knee / wide, h.knee) if 1.0 < b < max_batch})
    low, g_low = 1.0, g(1.0)
    for high in (*breaks, max_batch):
        g_high = g(high)
        if g_high < 0:
            if g_low < 0:  # only at b = 1 itself, within rounding of the caller's check
                return low
            # linear on [low, high]: g(low) ≥ 0 > g(high)
            root = low + (high - low) * g_low / (g_low - g_high)
            return min(max(root, low), high)
        low, g_low = high, g_high
    return None


@dataclass(frozen=True)
class KChoice:
    """The best chain length k′ at a load and what it would give (k′ = 0 means speculation off)."""

    k: int
    length: float
    speedup: float
    extrapolated: bool


def by_k_words(choices, best: int, basis: str = "") -> str:
    """The speedup at each k′ priced, shortest first, with the one chosen marked, and why a longer
    one within LONGER_K_MARGIN is not."""
    parts = [f"k={c.k} {c.speedup:.2f}×" + (" (best)" if c.k == best else "") + ("*" if c.extrapolated else "")
             for c in choices]
    words = "speedup by k at this load: " + ", ".join(parts)
    words += f" (a longer draft must gain {LONGER_K_MARGIN:.0%} more to be chosen"
    words += (f"; L at each k from the {basis}" if basis else "") + ")"
    if any(c.extrapolated for c in choices):
        words += "; * L extrapolated past the positions measured"
    return words


def best_k(
    model: StepTimeModel,
    batch: float,
    draft_ratio: float,
    context_per_sequence: float = 0.0,
    *,
    rates: Sequence[float] | None = None,
    length: float | None = None,
    k: int | None = None,
    k_max: int | None = None,
) -> KChoice:
    """The k′ in 0..k_max (default: the measured k, so no extrapolation) with the highest S at b.

    Uses exact per-position data when given (`rates`), else the i.i.d. α from (`length`, `k`).
    """
    if rates is not None:
        measured_k = len(rates)
        if measured_k == 0:
            raise ValueError("per-position rates must be non-empty")
    elif length is not None and k is not None:
        check_k(k)
        measured_k = int(k)
    else:
        raise ValueError("best_k needs per-position rates, or a length and its k")
    top = measured_k if k_max is None else int(k_max)
    best = KChoice(0, 1.0, 1.0, False)
    exact: list[float] = []  # L(k′) for k′ ≤ the measured k: 1 + the first k′ rates (length_at_k)
    if rates is not None:
        total = 0.0
        for p in rates:
            total += min(max(float(p), 0.0), 1.0)  # as np.clip, NaN included
            exact.append(1.0 + total)
    for candidate in range(1, top + 1):
        if candidate <= len(exact):
            estimate = LengthAtK(candidate, exact[candidate - 1], False, "per-position")
        elif rates is not None:
            estimate = length_at_k(rates, candidate)
        else:
            estimate = length_at_k_iid(length, measured_k, candidate)
        value = speedup(model, batch, candidate, estimate.length, draft_ratio, context_per_sequence)
        if better_k(value, best.speedup, best.k):
            best = KChoice(candidate, estimate.length, value, estimate.extrapolated)
    return best
