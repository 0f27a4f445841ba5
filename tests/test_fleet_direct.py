"""`specwatch fleet --url ...`: the fleet read directly, against real loopback HTTP servers.

- a specwatch agent: an ExportAgent fed a synthetic node, served by prometheus_client's own HTTP
  server, exactly as `specwatch export` serves it;
- a bare vLLM: the real capture (tests/data) with every counter and histogram multiplied by the number
  of scrapes so far and two requests running, so that between any two readings the increases are
  the capture's own counters;
- a port where nothing listens (connection refused), and a server that never answers (timeout).

No httpx mock: every reading crosses a socket."""

from __future__ import annotations

import io
import json
import re
import time
from typing import Iterator

import pytest
from rich.console import Console

from http_fixtures import LocalServer, metrics_and_version, never_answers, refused_port
from payloads import NGRAM_K4, read
from specwatch.advice.advisor import AdvisorConfig
from specwatch.cli import main
from specwatch.outputs.export import ExportAgent, build_registry, serve
from specwatch.advice.monitor import Monitor
from specwatch.perf import HingeParameters
from specwatch.collectors.synthetic import SyntheticNode, generate

pytestmark = pytest.mark.anyio

# the capture's spec-decode counters: 272 tokens accepted over 301 drafts
CAPTURE_LENGTH = 1 + 272 / 301


def plain(renderable) -> str:
    console = Console(width=120, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def advanced(text: str, times: int, running: float = 2.0) -> bytes:
    """The capture `times` windows on: every vLLM counter and histogram series multiplied by `times`
    (so one window's increases are the capture's lifetime values), `running` requests in the batch."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^(vllm:\S+?(?:_total|_count|_sum|_bucket)\{.*\}) (\S+)$", line)
        if line.startswith("vllm:num_requests_running{"):
            line = line.rsplit(" ", 1)[0] + f" {running}"
        elif m:
            line = f"{m.group(1)} {float(m.group(2)) * times}"
        out.append(line)
    return ("\n".join(out) + "\n").encode()


class AdvancingVllm(LocalServer):
    """The capture advanced by one window at every /metrics."""

    def __init__(self) -> None:
        self.scrapes = 0
        capture = read(NGRAM_K4)

        def metrics() -> bytes:
            self.scrapes += 1
            return advanced(capture, self.scrapes)

        super().__init__(metrics_and_version(metrics))


@pytest.fixture
def agent() -> Iterator[tuple[ExportAgent, str, object]]:
    node = SyntheticNode(step=HingeParameters(0.02, 134.0, 0.02 / 134, 0.0, 0.0), gpus=2)
    agent = ExportAgent(None, Monitor(10.0, AdvisorConfig(method="ngram")), node="agent-node", mode="replay")
    for snapshot in generate(node, [8.0] * 20):
        agent.ingest(snapshot)
    server, _ = serve(build_registry(agent, process_metrics=False), "127.0.0.1", 0)
    try:
        yield agent, f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()


def test_json_rows_for_an_agent_an_engine_and_a_refused_port(agent, capsys) -> None:
    exporter, agent_url, _ = agent
    dead = f"127.0.0.1:{refused_port()}"
    with AdvancingVllm() as vllm:
        status = main(["fleet", "--json", "--window", "0.5", "--url", agent_url, "--url", vllm.url, "--url", dead])
        assert vllm.scrapes >= 2  # a bare engine: two readings at least, for rates
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "specwatch.fleet/1" and document["state"] == "ok"
    rows = {row["node"]: row for row in document["rows"]}
    # the refused port: a DOWN row that says why, first in attention order; the command goes on
    down = document["rows"][0]
    assert down["node"] == dead and down["down"] and down["read_state"] == "connection_refused"
    assert down["attention"] == "unreachable (connection refused)" and down["verdict"] == "unknown"
    # read directly, no Prometheus scraped an agent: no row claims one was (a URL that never answered
    # was said to have an exporter up)
    assert all(row["exporter_up"] is None for row in document["rows"])
    # the agent: its own verdict, as it serves it (and as Prometheus would hold it)
    served = exporter.frame.states["http://synthetic-node:8000"].verdict
    mine = rows["agent-node"]
    assert mine["target"] == "http://synthetic-node:8000" and not mine["down"]
    assert mine["verdict"] == served.speculation == "on"
    assert mine["acceptance_length"] == pytest.approx(served.acceptance_length)
    assert mine["running"] == 8.0
    # the bare vLLM, judged here over the two readings: the capture's acceptance, two running
    engine = rows[vllm.url.removeprefix("http://")]
    assert engine["target"] == vllm.url and engine["read_state"] == "ok" and engine["configured"]
    assert engine["acceptance_length"] == pytest.approx(CAPTURE_LENGTH)
    assert engine["running"] == 2.0
    assert engine["verdict"] in ("on", "off", "hold")
    # a node that cannot be read outweighs the rest, as in check
    assert status == 3


def test_agents_alone_take_one_reading_and_exit_with_the_verdicts(agent, capsys) -> None:
    _, agent_url, _ = agent
    assert main(["fleet", "--json", "--url", agent_url]) == 0  # speculation on and paying: no change
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["node"] == "agent-node" and row["verdict"] == "on"


def test_prometheus_and_url_together_are_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fleet", "--url", "127.0.0.1:1", "--url", "wat://x"])
    assert exc.value.code == 64
    assert main(["fleet", "--url", "127.0.0.1:1", "--prometheus", "http://127.0.0.1:9090", "--json"]) == 64
    assert "give --prometheus or --url, not both" in capsys.readouterr().err


async def test_a_node_that_times_out_or_goes_away_is_a_down_row(agent) -> None:
    from specwatch.commands.fleet import add_arguments, _direct_fleet
    from specwatch.commands.options import ArgumentParser

    _, agent_url, agent_server = agent
    with LocalServer(never_answers(5.0)) as silent, AdvancingVllm() as vllm:
        parser = ArgumentParser(prog="specwatch fleet")
        add_arguments(parser)
        args = parser.parse_args(["--url", agent_url, "--url", vllm.url, "--url", silent.url, "--timeout", "0.5"])
        args.default_token_env = "SPECWATCH_TOKEN"
        fleet = _direct_fleet(args)
        try:
            first = await fleet.read_fleet()
            by_target = {r.target: r for r in first.rows}
            assert by_target[silent.url].read_state == "timeout" and not by_target[silent.url].reachable
            assert by_target["http://synthetic-node:8000"].verdict == "on"  # the others are unaffected
            # one reading of a bare engine: no rates yet, so no verdict, and it says so
            assert by_target[vllm.url].reachable and by_target[vllm.url].attention[1] == "no verdict yet"
            agent_server.shutdown()  # the agent goes away (its server closes every connection)
            agent_server.server_close()
            later = await fleet.read_fleet()
        finally:
            await fleet.aclose()
    gone = {r.target: r for r in later.rows}[agent_url]
    # still named by the node it said it was, down, with when it last answered
    assert gone.node == "agent-node" and gone.read_state == "connection_refused"
    assert gone.attention[1] == "unreachable (connection refused)"
    assert gone.last_good is not None and gone.last_good <= time.time()
    assert {r.target: r for r in later.rows}[vllm.url].reachable


async def test_the_table_and_the_detail_screen(agent) -> None:
    from textual.widgets import DataTable

    from specwatch.commands.fleet import add_arguments, _direct_fleet
    from specwatch.commands.options import ArgumentParser
    from specwatch.outputs.fleet import FleetApp, NodeScreen, detail_text
    from specwatch.widgets.verdict import VerdictBanner

    _, agent_url, _ = agent
    dead = f"127.0.0.1:{refused_port()}"
    parser = ArgumentParser(prog="specwatch fleet")
    add_arguments(parser)
    args = parser.parse_args(["--url", agent_url, "--url", dead])
    args.default_token_env = "SPECWATCH_TOKEN"
    app = FleetApp(_direct_fleet(args), refresh_s=3600.0, clock=lambda: 1000.0)
    async with app.run_test(size=(120, 24)) as pilot:
        while app.reading is None:
            await pilot.pause(0.05)
        table = app.query_one(DataTable)
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert cells[0][:4] == [dead, dead, "DOWN", "unreachable (connection refused), never read"]
        # the agent's node has no GPU identified here: its call carries its confidence
        assert cells[1][:2] == ["agent-node", "synthetic-node:8000"] and cells[1][2].split()[0] == "ON"
        # Enter on the agent's row: the detail screen, from the series the agent serves
        table.focus()
        table.move_cursor(row=1)
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, NodeScreen) and screen.source.node == "agent-node"
        while screen.detail is None:
            await pilot.pause(0.05)
        assert screen.detail.ok and screen.detail.targets[0].verdict.speculation == "on"
        assert "read from the agent" in screen.detail.targets[0].verdict.reasons[0]
        assert [g.index for g in screen.detail.gpus] == ["0", "1"]
        # the bound's signals in the operator's words, as on the Roofline tab, not perf's identifiers
        shown = detail_text(screen.detail).plain
        assert "dram_vs_tensor" not in shown and "tokens_per_step" not in shown and "—×" not in shown, shown
        assert "DRAM vs tensor" in shown, shown
        await pilot.press("escape")
        # Enter on the refused URL's row: the banner says it is DOWN and why, not "waiting for the
        # first reading" (it was read: it refused)
        table.move_cursor(row=0)
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        while screen.detail is None:
            await pilot.pause(0.05)
        await pilot.pause()
        banner = plain(screen.query_one(VerdictBanner).render())
        assert "waiting for the first reading" not in banner and "DOWN" in banner and "connection refused" in banner
        assert "specwatch demo" not in banner  # a node someone runs, not "nothing to read here"
        await pilot.press("escape")
        await pilot.press("q")


async def test_an_all_down_table_at_80_columns_says_why_in_full() -> None:
    """URLs read directly name each node by its address, so the target column would repeat the node
    on every row; it is left out, and the attention words fit 80 columns uncut."""
    from textual.widgets import DataTable

    from specwatch.commands.fleet import add_arguments, _direct_fleet
    from specwatch.commands.options import ArgumentParser
    from specwatch.outputs.fleet import FleetApp

    dead = [f"127.0.0.1:{refused_port()}", f"localhost:{refused_port()}/metrics"]
    parser = ArgumentParser(prog="specwatch fleet")
    add_arguments(parser)
    args = parser.parse_args([a for url in dead for a in ("--url", url)])
    args.default_token_env = "SPECWATCH_TOKEN"
    app = FleetApp(_direct_fleet(args), refresh_s=3600.0, clock=lambda: 1000.0)
    async with app.run_test(size=(80, 24)) as pilot:
        while app.reading is None:
            await pilot.pause(0.05)
        await pilot.pause()
        table = app.query_one(DataTable)
        # the figures' columns that do not fit 80 columns are left out whole, least telling first
        assert [str(c.label) for c in table.ordered_columns] == ["node", "verdict", "attention", "L"]
        rows = sorted([str(c) for c in table.get_row_at(i)][:3] for i in range(table.row_count))
        assert rows == sorted([url.removesuffix("/metrics"), "DOWN", "unreachable (connection refused), never read"]
                              for url in dead)
        # node, verdict and attention, each with its padding, within the 80 columns
        assert sum(c.get_render_width(table) for c in table.ordered_columns[:3]) <= 80
