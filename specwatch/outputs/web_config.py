"""The export agent's lock: a web configuration file in the format of Prometheus's exporter-toolkit.

The format node_exporter, dcgm-exporter and the other exporters operators already run take with
`--web.config.file` (github.com/prometheus/exporter-toolkit, docs/web-configuration.md):

    tls_server_config:
      cert_file: agent.crt            # relative paths are read from the file's own directory
      key_file: agent.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: prometheus-ca.crt
      min_version: TLS12
      client_allowed_sans: [prometheus.monitoring.svc]
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2y$10$...          # a bcrypt hash: `specwatch export --hash-password`

What specwatch refuses rather than half-does (each with a message naming the key):
- `RequestClientCert` and `RequireAnyClientCert` ask for a client certificate without verifying it;
  Python's TLS can only ask for certificates it verifies, and an unverified certificate is no lock.
- `cipher_suites` and `curve_preferences` name Go's suites and curves; OpenSSL's defaults apply.
- `http2: true` (the agent speaks HTTP/1.x; Prometheus scrapes HTTP/1.1).

Nothing in this module ever puts a password, a hash or a key into a message: errors name the file
and the key, never the value (tests/test_web_config.py checks every message).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENT_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED_CLIENT_AUTH_TYPES = ("RequestClientCert", "RequireAnyClientCert")
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
DEFAULT_MIN_VERSION = "TLS12"  # exporter-toolkit's default
TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
TLS_KEYS = ("cert_file", "key_file", "cert", "key", "client_auth_type", "client_ca_file", "client_allowed_sans",
            "min_version", "max_version", "cipher_suites", "curve_preferences", "prefer_server_cipher_suites")
HTTP_KEYS = ("http2", "headers")
# exporter-toolkit refuses these response headers in `headers`: the server sets them itself
RESERVED_HEADERS = ("authorization", "content-length", "content-type", "www-authenticate", "transfer-encoding",
                    "connection", "date", "server")
BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")


class WebConfigError(ValueError):
    """A web configuration file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class WebConfig:
    """One reading of the file: a TLS context (None: plain HTTP) and the basic-auth users."""

    path: Path
    tls: ssl.SSLContext | None = None
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    users: dict[str, bytes] = field(default_factory=dict)  # user → bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    stamp: tuple[float, int, int] = (0.0, 0, 0)  # the file's (mtime, size, inode) when it was read


def file_stamp(path: Path) -> tuple[float, int, int]:
    st = path.stat()
    return (st.st_mtime, st.st_size, st.st_ino)


def load_web_config(path: str | Path) -> WebConfig:
    """Read and check the file; WebConfigError (naming file and key, never a value) when it is unusable."""
    import yaml

    path = Path(path)
    try:
        stamp = file_stamp(path)
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WebConfigError(f"web config {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"web config {path}: not UTF-8 text") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        # the parser's own message quotes the text it choked on, which may be a secret: not shown
        raise WebConfigError(f"web config {path}: not valid YAML{where}") from None
    if doc is None:
        doc = {}  # an empty file is exporter-toolkit's "no TLS, no auth"
    where = f"web config {path}"
    _mapping(doc, where, TOP_KEYS)
    tls, auth_type, sans = _tls(doc.get("tls_server_config"), path)
    users = _users(doc.get("basic_auth_users"), where)
    headers = _http(doc.get("http_server_config"), where)
    return WebConfig(path=path, tls=tls, client_auth_type=auth_type, client_allowed_sans=sans, users=users,
                     headers=headers, stamp=stamp)


def _mapping(value: Any, where: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}: expected a mapping of {', '.join(allowed)}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise WebConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(allowed)})")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{where}: expected a non-empty string")
    return value


def _tls(section: Any, path: Path) -> tuple[ssl.SSLContext | None, str, tuple[str, ...]]:
    where = f"web config {path}: tls_server_config"
    if section is None:
        return None, "NoClientCert", ()
    _mapping(section, where, TLS_KEYS)
    for key in ("cipher_suites", "curve_preferences"):
        if section.get(key):
            raise WebConfigError(f"{where}.{key}: not supported by specwatch (Go's names); "
                                 "leave it out to use OpenSSL's defaults")
    base = path.parent
    cert_file, key_file = section.get("cert_file"), section.get("key_file")
    inline_cert, inline_key = section.get("cert"), section.get("key")
    if (cert_file or inline_cert) is None or (key_file or inline_key) is None:
        raise WebConfigError(f"{where}: needs cert_file (or cert) and key_file (or key) together")
    if cert_file and inline_cert or key_file and inline_key:
        raise WebConfigError(f"{where}: give cert_file or cert, key_file or key, not both")
    auth_type = section.get("client_auth_type") or "NoClientCert"
    if auth_type in UNVERIFIED_CLIENT_AUTH_TYPES:
        raise WebConfigError(f"{where}.client_auth_type: {auth_type} accepts a client certificate without "
                             "verifying it; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with "
                             "client_ca_file")
    if auth_type not in CLIENT_AUTH_TYPES:
        raise WebConfigError(f"{where}.client_auth_type: unknown {str(auth_type)!r} "
                             f"(known: {', '.join([*CLIENT_AUTH_TYPES, *UNVERIFIED_CLIENT_AUTH_TYPES])})")
    ca_file = section.get("client_ca_file")
    if auth_type != "NoClientCert" and not ca_file:
        raise WebConfigError(f"{where}: client_auth_type {auth_type} needs client_ca_file")
    sans = section.get("client_allowed_sans") or []
    if not isinstance(sans, list) or not all(isinstance(s, str) and s for s in sans):
        raise WebConfigError(f"{where}.client_allowed_sans: expected a list of names")
    if sans and auth_type != "RequireAndVerifyClientCert":
        raise WebConfigError(f"{where}.client_allowed_sans: needs client_auth_type RequireAndVerifyClientCert")
    versions = []
    for key, default in (("min_version", DEFAULT_MIN_VERSION), ("max_version", None)):
        name = section.get(key) or default
        if name is not None and name not in TLS_VERSIONS:
            raise WebConfigError(f"{where}.{key}: unknown {str(name)!r} (known: {', '.join(TLS_VERSIONS)})")
        versions.append(TLS_VERSIONS[name] if name else None)
    if versions[1] is not None and versions[1] < versions[0]:
        raise WebConfigError(f"{where}: max_version is below min_version")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = versions[0]
    if versions[1] is not None:
        context.maximum_version = versions[1]
    if section.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        if inline_cert or inline_key:
            _load_inline_chain(context, inline_cert, inline_key, cert_file, key_file, base, where)
        else:
            context.load_cert_chain(_path(cert_file, base, f"{where}.cert_file"),
                                    _path(key_file, base, f"{where}.key_file"))
    except ssl.SSLError as exc:
        raise WebConfigError(f"{where}: the certificate and key do not load ({exc.reason or 'bad PEM'}: "
                             "is the key the certificate's?)") from None
    context.verify_mode = CLIENT_AUTH_TYPES[auth_type]
    if ca_file:
        try:
            context.load_verify_locations(cafile=_path(ca_file, base, f"{where}.client_ca_file"))
        except ssl.SSLError as exc:
            raise WebConfigError(f"{where}.client_ca_file: no CA certificate loads ({exc.reason or 'bad PEM'})") \
                from None
    return context, auth_type, tuple(sans)


def _path(value: Any, base: Path, where: str) -> str:
    p = Path(_string(value, where))
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise WebConfigError(f"{where}: {p} is not a readable file")
    if not os.access(p, os.R_OK):
        raise WebConfigError(f"{where}: {p} cannot be read by this user")
    return str(p)


def _load_inline_chain(context: ssl.SSLContext, cert: Any, key: Any, cert_file: Any, key_file: Any,
                       base: Path, where: str) -> None:
    """`cert`/`key` given inline: ssl loads chains only from files, so they go through a private temp
    file that is removed at once."""
    import tempfile

    cert_text = _string(cert, f"{where}.cert") if cert else Path(_path(cert_file, base, f"{where}.cert_file")).read_text()
    key_text = _string(key, f"{where}.key") if key else Path(_path(key_file, base, f"{where}.key_file")).read_text()
    fd, name = tempfile.mkstemp(prefix="specwatch-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:  # mkstemp's file is 0600: the key is never world-readable
            out.write(cert_text.rstrip("\n") + "\n" + key_text.rstrip("\n") + "\n")
        context.load_cert_chain(name)
    finally:
        os.unlink(name)


def _users(section: Any, where: str) -> dict[str, bytes]:
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise WebConfigError(f"{where}: basic_auth_users: expected a mapping of user name to bcrypt hash")
    users = {}
    for user, hashed in section.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError(f"{where}: basic_auth_users: a user name must be a non-empty string without ':'")
        if not isinstance(hashed, str) or not hashed.startswith(BCRYPT_PREFIXES) or len(hashed) != 60:
            # the value is a secret's hash: named by its user, never shown
            raise WebConfigError(f"{where}: basic_auth_users.{user}: not a bcrypt hash "
                                 "(make one with `specwatch export --hash-password`)")
        users[user] = hashed.encode()
    return users


def _http(section: Any, where: str) -> tuple[tuple[str, str], ...]:
    if section is None:
        return ()
    where = f"{where}: http_server_config"
    _mapping(section, where, HTTP_KEYS)
    if section.get("http2"):
        raise WebConfigError(f"{where}.http2: not supported (the agent serves HTTP/1.1, which Prometheus scrapes)")
    headers = section.get("headers") or {}
    if not isinstance(headers, dict):
        raise WebConfigError(f"{where}.headers: expected a mapping of header name to value")
    out = []
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str) or "\n" in value or "\r" in value:
            raise WebConfigError(f"{where}.headers: names and values must be one-line strings")
        if name.lower() in RESERVED_HEADERS:
            raise WebConfigError(f"{where}.headers.{name}: set by the server itself; cannot be overridden")
        out.append((name, value))
    return tuple(out)


class BasicAuth:
    """Checks `Authorization: Basic` against bcrypt hashes.

    bcrypt at cost 10 takes tens of milliseconds by design; Prometheus sends the same pair on every
    scrape, so a pair that passed is remembered (as an HMAC keyed per process, never the password)
    until the users change. An unknown user is checked against a dummy hash, so a wrong user costs
    what a wrong password does and the time does not tell which names exist."""

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._passed: set[bytes] = set()
        self._lock = threading.Lock()
        self._dummy: bytes | None = None

    def forget(self) -> None:
        with self._lock:
            self._passed.clear()

    def check(self, users: dict[str, bytes], header: str | None) -> str | None:
        """The user name when the header carries a valid pair, else None."""
        import base64
        import binascii

        import bcrypt

        if not header or not header[:6].lower() == "basic ":
            return None
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        if not sep:
            return None
        hashed = users.get(user)
        memo = hmac.new(self._key, b"\0".join((user.encode(), password.encode(), hashed or b"")),
                        hashlib.sha256).digest()
        with self._lock:
            if hashed is not None and memo in self._passed:
                return user
        if hashed is None:
            if self._dummy is None:
                self._dummy = bcrypt.hashpw(b"specwatch", bcrypt.gensalt(10))
            bcrypt.checkpw(password.encode(), self._dummy)
            return None
        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:  # a hash that only looked like bcrypt
            return None
        if not ok:
            return None
        with self._lock:
            self._passed.add(memo)
        return user
