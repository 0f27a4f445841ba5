"""Replay: the bundled scenarios, headless timelines, ReplaySource controls, and replay == live."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from specwatch.advice.advisor import AdvisorConfig
from specwatch.collectors.replay import ReplaySource
from specwatch.perf import HingeParameters
from specwatch.advice.monitor import Monitor
from specwatch.recording import RecordingHeader, RecordingWriter, read_recording, write_recording
from specwatch.cli import main
from specwatch.commands.options import ExitCode
from specwatch.commands.replay import list_scenarios
from specwatch.collectors.sources import SnapshotSource
from specwatch.collectors.synthetic import SyntheticNode, generate

# n-gram, k=4, L=2.0 on an A100-like hinge: S(b) = 2·T(b)/T(5b) crosses 1 near b = 54.
STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                     context_per_sequence=0.0, gpus=2)


def timeline(capsys, argv) -> list[dict]:
    """The verdict changes a headless --json run prints (the demo's scenario lines left out)."""
    assert main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [line for line in lines if "position" not in line]


def decisions(changes: list[dict]) -> list[str]:
    out: list[str] = []
    for c in changes:
        if c["speculation"] in ("on", "off") and (not out or out[-1] != c["speculation"]):
            out.append(c["speculation"])
    return out


def test_bundled_scenarios_are_listed_labelled_and_small(capsys):
    scenarios = {s.name: s for s in list_scenarios()}
    assert {"h100-70b-ngram", "h100-70b-longctx-eagle"} <= set(scenarios)
    for s in scenarios.values():
        assert s.path.stat().st_size < 2_000_000
        rec = read_recording(s.path)
        assert rec.warnings == [] and len(rec.snapshots) > 100
        assert rec.header.data == s.data
    assert scenarios["h100-70b-ngram"].data == "synthetic"
    if "real-cpu-tiny-llama-ngram" in scenarios:
        real = read_recording(scenarios["real-cpu-tiny-llama-ngram"].path)
        assert real.header.data == "real" and real.header.gpus == ()
    assert main(["demo", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [s.name for s in list_scenarios()]


def test_synthetic_ngram_scenario_flips_both_ways_and_is_deterministic(capsys):
    args = ["demo", "--scenario", "h100-70b-ngram", "--headless", "--json"]
    first = timeline(capsys, args)
    assert decisions(first) == ["on", "off", "on"]
    for change in first:
        assert {"time", "speculation", "confidence", "expected_speedup", "reasons"} <= set(change)
    off = next(c for c in first if c["speculation"] == "off")
    assert off["expected_speedup"] < 1 and off["reasons"]
    assert timeline(capsys, args) == first


def test_long_context_scenario_keeps_paying_at_high_batch(capsys):
    args = ["demo", "--scenario", "h100-70b-longctx-eagle", "--headless", "--json"]
    assert decisions(timeline(capsys, args)) == ["on"]


def test_unknown_scenario_and_bad_files_exit_with_a_message(capsys, tmp_path):
    assert main(["demo", "--scenario", "nope", "--headless"]) == ExitCode.USAGE
    assert "h100-70b-ngram" in capsys.readouterr().err
    bad = tmp_path / "bad.swrec"
    bad.write_text("not a recording")
    assert main(["replay", str(bad), "--headless", "--json"]) == ExitCode.UNREADABLE
    err = capsys.readouterr().err
    assert "not a specwatch recording" in err and "Traceback" not in err


def live_run(path: Path) -> list[dict]:
    """A "live" run: each Snapshot goes to the recorder and to a Monitor as it arrives."""
    config = AdvisorConfig(method="ngram")
    monitor = Monitor(advisor_config=config)
    changes = []
    header = RecordingHeader(data="synthetic", interval_s=1.0, advisor={"method": "ngram"})
    with RecordingWriter(path, header) as writer:
        # low load, then past the crossover, then low again: each stretch outlasts the banner's
        # 5-minute dwell, so the run flips both ways
        for snapshot in generate(NODE, [8.0] * 30 + [128.0] * 300 + [8.0] * 330, seed=11):
            writer.write(snapshot)
            changes += [c.to_dict() for c in monitor.ingest(snapshot)]
    return changes


def test_headless_replay_reproduces_the_live_verdicts_exactly(tmp_path, capsys):
    path = tmp_path / "live.swrec"
    live = live_run(path)
    assert decisions(live) == ["on", "off", "on"]  # the run has something to reproduce
    replayed = timeline(capsys, ["replay", str(path), "--headless", "--json"])
    assert replayed == live


def test_replay_source_at_speed_reproduces_the_live_verdicts(tmp_path):
    path = tmp_path / "live.swrec"
    live = live_run(path)

    async def play() -> list[dict]:
        source = await ReplaySource.open(path, speed=100.0)
        assert isinstance(source, SnapshotSource) and source.kind == "REPLAY"
        monitor = Monitor(advisor_config=AdvisorConfig(method="ngram"))
        out = []
        while (snapshot := await source.read()) is not None:
            out += [c.to_dict() for c in monitor.ingest(snapshot)]
        await source.aclose()
        return out

    assert asyncio.run(play()) == live


@pytest.fixture
def small_recording(tmp_path) -> Path:
    path = tmp_path / "small.swrec"
    write_recording(path, RecordingHeader(data="synthetic", notes="small"), generate(NODE, [4.0] * 20))
    return path


def test_replay_source_pause_step_seek_and_loop(small_recording):
    async def drive() -> None:
        source = ReplaySource(small_recording, speed=100.0, paused=True)
        t0 = source.start
        assert "SYNTHETIC" in source.describe() and "small.swrec" in source.describe()
        # paused: a read waits until a step releases exactly one Snapshot
        pending = asyncio.ensure_future(source.read())
        await asyncio.sleep(0.05)
        assert not pending.done()
        source.step()
        assert (await pending).time == t0
        source.step(2)
        assert [(await source.read()).time for _ in range(2)] == [t0 + 1, t0 + 2]
        source.seek(t0 + 15.5)
        source.step()
        assert (await source.read()).time == t0 + 16
        assert source.position == t0 + 16
        source.seek(t0)  # back in time
        source.resume()
        times = [(await source.read()).time for _ in range(20)]
        assert times == [t0 + i for i in range(20)]
        assert await source.read() is None and source.finished
        source.loop = True
        source.seek(t0 + 18)
        assert [(await source.read()).time for _ in range(4)] == [t0 + 18, t0 + 19, t0, t0 + 1]
        assert source.loops == 1
        with pytest.raises(ValueError):
            source.set_speed(1000.0)
        source.set_speed(0.5)
        assert source.speed == 0.5
        await source.aclose()
        assert await source.read() is None

    asyncio.run(drive())


def test_pause_while_waiting_holds_the_next_snapshot(small_recording):
    async def drive() -> None:
        source = ReplaySource(small_recording, speed=0.5)  # two seconds between Snapshots
        first = await source.read()
        waiting = asyncio.ensure_future(source.read())
        await asyncio.sleep(0.05)
        source.pause()
        source.set_speed(100.0)
        await asyncio.sleep(0.1)
        assert not waiting.done()  # paused: not released even though it is now due
        source.resume()
        assert (await waiting).time == first.time + 1

    asyncio.run(drive())


def test_record_an_unreachable_target_keeps_a_valid_file(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = tmp_path / "down.swrec"
    args = ["record", "-o", str(out), "--url", f"http://127.0.0.1:{port}", "--duration", "1",
            "--interval", "0.5", "--no-nvml", "--no-dcgm", "--method", "ngram", "--timeout", "1"]
    assert main(args) == 0
    assert "connection" in capsys.readouterr().err
    rec = read_recording(out)
    assert rec.header.data == "real" and rec.header.advisor == {"method": "ngram"}
    assert len(rec.snapshots) >= 2 and all(not s.targets[0].ok for s in rec.snapshots)
    assert rec.warnings == []
    assert main(args) == ExitCode.UNREADABLE  # the file exists now and --force was not given


def _many_member_recording(path: Path, seconds: int = 400, member_seconds: float = 60.0) -> list:
    snapshots = list(generate(NODE, [1 + (i // 20) % 8 for i in range(seconds)], seed=3))
    header = RecordingHeader(data="synthetic", interval_s=1.0)
    with RecordingWriter(path, header, member_seconds=member_seconds) as writer:
        for snapshot in snapshots:
            writer.write(snapshot)
    return snapshots


def test_the_index_finds_every_member_and_agrees_with_a_full_read(tmp_path):
    from specwatch.recording import index_recording

    path = tmp_path / "members.swrec"
    snapshots = _many_member_recording(path)
    index = index_recording(path)
    assert index.count == len(snapshots)
    assert index.start == snapshots[0].time and index.end == snapshots[-1].time
    # a member every 60 s of data: 400 s make 7, each starting at a Snapshot of the recording
    assert len(index.offsets) == 7 and index.offsets[0] == 0
    assert list(index.times) == [snapshots[i].time for i in range(0, 400, 60)]
    # each offset is where a member begins: reading from it yields that member's Snapshots on
    from specwatch.recording import open_snapshots
    for offset, t in zip(index.offsets, index.times):
        _, from_there = open_snapshots(path, start=offset)
        assert list(from_there) == [s for s in snapshots if s.time >= t]


def test_a_streamed_replay_seeks_like_one_in_memory(tmp_path):
    path = tmp_path / "members.swrec"
    snapshots = _many_member_recording(path)
    t0 = snapshots[0].time

    async def drive() -> None:
        streamed = ReplaySource(path, speed=100.0, paused=True)
        in_memory = ReplaySource(read_recording(path), speed=100.0, paused=True)
        assert (streamed.start, streamed.end, streamed.interval_s) == (in_memory.start, in_memory.end, 1.0)
        for target in (t0 + 250.5, t0 - 10, t0 + 59, t0 + 60, t0 + 61, t0 + 399, t0 + 5000, t0 + 120):
            got = []
            for source in (streamed, in_memory):
                source.seek(target)
                source.step(3)
                got.append([(await source.read()) for _ in range(min(3, 1 + sum(s.time >= target for s in snapshots)))])
            assert got[0] == got[1], target
        # from the last seek (t0 + 120, 3 read) to the end, then None
        streamed.resume()
        rest = [s async for s in _drain(streamed)]
        assert rest == snapshots[123:] and streamed.finished

    asyncio.run(drive())


async def _drain(source):
    while (snapshot := await source.read()) is not None:
        yield snapshot


def test_a_truncated_recording_streams_up_to_the_damage_and_says_so(tmp_path):
    path = tmp_path / "members.swrec"
    snapshots = _many_member_recording(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.swrec"
    cut.write_bytes(data[: len(data) * 2 // 3])
    whole = read_recording(cut)
    assert 0 < len(whole.snapshots) < len(snapshots) and whole.warnings

    async def drive() -> list:
        source = ReplaySource(cut, speed=100.0)
        assert source.end == whole.snapshots[-1].time and source.warnings == whole.warnings
        source.seek(source.end + 100)  # past the damage: the last Snapshot that could be read
        return [s async for s in _drain(source)]

    assert asyncio.run(drive()) == whole.snapshots[-1:]
