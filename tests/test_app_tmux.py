"""The real dashboard in a real terminal (tmux) against the real vLLM tier, read with capture-pane.

It runs `python -m specwatch watch` (what `specwatch watch` calls) at 80×24 with n-gram traffic
flowing, and checks that the screen answers "should speculation be on, and why" without scrolling:
the header names the node and its vLLM version, the banner holds a verdict word in block letters and
the reason, and the engine and speculation panels show live figures. The screen is sampled until
those appear (the verdict needs a few polls of traffic); the bound is on attempts, not on speed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

import pytest

from vllm_server import Traffic

pytestmark = pytest.mark.engine

VERDICT_LETTERS = ("█▀█ █▄ █", "█▀█ █▀▀ █▀▀", "█ █ █▀█ █", "█ █ █▄ █ █ ▄▀")  # ON, OFF, HOLD, UNKNOWN


def capture(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_in_tmux_against_real_vllm(ngram_server):
    session = f"specwatch-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m specwatch watch --url {ngram_server.url} --no-nvml --no-dcgm --window 10"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command], check=True)
    screen = ""
    try:
        with Traffic(ngram_server, concurrency=2):
            for _ in range(180):  # generous: the machine is busy serving, and a slow start only waits
                time.sleep(1.0)
                screen = capture(session)
                if "running" in screen and "k=4" in screen and "break-even" in screen \
                        and any(w in screen for w in VERDICT_LETTERS[:3]):
                    break
        host = ngram_server.url.split("://", 1)[1]
        assert host in screen, screen
        assert "vLLM 0.32.0" in screen, screen
        assert any(w in screen for w in VERDICT_LETTERS[:3]), screen  # ON, OFF or HOLD, not UNKNOWN
        assert "confidence" in screen and "▶ acceptance length" in screen, screen
        assert "n-gram" in screen or "k=4" in screen, screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        for _ in range(60):
            time.sleep(0.5)
            alive = subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0
            if not alive:
                break
        assert not alive, "the app did not quit on q"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
