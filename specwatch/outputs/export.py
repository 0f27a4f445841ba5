"""`specwatch export`: the verdict as Prometheus metrics, from a small headless agent on each node.

    Source (live | replay) ──Snapshot──▶ Monitor ──▶ ExportFrame ──(at scrape time)──▶ specwatch_* metrics

The agent polls its source in an asyncio loop, re-arming the poll only after the previous one
completed (a slow vLLM never piles up requests), feeds the same Monitor every front end uses, and
publishes one immutable ExportFrame per poll. prometheus_client's HTTP server runs in its own
thread and calls SpecwatchCollector.collect() on each scrape, which renders the latest frame: the
frame is replaced by a single assignment, so a scrape always sees one whole poll, never half of one.

Metric names, help texts and label names live in specwatch.outputs.export_schema, which `specwatch fleet`
reads too. State sets are one series per state with the current one at 1 (so `== 1` alerts never
see a missing series flip to another label). Every series carries `node` (the hostname, or
--node); per-target series carry `target` (the vLLM base URL, credentials and query stripped).

The exporter never exports anything the operator did not want to leave the node: URLs lose their
user-info and query string, and the bearer token is held only by the vLLM client.
"""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import urlsplit, urlunsplit

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from specwatch import __version__, perf
from specwatch.outputs import export_schema as schema
from specwatch.outputs.export_schema import BOUND_STATES, KNOWN_FLAGS, NOT_CONFIGURED_STATES, VERDICT_STATES, MetricName
from specwatch.readings.health import health_report, node_output_tokens
from specwatch.advice.monitor import Monitor, TargetState
from specwatch.telemetry.urls import is_loopback
from specwatch.telemetry.snapshot import Snapshot, SpeculationConfig
from specwatch.telemetry.urls import redact

DEFAULT_LISTEN = "127.0.0.1:9464"
# /healthz says 503 after this long without a finished poll: a poll is a few reads each bounded by
# its timeout (5 s by default), so minutes without one is a wedged loop, not a slow engine
STUCK_AFTER_S = 300.0


class ListenError(ValueError):
    """A --listen value that is malformed, or non-loopback without --allow-remote."""


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `:PORT` (loopback) → (host, port)."""
    raw = value.strip()
    if raw.startswith("["):
        host, sep, port = raw[1:].partition("]:")
        if not sep:
            raise ListenError(f"--listen {value!r}: write an IPv6 address as [ADDR]:PORT")
    else:
        host, sep, port = raw.rpartition(":")
        if not sep:
            raise ListenError(f"--listen {value!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host or "127.0.0.1"
    try:
        port_number = int(port)
    except ValueError:
        raise ListenError(f"--listen {value!r}: the port must be a number") from None
    if not 0 <= port_number <= 65535:
        raise ListenError(f"--listen {value!r}: the port must be between 0 and 65535")
    return host, port_number


def check_listen(value: str, allow_remote: bool) -> tuple[str, int]:
    """The address to bind, refusing anything but loopback unless the operator asked for it.

    The metrics name the node's targets and GPUs: exposing them to the network is a decision, so
    it takes two flags (--listen and --allow-remote), never a typo.
    """
    host, port = parse_listen(value)
    if not is_loopback(host) and not allow_remote:
        raise ListenError(
            f"--listen {value}: {host} is not a loopback address; the metrics would be reachable from the "
            f"network. Pass --allow-remote as well if that is intended (and firewall the port)."
        )
    return host, port


def public_url(url: str) -> str:
    """A URL safe to put in a label: no user-info (user:password@), no query string, no fragment;
    whatever urlsplit makes of a malformed one still goes through the one redaction."""
    try:
        parts = urlsplit(url)
        if not parts.scheme:
            return redact(url.split("@")[-1].split("?")[0])
        netloc = parts.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "invalid-url"
    return redact(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


def public_source_name(name: str) -> str:
    """A source's name ("nvml", "dcgm http://host:9400/metrics") with any URL in it made public."""
    kind, _, rest = name.partition(" ")
    return f"{kind} {public_url(rest)}" if rest else kind


@dataclass(frozen=True)
class ExportFrame:
    """What one poll left behind: everything a scrape renders, immutable once published."""

    node: str
    mode: str  # "live" or "replay"
    snapshot: Snapshot | None = None
    states: dict[str, TargetState] = field(default_factory=dict)
    received_at: float | None = None  # agent wall clock when the Snapshot arrived
    poll_seconds: float | None = None
    # source name (public) → agent wall clock of its last good reading
    last_success: dict[str, float] = field(default_factory=dict)
    # target URL → the speculation config its verdict was judged with
    speculation: dict[str, SpeculationConfig | None] = field(default_factory=dict)
    # target URL → its health block over the window (specwatch.readings.health.health_report)
    health: dict[str, dict] = field(default_factory=dict)
    slo: tuple[float | None, float | None] = (None, None)


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def gauge(metric: MetricName) -> GaugeMetricFamily:
    return GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))


class SpecwatchCollector(Collector):
    """Renders the latest ExportFrame at scrape time; holds no metric objects between scrapes."""

    def __init__(self, frame: Callable[[], ExportFrame]) -> None:
        self._frame = frame

    def describe(self) -> list[Metric]:
        return []  # nothing fixed to describe: registration must not call collect()

    def collect(self) -> Iterator[Metric]:
        frame = self._frame()
        node = frame.node
        yield from self._agent(frame)
        yield from self._targets(node, frame)
        yield from self._health(node, frame)
        yield from self._gpus(node, frame.snapshot)
        yield from self._sources(node, frame)

    # -- families ---------------------------------------------------------------------------------

    @staticmethod
    def _agent(frame: ExportFrame) -> Iterable[Metric]:
        info = InfoMetricFamily(schema.AGENT.name, schema.AGENT.help, labels=list(schema.AGENT.labels))
        info.add_metric([frame.node], {"version": __version__, "mode": frame.mode})
        yield info
        last, data, poll = gauge(schema.LAST_SNAPSHOT), gauge(schema.DATA_TIME), gauge(schema.POLL_DURATION)
        if frame.received_at is not None:
            last.add_metric([frame.node], frame.received_at)
        if frame.snapshot is not None:
            data.add_metric([frame.node], frame.snapshot.time)
        if _finite(frame.poll_seconds):
            poll.add_metric([frame.node], float(frame.poll_seconds))  # type: ignore[arg-type]
        yield from (last, data, poll)

    @staticmethod
    def _targets(node: str, frame: ExportFrame) -> Iterable[Metric]:
        verdict, configured, change = gauge(schema.VERDICT), gauge(schema.CONFIGURED), gauge(schema.CHANGE_RECOMMENDED)
        confidence, speedup = gauge(schema.CONFIDENCE), gauge(schema.EXPECTED_SPEEDUP)
        interval = gauge(schema.SPEEDUP_INTERVAL)
        length, rate = gauge(schema.ACCEPTANCE_LENGTH), gauge(schema.ACCEPTANCE_RATE)
        break_even, crossover, running = gauge(schema.BREAK_EVEN), gauge(schema.CROSSOVER), gauge(schema.RUNNING)
        bound, signal, flag = gauge(schema.BOUND), gauge(schema.BOUND_SIGNAL), gauge(schema.FLAGS)
        spec_info = InfoMetricFamily(schema.SPECULATION.name, schema.SPECULATION.help,
                                     labels=list(schema.SPECULATION.labels))
        stalled = gauge(schema.ENGINE_STALLED)
        target_up = gauge(schema.TARGET_UP)
        target_info = InfoMetricFamily(schema.TARGET_INFO.name, schema.TARGET_INFO.help,
                                       labels=list(schema.TARGET_INFO.labels))
        read = {t.url: t for t in frame.snapshot.targets} if frame.snapshot is not None else {}
        read_states = {url: t.state for url, t in read.items()}
        for url, state in sorted(frame.states.items()):
            target = public_url(url)
            v = state.verdict
            key = [node, target]
            read_state = read_states.get(url, "ok" if state.reachable else "unknown")
            target_up.add_metric(key + [read_state], 1.0 if read_state == "ok" else 0.0)
            sample = read.get(url)
            if sample is not None:
                target_info.add_metric(key, {"engine": sample.engine_name, "deployment": sample.deployment or "none",
                                             "role": sample.role or "none"})
            if v.configured:
                config = frame.speculation.get(url)
                spec_info.add_metric(key, {
                    "method": (config.method if config else None) or "unknown",
                    "draft_model": (config.draft_model if config else None) or "none",
                    "source": (config.source_of("method") if config else None) or "unknown",
                })
            for s in VERDICT_STATES:
                verdict.add_metric(key + [s], 1.0 if v.speculation == s else 0.0)
            known = known_configuration(state) if state.reachable else None
            if known is not None:
                # a server that does not answer, or not read yet, has no known configuration: absent, not "0"
                configured.add_metric(key, 1.0 if known else 0.0)
            change.add_metric(key, 1.0 if v.change_recommended else 0.0)
            confidence.add_metric(key, float(v.confidence))
            for family, value in ((speedup, v.expected_speedup), (length, v.acceptance_length),
                                  (break_even, v.break_even_length), (crossover, v.crossover_concurrency),
                                  (running, v.running)):
                if _finite(value):
                    family.add_metric(key, float(value))  # type: ignore[arg-type]
            evidence = v.details.get("evidence")
            if evidence is not None and _finite(v.expected_speedup) and v.expected_speedup > 0:
                low, high = perf.evidence_interval(v.expected_speedup, evidence.error)
                interval.add_metric(key + ["low"], low)
                interval.add_metric(key + ["high"], high)
            figures = state.window.total if state.window is not None else None
            acc = figures.acceptance if figures is not None else None
            if acc is not None and _finite(acc.acceptance_rate):
                rate.add_metric(key, float(acc.acceptance_rate))  # type: ignore[arg-type]
            for s in BOUND_STATES:
                bound.add_metric(key + [s], 1.0 if v.bound.state == s else 0.0)
            for sig in v.bound.signals:
                if _finite(sig.value):
                    signal.add_metric(key + [sig.name, sig.state], float(sig.value))  # type: ignore[arg-type]
            raised = set(v.flags)
            stalled.add_metric(key, 1.0 if "engine_stalled" in raised else 0.0)
            for f in sorted(set(KNOWN_FLAGS) | raised):
                flag.add_metric(key + [f], 1.0 if f in raised else 0.0)
        yield from (target_up, verdict, configured, change, confidence, speedup, interval, length, rate, break_even,
                    crossover, running, bound, signal, flag, spec_info, stalled, target_info)

    @staticmethod
    def _health(node: str, frame: ExportFrame) -> Iterable[Metric]:
        slo, goodput, toggled = gauge(schema.SLO), gauge(schema.GOODPUT), gauge(schema.GOODPUT_IF_TOGGLED)
        latency, finish, io_ratio = gauge(schema.LATENCY), gauge(schema.FINISH_REASON), gauge(schema.INPUT_OUTPUT)
        heavy_share = gauge(schema.PREFILL_HEAVY_SHARE)
        # the load the node carried: the traffic block's figures, under their series
        carried = ((gauge(schema.REQUEST_RATE), "requests_per_s"), (gauge(schema.PREEMPTION_RATE), "preemptions_per_s"),
                   (gauge(schema.PREFIX_CACHE_HIT), "prefix_cache_hit_rate"),
                   (gauge(schema.KV_CAPACITY), "kv_capacity_tokens"))
        energy, energy_toggled, gpu_energy = gauge(schema.ENERGY_PER_TOKEN), gauge(schema.ENERGY_IF_TOGGLED), \
            gauge(schema.GPU_ENERGY_PER_TOKEN)
        for kind, value in zip(("ttft", "tpot"), frame.slo):
            if _finite(value):
                slo.add_metric([node, kind], float(value))  # type: ignore[arg-type]
        gpu_names = {g.index: g.name for g in frame.snapshot.gpus} if frame.snapshot is not None else {}
        node_energy = None
        for url, block in sorted(frame.health.items()):
            key = [node, public_url(url)]
            g = block.get("goodput")
            if g is not None:
                for bound in ("low", "high"):
                    if _finite(g[f"share_{bound}"]):
                        goodput.add_metric(key + [bound], float(g[f"share_{bound}"]))
                    if _finite(g[f"share_{bound}_if_toggled"]):
                        toggled.add_metric(key + [bound], float(g[f"share_{bound}_if_toggled"]))
            for phase, row in block["latency"].items():
                for q, quantile in (("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99")):
                    if _finite(row[f"{q}_s"]):
                        latency.add_metric(key + [phase, quantile], float(row[f"{q}_s"]))
            finished = sum(block["finish_reasons"].values())
            for reason, count in block["finish_reasons"].items():
                finish.add_metric(key + [reason], count / finished)
            shape = block["request_shape"]
            if shape is not None and _finite(shape["input_output_ratio"]):
                io_ratio.add_metric(key, float(shape["input_output_ratio"]))
            for bound in ("low", "high"):
                value = shape.get(f"prefill_heavy_share_{bound}") if shape is not None else None
                if _finite(value):
                    heavy_share.add_metric(key + [bound], float(value))
            for family, figure in carried:
                value = (block.get("traffic") or {}).get(figure)
                if _finite(value):
                    family.add_metric(key, float(value))
            e = block["energy"]
            if e is not None:
                node_energy = e  # the node's GPUs over the node's tokens: the same for every target
                if _finite(e["joules_per_token_if_toggled"]):
                    energy_toggled.add_metric(key, float(e["joules_per_token_if_toggled"]))
        if node_energy is not None:
            if _finite(node_energy["joules_per_token"]):
                energy.add_metric([node], float(node_energy["joules_per_token"]))
            for gpu in node_energy["gpus"]:
                if _finite(gpu["joules_per_token"]):
                    gpu_energy.add_metric([node, str(gpu["index"]), gpu_names.get(gpu["index"], "unknown")],
                                          float(gpu["joules_per_token"]))
        yield from (slo, goodput, toggled, latency, finish, io_ratio, heavy_share, *(f for f, _ in carried), energy,
                    energy_toggled, gpu_energy)

    @staticmethod
    def _gpus(node: str, snapshot: Snapshot | None) -> Iterable[Metric]:
        dram, tensor, sm, lost = gauge(schema.GPU_DRAM), gauge(schema.GPU_TENSOR), gauge(schema.GPU_SM), \
            gauge(schema.GPU_LOST)
        for gpu in snapshot.gpus if snapshot is not None else ():
            key = [node, str(gpu.index), gpu.name]
            lost.add_metric(key, 1.0 if gpu.lost else 0.0)
            if gpu.lost:
                continue  # a lost GPU's last readings are not current: leave them absent
            for family, name in ((dram, "dram_bw_util"), (tensor, "tensor_active"), (sm, "sm_active")):
                value = gpu.values.get(name)
                if _finite(value):
                    family.add_metric(key, float(value))  # type: ignore[arg-type]
        yield from (dram, tensor, sm, lost)

    @staticmethod
    def _sources(node: str, frame: ExportFrame) -> Iterable[Metric]:
        up, last = gauge(schema.SOURCE_UP), gauge(schema.SOURCE_LAST_SUCCESS)
        snapshot = frame.snapshot
        if snapshot is not None:
            for target in snapshot.targets:
                name = f"vllm {public_url(target.url)}"
                up.add_metric([node, name, "vllm", target.state], 1.0 if target.ok else 0.0)
            for status in snapshot.sources:
                name = public_source_name(status.name)
                healthy = status.state == "ok" or status.state in NOT_CONFIGURED_STATES
                up.add_metric([node, name, name.split(" ")[0], status.state], 1.0 if healthy else 0.0)
        for name, when in sorted(frame.last_success.items()):
            last.add_metric([node, name], when)
        yield from (up, last)


class ExportAgent:
    """Reads a source, feeds a Monitor, and publishes an ExportFrame after every poll."""

    def __init__(self, source: Any, monitor: Monitor, node: str, mode: str,
                 clock: Callable[[], float] = time.time, freeze_heap: bool = False) -> None:
        self.source = source  # a SnapshotSource
        self.monitor = monitor
        self._clock = clock
        # after the first poll, start-up's objects leave the cyclic collector's walks (specwatch.heap)
        self.freeze_heap = freeze_heap
        self._frame = ExportFrame(node=node, mode=mode)
        self.polls = 0
        # /healthz: the monotonic time the poll loop last made progress (started, or finished a poll)
        self._progress_at = time.monotonic()
        self.stuck_after_s = STUCK_AFTER_S

    @property
    def frame(self) -> ExportFrame:
        return self._frame

    def alive(self) -> bool:
        """False once the poll loop has made no progress for stuck_after_s: every read is bounded by
        the sources' timeouts, so a loop silent that long is wedged, and a liveness probe should
        restart it."""
        return time.monotonic() - self._progress_at < self.stuck_after_s

    def ingest(self, snapshot: Snapshot, poll_seconds: float | None = None) -> ExportFrame:
        self.monitor.ingest(snapshot)
        now = self._clock()
        last_success = dict(self._frame.last_success)
        for target in snapshot.targets:
            if target.ok:
                last_success[f"vllm {public_url(target.url)}"] = now
        for status in snapshot.sources:
            if status.state == "ok":
                last_success[public_source_name(status.name)] = now
        speculation = {}
        for target in snapshot.targets:
            advisor = self.monitor.advisor_of(target.url)
            judged = advisor.speculation if advisor is not None else None
            speculation[target.url] = judged if judged is not None else target.speculation
        states = self.monitor.states
        config = self.monitor.advisor_config
        slo = (config.slo_ttft_s, config.slo_tpot_s)
        # the window as of this Snapshot (a state keeps the window of its last shown verdict)
        window = self.monitor.window
        gpu_joules, _ = window.gpu_energy()
        windows = {url: window.target(url) for url in states}
        tokens = node_output_tokens(tw.increases for tw in windows.values() if tw is not None)
        health = {
            url: health_report(tw.increases, tw.seconds, gpu_joules, slo[0], slo[1],
                               states[url].verdict.configured, states[url].verdict.expected_speedup, tokens,
                               kv_capacity_tokens=tw.total.kv_capacity_tokens if tw.total else None)
            for url, tw in windows.items() if tw is not None
        }
        frame = ExportFrame(node=self._frame.node, mode=self._frame.mode, snapshot=snapshot,
                            states=states, received_at=now, poll_seconds=poll_seconds,
                            last_success=last_success, speculation=speculation, health=health, slo=slo)
        self._frame = frame  # one assignment: the scrape thread sees the old frame or the new one
        self.polls += 1
        self._progress_at = time.monotonic()
        return frame

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        """Poll until `stop` is set or the source ends. The next poll is armed only once this one
        has completed, `interval_s` after it started (at once if it took longer)."""
        self._progress_at = time.monotonic()
        self.stuck_after_s = max(STUCK_AFTER_S, 10 * interval_s)
        while not stop.is_set():
            started = time.monotonic()
            read = asyncio.ensure_future(self.source.read())
            stopping = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({read, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if read not in done:
                read.cancel()
                break
            stopping.cancel()
            snapshot = read.result()
            if snapshot is None:
                break  # a replay played out (a looped one never does)
            # a replay's read waits out the recorded gap, so its duration says nothing about the cost
            self.ingest(snapshot, time.monotonic() - started if self._frame.mode == "live" else None)
            if self.polls == 1 and self.freeze_heap:
                from specwatch.heap import freeze_start_up_objects

                freeze_start_up_objects()  # start-up's objects out of the collector's walks (specwatch.heap)
            delay = interval_s - (time.monotonic() - started)
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass


def node_name(given: str | None) -> str:
    return given or socket.gethostname()


def build_registry(agent: ExportAgent, process_metrics: bool = True) -> CollectorRegistry:
    """A registry holding only specwatch's collector (and process_* for the agent's own cost)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector(lambda: agent.frame))
    if process_metrics:
        from prometheus_client import ProcessCollector

        ProcessCollector(registry=registry)
    return registry


def serve(registry: CollectorRegistry, host: str, port: int, gate: Any = None,
          alive: Callable[[], bool] = lambda: True) -> tuple[Any, threading.Thread]:
    """Start the agent's HTTP server (specwatch.outputs.agent_http) in a daemon thread; returns
    (server, thread). `gate` is a WebGate holding the web configuration (TLS, basic auth), None for
    plain HTTP.

    Raises OSError when the address cannot be bound (in use, not local)."""
    from specwatch.outputs.agent_http import start_agent_server

    return start_agent_server(registry, host, port, gate=gate, alive=alive)


def known_configuration(state: Any) -> bool | None:
    """Whether speculation is configured on a target (a Monitor's TargetState), as far as its readings
    tell: the verdict's word once it judged, else the spec-decode families of the readings it has
    (one reading shows them, before any rate can be judged); None before any reading. A verdict that
    could not judge yet says False by default, which is not "not configured"."""
    verdict = state.verdict
    if verdict.speculation != "unknown" or verdict.configured:
        return bool(verdict.configured)
    window = getattr(state, "window", None)
    return bool(window.speculation_configured) if window is not None else None
