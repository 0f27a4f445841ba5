"""`specwatch watch` (and bare `specwatch`): the live dashboard over a vLLM or SGLang node and its GPUs."""

from __future__ import annotations

import argparse
from typing import Any

from specwatch.commands.options import (
    CommandError,
    ExitCode,
    add_source_arguments,
    advisor_settings,
    live_session,
    positive_number,
    require_terminal,
    window_seconds,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(p)
    p.add_argument("--interval", type=positive_number, default=1.0, metavar="SECONDS",
                   help="seconds between polls; + and - change it in the app (default %(default)s)")
    p.add_argument("--window", type=window_seconds, default=30.0, metavar="SECONDS",
                   help="the sliding window rates and the verdict are computed over (default %(default)s)")
    p.add_argument("--history", type=positive_number, default=10.0, metavar="MINUTES",
                   help="how far back the trend charts reach (default %(default)s)")
    p.add_argument("--sweep", metavar="FILE",
                   help="a `specwatch sweep` results JSON: its measured crossover is shown against the live load, "
                        "and used by the verdict when it measured this target's model, method and k")


def run(args: argparse.Namespace) -> int:
    """Open the dashboard. Nothing reachable still opens it: the screen says what each source
    answered and points to `specwatch demo`."""
    from specwatch.dashboard.app import run_app
    from specwatch.sweep import SweepFileError, load_sweep
    from specwatch.advice.sweep_evidence import SweepIdentity

    session = live_session(args, interval_s=args.interval, window_s=args.window)
    try:
        sweep = load_sweep(args.sweep) if args.sweep else None
    except SweepFileError as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None
    if sweep is not None:
        # each verdict checks the sweep measured its target before using its crossover
        session.monitor.sweep = SweepIdentity.from_sweep(sweep)
    require_terminal("watch")
    return run_app(session.source, session.monitor, title="specwatch", recorder=live_recorder(args),
                   sweep=sweep, history_minutes=args.history)


def live_recorder(args: argparse.Namespace) -> Any:
    """The dashboard's `r` key recorder for a live session: the header keeps the advisor flags, so a
    replay of the file judges as the session did."""
    from specwatch.collectors.vllm import DEFAULT_URL
    from specwatch.dashboard.recorder import SessionRecorder
    from specwatch.recording import RecordingHeader

    from specwatch.telemetry.urls import redact

    header = RecordingHeader(data="real", targets=tuple(redact(u) for u in args.urls or [DEFAULT_URL]),
                             interval_s=getattr(args, "interval", None), advisor=advisor_settings(args),
                             notes="recorded from the specwatch dashboard")
    return SessionRecorder(header)
