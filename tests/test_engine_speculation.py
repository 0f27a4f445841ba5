"""Every front end judges with the speculation method a real vLLM reports in /server_info.

One n-gram k=4 server runs with VLLM_SERVER_DEV_MODE=1 (module-scoped); the session's plain n-gram
server, without dev mode, shows that `--method` is what the verdict uses where /server_info is not
served. The front ends run through `specwatch.cli.main` with their user-level flags, and none of
them is given --method against the dev-mode server: the method can only come from /server_info.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from conftest import NGRAM_K4
from test_export import SERVING, samples, wait_for
from vllm_server import JUDGED, Traffic, VllmServer, record_under_traffic

from specwatch import cli
from specwatch.recording import read_recording
from specwatch.telemetry.snapshot import FROM_SERVER_INFO

pytestmark = pytest.mark.engine

# What the advisor's first reason says of an n-gram proposer with k=4 (METHOD_WORDS["ngram"]).
NGRAM_WORDS = "for n-gram lookup with k=4"
# no GPU here; and a CPU vLLM under traffic can take seconds to answer /metrics on a busy machine
QUIET = ["--no-nvml", "--no-dcgm", "--timeout", "30"]


@pytest.fixture(scope="module")
def dev_server(tiny_models, vllm_py, tmp_path_factory):
    target, _ = tiny_models
    server = VllmServer(target, NGRAM_K4, extra_args=["--enable-mfu-metrics"], python=vllm_py,
                        log_dir=tmp_path_factory.mktemp("vllm-dev-logs"), env={"VLLM_SERVER_DEV_MODE": "1"})
    server.start()
    yield server
    server.stop()


def test_the_dev_mode_server_exposes_its_speculative_config(dev_server):
    """The capture in tests/data was taken from this kind of server: it still says the same."""
    info = httpx.get(dev_server.url + "/server_info", params={"config_format": "json"}, timeout=60).json()
    spec = info["vllm_config"]["speculative_config"]
    assert (spec["method"], spec["num_speculative_tokens"], spec["model"]) == ("ngram", 4, "ngram")
    assert (spec["prompt_lookup_min"], spec["prompt_lookup_max"]) == (1, 4)


def test_check_reads_the_schedulers_token_budget_from_server_info(dev_server, capsys):
    """The step's token budget rides in the reading: check --json shows the server's own, which wins
    over --max-num-batched-tokens, and the verdict says the flag was overruled."""
    info = httpx.get(dev_server.url + "/server_info", params={"config_format": "json"}, timeout=60).json()
    scheduler = info["vllm_config"]["scheduler_config"]
    budget = min(b for b in (scheduler["max_num_batched_tokens"], scheduler.get("max_num_scheduled_tokens"))
                 if b is not None)
    capsys.readouterr()
    cli.main(["check", "--url", dev_server.url, "--json", "--window", "1", "--max-num-batched-tokens", "1", *QUIET])
    report = json.loads(capsys.readouterr().out)
    assert report["engine"]["token_budget"] == {"tokens": budget, "source": FROM_SERVER_INFO}
    assert (f"--max-num-batched-tokens 1 was given, but the server's /server_info says {budget}: judged with "
            f"{budget}") in report["verdict"]["reasons"], report["verdict"]["reasons"]
    # an unquantised model: the server's model_config names no quantisation, so --dtype stands
    assert info["vllm_config"]["model_config"]["quantization"] is None
    capsys.readouterr()
    cli.main(["check", "--url", dev_server.url, "--json", "--window", "1", "--dtype", "fp8", *QUIET])
    assert json.loads(capsys.readouterr().out)["engine"]["weights"] == {"format": "fp8", "source": "flags"}


def test_watch_judges_with_the_method_from_server_info(dev_server, monkeypatch):
    """`specwatch watch` headless: its run_app is swapped for a Pilot run of the same app, over the
    LiveSource and Monitor the command built from its flags."""
    from specwatch.dashboard import app as app_module
    from specwatch.commands import options
    from specwatch.widgets.speculation import SpeculationPanel

    seen: dict = {}

    def run_headless(source, monitor, **kwargs):
        async def drive():
            app = app_module.SpecwatchApp(source, monitor, **kwargs)
            async with app.run_test(size=(140, 44)) as pilot:
                url = dev_server.url  # already a base URL: the target's key in the Monitor
                for _ in range(600):  # a bound on rounds (~2 min at most), not a timing assertion
                    advisor = monitor.advisor_of(url)
                    if advisor is not None and advisor.last_inputs is not None:
                        break
                    await pilot.pause(0.2)
                await pilot.pause(0.3)
                panel = app.query_one("#ov-speculation", SpeculationPanel)
                seen.update(advisor=monitor.advisor_of(url), state=monitor.states.get(url),
                            view=app.view(), panel=str(panel.render_view(app.view(), 100).renderables[1]))
                await pilot.press("q")
            return 0

        return asyncio.run(drive())

    monkeypatch.setattr(app_module, "run_app", run_headless)
    monkeypatch.setattr(options, "stdout_is_terminal", lambda: True)  # pytest captures stdout
    monkeypatch.setattr(options, "terminal_is_dumb", lambda: False)  # a CI runner may set TERM=dumb
    with Traffic(dev_server, concurrency=2):
        code = cli.main(["watch", "--url", dev_server.url, "--interval", "1", "--window", "6", *QUIET])
    assert code == 0
    advisor = seen["advisor"]
    assert advisor is not None and advisor.last_inputs is not None, "the dashboard never judged the node"
    assert advisor.last_inputs.method == "ngram" and advisor.last_inputs.draft_ratio == 0.0
    assert advisor.speculation.source_of("method") == FROM_SERVER_INFO
    assert seen["view"].speculation.method == "ngram"
    assert seen["panel"].startswith("method from /server_info  k from /server_info  draft none")
    verdict = seen["state"].verdict
    assert "method_assumed" not in verdict.flags
    assert any(NGRAM_WORDS in r for r in verdict.reasons), verdict.reasons


# The readings the tests below need: several, so the replay has rates to judge with.
ENOUGH_READINGS = 5


@pytest.fixture(scope="module")
def dev_recording(dev_server, tmp_path_factory):
    """A recording of the dev-mode server under load (14 s; 60 s when that holds too few readings or
    no judged verdict)."""
    out = tmp_path_factory.mktemp("rec") / "dev.swrec"

    def record(duration: str) -> None:
        assert cli.main(["record", "-o", str(out), "--url", dev_server.url, "--duration", duration,
                         "--interval", "1", "--force", *QUIET]) == 0

    record_under_traffic(dev_server, out, record, enough=ENOUGH_READINGS, durations=("14", "60"))
    return out


def test_record_keeps_the_config_from_server_info_in_every_reading(dev_recording):
    rec = read_recording(dev_recording)
    assert rec.warnings == [] and len(rec.snapshots) >= ENOUGH_READINGS
    configs = {s.targets[0].speculation for s in rec.snapshots}
    assert len(configs) == 1, configs
    (config,) = configs
    assert (config.method, config.k, config.draft_model) == ("ngram", 4, None)
    assert config.source_of("method") == config.source_of("k") == FROM_SERVER_INFO
    assert (config.prompt_lookup_min, config.prompt_lookup_max) == (1, 4)
    assert rec.header.advisor.get("method") is None  # not from the flags: none were given


def test_replay_of_that_recording_judges_with_its_method(dev_recording, capsys):
    capsys.readouterr()
    assert cli.main(["replay", str(dev_recording), "--headless", "--json"]) == 0
    changes = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    judged = [c for c in changes if c["speculation"] in JUDGED]
    assert judged, changes
    for c in judged:
        assert any(NGRAM_WORDS in r for r in c["reasons"]), c["reasons"]
        assert not any("method unknown" in r for r in c["reasons"])


def test_tune_from_that_recording_uses_its_method(dev_recording, capsys):
    capsys.readouterr()
    assert cli.main(["tune", "--from", str(dev_recording), "--max-batch", "16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"]["method"] == "ngram" and report["inputs"]["draft_ratio"] == 0.0
    assert report["speculative_config"]["method"] == "ngram"


def test_tune_live_uses_the_method_from_server_info(dev_server, capsys):
    capsys.readouterr()
    with Traffic(dev_server, concurrency=3):
        code = cli.main(["tune", "--url", dev_server.url, "--duration", "12", "--interval", "2",
                         "--max-batch", "16", "--json", *QUIET])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["inputs"]["method"] == "ngram"
    assert report["speculative_config"]["method"] == "ngram"
    assert not any("method unknown" in n for n in report["notes"])


def test_export_publishes_and_judges_with_the_method_from_server_info(dev_server, tmp_path):
    log = tmp_path / "export.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "export", "--url", dev_server.url,
                                  "--listen", "127.0.0.1:0", "--interval", "1", "--window", "6", *QUIET],
                                 stdout=out, stderr=subprocess.STDOUT)
    try:
        url = wait_for(lambda: SERVING.search(log.read_text(errors="replace")), bool,
                       "the agent to serve", 60).group(1)

        def judged(text: str) -> bool:
            s = samples(text)
            configured = [v for _, v in s.get("specwatch_speculation_configured", [])]
            return bool(configured) and configured[0] == 1 and bool(s.get("specwatch_expected_speedup_ratio"))

        def scrape() -> str:
            # on two cores saturated by the CPU vLLM the agent can be starved for seconds: a scrape
            # that times out is "not judged yet", and the deadline below bounds the whole wait
            try:
                return httpx.get(url + "/metrics", timeout=30, trust_env=False).text
            except httpx.HTTPError as exc:
                return f"# scrape failed: {exc!r}"

        with Traffic(dev_server, concurrency=2):
            try:
                text = wait_for(scrape, judged, "a verdict on the configured node", 240)
            except AssertionError:
                print("---- the agent's log ----\n" + log.read_text(errors="replace")[-4000:])
                raise
    finally:
        agent.terminate()
        agent.wait(30)
    s = samples(text)
    (labels, value), = s["specwatch_speculation_info"]
    assert value == 1.0
    assert (labels["method"], labels["draft_model"], labels["source"]) == ("ngram", "none", "server_info")
    flags = {labels["flag"]: v for labels, v in s["specwatch_flag"]}
    assert flags["method_assumed"] == 0.0


def test_without_dev_mode_the_method_flag_is_what_is_used(ngram_server, capsys):
    """The session's plain server has no /server_info: --method ngram is the only source of the method."""
    assert httpx.get(ngram_server.url + "/server_info", timeout=30).status_code == 404
    reports = {}
    with Traffic(ngram_server, concurrency=3):
        for flags in ((), ("--method", "ngram")):
            capsys.readouterr()
            assert cli.main(["tune", "--url", ngram_server.url, "--duration", "10", "--interval", "2",
                             "--max-batch", "16", "--json", *QUIET, *flags]) == 0
            reports[flags] = json.loads(capsys.readouterr().out)
    assert reports[()]["inputs"]["method"] is None
    assert any("method unknown" in n for n in reports[()]["notes"])
    told = reports[("--method", "ngram")]
    assert told["inputs"]["method"] == "ngram" and told["speculative_config"]["method"] == "ngram"
    assert told["inputs"]["draft_ratio"] == 0.0
