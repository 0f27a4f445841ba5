"""The demo's playlist: recordings one after another on one timeline, each judged as it was recorded."""

import argparse
import asyncio
import dataclasses

from specwatch.commands.replay import Scenario, build_demo, list_scenarios
from specwatch.perf import HingeParameters
from specwatch.recording import RecordingHeader, write_recording
from specwatch.synthetic import SyntheticNode, generate

STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", context_per_sequence=0.0)


def _scenario(tmp_path, name, method, seed):
    path = tmp_path / f"{name}.swrec"
    header = RecordingHeader(data="synthetic", notes=name, interval_s=1.0, advisor={"method": method})
    write_recording(path, header, generate(NODE, [4.0] * 12, seed=seed))
    return Scenario(name, "synthetic", name, path)


def test_playlist_plays_each_recording_in_turn_under_its_own_settings(tmp_path):
    # both recordings are of the same URL, made under different methods
    scenarios = [_scenario(tmp_path, "first", "ngram", 1), _scenario(tmp_path, "second", "eagle3", 2)]
    args = argparse.Namespace(speed=100.0, method=None, draft_ratio=None, gpu=None, model_name=None, tp=None,
                              window=30.0, evaluate_every=5.0)
    source, monitor = build_demo(scenarios, args)

    async def play(n):
        return [await source.read() for _ in range(n)]

    snapshots = asyncio.run(play(24 + 3))
    urls = [s.targets[0].url for s in snapshots]
    assert urls[:12] == [f"{NODE.url}#first"] * 12
    assert urls[12:24] == [f"{NODE.url}#second"] * 12
    assert urls[24:] == [f"{NODE.url}#first"] * 3  # round and round
    times = [s.time for s in snapshots]
    assert all(b > a for a, b in zip(times, times[1:]))  # one continuous timeline
    for snap in snapshots:
        monitor.ingest(snap)
    states = monitor.states
    assert "n-gram" in states[f"{NODE.url}#first"].verdict.reasons[0]
    assert "EAGLE-3" in states[f"{NODE.url}#second"].verdict.reasons[0]


def test_bundled_demo_builds_a_playlist_of_every_scenario():
    scenarios = list_scenarios()
    assert {s.data for s in scenarios} == {"real", "synthetic"}
    args = argparse.Namespace(speed=1.0, method=None, draft_ratio=None, gpu=None, model_name=None, tp=None,
                              window=30.0, evaluate_every=5.0)
    source, monitor = build_demo(scenarios, args)
    assert len(source.sources) == len(scenarios)
    assert len(monitor.target_configs) == len(scenarios)
    methods = {dataclasses.asdict(c)["method"] for c in monitor.target_configs.values()}
    assert len(methods) >= 2  # the scenarios differ in method
    assert source.synthetic == source.current.header.synthetic
