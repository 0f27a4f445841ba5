"""`specwatch record` against a real vLLM server (the CPU wheel), then a headless replay of the file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specwatch.recording import read_recording
from vllm_server import JUDGED, record_under_traffic

pytestmark = pytest.mark.engine

def test_record_a_real_server_and_replay_it(ngram_server, tmp_path):
    out = tmp_path / "real.swrec"

    def record(duration: str) -> None:
        r = subprocess.run([sys.executable, "-m", "specwatch", "record", "-o", str(out), "--force",
                            "--url", ngram_server.url, "--duration", duration, "--interval", "1",
                            "--timeout", "30", "--no-dcgm", "--method", "ngram"],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr

    # the replay (`replay --headless --json`) of a recording that holds a judged verdict
    changes = record_under_traffic(ngram_server, out, record, enough=4, durations=("8", "45"))
    rec = read_recording(out)
    assert rec.warnings == []
    assert rec.header.data == "real" and rec.header.advisor == {"method": "ngram"}
    assert len(rec.snapshots) >= 4
    assert all(s.targets[0].ok for s in rec.snapshots)
    engine = rec.snapshots[-1].targets[0].engines[0]
    assert len(engine.accepted_per_position) == 4  # k = 4, from the live server's position labels
    assert engine.counters["vllm:spec_decode_num_drafts"] > rec.snapshots[0].targets[0].engines[0].counters[
        "vllm:spec_decode_num_drafts"]

    assert changes and changes[0]["speculation"] == "unknown", changes  # one reading: no rates yet
    assert any(c["speculation"] in JUDGED for c in changes[1:]), changes
    for c in changes:
        assert {"time", "speculation", "confidence", "expected_speedup", "reasons"} <= set(c)
