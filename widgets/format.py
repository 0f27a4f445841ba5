"""Text helpers the panels share: numbers with units, bars, sparklines and a braille canvas.

Pure functions of their arguments: no clock, no I/O. A missing value is always shown as "--",
never as 0, so an operator can tell "not measured" from "zero".
"""

from __future__ import annotations

import math
import time
from typing import Sequence

MISSING = "--"
SPARK_LEVELS = "▁▂▃▄▅▆▇█"
BAR_FULL = "█"
BAR_PARTS = " ▏▎▍▌▋▊▉"
BAR_EMPTY = "░"


def finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def num(value: float | None, digits: int = 0, unit: str = "") -> str:
    """A number with thousands separators, or "--"."""
    if not finite(value):
        return MISSING
    text = f"{value:,.{digits}f}"
    return f"{text}{unit}"


def pct(fraction: float | None, digits: int = 0) -> str:
    """A 0..1 fraction as a percentage."""
    if not finite(fraction):
        return MISSING
    return f"{100.0 * fraction:.{digits}f}%"


def seconds(value: float | None) -> str:
    """A latency: ms below 10 s, seconds above."""
    if not finite(value):
        return MISSING
    if value < 1.0:
        return f"{value * 1000:.0f} ms" if value >= 0.01 else f"{value * 1000:.1f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def rate(value: float | None, unit: str = "/s") -> str:
    """A per-second rate, compacted with k/M."""
    if not finite(value):
        return MISSING
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M{unit}"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.1f}k{unit}"
    return f"{value:,.0f}{unit}" if abs(value) >= 100 else f"{value:.1f}{unit}"


def gigabytes(value: float | None) -> str:
    return MISSING if not finite(value) else f"{value / 1e9:.0f}"


def speedup(value: float | None) -> str:
    return MISSING if not finite(value) else f"{value:.2f}×"


def clock(unix_seconds: float | None) -> str:
    """Data time (from the Snapshot, never the wall clock) as local HH:MM:SS."""
    if not finite(unix_seconds):
        return MISSING
    return time.strftime("%H:%M:%S", time.localtime(unix_seconds))


def date_clock(unix_seconds: float | None) -> str:
    if not finite(unix_seconds):
        return MISSING
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_seconds))


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of `width` cells filled to `fraction` (eighth-cell resolution), or blanks."""
    if width <= 0:
        return ""
    if not finite(fraction):
        return " " * width
    cells = max(0.0, min(1.0, fraction)) * width
    full = int(cells)
    part = int((cells - full) * 8)
    text = BAR_FULL * full
    if full < width:
        text += BAR_PARTS[part] if part else ""
    return text + BAR_EMPTY * (width - len(text))


def sparkline(values: Sequence[float | None], width: int, low: float | None = None,
              high: float | None = None) -> str:
    """One row of block characters; None (no reading) shows as a space."""
    if width <= 0:
        return ""
    present = [v for v in values if finite(v)]
    if not present:
        return " " * width
    lo = min(present) if low is None else low
    hi = max(present) if high is None else high
    span = hi - lo
    out = []
    for v in values[-width:]:
        if not finite(v):
            out.append(" ")
            continue
        level = 0.5 if span <= 0 else (min(hi, max(lo, v)) - lo) / span
        out.append(SPARK_LEVELS[min(len(SPARK_LEVELS) - 1, int(level * (len(SPARK_LEVELS) - 1) + 0.5))])
    return "".join(out).rjust(width)


def sparkline_rows(values: Sequence[float | None], width: int, low: float | None = None,
                   high: float | None = None, rows: int = 1) -> list[str]:
    """`rows` rows of block characters, top first, for a taller sparkline: 8 levels per row. The
    lowest reading still shows (one eighth of the bottom row); None (no reading) is blank."""
    if rows <= 1:
        return [sparkline(values, width, low, high)]
    if width <= 0:
        return [""] * rows
    present = [v for v in values if finite(v)]
    lo = (min(present) if present else 0.0) if low is None else low
    hi = (max(present) if present else 0.0) if high is None else high
    span = hi - lo
    cells = list(values[-width:])
    cells = [None] * (width - len(cells)) + cells
    out = [[" "] * width for _ in range(rows)]
    top = 8 * rows
    for c, v in enumerate(cells):
        if not finite(v):
            continue
        level = 0.5 if span <= 0 else (min(hi, max(lo, v)) - lo) / span
        eighths = 1 + int(level * (top - 1) + 0.5)
        for b in range(rows):  # b = 0 is the bottom row
            filled = max(0, min(8, eighths - 8 * b))
            if filled:
                out[rows - 1 - b][c] = SPARK_LEVELS[filled - 1]
    return ["".join(row) for row in out]


def bucket_series(points: Sequence[tuple[float, float | None]], start: float, end: float,
                  width: int, hold_s: float = 0.0) -> list[float | None]:
    """Average (time, value) points into `width` equal time buckets over [start, end]; a bucket
    without a reading is None, so gaps in the data stay visible. With `hold_s`, an empty bucket
    between two readings at most hold_s apart carries the earlier one: buckets narrower than the
    poll interval are not gaps."""
    if width <= 0:
        return []
    sums = [0.0] * width
    counts = [0] * width
    span = max(end - start, 1e-9)
    index: list[tuple[int, float, float]] = []  # (bucket, time, value) of each reading used
    for t, v in points:
        if not finite(v) or t < start:
            continue
        i = min(width - 1, int((t - start) / span * width))
        sums[i] += v
        counts[i] += 1
        index.append((i, t, v))
    buckets = [s / c if c else None for s, c in zip(sums, counts)]
    if hold_s > 0:
        for (i, t, v), (j, t_next, _) in zip(index, index[1:]):
            if j > i + 1 and t_next - t <= hold_s:
                for k in range(i + 1, j):
                    buckets[k] = v
    return buckets


# Braille: each character cell is a 2×4 grid of dots. Bit for (dx, dy), dx in 0..1, dy in 0..3.
_BRAILLE_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))


class BrailleCanvas:
    """A width×height cell canvas with 2×4 dots per cell, plus single-character overlays."""

    def __init__(self, width: int, height: int) -> None:
        self.width = max(1, width)
        self.height = max(1, height)
        self._dots = [[0] * self.width for _ in range(self.height)]
        self._overlay: dict[tuple[int, int], str] = {}

    @property
    def dot_width(self) -> int:
        return self.width * 2

    @property
    def dot_height(self) -> int:
        return self.height * 4

    def set(self, x: int, y: int) -> None:
        """Set dot (x, y); y = 0 is the top."""
        if 0 <= x < self.dot_width and 0 <= y < self.dot_height:
            self._dots[y // 4][x // 2] |= _BRAILLE_BITS[y % 4][x % 2]

    def line(self, x0: float, y0: float, x1: float, y1: float) -> None:
        steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for i in range(steps + 1):
            t = i / steps
            self.set(round(x0 + (x1 - x0) * t), round(y0 + (y1 - y0) * t))

    def text(self, col: int, row: int, text: str) -> None:
        """Write characters over the dots, starting at cell (col, row); clipped at the edges."""
        for i, ch in enumerate(text):
            if 0 <= col + i < self.width and 0 <= row < self.height:
                self._overlay[(col + i, row)] = ch

    def rows(self) -> list[str]:
        out = []
        for r, row in enumerate(self._dots):
            chars = [self._overlay.get((c, r)) or (chr(0x2800 + bits) if bits else " ") for c, bits in enumerate(row)]
            out.append("".join(chars))
        return out


def log_position(value: float, low: float, high: float, size: int) -> float:
    """Where `value` falls on a log axis from low to high spread over `size` units (clamped)."""
    value = min(max(value, low), high)
    return (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low)) * (size - 1)


def short_host(url: str) -> str:
    """"http://gpu-7:8000" → "gpu-7:8000"."""
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0]


# How the panels name each engine TargetSample.engine_name gives (the labels of collectors.engines).
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "triton": "Triton",
                 "dynamo": "Dynamo"}


def engine_label(engine: str | None) -> str:
    """The engine by its own name: vLLM (also for a sample from before engines were told apart), SGLang,
    or as read."""
    return ENGINE_LABELS.get(engine or "vllm", engine or "vLLM")
