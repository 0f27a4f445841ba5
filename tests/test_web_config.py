"""The export agent's lock: `--web-config-file` in exporter-toolkit's format, with real clients.

The file is checked on its own (every refusal names the key and never the secret), then a real agent
process is locked and reached by curl (TLS, basic auth, client certificates, plain HTTP refused, the
file re-read while it runs) and scraped by a real Prometheus through tls_config and basic_auth.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import ssl
import subprocess
import time
from pathlib import Path

import bcrypt
import httpx
import pytest

from specwatch.outputs.agent_http import WebGate
from specwatch.outputs.web_config import BasicAuth, WebConfigError, load_web_config
from test_export import ExportProcess, wait_for
from tls_fixtures import Pki, make_pki

REPO = Path(__file__).resolve().parent.parent
RECORDING = REPO / "specwatch" / "data" / "h100-70b-ngram.swrec"
PASSWORD = "correct-horse-battery-staple"
NEW_PASSWORD = "a-new-password-after-rotation"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: the tests' only speed-up
NEW_HASH = bcrypt.hashpw(NEW_PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _tls_section(pki: Pki, auth: str = "NoClientCert", extra: str = "") -> str:
    lines = [f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
             f"  client_auth_type: {auth}\n"]
    if auth != "NoClientCert":
        lines.append(f"  client_ca_file: {pki.ca}\n")
    return "".join(lines) + extra


def _secrets(pki: Pki) -> list[str]:
    key_body = pki.server_key.read_text().splitlines()[1]  # a line of the private key's base64
    return [PASSWORD, NEW_PASSWORD, HASH, NEW_HASH, key_body]


# ---- the file ------------------------------------------------------------------------------------


def test_an_empty_file_is_no_lock(tmp_path: Path) -> None:
    config = load_web_config(_write(tmp_path / "web.yml", ""))
    assert config.tls is None and config.users == {}


def test_relative_paths_are_read_from_the_files_own_directory(tmp_path: Path, pki: Pki) -> None:
    for name in ("server_cert", "server_key"):
        shutil.copy(getattr(pki, name), tmp_path / Path(getattr(pki, name)).name)
    config = load_web_config(_write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: agent.crt\n"
                                                            "  key_file: agent.key\n"))
    assert config.tls is not None and config.client_auth_type == "NoClientCert"


def test_inline_cert_and_key_load(tmp_path: Path, pki: Pki) -> None:
    import yaml

    text = yaml.safe_dump({"tls_server_config": {"cert": pki.server_cert.read_text(), "key": pki.server_key.read_text()}})
    assert load_web_config(_write(tmp_path / "web.yml", text)).tls is not None
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("specwatch-tls-*"))  # the temp PEM is gone


def bad_files(pki: Pki) -> list[tuple[str, str]]:
    """(file text, what the message must say): each a file an operator could write."""
    cert, key, ca = pki.server_cert, pki.server_key, pki.ca
    return [
        ("tls_server_config: [1, 2]\n", "tls_server_config: expected a mapping"),
        ("tls_config:\n  cert_file: x\n", "unknown key 'tls_config'"),
        (f"tls_server_config:\n  cert_file: {cert}\n", "needs cert_file (or cert) and key_file (or key) together"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {ca}\n", "the certificate and key do not load"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: /nonexistent/agent.key\n",
         "key_file: /nonexistent/agent.key is not a readable file"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: RequireAnyClientCert\n",
         "accepts a client certificate without verifying it"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: RequireAndVerifyClientCert\n",
         "needs client_ca_file"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: Mutual\n",
         "client_auth_type: unknown 'Mutual'"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS14\n",
         "min_version: unknown 'TLS14'"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
         "cipher_suites: not supported"),
        (f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_allowed_sans: [prometheus]\n",
         "needs client_auth_type RequireAndVerifyClientCert"),
        # a password written where its hash belongs: the message names the user, not what was written
        (f"basic_auth_users:\n  prometheus: {PASSWORD}\n", "basic_auth_users.prometheus: not a bcrypt hash"),
        (f"basic_auth_users:\n  prometheus: {HASH[:-1]}\n", "basic_auth_users.prometheus: not a bcrypt hash"),
        (f"basic_auth_users:\n  prometheus: {HASH}\n  broken: [{PASSWORD}\n", "not valid YAML at line"),
        ("http_server_config:\n  http2: true\n", "http2: not supported"),
        ("http_server_config:\n  headers:\n    Content-Type: text/html\n", "set by the server itself"),
    ]


def test_each_unusable_file_is_refused_naming_the_key_and_never_the_secret(tmp_path: Path, pki: Pki) -> None:
    for text, expected in bad_files(pki):
        path = _write(tmp_path / "web.yml", text)
        with pytest.raises(WebConfigError) as caught:
            load_web_config(path)
        message = str(caught.value)
        assert expected in message, (text, message)
        assert str(path) in message
        for secret in _secrets(pki):
            assert secret not in message, (text, message)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read it"):
        load_web_config(tmp_path / "absent.yml")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_checks_the_pair_and_costs_a_wrong_user_what_a_wrong_password_costs(monkeypatch) -> None:
    users = {"prometheus": HASH.encode()}
    auth = BasicAuth()
    assert auth.check(users, _basic("prometheus", PASSWORD)) == "prometheus"
    assert auth.check(users, _basic("prometheus", PASSWORD)) == "prometheus"  # remembered
    for header in (None, "", "Bearer x", _basic("prometheus", "wrong"), "Basic !!!", "Basic " + base64.b64encode(
            b"no-colon").decode(), _basic("prometheus", PASSWORD + " ")):
        assert auth.check(users, header) is None, header
    calls = []
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda pw, hashed: calls.append(1) or real(pw, hashed))
    assert auth.check(users, _basic("nobody", PASSWORD)) is None
    assert calls, "an unknown user must still cost a bcrypt check"
    # a pair remembered for one set of users is not remembered for another
    assert auth.check({"prometheus": NEW_HASH.encode()}, _basic("prometheus", PASSWORD)) is None


def test_the_gate_keeps_the_last_good_file_and_refuses_turning_tls_off(tmp_path: Path, pki: Pki) -> None:
    said: list[str] = []
    path = _write(tmp_path / "web.yml", _tls_section(pki) + f"basic_auth_users:\n  prometheus: {HASH}\n")
    gate = WebGate(path, log=said.append)
    assert gate.tls and gate.describe() == " behind TLS, basic auth (1 user)"
    time.sleep(0.01)
    _write(path, f"basic_auth_users:\n  prometheus: {NEW_HASH}\n")  # TLS gone: refused
    assert gate.current().users["prometheus"] == HASH.encode()
    assert "turning TLS off needs a restart" in said[-1]
    _write(path, _tls_section(pki) + "basic_auth_users:\n  prometheus: plaintext\n")
    assert gate.current().users["prometheus"] == HASH.encode()
    assert "still serving with the configuration read before" in said[-1]
    count = len(said)
    gate.current()
    assert len(said) == count, "the same bad file is reported once"
    _write(path, _tls_section(pki) + f"basic_auth_users:\n  prometheus: {NEW_HASH}\n  grafana: {HASH}\n")
    assert gate.current().users["prometheus"] == NEW_HASH.encode()
    assert said[-1].endswith("re-read")
    for line in said:
        for secret in _secrets(pki):
            assert secret not in line


# ---- a real agent, real clients ------------------------------------------------------------------

CURL = shutil.which("curl")
needs_curl = pytest.mark.skipif(CURL is None and os.environ.get("CI") != "true", reason="curl is not installed")


def _agent(tmp_path: Path, config: Path, name: str = "agent") -> ExportProcess:
    return ExportProcess(["--replay", str(RECORDING), "--speed", "4", "--listen", "127.0.0.1:0", "--no-nvml",
                          "--no-dcgm", "--web-config-file", str(config)], tmp_path / f"{name}.log")


def _curl(url: str, *args: str) -> tuple[int, str]:
    """(curl's exit code, the HTTP status or '000'): curl exits 0 on any HTTP answer."""
    assert CURL is not None, "curl is needed (Debian: apt-get install -y curl)"
    done = subprocess.run([CURL, "-s", "-o", os.devnull, "-w", "%{http_code}", "--max-time", "20", *args, url],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout.strip()


def _log_is_clean(agent: ExportProcess, pki: Pki) -> str:
    text = agent.log.read_text(errors="replace")
    assert "Traceback" not in text, text
    for secret in _secrets(pki):
        assert secret not in text
    return text


@needs_curl
def test_tls_and_basic_auth_with_curl(tmp_path: Path, pki: Pki) -> None:
    config = _write(tmp_path / "web.yml", _tls_section(pki) + f"basic_auth_users:\n  prometheus: {HASH}\n"
                    "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n")
    agent = _agent(tmp_path, config)
    try:
        assert agent.url.startswith("https://127.0.0.1:")
        metrics, ca = agent.url + "/metrics", ("--cacert", str(pki.ca))
        assert _curl(metrics, *ca, "-u", f"prometheus:{PASSWORD}") == (0, "200")
        assert _curl(metrics, *ca, "-u", "prometheus:wrong") == (0, "401")
        assert _curl(metrics, *ca, "-u", f"grafana:{PASSWORD}") == (0, "401")
        assert _curl(metrics, *ca) == (0, "401")
        assert _curl(agent.url + "/healthz", *ca) == (0, "200")  # the liveness probe's door: no data behind it
        trusting = ssl.create_default_context(cafile=str(pki.ca))
        body = httpx.get(metrics, verify=trusting, auth=("prometheus", PASSWORD), trust_env=False, timeout=20)
        assert "specwatch_verdict" in body.text and body.headers["X-Content-Type-Options"] == "nosniff"
        assert "specwatch_verdict" not in httpx.get(agent.url + "/healthz", verify=trusting, trust_env=False,
                                                    timeout=20).text
        # plain HTTP on the TLS port: no answer at all (curl: 52 empty reply, or 56 reset)
        code, status = _curl(metrics.replace("https://", "http://"), "-u", f"prometheus:{PASSWORD}")
        assert code in (52, 56) and status == "000", (code, status)
        # a client that does not trust the agent's CA refuses it from its side
        assert _curl(metrics, "-u", f"prometheus:{PASSWORD}")[0] == 60
        text = wait_for(lambda: agent.log.read_text(errors="replace"), lambda t: "plain HTTP on the TLS port" in t,
                        "the refusal in the log", 20)
        assert "refused a connection from 127.0.0.1: plain HTTP on the TLS port" in text
        assert " behind TLS, basic auth (1 user)" in text
    finally:
        assert agent.stop() == 0
    _log_is_clean(agent, pki)


@needs_curl
def test_client_certificates_signed_by_the_ca_and_named_in_the_allowed_sans(tmp_path: Path, pki: Pki) -> None:
    config = _write(tmp_path / "web.yml", _tls_section(pki, "RequireAndVerifyClientCert",
                                                       "  client_allowed_sans: [prometheus.monitoring.svc]\n"))
    agent = _agent(tmp_path, config)
    try:
        metrics, ca = agent.url + "/metrics", ("--cacert", str(pki.ca))
        assert _curl(metrics, *ca, "--cert", str(pki.client_cert), "--key", str(pki.client_key)) == (0, "200")
        refused = [
            _curl(metrics, *ca),  # no certificate
            _curl(metrics, *ca, "--cert", str(pki.rogue_cert), "--key", str(pki.rogue_key)),  # unknown CA
            _curl(metrics, *ca, "--cert", str(pki.other_client_cert), "--key", str(pki.other_client_key)),  # name
        ]
        for code, status in refused:
            assert code != 0 and status == "000", refused
        text = wait_for(lambda: agent.log.read_text(errors="replace"),
                        lambda t: "client_allowed_sans" in t and "client certificate" in t,
                        "the refusals in the log", 20)
        assert "client certificates required" in text
    finally:
        assert agent.stop() == 0
    _log_is_clean(agent, pki)


@needs_curl
def test_the_file_is_re_read_when_it_changes_and_on_sighup(tmp_path: Path, pki: Pki) -> None:
    config = _write(tmp_path / "web.yml", _tls_section(pki) + f"basic_auth_users:\n  prometheus: {HASH}\n")
    agent = _agent(tmp_path, config)
    metrics, ca = agent.url + "/metrics", ("--cacert", str(pki.ca))
    try:
        assert _curl(metrics, *ca, "-u", f"prometheus:{PASSWORD}") == (0, "200")
        # the password rotated: the next connection sees the new file, no restart
        _write(config, _tls_section(pki) + f"basic_auth_users:\n  prometheus: {NEW_HASH}\n")
        assert _curl(metrics, *ca, "-u", f"prometheus:{NEW_PASSWORD}") == (0, "200")
        assert _curl(metrics, *ca, "-u", f"prometheus:{PASSWORD}") == (0, "401")
        # a broken edit, announced by SIGHUP: said at once, and the last good file still holds
        _write(config, _tls_section(pki) + f"basic_auth_users:\n  prometheus: {NEW_PASSWORD}\n")
        agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: agent.log.read_text(errors="replace"), lambda t: "still serving with the configuration" in t,
                 "the bad file reported", 20)
        assert _curl(metrics, *ca, "-u", f"prometheus:{NEW_PASSWORD}") == (0, "200")
        assert agent.proc.poll() is None, "SIGHUP must not stop the agent"
    finally:
        assert agent.stop() == 0
    _log_is_clean(agent, pki)


def test_an_unusable_file_stops_the_agent_before_it_listens(tmp_path: Path, pki: Pki, capsys) -> None:
    from specwatch import cli

    config = _write(tmp_path / "web.yml", f"basic_auth_users:\n  prometheus: {PASSWORD}\n")
    code = cli.main(["export", "--replay", str(RECORDING), "--listen", "127.0.0.1:0",
                     "--web-config-file", str(config)])
    out, err = capsys.readouterr()
    assert code == 64
    assert "basic_auth_users.prometheus: not a bcrypt hash" in err and PASSWORD not in err + out


def test_prometheus_scrapes_through_tls_and_basic_auth(tmp_path: Path, pki: Pki) -> None:
    from test_fleet import PrometheusServer, _binary

    binary = _binary("prometheus")
    config = _write(tmp_path / "web.yml", _tls_section(pki, "RequireAndVerifyClientCert")
                    + f"basic_auth_users:\n  prometheus: {HASH}\n")
    password_file = _write(tmp_path / "password", PASSWORD)
    agent = _agent(tmp_path, config)
    settings = (
        "    scheme: https\n"
        "    tls_config:\n"
        f"      ca_file: {pki.ca}\n      cert_file: {pki.client_cert}\n      key_file: {pki.client_key}\n"
        f"    basic_auth:\n      username: prometheus\n      password_file: {password_file}\n"
    )
    prometheus = PrometheusServer(binary, tmp_path, [agent.url.removeprefix("https://")], job_settings=settings)
    try:
        prometheus.start()

        def verdicts() -> list:
            return prometheus.api("/api/v1/query", query='specwatch_verdict == 1')["data"]["result"]

        def up() -> list:
            return prometheus.api("/api/v1/query", query='up{job="specwatch"}')["data"]["result"]

        wait_for(verdicts, bool, "a verdict scraped through TLS and basic auth", 90)
        assert [float(r["value"][1]) for r in up()] == [1.0]
    finally:
        prometheus.stop()
        assert agent.stop() == 0
    _log_is_clean(agent, pki)


def test_healthz_says_503_once_the_poll_loop_is_stuck(tmp_path: Path) -> None:
    from wsgiref.util import setup_testing_defaults

    from prometheus_client import CollectorRegistry

    from specwatch.advice.monitor import Monitor
    from specwatch.outputs.agent_http import locked_app
    from specwatch.outputs.export import ExportAgent

    agent = ExportAgent(source=None, monitor=Monitor(), node="n", mode="live")
    app = locked_app(CollectorRegistry(), WebGate(None), agent.alive)

    def status() -> str:
        environ: dict = {"PATH_INFO": "/healthz"}
        setup_testing_defaults(environ)
        seen = []
        app(environ, lambda s, h, e=None: seen.append(s))
        return seen[0]

    assert status() == "200 OK"
    agent.stuck_after_s = 0.05
    time.sleep(0.1)
    assert status() == "503 Service Unavailable"


def test_fleet_reads_a_locked_agent_with_its_client_certificate_and_the_password_in_the_url(
        tmp_path: Path, pki: Pki, capsys) -> None:
    """What `specwatch fleet --url` needs to read agents behind their web config: the CA, a client
    certificate (--client-cert/--client-key) and the basic-auth pair in the URL, from a --url-file."""
    import json

    from specwatch import cli

    config = _write(tmp_path / "web.yml", _tls_section(pki, "RequireAndVerifyClientCert")
                    + f"basic_auth_users:\n  prometheus: {HASH}\n")
    agent = _agent(tmp_path, config)
    urls = _write(tmp_path / "urls", agent.url.replace("https://", f"https://prometheus:{PASSWORD}@") + "\n")
    urls.chmod(0o600)
    try:
        def read(*flags: str) -> dict:
            code = cli.main(["fleet", "--url-file", str(urls), "--ca-file", str(pki.ca), "--json", *flags])
            out, err = capsys.readouterr()
            assert PASSWORD not in out + err
            return {"code": code, "row": json.loads(out)["rows"][0]}

        locked_out = read()  # no client certificate: the handshake is refused
        assert locked_out["row"]["read_state"] not in ("ok", "connection_refused") and locked_out["code"] == 3, \
            locked_out
        let_in = read("--client-cert", str(pki.client_cert), "--client-key", str(pki.client_key))
        assert let_in["row"]["read_state"] == "ok" and let_in["row"]["verdict"] in ("on", "off", "hold", "unknown")
        stranger = read("--client-cert", str(pki.rogue_cert), "--client-key", str(pki.rogue_key))
        assert stranger["row"]["read_state"] != "ok"
    finally:
        assert agent.stop() == 0
    _log_is_clean(agent, pki)


def test_a_client_certificate_that_does_not_load_is_a_clear_error(tmp_path: Path, pki: Pki, capsys) -> None:
    from specwatch import cli

    code = cli.main(["check", "--url", "https://127.0.0.1:9", "--client-cert", str(pki.ca), "--no-nvml", "--no-dcgm"])
    err = capsys.readouterr().err
    assert code == 3 and f"cannot use the client certificate {pki.ca}" in err, err
    code = cli.main(["check", "--url", "https://127.0.0.1:9", "--client-key", str(pki.client_key), "--no-nvml",
                     "--no-dcgm"])
    assert code == 3 and "--client-key needs --client-cert" in capsys.readouterr().err


def test_hash_password_prints_a_hash_the_web_config_takes_and_never_the_password(tmp_path: Path) -> None:
    import sys

    done = subprocess.run([sys.executable, "-m", "specwatch", "export", "--hash-password"], input=PASSWORD + "\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    hashed = done.stdout.strip()
    assert PASSWORD not in done.stdout + done.stderr
    assert bcrypt.checkpw(PASSWORD.encode(), hashed.encode())
    config = load_web_config(_write(tmp_path / "web.yml", f"basic_auth_users:\n  prometheus: {hashed}\n"))
    assert BasicAuth().check(config.users, _basic("prometheus", PASSWORD)) == "prometheus"
    empty = subprocess.run([sys.executable, "-m", "specwatch", "export", "--hash-password"], input="",
                           capture_output=True, text=True, timeout=60)
    assert empty.returncode == 64 and "empty password" in empty.stderr
