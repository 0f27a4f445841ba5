"""An engine that says it runs on the CPU: vLLM's /server_info names the device (device_config.device,
"cpu" on the CPU wheel; tests/data's real capture). Where no GPU is identified, that tells the advisor
the step-time shape it otherwise has to assume: a CPU has no spare compute under its memory reads, so
beyond vLLM's fixed step cost every position a step verifies costs its share from the first token.
Read from the capture, carried in every reading and through recordings, and judged: on a node whose
steps cost in proportion to their positions, the verdict is the node's loss, not a GPU's gain; on a
small model whose steps are mostly the fixed cost, it moves toward the node's gain."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from http_fixtures import LocalServer
from test_token_budget import FakeVllm, scrape
from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.collectors.synthetic import SyntheticNode, generate
from specwatch.collectors.vllm import VllmSource, device_from_server_info
from specwatch.advice.step_samples import cpu_prior
from specwatch.perf import HingeParameters, step_overhead_s
from specwatch.readings.window import Window
from specwatch.recording import RecordingHeader, RecordingWriter, read_recording, reader
from specwatch.telemetry.snapshot import (FROM_HOST, Snapshot, SourceStatus, TargetSample, inferred_device,
                                          resolve_device)

SERVER_INFO = Path(__file__).parent / "data" / "vllm-0.32-cpu-ngram-k4.server_info.json"


def server_info() -> dict:
    return json.loads(SERVER_INFO.read_text())


def test_the_real_server_info_names_the_cpu():
    assert device_from_server_info(server_info()) == "cpu"


@pytest.mark.parametrize("device, read", [("CUDA", "cuda"), (" xpu ", "xpu"), ("auto", None), ("", None),
                                          (5, None), (None, None), (["cpu"], None)])
def test_a_device_is_read_as_written_and_what_says_nothing_is_left_out(device, read):
    info = server_info()
    info["vllm_config"]["device_config"]["device"] = device
    assert device_from_server_info(info) == read
    del info["vllm_config"]["device_config"]
    assert device_from_server_info(info) is None
    assert device_from_server_info("not an object") is None


def test_the_collector_carries_the_device_and_without_dev_mode_none():
    with LocalServer(FakeVllm(server_info())) as srv:
        assert scrape(VllmSource([srv.url])).device == "cpu"
    with LocalServer(FakeVllm(None)) as srv:
        assert scrape(VllmSource([srv.url])).device is None


@pytest.mark.parametrize("word, value", [("device", "cpu"), ("weights", "fp8")])  # weights: test_served_weights
def test_a_recording_keeps_the_servers_word_in_the_fast_and_the_plain_reading(tmp_path, monkeypatch, word, value):
    snaps = [Snapshot(time=float(i), targets=(TargetSample("http://a:8000", "ok", **{word: value}),
                                              TargetSample("http://b:8000", "ok"))) for i in range(3)]
    assert word not in snaps[0].to_dict()["targets"][1]  # absent stays absent
    path = tmp_path / f"{word}.swrec"
    with RecordingWriter(path, RecordingHeader(data="synthetic")) as writer:
        for snap in snaps:
            writer.write(snap)
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(reader, "_fast_loads", None)
        read = read_recording(path).snapshots
        assert [[getattr(t, word) for t in s.targets] for s in read] == [[value, None]] * 3


# A node whose steps cost in proportion to the positions they compute, 2 ms each, from the first:
# a CPU's law. n-gram, k = 4; with L = 1 + 0.5 + 0.3 + 0.2 + 0.1 = 2.1 a verify step of 5 positions
# emits 2.1 tokens for the time a plain step emits 5 in: the truth is L / (k + 1) = 0.42×.
CPU_LAW = HingeParameters(base_s=0.002, knee=1.0, slope_s_per_token=0.002, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=CPU_LAW, gpus=0, per_position=(0.5, 0.3, 0.2, 0.1), context_per_sequence=0.0,
                     prompt_tokens_per_request=0.0, noise=0.0)


def judge(device: str | None, running: float = 4.0, flag: str | None = None, node: SyntheticNode = NODE):
    window, advisor = Window(30.0), Advisor(AdvisorConfig(method="ngram", device=flag))
    verdict = None
    for snap in generate(node, [running] * 90, seed=1):
        snap = dataclasses.replace(snap, targets=tuple(dataclasses.replace(t, device=device) for t in snap.targets))
        window.add(snap)
        verdict = advisor.update(window.target(node.url), snap.gpus)
    return verdict


def test_a_cpu_engine_is_judged_with_a_cpus_shape_not_a_gpus():
    truth = NODE.acceptance_length / (NODE.k + 1)
    assert truth == pytest.approx(0.42)
    # without the device, no GPU identified: the answer spans the two shapes, the GPU's end shown
    unknown = judge(None)
    assert "gpu_unidentified" in unknown.flags and unknown.expected_speedup > 1 > truth
    # the server says it runs on the CPU: the node's loss, and why
    cpu = judge("cpu")
    assert cpu.speculation == "off", cpu.reasons
    assert cpu.expected_speedup == pytest.approx(truth, rel=0.25), cpu.reasons
    assert "gpu_unidentified" not in cpu.flags
    assert any(r.startswith("the engine runs on the CPU (its /server_info says so)") for r in cpu.reasons)
    # a GPU's device name changes nothing: the shape is still assumed
    assert "gpu_unidentified" in judge("cuda").flags


def test_without_dev_mode_the_device_flag_stands_in_and_the_server_wins_over_it():
    truth = NODE.acceptance_length / (NODE.k + 1)
    flagged = judge(None, flag="cpu")
    assert flagged.expected_speedup == pytest.approx(truth, rel=0.25)
    assert any(r.startswith("the engine runs on the CPU (--device cpu)") for r in flagged.reasons)
    # the server names a GPU device: what it says wins over --device cpu
    assert "gpu_unidentified" in judge("cuda", flag="cpu").flags
    # --device gpu keeps the unknown shape's range
    assert "gpu_unidentified" in judge(None, flag="gpu").flags


def test_a_cpu_prior_keeps_vllms_fixed_step_cost_apart_from_the_positions():
    """T(N) = F + c·N: F the fixed step cost (at most half the median step), c the median of what
    each sample leaves a position."""
    # steps of 5 ms at 5 positions: 1 ms fixed, 0.8 ms a position; a plain step is 1.8 ms, not 1
    prior = cpu_prior([(5.0, 0.005), (5.0, 0.0052), (5.0, 0.0048)], step_overhead_s())
    assert step_overhead_s() == pytest.approx(0.001)
    assert prior.step_time(5.0) == pytest.approx(0.005)
    assert prior.step_time(1.0) == pytest.approx(0.0018)
    # a step shorter than twice the fixed cost: the fixed part is half the median step
    short = cpu_prior([(4.0, 0.0012)], step_overhead_s())
    assert short.step_time(1.0) == pytest.approx(0.0006 + 0.0006 / 4)
    # a known depth: the fixed part per step and per layer, as the GPU law states it
    assert cpu_prior([(2.0, 0.05)], step_overhead_s(80)).step_time(1.0) == pytest.approx(
        0.0004 + 80 * 15e-6 + (0.05 - 0.0016) / 2)
    assert cpu_prior([], step_overhead_s()).step_time(1.0) == pytest.approx(0.02)


# A small model on a CPU: a step pays a fixed 2 ms whatever it computes, then 0.4 ms a position. At 1
# running a verify step of 5 positions takes 4 ms and a plain one 2.4 ms: truth 2.1 × 2.4 / 4 = 1.26×.
SMALL_CPU_LAW = HingeParameters(base_s=0.0024, knee=1.0, slope_s_per_token=0.0004, kv_s_per_token=0.0, per_token_s=0.0)


def test_on_a_small_model_the_fixed_step_cost_brings_the_cpu_verdict_toward_the_truth():
    """A law the prior is not given (its fixed cost twice vLLM's floor): the verdict moves from the
    proportional law's 0.42× toward the truth, 1.26×, and no further (the floor is a floor)."""
    node = dataclasses.replace(NODE, step=SMALL_CPU_LAW)
    truth = node.acceptance_length * SMALL_CPU_LAW.step_time(1.0) / SMALL_CPU_LAW.step_time(5.0)
    assert truth == pytest.approx(1.26)
    verdict = judge("cpu", running=1.0, node=node)
    proportional = node.acceptance_length / (node.k + 1)
    assert proportional * 1.5 < verdict.expected_speedup <= truth, verdict.reasons
    assert any("vLLM's fixed step cost" in r for r in verdict.reasons), verdict.reasons


@pytest.mark.parametrize("command", [["check"], ["watch"], ["record", "-o", "x.swrec"], ["export"], ["tune"],
                                     ["fleet", "--url", "http://n:8000"], ["replay", "x.swrec"]])
def test_every_judging_command_takes_the_device_flag_and_a_recording_keeps_it(command):
    from specwatch.cli import build_parser
    from specwatch.commands.options import UsageError, advisor_config, advisor_settings

    args = build_parser().parse_args([*command, "--device", "cpu"])
    assert advisor_config(args).device == "cpu"
    assert advisor_config(None, advisor_settings(args)).device == "cpu"  # a recording's header
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--device", "tpu"])
    with pytest.raises(UsageError):
        advisor_config(None, {"device": "quantum"})


def test_check_json_shows_the_device_and_where_it_came_from():
    from specwatch.outputs.report import check_report
    from specwatch.perf import combine_bound

    def engine_block(device: str | None, flag: str | None) -> dict:
        window = Window(30.0)
        for snap in generate(NODE, [4.0] * 3, seed=1):
            window.add(dataclasses.replace(snap, targets=tuple(dataclasses.replace(t, device=device)
                                                               for t in snap.targets)))
        return check_report(window, NODE.url, {}, combine_bound([]), device=flag)["engine"]["device"]

    assert engine_block("cpu", "gpu") == {"name": "cpu", "source": "server_info"}  # the server wins
    assert engine_block(None, "cpu") == {"name": "cpu", "source": "flags"}
    assert engine_block(None, None) == {"name": None, "source": None}


REAL = Path(__file__).parent.parent / "specwatch" / "data" / "real-cpu-tiny-llama-ngram.swrec"
# What `sweep --serve` measured at concurrency 1 on the real CPU tier (the same wheel, model and
# n-gram k = 4), in seven runs: tokens/s speedups of 0.77x to 1.42x, median 1.07x.
MEASURED_AT_1 = (0.77, 1.42)


def test_the_bundled_real_recording_is_judged_as_the_cpu_engine_it_is():
    """The bundled real recording (a dev-mode vLLM on the CPU wheel, ramp 1 → 8 → 1) carries its
    /server_info's device, and every judged verdict of its replay lies in what sweeps measured at
    concurrency 1 on the same kind of node (the engine idles between requests, so the load it sees
    stays near 1). Before it carried the device, it replayed as a GPU's optimistic end (3.20x, later
    1.81x with the shape's range)."""
    rec = read_recording(REAL)
    assert {t.device for s in rec.snapshots for t in s.targets} == {"cpu"}
    window, advisor = Window(30.0), Advisor(AdvisorConfig(method="ngram"))
    judged = []
    for i, snap in enumerate(rec.snapshots):
        window.add(snap)
        if i % 5 == 4:
            verdict = advisor.update(window.target(snap.targets[0].url), snap.gpus)
            if verdict.expected_speedup is not None:
                judged.append(verdict)
    assert len(judged) > 20
    low, high = MEASURED_AT_1
    assert all(low <= v.expected_speedup <= high for v in judged), [v.expected_speedup for v in judged]
    assert all(any(r.startswith("the engine runs on the CPU (its /server_info says so)") for r in v.reasons)
               for v in judged)


def test_a_window_the_engine_decoded_through_is_a_step_sample_whatever_the_running_gauge_read():
    """On a node that serves one request at a time the running gauge reads 0 at most scrapes, between
    requests, while the engine decoded all through the window (its busy share, steps a second times
    the step period, is 1): that window is a step sample. Before, the first judged verdicts of the
    real recording had none, and judged with a made-up level (0.73x where 1.15x followed)."""
    rec = read_recording(REAL)
    window, advisor = Window(30.0), Advisor(AdvisorConfig(method="ngram"))
    zero_running_samples = 0
    for i, snap in enumerate(rec.snapshots[:12]):
        window.add(snap)
        before = advisor.step_samples._recorded
        tw = window.target(snap.targets[0].url)
        advisor.update(tw, snap.gpus)
        if advisor.step_samples._recorded > before and tw.total is not None and not tw.total.running:
            assert tw.total.busy_share >= 0.95
            zero_running_samples += 1
    assert zero_running_samples >= 1


NO_DRIVER = SourceStatus("nvml", "no_driver", "no NVIDIA driver (NVML library not found)")


@pytest.mark.parametrize("url, sources, gpus, device", [
    ("http://127.0.0.1:8000", (NO_DRIVER,), (), "cpu"),
    ("http://localhost:8000", (NO_DRIVER, SourceStatus("dcgm http://localhost:9400/metrics", "absent")), (), "cpu"),
    ("http://[::1]:8000", (NO_DRIVER,), (), "cpu"),
    # a remote server's device is not known from here, whatever this machine has
    ("http://10.0.0.7:8000", (NO_DRIVER,), (), None),
    ("http://gpu-node:8000", (NO_DRIVER,), (), None),
    # NVML not asked (--no-nvml), or a driver that answered: nothing is inferred
    ("http://127.0.0.1:8000", (SourceStatus("nvml", "off"),), (), None),
    ("http://127.0.0.1:8000", (SourceStatus("nvml", "ok", "1 GPU"),), (), None),
    ("http://127.0.0.1:8000", (), (), None),
    # a dcgm-exporter that answers reads GPUs somewhere: no inference
    ("http://127.0.0.1:8000", (NO_DRIVER, SourceStatus("dcgm http://localhost:9400/metrics", "ok")), (), None),
])
def test_the_device_inferred_from_the_host(url, sources, gpus, device):
    assert inferred_device(url, sources, gpus) == device
    expected = ("cpu", FROM_HOST) if device else (None, None)
    assert resolve_device(None, None, device) == expected
    # the server's word and the operator's flag both win over the host
    assert resolve_device("cuda", "gpu", device) == ("cuda", "server_info")
    assert resolve_device(None, "gpu", device) == ("gpu", "flags")


def test_a_loopback_server_on_a_host_without_a_driver_is_judged_as_the_cpu_it_runs_on():
    """Issue 45: the CPU vLLM without dev mode or --device was judged as a GPU's optimistic end (ON,
    2.9-3.5x, memory-bound). Served on loopback, with NVML saying there is no driver here, it is a
    CPU engine: judged with the CPU's shape, and the reason says how that was known."""
    truth = NODE.acceptance_length / (NODE.k + 1)

    def judged(url: str, sources: tuple) -> object:
        node = dataclasses.replace(NODE, url=url)
        window, advisor = Window(30.0), Advisor(AdvisorConfig(method="ngram"))
        verdict = None
        for snap in generate(node, [4.0] * 90, seed=1):
            window.add(snap)
            verdict = advisor.update(window.target(url), snap.gpus, sources)
        return verdict

    here = judged("http://127.0.0.1:8000", (NO_DRIVER,))
    assert here.speculation == "off" and "gpu_unidentified" not in here.flags, here.reasons
    assert here.expected_speedup == pytest.approx(truth, rel=0.25), here.reasons
    assert any(r.startswith("the engine runs on the CPU (it is on this machine, which has no NVIDIA driver)")
               for r in here.reasons), here.reasons
    # the same node remote: the device is not known, and the verdict says so rather than price a GPU
    remote = judged("http://10.0.0.7:8000", (NO_DRIVER,))
    assert "gpu_unidentified" in remote.flags and remote.confidence <= 0.5
    assert any(r.startswith("the device is not known") and "--device cpu" in r for r in remote.reasons), remote.reasons


def test_check_on_a_loopback_server_names_the_device_from_the_host(tmp_path):
    """`check` against a loopback server with NVML's real no-driver path (this machine, CI's too):
    `engine.device` is the CPU, from the host. Where this machine has a driver, NVML says so and
    nothing is inferred."""
    import contextlib
    import io

    from specwatch.cli import main

    from test_fleet_direct import AdvancingVllm

    with AdvancingVllm() as server:  # the real capture's counters, advanced a window at each read
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main(["check", "--url", server.url, "--window", "0.2", "--json", "--no-dcgm"])
            except SystemExit:
                pass
    report = json.loads(out.getvalue())
    nvml = next(s for s in report["sources"] if s["name"] == "nvml")
    if nvml["state"] != "no_driver":
        pytest.skip(f"this machine's NVML is {nvml['state']}, not the no-driver path")
    assert report["engine"]["device"] == {"name": "cpu", "source": "host"}
    # and the verdict was judged with it, not only reported (check's own advisor is handed the poll's
    # sources, as the Monitor's are): the CPU's shape, never the unknown shape's range
    verdict = report["verdict"]
    assert "gpu_unidentified" not in verdict["flags"]
    assert any(r.startswith("the engine runs on the CPU (it is on this machine, which has no NVIDIA driver)")
               for r in verdict["reasons"]), verdict["reasons"]
