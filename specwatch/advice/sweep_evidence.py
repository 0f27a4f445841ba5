"""A saved sweep as evidence about a live target: does it measure this target, and which crossover
does the verdict use, the one the sweep measured or the one the model predicts?

A sweep measures one model served with one speculation method and k, on one vLLM version. Another
model or k crosses elsewhere, so a sweep of another configuration is never used as if it applied: it
is named as not used, and why. A sweep of this configuration measured this node, and a measurement
beats a model; but a sweep ages (traffic, vLLM and drivers change under it), so past
`STALE_AFTER_S`, or on another vLLM version, the prediction is used and the sweep's figure is shown
beside it. Pure: the caller gives "now" (data time), so a replay judges as the live run did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from specwatch.telemetry.snapshot import canonical_method_name

__all__ = ["STALE_AFTER_S", "SweepIdentity", "CrossoverReconciliation", "reconcile_crossover"]

# A sweep older than this no longer speaks for the node: a week of traffic, upgrades and driver
# changes is what an operator would re-measure after.
STALE_AFTER_S = 7 * 86400.0

# the crossing states a sweep file writes (specwatch.sweep.common); repeated here so the core does
# not import the sweep package (its load generator pulls the HTTP client)
PAYS_THROUGHOUT, NEVER_PAYS = "pays_throughout", "never_pays"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _created(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


@dataclass(frozen=True)
class SweepIdentity:
    """What a sweep file says it measured (its speculative side), and the crossover it found."""

    model: str | None
    method: str | None  # canonical (canonical_method_name)
    k: int | None
    version: str | None  # the speculative server's vLLM version
    created: float | None  # unix seconds
    crossing: float | None  # the throughput crossover, running requests
    crossing_state: str | None  # crosses | pays_throughout | never_pays | ...
    low: float | None = None  # its 95 % interval, where the sweep had rounds enough
    high: float | None = None
    tiers: tuple[float, ...] = ()

    @classmethod
    def from_sweep(cls, sweep: dict[str, Any]) -> SweepIdentity:
        """From a loaded specwatch.sweep/1 or /2 document (specwatch.sweep.load_sweep)."""
        servers = sweep.get("servers") if isinstance(sweep.get("servers"), dict) else {}
        spec_server = servers.get("speculative") if isinstance(servers.get("speculative"), dict) else {}
        base_server = servers.get("baseline") if isinstance(servers.get("baseline"), dict) else {}
        model = spec_server.get("model") or base_server.get("model")
        config = spec_server.get("speculative_config") if isinstance(spec_server.get("speculative_config"), dict) else {}
        method = config.get("method") if isinstance(config.get("method"), str) else None
        k = _number(config.get("num_speculative_tokens"))
        tiers = [t for t in sweep.get("tiers") or [] if isinstance(t, dict)]
        if k is None:
            # what the speculative server's counters said, tier by tier (a bench sweep has no config)
            measured = [_number((t.get("speculative") or {}).get("k")) for t in tiers
                        if isinstance(t.get("speculative"), dict)]
            k = next((m for m in measured if m is not None), None)
        crossing = sweep.get("crossing") if isinstance(sweep.get("crossing"), dict) else {}
        states = sweep.get("crossing_state") if isinstance(sweep.get("crossing_state"), dict) else {}
        interval = (sweep.get("crossing_interval") or {}).get("throughput") if isinstance(
            sweep.get("crossing_interval"), dict) else None
        interval = interval if isinstance(interval, dict) else {}
        return cls(
            model=model if isinstance(model, str) and model else None,
            method=canonical_method_name(method) if method else None,
            k=int(k) if k is not None else None,
            version=spec_server.get("version") if isinstance(spec_server.get("version"), str) else None,
            created=_created(sweep.get("created")),
            crossing=_number(crossing.get("throughput")),
            crossing_state=states.get("throughput") if isinstance(states.get("throughput"), str) else None,
            low=_number(interval.get("low")),
            high=_number(interval.get("high")),
            tiers=tuple(c for c in (_number(t.get("concurrency")) for t in tiers) if c is not None),
        )

    def configuration_words(self) -> str:
        parts = [self.model or "an unnamed model", self.method or "an unnamed method"]
        if self.k is not None:
            parts.append(f"k={self.k}")
        return " ".join(parts)

    def measured_words(self) -> str:
        """"12 (95 % 10–14, sweep 2026-11-29 14:02 UTC)", "none (paid at every tier 1–64, sweep ...)"."""
        span = f"{min(self.tiers):g}–{max(self.tiers):g}" if self.tiers else "measured"
        when = f"sweep {_when(self.created)}"
        if self.crossing is not None:
            if self.low is not None or self.high is not None:
                low = "?" if self.low is None else f"{self.low:.0f}"
                high = "?" if self.high is None else f"{self.high:.0f}"
                when = f"95 % {low}–{high}, {when}"
            return f"{self.crossing:.0f} ({when})"
        if self.crossing_state == PAYS_THROUGHOUT:
            return f"none (paid at every tier {span}, {when})"
        if self.crossing_state == NEVER_PAYS:
            return f"none (cost at every tier {span}, {when})"
        return f"none ({when})"


@dataclass(frozen=True)
class CrossoverReconciliation:
    """The sweep against the live target, and the crossover the verdict uses, in one line."""

    status: str  # applies | stale | mismatch | unverified
    used: str  # measured | predicted
    crossover: float | None  # the one the verdict shows
    measured: float | None
    predicted: float | None
    line: str
    short: str  # the dashboard's form, for a panel's line
    mismatches: tuple[str, ...] = ()
    age_s: float | None = None
    flag: str | None = None  # sweep_mismatch | sweep_stale | sweep_unverified

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "used": self.used, "crossover": self.crossover,
                "measured": self.measured, "predicted": self.predicted, "line": self.line, "short": self.short,
                "mismatches": list(self.mismatches), "age_s": self.age_s, "flag": self.flag}


def _age_words(seconds: float) -> str:
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min old"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h old"
    return f"{seconds / 86400:.0f} days old"


def _when(created: float | None) -> str:
    if created is None:
        return "undated"
    return datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def reconcile_crossover(sweep: SweepIdentity, model_name: str | None, method: str | None, k: int | None,
                        version: str | None, now: float | None, predicted: float | None) -> CrossoverReconciliation:
    """Whether `sweep` measured the target (served `model_name`, speculating with `method` (canonical)
    and `k`, on vLLM `version`) and which crossover the verdict uses. `predicted` is the model's
    (None when it does not cross, or was not worked out); `now` the data time of the verdict."""
    live_method, live_k = method, k
    mismatches = []
    if sweep.model and model_name and sweep.model != model_name:
        mismatches.append(f"model {sweep.model} ≠ {model_name}")
    if sweep.method and live_method and sweep.method != live_method:
        mismatches.append(f"method {sweep.method} ≠ {live_method}")
    if sweep.k is not None and live_k is not None and sweep.k != live_k:
        mismatches.append(f"k={sweep.k} ≠ k={live_k}")
    predicted_words = f"predicted {predicted:.0f}" if predicted is not None else "predicted none"
    measured = f"measured {sweep.measured_words()}"
    brief = (f"crossover measured {sweep.crossing:.0f}" if sweep.crossing is not None else "crossover measured none") \
        + f" · {predicted_words}"
    if mismatches:
        return CrossoverReconciliation(
            "mismatch", "predicted", predicted, sweep.crossing, predicted,
            f"⚠ sweep not used: it measured {sweep.configuration_words()}, not this target "
            f"({'; '.join(mismatches)}) — crossover {predicted_words}",
            f"⚠ sweep not used: {'; '.join(mismatches)}", tuple(mismatches), flag="sweep_mismatch")
    unknown = [what for what, theirs, ours in (("model", sweep.model, model_name),
                                               ("k", sweep.k, live_k)) if theirs is None or ours is None]
    if unknown:
        # nothing to compare on one side: shown, not trusted over the model
        return CrossoverReconciliation(
            "unverified", "predicted", predicted, sweep.crossing, predicted,
            f"crossover: {measured}, {predicted_words} — using predicted: the sweep's "
            f"{' and '.join(unknown)} cannot be matched to this target's",
            f"{brief} → predicted (sweep's {' and '.join(unknown)} unknown)", flag="sweep_unverified")
    age = now - sweep.created if now is not None and sweep.created is not None else None
    stale = stale_short = None
    if sweep.version and version and sweep.version != version:
        stale = f"the sweep ran on vLLM {sweep.version}, this node runs {version}"
        stale_short = f"sweep on vLLM {sweep.version}"
    elif age is None:
        stale = "the sweep has no date, so its age is unknown"
        stale_short = "sweep undated"
    elif age > STALE_AFTER_S:
        stale = f"the sweep is {_age_words(age)}, older than {STALE_AFTER_S / 86400:.0f} days"
        stale_short = f"sweep {_age_words(age)}"
    if stale:
        return CrossoverReconciliation(
            "stale", "predicted", predicted, sweep.crossing, predicted,
            f"crossover: {measured}, {predicted_words} — using predicted: {stale}",
            f"{brief} → predicted ({stale_short})", age_s=age, flag="sweep_stale")
    return CrossoverReconciliation(
        "applies", "measured", sweep.crossing, sweep.crossing, predicted,
        f"crossover: {measured}, {predicted_words} — using measured: a measurement of this node "
        f"({sweep.configuration_words()}, {_age_words(max(age, 0.0))}) beats the model",
        f"{brief} → measured (sweep {_age_words(max(age, 0.0))})", age_s=age)
