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
from specwatch.sweep.crossing import crossings, tier_speedups
from specwatch.sweep.predicted import PredictionInputs, predicted_curve

__all__ = [
    "SweepRecord",
    "CSV_SIDE_FIELDS",
    "report_csv",
    "write_report",
]


def _now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass
class SweepRecord:
    """The sweep as it goes: tiers by concurrency, the servers, errors, and whether it stopped."""

    source: str  # "live", "serve" or "bench"
    settings: dict[str, Any] = field(default_factory=dict)
    servers: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: {} for s in SIDES})
    tiers: dict[int, dict[str, dict | None]] = field(default_factory=dict)
    planned_tiers: tuple[int, ...] = ()
    errors: list[str] = field(default_factory=list)
    stopped: str | None = None
    created: str = field(default_factory=_now_iso)

    def put(self, concurrency: int, side: str, figures: dict) -> None:
        self.tiers.setdefault(concurrency, {s: None for s in SIDES})[side] = figures

    def complete(self) -> bool:
        return self.stopped is None and not self.errors and all(
            c in self.tiers and all(self.tiers[c][s] is not None for s in SIDES) for c in self.planned_tiers)

    def report(self, prediction: PredictionInputs, method: str | None = None) -> dict[str, Any]:
        tiers = []
        for c in sorted(self.tiers):
            entry = {"concurrency": c, **{s: self.tiers[c][s] for s in SIDES}}
            entry["speedup"] = tier_speedups(entry)
            tiers.append(entry)
        values, states = crossings(tiers)
        paired = [t for t in tiers if t["baseline"] and t["speculative"]]
        predicted, note = predicted_curve(paired, prediction, method=method,
                                          max_tokens=self.settings.get("max_tokens"))
        return _json_safe({
            "schema": SCHEMA,
            "created": self.created,
            "source": self.source,
            "complete": self.complete(),
            "stopped": self.stopped,
            "errors": list(self.errors),
            "settings": dict(self.settings),
            "servers": {s: dict(self.servers.get(s, {})) for s in SIDES},
            "tiers": tiers,
            "crossing": values,
            "crossing_state": states,
            "predicted": predicted,
            "predicted_note": note,
        })


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


def report_csv(report: dict) -> str:
    """One row per tier: both sides' figures, the measured speedups and the predicted one."""
    predicted = {p["concurrency"]: p["speedup"] for p in (report.get("predicted") or {}).get("points", [])}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = ["concurrency"] + [f"{s}_{f}" for s in SIDES for f in CSV_SIDE_FIELDS] + \
             ["speedup_throughput", "speedup_tpot", "predicted_speedup"]
    writer.writerow(header)
    for t in report["tiers"]:
        row: list[Any] = [t["concurrency"]]
        for s in SIDES:
            side = t.get(s) or {}
            row += [_csv_value(side.get(f)) for f in CSV_SIDE_FIELDS]
        row += [_csv_value(t["speedup"]["throughput"]), _csv_value(t["speedup"]["tpot"]),
                _csv_value(predicted.get(float(t["concurrency"])))]
        writer.writerow(row)
    return out.getvalue()


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
