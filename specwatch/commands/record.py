"""`specwatch record`: record the live sources to a file, headless, until --duration or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from specwatch.commands.options import (
    CommandError,
    ExitCode,
    UsageError,
    add_source_arguments,
    advisor_settings,
    live_session,
    print_error,
    positive_number,
)



def add_arguments(p: argparse.ArgumentParser) -> None:
    from specwatch.recording import FILE_SUFFIX

    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help=f"the recording to write (conventionally *{FILE_SUFFIX}); created with mode 0600; "
                        "a file, not stdout ('-' is refused)")
    p.add_argument("--duration", type=positive_number, metavar="SECONDS",
                   help="stop after this many seconds (default: until Ctrl-C)")
    p.add_argument("--interval", type=positive_number, default=1.0, metavar="SECONDS",
                   help="seconds between polls (default %(default)s)")
    p.add_argument("--notes", default="", help="free text stored in the recording's header")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists (without it, an existing "
                                                        "FILE is refused)")
    add_source_arguments(p)


def run(args: argparse.Namespace) -> int:
    """0 done or stopped by SIGTERM; INTERRUPTED (130) on Ctrl-C, the file closed valid; WRITE_FAILED when a write failed (the file stays valid up to its last
    flush); UNREADABLE when the file cannot be created."""
    from specwatch.recording import RecordingError, RecordingHeader, RecordingWriter, format_time

    if args.output == "-":
        # a recording is a file that is flushed, fsynced and closed valid; stdout cannot promise that
        raise UsageError("-o - is not supported: record writes a file (give a path; `specwatch check "
                         "--json` prints to stdout)")
    if not args.force and os.path.lexists(args.output):
        # said before anything is read, and with the flag that overwrites it
        raise CommandError(f"{args.output} already exists: pass --force to overwrite it, or choose another name",
                           ExitCode.UNREADABLE)
    session = live_session(args, interval_s=args.interval, window_s=args.interval)
    header = RecordingHeader(data="real", targets=tuple(session.urls), notes=args.notes, interval_s=args.interval,
                             advisor=advisor_settings(args))
    try:
        writer = RecordingWriter(args.output, header, overwrite=args.force)
    except RecordingError as exc:
        message = str(exc)
        if "already exists" in message and not args.force:  # created meanwhile, between the check and here
            message = f"{args.output} already exists: pass --force to overwrite it, or choose another name"
        raise CommandError(message, ExitCode.UNREADABLE) from None
    outcome = _RecordOutcome()
    try:
        asyncio.run(_record(session.source, args, writer, outcome))
    except KeyboardInterrupt:
        outcome.interrupted = outcome.by_ctrl_c = True
    finally:
        try:
            writer.close()
        except RecordingError as exc:
            outcome.error = str(exc)
    span = "nothing" if outcome.first is None else \
        f"{writer.snapshots_written} Snapshots, {format_time(outcome.first)} – {format_time(outcome.last)}"
    if outcome.error:
        print_error("record", outcome.error)
        return ExitCode.WRITE_FAILED
    why = "interrupted" if outcome.interrupted else "done"
    _StatusLine.end()
    print_error("record", f"{why}: {span} in {args.output} ({writer.bytes_written} bytes)")
    return ExitCode.INTERRUPTED if outcome.by_ctrl_c else ExitCode.OK


class _StatusLine:
    """One line on a terminal's stderr, rewritten after every reading: what record is writing.
    Nothing when stderr is not a terminal (a log file wants no carriage returns)."""

    shown = False

    @classmethod
    def update(cls, text: str) -> None:
        if sys.stderr.isatty():
            sys.stderr.write("\r\x1b[2K" + text)
            sys.stderr.flush()
            cls.shown = True

    @classmethod
    def end(cls) -> None:
        if cls.shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
            cls.shown = False


@dataclass
class _RecordOutcome:
    first: float | None = None
    last: float | None = None
    interrupted: bool = False
    by_ctrl_c: bool = False  # SIGINT (exit 130) rather than a service manager's SIGTERM (exit 0)
    error: str | None = None


async def _record(live: Any, args: argparse.Namespace, writer: Any, outcome: _RecordOutcome) -> None:
    from specwatch.recording import RecordingError
    from specwatch.collectors.sources import stop_on_signals

    stop = stop_on_signals()  # a stop request ends the loop between polls: the last Snapshot is whole
    started = time.monotonic()
    reported: set[str] = set()
    try:
        while not stop.is_set():
            tick = time.monotonic()
            snapshot = await live.read()
            try:
                writer.write(snapshot)
            except RecordingError as exc:
                outcome.error = str(exc)
                return
            outcome.first = snapshot.time if outcome.first is None else outcome.first
            outcome.last = snapshot.time
            up = sum(1 for t in snapshot.targets if t.ok)
            _StatusLine.update(f"recording {args.output}: {writer.snapshots_written} readings, "
                               f"{writer.bytes_written} bytes, {up}/{len(snapshot.targets)} targets up "
                               "(Ctrl-C to stop)")
            for target in snapshot.targets:
                if not target.ok and target.url not in reported:
                    reported.add(target.url)  # say it once; the recording keeps every failed read
                    _StatusLine.end()
                    print_error("record", f"{target.url}: {target.message or target.state} (recording continues)")
            if args.duration is not None and time.monotonic() - started >= args.duration:
                break
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, args.interval - (time.monotonic() - tick)))
            except asyncio.TimeoutError:
                pass
        if stop.is_set():
            outcome.interrupted = True
            outcome.by_ctrl_c = stop.interrupted
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                asyncio.get_running_loop().remove_signal_handler(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        await live.aclose()
