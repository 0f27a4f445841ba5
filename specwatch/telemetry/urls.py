"""One reading of the URLs an operator types, for every source (vLLM, dcgm-exporter, Prometheus, a
sweep's servers), and one redaction of the credentials a URL may carry.

`host:port`, `http://host:port` and a `/metrics` URL all work; a bad port (`:99999`, `:abc`), a
scheme other than http(s), a missing host and a mistyped scheme (`http:/host`, `http:host`,
`http//host`, `https:///host`) are a ValueError whose message is one line an operator can act on,
with the credentials redacted.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from urllib.parse import urlsplit, urlunsplit

METRICS_PATH = "/metrics"
# a scheme followed by one slash or none ("http:/host", "https:host"): a typo, not a host named "http"
_MANGLED_SCHEME = re.compile(r"^(https?):/?(?!/)", re.IGNORECASE)
# a scheme without its colon ("http//host") or with a slash too many ("https:///host"): a typo too
_SCHEME_NO_COLON = re.compile(r"^(h[tp]{1,3}(s?))//", re.IGNORECASE)
_SCHEME_SLASHES = re.compile(r"^(https?):/{3,}", re.IGNORECASE)
# what may precede a URL inside one word of a message: a label (`target=`), quotes or brackets, and a
# scheme spelt without its slashes (`http:/`, `http:`)
_LEAD = re.compile(r"^(?:[A-Za-z_][\w.-]*=)?[\"'(<\[{]*(?:https?:/?)?", re.IGNORECASE)
# a query parameter's value (`?key=…`, `&token=…`): it may be a secret too
_QUERY_VALUE = re.compile(r"(?P<key>[?&][^=&#\s'\"]+=)[^&#\s'\"]+")
_WORD = re.compile(r"\S+")


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it replaced by `***`: what comes before the last
    `@` of a word, after its `//` (`http://user:pw@host` → `http://***@host`, also `http//…`,
    `https:///…`), or, without `//`, from the word's start when it holds a `:` (`user:pw@host`,
    `http:/user:pw@host` → `***@host`, `http:/***@host`); and the values of query parameters
    (`?key=***`). Malformed URLs included, since a typo is where a URL gets echoed. The one redaction
    of what specwatch shows or stores: usage errors and suggestions, messages, JSON, exporter labels,
    recordings and logs. Idempotent."""
    return _WORD.sub(_redact_word, text)


def _redact_word(match: re.Match[str]) -> str:
    word = match.group(0)
    if "?" in word:
        word = _QUERY_VALUE.sub(r"\g<key>***", word)
    at = word.rfind("@")
    if at < 0:
        return word
    head = word[:at]
    slashes = head.find("//")
    if slashes >= 0:
        start = slashes + 2
        while start < at and head[start] == "/":
            start += 1
    else:
        start = _LEAD.match(head).end()  # type: ignore[union-attr] - the pattern matches the empty string
        if ":" not in head[start:]:
            return word  # `name@host` without a password, or a file name: nothing secret to hide
    if start >= at:
        return word
    return word[:start] + "***" + word[at:]


# What a host may hold besides letters and digits (an internationalised name's too, which the
# client encodes): a DNS name's hyphens and dots (underscores, which resolvers take in practice), an
# IPv6 address's colons and a zone's %.
_HOST_PUNCTUATION = frozenset("._:%-")


def split_url(text: str, what: str = "URL") -> tuple[str, str, str]:
    """An operator's URL → (base URL, /metrics URL, the same base with its credentials redacted).
    The first two keep the credentials (they are what is requested); the third is what is shown.
    ValueError, with a one-line message naming `what`, for a URL that cannot be used."""
    raw = text.strip()
    shown = redact(raw)
    if not raw:
        raise ValueError(f"{what} is empty")
    fixed = _fixed_scheme(raw)
    if fixed is not None:
        raise ValueError(f"{what} {shown!r} is not a URL: did you mean {redact(fixed)!r}?")
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        close = difflib.get_close_matches(scheme, ("http", "https"), n=1, cutoff=0.6)
        if close:  # htp://, htps://, hhtp://: a typo, not another protocol
            fixed = close[0] + raw[len(parts.scheme):]
            raise ValueError(f"{what} {shown!r} is not an http(s) URL: did you mean {redact(fixed)!r}?")
        raise ValueError(f"{what} {shown!r} is not an http(s) URL")
    if not parts.hostname:
        raise ValueError(f"{what} {shown!r} has no host name")
    bad = "".join(c for c in parts.hostname.strip("[]") if not (c.isalnum() or c in _HOST_PUNCTUATION))
    if bad:
        # no resolver would take it: say so now rather than as a DNS failure on every poll
        what_bad = "a space" if bad.isspace() else f"{bad[0]!r}"
        raise ValueError(f"{what} {shown!r} has {what_bad} in its host name {parts.hostname!r}, "
                         "which no host name can hold")
    try:
        port = parts.port
    except ValueError:
        port_text = parts.netloc.rpartition("@")[2].rsplit(":", 1)[-1]
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


def _fixed_scheme(raw: str) -> str | None:
    """`raw` with its mistyped scheme mended (`http:/`, `http:`, `http//`, `https:///` → `http(s)://`),
    or None when its scheme, if any, is spelt right. A bare `host:port` has no scheme to mend."""
    if _MANGLED_SCHEME.match(raw):
        return _MANGLED_SCHEME.sub(lambda m: m.group(1).lower() + "://", raw, count=1)
    if _SCHEME_NO_COLON.match(raw):  # `http//`, `htp//`, `https//`
        return _SCHEME_NO_COLON.sub(lambda m: ("https" if m.group(2) else "http") + "://", raw, count=1)
    if _SCHEME_SLASHES.match(raw):
        return _SCHEME_SLASHES.sub(lambda m: m.group(1).lower() + "://", raw, count=1)
    return None


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine: localhost or a loopback address. Any other host name may
    resolve anywhere, so it is taken as remote."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str | None:
    """The host of an http(s) URL, or None where it has none."""
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def beside(base: str, path: str, metrics_url: str) -> str:
    """The URL of another of a server's endpoints (`path`, which may carry a query of its own) under
    `base`, with the query the operator gave on the /metrics URL: a `?token=` that a proxy wants
    on every request reaches /version and /server_info too, not /metrics alone."""
    given = urlsplit(metrics_url).query
    if not given:
        return base + path
    return base + path + ("&" if "?" in path else "?") + given
