"""`specwatch watch` (and bare `specwatch`): the live dashboard over a vLLM node and its GPUs.

The lead wires it into cli.py:

    watch = sub.add_parser("watch", help="the live dashboard (the default command)")
    add_watch_arguments(watch)
    ...
    if args.command in (None, "watch"): return run_watch(args)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specwatch.report import EXIT_UNREADABLE


def add_watch_arguments(p: argparse.ArgumentParser) -> None:
    from specwatch.cli import add_source_arguments

    add_source_arguments(p)
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="seconds between polls; + and - change it in the app (default %(default)s)")
    p.add_argument("--window", type=float, default=30.0, metavar="SECONDS",
                   help="the sliding window rates and the verdict are computed over (default %(default)s)")
    p.add_argument("--history", type=float, default=10.0, metavar="MINUTES",
                   help="how far back the trend charts reach (default %(default)s)")
    p.add_argument("--sweep", metavar="FILE",
                   help="a `specwatch sweep` results JSON: its measured crossover is shown against the live load")


def build_live(args: argparse.Namespace) -> tuple[Any, Any]:
    """The LiveSource and Monitor the flags describe. Raises ValueError / TokenError with a message."""
    from specwatch.cli import _source_settings, advisor_config, gpu_poller
    from specwatch.collectors.vllm import DEFAULT_URL, VllmSource
    from specwatch.monitor import Monitor
    from specwatch.sources import LiveSource

    if args.interval <= 0:
        raise ValueError("--interval must be greater than 0")
    if args.window <= 0:
        raise ValueError("--window must be greater than 0")
    if args.history <= 0:
        raise ValueError("--history must be greater than 0")
    config = advisor_config(args)
    vllm = VllmSource(args.urls or [DEFAULT_URL], **_source_settings(args))
    source = LiveSource(vllm, gpu_poller(args), interval_s=args.interval, gpu_timeout_s=args.timeout)
    return source, Monitor(window_s=args.window, advisor_config=config)


def run_watch(args: argparse.Namespace, recorder: Any | None = None) -> int:
    """Open the dashboard; returns the exit status. Nothing reachable still opens it: the screen says
    what each source answered and points to `specwatch demo`."""
    from specwatch.app import run_app
    from specwatch.collectors.vllm import TokenError

    from specwatch.sweep import SweepFileError, load_sweep

    try:
        sweep = load_sweep(args.sweep) if args.sweep else None
        source, monitor = build_live(args)
    except (TokenError, ValueError, SweepFileError) as exc:
        print(f"specwatch watch: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    return run_app(source, monitor, title="specwatch", recorder=recorder, sweep=sweep,
                   history_minutes=args.history)


def main(argv: list[str] | None = None) -> int:
    """`python -m specwatch.watchcli`: the same as `specwatch watch`, usable before cli.py wires it."""
    parser = argparse.ArgumentParser(prog="specwatch watch", description="The live dashboard.")
    add_watch_arguments(parser)
    return run_watch(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
