"""TensorRT-LLM (trtllm-serve) and Triton's TensorRT-LLM backend: payloads built as the engines build
them (tests/trtllm_payloads.py mirrors TensorRT-LLM's MetricsCollector; the Triton payload uses the
reporter's families and label values), read by check over HTTP, with figures worked out by hand.

The draining JSON /metrics is counted: read at most once when the engine is detected, never when
--engine trtllm is given."""

from __future__ import annotations

import contextlib
import io
import json
from http.server import BaseHTTPRequestHandler

import pytest

from http_fixtures import LocalServer, check_json, reply
from specwatch.cli import main
from specwatch.collectors.engines import detect_engine
from specwatch.collectors.trtllm import NO_CONFIG, NO_COUNTERS, NO_LOAD, looks_like_iteration_stats, read_trtllm
from specwatch.collectors.triton import read_triton
from specwatch.readings.window import ACCEPTED, DRAFT_TOKENS, DRAFTS
from trtllm_payloads import TrtllmState, basic, current

MTP3 = {"spec_enabled": "true", "spec_method": "MTP", "spec_num_tokens": "3"}
# One iteration of trtllm-serve's JSON /metrics (keys as nlohmann writes them, sorted)
ITERATION_STATS = json.dumps([{"cpuMemUsage": 0, "gpuMemUsage": 71882342400, "iter": 48213, "iterLatencyMS": 21.43,
                               "numActiveRequests": 10, "numQueuedRequests": 3, "specDecodingStats": None}]).encode()


def loaded(step: int) -> TrtllmState:
    """Two readings of an MTP k=3 server under load. From the first to the second: 600 drafts
    (drafted at position 0), 1800 draft tokens, 480 + 340 + 180 = 1000 accepted."""
    if step == 0:
        return TrtllmState(requests=100, prompt_tokens=50_000, generation_tokens=20_000, running=24, waiting=2,
                           kv_utilization=0.3321, drafted={0: 1000, 1: 1000, 2: 1000}, accepted={0: 800, 1: 560, 2: 300},
                           num_draft_tokens=3000, num_accepted_tokens=1660, last_acceptance_length=2.5, spec=MTP3)
    return TrtllmState(requests=160, prompt_tokens=80_000, generation_tokens=32_000, running=24, waiting=2,
                       kv_utilization=0.3321, drafted={0: 1600, 1: 1600, 2: 1600}, accepted={0: 1280, 1: 900, 2: 480},
                       num_draft_tokens=4800, num_accepted_tokens=2660,
                       # the last iteration had no drafts: the gauge reads 0, and is never judged from
                       last_acceptance_length=0.0, spec=MTP3)


class FakeTrtllm:
    """trtllm-serve: /metrics is the draining JSON, /prometheus/metrics steps through payloads."""

    def __init__(self, payloads: list[str], prometheus: bool = True) -> None:
        self.payloads, self.prometheus, self.served = payloads, prometheus, 0
        self.json_reads = 0

    def __call__(self, h: BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/prometheus/metrics") and self.prometheus:
            text = self.payloads[min(self.served, len(self.payloads) - 1)]
            self.served += 1
            reply(200, text.encode())(h)
        elif h.path.startswith("/metrics"):
            self.json_reads += 1
            reply(200, ITERATION_STATS if self.json_reads == 1 else b"[]", "application/json")(h)
        elif h.path.startswith("/version"):
            reply(200, b'{"version": "1.3.0"}', "application/json")(h)
        else:
            reply(404, b'{"detail":"Not Found"}', "application/json")(h)


def test_the_engines_are_told_apart_by_their_families():
    assert detect_engine(current(loaded(0))) == "trtllm"
    assert detect_engine(basic(loaded(0))) == "trtllm"
    assert detect_engine(TRITON) == "triton"
    assert looks_like_iteration_stats(ITERATION_STATS) and looks_like_iteration_stats(b"[]\n")
    assert not looks_like_iteration_stats(b"# HELP vllm:x\n") and not looks_like_iteration_stats(b'{"a": 1}')


def test_drafts_are_the_drafted_count_at_position_zero_and_positions_appear_lazily():
    # one finished request drafted at position 0 only so far: positions 1 and 2 exist with k = 3
    state = TrtllmState(drafted={0: 4}, accepted={0: 3}, spec=MTP3, running=1)
    engine = read_trtllm(current(state)).reading.engines[0]
    assert engine.counters[DRAFTS] == 4 and engine.counters[DRAFT_TOKENS] == 4 and engine.counters[ACCEPTED] == 3
    assert engine.accepted_per_position == (3.0, 0.0, 0.0)
    # before any request finished: the family is exported with no child, which is zero, not absent
    fresh = read_trtllm(current(TrtllmState(spec=MTP3, running=1)))
    assert fresh.reading.engines[0].counters[DRAFTS] == 0 and fresh.unjudged is None


def test_without_per_position_counters_drafts_are_draft_tokens_over_k():
    state = loaded(1)
    state.per_position = False
    engine = read_trtllm(current(state)).reading.engines[0]
    assert engine.counters[DRAFT_TOKENS] == 4800 and engine.counters[DRAFTS] == 1600  # 4800 / k = 3
    assert engine.counters[ACCEPTED] == 2660 and engine.accepted_per_position == ()


def test_check_reads_a_trtllm_serve_with_one_read_of_its_draining_json():
    fake = FakeTrtllm([current(loaded(0)), current(loaded(1))])
    with LocalServer(fake) as srv:
        status, report = check_json("--url", srv.url)
        json_reads = [path for path, _ in srv.requests if path.startswith("/metrics")]
    assert len(json_reads) == 1  # the one probe that told the engine apart, never a poll
    assert report["state"] == "ok" and report["engine"]["name"] == "trtllm"
    assert report["engine"]["version"] == "1.3.0" and report["engine"]["running"] == 24
    assert report["engine"]["kv_cache_usage"] == pytest.approx(0.3321)
    spec = report["speculation"]
    assert spec["configured"] and spec["k"] == 3 and spec["method"] == "mtp" and spec["source"] == "config_metric"
    window = spec["window"]
    assert window["drafts"] == 600 and window["draft_tokens"] == 1800 and window["accepted_tokens"] == 1000
    assert window["acceptance_length"] == pytest.approx(1 + 1000 / 600)  # 2.667, while the gauge read 0
    assert window["per_position"] == pytest.approx([480 / 600, 340 / 600, 180 / 600])
    assert window["acceptance_rate"] == pytest.approx(1000 / 1800)
    verdict = report["verdict"]
    assert "not_judged" not in verdict["flags"]
    assert verdict["speculation"] in ("on", "off", "hold", "unknown")
    assert not any("TensorRT-LLM exports" in r for r in verdict["reasons"])
    assert status in (0, 1, 2)


def test_forced_trtllm_never_reads_the_draining_json():
    fake = FakeTrtllm([current(loaded(0)), current(loaded(1))])
    with LocalServer(fake) as srv:
        _, report = check_json("--url", srv.url, "--engine", "trtllm")
        paths = [path for path, _ in srv.requests]
    assert not any(p.startswith("/metrics") for p in paths)
    assert report["speculation"]["window"]["drafts"] == 600


def test_a_server_without_the_prometheus_endpoint_is_told_what_to_switch_on():
    with LocalServer(FakeTrtllm([], prometheus=False)) as srv:
        status, report = check_json("--url", srv.url)
    assert status == 3 and report["state"] == "http_404"
    assert "return_perf_metrics: true" in report["message"] and "/prometheus/metrics" in report["message"]


@pytest.mark.parametrize("payload, reason", [
    (basic, NO_CONFIG),  # the 1.1-era build: neither configuration nor counters
    # speculation configured, but a build that exports no speculation family
    (lambda s: "\n".join(line for line in current(s).splitlines() if "spec_decode" not in line) + "\n", NO_COUNTERS),
    # counters, but no iteration gauges (enable_iter_perf_stats off): the load cannot be read
    (lambda s: "\n".join(line for line in current(s).splitlines() if "num_requests_" not in line) + "\n", NO_LOAD),
])
def test_no_confident_verdict_without_the_speculation_families(payload, reason):
    fake = FakeTrtllm([payload(loaded(0)), payload(loaded(1))])
    with LocalServer(fake) as srv:
        status, report = check_json("--url", srv.url, "--engine", "trtllm")
    verdict = report["verdict"]
    assert report["state"] == "ok" and verdict["speculation"] == "unknown" and status == 2
    assert verdict["reasons"][0] == reason and "not_judged" in verdict["flags"]
    assert "return_perf_metrics: true" in reason and "enable_iter_perf_stats: true" in reason


def test_a_trtllm_url_naming_the_prometheus_path_is_its_base():
    fake = FakeTrtllm([current(loaded(0)), current(loaded(1))])
    with LocalServer(fake) as srv:
        _, report = check_json("--url", srv.url + "/prometheus/metrics", "--engine", "trtllm")
    assert report["target"] == srv.url and report["engine"]["version"] == "1.3.0"


# Triton's TensorRT-LLM backend on :8002/metrics: the reporter's families and label values, loaded
TRITON = """\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 3
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 17
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 17
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.4875
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 3041
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 3198
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 6239
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 9120
nv_inference_request_success{model="tensorrt_llm",version="1"} 9120
"""


def test_triton_reads_load_and_kv_and_gives_no_verdict():
    (engine,) = read_triton(TRITON).engines
    assert engine.model_name == "tensorrt_llm"
    assert engine.gauges["vllm:num_requests_running"] == 17 and engine.gauges["vllm:num_requests_waiting"] == 3
    assert engine.gauges["vllm:kv_cache_usage_perc"] == 0.4875
    assert engine.gauges["vllm:cache_config_info:kv_cache_size_tokens"] == 6239 * 64
    with LocalServer(reply(200, TRITON.encode())) as srv:
        status, report = check_json("--url", srv.url)
    assert report["engine"]["name"] == "triton" and report["engine"]["running"] == 17
    assert report["engine"]["kv_cache_usage"] == 0.4875
    verdict = report["verdict"]
    assert verdict["speculation"] == "unknown" and status == 2
    assert verdict["reasons"][0].startswith("Triton's TensorRT-LLM backend exports no speculation family")


@pytest.mark.parametrize("ranges, schedule, max_concurrency", [
    # k 3 up to 16, 1 up to 48, then off: thresholds are the batch each length starts at
    ([[1, 16, 3], [17, 48, 1], [49, 256, 0]], {"1": 3, "17": 1, "49": 0}, 48),
    # on all the way: no max_concurrency, AUTO's cut at 32 gives it up early
    ([[1, 8, 4], [9, 256, 2]], {"1": 4, "9": 2}, None),
    # a longer draft further up: batch 1 alone drafts it (TensorRT-LLM requires {1: max_draft_len})
    ([[1, 4, 2], [5, 64, 3], [65, 256, 0]], {"1": 3, "2": 2, "5": 3, "65": 0}, 64),
])
def test_tune_gives_trtllms_own_knobs(ranges, schedule, max_concurrency):
    from specwatch.advice.tune import trtllm_knobs

    knobs = trtllm_knobs(ranges, "mtp", 256)
    assert knobs["draft_len_schedule"] == schedule and knobs["max_concurrency"] == max_concurrency
    assert knobs["max_draft_len"] == max(k for _, _, k in ranges) and knobs["decoding_type"] == "MTP"
    assert knobs["yaml"].startswith("speculative_config:\n  decoding_type: MTP\n")
    assert f"    1: {knobs['max_draft_len']}" in knobs["yaml"]
    assert any("AUTO" in note for note in knobs["notes"])


def test_tune_on_a_trtllm_serve_prints_its_yaml():
    fake = FakeTrtllm([current(loaded(0)), current(loaded(1))])
    out = io.StringIO()
    with LocalServer(fake) as srv, contextlib.redirect_stdout(out):
        status = main(["tune", "--url", srv.url, "--duration", "1", "--interval", "0.3", "--no-nvml", "--no-dcgm",
                       "--gpu", "H200", "--model", "DeepSeek-R1", "--tp", "8", "--json"])
    report = json.loads(out.getvalue())
    assert status == 0 and report["engine"] == "trtllm"
    knobs = report["trtllm"]
    assert knobs["decoding_type"] == "MTP" and knobs["draft_len_schedule"]["1"] == knobs["max_draft_len"] >= 1
    assert report["validation"] is None  # vLLM's validator is not asked about TensorRT-LLM's knobs
