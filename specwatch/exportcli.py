"""`specwatch export` and `specwatch fleet`: arguments and entry points, for specwatch.cli to wire.

    add_export_arguments(p) / run_export(args) -> int
    add_fleet_arguments(p)  / run_fleet(args)  -> int

Exit status: 0 done (stopped by SIGTERM/SIGINT, or a non-looping source ended); 2 a usage error (a
refused --listen, an unknown scenario, a bad flag value); 3 something could not be read or bound
(the token file, the recording, the listen address).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from specwatch.export import DEFAULT_LISTEN, ExportAgent, ListenError, build_registry, check_listen, node_name, serve

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_UNREADABLE = 3
DEFAULT_PROMETHEUS = "http://localhost:9090"
DEFAULT_FLEET_JOB = "specwatch"


# ==================================================================================================
# export
# ==================================================================================================


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    from specwatch.cli import add_source_arguments

    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help="where to serve /metrics (default %(default)s, loopback only). Any address that is "
                        "not loopback (e.g. 0.0.0.0:9464) is refused unless --allow-remote is given too")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow --listen on a non-loopback address: the metrics then reach the network "
                        "(firewall the port to your Prometheus)")
    p.add_argument("--node", metavar="NAME", help="the node label on every series (default: the hostname)")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="seconds between polls of the live sources (default %(default)s)")
    p.add_argument("--window", type=float, default=30.0, metavar="SECONDS",
                   help="the rate window the advisor judges over (default %(default)s)")
    feed = p.add_argument_group("feeding the agent from a recording (tests and demos)")
    feed.add_argument("--replay", metavar="FILE", help="play this recording, looped, instead of the live sources")
    feed.add_argument("--scenario", metavar="NAME",
                      help="play a bundled scenario (see `specwatch demo --list`), looped")
    feed.add_argument("--speed", type=float, default=1.0, metavar="X",
                      help="playback speed of --replay/--scenario, 0.5 to 100 (default %(default)s)")
    add_source_arguments(p)
    # None means "not given": a replay then keeps the tensor-parallel degree stored in its header
    p.set_defaults(tp=None)


def run_export(args: argparse.Namespace) -> int:
    try:
        host, port = check_listen(args.listen, args.allow_remote)
    except ListenError as exc:
        print(f"specwatch export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.interval <= 0 or args.window <= 0:
        print("specwatch export: --interval and --window must be greater than 0", file=sys.stderr)
        return EXIT_USAGE
    if args.replay and args.scenario:
        print("specwatch export: give --replay or --scenario, not both", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.replay or args.scenario:
            source, monitor, mode, interval = _replay_feed(args)
        else:
            source, monitor, mode, interval = _live_feed(args)
    except _FeedError as exc:
        print(f"specwatch export: {exc.message}", file=sys.stderr)
        return exc.status
    agent = ExportAgent(source, monitor, node_name(args.node), mode)
    try:
        server, _thread = serve(build_registry(agent), host, port)
    except OSError as exc:
        print(f"specwatch export: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    print(f"specwatch export: serving http://{shown}:{bound_port}/metrics for node {agent.frame.node} "
          f"({source.describe()})", file=sys.stderr, flush=True)
    try:
        asyncio.run(_run_agent(agent, interval))
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return EXIT_OK


class _FeedError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _live_feed(args: argparse.Namespace) -> tuple[Any, Any, str, float]:
    from specwatch.cli import _source_settings, advisor_config, gpu_poller
    from specwatch.collectors.vllm import DEFAULT_URL, TokenError, VllmSource
    from specwatch.monitor import Monitor
    from specwatch.sources import LiveSource

    live_args = argparse.Namespace(**vars(args))
    live_args.tp = args.tp if args.tp is not None else 1
    try:
        settings = _source_settings(live_args)
        config = advisor_config(live_args)
        vllm = VllmSource(args.urls or [DEFAULT_URL], **settings)
    except TokenError as exc:
        raise _FeedError(str(exc), EXIT_UNREADABLE) from None
    except ValueError as exc:
        raise _FeedError(str(exc), EXIT_USAGE) from None
    source = LiveSource(vllm, gpu_poller(live_args), interval_s=args.interval, gpu_timeout_s=args.timeout)
    return source, Monitor(window_s=args.window, advisor_config=config), "live", args.interval


def _replay_feed(args: argparse.Namespace) -> tuple[Any, Any, str, float]:
    from specwatch.collectors.replay import MAX_SPEED, MIN_SPEED, ReplaySource
    from specwatch.monitor import Monitor
    from specwatch.recording import RecordingError, read_recording
    from specwatch.replaycli import list_scenarios, replay_advisor_config, scenario_path

    if args.scenario:
        path = scenario_path(args.scenario)
        if path is None:
            names = ", ".join(s.name for s in list_scenarios()) or "none found"
            raise _FeedError(f"no scenario {args.scenario!r}; bundled: {names}", EXIT_USAGE)
    else:
        path = Path(args.replay)
    if not MIN_SPEED <= args.speed <= MAX_SPEED:
        raise _FeedError(f"--speed must be between {MIN_SPEED:g} and {MAX_SPEED:g}", EXIT_USAGE)
    try:
        recording = read_recording(path)
    except RecordingError as exc:
        raise _FeedError(str(exc), EXIT_UNREADABLE) from None
    if not recording.snapshots:
        raise _FeedError(f"{path} holds no Snapshots", EXIT_UNREADABLE)
    try:
        config = replay_advisor_config(recording.header, args)
    except ValueError as exc:
        raise _FeedError(str(exc), EXIT_USAGE) from None
    source = ReplaySource(recording, speed=args.speed, loop=True)
    # the replay paces itself (recorded gaps ÷ speed): the agent polls it back to back
    return source, Monitor(window_s=args.window, advisor_config=config), "replay", 0.0


async def _run_agent(agent: ExportAgent, interval: float) -> None:
    from specwatch.sources import stop_on_signals

    stop = stop_on_signals()
    try:
        await agent.run(stop, interval)
    finally:
        await agent.source.aclose()


# ==================================================================================================
# fleet
# ==================================================================================================


def add_fleet_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", default=DEFAULT_PROMETHEUS, metavar="URL",
                   help="the Prometheus server that scrapes the specwatch agents (default %(default)s)")
    p.add_argument("--job", default=DEFAULT_FLEET_JOB, metavar="NAME",
                   help="the scrape job of the agents, to list the ones Prometheus cannot reach "
                        "(default %(default)s)")
    p.add_argument("--refresh", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between refreshes (default %(default)s)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="per-query timeout (default %(default)s)")
    from specwatch.cli import add_connection_arguments

    add_connection_arguments(p, "SPECWATCH_PROMETHEUS_TOKEN", "Prometheus")


def run_fleet(args: argparse.Namespace) -> int:
    from specwatch.collectors.prometheus import PrometheusClient
    from specwatch.collectors.vllm import TokenError, read_token, verify_from_flags
    from specwatch.fleet import FleetApp

    if args.refresh <= 0 or args.timeout <= 0:
        print("specwatch fleet: --refresh and --timeout must be greater than 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        token = read_token(args.token_env, args.token_file)
        verify = verify_from_flags(args.insecure, args.ca_file)
        client = PrometheusClient(args.prometheus, token=token, timeout_s=args.timeout, verify=verify)
    except TokenError as exc:
        print(f"specwatch fleet: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except ValueError as exc:
        print(f"specwatch fleet: {exc}", file=sys.stderr)
        return EXIT_USAGE
    FleetApp(client, job=args.job, refresh_s=args.refresh).run()
    return EXIT_OK
