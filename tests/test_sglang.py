"""The SGLang adapter: payloads in the layouts of SGLang's own collector (tests/data/sglang-*), the
engine read off the payload or forced, the acceptance-length gauge windowed against hand-computed
values, and `check --json` against a fake SGLang server.

No real SGLang runs here (it needs a GPU): the payloads follow its collector source and its docs.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from specwatch.cli import main
from specwatch.commands.options import ExitCode
from specwatch.collectors.engines import AdapterState, detect_engine
from specwatch.collectors.sglang import (
    AcceptanceIntegrator,
    SglangAdapter,
    speculation_from_sglang_info,
)
from specwatch.collectors.vllm import VllmSource
from specwatch.recording import RecordingHeader, read_recording, write_recording
from specwatch.telemetry.snapshot import Snapshot, TargetSample
from specwatch.readings.window import Window
from http_fixtures import LocalServer, check_json, reply

DATA = Path(__file__).parent / "data"
CURRENT = (DATA / "sglang-main-00ae9c1-eagle3-tp2.metrics.txt").read_text()
OLDER = (DATA / "sglang-0.4-docs-example.metrics.txt").read_text()
VLLM = (DATA / "vllm-0.32-cpu-ngram-k4.metrics.txt").read_text()
CHAIN_INFO = json.loads((DATA / "sglang-eagle3-chain.get_server_info.json").read_text())
TREE_INFO = dict(CHAIN_INFO, speculative_num_steps=5, speculative_eagle_topk=4, speculative_num_draft_tokens=8)
MTP_INFO = dict(CHAIN_INFO, speculative_algorithm="NEXTN", speculative_draft_model_path=None,
                speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=2)
PLAIN_INFO = dict(CHAIN_INFO, speculative_algorithm=None, speculative_draft_model_path=None,
                  speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None)


def with_values(text: str, values: dict[str, float]) -> str:
    """The payload with every sample of each named series (all its label sets) set to a value."""
    for name, value in values.items():
        text = re.sub(rf"^({re.escape(name)}(?:{{[^}}]*}})?) \S+$", rf"\g<1> {value!r}", text, flags=re.MULTILINE)
    return text


# -- detection ----------------------------------------------------------------------------------------


def test_the_engine_is_read_off_the_payload():
    assert detect_engine(CURRENT) == "sglang"
    assert detect_engine(OLDER) == "sglang"
    assert detect_engine(VLLM) == "vllm"
    assert detect_engine("# HELP go_goroutines x\ngo_goroutines 3\n") is None
    # a model called "sglang:..." in a label of a vLLM payload does not make it SGLang's
    assert detect_engine('vllm:num_requests_running{model_name="sglang:x"} 1\n') == "vllm"


# -- the mapping --------------------------------------------------------------------------------------


def test_the_current_layout_maps_onto_the_windows_names():
    reading = SglangAdapter().read_metrics(CURRENT, AdapterState(), 0.0, speculation_from_sglang_info(CHAIN_INFO),
                                           info_read=True)
    (engine,) = reading.engines  # TP rank 1 repeats rank 0's gauges: one engine, not two
    assert engine.engine == "0" and engine.model_name == "meta-llama/Llama-3.1-8B-Instruct"
    assert engine.gauges["vllm:num_requests_running"] == 24.0
    assert engine.gauges["vllm:num_requests_waiting"] == 3.0
    assert engine.gauges["vllm:kv_cache_usage_perc"] == 0.32
    assert engine.gauges["vllm:cache_config_info:kv_cache_size_tokens"] == 192000.0
    assert engine.gauges["sglang:spec_accept_length"] == 2.8
    assert engine.counters["vllm:generation_tokens"] == 7.557572e6
    assert engine.counters["vllm:prompt_tokens"] == 8.128902e6
    assert engine.counters["vllm:request_success"] == 11008.0
    tpot = engine.histograms["vllm:request_time_per_output_token_seconds"]
    assert tpot.count == 7.557572e6 and tpot.sum == 83133.292
    assert engine.histograms["vllm:time_to_first_token_seconds"].count == 11008.0
    assert engine.accepted_per_position == ()  # SGLang has no per-position counters
    # one reading: no interval yet to weight the gauge over
    assert engine.counters["vllm:spec_decode_num_drafts"] == 0.0


def test_the_older_layout_reads_without_speculation():
    (engine,) = SglangAdapter().read_metrics(OLDER, AdapterState(), 0.0).engines
    assert engine.model_name == "meta-llama/Llama-3.1-8B-Instruct"
    assert engine.gauges["vllm:num_requests_running"] == 162.0
    assert engine.gauges["vllm:num_requests_waiting"] == 2826.0
    assert engine.gauges["vllm:kv_cache_usage_perc"] == 0.28
    assert engine.histograms["vllm:request_time_per_output_token_seconds"].count == 7.400757e6
    assert engine.counters == {"vllm:prompt_tokens": 8.128902e6, "vllm:generation_tokens": 7.557572e6}
    assert engine.histograms["vllm:time_to_first_token_seconds"].buckets[-1] == (float("inf"), 11008.0)
    assert "vllm:spec_decode_num_drafts" not in engine.counters


@pytest.mark.parametrize("text", [
    "sglang:num_running_reqs{model_name=\"m\" 3\n",  # an unclosed label set
    # a bucket without its le label
    "# TYPE sglang:time_to_first_token_seconds histogram\n"
    "sglang:time_to_first_token_seconds_bucket{model_name=\"m\"} 3\n",
])
def test_text_that_is_not_exposition_is_a_value_error(text):
    with pytest.raises(ValueError, match="not Prometheus exposition"):
        SglangAdapter().read_metrics(text, AdapterState(), 0.0)


def test_a_server_without_speculation_gets_no_acceptance_counters():
    # SGLang logs spec_accept_length as 0 without speculation; its server info says it does not speculate
    text = with_values(CURRENT, {"sglang:spec_accept_length": 0.0})
    (engine,) = SglangAdapter().read_metrics(text, AdapterState(), 0.0, None, info_read=True).engines
    assert "vllm:spec_decode_num_drafts" not in engine.counters


@pytest.mark.parametrize("info, method, k, tree", [
    (CHAIN_INFO, "eagle3", 3, None),
    (TREE_INFO, "eagle3", 5, "topk=4, 8 draft tokens verified per step"),
    (MTP_INFO, "mtp", 1, None),
])
def test_k_and_the_method_come_from_the_server_info(info, method, k, tree):
    config = speculation_from_sglang_info(info)
    assert (config.method, config.k, config.token_tree) == (method, k, tree)
    assert config.source_of("k") == "server_info"


def test_no_speculation_in_the_server_info_is_none():
    assert speculation_from_sglang_info(PLAIN_INFO) is None
    assert speculation_from_sglang_info({"speculative_algorithm": "NONE"}) is None
    assert speculation_from_sglang_info("not a dict") is None
    # a k of the wrong type is left out, not guessed
    assert speculation_from_sglang_info(dict(CHAIN_INFO, speculative_num_steps="3")).k is None


# -- the gauge, windowed --------------------------------------------------------------------------


# (time, spec_accept_length, generation tokens so far)
READINGS = [(0.0, 2.2, 1000.0), (2.0, 3.0, 1400.0), (5.0, 2.0, 1900.0),
            (6.0, 2.0, 1900.0),  # unchanged and no token counted: an idle engine's stale gauge, skipped
            (10.0, 2.5, 2600.0)]


def _snapshots(readings, info=CHAIN_INFO):
    adapter, state = SglangAdapter(), AdapterState()
    config = speculation_from_sglang_info(info)
    for t, length, generated in readings:
        text = with_values(CURRENT, {"sglang:spec_accept_length": length,
                                     "sglang:generation_tokens_total": generated})
        reading = adapter.read_metrics(text, state, t, config, info_read=True)
        yield Snapshot(time=1000.0 + t, targets=(TargetSample("http://sglang", "ok", engines=reading.engines,
                                                              speculation=config, engine="sglang"),))


def test_the_acceptance_gauge_is_time_weighted_over_the_window():
    window = Window(seconds=100.0)
    for snap in _snapshots(READINGS):
        window.add(snap)
    tw = window.target("http://sglang")
    acc = tw.total.acceptance
    # by hand: (0,2] at 3.0 for 2 s, (2,5] at 2.0 for 3 s, (5,6] skipped, (6,10] at 2.5 for 4 s
    assert acc.drafts == pytest.approx(9.0)
    assert acc.accepted_tokens == pytest.approx(2 * 2.0 + 3 * 1.0 + 4 * 1.5)
    assert acc.acceptance_length == pytest.approx(1 + 13.0 / 9.0)
    assert acc.acceptance_rate == pytest.approx(13.0 / 27.0)  # k = 3
    assert tw.k == 3 and tw.speculation_configured


def test_a_shorter_window_weighs_only_its_own_intervals():
    window = Window(seconds=5.0)
    for snap in _snapshots(READINGS):
        window.add(snap)
    acc = window.target("http://sglang").total.acceptance
    # the window keeps t = 5, 6, 10: (5,6] skipped, (6,10] at 2.5
    assert acc.acceptance_length == pytest.approx(2.5)


def test_a_restart_begins_the_integrals_again():
    integ = AcceptanceIntegrator()
    integ.add(0.0, 2.0, 100.0)
    integ.add(1.0, 3.0, 200.0)
    assert (integ.weight_s, integ.accepted_s) == (1.0, 2.0)
    integ.add(2.0, 2.5, 10.0)  # the generation counter went down: the server restarted
    assert (integ.weight_s, integ.accepted_s) == (0.0, 0.0)
    integ.add(4.0, 1.5, 50.0)
    assert (integ.weight_s, integ.accepted_s) == (2.0, 1.0)


def test_the_engine_survives_a_recording(tmp_path):
    snaps = list(_snapshots(READINGS))
    path = tmp_path / "sglang.swrec"
    write_recording(path, RecordingHeader("synthetic", targets=("http://sglang",), interval_s=1.0), snaps)
    back = read_recording(path).snapshots
    assert [s.targets[0].engine for s in back] == ["sglang"] * len(snaps)
    assert [s.to_dict() for s in back] == [s.to_dict() for s in snaps]
    assert Snapshot.from_dict(snaps[-1].to_dict()) == snaps[-1]


# -- against a fake SGLang server ---------------------------------------------------------------------


class FakeSglang:
    """/metrics stepping through a list of (spec_accept_length, generation tokens); /get_server_info."""

    def __init__(self, steps, info):
        self.steps, self.info, self.served = list(steps), info, 0

    def __call__(self, h: BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/metrics"):
            length, generated = self.steps[min(self.served, len(self.steps) - 1)]
            self.served += 1
            reply(200, with_values(CURRENT, {"sglang:spec_accept_length": length,
                                             "sglang:generation_tokens_total": generated}).encode())(h)
        elif h.path.startswith("/get_server_info") and self.info is not None:
            reply(200, json.dumps(self.info).encode(), "application/json")(h)
        else:
            reply(404, b'{"detail":"Not Found"}', "application/json")(h)


@pytest.mark.parametrize("info, method, k, tree_flag", [
    (CHAIN_INFO, "eagle3", 3, False),
    (TREE_INFO, "eagle3", 5, True),
    (MTP_INFO, "mtp", 1, False),
])
def test_check_reads_an_sglang_server(info, method, k, tree_flag):
    with LocalServer(FakeSglang([(2.2, 1000.0), (2.8, 1600.0)], info)) as srv:
        status, report = check_json("--url", srv.url)
    assert report["state"] == "ok"
    assert report["engine"]["name"] == "sglang"
    assert report["engine"]["version"] == "0.5.5"
    assert report["engine"]["running"] == 24.0
    spec = report["speculation"]
    assert (spec["configured"], spec["method"], spec["k"]) == (True, method, k)
    assert spec["acceptance_from"].startswith("sglang:spec_accept_length")
    # one interval, weighted by the gauge read at its end
    assert spec["window"]["acceptance_length"] == pytest.approx(2.8)
    assert spec["window"]["acceptance_rate"] == pytest.approx(1.8 / k)
    verdict = report["verdict"]
    assert "acceptance_from_gauge" in verdict["flags"]
    assert any("sglang:spec_accept_length" in r for r in verdict["reasons"])
    assert ("token_tree" in verdict["flags"]) == tree_flag
    assert "k_unknown" not in verdict["flags"]
    assert status in (0, 1, 2)


def test_check_reads_an_sglang_server_without_speculation():
    with LocalServer(FakeSglang([(0.0, 1000.0), (0.0, 1600.0)], PLAIN_INFO)) as srv:
        _, report = check_json("--url", srv.url)
    assert report["engine"]["name"] == "sglang"
    assert report["speculation"]["configured"] is False
    assert "acceptance_from_gauge" not in report["verdict"]["flags"]


def test_without_server_info_k_is_unknown_and_said():
    with LocalServer(FakeSglang([(2.2, 1000.0), (2.8, 1600.0)], None)) as srv:
        _, report = check_json("--url", srv.url)
    spec = report["speculation"]
    assert spec["configured"] is True and spec["k"] is None
    assert spec["window"]["acceptance_length"] == pytest.approx(2.8)
    assert spec["window"]["acceptance_rate"] is None
    assert "k_unknown" in report["verdict"]["flags"]


# -- the engine forced --------------------------------------------------------------------------------


def _scrape_once(url: str, engine: str) -> TargetSample:
    async def go():
        async with VllmSource([url], engine=engine) as src:
            return (await src.scrape())[0]

    return asyncio.run(go())


def test_forcing_vllm_on_an_sglang_server_names_what_is_missing():
    with LocalServer(FakeSglang([(2.0, 1.0)], CHAIN_INFO)) as srv:
        assert _scrape_once(srv.url, "sglang").engine == "sglang"
        assert _scrape_once(srv.url, "auto").engine == "sglang"
        forced = _scrape_once(srv.url, "vllm")
    assert forced.state == "families_missing" and "vLLM" in forced.message


def test_forcing_sglang_on_a_vllm_server_names_what_is_missing():
    with LocalServer(reply(200, VLLM.encode())) as srv:
        sample = _scrape_once(srv.url, "sglang")
        assert _scrape_once(srv.url, "auto").engine is None  # vLLM, as every Snapshot before engines
    assert sample.state == "families_missing" and sample.message.startswith("SGLang at")


def test_an_unknown_engine_is_a_usage_error():
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        try:
            status = main(["check", "--engine", "tgi", "--no-nvml", "--no-dcgm"])
        except SystemExit as exc:
            status = exc.code
    assert status == ExitCode.USAGE and "--engine" in out.getvalue()


def test_the_summary_names_the_engine_and_what_it_lacks():
    with LocalServer(FakeSglang([(2.2, 1000.0), (2.8, 1600.0)], TREE_INFO)) as srv:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["check", "--url", srv.url, "--window", "0.2", "--no-nvml", "--no-dcgm"])
    text = out.getvalue()
    assert "SGLang 0.5.5" in text
    assert "tree: topk=4, 8 draft tokens verified per step" in text
    assert "no per-position data" in text and "s of decoding (a gauge, time-weighted)" in text


def _verdicts(snapshots):
    from specwatch.advice.advisor import Advisor

    window, advisor, out = Window(seconds=30.0), Advisor(), []
    for snap in snapshots:
        window.add(snap)
        out.append(advisor.update(window.target("http://sglang"), snap.gpus).to_dict())
    return out


def test_a_recording_replays_to_the_same_verdicts(tmp_path):
    snaps = list(_snapshots(READINGS, TREE_INFO))
    path = tmp_path / "sglang.swrec"
    write_recording(path, RecordingHeader("synthetic", targets=("http://sglang",), interval_s=1.0), snaps)
    live = _verdicts(snaps)
    assert _verdicts(read_recording(path).snapshots) == live
    assert "acceptance_from_gauge" in live[-1]["flags"] and "token_tree" in live[-1]["flags"]
    assert live[-1]["acceptance_length"] == pytest.approx(1 + 13.0 / 9.0, abs=1e-4)


def test_an_sglang_target_that_goes_down_is_still_named_sglang():
    async def go(url):
        async with VllmSource([url], engine="sglang", timeout_s=2.0) as src:
            return (await src.scrape())[0]

    with LocalServer(reply(503, b"overloaded")) as srv:
        sample = asyncio.run(go(srv.url))
    assert sample.state == "http_5xx" and sample.engine == "sglang"
    assert sample.message.startswith("SGLang at")
