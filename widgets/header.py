"""The header line: node, model, the engine by its name (vLLM, SGLang) with its version, and where the
data come from (LIVE / REPLAY / SYNTHETIC).

Live, at intervals from LONG_INTERVAL_S, it carries the wall clock and a countdown to the next poll:
both tick once a second (HeaderBar.tick, driven by the app), so a screen between two polls 30 s
apart does not look hung. A tick repaints this one line and nothing else. At shorter intervals the
clock is the latest reading's, moved on by the polls themselves. A replay shows the
reading's own date and time instead: the wall clock says nothing about a recorded incident."""

from __future__ import annotations

import math

from rich.console import RenderableType
from rich.segment import Segment
from rich.text import Text
from textual.strip import Strip

from specwatch.widgets.format import MISSING, clock, date_clock, engine_label, short_host
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView


# From this interval the header counts down to the next poll; below it the next reading comes before
# anyone wonders.
LONG_INTERVAL_S = 5.0


def countdown(source_interval_s: float, now: float | None, next_poll_at: float | None) -> str:
    """"next in 18 s" while a poll is due later, "reading…" once it is due; "" when not counting."""
    if source_interval_s < LONG_INTERVAL_S or now is None or next_poll_at is None:
        return ""
    left = next_poll_at - now
    return f"next in {math.ceil(left):.0f} s" if left > 0 else "reading…"


def header_text(view: DashboardView, width: int, now: float | None = None,
                next_poll_at: float | None = None) -> Text:
    """`now` is the wall clock of the last tick (None: show the reading's time), `next_poll_at` when
    the next poll is due on that clock (None: none is scheduled: in flight, ended, or replay)."""
    source = view.source
    text = Text(no_wrap=True, overflow="ellipsis")
    badge = f" {source.kind} "
    text.append(badge, style="bold reverse")
    if source.synthetic:
        text.append(" SYNTHETIC ", style="bold reverse italic")
    elif source.kind == "REPLAY":
        # a replay says what it plays back either way: the demo's playlist mixes the two
        text.append(" REAL ", style="bold reverse")
    if source.kind == "REPLAY":
        text.append(f" {date_clock(view.time)}", style="bold")
        # paused, the speed says nothing: under 80 columns it gives its room to ENDED and PAUSED
        if source.replay_speed is not None and not (source.paused and width < 80):
            text.append(f" ×{source.replay_speed:g}")
    else:
        text.append(f" every {source.interval_s:g} s" if width >= 100 else f" {source.interval_s:g} s")
        left = "" if source.ended else countdown(source.interval_s, now, next_poll_at)
        if left and width < 100:
            left = left.replace("next in", "next")
        if left:
            text.append(f", {left}", style="bold")
    if source.ended:
        text.append("  ENDED", style="bold")
    if source.paused:
        text.append("  ‖ PAUSED", style="bold reverse")
    if source.recording:
        text.append("  ● REC", style="bold red")
    elif source.recording_stopped:
        text.append(f"  recording stopped: {source.recording_stopped}", style="bold reverse red")
    text.append("  │ ")
    node = short_host(view.url) if view.url else source.description or MISSING
    text.append(node, style="bold")
    if len(view.target_urls) > 1:
        text.append(f" ({view.target_index + 1}/{len(view.target_urls)})", style="dim")
    if view.others_down:
        # another target of this watch is down: said next to the one shown, where the eye lands
        down = short_host(view.others_down[0]) if len(view.others_down) == 1 else f"{len(view.others_down)} others"
        text.append(f"  ✖ {down} DOWN (t)", style="bold reverse red")
    target = view.target
    # the engine by its name once anything of it was read (an answer, its engine, its version); a
    # target never read is "server", not a vLLM nobody has seen
    known = target is not None and (target.ok or target.engine is not None or target.version is not None)
    text.append(f"  {engine_label(target.engine_name) if known else 'server'} ", style="dim")
    text.append(target.version if target is not None and target.version else MISSING)
    if target is not None and (target.deployment is not None or target.role is not None):
        # a deployment's member: which deployment, and its part in it (frontend, prefill, decode)
        where = " ".join(filter(None, (target.deployment, target.role)))
        text.append(f"  [{where}]", style="bold" if target.role in ("prefill", "frontend") else "")
    model = view.model_name
    if model:
        if width < 150:
            # the organisation prefix is the first thing to go (at 120 columns, for the GPUs and the clock)
            model = model.rsplit("/", 1)[-1]
        text.append("  ")
        text.append(model, style="bold")
    whole = [g for g in view.gpus if g.mig is None]  # MIG devices are slices of these, not more GPUs
    if whole:
        names = sorted({g.name.removeprefix("NVIDIA ") for g in whole})
        text.append("  ")
        text.append(f"{len(whole)}× {names[0]}" if len(names) == 1 else f"{len(whole)} GPUs, mixed")
        slices = [g.mig.profile or "device" for g in view.gpus if g.mig is not None]
        if slices:
            text.append(f" · MIG {slices[0]}" if len(slices) == 1 else f" · {len(slices)} MIG devices")
    shown = now if now is not None else view.time
    # under 100 columns a countdown is the sign of life, and the clock gives its room to the model
    counting = source.kind != "REPLAY" and not source.ended and bool(countdown(source.interval_s, now, next_poll_at))
    if source.kind != "REPLAY" and shown is not None and not (counting and width < 100):
        # the clock keeps its place at the right edge: what gives way is the end of the model name
        right = f"  {clock(shown)}"
        text.truncate(max(0, width - len(right)), overflow="ellipsis", pad=True)
        text.append(right, style="dim")
    # cut here with an ellipsis: left to the widget, a line too long wraps its last word out of sight
    text.truncate(width, overflow="ellipsis")
    return text


class HeaderBar(Panel):
    DEFAULT_CSS = """
    HeaderBar {
        height: 1;
        background: $panel;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.now: float | None = None
        self.next_poll_at: float | None = None
        self._line_drawn = ""  # the line as last drawn, so a tick that changes no character paints nothing
        self._strip: tuple[RenderableType, int, Strip] | None = None  # (picture, width, its line)

    def content_key(self, view: DashboardView) -> object:
        return (view.time, view.source, view.url, view.target.version if view.target else None,
                view.target.engine_name if view.target else None,
                (view.target.deployment, view.target.role) if view.target else None,
                view.model_name, len(view.gpus), len(view.target_urls), view.others_down,
                self.now, self.next_poll_at)

    def tick(self, now: float | None, next_poll_at: float | None) -> bool:
        """The wall clock moved on: repaint this line if what it says changed (a new second, a new
        countdown figure). Returns whether it repaints."""
        self.now, self.next_poll_at = now, next_poll_at
        if self.view is None:
            return False
        width = self._render_width()
        text = header_text(self.view, width, now, next_poll_at)
        if text.plain == self._line_drawn:
            return False
        self._content_key = self.content_key(self.view)
        self._line_drawn = text.plain
        self._drawn = (self.view, width, text)  # the repaint that follows draws this picture
        self.refresh()
        return True

    def render_line(self, y: int) -> Strip:
        """The one line, drawn straight from its Text's segments. This line is repainted every
        second (the clock), and every repaint of it also repaints the screen-level widgets beside
        it: Textual's general path (measure, wrap, justify, convert) would cost twice as much for a
        line that header_text has already cut to the width."""
        width = self.size.width
        if y != 0 or not width:
            return Strip.blank(width, self.rich_style)
        picture = self.render()
        cached = self._strip
        if cached is not None and cached[0] is picture and cached[1] == width:
            return cached[2]
        text = picture if isinstance(picture, Text) else Text(str(picture))
        strip = Strip(list(Segment.simplify(text.render(self.app.console)))).adjust_cell_length(width).apply_style(self.rich_style)
        self._strip = (picture, width, strip)
        return strip

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        text = header_text(view, width, self.now, self.next_poll_at)
        self._line_drawn = text.plain
        return text
