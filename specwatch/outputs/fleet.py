"""`specwatch fleet --prometheus URL`: every node's verdict, read through Prometheus.

    specwatch export (each node) ──scrape──▶ Prometheus ──/api/v1/query──▶ read_fleet ──▶ FleetApp

For a few nodes, `specwatch fleet --url ...` reads them directly instead (specwatch.outputs.fleet_direct),
into the same rows, table and detail screen.

The table has one row per (node, vLLM target), sorted so the nodes that need someone come first: a
misaligned draft, then speculation costing, then an agent Prometheus cannot scrape, a lost GPU, a
failing source, then the rest. Each refresh runs in a worker that posts a FleetRead message; the UI
thread only renders. A refresh is not re-armed while the previous one is still running.

Enter opens a node's detail screen, backed by PrometheusNodeSource (the same series, one node). It
shows the verdict with the dashboard's VerdictBanner (the figures Prometheus holds are exactly what
that banner reads) and a plain table for the rest: the dashboard's other panels read raw Snapshots
(counters, histograms), which Prometheus does not hold.

On Kubernetes (a PodMonitor or ServiceMonitor of the Prometheus Operator) every series also carries
the target's `namespace` and `pod`: a node is then named namespace/pod and selected by those two
labels, so replicas that share a hostname stay apart and an agent Prometheus cannot scrape is named
by its pod rather than its pod IP.

Keys: q quit, r refresh, Enter drill into a node, Escape back.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from specwatch.collectors.dynamo import NOT_JUDGED_ROLES
from specwatch.outputs import export_schema as schema
from specwatch.outputs.fleet_columns import COLUMNS, column_widths, fit_columns, last_good_words, short_target, \
    shown_columns
from specwatch.collectors.prometheus import PrometheusClient, PromSample, QueryResult
from specwatch.outputs.export_schema import FLAG, GPU, GPU_NAME, KIND, NODE, NOT_CONFIGURED_STATES, SIGNAL, SOURCE, STATE, \
    TARGET

SERIES_QUERY = schema.SERIES_SELECTOR
# Attention ranks: lower sorts first.
RANK_MISALIGNED, RANK_COSTING, RANK_EXPORTER_DOWN, RANK_TARGET_DOWN, RANK_GPU_LOST, RANK_SOURCE_DOWN, \
    RANK_UNKNOWN, RANK_WOULD_PAY, RANK_HOLD, RANK_FINE = range(10)


# Target labels the Prometheus Operator puts on every series it scrapes from a pod
NAMESPACE, POD = "namespace", "pod"
Selector = tuple[tuple[str, str], ...]


def node_identity(labels: dict[str, str]) -> tuple[str, Selector]:
    """The name a node goes by in the fleet, and the label matchers that select its series.

    namespace/pod when Prometheus carries both (Kubernetes service discovery), else the agent's own
    `node` label."""
    namespace, pod = labels.get(NAMESPACE, ""), labels.get(POD, "")
    if namespace and pod:
        return f"{namespace}/{pod}", ((NAMESPACE, namespace), (POD, pod))
    node = labels.get(NODE, "")
    return node, ((NODE, node),)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


@dataclass(frozen=True)
class FleetRow:
    """One vLLM target on one node (or an agent Prometheus cannot scrape, with target "")."""

    node: str
    target: str
    verdict: str = "unknown"
    configured: bool | None = None  # None: not known (the target cannot be read)
    # how the agent's last reading of the target went ("ok", "connection_refused", ...), and when
    # it last read it successfully (agent wall clock); "ok" when the agent exports no target_up
    read_state: str = "ok"
    last_good: float | None = None
    change_recommended: bool = False
    confidence: float | None = None
    expected_speedup: float | None = None
    acceptance_length: float | None = None
    break_even_length: float | None = None
    running: float | None = None
    crossover: float | None = None
    bound: str = "unknown"
    flags: tuple[str, ...] = ()
    gpus_lost: int = 0
    sources_down: tuple[str, ...] = ()  # "dcgm http://... (connection_refused)"
    exporter_up: bool = True
    selector: Selector = ()  # label matchers of this node's series; empty: node="<node>"
    # what the target is (specwatch_target_info): its engine, and its part in a deployment
    # (frontend, prefill, decode, aggregated); None where the agent does not say
    engine: str | None = None
    role: str | None = None

    @property
    def key(self) -> str:
        return f"{self.node}\t{self.target}"

    @property
    def costing(self) -> bool:
        return bool(self.configured) and self.verdict == "off"

    @property
    def reachable(self) -> bool:
        return self.read_state == "ok"

    @property
    def attention(self) -> tuple[int, str]:
        """(rank, words): why this row needs someone, most urgent reason first."""
        if not self.exporter_up:
            return RANK_EXPORTER_DOWN, "agent not scraped"
        if not self.reachable:
            return RANK_TARGET_DOWN, f"unreachable ({self.read_state.replace('_', ' ')})"
        if "misaligned_draft" in self.flags:
            return RANK_MISALIGNED, "misaligned draft"
        if self.costing:
            return RANK_COSTING, "speculation costing"
        if self.gpus_lost:
            return RANK_GPU_LOST, f"{self.gpus_lost} GPU{'s' if self.gpus_lost > 1 else ''} lost"
        if self.sources_down:
            return RANK_SOURCE_DOWN, "source down: " + ", ".join(self.sources_down)
        if self.verdict == "unknown" and "not_judged" in self.flags:
            if self.role in NOT_JUDGED_ROLES:
                return RANK_FINE, f"{self.role}: not judged"  # its decode workers are
            return RANK_UNKNOWN, "cannot be judged here (see check)"
        if self.verdict == "unknown":
            return RANK_UNKNOWN, "no verdict yet"
        if "gpu_unidentified" in self.flags:
            # the call flips with hardware nobody identified: a coin flip, whatever it recommends
            return RANK_WOULD_PAY, "device unknown: give --gpu"
        if self.change_recommended:
            return RANK_WOULD_PAY, "would pay: turn on"
        if self.verdict == "hold":
            return RANK_HOLD, "near break-even"
        return RANK_FINE, ""

    def sort_key(self) -> tuple[Any, ...]:
        # misaligned drafts and costing speculation first (the two verdict problems), then an
        # agent that cannot be scraped, lost GPUs, failing sources; alphabetical within a rank
        return self.attention[0], self.node, self.target


@dataclass(frozen=True)
class FleetReading:
    state: str  # "ok" or the query's failure state
    message: str = ""
    rows: tuple[FleetRow, ...] = ()
    read_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def _group(samples: Iterable[PromSample]) -> dict[str, list[PromSample]]:
    by_name: dict[str, list[PromSample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    return by_name


def fleet_rows(series: Sequence[PromSample], up: Sequence[PromSample] = ()) -> list[FleetRow]:
    """Rows from the specwatch_* series and the agents' `up` series, sorted by attention."""
    by_name = _group(series)
    fields: dict[tuple[str, str], dict[str, Any]] = {}
    selectors: dict[str, Selector] = {}

    def name(labels: dict[str, str]) -> str:
        node, selector = node_identity(labels)
        selectors.setdefault(node, selector)
        return node

    def where(labels: dict[str, str]) -> tuple[str, str]:
        return name(labels), labels.get(TARGET, "")

    def row(labels: dict[str, str]) -> dict[str, Any]:
        return fields.setdefault(where(labels), {})

    for s in by_name.get(schema.VERDICT.series, ()):
        if s.value == 1:
            row(s.labels)["verdict"] = s.labels.get(STATE, "unknown")
        else:
            row(s.labels)  # every target has its verdict series, at 0 for the other states
    for metric, key in ((schema.CONFIDENCE, "confidence"),
                        (schema.EXPECTED_SPEEDUP, "expected_speedup"),
                        (schema.ACCEPTANCE_LENGTH, "acceptance_length"),
                        (schema.BREAK_EVEN, "break_even_length"),
                        (schema.RUNNING, "running"),
                        (schema.CROSSOVER, "crossover")):
        for s in by_name.get(metric.series, ()):
            if where(s.labels) in fields:
                fields[where(s.labels)][key] = s.value
    for s in by_name.get(schema.CONFIGURED.series, ()):
        row(s.labels)["configured"] = s.value == 1
    for s in by_name.get(schema.CHANGE_RECOMMENDED.series, ()):
        row(s.labels)["change_recommended"] = s.value == 1
    for s in by_name.get(schema.BOUND.series, ()):
        if s.value == 1:
            row(s.labels)["bound"] = s.labels.get(STATE, "unknown")
    flags: dict[tuple[str, str], list[str]] = {}
    for s in by_name.get(schema.FLAGS.series, ()):
        if s.value == 1:
            flags.setdefault(where(s.labels), []).append(s.labels[FLAG])
    lost: dict[str, int] = {}
    for s in by_name.get(schema.GPU_LOST.series, ()):
        if s.value == 1:
            lost[name(s.labels)] = lost.get(name(s.labels), 0) + 1
    for s in by_name.get(schema.TARGET_UP.series, ()):
        row(s.labels)["read_state"] = s.labels.get(STATE, "unknown") if s.value == 0 else "ok"
    for s in by_name.get(schema.TARGET_INFO.series, ()):
        if where(s.labels) in fields:
            fields[where(s.labels)]["engine"] = s.labels.get("engine")
            role = s.labels.get("role")
            fields[where(s.labels)]["role"] = role if role not in (None, "none") else None
    last_success = {(name(s.labels), s.labels.get(SOURCE, "")): s.value
                    for s in by_name.get(schema.SOURCE_LAST_SUCCESS.series, ())}
    for (node, target), values in fields.items():
        values["last_good"] = last_success.get((node, f"vllm {target}"))
    down: dict[str, list[str]] = {}
    for s in by_name.get(schema.SOURCE_UP.series, ()):
        # a source absent by design (no NVML where dcgm-exporter serves) is not down, whatever
        # value an older agent exported for it
        if s.value == 0 and s.labels.get(STATE) not in NOT_CONFIGURED_STATES:
            down.setdefault(name(s.labels), []).append(
                f"{s.labels.get(SOURCE, '?')} ({s.labels.get(STATE, '?')})")
    rows = []
    for (node, target), values in fields.items():
        rows.append(FleetRow(node=node, target=target, flags=tuple(sorted(flags.get((node, target), ()))),
                             gpus_lost=lost.get(node, 0), sources_down=tuple(sorted(down.get(node, ()))),
                             selector=selectors[node], **values))
    # an agent Prometheus cannot scrape has no specwatch_* series left: list it by its pod, or else
    # by its instance
    for s in up:
        if s.value == 0:
            node, selector = node_identity(s.labels)
            if selector[0][0] == NODE:
                node, selector = s.labels.get("instance", "?"), ()
            rows.append(FleetRow(node=node, target="", exporter_up=False, selector=selector))
    return sorted(rows, key=FleetRow.sort_key)


async def read_fleet(client: PrometheusClient, job: str, clock: Callable[[], float] = time.time) -> FleetReading:
    series = await client.query(SERIES_QUERY)
    if not series.ok:
        return FleetReading(series.state, series.message, read_at=clock())
    up = await client.query(f'up{{job="{_escape(job)}"}}')
    rows = fleet_rows(series.samples, up.samples if up.ok else ())
    message = "" if up.ok else f"agents' up series unavailable: {up.message}"
    return FleetReading("ok", message, tuple(rows), clock())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# ==================================================================================================
# One node, through Prometheus
# ==================================================================================================


@dataclass(frozen=True)
class TargetDetail:
    target: str
    verdict: Any  # specwatch.advice.advisor.Verdict rebuilt from the series
    acceptance_rate: float | None
    # how the agent's last reading of the target went, and when it last read it (agent wall clock),
    # as in FleetRow: an unreadable target has no verdict to show, only why and since when
    read_state: str = "ok"
    last_good: float | None = None

    @property
    def reachable(self) -> bool:
        return self.read_state == "ok"


@dataclass(frozen=True)
class GpuDetail:
    index: str
    name: str
    dram: float | None
    tensor: float | None
    sm: float | None
    lost: bool


@dataclass(frozen=True)
class SourceDetail:
    source: str
    kind: str
    state: str
    up: bool
    last_success: float | None


@dataclass(frozen=True)
class NodeDetail:
    node: str
    state: str = "ok"
    message: str = ""
    targets: tuple[TargetDetail, ...] = ()
    gpus: tuple[GpuDetail, ...] = ()
    sources: tuple[SourceDetail, ...] = field(default_factory=tuple)
    last_snapshot: float | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"


class PrometheusNodeSource:
    """One node's specwatch series, read through Prometheus, as a NodeDetail per read.

    The Prometheus counterpart of the dashboard's sources for the detail screen: it yields the
    verdict figures the agent exported (Prometheus holds no raw Snapshots to rebuild)."""

    kind = "PROMETHEUS"

    def __init__(self, client: PrometheusClient, node: str, selector: Selector = ()) -> None:
        self.client = client
        self.node = node
        self.selector = selector or ((NODE, node),)

    def describe(self) -> str:
        return f"node {self.node} through {self.client.describe()}"

    async def read(self) -> NodeDetail:
        matchers = "".join(f', {label}="{_escape(value)}"' for label, value in self.selector)
        result = await self.client.query(schema.SERIES_SELECTOR.removesuffix("}") + matchers + "}")
        if not result.ok:
            return NodeDetail(self.node, result.state, result.message)
        return node_detail(self.node, result)


def node_detail(node: str, result: QueryResult, where: str = "read through Prometheus") -> NodeDetail:
    """One node's figures from its specwatch_* series; `where` says how they were read."""
    from specwatch.advice.verdict import Verdict
    from specwatch.perf import BoundEstimate, BoundSignal

    by_name = _group(result.samples)

    def per_target(metric: schema.MetricName) -> dict[str, float]:
        return {s.labels.get(TARGET, ""): s.value for s in by_name.get(metric.series, ())}

    verdicts = {s.labels.get(TARGET, ""): s.labels.get(STATE, "unknown")
                for s in by_name.get(schema.VERDICT.series, ()) if s.value == 1}
    targets = sorted({s.labels.get(TARGET, "") for s in by_name.get(schema.VERDICT.series, ())})
    read_states = {s.labels.get(TARGET, ""): s.labels.get(STATE, "unknown") if s.value == 0 else "ok"
                   for s in by_name.get(schema.TARGET_UP.series, ())}
    last = {s.labels.get(SOURCE, ""): s.value for s in by_name.get(schema.SOURCE_LAST_SUCCESS.series, ())}
    values = {metric: per_target(metric) for metric in (
        schema.CONFIDENCE, schema.EXPECTED_SPEEDUP, schema.BREAK_EVEN, schema.CROSSOVER, schema.CHANGE_RECOMMENDED,
        schema.CONFIGURED, schema.ACCEPTANCE_LENGTH, schema.RUNNING, schema.ACCEPTANCE_RATE)}
    details = []
    for target in targets:
        def get(metric: schema.MetricName) -> float | None:
            return values[metric].get(target)

        bound = next((s.labels.get(STATE, "unknown") for s in by_name.get(schema.BOUND.series, ())
                      if s.labels.get(TARGET, "") == target and s.value == 1), "unknown")
        # Prometheus holds each signal's state and value, not the words the advisor said them in
        signals = tuple(BoundSignal(s.labels.get(SIGNAL, "?"), s.labels.get(STATE, "unknown"), s.value, "")
                        for s in by_name.get(schema.BOUND_SIGNAL.series, ()) if s.labels.get(TARGET, "") == target)
        flags = tuple(sorted(s.labels[FLAG] for s in by_name.get(schema.FLAGS.series, ())
                             if s.labels.get(TARGET, "") == target and s.value == 1))
        speculation = verdicts.get(target, "unknown")
        length, be, running = get(schema.ACCEPTANCE_LENGTH), get(schema.BREAK_EVEN), get(schema.RUNNING)
        reason = f"{where}: run `specwatch check` on the node for the advisor's reasons"
        if _finite(length) and _finite(be):
            relation = "above" if length > be else "below"  # type: ignore[operator]
            at = f" at {running:.0f} running" if _finite(running) else ""
            reason = f"acceptance length {length:.2f} is {relation} break-even {be:.2f}{at} ({reason})"
        read_state = read_states.get(target, "ok")
        if read_state != "ok":  # the banner leads with why there is no verdict, as the table does
            last_good = last.get(f"vllm {target}")
            since = time.strftime("%H:%M:%S", time.localtime(last_good)) if _finite(last_good) else "never"
            reason = f"DOWN: unreachable ({read_state.replace('_', ' ')}), last good reading {since}"
        verdict = Verdict(
            speculation=speculation,
            confidence=get(schema.CONFIDENCE) or 0.0,
            expected_speedup=get(schema.EXPECTED_SPEEDUP),
            break_even_length=be,
            crossover_concurrency=get(schema.CROSSOVER),
            change_recommended=get(schema.CHANGE_RECOMMENDED) == 1,
            reasons=(reason,),
            bound=BoundEstimate(bound, None, signals),
            configured=get(schema.CONFIGURED) == 1,
            acceptance_length=length,
            running=running,
            flags=flags,
        )
        details.append(TargetDetail(target, verdict, get(schema.ACCEPTANCE_RATE), read_state,
                                    last.get(f"vllm {target}")))
    gpus: dict[tuple[str, str], dict[str, Any]] = {}
    for metric, key in ((schema.GPU_DRAM, "dram"), (schema.GPU_TENSOR, "tensor"), (schema.GPU_SM, "sm"),
                        (schema.GPU_LOST, "lost")):
        for s in by_name.get(metric.series, ()):
            entry = gpus.setdefault((s.labels.get(GPU, "?"), s.labels.get(GPU_NAME, "")), {})
            entry[key] = (s.value == 1) if key == "lost" else s.value
    gpu_details = tuple(GpuDetail(index, name, v.get("dram"), v.get("tensor"), v.get("sm"), bool(v.get("lost")))
                        for (index, name), v in sorted(gpus.items(), key=lambda kv: (_int(kv[0][0]), kv[0][1])))
    sources = tuple(sorted(
        (SourceDetail(s.labels.get(SOURCE, ""), s.labels.get(KIND, ""), s.labels.get(STATE, ""), s.value == 1,
                      last.get(s.labels.get(SOURCE, "")))
         for s in by_name.get(schema.SOURCE_UP.series, ())), key=lambda d: d.source))
    snapshot_times = [s.value for s in by_name.get(schema.LAST_SNAPSHOT.series, ())]
    if not targets and not gpu_details and not sources:
        return NodeDetail(node, "no_series", f"Prometheus holds no specwatch series for node {node!r}")
    return NodeDetail(node, "ok", "", tuple(details), gpu_details, sources,
                      snapshot_times[0] if snapshot_times else None)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 1 << 30


# ==================================================================================================
# The app
# ==================================================================================================


def _num(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if _finite(value) else "—"


def _pct(value: float | None) -> str:
    return f"{value * 100:.0f}%" if _finite(value) else "—"


# Below this confidence the table shows it beside the verdict ("ON 50%").
CONFIDENT = 0.8
VERDICT_STYLE = {"on": "bold green", "off": "bold red", "hold": "bold yellow", "unknown": "dim"}
def row_cells(row: FleetRow, now: float | None = None) -> tuple[Any, ...]:
    """The table's cells for one row, in COLUMNS order."""
    now = time.time() if now is None else now
    if not row.exporter_up:
        return (row.node, "—", Text("DOWN", style="bold red"), Text("agent not scraped", style="bold red"),
                "—", "—", "—", "—")
    rank, words = row.attention
    style = "bold red" if rank <= RANK_SOURCE_DOWN else "yellow" if rank < RANK_FINE else ""
    if not row.reachable:
        # health is never shown as a verdict: no "not configured", no "never" for what nobody can read
        return (row.node, short_target(row.target), Text("DOWN", style="bold red"),
                Text(f"{words}, {last_good_words(row.last_good, now)}", style=style), "—", "—", "—", "—")
    known = row.verdict in ("on", "off", "hold")
    # a call short of CONFIDENT carries its confidence, so a coin flip does not read as a plain ON
    doubt = f" {row.confidence:.0%}" if known and _finite(row.confidence) and row.confidence < CONFIDENT else ""
    word = row.verdict.upper() + doubt + (" (not configured)" if row.configured is False else "")
    crossover = f"{row.crossover:.0f}" if _finite(row.crossover) else "never" if known else "—"
    running = f"{row.running:.0f}" if _finite(row.running) else "—"
    target = short_target(row.target) + (f" ({row.role})" if row.role else "")
    return (row.node, target, Text(word, style=VERDICT_STYLE.get(row.verdict, "")),
            Text(words, style=style), _num(row.acceptance_length), _num(row.break_even_length),
            f"{running} / {crossover}", row.bound)


class FleetRead(Message):
    def __init__(self, reading: FleetReading) -> None:
        super().__init__()
        self.reading = reading


class NodeRead(Message):
    def __init__(self, detail: NodeDetail) -> None:
        super().__init__()
        self.detail = detail


def detail_text(detail: NodeDetail, now: float | None = None) -> Text:
    """The detail screen's figures below the banner: per target, GPUs and sources, in plain lines."""
    from specwatch.widgets.roofline import signal_words  # where used, as the other widget imports here

    now = time.time() if now is None else now
    text = Text()
    if not detail.ok:
        text.append(detail.message or detail.state, style="bold red")
        return text
    for t in detail.targets:
        v = t.verdict
        text.append(f"{t.target}\n", style="bold")
        if not t.reachable:
            # as in the table: an unreadable target's health is never shown as a verdict
            text.append(f"  DOWN: unreachable ({t.read_state.replace('_', ' ')}), "
                        f"{last_good_words(t.last_good, now)}\n", style="bold red")
            continue
        speedup = f"{_num(v.expected_speedup)}×" if _finite(v.expected_speedup) else "—"
        text.append(f"  verdict {v.speculation.upper()}  confidence {_num(v.confidence)}  "
                    f"expected speedup {speedup}  configured {'yes' if v.configured else 'no'}\n")
        text.append(f"  L {_num(v.acceptance_length)}  acceptance rate {_pct(t.acceptance_rate)}  "
                    f"break-even {_num(v.break_even_length)}\n")
        crossover = f"{v.crossover_concurrency:.0f}" if _finite(v.crossover_concurrency) else "never"
        text.append(f"  running {_num(v.running, 0)}  crossover {crossover}\n")
        text.append(f"  {v.bound.state}-bound" if v.bound.state != "unknown" else "  bound unknown")
        for sig in v.bound.signals:  # in the operator's words, as on the Roofline tab
            text.append(f"  · {signal_words(sig.name)} says {sig.state} "
                        f"({_num(sig.value)})")
        text.append("\n")
        if v.flags:
            text.append("  flags " + ", ".join(v.flags) + "\n", style="bold yellow")
    text.append("GPUs\n", style="bold")
    if not detail.gpus:
        text.append("  none reported\n", style="dim")
    for g in detail.gpus:
        if g.lost:
            text.append(f"  {g.index} {g.name}: LOST\n", style="bold red")
        else:
            text.append(f"  {g.index} {g.name}: DRAM {_pct(g.dram)}  tensor {_pct(g.tensor)}  SM {_pct(g.sm)}\n")
    text.append("Sources\n", style="bold")
    for s in detail.sources:
        age = f"{max(0.0, now - s.last_success):.0f} s ago" if _finite(s.last_success) else "never"
        text.append(f"  {s.source}: {'up' if s.up else 'DOWN'} ({s.state}), last good reading {age}\n",
                    style="" if s.up else "bold red")
    return text


class NodeScreen(Screen[None]):
    """One node's figures through Prometheus. Escape goes back to the fleet."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("r", "refresh_node", "refresh"),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self, source: Any, refresh_s: float) -> None:
        super().__init__()
        self.source = source
        self.refresh_s = refresh_s
        self.detail: NodeDetail | None = None
        self._in_flight = False

    def compose(self) -> ComposeResult:
        from specwatch.widgets.verdict import VerdictBanner

        yield Static(Text(f"{self.source.node} — {self.source.describe()}", style="bold"), id="node-title")
        yield VerdictBanner(id="node-verdict")
        yield Static(Text("reading…", style="dim"), id="node-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.action_refresh_node()
        self.set_interval(self.refresh_s, self.action_refresh_node)

    def action_refresh_node(self) -> None:
        if self._in_flight:
            return  # re-armed only once the previous read completed
        self._in_flight = True
        self.run_worker(self._read(), group="node", exclusive=True)

    async def _read(self) -> None:
        try:
            detail = await self.source.read()
        finally:
            self._in_flight = False
        self.post_message(NodeRead(detail))

    def on_node_read(self, message: NodeRead) -> None:
        from specwatch.advice.monitor import TargetState
        from specwatch.telemetry.snapshot import TargetSample
        from specwatch.widgets.view import DashboardView, SourceInfo
        from specwatch.widgets.verdict import VerdictBanner

        self.detail = message.detail
        self.query_one("#node-detail", Static).update(detail_text(message.detail))
        if not message.detail.ok:
            # the node was read and did not answer: the banner leads with why, as the table does,
            # instead of waiting for a first reading
            from specwatch.perf import BoundEstimate
            from specwatch.advice.verdict import Verdict

            why = message.detail.message or message.detail.state.replace("_", " ")
            down = Verdict(speculation="unknown", confidence=0.0, expected_speedup=None, break_even_length=None,
                           crossover_concurrency=None, change_recommended=False, reasons=(f"DOWN: {why}",),
                           bound=BoundEstimate("unknown", None, ()))
            self.query_one(VerdictBanner).show(DashboardView(
                source=SourceInfo(getattr(self.source, "kind", "PROMETHEUS"), self.source.describe(),
                                  interval_s=self.refresh_s),
                state=TargetState(self.source.node, None, down)))
        elif message.detail.targets:
            first = message.detail.targets[0]
            view = DashboardView(
                source=SourceInfo(getattr(self.source, "kind", "PROMETHEUS"), self.source.describe(),
                                  interval_s=self.refresh_s),
                time=message.detail.last_snapshot,
                target_urls=tuple(t.target for t in message.detail.targets),
                state=TargetState(first.target, None, first.verdict),
                target=TargetSample(first.target, "ok"),
            )
            self.query_one(VerdictBanner).show(view)


class FleetApp(App[None]):
    """The table of nodes. Refreshes every `refresh_s` in a worker; Enter drills into a node.

    `client`: a PrometheusClient, or a specwatch.outputs.fleet_direct.DirectFleet that reads the nodes
    directly (`read_fleet`, `node_source`, `describe`, `aclose`)."""

    TITLE = "specwatch fleet"
    CSS = """
    #fleet-status { height: auto; padding: 0 1; }
    #fleet { height: 1fr; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit"),
        # Ctrl-C quits as in any terminal program (Textual's own default only says how to quit)
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("r", "refresh_fleet", "refresh"),
        Binding("enter", "drill", "drill into node", show=True),
    ]

    def __init__(self, client: Any, job: str = "specwatch", refresh_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.clock = clock
        self.client = client
        self.job = job
        self.refresh_s = refresh_s
        self.reading: FleetReading | None = None
        self.rows: tuple[FleetRow, ...] = ()
        self.refreshes = 0
        self._in_flight = False

    def compose(self) -> ComposeResult:
        yield Static(Text(f"reading {self.client.describe()}…", style="dim"), id="fleet-status")
        table: DataTable[Any] = DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self.action_refresh_fleet()
        self.set_interval(self.refresh_s, self.action_refresh_fleet)

    def action_refresh_fleet(self) -> None:
        if self._in_flight:
            return  # the previous refresh is still running: do not pile queries on Prometheus
        self._in_flight = True
        self.run_worker(self._read(), group="fleet", exclusive=True)

    async def _read(self) -> None:
        try:
            if isinstance(self.client, PrometheusClient):
                reading = await read_fleet(self.client, self.job, self.clock)
            else:  # specwatch.outputs.fleet_direct.DirectFleet: the nodes read directly
                reading = await self.client.read_fleet(self.clock)
        finally:
            self._in_flight = False
        self.post_message(FleetRead(reading))

    def on_fleet_read(self, message: FleetRead) -> None:
        reading = message.reading
        self.reading = reading
        self.refreshes += 1
        status = self.query_one("#fleet-status", Static)
        stamp = time.strftime("%H:%M:%S", time.localtime(reading.read_at))
        if not reading.ok:
            # keep the last rows on screen: a blip in Prometheus should not blank the fleet
            status.update(Text(f"{stamp}  {reading.message}", style="bold red"))
            return
        self.rows = reading.rows
        attention = sum(1 for r in reading.rows if r.attention[0] < RANK_FINE)
        line = Text(f"{stamp}  {self.client.describe()} · {len(reading.rows)} rows · {attention} need attention")
        if reading.message:
            line.append(f" · {reading.message}", style="yellow")
        status.update(line)
        self._fill_table()

    def on_resize(self) -> None:
        if self.reading is not None and self.reading.ok:
            self.call_after_refresh(self._fill_table)  # the columns that fit the new width

    def _fill_table(self) -> None:
        reading = self.reading
        assert reading is not None
        table = self.query_one(DataTable)
        selected = self._selected_key()
        cells = [row_cells(row, reading.read_at) for row in reading.rows]
        shown = shown_columns(reading.rows, cells)
        # Each column as wide as its widest cell, set here: left to the table, the widths are measured
        # on a later idle turn of its own, and a table that missed that turn kept its columns at the
        # headers' width, the node names cut (seen under load). Those that do not fit are left out.
        widths = column_widths(shown, cells)
        room = table.size.width or self.size.width
        if len(reading.rows) + 1 > (table.size.height or self.size.height):  # room for a vertical scrollbar
            room -= table.styles.scrollbar_size_vertical
        shown, widths = fit_columns(shown, widths, room)
        table.clear(columns=True)
        for i in shown:
            table.add_column(COLUMNS[i], width=widths[i])
        for row, row_of_cells in zip(reading.rows, cells):
            table.add_row(*(row_of_cells[i] for i in shown), key=row.key)
        if selected is not None:
            for i, row in enumerate(reading.rows):
                if row.key == selected:
                    table.move_cursor(row=i)
                    break

    def _selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.rows or table.row_count == 0:
            return None
        index = table.cursor_row
        return self.rows[index].key if 0 <= index < len(self.rows) else None

    def action_drill(self) -> None:
        key = self._selected_key()
        if key is None:
            return
        row = next(r for r in self.rows if r.key == key)
        if not row.exporter_up:
            self.notify(f"{row.node}: Prometheus cannot scrape this agent, so there is nothing to show",
                        severity="warning")
            return
        if isinstance(self.client, PrometheusClient):
            source: Any = PrometheusNodeSource(self.client, row.node, row.selector)
        else:
            source = self.client.node_source(row)
        if source is None:
            return
        self.push_screen(NodeScreen(source, self.refresh_s))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # DataTable takes Enter for itself and says so with RowSelected: drill from there
        event.stop()
        self.action_drill()

    async def on_unmount(self) -> None:
        await self.client.aclose()
