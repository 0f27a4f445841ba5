"""The live session's controller: the poll at the operator's interval (+ and -) and the header's clock.

A live source is read every `interval_s` seconds (specwatch.dashboard.poll re-arms the poll once the
last one landed). At intervals from LONG_INTERVAL_S the header's wall clock and next-poll countdown
tick once a second on their own; below it the polls move the header's clock, and the timer sleeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from textual.app import SystemCommand
from textual.timer import Timer

from specwatch.dashboard.poll import PollLoop, next_in
from specwatch.widgets.header import LONG_INTERVAL_S

if TYPE_CHECKING:
    from specwatch.dashboard.app import SpecwatchApp

# Poll intervals offered by + and - (seconds).
INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class LiveController(PollLoop):
    """Polls a live source at the operator's interval; + and - change it at once, even mid-wait."""

    def __init__(self, app: SpecwatchApp) -> None:
        super().__init__(app)
        self._clock_timer: Timer | None = None  # the header's once-a-second clock, once mounted

    def mount(self) -> None:
        app = self.app
        self.start()
        # the header's clock and countdown only: no panel is given a view on this tick. Below
        # LONG_INTERVAL_S the polls move the clock, and the timer does not fire at all.
        self._clock_timer = app.set_interval(1.0, app.tick_clock, name="clock",
                                             pause=app.interval_s < LONG_INTERVAL_S)

    def clock_follows_interval(self) -> None:
        """The clock ticks on its own only at intervals from LONG_INTERVAL_S: a shorter interval
        pauses it (and puts the reading's time back on the header), a longer one resumes it."""
        timer = self._clock_timer
        if timer is None:
            return
        if self.app.interval_s < LONG_INTERVAL_S:
            timer.pause()
            self.app.tick_clock()
        else:
            timer.resume()

    def interval(self, step: int) -> None:
        """Poll faster (step -1) or slower (step 1). Takes effect at once, even mid-wait."""
        app = self.app
        app.interval_s = next_in(INTERVALS, app.interval_s, step)
        try:
            app.source.interval_s = app.interval_s  # LiveSource takes it; others may not
        except (AttributeError, TypeError):
            pass
        self.clock_follows_interval()
        if self.timer is not None:
            self.arm()
        app.notify(f"polling every {app.interval_s:g} s", timeout=2)
        app.changed()

    def commands(self) -> Iterable[SystemCommand]:
        for seconds in INTERVALS:
            yield SystemCommand(f"Poll every {seconds:g} s", "Change the refresh interval",
                                lambda s=seconds: self.app.set_interval_s(s))
