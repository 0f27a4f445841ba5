"""The engine panel: load, latency and throughput of the selected target (or one engine of it),
and, when the target cannot be read, why, with every source's state."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.widgets.format import MISSING, engine_label, num, pct, rate, seconds
from specwatch.widgets.health import energy_line, goodput_line
from specwatch.widgets.panel import Panel, Same
from specwatch.widgets.view import DashboardView

DEMO_HINT = "No node to read? Run `specwatch demo` for a recorded one."


def pair(label: str, value: str, label2: str, value2: str) -> Text:
    """Two label/value columns on one line, at fixed widths (cheaper than a Rich table at 1 Hz)."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{label:<8}", style="dim")
    line.append(f"{value:>8}", style="bold")
    line.append(f"  {label2:<10}", style="dim")
    line.append(f"{value2:>8}", style="bold")
    return line


def running_words(f) -> str:
    """The load the verdict is judged at: the window's time average ("2.6 avg") where it is
    measured, which a gauge read at an instant ("0" between short requests) is not."""
    value, source = f.judged_running()
    return f"{value:.1f} avg" if source == "time_average" else num(f.running)


def source_states(view: DashboardView) -> list[Text]:
    """One line per source: each target and each GPU source, with its state in words."""
    lines = []
    if view.target is not None:
        target = view.target
        engine = engine_label(target.engine_name)  # which engine it reads
        if target.ok:
            lines.append(Text.assemble(("✓ ", "bold"), f"{engine} at {target.url}: ok"))
        else:
            lines.append(Text.assemble(("✗ ", "bold"), target.message or f"{engine} at {target.url}: {target.state}"))
    for s in view.sources:
        ok = s.state == "ok"
        message = s.message if s.message and not ok else s.state
        if s.state == "absent":
            lines.append(Text.assemble(("- ", "dim"), (f"{s.name}: {s.message or 'absent'}", "dim")))
        else:
            lines.append(Text.assemble(("✓ " if ok else "✗ ", "bold"), f"{s.name}: {message}"))
    return lines


def unreachable(view: DashboardView) -> RenderableType:
    parts: list[RenderableType] = [Text("The target cannot be read.", style="bold")]
    parts.extend(source_states(view))
    if view.last_good is None:  # a target that answered before is down, not "nothing to read"
        parts.append(Text(""))
        parts.append(Text(DEMO_HINT, style="italic"))
    return Group(*parts)


class EnginePanel(Panel):
    BORDER_TITLE = "Engine"

    def inputs(self, view: DashboardView) -> object:
        # the figures come from the state's window and the selected engine; of the health block,
        # the goodput and energy lines
        target, health = view.target, view.health_summary
        return (Same(view.state), view.engine, view.engine_keys,
                (target.ok, target.url, target.engine_name, target.message, target.state) if target is not None
                else None,
                view.sources,
                view.last_good if target is not None and not target.ok else None,  # said when down only
                (health.get("goodput"), health.get("energy"), health.get("speculation_toggled_to"))
                if health is not None else None,
                self._render_width())

    def layout_key(self, view: DashboardView) -> object:
        target = view.target
        if target is None:
            return None
        if not target.ok:
            return ("down", len(view.sources))
        return ("up", view.figures is None)

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        target = view.target
        if target is None:
            return Text("no target read yet", style="dim")
        if not target.ok:
            return unreachable(view)
        f = view.figures
        which = view.engine or (f"all {len(view.engine_keys)} engines" if len(view.engine_keys) > 1 else "engine")
        if f is None:
            return Group(Text(which, style="italic"), pair("running", MISSING, "waiting", MISSING),
                         Text("rates need two readings a window apart", style="dim"))
        ratio = f"{f.prompt_to_output_ratio:.1f}:1" if f.prompt_to_output_ratio is not None else MISSING
        rows = [
            pair("running", running_words(f), "waiting", num(f.waiting)),
            pair("KV cache", pct(f.kv_cache_usage), "prompt:out", ratio),
            pair("TTFT p50", seconds(f.ttft_p50_s), "p95", seconds(f.ttft_p95_s)),
            pair("TPOT", seconds(f.tpot_mean_s), "step", seconds(f.itl_mean_s)),
            pair("tokens/s", rate(f.generation_tokens_per_s, ""), "prompt/s", rate(f.prompt_tokens_per_s, "")),
            pair("tok/step", num(f.computed_tokens_per_step_mean), "steps/s", num(f.steps_per_s, 1)),
        ]
        # the overview's one line each for goodput and energy, where they are measured (the
        # Health tab has the rest)
        health = view.health_summary
        if health is not None and health.get("goodput") is not None:
            rows.append(goodput_line(health, width))
        if health is not None and health.get("energy") is not None:
            rows.append(energy_line(health, width))
        footer = Text(f"{which} · window {f.seconds:.0f} s", style="dim", no_wrap=True, overflow="ellipsis")
        if f.restarts:
            footer.append(f" · RESTARTED ×{f.restarts}", style="bold")
        return Group(*rows, footer)
