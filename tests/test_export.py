"""`specwatch export`: the exposition the agent serves, its bind policy, source health, secrets.

The agent runs as a real subprocess serving real HTTP; what it serves is parsed with
prometheus_client's own parser, as Prometheus would read it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from http_fixtures import LocalServer, refused_port, reply
from specwatch.outputs.export import (
    DEFAULT_LISTEN,
    ExportAgent,
    ListenError,
    build_registry,
    check_listen,
    parse_listen,
    public_url,
    serve,
)
from specwatch.cli import main
from specwatch.commands.export import add_arguments as add_export_arguments
from specwatch.commands.options import ExitCode
from specwatch.advice.monitor import Monitor
from specwatch.telemetry.snapshot import GpuSample, Snapshot, SourceStatus

DATA = Path(__file__).parent / "data"
VLLM_PAYLOAD = (DATA / "vllm-0.32-cpu-ngram-k4.metrics.txt").read_bytes()

SERVING = re.compile(r"serving (https?://\S+)/metrics")


class ExportProcess:
    """`specwatch export ARGS` in a subprocess; `url` is where it serves once it said so."""

    def __init__(self, args: Iterable[str], log: Path, env: dict[str, str] | None = None,
                 startup_s: float = 60.0) -> None:
        self.log = log
        self._log_file = open(log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "specwatch", "export", *args], stdout=self._log_file,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + startup_s
        self.url = ""
        while not self.url:
            match = SERVING.search(log.read_text(errors="replace"))
            if match:
                self.url = match.group(1)
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the export agent did not start:\n{log.read_text(errors='replace')}")
            else:
                time.sleep(0.05)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def metrics_text(self) -> str:
        # generous: beside a CPU vLLM on two cores the agent can wait seconds for a core
        return httpx.get(self.url + "/metrics", timeout=30.0, trust_env=False).text

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log_file.close()
        return self.proc.returncode

    def __enter__(self) -> ExportProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Exposition text → {sample name: [(labels, value)]}, through prometheus_client's parser."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def wait_for(fetch, ready, what: str, timeout_s: float = 60.0):
    """Poll `fetch()` until `ready(value)`; a generous deadline only bounds a hang, it asserts nothing."""
    deadline = time.monotonic() + timeout_s
    value = fetch()
    while not ready(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value:\n{value}")
        time.sleep(0.2)
        value = fetch()
    return value


def export_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="specwatch export")
    add_export_arguments(p)
    return p.parse_args(list(argv))


# ---- the bind policy ---------------------------------------------------------------------------


def test_default_listen_is_loopback() -> None:
    args = export_args()
    assert args.listen == DEFAULT_LISTEN == "127.0.0.1:9464"
    assert check_listen(args.listen, args.allow_remote) == ("127.0.0.1", 9464)


@pytest.mark.parametrize("listen", ["localhost:9464", "[::1]:9464", "127.0.0.5:1", ":9464"])
def test_loopback_forms_need_no_flag(listen: str) -> None:
    host, _ = check_listen(listen, allow_remote=False)
    assert host in ("localhost", "::1", "127.0.0.5", "127.0.0.1")


@pytest.mark.parametrize("listen", ["0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464", "gpu-node-7:9464"])
def test_non_loopback_bind_is_refused_without_allow_remote(listen: str, capsys) -> None:
    with pytest.raises(ListenError, match="--allow-remote"):
        check_listen(listen, allow_remote=False)
    assert check_listen(listen, allow_remote=True)[1] == 9464
    # and through the command: a usage error before anything is read or bound
    assert main(["export", "--listen", listen, "--scenario", "h100-70b-ngram"]) == ExitCode.USAGE
    assert "--allow-remote" in capsys.readouterr().err


@pytest.mark.parametrize("listen", ["9464", "127.0.0.1:http", "127.0.0.1:70000", "[::1]9464"])
def test_malformed_listen_is_a_usage_error(listen: str) -> None:
    with pytest.raises(ListenError):
        parse_listen(listen)


def test_help_says_how_to_bind_remotely(capsys) -> None:
    p = argparse.ArgumentParser(prog="specwatch export")
    add_export_arguments(p)
    p.print_help()
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--allow-remote" in help_text and "0.0.0.0:9464" in help_text and "loopback" in help_text


# ---- what the agent serves ---------------------------------------------------------------------


def test_served_exposition_from_a_scenario(tmp_path: Path) -> None:
    with ExportProcess(["--scenario", "h100-70b-ngram", "--speed", "20", "--listen", "127.0.0.1:0",
                        "--node", "gpu-node-7"], tmp_path / "agent.log") as agent:
        assert agent.url.startswith("http://127.0.0.1:")  # bound on loopback
        text = wait_for(agent.metrics_text,
                        lambda t: 'specwatch_verdict{node="gpu-node-7",state="on",target="http://h100-node-1:8000"} 1.0'
                        in t, "an ON verdict")
        parsed = samples(text)
    target = {"node": "gpu-node-7", "target": "http://h100-node-1:8000"}
    verdicts = {labels["state"]: value for labels, value in parsed["specwatch_verdict"]}
    assert verdicts == {"on": 1.0, "off": 0.0, "hold": 0.0, "unknown": 0.0}
    for name in ("specwatch_confidence_ratio", "specwatch_expected_speedup_ratio",
                 "specwatch_acceptance_length_tokens", "specwatch_break_even_length_tokens",
                 "specwatch_crossover_concurrency_requests", "specwatch_running_requests",
                 "specwatch_speculation_configured", "specwatch_acceptance_rate_ratio"):
        assert [labels for labels, _ in parsed[name]] == [target], name
    (_, confidence), = parsed["specwatch_confidence_ratio"]
    assert 0.0 < confidence <= 1.0
    (_, length), = parsed["specwatch_acceptance_length_tokens"]
    assert length == pytest.approx(2.4, abs=0.05)  # the scenario's n-gram L
    (_, speedup), = parsed["specwatch_expected_speedup_ratio"]
    assert speedup > 1.0
    bound = {labels["state"]: value for labels, value in parsed["specwatch_bound"]}
    assert sum(bound.values()) == 1.0 and set(bound) == {"memory", "compute", "balanced", "unknown"}
    assert {labels["signal"] for labels, _ in parsed["specwatch_bound_signal"]} >= {"dram_vs_tensor"}
    flags = {labels["flag"]: value for labels, value in parsed["specwatch_flag"]}
    assert flags["misaligned_draft"] == 0.0
    gpus = {labels["gpu"]: value for labels, value in parsed["specwatch_gpu_dram_active_ratio"]}
    assert sorted(gpus) == ["0", "1", "2", "3"] and all(0.0 <= v <= 1.0 for v in gpus.values())
    assert len(parsed["specwatch_gpu_tensor_active_ratio"]) == 4
    assert {labels["gpu"]: v for labels, v in parsed["specwatch_gpu_lost"]} == {str(i): 0.0 for i in range(4)}
    up = {labels["source"]: (labels["state"], value) for labels, value in parsed["specwatch_source_up"]}
    assert up == {"vllm http://h100-node-1:8000": ("ok", 1.0), "nvml": ("ok", 1.0)}
    assert {labels["source"] for labels, _ in parsed["specwatch_source_last_success_timestamp_seconds"]} == set(up)
    assert parsed["specwatch_agent_info"][0][0]["mode"] == "replay"
    # the agent's own cost is visible too
    assert "process_cpu_seconds_total" in parsed
    # every specwatch series carries the node label
    for name, series in parsed.items():
        if name.startswith("specwatch_"):
            assert all(labels.get("node") == "gpu-node-7" for labels, _ in series), name


def test_source_health_when_vllm_is_down(tmp_path: Path) -> None:
    port = refused_port()
    with ExportProcess(["--url", f"http://127.0.0.1:{port}", "--no-nvml", "--no-dcgm", "--listen", "127.0.0.1:0",
                        "--node", "n1"], tmp_path / "agent.log") as agent:
        text = wait_for(agent.metrics_text, lambda t: "specwatch_source_up{" in t, "a source_up series")
        parsed = samples(text)
        rc = agent.stop()
    assert rc == 0  # SIGTERM stops it cleanly
    target = f"http://127.0.0.1:{port}"
    assert parsed["specwatch_source_up"] == [
        ({"node": "n1", "source": f"vllm {target}", "kind": "vllm", "state": "connection_refused"}, 0.0),
    ]  # --no-nvml --no-dcgm: no GPU source at all
    # never read successfully: no last-success time for it
    assert "specwatch_source_last_success_timestamp_seconds" not in parsed
    verdicts = {labels["state"]: value for labels, value in parsed["specwatch_verdict"]}
    assert verdicts["unknown"] == 1.0 and verdicts["on"] == verdicts["off"] == 0.0
    assert parsed["specwatch_last_snapshot_timestamp_seconds"][0][1] > 0  # the poll itself ran
    # the target itself says it is down and why; nothing claims it runs without speculation
    assert parsed["specwatch_target_up"] == [
        ({"node": "n1", "target": target, "state": "connection_refused"}, 0.0)]
    assert "specwatch_speculation_configured" not in parsed


def test_token_and_url_credentials_never_appear_in_the_metrics(tmp_path: Path) -> None:
    token = "s3cret-token-5f1e9a"
    password = "pw-hunter2-77"

    def on_get(h) -> None:
        if h.headers.get("Authorization") != f"Bearer {token}":
            reply(401, b"unauthorised")(h)
        elif h.path.startswith("/metrics"):
            reply(200, VLLM_PAYLOAD)(h)
        elif h.path.startswith("/version"):
            reply(200, b'{"version": "0.32.0"}', "application/json")(h)
        else:
            reply(404, b"{}", "application/json")(h)

    with LocalServer(on_get) as vllm:
        # a secret in the query string must not reach a label either (user-info in the URL is
        # covered by test_public_url_strips_credentials_and_query: httpx would send it as Basic auth)
        url = vllm.url + "/metrics?key=" + password
        env = dict(os.environ, SPECWATCH_TOKEN=token)
        with ExportProcess(["--url", url, "--no-nvml", "--no-dcgm", "--listen", "127.0.0.1:0"],
                           tmp_path / "agent.log", env=env) as agent:
            text = wait_for(agent.metrics_text, lambda t: 'state="ok"' in t and "specwatch_verdict{" in t,
                            "the target read with the token")
    assert all(path.startswith(("/metrics", "/version", "/server_info")) for path, _ in vllm.requests)
    assert token not in text and password not in text
    parsed = samples(text)
    assert {labels["target"] for labels, _ in parsed["specwatch_verdict"]} == {vllm.url}


# ---- the collector, in process -----------------------------------------------------------------


def test_public_url_strips_credentials_and_query() -> None:
    assert public_url("https://u:p@host:8443/v1/metrics?token=x#f") == "https://host:8443/v1/metrics"
    assert public_url("http://[::1]:8000") == "http://[::1]:8000"


def test_lost_gpu_failing_dcgm_and_scrape_time_through_real_http() -> None:
    from specwatch.collectors.synthetic import SyntheticNode, generate

    node = SyntheticNode(step=_hinge(), gpus=2)
    snapshots = list(generate(node, [8.0] * 3))
    last = snapshots[-1]
    lost = GpuSample(index=1, name=last.gpus[1].name, lost=True, errors={"power_w": "GPU is lost"})
    snapshots[-1] = Snapshot(time=last.time, targets=last.targets, gpus=(last.gpus[0], lost), sources=(
        SourceStatus("nvml", "ok"),
        SourceStatus("dcgm http://u:pw@127.0.0.1:9400/metrics", "connection_refused", "nothing is listening"),
    ))
    clock = iter([1000.0, 1001.0, 1002.0])
    agent = ExportAgent(None, Monitor(), node="n1", mode="replay", clock=lambda: next(clock))
    for s in snapshots:
        agent.ingest(s)
    server, _ = serve(build_registry(agent, process_metrics=False), "127.0.0.1", 0)
    try:
        text = httpx.get(f"http://127.0.0.1:{server.server_address[1]}/metrics", trust_env=False).text
    finally:
        server.shutdown()
        server.server_close()
    parsed = samples(text)
    assert {labels["gpu"]: v for labels, v in parsed["specwatch_gpu_lost"]} == {"0": 0.0, "1": 1.0}
    # a lost GPU's readings are not current: absent rather than stale
    assert [labels["gpu"] for labels, _ in parsed["specwatch_gpu_dram_active_ratio"]] == ["0"]
    up = {labels["source"]: (labels["state"], v) for labels, v in parsed["specwatch_source_up"]}
    assert up["dcgm http://127.0.0.1:9400/metrics"] == ("connection_refused", 0.0)
    assert "pw" not in text
    last_success = {labels["source"]: v for labels, v in parsed["specwatch_source_last_success_timestamp_seconds"]}
    assert last_success == {"nvml": 1002.0, "vllm http://synthetic-node:8000": 1002.0}
    assert parsed["specwatch_last_snapshot_timestamp_seconds"] == [({"node": "n1"}, 1002.0)]
    assert parsed["specwatch_data_timestamp_seconds"] == [({"node": "n1"}, last.time)]


def _hinge():
    from specwatch.perf.hardware import lookup, lookup_model
    from specwatch import perf

    return perf.prior_for_model(lookup("H100"), lookup_model("Llama-3.1-8B"), tp=1).hinge()


def test_the_exporter_serves_the_health_block_it_computed() -> None:
    """Goodput, latency, finish reasons and energy served as the check report computes them: the
    served values equal the health block of the same window, and the node's energy per token is its
    GPUs' energy over the window divided by its output tokens."""
    from specwatch.advice.advisor import AdvisorConfig
    from specwatch.outputs.export import ExportAgent, build_registry
    from specwatch.advice.monitor import Monitor
    from specwatch.perf import HingeParameters
    from specwatch.collectors.synthetic import SyntheticNode, generate
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    node = SyntheticNode(step=HingeParameters(0.02, 134.0, 0.02 / 134, 0.0, 0.0), gpus=2)
    agent = ExportAgent(source=None, monitor=Monitor(10.0, AdvisorConfig(method="ngram", slo_tpot_s=0.02)),
                        node="n", mode="replay", clock=lambda: 0.0)
    for snapshot in generate(node, [8.0] * 20):
        agent.ingest(snapshot)
    text = generate_latest(build_registry(agent, process_metrics=False)).decode()
    served = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    window = agent.monitor.window
    joules, _ = window.gpu_energy()
    tokens = window.target(node.url).increases.counter("vllm:generation_tokens")
    assert served[("specwatch_energy_per_token_joules", (("node", "n"),))] == pytest.approx(sum(joules.values()) / tokens)
    assert len(joules) == 2 and joules[0] == joules[1] > 0
    block = agent.frame.health[node.url]
    target = (("bound", "high"), ("node", "n"), ("target", node.url))
    assert served[("specwatch_goodput_ratio", target)] == pytest.approx(block["goodput"]["share_high"])
    assert served[("specwatch_finish_reason_ratio", (("node", "n"), ("reason", "stop"), ("target", node.url)))] == 1.0
    p90 = (("node", "n"), ("phase", "e2e"), ("quantile", "0.9"), ("target", node.url))
    assert served[("specwatch_request_latency_seconds", p90)] == pytest.approx(block["latency"]["e2e"]["p90_s"])
    # 1000-token prompts and 300-token outputs
    assert served[("specwatch_request_input_output_ratio", (("node", "n"), ("target", node.url)))] == \
        pytest.approx(1000 / 300)
    # the load carried, as the block says: the synthetic node's KV cache holds 400k tokens
    one = (("node", "n"), ("target", node.url))
    assert served[("specwatch_kv_cache_capacity_tokens", one)] == 400_000.0
    assert served[("specwatch_requests_finished_per_second", one)] == pytest.approx(
        block["traffic"]["requests_per_s"]) and block["traffic"]["requests_per_s"] > 0
    assert served[("specwatch_preemptions_per_second", one)] == 0.0
    # ... in (500, 1000] and (200, 500]: no prompt of at most 1000 is over 10× an output of at least 201
    for bound in ("low", "high"):
        labels = (("bound", bound), ("node", "n"), ("target", node.url))
        assert served[("specwatch_prefill_heavy_share_ratio", labels)] == 0.0
        assert block["request_shape"][f"prefill_heavy_share_{bound}"] == 0.0


@pytest.mark.parametrize("asked", [False, True])
def test_the_agent_freezes_start_up_objects_after_its_first_poll_when_asked(asked, monkeypatch):
    import asyncio

    import specwatch.heap
    from specwatch.collectors.synthetic import SyntheticNode, generate

    class Listed:
        def __init__(self, snapshots):
            self.snapshots = iter(snapshots)

        async def read(self):
            return next(self.snapshots, None)

    frozen = []
    monkeypatch.setattr(specwatch.heap, "freeze_start_up_objects", lambda: frozen.append(1))
    snapshots = list(generate(SyntheticNode(step=_hinge(), gpus=2), [8.0] * 3))
    agent = ExportAgent(Listed(snapshots), Monitor(), node="n1", mode="replay", freeze_heap=asked)
    asyncio.run(agent.run(asyncio.Event(), interval_s=0.0))
    assert agent.polls == 3 and frozen == ([1] if asked else [])
