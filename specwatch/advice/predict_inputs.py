"""`specwatch predict`'s inputs: numbers as people write them, the target model (dense or MoE, from
the table or from --params), and whether its weights and one sequence's KV fit the GPUs at all.

Every function here raises PredictInputError with one line saying what to fix. No I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from specwatch.perf.hardware import ModelSpec, known_model_names, lookup_model

__all__ = [
    "PredictInputError",
    "parse_quantity",
    "Target",
    "check_routing",
    "resolve_target",
    "MemoryFit",
    "memory_fit",
    "TP_CHOICES",
]


class PredictInputError(ValueError):
    """Bad or inconsistent predict input; the message says what to fix."""


_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "kib": 1024.0, "mib": 1024.0**2, "gib": 1024.0**3}


def parse_quantity(text: Any, what: str) -> float:
    """A number as people write it: 70e9, 70B, 0.5b, 500M, 320KiB (B = billion, KiB = 1024 bytes)."""
    if isinstance(text, bool):
        raise PredictInputError(f"{what} must be a number, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
        if not match or match.group(2).lower() not in _SUFFIXES:
            raise PredictInputError(f"{what} must be a number (suffixes K, M, B, T, KiB, MiB, GiB allowed), got {text!r}")
        value = float(match.group(1)) * _SUFFIXES[match.group(2).lower()]
    if not math.isfinite(value):
        raise PredictInputError(f"{what} must be finite, got {text!r}")
    return value


def positive(value: Any, what: str) -> float:
    number = parse_quantity(value, what)
    if number <= 0:
        raise PredictInputError(f"{what} must be positive, got {value!r}")
    return number


def positive_int(value: Any, what: str) -> int:
    number = parse_quantity(value, what)
    if number < 1 or number != int(number):
        raise PredictInputError(f"{what} must be a whole number ≥ 1, got {value!r}")
    return int(number)


def non_negative(value: Any, what: str) -> float:
    number = parse_quantity(value, what)
    if number < 0:
        raise PredictInputError(f"{what} must be ≥ 0, got {value!r}")
    return number


def _billions(value: float) -> str:
    return f"{value / 1e9:.4g}B"


@dataclass(frozen=True)
class Target:
    """The served model as predict prices it."""

    name: str
    params: float
    active_params: float
    kv_bytes_per_token: float | None  # whole model, BF16; None: unknown
    layers: int | None
    hidden_size: int | None
    experts: int | None  # routed experts per MoE layer (None: dense reads)
    experts_per_token: int | None
    spec: ModelSpec | None
    # every tensor-parallel rank holds the whole KV cache (MLA's latent), rather than its share of the heads
    kv_replicated: bool = False

    @property
    def moe(self) -> bool:
        return self.experts is not None and self.experts_per_token is not None

    @property
    def moe_layers(self) -> int | None:
        """Layers that route over experts: the table's dense layers off the depth (None: not known)."""
        if not self.moe or self.layers is None:
            return None
        return self.layers - (self.spec.dense_layers if self.spec is not None else 0)

    @property
    def experts_unpriced(self) -> bool:
        """Fewer active than total params but no routing given: every weight is priced as read."""
        return not self.moe and self.active_params < self.params

    def kv_per_gpu(self, tp: int) -> float:
        """KV bytes per context token on one GPU of `tp` (0 when unknown)."""
        kv = self.kv_bytes_per_token or 0.0
        return kv if self.kv_replicated else kv / tp


def check_routing(experts: Any, experts_per_token: Any) -> tuple[int, int] | None:
    """(experts, experts per token) from both flags, None from neither; one line on anything else."""
    if experts is None and experts_per_token is None:
        return None
    if experts is None or experts_per_token is None:
        raise PredictInputError("give both --experts (routed experts per MoE layer) and --experts-per-token "
                                "(top-k routing), or neither")
    count = positive_int(experts, "--experts")
    top_k = positive_int(experts_per_token, "--experts-per-token")
    if top_k >= count:
        raise PredictInputError(f"--experts-per-token ({top_k}) must be below --experts ({count}): "
                                "a token that uses every expert is a dense model")
    return count, top_k


def resolve_target(model: str | ModelSpec | None, params: Any, active_params: Any, kv_bytes_per_token: Any,
                   experts: Any = None, experts_per_token: Any = None) -> Target:
    """The target from --model (the table; --active-params, --kv-bytes-per-token and the routing
    flags override it) or from --params (a custom model, MoE with --experts/--experts-per-token)."""
    if model is not None and params is not None:
        raise PredictInputError("give either --model or --params, not both")
    routing = check_routing(experts, experts_per_token)
    kv = None if kv_bytes_per_token is None else non_negative(kv_bytes_per_token, "KV bytes per token")
    if model is not None:
        spec = model if isinstance(model, ModelSpec) else lookup_model(str(model))
        if spec is None:
            raise PredictInputError(
                f"unknown model {model!r}; known models: {', '.join(known_model_names())} (or give --params)"
            )
        total, name, layers, hidden = spec.params, spec.name, spec.layers, spec.hidden_size
        active = spec.active_params if active_params is None else positive(active_params, "active params")
        kv = spec.kv_bytes_per_token if kv is None else kv
        count, top_k = routing if routing else (spec.experts, spec.experts_per_token)
        replicated = spec.kv_replicated_under_tp
    else:
        if params is None:
            raise PredictInputError(f"give --model (known: {', '.join(known_model_names())}) or --params")
        total = positive(params, "params")
        active = total if active_params is None else positive(active_params, "active params")
        name, layers, hidden, spec, replicated = f"{total / 1e9:g}B params", None, None, None, False
        count, top_k = routing if routing else (None, None)
    if active > total:
        raise PredictInputError(f"active params ({_billions(active)}) cannot exceed params ({_billions(total)})")
    if count is not None and top_k is not None:
        if not active < total:
            raise PredictInputError(f"an MoE target needs --active-params below its params ({_billions(total)}): "
                                    "the shared weights (a shared expert included) plus the top-k experts")
        if active < total * top_k / count:
            # shared + routed = total and shared + routed·k/E = active have no solution with shared ≥ 0
            raise PredictInputError(f"active params ({_billions(active)}) must be at least params × "
                                    f"experts-per-token / experts = {_billions(total * top_k / count)}: "
                                    f"{top_k} of {count} experts alone take that share of the weights")
    return Target(name, total, active, kv, layers, hidden, count, top_k, spec if model is not None else None,
                  replicated)


# Tensor-parallel degrees an engine runs (it must divide the attention heads): the smallest that
# fits is named when the GPUs asked for cannot hold the model.
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class MemoryFit:
    """Whether the weights and one sequence's KV fit each GPU's usable memory."""

    fits: bool
    usable_bytes: float  # memory × the share the engine takes for weights and KV
    weight_bytes: float  # per GPU, target and draft
    one_sequence_kv_bytes: float  # per GPU, at the context asked (at least one token)
    min_tp: int | None  # the smallest of TP_CHOICES that fits (None: none does)
    # Under expert parallelism: the smallest of EP_CHOICES whose share of the experts fits beside the
    # rest of the weights (min_tp is then None), and the degree asked
    min_ep: int | None = None
    ep: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {"fits": self.fits, "usable_bytes": self.usable_bytes, "weight_bytes_per_gpu": self.weight_bytes,
                "one_sequence_kv_bytes_per_gpu": self.one_sequence_kv_bytes, "min_tp": self.min_tp,
                "min_ep": self.min_ep}


# Expert-parallel degrees tried when the experts do not fit: one node to the large-scale EP
# deployments (SGLang's 96-GPU decode, DeepSeek's 144-GPU one).
EP_CHOICES = (2, 4, 8, 16, 32, 48, 64, 72, 96, 128, 144, 256)


def memory_fit(memory_bytes: float, utilisation: float, model_weight_bytes: float, target: Target,
               context_tokens: float, tp: int, expert_weight_bytes: float = 0.0,
               ep_gpus: int | None = None) -> MemoryFit:
    """Whether the whole model's weights (`model_weight_bytes`, target and draft, split across tp)
    and one sequence's KV at this context (split, or whole on every GPU where the cache is
    replicated) fit `utilisation` of each GPU's memory; the smallest tp that would, if not. Under
    expert parallelism (`ep_gpus`: the GPUs the routed experts, `expert_weight_bytes` of the whole,
    are spread over) the rest of the weights split across tp and the experts across those GPUs;
    the smallest such degree that would fit is named instead."""
    usable = memory_bytes * utilisation
    tokens = max(context_tokens, 1.0)
    kv = target.kv_per_gpu(tp) * tokens
    if ep_gpus is not None:
        def on_each(gpus: int) -> float:
            return (model_weight_bytes - expert_weight_bytes) / tp + expert_weight_bytes / gpus

        weights = on_each(ep_gpus)
        smallest_ep = next((g for g in EP_CHOICES if g % tp == 0 and on_each(g) + kv <= usable), None)
        return MemoryFit(weights + kv <= usable, usable, weights, kv, None, smallest_ep, ep_gpus)

    def need(degree: int) -> tuple[float, float]:
        return model_weight_bytes / degree, target.kv_per_gpu(degree) * tokens

    weights, kv = need(tp)
    smallest = next((degree for degree in TP_CHOICES if sum(need(degree)) <= usable), None)
    return MemoryFit(weights + kv <= usable, usable, weights, kv, smallest)
