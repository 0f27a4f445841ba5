"""The base of every panel: it holds the last DashboardView it was given and renders from it.

Panels never fetch anything. The app hands each visible panel the new view after a poll, so a
panel on a hidden tab costs nothing until it is shown again (and is then given the latest view).
A panel that costs next to nothing to keep current while hidden says so (CURRENT_WHILE_HIDDEN) and
is handed every view: its tab then opens on the latest picture already laid out.

Two keys keep a 1 Hz refresh cheap: a panel whose `content_key` did not change is not repainted at
all, and only a change of `layout_key` (the panel's line count could differ) asks Textual for a
relayout; any other update is a repaint of that panel alone. A panel that keeps the default
content key (the view, new on every poll) is compared by its picture instead: the text and styles
it would draw, when it draws Text (alone or grouped), so the same numbers a second later are not
painted again.

A panel whose picture is a column of one-line Texts (a row per GPU) can say so with LINE_BY_LINE:
it is then drawn through Textual's line API, each line from its own Text, and a new view repaints
only the lines whose Text changed; the rest of the panel keeps the strips Textual already holds.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from specwatch.widgets.view import DashboardView

_NEVER = object()


class Panel(Widget):
    """A widget whose whole content is a pure function of a DashboardView and its own size."""

    # The picture is drawn line by line, each line from its own Text (see render_line), and a new
    # view repaints only the lines that changed: for a panel whose picture is one-line Texts (a
    # Group of them) of which a few change from one poll to the next. A picture that is not (a
    # Text that wraps, a table) is drawn the ordinary way.
    LINE_BY_LINE = False

    # Handed every view even while hidden, for a panel whose content key is cheap and seldom
    # changes, and whose height follows its content (the event log): its tab's first frame then
    # draws the latest picture at its height. A panel handed the view only once its tab is shown is
    # drawn right, but Textual may lay that first frame out at the height it had when last shown.
    CURRENT_WHILE_HIDDEN = False

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
        # LINE_BY_LINE: the lines of the picture last handed over, at the width they were cut to
        self._lines: _Lines | None = None

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
        if self.LINE_BY_LINE and not relayout and self._drawn is not None and self._drawn[0] is view:
            changed = self._changed_lines(self._drawn[2])
            if changed is not None:
                if changed:
                    self.refresh(*changed)
                return bool(changed)
        self._lines = None
        self.refresh(layout=relayout)
        return True

    def _changed_lines(self, picture: RenderableType) -> list[Region] | None:
        """The regions of the lines of `picture` that differ from the lines last handed over, which
        it replaces; None when the two cannot be compared line for line (then all is repainted)."""
        width = self.size.width
        texts = one_line_texts(picture, width)
        before = self._lines
        self._lines = None if texts is None else _Lines(width, texts)
        if texts is None or before is None or before.width != width or len(before.keys) != len(texts):
            return None
        lines = self._lines
        assert lines is not None
        changed = []
        for y, (key, was) in enumerate(zip(lines.keys, before.keys)):
            if key == was:
                lines.strips[y] = before.strips[y]  # what Textual was given for it still stands
            else:
                changed.append(Region(0, y, width, 1))
        return changed

    def render_line(self, y: int) -> Strip:
        """LINE_BY_LINE: line y of the picture, from its own Text, as Textual would draw the whole
        picture (the Text cut to the width, on the widget's style); a line is cut into segments
        once per change of its Text. Otherwise, and while text is selected, Textual's own drawing."""
        width = self.size.width
        if not self.LINE_BY_LINE or width <= 0 or self.text_selection is not None \
                or self._get_justify_method() is not None or self.styles.content_align != ("left", "top"):
            return super().render_line(y)
        lines = self._lines
        if lines is None or lines.width != width:
            texts = one_line_texts(self.render(), width)
            if texts is None:
                return super().render_line(y)
            lines = self._lines = _Lines(width, texts)
        style = self.visual_style.rich_style
        if not 0 <= y < len(lines.texts):
            return Strip.blank(width, style)
        strip = lines.strips[y]
        if strip is None:
            strip = lines.strips[y] = line_strip(lines.texts[y], width, self.app.console)
        return strip.apply_style(style)

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


class _Lines:
    """A picture's lines for LINE_BY_LINE: their Texts, their picture keys, and each one's strip
    once drawn (None until then), at the width they are cut to."""

    __slots__ = ("width", "texts", "keys", "strips")

    def __init__(self, width: int, texts: list[Text]) -> None:
        self.width = width
        self.texts = texts
        self.keys = [picture_key(t) for t in texts]
        self.strips: list[Strip | None] = [None] * len(texts)


def one_line_texts(renderable: RenderableType, width: int) -> list[Text] | None:
    """The Texts of a picture that draws one line per Text at this width (a Text, or a Group of
    them), or None: a Text that wraps, holds a line break or a tab, is justified, or runs on into
    the next one draws otherwise."""
    texts = renderable.renderables if isinstance(renderable, Group) else [renderable]
    for text in texts:
        if not isinstance(text, Text) or text.end != "\n" or text.justify not in (None, "default"):
            return None
        plain = text.plain
        if "\n" in plain or "\t" in plain or (not text.no_wrap and cell_len(plain) > width):
            return None
    return list(texts)  # type: ignore[arg-type]


def line_strip(text: Text, width: int, console: Console) -> Strip:
    """One line as Rich draws a Text in a Group: cut to the width by its overflow, its own style
    under its spans, on no base style yet."""
    if cell_len(text.plain) > width:
        text = text.copy()
        text.truncate(width, overflow=text.overflow or "fold")
    # what Text.__rich_console__ renders: the line joined on its own, its style a span under the rest
    return Strip(Text("\n").join([text]).render(console)).crop(0, width)


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
