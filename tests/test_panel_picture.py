"""A panel without a content key of its own is repainted only when its picture changes, and draws
each new view once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import App

from specwatch.telemetry.snapshot import GpuSample
from specwatch.widgets.gpu import GpuPanel
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


def _gpus(power: list[float]) -> tuple[GpuSample, ...]:
    return tuple(GpuSample(index=i, name="NVIDIA L4", uuid=f"GPU-{i}",
                           values={"sm_active": 0.5, "tensor_active": 0.25, "dram_bw_util": 0.4,
                                   "power_w": watts, "power_limit_w": 72.0,
                                   "memory_used_bytes": 20e9, "memory_total_bytes": 24e9})
                 for i, watts in enumerate(power))


class _OneGpuPanel(App[None]):
    def compose(self):
        yield GpuPanel(id="gpus")


def _painted_lines(panel: Panel) -> list[int]:
    """Record the content lines Textual asks the panel for."""
    asked: list[int] = []
    draw = panel.render_line

    def render_line(y: int):
        asked.append(y)
        return draw(y)

    panel.render_line = render_line  # type: ignore[method-assign]
    return asked


@pytest.mark.anyio
async def test_a_gpu_panel_repaints_only_the_rows_whose_readings_changed():
    app = _OneGpuPanel()
    async with app.run_test(size=(160, 14)) as pilot:
        panel = app.query_one(GpuPanel)
        source = SourceInfo("LIVE", "test")
        power = [40.0] * 8
        panel.show(DashboardView(source=source, time=1.0, gpus=_gpus(power)))
        await pilot.pause()
        first = [str(panel.render_line(y).text) for y in range(9)]
        asked = _painted_lines(panel)
        # the same readings a second later, in new objects: nothing is repainted
        assert not panel.show(DashboardView(source=source, time=2.0, gpus=_gpus(power)))
        await pilot.pause()
        assert asked == []
        # GPU 3 draws more power: its row (under the column heads) is the one line repainted
        power[3] = 55.0
        assert panel.show(DashboardView(source=source, time=3.0, gpus=_gpus(power)))
        await pilot.pause()
        assert asked == [4]
        now = [str(panel.render_line(y).text) for y in range(9)]
        assert [y for y in range(9) if now[y] != first[y]] == [4]
        assert "55/72 W" in now[4] and "40/72 W" in first[4]


@pytest.mark.anyio
async def test_a_gpu_panel_drawn_line_by_line_shows_what_textual_draws_of_the_whole_picture():
    """The line-by-line drawing against Textual's own drawing of the same picture, at a width that
    cuts the rows (their ellipsis) and one that does not."""
    app = _OneGpuPanel()
    for width in (160, 60):
        async with app.run_test(size=(width, 14)) as pilot:
            panel = app.query_one(GpuPanel)
            # a capped GPU: its clocks in bold, a footnote line under the rows
            gpus = _gpus([40.0, 71.5, 12.0])
            gpus = (gpus[0], replace(gpus[1], throttle_reasons=("power cap",)), gpus[2])
            panel.show(DashboardView(source=SourceInfo("LIVE", "test"), time=1.0, gpus=gpus))
            await pilot.pause()
            height = panel.size.height
            by_line = [panel.render_line(y) for y in range(height)]
            GpuPanel.LINE_BY_LINE = False
            try:
                panel.refresh()
                whole = [Panel.render_line(panel, y) for y in range(height)]
            finally:
                GpuPanel.LINE_BY_LINE = True
            assert [list(s) for s in by_line] == [list(s) for s in whole]
        app = _OneGpuPanel()
