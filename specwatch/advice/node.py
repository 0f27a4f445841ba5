"""An evaluation's first step: the node the window was read from. Which GPU the advisor reasons
about (the datasheet spec read from NVML or DCGM names, or told; a MIG slice's share of its parent;
the clock a power or thermal cap holds it to), what the engine runs on, its token budget per step,
the weights' format and how the model is laid out: each from the server's own word first, then the
operator's flags, then what the host shows. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from specwatch import perf
from specwatch.perf.hardware import GpuSpec, lookup, scale_for_clock, scale_to_mig
from specwatch.telemetry.gpu_events import is_performance_limited
from specwatch.telemetry.snapshot import (FROM_SERVER_INFO, GpuSample, SourceStatus, TargetSample, inferred_device,
                                          resolve_device)
from specwatch.advice.token_budget import TokenBudget, resolve_token_budget, vllm_default_token_budget

_UNSEEN = object()


def throttled_spec(spec: GpuSpec, gpu: GpuSample) -> GpuSpec:
    """The spec at the clock the GPU runs at, when a power or thermal cap holds it down.

    An idle GPU also runs slow clocks, but for want of work, not because it is capped: only capped
    clocks move the ridge. The factor is rounded to 5 % so that clock jitter does not refit the
    step-time model on every update.
    """
    current, maximum = gpu.values.get("sm_clock_mhz"), gpu.values.get("sm_clock_max_mhz")
    if current is None or not maximum or not is_performance_limited(gpu.throttle_reasons):
        return spec
    factor = min(1.0, max(0.05, round(current / maximum / 0.05) * 0.05))
    return scale_for_clock(spec, factor * maximum, maximum)


class GpuIdentity:
    """One advisor's GPU: the spec told (`--gpu`), else the first GPU read whose name the datasheets
    know, at its capped clock, or a MIG slice's share of its parent. Lookups are kept by name."""

    def __init__(self, told: GpuSpec | None = None) -> None:
        self.told = told  # overrides the GPU read from NVML/DCGM
        self._by_name: dict[Any, Any] = {}
        # The GPU spec of the current update (see identify), carried on its Verdict.
        self.in_use: GpuSpec | None = None
        self.mig_unscaled: GpuSample | None = None  # a MIG slice found whose share NVML did not give

    def identify(self, gpus: Sequence[GpuSample]) -> GpuSpec | None:
        """The GPU this update reasons about; also remembered (`in_use`) for the Verdict it produces."""
        self.in_use = self._find(gpus)
        return self.in_use

    def _find(self, gpus: Sequence[GpuSample]) -> GpuSpec | None:
        self.mig_unscaled = None
        if self.told is not None:
            return self.told
        # A GPU in MIG mode runs nothing itself: its MIG devices do, and the one running processes
        # is the likelier home of the engine. Whole GPUs first, as before MIG was read.
        candidates = [g for g in gpus if not g.lost and not g.mig_mode]
        if any(g.mig is not None for g in candidates):  # without MIG devices the order stands as read
            candidates.sort(key=lambda g: (g.mig is not None, g.mig is not None and not g.processes))
        for g in candidates:
            if g.mig is not None:
                spec = self._mig_spec(g)
                if spec is not None:
                    return spec
                continue
            spec = self._by_name.get(g.name, _UNSEEN)
            if spec is _UNSEEN:
                spec = self._by_name[g.name] = lookup(g.name)  # a pure function of the name
            if spec is not None:
                return throttled_spec(spec, g)
        return None

    def _mig_spec(self, g: GpuSample) -> GpuSpec | None:
        """A MIG slice's roofs: its parent's, identified by the parent's name, scaled by the slice's
        share of SMs and of memory. Without a share from NVML there is nothing to scale by: None,
        and the verdict says the shape is assumed (`mig_unscaled`)."""
        mig = g.mig
        assert mig is not None
        key = (mig.parent_name, mig.profile, mig.sm_fraction, mig.memory_fraction)
        spec = self._by_name.get(key, _UNSEEN)
        if spec is _UNSEEN:
            parent = lookup(mig.parent_name)
            spec = None
            if parent is not None and mig.sm_fraction and mig.memory_fraction:
                spec = scale_to_mig(parent, mig.sm_fraction, mig.memory_fraction, mig.profile)
            self._by_name[key] = spec
        if spec is None and self.mig_unscaled is None and lookup(mig.parent_name) is not None:
            self.mig_unscaled = g
        return spec


@dataclass(frozen=True, slots=True)
class Node:
    """What an evaluation knows of the node before it prices a step."""

    gpu: GpuSpec | None  # None: no GPU identified (or a CPU engine)
    mig_unscaled: GpuSample | None  # a MIG slice whose share of its GPU NVML did not give (gpu is None)
    # what the engine runs on and where that was said (snapshot.resolve_device): (None, None) unsaid
    device: tuple[str | None, str | None]
    budget: TokenBudget
    weights: tuple[str, str]  # the format priced, and where it came from
    layout: tuple[int, int | None, bool]  # tp, ep, dp_attention

    @property
    def cpu_engine(self) -> bool:
        return _cpu_engine(self.gpu, self.device)


def _cpu_engine(gpu: GpuSpec | None, device: tuple[str | None, str | None]) -> bool:
    """An engine that says it runs on the CPU has a known shape where no GPU is identified; so has a
    loopback server on a host with no NVIDIA driver, which no GPU's roofline may price."""
    return gpu is None and device[0] == "cpu"


@dataclass(frozen=True, slots=True)
class ToldOfNode:
    """The operator's word on the node (the advisor's config), which the server's own word overrides."""

    device: str | None = None
    token_budget: int | None = None
    weights: tuple[str, str] = ("bf16", "default")
    layout: tuple[int, int | None, bool] = (1, None, False)


def identify_node(identity: GpuIdentity, target: TargetSample, gpus: Sequence[GpuSample],
                  sources: Sequence[SourceStatus], told: ToldOfNode) -> Node:
    """The node this evaluation reads: `identity.identify` moves the GPU in use (carried on the verdict)."""
    gpu = identity.identify(gpus)
    device = resolve_device(target.device, told.device, inferred_device(target.url, sources, gpus))
    # vLLM's default budget where the hardware is known and neither the server nor the flag says it
    default_budget = vllm_default_token_budget(gpu, target.version) if target.engine_name == "vllm" \
        and (gpu is not None or _cpu_engine(gpu, device)) else None
    # the weights' format the server says it serves (its /server_info) wins, as its device does (a
    # recording's word that no law prices is not taken); and how it says it lays the model out
    weights = (target.weights, FROM_SERVER_INFO) if target.weights in perf.WEIGHT_FORMATS else told.weights
    parallel = target.parallel
    layout = (parallel.tp, parallel.ep, parallel.dp_attention) if parallel is not None else told.layout
    return Node(gpu, identity.mig_unscaled if gpu is None else None, device,
                resolve_token_budget(target, told.token_budget, default_budget), weights, layout)
