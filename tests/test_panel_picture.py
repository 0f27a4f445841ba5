"""A panel without a content key of its own is repainted only when its picture changes, and draws
each new view once."""

from __future__ import annotations

import pytest
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import App

from specwatch.widgets.panel import Panel, Same, picture_key
from specwatch.widgets.view import DashboardView, SourceInfo


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _line(value: str, style: str = "bold") -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append("tokens/s ")
    line.append(value, style=style)
    return line


def test_the_same_text_drawn_again_has_the_same_picture():
    assert picture_key(_line("11.4")) == picture_key(_line("11.4"))
    assert picture_key(Group(_line("11.4"), Text("engine · window 25 s", style="dim"))) == \
        picture_key(Group(_line("11.4"), Text("engine · window 25 s", style="dim")))


def test_a_changed_number_style_or_layout_setting_is_a_new_picture():
    assert picture_key(_line("11.4")) != picture_key(_line("11.5"))
    assert picture_key(_line("11.4")) != picture_key(_line("11.4", style="red"))
    wrapped = _line("11.4")
    wrapped.no_wrap = False
    assert picture_key(_line("11.4")) != picture_key(wrapped)
    assert picture_key(Group(_line("1"))) != picture_key(Group(_line("1"), _line("2")))


def test_what_cannot_be_compared_is_always_repainted():
    table = Table()
    table.add_column("a")
    assert picture_key(table) is None
    assert picture_key(Group(_line("1"), table)) is None


class _CountingPanel(Panel):
    """Draws the view's time; counts how often it is asked to."""

    def __init__(self) -> None:
        super().__init__(id="counting")
        self.drawn = 0

    def render_view(self, view: DashboardView, width: int) -> Text:
        self.drawn += 1
        return Text(f"t={view.time}")


class _OnePanel(App[None]):
    """An app of one panel of the given class."""

    def __init__(self, panel: type[Panel]) -> None:
        super().__init__()
        self.panel = panel

    def compose(self):
        yield self.panel()


@pytest.mark.anyio
async def test_a_panel_draws_each_new_view_once_and_an_unchanged_picture_not_at_all():
    app = _OnePanel(_CountingPanel)
    async with app.run_test(size=(40, 5)) as pilot:
        panel = app.query_one(_CountingPanel)
        await pilot.pause()
        source = SourceInfo("LIVE", "test")
        assert panel.show(DashboardView(source=source, time=1.0))
        await pilot.pause()
        # drawn once to compare, and that drawing is what the repaint shows: not drawn again
        assert panel.drawn == 1
        assert "t=1.0" in str(panel.render_line(0).text)
        # a new view with the same picture: compared (drawn once), not repainted
        assert not panel.show(DashboardView(source=source, time=1.0))
        await pilot.pause()
        assert panel.drawn == 2
        assert panel.show(DashboardView(source=source, time=2.0))
        await pilot.pause()
        assert panel.drawn == 3
        assert "t=2.0" in str(panel.render_line(0).text)


class _ListingPanel(_CountingPanel):
    """Lists what it draws: the view's time alone."""

    def inputs(self, view: DashboardView) -> object:
        return (view.time, Same(view.source), self._render_width())

    def render_view(self, view: DashboardView, width: int) -> Text:
        self.drawn += 1
        return Text(f"t={view.time} {view.source.kind}")


@pytest.mark.anyio
async def test_a_panel_whose_inputs_did_not_change_is_not_drawn_at_all():
    app = _OnePanel(_ListingPanel)
    async with app.run_test(size=(40, 5)) as pilot:
        panel = app.query_one(_ListingPanel)
        await pilot.pause()
        source = SourceInfo("LIVE", "test")
        assert panel.show(DashboardView(source=source, time=1.0))
        await pilot.pause()
        assert panel.drawn == 1
        # a new view, the same inputs: not drawn, not repainted
        assert not panel.show(DashboardView(source=source, time=1.0, window_s=30.0))
        await pilot.pause()
        assert panel.drawn == 1
        # an equal object that is not the same one (compared by identity): drawn to compare; the
        # picture is the same, so not repainted
        assert not panel.show(DashboardView(source=SourceInfo("LIVE", "test"), time=1.0))
        await pilot.pause()
        assert panel.drawn == 2
        assert panel.show(DashboardView(source=source, time=2.0))
        await pilot.pause()
        assert panel.drawn == 3
        assert "t=2.0" in str(panel.render_line(0).text)
