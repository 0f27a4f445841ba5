"""`specwatch predict`: the verdict for a configuration with no live node (DESIGN §5).

It builds the datasheet step-time prior for the model on the GPU, prices the draft, and evaluates
the speedup at the given concurrency, the break-even acceptance length, the crossover concurrency
and the bound state, with reasons in plain words. No I/O beyond printing in `run_predict`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from specwatch import perf
from specwatch.hardware import (
    GpuSpec,
    ModelSpec,
    custom_gpu,
    known_gpu_names,
    known_model_names,
    lookup,
    lookup_model,
)

__all__ = ["PredictInputError", "predict", "add_predict_arguments", "run_predict", "parse_quantity"]

SCHEMA = "specwatch.predict/1"
# S within ±5 % of 1 is inside the hysteresis band: keep whatever is configured.
HYSTERESIS = 0.05
# Speedups this far from 1 (in log terms) survive the prior's typical level error (20–70 %).
CLEAR_MARGIN = math.log(1.5)
APPROXIMATE_PENALTY = 0.75  # approximate GPU figures (A10G)
MOE_PENALTY = 0.75  # uniform-routing expert bytes are a rough model
OVERSIZE_PENALTY = 0.5  # the weights do not fit: the configuration cannot run as given
MAX_BATCH = 1024.0

EXIT_NO_CHANGE = 0
EXIT_CHANGE = 1
EXIT_NOT_ENOUGH_DATA = 2
EXIT_BAD_INPUT = 3



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


def _positive(value: Any, what: str) -> float:
    number = parse_quantity(value, what)
    if number <= 0:
        raise PredictInputError(f"{what} must be positive, got {value!r}")
    return number


def _positive_int(value: Any, what: str) -> int:
    number = parse_quantity(value, what)
    if number < 1 or number != int(number):
        raise PredictInputError(f"{what} must be a whole number ≥ 1, got {value!r}")
    return int(number)


def _resolve_gpu(gpu: str | GpuSpec | None, peak_flops: Any, memory_bandwidth: Any) -> GpuSpec:
    if peak_flops is not None or memory_bandwidth is not None:
        if peak_flops is None or memory_bandwidth is None:
            raise PredictInputError("a custom GPU needs both --peak-flops and --memory-bandwidth")
        name = gpu.name if isinstance(gpu, GpuSpec) else (gpu or "custom")
        try:
            return custom_gpu(
                parse_quantity(peak_flops, "peak FLOP/s"), parse_quantity(memory_bandwidth, "memory bandwidth"), name=name
            )
        except ValueError as error:
            raise PredictInputError(str(error)) from None
    if isinstance(gpu, GpuSpec):
        return gpu
    if gpu is None or not str(gpu).strip():
        raise PredictInputError(f"--gpu is required; known GPUs: {', '.join(known_gpu_names())}")
    spec = lookup(str(gpu))
    if spec is None:
        raise PredictInputError(
            f"unknown GPU {gpu!r}; known GPUs: {', '.join(known_gpu_names())} "
            "(or give --peak-flops and --memory-bandwidth)"
        )
    return spec


@dataclass(frozen=True)
class _Target:
    name: str
    params: float
    active_params: float
    kv_bytes_per_token: float | None
    layers: int | None
    hidden_size: int | None
    experts: int | None
    experts_per_token: int | None
    spec: ModelSpec | None


def _resolve_target(
    model: str | ModelSpec | None, params: Any, active_params: Any, kv_bytes_per_token: Any
) -> _Target:
    if model is not None and params is not None:
        raise PredictInputError("give either --model or --params, not both")
    if model is not None:
        spec = model if isinstance(model, ModelSpec) else lookup_model(str(model))
        if spec is None:
            raise PredictInputError(
                f"unknown model {model!r}; known models: {', '.join(known_model_names())} (or give --params)"
            )
        kv = spec.kv_bytes_per_token if kv_bytes_per_token is None else parse_quantity(kv_bytes_per_token, "KV bytes per token")
        active = spec.active_params if active_params is None else _positive(active_params, "active params")
        return _Target(spec.name, spec.params, active, kv, spec.layers, spec.hidden_size, spec.experts,
                       spec.experts_per_token, spec)
    if params is None:
        raise PredictInputError(f"give --model (known: {', '.join(known_model_names())}) or --params")
    total = _positive(params, "params")
    active = total if active_params is None else _positive(active_params, "active params")
    if active > total:
        raise PredictInputError("active params cannot exceed params")
    kv = None if kv_bytes_per_token is None else parse_quantity(kv_bytes_per_token, "KV bytes per token")
    if kv is not None and kv < 0:
        raise PredictInputError("KV bytes per token must be ≥ 0")
    return _Target(f"{total / 1e9:g}B params", total, active, kv, None, None, None, None, None)


def _resolve_length(k: int, acceptance_length: Any, acceptance_rate: Any) -> float | None:
    if acceptance_length is not None and acceptance_rate is not None:
        raise PredictInputError("give either --acceptance-length or --acceptance-rate, not both")
    if acceptance_length is not None:
        length = parse_quantity(acceptance_length, "acceptance length")
        if length < 1 or length > k + 1:
            raise PredictInputError(
                f"acceptance length must be between 1 and k+1 = {k + 1} (it counts the bonus token), got {length:g}"
            )
        return length
    if acceptance_rate is not None:
        rate = parse_quantity(acceptance_rate, "acceptance rate")
        if rate > 1 and rate <= 100:
            raise PredictInputError(f"acceptance rate is a fraction 0..1, got {rate:g} (did you mean {rate / 100:g}?)")
        if not 0 <= rate <= 1:
            raise PredictInputError(f"acceptance rate must be between 0 and 1, got {rate:g}")
        return perf.length_from_rate(rate, k)
    return None


def _fmt(value: float) -> str:
    """Numbers for reasons: 2 decimals below 10, whole numbers above."""
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.0f}"


def predict(
    gpu: str | GpuSpec | None,
    *,
    model: str | ModelSpec | None = None,
    params: Any = None,
    active_params: Any = None,
    kv_bytes_per_token: Any = None,
    dtype: str = "bf16",
    tp: Any = 1,
    batch: Any = None,
    k: Any = None,
    acceptance_length: Any = None,
    acceptance_rate: Any = None,
    method: str | None = None,
    draft_params: Any = None,
    draft_ratio: Any = None,
    context: Any = None,
    peak_flops: Any = None,
    memory_bandwidth: Any = None,
) -> dict[str, Any]:
    """The verdict block for a configuration with no live node.

    `context` is the mean context length per sequence (prompt plus generated tokens so far); the
    batch's KV reads are batch × context tokens. Returns {schema, inputs, verdict, bound, details};
    `verdict` has the DESIGN §5 fields. Raises PredictInputError on bad input.
    """
    gpu_spec = _resolve_gpu(gpu, peak_flops, memory_bandwidth)
    target = _resolve_target(model, params, active_params, kv_bytes_per_token)
    if batch is None:
        raise PredictInputError("--batch (running sequences) is required")
    if k is None:
        raise PredictInputError("--k (draft tokens per step) is required")
    batch_size = _positive(batch, "batch")
    draft_k = _positive_int(k, "k")
    tp_degree = _positive_int(tp, "tp")
    dtype_name = (dtype or "bf16").lower()
    if dtype_name not in perf.WEIGHT_FORMATS:
        raise PredictInputError(f"unknown dtype {dtype!r}; known: {', '.join(perf.WEIGHT_FORMATS)}")
    context_per_sequence = 0.0 if context is None else parse_quantity(context, "context")
    if context_per_sequence < 0:
        raise PredictInputError("context must be ≥ 0 tokens")
    length = _resolve_length(draft_k, acceptance_length, acceptance_rate)

    if draft_params is not None and draft_ratio is not None:
        raise PredictInputError("give either --draft-params or --draft-ratio, not both")
    method_assumed = method is None
    if method is None:
        method = "draft" if draft_params is not None else "eagle"
    try:
        method_name = perf.canonical_method(method)
    except ValueError as error:
        raise PredictInputError(str(error)) from None
    if draft_params is not None and method_name != "draft":
        raise PredictInputError(f"--draft-params only applies to a draft model, not method {method!r}")
    ratio_override = None if draft_ratio is None else parse_quantity(draft_ratio, "draft ratio")
    if ratio_override is not None and ratio_override < 0:
        raise PredictInputError("draft ratio must be ≥ 0")
    draft_count = None if draft_params is None else _positive(draft_params, "draft params")
    if method_name == "draft" and draft_count is None and ratio_override is None:
        raise PredictInputError("a draft model needs --draft-params N or --draft-ratio R")
    try:
        cost = perf.draft_cost(method_name, draft_params=draft_count, target_params=target.params, override=ratio_override)
        prior = perf.datasheet_prior(
            gpu_spec,
            params=target.params,
            active_params=target.active_params,
            kv_bytes_per_token=target.kv_bytes_per_token or 0.0,
            tp=tp_degree,
            dtype=dtype_name,
            layers=target.layers,
            hidden_size=target.hidden_size,
            experts=target.experts,
            experts_per_token=target.experts_per_token,
        )
    except ValueError as error:
        raise PredictInputError(str(error)) from None

    r = cost.ratio
    tokens_per_step = batch_size * (draft_k + 1)
    knee = prior.knee_tokens
    plain_time = float(prior.step_time(batch_size, batch_size * context_per_sequence))
    verify_time = float(prior.step_time(tokens_per_step, batch_size * context_per_sequence))
    rho = verify_time / plain_time
    low_load_break_even = perf.break_even_length(draft_k, r)
    break_even_here = perf.break_even_length(draft_k, r, rho)
    kv_time = batch_size * context_per_sequence * prior.kv_bytes_per_token / prior.bandwidth
    kv_share = kv_time / plain_time
    bound = perf.combine_bound([perf.tokens_per_step_signal(tokens_per_step, knee)])
    method_words = perf.METHOD_WORDS[method_name]
    running = f"{batch_size:g} running"

    reasons: list[str] = []
    details: dict[str, Any] = {
        "low_load_break_even_length": low_load_break_even,
        "verify_ratio": rho,
        "tokens_per_step": tokens_per_step,
        "knee_tokens": knee,
        "ridge": gpu_spec.ridge_for(perf.WEIGHT_FORMATS[dtype_name][1]),
        "step_time_plain_s": plain_time,
        "step_time_verify_s": verify_time,
        "kv_share_of_plain_step": kv_share,
        "draft_ratio": r,
        "draft_ratio_basis": cost.basis,
        "step_time_model": prior.hinge().to_dict(),
    }

    # Load position: tokens per step against the knee, and what verification costs here.
    gpu_words = gpu_spec.name
    if tokens_per_step > knee:
        reasons.append(
            f"{running} × {draft_k + 1} tokens = {tokens_per_step:.0f} tokens per step, past the {gpu_words} knee of "
            f"about {knee:.0f}: verifying costs {rho:.2f}× a plain step, so break-even rises to {_fmt(break_even_here)}"
        )
    else:
        reasons.append(
            f"{running} × {draft_k + 1} tokens = {tokens_per_step:.0f} tokens per step, below the {gpu_words} knee of "
            f"about {knee:.0f}: verifying costs {rho:.2f}× a plain step"
        )

    expected: float | None = None
    crossover_value: float | None = None
    confidence: float
    if length is None:
        state = "unknown"
        confidence = 0.0
        reasons.insert(
            0,
            f"no acceptance given: an acceptance length above {_fmt(break_even_here)} would pay at {running} "
            f"for {method_words} with k={draft_k} (at most {draft_k + 1} is possible)",
        )
        details["required_acceptance_length"] = break_even_here
        details["crossover_state"] = None
        details["best_k"] = None
    else:
        expected = perf.speedup(prior, batch_size, draft_k, length, r, context_per_sequence)
        relation = "above" if length > break_even_here else "below"
        reasons.insert(
            0,
            f"acceptance length {_fmt(length)} is {relation} break-even {_fmt(break_even_here)} for {method_words} with "
            f"k={draft_k} at {running}" + (f" (1 + k·r = {_fmt(low_load_break_even)} at low load)" if abs(break_even_here - low_load_break_even) > 0.005 else ""),
        )
        reasons.append(f"expected speedup {expected:.2f}× at {running}")
        crossover = perf.crossover_concurrency(prior, draft_k, length, r, context_per_sequence, MAX_BATCH)
        crossover_value = crossover.concurrency
        details["crossover_state"] = crossover.state
        if crossover.state == "crosses":
            reasons.append(f"speculation stops paying above about {crossover.concurrency:.0f} running sequences")
        elif crossover.state == "never_pays":
            reasons.append("it does not pay even with a single running sequence")
        else:
            why = (
                f" (KV reads at {context_per_sequence:.0f} tokens of context keep the step memory-bound)"
                if context_per_sequence > 0
                else ""
            )
            reasons.append(f"it keeps paying up to {MAX_BATCH:.0f} running sequences{why}")
        choice = perf.best_k(prior, batch_size, r, context_per_sequence, length=length, k=draft_k)
        details["best_k"] = {"k": choice.k, "length": choice.length, "speedup": choice.speedup, "basis": "i.i.d. α"}
        if choice.k != draft_k and choice.speedup > expected * 1.02:
            if choice.k == 0:
                reasons.append("no shorter chain pays here either: turn speculation off at this load")
            else:
                reasons.append(
                    f"k={choice.k} would do better here: {choice.speedup:.2f}× (L ≈ {choice.length:.2f} from the i.i.d. α)"
                )
        if expected >= 1 + HYSTERESIS:
            state = "on"
        elif expected <= 1 - HYSTERESIS:
            state = "off"
        else:
            state = "hold"
            reasons.append(f"within ±{HYSTERESIS:.0%} of break-even: keep the current setting")
        margin = min(1.0, abs(math.log(expected)) / CLEAR_MARGIN)
        confidence = perf.DATASHEET_CONFIDENCE + (0.9 - perf.DATASHEET_CONFIDENCE) * margin

    if kv_share >= 0.2:
        reasons.append(
            f"KV reads are {kv_share:.0%} of a plain step at {context_per_sequence:.0f} tokens of context per sequence; "
            "verification reads them once, which keeps it cheap"
        )
    if context is None and target.kv_bytes_per_token:
        reasons.append("no --context given: KV reads are left out, which understates how long contexts help speculation")
    if target.kv_bytes_per_token is None and context_per_sequence > 0:
        reasons.append("KV bytes per token unknown (give --kv-bytes-per-token or --model): context is not priced")
    if method_assumed:
        reasons.append(f"no --method given: assumed a draft head with r ≈ {r:.2f}")
    elif method_name in ("draft",) or ratio_override is not None:
        reasons.append(f"draft cost r = {r:.3f} per draft token ({cost.basis})")
    if gpu_spec.approximate:
        reasons.append(f"{gpu_spec.name} figures are approximate (no datasheet): calibrate on the node")
        confidence *= APPROXIMATE_PENALTY
    if target.experts:
        reasons.append("MoE: expert bytes modelled with uniform routing; measured speedups at small batch are often lower")
        confidence *= MOE_PENALTY
    weight_bytes = perf.WEIGHT_FORMATS[dtype_name][0] * target.params / tp_degree
    if gpu_spec.memory_bytes is not None and weight_bytes > gpu_spec.memory_bytes:
        reasons.append(
            f"{weight_bytes / 1e9:.0f} GB of weights per GPU do not fit in {gpu_spec.memory_bytes / 1e9:.0f} GB: "
            "raise --tp or quantise"
        )
        confidence *= OVERSIZE_PENALTY

    verdict = {
        "speculation": state,
        "confidence": round(confidence, 3),
        "expected_speedup": expected,
        "break_even_length": break_even_here,
        "crossover_concurrency": crossover_value,
        "reasons": reasons,
    }
    inputs = {
        "gpu": gpu_spec.key,
        "gpu_name": gpu_spec.name,
        "model": target.name,
        "params": target.params,
        "active_params": target.active_params,
        "kv_bytes_per_token": target.kv_bytes_per_token,
        "dtype": dtype_name,
        "tp": tp_degree,
        "batch": batch_size,
        "k": draft_k,
        "acceptance_length": length,
        "method": method_name,
        "draft_ratio": r,
        "context_per_sequence": context_per_sequence,
    }
    return {"schema": SCHEMA, "inputs": inputs, "verdict": verdict, "bound": bound.to_dict(), "details": details}


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the DESIGN §5 `predict` options. Every option is optional to argparse and validated in
    run_predict, so bad input exits with status 3 and a clear message rather than argparse's 2."""
    parser.add_argument("--gpu", help="NVML name or short form (H100 = SXM part, A100 = 80 GB SXM, L40S, ...)")
    parser.add_argument("--model", help=f"known architecture: {', '.join(known_model_names())}")
    parser.add_argument("--params", help="total parameters, e.g. 70e9 or 70B (instead of --model)")
    parser.add_argument("--active-params", help="parameters used per token (MoE); default: --params")
    parser.add_argument("--kv-bytes-per-token", help="BF16 KV-cache bytes per context token, whole model")
    parser.add_argument("--dtype", default="bf16", help=f"weights: {', '.join(perf.WEIGHT_FORMATS)} (default bf16)")
    parser.add_argument("--tp", default="1", help="tensor-parallel degree (default 1)")
    parser.add_argument("--batch", help="running sequences (concurrency)")
    parser.add_argument("--k", help="draft tokens per step")
    parser.add_argument("--acceptance-length", help="mean acceptance length L = 1 + accepted/drafts (1..k+1)")
    parser.add_argument("--acceptance-rate", help="draft acceptance rate accepted/draft tokens (0..1)")
    parser.add_argument("--method", help="ngram, suffix, mtp, eagle, eagle3, medusa or draft (default: eagle)")
    parser.add_argument("--draft-params", help="draft model parameters (method draft)")
    parser.add_argument("--draft-ratio", help="draft cost per draft token as a fraction of a target step (override)")
    parser.add_argument("--context", help="mean context tokens per sequence (default 0: KV reads ignored)")
    parser.add_argument("--peak-flops", help="custom GPU: dense BF16 FLOP/s (with --memory-bandwidth)")
    parser.add_argument("--memory-bandwidth", help="custom GPU: DRAM bytes/s (with --peak-flops)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _summary(result: dict[str, Any]) -> str:
    verdict = result["verdict"]
    inputs = result["inputs"]
    lines = [f"speculation: {verdict['speculation']} (confidence {verdict['confidence']:.2f})"]
    numbers = []
    if verdict["expected_speedup"] is not None:
        numbers.append(f"expected speedup {verdict['expected_speedup']:.2f}× at batch {inputs['batch']:g}")
    numbers.append(f"break-even L {verdict['break_even_length']:.2f}")
    if verdict["crossover_concurrency"] is not None:
        numbers.append(f"crossover ≈ {verdict['crossover_concurrency']:.0f} running")
    lines.append(" · ".join(numbers))
    lines.append(f"bound: {result['bound']['state']}")
    lines.extend(f"- {reason}" for reason in verdict["reasons"])
    return "\n".join(lines)


def run_predict(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run `specwatch predict`: print JSON (--json) or a short summary; return the exit status
    (0 no change, 1 speculation costs at this load, 2 not enough data, 3 bad input)."""
    out = out or sys.stdout
    err = err or sys.stderr

    def option(name: str) -> Any:
        return getattr(args, name, None)

    try:
        result = predict(
            option("gpu"),
            model=option("model"),
            params=option("params"),
            active_params=option("active_params"),
            kv_bytes_per_token=option("kv_bytes_per_token"),
            dtype=option("dtype") or "bf16",
            tp=option("tp") if option("tp") is not None else 1,
            batch=option("batch"),
            k=option("k"),
            acceptance_length=option("acceptance_length"),
            acceptance_rate=option("acceptance_rate"),
            method=option("method"),
            draft_params=option("draft_params"),
            draft_ratio=option("draft_ratio"),
            context=option("context"),
            peak_flops=option("peak_flops"),
            memory_bandwidth=option("memory_bandwidth"),
        )
    except (ValueError, TypeError, ArithmeticError) as error:
        print(f"specwatch predict: {error}", file=err)
        return EXIT_BAD_INPUT
    if option("json"):
        print(json.dumps(result, indent=2), file=out)
    else:
        print(_summary(result), file=out)
    state = result["verdict"]["speculation"]
    if state == "unknown":
        return EXIT_NOT_ENOUGH_DATA
    if state == "off":
        return EXIT_CHANGE
    return EXIT_NO_CHANGE
