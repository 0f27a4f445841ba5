"""The terminal plot and the summary lines."""

from __future__ import annotations

import math
import textwrap
from typing import Sequence

from specwatch.sweep.common import NEVER_PAYS, PAYS_THROUGHOUT, PREDICTED_MAX_BATCH, SPEEDUP_PLOT_CLIP
from specwatch.sweep.files import crossing_interval_words
from specwatch.sweep.intervals import COSTS, ONE_ROUND, PAYS, WITHIN_NOISE

__all__ = [
    "render_plot",
    "summary_lines",
    "interval_lines",
]


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
           overlap: str | None = None, y_clip: float | None = None,
           bars: Sequence[tuple[float, float, float]] = ()) -> list[str]:
    """One chart: x is log2(concurrency), y linear; later series draw over earlier ones, or, with
    `overlap`, a cell two series share shows that glyph. Values above `y_clip` sit on the top row.
    `bars` are (x, low, high) error bars, drawn as "|" behind the points."""
    margin = 7
    cols = max(width - margin - 1, 10)
    if y_clip is not None:
        series = [(glyph, [(x, min(y, y_clip)) for x, y in pts]) for glyph, pts in series]
    if y_clip is not None:
        bars = [(x, min(lo, y_clip), min(hi, y_clip)) for x, lo, hi in bars]
    ys = [y for _, pts in series for _, y in pts] + [y for _, lo, hi in bars for y in (lo, hi)]
    if hline is not None:
        ys.append(hline)
    if not ys:
        return [title, "  (no data)"]
    y_low, y_high = min(ys), max(ys)
    pad = (y_high - y_low) * 0.05 or max(abs(y_high) * 0.05, 0.05)
    # speeds and speedups are never negative: the padding must not draw an axis below 0
    y_low, y_high = (y_low - pad if y_low - pad >= 0 or y_low < 0 else 0.0), y_high + pad
    lx_low, lx_high = math.log2(x_low), math.log2(x_high)
    grid = [[" "] * cols for _ in range(height)]
    if hline is not None:
        row = height - 1 - _scale(hline, y_low, y_high, height)
        for col in range(cols):
            grid[row][col] = "-"
    for x, lo, hi in bars:
        col = _scale(math.log2(x), lx_low, lx_high, cols)
        top, bottom = height - 1 - _scale(hi, y_low, y_high, height), height - 1 - _scale(lo, y_low, y_high, height)
        for row in range(top, bottom + 1):
            grid[row][col] = "|"
    for glyph, pts in series:
        for x, y in pts:
            col = _scale(math.log2(x), lx_low, lx_high, cols)
            row = height - 1 - _scale(y, y_low, y_high, height)
            # "." (the predicted curve) and "-" (break-even) are background: a measured point wins
            if overlap is not None and grid[row][col] not in (" ", "-", ".", "|", glyph):
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
    bars = [(t["concurrency"], i["low"], i["high"]) for t in tiers
            for i in [((t.get("speedup_interval") or {}).get("throughput") or {})]
            if i.get("low") is not None and i.get("high") is not None]
    legend = "M = measured tokens/s   t = measured TPOT   * = both"
    if basis:
        legend += f"   . = predicted ({basis})"
    if bars:
        legend += "\n| = the 95 % interval of M over the rounds (within this run: not what varies between runs)"
    clipped = any(y > SPEEDUP_PLOT_CLIP for _, pts in series for _, y in pts) or \
        any(hi > SPEEDUP_PLOT_CLIP for _, _, hi in bars)
    title = "speedup, speculative / baseline (1.0 = break-even)"
    if clipped:
        title += f", above {SPEEDUP_PLOT_CLIP:g} drawn at {SPEEDUP_PLOT_CLIP:g}"
    lines += [""] + _panel(f"{title}\n{legend}", series, x_low, x_high, width, height, hline=1.0, marks=marks,
                           overlap="*", y_clip=SPEEDUP_PLOT_CLIP, bars=bars)
    lines.append(" " * 8 + "concurrency (log scale)")
    lines += ["", *(wrapped for line in summary_lines(report)
                    for wrapped in textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False))]
    return "\n".join(_fit_width(line, width) for block in lines for line in block.split("\n"))


def _fit_width(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


_VERDICT_WORDS = {PAYS: "pays", COSTS: "costs", WITHIN_NOISE: "within noise", ONE_ROUND: "one round, no interval"}


def interval_lines(report: dict) -> list[str]:
    """Each tier's tokens/s speedup with its interval and the verdict the interval supports, the
    rounds flagged for unequal conditions, and what would resolve the tiers left within noise."""
    lines = []
    for t in report["tiers"]:
        interval = (t.get("speedup_interval") or {}).get("throughput")
        if not interval or interval.get("estimate") is None:
            continue
        where = "" if interval.get("low") is None else f", 95 % {interval['low']:.2f}–{interval['high']:.2f}"
        words = _VERDICT_WORDS.get((t.get("verdict") or {}).get("throughput"), "—")
        line = f"c={t['concurrency']}: tokens/s speedup {interval['estimate']:.2f}{where}, " \
               f"{interval['n']} round{'s' if interval['n'] != 1 else ''}: {words}"
        flagged = t.get("flagged_rounds") or []
        if flagged:
            line += f"; round{'s' if len(flagged) > 1 else ''} {', '.join(map(str, flagged))} ran under unequal conditions"
        lines.append(line)
        stop = t.get("stop") or {}
        if (t.get("verdict") or {}).get("throughput") == WITHIN_NOISE:
            if stop.get("rounds_to_resolve") is not None:
                more = "" if stop.get("budget_to_resolve_s") is None else \
                    f" (≈ {stop['budget_to_resolve_s']:.0f} s more)"
                lines.append(f"  unresolved: ≈ {stop['rounds_to_resolve']} rounds in all{more} would clear 1 "
                             f"if the spread holds")
            else:
                lines.append("  unresolved: the speedup is too close to 1 for more rounds to tell")
        for r in t.get("rounds") or []:
            for flag in r.get("flags") or []:
                lines.append(f"  round {r['round']}: {flag}")
    words = crossing_interval_words(report)
    if words:
        lines.append(f"tokens/s crossing interval: {words}")
    return lines


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


# A tier whose baseline engine ran fewer than this share of the client's concurrency is said to have
# been held back (the sweep's concurrency axis then overstates the batch the engine stepped).
ENGINE_BATCH_SHORT = 0.75


def summary_lines(report: dict) -> list[str]:
    """The table of tiers and the crossings, in plain words."""
    lines = [f"{'conc':>5} {'base tok/s':>10} {'spec tok/s':>10} {'speedup':>7} "
             f"{'TPOT b/s ms':>13} {'accept L':>8} {'failed':>7} {'ran b/s':>9}"]
    held_back = []
    for t in report["tiers"]:
        base, spec = t.get("baseline") or {}, t.get("speculative") or {}

        def num(value: float | None, fmt: str) -> str:
            return "—" if value is None else format(value, fmt)

        tpot_b = None if base.get("tpot_p50_s") is None else base["tpot_p50_s"] * 1000
        tpot_s = None if spec.get("tpot_p50_s") is None else spec["tpot_p50_s"] * 1000
        tpot_format = ".2f" if max(tpot_b or 0, tpot_s or 0) < 10 else ".1f"
        failed = (base.get("requests_failed") or 0) + (spec.get("requests_failed") or 0)
        # the requests each engine ran at once over the tier: the client keeps `conc` in flight, but
        # the engine batches only those inside it
        ran_b, ran_s = base.get("running_mean"), spec.get("running_mean")
        lines.append(f"{t['concurrency']:>5} {num(base.get('output_tokens_per_s'), '.1f'):>10} "
                     f"{num(spec.get('output_tokens_per_s'), '.1f'):>10} {num(t['speedup']['throughput'], '.2f'):>7} "
                     f"{num(tpot_b, tpot_format) + '/' + num(tpot_s, tpot_format):>13} {num(spec.get('acceptance_length'), '.2f'):>8} "
                     f"{failed:>7} {num(ran_b, '.1f') + '/' + num(ran_s, '.1f'):>9}")
        if ran_b is not None and t["concurrency"] >= 2 and ran_b < ENGINE_BATCH_SHORT * t["concurrency"]:
            held_back.append(f"{t['concurrency']} ({ran_b:.1f})")
    if held_back:
        lines.append(f"the baseline engine ran well under the client's concurrency at {', '.join(held_back)}: the "
                     "client, the API server or a cap on running requests held the rest, so a tier's speedup is "
                     "that of the smaller batch")
    lines += interval_lines(report)
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
