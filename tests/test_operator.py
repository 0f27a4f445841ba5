"""What an on-call operator types, through the real command in a subprocess: Ctrl-C as a real SIGINT,
a closed pipe as a real one, bad URLs, several targets, tokens, methods, an old engine, swapped bench
folders, record's output, a mistyped command and a dashboard without a terminal. Each case checks
the status, the one line said, and that no traceback and no stray file appear.

Spawns are kept few (each costs about a second of interpreter start-up); the variants of one mistake
go through `main` in this process, which is the same code path after the spawn."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from http_fixtures import LocalServer, metrics_and_version, reply
from payloads import multi_engine_payload
from specwatch.cli import main
from specwatch.commands.options import ExitCode
from specwatch.commands.replay import list_scenarios
from specwatch.recording import read_recording

HERE = Path(__file__).resolve().parent
V0_PAYLOAD = (HERE / "corpus" / "metrics" / "v0_only.prom").read_bytes()
DCGM_PAYLOAD = (HERE / "data" / "dcgm-exporter-L4-idle.prom").read_bytes()
QUIET = ["--no-nvml", "--no-dcgm"]
SECRET = "s3cret-pw"


def spawn(*argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specwatch", *argv], stdout=kwargs.pop("stdout", subprocess.PIPE),
                            stderr=kwargs.pop("stderr", subprocess.PIPE), text=True, **kwargs)


def specwatch(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specwatch", *argv], capture_output=True, text=True, timeout=120,
                          **kwargs)


def run_main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def read_pty(master: int) -> bytes:
    """One read of a pty's master side: b"" once the other end has closed with the process (reading
    then raises OSError on Linux)."""
    try:
        return os.read(master, 65536)
    except OSError:
        return b""


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def wait_for_requests(server: LocalServer, count: int, proc: subprocess.Popen) -> None:
    """Until the command has scraped `count` times: it is then inside its loop, where Ctrl-C lands.
    A bound on rounds, not a timing assertion."""
    for _ in range(600):
        if sum(path.startswith("/metrics") for path, _ in server.requests) >= count:
            return
        assert proc.poll() is None, proc.communicate()
        asyncio.run(asyncio.sleep(0.05))
    raise AssertionError("the command never scraped")


@pytest.fixture(scope="module")
def v0_server():
    with LocalServer(metrics_and_version(lambda: V0_PAYLOAD, "0.8.5")) as server:
        yield server


@pytest.fixture(scope="module")
def two_engine_server():
    payload = multi_engine_payload(2).encode()
    with LocalServer(metrics_and_version(lambda: payload)) as server:
        yield server


# ==================================================================================================
# Ctrl-C
# ==================================================================================================


def test_ctrl_c_ends_check_with_130_and_one_line(v0_server):
    proc = spawn("check", "--url", v0_server.url, "--window", "60", *QUIET)
    wait_for_requests(v0_server, 1, proc)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED == 130
    assert one_line(err) == "specwatch check: interrupted"
    assert out == ""


def test_ctrl_c_ends_record_with_130_and_a_valid_file_and_no_status_line_off_a_terminal(v0_server, tmp_path):
    path = tmp_path / "r.swrec"
    before = len(v0_server.requests)
    proc = spawn("record", "-o", str(path), "--url", v0_server.url, "--interval", "0.2", *QUIET)
    for _ in range(600):
        if sum(p.startswith("/metrics") for p, _ in v0_server.requests[before:]) >= 3:
            break
        assert proc.poll() is None, proc.communicate()
        asyncio.run(asyncio.sleep(0.05))
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    line = one_line(err)  # the summary only: no status line when stderr is not a terminal
    assert line.startswith("specwatch record: interrupted: ") and str(path) in line and "\r" not in err
    recording = read_recording(path)
    assert not recording.warnings and len(recording.snapshots) >= 3
    assert [p.name for p in tmp_path.iterdir()] == ["r.swrec"]


def test_record_shows_a_status_line_on_a_terminal(v0_server, tmp_path):
    master, slave = pty.openpty()
    path = tmp_path / "r.swrec"
    before = len(v0_server.requests)
    proc = spawn("record", "-o", str(path), "--url", v0_server.url, "--interval", "0.2", *QUIET,
                 stderr=slave)
    os.close(slave)
    for _ in range(600):
        if sum(p.startswith("/metrics") for p, _ in v0_server.requests[before:]) >= 3:
            break
        asyncio.run(asyncio.sleep(0.05))
    os.kill(proc.pid, signal.SIGINT)
    proc.communicate(timeout=60)
    shown = b""
    while chunk := read_pty(master):
        shown += chunk
    os.close(master)
    text = shown.decode()
    assert proc.returncode == 130
    assert f"recording {path}: " in text and " readings, " in text and "(Ctrl-C to stop)" in text
    assert "Traceback" not in text


def test_ctrl_c_quits_the_dashboard():
    from specwatch.dashboard.app import SpecwatchApp
    from specwatch.cli import build_parser
    from specwatch.commands.replay import build_demo

    source, monitor = build_demo(list_scenarios()[:1], build_parser().parse_args(["demo"]))

    async def drive() -> bool:
        app = SpecwatchApp(source, monitor, title="t")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("ctrl+c")
            await pilot.pause()
            return app.is_running

    assert asyncio.run(drive()) is False
    # (the status it exits with, 130 for Ctrl-C and 0 for q: test_ctrl_c_in_a_dashboard_exits_130_and_q_exits_0)


# ==================================================================================================
# URLs
# ==================================================================================================


def test_a_bad_url_is_one_usage_line(tmp_path):
    r = specwatch("check", "--url", "http://localhost:99999", *QUIET)
    assert r.returncode == ExitCode.USAGE
    assert one_line(r.stderr).startswith("specwatch check: argument --url: server URL 'http://localhost:99999' "
                                         "has a bad port '99999'")
    assert not list(tmp_path.iterdir())


def test_every_url_flag_reads_urls_the_same_way(tmp_path, capsys):
    for argv, words in [
        (["record", "-o", str(tmp_path / "r.swrec"), "--url", "ftp://host"], "is not an http(s) URL"),
        (["check", "--url", "localhost:abc"], "has a bad port 'abc'"),
        (["check", "--url", "http:/host"], "did you mean 'http://host'?"),
        (["export", "--url", "http://user:pw@host:0"], "'http://***@host:0' has a bad port '0'"),
        (["watch", "--dcgm", "host:99999"], "dcgm-exporter URL 'host:99999' has a bad port"),
        (["fleet", "--prometheus", "http:/prom:9090"], "did you mean 'http://prom:9090'?"),
        (["sweep", "--baseline", "host:1", "--speculative", "host:-1"], "server URL 'host:-1' has a bad port"),
    ]:
        assert run_main(argv) == ExitCode.USAGE
        err = capsys.readouterr().err
        assert words in one_line(err), err
        assert "pw@" not in err
    assert not list(tmp_path.iterdir())


def test_dcgm_takes_host_port_like_url(v0_server):
    with LocalServer(reply(200, DCGM_PAYLOAD)) as dcgm:
        host_port = dcgm.url.removeprefix("http://")
        r = specwatch("check", "--url", v0_server.url.removeprefix("http://"), "--dcgm", host_port, "--no-nvml",
                      "--window", "0.2", "--json")
    report = json.loads(r.stdout)
    assert [s["state"] for s in report["sources"] if s["name"].startswith("dcgm")] == ["ok"]
    assert [g["name"] for g in report["gpus"]] == ["NVIDIA L4"]
    assert dcgm.requests and dcgm.requests[0][0] == "/metrics"


# ==================================================================================================
# pipes
# ==================================================================================================


def closed_pipe_run(*argv: str) -> tuple[int, str]:
    """The command with its stdout a pipe whose reader has already gone (as `| head -1` leaves it)."""
    proc = spawn(*argv)
    reader = subprocess.Popen(["true"], stdin=proc.stdout)
    reader.wait(timeout=30)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    return proc.returncode, err


def test_a_closed_pipe_ends_check_quietly_with_its_own_status(two_engine_server):
    status, err = closed_pipe_run("check", "--url", two_engine_server.url, "--window", "0.3", "--json", *QUIET)
    assert status == ExitCode.NOT_ENOUGH_DATA  # no requests running: the verdict's own status, not 1
    assert err == ""


def test_a_closed_pipe_ends_a_headless_replay_quietly_and_blames_no_file():
    scenario = str(list_scenarios()[0].path)
    status, err = closed_pipe_run("replay", scenario, "--headless", "--json")
    assert status == ExitCode.OK
    assert err == ""


# ==================================================================================================
# several targets, per-engine figures
# ==================================================================================================


def test_check_reads_several_targets_and_reports_each(v0_server, two_engine_server):
    r = specwatch("check", "--url", v0_server.url, "--url", two_engine_server.url, "--window", "0.3", "--json",
                  *QUIET)
    assert "Traceback" not in r.stderr
    document = json.loads(r.stdout)
    assert document["schema"] == "specwatch.check/1"
    assert document["target"] == v0_server.url  # the first target's fields stay at the top
    assert [t["target"] for t in document["targets"]] == [v0_server.url, two_engine_server.url]
    assert document["targets"][0]["verdict"] == document["verdict"]
    assert len(document["targets"][1]["engine"]["per_engine"]) == 2
    # the most urgent status of the two: the V0 payload never moves while 4 requests run, so its
    # engine is stalled, which is no usable reading
    assert r.returncode == ExitCode.UNREADABLE
    assert "engine_stalled" in document["targets"][0]["verdict"]["flags"]


def test_check_summary_shows_each_engine_beside_the_total(two_engine_server, capsys):
    status = run_main(["check", "--url", two_engine_server.url, "--window", "0.2", *QUIET])
    out = capsys.readouterr().out
    assert status == ExitCode.NOT_ENOUGH_DATA
    assert out.count("    engine tiny-llama/") == 2


# ==================================================================================================
# tokens and credentials
# ==================================================================================================


def _needs_token(good: str):
    def on_get(h):
        if h.headers.get("Authorization") != f"Bearer {good}":
            reply(401, b"unauthorised")(h)
        else:
            metrics_and_version(lambda: V0_PAYLOAD)(h)

    return on_get


def test_auth_messages_say_what_happened(tmp_path, capsys, monkeypatch):
    with LocalServer(_needs_token("right")) as server:
        env = {k: v for k, v in os.environ.items() if k != "SPECWATCH_TOKEN"}
        r = specwatch("check", "--url", server.url, "--window", "0.1", "--token-env", "SPECWATCH_NOT_SET", *QUIET,
                      env=env)
        assert r.returncode == ExitCode.UNREADABLE
        assert one_line(r.stderr) == ("specwatch check: --token-env names SPECWATCH_NOT_SET, which is not set in the "
                                      "environment (export it, or use --token-file PATH)")
        assert not server.requests  # nothing was tried without the token the operator named
        monkeypatch.delenv("SPECWATCH_TOKEN", raising=False)
        assert run_main(["check", "--url", server.url, "--window", "0.1", "--json", *QUIET]) == ExitCode.UNREADABLE
        assert "no token was sent" in json.loads(capsys.readouterr().out)["message"]
        monkeypatch.setenv("SPECWATCH_TOKEN", "wrong")
        assert run_main(["check", "--url", server.url, "--window", "0.1", "--json", *QUIET]) == ExitCode.UNREADABLE
        message = json.loads(capsys.readouterr().out)["message"]
        assert "the bearer token was sent and rejected" in message and "wrong" not in message


def test_fleet_answers_a_401_with_auth_not_the_base_url():
    from specwatch.collectors.prometheus import PrometheusClient

    with LocalServer(reply(401, b"unauthorised", "text/plain")) as prom:
        async def query(token):
            client = PrometheusClient(prom.url, token=token)
            try:
                return await client.query("up")
            finally:
                await client.aclose()

        no_token, rejected = asyncio.run(query(None)), asyncio.run(query("t"))
    assert no_token.state == "http_401" and "no token was sent" in no_token.message
    assert rejected.state == "http_401" and "sent and rejected" in rejected.message
    assert "base URL" not in no_token.message + rejected.message


def test_url_credentials_appear_nowhere(v0_server, tmp_path):
    with_password = v0_server.url.replace("http://", f"http://ops:{SECRET}@")
    r = specwatch("check", "--url", with_password, "--window", "0.2", "--json", *QUIET)
    assert SECRET not in r.stdout + r.stderr
    assert json.loads(r.stdout)["target"] == v0_server.url.replace("http://", "http://***@")
    # and the credentials were really sent: the server saw basic auth
    assert any(headers.get("Authorization", "").startswith("Basic ") for _, headers in v0_server.requests)
    path = tmp_path / "r.swrec"
    assert run_main(["record", "-o", str(path), "--url", with_password, "--duration", "0.3", "--interval", "0.1",
                     *QUIET]) == ExitCode.OK
    import gzip

    raw = path.read_bytes()
    assert SECRET.encode() not in raw and SECRET.encode() not in gzip.decompress(raw)
    assert read_recording(path).header.targets == (v0_server.url.replace("http://", "http://***@"),)


def test_exporter_labels_carry_no_credentials(v0_server):
    from specwatch.collectors.vllm import VllmSource

    async def scrape():
        source = VllmSource([v0_server.url.replace("http://", f"http://ops:{SECRET}@")])
        try:
            return await source.scrape()
        finally:
            await source.aclose()

    (sample,) = asyncio.run(scrape())
    assert sample.ok and SECRET not in sample.url and "***@" in sample.url


# ==================================================================================================
# --method, an old engine
# ==================================================================================================


def test_method_is_a_closed_set_with_the_usual_aliases(v0_server, capsys):
    r = specwatch("check", "--method", "ngramm", *QUIET)
    assert r.returncode == ExitCode.USAGE
    line = one_line(r.stderr)
    assert line.startswith("specwatch check: argument --method: unknown speculation method 'ngramm'; known: ")
    assert all(name in line for name in ("ngram", "eagle3", "draft_model", "mtp", "suffix", "medusa"))
    for spelling, canonical in (("n-gram", "ngram"), ("EAGLE-3", "eagle3"), ("draft_model", "draft"),
                                ("mtp", "mtp"), ("suffix", "suffix"), ("medusa", "medusa")):
        # the fixed V0 payload is a frozen engine (requests running, counters still): exit 3, and the
        # method is still reported as the operator spelled it, canonically
        assert run_main(["check", "--url", v0_server.url, "--window", "0.1", "--json", "--method", spelling,
                         *QUIET]) == ExitCode.UNREADABLE
        assert json.loads(capsys.readouterr().out)["speculation"]["method"] == canonical


def test_a_v0_payload_gets_k_from_its_own_counters(v0_server):
    # v0_only.prom: 2000 draft tokens over 1740 − 1240 = 500 drafts is k = 4, and L = 1 + 1240/500
    r = specwatch("check", "--url", v0_server.url, "--window", "0.2", *QUIET)
    assert "k=4" in r.stdout and "k=None" not in r.stdout and "acceptance length 3.48" in r.stdout
    assert "Traceback" not in r.stderr


# ==================================================================================================
# sweep --from-bench
# ==================================================================================================


def _bench(folder: Path, spec: bool, model: str = "meta-llama/Llama-3.1-8B") -> Path:
    folder.mkdir()
    for c, tps in ((1, 100.0), (4, 350.0)):
        data = {"date": "20250101-120000", "model_id": model, "max_concurrency": c, "completed": 100, "failed": 0,
                "output_throughput": tps * (1.5 if spec else 1.0), "median_tpot_ms": 10.0, "duration": 50.0}
        if spec:
            data |= {"spec_decode_acceptance_length": 2.5, "spec_decode_num_drafts": 1000,
                     "spec_decode_draft_tokens": 4000}
        (folder / f"c{c}.json").write_text(json.dumps(data))
    return folder


def test_sweep_from_bench_refuses_inputs_that_flip_or_void_the_answer(tmp_path, capsys):
    base, spec = _bench(tmp_path / "base", False), _bench(tmp_path / "spec", True)
    other = _bench(tmp_path / "other", True, model="Qwen/Qwen2.5-7B")
    out = tmp_path / "out"
    r = specwatch("sweep", "--from-bench", str(spec), str(base), "-o", str(out))
    assert r.returncode == ExitCode.USAGE
    assert "the folders look swapped" in one_line(r.stderr)
    for argv, status, words in [
        ([str(base), str(base)], ExitCode.USAGE, "the same folder twice"),
        ([str(base), str(other)], ExitCode.USAGE, "different models"),
        ([str(base), str(tmp_path / "nope")], ExitCode.UNREADABLE, "nope: not a folder"),
        ([str(base), str(base / ".")], ExitCode.USAGE, "the same folder twice"),
    ]:
        assert run_main(["sweep", "--from-bench", *argv, "-o", str(out)]) == status
        assert words in one_line(capsys.readouterr().err)
    assert not out.exists()
    cwd_before = set(Path.cwd().iterdir())
    assert run_main(["sweep", "--from-bench", str(base), str(tmp_path / "nope")]) == ExitCode.UNREADABLE
    assert set(Path.cwd().iterdir()) == cwd_before  # no default report folder either
    assert run_main(["sweep", "--from-bench", str(base), str(spec), "-o", str(out), "--quiet"]) == ExitCode.OK


# ==================================================================================================
# record -o -, a mistyped command, a dashboard without a terminal
# ==================================================================================================


def test_record_refuses_dash_as_output(tmp_path):
    r = specwatch("record", "-o", "-", *QUIET, cwd=tmp_path)
    assert r.returncode == ExitCode.USAGE
    assert one_line(r.stderr).startswith("specwatch record: -o - is not supported")
    assert not list(tmp_path.iterdir())


def test_a_mistyped_command_suggests_the_close_one(capsys):
    r = specwatch("chek", "--url", "localhost:8000")
    assert r.returncode == ExitCode.USAGE
    assert one_line(r.stderr) == "specwatch: unknown command 'chek'; did you mean check? (see specwatch --help)"
    assert run_main(["recrod"]) == ExitCode.USAGE
    assert "did you mean record?" in capsys.readouterr().err
    assert run_main(["zzz"]) == ExitCode.USAGE
    assert "the commands are watch, check" in capsys.readouterr().err


def test_the_dashboards_refuse_a_stdout_that_is_not_a_terminal(tmp_path, capsys):
    scenario = str(list_scenarios()[0].path)
    r = specwatch("demo")
    assert r.returncode == ExitCode.USAGE and r.stdout == ""
    line = one_line(r.stderr)
    assert line.startswith("specwatch demo: the dashboard needs a terminal")
    assert "`specwatch demo --headless`" in line and "check" not in line
    # each dashboard names its own plain form
    for argv, plain in ((["watch", *QUIET, "--url", "127.0.0.1:9"], "`specwatch check`"),
                        (["replay", scenario], "`specwatch replay --headless FILE`"),
                        (["fleet"], "`specwatch fleet --json`")):
        assert run_main(argv) == ExitCode.USAGE
        line = one_line(capsys.readouterr().err)
        assert plain in line, line
        assert ("`specwatch record -o FILE`" in line) == (argv[0] == "watch"), line
        assert ("`specwatch check`" in line) == (argv[0] == "watch"), line


# ==================================================================================================
# a terminal: TERM=dumb, NO_COLOR, an ASCII-only stdout, Ctrl-C and q in a dashboard
# ==================================================================================================


def on_a_terminal(argv: list[str], env: dict[str, str], keys: bytes = b"", until: bytes = b"",
                  timeout_s: float = 60.0) -> tuple[int, bytes]:
    """`python -m specwatch ARGV` with a pty as its terminal: everything it wrote there, and its status.
    With `keys`, they are typed once `until` has appeared on the screen (the dashboard is up)."""
    import select
    import time

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "specwatch", *argv], stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "COLUMNS": "100", "LINES": "30", **env})
    os.close(slave)
    shown, typed = b"", not keys
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                chunk = read_pty(master)
                if not chunk:
                    break
                shown += chunk
            if not typed and until in shown:
                os.write(master, keys)
                typed = True
            if proc.poll() is not None and not ready:
                break
        return proc.wait(timeout=30), shown
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


PREDICT = ["predict", "--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "8", "--k", "4",
           "--acceptance-length", "2.5"]


@pytest.mark.parametrize("env", [{"TERM": "dumb"}, {"TERM": "xterm-256color", "NO_COLOR": "1"}])
def test_plain_output_on_a_dumb_or_colourless_terminal_has_no_escapes(v0_server, env):
    status, shown = on_a_terminal(PREDICT, env)
    assert status == ExitCode.OK and b"expected speedup" in shown and b"\x1b" not in shown
    status, shown = on_a_terminal(["check", "--url", v0_server.url, "--window", "0.2", *QUIET], env)
    assert b"specwatch check" in shown and b"\x1b" not in shown and b"Traceback" not in shown


def test_a_dashboard_refuses_term_dumb_and_names_its_plain_form():
    status, shown = on_a_terminal(["demo"], {"TERM": "dumb"})
    assert status == ExitCode.USAGE and b"\x1b" not in shown
    text = shown.decode()
    assert "the dashboard needs a terminal that can draw, and TERM is dumb" in one_line(text)
    assert "`specwatch demo --headless`" in text


def test_an_ascii_only_stdout_gets_ascii_forms_not_a_traceback(v0_server):
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    r = specwatch(*PREDICT, env=env)
    assert r.returncode == ExitCode.OK and "Traceback" not in r.stderr, r.stderr
    assert "expected speedup 1.93x at batch 8" in r.stdout  # "×" read as "x"
    r = specwatch("check", "--url", v0_server.url, "--window", "0.2", *QUIET, env=env)
    usual = specwatch("check", "--url", v0_server.url, "--window", "0.2", *QUIET)
    assert r.returncode == usual.returncode and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith("specwatch check") and r.stdout.isascii()
    r = specwatch("replay", "--headless", str(list_scenarios()[0].path), env=env)
    assert r.returncode == ExitCode.OK and "Traceback" not in r.stderr and r.stdout.isascii()


@pytest.mark.parametrize("argv, key, status", [
    (["demo"], b"\x03", ExitCode.INTERRUPTED), (["demo"], b"q", ExitCode.OK),
    (["fleet", "--prometheus", "http://127.0.0.1:9"], b"\x03", ExitCode.INTERRUPTED)])
def test_ctrl_c_in_a_dashboard_exits_130_and_q_exits_0(argv, key, status):
    seen = b"REPLAY" if argv[0] == "demo" else b"connection refused"  # the screen is drawn
    code, shown = on_a_terminal(argv, {"TERM": "xterm-256color"}, keys=key, until=seen)
    assert seen in shown, shown[-2000:]
    assert b"Traceback" not in shown
    assert code == status


# ==================================================================================================
# sweep against servers that cannot be read
# ==================================================================================================


def test_sweep_against_unreachable_servers_exits_3_and_writes_nothing(tmp_path):
    from http_fixtures import refused_port

    port = refused_port()
    r = specwatch("sweep", "--baseline", f"127.0.0.1:{port}", "--speculative", f"127.0.0.1:{port}",
                  "--tiers", "1", "--requests", "2", "--quiet", cwd=tmp_path,
                  env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == ExitCode.UNREADABLE == 3
    line = one_line(r.stderr)
    assert "connection refused" in line and "nothing was measured and nothing written" in line
    assert list(tmp_path.iterdir()) == []  # no report folder, empty or not


def test_ctrl_c_ends_export_with_130(v0_server):
    proc = spawn("export", "--url", v0_server.url, "--listen", "127.0.0.1:0", "--interval", "0.2", *QUIET)
    before = len(v0_server.requests)
    wait_for_requests(v0_server, before + 2, proc)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err and "specwatch export: serving http://127.0.0.1:" in err
