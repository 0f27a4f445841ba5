"""Small real HTTP servers on loopback for the collector's failure states, and a recording proxy."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

import httpx

Handler = Callable[[BaseHTTPRequestHandler], None]


class LocalServer:
    """A threaded HTTP server whose GET behaviour is one function; `requests` logs what it saw."""

    def __init__(self, on_get: Handler) -> None:
        outer = self
        self.requests: list[tuple[str, dict[str, str]]] = []

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                outer.requests.append((self.path, dict(self.headers)))
                on_get(self)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(status: int, body: bytes, content_type: str = "text/plain; version=0.0.4") -> Handler:
    def on_get(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return on_get


def metrics_and_version(metrics: Callable[[], bytes], version: str = "0.32.0") -> Handler:
    def on_get(h: BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/version"):
            reply(200, f'{{"version": "{version}"}}'.encode(), "application/json")(h)
        elif h.path.startswith("/metrics"):
            reply(200, metrics())(h)
        else:
            reply(404, b'{"detail":"Not Found"}', "application/json")(h)

    return on_get


def chunked_without_length(body: bytes, chunk: int = 65536) -> Handler:
    """Streams the body with no Content-Length, so only the reader's own count can stop it."""

    def on_get(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            for i in range(0, len(body), chunk):
                part = body[i:i + chunk]
                h.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            h.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    return on_get


def never_answers(hold_s: float = 30.0) -> Handler:
    def on_get(h: BaseHTTPRequestHandler) -> None:
        time.sleep(hold_s)

    return on_get


def refused_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingProxy(LocalServer):
    """Forwards GETs to an upstream and keeps every /metrics body it passed on, byte for byte, so a
    test can compute the expected figures from exactly the scrapes the tool under test saw."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.metrics_bodies: list[bytes] = []

        def on_get(h: BaseHTTPRequestHandler) -> None:
            try:
                r = httpx.get(upstream + h.path, timeout=30.0)
            except httpx.HTTPError:
                h.send_response(502)
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            if h.path.startswith("/metrics"):
                self.metrics_bodies.append(r.content)
            reply(r.status_code, r.content, r.headers.get("content-type", "text/plain"))(h)

        super().__init__(on_get)


def check_json(*args: str, window: str = "0.2") -> tuple[int, dict]:
    """`specwatch check ARGS --json` in this process, without NVML or dcgm-exporter: its exit status and
    its JSON document."""
    import contextlib
    import io
    import json

    from specwatch.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            status = main(["check", *args, "--window", window, "--json", "--no-nvml", "--no-dcgm"])
        except SystemExit as exc:
            status = exc.code
    return status, json.loads(out.getvalue())
