"""A real vLLM killed (SIGKILL) and restarted while `specwatch record` and `specwatch export` read it.

The watch dashboard reads through the same LiveSource as `record`; the sweep's dying-server path is
covered on a loopback stand-in in tests/test_sweep.py, where the death can be timed.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from specwatch.collectors.transport import DEFAULT_TIMEOUT_S
from specwatch.recording import RecordingError, read_recording
from specwatch.readings.window import Window
from test_export import ExportProcess, samples, wait_for
from vllm_server import JUDGED, Traffic, replayed_timeline

pytestmark = pytest.mark.engine


def _vllm_up(text: str) -> list[tuple[str, float]]:
    return [(labels["state"], value) for labels, value in samples(text).get("specwatch_source_up", [])
            if labels.get("kind") == "vllm"]


@contextmanager
def _recording(argv: list[str]):
    """`specwatch record` running; killed on the way out if the test failed before stopping it, so
    it does not read the next test's server."""
    recorder = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield recorder
    finally:
        if recorder.poll() is None:
            recorder.kill()
            recorder.communicate(timeout=30)


def _while_recording(recorder: subprocess.Popen, read):
    """`read`, for wait_for, failing at once with record's own words if record has exited."""
    def checked():
        if recorder.poll() is not None:
            raise AssertionError(f"specwatch record exited ({recorder.returncode}):\n{recorder.stderr.read()}")
        return read()
    return checked


def _recorded_states(path) -> list[str]:
    """The target's state in each reading `record` has flushed so far (a file still being written
    reads up to its last flush; one not yet written reads as nothing)."""
    try:
        return [s.targets[0].state for s in read_recording(path).snapshots]
    except (RecordingError, OSError):
        return []


def _back_up(states: list[str]) -> bool:
    return "connection_refused" in states and "ok" in states[states.index("connection_refused"):]


def _judged_after_the_crash(timeline: list[dict]) -> bool:
    """A verdict (on, off or hold) after the first unreadable one. The kill can land mid-scrape (a
    read error) before the port refuses connections: either is the first failed reading, and the
    timeline shows only the first."""
    down_at = next((i for i, c in enumerate(timeline)
                    if c["speculation"] == "unknown" and c["reasons"][0].startswith("cannot read the target")),
                   None)
    return down_at is not None and any(c["speculation"] in JUDGED for c in timeline[down_at + 1:])


def test_kill_and_restart_under_record_and_export(ngram_server, tmp_path):
    path = tmp_path / "session.swrec"
    argv = [sys.executable, "-m", "specwatch", "record", "-o", str(path), "--url", ngram_server.url,
            "--interval", "1", "--no-nvml", "--no-dcgm", "--method", "ngram"]
    with _recording(argv) as recorder:
        recorded_states = _while_recording(recorder, lambda: _recorded_states(path))
        recorded_timeline = _while_recording(recorder, lambda: replayed_timeline(path))
        with ExportProcess(["--url", ngram_server.url, "--listen", "127.0.0.1:0", "--interval", "1", "--no-nvml",
                            "--no-dcgm"], tmp_path / "export.log") as agent:
            with Traffic(ngram_server, concurrency=2):
                wait_for(agent.metrics_text, lambda t: ("ok", 1.0) in _vllm_up(t), "the agent to read vLLM")
                # the recorder is a second Python starting on a machine busy serving: the crash must
                # come after its first reading, however long its start-up took
                wait_for(recorded_states, lambda s: "ok" in s, "the recorder to read vLLM", 180)
                time.sleep(4)
            # a crash, not a clean stop: the whole process group dies at once
            os.killpg(ngram_server.proc.pid, signal.SIGKILL)
            ngram_server.proc.wait(30)
            down = wait_for(agent.metrics_text, lambda t: ("connection_refused", 0.0) in _vllm_up(t),
                            "the agent to see vLLM down")
            assert 'specwatch_verdict{' in down  # the agent itself keeps answering
            wait_for(recorded_states, lambda s: "connection_refused" in s,
                     "the recorder to see vLLM down", 120)
            ngram_server.restart()
            with Traffic(ngram_server, concurrency=2):
                wait_for(agent.metrics_text, lambda t: ("ok", 1.0) in _vllm_up(t), "the agent to see vLLM back")
                wait_for(recorded_states, _back_up, "the recorder to see vLLM back", 120)
                # the restarted server's first requests take a while; keep the load on until the
                # recording holds a judged window after the crash (what is asserted below, read again
                # from the closed file)
                wait_for(recorded_timeline, _judged_after_the_crash,
                         "the recording to be judged again after the restart", 180)
            assert agent.proc.poll() is None  # survived
        recorder.send_signal(signal.SIGINT)
        _, err = recorder.communicate(timeout=60)
        assert recorder.returncode == 130, err  # Ctrl-C's status; the recording is closed valid
        assert "Traceback" not in err

    recording = read_recording(path)
    assert not recording.warnings
    snaps = recording.snapshots
    states = [s.targets[0].state for s in snaps]
    # up, then down while the server was dead, then up again
    first_down = states.index("connection_refused")
    assert "ok" in states[:first_down] and "ok" in states[first_down:]
    # nothing lost: a reading every poll, across the crash too. A poll that meets the crash ends by
    # the scrape deadline at the latest; a machine busy serving slows every poll alike, so the bound
    # is the recording's own typical poll and not the clock's second
    times = [s.time for s in snaps]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) < DEFAULT_TIMEOUT_S + 2 * statistics.median(gaps) + 1.0, gaps
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
    timeline = replayed_timeline(path, closed=True)
    # judged again once the server was back (idle stretches at the end may say unknown again)
    assert _judged_after_the_crash(timeline), timeline
