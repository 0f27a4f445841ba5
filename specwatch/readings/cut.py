"""The accepted tokens vLLM counts past a request's end, which no counter gives: an estimate from the
counters that do. Pure: numbers in, a number out."""

from __future__ import annotations

import math
from typing import Sequence


def tokens_cut(drafts: float, accepted: float, per_position: Sequence[float], decoded: float,
               finished: float) -> float:
    """The accepted tokens vLLM counted past the ends of the `finished` requests (figures.StepTokens:
    it counts a draft's accepted tokens before cutting the step's output at the request's end), from
    the window's `drafts`, `accepted` tokens and per-position rates, for `decoded` tokens the decode
    steps emitted. A request's end falls inside its last step, and the tokens of that step past it
    are cut: for steps emitting X tokens each (a plain decode 1, a verify 1 + A, A its accepted
    count), an end falling at a random token is past E[X(X−1)] / 2E[X] of them on average (renewal
    theory's overshoot; E[A²] from the per-position rates, a chain: a position is accepted only
    after every one before it). Solved with E[X] counting the cut tokens too, and bounded by what
    was accepted and by k a request. On the real CPU vLLM (n-gram,
    k = 4, 8 requests a length) the engine's own step count showed 8, 14, 4 and 10 tokens cut at
    16, 32, 64 and 128 tokens a request, 36 in all; this gave 6.7, 8.4, 8.7 and 9.8, 33.6."""
    if finished <= 0 or drafts <= 0 or accepted <= 0:
        return 0.0
    rates = [min(1.0, max(0.0, p)) for p in per_position]
    # Σ A² over the drafts: from the rates P(A ≥ i), E[A²] = Σ (2i − 1)·P(A ≥ i); without them
    # every draft is taken to accept the mean (the least spread, so the least cut)
    squares = (drafts * sum((2 * i - 1) * p for i, p in enumerate(rates, start=1)) if rates
               else accepted ** 2 / drafts)
    overshoot_sum = finished * (accepted + squares) / 2.0  # finished · Σ X(X−1) / 2
    decoded = max(decoded, 0.0)
    cut = (math.sqrt(decoded * decoded + 4.0 * overshoot_sum) - decoded) / 2.0  # cut = overshoot_sum / (decoded + cut)
    k = len(rates)
    return min(cut, accepted, finished * k if k else cut)
