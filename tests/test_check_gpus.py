"""`check --json` with the GPU sources: the real no-driver path, and GPUs from a dcgm-exporter alone."""

import json
import subprocess
import sys

from http_fixtures import LocalServer, metrics_and_version, refused_port, reply
from payloads import DCGM_L4, NGRAM_K4, read

VLLM = read(NGRAM_K4).encode()
DCGM = read(DCGM_L4).encode()


def check(*args):
    r = subprocess.run([sys.executable, "-m", "specwatch", "check", "--json", "--window", "0.3", *args],
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_no_driver_is_a_state_and_everything_else_works():
    with LocalServer(metrics_and_version(lambda: VLLM)) as vllm:
        code, report = check("--url", vllm.url, "--no-dcgm")
    assert report["state"] == "ok" and report["speculation"]["k"] == 4
    nvml = next(s for s in report["sources"] if s["name"] == "nvml")
    assert nvml["state"] == "no_driver" and "no NVIDIA driver" in nvml["message"]
    assert report["gpus"] == []
    assert code == 2  # the payload never changes: no rates, so not enough data


def test_gpus_from_dcgm_alone():
    with LocalServer(metrics_and_version(lambda: VLLM)) as vllm, LocalServer(reply(200, DCGM)) as dcgm:
        code, report = check("--url", vllm.url, "--dcgm", dcgm.url + "/metrics")
    (gpu,) = report["gpus"]
    assert gpu["name"] == "NVIDIA L4" and gpu["source"] == "dcgm"
    assert gpu["uuid"] == "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
    assert gpu["power_w"] is not None and 0.0 <= gpu["util_gpu"] <= 1.0
    states = {s["name"].split()[0]: s["state"] for s in report["sources"]}
    assert states["nvml"] == "no_driver" and states["dcgm"] == "ok"


def test_explicit_dcgm_that_is_down_is_reported():
    with LocalServer(metrics_and_version(lambda: VLLM)) as vllm:
        code, report = check("--url", vllm.url, "--dcgm", f"http://127.0.0.1:{refused_port()}/metrics")
    dcgm = next(s for s in report["sources"] if s["name"].startswith("dcgm"))
    assert dcgm["state"] == "connection_refused"
    assert report["state"] == "ok"  # the vLLM side is unaffected
