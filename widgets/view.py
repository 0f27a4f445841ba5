"""What the panels render: one immutable DashboardView per refresh, and the bounded history behind
the trend charts.

The app builds a DashboardView from the Monitor's states after each poll; panels get it and derive
their text from it alone. Nothing here does I/O or reads a clock: times are the Snapshots' own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable

from specwatch.perf.hardware import GpuSpec
from specwatch.advice.monitor import TargetState, VerdictChange
from specwatch.readings.figures import engine_figures, lifetime_increases
from specwatch.telemetry.snapshot import EngineSample, GpuSample, Snapshot, SourceStatus, SpeculationConfig, TargetSample
from specwatch.readings.window import EngineFigures

# The trend series, in the order the trends panel draws them: (key, label, unit words).
SERIES = (
    ("running", "running", "concurrency"),
    ("tokens_per_s", "tokens/s", "generated"),
    ("tpot_s", "TPOT", "mean"),
    ("acceptance_length", "L", "accept len"),
    ("expected_speedup", "speedup", "expected"),
    ("dram", "DRAM", "bandwidth"),
    ("tensor", "tensor", "activity"),
)


@dataclass(frozen=True)
class TargetEvent:
    """Something that happened to a target besides a verdict change (a server restart), for the
    event log: its data time, the target, and what happened in words."""

    time: float
    url: str
    words: str


@dataclass(frozen=True)
class SourceInfo:
    """The header's account of where the data come from."""

    kind: str  # LIVE, REPLAY, PROMETHEUS
    description: str
    synthetic: bool = False
    paused: bool = False
    ended: bool = False
    interval_s: float = 1.0
    replay_speed: float | None = None
    recording: str | None = None  # the path being recorded to
    recording_stopped: str | None = None  # why the last recording failed (until another starts)


@dataclass(frozen=True)
class SweepMarker:
    """The measured crossover of a `specwatch sweep` run, shown against the live concurrency, with
    the 95 % interval of the tokens/s crossing where the sweep had rounds enough to give one."""

    throughput_crossing: float | None
    tpot_crossing: float | None
    label: str = "sweep"
    throughput_low: float | None = None  # None: no interval, or its end lies outside the tiers
    throughput_high: float | None = None

    @classmethod
    def from_results(cls, results: Any) -> SweepMarker | None:
        """From the specwatch.sweep/2 (or /1) JSON (a dict) or any object with a `crossing` mapping."""
        if results is None:
            return None
        if isinstance(results, SweepMarker):
            return results
        crossing = results.get("crossing") if isinstance(results, dict) else getattr(results, "crossing", None)
        if not isinstance(crossing, dict):
            return None

        def number(mapping: Any, key: str) -> float | None:
            value = mapping.get(key) if isinstance(mapping, dict) else None
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        interval = results.get("crossing_interval") if isinstance(results, dict) else None
        throughput = interval.get("throughput") if isinstance(interval, dict) else None
        return cls(number(crossing, "throughput"), number(crossing, "tpot"),
                   throughput_low=number(throughput, "low"), throughput_high=number(throughput, "high"))

    def crossing_text(self) -> str | None:
        """"sweep crossover 6 (95 % 4–8)"; an end outside the measured tiers shows as "?"."""
        if self.throughput_crossing is None:
            return None
        text = f"{self.label} crossover {self.throughput_crossing:.0f}"
        if self.throughput_low is not None or self.throughput_high is not None:
            low = "?" if self.throughput_low is None else f"{self.throughput_low:.0f}"
            high = "?" if self.throughput_high is None else f"{self.throughput_high:.0f}"
            text += f" (95 % {low}–{high})"
        return text


class History:
    """The last `minutes` of each trend series for one target (or the node's GPUs), by data time."""

    def __init__(self, minutes: float = 10.0) -> None:
        self.seconds = minutes * 60.0
        self.series: dict[str, deque[tuple[float, float | None]]] = {key: deque() for key, _, _ in SERIES}
        self.latest_time: float | None = None

    def add(self, time: float, values: dict[str, float | None]) -> None:
        if self.latest_time is not None and time < self.latest_time:
            # a replay seek or a clock step backwards: start over rather than mix timelines
            for points in self.series.values():
                points.clear()
        self.latest_time = time
        horizon = time - self.seconds
        for key, value in values.items():
            points = self.series.setdefault(key, deque())
            points.append((time, value))
            while points and points[0][0] < horizon:
                points.popleft()

    def points(self, key: str) -> tuple[tuple[float, float | None], ...]:
        return tuple(self.series.get(key, ()))


def mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def gpu_means(gpus: Iterable[GpuSample]) -> dict[str, float | None]:
    live = [g for g in gpus if not g.lost]
    return {
        "dram": mean(g.get("dram_bw_util") for g in live),
        "tensor": mean(g.get("tensor_active") for g in live),
    }


def trend_values(state: TargetState | None, gpus: Iterable[GpuSample]) -> dict[str, float | None]:
    """One history row for a target: the figures its trend charts follow."""
    figures = state.window.total if state is not None and state.window is not None else None
    acc = figures.acceptance if figures is not None else None
    values: dict[str, float | None] = {
        "running": figures.running if figures else None,
        "tokens_per_s": figures.generation_tokens_per_s if figures else None,
        "tpot_s": figures.tpot_mean_s if figures else None,
        "acceptance_length": acc.acceptance_length if acc else None,
        "expected_speedup": state.verdict.expected_speedup if state is not None else None,
    }
    values |= gpu_means(gpus)
    return values


@dataclass(frozen=True)
class DashboardView:
    """Everything the panels show for the selected target and engine, at one data time."""

    source: SourceInfo
    time: float | None = None
    target_urls: tuple[str, ...] = ()
    target_index: int = 0
    state: TargetState | None = None
    target: TargetSample | None = None
    engine_keys: tuple[str, ...] = ()
    engine: str | None = None  # None: all engines summed
    gpus: tuple[GpuSample, ...] = ()
    sources: tuple[SourceStatus, ...] = ()
    history: History | None = None
    events: tuple[VerdictChange | TargetEvent, ...] = ()  # newest first
    method: str | None = None  # what the operator told the advisor (--method)
    method_words: str | None = None  # that method as the reasons name it ("n-gram lookup", ...)
    # the advisor settings a replay took from its recording's header, not from a flag given now
    from_recording: frozenset[str] = frozenset()
    # the speculation config the verdict was judged with (the server's /server_info, else the flags)
    speculation: SpeculationConfig | None = None
    sweep: SweepMarker | None = None
    # The step time's knee the advisor reasoned with when no GPU is identified (fitted from the node's
    # steps, or assumed), with those words, and the k it judges a node without speculation at: the
    # advisor's own figures, so the panels draw what the reasons quote.
    knee_tokens: float | None = None
    knee_words: str = ""
    unconfigured_k: int | None = None
    window_s: float | None = None
    history_minutes: float = 10.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The selected target's health over the window (specwatch.readings.health.health_report): worked out when
    # a panel first reads it, since a poll whose Health tab is hidden needs only the goodput and
    # energy lines. Called with breakdown=False it gives those alone.
    health_report: Callable[[bool], dict | None] | None = field(default=None, repr=False, compare=False)
    # The selected target's health over time (data time): its last successful reading, and since
    # when it has failed after having been read (None while it answers, or if it never did).
    last_good: float | None = None
    down_since: float | None = None
    # The other targets of a multi-target watch that cannot be read now, by URL.
    others_down: tuple[str, ...] = ()
    # The GPU the operator told the advisor (--gpu, or a recording's header), which it reasons with
    # instead of any GPU read from NVML or DCGM; None: the GPU comes from the readings.
    gpu_told: GpuSpec | None = None

    @cached_property
    def health(self) -> dict | None:
        """The whole health block: latency breakdown, request shape, finish reasons, goodput, energy."""
        return self.health_report(True) if self.health_report is not None else None

    @cached_property
    def health_summary(self) -> dict | None:
        """The health block without its breakdown: goodput and energy (the overview's two lines)."""
        if "health" in self.__dict__:  # the whole block is already worked out: it holds these
            return self.health
        return self.health_report(False) if self.health_report is not None else None

    @property
    def url(self) -> str | None:
        return self.target_urls[self.target_index] if self.target_urls else None

    @property
    def gpu_spec(self) -> GpuSpec | None:
        """The GPU the advisor reasoned about for this target (told, or read and scaled to a capped
        clock): the roofline's ridge and the verdict's bound state come from the same spec."""
        return self.state.verdict.gpu_spec if self.state is not None else None

    @property
    def figures(self) -> EngineFigures | None:
        """The selected engine's figures, or the target's total."""
        window = self.state.window if self.state is not None else None
        if window is None:
            return None
        if self.engine is not None:
            return window.engines.get(self.engine)
        return window.total

    @property
    def lifetime(self) -> EngineFigures | None:
        """Since the server started: the selected engine's own, or the target's total."""
        window = self.state.window if self.state is not None else None
        if window is None:
            return None
        if self.engine is None:
            return window.lifetime
        for e in window.latest_engines:
            if snapshot_engine_key(e) == self.engine:
                return engine_figures(lifetime_increases(e), [e.gauges])
        return None

    @property
    def model_name(self) -> str | None:
        if self.target is None:
            return None
        for e in self.target.engines:
            if e.model_name:
                return e.model_name
        return None

    @property
    def nothing_reachable(self) -> bool:
        """No target ever answered and no GPU was read: the screen should point to `specwatch demo`.
        A target that answered before and died is down, not "nothing to read"; so is a fleet's node
        (read through Prometheus or directly), which someone runs."""
        targets_down = self.target is None or not self.target.ok
        return self.source.kind == "LIVE" and targets_down and not self.gpus and self.last_good is None


def initial_view(source: SourceInfo) -> DashboardView:
    return DashboardView(source=source)


def snapshot_engine_keys(snapshot: Snapshot | None, url: str | None) -> tuple[str, ...]:
    """Engine keys as the Window names them (model/engine), for the engine selector."""
    if snapshot is None or url is None:
        return ()
    target = snapshot.target(url)
    if target is None:
        return ()
    return tuple(snapshot_engine_key(e) for e in target.engines)


def snapshot_engine_key(engine: EngineSample) -> str:
    """An engine's key as the Window names it (model/engine)."""
    return engine.engine if engine.model_name is None else f"{engine.model_name}/{engine.engine}"
