"""The export agent's HTTP server: /metrics (prometheus_client's WSGI app), /healthz, and the lock.

prometheus_client's own start_http_server wraps its listening socket once, at start, and has no
basic auth; the agent needs both to follow its web configuration file (specwatch.outputs.web_config)
while it runs. So the server here is prometheus_client's ThreadingWSGIServer with three changes:

- each accepted connection gets a timeout (a client that connects and says nothing cannot hold a
  thread for ever) and, with TLS, is wrapped with the context of the configuration read *now*: a
  renewed certificate or a new client CA applies to the next connection, no restart;
- the TLS handshake runs in the connection's own thread, so a slow or hostile client never stalls
  the accept loop; a failed handshake (plain HTTP on a TLS port, an unknown client certificate, a
  name outside client_allowed_sans) closes that connection and is logged in one line, at most once
  a minute per reason, never with a traceback;
- requests pass basic auth, when users are configured, before they reach the registry.

The file is re-read when it changes (checked on each connection: one stat) and on SIGHUP. A file
that no longer reads keeps the last good configuration and says why, once per change. Turning TLS on
or off needs a restart: a file edit must not silently downgrade the port to plain HTTP.

/healthz answers without auth and carries no data: 200 while the agent's poll loop is alive, 503
once it has been stuck longer than its bound. It is what a liveness probe should hit when the
metrics are locked (a probe holding the password would put it in the pod spec).
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import CollectorRegistry

from specwatch.outputs.web_config import BasicAuth, WebConfig, WebConfigError, file_stamp, load_web_config

CONNECTION_TIMEOUT_S = 30.0  # a scrape's request arrives in milliseconds; this only bounds a silent client
REFUSAL_LOG_EVERY_S = 60.0
HEALTH_PATH = "/healthz"

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"specwatch export: {message}", file=sys.stderr, flush=True)


class WebGate:
    """The web configuration in force, re-read when its file changes or on request (SIGHUP)."""

    def __init__(self, path: str | Path | None, log: Log = _stderr) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._reload_requested = False
        self._failed_stamp: tuple[float, int, int] | None = None
        self.auth = BasicAuth()
        self.path = Path(path) if path is not None else None
        # the first reading raises WebConfigError: a bad file at start is a usage error, not a log line
        self.config = load_web_config(self.path) if self.path is not None else None

    @property
    def tls(self) -> bool:
        return self.config is not None and self.config.tls is not None

    def describe(self) -> str:
        """The lock in words for the start-up line ("" when there is none); names no secret."""
        config = self.config
        if config is None:
            return ""
        parts = []
        if config.tls is not None:
            parts.append({"NoClientCert": "TLS",
                          "VerifyClientCertIfGiven": "TLS, client certificates verified when given",
                          "RequireAndVerifyClientCert": "TLS, client certificates required"}[config.client_auth_type])
        if config.users:
            parts.append(f"basic auth ({len(config.users)} user{'s' if len(config.users) != 1 else ''})")
        return f" behind {', '.join(parts)}" if parts else " with no lock (the web config sets neither TLS nor users)"

    def request_reload(self) -> None:
        """Called from the SIGHUP handler: re-read now, off the signal handler's thread (the reading
        takes the lock the connection threads take)."""
        self._reload_requested = True
        threading.Thread(target=self.current, name="specwatch-web-config", daemon=True).start()

    def current(self) -> WebConfig | None:
        if self.path is None:
            return None
        forced, self._reload_requested = self._reload_requested, False
        try:
            stamp = file_stamp(self.path)
        except OSError:
            stamp = None
        if not forced and (stamp == self.config.stamp or (stamp is not None and stamp == self._failed_stamp)):
            return self.config
        with self._lock:
            if not forced and stamp == self.config.stamp:
                return self.config
            try:
                fresh = load_web_config(self.path)
                if (fresh.tls is None) != (self.config.tls is None):
                    raise WebConfigError(f"web config {self.path}: turning TLS "
                                         f"{'off' if fresh.tls is None else 'on'} needs a restart of the agent")
            except WebConfigError as exc:
                if stamp != self._failed_stamp or forced:
                    self._log(f"{exc}; still serving with the configuration read before")
                self._failed_stamp = stamp
                return self.config
            self._failed_stamp = None
            if fresh.users != self.config.users:
                self.auth.forget()
            self.config = fresh
            self._log(f"web config {self.path} re-read")
            return fresh


class _Refusals:
    """One log line per reason a minute, with the count since the last one."""

    def __init__(self, log: Log) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}

    def note(self, reason: str, peer: Any) -> None:
        now = time.monotonic()
        with self._lock:
            last, count = self._last.get(reason, (-REFUSAL_LOG_EVERY_S, 0))
            if now - last < REFUSAL_LOG_EVERY_S:
                self._last[reason] = (last, count + 1)
                return
            self._last[reason] = (now, 0)
        more = f" (and {count} more since the last such line)" if count else ""
        host = peer[0] if isinstance(peer, tuple) and peer else "?"
        self._log(f"refused a connection from {host}: {reason}{more}")


def _refusal_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or exc.__class__.__name__
        if reason == "HTTP_REQUEST":
            return "plain HTTP on the TLS port"
        if reason in ("CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE"):
            return "client certificate not signed by client_ca_file"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "no client certificate"
        return f"TLS handshake failed ({reason})"
    if isinstance(exc, _NameNotAllowed):
        return str(exc)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"silent for {CONNECTION_TIMEOUT_S:g} s"
    if isinstance(exc, (ConnectionError, OSError)):
        return f"connection failed ({exc.__class__.__name__})"
    return f"{exc.__class__.__name__}"


class _NameNotAllowed(Exception):
    pass


def _certificate_names(cert: dict) -> list[str]:
    return [value for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "IP Address", "URI", "email")]


class _Handler(WSGIRequestHandler):
    """WSGIRequestHandler that finishes the TLS handshake in its own thread and logs nothing per request."""

    def setup(self) -> None:
        request = self.request
        if isinstance(request, ssl.SSLSocket):
            request.do_handshake()
            allowed = getattr(request, "specwatch_allowed_sans", ())
            if allowed:
                names = _certificate_names(request.getpeercert() or {})
                if not any(n in allowed for n in names):
                    raise _NameNotAllowed("client certificate's names are not in client_allowed_sans")
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


class AgentServer(ThreadingWSGIServer):
    """prometheus_client's threaded WSGI server, wrapping each connection in the configuration now in force."""

    daemon_threads = True
    gate: WebGate
    refusals: _Refusals

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        sock.settimeout(CONNECTION_TIMEOUT_S)
        config = self.gate.current()
        if config is None or config.tls is None:
            return sock, addr
        # the handshake runs in the connection's thread (_Handler.setup), not in the accept loop
        wrapped = config.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        wrapped.specwatch_allowed_sans = config.client_allowed_sans  # type: ignore[attr-defined]
        return wrapped, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is None:
            return
        self.refusals.note(_refusal_reason(exc), client_address)


def locked_app(registry: CollectorRegistry, gate: WebGate, alive: Callable[[], bool]) -> Callable:
    """The WSGI app: /healthz open, everything else behind basic auth when users are configured."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        config = gate.config
        headers = list(config.headers) if config is not None else []
        if environ.get("PATH_INFO") == HEALTH_PATH:
            ok = alive()
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8"), *headers])
            return [b"ok\n" if ok else b"the agent's poll loop is stuck\n"]
        if config is not None and config.users:
            if gate.auth.check(config.users, environ.get("HTTP_AUTHORIZATION")) is None:
                start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                     ("WWW-Authenticate", 'Basic realm="specwatch"'), *headers])
                return [b"Unauthorized\n"]

        def with_headers(status: str, response_headers: list, exc_info: Any = None) -> Any:
            return start_response(status, [*response_headers, *headers], exc_info)

        return metrics(environ, with_headers if headers else start_response)

    return app


def start_agent_server(registry: CollectorRegistry, host: str, port: int, gate: WebGate | None = None,
                       alive: Callable[[], bool] = lambda: True, log: Log = _stderr) -> tuple[AgentServer, threading.Thread]:
    """Bind and serve in a daemon thread; OSError when the address cannot be bound."""
    gate = gate if gate is not None else WebGate(None, log)

    class Server(AgentServer):
        pass

    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    Server.address_family = family
    Server.gate = gate
    Server.refusals = _Refusals(log)
    httpd = make_server(sockaddr[0], port, locked_app(registry, gate, alive), Server, handler_class=_Handler)
    thread = threading.Thread(target=httpd.serve_forever, name="specwatch-http", daemon=True)
    thread.start()
    return httpd, thread
