"""`specwatch fleet`: every node's verdict, read through the Prometheus that scrapes the agents, or,
for a few nodes, read from each node directly (`--url`, repeated)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from typing import Any

from specwatch.commands.options import (
    ExitCode,
    UsageError,
    add_advisor_arguments,
    advisor_config,
    add_connection_arguments,
    add_url_file_argument,
    connection_settings,
    live_session,
    node_url,
    prometheus_url,
    positive_number,
    require_terminal,
    window_seconds,
)

DEFAULT_PROMETHEUS = "http://localhost:9090"
DEFAULT_FLEET_JOB = "specwatch"
FLEET_SCHEMA = "specwatch.fleet/1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", metavar="URL", type=prometheus_url,
                   help=f"the Prometheus server that scrapes the specwatch agents (default {DEFAULT_PROMETHEUS}; "
                        "not with --url)")
    p.add_argument("--url", action="append", dest="urls", metavar="URL", type=node_url,
                   help="read this node directly instead of through Prometheus (repeat for each node; for a "
                        "few nodes): a specwatch agent's /metrics (`specwatch export`, e.g. host:9464) gives its "
                        "verdict; a bare vLLM or SGLang server (e.g. host:8000) is judged here, which takes two "
                        "readings a refresh apart")
    add_url_file_argument(p, "node URL")
    p.add_argument("--job", default=DEFAULT_FLEET_JOB, metavar="NAME",
                   help="the scrape job of the agents, to list the ones Prometheus cannot reach "
                        "(default %(default)s)")
    p.add_argument("--refresh", type=positive_number, default=5.0, metavar="SECONDS",
                   help="seconds between refreshes (default %(default)s)")
    p.add_argument("--timeout", type=positive_number, default=5.0, metavar="SECONDS",
                   help="per-query timeout; with --url, per node: all of its /metrics within it "
                        "(default %(default)s)")
    p.add_argument("--window", type=window_seconds, default=10.0, metavar="SECONDS",
                   help="with --url, for bare servers (vLLM or SGLang): the rate window they are judged over; "
                        "with --json, the gap between its two readings (default %(default)s)")
    p.add_argument("--json", action="store_true",
                   help=f"print one reading of the fleet as a {FLEET_SCHEMA} JSON object instead of the table, "
                        "and exit with the most urgent row's status (as check's)")
    add_connection_arguments(p, "SPECWATCH_PROMETHEUS_TOKEN", "Prometheus, or the nodes with --url",
                             # collectors.vllm.DEFAULT_TOKEN_ENV, named here without importing the collector
                             default_words="SPECWATCH_PROMETHEUS_TOKEN for Prometheus, SPECWATCH_TOKEN "
                                           "for the nodes with --url")
    judged = p.add_argument_group("judging bare servers (vLLM or SGLang) given with --url")
    add_advisor_arguments(judged)
    judged.add_argument("--draft-model", help="the draft model, when the servers do not expose it")
    # the nodes' GPUs are theirs to report (their agents do); this machine's are not the nodes'
    p.set_defaults(no_nvml=True, no_dcgm=True, dcgm=None, engine="auto", max_bytes=None)


def run(args: argparse.Namespace) -> int:
    if args.urls and args.prometheus:
        raise UsageError("give --prometheus or --url, not both: --url reads the nodes directly, without Prometheus")
    if args.urls:
        from specwatch.collectors.vllm import DEFAULT_TOKEN_ENV

        args.default_token_env = DEFAULT_TOKEN_ENV  # the nodes' token, as every command reading them
        client = _direct_fleet(args)
    else:
        client = _prometheus_client(args)
    if args.json:
        return asyncio.run(_print_json(client, args))
    from specwatch.outputs.fleet import FleetApp
    from textual.binding import Binding

    class FleetDashboard(FleetApp):
        """The fleet table, quit by Ctrl-C with the status of an interrupted command (q quits 0)."""

        BINDINGS = [Binding("ctrl+c", "interrupt", "quit", show=False, priority=True)]

        def action_interrupt(self) -> None:
            self.exit(return_code=ExitCode.INTERRUPTED)

    require_terminal("fleet")
    app = FleetDashboard(client, job=args.job, refresh_s=args.refresh)
    app.run()
    return ExitCode.INTERRUPTED if app.return_code == ExitCode.INTERRUPTED else ExitCode.OK


def _prometheus_client(args: argparse.Namespace) -> Any:
    from specwatch.collectors.prometheus import PrometheusClient

    connection = connection_settings(args)
    try:
        return PrometheusClient(args.prometheus or DEFAULT_PROMETHEUS, token=connection.token,
                                timeout_s=args.timeout, verify=connection.verify)
    except ValueError as exc:  # a URL that is not http(s)
        raise UsageError(str(exc)) from None


def _direct_fleet(args: argparse.Namespace) -> Any:
    from specwatch.collectors.transport import DEFAULT_MAX_BYTES
    from specwatch.outputs.fleet_direct import DirectFleet

    args.max_bytes = args.max_bytes or DEFAULT_MAX_BYTES
    connection = connection_settings(args)
    # with --json the two readings are --window apart and both must stay in the window, as check's
    window_s = args.window * 2 if args.json else max(args.window, 2 * args.refresh)

    def engine_session(url: str) -> Any:
        # a bare engine is judged by the live session every command uses, one per URL
        return live_session(argparse.Namespace(**{**vars(args), "urls": [url]}), interval_s=args.refresh,
                            window_s=window_s, evaluate_every_s=0.0)

    advisor_config(args)  # an unknown --gpu or --model is a usage error before anything is read
    return DirectFleet(args.urls, engine_session, token=connection.token, verify=connection.verify,
                       timeout_s=args.timeout, max_bytes=args.max_bytes)


async def _print_json(client: Any, args: argparse.Namespace) -> int:
    from specwatch.commands.check import finite_json
    from specwatch.outputs.fleet import read_fleet

    try:
        if args.urls:
            reading = await client.read_fleet()
            if any(t.kind == "engine" for t in client.targets):
                # a bare engine gives counters: rates, and so a verdict, need a second reading
                await asyncio.sleep(args.window)
                reading = await client.read_fleet()
        else:
            reading = await read_fleet(client, args.job)
    finally:
        await client.aclose()
    document = fleet_document(reading, client.describe(), direct=bool(args.urls))
    print(json.dumps(finite_json(document), indent=2, allow_nan=False))
    return fleet_status(reading)


def fleet_document(reading: Any, source: str, direct: bool = False) -> dict[str, Any]:
    """The `specwatch.fleet/1` object. `direct`: the rows were read from the URLs themselves, where
    no Prometheus scrapes an agent, so `exporter_up` (Prometheus's `up` for the node's agent) is null
    rather than a true nobody measured; `down` and `read_state` say whether each URL answered."""
    rows = []
    for row in reading.rows:
        fields = dataclasses.asdict(row)
        fields.pop("selector")
        if direct:
            fields["exporter_up"] = None
        elif not row.exporter_up:
            # Prometheus could not scrape the node's agent: nobody read its targets, which is not "ok"
            fields["read_state"] = "agent_not_scraped"
        fields["down"] = not row.exporter_up or not row.reachable
        fields["attention"] = row.attention[1]
        rows.append(fields)
    return {"schema": FLEET_SCHEMA, "source": source, "read_at": reading.read_at, "state": reading.state,
            "message": reading.message, "rows": rows}


def fleet_status(reading: Any) -> ExitCode:
    """check's contract over the rows: a row that cannot be read first, then one without a verdict,
    then one that wants a change; a Prometheus that cannot be queried is UNREADABLE."""
    from specwatch.commands.check import exit_status, worst_status

    if not reading.ok:
        return ExitCode.UNREADABLE

    def status(row: Any) -> ExitCode:
        if not row.exporter_up or not row.reachable or "engine_stalled" in row.flags:
            return ExitCode.UNREADABLE
        return exit_status(True, {"speculation": row.verdict, "flags": row.flags,
                                  "change_recommended": row.change_recommended}, row.role)

    return worst_status(map(status, reading.rows))
