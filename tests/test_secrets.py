"""No secret on the screen: a password in a URL the operator typed (well-formed or mistyped) and a
bearer token appear in no usage error, suggestion, message, JSON, recording or exporter label; a
mistyped scheme is a usage error; and --url-file / --token-file keep credentials out of the process
list. The real command runs in a subprocess for each mistake on check and a few other commands; the
rest of the grid goes through `main` in this process (the same code after the spawn)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from http_fixtures import LocalServer, metrics_and_version, refused_port, reply
from specwatch.commands.options import ExitCode
from specwatch.outputs.export import public_url
from specwatch.recording import read_recording
from specwatch.telemetry.urls import redact, split_url
from test_export import ExportProcess, samples, wait_for
from test_operator import QUIET, V0_PAYLOAD, one_line, run_main, specwatch

SECRET = "TOPSECRET-4f9c"
TOKEN = "tok-SECRET-81d2"

# every mistyped form the issue names, and a bad port with credentials and no scheme
MALFORMED = [
    f"http//user:{SECRET}@127.0.0.1:8000",  # colon missing: not a host named "http"
    f"http:/user:{SECRET}@127.0.0.1:8000",
    f"http:user:{SECRET}@127.0.0.1:8000",
    f"htp://user:{SECRET}@127.0.0.1:8000",
    f"https:///user:{SECRET}@127.0.0.1:8000",
    f"https//user:{SECRET}@127.0.0.1:8000",
    f"user:{SECRET}@127.0.0.1:99999",
    f"user:{SECRET}@127.0.0.1:abc",
    f"http://user:{SECRET}@127.0.0.1:0",
]


def _argv(command: str, url: str, tmp_path: Path) -> list[str]:
    """`command` with `url` on its URL flag, and whatever else it needs to get as far as reading it."""
    return {
        "check": ["check", "--url", url, "--window", "0.1", *QUIET],
        "watch": ["watch", "--url", url, *QUIET],
        "record": ["record", "-o", str(tmp_path / "r.swrec"), "--url", url, "--duration", "0.1", *QUIET],
        "export": ["export", "--url", url, "--listen", "127.0.0.1:0", *QUIET],
        "tune": ["tune", "--url", url, *QUIET],
        "fleet": ["fleet", "--url", url, "--json"],
        "fleet-prometheus": ["fleet", "--prometheus", url, "--json"],
        "sweep": ["sweep", "--baseline", url, "--speculative", "127.0.0.1:1"],
        "dcgm": ["check", "--dcgm", url, "--no-nvml"],
    }[command]


@pytest.fixture(scope="module")
def v0_server():
    with LocalServer(metrics_and_version(lambda: V0_PAYLOAD, "0.8.5")) as server:
        yield server


def _with_password(url: str) -> str:
    return url.replace("http://", f"http://ops:{SECRET}@")


# ==================================================================================================
# the one redaction
# ==================================================================================================


@pytest.mark.parametrize("text, shown", [
    ("http://u:pw@h:1/metrics", "http://***@h:1/metrics"),
    ("http://u@h:1", "http://***@h:1"),
    ("http//u:pw@h", "http//***@h"),
    ("http:/u:pw@h", "http:/***@h"),
    ("http:u:pw@h", "http:***@h"),
    ("https:///u:pw@h", "https:///***@h"),
    ("u:pw@h:99999", "***@h:99999"),
    ("'u:pw@h:abc' has a bad port", "'***@h:abc' has a bad port"),
    ('target="http://u:pw@h"', 'target="http://***@h"'),
    ("vLLM at http://u:p/w@h: refused", "vLLM at http://***@h: refused"),  # a raw / in the password
    ("u:p@ss@h", "***@h"),  # a raw @ in it
    ("http://h/metrics?key=pw&x=1", "http://h/metrics?key=***&x=***"),
    ("a name@host and /a/file@2.swrec", "a name@host and /a/file@2.swrec"),  # no password: left alone
])
def test_redact_hides_credentials_of_well_formed_and_mistyped_urls(text, shown):
    assert redact(text) == shown
    assert redact(shown) == shown  # idempotent: what was redacted once goes through again unchanged


@pytest.mark.parametrize("url", MALFORMED)
def test_every_mistyped_url_is_a_value_error_that_never_repeats_the_password(url):
    with pytest.raises(ValueError) as caught:
        split_url(url, "vLLM URL")
    assert SECRET not in str(caught.value) and "\n" not in str(caught.value)
    assert "***@127.0.0.1" in str(caught.value)


@pytest.mark.parametrize("url, fixed", [
    ("http//h:8000", "http://h:8000"), ("https//h:8000", "https://h:8000"), ("htp//h", "http://h"),
    ("http:/h:8000", "http://h:8000"), ("https:///h:8000", "https://h:8000"),
])
def test_a_mistyped_scheme_gets_a_suggestion(url, fixed):
    with pytest.raises(ValueError, match=f"did you mean '{fixed}'"):
        split_url(url)


@pytest.mark.parametrize("url", ["localhost:8000", "127.0.0.1:8000/metrics", "user:pw@localhost:8000",
                                 "http://localhost:8000", "https://h:8443/v1/metrics"])
def test_what_works_today_still_works(url):
    base, metrics, shown = split_url(url)
    assert base.startswith(("http://", "https://")) and metrics.endswith("/metrics") and "pw" not in shown


def test_public_url_redacts_whatever_urlsplit_makes_of_a_mistyped_url():
    assert SECRET not in public_url(f"http://http//user:{SECRET}@127.0.0.1:8000")
    assert public_url("http://u:p@h:1/metrics?k=v") == "http://h:1/metrics"


def test_connection_messages_are_redacted_even_when_given_the_requested_url():
    import httpx

    from specwatch.collectors.vllm import describe_http_error

    url = f"http://ops:{SECRET}@127.0.0.1:1"
    state, message = describe_http_error(httpx.ConnectError(f"cannot reach {url}/metrics"), url)
    assert SECRET not in message and "http://***@127.0.0.1:1" in message


# ==================================================================================================
# usage errors: one line, exit 64, no password
# ==================================================================================================


@pytest.mark.parametrize("url", MALFORMED)
def test_check_refuses_every_mistyped_url_without_repeating_the_password(url, tmp_path):
    r = specwatch(*_argv("check", url, tmp_path))
    assert r.returncode == ExitCode.USAGE, r.stdout + r.stderr
    line = one_line(r.stderr)
    assert line.startswith("specwatch check: argument --url: server URL '")
    assert SECRET not in r.stdout + r.stderr and r.stdout == ""


@pytest.mark.parametrize("command", ["export", "record", "sweep", "fleet"])
@pytest.mark.parametrize("url", [MALFORMED[0], MALFORMED[-2]])  # http//…, and a bad port without a scheme
def test_other_commands_refuse_a_mistyped_url_without_repeating_the_password(command, url, tmp_path):
    r = specwatch(*_argv(command, url, tmp_path))
    assert r.returncode == ExitCode.USAGE, r.stdout + r.stderr
    assert one_line(r.stderr).startswith(f"specwatch {command.split('-')[0]}: argument --")
    assert SECRET not in r.stdout + r.stderr
    assert not list(tmp_path.iterdir())  # record wrote nothing


def test_every_url_flag_of_every_command_refuses_every_mistyped_url(tmp_path, capsys):
    for command in ("check", "watch", "record", "export", "tune", "fleet", "fleet-prometheus", "sweep", "dcgm"):
        for url in MALFORMED:
            assert run_main(_argv(command, url, tmp_path)) == ExitCode.USAGE, (command, url)
            captured = capsys.readouterr()
            assert SECRET not in captured.out + captured.err, (command, url, captured.err)
            assert "***@" in one_line(captured.err), (command, url)
    assert not list(tmp_path.iterdir())


def test_an_unrecognized_argument_and_a_mistyped_command_are_echoed_redacted(capsys):
    assert run_main(["check", f"http://ops:{SECRET}@h:1", *QUIET]) == ExitCode.USAGE
    assert run_main(["chek", "--url", f"http://ops:{SECRET}@h:1"]) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    assert "unrecognized arguments: http://***@h:1" in captured.err


# ==================================================================================================
# a well-formed URL with credentials: used, shown nowhere
# ==================================================================================================


def test_check_text_and_json_show_no_password(v0_server):
    url = _with_password(v0_server.url)
    text = specwatch("check", "--url", url, "--window", "0.2", *QUIET)
    as_json = specwatch("check", "--url", url, "--window", "0.2", "--json", *QUIET)
    for r in (text, as_json):
        assert "Traceback" not in r.stderr and SECRET not in r.stdout + r.stderr
    assert v0_server.url.replace("http://", "http://***@") in text.stdout
    assert json.loads(as_json.stdout)["target"] == v0_server.url.replace("http://", "http://***@")
    assert any(h.get("Authorization", "").startswith("Basic ") for _, h in v0_server.requests)


def test_a_connection_error_shows_no_password(tmp_path):
    url = f"http://ops:{SECRET}@127.0.0.1:{refused_port()}"
    r = specwatch("check", "--url", url, "--window", "0.1", "--json", *QUIET)
    assert r.returncode == ExitCode.UNREADABLE
    assert SECRET not in r.stdout + r.stderr
    assert "connection refused" in json.loads(r.stdout)["message"]


def test_a_recording_holds_no_password(v0_server, tmp_path):
    path = tmp_path / "r.swrec"
    r = specwatch("record", "-o", str(path), "--url", _with_password(v0_server.url), "--duration", "0.3",
                  "--interval", "0.1", *QUIET)
    assert r.returncode == ExitCode.OK, r.stderr
    raw = path.read_bytes()
    assert SECRET.encode() not in raw and SECRET.encode() not in gzip.decompress(raw)
    assert SECRET not in r.stdout + r.stderr
    assert read_recording(path).header.targets == (v0_server.url.replace("http://", "http://***@"),)


def test_the_exporter_serves_no_password(tmp_path):
    with LocalServer(metrics_and_version(lambda: V0_PAYLOAD, "0.8.5")) as vllm:
        with ExportProcess(["--url", _with_password(vllm.url), "--no-nvml", "--no-dcgm", "--listen", "127.0.0.1:0"],
                           tmp_path / "agent.log") as agent:
            text = wait_for(agent.metrics_text, lambda t: "specwatch_target_up{" in t, "a target_up series")
        log = (tmp_path / "agent.log").read_text(errors="replace")
    assert SECRET not in text and SECRET not in log
    assert {labels["target"] for labels, _ in samples(text)["specwatch_target_up"]} == {vllm.url}


# ==================================================================================================
# credentials off the command line: --url-file and --token-file
# ==================================================================================================


def _secret_file(path: Path, text: str, mode: int = 0o600) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def test_url_file_urls_are_used_as_if_given_with_url(v0_server, tmp_path):
    listed = _secret_file(tmp_path / "urls", f"# the node\n\n{_with_password(v0_server.url)}  # with a password\n")
    before = len(v0_server.requests)
    r = specwatch("check", "--url-file", listed, "--window", "0.2", "--json", *QUIET)
    assert "Traceback" not in r.stderr and r.stderr == ""  # owner-only: no warning
    assert SECRET not in r.stdout
    assert json.loads(r.stdout)["target"] == v0_server.url.replace("http://", "http://***@")
    assert any(h.get("Authorization", "").startswith("Basic ") for _, h in v0_server.requests[before:])


def test_url_file_joins_url_and_works_for_record_and_fleet(v0_server, tmp_path, capsys):
    other = "http://127.0.0.1:1"
    listed = _secret_file(tmp_path / "urls", _with_password(v0_server.url) + "\n")
    status = run_main(["check", "--url", other, "--url-file", listed, "--window", "0.2", "--json", *QUIET])
    document = json.loads(capsys.readouterr().out)
    assert status == ExitCode.UNREADABLE  # the first target is down
    assert [t["target"] for t in document["targets"]] == [other, v0_server.url.replace("http://", "http://***@")]
    path = tmp_path / "r.swrec"
    assert run_main(["record", "-o", str(path), "--url-file", listed, "--duration", "0.2", "--interval", "0.1",
                     *QUIET]) == ExitCode.OK
    assert SECRET.encode() not in gzip.decompress(path.read_bytes())
    run_main(["fleet", "--url-file", listed, "--json", "--window", "0.2"])
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    assert len(json.loads(captured.out)["rows"]) == 1


def test_url_file_mistakes(tmp_path, capsys):
    bad = _secret_file(tmp_path / "bad", f"# ok\nhttp://127.0.0.1:1\nhttp//user:{SECRET}@127.0.0.1:8000\n")
    assert run_main(["check", "--url-file", bad, *QUIET]) == ExitCode.USAGE
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"specwatch check: --url-file {bad}, line 3: server URL 'http//***@127.0.0.1:8000' "
                           "is not a URL: did you mean 'http://***@127.0.0.1:8000'?")
    assert SECRET not in line
    empty = _secret_file(tmp_path / "empty", "# nothing yet\n\n")
    assert run_main(["check", "--url-file", empty, *QUIET]) == ExitCode.UNREADABLE
    assert one_line(capsys.readouterr().err) == f"specwatch check: the URL file {empty} holds no URL"
    assert run_main(["check", "--url-file", str(tmp_path / "missing"), *QUIET]) == ExitCode.UNREADABLE
    assert "cannot read the URL file" in one_line(capsys.readouterr().err)


def test_a_url_file_with_credentials_readable_by_others_is_warned_about(v0_server, tmp_path, capsys):
    listed = _secret_file(tmp_path / "urls", _with_password(v0_server.url) + "\n", mode=0o644)
    run_main(["check", "--url-file", listed, "--window", "0.1", "--json", *QUIET])
    err = capsys.readouterr().err
    assert one_line(err) == f"specwatch check: warning: the URL file {listed} is readable by other users " \
                            f"(chmod 600 {listed})"
    plain = _secret_file(tmp_path / "plain", v0_server.url + "\n", mode=0o644)  # no credentials: no warning
    run_main(["check", "--url-file", plain, "--window", "0.1", "--json", *QUIET])
    assert capsys.readouterr().err == ""


def _needs_token(h):
    if h.headers.get("Authorization") != f"Bearer {TOKEN}":
        reply(401, b"unauthorised")(h)
    else:
        metrics_and_version(lambda: V0_PAYLOAD, "0.8.5")(h)


def test_token_file_reaches_the_server_as_a_bearer_token_and_nowhere_else(tmp_path):
    token_file = _secret_file(tmp_path / "token", TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if k != "SPECWATCH_TOKEN"}
    with LocalServer(_needs_token) as server:
        r = specwatch("check", "--url", server.url, "--token-file", token_file, "--window", "0.2", "--json", *QUIET,
                      env=env)
        seen = [h.get("Authorization") for _, h in server.requests]
    assert r.stderr == "" and TOKEN not in r.stdout
    assert json.loads(r.stdout)["state"] == "ok"
    assert seen and all(a == f"Bearer {TOKEN}" for a in seen)


def test_a_token_file_readable_by_others_is_warned_about(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECWATCH_TOKEN", raising=False)
    token_file = _secret_file(tmp_path / "token", TOKEN + "\n", mode=0o644)
    with LocalServer(_needs_token) as server:
        run_main(["check", "--url", server.url, "--token-file", token_file, "--window", "0.1", "--json", *QUIET])
    captured = capsys.readouterr()
    assert one_line(captured.err) == (f"specwatch check: warning: the token file {token_file} is readable by "
                                      f"other users (chmod 600 {token_file})")
    assert TOKEN not in captured.out + captured.err


def test_the_readme_says_why_credentials_stay_off_the_command_line():
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "process list" in readme and "--url-file" in readme and "--token-file" in readme
