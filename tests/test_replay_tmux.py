"""A replay in a real terminal (tmux), read with capture-pane: a post-mortem can go back.

`python -m specwatch replay FILE --speed 100` plays a synthetic recording to its end; then, paused,
each ← shows the reading ten seconds further back, and → ten seconds on. The header's clock is the
reading's own time, so the test reads the screen's clock and sees it go back. Each wait is for the
one screen the last key leads to (an exact clock), so a screen caught before a key's reading was
shown cannot be taken for it: the replay is paused only once it has ended, when nothing is in
flight. Sampled until the screen says so; the bound is on attempts, not on speed. Run at the four
terminal sizes an operator uses. (← on an ended replay that is not paused plays again from ten
seconds back: test_app's Pilot test counts those readings, too fast at 100× to be seen here.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from specwatch.recording import RecordingHeader, write_recording
from specwatch.collectors.synthetic import generate

from test_app import NODE

CLOCK = re.compile(r"REPLAY\s+SYNTHETIC\s+\d{4}-\d\d-\d\d (\d\d:\d\d:\d\d)")


def capture(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                          check=True).stdout


def keys(session: str, *names: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *names], check=True)


def wait_for_screen(session: str, ready, what: str, attempts: int = 120) -> str:
    screen = ""
    for _ in range(attempts):
        time.sleep(0.5)
        screen = capture(session)
        if ready(screen):
            return screen
    raise AssertionError(f"the screen never showed {what}:\n{screen}")


def _seconds(hh_mm_ss: str | None) -> int:
    h, m, s = (int(x) for x in (hh_mm_ss or "0:0:0").split(":"))
    return h * 3600 + m * 60 + s


def _clock_text(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def shown_clock(screen: str) -> str | None:
    match = CLOCK.search(screen.splitlines()[0] if screen else "")
    return match.group(1) if match else None


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("size", [(60, 18), (80, 24), (120, 36), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_an_ended_replay_rewinds_with_the_left_arrow_in_tmux(tmp_path: Path, size: tuple[int, int]) -> None:
    data = list(generate(NODE, [8.0] * 120, seed=3))
    path = tmp_path / "incident.swrec"
    write_recording(path, RecordingHeader(data="synthetic", host="node-1", interval_s=1.0), data)
    end = time.strftime("%H:%M:%S", time.gmtime(data[-1].time))
    session = f"specwatch-replay-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m specwatch replay {path} --speed 100"
    env = {**os.environ, "TZ": "UTC"}
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]),
                    "-e", "TZ=UTC", command], check=True, env=env)
    try:
        wait_for_screen(session, lambda s: "ENDED" in s and shown_clock(s) == end, "the replay ended")
        keys(session, "Space")  # ended, then paused: nothing is in flight any more
        wait_for_screen(session, lambda s: "PAUSED" in s and shown_clock(s) == end, "the pause at the end")
        shown = end
        for step in range(1, 3):  # each ← while paused: exactly ten seconds of recorded time back
            keys(session, "Left")
            back = _clock_text(_seconds(end) - 10 * step)
            screen = wait_for_screen(session, lambda s, back=back: shown_clock(s) == back and "ENDED" not in s,
                                     f"the clock {back}, {10 * step} s before the end, after {shown}")
            shown = back
        if size[1] >= 24:  # from 80×24 up the header keeps both labels while paused
            assert "SYNTHETIC" in screen.splitlines()[0] and "PAUSED" in screen.splitlines()[0], screen
        keys(session, "Right")
        forward = _clock_text(_seconds(end) - 10)
        wait_for_screen(session, lambda s: shown_clock(s) == forward, f"the clock {forward}, ten seconds on")
        keys(session, "q")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
