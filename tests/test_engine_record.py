"""`specwatch record` against a real vLLM server (the CPU wheel), then a headless replay of the file."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from specwatch.recording import read_recording
from vllm_server import Traffic

pytestmark = pytest.mark.engine

def test_record_a_real_server_and_replay_it(ngram_server, tmp_path):
    out = tmp_path / "real.swrec"
    with Traffic(ngram_server, concurrency=2):
        time.sleep(2.0)  # traffic in flight before the first poll
        r = subprocess.run([sys.executable, "-m", "specwatch", "record", "-o", str(out), "--url", ngram_server.url,
                            "--duration", "8", "--interval", "1", "--timeout", "30", "--no-dcgm", "--method", "ngram"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    rec = read_recording(out)
    assert rec.warnings == []
    assert rec.header.data == "real" and rec.header.advisor == {"method": "ngram"}
    assert len(rec.snapshots) >= 4  # polls re-arm after they complete: a loaded machine fits fewer in 8 s
    assert all(s.targets[0].ok for s in rec.snapshots)
    engine = rec.snapshots[-1].targets[0].engines[0]
    assert len(engine.accepted_per_position) == 4  # k = 4, from the live server's position labels
    assert engine.counters["vllm:spec_decode_num_drafts"] > rec.snapshots[0].targets[0].engines[0].counters[
        "vllm:spec_decode_num_drafts"]

    r = subprocess.run([sys.executable, "-m", "specwatch", "replay", str(out), "--headless", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    changes = [json.loads(line) for line in r.stdout.splitlines()]
    assert changes[0]["speculation"] == "unknown"  # one reading: no rates yet
    assert any(c["speculation"] in ("on", "off", "hold") for c in changes[1:])
    for c in changes:
        assert {"time", "speculation", "confidence", "expected_speedup", "reasons"} <= set(c)
