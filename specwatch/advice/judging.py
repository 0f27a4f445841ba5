"""How a window is judged, apart from the step-time model and the words: health first (a stalled
engine gives no usable reading), the bound, the hysteresis that turns a speedup into the state
pointed to, the confidence in that state, and the state a node without speculation is told.
Pure: data time comes with the readings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from specwatch import perf
from specwatch.perf.hardware import GpuSpec
from specwatch.telemetry.snapshot import GpuSample
from specwatch.advice.verdict import HOLD, OFF, ON, UNKNOWN
from specwatch.readings.figures import Acceptance
from specwatch.readings.window import EngineFigures, TargetWindow

# Lifetime acceptance stands in for the window's: it may have drifted.
STALE_ACCEPTANCE_ERROR = 0.3
# What an assumed draft cost adds: r could be anything from a lookup's 0 to a draft model's 0.3.
METHOD_ASSUMED_ERROR = 0.2
# Uniform routing is a model of an MoE's expert reads, not a measurement: what it adds to the level
# error of every answer for an MoE model (predict's and the advisor's alike).
MOE_ROUTING_ERROR = 0.2
MAX_CONFIDENCE = 0.99
UNCONFIGURED_CONFIDENCE_CAP = 0.6
# The most an answer whose sign depends on hardware nobody identified can claim: a coin flip.
SHAPE_ASSUMED_CONFIDENCE = 0.5
# What a node without speculation is told: the k it is judged for, and the acceptance lengths that
# typical drafters reach at that k (n-gram on chat ≈ 1.3–1.6, EAGLE-3 ≈ 2.5–3.5: model.md §1, §4).
UNCONFIGURED_K = 3
EASY_LENGTH = 1.5
HARD_LENGTH = 2.5


def engine_stall(tw: TargetWindow, figures: EngineFigures) -> str | None:
    """Why the engine looks stalled over the window, or None: requests ran from its first reading to
    its last, and no engine step ran, or no token was emitted and no prompt token computed."""
    running, before = figures.running, tw.running_at_start
    if not running or running <= 0 or not before or before <= 0 or figures.seconds <= 0:
        return None
    seconds = figures.seconds
    tokens = figures.step_tokens
    if tokens is not None and tokens.steps <= 0:
        return (f"engine stalled: {running:.0f} requests running and no engine step in {seconds:.0f} s "
                "(the server answers, its engine does not advance)")
    emitted = figures.generation_tokens_per_s
    prompt = figures.prompt_tokens_per_s
    if emitted is not None and emitted <= 0 and not prompt:
        return (f"engine stalled: {running:.0f} requests running and no token out in {seconds:.0f} s "
                "(the server answers, its engine does not advance)")
    return None


def bound_estimate(figures: EngineFigures | None, gpus: Sequence[GpuSample], gpu: GpuSpec | None,
                   step_model: perf.StepTimeModel | None) -> perf.BoundEstimate:
    """Whether the node is memory- or compute-bound, from every signal the readings give."""
    signals = []
    ridge = gpu.ridge_for("bf16") if gpu else None
    if figures is not None and figures.mfu_intensity is not None:
        signals.append(perf.intensity_signal(figures.mfu_intensity, 1.0, ridge))
    live = [g for g in gpus if not g.lost]
    dram = _mean([g.values["dram_bw_util"] for g in live if "dram_bw_util" in g.values])
    tensor = _mean([g.values["tensor_active"] for g in live if "tensor_active" in g.values])
    if dram is not None or tensor is not None:
        signals.append(perf.counter_signal(dram, tensor))
    computed = figures.computed_tokens_per_step_mean if figures is not None else None
    if computed is not None and step_model is not None:
        signals.append(perf.tokens_per_step_signal(computed, step_model.knee_tokens))
    return perf.combine_bound(signals)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


class Hysteresis:
    """The state a speedup's evidence points to: ON or OFF only when its interval (perf.Evidence)
    lies on one side of 1, else hold (keep the current setting). The band is the interval, not a
    fixed percentage: it shrinks as the window sees more requests, drafts and step times, so a node
    truly at 0.96 does turn off, and a fresh start with a few dozen drafts of one request holds. One
    evaluation's word, no more: how long it must hold before the banner follows is the shown
    verdict's business (specwatch.advice.shown)."""

    def __init__(self) -> None:
        self.committed: str | None = None  # the last on/off the evidence pointed to

    def move(self, evidence: perf.Evidence, hold_note: str) -> tuple[str, str | None]:
        """The state this evidence points to, and `hold_note` when it is a hold."""
        raw = evidence.state
        if raw == HOLD:
            return HOLD, hold_note
        self.committed = raw
        return raw, None


def _count(value: float, noun: str) -> str:
    n = max(0, round(value))
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def hold_settle(evidence: perf.Evidence, drafts: float | None, requests: float, request_rate: float | None,
                window_s: float | None, span_s: float) -> tuple[str, dict[str, object]]:
    """Why a hold holds, in words an operator acts on, and the same as figures: evidence too thin
    (what would settle it: more requests and drafts at this load, or a longer window when the window
    is already full), or a speedup at 1 within what the evidence can tell (the boundary)."""
    interval = f"{evidence.speedup:.2f}× [{evidence.low:.2f}, {evidence.high:.2f}]"
    seen = _count(requests, "request") + (f" and {_count(drafts, 'draft')}" if drafts else "")
    more = evidence.more_acceptance_needed()
    full = window_s is not None and span_s >= 0.9 * window_s
    settle: dict[str, object] = {"kind": "boundary", "more_requests": None, "more_drafts": None, "seconds": None}
    if more is not None and more > 1.0:
        more_requests = requests * (more - 1.0)
        more_drafts = (drafts or 0.0) * (more - 1.0)
        if full and window_s:
            window_needed = window_s * more
            settle.update(kind="window", seconds=window_needed, more_requests=more_requests,
                          more_drafts=more_drafts or None)
            return (f"hold: not sure yet: {interval} from the {window_s:.0f} s window's {seen}; a window of about "
                    f"{window_needed:.0f} s at this load (--window) would settle it; keep the current setting",
                    settle)
        seconds = more_requests / request_rate if request_rate and request_rate > 0 else None
        settle.update(kind="thin_evidence", more_requests=more_requests, more_drafts=more_drafts or None,
                      seconds=seconds)
        when = f" (about {seconds:.0f} s at this load)" if seconds is not None else ""
        drafts_more = f" and {_count(more_drafts, 'draft')}" if more_drafts else ""
        return (f"hold: not sure yet: {interval} from {seen}; about {_count(more_requests, 'more request')}"
                f"{drafts_more}{when} would settle it; keep the current setting", settle)
    if evidence.error_needed() is not None and not full and more is None and evidence.acceptance_share < 0.5:
        settle.update(kind="step_times")
        return (f"hold: not sure yet: {interval}: the step times measured so far cannot tell; more of them at "
                "this load would settle it; keep the current setting", settle)
    return (f"hold: at the boundary: {interval} from {seen}: speculation pays about what it costs at this load; "
            "keep the current setting", settle)


def band_confidence(speedup: float, level_error: float, band: float) -> float:
    """P(the true speedup lies inside [1/(1 + band), 1 + band]) when ln S is off by N(0, σ²): what a hold is sure of."""
    if not (speedup > 0 and math.isfinite(speedup)) or not level_error > 0:
        return 0.0
    # the band in log terms, symmetric: [1/(1 + band), 1 + band] (as the banner's evidence reads it)
    high = math.log1p(band)
    low = -high
    centre = math.log(speedup)

    def below(x: float) -> float:
        return 0.5 * (1.0 + math.erf((x - centre) / (level_error * math.sqrt(2.0))))

    return max(0.0, below(high) - below(low))


def node_level_error(level_error: float, engine_speedup: float, node_speedup: float, busy_share: float | None) -> float:
    """σ of ln S at the node, from the engine's: only the busy share moves with the engine's speedup
    (d ln S_node / d ln S_engine = u·S_engine / S_node when speculation runs)."""
    if busy_share is None or not 0.0 < busy_share < 1.0 or not node_speedup > 0:
        return level_error
    return level_error * busy_share * engine_speedup / node_speedup


def extra_level_error(gpu: GpuSpec | None, stale: bool, method_assumed: bool = False, moe: bool = False) -> float:
    """What this node's set-up adds to the step model's level error (σ of ln S): an unidentified GPU,
    lifetime acceptance standing in for the window's, an assumed draft cost, an MoE model's routing
    (uniform routing is assumed). The acceptance's sampling error is the evidence's
    (perf.acceptance_error), which the advisor adds beside it."""
    parts = []
    if gpu is None:
        parts.append(perf.decision.UNKNOWN_GPU_ERROR)
    elif gpu.approximate:
        parts.append(perf.decision.APPROXIMATE_GPU_ERROR)
    if stale:
        parts.append(STALE_ACCEPTANCE_ERROR)
    if method_assumed:
        parts.append(METHOD_ASSUMED_ERROR)
    if moe:
        parts.append(MOE_ROUTING_ERROR)
    return math.sqrt(sum(p * p for p in parts))


def capped_confidence(decision: perf.Decision) -> float:
    """The decision's chance that the direction is right, capped: no reading is certain."""
    return float(min(MAX_CONFIDENCE, max(0.0, decision.confidence)))


def judge_unconfigured(needed: float, level_error: float) -> tuple[str, bool, float]:
    """What a node without speculation is told, from the acceptance length speculation would need
    at its load: the state, whether to change, and the direction's confidence (before the cap)."""
    if needed <= EASY_LENGTH:
        return ON, True, perf.direction_confidence(EASY_LENGTH / needed, level_error)
    if needed >= HARD_LENGTH:
        return OFF, False, perf.direction_confidence(HARD_LENGTH / needed, level_error)
    return UNKNOWN, False, 0.0


@dataclass(frozen=True, slots=True)
class Judged:
    """What `Advisor._judge` worked out and read for one evaluation on the decision's path: all that
    `reasons.explain` needs to give the verdict its reasons and figures, later or at once."""

    tw: TargetWindow  # its total is the figures judged
    gpus: tuple[GpuSample, ...]
    gpu: GpuSpec | None
    step_model: perf.StepTimeModel
    method: str | None
    pricing: perf.DraftPricing
    mig_unscaled: GpuSample | None  # a MIG slice whose share of its GPU NVML did not give
    ttft_note: str | None  # the TTFT check's reason (it moves the TTFT history: made once)
    prior_words: str
    acceptance: Acceptance  # the window's (or the lifetime's, when stale)
    stale_acceptance: bool
    k: int
    running: float
    inputs: perf.DecisionInputs
    decision: perf.Decision | None  # None: made without its figures, so made again whole
    state: str  # after the hysteresis (which it moved)
    hysteresis_note: str | None
    # the share of the window the engine spent decoding (EngineFigures.busy_share): the engine's
    # speedup reaches the node only through it
    busy_share: float | None = None
    # the operator's --max-num-batched-tokens in words, where the server contradicted it or it does not
    # apply (TokenBudget.note): said among the reasons every verdict on a read window opens with
    budget_note: str | None = None
    # what the engine runs on and where that was said (snapshot.resolve_device): (None, None) unsaid
    device: tuple[str | None, str | None] = (None, None)
    # the speedup's interval from the window's evidence, and for a hold what would settle it (hold_settle)
    evidence: perf.Evidence | None = None
    settle: dict[str, object] | None = None

    @property
    def figures(self) -> EngineFigures:
        return self.tw.total  # type: ignore[return-value] - judged only when the window has a total

    @property
    def length(self) -> float:
        return self.acceptance.acceptance_length  # type: ignore[return-value] - judged only when known
