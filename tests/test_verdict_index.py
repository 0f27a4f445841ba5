"""The verdict-change index of a replay and the dashboard's jumps between changes (n / N), on a
recording whose load steps from 1 to 200 running requests and back: the truth is when the load
stepped, which the model did not choose."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from specwatch import perf
from specwatch.advice.advisor import AdvisorConfig
from specwatch.dashboard.app import SpecwatchApp
from specwatch.collectors.replay import ReplaySource
from specwatch.perf.hardware import lookup, lookup_model
from specwatch.advice.monitor import Monitor
from specwatch.recording import RecordingHeader, open_snapshots, write_recording
from specwatch.collectors.synthetic import SyntheticNode, generate
from specwatch.dashboard.verdict_index import build_verdict_index, monitor_template
from specwatch.widgets.header import HeaderBar
from specwatch.widgets.verdict import VerdictBanner
from pilot_helpers import until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("utc")]  # utc: conftest.py

DATA = Path(__file__).parent / "data"
START = 1_800_000_000.0
UP, DOWN = 400, 900  # the load steps from 1 to 200 running at UP and back to 1 at DOWN (seconds)
LOAD = [1.0] * UP + [200.0] * (DOWN - UP) + [1.0] * 500
WINDOW_S = 30.0
ADVISOR = {"method": "ngram", "model": "Llama-3.1-70B", "tp": 8}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"




def config() -> AdvisorConfig:
    return AdvisorConfig(method="ngram", model=lookup_model("Llama-3.1-70B"), tp=8)


def new_monitor() -> Monitor:
    return Monitor(WINDOW_S, config())


@pytest.fixture(scope="module")
def step_recording(tmp_path_factory) -> Path:
    # an H100 running Llama-3.1-70B with n-gram lookup, L = 2.4: pays at 1 running, not at 200
    node = SyntheticNode(step=perf.prior_for_model(lookup("H100"), lookup_model("Llama-3.1-70B"), tp=8).hinge(),
                         per_position=(0.6, 0.4, 0.25, 0.15))
    path = tmp_path_factory.mktemp("verdicts") / "step.swrec"
    write_recording(path, RecordingHeader(data="synthetic", host="node-1", interval_s=1.0, advisor=ADVISOR),
                    generate(node, LOAD, start_time=START, seed=3))
    return path


def straight_pass(path: Path) -> list[tuple[float, str]]:
    """(time, shown verdict) at every evaluation of a replay from the start."""
    monitor = new_monitor()
    _, snapshots = open_snapshots(path)
    shown = []
    for snapshot in snapshots:
        before = next(iter(monitor.states.values()), None)
        monitor.ingest(snapshot)
        state = next(iter(monitor.states.values()))
        if before is None or state is not before:
            shown.append((snapshot.time, state.verdict.speculation))
    return shown


def test_the_index_marks_each_change_of_the_shown_verdict_where_the_load_stepped(step_recording):
    index = build_verdict_index(step_recording, monitor_template(new_monitor()))
    assert index is not None and index.readings == len(LOAD) and not index.warnings
    marks = [(m.time - START, m.previous, m.speculation) for m in index.marks]
    # every mark is a change of the shown word; the first verdict of the recording is not a change
    assert all(previous != now for _, previous, now in marks)
    # it pays before the step up; it stops paying only once the load has stepped up, within a window
    # and an evaluation, and pays again only once the load has stepped back down
    assert marks[0][2] == "on" and marks[0][0] < UP
    away = next(m for m in marks if m[2] != "on")
    assert UP <= away[0] <= UP + WINDOW_S + 5
    assert any(m[2] == "off" for m in marks)
    back = [m for m in marks if m[0] > away[0] and m[2] == "on"]
    assert back and back[0][0] >= DOWN
    # and they are the replay's own changes: a straight pass shows the new word at each mark
    shown = dict(straight_pass(step_recording))
    for t, previous, now in marks:
        assert shown[START + t] == now


def test_a_restored_mark_goes_on_as_the_straight_replay_did(step_recording):
    index = build_verdict_index(step_recording, monitor_template(new_monitor()))
    straight = straight_pass(step_recording)
    mark = index.marks[2]
    monitor, changes = index.restore(mark)
    assert [c.verdict.speculation for c in changes] == [mark.speculation]
    _, snapshots = open_snapshots(step_recording)
    after = []
    for snapshot in snapshots:
        if snapshot.time <= mark.time:
            continue
        before = next(iter(monitor.states.values()))
        monitor.ingest(snapshot)
        state = next(iter(monitor.states.values()))
        if state is not before:
            after.append((snapshot.time, state.verdict.speculation))
    assert after == [(t, word) for t, word in straight if t > mark.time]
    # restoring twice gives two independent Monitors (a second jump to the same mark starts clean)
    assert index.restore(mark)[0] is not index.restore(mark)[0]


def test_an_old_recording_is_indexed_too():
    # format 1, written before the index existed: nothing in the file is needed
    index = build_verdict_index(DATA / "recording-format-1.swrec", monitor_template(Monitor(10.0, AdvisorConfig())))
    assert index is not None and index.readings > 0


def test_a_cancelled_build_stops_and_says_so(step_recording):
    assert build_verdict_index(step_recording, monitor_template(new_monitor()), cancelled=lambda: True) is None


# -- the dashboard ---------------------------------------------------------------------------------



def text_of(widget) -> str:
    console = Console(width=max(20, widget.content_size.width or 80), file=io.StringIO(), record=True,
                      color_system=None, legacy_windows=False)
    console.print(widget.render())
    return console.export_text()


def notices(app) -> list[str]:
    return [n.message for n in app._notifications]


async def test_n_and_shift_n_jump_between_verdict_changes_and_say_so_at_the_ends(step_recording):
    app = SpecwatchApp(ReplaySource(step_recording, speed=1.0), new_monitor())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.latest is not None, "the first reading")
        await pilot.press("space")  # a post-mortem: paused on the first reading
        await until(pilot, lambda: app.verdict_index is not None, "the index")
        marks = app.verdict_index.marks
        assert len(marks) >= 3
        url = app.target_urls[0]
        for mark in marks:
            await pilot.press("n")
            await until(pilot, lambda: app.latest.time == mark.time, f"the change at {mark.time - START:.0f} s")
            await until(pilot, lambda: app.states[url].verdict.speculation == mark.speculation, "its verdict")
            await pilot.pause()
            banner = app.query_one(VerdictBanner)
            assert banner.view.time == mark.time and banner.view.state.verdict.speculation == mark.speculation
            # paused at 80×24, the header says which reading is on screen
            header = text_of(app.query_one(HeaderBar))
            assert time.strftime("%H:%M:%S", time.gmtime(mark.time)) in header and "PAUSED" in header
        await pilot.press("n")
        await until(pilot, lambda: any("no verdict change after" in n for n in notices(app)), "the end said")
        assert app.latest.time == marks[-1].time
        for mark in reversed(marks[:-1]):
            await pilot.press("N")
            await until(pilot, lambda: app.latest.time == mark.time, f"back to {mark.time - START:.0f} s")
            await until(pilot, lambda: app.states[url].verdict.speculation == mark.speculation, "its verdict")
        await pilot.press("N")
        await until(pilot, lambda: any("no verdict change before" in n for n in notices(app)), "the start said")
        # playing on from a jump reads the next reading after it, through the restored Monitor
        await pilot.press("space")
        await until(pilot, lambda: app.latest.time > marks[0].time + 2, "the replay going on")


async def test_before_the_index_is_built_the_keys_say_so(step_recording, monkeypatch):
    import specwatch.dashboard.replay_control as replay_control

    release = threading.Event()
    real = replay_control.build_verdict_index

    def slow(*args, **kwargs):
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_control, "build_verdict_index", slow)
    app = SpecwatchApp(ReplaySource(step_recording, speed=1.0), new_monitor())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.latest is not None, "the first reading")
        await pilot.press("space")
        await pilot.press("n")
        await until(pilot, lambda: any("no index yet: indexing verdict changes" in n for n in notices(app)),
                    "the keys to say the index is not ready")
        shown = app.latest.time
        release.set()
        await until(pilot, lambda: app.verdict_index is not None, "the index")
        await pilot.press("n")
        await until(pilot, lambda: app.latest.time != shown, "the jump once the index is there")


async def test_a_recording_whose_verdict_never_changes_says_so(tmp_path):
    node = SyntheticNode(step=perf.prior_for_model(lookup("H100"), lookup_model("Llama-3.1-70B"), tp=8).hinge())
    path = tmp_path / "steady.swrec"
    write_recording(path, RecordingHeader(data="synthetic", interval_s=1.0, advisor=ADVISOR),
                    generate(node, [1.0] * 3, start_time=START))
    app = SpecwatchApp(ReplaySource(path, speed=100.0), new_monitor())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended and app.verdict_index is not None, "the end and the index")
        await pilot.pause()
        # ended at 80×24, the header still says which reading is on screen
        header = text_of(app.query_one(HeaderBar))
        assert "ENDED" in header and time.strftime("%H:%M:%S", time.gmtime(app.latest.time)) in header
        await pilot.press("n")
        await until(pilot, lambda: any("never changes" in n for n in notices(app)), "the notice")
        await pilot.press("N")
        await until(pilot, lambda: sum("never changes" in n for n in notices(app)) == 2, "the notice again")
        assert app.ended and app.latest.time == START + 2  # nothing moved, nothing raised


async def test_the_command_palette_offers_the_jumps(step_recording):
    app = SpecwatchApp(ReplaySource(step_recording, speed=1.0), new_monitor())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.latest is not None, "the first reading")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Next verdict change" in titles and "Previous verdict change" in titles
        await pilot.press("space")
        await until(pilot, lambda: app.verdict_index is not None, "the index")
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Next verdict change")
        command.callback()
        first = app.verdict_index.marks[0]
        await until(pilot, lambda: app.latest.time == first.time, "the jump from the palette")


async def test_seeking_and_jumping_leave_the_log_with_the_recordings_changes_only(step_recording):
    """Issue 45: pause, → → ← . . n N on a recording, and the Verdict changes panel and the Events tab
    listed changes the recording never made (ON → UNKNOWN "one reading so far" after each seek back,
    the Monitor's window restarted), out of order and twice. The log holds the recording's changes up
    to the reading shown, newest first, each once, whatever the seeking."""
    from specwatch.advice.monitor import is_verdict_change

    def logged(app) -> list[tuple[float, str | None, str]]:
        return [(e.time, e.previous, e.verdict.speculation) for e in app.view_state.events if is_verdict_change(e)]

    def recorded_until(app, index) -> list[tuple[float, str | None, str]]:
        return sorted(((c.time, c.previous, c.verdict.speculation) for c in index.changes()
                       if c.time <= app.latest.time), reverse=True)

    app = SpecwatchApp(ReplaySource(step_recording, speed=1.0), new_monitor())
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: app.latest is not None, "the first reading")
        await pilot.press("space")
        await until(pilot, lambda: app.verdict_index is not None, "the index")
        index = app.verdict_index
        first = index.marks[0]
        await pilot.press("n")  # to the first change, then about in every way the keys allow
        await until(pilot, lambda: app.latest.time == first.time, "the first change")
        for key in ("right", "right", "left", "full_stop", "full_stop", "n", "n", "N", "left", "right", "N", "left", "left"):
            before = app.latest.time
            await pilot.press(key)
            await until(pilot, lambda: not app.controller.in_flight
                        and (app.latest.time != before or key in "nN" or app.latest.time == START), f"{key} taken")
            await pilot.pause(0.05)
            shown = logged(app)
            assert shown == recorded_until(app, index), (key, app.latest.time - START, shown)
            assert len(shown) == len(set(shown))
        # played on to the end, the log is the whole recording's
        await pilot.press("space")
        app.source.speed = 100.0
        await until(pilot, lambda: app.ended, "the end")
        assert logged(app) == recorded_until(app, index) and len(logged(app)) == len(index.changes()) >= 3
