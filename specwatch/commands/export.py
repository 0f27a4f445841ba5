"""`specwatch export`: run the sources and the advisor headless, and serve specwatch_* metrics for
Prometheus. Runs until SIGTERM/SIGINT (or until a non-looping source ends)."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import Any

from specwatch.commands.options import (
    CommandError,
    ExitCode,
    UsageError,
    add_source_arguments,
    advisor_config,
    live_session,
    print_error,
    positive_number,
    window_seconds,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from specwatch.outputs.export import DEFAULT_LISTEN

    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help="where to serve /metrics (default %(default)s, loopback only). Any address that is "
                        "not loopback (e.g. 0.0.0.0:9464) is refused unless --allow-remote is given too")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow --listen on a non-loopback address: the metrics then reach the network "
                        "(firewall the port to your Prometheus)")
    p.add_argument("--web-config-file", "--web.config.file", dest="web_config_file", metavar="FILE",
                   help="TLS and basic auth for /metrics, in the web configuration format of Prometheus's "
                        "exporter-toolkit (what node_exporter takes): tls_server_config, basic_auth_users "
                        "(bcrypt hashes), http_server_config.headers. Re-read when it changes and on SIGHUP; "
                        "with TLS configured, plain HTTP is refused. /healthz stays open (no data) for "
                        "liveness probes")
    p.add_argument("--hash-password", action="store_true",
                   help="read a password (from the terminal without echo, or one line of stdin), print its "
                        "bcrypt hash for the web config's basic_auth_users, and exit")
    p.add_argument("--node", metavar="NAME", help="the node label on every series (default: the hostname)")
    p.add_argument("--interval", type=positive_number, default=1.0, metavar="SECONDS",
                   help="seconds between polls of the live sources (default %(default)s)")
    p.add_argument("--window", type=window_seconds, default=30.0, metavar="SECONDS",
                   help="the rate window the advisor judges over (default %(default)s)")
    feed = p.add_argument_group("feeding the agent from a recording (tests and demos)")
    feed.add_argument("--replay", metavar="FILE", help="play this recording, looped, instead of the live sources")
    feed.add_argument("--scenario", metavar="NAME",
                      help="play a bundled scenario (see `specwatch demo --list`), looped")
    feed.add_argument("--speed", type=positive_number, default=1.0, metavar="X",
                      help="playback speed of --replay/--scenario, 0.5 to 100 (default %(default)s)")
    add_source_arguments(p)


def run(args: argparse.Namespace) -> int:
    from specwatch.outputs.export import ExportAgent, ListenError, build_registry, check_listen, node_name, serve

    if args.hash_password:
        return _hash_password()
    try:
        host, port = check_listen(args.listen, args.allow_remote)
    except ListenError as exc:
        raise UsageError(str(exc)) from None
    if args.replay and args.scenario:
        raise UsageError("give --replay or --scenario, not both")
    if args.replay or args.scenario:
        source, monitor, mode, interval = _replay_feed(args)
    else:
        session = live_session(args, interval_s=args.interval, window_s=args.window)
        source, monitor, mode, interval = session.source, session.monitor, "live", args.interval
    gate = _web_gate(args.web_config_file)
    agent = ExportAgent(source, monitor, node_name(args.node), mode, freeze_heap=True)
    try:
        server, _thread = serve(build_registry(agent), host, port, gate=gate, alive=agent.alive)
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.listen}: {exc.strerror or exc}", ExitCode.UNREADABLE) from None
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    scheme = "https" if gate.tls else "http"
    lock = gate.describe()
    print_error("export", f"serving {scheme}://{shown}:{bound_port}/metrics for node {agent.frame.node} "
                          f"({source.describe()}){lock}")
    if gate.path is not None and hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: gate.request_reload())
    try:
        interrupted = asyncio.run(_run_agent(agent, interval))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        server.shutdown()
        server.server_close()
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK


def _hash_password() -> int:
    """The bcrypt hash of a password, for basic_auth_users: no htpasswd needed on the node. The password
    comes from the terminal without echo, or as one line of stdin (a pipe, a file); it is never an
    argument, which the process list would show."""
    import getpass
    import sys

    import bcrypt

    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise UsageError("the two passwords differ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UsageError("an empty password: give one on stdin or at the prompt")
    if len(password.encode()) > 72:
        raise UsageError("bcrypt reads at most 72 bytes of a password: give a shorter one")
    print(bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode())
    return ExitCode.OK


def _web_gate(path: str | None) -> Any:
    """The web configuration in force (specwatch.outputs.agent_http.WebGate); a file that cannot be
    used stops the agent before it listens, with the reason (never a secret)."""
    from specwatch.outputs.agent_http import WebGate
    from specwatch.outputs.web_config import WebConfigError

    try:
        return WebGate(path)
    except WebConfigError as exc:
        raise UsageError(str(exc)) from None


def _replay_feed(args: argparse.Namespace) -> tuple[Any, Any, str, float]:
    from specwatch.collectors.replay import MAX_SPEED, MIN_SPEED, ReplaySource
    from specwatch.commands.replay import scenario_path, unknown_scenario
    from specwatch.advice.monitor import Monitor
    from specwatch.recording import RecordingError, read_recording

    if args.scenario:
        path = scenario_path(args.scenario)
        if path is None:
            raise unknown_scenario(args.scenario)
    else:
        path = Path(args.replay)
    if not MIN_SPEED <= args.speed <= MAX_SPEED:
        raise UsageError(f"--speed must be between {MIN_SPEED:g} and {MAX_SPEED:g}")
    try:
        recording = read_recording(path)
    except RecordingError as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None
    if not recording.snapshots:
        raise CommandError(f"{path} holds no Snapshots", ExitCode.UNREADABLE)
    config = advisor_config(args, recording.header.advisor, recorded=True)
    source = ReplaySource(recording, speed=args.speed, loop=True)
    # the replay paces itself (recorded gaps ÷ speed): the agent polls it back to back
    return source, Monitor(window_s=args.window, advisor_config=config), "replay", 0.0


async def _run_agent(agent: Any, interval: float) -> bool:
    """Serve until a stop request; True when it was Ctrl-C (exit 130), False for SIGTERM (exit 0)."""
    from specwatch.collectors.sources import stop_on_signals

    stop = stop_on_signals()
    try:
        await agent.run(stop, interval)
    finally:
        await agent.source.aclose()
    return stop.interrupted
