"""`specwatch fleet --url URL --url URL ...`: the fleet table without Prometheus, for a few nodes.

Each URL is read directly, all of them concurrently, each within the timeout, and is taken for what
its /metrics serves:

- a specwatch agent (`specwatch export`): its specwatch_* series carry the agent's verdict, and
  become rows exactly as the same series read through Prometheus do (specwatch.outputs.fleet.fleet_rows);
- a bare vLLM (or SGLang) server: readings, not a verdict. The fleet then judges it itself with the
  live session every command uses (specwatch.commands.options.live_session: the same scraper, Monitor
  and advisor as `check` and `watch`). Rates need two readings a poll apart, so such a row says "no
  verdict" until the second refresh (`--json` takes its two readings `--window` apart).

A URL that cannot be read is a DOWN row naming why (connection refused, timeout, HTTP 401, ...) and
when it was last read, whatever it serves; the others are unaffected. Prometheus stays the way for
large fleets: it keeps history, alerts, and one query instead of N scrapes.
"""

from __future__ import annotations

import dataclasses

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

import httpx

from specwatch.collectors.prometheus import PromSample, QueryResult
from specwatch.collectors.transport import PayloadTooLarge, deadline_s, get_bounded
from specwatch.collectors.vllm import describe_http_error, describe_status, make_client, url_has_credentials
from specwatch.outputs.export import known_configuration
from specwatch.outputs.export_schema import NODE
from specwatch.outputs.fleet import FleetReading, FleetRow, NodeDetail, SourceDetail, TargetDetail, fleet_rows, node_detail
from specwatch.telemetry.urls import split_url

AGENT, ENGINE, UNKNOWN = "agent", "engine", "unknown"
# The series every specwatch agent serves from its start (one sample, labelled with its node), and
# that no engine does: its presence makes a payload an agent's.
AGENT_MARKER = "specwatch_agent_info"


def agent_samples(text: str) -> tuple[PromSample, ...] | None:
    """The specwatch_* samples of an agent's /metrics, labelled as Prometheus stores them (with
    `__name__`); None when the payload is not an agent's (no specwatch_agent_info, or not exposition)."""
    from prometheus_client.parser import text_string_to_metric_families

    if AGENT_MARKER not in text:
        return None
    try:
        samples = tuple(PromSample({"__name__": s.name, **s.labels}, float(s.value))
                        for family in text_string_to_metric_families(text) for s in family.samples
                        if s.name.startswith("specwatch_"))
    except (ValueError, TypeError, IndexError):
        return None
    return samples if any(s.name == AGENT_MARKER for s in samples) else None


def engine_row(node: str, target: str, state: Any, read_state: str, last_good: float | None) -> FleetRow:
    """A row from a verdict judged here (a bare engine, its Monitor's TargetState), with the figures an
    agent would export. Before its first verdict (one reading: no rates yet) the row says "no verdict
    yet", and "not configured" only where the readings show no spec-decode families."""
    if read_state != "ok":
        # nothing is known about a server that does not answer: as the agent exports it
        return FleetRow(node=node, target=target, read_state=read_state, last_good=last_good)
    verdict = state.verdict
    return FleetRow(node=node, target=target, verdict=verdict.speculation, configured=known_configuration(state),
                    read_state=read_state, last_good=last_good, change_recommended=verdict.change_recommended,
                    confidence=verdict.confidence, expected_speedup=verdict.expected_speedup,
                    acceptance_length=verdict.acceptance_length, break_even_length=verdict.break_even_length,
                    running=verdict.running, crossover=verdict.crossover_concurrency, bound=verdict.bound.state,
                    flags=tuple(sorted(verdict.flags)))


@dataclass
class DirectTarget:
    """One URL the operator gave: what it turned out to be, and what its last reading left."""

    given: str
    metrics_url: str
    shown: str  # the base URL without credentials, query or fragment: the row's target
    node: str  # host:port, until an agent names its node
    kind: str = UNKNOWN
    session: Any = None  # the LiveSession judging a bare engine
    last_good: float | None = None
    samples: tuple[PromSample, ...] = ()
    rows: tuple[FleetRow, ...] = ()
    state: str = "unknown"
    message: str = ""
    engine_sample: Any = None  # a bare engine's last TargetSample (its URL keys the Monitor's states)


class DirectFleet:
    """Reads every URL each refresh and turns what it read into fleet rows (specwatch.outputs.fleet)."""

    def __init__(self, urls: Sequence[str], make_session: Callable[[str], Any], token: str | None = None,
                 verify: Any = True, timeout_s: float = 5.0, max_bytes: int = 32 * 1024 * 1024,
                 clock: Callable[[], float] = time.time) -> None:
        from specwatch.outputs.export import public_url

        self.targets: list[DirectTarget] = []
        for url in urls:
            base, metrics, _ = split_url(url, "node URL")
            shown = public_url(base)
            self.targets.append(DirectTarget(url, metrics, shown, urlsplit(shown).netloc or shown))
        self._make_session = make_session
        self._client_args = (token, verify, timeout_s)
        self._token_sent = bool(token)
        self._client: httpx.AsyncClient | None = None
        self.max_bytes = max_bytes
        self.clock = clock

    def describe(self) -> str:
        return f"{len(self.targets)} URL{'s' if len(self.targets) != 1 else ''} read directly"

    async def read_fleet(self, clock: Callable[[], float] | None = None) -> FleetReading:
        """One reading of every URL, concurrently; never raises for what a node does."""
        clock = clock or self.clock
        await asyncio.gather(*(self._read(t) for t in self.targets))
        rows = [row for t in self.targets for row in t.rows]
        return FleetReading("ok", "", tuple(sorted(rows, key=FleetRow.sort_key)), clock())

    async def _read(self, target: DirectTarget) -> None:
        if target.kind == ENGINE:
            await self._read_engine(target)
            if target.state != "families_missing":
                return
            # the URL no longer serves an engine's families (an agent took its port?): look again
            await self._drop_session(target)
        text = await self._scrape(target)
        if text is None:
            target.rows = (FleetRow(node=target.node, target=target.shown, read_state=target.state,
                                    last_good=target.last_good),)
            return
        samples = agent_samples(text)
        if samples is not None:
            target.kind, target.samples = AGENT, samples
            agent = next(s for s in samples if s.name == AGENT_MARKER)
            target.node = agent.labels.get(NODE) or target.node
            # an agent that has judged nothing yet (just started, no target answered) is still a node
            target.rows = tuple(fleet_rows(samples)) or (FleetRow(node=target.node, target=""),)
            return
        # readings, not a verdict: judge it here, with the live session every command uses
        target.kind = ENGINE
        target.session = self._make_session(target.given)
        await self._read_engine(target)

    async def _scrape(self, target: DirectTarget) -> str | None:
        """The /metrics text, or None with the target's state and message saying why not."""
        if self._client is None:
            self._client = make_client(*self._client_args)
        limit = deadline_s(self._client)
        try:
            # the whole answer within the timeout: a server trickling bytes must not hold the refresh
            async with asyncio.timeout(limit):
                response = await get_bounded(self._client, target.metrics_url, self.max_bytes)
        except TimeoutError:
            return self._failed(target, "timeout", f"{target.shown}: no answer within {limit:g} s")
        except PayloadTooLarge:
            return self._failed(target, "payload_too_large",
                                f"{target.shown}: /metrics is larger than {self.max_bytes} bytes")
        except (httpx.HTTPError, OSError) as exc:
            return self._failed(target, *describe_http_error(exc, target.shown, "node"))
        if response.status_code != 200:
            return self._failed(target, *describe_status(response.status_code, target.shown,
                                                         token_sent=self._token_sent, engine_label="node",
                                                         url_credentials=url_has_credentials(target.metrics_url)))
        target.state, target.message, target.last_good = "ok", "", self.clock()
        return response.content.decode("utf-8", errors="replace")

    @staticmethod
    def _failed(target: DirectTarget, state: str, message: str) -> None:
        target.state, target.message = state, message
        return None

    async def _read_engine(self, target: DirectTarget) -> None:
        session = target.session
        snapshot = await session.source.read()
        session.monitor.ingest(snapshot)
        (sample,) = snapshot.targets
        target.state, target.message = sample.state, sample.message
        if sample.ok:
            target.last_good = self.clock()
        state = session.monitor.states.get(sample.url)
        target.engine_sample = sample
        if state is None:
            target.rows = (FleetRow(node=target.node, target=target.shown, read_state=sample.state,
                                    last_good=target.last_good),)
        else:
            row = engine_row(target.node, target.shown, state, sample.state, target.last_good)
            target.rows = (dataclasses.replace(row, engine=sample.engine_name, role=sample.role),)

    async def _drop_session(self, target: DirectTarget) -> None:
        session, target.session, target.kind = target.session, None, UNKNOWN
        if session is not None:
            await session.source.aclose()

    def node_source(self, row: FleetRow) -> DirectNodeSource | None:
        for target in self.targets:
            if row in target.rows:
                return DirectNodeSource(self, target, row.node)
        return None

    async def aclose(self) -> None:
        for target in self.targets:
            await self._drop_session(target)
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class DirectNodeSource:
    """One URL's node for the fleet's detail screen: an agent's series as the Prometheus detail reads
    them, or the verdict judged here for a bare engine. Reads what the fleet's refresh last read."""

    kind = "DIRECT"

    def __init__(self, fleet: DirectFleet, target: DirectTarget, node: str) -> None:
        self.fleet = fleet
        self.target = target
        self.node = node

    def describe(self) -> str:
        what = {AGENT: "specwatch agent", ENGINE: "engine judged here"}.get(self.target.kind, "node")
        return f"{what} at {self.target.shown}"

    async def read(self) -> NodeDetail:
        t = self.target
        if t.state != "ok":
            return NodeDetail(self.node, t.state, t.message or t.state)
        if t.kind == AGENT:
            return node_detail(self.node, QueryResult("ok", samples=t.samples), where="read from the agent")
        sample = t.engine_sample
        state = t.session.monitor.states.get(sample.url) if t.session is not None and sample else None
        if state is None:
            return NodeDetail(self.node, "no_reading", f"{t.shown}: not read yet")
        figures = state.window.total if state.window is not None else None
        acc = figures.acceptance if figures is not None else None
        source = SourceDetail(f"vllm {t.shown}", "vllm", sample.state, sample.ok, t.last_good)
        # the GPUs of a node read from afar are its agent's to report: none here
        return NodeDetail(self.node, "ok", "", (TargetDetail(t.shown, state.verdict,
                                                             acc.acceptance_rate if acc is not None else None),),
                          (), (source,), t.last_good)
