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
from pathlib import Path

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


def _fault_run_problems(result: dict, down_kinds: frozenset) -> list[str]:
    """What is wrong with one run of the soak in front of the real vLLM, in words ([] when right)."""
    agent, recorder, outside = result["agent"], result["recorder"], result["outside"]
    problems = []
    if agent["tracebacks"] or recorder["tracebacks"]:
        problems.append(f"tracebacks: agent {agent['tracebacks']}, recorder {recorder['tracebacks']}")
    if agent["exit_code"] != 0 or recorder["exit_code"] != 0:
        problems.append(f"exit codes: agent {agent['exit_code']}, recorder {recorder['exit_code']}")
    for name, child in (("agent", agent), ("recorder", recorder)):
        if child.get("hang"):  # it did not stop within 30 s of SIGTERM: where it was (its stacks are in its log)
            problems.append(f"the {name} did not stop on SIGTERM: {child['hang']}")
    if agent["fd_check"]["leak"]:
        problems.append(f"descriptors: {agent['fd_check']}")
    kinds = {w["kind"] for w in result["windows"]}
    if kinds != {"latency", "stall", "reset", "truncated", "port_dead"}:
        problems.append(f"windows of kinds {sorted(kinds)}")
    for w in result["windows"]:
        if w["kind"] in down_kinds and not w["right"]:
            problems.append(f"window {w['window']} ({w['kind']}) not right: {w}")
        if w["verdict_present_share"] != 1.0:
            problems.append(f"window {w['window']} ({w['kind']}) without a verdict: {w}")
    if not (outside["up_share"] is not None and outside["up_share"] >= 0.9
            and outside["scrape_success_share"] is not None and outside["scrape_success_share"] >= 0.9):
        problems.append(f"outside the faults: {outside}")
    if not result["recording"]["replays_to_verdicts"]:
        problems.append(f"recording: {result['recording']}")
    return problems


def _fault_run_diagnosis(result: dict, workdir: Path) -> str:
    """What a failed run saw, for the log: the agent's target_up as Prometheus stored it around each
    window (seconds from the schedule's 0), the recorder's read states over the same seconds (it reads
    through the same proxy: a window the recorder saw and the agent did not is the agent's), the
    proxy's counts and the processes' logs."""
    timeline = result["_timeline"]["target_up"]
    lines = []
    recorded: list[tuple[float, str]] = []
    try:
        for snap in read_recording(workdir / "soak.swrec").snapshots:
            if snap.targets:
                target = snap.targets[0]
                recorded.append((round(snap.time - result["t0_wall"], 1), target.state))
    except (RecordingError, OSError) as exc:
        lines.append(f"recording unreadable: {exc}")
    for w in result["windows"]:
        lo, hi = w["start_s"] - 3, w["start_s"] + w["duration_s"] + result["config"]["margin_s"]
        lines.append(f"window {w['window']} {w['kind']} {w['start_s']}+{w['duration_s']} s, right {w['right']}")
        lines.append("  agent: " + " ".join(f"{t}:{v:.0f}" for t, v in timeline if lo <= t < hi))
        lines.append("  recorder: " + " ".join(f"{t}:{state[:12]}" for t, state in recorded if lo <= t < hi))
    lines.append(f"proxy: {result['proxy']}, outside: {result['outside']}, notes: {result['notes']}")
    for name in ("agent.log", "recorder.log", "prometheus.log"):
        path = workdir / name
        text = path.read_text(errors="replace") if path.exists() else "(none)"
        tail = 8000 if "Thread 0x" in text else 2000  # faulthandler's stacks of a process that would not stop
        lines.append(f"--- {name} (last {tail} characters)\n{text[-tail:]}")
    return "\n".join(lines)


def test_the_agent_through_network_faults_in_front_of_the_real_vllm(ngram_server, tmp_path):
    """benchmarks/soak.py with the real CPU vLLM behind the fault proxy instead of the moving capture:
    the faults the proxy makes of a real server's answers (its own headers, bodies, /version and
    /server_info), the agent's state right in and out of each, no descriptor left behind. A few
    minutes and a few kinds: the three-minute soak of every kind runs on the capture (tests/test_soak.py).
    The timeout is generous: a CPU vLLM on two cores can be slow to answer with no fault at all.

    One more run when the first is wrong, with what the first saw printed: on two cores beside the CPU
    vLLM under traffic, the agent, its recorder and Prometheus are starved for seconds at a time (a
    scrape of the agent once took over 10 s in CI). The second run must be right in every respect; a
    real fault in the agent fails both."""
    benchmarks = Path(__file__).resolve().parent.parent / "benchmarks"
    if str(benchmarks) not in sys.path:
        sys.path.insert(0, str(benchmarks))
    import soak
    from faultproxy import DOWN_KINDS

    if soak.prometheus_binary() is None:
        pytest.fail("prometheus is not installed (Debian: apt-get install -y prometheus)")
    timing = {"warmup_s": 25.0, "tail_s": 20.0, "down_s": (16.0, 16.0), "up_s": (10.0, 10.0), "gap_s": (18.0, 18.0),
              "gap_after_up_s": (6.0, 6.0)}
    config = soak.SoakConfig(total_s=200.0, seed=3, kinds=("latency", "stall", "reset", "truncated", "port_dead"),
                             upstream=ngram_server.url, interval_s=1.0, timeout_s=5.0, slack_s=5.0,
                             sample_every_s=2.0, gpu_fault=False, fault_timing=timing)
    for attempt in (1, 2):
        workdir = tmp_path / f"run{attempt}"
        # light traffic, so that there are drafts to judge and the recording replays to verdicts
        with Traffic(ngram_server, concurrency=1):
            result = soak.run_soak(config, workdir)
        problems = _fault_run_problems(result, DOWN_KINDS)
        if not problems:
            return
        diagnosis = _fault_run_diagnosis(result, workdir)
        print(f"run {attempt} of the soak in front of the real vLLM was wrong:\n" + "\n".join(problems)
              + "\n" + diagnosis, flush=True)
    pytest.fail("the second run was wrong too:\n" + "\n".join(problems) + "\n" + diagnosis)
