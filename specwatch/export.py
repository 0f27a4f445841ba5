"""`specwatch export`: the verdict as Prometheus metrics, from a small headless agent on each node.

    Source (live | replay) ──Snapshot──▶ Monitor ──▶ ExportFrame ──(at scrape time)──▶ specwatch_* metrics

The agent polls its source in an asyncio loop, re-arming the poll only after the previous one
completed (a slow vLLM never piles up requests), feeds the same Monitor every front end uses, and
publishes one immutable ExportFrame per poll. prometheus_client's HTTP server runs in its own
thread and calls SpecwatchCollector.collect() on each scrape, which renders the latest frame: the
frame is replaced by a single assignment, so a scrape always sees one whole poll, never half of one.

Metric names follow the Prometheus conventions: base units in the suffix (`_seconds`, `_ratio` for
0..1 fractions and for the speedup, `_tokens`, `_requests`), `_info` for constant-1 label carriers,
and state sets as one series per state with the current one at 1 (so `== 1` alerts never see a
missing series flip to another label). Every series carries `node` (the hostname, or --node);
per-target series carry `target` (the vLLM base URL, credentials and query stripped).

The exporter never exports anything the operator did not want to leave the node: URLs lose their
user-info and query string, and the bearer token is held only by the vLLM client.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import urlsplit, urlunsplit

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from specwatch import __version__
from specwatch.monitor import Monitor, TargetState
from specwatch.snapshot import Snapshot

DEFAULT_LISTEN = "127.0.0.1:9464"
VERDICT_STATES = ("on", "off", "hold", "unknown")
BOUND_STATES = ("memory", "compute", "balanced", "unknown")
# Flags exported as 0/1 even when clear, so alert rules and dashboards always find the series.
KNOWN_FLAGS = ("misaligned_draft", "prefill_tax", "ttft_rising", "extrapolated", "stale_acceptance",
               "method_assumed", "engine_stalled")
# Source states that mean "not configured here" rather than "failing": a dcgm-exporter probed
# quietly and not found, NVML turned off by a flag. They are exported with up=1 so that a node
# without dcgm-exporter does not page anyone; the state label still says what happened.
NOT_CONFIGURED_STATES = ("absent", "off")


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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere: treat it as remote


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
    """A URL safe to put in a label: no user-info (user:password@), no query string, no fragment."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "invalid-url"
    if not parts.scheme:
        return url.split("@")[-1].split("?")[0]
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


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


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


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
        yield from self._gpus(node, frame.snapshot)
        yield from self._sources(node, frame)

    # -- families ---------------------------------------------------------------------------------

    @staticmethod
    def _agent(frame: ExportFrame) -> Iterable[Metric]:
        info = InfoMetricFamily("specwatch_agent", "The export agent: its version and where it reads from.",
                                labels=["node"])
        info.add_metric([frame.node], {"version": __version__, "mode": frame.mode})
        yield info
        last = GaugeMetricFamily("specwatch_last_snapshot_timestamp_seconds",
                                 "Agent wall-clock time when the last Snapshot arrived (unix seconds).",
                                 labels=["node"])
        data = GaugeMetricFamily("specwatch_data_timestamp_seconds",
                                 "The last Snapshot's own time (unix seconds; a replay's recorded time).",
                                 labels=["node"])
        poll = GaugeMetricFamily("specwatch_poll_duration_seconds", "How long the last poll of the sources took.",
                                 labels=["node"])
        if frame.received_at is not None:
            last.add_metric([frame.node], frame.received_at)
        if frame.snapshot is not None:
            data.add_metric([frame.node], frame.snapshot.time)
        if _finite(frame.poll_seconds):
            poll.add_metric([frame.node], float(frame.poll_seconds))  # type: ignore[arg-type]
        yield from (last, data, poll)

    @staticmethod
    def _targets(node: str, frame: ExportFrame) -> Iterable[Metric]:
        labels = ["node", "target"]

        def gauge(name: str, doc: str, extra: Iterable[str] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels + list(extra))

        verdict = gauge("specwatch_verdict", "The speculation verdict: 1 for the current state, 0 for the others.",
                        ["state"])
        configured = gauge("specwatch_speculation_configured", "1 if the server runs speculative decoding.")
        change = gauge("specwatch_change_recommended",
                       "1 if a change is recommended (configured but costing, or off but it would pay).")
        confidence = gauge("specwatch_confidence_ratio", "Confidence in the verdict, 0..1.")
        speedup = gauge("specwatch_expected_speedup_ratio",
                        "Expected throughput with speculation over without, at this load (>1 pays).")
        length = gauge("specwatch_acceptance_length_tokens",
                       "Mean acceptance length L: tokens committed per verify step, bonus included.")
        rate = gauge("specwatch_acceptance_rate_ratio", "Accepted draft tokens over draft tokens in the window.")
        break_even = gauge("specwatch_break_even_length_tokens",
                           "Acceptance length above which speculation pays at this load (or would, if off).")
        crossover = gauge("specwatch_crossover_concurrency_requests",
                          "Running requests above which speculation stops paying (absent: it never crosses).")
        running = gauge("specwatch_running_requests", "Requests running on the target.")
        bound = gauge("specwatch_bound", "Roofline bound state: 1 for the current state.", ["state"])
        signal = gauge("specwatch_bound_signal", "Value behind one bound signal, labelled with what it says.",
                       ["signal", "state"])
        flag = gauge("specwatch_flag", "Advisor flags (misaligned_draft, prefill_tax, ...): 1 when raised.",
                     ["flag"])
        stalled = gauge("specwatch_engine_stalled",
                        "1 if requests ran through the whole window and the engine emitted no token and ran "
                        "no step: the server answers, its engine does not advance.")
        for url, state in sorted(frame.states.items()):
            target = public_url(url)
            v = state.verdict
            key = [node, target]
            for s in VERDICT_STATES:
                verdict.add_metric(key + [s], 1.0 if v.speculation == s else 0.0)
            configured.add_metric(key, 1.0 if v.configured else 0.0)
            change.add_metric(key, 1.0 if v.change_recommended else 0.0)
            confidence.add_metric(key, float(v.confidence))
            for family, value in ((speedup, v.expected_speedup), (length, v.acceptance_length),
                                  (break_even, v.break_even_length), (crossover, v.crossover_concurrency),
                                  (running, v.running)):
                if _finite(value):
                    family.add_metric(key, float(value))  # type: ignore[arg-type]
            figures = state.window.total if state.window is not None else None
            acc = figures.acceptance if figures is not None else None
            if acc is not None and _finite(acc.acceptance_rate):
                rate.add_metric(key, float(acc.acceptance_rate))  # type: ignore[arg-type]
            bound_state = (v.bound or {}).get("state", "unknown")
            for s in BOUND_STATES:
                bound.add_metric(key + [s], 1.0 if bound_state == s else 0.0)
            for sig in (v.bound or {}).get("signals", ()):
                if _finite(sig.get("value")):
                    signal.add_metric(key + [str(sig.get("name")), str(sig.get("state"))], float(sig["value"]))
            raised = set(v.flags)
            stalled.add_metric(key, 1.0 if "engine_stalled" in raised else 0.0)
            for f in sorted(set(KNOWN_FLAGS) | raised):
                flag.add_metric(key + [f], 1.0 if f in raised else 0.0)
        yield from (verdict, configured, change, confidence, speedup, length, rate, break_even, crossover,
                    running, bound, signal, flag, stalled)

    @staticmethod
    def _gpus(node: str, snapshot: Snapshot | None) -> Iterable[Metric]:
        labels = ["node", "gpu", "name"]
        dram = GaugeMetricFamily("specwatch_gpu_dram_active_ratio",
                                 "DRAM bandwidth utilisation, 0..1 (GPM or DCGM_FI_PROF_DRAM_ACTIVE).", labels=labels)
        tensor = GaugeMetricFamily("specwatch_gpu_tensor_active_ratio",
                                   "Tensor pipe activity, 0..1 (GPM or DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).",
                                   labels=labels)
        sm = GaugeMetricFamily("specwatch_gpu_sm_active_ratio", "SM activity, 0..1.", labels=labels)
        lost = GaugeMetricFamily("specwatch_gpu_lost", "1 if the GPU fell off the bus or stopped answering.",
                                 labels=labels)
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
        up = GaugeMetricFamily("specwatch_source_up",
                               "1 if the agent's last reading of this source succeeded (or the source is not "
                               "configured here: see state), 0 if it failed; state says how.",
                               labels=["node", "source", "kind", "state"])
        last = GaugeMetricFamily("specwatch_source_last_success_timestamp_seconds",
                                 "Agent wall-clock time of this source's last successful reading.",
                                 labels=["node", "source"])
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
                 clock: Callable[[], float] = time.time) -> None:
        self.source = source  # a SnapshotSource
        self.monitor = monitor
        self._clock = clock
        self._frame = ExportFrame(node=node, mode=mode)
        self.polls = 0

    @property
    def frame(self) -> ExportFrame:
        return self._frame

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
        frame = ExportFrame(node=self._frame.node, mode=self._frame.mode, snapshot=snapshot,
                            states=self.monitor.states, received_at=now, poll_seconds=poll_seconds,
                            last_success=last_success)
        self._frame = frame  # one assignment: the scrape thread sees the old frame or the new one
        self.polls += 1
        return frame

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        """Poll until `stop` is set or the source ends. The next poll is armed only once this one
        has completed, `interval_s` after it started (at once if it took longer)."""
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


def serve(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Start prometheus_client's HTTP server in a daemon thread; returns (server, thread).

    Raises OSError when the address cannot be bound (in use, not local)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=host, registry=registry)
