"""One reading of the URLs an operator types, for every source (vLLM, dcgm-exporter, Prometheus, a
sweep's servers), and one redaction of the credentials a URL may carry.

`host:port`, `http://host:port` and a `/metrics` URL all work; a bad port (`:99999`, `:abc`), a
scheme other than http(s), a missing host and a single slash (`http:/host`) are a ValueError whose
message is one line an operator can act on.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

METRICS_PATH = "/metrics"
# a scheme followed by one slash or none ("http:/host", "https:host"): a typo, not a host named "http"
_MANGLED_SCHEME = re.compile(r"^(https?):/?(?!/)", re.IGNORECASE)
# scheme://user:password@host → scheme://***@host (the user name may also be a secret)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it replaced by `***`. The one redaction used for
    what specwatch shows or stores: messages, JSON, exporter labels, recordings and logs."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


def split_url(text: str, what: str = "URL") -> tuple[str, str, str]:
    """An operator's URL → (base URL, /metrics URL, the same base with its credentials redacted).
    The first two keep the credentials (they are what is requested); the third is what is shown.
    ValueError, with a one-line message naming `what`, for a URL that cannot be used."""
    raw = text.strip()
    shown = redact(raw)
    if not raw:
        raise ValueError(f"{what} is empty")
    if _MANGLED_SCHEME.match(raw):
        fixed = _MANGLED_SCHEME.sub(lambda m: m.group(1).lower() + "://", raw, count=1)
        raise ValueError(f"{what} {shown!r} is not a URL: did you mean {redact(fixed)!r}?")
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{what} {shown!r} is not an http(s) URL")
    if not parts.hostname:
        raise ValueError(f"{what} {shown!r} has no host name")
    try:
        port = parts.port
    except ValueError:
        port_text = parts.netloc.rsplit(":", 1)[-1]
        raise ValueError(f"{what} {shown!r} has a bad port {port_text!r} (a number from 1 to 65535)") from None
    if port == 0:
        raise ValueError(f"{what} {shown!r} has a bad port '0' (a number from 1 to 65535)")
    path = parts.path.rstrip("/")
    if path.endswith(METRICS_PATH):
        base_path, metrics_path = path[: -len(METRICS_PATH)], path
    else:
        base_path, metrics_path = path, path + METRICS_PATH
    base = urlunsplit((parts.scheme.lower(), parts.netloc, base_path, "", ""))
    metrics = urlunsplit((parts.scheme.lower(), parts.netloc, metrics_path, parts.query, ""))
    return base, metrics, redact(base)
