"""The fleet through a REAL Prometheus server: two export agents, the alert rules, the fleet view.

A Prometheus (Debian package `prometheus`) starts on a loopback port with a temporary config and
data directory and scrapes, every second:
- agent "node-healthy": a recording of a node where EAGLE pays, whose configured dcgm-exporter
  refuses connections;
- agent "node-trouble": a recording of a node whose draft model is misaligned (speculation costs)
  and whose GPU 1 is lost;
- a port where no agent listens (a failing scrape).

It loads deploy/prometheus/specwatch-alerts.yml with the `for:` durations shortened (the promtool
unit tests in specwatch-alerts.test.yml cover the real durations), and the tests check that exactly
the expected alerts fire and that the fleet view lists the nodes in the right order with the
right figures.

Skipped, saying why, when the prometheus binary is missing; under CI=true that is a failure.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from http_fixtures import refused_port
from test_export import ExportProcess, wait_for
from specwatch.collectors.prometheus import PrometheusClient
from specwatch.outputs.fleet import FleetApp, NodeScreen, fleet_rows, read_fleet
from specwatch.recording import RecordingHeader, write_recording
from specwatch.telemetry.snapshot import GpuSample, Snapshot, SourceStatus

pytestmark = [pytest.mark.prometheus, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

REPO = Path(__file__).resolve().parent.parent
ALERTS = REPO / "deploy" / "prometheus" / "specwatch-alerts.yml"
ALERT_TESTS = REPO / "deploy" / "prometheus" / "specwatch-alerts.test.yml"
SHORT_FOR = "3s"


def _binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if found is None:
        message = f"{name} is not installed (Debian: apt-get install -y prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI must install it")
        pytest.skip(message)
    return found


# ---- the rules, with promtool ------------------------------------------------------------------


def test_promtool_checks_the_rules() -> None:
    result = subprocess.run([_binary("promtool"), "check", "rules", str(ALERTS)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    result = subprocess.run([_binary("promtool"), "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the scripted nodes ------------------------------------------------------------------------


def _recordings(directory: Path) -> dict[str, Path]:
    from specwatch import perf
    from specwatch.perf.hardware import lookup, lookup_model
    from specwatch.collectors.synthetic import SyntheticNode, generate

    step = perf.prior_for_model(lookup("H100"), lookup_model("Llama-3.1-70B"), tp=4).hinge()
    load = [8.0] * 900  # 15 min of data: no loop (and so no window restart) during the tests
    # L = 2.1: on at 8 running, with a crossover (about 250) for the dashboard's crossover panel; the
    # EAGLE head's r derived from the 70B's shapes (0.029) keeps L = 2.6 paying to the search's end
    healthy = SyntheticNode(step=step, k=3, per_position=(0.55, 0.35, 0.2), draft_ratio=0.05, gpus=2,
                            url="http://127.0.0.1:8000")
    trouble = SyntheticNode(step=step, k=4, per_position=(0.02, 0.01, 0.0, 0.0), draft_ratio=0.1, gpus=2,
                            url="http://127.0.0.1:8000")
    dcgm_refused = SourceStatus("dcgm http://127.0.0.1:9400/metrics", "connection_refused",
                                "nothing is listening at http://127.0.0.1:9400/metrics")

    def healthy_snapshots() -> Iterator[Snapshot]:
        for s in generate(healthy, load, seed=1):
            yield replace(s, sources=s.sources + (dcgm_refused,))

    def trouble_snapshots() -> Iterator[Snapshot]:
        for s in generate(trouble, load, seed=2):
            gone = GpuSample(index=1, name=s.gpus[1].name, uuid=s.gpus[1].uuid, lost=True,
                             errors={"power_w": "GPU is lost"})
            yield replace(s, gpus=(s.gpus[0], gone))

    paths = {"node-healthy": directory / "healthy.swrec", "node-trouble": directory / "trouble.swrec"}
    write_recording(paths["node-healthy"], RecordingHeader(
        data="synthetic", host="node-healthy", interval_s=1.0,
        advisor={"method": "eagle", "model": "Llama-3.1-70B", "tp": 4}), healthy_snapshots())
    write_recording(paths["node-trouble"], RecordingHeader(
        data="synthetic", host="node-trouble", interval_s=1.0,
        advisor={"method": "draft_model", "draft_ratio": 0.1, "model": "Llama-3.1-70B", "tp": 4}),
        trouble_snapshots())
    return paths


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    """A real Prometheus on loopback with a temporary config and data directory."""

    def __init__(self, binary: str, directory: Path, targets: list[str], job_settings: str = "") -> None:
        """`job_settings`: more YAML lines for the specwatch job (scheme, tls_config, basic_auth), each
        indented by four spaces."""
        self.directory = directory
        rules = directory / "specwatch-alerts-short.yml"
        rules.write_text(re.sub(r"for: \d+[smh]", f"for: {SHORT_FOR}", ALERTS.read_text()))
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\n"
            f"rule_files:\n  - {rules}\n"
            "scrape_configs:\n"
            "  - job_name: specwatch\n"
            f"{job_settings}"
            "    static_configs:\n"
            f"      - targets: [{', '.join(repr(t) for t in targets)}]\n"
        )
        self.binary, self.config = binary, config
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.log = directory / "prometheus.log"

    def start(self, startup_s: float = 90.0, attempts: int = 2) -> None:
        for attempt in range(1, attempts + 1):
            port = _free_port()
            self.url = f"http://127.0.0.1:{port}"
            data = self.directory / f"data-{attempt}"
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.binary, f"--config.file={self.config}", f"--storage.tsdb.path={data}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                    stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + startup_s
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if httpx.get(self.url + "/-/ready", timeout=2.0, trust_env=False).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
            self.stop()  # a port race or a slow start: once more on a fresh port
        raise AssertionError(f"Prometheus did not become ready after {attempts} attempts; its log:\n"
                             + self.log.read_text(errors="replace"))

    def api(self, path: str, **params: str) -> Any:
        return httpx.get(self.url + path, params=params, timeout=10.0, trust_env=False).json()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    binary = _binary("prometheus")
    directory = tmp_path_factory.mktemp("fleet")
    recordings = _recordings(directory)
    agents = {}
    try:
        for node, path in recordings.items():
            agents[node] = ExportProcess(["--replay", str(path), "--speed", "2", "--listen", "127.0.0.1:0",
                                          "--node", node, "--no-nvml", "--no-dcgm"], directory / f"{node}.log")
        dead = f"127.0.0.1:{refused_port()}"
        targets = [a.url.removeprefix("http://") for a in agents.values()] + [dead]
        prometheus = PrometheusServer(binary, directory, targets)
        try:
            prometheus.start()
            yield {"prometheus": prometheus, "agents": agents, "dead": dead}
        finally:
            prometheus.stop()
    finally:
        for agent in agents.values():
            agent.stop()


def _firing(prometheus: PrometheusServer) -> set[tuple[str, str]]:
    alerts = prometheus.api("/api/v1/alerts")["data"]["alerts"]
    return {(a["labels"]["alertname"], a["labels"].get("node") or a["labels"].get("instance", ""))
            for a in alerts if a["state"] == "firing"}


def test_the_alert_rules_fire_on_the_scripted_nodes(fleet: dict[str, Any]) -> None:
    prometheus = fleet["prometheus"]
    expected = {
        ("SpecwatchSpeculationCosting", "node-trouble"),
        ("SpecwatchMisalignedDraft", "node-trouble"),
        ("SpecwatchGpuLost", "node-trouble"),
        ("SpecwatchSourceDown", "node-healthy"),  # its configured dcgm-exporter refuses connections
        ("SpecwatchAgentDown", fleet["dead"]),
    }
    try:
        firing = wait_for(lambda: _firing(prometheus), lambda f: expected <= f, "the expected alerts to fire",
                          timeout_s=120.0)
    except AssertionError:
        print(prometheus.log.read_text(errors="replace"))
        raise
    # and nothing else: EAGLE pays on node-healthy, its GPUs answer, node-trouble's sources are up
    assert firing == expected
    alerts = {a["labels"]["alertname"]: a for a in prometheus.api("/api/v1/alerts")["data"]["alerts"]
              if a["state"] == "firing"}
    assert alerts["SpecwatchGpuLost"]["labels"]["gpu"] == "1"
    assert alerts["SpecwatchSourceDown"]["labels"]["source"] == "dcgm http://127.0.0.1:9400/metrics"
    assert "costing throughput on node-trouble" in alerts["SpecwatchSpeculationCosting"]["annotations"]["summary"]


DASHBOARD = REPO / "deploy" / "grafana" / "specwatch-dashboard.json"


def _dashboard_queries() -> list[tuple[str, str, str]]:
    """(panel title, refId, PromQL) of every query of the Grafana dashboard, its variables set as a
    user who picks every node would: $node to all, $__rate_interval to a window of this test's
    1 s scrapes."""
    import json

    queries = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", ()):
            expr = target["expr"].replace("$node", ".*").replace("$__rate_interval", "30s")
            queries.append((panel["title"], target["refId"], expr))
    return queries


def test_every_dashboard_query_returns_series_from_the_agents(fleet: dict[str, Any]) -> None:
    """Each query of deploy/grafana/specwatch-dashboard.json, run on the real Prometheus scraping the
    two agents, returns at least one series: a panel whose series the exporter does not serve (a
    renamed metric, a label it does not carry) would sit empty on every fleet's wall."""
    prometheus = fleet["prometheus"]
    queries = _dashboard_queries()
    assert len(queries) >= 10

    def empty() -> list[str]:
        missing = []
        for title, ref, expr in queries:
            answer = prometheus.api("/api/v1/query", query=expr)
            assert answer["status"] == "success", (title, ref, expr, answer)
            if not answer["data"]["result"]:
                missing.append(f"{title} [{ref}]: {expr}")
        return missing

    wait_for(empty, lambda missing: not missing, "every dashboard query to return series", timeout_s=120.0)


def _rows_ready(prometheus_url: str):
    import asyncio

    async def read():
        client = PrometheusClient(prometheus_url)
        try:
            return await read_fleet(client, "specwatch")
        finally:
            await client.aclose()

    def fetch():
        return asyncio.run(read())

    def ready(reading) -> bool:
        verdicts = {r.node: r.verdict for r in reading.rows}
        down = [r for r in reading.rows if not r.exporter_up]
        return verdicts.get("node-trouble") == "off" and verdicts.get("node-healthy") == "on" and len(down) == 1

    return fetch, ready


async def test_fleet_view_lists_both_nodes_in_attention_order(fleet: dict[str, Any]) -> None:
    import asyncio

    from textual.widgets import DataTable

    prometheus = fleet["prometheus"]
    fetch, ready = _rows_ready(prometheus.url)
    await asyncio.to_thread(wait_for, fetch, ready, "both nodes' verdicts in Prometheus", 120.0)

    app = FleetApp(PrometheusClient(prometheus.url), job="specwatch", refresh_s=1.0)
    async with app.run_test(size=(160, 40)) as pilot:
        while app.reading is None or not ready(app.reading):
            await pilot.pause(0.2)
        rows = app.rows
        # misaligned (and costing) first, then the agent Prometheus cannot scrape, then the failing dcgm
        assert [(r.node, r.attention[1].split(":")[0]) for r in rows] == [
            ("node-trouble", "misaligned draft"),
            (fleet["dead"], "agent not scraped"),
            ("node-healthy", "source down"),
        ]
        trouble, _, healthy = rows
        assert trouble.target == healthy.target == "http://127.0.0.1:8000"
        assert trouble.configured and trouble.costing and "misaligned_draft" in trouble.flags
        assert trouble.acceptance_length == pytest.approx(1.03, abs=0.02)
        assert trouble.expected_speedup < 1.0 and trouble.gpus_lost == 1
        assert trouble.break_even_length > trouble.acceptance_length
        assert healthy.verdict == "on" and healthy.configured and not healthy.costing
        assert healthy.acceptance_length == pytest.approx(2.1, abs=0.05)
        assert healthy.expected_speedup > 1.0 and healthy.gpus_lost == 0
        assert healthy.running == 8.0 and trouble.running == 8.0
        assert healthy.bound in ("memory", "balanced", "compute")
        assert healthy.sources_down == ("dcgm http://127.0.0.1:9400/metrics (connection_refused)",)
        table = app.query_one(DataTable)
        assert table.row_count == 3
        first = [str(c) for c in table.get_row_at(0)]
        # a call short of 80 % confidence carries it beside the word
        assert first[:4] == ["node-trouble", "127.0.0.1:8000", _shown_word(trouble), "misaligned draft"]
        assert first[4] == "1.03" and first[6].startswith("8 / ")
        third = [str(c) for c in table.get_row_at(2)]
        assert third[:3] == ["node-healthy", "127.0.0.1:8000", _shown_word(healthy)] and third[4] == "2.10"

        # r refreshes (in a worker): the count goes up
        before = app.refreshes
        await pilot.press("r")
        while app.refreshes == before:
            await pilot.pause(0.1)

        # Enter drills into the selected node (the first: node-trouble); Escape comes back
        table.focus()
        table.move_cursor(row=0)
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, NodeScreen) and screen.source.node == "node-trouble"
        while screen.detail is None:
            await pilot.pause(0.1)
        detail = screen.detail
        assert detail.ok and [t.target for t in detail.targets] == ["http://127.0.0.1:8000"]
        verdict = detail.targets[0].verdict
        assert verdict.speculation == "off" and "misaligned_draft" in verdict.flags
        assert verdict.acceptance_length == pytest.approx(1.03, abs=0.02)
        assert [(g.index, g.lost) for g in detail.gpus] == [("0", False), ("1", True)]
        assert detail.targets[0].acceptance_rate < 0.05
        from specwatch.widgets.verdict import VerdictBanner

        assert screen.query_one(VerdictBanner).view.state.verdict.speculation == "off"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, NodeScreen)
        await pilot.press("q")
    assert app.return_code in (0, None)


# ---- the client's failure states ---------------------------------------------------------------


async def test_promql_error_text_comes_from_the_api(fleet: dict[str, Any]) -> None:
    client = PrometheusClient(fleet["prometheus"].url)
    try:
        result = await client.query("specwatch_verdict{")
        assert result.state == "promql_error"
        assert "bad_data" in result.message and "parse error" in result.message
        ok = await client.query('specwatch_verdict{state="on"} == 1')
        assert ok.ok and {s.labels["node"] for s in ok.samples} == {"node-healthy"}
    finally:
        await client.aclose()


async def test_unreachable_prometheus_is_a_clear_state() -> None:
    client = PrometheusClient(f"http://127.0.0.1:{refused_port()}", token="tok-never-shown")
    try:
        result = await client.query("up")
        assert result.state == "connection_refused"
        assert "Prometheus at http://127.0.0.1:" in result.message and "tok-never-shown" not in result.message
        reading = await read_fleet(client, "specwatch")
        assert not reading.ok and reading.state == "connection_refused" and reading.rows == ()
    finally:
        await client.aclose()


async def test_answers_that_are_not_the_api(fleet: dict[str, Any]) -> None:
    from http_fixtures import LocalServer, reply

    # a wrong --prometheus URL: an agent answers every path with its exposition text
    client = PrometheusClient(next(iter(fleet["agents"].values())).url)
    try:
        result = await client.query("up")
        assert result.state == "not_prometheus" and "not Prometheus' query API JSON" in result.message
    finally:
        await client.aclose()
    # a proxy in front of Prometheus failing: a status, and no API error body
    with LocalServer(reply(502, b"<html>bad gateway</html>", "text/html")) as proxy:
        client = PrometheusClient(proxy.url)
        try:
            result = await client.query("up")
        finally:
            await client.aclose()
    assert result.state == "http_error" and "HTTP 502" in result.message


def test_rows_sort_costing_before_unknown_and_fine() -> None:
    from specwatch.collectors.prometheus import PromSample

    def verdict(node: str, state: str) -> list[PromSample]:
        return [PromSample({"__name__": "specwatch_verdict", "node": node, "target": "t", "state": s},
                           1.0 if s == state else 0.0) for s in ("on", "off", "hold", "unknown")]

    def configured(node: str) -> PromSample:
        return PromSample({"__name__": "specwatch_speculation_configured", "node": node, "target": "t"}, 1.0)

    series = verdict("a-fine", "on") + verdict("b-unknown", "unknown") + verdict("c-costing", "off") \
        + [configured("a-fine"), configured("c-costing")]
    assert [r.node for r in fleet_rows(series)] == ["c-costing", "b-unknown", "a-fine"]


def _verdict_series(node: str, state: str, target: str = "http://t:8000") -> list:
    from specwatch.collectors.prometheus import PromSample

    return [PromSample({"__name__": "specwatch_verdict", "node": node, "target": target, "state": s},
                       1.0 if s == state else 0.0) for s in ("on", "off", "hold", "unknown")]


def test_a_dcgm_only_node_without_nvml_needs_no_attention() -> None:
    from specwatch.collectors.prometheus import PromSample

    def source(node: str, name: str, kind: str, state: str, up: float) -> PromSample:
        return PromSample({"__name__": "specwatch_source_up", "node": node, "source": name, "kind": kind,
                           "state": state}, up)

    series = _verdict_series("dcgm-node", "on") + _verdict_series("old-agent", "on") + [
        PromSample({"__name__": "specwatch_speculation_configured", "node": n, "target": "http://t:8000"}, 1.0)
        for n in ("dcgm-node", "old-agent")] + [
        source("dcgm-node", "nvml", "nvml", "no_driver", 1.0),
        source("dcgm-node", "dcgm http://localhost:9400/metrics", "dcgm", "ok", 1.0),
        # an agent from before no_driver counted as "absent by design" exported it as down
        source("old-agent", "nvml", "nvml", "no_driver", 0.0),
    ]
    rows = fleet_rows(series)
    assert [(r.node, r.attention) for r in rows] == [("dcgm-node", (9, "")), ("old-agent", (9, ""))]


def test_an_unreachable_target_is_down_with_its_reason_at_80_columns() -> None:
    from specwatch.collectors.prometheus import PromSample
    from specwatch.outputs.fleet import row_cells

    target = "http://10.0.0.7:8000"
    series = _verdict_series("gpu-7", "unknown", target) + _verdict_series("gpu-8", "on") + [
        PromSample({"__name__": "specwatch_target_up", "node": "gpu-7", "target": target,
                    "state": "connection_refused"}, 0.0),
        PromSample({"__name__": "specwatch_target_up", "node": "gpu-8", "target": "http://t:8000", "state": "ok"}, 1.0),
        PromSample({"__name__": "specwatch_speculation_configured", "node": "gpu-8", "target": "http://t:8000"}, 1.0),
        PromSample({"__name__": "specwatch_source_last_success_timestamp_seconds", "node": "gpu-7",
                    "source": f"vllm {target}"}, 1000.0),
    ]
    down, fine = fleet_rows(series)
    assert down.node == "gpu-7" and not down.reachable and down.configured is None and fine.reachable
    assert down.attention[1] == "unreachable (connection refused)"
    cells = [str(c) for c in row_cells(down, now=1000.0 + 180)]
    assert cells[:4] == ["gpu-7", "10.0.0.7:8000", "DOWN",
                         "unreachable (connection refused), last good reading 3 min ago"]
    assert "not configured" not in " ".join(cells) and "never" not in " ".join(cells)


def test_an_unreachable_target_is_down_with_its_reason_in_the_node_detail() -> None:
    """The detail screen says what the table says: DOWN, why, and the last good reading; never the
    "configured no" or verdict figures of a target nobody could read."""
    from specwatch.collectors.prometheus import PromSample, QueryResult
    from specwatch.outputs.fleet import detail_text, node_detail

    down, fine = "http://10.0.0.7:8000", "http://10.0.0.7:8001"
    series = _verdict_series("gpu-7", "unknown", down) + _verdict_series("gpu-7", "on", fine) + [
        PromSample({"__name__": "specwatch_target_up", "node": "gpu-7", "target": down,
                    "state": "connection_refused"}, 0.0),
        PromSample({"__name__": "specwatch_target_up", "node": "gpu-7", "target": fine, "state": "ok"}, 1.0),
        PromSample({"__name__": "specwatch_speculation_configured", "node": "gpu-7", "target": fine}, 1.0),
        PromSample({"__name__": "specwatch_source_last_success_timestamp_seconds", "node": "gpu-7",
                    "source": f"vllm {down}"}, 1000.0),
    ]
    detail = node_detail("gpu-7", QueryResult("ok", samples=tuple(series)))
    text = detail_text(detail, now=1000.0 + 180).plain
    down_block, fine_block = text.split(f"{fine}\n")[0], text.split(f"{fine}\n")[1].split("GPUs")[0]
    assert f"{down}\n  DOWN: unreachable (connection refused), last good reading 3 min ago" in down_block
    assert "configured" not in down_block and "verdict" not in down_block
    assert "verdict ON" in fine_block and "configured yes" in fine_block
    assert [t.reachable for t in detail.targets] == [False, True]
    # the banner above the detail leads with the same words
    assert detail.targets[0].verdict.reasons[0].startswith("DOWN: unreachable (connection refused), last good reading")


def _canned_prometheus(series: list[dict[str, Any]], up: list[dict[str, Any]]):
    """A handler answering the fleet's two queries the way Prometheus' query API does."""
    import json
    from urllib.parse import parse_qs, urlsplit

    def on_get(h) -> None:
        query = parse_qs(urlsplit(h.path).query).get("query", [""])[0]
        result = up if query.startswith("up") else series
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": labels, "value": [1000.0, str(value)]} for labels, value in result]}}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return on_get


def _fleet_with_a_down_target() -> tuple[list, list]:
    def verdict(node: str, target: str, state: str) -> list:
        return [({"__name__": "specwatch_verdict", "node": node, "target": target, "state": s},
                 1.0 if s == state else 0.0) for s in ("on", "off", "hold", "unknown")]

    down, fine = "http://10.0.0.7:8000", "http://10.0.0.8:8000"
    series = verdict("gpu-node-7", down, "unknown") + verdict("gpu-node-8", fine, "on") + [
        ({"__name__": "specwatch_target_up", "node": "gpu-node-7", "target": down,
          "state": "connection_refused"}, 0.0),
        ({"__name__": "specwatch_source_last_success_timestamp_seconds", "node": "gpu-node-7",
          "source": f"vllm {down}"}, 820.0),
        ({"__name__": "specwatch_target_up", "node": "gpu-node-8", "target": fine, "state": "ok"}, 1.0),
        ({"__name__": "specwatch_speculation_configured", "node": "gpu-node-8", "target": fine}, 1.0),
        ({"__name__": "specwatch_acceptance_length_tokens", "node": "gpu-node-8", "target": fine}, 2.6),
        ({"__name__": "specwatch_break_even_length_tokens", "node": "gpu-node-8", "target": fine}, 1.4),
        ({"__name__": "specwatch_running_requests", "node": "gpu-node-8", "target": fine}, 8.0),
        ({"__name__": "specwatch_source_up", "node": "gpu-node-8", "source": "nvml", "kind": "nvml",
          "state": "no_driver"}, 1.0),
    ]
    up = [({"__name__": "up", "job": "specwatch", "instance": f"{n}:9464"}, 1.0) for n in ("gpu-node-7", "gpu-node-8")]
    return series, up


def test_fleet_with_a_down_node_at_80_columns_snapshot(snap_compare, monkeypatch) -> None:
    from http_fixtures import LocalServer

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    series, up = _fleet_with_a_down_target()
    with LocalServer(_canned_prometheus(series, up)) as prometheus:
        client = PrometheusClient(prometheus.url)
        # the canned server's port changes from run to run: the status line names a fixed one
        monkeypatch.setattr(client, "describe", lambda: "Prometheus at http://prometheus:9090")
        app = FleetApp(client, refresh_s=3600.0, clock=lambda: 1000.0)

        async def read(pilot) -> None:
            while app.reading is None:
                await pilot.pause(0.05)
            # The table sizes its columns to their cells on a later refresh: until then the node
            # names are cut to their headers' width. Wait for the whole name on screen, however
            # long a loaded machine takes (a fixed number of pauses was not always enough).
            # (a wall-clock deadline, not a count of pauses: each pause takes longer on a busy machine)
            deadline = time.monotonic() + 180.0
            while "gpu-node-8&#160;" not in app.export_screenshot():
                assert time.monotonic() < deadline, "the table never sized its columns to the node names"
                await pilot.pause(0.1)
                await pilot.wait_for_scheduled_animations()

        assert snap_compare(app, terminal_size=(80, 24), run_before=read)
    row = app.rows[0]
    assert row.node == "gpu-node-7" and not row.reachable and app.rows[1].attention[0] == 9
    monkeypatch.undo()
    time.tzset()


def _shown_word(row) -> str:
    return row.verdict.upper() + (f" {row.confidence:.0%}" if row.confidence < 0.8 else "")


def test_a_coin_flip_call_shows_its_confidence_and_why_at_80_columns() -> None:
    """Issue 45: a confidence-0.5 verdict on a node whose GPU nobody identified read as a plain "ON".
    It shows "ON 50%", and the attention column says the device is unknown; a confident call shows
    the word alone."""
    from specwatch.outputs.fleet import FleetRow, row_cells
    from specwatch.outputs.fleet_columns import column_widths, fit_columns, shown_columns

    flip = FleetRow(node="gpu-7", target="http://10.0.0.7:8000", verdict="on", confidence=0.5, configured=True,
                    acceptance_length=2.4, break_even_length=2.1, running=4.0, crossover=40.0, bound="unknown",
                    flags=("gpu_unidentified",), read_state="ok", exporter_up=True)
    sure = dataclasses.replace(flip, node="gpu-8", confidence=0.93, flags=())
    cells = [row_cells(r, now=0.0) for r in (flip, sure)]
    assert [str(c[2]) for c in cells] == ["ON 50%", "ON"]
    assert flip.attention[1] == "device unknown: give --gpu" and sure.attention[1] == ""
    shown = shown_columns([flip, sure], cells)
    kept, widths = fit_columns(shown, column_widths(shown, cells), 80)
    assert {2, 3} <= set(kept) and widths[2] >= len("ON 50%") and widths[3] >= len("device unknown: give --gpu")


def test_check_pointed_at_an_agent_or_at_prometheus_says_what_it_is_and_what_reads_it(fleet: dict[str, Any]) -> None:
    """Issue 45: `check` on a specwatch agent or on Prometheus said "is this a vLLM server?". Both are
    known: each is named, with the `fleet` command that reads it (the real agents and the real
    Prometheus of this module)."""
    from http_fixtures import check_json

    agent_url = next(iter(fleet["agents"].values())).url
    prometheus_url = fleet["prometheus"].url
    status, report = check_json("--url", agent_url)
    assert report["state"] == "families_missing" and status != 0
    assert "specwatch agent's metrics" in report["message"] and f"specwatch fleet --url {agent_url}" in report["message"]
    status, report = check_json("--url", prometheus_url)
    assert report["state"] == "families_missing"
    assert "Prometheus server's own /metrics" in report["message"]
    assert f"specwatch fleet --prometheus {prometheus_url}" in report["message"]


def test_fleet_json_says_an_agent_prometheus_cannot_scrape_was_not_read(fleet: dict[str, Any]) -> None:
    """Issue 45: `fleet --json` said read_state "ok" for an agent Prometheus could not scrape; nobody
    read its targets. And --help named one token default for two modes."""
    import contextlib
    import io

    from specwatch.cli import build_parser, main
    from specwatch.commands.fleet import fleet_document

    fetch, ready = _rows_ready(fleet["prometheus"].url)
    reading = wait_for(fetch, ready, "both nodes' verdicts in Prometheus", 120.0)
    rows = {row["node"]: row for row in fleet_document(reading, fleet["prometheus"].url)["rows"]}
    dead = rows[fleet["dead"]]
    assert dead["exporter_up"] is False and dead["down"] and dead["read_state"] == "agent_not_scraped"
    assert all(r["read_state"] == "ok" for node, r in rows.items() if node != fleet["dead"] and r["exporter_up"]
               and r["attention"] != "unreachable")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["fleet", "--help"])
    assert "SPECWATCH_PROMETHEUS_TOKEN for Prometheus, SPECWATCH_TOKEN for the nodes with --url" in \
        " ".join(out.getvalue().split())
    from specwatch.collectors.vllm import DEFAULT_TOKEN_ENV
    assert DEFAULT_TOKEN_ENV == "SPECWATCH_TOKEN"  # the help names it without importing the collector
    assert build_parser().parse_args(["fleet", "--url", "n:1"]).default_token_env == "SPECWATCH_PROMETHEUS_TOKEN"
