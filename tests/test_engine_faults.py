"""A real vLLM killed (SIGKILL) and restarted while `specwatch record` and `specwatch export` read it.

The watch dashboard reads through the same LiveSource as `record`; the sweep's dying-server path is
covered on a loopback stand-in in tests/test_sweep.py, where the death can be timed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specwatch.recording import read_recording
from specwatch.window import Window
from test_export import ExportProcess, samples, wait_for
from vllm_server import Traffic

pytestmark = pytest.mark.engine


def _vllm_up(text: str) -> list[tuple[str, float]]:
    return [(labels["state"], value) for labels, value in samples(text).get("specwatch_source_up", [])
            if labels.get("kind") == "vllm"]


def test_kill_and_restart_under_record_and_export(ngram_server, tmp_path):
    path = tmp_path / "session.swrec"
    started = time.time()
    recorder = subprocess.Popen(
        [sys.executable, "-m", "specwatch", "record", "-o", str(path), "--url", ngram_server.url,
         "--interval", "1", "--no-nvml", "--no-dcgm", "--method", "ngram"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with ExportProcess(["--url", ngram_server.url, "--listen", "127.0.0.1:0", "--interval", "1", "--no-nvml",
                        "--no-dcgm"], tmp_path / "export.log") as agent:
        with Traffic(ngram_server, concurrency=2):
            wait_for(agent.metrics_text, lambda t: ("ok", 1.0) in _vllm_up(t), "the agent to read vLLM")
            time.sleep(4)
        # a crash, not a clean stop: the whole process group dies at once
        os.killpg(ngram_server.proc.pid, signal.SIGKILL)
        ngram_server.proc.wait(30)
        down = wait_for(agent.metrics_text, lambda t: ("connection_refused", 0.0) in _vllm_up(t),
                        "the agent to see vLLM down")
        assert 'specwatch_verdict{' in down  # the agent itself keeps answering
        ngram_server.restart()
        with Traffic(ngram_server, concurrency=2):
            wait_for(agent.metrics_text, lambda t: ("ok", 1.0) in _vllm_up(t), "the agent to see vLLM back")
            time.sleep(6)
        assert agent.proc.poll() is None  # survived
    recorder.send_signal(signal.SIGINT)
    _, err = recorder.communicate(timeout=60)
    assert recorder.returncode == 130, err  # Ctrl-C's status; the recording is closed valid
    assert "Traceback" not in err
    elapsed = time.time() - started

    recording = read_recording(path)
    assert not recording.warnings
    snaps = recording.snapshots
    states = [s.targets[0].state for s in snaps]
    # up, then down while the server was dead, then up again
    first_down = states.index("connection_refused")
    assert "ok" in states[:first_down] and "ok" in states[first_down:]
    # nothing lost: a reading every interval, across the crash too (a poll never took much over 1 s)
    times = [s.time for s in snaps]
    assert max(b - a for a, b in zip(times, times[1:])) < 6.0
    assert len(snaps) >= 0.5 * elapsed
    # the restart is seen as one, and no figure over it goes negative
    window = Window(seconds=3600)
    for snap in snaps:
        window.add(snap)
    total = window.target(snaps[0].targets[0].url).total
    assert total.restarts >= 1
    acc = total.acceptance
    for value in (acc.drafts, acc.draft_tokens, acc.accepted_tokens, *acc.per_position,
                  total.generation_tokens_per_s, total.prompt_tokens_per_s):
        assert value >= 0
    # and the recording replays headless, through the same advisor, with no traceback
    r = subprocess.run([sys.executable, "-m", "specwatch", "replay", str(path), "--headless", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    timeline = [json.loads(line) for line in r.stdout.splitlines()]
    # the kill can land mid-scrape (a read error) before the port refuses connections: either is
    # the first failed reading, and the timeline shows only the first
    down_at = next(i for i, c in enumerate(timeline)
                   if c["speculation"] == "unknown" and c["reasons"][0].startswith("cannot read the target"))
    # judged again once the server was back (idle stretches at the end may say unknown again)
    assert any(c["speculation"] in ("on", "off", "hold") for c in timeline[down_at + 1:])
