"""The base of every panel: it holds the last DashboardView it was given and renders from it.

Panels never fetch anything. The app hands each visible panel the new view after a poll, so a
panel on a hidden tab costs nothing until it is shown again (and is then given the latest view).

Two keys keep a 1 Hz refresh cheap: a panel whose `content_key` did not change is not repainted at
all, and only a change of `layout_key` (the panel's line count could differ) asks Textual for a
relayout; any other update is a repaint of that panel alone. A panel that keeps the default
content key (the view, new on every poll) is compared by its picture instead: the text and styles
it would draw, when it draws Text (alone or grouped), so the same numbers a second later are not
painted again.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widget import Widget

from specwatch.widgets.view import DashboardView

_NEVER = object()


class Panel(Widget):
    """A widget whose whole content is a pure function of a DashboardView and its own size."""

    DEFAULT_CSS = """
    Panel {
        height: auto;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view: DashboardView | None = None
        self._content_key: Any = _NEVER
        self._layout_key: Any = _NEVER
        # (view, width, renderable) of the last picture drawn to compare (see show)
        self._drawn: tuple[DashboardView, int, RenderableType] | None = None
        self._inputs: Any = None  # what inputs() gave for the last view drawn

    def content_key(self, view: DashboardView) -> Any:
        """What the picture depends on; equal keys mean an identical picture. Default: the view."""
        return view

    def layout_key(self, view: DashboardView) -> Any:
        """What the panel's height depends on. Default: nothing (a fixed or stable height)."""
        return None

    def inputs(self, view: DashboardView) -> Any:
        """Everything render_view reads (the width included), where a panel can list it cheaply:
        equal inputs draw the same picture, so the panel is not even drawn to compare. None (the
        default): not listed, the picture is compared. Objects that are replaced, not changed,
        between polls (a TargetState) are compared by identity: wrap them in Same."""
        return None

    def show(self, view: DashboardView) -> bool:
        """Take a new view; repaint only if the picture changed. Returns whether it repaints."""
        self.view = view
        inputs = self.inputs(view)
        if inputs is not None and inputs == self._inputs:
            return False
        self._inputs = inputs
        content, layout = self.content_key(view), self.layout_key(view)
        if content is view:
            width = self._render_width()
            drawn = self.render_view(view, width)
            picture = picture_key(drawn)
            if picture is not None:
                content = (picture, width)
                # the repaint that follows draws this same picture: render() hands it over
                self._drawn = (view, width, drawn)
        if content == self._content_key and layout == self._layout_key:
            return False
        relayout = layout != self._layout_key
        self._content_key, self._layout_key = content, layout
        self.refresh(layout=relayout)
        return True

    def render(self) -> RenderableType:
        if self.view is None:
            return Text("waiting for the first reading…", style="dim")
        width = self._render_width()
        drawn = self._drawn
        if drawn is not None and drawn[0] is self.view and drawn[1] == width:
            return drawn[2]
        return self.render_view(self.view, width)

    def _render_width(self) -> int:
        return max(10, self.content_size.width or self.size.width or 80)

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        raise NotImplementedError  # every panel defines its own picture


class Same:
    """An object compared by identity in a panel's inputs: a TargetState, a Window's figures, which
    the Monitor replaces rather than changes (and deep equality would cost more than a drawing)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def picture_key(renderable: RenderableType) -> Any:
    """What a renderable draws, as a comparable value: for Text (plain text, spans, style, layout
    settings) and Groups of them; None for anything else (then it cannot be compared)."""
    if isinstance(renderable, Text):
        return (renderable.plain, tuple(renderable.spans), str(renderable.style), renderable.justify,
                renderable.overflow, renderable.no_wrap, renderable.end)
    if isinstance(renderable, Group):
        parts = tuple(picture_key(r) for r in renderable.renderables)
        return None if any(p is None for p in parts) else ("group", renderable.fit, parts)
    if isinstance(renderable, str):
        return ("str", renderable)
    return None
