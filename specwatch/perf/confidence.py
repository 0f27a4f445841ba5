"""How sure a decision is: the level error of ln S (σ) from the step-time model behind it, and the
chance that the speedup lies on the side of 1 the decision says. Pure functions over numbers."""

from __future__ import annotations

import math
from typing import Sequence

from specwatch.perf.steptime import StepTimeFit, StepTimeModel

__all__ = [
    "PRIOR_LEVEL_ERROR",
    "FIT_ERROR_FLOOR",
    "NOTHING_ACCEPTED_WORDS",
    "direction_confidence",
    "level_error",
]

# The datasheet prior's level error: the root-mean-square of ln(predicted / published) over the
# scored (non-calibration) rows of benchmarks/published.md (0.212 there). A prior-only answer carries it.
PRIOR_LEVEL_ERROR = 0.21
# A fitted step time is never trusted beyond this relative error, however tight its residuals.
FIT_ERROR_FLOOR = 0.05
# With an acceptance length of 1 no draft token is accepted: a speculative step emits what a plain
# one does and never costs less, so the answer is certain whatever the step costs.
NOTHING_ACCEPTED_WORDS = ("an acceptance length of 1 accepts no draft token: a speculative step emits what a "
                          "plain one does and costs at least as much, so speculation cannot pay")


def level_error(step_model: StepTimeModel, tokens_per_step: Sequence[float], extra: float = 0.0) -> float:
    """σ of ln S: the prior's measured level error, or the fit's where its data cover the token
    counts S compares (plain and speculative), blended by the fit's confidence at the less covered
    of them (it halves per doubling outside the data); `extra` adds in quadrature."""
    if isinstance(step_model, StepTimeFit) and step_model.n_samples > 0:
        trust = min(1.0, max(0.0, min(step_model.confidence(n) for n in tokens_per_step)))
        fitted = max(FIT_ERROR_FLOOR, step_model.relative_rmse or 0.0)
        base = trust * fitted + (1.0 - trust) * PRIOR_LEVEL_ERROR
    else:
        base = PRIOR_LEVEL_ERROR
    return math.sqrt(base * base + extra * extra)


def direction_confidence(expected: float, sigma: float) -> float:
    """P(the true speedup lies on the same side of 1 as `expected`) when ln S is off by N(0, σ²)."""
    if not (expected > 0 and math.isfinite(expected)) or sigma <= 0:
        return 0.0
    z = abs(math.log(expected)) / sigma
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
