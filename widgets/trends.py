"""Trend charts over the last N minutes: concurrency, tokens/s, TPOT, L, expected speedup, and DRAM
against tensor activity. One sparkline row per series, bucketed by data time so gaps show."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.widgets.format import MISSING, bucket_series, finite, num, pct, rate, seconds, sparkline, speedup
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import SERIES, DashboardView

LABEL_WIDTH = 8
VALUE_WIDTH = 8
SPREAD_WIDTH = 17


def value_text(key: str, value: float | None) -> str:
    if not finite(value):
        return MISSING
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


def scale(key: str, values: list[float]) -> tuple[float | None, float | None]:
    """Fixed scales where one means something: fractions on 0..1, speedup with 1× inside, counts from 0.
    Other rows scale to their own range, except that a range inside the dead band is drawn flat."""
    if key in ("dram", "tensor"):
        return 0.0, 1.0
    if key == "expected_speedup" and values:
        return min(min(values), 0.9), max(max(values), 1.1)
    if key in ("running", "tokens_per_s") and values:
        return 0.0, None
    if values:
        low, high = min(values), max(values)
        if high - low <= DEAD_BAND * max(abs(low), abs(high)):
            middle = (low + high) / 2
            return middle, middle  # no span: every reading sits at mid-height
    return None, None


class TrendsPanel(Panel):
    BORDER_TITLE = "Trends"

    def content_key(self, view: DashboardView) -> object:
        """The picture changes when a new column of time begins, not on every poll: one column
        spans history-seconds ÷ chart width (4 s for 10 minutes at 200 columns). The engine panel
        has the figures of the second."""
        history = view.history
        if history is None or history.latest_time is None:
            return None
        width = max(1, self.content_size.width - LABEL_WIDTH - VALUE_WIDTH - SPREAD_WIDTH - 3)
        column_s = history.seconds / width
        return (id(history), int(history.latest_time // column_s), width)

    def layout_key(self, view: DashboardView) -> object:
        return view.history is None or view.history.latest_time is None

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        history = view.history
        if history is None or history.latest_time is None:
            return Text("no history yet", style="dim")
        end = history.latest_time
        start = end - history.seconds
        spark_width = max(10, width - LABEL_WIDTH - VALUE_WIDTH - SPREAD_WIDTH - 3)
        lines = []
        for key, label, _ in SERIES:
            points = history.points(key)
            latest = points[-1][1] if points else None
            buckets = bucket_series(points, start, end, spark_width)
            present = [v for v in buckets if finite(v)]
            low, high = scale(key, present)
            least, most = (value_text(key, min(present)), value_text(key, max(present))) if present else ("", "")
            spread = "" if not present else f"{least} steady" if least == most else f"{least}–{most}"
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(f"{label:<{LABEL_WIDTH}}", style="dim")
            line.append(f"{value_text(key, latest):>{VALUE_WIDTH}} ", style="bold")
            line.append(sparkline(buckets, spark_width, low, high))
            line.append(f" {spread}", style="dim")
            lines.append(line)
        minutes = history.seconds / 60
        pad = " " * (LABEL_WIDTH + VALUE_WIDTH + 1)
        axis = Text(pad + f"−{minutes:g} min".ljust(spark_width - 3) + "now", style="dim", no_wrap=True)
        return Group(*lines, axis)
