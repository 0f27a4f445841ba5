"""The header line: node, model, vLLM version and where the data come from (LIVE / REPLAY / SYNTHETIC)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from specwatch.widgets.format import MISSING, clock, date_clock, short_host
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView


def header_text(view: DashboardView, width: int) -> Text:
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
        if source.replay_speed is not None:
            text.append(f" ×{source.replay_speed:g}")
    else:
        text.append(f" every {source.interval_s:g} s" if width >= 100 else f" {source.interval_s:g} s")
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
    text.append("  vLLM ", style="dim")
    text.append(view.target.version if view.target is not None and view.target.version else MISSING)
    model = view.model_name
    if model:
        if width < 120:
            model = model.rsplit("/", 1)[-1]  # the organisation prefix is the first thing to go
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
    if source.kind != "REPLAY" and view.time is not None:
        right = f"  {clock(view.time)}"
        if text.cell_len + len(right) < width:
            text.append(" " * (width - text.cell_len - len(right)))
            text.append(right, style="dim")
    return text


class HeaderBar(Panel):
    DEFAULT_CSS = """
    HeaderBar {
        height: 1;
        background: $panel;
    }
    """

    def content_key(self, view: DashboardView) -> object:
        return (view.time, view.source, view.url, view.target.version if view.target else None,
                view.model_name, len(view.gpus), len(view.target_urls), view.others_down)

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        return header_text(view, width)
