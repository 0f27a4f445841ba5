"""The baseline-vs-speculative concurrency sweep: where speculation stops paying, measured.

Two otherwise identical servers, one without speculation and one with it, get the same prompts in
the same order at each concurrency tier (closed loop, specwatch.loadgen). Each tier records TPOT and
TTFT percentiles, output tokens/s, requests ok and failed, and, from both servers' /metrics scraped
during the tier, the acceptance length and the running batch. The report gives both measured
curves, the concurrency at which each speedup (throughput, TPOT) falls through 1, interpolated
between tiers, and the curve specwatch.model predicts, beside them.

Targets: two running servers (URLs), or `serve`: vLLM launched here twice, without and then with
`--speculative-config` (a subprocess with no shell, arguments validated). `vllm bench serve
--save-result` files give the same report without running anything.

A server that dies, a tier where nothing succeeds, or a bad bench file ends the sweep with a clear
message; the partial results are kept (and, with an output folder, written after every tier).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx
import numpy as np

from specwatch import loadgen
from specwatch import model as perf
from specwatch.collectors.vllm import VllmSource
from specwatch.snapshot import Snapshot
from specwatch.window import RUNNING, Window

SCHEMA = "specwatch.sweep/1"
SIDES = ("baseline", "speculative")
DEFAULT_TIERS = (1, 2, 4, 8, 16, 32, 64)
MAX_TIERS = 64
JSON_NAME = "sweep.json"
CSV_NAME = "sweep.csv"
PLOT_NAME = "sweep.txt"
# Bench result files are small (a few KB; tens of MB with --save-detailed): the cap keeps a stray
# huge file from being read whole.
MAX_BENCH_FILE_BYTES = 256 * 1024 * 1024
# Points on the predicted curve between the lowest and the highest tier.
PREDICTED_GRID_POINTS = 33
PREDICTED_MAX_BATCH = 1024.0
# The speedup panel's ceiling: a TPOT near zero (chunks that arrive together) would otherwise squash
# every other point onto the break-even line.
SPEEDUP_PLOT_CLIP = 4.0

# Crossing states: why a crossing is or is not there.
CROSSES = "crosses"
PAYS_THROUGHOUT = "pays_throughout"  # speedup ≥ 1 at every measured tier
NEVER_PAYS = "never_pays"  # speedup < 1 from the lowest tier on
NO_DATA = "no_data"

# Prediction bases.
BASIS_DATASHEET = "datasheet"
BASIS_FITTED = "fitted"


class SweepError(Exception):
    """The sweep cannot go on; the message is for the operator."""


class SweepFileError(ValueError):
    """A sweep or bench file cannot be used; the message names it."""


# ==================================================================================================
# Crossing: where a measured speedup falls through 1
# ==================================================================================================


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
        x, state = crossing_point([(t["concurrency"], tier_speedups(t)[key]) for t in tiers])
        values[key], states[key] = x, state
    return values, states


# ==================================================================================================
# The predicted curve (specwatch.model), beside the measured one
# ==================================================================================================


@dataclass(frozen=True)
class PredictionInputs:
    """What the user said about the configuration; every field may be missing."""

    gpu: str | None = None
    model: str | None = None  # architecture name from specwatch.hardware's table
    tp: int = 1
    dtype: str = "bf16"
    method: str | None = None
    draft_ratio: float | None = None
    draft_params: float | None = None
    k: int | None = None


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(present)) if present else None


def _measured_k(tiers: Sequence[dict]) -> int | None:
    ks = [t["speculative"].get("k") for t in tiers if t.get("speculative") and t["speculative"].get("k")]
    return int(max(ks)) if ks else None


def _context_per_sequence(tiers: Sequence[dict], max_tokens: float | None) -> float:
    """Mean context of a running sequence: its prompt plus half its output (the average point of a
    decode), from the baseline's measured prompt tokens."""
    prompt = _mean([(t.get("baseline") or {}).get("prompt_tokens_mean") for t in tiers])
    output = max_tokens
    if output is None:
        per_request = []
        for t in tiers:
            base = t.get("baseline") or {}
            if base.get("output_tokens") and base.get("requests_ok"):
                per_request.append(base["output_tokens"] / base["requests_ok"])
        output = _mean(per_request)
    return (prompt or 0.0) + 0.5 * (output or 0.0)


def _draft_cost(inputs: PredictionInputs, method: str | None, target_params: float | None) -> tuple[float, str]:
    """r and where it comes from; an unknown method is priced as a lookup proposer, and says so."""
    if inputs.draft_ratio is not None:
        return float(inputs.draft_ratio), "given (--draft-ratio)"
    if method is None:
        return perf.LOOKUP_DRAFT_RATIO, "assumed 0: the method is unknown (give --method or --draft-ratio)"
    cost = perf.draft_cost(method, draft_params=inputs.draft_params, target_params=target_params)
    return cost.ratio, f"{cost.method}: {cost.basis}"


def _fitted_step_model(tiers: Sequence[dict], k: int, length: float, draft_ratio: float,
                       context: float) -> tuple[perf.StepTimeFit, str] | None:
    """A hinge T(N, C) fitted to the measured points.

    The baseline's step time at batch b is its TPOT (one token per sequence per step) with N = b.
    With a free proposer (r = 0) the speculative server's steps are samples too: each commits L
    tokens per sequence, so its step time is TPOT·L at N = b·(k+1). The hinge prior is built from
    the same points (flat at the smallest step time, rising at the overall slope), so the fit leans
    on nothing but the measurements; beyond the largest N measured the curve is an extrapolation.
    """
    samples: list[perf.StepSample] = []
    for t in tiers:
        base = t.get("baseline") or {}
        b = base.get("running_mean") or t["concurrency"]
        tpot = base.get("tpot_mean_s") or base.get("tpot_p50_s")
        if tpot:
            samples.append(perf.StepSample(float(b), float(tpot), float(b) * context))
        spec = t.get("speculative") or {}
        spec_tpot = spec.get("tpot_mean_s") or spec.get("tpot_p50_s")
        spec_length = spec.get("acceptance_length") or length
        if draft_ratio == 0 and spec_tpot:
            sb = spec.get("running_mean") or t["concurrency"]
            samples.append(perf.StepSample(float(sb) * (k + 1), float(spec_tpot) * spec_length, float(sb) * context))
    if len(samples) < 2:
        return None
    n = np.array([s.tokens_per_step for s in samples])
    y = np.array([s.step_time_s for s in samples])
    fit = perf.fit_step_time(samples, _hinge_from_points(n, y))
    used = "baseline and speculative steps" if draft_ratio == 0 else "baseline steps"
    note = (f"fitted to {fit.n_samples} measured step times ({used}), N = {fit.tokens_min:.0f}..{fit.tokens_max:.0f} "
            f"tokens per step; beyond that it is an extrapolation")
    return fit, note


def _hinge_from_points(n: np.ndarray, y: np.ndarray) -> perf.HingeParameters:
    """A plain two-piece hinge (flat, then rising) through the points, by least squares over knees
    on a log grid across their span: the prior that fit_step_time refines, taken from the data
    because a sweep without --gpu/--model has no datasheet to lean on."""
    best: tuple[float, float, float, float] | None = None  # (cost, knee, base, slope)
    low, high = max(float(n.min()), 1.0), max(float(n.max()), 1.0)
    for knee in np.geomspace(low, high, 48) if high > low else [low]:
        design = np.column_stack([np.ones_like(n), np.maximum(0.0, n - knee)])
        (base, slope), *_ = np.linalg.lstsq(design, y, rcond=None)
        if slope < 0 or base <= 0:  # a falling or negative fit: flat at the mean instead
            base, slope = float(np.mean(y)), 0.0
        cost = float(np.sum((design @ np.array([base, slope]) - y) ** 2))
        if best is None or cost < best[0]:
            best = (cost, float(knee), float(base), float(slope))
    assert best is not None
    _, knee, base, slope = best
    return perf.HingeParameters(base_s=base, knee=knee, slope_s_per_token=slope, kv_s_per_token=0.0, per_token_s=0.0)


def predicted_curve(
    tiers: Sequence[dict],
    inputs: PredictionInputs,
    *,
    method: str | None = None,
    max_tokens: float | None = None,
) -> tuple[dict | None, str]:
    """The model's speedup S(b) over the sweep's concurrency range, and a note on its basis.

    With a GPU and a model architecture the step time is the datasheet prior
    (`specwatch.model.prior_for_model`); otherwise it is fitted from the measured points. Both use
    the measured acceptance length (mean over the speculative tiers) and k. Returns (None, why)
    when there is not enough to draw it.
    """
    concurrencies = sorted(t["concurrency"] for t in tiers)
    if not concurrencies:
        return None, "no tiers"
    k = inputs.k or _measured_k(tiers)
    length = _mean([(t.get("speculative") or {}).get("acceptance_length") for t in tiers])
    if k is None:
        return None, "k is unknown: the speculative server's /metrics had no spec-decode counters (give --k)"
    if length is None:
        return None, "no acceptance length was measured on the speculative server"
    length = min(max(length, 1.0), k + 1.0)
    method = inputs.method or method
    context = _context_per_sequence(tiers, max_tokens)
    target_params = None
    step_model: perf.StepTimeModel
    if inputs.gpu and inputs.model:
        from specwatch.hardware import lookup, lookup_model

        gpu, arch = lookup(inputs.gpu), lookup_model(inputs.model)
        if gpu is None:
            return None, f"unknown GPU {inputs.gpu!r}"
        if arch is None:
            return None, f"unknown model architecture {inputs.model!r}"
        target_params = arch.params
        try:
            step_model = perf.prior_for_model(gpu, arch, tp=inputs.tp, dtype=inputs.dtype)
        except ValueError as exc:
            return None, str(exc)
        basis = BASIS_DATASHEET
        note = f"datasheet step time for {arch.name} on {gpu.key} (tp {inputs.tp}, {inputs.dtype})"
        fit_details: dict | None = None
    try:
        draft_ratio, draft_basis = _draft_cost(inputs, method, target_params)
    except ValueError as exc:
        return None, str(exc)
    if not (inputs.gpu and inputs.model):
        fitted = _fitted_step_model(tiers, k, length, draft_ratio, context)
        if fitted is None:
            return None, "too few measured points to fit a step time (and no --gpu/--model for the datasheet)"
        step_model, note = fitted
        basis = BASIS_FITTED
        fit_details = fitted[0].to_dict()
    low, high = concurrencies[0], concurrencies[-1]
    grid = sorted({round(float(b), 6) for b in np.geomspace(low, high, PREDICTED_GRID_POINTS)}
                  | {float(c) for c in concurrencies}) if high > low else [float(low)]
    points = [{"concurrency": float(b), "speedup": perf.speedup(step_model, float(b), k, length, draft_ratio, context)}
              for b in grid]
    # the model's crossover is searched past the tiers too: where it lies beyond them is worth knowing
    cross = perf.crossover_concurrency(step_model, k, length, draft_ratio, context,
                                       max_batch=max(float(high), PREDICTED_MAX_BATCH))
    return {
        "basis": basis,
        "note": note,
        "k": k,
        "acceptance_length": length,
        "draft_ratio": draft_ratio,
        "draft_ratio_basis": draft_basis,
        "context_per_sequence": context,
        "crossover": cross.concurrency,
        "crossover_state": cross.state,
        "fit": fit_details,
        "points": points,
    }, note


# ==================================================================================================
# The report
# ==================================================================================================


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


def _side_from_stats(stats: loadgen.TierStats, metrics: dict[str, Any]) -> dict[str, Any]:
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


# ==================================================================================================
# The terminal plot
# ==================================================================================================


def _scale(value: float, low: float, high: float, cells: int) -> int:
    if high <= low:
        return cells // 2
    return int(round((value - low) / (high - low) * (cells - 1)))


def _axis_number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    if abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:.2f}"


def _panel(title: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]], x_low: float, x_high: float,
           width: int, height: int, hline: float | None = None, marks: Sequence[tuple[str, float]] = (),
           overlap: str | None = None, y_clip: float | None = None) -> list[str]:
    """One chart: x is log2(concurrency), y linear; later series draw over earlier ones, or, with
    `overlap`, a cell two series share shows that glyph. Values above `y_clip` sit on the top row."""
    margin = 7
    cols = max(width - margin - 1, 10)
    if y_clip is not None:
        series = [(glyph, [(x, min(y, y_clip)) for x, y in pts]) for glyph, pts in series]
    ys = [y for _, pts in series for _, y in pts]
    if hline is not None:
        ys.append(hline)
    if not ys:
        return [title, "  (no data)"]
    y_low, y_high = min(ys), max(ys)
    pad = (y_high - y_low) * 0.05 or max(abs(y_high) * 0.05, 0.05)
    y_low, y_high = y_low - pad, y_high + pad
    lx_low, lx_high = math.log2(x_low), math.log2(x_high)
    grid = [[" "] * cols for _ in range(height)]
    if hline is not None:
        row = height - 1 - _scale(hline, y_low, y_high, height)
        for col in range(cols):
            grid[row][col] = "-"
    for glyph, pts in series:
        for x, y in pts:
            col = _scale(math.log2(x), lx_low, lx_high, cols)
            row = height - 1 - _scale(y, y_low, y_high, height)
            # "." (the predicted curve) and "-" (break-even) are background: a measured point wins
            if overlap is not None and grid[row][col] not in (" ", "-", ".", glyph):
                grid[row][col] = overlap
            else:
                grid[row][col] = glyph
    lines = [title]
    hline_row = None if hline is None else height - 1 - _scale(hline, y_low, y_high, height)
    for r in range(height):
        value = y_high - (y_high - y_low) * r / (height - 1)
        label = _axis_number(value) if r in (0, height // 2, height - 1) else ""
        if r == hline_row:
            label = _axis_number(hline)
        elif hline_row is not None and abs(r - hline_row) == 1:
            label = ""  # keep the break-even label readable
        lines.append(f"{label:>{margin - 1}} |" + "".join(grid[r]).rstrip())
    lines.append(" " * (margin - 1) + " +" + "-" * cols)
    ticks = [" "] * (cols + 8)
    tick_values = sorted({2 ** i for i in range(int(math.floor(lx_low)), int(math.ceil(lx_high)) + 1)
                          if x_low <= 2 ** i <= x_high} | {x_low, x_high})
    for value in tick_values:
        text = f"{value:g}"
        col = _scale(math.log2(value), lx_low, lx_high, cols)
        col = min(col, cols - len(text))  # the last label ends at the axis' end, not past it
        if all(c == " " for c in ticks[max(col - 1, 0):col + len(text) + 1]):
            ticks[col:col + len(text)] = list(text)
    lines.append(" " * (margin + 1) + "".join(ticks).rstrip())
    for text, x in marks:
        col = _scale(math.log2(x), lx_low, lx_high, cols)
        if col + len(text) + 2 <= cols:
            lines.append(" " * (margin + 1 + col) + "^ " + text)
        else:  # near the right edge: write the words to the left of the caret
            lines.append(" " * max(margin + 1 + col - len(text) - 1, 0) + text + " ^")
    return lines


def render_plot(report: dict, width: int = 78, height: int = 12) -> str:
    """Both measured curves and the predicted one, as plain text no wider than `width` columns."""
    width = max(40, min(width, 200))
    tiers = report["tiers"]
    concurrencies = [t["concurrency"] for t in tiers]
    if not concurrencies:
        return "no tiers to plot"
    x_low, x_high = min(concurrencies), max(concurrencies)
    def side_points(side: str) -> list[tuple[float, float]]:
        return [(t["concurrency"], t[side]["output_tokens_per_s"]) for t in tiers
                if t.get(side) and t[side].get("output_tokens_per_s") is not None]

    lines = _panel("output tokens/s by concurrency   b = baseline   s = speculative   * = both",
                   [("b", side_points("baseline")), ("s", side_points("speculative"))],
                   x_low, x_high, width, height, overlap="*")
    predicted = report.get("predicted") or {}
    series = []
    if predicted.get("points"):
        series.append((".", [(p["concurrency"], p["speedup"]) for p in predicted["points"]
                             if x_low <= p["concurrency"] <= x_high]))
    series.append(("t", [(t["concurrency"], t["speedup"]["tpot"]) for t in tiers if t["speedup"]["tpot"] is not None]))
    series.append(("M", [(t["concurrency"], t["speedup"]["throughput"]) for t in tiers
                         if t["speedup"]["throughput"] is not None]))
    marks = []
    crossing = report.get("crossing") or {}
    if crossing.get("throughput") is not None:
        marks.append((f"measured crossing ≈ {crossing['throughput']:.1f}", crossing["throughput"]))
    if predicted.get("crossover") is not None and x_low <= predicted["crossover"] <= x_high:
        marks.append((f"predicted crossover ≈ {predicted['crossover']:.1f}", predicted["crossover"]))
    basis = predicted.get("basis")
    legend = "M = measured tokens/s   t = measured TPOT   * = both"
    if basis:
        legend += f"   . = predicted ({basis})"
    clipped = any(y > SPEEDUP_PLOT_CLIP for _, pts in series for _, y in pts)
    title = "speedup, speculative / baseline (1.0 = break-even)"
    if clipped:
        title += f", above {SPEEDUP_PLOT_CLIP:g} drawn at {SPEEDUP_PLOT_CLIP:g}"
    lines += [""] + _panel(f"{title}\n{legend}", series, x_low, x_high, width, height, hline=1.0, marks=marks,
                           overlap="*", y_clip=SPEEDUP_PLOT_CLIP)
    lines.append(" " * 8 + "concurrency (log scale)")
    lines += ["", *(wrapped for line in summary_lines(report)
                    for wrapped in textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False))]
    return "\n".join(_fit_width(line, width) for block in lines for line in block.split("\n"))


def _fit_width(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _crossing_words(report: dict, key: str, what: str) -> str:
    value = (report.get("crossing") or {}).get(key)
    state = (report.get("crossing_state") or {}).get(key)
    tiers = [t["concurrency"] for t in report["tiers"]]
    span = f"{min(tiers)}–{max(tiers)}" if tiers else "none"
    if value is not None:
        return f"{what}: speculation stops paying at concurrency ≈ {value:.1f}"
    if state == PAYS_THROUGHOUT:
        return f"{what}: speculation pays at every tier measured ({span}); no crossing"
    if state == NEVER_PAYS:
        return f"{what}: speculation costs from the lowest tier ({min(tiers)}); no crossing"
    return f"{what}: not enough data for a crossing"


def summary_lines(report: dict) -> list[str]:
    """The table of tiers and the crossings, in plain words."""
    lines = [f"{'conc':>5} {'base tok/s':>10} {'spec tok/s':>10} {'speedup':>7} "
             f"{'TPOT b/s ms':>13} {'accept L':>8} {'failed':>7}"]
    for t in report["tiers"]:
        base, spec = t.get("baseline") or {}, t.get("speculative") or {}

        def num(value: float | None, fmt: str) -> str:
            return "—" if value is None else format(value, fmt)

        tpot_b = None if base.get("tpot_p50_s") is None else base["tpot_p50_s"] * 1000
        tpot_s = None if spec.get("tpot_p50_s") is None else spec["tpot_p50_s"] * 1000
        tpot_format = ".2f" if max(tpot_b or 0, tpot_s or 0) < 10 else ".1f"
        failed = (base.get("requests_failed") or 0) + (spec.get("requests_failed") or 0)
        lines.append(f"{t['concurrency']:>5} {num(base.get('output_tokens_per_s'), '.1f'):>10} "
                     f"{num(spec.get('output_tokens_per_s'), '.1f'):>10} {num(t['speedup']['throughput'], '.2f'):>7} "
                     f"{num(tpot_b, tpot_format) + '/' + num(tpot_s, tpot_format):>13} {num(spec.get('acceptance_length'), '.2f'):>8} "
                     f"{failed:>7}")
    lines.append(_crossing_words(report, "throughput", "tokens/s"))
    lines.append(_crossing_words(report, "tpot", "TPOT"))
    predicted = report.get("predicted")
    if predicted:
        tiers_max = max(t["concurrency"] for t in report["tiers"])
        beyond = " (beyond the tiers measured)" if (predicted["crossover"] or 0) > tiers_max else ""
        where = (f"≈ {predicted['crossover']:.1f}{beyond}" if predicted["crossover"] is not None
                 else {"pays_throughout": f"none up to {PREDICTED_MAX_BATCH:.0f} (pays throughout)",
                       "never_pays": "none (never pays)"}.get(predicted["crossover_state"], "none"))
        lines.append(f"predicted ({predicted['basis']}): crossover {where}; k {predicted['k']}, "
                     f"L {predicted['acceptance_length']:.2f}, r {predicted['draft_ratio']:.3g}")
        lines.append(f"  {predicted['note']}")
    else:
        lines.append(f"predicted: none ({report.get('predicted_note')})")
    if report.get("stopped"):
        lines.append(f"stopped early: {report['stopped']}")
    for error in report.get("errors") or []:
        lines.append(f"error: {error}")
    return lines


# ==================================================================================================
# Scraping /metrics during a tier
# ==================================================================================================


class MetricsProbe:
    """Scrapes one server's /metrics through a tier: the acceptance over it and the running batch.

    One scrape at the start, one every `interval_s` while requests are in flight, one at the end.
    The acceptance comes from the counter increases between the first and the last (as `check`
    computes it); the running batch is the mean of the in-flight scrapes. A server whose /metrics
    cannot be read gives no figures and a message, never an error.
    """

    def __init__(self, source: VllmSource, interval_s: float = 1.0) -> None:
        self.source = source
        self.interval_s = interval_s
        self.window = Window(seconds=366 * 86400.0)
        self.running: list[float] = []
        self.last_state = "ok"
        self.last_message = ""

    async def scrape(self, in_flight: bool) -> None:
        samples = await self.source.scrape()
        snapshot = Snapshot(time=time.time(), targets=samples)
        target = samples[0]
        self.last_state, self.last_message = target.state, target.message
        if not target.ok:
            return
        self.window.add(snapshot)
        if in_flight:
            values = [e.gauges[RUNNING] for e in target.engines if RUNNING in e.gauges]
            if values:
                self.running.append(sum(values))

    async def run_until(self, done: asyncio.Event) -> None:
        await self.scrape(in_flight=False)
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), timeout=self.interval_s)
            except asyncio.TimeoutError:
                await self.scrape(in_flight=True)
        await self.scrape(in_flight=False)

    def figures(self) -> dict[str, Any]:
        url = self.source.targets[0].url
        tw = self.window.target(url) if len(self.window) >= 2 else None
        acc = tw.total.acceptance if tw is not None and tw.total is not None else None
        return {
            "acceptance_length": acc.acceptance_length if acc else None,
            "acceptance_rate": acc.acceptance_rate if acc else None,
            "drafts": acc.drafts if acc else None,
            "k": tw.k if tw is not None else None,
            "running_mean": float(np.mean(self.running)) if self.running else None,
            "server_generation_tokens_per_s": tw.total.generation_tokens_per_s
            if tw is not None and tw.total is not None else None,
            "metrics_state": self.last_state,
            "metrics_message": self.last_message or None,
        }


# ==================================================================================================
# Running a live sweep
# ==================================================================================================


@dataclass(frozen=True)
class SweepPlan:
    """How each tier runs."""

    tiers: tuple[int, ...] = DEFAULT_TIERS
    requests: int | None = None  # per tier; None: max(16, 4 × concurrency) unless a duration is given
    duration_s: float | None = None
    warmup: int | None = None  # per tier; None: one request per worker
    scrape_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.tiers or len(self.tiers) > MAX_TIERS:
            raise ValueError(f"give 1..{MAX_TIERS} concurrency tiers")
        if len(set(self.tiers)) != len(self.tiers):
            raise ValueError("concurrency tiers must be distinct")
        if not (math.isfinite(self.scrape_interval_s) and 0.05 <= self.scrape_interval_s <= 60):
            raise ValueError("the scrape interval must be in 0.05..60 s")
        for c in self.tiers:
            self.tier(c)  # validates every tier's plan up front

    def tier(self, concurrency: int) -> loadgen.TierPlan:
        requests = self.requests
        if requests is None and self.duration_s is None:
            requests = max(16, 4 * concurrency)
        warmup = concurrency if self.warmup is None else self.warmup
        return loadgen.TierPlan(concurrency, requests, self.duration_s, warmup)


@dataclass
class Endpoint:
    """One server under test."""

    side: str
    url: str
    model: str | None = None  # the served model name; asked of /v1/models when None


ProgressFn = Callable[[str], None]
PROGRESS_EVERY_S = 10.0


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def served_model(client: httpx.AsyncClient, url: str) -> str:
    """The first model /v1/models lists; SweepError when the server cannot be asked."""
    try:
        response = await client.get(url + "/v1/models", timeout=httpx.Timeout(30.0))
    except (httpx.HTTPError, OSError) as exc:
        from specwatch.collectors.vllm import describe_http_error

        raise SweepError(describe_http_error(exc, url)[1]) from None
    if response.status_code != 200:
        raise SweepError(f"{url}/v1/models answered HTTP {response.status_code} (is this an OpenAI-compatible server?)")
    try:
        data = response.json()["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise SweepError(f"{url}/v1/models did not list a model (give --served-model)") from None


class LiveSweep:
    """Drives the tiers against the endpoints and keeps the record up to date."""

    def __init__(self, record: SweepRecord, plan: SweepPlan, prompts: Sequence[loadgen.Prompt],
                 request: loadgen.RequestSettings, *, token: str | None = None, verify: Any = True,
                 progress: ProgressFn | None = _stderr_progress,
                 on_tier: Callable[[SweepRecord], None] | None = None) -> None:
        self.record = record
        self.plan = plan
        self.prompts = list(prompts)
        self.request = request
        self.token = token
        self.verify = verify
        self.progress = progress or (lambda line: None)
        self.on_tier = on_tier or (lambda record: None)
        record.planned_tiers = tuple(plan.tiers)

    def _client(self) -> httpx.AsyncClient:
        headers = {"User-Agent": "specwatch-sweep"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        limits = httpx.Limits(max_connections=max(self.plan.tiers) + 8, max_keepalive_connections=max(self.plan.tiers) + 8)
        return httpx.AsyncClient(headers=headers, verify=self.verify, limits=limits, trust_env=False,
                                 follow_redirects=False, timeout=httpx.Timeout(self.request.timeout_s))

    async def prepare(self, endpoint: Endpoint) -> None:
        """Learn the served model name and the version; SweepError when the server does not answer."""
        async with self._client() as client:
            if endpoint.model is None:
                endpoint.model = await served_model(client, endpoint.url)
        info: dict[str, Any] = {"url": endpoint.url, "model": endpoint.model}
        source = VllmSource([endpoint.url], token=self.token, verify=self.verify)
        async with source:
            sample = (await source.scrape())[0]
            target_info = source.info(source.targets[0].url)
        info["version"] = sample.version
        info["metrics_state"] = sample.state
        if target_info is not None and target_info.speculative_config:
            info["speculative_config"] = target_info.speculative_config
        self.record.servers[endpoint.side].update(info)

    async def run_tier(self, endpoint: Endpoint, concurrency: int) -> bool:
        """One tier on one server, recorded. False when the sweep must stop (dead server, no success)."""
        assert endpoint.model is not None
        plan = self.plan.tier(concurrency)
        settings = loadgen.RequestSettings(
            model=endpoint.model, api=self.request.api, max_tokens=self.request.max_tokens,
            temperature=self.request.temperature, ignore_eos=self.request.ignore_eos,
            timeout_s=self.request.timeout_s, max_response_bytes=self.request.max_response_bytes)
        self.progress(f"[{endpoint.side}] concurrency {concurrency}: "
                      f"{plan.requests or 'open'} requests{f' / {plan.duration_s:g} s' if plan.duration_s else ''} "
                      f"after {plan.warmup} warm-up …")
        done = asyncio.Event()
        source = VllmSource([endpoint.url], token=self.token, verify=self.verify)
        probe = MetricsProbe(source, self.plan.scrape_interval_s)
        counts = {"ok": 0, "failed": 0}
        last_line = time.monotonic()

        def on_result(result: loadgen.RequestResult) -> None:
            # a line every PROGRESS_EVERY_S inside long tiers, so a slow node does not look stuck
            nonlocal last_line
            if result.warmup:
                return
            counts["ok" if result.ok else "failed"] += 1
            if time.monotonic() - last_line >= PROGRESS_EVERY_S:
                last_line = time.monotonic()
                of = f"/{plan.requests}" if plan.requests else ""
                self.progress(f"[{endpoint.side}] concurrency {concurrency}: "
                              f"{counts['ok'] + counts['failed']}{of} done, {counts['failed']} failed …")

        async with source, self._client() as client:
            probe_task = asyncio.create_task(probe.run_until(done))
            try:
                run = await loadgen.run_tier(client, endpoint.url, self.prompts, plan, settings,
                                             on_result=on_result)
            finally:
                done.set()
                await probe_task
        stats = loadgen.tier_stats(run)
        figures = _side_from_stats(stats, probe.figures())
        self.record.put(concurrency, endpoint.side, figures)
        self.progress(_progress_line(endpoint.side, concurrency, figures))
        self.on_tier(self.record)
        if run.server_dead:
            self.record.stopped = f"{endpoint.side}: {run.dead_message}"
            return False
        if stats.requests_ok == 0:
            why = stats.first_failure or "no request finished"
            self.record.stopped = (f"{endpoint.side}: every request at concurrency {concurrency} failed "
                                   f"({stats.requests_failed}); the first: {why}")
            return False
        return True


def _progress_line(side: str, concurrency: int, f: dict) -> str:
    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value * 1000:.1f} ms"

    tps = f.get("output_tokens_per_s")
    parts = [f"[{side}] concurrency {concurrency}: {f['requests_ok']} ok, {f['requests_failed']} failed",
             f"{tps:.1f} tok/s" if tps is not None else "— tok/s",
             f"TPOT p50 {ms(f.get('tpot_p50_s'))}", f"TTFT p50 {ms(f.get('ttft_p50_s'))}"]
    if f.get("acceptance_length") is not None:
        parts.append(f"L {f['acceptance_length']:.2f}")
    if f.get("running_mean") is not None:
        parts.append(f"running {f['running_mean']:.1f}")
    if f.get("failures"):
        parts.append("failures " + ", ".join(f"{k} {v}" for k, v in sorted(f["failures"].items())))
    return ", ".join(parts)


async def sweep_two_servers(sweep: LiveSweep, baseline: Endpoint, speculative: Endpoint) -> SweepRecord:
    """Two running servers: each tier on the baseline then on the speculative server, so a sweep
    that stops early still holds complete pairs for the tiers before."""
    try:
        await sweep.prepare(baseline)
        await sweep.prepare(speculative)
    except SweepError as exc:
        sweep.record.stopped = str(exc)
        return sweep.record
    for concurrency in sweep.plan.tiers:
        for endpoint in (baseline, speculative):
            if not await sweep.run_tier(endpoint, concurrency):
                return sweep.record
    return sweep.record


# ==================================================================================================
# `serve`: launching vLLM here
# ==================================================================================================

# Flags the launcher sets itself; a user's extra argument may not set them again.
_RESERVED_SERVE_FLAGS = ("--model", "--port", "--host", "--speculative-config", "--served-model-name")
START_TIMEOUT_S = 900.0


def validate_model_argument(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ValueError("--serve needs a model (a Hugging Face id or a local folder)")
    if model.startswith("-") or any(ch in model for ch in "\x00\n\r"):
        raise ValueError(f"not a model name or path: {model!r}")
    return model.strip()


def validate_speculative_config(text: str | dict) -> dict:
    """The --speculative-config JSON as an object with a method or a draft model."""
    if isinstance(text, dict):
        config = text
    else:
        try:
            config = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--speculative-config is not valid JSON: {exc}") from None
    if not isinstance(config, dict) or not config:
        raise ValueError("--speculative-config must be a JSON object, e.g. "
                         '\'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\'')
    if "method" not in config and "model" not in config:
        raise ValueError("--speculative-config needs a \"method\" (ngram, eagle, mtp, draft_model, ...) or a \"model\"")
    return config


def validate_serve_args(args: Sequence[str]) -> list[str]:
    out = []
    for arg in args:
        if not isinstance(arg, str) or any(ch in arg for ch in "\x00\n\r"):
            raise ValueError(f"not a usable vLLM argument: {arg!r}")
        flag = arg.split("=", 1)[0]
        if flag in _RESERVED_SERVE_FLAGS:
            raise ValueError(f"{flag} is set by specwatch sweep --serve; leave it out of --serve-arg")
        out.append(arg)
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process_group(proc: subprocess.Popen | None, timeout_s: float = 30.0) -> None:
    """SIGTERM to a process group started with start_new_session, SIGKILL after `timeout_s`, then
    make sure the group is gone: vLLM's engine core can outlive its API server for a moment."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LaunchedServer:
    """One vLLM API server started here: `python -m vllm.entrypoints.openai.api_server` (the module,
    not the `vllm` script, which some distributions do not install), no shell, its own process
    group so that stopping it also ends its engine-core children."""

    def __init__(self, python: str, model: str, *, speculative_config: dict | None = None,
                 extra_args: Sequence[str] = (), log_path: Path, start_timeout_s: float = START_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> None:
        self.python = python
        self.model = validate_model_argument(model)
        self.speculative_config = None if speculative_config is None else validate_speculative_config(speculative_config)
        self.extra_args = validate_serve_args(extra_args)
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("VLLM_NO_USAGE_STATS", "1")
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
               "--host", "127.0.0.1", "--port", str(self.port)]
        if self.speculative_config is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative_config, separators=(",", ":"))]
        return cmd + self.extra_args

    def start(self, progress: ProgressFn = _stderr_progress) -> str:
        """Start and wait for /health; SweepError (with the log's tail) when it does not come up."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        progress(f"starting vLLM: {' '.join(self.command())} (log: {self.log_path})")
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True, stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise SweepError(f"cannot run {self.python}: {exc.strerror or exc}") from None
        deadline = time.monotonic() + self.start_timeout_s
        started = time.monotonic()
        last_report = started
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise SweepError(f"vLLM exited with status {code} before it was ready; the end of its log:\n"
                                 f"{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0, trust_env=False).status_code == 200:
                    progress(f"vLLM ready at {self.url} after {time.monotonic() - started:.0f} s")
                    return self.url
            except httpx.HTTPError:
                pass
            if time.monotonic() - last_report >= 30:
                progress(f"… still waiting for vLLM ({time.monotonic() - started:.0f} s)")
                last_report = time.monotonic()
            time.sleep(1.0)
        self.stop()
        raise SweepError(f"vLLM was not ready within {self.start_timeout_s:g} s; the end of its log:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        stop_process_group(self.proc, timeout_s)
        self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


async def sweep_serve(sweep: LiveSweep, servers: dict[str, LaunchedServer], served_model_name: str | None) -> SweepRecord:
    """Launch the baseline, run every tier, stop it; then the same with speculation."""
    for side in SIDES:
        server = servers[side]
        try:
            url = await asyncio.to_thread(server.start, sweep.progress)
        except SweepError as exc:
            sweep.record.stopped = f"{side}: {exc}"
            return sweep.record
        try:
            endpoint = Endpoint(side, url, served_model_name)
            await sweep.prepare(endpoint)
            sweep.record.servers[side]["command"] = server.command()
            for concurrency in sweep.plan.tiers:
                if not await sweep.run_tier(endpoint, concurrency):
                    return sweep.record
        except SweepError as exc:
            sweep.record.stopped = f"{side}: {exc}"
            return sweep.record
        finally:
            sweep.progress(f"stopping the {side} server")
            await asyncio.to_thread(server.stop)
    return sweep.record


# ==================================================================================================
# `--from-bench`: vllm bench serve --save-result files
# ==================================================================================================


def _number(data: dict, key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _ms(data: dict, key: str) -> float | None:
    value = _number(data, key)
    return None if value is None else value / 1000.0


def bench_side(data: Any, name: str) -> tuple[int, dict[str, Any]]:
    """(concurrency, side figures) from one `vllm bench serve --save-result` object (vllm.md §4).

    Latencies are in ms there and in seconds here. Percentiles other than the median exist only as
    selected with --metric-percentiles (default 99): p95 is null unless the file has it.
    """
    if not isinstance(data, dict):
        raise SweepFileError(f"{name}: not a JSON object")
    concurrency = data.get("max_concurrency")
    if concurrency is None:
        raise SweepFileError(f"{name}: no max_concurrency (run vllm bench serve with --max-concurrency N)")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise SweepFileError(f"{name}: max_concurrency must be a positive integer, got {concurrency!r}")
    missing = [k for k in ("completed", "output_throughput", "median_tpot_ms") if _number(data, k) is None]
    if missing:
        raise SweepFileError(f"{name}: not a vllm bench serve result (missing {', '.join(missing)})")
    completed = int(data["completed"])
    per_position = data.get("spec_decode_per_position_acceptance_rates")
    k = None
    if isinstance(per_position, list) and per_position:
        k = len(per_position)
    elif _number(data, "spec_decode_num_drafts") and _number(data, "spec_decode_draft_tokens"):
        ratio = data["spec_decode_draft_tokens"] / data["spec_decode_num_drafts"]
        k = max(1, round(ratio)) if math.isfinite(ratio) else None  # 5 / 1e-320 is inf
    rate = _number(data, "spec_decode_acceptance_rate")
    total_in = _number(data, "total_input_tokens")
    failed = _number(data, "failed")
    side = {
        "requests_ok": completed,
        "requests_failed": int(failed) if failed is not None else 0,
        "failures": {},
        "output_tokens": int(_number(data, "total_output_tokens") or 0),
        "duration_s": _number(data, "duration"),
        "output_tokens_per_s": _number(data, "output_throughput"),
        "requests_per_s": _number(data, "request_throughput"),
        "ttft_p50_s": _ms(data, "median_ttft_ms"),
        "ttft_p95_s": _ms(data, "p95_ttft_ms"),
        "ttft_p99_s": _ms(data, "p99_ttft_ms"),
        "tpot_p50_s": _ms(data, "median_tpot_ms"),
        "tpot_p95_s": _ms(data, "p95_tpot_ms"),
        "tpot_p99_s": _ms(data, "p99_tpot_ms"),
        "tpot_mean_s": _ms(data, "mean_tpot_ms"),
        "latency_p50_s": _ms(data, "median_e2el_ms"),
        "prompt_tokens_mean": total_in / completed if total_in is not None and completed > 0 else None,
        "first_failure": None,
        "acceptance_length": _number(data, "spec_decode_acceptance_length"),
        "acceptance_rate": None if rate is None else rate / 100.0,
        "drafts": _number(data, "spec_decode_num_drafts"),
        "k": k,
        "running_mean": None,
        "server_generation_tokens_per_s": None,
        "bench_file": name,
        "bench_date": data.get("date"),
        "model_id": data.get("model_id"),
    }
    return concurrency, side


def load_bench_dir(directory: str | Path) -> tuple[dict[int, dict], list[str]]:
    """Every bench result in a folder, by concurrency, and the problems met (bad files are skipped,
    and two files for one tier keep the later by date). Raises SweepFileError when the folder itself
    cannot be read."""
    folder = Path(directory)
    if not folder.is_dir():
        raise SweepFileError(f"{folder}: not a folder of vllm bench serve --save-result files")
    files = sorted(p for p in folder.iterdir() if p.suffix == ".json" and p.is_file())
    if not files:
        raise SweepFileError(f"{folder}: no .json files in it")
    tiers: dict[int, dict] = {}
    errors: list[str] = []
    for path in files:
        try:
            if path.stat().st_size > MAX_BENCH_FILE_BYTES:
                raise SweepFileError(f"{path}: larger than {MAX_BENCH_FILE_BYTES} bytes")
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise SweepFileError(f"{path}: not valid JSON ({exc})") from None
            concurrency, side = bench_side(data, str(path))
        except SweepFileError as exc:
            errors.append(str(exc))
            continue
        except OSError as exc:
            errors.append(f"{path}: cannot read it ({exc.strerror or exc})")
            continue
        if concurrency in tiers:
            earlier = tiers[concurrency]
            keep_new = (str(side.get("bench_date") or ""), side["bench_file"]) >= \
                       (str(earlier.get("bench_date") or ""), earlier["bench_file"])
            kept, dropped = (side, earlier) if keep_new else (earlier, side)
            errors.append(f"{folder}: two results for concurrency {concurrency} "
                          f"({Path(dropped['bench_file']).name}, {Path(kept['bench_file']).name}); "
                          f"kept the later, {Path(kept['bench_file']).name}")
            tiers[concurrency] = kept
        else:
            tiers[concurrency] = side
    return tiers, errors


def record_from_bench(baseline_dir: str | Path, speculative_dir: str | Path) -> SweepRecord:
    """A sweep record from two folders of bench results; problems go to `errors`, and a folder that
    cannot be used at all sets `stopped`."""
    record = SweepRecord(source="bench")
    record.settings = {"baseline_dir": str(baseline_dir), "speculative_dir": str(speculative_dir)}
    sides: dict[str, dict[int, dict]] = {}
    for side, folder in zip(SIDES, (baseline_dir, speculative_dir)):
        try:
            tiers, errors = load_bench_dir(folder)
        except SweepFileError as exc:
            record.stopped = str(exc)
            tiers, errors = {}, []
        sides[side] = tiers
        record.errors += errors
        models = {t.get("model_id") for t in tiers.values() if t.get("model_id")}
        record.servers[side] = {"bench_dir": str(folder), "model": sorted(models)[0] if len(models) == 1 else None}
    for side, tiers in sides.items():
        for concurrency, figures in tiers.items():
            record.put(concurrency, side, figures)
    for concurrency, entry in sorted(record.tiers.items()):
        for side in SIDES:
            if entry[side] is None:
                record.errors.append(f"concurrency {concurrency} has no {side} result")
    record.planned_tiers = tuple(sorted(record.tiers))
    return record


# ==================================================================================================
# Reading a saved sweep, and the TUI's marker
# ==================================================================================================


def load_sweep(path: str | Path) -> dict:
    """A saved sweep (its sweep.json, or the folder holding it), checked for the schema and tiers."""
    file = Path(path)
    if file.is_dir():
        file = file / JSON_NAME
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SweepFileError(f"cannot read the sweep file {file}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SweepFileError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SweepFileError(f"{file}: not a specwatch sweep (schema {SCHEMA} expected)")
    tiers = data.get("tiers")
    if not isinstance(tiers, list) or not all(
            isinstance(t, dict) and isinstance(t.get("concurrency"), (int, float)) for t in tiers):
        raise SweepFileError(f"{file}: 'tiers' must be a list of objects with a concurrency")
    crossing = data.get("crossing")
    if not isinstance(crossing, dict) or not {"throughput", "tpot"} <= set(crossing):
        raise SweepFileError(f"{file}: 'crossing' must hold throughput and tpot")
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in crossing.values()):
        raise SweepFileError(f"{file}: 'crossing' values must be numbers or null")
    if not all(isinstance(t["concurrency"], (int, float)) and not isinstance(t["concurrency"], bool)
               and math.isfinite(t["concurrency"]) for t in tiers):
        raise SweepFileError(f"{file}: every tier's concurrency must be a finite number")
    if not isinstance(data.get("crossing_state") or {}, dict):
        raise SweepFileError(f"{file}: 'crossing_state' must be an object")
    return data


def crossover_marker(sweep: dict, current_concurrency: float | None) -> str:
    """One line for the live view: the measured crossover against the current concurrency."""
    crossing = (sweep.get("crossing") or {}).get("throughput")
    state = (sweep.get("crossing_state") or {}).get("throughput")
    tiers = [t["concurrency"] for t in sweep.get("tiers") or []]
    span = f"{min(tiers):g}–{max(tiers):g}" if tiers else "no tiers"
    now = "now unknown" if current_concurrency is None else f"now {current_concurrency:.0f}"
    if crossing is not None:
        if current_concurrency is None:
            return f"sweep crossover ≈ {crossing:.1f} ({now})"
        side = "below it: speculation paid here" if current_concurrency < crossing else \
            "above it: speculation cost throughput here"
        return f"sweep crossover ≈ {crossing:.1f}, {now}, {side}"
    if state == PAYS_THROUGHOUT:
        beyond = current_concurrency is not None and tiers and current_concurrency > max(tiers)
        tail = ", beyond the measured range" if beyond else ""
        return f"sweep: speculation paid at every tier ({span}), {now}{tail}"
    if state == NEVER_PAYS:
        return f"sweep: speculation cost at every tier ({span}), {now}"
    return f"sweep: no crossover measured ({now})"
