"""`specwatch fleet`: every node's verdict, read through the Prometheus that scrapes the agents."""

from __future__ import annotations

import argparse

from specwatch.commands.options import (
    ExitCode,
    UsageError,
    add_connection_arguments,
    connection_settings,
    prometheus_url,
    require_positive,
    require_terminal,
)

DEFAULT_PROMETHEUS = "http://localhost:9090"
DEFAULT_FLEET_JOB = "specwatch"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", default=DEFAULT_PROMETHEUS, metavar="URL", type=prometheus_url,
                   help="the Prometheus server that scrapes the specwatch agents (default %(default)s)")
    p.add_argument("--job", default=DEFAULT_FLEET_JOB, metavar="NAME",
                   help="the scrape job of the agents, to list the ones Prometheus cannot reach "
                        "(default %(default)s)")
    p.add_argument("--refresh", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between refreshes (default %(default)s)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="per-query timeout (default %(default)s)")
    add_connection_arguments(p, "SPECWATCH_PROMETHEUS_TOKEN", "Prometheus")


def run(args: argparse.Namespace) -> int:
    from specwatch.collectors.prometheus import PrometheusClient
    from specwatch.fleet import FleetApp

    require_positive(args, "refresh", "timeout")
    connection = connection_settings(args)
    try:
        client = PrometheusClient(args.prometheus, token=connection.token, timeout_s=args.timeout,
                                  verify=connection.verify)
    except ValueError as exc:  # a URL that is not http(s)
        raise UsageError(str(exc)) from None
    require_terminal()
    FleetApp(client, job=args.job, refresh_s=args.refresh).run()
    return ExitCode.OK
