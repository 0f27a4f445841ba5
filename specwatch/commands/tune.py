"""`specwatch tune`: watch a server (or read a recording) and print the speculation schedule by batch
size, ready to paste into vLLM. The schedule and its report are `specwatch.advice.tune`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from specwatch.commands.options import (
    CommandError,
    ExitCode,
    add_source_arguments,
    advisor_config,
    live_session,
    non_negative_number,
    whole_number,
    positive_number,
    print_error,
    window_seconds,
)
from specwatch.commands.replay import DEFAULT_WINDOW_S

# tune judges as watch does (live) and as replay does (--from): the same window, the same step-time
# samples and refits, the same evaluations, so that its expected speedup, knee and the k it schedules
# at the running batch are the verdict's. It once sampled and refitted at every scrape, which gave
# another fit of the same data: tune said off from 3 running where replay of the same file said ON.


def add_arguments(p: argparse.ArgumentParser) -> None:
    from specwatch import perf

    add_source_arguments(p)
    p.add_argument("--from", dest="from_file", metavar="FILE",
                   help="a recording, instead of a live server (the advisor flags override its header's)")
    p.add_argument("--duration", type=positive_number, default=30.0, metavar="SECONDS",
                   help="how long to watch a live server before answering (default %(default)s)")
    p.add_argument("--window", type=window_seconds, default=DEFAULT_WINDOW_S, metavar="SECONDS",
                   help="the sliding window rates and the verdict are computed over, as watch's and replay's "
                        "(default %(default)s)")
    p.add_argument("--interval", type=positive_number, default=2.0, metavar="SECONDS",
                   help="seconds between scrapes of a live server (default %(default)s)")
    p.add_argument("--k-max", type=whole_number(1), metavar="K", help="largest k to consider (default: the k in use; "
                                                          "larger values are extrapolated)")
    p.add_argument("--max-batch", type=whole_number(1), default=256, metavar="N",
                   help="largest batch size to schedule, vLLM's max_num_seqs (default %(default)s)")
    p.add_argument("--margin", type=non_negative_number, default=perf.SCHEDULE_MARGIN, metavar="FRACTION",
                   help="gain a range needs over plain decoding to keep speculation (default %(default)s)")
    p.add_argument("--vllm-python", metavar="PATH", help="an interpreter with vLLM installed, to validate "
                                                         "the schedule with vLLM's own validator")
    p.add_argument("--json", action="store_true", help="print the specwatch.tune/1 object")


def run(args: argparse.Namespace) -> int:
    """OK with a schedule; NOT_ENOUGH_DATA when the data cannot support one; UNREADABLE when the
    source cannot be read, or its engine is stalled (as check)."""
    from specwatch.advice.tune import format_tune, tune_report, validate_with_vllm

    if args.from_file:
        monitor, url = _feed_recording(args)
    else:
        monitor, url = asyncio.run(_feed_live(args))
    state = monitor.states.get(url)
    advisor = monitor.advisor_of(url)
    inputs = advisor.last_inputs if advisor else None
    if state is not None and "engine_stalled" in state.verdict.flags:
        # requests running and nothing moving: no figure of this window (acceptance, step time) is a
        # reading, and a schedule from before the stall would be answered as if it were
        why = state.verdict.reasons[0].removeprefix("engine stalled: ") if state.verdict.reasons else ""
        print_error("tune", f"no schedule: the engine is stalled: {why or 'no engine step in the window'}")
        return ExitCode.UNREADABLE
    if state is None or inputs is None or not inputs.per_position:
        reason = state.verdict.reasons[0] if state and state.verdict.reasons else "no verdict"
        print_error("tune", f"no schedule: the data hold no per-position acceptance ({reason})")
        return ExitCode.NOT_ENOUGH_DATA
    latest = monitor.latest.target(url) if monitor.latest is not None else None
    engine = latest.engine_name if latest is not None else None
    report = tune_report(inputs, observed_batch=advisor.observed_batch, k_max=args.k_max,
                         max_batch=args.max_batch, margin=args.margin, source=args.from_file or url, engine=engine,
                         shown=state.verdict)
    if engine in (None, "vllm"):  # vLLM's own validator checks vLLM's schedule, not another engine's knobs
        report["validation"] = validate_with_vllm(report["schedule"], report["speculative_config"]
                                                  ["num_speculative_tokens"], args.max_batch, args.vllm_python)
    print(json.dumps(report, indent=2) if args.json else format_tune(report))
    return ExitCode.OK


async def _feed_live(args: argparse.Namespace) -> tuple[Any, str]:
    # evaluated at every Snapshot, so that the answer rests on the last reading (the step-time samples
    # and refits keep their data-time cadence: the fit is watch's)
    session = live_session(args, interval_s=args.interval, window_s=args.window,
                           one_target="tune reads one target", evaluate_every_s=0.0)
    url = session.vllm.targets[0].url
    source, monitor = session.source, session.monitor
    deadline = time.monotonic() + args.duration
    if sys.stderr.isatty():  # say why nothing happens for --duration seconds
        print_error("tune", f"watching {url} for {args.duration:g} s before answering (Ctrl-C to stop)")
    try:
        while True:
            snapshot = await source.read()
            monitor.ingest(snapshot)
            target = snapshot.targets[0]
            if not target.ok:
                raise CommandError(target.message or target.state, ExitCode.UNREADABLE)
            if time.monotonic() >= deadline:
                return monitor, url
            await asyncio.sleep(args.interval)
    finally:
        await source.aclose()


def _feed_recording(args: argparse.Namespace) -> tuple[Any, str]:
    """The recording read through replay's Monitor: its header's advisor settings under the flags."""
    from specwatch.commands.replay import replay_monitor
    from specwatch.recording import RecordingError, read_recording

    path = args.from_file
    advisor_config(args)  # a bad flag is a usage error even when the file is unreadable
    try:
        recording = read_recording(path)
    except (OSError, RecordingError) as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None
    monitor = replay_monitor(recording.header, args)
    url = ""
    for snapshot in recording.snapshots:
        monitor.ingest(snapshot)
        if snapshot.targets:
            url = snapshot.targets[0].url
    if not url:
        raise CommandError(f"{path} holds no vLLM readings", ExitCode.UNREADABLE)
    return monitor, url
