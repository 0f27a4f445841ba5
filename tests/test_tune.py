"""`specwatch tune` on scripted telemetry with known per-position acceptance and a known knee."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from specwatch import perf
from specwatch.advice.advisor import AdvisorConfig
from specwatch.advice.monitor import Monitor
from specwatch.collectors.synthetic import SyntheticNode, generate, ramp
from specwatch.advice.tune import format_tune, tune_report, validate_with_vllm

STEP = perf.HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0,
                            per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.6, 0.4, 0.25, 0.15),
                     context_per_sequence=0.0)


def _true_off(node) -> int:
    """The first batch at which no k in 1..4 beats speculation off on this node."""
    m = node.prompt_tokens_per_request * (1 - node.prompt_cached_fraction) / node.output_tokens_per_request
    step = node.step
    for b in range(1, 400):
        plain = step.step_time(b + m * b)
        best = max(
            (1 + sum(node.per_position[:k])) * plain / step.step_time(b * (k + 1) + m * b * (1 + sum(node.per_position[:k])))
            for k in range(1, 5))
        if best < 1:
            return b
    return 400


def observe(node, load, method="ngram"):
    config = AdvisorConfig(method=method, sample_interval_s=0.0, refit_interval_s=0.0)
    monitor = Monitor(window_s=10, advisor_config=config, evaluate_every_s=5)
    for snap in generate(node, load):
        monitor.ingest(snap)
    return monitor.advisor_of(node.url)


@pytest.fixture(scope="module")
def ramp_advisor():
    return observe(NODE, ramp(1, 128, 15))


def test_schedule_follows_the_model(ramp_advisor):
    inputs = ramp_advisor.last_inputs
    assert inputs.per_position == pytest.approx(NODE.per_position, abs=0.01)
    report = tune_report(inputs, observed_batch=ramp_advisor.observed_batch, max_batch=160)
    ks = [k for _, _, k in report["schedule"]]
    # k=4 at low batch, fewer tokens towards the knee, off past the crossover
    assert report["schedule"][0][:1] == [1] and ks[0] == 4 and ks[-1] == 0
    assert ks == sorted(ks, reverse=True) and len(set(ks)) >= 3
    assert report["schedule"][-1][1] == 160
    # where the node's truth turns speculation off: its own step time and rates, and the prefill its
    # requests bring into every step (1000 uncached prompt tokens per 300 output tokens: a step that
    # emits b·L tokens also prefills b·L·1000/300), written out here rather than asked of the model
    assert report["schedule"][-1][0] == pytest.approx(_true_off(NODE), rel=0.15)
    # the speedup against the static k: better where k shrank for the load, and never worse by more
    # than the margin a longer draft must clear (a shorter one within it is kept: the safer choice)
    for r in report["ranges"]:
        assert r["speedup_vs_current"][0] >= 1.0 / (1.0 + perf.LONGER_K_MARGIN) - 1e-9
    assert any(r["speedup_vs_current"][1] > 1.05 for r in report["ranges"] if r["k"] > 0)
    assert report["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4,
                                            "num_speculative_tokens_per_batch_size": report["schedule"]}
    text = format_tune(report)
    assert "--speculative-config '" in text and "num_speculative_tokens_per_batch_size" in text


def test_batch_sizes_never_observed_are_marked_extrapolated(ramp_advisor):
    low, high = ramp_advisor.observed_batch
    assert low == 1 and high == 128
    report = tune_report(ramp_advisor.last_inputs, observed_batch=(low, high), max_batch=256)
    assert report["ranges"][-1]["extrapolated"] is True
    assert report["ranges"][0]["extrapolated"] is False
    assert any("extrapolated" in n for n in report["notes"])


def test_poor_acceptance_everywhere_turns_it_off():
    node = dataclasses.replace(NODE, per_position=(0.03, 0.01, 0.0, 0.0), draft_ratio=0.1)
    advisor = observe(node, [2.0] * 40 + [8.0] * 40, method="draft_model")
    report = tune_report(advisor.last_inputs, observed_batch=advisor.observed_batch, max_batch=64)
    assert report["schedule"] == [[1, 64, 0]]
    assert report["never_pays"] is True
    assert any("does not pay at any batch size" in n for n in report["notes"])


def test_validator_absent_is_said_plainly():
    result = validate_with_vllm([[1, 8, 2]], 2, 8, python="/nonexistent/python")
    assert result["ok"] is None and "could not run" in result["message"]


RECORDINGS = sorted((Path(__file__).resolve().parent.parent / "specwatch" / "data").glob("*.swrec"))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_tune_from_a_recording_judges_as_replay_does(path, capsys):
    """tune --from and replay of the same file: one fit, one answer. tune once sampled and refitted the
    step time at every Snapshot, replay at its own cadence: two fits of the same data, and tune said
    off from 3 running where replay said ON paying up to 129. Here the knee tune prints is the one the
    banner's reasons quote, its expected speedup at the running batch is the last evaluation's, and
    where the schedule at that batch points the other way from the banner, it says so."""
    from specwatch.cli import main
    from specwatch.commands.replay import replay_monitor
    from specwatch.recording import read_recording

    recording = read_recording(path)
    monitor = replay_monitor(recording.header)
    for snapshot in recording.snapshots:
        monitor.ingest(snapshot)
    url = recording.snapshots[-1].targets[0].url
    shown = monitor.states[url].verdict
    assert main(["tune", "--from", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    quoted = [float(m.group(1)) for r in shown.reasons for m in [re.search(r"knee of about (\d+)", r)] if m]
    assert quoted and round(report["inputs"]["knee_tokens"]) == quoted[0], (report["inputs"], shown.reasons)
    assert report["expected_speedup"] == pytest.approx(shown.details["engine_speedup"], rel=1e-9)
    banner = report["banner"]
    assert banner["speculation"] == shown.speculation
    k_here = banner["k_scheduled_here"]
    disagree = shown.speculation in ("on", "off") and (k_here > 0) != (shown.speculation == "on")
    assert (banner["note"] is not None) == disagree, banner
    if disagree:
        assert banner["note"] in report["notes"] and shown.speculation.upper() in banner["note"]
