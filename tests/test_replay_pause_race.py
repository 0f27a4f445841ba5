"""A replay paused between a poll being queued and its start: the poll must not start, or its read
waits for a resume forever and every step and seek queued behind it is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

import specwatch
from specwatch.collectors.replay import ReplaySource
from specwatch.commands.replay import replay_monitor
from specwatch.dashboard.app import SpecwatchApp
from pilot_helpers import until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("utc")]  # utc: conftest.py

RECORDING = Path(specwatch.__file__).parent / "data" / "h100-70b-ngram.swrec"


@pytest.fixture
def anyio_backend():
    return "asyncio"  # Textual runs on asyncio


async def test_a_pause_after_a_poll_is_queued_leaves_step_working():
    source = ReplaySource(RECORDING, speed=100.0)
    app = SpecwatchApp(source, replay_monitor(source.header))
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.latest is not None, "a first reading")
        await app.workers.wait_for_complete()  # nothing in flight
        controller = app.controller
        if controller.timer is not None:
            controller.timer.stop()
            controller.timer = None
        # the next poll queued as a replay at full speed queues it (arm with no delay), then the pause
        # comes before the loop runs it
        app.call_later(controller.start)
        app.action_pause()
        await pilot.pause()
        assert not controller.in_flight, "a poll started although the replay is paused"
        before = app.latest.time
        app.action_step()
        await until(pilot, lambda: app.latest.time > before, "the step's reading")
        assert app.paused
