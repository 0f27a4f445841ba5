"""The sweep record and its files (JSON, CSV, text plot)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from specwatch.sweep import loadgen
from specwatch.sweep.common import CSV_NAME, JSON_NAME, PLOT_NAME, SCHEMA, SIDES
from specwatch.sweep.crossing import crossing_intervals, crossings
from specwatch.sweep.intervals import ONE_ROUND, WITHIN_NOISE, mean_interval, ratio_interval, rounds_to_resolve, verdict
from specwatch.sweep.noise import condition_flags
from specwatch.sweep.predicted import PredictionInputs, predicted_curve

__all__ = [
    "SweepRecord",
    "INTERVAL_FIGURES",
    "INTERVAL_METHOD",
    "pooled_side",
    "CSV_ROUND_FIELDS",
    "CSV_SIDE_FIELDS",
    "report_csv",
    "write_report",
]


def _now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


# The figures that get an interval per side, and the speedups that get one per tier.
INTERVAL_FIGURES = ("output_tokens_per_s", "tpot_p50_s", "tpot_p95_s", "ttft_p50_s", "ttft_p95_s",
                    "acceptance_length")
_SUMMED = ("requests_ok", "requests_failed", "output_tokens")


@dataclass
class SweepRecord:
    """The sweep as it goes: rounds by concurrency, the servers, errors, and whether it stopped.

    A round holds one run of each side at one tier (`baseline`, `speculative`: that side's figures,
    or None while it has not run), the order they ran in, and the conditions each ran under.
    """

    source: str  # "live", "serve" or "bench"
    settings: dict[str, Any] = field(default_factory=dict)
    servers: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: {} for s in SIDES})
    rounds: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    planned_tiers: tuple[int, ...] = ()
    errors: list[str] = field(default_factory=list)
    stopped: str | None = None
    created: str = field(default_factory=_now_iso)
    # per tier: why it stopped adding rounds, and the time its rounds took
    tier_notes: dict[int, dict[str, Any]] = field(default_factory=dict)

    def put(self, concurrency: int, side: str, figures: dict, conditions: dict | None = None) -> dict:
        """Add one side's run to the first round at this tier that lacks that side (else a new round)."""
        rounds = self.rounds.setdefault(concurrency, [])
        entry = next((r for r in rounds if r[side] is None), None)
        if entry is None:
            entry = {"round": len(rounds) + 1, "order": [], "conditions": {s: None for s in SIDES},
                     **{s: None for s in SIDES}}
            rounds.append(entry)
        entry[side] = figures
        entry["order"].append(side)
        entry["conditions"][side] = conditions
        return entry

    @property
    def tiers(self) -> dict[int, dict[str, dict | None]]:
        """Each tier's sides, pooled over its rounds (None for a side that never ran)."""
        return {c: {s: pooled_side([r[s] for r in rounds if r[s] is not None]) for s in SIDES}
                for c, rounds in self.rounds.items()}

    def complete(self) -> bool:
        return self.stopped is None and not self.errors and all(
            c in self.rounds and self.rounds[c] and all(r[s] is not None for r in self.rounds[c] for s in SIDES)
            for c in self.planned_tiers)

    def tier_entry(self, concurrency: int) -> dict[str, Any]:
        rounds = self.rounds.get(concurrency, [])
        entry: dict[str, Any] = {"concurrency": concurrency}
        for s in SIDES:
            entry[s] = pooled_side([r[s] for r in rounds if r[s] is not None])
        paired = [r for r in rounds if r["baseline"] is not None and r["speculative"] is not None]
        speedup = {
            "throughput": ratio_interval([r["speculative"].get("output_tokens_per_s") for r in paired],
                                         [r["baseline"].get("output_tokens_per_s") for r in paired]),
            "tpot": ratio_interval([r["baseline"].get("tpot_p50_s") for r in paired],
                                   [r["speculative"].get("tpot_p50_s") for r in paired]),
        }
        entry["speedup"] = {k: v.estimate for k, v in speedup.items()}
        entry["speedup_interval"] = {k: v.to_dict() for k, v in speedup.items()}
        entry["verdict"] = {k: verdict(v) for k, v in speedup.items()}
        entry["intervals"] = {s: {f: mean_interval([r[s].get(f) for r in rounds if r[s] is not None]).to_dict()
                                  for f in INTERVAL_FIGURES} for s in SIDES}
        entry["rounds"] = [{**r, "flags": condition_flags(r["conditions"]["baseline"], r["conditions"]["speculative"])}
                           for r in rounds]
        entry["flagged_rounds"] = [r["round"] for r in entry["rounds"] if r["flags"]]
        notes = dict(self.tier_notes.get(concurrency, {}))
        needed = rounds_to_resolve(speedup["throughput"])
        if entry["verdict"]["throughput"] in (WITHIN_NOISE, ONE_ROUND):
            round_s = notes.get("round_s")
            notes["rounds_to_resolve"] = needed
            notes["budget_to_resolve_s"] = None if needed is None or round_s is None else \
                (needed - len(paired)) * round_s
        entry["stop"] = notes
        return entry

    def report(self, prediction: PredictionInputs, method: str | None = None) -> dict[str, Any]:
        tiers = [self.tier_entry(c) for c in sorted(self.rounds)]
        values, states = crossings(tiers)
        paired = [t for t in tiers if t["baseline"] and t["speculative"]]
        predicted, note = predicted_curve(paired, prediction, method=method,
                                          max_tokens=self.settings.get("max_tokens"))
        unresolved = [t["concurrency"] for t in tiers if t["verdict"]["throughput"] in (WITHIN_NOISE, ONE_ROUND)]
        return _json_safe({
            "schema": SCHEMA,
            "created": self.created,
            "source": self.source,
            "complete": self.complete(),
            "stopped": self.stopped,
            "errors": list(self.errors),
            "settings": dict(self.settings),
            "servers": {s: dict(self.servers.get(s, {})) for s in SIDES},
            "interval_method": INTERVAL_METHOD,
            "tiers": tiers,
            "crossing": values,
            "crossing_state": states,
            "crossing_interval": crossing_intervals(tiers),
            "unresolved_tiers": unresolved,
            "predicted": predicted,
            "predicted_note": note,
        })


INTERVAL_METHOD = ("95 % Student-t interval over rounds; speedup: t-interval on the mean per-round "
                   "log(speculative / baseline), exponentiated (geometric mean of paired ratios). A within-run "
                   "interval: this run's rounds share one server start and one draw of prompts, so it covers "
                   "round-to-round noise, not what changes between runs (a restart, other prompts, the node's "
                   "state); three runs of the same sweep on a CPU vLLM 30 minutes apart measured 1.02x, 1.69x "
                   "and 1.35x at concurrency 1, each outside the others' intervals")


def pooled_side(rounds: list[dict]) -> dict | None:
    """One side's figures over its rounds: counts summed, failures merged, other numbers averaged
    over the rounds that have them, anything else from the first round."""
    if not rounds:
        return None
    out: dict[str, Any] = dict(rounds[0])
    for key in {k for r in rounds for k in r}:
        values = [r.get(key) for r in rounds]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and math.isfinite(float(v))]
        if key in _SUMMED:
            out[key] = int(sum(numbers))
        elif key == "failures":
            merged: dict[str, int] = {}
            for v in values:
                for kind, count in (v or {}).items():
                    merged[kind] = merged.get(kind, 0) + count
            out[key] = merged
        elif numbers and len(numbers) == len([v for v in values if v is not None]):
            out[key] = float(np.mean(numbers)) if key != "k" else numbers[0]
    out["rounds"] = len(rounds)
    return out


def _json_safe(value: Any) -> Any:
    """Non-finite numbers become null: the report is strict JSON (a bench file may hold NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def side_from_stats(stats: loadgen.TierStats, metrics: dict[str, Any]) -> dict[str, Any]:
    return {**stats.to_dict(), **metrics}


CSV_SIDE_FIELDS = ("requests_ok", "requests_failed", "output_tokens_per_s", "tpot_p50_s", "tpot_p95_s",
                   "ttft_p50_s", "ttft_p95_s", "acceptance_length", "running_mean")


CSV_ROUND_FIELDS = ("speedup_throughput", "speedup_tpot", "flags")
CSV_TIER_FIELDS = ("tier_speedup_throughput", "tier_speedup_throughput_low", "tier_speedup_throughput_high",
                   "tier_verdict_throughput", "predicted_speedup")


def report_csv(report: dict) -> str:
    """One row per round: both sides' figures, the round's own speedups and its condition flags,
    then the tier's speedup with its interval and verdict, and the predicted speedup."""
    predicted = {p["concurrency"]: p["speedup"] for p in (report.get("predicted") or {}).get("points", [])}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = ["concurrency", "round", "order"] + [f"{s}_{f}" for s in SIDES for f in CSV_SIDE_FIELDS] + \
        list(CSV_ROUND_FIELDS) + list(CSV_TIER_FIELDS)
    writer.writerow(header)
    for t in report["tiers"]:
        interval = (t.get("speedup_interval") or {}).get("throughput") or {}
        tier_cells = [_csv_value(t["speedup"]["throughput"]), _csv_value(interval.get("low")),
                      _csv_value(interval.get("high")), _csv_value((t.get("verdict") or {}).get("throughput")),
                      _csv_value(predicted.get(float(t["concurrency"])))]
        for r in t.get("rounds") or []:
            row: list[Any] = [t["concurrency"], r["round"], "-".join(r.get("order") or [])]
            for s in SIDES:
                side = r.get(s) or {}
                row += [_csv_value(side.get(f)) for f in CSV_SIDE_FIELDS]
            base, spec = r.get("baseline") or {}, r.get("speculative") or {}
            row += [_csv_value(_ratio(spec.get("output_tokens_per_s"), base.get("output_tokens_per_s"))),
                    _csv_value(_ratio(base.get("tpot_p50_s"), spec.get("tpot_p50_s"))),
                    "; ".join(r.get("flags") or [])]
            writer.writerow(row + tier_cells)
    return out.getvalue()


def _ratio(num: Any, den: Any) -> float | None:
    if not isinstance(num, (int, float)) or not isinstance(den, (int, float)) or not den > 0:
        return None
    return num / den


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_report(report: dict, out_dir: Path, plot: str | None = None) -> list[Path]:
    """sweep.json, sweep.csv (and the plot as sweep.txt), written whole then renamed into place, so a
    sweep killed mid-write leaves the previous tier's files intact."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [(out_dir / JSON_NAME, json.dumps(report, indent=2, allow_nan=False) + "\n"),
             (out_dir / CSV_NAME, report_csv(report))]
    if plot is not None:
        files.append((out_dir / PLOT_NAME, plot + "\n"))
    for path, text in files:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return [p for p, _ in files]
