"""A real NVIDIA Dynamo (its frontend and mocker workers, on this CPU: tests/dynamo_server.py) read by
check, watch (in tmux) and record, and a worker killed under record and under check: shown down, not
judged. The mocker simulates vLLM's scheduler and passes vLLM-named load gauges through, but no token
or speculation counter (see tests/data/dynamo/README.md): its workers are read and placed, never judged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from http_fixtures import check_json
from dynamo_server import DynamoDeployment, Traffic, build_tiny_model, dynamo_python
from specwatch.recording import read_recording

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def dynamo_model(tmp_path_factory):
    if dynamo_python() is None:
        message = "no Dynamo venv: run tests/setup_dynamo_venv.sh (or set SPECWATCH_DYNAMO_PYTHON)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs it: a missing venv there is a broken pipeline
        pytest.skip(message)
    return build_tiny_model(tmp_path_factory.mktemp("dynamo-model") / "tiny")


@pytest.fixture()
def deployment(dynamo_model, tmp_path):
    with DynamoDeployment(dynamo_model, roles=("aggregated", "aggregated"), log_dir=tmp_path / "logs") as d:
        yield d


def test_check_reads_the_frontend_and_its_workers(deployment):
    urls = [deployment.frontend_url, *deployment.worker_urls]
    with Traffic(deployment, concurrency=2, max_tokens=24):
        time.sleep(2.0)  # requests in flight before the first scrape
        status, report = check_json(*(a for u in urls for a in ("--url", u)), "--timeout", "10", window="3")
    by_target = {r["target"]: r for r in report["targets"]}
    frontend = by_target[deployment.frontend_url]
    assert frontend["state"] == "ok", deployment.log_tail()
    assert frontend["engine"]["name"] == "dynamo" and frontend["engine"]["model"] == "tiny"
    assert frontend["engine"]["ttft_mean_s"] > 0 and frontend["engine"]["tpot_mean_s"] > 0
    placed = frontend["deployment"]
    assert placed["role"] == "frontend" and placed["namespace"] == "dynamo"
    # the ids the frontend lists (decimal) are matched to the workers' own (hex on their ports)
    assert sorted(placed["workers_read"]) == sorted(deployment.worker_urls), placed
    assert placed["workers_not_read"] == [] and len(placed["workers_listed"]) == 2, placed
    for url in deployment.worker_urls:
        worker = by_target[url]
        assert worker["state"] == "ok" and worker["engine"]["name"] == "vllm"
        assert worker["deployment"]["role"] == "aggregated" and worker["deployment"]["namespace"] == "dynamo"
        assert worker["verdict"]["speculation"] == "unknown"  # the mocker counts no drafts
    assert status == 2  # the workers cannot be judged: not enough data, no traceback


def test_check_names_the_workers_it_does_not_read(deployment):
    with Traffic(deployment, concurrency=2, max_tokens=16):
        time.sleep(2.0)
        _, report = check_json("--url", deployment.frontend_url, "--url", deployment.worker_urls[0], "--timeout", "10",
                               window="2")
    placed = report["targets"][0]["deployment"]
    assert placed["workers_read"] == [deployment.worker_urls[0]]
    # the one not read is named by the id the frontend lists for it
    assert placed["workers_not_read"] == [f"{int(deployment.worker_id(1), 16)} (decode)"], placed


def test_a_killed_worker_is_shown_down_under_record_and_check(deployment, tmp_path):
    out = tmp_path / "dynamo.swrec"
    urls = [deployment.frontend_url, *deployment.worker_urls]
    recorder = subprocess.Popen(
        [sys.executable, "-m", "specwatch", "record", "-o", str(out), "--duration", "14", "--interval", "1",
         "--no-nvml", "--no-dcgm", "--timeout", "5", *(a for u in urls for a in ("--url", u))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Traffic(deployment, concurrency=2, max_tokens=16):
        time.sleep(6.0)
        deployment.kill_worker(0)
        _, stderr = recorder.communicate(timeout=120)
    assert recorder.returncode == 0 and "Traceback" not in stderr, stderr
    rec = read_recording(out)
    killed = [s.target(deployment.worker_urls[0]) for s in rec.snapshots]
    assert killed[0].ok and killed[0].role == "aggregated"
    assert not killed[-1].ok and killed[-1].state == "connection_refused", killed[-1]
    # down, still placed: the deployment's worker, not an anonymous server
    assert killed[-1].deployment == "dynamo" and killed[-1].role == "aggregated"
    assert all(s.target(deployment.worker_urls[1]).ok for s in rec.snapshots)
    assert rec.snapshots[-1].target(deployment.frontend_url).engine == "dynamo"

    status, report = check_json(*(a for u in urls for a in ("--url", u)), "--timeout", "10", window="1")
    by_target = {r["target"]: r for r in report["targets"]}
    down = by_target[deployment.worker_urls[0]]
    assert down["state"] == "connection_refused" and down["verdict"]["speculation"] == "unknown"
    assert by_target[deployment.frontend_url]["deployment"]["workers_down"] == [deployment.worker_urls[0]]
    assert status == 3  # one target cannot be read


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_in_tmux_names_dynamo_and_the_deployment(deployment):
    session = f"specwatch-{uuid.uuid4().hex[:8]}"
    command = (f"{sys.executable} -m specwatch watch --url {deployment.frontend_url} "
               f"--url {deployment.worker_urls[0]} --no-nvml --no-dcgm --window 5")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "45", command], check=True)
    screen = ""
    try:
        with Traffic(deployment, concurrency=2, max_tokens=16):
            for _ in range(90):
                time.sleep(1.0)
                screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                        text=True, check=True).stdout
                if "Dynamo" in screen and "[dynamo frontend]" in screen and "no drafts" in screen:
                    break
        assert "Dynamo" in screen and "[dynamo frontend]" in screen, screen
        assert "a Dynamo frontend sees no drafts" in screen.replace("\n", " ") or "no drafts" in screen, screen
        assert "Traceback" not in screen, screen
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
