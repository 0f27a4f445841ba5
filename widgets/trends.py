"""Trend charts over the last N minutes: concurrency, tokens/s, TPOT, L, expected speedup, and DRAM
against tensor activity. One sparkline row per series, bucketed by data time so gaps show.

Each row says the scale it is drawn on (the values at ▁ and at █) after its sparkline, and rows that
measure the same thing share one: DRAM and tensor activity both on 0–100 %. The time axis under
them is marked in seconds or minutes before now.

Hand-written rather than Textual's Sparkline widget: that one scales every row to its own min..max
(no fixed 0–100 %, no shared scale, no dead band), buckets by index rather than by time (a gap in
the data would not show; a missing reading, None, raises a TypeError), and colours by position in
the range rather than by a threshold (the expected speedup's 1×). It costs what a row here does
(0.3 ms for 41 cells). Nor with textual-plotext: a fixed or shared scale is possible there (ylim),
but a missing reading is bridged by the line rather than left as a gap, a one-row chart has no
room for the scale it is drawn on, colours follow plotext's themes, and a row cost 7–14× one
drawn here over three runs (4.3 against 0.3 ms at 41 cells, 5.0 against 0.6 ms at 71 in one), for a
dependency of ~0.8 MB.
"""

from __future__ import annotations

import math
import statistics

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.widgets.format import (
    MISSING, bucket_series, finite, num, pct, rate, seconds, sparkline_rows, speedup,
)
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import SERIES, DashboardView

VALUE_WIDTH = 8
SCALE_WIDTH = 16
WIDE = 110  # from this content width, the labels name their units in words
# (short label, label with its unit in words) per series
LABELS = {
    "running": ("running", "running requests"),
    "tokens_per_s": ("tokens/s", "tokens/s generated"),
    "tpot_s": ("TPOT", "TPOT per token"),
    "acceptance_length": ("L", "L accepted/step"),
    "expected_speedup": ("speedup", "speedup expected"),
    "dram": ("DRAM", "DRAM bandwidth"),
    "tensor": ("tensor", "tensor activity"),
}
# Rows on the same fixed scale: their heights compare across rows.
SHARED_SCALE = {"dram": "activity", "tensor": "activity"}


def value_text(key: str, value: float | None) -> str:
    if not finite(value):
        return MISSING
    if value == 0 and key in ("running", "tokens_per_s"):
        return "0"
    if key == "tpot_s":
        return seconds(value)
    if key == "tokens_per_s":
        return rate(value, "")
    if key in ("dram", "tensor"):
        return pct(value)
    if key == "expected_speedup":
        return speedup(value)
    if key == "acceptance_length":
        return num(value, 2)
    return num(value)


# Below this spread, relative to the series' size, a free-scaled row is drawn flat: a TPOT moving
# between 9.9 and 10 ms is noise, and stretched to the row's full height it would read as swings.
DEAD_BAND = 0.05


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above value: a scale top that reads at a glance."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10.0 * power


def scale(key: str, values: list[float]) -> tuple[float | None, float | None]:
    """Fixed scales where one means something: fractions on 0..1, speedup with 1× inside, counts from
    0 to a round top. Other rows scale to their own range, except that a range inside the dead band
    is drawn flat."""
    if key in ("dram", "tensor"):
        return 0.0, 1.0
    if key == "expected_speedup" and values:
        return min(min(values), 0.9), max(max(values), 1.1)
    if key in ("running", "tokens_per_s") and values:
        return 0.0, nice_ceiling(max(values))
    if values:
        low, high = min(values), max(values)
        if high - low <= DEAD_BAND * max(abs(low), abs(high)):
            middle = (low + high) / 2
            return middle, middle  # no span: every reading sits at mid-height
        return low, high
    return None, None


def scale_text(key: str, low: float | None, high: float | None, present: list[float]) -> str:
    """The row's scale in its units, "0–100%", "85–88 ms"; a row drawn flat says so with its range."""
    if not present or low is None or high is None:
        return ""
    if low == high:  # the dead band: the readings' own range, said to be drawn flat
        least, most = value_text(key, min(present)), value_text(key, max(present))
        return f"flat {least}" if least == most else f"flat {_range(least, most)}"
    return _range(value_text(key, low), value_text(key, high))


def _range(low: str, high: str) -> str:
    """"85 ms" and "88 ms" as "85–88 ms": the unit once."""
    for unit in (" ms", " s", "%", "×"):
        if low.endswith(unit) and high.endswith(unit):
            return f"{low.removesuffix(unit)}–{high}"
    return f"{low}–{high}"


def row_style(key: str, value: float | None) -> str:
    """Colour by threshold: the expected speedup is green where speculation pays, red where it costs."""
    if key == "expected_speedup" and finite(value):
        return "green" if value >= 1.0 else "red"
    return ""


def spark_rows(key: str, buckets: list[float | None], width: int, low: float | None,
               high: float | None, rows: int) -> list[Text]:
    """The sparkline's rows, top first, coloured by threshold where the series has one."""
    texts = [Text(row) for row in sparkline_rows(buckets, width, low, high, rows)]
    if key == "expected_speedup":
        cells = buckets[-width:]
        offset = width - len(cells)
        for i, value in enumerate(cells):
            style = row_style(key, value)
            if style:
                for text in texts:
                    text.stylize(style, offset + i, offset + i + 1)
    return texts


def reading_spacing(points: tuple[tuple[float, float | None], ...]) -> float:
    """The usual time between readings (median), for telling a missed reading from a slow poll."""
    times = [t for t, _ in points]
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return statistics.median(gaps) if gaps else 0.0


def time_axis(seconds_shown: float, width: int) -> str:
    """Tick labels under the sparklines, "−45 s" or "−5 min" centred on their column, then "now" at
    the right end; labels at least 16 columns apart."""
    axis = [" "] * width
    columns_per_s = (width - 1) / seconds_shown if seconds_shown > 0 else 0.0
    steps = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
    step = next((s for s in steps if s * columns_per_s >= 16), steps[-1])
    axis[width - 3:] = "now"
    free_until = width - 4  # labels end before "now", and each before the one to its right
    t = step
    while t <= seconds_shown + 1e-9:
        label = f"−{t:g} s" if step < 60 else f"−{t / 60:g} min"
        col = round((1 - t / seconds_shown) * (width - 1))
        begin = min(max(0, col - len(label) // 2), width - len(label))
        if begin + len(label) <= free_until:
            axis[begin:begin + len(label)] = label
            free_until = begin - 2
        t += step
    return "".join(axis)


def columns(width: int) -> tuple[int, int]:
    """(label width, sparkline width) at this content width."""
    label_width = 19 if width >= WIDE else 9
    return label_width, max(10, width - label_width - VALUE_WIDTH - 2 - SCALE_WIDTH)


def rows_per_series(height: int) -> int:
    """Rows each series is drawn on in a panel of `height` rows: taller sparklines where the Trends
    tab has the room (8 levels a row), never more than 6."""
    return max(1, min(6, (height - 1) // len(SERIES)))


class TrendsPanel(Panel):
    """`fill`: the panel fills the height it is given (the Trends tab) with taller sparklines;
    otherwise one row per series (the overview)."""

    BORDER_TITLE = "Trends"

    def __init__(self, *, id: str | None = None, classes: str | None = None, fill: bool = False) -> None:
        super().__init__(id=id, classes=classes)
        self.fill = fill

    def _rows(self) -> int:
        return rows_per_series(self.content_size.height) if self.fill else 1

    def content_key(self, view: DashboardView) -> object:
        """The picture changes when a new column of time begins, not on every poll: one column
        spans history-seconds ÷ chart width (4 s for 10 minutes at 200 columns). The engine panel
        has the figures of the second."""
        history = view.history
        if history is None or history.latest_time is None:
            return None
        width = columns(max(10, self.content_size.width))[1]
        column_s = history.seconds / width
        return (id(history), int(history.latest_time // column_s), width, self._rows())

    def layout_key(self, view: DashboardView) -> object:
        return view.history is None or view.history.latest_time is None

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        history = view.history
        if history is None or history.latest_time is None:
            return Text("no history yet", style="dim")
        label_width, spark_width = columns(width)
        # columns on fixed boundaries of data time (multiples of one column's seconds): as time goes
        # on, a column's average stays put and the chart moves by whole columns rather than shimmer
        column_s = history.seconds / spark_width
        end = (math.floor(history.latest_time / column_s) + 1) * column_s
        start = end - history.seconds
        rows = self._rows()
        # a reading later than this after the one before it is a gap; closer, the columns between
        # them (narrower than one poll) carry the earlier reading instead of drawing a false gap
        hold_s = 1.5 * reading_spacing(history.points(SERIES[0][0]))
        lines = []
        for key, _, _ in SERIES:
            points = history.points(key)
            latest = points[-1][1] if points else None
            buckets = bucket_series(points, start, end, spark_width, hold_s=hold_s)
            present = [v for v in buckets if finite(v)]
            low, high = scale(key, present)
            short, long = LABELS.get(key, (key, key))
            drawn = spark_rows(key, buckets, spark_width, low, high, rows)
            # one row: the scale as a range after it; taller: its top at the top, its bottom below
            if rows == 1 or low is None or high is None or low == high:
                right = [scale_text(key, low, high, present)] + [""] * (rows - 1)
            else:
                right = [value_text(key, high)] + [""] * (rows - 2) + [value_text(key, low)]
            for r in range(rows):
                line = Text(no_wrap=True, overflow="ellipsis")
                line.append(f"{(long if width >= WIDE else short) if r == 0 else '':<{label_width}}", style="dim")
                value = value_text(key, latest) if r == 0 else ""
                line.append(f"{value:>{VALUE_WIDTH}} ", style=f"bold {row_style(key, latest)}".strip())
                line.append_text(drawn[r])
                line.append(f" {right[r]}", style="dim")
                lines.append(line)
        pad = " " * (label_width + VALUE_WIDTH + 1)
        axis = Text(pad + time_axis(history.seconds, spark_width), style="dim", no_wrap=True)
        axis.append(" scale ▁…█" if rows == 1 else " scale", style="dim")
        return Group(*lines, axis)
