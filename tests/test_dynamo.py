"""NVIDIA Dynamo from real captures (tests/data/dynamo, Dynamo 1.6.1's frontend and mocker workers on
this CPU, see its README): the frontend's window figures worked out by hand from the files, a worker's
system port read as the engine it wraps and placed in its deployment, a prefill worker not judged, the
workers a frontend lists matched to the ones read, and a Dynamo worker's pass-through of real vLLM
counters giving the same figures as the bare vLLM.

The engine tier (tests/test_engine_dynamo.py) runs the same against a live Dynamo."""

from __future__ import annotations

import contextlib
import io
import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from http_fixtures import LocalServer, check_json, reply
from specwatch.cli import main
from specwatch.collectors.dynamo import decimal_worker_id, read_frontend, worker_identity
from specwatch.collectors.engines import detect_engine
from specwatch.telemetry.exposition import parse_payload

DATA = Path(__file__).parent / "data"
CAPTURES = DATA / "dynamo"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text(encoding="utf-8")


class Steps:
    """/metrics stepping through payloads (the last one repeated), 404 elsewhere."""

    def __init__(self, *payloads: str) -> None:
        self.payloads, self.served = payloads, 0

    def __call__(self, h: BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/metrics"):
            text = self.payloads[min(self.served, len(self.payloads) - 1)]
            self.served += 1
            reply(200, text.encode())(h)
        else:
            reply(404, b"", "text/plain")(h)


def test_the_captures_are_told_apart():
    assert detect_engine(capture("frontend-loaded.prom")) == "dynamo"
    # the mocker passes vLLM-named gauges through: read by the vLLM adapter, placed by Dynamo's labels
    assert detect_engine(capture("mocker-worker.prom")) == "vllm"
    assert detect_engine(capture("mocker-prefill.prom")) == "dynamo"  # Dynamo's families alone


def test_a_frontend_gives_the_windows_mean_ttft_and_itl_and_names_dynamo():
    # idle → loaded: 16 unary requests measured TTFT (streamed ones are not in it, in 1.6.1), 496
    # inter-token gaps (16 × 31: one per token after the first), 512 tokens out
    with LocalServer(Steps(capture("frontend-idle.prom"), capture("frontend-loaded.prom"))) as srv:
        status, report = check_json("--url", srv.url)
    engine = report["engine"]
    assert report["state"] == "ok" and engine["name"] == "dynamo" and engine["model"] == "tiny"
    assert engine["ttft_mean_s"] == pytest.approx(0.27810076400000006 / 16, abs=1e-6)
    assert engine["tpot_mean_s"] == pytest.approx(2.848085501 / 496, abs=1e-6)
    placed = report["deployment"]
    assert placed["namespace"] == "dynamo" and placed["role"] == "frontend" and not placed["judged"]
    assert placed["workers_listed"] == ["14166557568102874858 (decode)"]
    assert placed["workers_read"] == [] and placed["workers_not_read"] == ["14166557568102874858 (decode)"]
    verdict = report["verdict"]
    assert verdict["speculation"] == "unknown" and verdict["reasons"][0].startswith("a Dynamo frontend sees no drafts")
    assert status == 0  # a frontend is not judged by design: nothing missing, nothing to change


def test_a_worker_is_placed_and_matched_to_the_workers_its_frontend_lists():
    worker = capture("mocker-worker.prom")
    identity = worker_identity(worker)
    assert identity.namespace == "dynamo" and identity.component == "backend" and identity.role == "aggregated"
    # the worker's port writes its id in hex, the frontend in decimal
    assert identity.worker_id == decimal_worker_id("c499b90cf0e4beea") == "14166557568102874858"
    with LocalServer(Steps(capture("frontend-loaded.prom"))) as front, LocalServer(Steps(worker)) as back:
        status, report = check_json("--url", front.url, "--url", back.url)
    by_target = {r["target"]: r for r in report["targets"]}
    frontend, worker_report = by_target[front.url], by_target[back.url]
    assert frontend["deployment"]["workers_read"] == [back.url]
    assert frontend["deployment"]["workers_not_read"] == []
    assert worker_report["engine"]["name"] == "vllm"
    assert worker_report["deployment"]["role"] == "aggregated"
    # the mocker has vLLM's gauges but no token or speculation counter: read, not judged
    assert worker_report["state"] == "ok" and worker_report["verdict"]["speculation"] == "unknown"
    assert "passes through vLLM's load gauges" in worker_report["verdict"]["reasons"][0]


def test_a_disaggregated_pair_its_prefill_worker_is_not_judged():
    front, prefill, decode = (capture(n) for n in ("frontend-disagg.prom", "mocker-prefill.prom", "mocker-decode.prom"))
    _, workers, _ = read_frontend(front)
    assert {w.split(" ")[1] for w in workers} == {"(prefill)", "(decode)"}
    assert worker_identity(prefill).role == "prefill" and worker_identity(decode).role == "aggregated"
    with LocalServer(Steps(front)) as f, LocalServer(Steps(prefill)) as p, LocalServer(Steps(decode)) as d:
        status, report = check_json("--url", f.url, "--url", p.url, "--url", d.url)
    by_target = {r["target"]: r for r in report["targets"]}
    assert by_target[f.url]["deployment"]["workers_not_read"] == []
    # the decode worker's labels say "backend", as an aggregated one's: its frontend says decode
    assert by_target[d.url]["deployment"]["role"] == "decode"
    prefill_report = by_target[p.url]
    assert prefill_report["deployment"]["role"] == "prefill" and prefill_report["engine"]["name"] == "dynamo"
    assert prefill_report["verdict"]["reasons"][0].startswith("a prefill worker verifies no drafts")


def test_a_bare_engine_named_prefill_by_the_operator_is_not_judged():
    text = (DATA / "vllm-0.32-cpu-ngram-k4.metrics.txt").read_text(encoding="utf-8")
    with LocalServer(Steps(text)) as srv:
        status, report = check_json("--prefill", srv.url)
    assert len(report["targets"]) == 1  # --prefill alone: no default server beside it
    assert report["deployment"]["role"] == "prefill" and report["verdict"]["speculation"] == "unknown"
    assert status == 0


def dynamo_passthrough(vllm_text: str, worker_id: str = "1effff26fe705f7f") -> str:
    """A vLLM payload as a Dynamo worker's system port serves it: Dynamo's hierarchy labels added to
    every vllm: series (the newer pass-through), and the worker's own dynamo_component_* families
    (their lines from the real mocker capture, with this worker's id)."""
    labels = 'dynamo_component="backend",dynamo_endpoint="generate",dynamo_namespace="dynamo",'

    def labelled(line: str) -> str:
        if not line.startswith("vllm:"):
            return line
        if "{" in line:
            return line.replace("{", "{" + labels, 1)
        name, value = line.split(" ", 1)
        return f"{name}{{{labels.rstrip(',')}}} {value}"

    component = [line.replace("c499b90cf0e4beea", worker_id) for line in capture("mocker-decode.prom").splitlines()
                 if line.startswith(("dynamo_component_", "# HELP dynamo_component_", "# TYPE dynamo_component_"))]
    return "\n".join([*component, *map(labelled, vllm_text.splitlines())]) + "\n"


def test_a_dynamo_worker_gives_the_same_figures_as_the_bare_vllm_it_wraps():
    # a real vLLM 0.32 capture (n-gram, k=4), and the same bytes as Dynamo's worker port passes them
    bare = (DATA / "vllm-0.32-cpu-ngram-k4.metrics.txt").read_text(encoding="utf-8")
    wrapped = dynamo_passthrough(bare)
    assert re.search(r'^vllm:spec_decode_num_drafts_total\{dynamo_component="backend"', wrapped, re.M)
    ours, theirs = parse_payload(bare), parse_payload(wrapped)
    assert [e.to_dict() for e in theirs.engines] == [e.to_dict() for e in ours.engines]
    with LocalServer(Steps(bare)) as a, LocalServer(Steps(wrapped)) as b:
        _, report = check_json("--url", a.url, "--url", b.url)
    by_target = {r["target"]: r for r in report["targets"]}
    plain, worker = by_target[a.url], by_target[b.url]
    assert worker["deployment"] == {"namespace": "dynamo", "role": "aggregated", "judged": True}
    assert plain["deployment"] is None
    for block in ("speculation",):
        assert worker[block] == plain[block]
    for field in ("running", "waiting", "kv_cache_usage", "model", "engines"):
        assert worker["engine"][field] == plain["engine"][field]
    assert worker["verdict"]["speculation"] == plain["verdict"]["speculation"]


def test_a_real_dynamo_vllm_worker_passes_its_speculation_counters_through():
    # `python -m dynamo.vllm` over a CPU vLLM 0.31 with n-gram k=4 (tests/data/dynamo/README.md): vLLM's
    # own families on the worker's system port, with Dynamo's labels (worker_id among them, in hex)
    worker, frontend = capture("vllm-worker-ngram.prom"), capture("frontend-vllm-ngram.prom")
    assert detect_engine(worker) == "vllm" and detect_engine(frontend) == "dynamo"
    (engine,) = parse_payload(worker).engines
    assert engine.counters["vllm:spec_decode_num_drafts"] == 39
    assert engine.counters["vllm:spec_decode_num_accepted_tokens"] == 1
    assert engine.accepted_per_position == (1.0, 0.0, 0.0, 0.0)  # k = 4 from the position labels
    identity = worker_identity(worker)
    assert identity.role == "aggregated" and identity.namespace == "dynamo"
    _, listed, _ = read_frontend(frontend)
    assert listed == (f"{identity.worker_id} (decode)",)  # the frontend lists the worker read
    with LocalServer(Steps(frontend)) as f, LocalServer(Steps(worker)) as w:
        _, report = check_json("--url", f.url, "--url", w.url)
    by_target = {r["target"]: r for r in report["targets"]}
    spec = by_target[w.url]["speculation"]
    assert spec["configured"] and spec["k"] == 4
    assert spec["lifetime"]["acceptance_length"] == pytest.approx(1 + 1 / 39)
    assert by_target[w.url]["deployment"]["judged"] and by_target[f.url]["deployment"]["workers_not_read"] == []


def test_fleet_rows_name_the_engine_and_the_part_in_the_deployment():
    front, prefill = capture("frontend-disagg.prom"), capture("mocker-prefill.prom")
    out = io.StringIO()
    with LocalServer(Steps(front)) as f, LocalServer(Steps(prefill)) as p, contextlib.redirect_stdout(out):
        try:
            status = main(["fleet", "--json", "--window", "0.3", "--url", f.url, "--url", p.url])
        except SystemExit as exc:
            status = exc.code
    rows = {row["target"].rsplit(":", 1)[-1]: row for row in json.loads(out.getvalue())["rows"]}
    frontend_row, prefill_row = rows[f.url.rsplit(":", 1)[-1]], rows[p.url.rsplit(":", 1)[-1]]
    assert frontend_row["engine"] == "dynamo" and frontend_row["role"] == "frontend"
    assert prefill_row["engine"] == "dynamo" and prefill_row["role"] == "prefill"
    assert frontend_row["attention"] == "frontend: not judged"
    assert status == 0  # neither is a node needing anyone: their decode workers carry the verdict


# A Dynamo planner's /metrics (PLANNER_PROMETHEUS_PORT): the names of its planner_metrics.py
# (prefix dynamo_planner), prometheus_client's exposition, values set here
PLANNER = """\
# HELP dynamo_planner_num_prefill_replicas Current number of prefill replicas
# TYPE dynamo_planner_num_prefill_replicas gauge
dynamo_planner_num_prefill_replicas 1.0
# HELP dynamo_planner_num_decode_replicas Current number of decode replicas
# TYPE dynamo_planner_num_decode_replicas gauge
dynamo_planner_num_decode_replicas 2.0
# HELP dynamo_planner_observed_ttft_ms Observed time to first token (ms)
# TYPE dynamo_planner_observed_ttft_ms gauge
dynamo_planner_observed_ttft_ms 212.4
# HELP dynamo_planner_observed_itl_ms Observed inter-token latency (ms)
# TYPE dynamo_planner_observed_itl_ms gauge
dynamo_planner_observed_itl_ms 11.8
# HELP dynamo_planner_estimated_itl_ms Max estimated ITL from regression across engines (ms)
# TYPE dynamo_planner_estimated_itl_ms gauge
dynamo_planner_estimated_itl_ms 13.1
# HELP dynamo_planner_throughput_scaling_decision Throughput-based scaling decision reason
# TYPE dynamo_planner_throughput_scaling_decision gauge
dynamo_planner_throughput_scaling_decision{dynamo_planner_throughput_scaling_decision="scale"} 1.0
"""


def test_the_planners_latencies_stand_beside_the_workers_verdicts():
    assert detect_engine(PLANNER) == "dynamo"
    bare = (DATA / "vllm-0.32-cpu-ngram-k4.metrics.txt").read_text(encoding="utf-8")
    with LocalServer(Steps(PLANNER)) as planner, LocalServer(Steps(dynamo_passthrough(bare))) as worker:
        status, report = check_json("--url", worker.url, "--url", planner.url)
    by_target = {r["target"]: r for r in report["targets"]}
    assert by_target[planner.url]["deployment"]["role"] == "planner"
    assert by_target[planner.url]["verdict"]["reasons"][0].startswith("the Dynamo planner sizes")
    shown = by_target[worker.url]["deployment"]["planner"]
    assert shown == {"observed_ttft_ms": 212.4, "observed_itl_ms": 11.8, "estimated_itl_ms": 13.1,
                     "num_prefill_replicas": 1.0, "num_decode_replicas": 2.0}


def test_forced_dynamo_reads_a_worker_as_the_engine_it_wraps():
    from specwatch.collectors.engines import choose_engine

    assert choose_engine("dynamo", capture("vllm-worker-ngram.prom")) == "vllm"
    assert choose_engine("dynamo", capture("mocker-prefill.prom")) == "dynamo"
    assert choose_engine("dynamo", capture("frontend-loaded.prom")) == "dynamo"
    assert choose_engine("dynamo", PLANNER) == "dynamo"
