"""`specwatch tune` against a real n-gram vLLM server, its schedule checked by vLLM's own validator and
then served by a real vLLM started with it."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from conftest import NGRAM_K4
from vllm_server import Traffic, VllmServer

pytestmark = pytest.mark.engine


def test_tune_on_a_real_ngram_server_gives_a_schedule_vllm_accepts_and_runs(ngram_server, vllm_py, tiny_models,
                                                                            tmp_path):
    with Traffic(ngram_server, concurrency=3):
        r = subprocess.run(
            [sys.executable, "-m", "specwatch", "tune", "--url", ngram_server.url, "--method", "ngram",
             "--duration", "16", "--interval", "2", "--timeout", "30", "--max-batch", "16", "--json"],
            capture_output=True, text=True, timeout=600,
        )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["schema"] == "specwatch.tune/1"
    assert report["inputs"]["k"] == 4 and len(report["inputs"]["per_position"]) == 4
    schedule = report["schedule"]
    assert schedule[0][0] == 1 and schedule[-1][1] == 16
    assert all(0 <= k <= 4 for _, _, k in schedule)
    # no --vllm-python: tune validates in this interpreter where vLLM imports here, and otherwise says
    # it did not, and why
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        assert report["validation"]["ok"] is None and "vLLM is not installed here" in report["validation"]["message"]

    # vLLM's validator, run in the vLLM venv through the function `tune --vllm-python` calls, accepts
    # the schedule and expands it to every batch size. It runs after the traffic: under three streams
    # on this two-core machine the CPU engine's threads leave an `import vllm` 20-100x slower (68 s
    # against 2.9 s measured; over its 300 s limit in a full engine tier), which is the machine's
    # doing, not the schedule's.
    from specwatch.advice.tune import validate_with_vllm

    validation = validate_with_vllm(schedule, 4, 16, python=vllm_py)
    assert validation["ok"] is True, validation
    assert validation["normalised"] == schedule and len(validation["dense"]) == 16
    assert validation["message"].startswith("vLLM 0.32.0's schedule validator accepts it")

    # a real vLLM started with the schedule serves completions and keeps counting drafts
    config = dict(NGRAM_K4, num_speculative_tokens_per_batch_size=schedule)
    target, _ = tiny_models
    server = VllmServer(target, config, python=vllm_py, log_dir=tmp_path)
    try:
        server.start()
        text = server.complete("echo repeat after me one two three one two three", max_tokens=16)
        assert text["choices"][0]["finish_reason"] == "length"
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
        assert "vllm:spec_decode_num_drafts_total" in metrics
    finally:
        server.stop()
