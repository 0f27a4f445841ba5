"""Hardening (issue 9): every reader over the bad-input corpus in tests/corpus/, faults on real
loopback parts, and the security pass. Each case asserts a named state or a clear message, and that no
exception escapes; the CLI cases run as subprocesses and assert that stderr holds no traceback."""

from __future__ import annotations

import ast
import asyncio
import gzip
import json
import math
import os
import shutil
import ssl
import stat
import subprocess
import sys
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from http_fixtures import LocalServer, metrics_and_version, reply
from nvml_double import FakeClock, FakeNvml, hopper_gpu
from payloads import NGRAM_K4, read
from specwatch.collectors.gpus import GpuPoller
from specwatch.collectors.nvml import NvmlCollector
from specwatch.collectors.prometheus import PrometheusClient
from specwatch.collectors.vllm import VllmSource, VllmTarget, make_client, scrape_target
from specwatch.telemetry.exposition import MAX_POSITIONS, parse_payload
from specwatch.advice.monitor import Monitor
from specwatch.recording import RecordingError, read_recording
from specwatch.telemetry.snapshot import Snapshot
from specwatch.collectors.sources import LiveSource
from specwatch.sweep import SweepFileError, bench_side, load_bench_dir, load_sweep
from specwatch.readings.window import Window

CORPUS = Path(__file__).parent / "corpus"
METRICS = CORPUS / "metrics"
REAL = read(NGRAM_K4)
ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "specwatch", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def no_traceback(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-2000:]


def scrape(url: str, max_bytes: int = 32 * 1024 * 1024, **kw):
    async def go():
        async with make_client(**kw) as client:
            return await scrape_target(client, VllmTarget.from_url(url), max_bytes)

    return asyncio.run(go())


# ==================================================================================================
# /metrics corpus, through the real scraper against a loopback server
# ==================================================================================================

# file → (state, words in the message)
METRICS_EXPECTED = {
    "truncated_in_wanted_family.prom": ("not_prometheus", "malformed"),
    "binary.bin": ("not_prometheus", "binary"),
    "html_error_page.prom": ("not_prometheus", "HTML"),
    "json_error.prom": ("not_prometheus", "JSON"),
    "empty.prom": ("not_prometheus", "empty"),
    "garbage_text.prom": ("not_prometheus", "not Prometheus"),
    "garbage_in_wanted_family.prom": ("not_prometheus", "malformed"),
    "missing_families.prom": ("families_missing", "vllm:num_requests_running"),
    "nan_inf_values.prom": ("ok", ""),
    "duplicate_series.prom": ("ok", ""),
    "wrong_type_lines.prom": ("ok", ""),
    "label_escaping.prom": ("ok", ""),
    "v0_only.prom": ("ok", ""),
    "bogus_label_numbers.prom": ("ok", ""),
    "crlf_and_indent.prom": ("ok", ""),
    "samples_before_type.prom": ("ok", ""),
    "huge_label_value.prom": ("ok", ""),
    "counters_before_restart.prom": ("ok", ""),
    "counters_after_restart.prom": ("ok", ""),
}


def test_the_corpus_lists_every_metrics_file():
    assert sorted(p.name for p in METRICS.iterdir()) == sorted(METRICS_EXPECTED)


def _corpus_server() -> LocalServer:
    """Serves tests/corpus/metrics/NAME at /NAME/metrics (and /NAME/version)."""

    def on_get(h: BaseHTTPRequestHandler) -> None:
        name, _, rest = h.path.lstrip("/").partition("/")
        if rest.startswith("version"):
            reply(200, b'{"version": "0.32.0"}', "application/json")(h)
        elif rest.startswith("metrics") and (METRICS / name).is_file():
            reply(200, (METRICS / name).read_bytes())(h)
        else:
            reply(404, b"{}", "application/json")(h)

    return LocalServer(on_get)


@pytest.fixture(scope="module")
def corpus_server():
    with _corpus_server() as srv:
        yield srv


@pytest.mark.parametrize("name", sorted(METRICS_EXPECTED))
def test_every_metrics_payload_gets_a_named_state(corpus_server, name):
    state, words = METRICS_EXPECTED[name]
    t = scrape(f"{corpus_server.url}/{name}")
    assert t.state == state, t.message
    assert words in t.message
    if state != "ok":
        assert t.message.startswith(f"vLLM at {corpus_server.url}/{name}: ")
    else:
        assert t.engines


def _engine(name: str):
    (e,) = [e for e in parse_payload((METRICS / name).read_text(encoding="utf-8")).engines if e.engine == "0"]
    return e


def test_nan_and_inf_values_stay_out_of_the_figures():
    e = _engine("nan_inf_values.prom")
    assert "vllm:num_requests_running" not in e.gauges
    assert "vllm:spec_decode_num_drafts" not in e.counters
    assert "vllm:spec_decode_num_draft_tokens" not in e.counters
    assert all(math.isfinite(v) for v in [*e.counters.values(), *e.gauges.values()])


def test_duplicate_series_count_once_and_wrong_types_keep_the_values():
    real = parse_payload(REAL).engines[0]
    assert _engine("duplicate_series.prom").counters == real.counters
    wrong = _engine("wrong_type_lines.prom")
    assert wrong.gauges["vllm:num_requests_running"] == real.gauges["vllm:num_requests_running"]
    assert wrong.counters["vllm:generation_tokens"] == real.counters["vllm:generation_tokens"]


def test_escaped_labels_are_decoded_and_layout_quirks_read_alike():
    real = parse_payload(REAL).engines[0]
    escaped = _engine("label_escaping.prom")
    assert escaped.model_name == 'tiny\\llama "q" \n é✓'
    assert escaped.counters == real.counters
    for name in ("crlf_and_indent.prom", "samples_before_type.prom"):
        e = _engine(name)
        assert e.counters == real.counters and e.accepted_per_position == real.accepted_per_position, name
    huge = parse_payload((METRICS / "huge_label_value.prom").read_text()).engines
    assert {len(e.model_name or "") for e in huge} == {len("tiny-llama"), 20000}


def test_bogus_numbers_in_labels_are_ignored_not_raised():
    # position="²" passes str.isdigit but not int(); position="99999999" would make a tuple of 10^8
    e = _engine("bogus_label_numbers.prom")
    assert len(e.accepted_per_position) <= MAX_POSITIONS
    assert e.accepted_per_position[2:] == (40.0, 30.0)
    assert not any(k.startswith("vllm:cache_config_info:") and "block" in k and not math.isfinite(v)
                   for k, v in e.gauges.items())


def _window_over(names_or_texts, url="http://x"):
    from specwatch.telemetry.snapshot import TargetSample

    w = Window(60)
    figures = []
    for t, text in enumerate(names_or_texts):
        parsed = parse_payload(text)
        w.add(Snapshot(time=float(t * 5), targets=(TargetSample(url, "ok", engines=parsed.engines,
                                                                process_start_time=parsed.process_start_time),)))
        figures.append(w.target(url).total)
    return figures


def test_v0_only_server_gives_acceptance_through_the_window():
    v0 = (METRICS / "v0_only.prom").read_text()
    later = v0.replace("} 1240.0", "} 1860.0").replace("} 2000.0", "} 3000.0").replace("} 1740.0", "} 2610.0") \
        .replace("} 5000.0", "} 7000.0")
    figures = _window_over([v0, later])[-1]
    assert figures.acceptance is not None
    assert figures.acceptance.acceptance_rate == pytest.approx(620 / 1000)
    assert figures.generation_tokens_per_s == pytest.approx(400.0)


def _numbers(obj):
    if isinstance(obj, float):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _numbers(v)
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from _numbers(getattr(obj, name))


def test_counters_going_backwards_give_no_negative_rate():
    texts = [(METRICS / n).read_text() for n in
             ("counters_before_restart.prom", "counters_after_restart.prom", "counters_before_restart.prom")]
    for figures in _window_over(texts):
        if figures is not None:
            assert not [v for v in _numbers(figures) if v < 0], figures
    assert figures.acceptance is not None and figures.acceptance.drafts >= 0


@pytest.mark.parametrize("name, code, state", [
    ("binary.bin", 3, "not_prometheus"),
    ("truncated_in_wanted_family.prom", 3, "not_prometheus"),
    ("missing_families.prom", 3, "families_missing"),
    # the same body twice: counters frozen while 4 requests run, which is a stalled engine (exit 3)
    ("v0_only.prom", 3, "ok"),
])
def test_check_cli_over_the_corpus_exits_without_a_traceback(corpus_server, name, code, state):
    r = cli("check", "--url", f"{corpus_server.url}/{name}", "--window", "0.2", "--json", "--no-nvml", "--no-dcgm")
    no_traceback(r)
    report = json.loads(r.stdout)
    assert report["state"] == state
    if code is not None:
        assert r.returncode == code
    else:
        assert r.returncode in (0, 1, 2)


# -- 10 MB and 100 MB ------------------------------------------------------------------------------


def _streamed(block: bytes, total: int, declare: bool, sent: list[int]):
    """Streams `total` bytes made of `block`, lazily (the server never holds the payload)."""

    def on_get(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        if declare:
            h.send_header("Content-Length", str(total))
        else:
            h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            left = total
            while left > 0:
                part = block[:left]
                h.wfile.write(part if declare else f"{len(part):x}\r\n".encode() + part + b"\r\n")
                sent[0] += len(part)
                left -= len(part)
            if not declare:
                h.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    return on_get


def _filler(size: int) -> bytes:
    line = b'http_request_duration_seconds_bucket{handler="/v1/completions/xxxxxxxxxxxxxxxx",le="0.1",method="POST"} 12.0\n'
    return b"# TYPE http_request_duration_seconds histogram\n" + line * (size // len(line))


def test_a_10_mb_payload_is_read_within_the_cap():
    body = REAL.encode() + _filler(10 * 1024 * 1024)
    assert len(body) > 10 * 1024 * 1024
    with LocalServer(reply(200, body)) as srv:
        started = time.perf_counter()
        t = scrape(srv.url, timeout_s=30.0)
        took = time.perf_counter() - started
    assert t.ok, t.message
    assert t.engines[0].accepted_per_position == (135.0, 67.0, 40.0, 30.0)
    assert t.payload_bytes == len(body)
    assert took < 30


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "chunked"])
def test_a_100_mb_payload_is_stopped_at_the_cap_in_bounded_memory(declare):
    total = 100 * 1024 * 1024
    cap = 32 * 1024 * 1024
    sent = [0]
    block = _filler(256 * 1024)
    with LocalServer(_streamed(block, total, declare, sent)) as srv:
        tracemalloc.start()
        try:
            t = scrape(srv.url, max_bytes=cap, timeout_s=30.0)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert t.state == "payload_too_large", t.message
    assert str(cap) in t.message
    assert peak < cap + 16 * 1024 * 1024, peak  # the cap plus the reader's working set, never 100 MB
    assert sent[0] < total  # it stopped reading: the server never got to send everything


# ==================================================================================================
# Recordings
# ==================================================================================================

RECORDINGS_EXPECTED = {
    # file → (RecordingError words | None when it reads with a warning, warning words)
    "empty.swrec": ("is empty", None),
    "not_gzip.swrec": ("not gzip-compressed", None),
    "foreign_gzip.swrec": ("not of JSON lines", None),
    "corrupt_deflate.swrec": ("corrupt", None),
    "truncated.swrec": (None, "truncated"),
    "header_overflow.swrec": ("malformed header", None),
    "header_wrong_types.swrec": ("malformed header", None),
    "newer_format.swrec": ("upgrade specwatch", None),
    "deeply_nested_line.swrec": (None, "unreadable line"),
    "gpu_index_overflow.swrec": (None, "damaged Snapshot"),
    "same_points_nowhere.swrec": (None, "damaged Snapshot"),
    "snapshot_wrong_types.swrec": (None, "damaged Snapshot"),
    "trailing_garbage.swrec": (None, "unreadable data"),
    # issue 45: cut before the header's end, or a gzip stub, said it "replayed everything written"
    "gzip_stub.swrec": ("cut off before its header ended, so nothing in it can be replayed", None),
    "cut_in_header.swrec": ("cut off before its header ended, so nothing in it can be replayed", None),
    # a header and no reading: read, with the warning; `replay` fails on it (below)
    "header_then_cut.swrec": (None, "ends without its closing marker"),
}


def test_the_corpus_lists_every_recording():
    assert sorted(p.name for p in (CORPUS / "recordings").iterdir()) == sorted(RECORDINGS_EXPECTED)


@pytest.mark.parametrize("name", sorted(RECORDINGS_EXPECTED))
def test_every_bad_recording_is_an_error_or_a_warning(name):
    error, warning = RECORDINGS_EXPECTED[name]
    path = CORPUS / "recordings" / name
    if error is not None:
        with pytest.raises(RecordingError, match=error):
            read_recording(path)
    else:
        rec = read_recording(path)
        assert any(warning in w for w in rec.warnings), rec.warnings


def test_a_recording_with_nothing_to_replay_fails_replay_and_says_why():
    """Issue 45: a recording cut inside its header, or after its header and before any reading,
    exited 0 ("holds no Snapshots"; "replayed everything written"). Nothing replayed is a failure."""
    for name, words in (("header_then_cut.swrec", "holds its header and no Snapshots: nothing to replay"),
                        ("cut_in_header.swrec", "cut off before its header ended"),
                        ("gzip_stub.swrec", "(2 bytes;")):
        r = cli("replay", "--headless", str(CORPUS / "recordings" / name))
        no_traceback(r)
        assert r.returncode == 3, (name, r.stderr)
        assert words in r.stderr and "replayed everything written" not in r.stderr, (name, r.stderr)


@pytest.mark.parametrize("args", [
    ("replay", "--headless", "{dir}/corrupt_deflate.swrec"),
    ("replay", "--headless", "{dir}/header_overflow.swrec"),
    ("replay", "--headless", "{dir}/deeply_nested_line.swrec"),
    ("export", "--replay", "{dir}/empty.swrec", "--listen", "127.0.0.1:0"),
    ("tune", "--from", "{dir}/gpu_index_overflow.swrec"),
])
def test_cli_over_bad_recordings_never_shows_a_traceback(args):
    r = cli(*(a.format(dir=CORPUS / "recordings") for a in args))
    no_traceback(r)
    assert r.returncode != 0 or args[0] == "replay"
    assert r.stderr.strip() or r.stdout.strip()


# ==================================================================================================
# Sweeps and bench files
# ==================================================================================================

SWEEPS_EXPECTED = {
    "not_json.json": "not valid JSON",
    "wrong_schema.json": "not a specwatch sweep",
    "crossing_is_text.json": "numbers or null",
    "crossing_state_list.json": "crossing_state",
    "tier_concurrency_nan.json": "finite number",
    "deeply_nested.json": "not valid JSON",
    "binary.json": "not valid JSON",
}


@pytest.mark.parametrize("name", sorted(SWEEPS_EXPECTED))
def test_bad_sweep_files_are_refused_clearly(name):
    with pytest.raises(SweepFileError, match=SWEEPS_EXPECTED[name]):
        load_sweep(CORPUS / "sweep" / name)


def test_watch_with_a_bad_sweep_exits_before_the_dashboard():
    r = cli("watch", "--sweep", str(CORPUS / "sweep" / "crossing_is_text.json"), "--no-nvml", "--no-dcgm")
    no_traceback(r)
    assert r.returncode == 3 and "numbers or null" in r.stderr


def test_every_bad_bench_file_is_reported_and_skipped(tmp_path):
    tiers, errors = load_bench_dir(CORPUS / "bench")
    names = sorted(p.name for p in (CORPUS / "bench").iterdir())
    # tiny_drafts.json is a usable result (k unknown): every other file is reported by name
    assert list(tiers) == [8] and tiers[8]["k"] is None
    assert len(errors) == len(names) - 1
    for name in names:
        if name != "tiny_drafts.json":
            assert any(name in e for e in errors), name


def test_bench_side_with_absurd_draft_counts_does_not_overflow():
    concurrency, side = bench_side({"max_concurrency": 2, "completed": 3, "output_throughput": 1.0,
                                    "median_tpot_ms": 1.0, "spec_decode_num_drafts": 1e-320,
                                    "spec_decode_draft_tokens": 5}, "x")
    assert concurrency == 2 and side["k"] is None


def test_sweep_from_bench_cli_over_the_corpus(tmp_path):
    r = cli("sweep", "--from-bench", str(CORPUS / "bench"), str(CORPUS / "bench"), "--output", str(tmp_path / "o"))
    no_traceback(r)


# ==================================================================================================
# PromQL
# ==================================================================================================

PROMQL_EXPECTED = {
    "bad_data_400.json": ("promql_error", "bad_data: parse error"),
    "timeout_503.json": ("promql_error", "timeout"),
    "html_502.json": ("http_error", "HTTP 502"),
    "result_not_list.json": ("not_prometheus", "malformed"),
    "metric_is_list.json": ("not_prometheus", "malformed"),
    "value_missing.json": ("not_prometheus", "malformed"),
    "warnings_not_list.json": ("not_prometheus", "malformed"),
    "scalar_not_list.json": ("not_prometheus", "malformed"),
    "matrix.json": ("not_prometheus", "instant vector"),
    "data_not_object.json": ("not_prometheus", "query API"),
    "value_text.json": ("ok", ""),
}


def test_every_promql_answer_gets_a_state():
    def on_get(h: BaseHTTPRequestHandler) -> None:
        name = h.path.lstrip("/").split("/", 1)[0]
        answer = json.loads((CORPUS / "promql" / name).read_text())
        body = answer["body"]
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        reply(answer["status_code"], data, "application/json")(h)

    assert sorted(p.name for p in (CORPUS / "promql").iterdir()) == sorted(PROMQL_EXPECTED)

    async def go(url):
        client = PrometheusClient(url, timeout_s=5.0)
        try:
            return await client.query("up")
        finally:
            await client.aclose()

    with LocalServer(on_get) as srv:
        for name, (state, words) in PROMQL_EXPECTED.items():
            result = asyncio.run(go(f"{srv.url}/{name}"))
            assert result.state == state, (name, result)
            assert words in result.message, (name, result.message)


# ==================================================================================================
# Faults on real loopback parts
# ==================================================================================================


class Switchable:
    """A /metrics server that hangs (accepts, never answers) until released, then answers."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.hang.set()
        self.released = threading.Event()

        def on_get(h: BaseHTTPRequestHandler) -> None:
            if self.hang.is_set():
                self.released.wait(30)
                return
            metrics_and_version(lambda: REAL.encode())(h)

        self.server = LocalServer(on_get)

    def answer(self) -> None:
        self.hang.clear()
        self.released.set()


def test_a_server_that_never_answers_times_out_in_check_watch_and_export_then_recovers():
    from prometheus_client import generate_latest

    from specwatch.outputs.export import ExportAgent, build_registry

    sw = Switchable()
    with sw.server as srv:
        r = cli("check", "--url", srv.url, "--timeout", "0.5", "--window", "0.2", "--json", "--no-nvml", "--no-dcgm")
        no_traceback(r)
        assert r.returncode == 3 and json.loads(r.stdout)["state"] == "timeout"

        async def live_reads():
            live = LiveSource(VllmSource([srv.url], timeout_s=0.5), None, interval_s=0.1)
            agent = ExportAgent(live, Monitor(window_s=30), "node", "live")
            registry = build_registry(agent, process_metrics=False)
            try:
                first = await live.read()
                agent.ingest(first)
                exposed_down = generate_latest(registry).decode()
                sw.answer()
                second = await live.read()
                agent.ingest(second)
                exposed_up = generate_latest(registry).decode()
            finally:
                await live.aclose()
            return first, second, exposed_down, exposed_up

        first, second, down, up = asyncio.run(live_reads())
        assert first.targets[0].state == "timeout" and "no answer within the timeout" in first.targets[0].message
        assert second.targets[0].ok, second.targets[0].message
        assert 'state="timeout"' in down and 'state="ok"' in up
        r = cli("check", "--url", srv.url, "--timeout", "2", "--window", "0.2", "--json", "--no-nvml", "--no-dcgm")
        no_traceback(r)
        assert r.returncode == 2 and json.loads(r.stdout)["state"] == "ok"


def _slow_loris(byte_every_s: float, sent: list[int]):
    body = REAL.encode()

    def on_get(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        try:
            for i in range(len(body)):
                h.wfile.write(body[i:i + 1])
                h.wfile.flush()
                sent[0] += 1
                time.sleep(byte_every_s)
        except (BrokenPipeError, ConnectionResetError):
            pass

    return on_get


def test_a_slow_loris_metrics_is_bounded_by_the_whole_timeout():
    """A byte every 50 ms never trips httpx's per-read timeout (1 s); the whole-answer deadline must."""
    sent = [0]
    with LocalServer(_slow_loris(0.05, sent)) as srv:
        started = time.perf_counter()
        t = scrape(srv.url, timeout_s=1.0)
        took = time.perf_counter() - started
    assert t.state == "timeout", t.message
    assert "within the timeout" in t.message
    assert took < 3.0, took
    assert 0 < sent[0] < len(REAL)


def test_dns_failure_through_the_live_source():
    async def go():
        live = LiveSource(VllmSource(["http://specwatch-no-such-host.invalid:8000"], timeout_s=5.0), None)
        try:
            return await live.read()
        finally:
            await live.aclose()

    snap = asyncio.run(go())
    assert snap.targets[0].state == "dns_failure", snap.targets[0].message
    assert "does not resolve" in snap.targets[0].message


def test_gpu_lost_mid_run_on_one_of_eight_through_the_monitor():
    """GpuIsLost on GPU 3 of 8, through a LiveSource over a real loopback vLLM double and the NVML
    double, into the Monitor: the verdict's counter signal keeps using the other seven GPUs."""
    clock = FakeClock()
    gpus = [hopper_gpu(i) for i in range(8)]
    nvml = FakeNvml(gpus, clock=clock)
    collector = NvmlCollector(nvml, clock=clock, proc_root="/nonexistent-proc")
    with LocalServer(metrics_and_version(lambda: REAL.encode())) as srv:
        async def go():
            live = LiveSource(VllmSource([srv.url]), GpuPoller(collector, dcgm=False), interval_s=0.1)
            monitor = Monitor(window_s=30, evaluate_every_s=0.0)
            snaps = []
            try:
                for i in range(4):
                    if i == 2:
                        nvml.lose_gpu(3)
                    snap = await live.read()
                    snaps.append(snap)
                    monitor.ingest(snap)
                    clock.advance(1.0)
            finally:
                await live.aclose()
            return snaps, monitor

        snaps, monitor = asyncio.run(go())
    last = snaps[-1]
    assert [g.lost for g in last.gpus] == [i == 3 for i in range(8)]
    assert any(s.state == "gpu_lost" and "7 of 8" in s.message for s in last.sources)
    others = [g.values["dram_bw_util"] for g in last.gpus if not g.lost and "dram_bw_util" in g.values]
    assert len(others) == 7
    (state,) = monitor.states.values()
    signals = {s.name: s for s in state.verdict.bound.signals}
    counter = [s for name, s in signals.items() if "dram" in name.lower() or "counter" in name.lower()]
    assert counter, signals
    assert all(not g.lost for g in snaps[0].gpus)


# ==================================================================================================
# Security
# ==================================================================================================

SECRET = "sk-specwatch-hardening-secret-7f3a"


def test_there_is_no_token_flag_anywhere():
    from specwatch.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    flags = {opt for p in sub.choices.values() for a in p._actions for opt in a.option_strings}
    assert "--token-env" in flags and "--token-file" in flags
    assert not {f for f in flags if f in ("--token", "--bearer", "--password", "--api-key")}
    r = cli("check", "--token", SECRET, "--window", "0.1")
    assert r.returncode == 64 and ("unrecognized arguments" in r.stderr or "ambiguous option" in r.stderr)
    assert SECRET not in r.stderr
    no_traceback(r)


def test_the_token_never_reaches_stderr_or_the_recording_and_the_file_is_private(tmp_path):
    seen: list[str] = []

    def on_get(h: BaseHTTPRequestHandler) -> None:
        auth = h.headers.get("Authorization", "")
        seen.append(auth)
        if auth != f"Bearer {SECRET}":
            reply(401, b"no")(h)
            return
        metrics_and_version(lambda: REAL.encode())(h)

    out = tmp_path / "s.swrec"
    with LocalServer(on_get) as srv:
        r = cli("record", "--url", srv.url, "-o", str(out), "--duration", "2.5", "--interval", "0.5",
                "--no-nvml", "--no-dcgm", env={"SPECWATCH_TOKEN": SECRET})
    no_traceback(r)
    assert r.returncode == 0, r.stderr
    assert seen and all(a == f"Bearer {SECRET}" for a in seen)  # the token was really in use
    assert SECRET not in r.stdout and SECRET not in r.stderr
    raw = out.read_bytes()
    assert SECRET.encode() not in raw and SECRET.encode() not in gzip.decompress(raw)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    rec = read_recording(out)
    assert rec.snapshots and all(s.targets[0].ok for s in rec.snapshots)
    # and the 401 message, when the token is wrong, names no token either
    with LocalServer(on_get) as srv:
        r = cli("check", "--url", srv.url, "--window", "0.1", "--json", "--no-nvml", "--no-dcgm",
                env={"SPECWATCH_TOKEN": SECRET + "-wrong"})
    no_traceback(r)
    assert r.returncode == 3 and json.loads(r.stdout)["state"] == "http_401"
    assert SECRET not in r.stdout and SECRET not in r.stderr


def test_the_exporter_defaults_to_loopback():
    from specwatch.outputs.export import is_loopback
    from specwatch.outputs.export import DEFAULT_LISTEN

    host = DEFAULT_LISTEN.rsplit(":", 1)[0].strip("[]")
    assert is_loopback(host)


FORBIDDEN_CALLS = {("os", "system"), ("os", "popen"), ("pickle", "load"), ("pickle", "loads"),
                   ("marshal", "loads"), ("yaml", "load"), ("shelve", "open")}


def _python_files():
    for folder in ("specwatch", "collectors"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_shell_eval_exec_or_pickle_in_the_package():
    problems = []
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                if any(n and n.split(".")[0] in ("pickle", "marshal", "shelve", "dill", "cloudpickle") for n in names):
                    problems.append(f"{where}: imports {names}")
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("eval", "exec", "compile", "__import__"):
                problems.append(f"{where}: {f.id}(")
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in FORBIDDEN_CALLS:
                problems.append(f"{where}: {f.value.id}.{f.attr}(")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    problems.append(f"{where}: shell=")
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "subprocess" \
                    and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp)):
                problems.append(f"{where}: subprocess.{f.attr} with a command string")
    assert not problems, problems


@pytest.mark.parametrize("bad", ["--port=1; rm -rf /", "--host\n0.0.0.0", "--model=other", "a\x00b"])
def test_sweep_serve_arguments_are_validated(bad):
    from specwatch.sweep import validate_model_argument, validate_serve_args

    with pytest.raises(ValueError):
        validate_serve_args([bad] if not bad.startswith("--port") else ["--port=1"])
    if bad.startswith("--") or "\x00" in bad or "\n" in bad:
        with pytest.raises(ValueError):
            validate_model_argument(bad)


def test_the_launched_server_command_is_a_list_run_without_a_shell():
    from specwatch.sweep import LaunchedServer

    server = LaunchedServer(sys.executable, "org/model; echo pwned", speculative_config=None,
                            log_path=Path(os.devnull))
    cmd = server.command()
    assert isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)
    assert "org/model; echo pwned" in cmd  # one argv entry, never interpreted by a shell


# -- TLS ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        from cryptography import x509  # noqa: F401
        have_cryptography = True
    except ImportError:
        have_cryptography = False
    if have_cryptography:  # pragma: no cover - not installed in the dev venv
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        k = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = datetime.datetime.now(datetime.timezone.utc)
        c = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
             .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
             .sign(k, hashes.SHA256()))
        cert.write_bytes(c.public_bytes(serialization.Encoding.PEM))
        key.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
    else:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor openssl is available")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


@pytest.fixture
def https_server(self_signed):
    cert, key = self_signed
    srv = LocalServer(metrics_and_version(lambda: REAL.encode()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv.httpd.socket = context.wrap_socket(srv.httpd.socket, server_side=True)
    with srv:
        yield srv.url.replace("http://", "https://"), cert


def test_tls_is_verified_by_default_and_insecure_or_ca_file_opt_out(https_server):
    url, cert = https_server
    t = scrape(url, timeout_s=5.0)
    assert t.state == "tls_error", t.message
    assert "TLS failed" in t.message and "CERTIFICATE_VERIFY_FAILED" in t.message.upper().replace(" ", "_")
    assert scrape(url, timeout_s=5.0, verify=False).ok
    assert scrape(url, timeout_s=5.0, verify=str(cert)).ok


def test_a_missing_or_bad_ca_file_is_a_message_not_a_traceback(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    for ca in (tmp_path / "missing.pem", bad):
        r = cli("check", "--url", "https://127.0.0.1:1", "--ca-file", str(ca), "--window", "0.1",
                "--no-nvml", "--no-dcgm")
        no_traceback(r)
        assert r.returncode == 3 and f"cannot use the CA file {ca}" in r.stderr


def test_tls_flags_on_the_command_line(https_server):
    url, cert = https_server
    r = cli("check", "--url", url, "--window", "0.2", "--json", "--no-nvml", "--no-dcgm")
    no_traceback(r)
    assert r.returncode == 3 and json.loads(r.stdout)["state"] == "tls_error"
    r = cli("check", "--url", url, "--window", "0.2", "--json", "--no-nvml", "--no-dcgm", "--ca-file", str(cert))
    no_traceback(r)
    assert r.returncode == 2 and json.loads(r.stdout)["state"] == "ok"
    r = cli("check", "--url", url, "--window", "0.2", "--json", "--no-nvml", "--no-dcgm", "--insecure")
    no_traceback(r)
    assert r.returncode == 2 and json.loads(r.stdout)["state"] == "ok"


@pytest.mark.parametrize("command", [
    ["check", "--url", "http://127.0.0.1:9"],
    ["sweep", "--baseline", "http://127.0.0.1:9", "--speculative", "http://127.0.0.1:9"],
    ["fleet", "--prometheus", "http://127.0.0.1:9"],
    ["export", "--url", "http://127.0.0.1:9"],
    ["record", "-o", "/nonexistent-dir/x.swrec", "--url", "http://127.0.0.1:9"],
    ["tune", "--url", "http://127.0.0.1:9"],
])
def test_a_missing_ca_file_is_a_message_in_every_command(command):
    r = subprocess.run([sys.executable, "-m", "specwatch", *command, "--ca-file", "/nonexistent/ca.pem"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr  # an unreadable file, in every command
    assert "Traceback" not in r.stderr
    assert "cannot use the CA file /nonexistent/ca.pem" in r.stderr


# Every duration, rate, speed, ratio and size an operator types is a finite number in its range, or a
# usage error of one line naming the flag: before, `check --timeout nan` ended in a traceback, and a
# negative timeout, a 0-byte limit, a NaN draft ratio or an infinite window were taken as given.
BAD_NUMBERS = [
    ("check", "--timeout", "nan"), ("check", "--timeout", "-1"), ("check", "--timeout", "0"),
    ("check", "--max-bytes", "0"), ("check", "--max-bytes", "-5"), ("check", "--window", "inf"),
    ("check", "--draft-ratio", "nan"), ("check", "--draft-ratio", "-1"),
    ("watch", "--interval", "nan"), ("watch", "--history", "0"), ("watch", "--window", "-inf"),
    ("record", "--duration", "0"), ("record", "--interval", "nan"),
    ("replay", "--window", "nan"), ("replay", "--evaluate-every", "nan"), ("replay", "--speed", "0"),
    ("export", "--interval", "0"), ("export", "--window", "nan"), ("export", "--speed", "-2"),
    ("fleet", "--refresh", "0"), ("fleet", "--timeout", "nan"), ("fleet", "--window", "-1"),
    ("tune", "--duration", "0"), ("tune", "--interval", "nan"), ("tune", "--margin", "nan"),
    ("tune", "--max-batch", "0"), ("sweep", "--draft-ratio", "-0.5"),
]


@pytest.mark.parametrize("command, flag, value", BAD_NUMBERS)
def test_a_number_out_of_its_range_is_a_usage_error_naming_the_flag(command, flag, value, capsys):
    from specwatch.cli import main
    from specwatch.commands.options import ExitCode

    positional = ["a.swrec"] if command == "replay" else []
    with pytest.raises(SystemExit) as exit_:
        main([command, *positional, f"{flag}={value}"])
    assert exit_.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and value in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
