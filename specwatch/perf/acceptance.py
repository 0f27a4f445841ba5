"""Acceptance algebra: from vLLM's spec-decode counters to the mean acceptance length L, the
i.i.d. acceptance α, and L for other chain lengths k′ (DESIGN §3, reference/model.md §1).

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


__all__ = [
    "acceptance_length",
    "acceptance_rate",
    "length_from_rate",
    "per_position_rates",
    "conditional_acceptance",
    "check_k",
    "expected_length",
    "iid_alpha",
    "LengthAtK",
    "length_at_k",
    "clipped_rates",
    "length_at_k_clipped",
    "length_at_k_iid",
    "LengthsAtK",
]


def acceptance_length(drafts: float, accepted: float) -> float | None:
    """Mean acceptance length L = 1 + A/D (tokens committed per verify step, bonus included).

    None when there were no drafts in the window: L is undefined, not 1.
    """
    if not (math.isfinite(drafts) and math.isfinite(accepted)) or drafts <= 0 or accepted < 0:
        return None
    return 1.0 + accepted / drafts


def acceptance_rate(draft_tokens: float, accepted: float) -> float | None:
    """Draft acceptance rate A/T (vLLM's "draft acceptance rate"; not the i.i.d. α)."""
    if not (math.isfinite(draft_tokens) and math.isfinite(accepted)) or draft_tokens <= 0 or accepted < 0:
        return None
    return accepted / draft_tokens


def length_from_rate(rate: float, k: int) -> float:
    """L from the acceptance rate A/T: every draft proposes k tokens, so A/D = k·(A/T)."""
    check_k(k)
    if not math.isfinite(rate) or rate < 0 or rate > 1:
        raise ValueError(f"acceptance rate must be in 0..1, got {rate!r}")
    return 1.0 + k * rate


def per_position_rates(drafts: float, accepted_per_position: Sequence[float]) -> np.ndarray | None:
    """p_i = a_i / D: the chance that the first i+1 drafted tokens were all accepted.

    Values are clipped into 0..1; counters read at slightly different instants can overshoot by a
    count or two. None when there were no drafts.
    """
    if not math.isfinite(drafts) or drafts <= 0:
        return None
    counts = np.asarray(accepted_per_position, dtype=float)
    if counts.ndim != 1 or counts.size == 0 or not np.all(np.isfinite(counts)):
        return None
    return np.clip(counts / drafts, 0.0, 1.0)


def conditional_acceptance(rates: Sequence[float]) -> np.ndarray:
    """α_i = p_i / p_{i−1} (p_{−1} = 1): acceptance at position i given all earlier ones accepted.

    Where p_{i−1} is 0 the position was never reached, and α_i is reported as 0.
    """
    p = np.asarray(rates, dtype=float)
    previous = np.concatenate(([1.0], p[:-1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(previous > 0, p / np.where(previous > 0, previous, 1.0), 0.0)
    return np.clip(alpha, 0.0, 1.0)


def check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k (draft tokens per step) must be an integer ≥ 1, got {k!r}")


def expected_length(alpha: float, k: int) -> float:
    """E[L] = (1 − α^(k+1)) / (1 − α) = Σ_{i=0..k} α^i for i.i.d. acceptance α (Leviathan Eq. 1).

    Summed directly rather than through the closed form, which loses precision as α → 1.
    """
    if k == 0:
        return 1.0
    check_k(k)
    if not math.isfinite(alpha) or alpha < 0 or alpha > 1:
        raise ValueError(f"α must be in 0..1, got {alpha!r}")
    return float(np.sum(alpha ** np.arange(k + 1)))


def iid_alpha(length: float, k: int) -> float:
    """The i.i.d. acceptance α that solves Σ_{i=1..k} α^i = L − 1.

    The left side rises monotonically from 0 (α = 0) to k (α = 1), so bisection always converges.
    L is clipped into [1, k+1] first: a measured L a hair outside (counter skew) maps to the edge,
    L = 1 gives 0 and L = k+1 gives 1.
    """
    check_k(k)
    if not math.isfinite(length):
        raise ValueError(f"acceptance length must be finite, got {length!r}")
    target = min(max(length - 1.0, 0.0), float(k))
    if target <= 0.0:
        return 0.0
    if target >= k:
        return 1.0
    powers = np.arange(1, k + 1)
    low, high = 0.0, 1.0
    for _ in range(200):  # 2^-200: far below float resolution, stops early below
        middle = 0.5 * (low + high)
        if float(np.sum(middle**powers)) < target:
            low = middle
        else:
            high = middle
        if high - low < 1e-15:
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class LengthAtK:
    """L for a chain of k draft tokens, and how it was obtained."""

    k: int
    length: float
    extrapolated: bool  # True when k exceeds the measured chain, so the value is a model, not data
    basis: str  # "per-position" (exact), "per-position, extrapolated" or "i.i.d. α"


def length_at_k(rates: Sequence[float], k_new: int) -> LengthAtK:
    """L(k′) from per-position rates measured with a chain of k = len(rates).

    For k′ ≤ k it is exact: 1 + Σ_{i<k′} p_i (a shorter chain stops drafting where the longer one
    would have gone on, and the first k′ positions were accepted with exactly these rates). For
    k′ > k it is extrapolated: later positions keep the last conditional acceptance α_{k−1}
    (model.md §1.5), which is as far as the data can speak.
    """
    return length_at_k_clipped(clipped_rates(rates), k_new)


def clipped_rates(rates: Sequence[float]) -> np.ndarray:
    """Per-position rates as `length_at_k_clipped` takes them: an array clipped into 0..1 (made once
    for several k′)."""
    p = np.asarray(rates, dtype=float)
    if p.ndim != 1 or p.size == 0:
        raise ValueError("per-position rates must be a non-empty sequence")
    if all(0.0 < rate <= 1.0 for rate in p.tolist()):
        # inside (0, 1] the clip selects each rate itself (it computes nothing): a copy is its answer
        return p.copy() if p is rates else p
    return np.clip(p, 0.0, 1.0)


def length_at_k_clipped(p: np.ndarray, k_new: int) -> LengthAtK:
    """`length_at_k` from rates already through `clipped_rates`."""
    if isinstance(k_new, bool) or not isinstance(k_new, (int, np.integer)) or k_new < 0:
        raise ValueError(f"k′ must be an integer ≥ 0, got {k_new!r}")
    k = p.size
    if k_new <= k:
        # ndarray.sum is np.sum's reduction without its wrapper
        return LengthAtK(int(k_new), 1.0 + float(p[:k_new].sum()), False, "per-position")
    last_alpha = float(conditional_acceptance(p)[-1])
    extra = p[-1] * last_alpha ** np.arange(1, k_new - k + 1)
    return LengthAtK(int(k_new), 1.0 + float(np.sum(p)) + float(np.sum(extra)), True, "per-position, extrapolated")


def length_at_k_iid(length: float, k: int, k_new: int, alpha: float | None = None) -> LengthAtK:
    """L(k′) when only the mean length L at k is known: through the i.i.d. α (`alpha`, when the
    caller has already solved iid_alpha(length, k) for another k′: a bisection).

    Under-predicts bursty acceptance (E[L] is convex in α), so prefer per-position data.
    """
    if isinstance(k_new, bool) or not isinstance(k_new, (int, np.integer)) or k_new < 0:
        raise ValueError(f"k′ must be an integer ≥ 0, got {k_new!r}")
    if k_new == k:
        return LengthAtK(int(k_new), min(max(length, 1.0), k + 1.0), False, "measured")
    if alpha is None:
        alpha = iid_alpha(length, k)
    return LengthAtK(int(k_new), expected_length(alpha, int(k_new)), k_new > k, "i.i.d. α")


class LengthsAtK:
    """L at each k′ the best k is searched over, and whether it is extrapolated (None when neither
    the per-position `rates` nor L (`length`, measured at `k`) are known), with what every k′ shares
    worked out once: the clipped per-position rates, or the i.i.d. α (a bisection)."""

    def __init__(self, rates: Sequence[float] | None, length: float | None, k: int) -> None:
        self._given_rates = rates
        self._length = length
        self._k = k
        self._rates: np.ndarray | None = None
        self._alpha: float | None = None

    def at(self, k_new: int) -> tuple[float, bool] | None:
        if self._given_rates:
            rates = self._rates
            if rates is None:
                rates = self._rates = clipped_rates(self._given_rates)
            if 0 < k_new <= rates.size:  # length_at_k_clipped's measured branch, without its LengthAtK
                return 1.0 + float(rates[:k_new].sum()), False
            estimate = length_at_k_clipped(rates, k_new)
        elif self._length is not None:
            if self._alpha is None and k_new != self._k:
                self._alpha = iid_alpha(self._length, self._k)
            estimate = length_at_k_iid(self._length, self._k, k_new, alpha=self._alpha)
        else:
            return None
        return estimate.length, estimate.extrapolated
