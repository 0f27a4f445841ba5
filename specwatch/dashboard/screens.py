"""The dashboard's screens: the default screen's layout (header, verdict banner, tabs, footer), which
of its panels are on screen and handing them the view, and the help screen over it.

Widgets only render the DashboardView they are given. After each poll, only the panels that are on
screen (active tab, shown at this size, no modal on top, display not paused) get the new view, and
the few that are as cheap to keep current hidden (Panel.CURRENT_WHILE_HIDDEN: the event logs); a
tab that becomes visible is given the latest one before its first frame. While the display is
paused every panel on screen holds the view of the pause (`frozen`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Container, Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, TabbedContent, TabPane

from specwatch.widgets.engine import EnginePanel
from specwatch.widgets.events import EventLog
from specwatch.widgets.gpu import GpuPanel
from specwatch.widgets.health import HealthPanel
from specwatch.widgets.header import HeaderBar
from specwatch.widgets.help import HelpScreen
from specwatch.widgets.panel import Panel
from specwatch.widgets.roofline import RooflinePanel
from specwatch.widgets.speculation import SpeculationPanel
from specwatch.widgets.trends import TrendsPanel
from specwatch.widgets.verdict import VerdictBanner
from specwatch.widgets.view import DashboardView

if TYPE_CHECKING:
    from specwatch.dashboard.app import SpecwatchApp

TABS = ("overview", "gpus", "speculation", "roofline", "trends", "events", "health")


def compose_dashboard(header: HeaderBar) -> ComposeResult:
    """The default screen: the header and the banner above the tabs, so the verdict is never scrolled away."""
    yield header
    yield VerdictBanner(id="verdict")
    with TabbedContent(id="tabs", initial="overview"):
        with TabPane("Overview", id="overview"):
            with VerticalScroll():
                with Horizontal(id="overview-top"):
                    yield EnginePanel(id="ov-engine")
                    yield SpeculationPanel(id="ov-speculation")
                    yield RooflinePanel(id="ov-roofline", classes="wide-only")
                yield GpuPanel(id="ov-gpus", classes="roomy-only", summary_from=4)
                yield TrendsPanel(id="ov-trends", classes="roomy-only")
                yield EventLog(id="ov-events", classes="wide-only", latest=2)
        with TabPane("GPUs", id="gpus"):
            with VerticalScroll():
                yield GpuPanel(id="gpu-panel")
        with TabPane("Speculation", id="speculation"):
            with VerticalScroll():
                with Container(id="speculation-pair"):
                    yield SpeculationPanel(id="speculation-panel")
                    yield EnginePanel(id="engine-panel")
        with TabPane("Roofline", id="roofline"):
            yield RooflinePanel(id="roofline-panel")
        with TabPane("Trends", id="trends"):
            yield TrendsPanel(id="trends-panel", fill=True)
        with TabPane("Events", id="events"):
            with VerticalScroll():
                yield EventLog(id="events-panel")
        with TabPane("Health", id="health"):
            with VerticalScroll():
                yield HealthPanel(id="health-panel")
    yield Footer()


def show_help(app: SpecwatchApp) -> None:
    """The help screen over the dashboard: the keys of this session (a replay's, a recorder's) and
    what the panels show. Its panels get the latest view once it closes."""
    indexable = getattr(app.controller, "indexable_recording", None)  # n / N: one recording file's replay
    app.push_screen(HelpScreen(replay=app.replay, recorder=app.recording_control.recorder is not None,
                               jumps=indexable is not None and indexable() is not None),
                    callback=lambda _: app.call_after_refresh(app.refresh_visible))


def is_shown(widget: Panel) -> bool:
    """On screen now: it and every container above it displayed (inactive tabs are not)."""
    node: Any = widget
    while node is not None and not isinstance(node, Screen):
        if not node.display:
            return False
        node = node.parent
    return True


class PanelsOnScreen:
    """Hands the app's view to the default screen's panels that are on screen and do not hold it yet."""

    def __init__(self, app: SpecwatchApp) -> None:
        self.app = app
        # while paused, the view every panel on screen holds: a tab or panel shown during the pause
        # gets it too, not the view it last had (minutes older, beside a banner of the pause's time)
        self.frozen: DashboardView | None = None
        self._panels: tuple[Panel, ...] = ()  # the default screen's panels, found once (see panels())

    def panels(self) -> tuple[Panel, ...]:
        # compose() makes every panel once and none is added or removed later: a CSS query of the
        # whole DOM after every poll would find the same ones
        if not self._panels and self.app.screen_stack:
            self._panels = tuple(self.app.screen_stack[0].query(Panel))
        return self._panels

    def refresh(self, force: bool = False) -> None:
        """Hand the new view to the panels on screen; skipped while paused or under a modal."""
        app = self.app
        if not app.screen_stack or app.screen is not app.screen_stack[0]:
            return
        if app.paused and not force:
            # the header still says PAUSED, and where a replay stands; the rest stays at the pause
            header = app.header
            if header is not None and header.is_attached:
                header.show(app.view())
            self.hand(self.frozen or app.view(), but=header)
            return
        # The header line changes on every poll, and so do panels far below it (the GPU rows): one
        # frame draws them all. Textual renders only the changed lines of a frame (not the rows
        # between them), so a frame of the header's own only added a frame's fixed cost to every
        # poll: 5-10 % of the dashboard's CPU with one engine and with eight (benchmarks/
        # bench_terminal.py, side by side), and more bytes to the terminal.
        view = app.view()
        if app.paused:  # a step, seek or jump shown while paused: the pause now stands there
            self.frozen = view
        self.hand(view)

    def hand(self, view: DashboardView, but: Panel | None = None) -> None:
        """Give `view` to every panel on screen that does not hold it yet (`but` one), and to those
        kept current while hidden."""
        with self.app.batch_update():
            for panel in self.panels():
                if panel is not but and panel.view is not view and (panel.CURRENT_WHILE_HIDDEN or is_shown(panel)):
                    panel.show(view)

    def show_everywhere(self, view: DashboardView) -> None:
        for panel in self.panels():
            panel.show(view)

    def after_resize(self) -> None:
        self.refresh()
        for panel in self.panels():
            if is_shown(panel):
                panel.refresh(layout=True)
