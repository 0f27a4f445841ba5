"""A server whose own description cannot be read (SGLang's /get_server_info disabled, vLLM outside dev
mode, or a proxy that passes only /metrics): --k and --method give what it does not say, the server's
word wins where it has one, and every front end names the engine and what is not known.

`check` runs as the operator runs it (a subprocess) against a fake SGLang server serving only
/metrics; the dashboard is driven with a scripted source of SGLang readings without k.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specwatch.advice.advisor import K_UNKNOWN_WORDS, Advisor, AdvisorConfig
from specwatch.advice.monitor import Monitor
from specwatch.cli import build_parser
from specwatch.collectors.synthetic import generate
from specwatch.commands.options import ExitCode, advisor_config, advisor_settings
from specwatch.readings.window import DRAFT_TOKENS, Window
from specwatch.telemetry.snapshot import Snapshot
from specwatch.widgets.header import HeaderBar
from specwatch.widgets.speculation import SpeculationPanel, gauge_top, length_gauge
from http_fixtures import LocalServer
from test_app import NODE, LOW, ScriptedSource, data_clocked, text_of, until
from test_sglang import FakeSglang

from specwatch.dashboard.app import SpecwatchApp

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def specwatch_check(url: str, *flags: str) -> tuple[int, dict]:
    """`python -m specwatch check --json` in a subprocess, with this checkout first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    r = subprocess.run([sys.executable, "-m", "specwatch", "check", "--url", url, "--window", "0.2", "--json",
                        "--no-nvml", "--no-dcgm", *flags], capture_output=True, text=True, timeout=120, env=env,
                       cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout)


# -- check against an SGLang that serves only /metrics -------------------------------------------


def test_without_the_flags_an_sglang_behind_a_metrics_only_proxy_is_unknown_and_told_the_fix():
    with LocalServer(FakeSglang([(2.2, 1000.0), (2.8, 1600.0)], None)) as srv:
        status, report = specwatch_check(srv.url)
    assert status == ExitCode.NOT_ENOUGH_DATA
    verdict = report["verdict"]
    assert verdict["speculation"] == "unknown"
    assert K_UNKNOWN_WORDS in verdict["reasons"]
    assert "give --k N (draft tokens per step) and --method NAME" in K_UNKNOWN_WORDS
    assert "/get_server_info (SGLang) or /server_info (vLLM dev mode)" in K_UNKNOWN_WORDS


def test_with_k_and_the_method_given_it_gets_a_verdict():
    with LocalServer(FakeSglang([(2.2, 1000.0), (2.8, 1600.0)], None)) as srv:
        status, report = specwatch_check(srv.url, "--method", "eagle3", "--k", "3")
    assert status in (ExitCode.OK, ExitCode.CHANGE)
    verdict, spec = report["verdict"], report["speculation"]
    assert verdict["speculation"] in ("on", "off")
    assert K_UNKNOWN_WORDS not in verdict["reasons"] and "k_unknown" not in verdict["flags"]
    assert (spec["method"], spec["k"]) == ("eagle3", 3)
    # --k stands in for the server's k: the gauge's weight becomes draft tokens, so the rate is known
    assert spec["window"]["acceptance_rate"] == pytest.approx(1.8 / 3)
    assert "EAGLE-3" in verdict["reasons"][0] and "k=3" in verdict["reasons"][0]


def test_the_servers_k_wins_over_the_flag_and_says_so():
    from test_sglang import CHAIN_INFO  # the server says k = 3

    with LocalServer(FakeSglang([(2.2, 1000.0), (2.8, 1600.0)], CHAIN_INFO)) as srv:
        _, report = specwatch_check(srv.url, "--k", "5")
    assert report["speculation"]["k"] == 3
    assert "--k 5 was given, but the server's /server_info says 3: judged with 3" in report["verdict"]["reasons"]


# -- the advisor: the counters' k wins, the flag's k stands in where there is none ---------------


def _judge(config: AdvisorConfig, snaps) -> tuple[Advisor, object]:
    window, advisor = Window(10.0), Advisor(config)
    verdict = None
    for snap in snaps:
        window.add(snap)
        verdict = advisor.update(window.target(NODE.url), snap.gpus)
    return advisor, verdict


def without_k(snap: Snapshot, engine: str | None = None, version: str | None = None) -> Snapshot:
    """The reading as a server that counts no k gives it: no per-position series, no draft tokens."""
    targets = []
    for t in snap.targets:
        engines = tuple(dataclasses.replace(e, accepted_per_position=(),
                                            counters={n: v for n, v in e.counters.items() if n != DRAFT_TOKENS})
                        for e in t.engines)
        targets.append(dataclasses.replace(t, engines=engines, engine=engine or t.engine,
                                           version=version or t.version))
    return dataclasses.replace(snap, targets=tuple(targets))


def test_the_counters_k_overrules_the_flag_and_says_so():
    advisor, verdict = _judge(AdvisorConfig(method="ngram", k=5), generate(NODE, [8.0] * 20))
    assert advisor.last_inputs.k == 4
    assert "--k 5 was given, but the server's metrics say 4: judged with 4" in verdict.reasons
    assert advisor.speculation.k == 4


def test_the_flag_gives_k_where_nothing_counts_it():
    snaps = [without_k(s) for s in generate(NODE, [8.0] * 20)]
    _, unknown = _judge(AdvisorConfig(method="ngram"), snaps)
    assert unknown.speculation == "unknown" and unknown.reasons[0] == K_UNKNOWN_WORDS
    advisor, verdict = _judge(AdvisorConfig(method="ngram", k=4), snaps)
    assert verdict.speculation in ("on", "off") and advisor.last_inputs.k == 4
    assert not any("was given, but" in r for r in verdict.reasons)


# -- the flags on every live command, stored for a replay -------------------------------------------


@pytest.mark.parametrize("command", ["check", "watch", "record", "export", "replay", "tune", "fleet"])
def test_k_and_method_are_flags_of_the_commands_that_judge(command):
    extra = {"record": ["-o", "x.swrec"], "replay": ["x.swrec"], "tune": [], "fleet": []}.get(command, [])
    args = build_parser(command).parse_args([command, *extra, "--k", "3", "--method", "eagle3"])
    config = advisor_config(args)
    assert (config.k, config.method) == (3, "eagle3")


def test_a_recording_header_keeps_k_for_the_replay():
    args = build_parser("record").parse_args(["record", "-o", "x.swrec", "--k", "3"])
    stored = advisor_settings(args)
    assert stored["k"] == 3
    assert advisor_config(None, stored).k == 3
    with pytest.raises(SystemExit):
        build_parser("check").parse_args(["check", "--k", "0"])


# -- the panel and the header ------------------------------------------------------------------------


def test_the_gauge_without_k_ends_past_l_and_the_break_even():
    assert gauge_top(3, 2.6, 1.2) == 4
    assert gauge_top(None, 2.6, 1.2) == 3  # not 2: L 2.60 is never drawn past the end of its scale
    assert gauge_top(None, 1.1, 1.4) == 2
    assert gauge_top(None, None, None) == 2
    full = length_gauge(2.6, 1.2, None, 20).plain
    assert full.count("█") < 20  # filled to L, short of the end


SGLANG = dataclasses.replace(NODE, version="0.5.5")


def sglang_app() -> SpecwatchApp:
    snaps = [without_k(s, engine="sglang") for s in generate(SGLANG, LOW)]
    return data_clocked(SpecwatchApp(ScriptedSource(snaps), Monitor(10.0, AdvisorConfig())))


@pytest.mark.anyio
async def test_the_dashboard_names_sglang_and_says_what_is_not_known():
    app = sglang_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        header = text_of(app.query_one(HeaderBar))
        panel = app.query_one("#ov-speculation", SpeculationPanel)
        speculation = text_of(panel)
        width = panel.content_size.width
    assert "SGLang 0.5.5" in header and "vLLM" not in header
    assert "k=1" not in speculation and "k unknown" in speculation
    # said once, and whole: not cut by the panel's edge
    assert speculation.count("method unknown") == 1
    line = next(row for row in speculation.splitlines() if "method unknown" in row)
    assert "…" not in line and len(line.rstrip()) <= width
    assert "--method" in speculation and "--k" in speculation
    # L's scale does not end at 2 (k = 1's) for a length of 2.0
    gauge = next(row for row in speculation.splitlines() if row.startswith("L "))
    assert int(gauge.split()[-1]) > 2
