"""A PromQL client over Prometheus' HTTP API (/api/v1/query), for the fleet view.

Every failure becomes a QueryResult with a named state and a message an operator can act on;
nothing here raises to the caller:

- connection_refused, timeout, dns_failure, tls_error, network_error: the server was not reached;
- http_error: it answered with a status and no API error body (a proxy, a wrong path);
- promql_error: the API's own error ("bad_data: parse error at char 5: ...") — a bad query;
- not_prometheus: a 200 that is not the API's JSON.

The bearer token, when given, is sent in a header and never appears in a state message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import httpx

from specwatch.collectors.vllm import describe_http_error, describe_status, url_has_credentials
from specwatch.telemetry.urls import split_url

QUERY_PATH = "/api/v1/query"


@dataclass(frozen=True, slots=True)
class PromSample:
    """One series of an instant vector: its labels (with __name__) and its value."""

    labels: dict[str, str]
    value: float

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")


@dataclass(frozen=True, slots=True)
class QueryResult:
    state: str  # "ok" or a failure state (module docstring)
    message: str = ""
    samples: tuple[PromSample, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def _base_url(url: str) -> tuple[str, str]:
    """(the base URL requested, the same with its credentials redacted, to show)."""
    base, _, shown = split_url(url, "Prometheus URL")
    return base, shown


def _value(raw: Any) -> float:
    # the API sends sample values as strings, "NaN" and "+Inf" included
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


class PrometheusClient:
    """Instant queries against one Prometheus server, with one pooled connection."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 5.0,
                 verify: Any = True) -> None:
        self.url, self.shown_url = _base_url(url)
        self._token_sent = bool(token)
        headers = {"Accept": "application/json", "User-Agent": "specwatch"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client_args: dict[str, Any] = dict(headers=headers, verify=verify, timeout=httpx.Timeout(timeout_s),
                                                 follow_redirects=False, trust_env=False)
        self._client: httpx.AsyncClient | None = None

    def describe(self) -> str:
        return f"Prometheus at {self.shown_url}"

    async def query(self, promql: str) -> QueryResult:
        if self._client is None:
            self._client = httpx.AsyncClient(**self._client_args)
        where = self.describe()
        try:
            response = await self._client.get(self.url + QUERY_PATH, params={"query": promql})
        except (httpx.HTTPError, OSError) as exc:
            state, message = describe_http_error(exc, self.shown_url, "Prometheus")
            return QueryResult(state, message.replace(f"vLLM at {self.shown_url}", where))
        try:
            body = response.json()
        except (ValueError, RecursionError):
            body = None
        if isinstance(body, dict) and body.get("status") == "error":
            # Prometheus answers a bad query with 400/422 and its own words: pass them on
            return QueryResult("promql_error", f"{where} rejected the query {promql!r}: "
                                               f"{body.get('errorType', 'error')}: {body.get('error', '')}")
        if response.status_code in (401, 403):
            return QueryResult(*describe_status(response.status_code, self.shown_url, self._token_sent, where,
                                                QUERY_PATH, url_credentials=url_has_credentials(self.url)))
        if response.status_code != 200:
            return QueryResult("http_error", f"{where}: HTTP {response.status_code} at {QUERY_PATH} "
                                             "(is this the Prometheus base URL?)")
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(body.get("data"), dict):
            return QueryResult("not_prometheus", f"{where}: the answer is not Prometheus' query API JSON")
        try:
            return _decode(body, where)
        except (KeyError, IndexError, TypeError, ValueError):
            # a "result" or "warnings" that is not a list, labels that are not an object, ...
            return QueryResult("not_prometheus", f"{where}: a malformed series in the answer")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _decode(body: dict[str, Any], where: str) -> QueryResult:
    """A success answer of the query API → QueryResult; raises KeyError/IndexError/TypeError/ValueError
    on a malformed one (the caller turns that into not_prometheus)."""
    data = body["data"]
    warnings = tuple(str(w) for w in body.get("warnings") or ())
    kind = data.get("resultType")
    if kind == "scalar":
        return QueryResult("ok", samples=(PromSample({}, _value(data.get("result", [0, "NaN"])[1])),),
                           warnings=warnings)
    if kind != "vector":
        return QueryResult("not_prometheus", f"{where}: expected an instant vector, got {kind!r}")
    samples = []
    for item in data.get("result") or ():
        metric = item["metric"]
        if not isinstance(metric, dict):
            raise TypeError("series labels are not an object")
        samples.append(PromSample({str(k): str(v) for k, v in metric.items()}, _value(item["value"][1])))
    return QueryResult("ok", samples=tuple(samples), warnings=warnings)
