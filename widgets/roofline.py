"""The roofline picture: where the engine's decode step sits against the GPU's ridge, log–log.

x is arithmetic intensity in FLOP per byte. A decode step's weight GEMMs have an intensity of about
N = tokens per step in bf16 (DESIGN §3), so the engine's mean tokens per step is the operating
point; with `--enable-mfu-metrics` the engine's own FLOPs ÷ bytes is drawn too. y is the attainable
fraction of peak FLOP/s, min(1, I / ridge).

Drawn in braille here rather than with textual-plotext (plotext inside Textual), weighed on this
panel at 80×24 and 120×36: plotext can draw log–log axes, a ridge line and the points, but (1) its
build applies the log scale to the plotted data in place, so drawing the same plot a second time
(any repaint) fails with a math domain error unless every repaint plots the view anew; (2) its frame,
tick rows and axis labels take three of the thirteen rows the 80×24 tab has, its default ticks are
not decades, its legend lands on the curve, and a y tick label collided with the x label at that
size, where this panel spends those rows on the legend and the bound line; (3) its colours come
from plotext's themes, not the app's; (4) one render cost 4–7× this panel's over three runs (6.0 against 0.9 ms
at 76×13, 12.8 against 2.0 ms at 116×26 in one), and it brings plotext (~0.8 MB) as a dependency. Both
give the same SVG snapshot every time. The picture needs one curve, one dotted line and two marks:
this module's hundred lines do that at the panel's own size.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.widgets.format import BrailleCanvas, finite, log_position
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView

X_LOW, X_HIGH = 1.0, 10_000.0
Y_LOW = 1e-3  # attainable fraction of peak at the bottom of the picture
X_TICKS = ((1.0, "1"), (10.0, "10"), (100.0, "100"), (1000.0, "1k"), (10_000.0, "10k"))
Y_TICKS = ((1.0, "100%"), (0.1, "10%"), (0.01, "1%"), (1e-3, "0.1%"))  # of peak FLOP/s
Y_LABEL_WIDTH = 5

# The bound signals as an operator names them (perf.bound's identifiers stay in the JSON and exports).
SIGNAL_WORDS = {
    "mfu_intensity": "FLOP/byte",
    "dram_vs_tensor": "DRAM vs tensor",
    "tokens_per_step": "tokens/step",
}


def signal_words(name: str) -> str:
    """A bound signal's name as an operator reads it."""
    return SIGNAL_WORDS.get(name, name.replace("_", " "))


def ridge_of(view: DashboardView) -> tuple[float, str] | None:
    """The ridge the advisor reasoned with and its label: its GPU's (at the capped clock, if capped),
    or without one the step time's knee its reasons quote; None when the view carries neither."""
    spec = view.gpu_spec
    if spec is not None:
        capped = f" at {spec.clock_fraction:.0%} clock" if spec.clock_fraction < 1.0 else ""
        return spec.ridge, f"ridge {spec.ridge:.0f} FLOP/byte, {spec.name}{capped}"
    if view.knee_tokens is not None:
        return view.knee_tokens, f"knee {view.knee_tokens:.0f} tokens/step, {view.knee_words or 'no GPU identified'}"
    return None


def roofline_rows(ridge: float, points: list[tuple[float, str]], width: int, height: int) -> list[Text]:
    """The picture, `height` rows of `width` cells, y-axis labels included."""
    plot_w = max(8, width - Y_LABEL_WIDTH)
    canvas = BrailleCanvas(plot_w, height)
    dw, dh = canvas.dot_width, canvas.dot_height

    def xy(intensity: float) -> tuple[float, float]:
        y = min(1.0, intensity / ridge)
        return (log_position(intensity, X_LOW, X_HIGH, dw),
                (dh - 1) - log_position(max(y, Y_LOW), Y_LOW, 1.0, dh))

    # the roof: slope 1 up to the ridge, flat after it
    x_ridge, y_top = xy(ridge)
    x0, y0 = xy(X_LOW)
    canvas.line(x0, y0, x_ridge, y_top)
    canvas.line(x_ridge, y_top, dw - 1, y_top)
    for y in range(int(y_top) + 2, dh, 2):  # the ridge as a dotted vertical
        canvas.set(round(x_ridge), y)
    for intensity, mark in points:
        x, y = xy(intensity)
        canvas.text(int(x) // 2, min(height - 1, int(y) // 4), mark)
    # y: the share of peak FLOP/s the roof allows, labelled at each decade that has a row to itself
    y_labels: dict[int, str] = {}
    for fraction, label in Y_TICKS:
        row = int(((dh - 1) - log_position(fraction, Y_LOW, 1.0, dh)) // 4)
        y_labels.setdefault(min(height - 1, row), label)
    rows = []
    for r, row in enumerate(canvas.rows()):
        rows.append(Text(f"{y_labels.get(r, ''):>{Y_LABEL_WIDTH - 1}} ", style="dim") + Text(row))
    rows.append(Text(" " * Y_LABEL_WIDTH + x_axis(plot_w), style="dim"))
    return rows


def x_axis(plot_w: int) -> str:
    """The decades of arithmetic intensity, the first with its unit where the row has the room."""
    axis = [" "] * plot_w
    free_from = 0
    for i, (value, label) in enumerate(X_TICKS):
        if i == 0 and plot_w >= 40:
            label += " FLOP/byte"
        col = min(int(log_position(value, X_LOW, X_HIGH, plot_w)), plot_w - len(label))
        if col < free_from:
            continue
        axis[col:col + len(label)] = label
        free_from = col + len(label) + 1
    return "".join(axis)


def bound_words(bound, width: int | None = None) -> str:
    """The bound state and what each signal says, in operator words: "memory-bound · DRAM vs tensor
    says balanced · tokens/step says memory"; where that does not fit `width` (the overview's
    roofline at 200 columns), "memory-bound · DRAM vs tensor: balanced · tokens/step: memory"."""
    state = bound.state if bound is not None else "unknown"
    words = f"{state}-bound" if state != "unknown" else "bound: unknown"
    signals = tuple(bound.signals) if bound is not None else ()
    names = [signal_words(s.name) for s in signals]
    if state != "unknown" and len(signals) > 1 and all(s.state == state for s in signals):
        return f"{words} · {', '.join(names[:-1])} and {names[-1]} agree"
    said = words + "".join(f" · {name} says {s.state}" for name, s in zip(names, signals))
    if width is None or len(said) <= width:
        return said
    return words + "".join(f" · {name}: {s.state}" for name, s in zip(names, signals))


# From this content height the panel (the Roofline tab) shows each signal's own numbers.
DETAILS_FROM_HEIGHT = 18


def signal_details(bound) -> tuple[str, ...]:
    """Each bound signal's numbers in words, "DRAM vs tensor: DRAM 62 % vs tensor 18 %"."""
    signals = tuple(bound.signals) if bound is not None else ()
    return tuple(f"{signal_words(s.name)}: {s.detail}" for s in signals if s.detail)


class RooflinePanel(Panel):
    BORDER_TITLE = "Roofline"

    def content_key(self, view: DashboardView) -> object:
        """The point moves on a log axis: a change under 1 % of tokens per step draws the same cell.
        The bound is keyed by what is drawn of it: its words, and each signal's numbers only where
        the panel has the room to show them (every evaluation moves those numbers, and the
        overview's roofline, which does not show them, would be drawn anew for nothing)."""
        figures = view.figures
        state = view.state
        window = state.window if state is not None else None

        def rounded(value: float | None) -> float | None:
            return float(f"{value:.2g}") if finite(value) and value > 0 else None

        bound = state.verdict.bound if state is not None else None
        width, height = self._picture_size()
        return (
            rounded(figures.computed_tokens_per_step_mean) if figures else None,
            rounded(figures.mfu_intensity) if figures else None,
            rounded(figures.judged_running()[0]) if figures else None,
            window.speculation_configured if window else None,
            ridge_of(view),
            bound_words(bound, width),
            signal_details(bound) if height >= DETAILS_FROM_HEIGHT else (),
            width,
            height,
        )

    def _picture_size(self) -> tuple[int, int]:
        return max(20, self.content_size.width or 60), self.content_size.height or 12

    def render(self) -> RenderableType:
        if self.view is None:
            return Text("waiting for the first reading…", style="dim")
        width, height = self._picture_size()
        return self.render_picture(self.view, width, height)

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        return self.render_picture(view, width, 12)

    def render_picture(self, view: DashboardView, width: int, height: int) -> RenderableType:
        ridge_and_name = ridge_of(view)
        if ridge_and_name is None:
            return Text("no ridge to draw: no GPU identified", style="dim")
        ridge, ridge_name = ridge_and_name
        figures = view.figures
        window = view.state.window if view.state is not None else None
        points: list[tuple[float, str]] = []
        legend = Text(no_wrap=True, overflow="ellipsis")
        n = figures.computed_tokens_per_step_mean if figures is not None else None
        if finite(n) and n > 0:
            points.append((n, "●"))
            legend.append("● ", style="bold")
            legend.append(f"≈{float(f'{n:.2g}'):,.0f} tokens/step", style="bold")
        else:
            legend.append("● tokens/step --", style="dim")
        if figures is not None and finite(figures.mfu_intensity) and figures.mfu_intensity > 0:
            points.append((figures.mfu_intensity, "◆"))
            legend.append(f"  ◆ MFU {figures.mfu_intensity:.0f} FLOP/B")
        k = view.unconfigured_k
        running = figures.judged_running()[0] if figures is not None else None
        if k is not None and window is not None and not window.speculation_configured \
                and finite(running) and running > 0:
            verify = running * (k + 1)
            points.append((verify, "○"))
            legend.append(f"  ○ with k={k}: {verify:.0f}")
        ridge_words = f"┊ {ridge_name}"
        # Where a line does not fit (the overview's roofline at 160 columns is 50 wide) it goes on
        # two rather than being cut: the picture gives up a row for each.
        if legend.cell_len + 3 + len(ridge_words) <= width:
            legend.append("   " + ridge_words, style="dim")
            legend_lines = [legend]
        else:
            legend_lines = [legend, Text(ridge_words, style="dim", no_wrap=True, overflow="ellipsis")]
        bound = view.state.verdict.bound if view.state is not None else None
        words = bound_words(bound, width)
        head, _, tail = words.partition(" · ")
        verdict_line = Text(no_wrap=True, overflow="ellipsis")
        verdict_line.append(head, style="bold")
        if tail and len(words) <= width:
            verdict_line.append(" · " + tail, style="dim")
            verdict_lines = [verdict_line]
        else:
            verdict_lines = [verdict_line] + ([Text(tail, style="dim", no_wrap=True, overflow="ellipsis")]
                                              if tail else [])
        # with the room (the Roofline tab), each signal's own numbers on a line of its own
        details = [Text(f"  {detail}", style="dim", no_wrap=True, overflow="ellipsis")
                   for detail in signal_details(bound)] if height >= DETAILS_FROM_HEIGHT else []
        text_rows = len(legend_lines) + len(verdict_lines) + len(details)
        picture_rows = max(3, height - text_rows - 1)
        rows = roofline_rows(ridge, points, width, picture_rows)
        return Group(*rows, *legend_lines, *verdict_lines, *details)
