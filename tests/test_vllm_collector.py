"""The vLLM collector against real loopback HTTP servers: every failure is a named state."""

import asyncio
import json
import subprocess
import sys

import pytest

from http_fixtures import (
    LocalServer,
    chunked_without_length,
    metrics_and_version,
    never_answers,
    refused_port,
    reply,
)
from payloads import NGRAM_K4, read
from specwatch.collectors.vllm import (
    TokenError,
    VllmSource,
    VllmTarget,
    make_client,
    normalise_url,
    read_token,
    scrape_target,
)

REAL = read(NGRAM_K4).encode()


def scrape(url, **kw):
    async def go():
        max_bytes = kw.pop("max_bytes", 32 * 1024 * 1024)
        async with make_client(**kw) as client:
            return await scrape_target(client, VllmTarget.from_url(url), max_bytes)

    return asyncio.run(go())


def test_ok_scrape_reads_version_and_engines():
    with LocalServer(metrics_and_version(lambda: REAL)) as srv:
        t = scrape(srv.url)
    assert t.ok, t.message
    assert t.version == "0.32.0"
    assert t.engines[0].accepted_per_position == (135.0, 67.0, 40.0, 30.0)
    assert t.payload_bytes == len(REAL)


@pytest.mark.parametrize(
    "status, state, words",
    [
        (401, "http_401", "unauthorised"),
        (403, "http_403", "forbidden"),
        (404, "http_404", "404"),
        (500, "http_5xx", "HTTP 500"),
        (503, "http_5xx", "HTTP 503"),
    ],
)
def test_http_status_states(status, state, words):
    with LocalServer(reply(status, b"nope")) as srv:
        t = scrape(srv.url)
    assert (t.state, t.ok) == (state, False)
    assert words in t.message and srv.url in t.message


def test_connection_refused():
    url = f"http://127.0.0.1:{refused_port()}"
    t = scrape(url)
    assert t.state == "connection_refused"
    # the engine is not known before a payload is read: "the server", not "vLLM"
    assert t.message == f"the server at {url}: connection refused (is the server running?)"


def test_timeout_on_a_server_that_never_answers():
    with LocalServer(never_answers(5.0)) as srv:
        t = scrape(srv.url, timeout_s=0.5)
    assert t.state == "timeout" and "no answer within the timeout" in t.message


def test_dns_failure():
    t = scrape("http://specwatch-no-such-host.invalid:8000", timeout_s=5.0)
    assert t.state == "dns_failure", t.message


def test_tls_against_a_plain_http_server():
    with LocalServer(metrics_and_version(lambda: REAL)) as srv:
        t = scrape(srv.url.replace("http://", "https://"), timeout_s=3.0)
    assert t.state == "tls_error", t.message


def test_not_prometheus_text():
    with LocalServer(reply(200, b"<html><body>hello</body></html>", "text/html")) as srv:
        t = scrape(srv.url)
    assert t.state == "not_prometheus" and "HTML" in t.message


def test_families_missing():
    with LocalServer(reply(200, b"# TYPE up gauge\nup 1\n")) as srv:
        t = scrape(srv.url)
    assert t.state == "families_missing"
    assert "vllm:num_requests_running" in t.message


def test_payload_too_large_by_declared_length():
    with LocalServer(reply(200, REAL)) as srv:
        t = scrape(srv.url, max_bytes=1000)
    assert t.state == "payload_too_large" and "1000" in t.message


def test_payload_too_large_when_streamed_without_length(monkeypatch):
    import specwatch.collectors.transport as transport

    trims = []
    real = transport.return_freed_memory
    monkeypatch.setattr(transport, "return_freed_memory", lambda: trims.append(1) or real())
    with LocalServer(chunked_without_length(REAL * 40)) as srv:
        t = scrape(srv.url, max_bytes=200_000)
    assert t.state == "payload_too_large"
    # the refused chunks' pages go back to the system: one hostile answer must not stay in an agent's
    # RSS for weeks (measured: six 40 MB answers, 35 → 73 MB without it, 35 → 38 MB with it)
    assert trims == [1]


def test_bearer_token_is_sent_and_never_in_messages():
    secret = "sk-specwatch-test-secret"
    with LocalServer(reply(401, b"no")) as srv:
        t = scrape(srv.url, token=secret)
        sent = srv.requests[0][1]
    assert sent.get("Authorization") == f"Bearer {secret}"
    assert secret not in t.message and secret not in json.dumps(t.to_dict())


def test_token_from_env_and_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", " abc ")
    assert read_token("MY_TOKEN") == "abc"
    f = tmp_path / "tok"
    f.write_text("fromfile\nignored\n")
    assert read_token("MY_TOKEN", f) == "fromfile"
    with pytest.raises(TokenError, match="cannot read"):
        read_token(None, tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(TokenError, match="empty"):
        read_token(None, tmp_path / "empty")


def test_several_targets_concurrently():
    with LocalServer(metrics_and_version(lambda: REAL)) as a:
        dead = f"http://127.0.0.1:{refused_port()}"

        async def go():
            async with VllmSource([a.url, dead]) as src:
                return await src.scrape()

        ok, bad = asyncio.run(go())
    assert ok.ok and bad.state == "connection_refused"


@pytest.mark.parametrize(
    "given, base, metrics",
    [
        ("localhost:8000", "http://localhost:8000", "http://localhost:8000/metrics"),
        ("http://h:1/metrics", "http://h:1", "http://h:1/metrics"),
        ("https://h/vllm/", "https://h/vllm", "https://h/vllm/metrics"),
    ],
)
def test_normalise_url(given, base, metrics):
    assert normalise_url(given) == (base, metrics)


def test_bad_url_is_rejected():
    with pytest.raises(ValueError):
        normalise_url("ftp://x")


def _cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "specwatch", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_check_cli_on_unreachable_target_exits_3_without_traceback():
    url = f"http://127.0.0.1:{refused_port()}"
    r = _cli("check", "--url", url, "--window", "0.2", "--json")
    assert r.returncode == 3
    assert "Traceback" not in r.stderr
    report = json.loads(r.stdout)
    assert report["schema"] == "specwatch.check/1"
    assert report["state"] == "connection_refused"
    assert report["engine"]["reachable"] is False
    assert report["verdict"]["speculation"] == "unknown"


def test_check_cli_human_summary_and_bad_token_file(tmp_path):
    with LocalServer(metrics_and_version(lambda: REAL)) as srv:
        r = _cli("check", "--url", srv.url, "--window", "0.2")
    assert r.returncode == 2, r.stderr  # reachable, but no verdict yet
    assert "k=4" in r.stdout and "vLLM 0.32.0" in r.stdout
    r = _cli("check", "--token-file", str(tmp_path / "nope"), "--window", "0.1")
    assert r.returncode == 3 and "cannot read the token file" in r.stderr and "Traceback" not in r.stderr
