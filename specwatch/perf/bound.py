"""Roofline position from independent signals (MFU-counter intensity, DRAM-vs-tensor counter
signature, tokens per step vs the knee) and a combiner.

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


__all__ = [
    "BOUND_STATES",
    "RIDGE_BAND_LOW",
    "RIDGE_BAND_HIGH",
    "DRAM_PRACTICAL_PEAK",
    "DRAM_HIGH",
    "TENSOR_LOW",
    "TENSOR_HIGH",
    "BoundSignal",
    "intensity_signal",
    "counter_signal",
    "tokens_per_step_signal",
    "BoundEstimate",
    "SIGNAL_WEIGHTS",
    "combine_bound",
]


BOUND_STATES = ("memory", "compute", "balanced", "unknown")
# Below 0.75× the ridge or knee the step is memory-bound, above 1.25× compute-bound. Real GEMMs
# bend smoothly through the ridge, so a band around it is "balanced" rather than a coin flip.
RIDGE_BAND_LOW = 0.75
RIDGE_BAND_HIGH = 1.25
# DRAM_ACTIVE tops out near 0.8 in practice (DCGM profiling docs), so it is normalised by that.
DRAM_PRACTICAL_PEAK = 0.8
DRAM_HIGH = 0.6  # normalised DRAM at or above this is heavy memory traffic
TENSOR_LOW = 0.3  # tensor activity at or below this leaves most of the tensor pipes idle
TENSOR_HIGH = 0.5  # at or above this the tensor pipes are the busy resource


@dataclass(frozen=True)
class BoundSignal:
    """One roofline signal: its state, the number behind it, and that number in words."""

    name: str
    state: str
    value: float | None
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "state": self.state, "value": self.value, "detail": self.detail}


def _band_state(ratio: float) -> str:
    if ratio < RIDGE_BAND_LOW:
        return "memory"
    if ratio > RIDGE_BAND_HIGH:
        return "compute"
    return "balanced"


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float, np.floating, np.integer)) and math.isfinite(value)


def intensity_signal(delta_flops: float | None, delta_bytes: float | None, ridge: float | None) -> BoundSignal:
    """(a) The engine's own arithmetic intensity Δflops/Δbytes (vLLM MFU counters) against the ridge."""
    name = "mfu_intensity"
    if not (_finite(delta_flops) and _finite(delta_bytes) and _finite(ridge)) or delta_bytes <= 0 or ridge <= 0:
        return BoundSignal(name, "unknown", None, "no MFU counters (start vLLM with --enable-mfu-metrics)")
    if delta_flops < 0:
        return BoundSignal(name, "unknown", None, "MFU counters went backwards")
    intensity = delta_flops / delta_bytes
    state = _band_state(intensity / ridge)
    return BoundSignal(name, state, intensity, f"intensity {intensity:.0f} FLOP/B vs ridge {ridge:.0f}")


# DRAM and tensor activity both below this: an idle GPU (a decode step reads every weight, so any
# work shows far above it).
IDLE_ACTIVITY = 0.02


def counter_signal(dram_bw_fraction: float | None, tensor_fraction: float | None) -> BoundSignal:
    """(b) The DRAM-bandwidth vs tensor-activity signature (GPM / DCGM), both fractions 0..1.

    High DRAM with idle tensor pipes is memory-bound; busy tensor pipes are compute-bound; both high
    is the ridge. Both low is latency-bound (launch/scheduling gaps): compute and bandwidth are both
    spare, so for speculation it behaves as memory-bound and is reported so. The value is tensor
    activity over normalised DRAM activity.
    """
    name = "dram_vs_tensor"
    if not (_finite(dram_bw_fraction) and _finite(tensor_fraction)):
        return BoundSignal(name, "unknown", None, "no DRAM/tensor activity counters (needs GPM or DCGM profiling)")
    if not (0.0 <= dram_bw_fraction <= 1.0 and 0.0 <= tensor_fraction <= 1.0):
        return BoundSignal(name, "unknown", None, "activity fractions outside 0..1")
    dram = min(dram_bw_fraction / DRAM_PRACTICAL_PEAK, 1.0)
    tensor = float(tensor_fraction)
    value = tensor / dram if dram > 0 else (math.inf if tensor > 0 else 0.0)
    words = f"DRAM {dram_bw_fraction:.2f} ({dram:.2f} of practical peak), tensor {tensor:.2f}"
    if dram_bw_fraction < IDLE_ACTIVITY and tensor < IDLE_ACTIVITY:
        # Decoding streams the weights from DRAM every step, so even one running sequence reads far
        # above this: nothing runs, and an idle GPU is bound by nothing.
        return BoundSignal(name, "unknown", None, f"{words}: the GPU is idle, no bound to read")
    if tensor >= TENSOR_HIGH and dram >= DRAM_HIGH:
        state, why = "balanced", "both busy: near the ridge"
    elif tensor >= TENSOR_HIGH:
        state, why = "compute", "tensor pipes busy"
    elif dram >= DRAM_HIGH and tensor <= TENSOR_LOW:
        state, why = "memory", "bandwidth busy, tensor pipes idle"
    elif dram < DRAM_HIGH and tensor <= TENSOR_LOW:
        state, why = "memory", "both low: latency-bound, compute to spare"
    else:
        state, why = "balanced", "tensor pipes partly busy"
    return BoundSignal(name, state, value if math.isfinite(value) else None, f"{words}: {why}")


def tokens_per_step_signal(tokens_per_step: float | None, knee_tokens: float | None) -> BoundSignal:
    """(c) Tokens per step N against the step-time knee N* (bf16: ≈ the ridge in FLOP/B)."""
    name = "tokens_per_step"
    if not (_finite(tokens_per_step) and _finite(knee_tokens)) or knee_tokens <= 0 or tokens_per_step < 0:
        return BoundSignal(name, "unknown", None, "tokens per step or knee unknown")
    state = _band_state(tokens_per_step / knee_tokens)
    return BoundSignal(name, state, float(tokens_per_step), f"{tokens_per_step:.0f} tokens per step vs knee {knee_tokens:.0f}")


@dataclass(frozen=True)
class BoundEstimate:
    """The combined bound state and the signals behind it."""

    state: str
    score: float | None  # −1 all memory … +1 all compute; None when no signal is known
    signals: tuple[BoundSignal, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        return {"state": self.state, "signals": [signal.to_dict() for signal in self.signals]}


# Counter-based signals measure the GPU directly; tokens per step is arithmetic against a
# datasheet knee, so it counts a little less when they disagree.
SIGNAL_WEIGHTS = {"mfu_intensity": 1.0, "dram_vs_tensor": 1.0, "tokens_per_step": 0.75}
_STATE_SCORE = {"memory": -1.0, "balanced": 0.0, "compute": 1.0}


def combine_bound(signals: Sequence[BoundSignal]) -> BoundEstimate:
    """A bound state from whichever signals are known: a weighted vote (memory −1, balanced 0,
    compute +1); the mean decides, with the middle third reported as balanced."""
    known = [signal for signal in signals if signal.state in _STATE_SCORE]
    if not known:
        return BoundEstimate("unknown", None, tuple(signals))
    # Plain sums, not numpy's (four array calls for three numbers): weights and scores are quarters,
    # so every product and sum is exact and the one rounding is the division, in any order.
    weights = [SIGNAL_WEIGHTS.get(signal.name, 1.0) for signal in known]
    score = float(sum([w * _STATE_SCORE[signal.state] for w, signal in zip(weights, known)]) / sum(weights))
    if score < -1.0 / 3.0:
        state = "memory"
    elif score > 1.0 / 3.0:
        state = "compute"
    else:
        state = "balanced"
    return BoundEstimate(state, score, tuple(signals))
