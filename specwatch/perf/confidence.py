"""How sure a decision is: the level error of ln S (σ) from the step-time model behind it, and the
chance that the speedup lies on the side of 1 the decision says. Pure functions over numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from specwatch.perf.steptime import StepTimeFit, StepTimeModel

__all__ = [
    "EVIDENCE_Z",
    "REQUEST_ACCEPTANCE_SPREAD",
    "Evidence",
    "acceptance_error",
    "evidence",
    "evidence_interval",
    "step_evidence_error",
    "PRIOR_LEVEL_ERROR",
    "FIT_ERROR_FLOOR",
    "NOTHING_ACCEPTED_WORDS",
    "direction_confidence",
    "level_error",
]

# The datasheet prior's level error: the root-mean-square of ln(predicted / published) over the
# scored (non-calibration) rows of benchmarks/published.md (0.212 when it was set; 0.158 over the
# larger set of rows since, MoE ones included: kept, the rows are too few to move it on). A
# prior-only answer carries it.
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


# ---- the evidence: how far the window's readings can be from the node's truth ------------------
#
# The level error above is the model's: what published measurements say a law of this kind misses by,
# which no amount of reading this node removes. The evidence error below is the window's: how far
# the speedup it measured could be from the one more of the same traffic would give. It shrinks as
# the window sees more drafts, more requests and more step times, and it alone decides whether a
# verdict commits (`evidence`): ON or OFF only when its interval lies on one side of 1.

# z of the evidence interval: two-sided 90 %, so a committed call is on its side of 1 with 95 %.
EVIDENCE_Z = 1.645
# One request's acceptance length around the traffic's mean, relative SD: prompts differ in how much
# a drafter can guess (Spec-Bench's categories span acceptance lengths of about 1.5 to 3 for one
# drafter; repetitive prompts accept far more under n-gram lookup), and a window that saw one request
# measured that request, not the traffic. Counted over the requests the window saw.
REQUEST_ACCEPTANCE_SPREAD = 0.25
# A draft's accepted count when per-position rates are not known: relative SD of one draft's count
# around L (a chain of Bernoulli acceptances at rates 0.3-0.8 gives 0.4-0.6).
DRAFT_ACCEPTANCE_SPREAD = 0.5


def _draft_count_variance(per_position: Sequence[float]) -> float | None:
    """Var of one draft's accepted count A from vLLM's per-position rates p_i = P(A >= i) (a position
    is accepted only after every one before it): E[A] = sum p_i, E[A^2] = sum (2i - 1) p_i."""
    rates = [min(1.0, max(0.0, p)) for p in per_position]
    if not rates:
        return None
    mean = sum(rates)
    second = sum((2 * i - 1) * p for i, p in enumerate(rates, start=1))
    return max(0.0, second - mean * mean)


def acceptance_error(length: float, per_position: Sequence[float], drafts: float | None,
                     requests: float | None) -> float:
    """Relative sampling error of the window's acceptance length L: each draft's count varies (its
    variance from the per-position rates, else DRAFT_ACCEPTANCE_SPREAD), over `drafts` drafts, and
    each request's acceptance varies around the traffic's (REQUEST_ACCEPTANCE_SPREAD), over the
    `requests` the window saw (at least one: a window of one request measured that request)."""
    if not length > 0 or not math.isfinite(length):
        return REQUEST_ACCEPTANCE_SPREAD
    variance = _draft_count_variance(per_position)
    per_draft = math.sqrt(variance) / length if variance is not None else DRAFT_ACCEPTANCE_SPREAD
    within = per_draft / math.sqrt(max(drafts or 1.0, 1.0))
    between = REQUEST_ACCEPTANCE_SPREAD / math.sqrt(max(requests or 1.0, 1.0))
    return math.sqrt(within * within + between * between)


def step_evidence_error(step_model: StepTimeModel) -> float:
    """Sampling error of ln(T_plain / T_spec) from the step times the fit has read: their residual
    scatter over the square root of their number. What the law gets wrong where it extrapolates (the
    plain step at a load speculation ran at is never read) is the model's error, carried by
    `level_error` into the confidence, not the evidence's: more readings at this load do not remove
    it. A prior read no step time: 0 here, and the prior's level error in the confidence."""
    if not isinstance(step_model, StepTimeFit) or step_model.n_samples <= 0:
        return 0.0
    return max(step_model.relative_rmse or 0.0, 0.01) / math.sqrt(step_model.n_samples)


@dataclass(frozen=True)
class Evidence:
    """The speedup's interval from the window's evidence, and what a hold would need to settle."""

    speedup: float
    error: float  # σ of ln S from the evidence (acceptance and step times)
    low: float
    high: float
    acceptance_share: float  # the share of error² the acceptance carries (0-1)

    @property
    def band(self) -> float:
        """The interval's half-width relative to the speedup: high / S − 1 (S / low − 1 alike)."""
        return math.expm1(EVIDENCE_Z * self.error)

    @property
    def state(self) -> str:
        return "on" if self.low > 1.0 else "off" if self.high < 1.0 else "hold"

    def error_needed(self) -> float | None:
        """The evidence error at which this speedup's interval would leave 1 (None at exactly 1)."""
        distance = abs(math.log(self.speedup)) if self.speedup > 0 else 0.0
        return distance / EVIDENCE_Z if distance > 0 else None

    def more_acceptance_needed(self) -> float | None:
        """How many times the acceptance evidence read so far (drafts and requests) would settle a
        hold at this speedup: its error shrinks as 1/sqrt(n). None where acceptance cannot settle
        it (the step times' error alone keeps 1 inside, or the speedup is 1)."""
        needed = self.error_needed()
        if needed is None:
            return None
        acceptance = self.error * math.sqrt(self.acceptance_share)
        steps = self.error * math.sqrt(max(0.0, 1.0 - self.acceptance_share))
        if steps >= needed or acceptance <= 0:
            return None
        left = math.sqrt(needed * needed - steps * steps)
        return (acceptance / left) ** 2


def evidence_interval(speedup: float, error: float) -> tuple[float, float]:
    """S·exp(±z·σ): the evidence interval around a speedup (the banner's steadied one too)."""
    width = math.exp(EVIDENCE_Z * error)
    return speedup / width, speedup * width


def evidence(speedup: float, acceptance: float, steps: float, scale: float = 1.0) -> Evidence:
    """The interval S·exp(±z·σ) with σ² = acceptance² + steps² (each a σ of ln S; `scale` carries
    them to the node, d ln S_node / d ln S_engine)."""
    acceptance, steps = acceptance * scale, steps * scale
    error = math.sqrt(acceptance * acceptance + steps * steps)
    share = acceptance * acceptance / (error * error) if error > 0 else 0.0
    return Evidence(speedup, error, *evidence_interval(speedup, error), share)
