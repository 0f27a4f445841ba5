"""The event log: every verdict change with its time (data time), the move, and its reasons."""

from __future__ import annotations

import textwrap

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.widgets.format import clock, pct, short_host, speedup
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView, TargetEvent

INDENT = 10  # the reasons sit under the change, past its HH:MM:SS
WORD = {"on": "ON", "off": "OFF", "hold": "HOLD", "unknown": "UNKNOWN", None: "start"}


class EventLog(Panel):
    """`latest`: show only the latest this many events, with their deciding reason, and say how many
    more the Events tab holds (the overview's log, which shares the screen with four panels)."""

    BORDER_TITLE = "Verdict changes"

    # its content key is a count and an identity, and changes once per event: kept current on a
    # hidden tab, the Events tab opens on every change logged, never "no verdict changes yet" over
    # them (issue 45, item 19)
    CURRENT_WHILE_HIDDEN = True

    #: how many reasons under each change; the first is the one that decided it
    REASONS_SHOWN = 2

    def __init__(self, *, id: str | None = None, classes: str | None = None, latest: int | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.latest = latest

    def content_key(self, view: DashboardView) -> object:
        return (len(view.events), id(view.events[0]) if view.events else None, len(view.target_urls) > 1)

    def layout_key(self, view: DashboardView) -> object:
        return self.content_key(view)

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        if not view.events:
            return Text("no verdict changes yet", style="dim")
        several = len(view.target_urls) > 1
        lines: list[Text] = []
        events = view.events if self.latest is None else view.events[: self.latest]
        reasons_shown = self.REASONS_SHOWN if self.latest is None else 1
        for change in events:
            if isinstance(change, TargetEvent):
                line = Text(no_wrap=True, overflow="ellipsis")
                line.append(clock(change.time), style="dim")
                line.append("  ")
                line.append(change.words, style="bold")
                if several:
                    line.append(f"  {short_host(change.url)}", style="dim")
                lines.append(line)
                continue
            v = change.verdict
            head = Text(no_wrap=True, overflow="ellipsis")
            head.append(clock(change.time), style="dim")
            head.append("  ")
            head.append(f"{WORD.get(change.previous, change.previous)} → ", style="dim")
            head.append(WORD.get(v.speculation, v.speculation), style="bold reverse")
            head.append(f"  confidence {pct(v.confidence)}  expected {speedup(v.expected_speedup)}")
            if several:
                head.append(f"  {short_host(change.url)}", style="dim")
            lines.append(head)
            for reason in v.reasons[:reasons_shown]:
                # a hanging indent: a reason that wraps stays under its change, clear of the times
                style = "dim" if reason is not v.reasons[0] else ""
                for part in textwrap.wrap(reason, max(20, width - INDENT)) or [""]:
                    lines.append(Text(" " * INDENT + part, style=style))
        if len(events) < len(view.events):
            lines.append(Text(f"{len(view.events) - len(events)} earlier in the Events tab (key 6)", style="dim"))
        return Group(*lines)
