"""The dashboard driven by scripted Snapshots (specwatch.collectors.synthetic) through in-memory sources.

Pilot tests assert on the messages the app posts and on the text its panels render; SVG snapshot
tests (pytest-textual-snapshot) pin four layouts. Determinism: the data are seeded and carry their
own times, the time zone is UTC, and no widget reads a clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import io
import os
import re
import shutil
import subprocess
import time
from typing import Any

import pytest
from rich.console import Console

from specwatch.advice.advisor import AdvisorConfig
from specwatch.dashboard.app import (
    INTERVALS,
    SnapshotIngested,
    SpecwatchApp,
    VerdictChanged,
)
from specwatch.perf import HingeParameters
from specwatch.readings.window import Window
from specwatch.advice.monitor import Monitor
from specwatch.telemetry.snapshot import Snapshot, SourceStatus, TargetSample
from specwatch.collectors.synthetic import SyntheticNode, generate
from specwatch.widgets.engine import EnginePanel
from specwatch.widgets.gpu import GpuPanel
from specwatch.widgets.header import HeaderBar
from specwatch.widgets.help import HelpScreen
from specwatch.widgets.speculation import SpeculationPanel
from specwatch.widgets.trends import TrendsPanel
from specwatch.widgets.verdict import VerdictBanner
from pilot_helpers import screen_text, until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("utc")]  # utc: conftest.py


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio


# An A100-like node with n-gram k=4 and L = 2.0: speculation pays at 8 running and costs past ~54.
STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                     context_per_sequence=0.0, gpus=2)
CONFIG = AdvisorConfig(method="ngram")
WINDOW_S = 10.0
LOW = [8.0] * 30  # ON, settled
FLIP = [8.0] * 25 + [100.0] * 300  # ON, then OFF through HOLD once the 5-minute dwell on ON has passed




class ScriptedSource:
    """The SnapshotSource protocol over an in-memory queue: the test decides what each read returns.

    `feed()` queues Snapshots; `end()` queues the end of the stream (read() returns None). With
    interval_s = 0 the app reads as fast as the queue is fed.
    """

    def __init__(self, snapshots: list[Snapshot] | None = None, *, end: bool = True, kind: str = "LIVE",
                 description: str = "scripted node", interval_s: float = 0.0) -> None:
        self.kind = kind
        self.description = description
        self.interval_s = interval_s
        self.queue: asyncio.Queue[Snapshot | None] | None = None
        self.pending: list[Snapshot | None] = list(snapshots or []) + ([None] if end else [])
        self.reads = 0
        self.closed = False

    def describe(self) -> str:
        return self.description

    def feed(self, snapshots: list[Snapshot]) -> None:
        for s in snapshots:
            self._queue().put_nowait(s)

    def end(self) -> None:
        self._queue().put_nowait(None)

    def _queue(self) -> asyncio.Queue:
        if self.queue is None:
            self.queue = asyncio.Queue()
            for item in self.pending:
                self.queue.put_nowait(item)
        return self.queue

    async def read(self) -> Snapshot | None:
        self.reads += 1
        return await self._queue().get()

    async def aclose(self) -> None:
        self.closed = True


class FakeReplay(ScriptedSource):
    """A replay source: the duck-typed controls, recording what the app asked of them."""

    def __init__(self, snapshots: list[Snapshot]) -> None:
        super().__init__(snapshots, end=False, kind="REPLAY", description="recording.swr (synthetic)",
                         interval_s=0.0)
        self.calls: list[tuple] = []
        self.speed = 1.0
        self.later = list(snapshots[len(snapshots) // 2:])
        self.pending = list(snapshots[: len(snapshots) // 2])

    def pause(self) -> None:
        self.calls.append(("pause",))

    def resume(self) -> None:
        self.calls.append(("resume",))

    def seek(self, t: float) -> None:
        self.calls.append(("seek", t))

    def step(self) -> Snapshot:
        self.calls.append(("step",))
        return self.later.pop(0)


class FakeRecorder:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.stopped = 0
        self.written: list[float] = []

    def start(self, path: str) -> None:
        self.started.append(path)

    def stop(self) -> None:
        self.stopped += 1

    def write(self, snapshot: Snapshot) -> None:
        self.written.append(snapshot.time)


def snapshots(load: list[float], node: SyntheticNode = NODE) -> list[Snapshot]:
    return list(generate(node, load))


def with_engines(snapshot: Snapshot, engines: int) -> Snapshot:
    target = snapshot.targets[0]
    copies = tuple(dataclasses.replace(target.engines[0], engine=str(i)) for i in range(engines))
    return dataclasses.replace(snapshot, targets=(dataclasses.replace(target, engines=copies),))


def make_app(source: Any, **kwargs: Any) -> SpecwatchApp:
    return data_clocked(SpecwatchApp(source, Monitor(WINDOW_S, CONFIG), **kwargs), kwargs)


def data_clocked(app: SpecwatchApp, kwargs: dict[str, Any] | None = None) -> SpecwatchApp:
    """The header's wall clock, for tests that do not drive it: the latest reading's time, so
    pictures and texts do not depend on when the test runs."""
    if not kwargs or "wall_clock" not in kwargs:
        app.wall_clock = lambda: app.latest.time if app.latest is not None else 0.0
    return app




def text_of(widget) -> str:
    """What a panel shows, as plain text at its current width."""
    width = max(20, widget.content_size.width or 80)
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None, legacy_windows=False)
    console.print(widget.render())
    return console.export_text()


def flat(text: str) -> str:
    """Text with its wrapping undone, for phrases that may wrap at narrow widths."""
    return " ".join(text.split())


# -- data through the pipeline ---------------------------------------------------------------------

async def test_scripted_run_posts_one_message_per_poll_and_the_monitors_verdict_changes():
    data = snapshots(FLIP)
    messages: list = []
    app = make_app(ScriptedSource(data))
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
    ingested = [m for m in messages if isinstance(m, SnapshotIngested)]
    changed = [m.change for m in messages if isinstance(m, VerdictChanged)]
    assert [m.snapshot.time for m in ingested] == [s.time for s in data]
    # the app uses the Monitor pipeline: the same Snapshots give the same changes as a headless run
    headless = Monitor(WINDOW_S, CONFIG)
    expected = [c for s in data for c in headless.ingest(s)]
    assert [(c.time, c.previous, c.verdict.speculation) for c in changed] == \
           [(c.time, c.previous, c.verdict.speculation) for c in expected]
    assert [c.verdict.speculation for c in changed][-1] == "off"
    assert "on" in [c.verdict.speculation for c in changed]


async def test_panels_render_the_verdict_and_the_numbers_under_it():
    app = make_app(ScriptedSource(snapshots(LOW)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        verdict = app.states[NODE.url].verdict
        banner = text_of(app.query_one(VerdictBanner))
        engine = text_of(app.query_one("#ov-engine", EnginePanel))
        speculation = text_of(app.query_one("#ov-speculation", SpeculationPanel))
        header = text_of(app.query_one(HeaderBar))
    assert verdict.speculation == "on"
    assert "█▀█ █▄ █" in banner  # ON in block letters
    assert f"confidence {100 * verdict.confidence:.0f}%" in banner
    assert f"expected {verdict.expected_speedup:.2f}×" in banner
    assert verdict.reasons[0][:60] in banner.replace("\n", " ").replace("  ", " ") or \
        verdict.reasons[0][:40] in banner
    assert re.search(r"running +8 +waiting +0", engine)
    assert "n-gram lookup  k=4  accepted 25%" in speculation
    assert "pos 1" in speculation and "50%" in speculation and "pos 4" in speculation
    assert f"break-even {verdict.break_even_length:.2f}" in speculation
    assert "synthetic-node:8000" in header and "vLLM 0.32.0" in header and "LIVE" in header
    assert "Llama-3.1-70B-Instruct" in header


async def test_speculation_off_node_shows_the_length_it_would_need():
    node = dataclasses.replace(NODE, speculation=False)
    app = make_app(ScriptedSource(snapshots(LOW, node)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        verdict = app.states[NODE.url].verdict
        speculation = text_of(app.query_one("#ov-speculation", SpeculationPanel))
    assert not verdict.configured
    assert "speculation is not configured" in speculation
    assert f"would pay above L {verdict.required_acceptance_length:.2f}" in speculation


async def test_unreachable_target_shows_each_sources_state_and_points_to_demo():
    url = "http://localhost:8000"
    down = Snapshot(
        time=1_800_000_000.0,
        targets=(TargetSample(url, "connection_refused",
                              f"vLLM at {url}: connection refused (is the server running?)"),),
        sources=(SourceStatus("nvml", "no_driver", "no NVIDIA driver (NVML Shared Library Not Found)"),
                 SourceStatus("dcgm http://localhost:9400/metrics", "absent", "no dcgm-exporter")),
    )
    app = make_app(ScriptedSource([down, dataclasses.replace(down, time=down.time + 1)]))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        banner = text_of(app.query_one(VerdictBanner))
        engine = text_of(app.query_one("#ov-engine", EnginePanel))
        screen = screen_text(app)
    # UNKNOWN in block letters (readable without colour), and once as a plain word for screen
    # readers and copy-paste
    assert "█ █ █▄ █ █ ▄▀" in banner and banner.count("UNKNOWN") == 1 and "verdict UNKNOWN" in banner
    assert "connection refused" in banner
    assert "specwatch demo" in banner  # visible at 80×24 without a tab switch
    assert f"vLLM at {url}: connection refused" in flat(engine)
    assert "nvml: no NVIDIA driver" in flat(engine)
    assert "specwatch demo" in flat(engine)
    assert "connection refused" in screen and "specwatch demo" in screen


SECOND = "http://10.0.0.8:8001"


def two_targets_one_dies(dies_at: int = 12, count: int = 20) -> list[Snapshot]:
    """Two vLLM servers on one node; the second answers until reading `dies_at`, then refuses."""
    out = []
    for i, snapshot in enumerate(snapshots(LOW[:count])):
        first = snapshot.targets[0]
        second = dataclasses.replace(first, url=SECOND) if i < dies_at else TargetSample(
            SECOND, "connection_refused", f"vLLM at {SECOND}: connection refused (is the server running?)")
        out.append(dataclasses.replace(snapshot, targets=(first, second)))
    return out


async def test_a_target_that_dies_is_down_since_with_its_last_good_reading_and_marked_from_the_other():
    data = two_targets_one_dies()
    app = make_app(ScriptedSource(data))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        header = text_of(app.query_one(HeaderBar))
        assert "10.0.0.8:8001 DOWN" in header  # seen from the first target, which is fine
        await pilot.press("t")
        await until(pilot, lambda: app.query_one(VerdictBanner).view.url == SECOND, "the second target shown")
        await pilot.pause()
        banner = flat(text_of(app.query_one(VerdictBanner)))
        screen = screen_text(app)
    died, last = clock_text(data[12].time), clock_text(data[11].time)
    assert f"DOWN since {died} (connection refused), last good reading" in banner, banner
    assert f"last good reading {last}" in banner, banner
    assert "specwatch demo" not in banner and "DOWN since" in screen


async def test_a_restart_is_logged_in_events():
    data = snapshots(LOW[:12])
    start = data[0].time - 3600.0
    restarted = data[6].time - 0.5
    data = [dataclasses.replace(s, targets=(dataclasses.replace(
        s.targets[0], process_start_time=start if i < 6 else restarted),)) for i, s in enumerate(data)]
    app = make_app(ScriptedSource(data))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.press("6")
        await pilot.pause()
        events = flat(text_of(app.query_one("#events-panel")))
    assert f"{clock_text(data[6].time)} server restarted (its process started {clock_text(restarted)})" in events
    assert events.count("server restarted") == 1


def clock_text(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


async def test_a_real_live_source_on_a_closed_port_still_opens_the_dashboard(unused_port):
    from specwatch.collectors.vllm import VllmSource
    from specwatch.collectors.sources import LiveSource

    url = f"http://127.0.0.1:{unused_port}"
    source = LiveSource(VllmSource([url], timeout_s=2.0), None, interval_s=30.0)
    app = SpecwatchApp(source, Monitor(WINDOW_S, CONFIG))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.polls >= 1, "one poll")
        await pilot.pause()
        engine = text_of(app.query_one("#ov-engine", EnginePanel))
        await pilot.press("q")
    # nothing read from it yet: the engine is not known, so it is "the server", not "vLLM"
    assert f"the server at {url}: connection refused" in flat(engine)


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- keys ------------------------------------------------------------------------------------------

async def test_pause_freezes_the_panels_while_collection_goes_on():
    data = snapshots(LOW)
    source = ScriptedSource(data[:10], end=False)
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.polls == 10, "10 polls")
        await pilot.pause()
        engine = app.query_one("#ov-engine", EnginePanel)
        frozen = engine.view.time
        await pilot.press("space")
        assert app.paused
        source.feed(data[10:20])
        await until(pilot, lambda: app.polls == 20, "20 polls while paused")
        await pilot.pause()
        assert engine.view.time == frozen  # collection went on, the panels did not move
        assert "PAUSED" in text_of(app.query_one(HeaderBar))
        await pilot.press("p")
        await pilot.pause()
        assert not app.paused
        assert engine.view.time == data[19].time


async def test_a_tab_shown_while_paused_shows_the_moment_of_the_pause_like_the_rest():
    data = snapshots(LOW)
    source = ScriptedSource(data[:10], end=False)
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.polls == 10, "10 polls")
        await pilot.press("5")  # the Trends tab, seen once before the pause
        await until(pilot, lambda: app.query_one("#trends-panel", TrendsPanel).view.time == data[9].time,
                    "the trends drawn at the tenth reading")
        await pilot.press("1")
        source.feed(data[10:15])
        await until(pilot, lambda: app.polls == 15, "15 polls")
        await until(pilot, lambda: app.query_one("#ov-engine", EnginePanel).view.time == data[14].time,
                    "the overview drawn at the fifteenth reading")
        await pilot.press("space")
        source.feed(data[15:20])
        await until(pilot, lambda: app.polls == 20, "20 polls while paused")
        for key, panel in (("5", "#trends-panel"), ("2", "#gpu-panel")):
            await pilot.press(key)
            shown = app.query_one(panel)
            # the tab shows the pause's reading (the overview's), not the one it last had, nor the
            # readings collected since
            await until(pilot, lambda: shown.view is not None and shown.view.time == data[14].time,
                        f"{panel} at the moment of the pause")
        await pilot.resize_terminal(120, 36)
        await pilot.pause()
        await pilot.pause()
        assert app.query_one("#trends-panel", TrendsPanel).view.time == data[14].time  # a resize keeps the pause


async def test_help_opens_and_closes():
    app = make_app(ScriptedSource(snapshots(LOW[:3])))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "pause the display" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize("size", [(60, 18), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_help_wraps_each_key_under_its_description_and_its_prose_as_paragraphs(size):
    """At 80 columns and below the help must not fight soft wrap: a key's description that wraps
    goes on under the description, never under the key, and the prose wraps as paragraphs (no
    line of half a sentence ended early where the next word would have fitted)."""
    from specwatch.widgets.help import KEYS

    app = make_app(FakeReplay(snapshots(LOW[:4])))
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
        await pilot.pause()
        # the lines inside the border, without its padding and the scroll bar
        inside = [line[2:-1].rstrip(" ▁▂▃▄▅▆▇█") for line in screen_text(app).splitlines() if line.startswith("│")]
    keys = {key for key, _ in KEYS}
    indent = None
    for line in inside:
        if line.startswith("  ") and line[2:].split("  ")[0].strip() in keys:
            indent = len(line) - len(line[2:].split("  ", 1)[1].lstrip()) if "  " in line[2:] else None
    assert indent is not None, inside
    blank = inside.index("") if "" in inside else len(inside)  # at 60×18 the prose is below, scrolled to
    key_rows = inside[inside.index("Keys") + 1:blank]
    for line in key_rows:
        first = line[2:].split("  ")[0].strip()
        assert first in keys or (line[:indent].strip() == "" and line[indent:].strip()), (line, key_rows)
    prose = inside[blank + 1:]
    width = max(len(line) for line in inside)
    for line, after in zip(prose, prose[1:]):
        if line and after:  # within a paragraph, the next line's first word did not fit on this one
            assert len(line) + 1 + len(after.split()[0]) > width, (line, after)


async def test_tabs_switch_and_only_shown_panels_are_given_views():
    app = make_app(ScriptedSource(snapshots(LOW)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        trends = app.query_one("#trends-panel", TrendsPanel)
        gpus = app.query_one("#gpu-panel", GpuPanel)
        wide_gpus = app.query_one("#ov-gpus", GpuPanel)
        # never on screen so far: the hidden tab and the wide-only overview panel hold the first
        # (empty) view only
        assert trends.view.time is None and gpus.view.time is None and wide_gpus.view.time is None
        await pilot.press("2")
        await pilot.pause()
        assert app.query_one("#tabs").active == "gpus"
        assert gpus.view.time == app.latest.time
        assert "A100-SXM4-80GB" not in text_of(gpus)  # narrow: no name column
        assert "76/80 GB" in text_of(gpus)
        await pilot.press("5")
        await pilot.pause()
        assert app.query_one("#tabs").active == "trends"
        assert trends.view.time == app.latest.time
        assert "running" in text_of(trends) and "speedup" in text_of(trends)
        assert wide_gpus.view.time is None


async def test_interval_keys_walk_the_interval_steps_and_tell_the_source():
    source = ScriptedSource(snapshots(LOW[:3]), interval_s=1.0)
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("minus")
        assert app.interval_s == 2.0 and source.interval_s == 2.0
        await pilot.press("minus")
        assert app.interval_s == 5.0
        await pilot.press("plus")
        await pilot.press("plus")
        await pilot.press("plus")
        assert app.interval_s == 0.5 and source.interval_s == 0.5
        for _ in range(len(INTERVALS)):
            await pilot.press("plus")
        assert app.interval_s == INTERVALS[0]
        await pilot.pause()
        assert f" {INTERVALS[0]:g} s " in text_of(app.query_one(HeaderBar))


async def test_quit_closes_the_source_and_returns_zero():
    source = ScriptedSource(snapshots(LOW[:3]))
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.press("q")
        await pilot.pause()
    assert source.closed
    assert app.return_value == 0


async def test_command_palette_switches_tabs():
    app = make_app(ScriptedSource(snapshots(LOW[:3])))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"show roofline")
        await until(pilot, lambda: "Show roofline" in screen_text(app), "the command is offered")
        await pilot.press("enter")
        await until(pilot, lambda: app.query_one("#tabs").active == "roofline", "the roofline tab")


# -- selectors, recording, replay ------------------------------------------------------------------

async def test_target_and_engine_selectors():
    second = dataclasses.replace(NODE, url="http://node-b:8000", version="0.31.1")
    a, b = snapshots(LOW[:12]), snapshots(LOW[:12], second)
    merged = [dataclasses.replace(with_engines(x, 3), targets=with_engines(x, 3).targets + y.targets)
              for x, y in zip(a, b)]
    app = make_app(ScriptedSource(merged))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        header = app.query_one(HeaderBar)
        assert "(1/2)" in text_of(header) and "synthetic-node:8000" in text_of(header)
        engine = app.query_one("#ov-engine", EnginePanel)
        assert "all 3 engines" in text_of(engine)
        await pilot.press("e")
        await pilot.pause()
        assert app.engine == f"{NODE.model_name}/0"
        assert f"{NODE.model_name}/0" in text_of(engine)
        await pilot.press("t")
        await pilot.pause()
        assert "(2/2)" in text_of(header) and "node-b:8000" in text_of(header) and "0.31.1" in text_of(header)
        assert app.engine is None


async def test_the_per_engine_view_shows_that_engines_own_lifetime_length():
    # two engines behind one server: one drafts at L = 1 + 0.5 + 0.25 + 0.15 + 0.1 = 2.0, the other at
    # L = 1 + 0.9 + 0.8 + 0.7 + 0.6 = 4.0; the total lies between
    good = dataclasses.replace(NODE, per_position=(0.9, 0.8, 0.7, 0.6))
    merged = []
    for x, y in zip(snapshots(LOW[:12]), snapshots(LOW[:12], good)):
        first, second = x.targets[0].engines[0], dataclasses.replace(y.targets[0].engines[0], engine="1")
        merged.append(dataclasses.replace(x, targets=(dataclasses.replace(x.targets[0], engines=(first, second)),)))
    app = make_app(ScriptedSource(merged))

    def lifetime_shown() -> float:
        text = flat(text_of(app.query_one("#ov-speculation", SpeculationPanel)))
        return float(re.search(r"lifetime L (\d+\.\d+)", text).group(1))

    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        total = lifetime_shown()
        shown = {}
        for _ in range(2):
            await pilot.press("e")
            await pilot.pause()
            shown[app.engine] = lifetime_shown()
    assert shown[f"{NODE.model_name}/0"] == pytest.approx(2.0, abs=0.05)
    assert shown[f"{NODE.model_name}/1"] == pytest.approx(4.0, abs=0.1)
    assert 2.1 < total < 3.9


async def test_recording_key_drives_the_recorder():
    data = snapshots(LOW[:12])
    source = ScriptedSource(data[:4], end=False)
    recorder = FakeRecorder()
    app = make_app(source, recorder=recorder, record_path="/tmp/specwatch-test.rec")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.polls == 4, "4 polls")
        await pilot.press("r")
        await until(pilot, lambda: app.recording is not None, "recording")
        assert recorder.started == ["/tmp/specwatch-test.rec"]
        assert "● REC" in text_of(app.query_one(HeaderBar))
        source.feed(data[4:8])
        await until(pilot, lambda: app.polls == 8, "8 polls")
        await pilot.press("r")
        await until(pilot, lambda: app.recording is None, "stopped")
        source.feed(data[8:])
        await until(pilot, lambda: app.polls == 12, "12 polls")
    assert recorder.written == [s.time for s in data[4:8]]
    assert recorder.stopped == 1


async def test_recording_key_without_a_recorder_says_so():
    app = make_app(ScriptedSource(snapshots(LOW[:3])))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        assert app.recording is None
        assert any("no recorder" in n.message for n in app._notifications)


async def test_replay_controls_pause_step_seek_and_speed():
    data = snapshots(LOW[:20])
    source = FakeReplay(data)
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.polls == 10, "the first half")
        await pilot.pause()
        header = app.query_one(HeaderBar)
        assert "REPLAY" in text_of(header) and "SYNTHETIC" in text_of(header)
        assert "2027-01-15 08:00:09" in text_of(header)  # the replay's own time, not the wall clock
        await pilot.press("space")
        assert source.calls[-1] == ("pause",)
        await pilot.press("full_stop")
        await until(pilot, lambda: app.polls == 11, "one step")
        await pilot.pause()
        assert source.calls[-1] == ("step",)
        assert app.query_one("#ov-engine", EnginePanel).view.time == data[10].time  # the step is shown
        await pilot.press("left")
        # paused, the seek starts a window early (so the verdict has its window) and shows the
        # first reading at or after the new position
        await until(pilot, lambda: ("seek", data[10].time - 10.0 - WINDOW_S) in source.calls, "a seek")
        await until(pilot, lambda: app.polls == 12, "the reading at the seek")
        assert source.calls[-2:] == [("seek", data[10].time - 10.0 - WINDOW_S), ("step",)]
        await pilot.press("right_square_bracket")
        assert source.speed == 2.0
        await pilot.press("space")
        assert source.calls[-1] == ("resume",)


async def test_an_ended_replay_rewinds_and_paused_arrows_move_the_screen(tmp_path):
    from specwatch.collectors.replay import ReplaySource
    from specwatch.recording import RecordingHeader, write_recording

    data = snapshots(LOW[:40])
    path = tmp_path / "incident.swrec"
    write_recording(path, RecordingHeader(data="synthetic", host="node-1", interval_s=1.0), data)
    source = ReplaySource(path, speed=100.0)
    app = make_app(source)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.ended, "the replay to end")
        end = app.latest.time
        assert end == data[-1].time and "ENDED" in text_of(app.query_one(HeaderBar))
        await pilot.press("space")  # pause, then walk back through the incident
        await pilot.press("left")
        await until(pilot, lambda: app.latest.time == end - 10.0, "the screen 10 s back")
        assert not app.ended and "ENDED" not in text_of(app.query_one(HeaderBar))
        await pilot.press("left")
        await until(pilot, lambda: app.latest.time == end - 20.0, "the screen 20 s back")
        await pilot.pause()
        assert app.query_one("#ov-engine", EnginePanel).view.time == end - 20.0  # shown although paused
        await pilot.press("right")
        await until(pilot, lambda: app.latest.time == end - 10.0, "the screen 10 s forward")
        await pilot.press("space")  # resume: plays out to the end again
        await until(pilot, lambda: app.ended and app.latest.time == end, "the replay to end again")
        # ended and not paused: ← plays again from 10 s before the end
        polls = app.polls
        await pilot.press("left")
        await until(pilot, lambda: app.ended and app.polls >= polls + 10, "a second play-out from 10 s back")


async def test_a_pause_that_lands_before_the_polls_read_begins_still_lets_the_arrows_move_the_screen(tmp_path):
    """← on an ended replay starts a poll; a pause that lands before that poll's read has begun
    must give the read up as it does one already waiting, or ← and step find a poll in flight and
    do nothing (the tmux test met this under load)."""
    from specwatch.collectors.replay import ReplaySource
    from specwatch.recording import RecordingHeader, write_recording

    data = snapshots(LOW[:40])
    path = tmp_path / "incident.swrec"
    write_recording(path, RecordingHeader(data="synthetic", host="node-1", interval_s=1.0), data)
    app = make_app(ReplaySource(path, speed=100.0))
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.ended, "the replay to end")
        end = app.latest.time
        app.source.seek(end - 10.0)
        app.ended = False
        app.controller.start()  # the poll's worker is scheduled, its read not yet begun...
        app.action_toggle_pause()  # ...when the pause lands
        await pilot.press("left")
        await until(pilot, lambda: app.latest.time == end - 10.0, "the screen 10 s back")
        await pilot.press("full_stop")
        await until(pilot, lambda: app.latest.time == end - 9.0, "one step on")


async def test_arrows_pressed_while_a_reading_is_taken_in_are_not_lost(tmp_path):
    """Each ← of a paused replay moves the screen ten seconds back, even when pressed before the
    previous one's reading is shown: the press waits for it instead of being dropped."""
    from specwatch.collectors.replay import ReplaySource
    from specwatch.recording import RecordingHeader, write_recording

    data = snapshots([8.0] * 60)
    path = tmp_path / "incident.swrec"
    write_recording(path, RecordingHeader(data="synthetic", host="node-1", interval_s=1.0), data)
    app = make_app(ReplaySource(path, speed=100.0))
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.ended, "the replay to end")
        end = app.latest.time
        await pilot.press("space")
        for _ in range(3):  # three presses at once: each starts its worker before any reading is shown
            app.action_seek(-1)
        await until(pilot, lambda: app.latest.time == end - 30.0 and not app.controller.in_flight,
                    "the screen 30 s back after three presses")


# -- SVG snapshots ---------------------------------------------------------------------------------

def snapshot_app(node: SyntheticNode, load: list[float]) -> SpecwatchApp:
    return make_app(ScriptedSource(snapshots(load, node)), history_minutes=1.0)


async def _played_out(pilot) -> None:
    """Determinism: the source has ended, every panel on screen holds the final view, and the
    layout has settled (a panel whose line count changed is laid out on a later refresh)."""
    app = pilot.app
    await until(pilot, lambda: app.ended, "the source ended")
    await until(pilot, lambda: all(p.view is app.view() for p in app.panels() if app.is_shown(p)),
                "every panel on screen shows the final view")
    for _ in range(5):
        await pilot.pause(0.05)
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize(
    ("node", "load", "size"),
    [
        pytest.param(dataclasses.replace(NODE, gpus=0), LOW, (120, 36), id="no_gpu"),
        pytest.param(dataclasses.replace(NODE, speculation=False), LOW, (120, 36), id="speculation_off"),
    ],
)
def test_layouts_snapshot(snap_compare, node, load, size):
    assert snap_compare(snapshot_app(node, load), terminal_size=size, run_before=_played_out)


SIZES = [(80, 24), (120, 36), (200, 50)]
TAB_KEYS = {"overview": "1", "gpus": "2", "speculation": "3", "roofline": "4", "trends": "5", "events": "6",
            "health": "7"}
# An 8-GPU node (the usual home of a 70B model) with an SLO given, so goodput shows too.
EIGHT_GPUS = dataclasses.replace(NODE, gpus=8)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("tab", list(TAB_KEYS))
def test_tab_snapshot(snap_compare, tab, size):
    """Every tab at the three designed sizes: at 80×24 no figure cut, at 120×36 more panels at once,
    at 200×50 charts that use the width."""
    config = AdvisorConfig(method="ngram", slo_ttft_s=2.0, slo_tpot_s=0.05)
    # six minutes of history: the load's step from 8 to 100 running is on the trend charts
    app = data_clocked(SpecwatchApp(ScriptedSource(snapshots(FLIP, EIGHT_GPUS)), Monitor(WINDOW_S, config),
                                    history_minutes=6.0))

    async def on_the_tab(pilot) -> None:
        await _played_out(pilot)
        if tab != "overview":
            await pilot.press(TAB_KEYS[tab])
            await until(pilot, lambda: app.query_one("#tabs").active == tab, f"the {tab} tab shown")
            await until(pilot, lambda: all(p.view is app.view() for p in app.panels() if app.is_shown(p)),
                        "every panel on the tab shows the final view")
            for _ in range(5):
                await pilot.pause(0.05)
        if tab == "health":
            text = text_of(app.query_one("#health-panel"))
            assert "goodput" in text and "energy" in text and "no SLO given" not in text

    assert snap_compare(app, terminal_size=size, run_before=on_the_tab)


async def test_at_80x24_no_tab_cuts_a_figure_and_at_120x36_an_8_gpu_overview_keeps_its_trends():
    config = AdvisorConfig(method="ngram", slo_ttft_s=2.0, slo_tpot_s=0.05)

    def app() -> SpecwatchApp:
        return data_clocked(SpecwatchApp(ScriptedSource(snapshots(FLIP, EIGHT_GPUS)), Monitor(WINDOW_S, config),
                                         history_minutes=6.0))

    small = app()
    cut: dict[str, list[str]] = {}
    async with small.run_test(size=(80, 24)) as pilot:
        await _played_out(pilot)
        for tab, key in TAB_KEYS.items():
            await pilot.press(key)
            await until(pilot, lambda: all(p.view is small.view() for p in small.panels() if small.is_shown(p)),
                        f"the {tab} tab drawn")
            await pilot.pause(0.05)
            # below the header (whose model name gives way to the clock by design), no line ends in "…"
            lines = screen_text(small).splitlines()[1:]
            cut[tab] = [line for line in lines if "…" in line.replace("▁…█", "")]
    assert cut == {tab: [] for tab in TAB_KEYS}

    medium = app()
    async with medium.run_test(size=(120, 36)) as pilot:
        await _played_out(pilot)
        screen = screen_text(medium)
    assert "8× A100-SXM4-80GB  SM" in screen  # the GPUs summed up in two lines, not eight rows
    assert "tensor activity" in screen and "now scale" in screen  # so the trends' last row and axis show


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_unreachable_node_snapshot(snap_compare, size):
    """A node whose only server refuses from the first reading: what is down and why, and where to
    look instead, at every size."""
    url = "http://localhost:8000"
    down = Snapshot(
        time=1_800_000_000.0,
        targets=(TargetSample(url, "connection_refused",
                              f"vLLM at {url}: connection refused (is the server running?)"),),
        sources=(SourceStatus("nvml", "no_driver", "no NVIDIA driver (NVML Shared Library Not Found)"),),
    )
    app = make_app(ScriptedSource([down, dataclasses.replace(down, time=down.time + 1)]), history_minutes=1.0)
    assert snap_compare(app, terminal_size=size, run_before=_played_out)


@pytest.mark.parametrize("size", [(80, 24), (120, 36), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("shown", ["the_live_one", "the_down_one"])
def test_multi_target_with_one_down_snapshot(snap_compare, shown, size):
    app = make_app(ScriptedSource(two_targets_one_dies()), history_minutes=1.0)

    async def played_out_then_select(pilot) -> None:
        await _played_out(pilot)
        if shown == "the_down_one":
            await pilot.press("t")
            await until(pilot, lambda: all(p.view is app.view() for p in app.panels() if app.is_shown(p)),
                        "every panel on screen shows the down target")
            for _ in range(5):
                await pilot.pause(0.05)

    assert snap_compare(app, terminal_size=size, run_before=played_out_then_select)


async def test_no_color_keeps_the_verdict_readable(monkeypatch):
    """Under NO_COLOR the banner's colour is gone; the block letters and the flags still carry it."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(ScriptedSource(snapshots(FLIP)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        assert app.no_color
        screen = screen_text(app)
    assert "█▀█ █▀▀ █▀▀" in screen  # OFF
    assert "▶ acceptance length" in screen


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_verdict_is_a_plain_word_once_beside_its_block_letters(size):
    """Screen readers and copy-paste get the verdict as a word; the block letters stay for the eye.
    The word is there once, in the banner's first row, not repeated in the line under it."""
    app = make_app(ScriptedSource(snapshots(FLIP)))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        banner = text_of(app.query_one(VerdictBanner))
    assert app.states[NODE.url].verdict.speculation == "off"
    rows = banner.splitlines()
    assert "█▀█ █▀▀ █▀▀" in rows[0]
    assert re.findall(r"\bOFF\b", banner) == ["OFF"]
    assert re.search(r"verdict:? OFF", rows[0])
    assert "expected 0." in rows[0]  # the speedup still fits beside it


@pytest.mark.parametrize("width", [60, 80, 120])
def test_an_ended_and_paused_replay_header_keeps_every_label_whole(width):
    """A post-mortem pauses a replay that has ended: the header says REPLAY, SYNTHETIC, the reading's
    time, ENDED and PAUSED whole at 60 columns too. While paused the speed says nothing, so it is the
    first to give way."""
    from specwatch.widgets.header import header_text
    from specwatch.widgets.view import DashboardView, SourceInfo

    source = SourceInfo("REPLAY", "incident.swrec", synthetic=True, paused=True, ended=True, replay_speed=100.0)
    line = header_text(DashboardView(source=source, time=1_800_000_119.0), width).plain
    for label in ("REPLAY", "SYNTHETIC", "2027-01-15 08:01:59", "ENDED", "‖ PAUSED"):
        assert label in line, line
    assert ("×100" in line) == (width >= 80)
    playing = dataclasses.replace(source, paused=False)
    assert "×100" in header_text(DashboardView(source=playing, time=1_800_000_119.0), width).plain


def test_every_flag_the_advisor_raises_has_words_on_the_banner():
    """The banner names each flag in the operator's words, never the identifier the JSON and the
    exporter carry (a sweep of another model read "⚠ sweep_mismatch")."""
    from specwatch.outputs.export_schema import KNOWN_FLAGS
    from specwatch.widgets.verdict import flag_words

    words = dict(zip(KNOWN_FLAGS, flag_words(KNOWN_FLAGS)))
    assert {flag: shown for flag, shown in words.items() if "_" in shown} == {}
    assert len(set(words.values())) == len(words)  # no two flags read alike


async def test_at_a_long_interval_the_header_clock_ticks_and_counts_down_without_repainting_panels():
    """At 30 s polling the screen must not look hung between polls: the header's clock and a
    countdown move each second. Time is the test's: the tick is called with a clock it sets."""
    from specwatch.widgets.format import clock

    now = [1_800_000_000.0]
    source = ScriptedSource(snapshots(LOW[:2])[:1], end=False, interval_s=30.0)
    app = make_app(source, wall_clock=lambda: now[0])
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.polls == 1 and app.controller.next_poll_at is not None, "the next poll armed")
        await pilot.pause()
        due = app.controller.next_poll_at
        views = {panel.id: panel.view for panel in app.panels()}
        header = app.query_one(HeaderBar)
        texts = []
        for left in (18.2, 17.2, 0.0):
            now[0] = due - left
            app.tick_clock()
            texts.append(text_of(header))
        assert not header.tick(now[0], due)  # the same second again: nothing to paint
        assert {panel.id: panel.view for panel in app.panels()} == views  # no panel was given a view
        assert all(panel.view is views[panel.id] for panel in app.panels())
        # back to 1 s polling: the polls move the clock (the reading's time) and the tick stands aside
        app.set_interval_s(1.0)
        now[0] += 3600.0
        app.tick_clock()
        await pilot.pause()
        short = text_of(header)
    assert "every 30 s, next in 19 s" in texts[0] and clock(due - 18.2) in texts[0]
    assert "next in 18 s" in texts[1] and clock(due - 17.2) in texts[1]
    assert "reading…" in texts[2]
    assert "every 1 s" in short and "next" not in short and clock(app.latest.time) in short
    assert clock(now[0]) not in short


async def test_below_a_long_interval_the_clock_timer_does_not_fire_at_all():
    """At 1 s polling the polls move the header's clock: the once-a-second timer is paused (an idle
    wake-up a second for nothing), and it runs again from LONG_INTERVAL_S."""
    source = ScriptedSource(snapshots(LOW[:2])[:1], end=False, interval_s=1.0)
    app = make_app(source)
    ticks = [0]
    tick_clock = app.tick_clock

    def counted() -> None:  # the timer is set on mount with the app's tick_clock: this one
        ticks[0] += 1
        tick_clock()

    app.tick_clock = counted  # type: ignore[method-assign]
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.polls == 1, "the first reading shown")
        await pilot.pause(1.5)
        assert ticks[0] == 0
        app.set_interval_s(30.0)
        await until(pilot, lambda: ticks[0] >= 2, "the clock ticking at 30 s polling", rounds=500)
        app.set_interval_s(1.0)
        stopped = ticks[0]
        await pilot.pause(1.5)
        assert ticks[0] == stopped


async def test_a_replay_header_shows_the_readings_time_not_the_wall_clock():
    from specwatch.widgets.format import clock, date_clock

    data = snapshots(LOW[:6])
    wall = data[-1].time + 12 * 3600.0  # half a day after the recording
    app = make_app(FakeReplay(data), wall_clock=lambda: wall)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.polls == 3, "the replay's first readings")
        await pilot.pause()
        app.tick_clock()  # not scheduled for a replay; even when called it changes no time shown
        header = text_of(app.query_one(HeaderBar))
    assert date_clock(app.latest.time) in header
    assert clock(wall) not in header and "next in" not in header


# -- one GPU spec: the advisor's, clock-capped -----------------------------------------------------

H100_NODE = dataclasses.replace(NODE, gpu_name="NVIDIA H100 80GB HBM3")


def clocked(data: list[Snapshot], reasons: tuple[str, ...]) -> list[Snapshot]:
    """Every GPU at half its maximum SM clock, for the given clock-event reasons."""
    return [dataclasses.replace(s, gpus=tuple(
        dataclasses.replace(g, values={**g.values, "sm_clock_mhz": 990.0, "sm_clock_max_mhz": 1980.0},
                            throttle_reasons=reasons) for g in s.gpus)) for s in data]


def ridge_shown(app: SpecwatchApp) -> float:
    match = re.search(r"ridge (\d+) FLOP/byte, ([^\n]*)", flat(text_of(app.query_one("#roofline-panel"))))
    assert match, text_of(app.query_one("#roofline-panel"))
    return float(match.group(1))


@pytest.mark.parametrize(("reasons", "clock_share"), [(("power cap",), 0.5), (("idle",), 1.0)])
async def test_a_power_capped_gpu_moves_the_roofline_ridge_with_the_advisors_spec(reasons, clock_share):
    """H100 SXM datasheet: 989.4 TFLOP/s dense BF16 over 3.35 TB/s is a ridge of 295 FLOP/B. Held at
    half its clock by a power cap it computes half as fast: 148. An idle GPU's slow clock is not a
    cap, and the ridge stays put."""
    app = make_app(ScriptedSource(clocked(snapshots(LOW[:12], H100_NODE), reasons)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.press("4")
        await until(pilot, lambda: app.query_one("#roofline-panel").view is app.view(), "the roofline shown")
        shown = ridge_shown(app)
        panel = flat(text_of(app.query_one("#roofline-panel")))
        (state,) = app.states.values()
    expected = 989.4e12 * clock_share / 3.35e12
    assert shown == round(expected)
    assert state.verdict.gpu_spec.ridge == pytest.approx(expected, rel=1e-3)  # what the bound was judged with
    assert ("at 50% clock" in panel) == (clock_share < 1)


async def test_the_overview_roofline_is_not_redrawn_for_signal_numbers_it_does_not_show():
    """Every evaluation moves the numbers behind the bound signals. The overview's roofline shows
    the bound in words only: it is repainted when those words change, not for the numbers; the
    Roofline tab, which has the room to show the numbers, is."""
    app = make_app(ScriptedSource(snapshots(LOW[:12], H100_NODE)))
    async with app.run_test(size=(160, 45)) as pilot:
        await _played_out(pilot)
        overview = app.query_one("#ov-roofline")
        view = app.view()
        assert overview.view is view
        bound = view.state.verdict.bound
        assert any(s.detail for s in bound.signals)

        def with_bound(signals) -> object:
            verdict = dataclasses.replace(view.state.verdict, bound=dataclasses.replace(bound, signals=signals))
            return dataclasses.replace(view, state=dataclasses.replace(view.state, verdict=verdict))

        moved = with_bound(tuple(dataclasses.replace(s, detail=s.detail + " (moved)") for s in bound.signals))
        assert not overview.show(moved)
        first = bound.signals[0]
        other = "compute" if first.state != "compute" else "memory"
        turned = with_bound((dataclasses.replace(first, state=other),) + tuple(bound.signals[1:]))
        assert overview.show(turned)
        await pilot.press("4")
        tab = app.query_one("#roofline-panel")
        await until(pilot, lambda: tab.view is app.view(), "the Roofline tab shown")
        assert tab.content_size.height >= 18
        assert tab.show(moved)


async def test_only_a_cap_that_costs_work_is_called_throttling():
    idle, capped = clocked(snapshots(LOW[:4]), ("idle",)), clocked(snapshots(LOW[:4]), ("power cap",))
    source = ScriptedSource(idle[:2], end=False)
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: app.polls == 2 and app.query_one("#gpu-panel").view is app.view(),
                    "two idle readings on the GPU tab")
        assert "throttled" not in text_of(app.query_one("#gpu-panel"))
        source.feed(capped[2:])
        source.end()
        await until(pilot, lambda: app.ended and app.query_one("#gpu-panel").view is app.view(),
                    "the capped readings on the GPU tab")
        assert "throttled: 0 (power cap), 1 (power cap)" in text_of(app.query_one("#gpu-panel"))


# -- recording on its own path ---------------------------------------------------------------------

class FullDiskRecorder(FakeRecorder):
    """Writes `room` readings, then every write fails as a full disk does."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, snapshot: Snapshot) -> None:
        if len(self.written) >= self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write(snapshot)


async def test_a_full_disk_stops_the_recording_and_the_panels_keep_updating(caplog):
    data = snapshots(LOW[:16])
    source = ScriptedSource(data[:2], end=False)
    recorder = FullDiskRecorder(room=3)
    app = make_app(source, recorder=recorder, record_path="specwatch-full.swrec")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.polls == 2, "2 polls")
        await pilot.press("r")
        await until(pilot, lambda: app.recording is not None, "recording")
        source.feed(data[2:])
        source.end()
        await until(pilot, lambda: app.ended and app.recording_stopped is not None, "the end, and the failure")
        await until(pilot, lambda: app.query_one(HeaderBar).view is app.view(), "the header redrawn")
        # the panels are handed the view in the frame after the header's
        await until(pilot, lambda: app.query_one("#ov-engine", EnginePanel).view is app.view(), "the panels")
        header = text_of(app.query_one(HeaderBar))
        assert app.polls == len(data) and app.last_error is None  # every reading reached the panels
        assert app.query_one("#ov-engine", EnginePanel).view.time == data[-1].time
        assert app.recording is None
        assert "recording stopped: No space left on device" in header and "● REC" not in header
        assert any(n.title == "recording stopped" for n in app._notifications)
    assert recorder.written == [s.time for s in data[2:5]]
    assert any("stopped: No space left on device" in r.getMessage() for r in caplog.records)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 256 KiB tmpfs, nearly filled; skipped where this machine does not let us mount one."""
    mount = tmp_path / "small"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here: {result.stderr.decode().strip()}")
    try:
        stats = os.statvfs(mount)
        # leave a few pages free, so that a recording fills them within a few seconds of polls
        (mount / "filler").write_bytes(b"\0" * max(0, stats.f_bavail * stats.f_frsize - 12 * 1024))
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # never leave a mount behind


async def test_a_real_full_tmpfs_stops_the_recording_and_the_panels_keep_updating(small_tmpfs):
    from specwatch.dashboard.recorder import SessionRecorder
    from specwatch.recording import RecordingHeader, read_recording

    path = small_tmpfs / "full.swrec"
    source = ScriptedSource([], end=False)
    app = make_app(source, recorder=SessionRecorder(RecordingHeader(data="synthetic"), small_tmpfs),
                   record_path=str(path))
    # varied load and seeds keep the compressor from shrinking the readings to nothing
    data = [s for seed in range(40) for s in generate(NODE, [float(1 + (seed * 7 + i) % 60) for i in range(100)],
                                                      seed=seed, start_time=1.8e9 + seed * 100.0)]
    fed = 0
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: app.recording is not None, "recording")
        # first a small flush that fits (the writer flushes once a second of wall time), so that
        # the file holds something when the disk fills
        while path.stat().st_size == 0 and fed < 200:
            source.feed(data[fed:fed + 1])
            fed += 1
            await until(pilot, lambda: app.polls == fed, f"{fed} polls")
            await pilot.pause(0.05)
        assert path.stat().st_size > 0 and app.recording_stopped is None
        while app.recording_stopped is None and fed < len(data):
            source.feed(data[fed:fed + 50])
            fed += 50
            await until(pilot, lambda: app.polls == fed, f"{fed} polls", rounds=20_000)
            await pilot.pause(0.05)  # wall time: the writer flushes once a second
        assert app.recording_stopped == "the disk is full", f"{fed} readings fed, the disk never filled"
        source.feed(data[fed:fed + 10])
        fed += 10
        await until(pilot, lambda: app.polls == fed, "the readings after the failure")
        await until(pilot, lambda: app.query_one(HeaderBar).view is app.view(), "the header redrawn")
        assert "recording stopped: the disk is full" in text_of(app.query_one(HeaderBar))
        assert app.last_error is None and app.recording is None
        await pilot.press("q")
    recording = read_recording(path)  # cut back to its last complete flush: valid
    assert 0 < len(recording.snapshots) < fed
    assert recording.snapshots == data[: len(recording.snapshots)]


async def test_a_recording_is_finished_however_the_app_ends(tmp_path):
    """No `q`: the app is torn down from outside, and the file still holds every reading recorded."""
    from specwatch.dashboard.recorder import SessionRecorder
    from specwatch.recording import RecordingHeader, read_recording

    data = snapshots(LOW[:10])
    source = ScriptedSource(data[:2], end=False)
    path = tmp_path / "ended.swrec"
    app = make_app(source, recorder=SessionRecorder(RecordingHeader(data="synthetic"), tmp_path),
                   record_path=str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.polls == 2, "2 polls")
        await pilot.press("r")
        await until(pilot, lambda: app.recording is not None, "recording")
        source.feed(data[2:])
        await until(pilot, lambda: app.polls == len(data), "every poll")
    assert read_recording(path).snapshots == data[2:]


async def test_the_view_carries_the_targets_health_over_the_evaluated_window():
    app = make_app(ScriptedSource(snapshots(LOW)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        health = app.view().health
        # over the window of the Monitor's last evaluation, as every window figure on screen
        tw = app.states[NODE.url].window
    evaluated = Window(app.monitor.window.seconds)
    for snapshot in snapshots(LOW):
        if snapshot.time <= tw.time:
            evaluated.add(snapshot)
    assert evaluated.target(NODE.url).increases.counter("vllm:generation_tokens") == \
        tw.increases.counter("vllm:generation_tokens")
    # the synthetic node's requests: 1000-token prompts, 300-token outputs, all ending at a stop
    assert health["request_shape"]["input_output_ratio"] == pytest.approx(1000 / 300)
    assert health["finish_reasons"] == {"stop": pytest.approx(tw.increases.counter("vllm:request_success"))}
    joules, _ = evaluated.gpu_energy()
    assert health["energy"]["joules_per_token"] == pytest.approx(
        sum(joules.values()) / tw.increases.counter("vllm:generation_tokens"))
    assert health["speculation_toggled_to"] == "off"


def test_the_roofline_bound_line_says_each_signal_in_fewer_words_rather_than_being_cut():
    """The overview's roofline at 200×50 is 63 columns wide: "… · tokens/step says memory" was cut
    to "tokens/step says…"."""
    from specwatch.perf import BoundEstimate, BoundSignal
    from specwatch.widgets.roofline import bound_words

    bound = BoundEstimate("memory", -0.5, (BoundSignal("dram_vs_tensor", "balanced", 0.77, ""),
                                           BoundSignal("tokens_per_step", "memory", 115.0, "")))
    assert bound_words(bound) == "memory-bound · DRAM vs tensor says balanced · tokens/step says memory"
    assert bound_words(bound, 80) == bound_words(bound)
    short = bound_words(bound, 63)
    assert short == "memory-bound · DRAM vs tensor: balanced · tokens/step: memory" and len(short) <= 63


def test_trend_rows_draw_noise_flat_and_a_real_move_full_height():
    from specwatch.widgets.format import sparkline
    from specwatch.widgets.trends import scale

    noise = [0.0099, 0.0100, 0.0099, 0.0100, 0.00995]  # TPOT within 1 %: noise
    low, high = scale("tpot_s", noise)
    assert len(set(sparkline(noise, len(noise), low, high))) == 1  # one level: drawn flat
    doubling = [0.010, 0.010, 0.020, 0.020]  # TPOT doubled: a real move
    low, high = scale("tpot_s", doubling)
    drawn = sparkline(doubling, len(doubling), low, high)
    assert drawn[0] != drawn[-1] and drawn[0] == drawn[1] and drawn[2] == drawn[3]


def test_trend_rows_say_the_scale_they_are_drawn_on():
    from specwatch.widgets.trends import scale, scale_text

    # DRAM and tensor share 0–100 %, whatever their readings: their heights compare across rows
    assert scale("dram", [0.09, 0.1]) == scale("tensor", [0.9]) == (0.0, 1.0)
    assert scale_text("dram", 0.0, 1.0, [0.09, 0.1]) == "0–100%"
    # counts from 0 to a round top, so "▁ is 0, █ is 2,000" reads at a glance
    low, high = scale("tokens_per_s", [1144.0, 1175.0])
    assert (low, high) == (0.0, 2000.0) and scale_text("tokens_per_s", low, high, [1144.0]) == "0–2,000"
    # the speedup's scale always holds 1×, so a row under it is visibly under break-even
    assert scale("expected_speedup", [0.53, 0.54]) == (0.53, 1.1)
    # a row inside the dead band says it is drawn flat, with the readings' own range and units
    noise = [0.085, 0.0862, 0.088]
    low, high = scale("tpot_s", noise)
    assert scale_text("tpot_s", low, high, noise) == "flat 85–88 ms"


def test_a_missed_reading_is_a_gap_but_columns_narrower_than_the_poll_are_not():
    from specwatch.widgets.format import bucket_series

    every_5_s = [(t, 1.0) for t in range(0, 30, 5)] + [(t, 2.0) for t in range(45, 61, 5)]  # 30–40 s missed
    buckets = bucket_series(every_5_s, 0.0, 60.0, 60, hold_s=1.5 * 5)
    assert all(b == 1.0 for b in buckets[:26])  # 1 s columns between 5 s polls: carried, not gaps
    assert all(b is None for b in buckets[26:45])  # 25 s to 45 s without a reading: a gap
    assert buckets[45:] == [2.0] * 15
    assert bucket_series(every_5_s, 0.0, 60.0, 60)[1] is None  # without hold_s every column stands alone


def test_the_time_axis_marks_seconds_or_minutes_before_now():
    from specwatch.widgets.trends import time_axis

    short = time_axis(60.0, 60)
    assert short.endswith("now") and "−30 s" in short and len(short) == 60
    long = time_axis(600.0, 150)
    assert "−2 min" in long and "−10 min" in long and long.endswith("now") and " s" not in long


@pytest.mark.parametrize("size", [(80, 24), (120, 36), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("moment", ["ended", "paused_after_rewind"])
def test_replay_snapshot(snap_compare, tmp_path, moment, size):
    from specwatch.collectors.replay import ReplaySource
    from specwatch.recording import RecordingHeader, write_recording

    path = tmp_path / "incident.swrec"
    write_recording(path, RecordingHeader(data="synthetic", host="node-1", interval_s=1.0), snapshots(FLIP[:60]))
    app = make_app(ReplaySource(path, speed=100.0), history_minutes=1.0)

    async def to_the_moment(pilot) -> None:
        await until(pilot, lambda: app.ended, "the replay to end")
        end = app.latest.time
        if moment == "paused_after_rewind":
            await pilot.press("space")
            await pilot.press("left")
            await until(pilot, lambda: app.latest.time == end - 10.0, "the screen 10 s back")
            # a window of readings before the position went into the Monitor: a verdict, not "one reading"
            assert app.states[app.target_urls[0]].verdict.speculation != "unknown"
        await until(pilot, lambda: all(p.view is app.view() for p in app.panels() if app.is_shown(p)),
                    "every panel on screen shows the reading")
        for _ in range(5):
            await pilot.pause(0.05)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=size, run_before=to_the_moment)


async def test_the_speculation_panel_is_drawn_once_per_verdict_not_once_per_poll(monkeypatch):
    """Between the advisor's evaluations (every 5 s of data time) the overview's speculation panel
    has nothing new to draw: it is drawn for a new state, not for every poll."""
    drawn: list[object] = []
    render_view = SpeculationPanel.render_view

    def counting(self, view, width):
        if self.id == "ov-speculation":
            drawn.append(view.state)
        return render_view(self, view, width)

    monkeypatch.setattr(SpeculationPanel, "render_view", counting)
    data = snapshots(LOW)
    app = make_app(ScriptedSource(data))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        assert app.polls == len(data)
    states = {id(s) for s in drawn if s is not None}
    evaluations = len(data) // 5 + 1  # every 5 s of data time, the first reading included
    assert len(states) <= evaluations
    # each state drawn once to compare, once more only if Textual laid the panel out anew
    assert len(drawn) <= 2 * evaluations + 2 < len(data)


async def test_start_up_objects_are_frozen_once_the_first_reading_is_shown(monkeypatch):
    """A dashboard run from the command line (run_app) freezes start-up's objects out of the cyclic
    collector's walks after its first reading; an app made without asking for it (tests) never."""
    import specwatch.heap

    frozen = []
    monkeypatch.setattr(specwatch.heap, "freeze_start_up_objects", lambda: frozen.append(1))
    for asked in (False, True):
        frozen.clear()
        app = make_app(ScriptedSource(snapshots(LOW[:3])), freeze_heap=asked)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.polls == 3, "3 polls")
            await pilot.pause()
        assert frozen == ([1] if asked else [])


def test_freezing_moves_the_objects_alive_into_the_permanent_generation():
    import gc

    from specwatch.heap import freeze_start_up_objects

    try:
        freeze_start_up_objects()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()  # the other tests' apps must stay collectable


async def test_the_header_names_a_target_never_read_the_server_not_vllm():
    """Issue 45: a target never read showed "vLLM --" in the header, an engine nobody had seen. It is
    "server" until something of it is read; then the engine by its name."""
    from specwatch.telemetry.snapshot import TargetSample

    url = "http://10.0.0.9:8000"
    refused = Snapshot(time=1.0, targets=(TargetSample(url, "connection_refused", "nothing is listening"),))
    app = make_app(ScriptedSource([refused]))
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.latest is not None, "the reading")
        await pilot.pause()
        header = text_of(app.query_one(HeaderBar))
        assert "server --" in header and "vLLM" not in header, header
    read = snapshots(LOW[:2])
    app = make_app(ScriptedSource(read))
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.latest is not None, "the reading")
        await pilot.pause()
        assert "vLLM" in text_of(app.query_one(HeaderBar))


async def test_the_overview_roofline_at_160_columns_cuts_no_footer_line():
    """Issue 45: at 160×45 the overview's roofline (50 columns wide) cut its legend and its bound line
    ("ridge 153 FLOP/byte, A100 8…"). A line that does not fit goes on two, and the picture gives up
    the rows."""
    from specwatch.widgets.roofline import RooflinePanel

    app = make_app(ScriptedSource(snapshots(LOW[:40])), history_minutes=1.0)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause(0.2)
        panel = next(w for w in app.query(RooflinePanel) if app.is_shown(w) and w.id == "ov-roofline")
        text = text_of(panel)
        assert "…" not in text, text
        assert "ridge 153 FLOP/byte, A100 80GB SXM" in text and "memory-bound" in text
        assert "tokens/step: memory" in text


@pytest.mark.parametrize("flags, origin", [((), "method from recording"), (("--method", "ngram"), "method from --method")])
async def test_a_replay_says_the_method_came_from_the_recording_unless_a_flag_gave_it(monkeypatch, flags, origin):
    """The demo's panel said "method from --method" for the recording's own setting (issue 45, 27)."""
    import specwatch.commands.replay as replay_command
    import specwatch.dashboard.app as app_module
    from specwatch.cli import main

    built = {}
    monkeypatch.setattr(app_module, "run_app", lambda source, monitor, **kw: built.update(source=source, monitor=monitor) or 0)
    monkeypatch.setattr(replay_command, "require_terminal", lambda *_: None)
    from pathlib import Path

    recording = Path(app_module.__file__).parent.parent / "data" / "h100-70b-ngram.swrec"
    assert main(["replay", *flags, "--speed", "100", str(recording)]) == 0
    app = data_clocked(SpecwatchApp(built["source"], built["monitor"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.latest is not None and app.view().speculation is not None, "a judged reading")
        await pilot.pause()
        speculation = flat(text_of(app.query_one("#ov-speculation", SpeculationPanel)))
    assert origin in speculation, speculation
