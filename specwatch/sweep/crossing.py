"""Crossing: where a measured speedup falls through 1, interpolated between tiers."""

from __future__ import annotations

import math
from typing import Sequence

from specwatch.sweep.common import CROSSES, NEVER_PAYS, NO_DATA, PAYS_THROUGHOUT

__all__ = [
    "crossing_point",
    "tier_speedups",
    "crossings",
    "crossing_intervals",
]


def crossing_point(points: Sequence[tuple[float, float | None]]) -> tuple[float | None, str]:
    """The concurrency at which a speedup curve first falls through 1, and the state.

    `points` are (concurrency, speedup) pairs, speedup > 1 meaning speculation pays. Tiers are
    spaced geometrically, so the interpolation is linear in the speedup against log2(concurrency)
    between the last tier where it pays (≥ 1) and the first where it costs (< 1). Points with no
    speedup (a side had no data) are skipped.
    """
    usable = sorted((float(c), float(s)) for c, s in points if s is not None and math.isfinite(s) and c > 0)
    if not usable:
        return None, NO_DATA
    if usable[0][1] < 1.0:
        return None, NEVER_PAYS
    for (c0, s0), (c1, s1) in zip(usable, usable[1:]):
        if s0 >= 1.0 > s1:
            t = (s0 - 1.0) / (s0 - s1)
            x = math.log2(c0) + t * (math.log2(c1) - math.log2(c0))
            return 2.0**x, CROSSES
    return None, PAYS_THROUGHOUT


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or not den > 0 or not math.isfinite(num):
        return None
    return num / den


def tier_speedups(tier: dict) -> dict[str, float | None]:
    """Speculative over baseline at one tier: output tokens/s ratio, and the TPOT p50 ratio
    inverted (baseline ÷ speculative), so that both read > 1 when speculation pays."""
    base, spec = tier.get("baseline") or {}, tier.get("speculative") or {}
    return {
        "throughput": _ratio(spec.get("output_tokens_per_s"), base.get("output_tokens_per_s")),
        "tpot": _ratio(base.get("tpot_p50_s"), spec.get("tpot_p50_s")),
    }


def crossings(tiers: Sequence[dict]) -> tuple[dict[str, float | None], dict[str, str]]:
    """The crossing concurrency of each speedup, and its state, from a report's tiers."""
    values: dict[str, float | None] = {}
    states: dict[str, str] = {}
    for key in ("throughput", "tpot"):
        x, state = crossing_point([(t["concurrency"], (t.get("speedup") or tier_speedups(t))[key]) for t in tiers])
        values[key], states[key] = x, state
    return values, states


def crossing_intervals(tiers: Sequence[dict]) -> dict[str, dict]:
    """Where the crossing can lie, given each tier's speedup interval: the lower ends of the
    intervals fall through 1 first (the earliest crossing the rounds allow), the upper ends last.
    Each end comes with its state (a lower end that `never_pays` lies below the lowest tier, an
    upper end that `pays_throughout` beyond the highest). Tiers without an interval (one round)
    are left out, so a sweep of single rounds has no crossing interval (`no_data`)."""
    out: dict[str, dict] = {}
    for key in ("throughput", "tpot"):
        ends: dict[str, tuple[float | None, str]] = {}
        for end in ("low", "high"):
            points = []
            for t in tiers:
                bound = ((t.get("speedup_interval") or {}).get(key) or {}).get(end)
                if bound is not None:
                    points.append((t["concurrency"], bound))
            ends[end] = crossing_point(points)
        out[key] = {"low": ends["low"][0], "low_state": ends["low"][1],
                    "high": ends["high"][0], "high_state": ends["high"][1]}
    return out
