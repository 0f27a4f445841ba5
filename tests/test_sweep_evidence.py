"""A saved sweep against the live target: used only when it measured this target's model, method
and k, reconciled with the predicted crossover in one line, and set aside once it has aged."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from specwatch.advice.monitor import Monitor
from specwatch.advice.advisor import AdvisorConfig
from specwatch.perf import HingeParameters
from specwatch.sweep import load_sweep
from specwatch.advice.sweep_evidence import STALE_AFTER_S, SweepIdentity, reconcile_crossover
from specwatch.collectors.synthetic import SyntheticNode, generate

from http_fixtures import LocalServer, metrics_and_version

# n-gram k=4 on an A100-like hinge: the model predicts a crossover in the tens of running requests
STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                     context_per_sequence=0.0, gpus=2)
START = 1_800_000_000.0


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).replace(microsecond=0).isoformat()


def sweep_file(tmp_path, *, model=NODE.model_name, method="ngram", k=4, version="0.32.0", created=START - 3600,
               crossing=12.0, name="sweep.json"):
    """A sweep document as `specwatch sweep` writes it (the fields the reconciliation reads),
    read back through load_sweep as watch and check read it."""
    document = {
        "schema": "specwatch.sweep/2", "created": _iso(created), "source": "live", "complete": True,
        "servers": {"baseline": {"model": model, "version": version},
                    "speculative": {"model": model, "version": version,
                                    "speculative_config": {"method": method, "num_speculative_tokens": k}}},
        "tiers": [{"concurrency": c, "baseline": {}, "speculative": {"k": k}} for c in (1, 4, 16, 64)],
        "crossing": {"throughput": crossing, "tpot": crossing},
        "crossing_state": {"throughput": "crosses", "tpot": "crosses"},
        "crossing_interval": {"throughput": {"low": crossing - 2, "high": crossing + 2}},
    }
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return SweepIdentity.from_sweep(load_sweep(path))


def last_verdict(sweep: SweepIdentity | None, load=(8.0,) * 60):
    monitor = Monitor(advisor_config=AdvisorConfig(method="ngram"))
    monitor.sweep = sweep
    for snapshot in generate(NODE, list(load), start_time=START):
        monitor.ingest(snapshot)
    (state,) = monitor.states.values()
    return state.verdict


@pytest.fixture(scope="module")
def predicted():
    verdict = last_verdict(None)
    assert verdict.speculation == "on" and verdict.crossover_concurrency is not None
    assert not any("sweep" in r for r in verdict.reasons)
    return verdict.crossover_concurrency


def test_a_sweep_of_this_configuration_is_used_and_both_crossovers_are_said_in_one_line(tmp_path, predicted):
    verdict = last_verdict(sweep_file(tmp_path, crossing=12.0))
    assert verdict.crossover_concurrency == 12.0  # measured on this node
    lines = [r for r in verdict.reasons if r.startswith("crossover:")]
    assert len(lines) == 1
    assert f"measured 12 (95 % 10–14, sweep {_iso(START - 3600)[:16].replace('T', ' ')} UTC)" in lines[0]
    assert f"predicted {predicted:.0f}" in lines[0] and "using measured" in lines[0]
    # the predicted crossover is not said a second time, unreconciled
    assert not any("stops paying above" in r for r in verdict.reasons)
    assert verdict.details["sweep"]["status"] == "applies" and "sweep_mismatch" not in verdict.flags


@pytest.mark.parametrize("mismatch, words", [
    ({"model": "meta-llama/Llama-3.1-8B-Instruct"}, "model meta-llama/Llama-3.1-8B-Instruct ≠"),
    ({"k": 2}, "k=2 ≠ k=4"),
    ({"method": "eagle3"}, "method eagle3 ≠ ngram"),
])
def test_a_sweep_of_another_configuration_is_named_and_not_used(tmp_path, predicted, mismatch, words):
    verdict = last_verdict(sweep_file(tmp_path, crossing=12.0, **mismatch))
    assert verdict.crossover_concurrency == predicted
    assert "sweep_mismatch" in verdict.flags
    (line,) = [r for r in verdict.reasons if "sweep" in r]
    assert line.startswith("⚠ sweep not used") and words in line and f"predicted {predicted:.0f}" in line


def test_a_sweep_of_another_configuration_is_named_before_any_traffic(tmp_path):
    """With no request running there is no verdict yet, but whether the sweep measured this target
    is known from the first readings: the screen must not show another model's crossover unsaid."""
    idle = last_verdict(sweep_file(tmp_path, model="meta-llama/Llama-3.1-8B-Instruct", k=3), load=(0.0,) * 30)
    assert idle.speculation == "unknown" and "sweep_mismatch" in idle.flags
    assert idle.details["sweep"]["status"] == "mismatch"
    assert any(r.startswith("⚠ sweep not used") and "k=3 ≠ k=4" in r and "predicted" not in r
               for r in idle.reasons), idle.reasons
    same = last_verdict(sweep_file(tmp_path, name="same.json"), load=(0.0,) * 30)
    assert same.speculation == "unknown" and not any("sweep" in f for f in same.flags)


def test_an_old_sweep_or_one_from_another_vllm_gives_way_to_the_prediction(tmp_path, predicted):
    old = last_verdict(sweep_file(tmp_path, created=START - STALE_AFTER_S - 86400, name="old.json"))
    assert old.crossover_concurrency == predicted and "sweep_stale" in old.flags
    assert any("using predicted: the sweep is 8 days old" in r for r in old.reasons)
    upgraded = last_verdict(sweep_file(tmp_path, version="0.31.0", name="upgraded.json"))
    assert upgraded.crossover_concurrency == predicted
    assert any("the sweep ran on vLLM 0.31.0, this node runs 0.32.0" in r for r in upgraded.reasons)


def test_a_sweep_that_does_not_say_its_model_is_shown_but_not_trusted():
    sweep = SweepIdentity(model=None, method="ngram", k=4, version=None, created=START, crossing=10.0,
                          crossing_state="crosses")
    result = reconcile_crossover(sweep, "m", "ngram", 4, "0.32.0", START, 30.0)
    assert (result.status, result.used, result.crossover) == ("unverified", "predicted", 30.0)
    assert "cannot be matched" in result.line


def test_check_json_says_the_sweep_does_not_measure_this_target(tmp_path):
    from test_vllm_collector import REAL  # a real vLLM 0.32 CPU capture: tiny-llama, n-gram k=4

    other = tmp_path / "other"
    other.mkdir()
    sweep_file(other, model="meta-llama/Llama-3.1-70B-Instruct", k=4)
    same = tmp_path / "same"
    same.mkdir()
    sweep_file(same, model="tiny-llama", k=4, created=datetime.now(timezone.utc).timestamp() - 60)
    with LocalServer(metrics_and_version(lambda: REAL)) as srv:
        runs = {name: subprocess.run([sys.executable, "-m", "specwatch", "check", "--url", srv.url, "--window", "0.2",
                                      "--json", "--sweep", str(folder / "sweep.json")],
                                     capture_output=True, text=True, timeout=60)
                for name, folder in (("other", other), ("same", same))}
    reports = {name: json.loads(r.stdout) for name, r in runs.items()}
    assert reports["other"]["sweep"]["status"] == "mismatch", runs["other"].stderr
    assert "model meta-llama/Llama-3.1-70B-Instruct ≠ tiny-llama" in reports["other"]["sweep"]["line"]
    assert reports["same"]["sweep"]["status"] == "applies", runs["same"].stderr
    assert reports["same"]["sweep"]["measured"] == 12.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize("mismatch, shown", [
    ({"model": "meta-llama/Llama-3.1-8B-Instruct"}, "⚠ sweep not used: model meta-llama/Llama-3.1-8B-Instruct ≠"),
    ({}, "crossover measured 12 · predicted"),
])
async def test_the_dashboard_says_whether_the_sweep_is_used(tmp_path, mismatch, shown):
    from specwatch.dashboard.app import SpecwatchApp
    from specwatch.widgets.speculation import SpeculationPanel
    from test_app import ScriptedSource, text_of, until

    monitor = Monitor(advisor_config=AdvisorConfig(method="ngram"))
    monitor.sweep = sweep_file(tmp_path, crossing=12.0, **mismatch)
    data = list(generate(NODE, [8.0] * 40, start_time=START))
    app = SpecwatchApp(ScriptedSource(data), monitor)
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        speculation = text_of(app.query_one("#ov-speculation", SpeculationPanel))
    assert shown in speculation


def test_a_load_past_the_measured_crossover_that_the_model_calls_paying_is_said_and_doubted(tmp_path):
    # the sweep measured a crossover at 6 (95 % 4–8); the node runs 12 requests, where the model
    # (crossing in the fifties) still expects speculation to pay
    verdict = last_verdict(sweep_file(tmp_path, crossing=6.0), load=(12.0,) * 60)
    assert verdict.crossover_concurrency == 6.0
    assert "sweep_disagrees" in verdict.flags and verdict.confidence <= 0.5
    assert any("past its measured crossover" in r for r in verdict.reasons)
    # inside the crossing's interval (4–8) nothing is claimed either way
    inside = last_verdict(sweep_file(tmp_path, crossing=7.0, name="inside.json"), load=(8.0,) * 60)
    assert "sweep_disagrees" not in inside.flags
