"""The operator's trial, round two: the small frictions of the dashboard, fleet, tune and record,
each driven the way an operator meets it, through `python -m specwatch` in a subprocess or the
dashboard under Textual's Pilot.

- fleet: a bare server's first refresh says "no verdict yet", and "not configured" only when its
  readings show no speculation; a narrow terminal drops whole columns instead of cutting them;
- tune on a stalled engine says it is stalled, not that per-position acceptance is missing;
- a 401 for a URL carrying user:password says the server refused the URL's credentials;
- the footer says "resume" while paused; the demo's help does not offer n / N;
- record -o FILE refuses an existing FILE naming --force, which overwrites it;
- the GPUs panel says when its GPU comes from --gpu.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from http_fixtures import LocalServer, metrics_and_version, reply
from payloads import NGRAM_K4, read
from test_app import ScriptedSource, make_app, screen_text, snapshots, until, LOW
from test_fleet import _canned_prometheus, _fleet_with_a_down_target
from test_fleet_direct import AdvancingVllm, advanced

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
V0_PAYLOAD = (HERE / "corpus" / "metrics" / "v0_only.prom").read_bytes()
QUIET = ["--no-nvml", "--no-dcgm"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def specwatch(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specwatch", *argv], capture_output=True, text=True, timeout=120,
                          **kwargs)


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def with_credentials(url: str, userinfo: str) -> str:
    return url.replace("http://", f"http://{userinfo}@", 1)


# ==================================================================================================
# fleet
# ==================================================================================================


class UnconfiguredVllm(LocalServer):
    """The capture without its spec-decode families (a server running without speculation), advanced
    by one window at every /metrics."""

    def __init__(self) -> None:
        self.scrapes = 0
        capture = "\n".join(line for line in read(NGRAM_K4).splitlines() if "spec_decode" not in line)

        def metrics() -> bytes:
            self.scrapes += 1
            return advanced(capture, self.scrapes)

        super().__init__(metrics_and_version(metrics))


def _direct_fleet_app(*urls: str):
    from specwatch.commands.fleet import _direct_fleet, add_arguments
    from specwatch.commands.options import ArgumentParser
    from specwatch.outputs.fleet import FleetApp

    parser = ArgumentParser(prog="specwatch fleet")
    add_arguments(parser)
    args = parser.parse_args([a for url in urls for a in ("--url", url)])
    args.default_token_env = "SPECWATCH_TOKEN"
    return FleetApp(_direct_fleet(args), refresh_s=3600.0)


def table_rows(app) -> dict[str, list[str]]:
    from textual.widgets import DataTable

    table = app.query_one(DataTable)
    return {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)] for i in range(table.row_count)}


async def test_a_bare_server_says_no_verdict_yet_from_the_first_refresh_and_not_configured_only_when_so():
    with AdvancingVllm() as speculating, UnconfiguredVllm() as plain:
        app = _direct_fleet_app(speculating.url, plain.url)
        async with app.run_test(size=(120, 24)) as pilot:
            await until(pilot, lambda: app.reading is not None, "the first refresh")
            await pilot.pause()
            first = table_rows(app)
            spec_row, plain_row = first[speculating.url[7:]], first[plain.url[7:]]
            # one reading: no rates yet. The server with speculation is not called unconfigured...
            assert spec_row[1:3] == ["UNKNOWN", "no verdict yet"], spec_row
            assert "not configured" not in " ".join(spec_row)
            # ...the one without it is, from the same first reading (its families say so)
            assert plain_row[1:3] == ["UNKNOWN (not configured)", "no verdict yet"], plain_row
            # the second refresh judges both; the configured one never turned "not configured"
            await pilot.press("r")
            await until(pilot, lambda: app.refreshes >= 2, "the second refresh")
            await pilot.pause()
            second = table_rows(app)
            # the word, and its confidence where short of 80 % (issue 45: "ON 50%", not a plain ON)
            assert second[speculating.url[7:]][1].split()[0] in ("ON", "OFF", "HOLD")
            assert "not configured" not in " ".join(second[speculating.url[7:]])
            await pilot.press("q")


async def _fleet_columns_at(width: int) -> tuple[list[str], list[list[str]], int]:
    from textual.widgets import DataTable

    from specwatch.collectors.prometheus import PrometheusClient
    from specwatch.outputs.fleet import FleetApp

    series, up = _fleet_with_a_down_target()
    with LocalServer(_canned_prometheus(series, up)) as prometheus:
        app = FleetApp(PrometheusClient(prometheus.url), refresh_s=3600.0, clock=lambda: 1000.0)
        async with app.run_test(size=(width, 30)) as pilot:
            await until(pilot, lambda: app.reading is not None, "the first refresh")
            await pilot.pause()
            table = app.query_one(DataTable)
            labels = [str(c.label) for c in table.ordered_columns]
            rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
            drawn = sum(c.get_render_width(table) for c in table.ordered_columns)
            text = screen_text(app)
            await pilot.press("q")
    # what is shown is whole: every header on screen in full, and nothing scrolled off to the right
    for label in labels:
        assert label in text, (label, text)
    return labels, rows, drawn


@pytest.mark.parametrize("width, expected", [
    (80, ["node", "verdict", "attention"]),
    (120, ["node", "target", "verdict", "attention", "L", "break-even"]),
    (200, ["node", "target", "verdict", "attention", "L", "break-even", "running / crossover", "bound"]),
])
async def test_the_fleet_table_drops_whole_columns_at_narrow_widths(width, expected):
    labels, rows, drawn = await _fleet_columns_at(width)
    assert labels == expected
    assert drawn <= width  # no column cut by the edge: the table needs no sideways scroll
    fine = next(r for r in rows if r[0] == "gpu-node-8")
    assert fine[labels.index("verdict")] == "ON"
    if "L" in labels:  # the figures a column shows are whole
        assert fine[labels.index("L")] == "2.60" and fine[labels.index("break-even")] == "1.40"
    if width >= 120:
        down = next(r for r in rows if r[0] == "gpu-node-7")
        assert down[labels.index("attention")] == "unreachable (connection refused), last good reading 3 min ago"


# ==================================================================================================
# tune
# ==================================================================================================


def test_tune_on_a_stalled_engine_says_it_is_stalled():
    # the V0 payload never moves while 4 requests run: the engine is stalled
    with LocalServer(metrics_and_version(lambda: V0_PAYLOAD, "0.8.5")) as server:
        r = specwatch("tune", "--url", server.url, "--duration", "0.6", "--interval", "0.2", *QUIET)
    line = one_line(r.stderr)
    assert r.returncode == 3, r.stderr  # no usable reading, as check says of a stalled engine
    assert line.startswith("specwatch tune: no schedule: the engine is stalled: 4 requests running and no "), line
    assert "per-position" not in line
    assert r.stdout == ""


# ==================================================================================================
# a 401 for a URL that carried user:password
# ==================================================================================================


def test_a_401_for_url_credentials_says_they_were_refused_and_never_prints_them():
    import json

    secret = "hunter2-pw"
    with LocalServer(reply(401, b"unauthorised", "text/plain")) as server:
        env = {k: v for k, v in os.environ.items() if k != "SPECWATCH_TOKEN"}
        url = with_credentials(server.url, f"alice:{secret}")
        r = specwatch("check", "--url", url, "--window", "0.1", "--json", *QUIET, env=env)
        fleet = specwatch("fleet", "--json", "--url", url, env=env)
        assert server.requests  # the URL's credentials went as basic auth
    assert r.returncode == 3
    message = json.loads(r.stdout)["message"]
    assert "the server refused the URL's credentials" in message and "basic auth" in message, message
    assert "no token was sent" not in message
    assert secret not in r.stdout + r.stderr and "alice" not in r.stdout + r.stderr
    # the fleet reading the node directly says the same of its row
    assert fleet.returncode == 3, fleet.stderr
    (row,) = json.loads(fleet.stdout)["rows"]
    assert row["read_state"] == "http_401" and row["down"]
    assert secret not in fleet.stdout + fleet.stderr


def test_a_401_without_url_credentials_still_says_no_token_was_sent():
    from specwatch.collectors.vllm import describe_status

    _, message = describe_status(401, "http://h:8000")
    assert "no token was sent" in message
    _, message = describe_status(401, "http://***@h:8000", url_credentials=True)
    assert "refused the URL's credentials" in message and "no token was sent" not in message


# ==================================================================================================
# the dashboard: the footer while paused, the demo's help, the GPUs panel with --gpu
# ==================================================================================================


def footer_line(app) -> str:
    return screen_text(app).rstrip("\n").splitlines()[-1]


async def test_the_footer_says_resume_while_paused():
    app = make_app(ScriptedSource(snapshots(LOW), end=False))
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.polls >= 2, "two polls")
        await pilot.pause()
        assert re.search(r"space\s+pause", footer_line(app)), footer_line(app)
        await pilot.press("space")
        await until(pilot, lambda: app.paused, "paused")
        await pilot.pause()
        footer = footer_line(app)
        assert re.search(r"space\s+resume", footer) and "pause" not in footer, footer
        await pilot.press("space")  # the same key resumes
        await until(pilot, lambda: not app.paused, "resumed")
        await pilot.pause()
        assert re.search(r"space\s+pause", footer_line(app)), footer_line(app)
        await pilot.press("p")  # and its other key pauses too
        await until(pilot, lambda: app.paused, "paused by p")
        await pilot.press("q")


async def test_the_demos_help_does_not_offer_n_and_N_but_a_recordings_replay_does():
    from specwatch.cli import build_parser
    from specwatch.commands.replay import build_demo, demo_playlist, list_scenarios
    from specwatch.dashboard.app import SpecwatchApp
    from specwatch.widgets.help import HelpScreen

    async def help_of(scenarios) -> str:
        source, monitor = build_demo(scenarios, build_parser().parse_args(["demo"]))
        app = SpecwatchApp(source, monitor, title="specwatch demo")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
            await pilot.pause()
            text = screen_text(app)
            await pilot.press("escape", "q")
        return text

    demo = await help_of(demo_playlist(list_scenarios()))  # `specwatch demo`: the playlist
    assert "seek back / forward" in demo  # a replay's keys...
    assert "n / N" not in demo and "next / previous change" not in demo  # ...but not the jumps
    one = await help_of(list_scenarios()[:1])  # one recording file: its verdict changes are indexed
    assert "n / N" in one and "next / previous change of the shown verdict" in one


def _gpu_panel_text(app) -> str:
    from specwatch.widgets.gpu import GpuPanel

    panel = app.query_one("#gpu-panel", GpuPanel)
    width = max(20, panel.content_size.width or 80)
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None, legacy_windows=False)
    console.print(panel.render_view(panel.view, width))
    return console.export_text()


@pytest.mark.parametrize("gpus", [0, 2], ids=["no_gpu_read", "gpus_read"])
async def test_the_gpus_panel_says_its_gpu_comes_from_the_gpu_flag(gpus):
    from specwatch.cli import build_parser
    from specwatch.commands.options import advisor_config
    from specwatch.dashboard.app import SpecwatchApp
    from specwatch.advice.monitor import Monitor
    from test_app import NODE, WINDOW_S, data_clocked
    import dataclasses

    args = build_parser().parse_args(["watch", "--url", "localhost:8000", "--gpu", "H100", "--method", "ngram"])
    config = advisor_config(args)
    node = dataclasses.replace(NODE, gpus=gpus)
    app = data_clocked(SpecwatchApp(ScriptedSource(snapshots(LOW[:6], node)), Monitor(WINDOW_S, config)))
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.press("2")  # the GPUs tab
        await pilot.pause()
        await pilot.pause()
        text = _gpu_panel_text(app)
        await pilot.press("q")
    assert f"{config.gpu.name} (from --gpu)" in text, text
    if gpus:
        assert "not the GPUs read here" in text
    else:
        assert "No GPU readings." in text


async def test_the_gpus_panel_says_nothing_of_gpu_when_none_was_given():
    app = make_app(ScriptedSource(snapshots(LOW[:6])))
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.press("2")
        await pilot.pause()
        text = _gpu_panel_text(app)
        await pilot.press("q")
    assert "from --gpu" not in text and "advisor's GPU" not in text


# ==================================================================================================
# record
# ==================================================================================================


def test_record_refuses_an_existing_file_naming_force_which_overwrites_it(tmp_path):
    path = tmp_path / "r.swrec"
    path.write_bytes(b"keep me")
    with LocalServer(metrics_and_version(lambda: V0_PAYLOAD, "0.8.5")) as server:
        refused = specwatch("record", "-o", str(path), "--url", server.url, "--duration", "0.3", *QUIET)
        assert path.read_bytes() == b"keep me" and not server.requests  # refused before reading anything
        forced = specwatch("record", "-o", str(path), "--url", server.url, "--duration", "0.3", "--interval", "0.1",
                           "--force", *QUIET)
    assert refused.returncode == 3
    line = one_line(refused.stderr)
    assert line == f"specwatch record: {path} already exists: pass --force to overwrite it, or choose another name"
    assert forced.returncode == 0, forced.stderr
    from specwatch.recording import read_recording

    assert len(read_recording(path).snapshots) >= 1  # overwritten with a valid recording
    assert [p.name for p in tmp_path.iterdir()] == ["r.swrec"]


@pytest.mark.parametrize("command", [["check"], ["watch"], ["export"], ["fleet", "--url", "http://n:8000"],
                                     ["replay", "x.swrec"]])
def test_a_window_longer_than_an_hour_is_refused_with_why(command, capsys):
    """Issue 45: --window 1e9 (31 years) was accepted. An hour is the longest span a verdict averages
    over; the refusal says so."""
    from specwatch.cli import build_parser

    assert build_parser().parse_args([*command, "--window", "3600"]).window == 3600.0
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*command, "--window", "1e9"])
    assert exc.value.code != 0
    assert "at most 3600 seconds (an hour)" in capsys.readouterr().err


@pytest.mark.parametrize("url, words", [
    ("htp://node:8000", "did you mean 'http://node:8000'?"),
    ("htps://node:8000", "did you mean 'https://node:8000'?"),
    ("hhtp://ops:pw@node:8000", "did you mean 'http://***@node:8000'?"),  # credentials stay hidden
    ("http://my host:8000", "has a space in its host name 'my host'"),
    ("http://a$b:8000", "has '$' in its host name"),
])
def test_a_url_no_resolver_could_take_is_a_usage_error_with_the_fix(url, words):
    """Issue 45: a space in the host went on to fail as a DNS error at every poll, and `htp://` got no
    "did you mean". Both are refused up front, saying what is wrong."""
    from specwatch.cli import main
    from specwatch.commands.options import ExitCode
    from specwatch.telemetry.urls import split_url

    with pytest.raises(ValueError) as exc:
        split_url(url)
    assert words in str(exc.value) and "pw" not in str(exc.value)
    with pytest.raises(SystemExit) as exited:
        main(["check", "--url", url, "--no-nvml", "--no-dcgm"])
    assert exited.value.code == ExitCode.USAGE


@pytest.mark.parametrize("url", ["http://nöde:8000", "http://node_1:8000", "http://[::1]:8000", "node-7.example:8000"])
def test_hosts_a_resolver_takes_are_still_taken(url):
    from specwatch.telemetry.urls import split_url

    assert split_url(url)[0].startswith(("http://", "https://"))


def test_a_query_on_the_url_reaches_every_endpoint_read_not_metrics_alone():
    """Issue 45: `--url http://host:8000?token=T` (a proxy that wants its token on each request) sent
    the query to /metrics only; /version and /server_info went without it, and were refused."""
    from http_fixtures import LocalServer, check_json, metrics_and_version
    from payloads import NGRAM_K4, read

    payload = read(NGRAM_K4).encode()
    with LocalServer(metrics_and_version(lambda: payload)) as server:
        check_json("--url", server.url + "/?token=T0K")
        paths = [path for path, _ in server.requests]
    assert any(p.startswith("/metrics?token=T0K") for p in paths), paths
    assert "/version?token=T0K" in paths, paths
    assert "/server_info?config_format=json&token=T0K" in paths, paths
    # without a query, the endpoints are as before
    with LocalServer(metrics_and_version(lambda: payload)) as server:
        check_json("--url", server.url)
        assert {"/version", "/server_info?config_format=json"} <= {p for p, _ in server.requests}
