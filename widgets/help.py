"""The help screen (?): the keys, what the panels show, and where to look next."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("?", "this help"),
    ("space / p", "pause the display (collection and recording go on); a replay pauses"),
    ("1–7, tab", "switch tabs: overview, GPUs, speculation, roofline, trends, events, health"),
    ("+ / -", "poll faster / slower (live)"),
    ("t / e", "next target / next engine (or all engines)"),
    ("r", "start or stop recording"),
    ("← / →", "replay: seek back / forward 10 s"),
    ("[ / ]", "replay: slower / faster"),
    (".", "replay: step one reading while paused"),
    ("n / N", "replay: next / previous change of the shown verdict"),
    ("ctrl+p", "command palette: every action by name"),
    ("q", "quit"),
)

# Paragraphs, not lines: the screen wraps them at whatever width it has.
ABOUT = (
    "The banner answers one question: should speculation be on at this load, and why. "
    "ON: it pays. OFF: it costs. HOLD: within the hysteresis band of break-even, keep the current "
    "setting. UNKNOWN: not enough data (the reason says what is missing).",
    "L is the mean acceptance length (tokens committed per verify step). Speculation pays while L is "
    "above the break-even, which rises with load: past the GPU's ridge, the verify step's extra tokens "
    "are no longer free. `specwatch demo` shows a full ramp.",
)
KEY_WIDTH = 11


def key_rows(replay: bool, recorder: bool, jumps: bool | None = None) -> list[tuple[str, str]]:
    """The keys of this session. `jumps`: n / N work, which takes the replay of one recording file
    (the demo's playlist of scenarios has no index of verdict changes); None: whenever `replay`."""
    jumps = replay if jumps is None else jumps
    rows = []
    for key, words in KEYS:
        if not replay and words.startswith("replay:"):
            continue
        if key == "n / N" and not jumps:
            continue
        if key == "+ / -" and replay:
            words = "replay: faster / slower"
        if key == "r" and not recorder:
            words += " (no recorder in this session)"
        rows.append((key, words))
    return rows


def help_text(replay: bool, recorder: bool, jumps: bool | None = None) -> RenderableType:
    """The keys as a table whose descriptions wrap under themselves, then the prose as paragraphs."""
    keys = Table.grid(padding=(0, 1))
    keys.add_column(width=1 + KEY_WIDTH, no_wrap=True)
    keys.add_column(ratio=1, overflow="fold")
    for key, words in key_rows(replay, recorder, jumps):
        keys.add_row(f"  {key}", words)
    return Group(Text("Keys"), keys, *(part for paragraph in ABOUT for part in (Text(""), Text(paragraph))))


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 90;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $primary;
        border-title-align: center;
        background: $surface;
        padding: 0 1;
    }
    """

    def __init__(self, replay: bool = False, recorder: bool = False, jumps: bool | None = None) -> None:
        super().__init__()
        self._text = help_text(replay, recorder, jumps)

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "specwatch help (esc to close)"
            yield Static(self._text)
