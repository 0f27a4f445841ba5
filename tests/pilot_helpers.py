"""What the dashboard's Pilot tests share."""

from __future__ import annotations

import io

from rich.console import Console


async def until(pilot, condition, what: str, rounds: int = 3000) -> None:
    """Let the app run until condition() holds (a bound on rounds, not a timing assertion)."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"the app never reached: {what}")


def screen_text(app) -> str:
    """The whole screen as plain text, as the compositor would paint it now."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, color_system=None,
                      legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()
