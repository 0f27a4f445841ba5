"""The roofline without a GPU draws the knee the verdict's reasons quote (issue 45, item 11): one
screen once named two knees, the reasons' fitted 249 and the roofline's assumed 256."""

from __future__ import annotations

import re
from pathlib import Path

from specwatch.commands.replay import replay_monitor
from specwatch.dashboard.view_state import ViewState
from specwatch.recording import read_recording
from specwatch.widgets.roofline import ridge_of
from specwatch.widgets.view import SourceInfo

CPU_RECORDING = Path(__file__).resolve().parent.parent / "specwatch" / "data" / "real-cpu-tiny-llama-ngram.swrec"


def _view_after(snapshots):
    recording = read_recording(CPU_RECORDING)
    monitor = replay_monitor(recording.header)
    views = ViewState(history_minutes=10.0, sweep=None)
    for snapshot in snapshots(recording):
        monitor.ingest(snapshot)
        views.take(snapshot, monitor.states)
    return monitor, views.view(monitor, lambda: SourceInfo("REPLAY", CPU_RECORDING.name))


def test_the_roofline_without_a_gpu_draws_the_knee_the_reasons_quote():
    _, view = _view_after(lambda r: r.snapshots)
    assert view.gpu_spec is None  # the real CPU vLLM: no GPU to draw a ridge from
    quoted = [m.group(1) for r in view.state.verdict.reasons for m in [re.search(r"knee of about (\d+)", r)] if m]
    ridge, label = ridge_of(view)
    assert quoted and f"{ridge:.0f}" == quoted[0], (label, view.state.verdict.reasons)
    assert label.startswith(f"knee {quoted[0]} tokens/step, fitted to this node"), label
    assert "FLOP/byte" not in label  # a knee in tokens per step, not a GPU's ridge


def test_before_the_first_verdict_the_roofline_says_its_knee_is_assumed():
    _, view = _view_after(lambda r: r.snapshots[:1])
    ridge, label = ridge_of(view)
    assert label.startswith(f"knee {ridge:.0f} tokens/step, assumed"), label
