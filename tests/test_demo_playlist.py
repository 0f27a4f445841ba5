"""The demo's playlist: recordings one after another on one timeline, each judged as it was recorded."""

import argparse
import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from specwatch.cli import main
from specwatch.commands.replay import Scenario, build_demo, list_scenarios
from specwatch.perf import HingeParameters
from specwatch.recording import RecordingHeader, format_time, read_recording, write_recording
from specwatch.collectors.synthetic import SyntheticNode, generate
from specwatch.recording import open_snapshots

STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", context_per_sequence=0.0)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _scenario(tmp_path, name, method, seed, load=(4.0,) * 12):
    path = tmp_path / f"{name}.swrec"
    header = RecordingHeader(data="synthetic", notes=name, interval_s=1.0, advisor={"method": method})
    write_recording(path, header, generate(NODE, load, seed=seed))
    return Scenario(name, "synthetic", name, path)


def test_playlist_plays_each_recording_in_turn_under_its_own_settings(tmp_path):
    # both recordings are of the same URL, made under different methods
    # the first is long enough, and its load varied enough, for its advisor to refit on the way
    first_load = (4.0,) * 40 + (64.0,) * 50
    scenarios = [_scenario(tmp_path, "first", "ngram", 1, first_load), _scenario(tmp_path, "second", "eagle3", 2)]
    args = argparse.Namespace(speed=100.0, method=None, draft_ratio=None, gpu=None, model_name=None, tp=None,
                              window=30.0, evaluate_every=5.0)
    source, monitor = build_demo(scenarios, args)

    async def play(n):
        return [await source.read() for _ in range(n)]

    n = len(first_load)
    snapshots = asyncio.run(play(n + 12 + n))
    urls = [s.targets[0].url for s in snapshots]
    assert urls[:n] == [f"{NODE.url}#first"] * n
    assert urls[n:n + 12] == [f"{NODE.url}#second"] * 12
    assert urls[n + 12:] == [f"{NODE.url}#first"] * n  # round and round
    # each recording on its own clock: the times it was recorded at, round after round
    recorded = {name: [s.time for s in read_recording(tmp_path / f"{name}.swrec").snapshots]
                for name in ("first", "second")}
    times = [s.time for s in snapshots]
    assert times == recorded["first"] + recorded["second"] + recorded["first"]
    verdicts = []  # what #first's banner said after each of its readings
    for snap in snapshots:
        monitor.ingest(snap)
        if snap.targets[0].url == f"{NODE.url}#first":
            verdicts.append(monitor.states[f"{NODE.url}#first"].verdict)
        if snap is snapshots[n + 11]:
            states = monitor.states
            assert "n-gram" in states[f"{NODE.url}#first"].verdict.reasons[0]
            assert "EAGLE-3" in states[f"{NODE.url}#second"].verdict.reasons[0]
    # the second pass over a recording is judged afresh, as the first was: the same verdicts, not
    # ones held over from a pass whose clock ran later
    first_pass, second_pass = verdicts[:n], verdicts[n:]
    assert [(v.speculation, v.expected_speedup, v.reasons) for v in second_pass] == \
        [(v.speculation, v.expected_speedup, v.reasons) for v in first_pass]


def test_bundled_demo_builds_a_playlist_of_every_scenario():
    scenarios = list_scenarios()
    assert {s.data for s in scenarios} == {"real", "synthetic"}
    args = argparse.Namespace(speed=1.0, method=None, draft_ratio=None, gpu=None, model_name=None, tp=None,
                              window=30.0, evaluate_every=5.0)
    source, monitor = build_demo(scenarios, args)
    assert len(source.sources) == len(scenarios)
    # one advisor configuration per target of each scenario (the Dynamo deployment has four)
    assert len(monitor.target_configs) == sum(len(open_snapshots(s.path)[0].targets) for s in scenarios)
    methods = {dataclasses.asdict(c)["method"] for c in monitor.target_configs.values()}
    assert len(methods) >= 2  # the scenarios differ in method
    assert source.synthetic == source.current.header.synthetic


def _recorded_times(path) -> list[float]:
    return [s.time for s in read_recording(path).snapshots]


def test_headless_demo_tells_every_scenario_in_playlist_order_labelled_and_on_its_own_clock(capsys):
    playlist = list_scenarios()
    assert main(["demo", "--headless", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    announced = [line for line in lines if "position" in line]
    assert [a["scenario"] for a in announced] == [s.name for s in playlist]
    assert [a["position"] for a in announced] == list(range(1, len(playlist) + 1))
    current = None
    seen: dict[str, list[float]] = {}
    for line in lines:
        if "position" in line:
            current = line
            recording = read_recording(next(s.path for s in playlist if s.name == line["scenario"]))
            assert line["data"] == recording.header.data
            assert line["clock"] == ("recorded" if recording.header.data == "real" else "synthetic")
            assert (line["start"], line["end"]) == (recording.snapshots[0].time, recording.snapshots[-1].time)
            continue
        assert line["scenario"] == current["scenario"]
        seen.setdefault(current["scenario"], []).append(line["time"])
    # every scenario said something, at the times its own recording holds (not re-timed)
    for scenario in playlist:
        times = _recorded_times(scenario.path)
        assert seen[scenario.name] and set(seen[scenario.name]) <= set(times)
        assert seen[scenario.name][0] == times[0]  # its first reading's verdict, at its first time
    real = [s for s in playlist if s.data == "real"]
    assert real and {s.data for s in playlist} == {"real", "synthetic"}

    # the text timeline: a line per scenario, in the same order, with its label and its clock
    assert main(["demo", "--headless"]) == 0
    text = capsys.readouterr().out.splitlines()
    headings = [line for line in text if line.startswith("# scenario")]
    assert len(headings) == len(playlist)
    for i, (heading, scenario) in enumerate(zip(headings, playlist), 1):
        label = "REAL data" if scenario.data == "real" else "SYNTHETIC data"
        clock = "recorded clock" if scenario.data == "real" else "synthetic clock"
        assert heading.startswith(f"# scenario {i}/{len(playlist)} {scenario.name}: {label}")
        assert f"{clock} {format_time(_recorded_times(scenario.path)[0])}" in heading


def _small_bundle(tmp_path):
    """Three small recordings standing in for the bundled ones: two synthetic, one real (on a clock of
    its own, months before the synthetic one)."""
    files = []
    for name, data, start in (("b-synthetic", "synthetic", 1_800_000_000.0), ("a-real", "real", 1_790_000_000.5),
                              ("c-synthetic", "synthetic", 1_800_000_000.0)):
        path = tmp_path / f"{name}.swrec"
        header = RecordingHeader(data=data, host=name, notes=name, interval_s=1.0, advisor={"method": "ngram"})
        write_recording(path, header, generate(NODE, [4.0] * 8, start_time=start, seed=len(files)))
        files.append(path)
    return sorted(files)


@pytest.mark.anyio
async def test_the_dashboard_plays_the_playlist_the_headless_demo_tells(tmp_path, monkeypatch, capsys):
    import specwatch.dashboard.app
    import specwatch.commands.replay as replay_command
    from specwatch.dashboard.app import SpecwatchApp, SnapshotIngested
    from specwatch.widgets.header import header_text

    bundle = _small_bundle(tmp_path)
    monkeypatch.setattr(replay_command, "_bundled_files", lambda: bundle)
    monkeypatch.setattr(replay_command, "require_terminal", lambda *_: None)
    built = {}

    def capture(source, monitor, **kwargs):
        built.update(source=source, monitor=monitor)
        return 0

    monkeypatch.setattr(specwatch.dashboard.app, "run_app", capture)
    # the one playlist: --list, the headless demo and the dashboard's source all follow it
    playlist = [s.name for s in list_scenarios()]
    assert playlist[0] == "a-real"  # no opening story here: the real recordings first
    assert main(["demo", "--list"]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == playlist
    assert main(["demo", "--headless", "--json"]) == 0
    told = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["scenario"] for line in told if "position" in line] == playlist
    assert main(["demo", "--speed", "100"]) == 0
    source, monitor = built["source"], built["monitor"]
    assert source.names == playlist

    shown: list[tuple[str, str, float]] = []  # (the URL shown, its header, the time) per reading

    class Recorder(SpecwatchApp):
        CSS_PATH = str(Path(specwatch.dashboard.app.__file__).with_name("app.tcss"))  # relative to the app's module

        def on_snapshot_ingested(self, message: SnapshotIngested) -> None:
            super().on_snapshot_ingested(message)
            view = self.view()
            shown.append((view.url, header_text(view, 200).plain, message.snapshot.time))

    app = Recorder(source, monitor)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3000):  # a bound on rounds, not a timing assertion
            if source.rounds >= 1 and len(shown) > 3 * 8:
                break
            await pilot.pause(0.01)
    order = list(dict.fromkeys(url.rsplit("#", 1)[1] for url, _, _ in shown))
    assert order == playlist
    for name in playlist:
        readings = [(header, t) for url, header, t in shown if url.endswith(f"#{name}")][:8]
        times = _recorded_times(tmp_path / f"{name}.swrec")
        assert [t for _, t in readings] == times  # on its own clock
        label = " REAL " if name.endswith("real") else " SYNTHETIC "
        assert all(label in header and f"#{name}" in header for header, _ in readings)
        assert all(format_time(t)[:19] in header for header, t in readings)
