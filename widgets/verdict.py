"""The verdict banner: ON / OFF / HOLD / UNKNOWN in large type, how sure, what it buys, and why.

It is the one panel that is always on screen, at every size: the answer to "should speculation be
on, and why" must never need a scroll or a tab switch.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.widgets.format import bar, clock, finite, num, pct, speedup
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView

# Three-row block letters for the four verdict words. They read without colour (NO_COLOR).
GLYPHS = {
    "O": ("█▀█", "█ █", "▀▀▀"),
    "N": ("█▄ █", "█ ▀█", "▀  ▀"),
    "F": ("█▀▀", "█▀ ", "▀  "),
    "H": ("█ █", "█▀█", "▀ ▀"),
    "L": ("█  ", "█  ", "▀▀▀"),
    "D": ("█▀▄", "█ █", "▀▀ "),
    "U": ("█ █", "█ █", "▀▀▀"),
    "K": ("█ ▄▀", "█▀▄ ", "▀  ▀"),
    "W": ("█   █", "█ █ █", "▀▀▀▀▀"),
}

WORDS = {"on": "ON", "off": "OFF", "hold": "HOLD", "unknown": "UNKNOWN"}

# What each word asks of the operator, in a few words under the letters.
MEANING = {
    "on": "speculation pays at this load",
    "off": "speculation costs at this load",
    "hold": "near break-even: keep the current setting",
    "unknown": "not enough data to judge",
}

# The same words for a node without speculation, where ON means "turning it on would pay".
UNCONFIGURED_MEANING = {
    "on": "not configured: turning it on would pay at this load",
    "off": "not configured: keep it off at this load",
}


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if finite(value) else None


def big_word(word: str) -> list[str]:
    rows = ["", "", ""]
    for i, letter in enumerate(word):
        glyph = GLYPHS.get(letter, ("   ", f" {letter} ", "   "))
        for r in range(3):
            rows[r] += ("" if i == 0 else " ") + glyph[r]
    return rows


def summary_line(view: DashboardView, compact: bool = False) -> Text:
    """The verdict as a plain word, then confidence and expected speedup, on one line.

    The block letters beside it read as noise to a screen reader and paste as box characters: the
    word in plain text is what those (and grep on a captured screen) find. Once, at every size;
    under 110 columns without the "verdict:" prefix' colon and padding, so the speedup still fits."""
    verdict = view.state.verdict if view.state is not None else None
    speculation = verdict.speculation if verdict is not None else "unknown"
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("verdict " if compact else "verdict: ", style="dim")
    text.append(WORDS.get(speculation, speculation.upper()), style="bold")
    text.append("  " if compact else "   ")
    if verdict is None:
        text.append("no reading yet", style="dim")
        return text
    if speculation == "unknown" and not verdict.confidence:
        return text  # no confidence, no speedup: the reason under the letters says why
    text.append("confidence ", style="dim")
    text.append(f"{pct(verdict.confidence)} ", style="bold")
    text.append(bar(verdict.confidence, 8))
    text.append("  expected " if compact else "   expected ", style="dim")
    text.append(speedup(verdict.expected_speedup), style="bold")
    words = verdict.interval_words()
    if words is not None:
        # the evidence's interval beside the speedup: a hold from thin evidence reads wide, one at 1 narrow
        text.append(" " + words.partition(" ")[2], style="dim")
    return text


def detail_line(view: DashboardView, width: int = 200) -> Text:
    """L against break-even, the crossover and the bound state. Under 110 columns in shorter words,
    so that the bound state is not the one cut at 80×24."""
    verdict = view.state.verdict if view.state is not None else None
    compact = width < 110
    text = Text(no_wrap=True, overflow="ellipsis")
    if verdict is None:
        return text
    if verdict.configured and finite(verdict.acceptance_length):
        text.append("L ", style="dim")
        text.append(num(verdict.acceptance_length, 2), style="bold")
        text.append(" vs break-even ", style="dim")
        text.append(num(verdict.break_even_length, 2), style="bold")
    elif finite(verdict.required_acceptance_length):
        text.append("would pay above L ", style="dim")
        text.append(num(verdict.required_acceptance_length, 2), style="bold")
    if finite(verdict.crossover_concurrency):
        text.append("  crossover " if compact else "   stops paying above ", style="dim")
        text.append(f"{verdict.crossover_concurrency:.0f}" + ("" if compact else " running"), style="bold")
    bound = verdict.bound.state
    if bound != "unknown":
        text.append(f"  {bound}-bound" if compact else f"   {bound}-bound", style="bold")
    return text


def flag_words(flags: tuple[str, ...]) -> list[str]:
    words = {
        "misaligned_draft": "⚠ misaligned draft",
        "prefill_tax": "⚠ prefill-heavy",
        "ttft_rising": "⚠ TTFT rising",
        "extrapolated": "⚠ extrapolated",
        "stale_acceptance": "⚠ stale acceptance",
        "method_assumed": "? method assumed",
        "engine_stalled": "⚠ engine stalled",
        "reading_failed": "⚠ last reading failed",
        "pending": "⏸ change pending",
        "gpu_unidentified": "? GPU unknown",
        "mig_shape_assumed": "? MIG slice assumed",
        "sweep_mismatch": "⚠ sweep of another setup",
        "sweep_stale": "? sweep too old",
        "sweep_unverified": "? sweep unmatched",
        "sweep_disagrees": "⚠ sweep disagrees",
        "not_judged": "· not judged here",
    }
    # an identifier is never shown: a flag without words of its own reads as words
    return [words.get(f, "⚠ " + f.replace("_", " ")) for f in flags]


class VerdictBanner(Panel):
    """ON/OFF/HOLD/UNKNOWN in block letters, beside the confidence, the speedup and the reason."""

    DEFAULT_CSS = """
    VerdictBanner {
        height: auto;
        padding: 0 1;
    }
    """

    _wrapped: tuple[str, int, int] | None = None  # (reason, width, its line count), see _reason_lines

    def show(self, view: DashboardView) -> None:
        # the class picks the banner's colour in TCSS; the block letters carry the word without it
        speculation = view.state.verdict.speculation if view.state is not None else "unknown"
        for name in WORDS:
            self.set_class(name == speculation, f"-{name}")
        super().show(view)

    def content_key(self, view: DashboardView) -> object:
        v = view.state.verdict if view.state is not None else None
        if v is None:
            return (None, view.nothing_reachable, view.down_since)
        return (view.down_since, view.last_good if view.down_since is not None else None, v.speculation, round(v.confidence, 2), _rounded(v.expected_speedup), v.interval_words(), _rounded(v.break_even_length),
                _rounded(v.acceptance_length), _rounded(v.required_acceptance_length),
                _rounded(v.crossover_concurrency, 0), v.bound.state, v.flags,
                v.reasons[:1], v.configured, view.nothing_reachable)

    def layout_key(self, view: DashboardView) -> object:
        v = view.state.verdict if view.state is not None else None
        # The reason wraps: only a change in its number of lines (at this width) needs a relayout.
        # Its numbers change every poll; a relayout repaints the whole screen.
        reason = v.reasons[0] if v is not None and v.reasons else ""
        width = max(10, self.content_size.width or 80)
        return (self._reason_lines(reason, width), view.nothing_reachable, view.down_since is not None, width)

    def _reason_lines(self, reason: str, width: int) -> int:
        """The reason's line count at this width, wrapped again only when the reason or the width
        changed (the advisor words it anew at its cadence, not on every poll)."""
        if self._wrapped is not None and self._wrapped[0] == reason and self._wrapped[1] == width:
            return self._wrapped[2]
        lines = len(Text("▶ " + reason).wrap(self.app.console, width)) if reason else 1
        self._wrapped = (reason, width, lines)
        return lines

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        verdict = view.state.verdict if view.state is not None else None
        speculation = verdict.speculation if verdict is not None else "unknown"
        word = WORDS.get(speculation, speculation.upper())
        letters = big_word(word)
        right: list[Text] = [summary_line(view, compact=width < 110), detail_line(view, width)]
        words = MEANING.get(speculation, "")
        if verdict is not None and not verdict.configured and speculation in UNCONFIGURED_MEANING:
            words = UNCONFIGURED_MEANING[speculation]
        if verdict is not None and "engine_stalled" in verdict.flags:
            words = "the engine is stalled: no usable reading"
        meaning = Text(words, style="italic", no_wrap=True, overflow="ellipsis")
        if verdict is not None and verdict.flags:
            meaning.append("   " + "  ".join(flag_words(verdict.flags)), style="bold")
        right.append(meaning)
        letters_width = max(len(r) for r in letters)
        lines: list[Text] = []
        for r in range(3):
            row = Text(letters[r].ljust(letters_width) + "  ", style="bold", no_wrap=True, overflow="ellipsis")
            row.append_text(right[r])
            row.truncate(width, overflow="ellipsis")
            lines.append(row)
        reason = verdict.reasons[0] if verdict is not None and verdict.reasons else "waiting for the first reading"
        # The first reason is the one the advisor leads with; it may wrap to a second line at 80 columns.
        lines.append(Text("▶ " + reason, style="bold"))
        if view.down_since is not None:
            why = view.target.state.replace("_", " ") if view.target is not None else "no answer"
            lines.append(Text(f"DOWN since {clock(view.down_since)} ({why}), last good reading "
                              f"{clock(view.last_good)}", style="bold red"))
        if view.nothing_reachable:
            lines.append(Text("Nothing to read here? `specwatch demo` plays a recorded node with no GPU and no server.",
                              style="italic"))
        return Group(*lines)
