"""The speculation panel: method, k and the draft model with where each came from, acceptance, L
against the break-even as a gauge, the per-position acceptance as bars, and the misaligned-draft flag."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.telemetry.snapshot import (FROM_CONFIG_METRIC, FROM_FLAGS, FROM_METRICS, FROM_SERVER_INFO,
                                         SpeculationConfig)
from specwatch.widgets.format import BAR_EMPTY, BAR_FULL, MISSING, bar, finite, num, pct, speedup
from specwatch.widgets.panel import Panel, Same
from specwatch.widgets.view import DashboardView


def gauge_top(k: int | None, length: float | None = None, break_even: float | None = None) -> int:
    """Where the gauge ends: L's ceiling k+1 when k is known; without k, the next whole length past
    L and the break-even (at least 2), so neither sits at an end that would read as a ceiling."""
    if k:
        return k + 1
    highest = max([1.0] + [v for v in (length, break_even) if finite(v)])
    return int(math.floor(highest)) + 1


def length_gauge(length: float | None, break_even: float | None, k: int | None, width: int) -> Text:
    """A bar from L=1 to L=k+1 (k unknown: to gauge_top), filled to L, with the break-even marked by │.

    L only pays when the filled part reaches past the mark, which reads without colour too.
    """
    low, high = 1.0, float(gauge_top(k, length, break_even))
    cells = max(4, width)

    def position(value: float) -> int:
        return int(round((min(max(value, low), high) - low) / (high - low) * (cells - 1)))

    filled = position(length) + 1 if finite(length) else 0
    chars = [BAR_FULL if i < filled else BAR_EMPTY for i in range(cells)]
    mark = position(break_even) if finite(break_even) else None
    if mark is not None:
        chars[mark] = "┃"
    pays = finite(length) and finite(break_even) and length > break_even
    text = Text("".join(chars), style="bold" if pays else "")
    return text


# Where a setting came from, as the operator would check it.
_FROM_WORDS = {FROM_SERVER_INFO: "/server_info", FROM_FLAGS: "flags", FROM_METRICS: "metrics",
               FROM_CONFIG_METRIC: "config metric"}
_FLAG_OF = {"method": "--method", "draft_model": "--draft-model"}


def break_even_line(verdict, lifetime, width: int) -> Text:
    """The break-even under the gauge, its low-load value and the engine's lifetime L. Where the line
    does not fit (the overview at 80 and 120 columns) it gives way rather than being cut: shorter
    words first, then the lifetime L (the Speculation tab has it)."""
    low_load = verdict.low_load_break_even
    differs = finite(low_load) and finite(verdict.break_even_length) \
        and abs(low_load - verdict.break_even_length) > 0.005
    life = lifetime.acceptance_length if lifetime is not None else None
    be = Text()
    for short, with_life in ((False, True), (True, True), (True, False)):
        be = Text(no_wrap=True, overflow="ellipsis")
        be.append("┃ break-even ", style="dim")
        be.append(num(verdict.break_even_length, 2), style="bold")
        if differs:
            be.append(f" (low load {low_load:.2f})" if short else f" (1+k·r = {low_load:.2f} at low load)",
                      style="dim")
        if life is not None and with_life:
            be.append("  lifetime L ", style="dim")
            be.append(num(life, 2))
        if be.cell_len <= width:
            break
    return be


# How to make the method (and k) known when the server does not say them, by engine: the flags, or
# the endpoint that would say them. Longest first; the first that fits is shown.
_UNKNOWN_FIXES = {
    "sglang": ("pass --method{k}: this server's /get_server_info cannot be read", "pass --method{k}"),
    "vllm": ("pass --method{k}, or serve vLLM with VLLM_SERVER_DEV_MODE=1", "pass --method{k}"),
}
_UNKNOWN_FIX_ANY = ("pass --method{k}: the server does not say it", "pass --method{k}")


def unknown_fix_line(engine: str | None, k_known: bool, width: int | None = None) -> Text:
    """How to make an unknown method (and k) known, whole: the longest wording that fits `width`.
    It does not say "method unknown" again: the panel's first line says it."""
    choices = _UNKNOWN_FIXES.get(engine or "vllm", _UNKNOWN_FIX_ANY)
    words = ""
    for choice in choices:
        words = choice.format(k="" if k_known else " and --k N")
        if width is None or len(words) <= width:
            break
    return Text(words, style="dim", no_wrap=True, overflow="ellipsis")


def provenance_line(config: SpeculationConfig | None, width: int | None = None,
                    engine: str | None = None, k_known: bool | None = None,
                    from_recording: frozenset[str] = frozenset()) -> Text:
    """Where the method, k and draft model came from, or how to make them known. Where the whole
    line does not fit `width` (the overview at 80 columns), a method and k of one origin are said
    once, and an n-gram's "draft none" (it has no draft model) gives way, rather than cutting the
    line. `engine` names the fix for an unknown method; `k_known` whether k is known elsewhere (the
    counters; None: only the config's k counts). `from_recording`: the settings a replay took from
    its recording rather than from a flag given now: those say "recording", not "--method"."""
    line = Text(no_wrap=True, overflow="ellipsis")
    if config is None or config.method is None:
        return unknown_fix_line(engine, bool(k_known) or (config is not None and config.k is not None), width)

    def origin(name: str) -> str:
        source = config.source_of(name)
        if source == FROM_FLAGS and name in from_recording:
            return "recording"
        return _FLAG_OF.get(name, "flags") if source == FROM_FLAGS else _FROM_WORDS.get(source or "", "?")

    def draft(into: Text) -> None:
        into.append("  draft ", style="dim")
        if config.draft_model is not None:
            into.append(config.draft_model, style="bold")
            into.append(f" ({origin('draft_model')})", style="dim")
        else:
            into.append("none" if config.method in ("ngram", "suffix") else "?")

    line.append("method ", style="dim")
    line.append(f"from {origin('method')}")
    if config.k is not None:
        line.append("  k ", style="dim")
        line.append(f"from {origin('k')}")
    draft(line)
    if config.disagreements:
        line.append("  ⚠ flags disagree with the server", style="bold")
    if width is None or line.cell_len <= width:
        return line
    short = Text(no_wrap=True, overflow="ellipsis")
    if config.k is not None and origin("k") == origin("method"):
        short.append("method and k ", style="dim")
        short.append(f"from {origin('method')}")
    else:
        short.append_text(line[:line.plain.index("  draft ")])
    if config.draft_model is not None or config.method not in ("ngram", "suffix"):
        draft(short)
    if config.disagreements:
        short.append("  ⚠ flags disagree", style="bold")
    return short


class SpeculationPanel(Panel):
    BORDER_TITLE = "Speculation"

    def inputs(self, view: DashboardView) -> object:
        # the figures and the lifetime come from the state's window and the selected engine
        return (Same(view.state), view.target.ok if view.target is not None else None,
                view.target.unjudged if view.target is not None else None, view.engine,
                view.speculation, view.method_words, view.method, Same(view.sweep), view.unconfigured_k,
                self._render_width())

    def layout_key(self, view: DashboardView) -> object:
        state = view.state
        if state is None or state.window is None:
            return None
        if view.target is not None and not view.target.ok:
            return "down"
        figures = view.figures
        acc = figures.acceptance if figures is not None else None
        return (state.window.speculation_configured, len(acc.per_position) if acc else 0,
                view.target.unjudged if view.target is not None else None)

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        state = view.state
        if state is None or state.window is None:
            return Text("no reading yet", style="dim")
        if view.target is not None and not view.target.ok:
            return Text("unknown until the target answers: whether speculation is configured, "
                        "and how well it drafts", style="dim")
        verdict = state.verdict
        window = state.window
        figures = view.figures
        if not window.speculation_configured:
            if view.target is not None and view.target.unjudged is not None:
                # a Dynamo frontend, a prefill worker, Triton's backend: what its metrics cannot say is
                # not "not configured"
                return Group(Text("not visible from this target", style="bold"),
                             Text(view.target.unjudged, style="dim"))
            return self._unconfigured(view, width)
        acc = figures.acceptance if figures is not None else None
        life = view.lifetime  # the selected engine's own when one is selected
        lifetime = life.acceptance if life is not None else None
        config = view.speculation
        # k as the counters give it, else as the server info or the flags say it; None: not known
        k = window.k or (len(acc.per_position) if acc and acc.per_position else None) \
            or (config.k if config is not None else None)
        method_text = view.method_words or view.method or "method unknown"
        lines: list[RenderableType] = []
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append(method_text, style="bold")
        if k:
            head.append("  k=", style="dim")
            head.append(str(k), style="bold")
        else:
            head.append("  k unknown", style="bold")
        rate = acc.acceptance_rate if acc else None
        if rate is not None or head.cell_len + len("  accepted ") + len(pct(rate)) <= width:
            # an unknown rate (it needs k) gives its room to what is said about the method and k
            head.append("  accepted ", style="dim")
            head.append(pct(rate), style="bold")
        lines.append(head)
        engine = view.target.engine_name if view.target is not None else None
        lines.append(provenance_line(config if config is not None and config.method else
                                     SpeculationConfig.from_flags(view.method), width, engine, bool(k),
                                     view.from_recording))

        length = acc.acceptance_length if acc else None
        if length is None and lifetime is not None:
            length = lifetime.acceptance_length
        gauge_width = max(8, min(72, width - 11))
        gauge = Text("L ", style="dim")
        gauge.append(f"{num(length, 2):>5} ", style="bold")
        gauge.append_text(length_gauge(length, verdict.break_even_length, k, gauge_width))
        gauge.append(f" {gauge_top(k, length, verdict.break_even_length)}", style="dim")
        lines.append(gauge)
        lines.append(break_even_line(verdict, lifetime, width))

        rates = acc.per_position if acc and acc.per_position else ()
        bar_width = max(6, min(48, width - 16))
        for i, p in enumerate(rates):
            row = Text(f"pos {i + 1:<2} ", style="dim", no_wrap=True)
            row.append(bar(p, bar_width))
            row.append(f" {pct(p):>4}")
            lines.append(row)
        if not rates:
            lines.append(Text("per-position rates: " + MISSING, style="dim"))

        notes = Text(no_wrap=True, overflow="ellipsis")
        if "misaligned_draft" in verdict.flags:
            notes.append("⚠ MISALIGNED DRAFT: almost no draft token is accepted", style="bold reverse")
        elif k and verdict.best_k is not None and verdict.best_k != k and finite(verdict.best_k_speedup):
            better = "speculation off" if verdict.best_k == 0 else f"k={verdict.best_k}"
            notes.append(f"{better} would give {speedup(verdict.best_k_speedup)}", style="bold")
        reconciled = verdict.details.get("sweep")
        if reconciled is None and view.sweep is not None and view.sweep.throughput_crossing is not None:
            running = figures.judged_running()[0] if figures else None
            if notes.cell_len:
                notes.append("  ")
            notes.append(f"{view.sweep.crossing_text()} running (now {num(running)})")
        lines.append(notes)  # always a line, even empty: the panel's height stays put
        if reconciled is not None:
            # the verdict's word on the sweep: both crossovers and the one used, or why it is not used
            lines.append(Text(reconciled["short"], no_wrap=True, overflow="ellipsis",
                              style="bold reverse" if reconciled["flag"] == "sweep_mismatch" else ""))
        return Group(*lines)

    def _unconfigured(self, view: DashboardView, width: int) -> RenderableType:
        verdict = view.state.verdict
        figures = view.figures
        lines = [Text("speculation is not configured", style="bold")]
        needed = verdict.required_acceptance_length
        k = view.unconfigured_k
        line = Text("would pay above L ", style="dim")
        line.append(num(needed, 2), style="bold")
        if k is not None:
            line.append(f" at k={k} (at most {k + 1})", style="dim")
        lines.append(line)
        if k is not None:
            gauge_width = max(8, min(40, width - 22))
            g = Text("need  ", style="dim")
            g.append_text(length_gauge(None, needed, k, gauge_width))
            g.append(f" {k + 1}", style="dim")
            lines.append(g)
        lines.append(Text("typical: n-gram 1.3–1.6, EAGLE-3 2.5–3.5", style="dim"))
        if figures is not None:
            lines.append(Text(f"at {num(figures.judged_running()[0])} running, {num(figures.computed_tokens_per_step_mean)} tokens per step",
                              style="dim"))
        return Group(*lines)
