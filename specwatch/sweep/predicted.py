"""The predicted curve (specwatch.perf), beside the measured one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specwatch import perf
from specwatch.sweep.common import BASIS_DATASHEET, BASIS_FITTED, PREDICTED_GRID_POINTS, PREDICTED_MAX_BATCH

__all__ = [
    "PredictionInputs",
    "predicted_curve",
]


@dataclass(frozen=True)
class PredictionInputs:
    """What the user said about the configuration; every field may be missing."""

    gpu: str | None = None
    model: str | None = None  # architecture name from specwatch.perf.hardware's table
    tp: int = 1
    dtype: str | None = None  # None: the format the model is released in (perf.models.weight_format)
    method: str | None = None
    draft_ratio: float | None = None
    draft_params: float | None = None
    k: int | None = None
    step_model: perf.StepTimeModel | None = None  # a measured step time, instead of the datasheet or a fit
    prompt_per_output: float = 0.0  # prompt tokens per output token whose prefill shares the steps, when known


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(present)) if present else None


def _measured_k(tiers: Sequence[dict]) -> int | None:
    ks = [t["speculative"].get("k") for t in tiers if t.get("speculative") and t["speculative"].get("k")]
    return int(max(ks)) if ks else None


def _context_per_sequence(tiers: Sequence[dict], max_tokens: float | None) -> float:
    """Mean context of a running sequence: its prompt plus half its output (the average point of a
    decode), from the baseline's measured prompt tokens."""
    prompt = _mean([(t.get("baseline") or {}).get("prompt_tokens_mean") for t in tiers])
    output = max_tokens
    if output is None:
        per_request = []
        for t in tiers:
            base = t.get("baseline") or {}
            if base.get("output_tokens") and base.get("requests_ok"):
                per_request.append(base["output_tokens"] / base["requests_ok"])
        output = _mean(per_request)
    return (prompt or 0.0) + 0.5 * (output or 0.0)


def _draft_pricing(inputs: PredictionInputs, method: str | None, target_params: float | None) -> perf.DraftPricing:
    """The draft's pricing, as every command prices it (an unknown method: perf.UNKNOWN_METHOD_WORDS; a
    draft head's r derived from the model's shapes where the table knows it)."""
    if inputs.draft_ratio is not None:
        return perf.draft_pricing(method, ratio=float(inputs.draft_ratio))
    from specwatch.perf.models import lookup_model

    target = lookup_model(inputs.model) if inputs.model else None
    return perf.draft_pricing(method, draft_params=inputs.draft_params, target_params=target_params, target=target,
                              dtype=inputs.dtype)


def _fitted_step_model(tiers: Sequence[dict], k: int, length: float, free_proposer: bool,
                       context: float) -> tuple[perf.StepTimeFit, str] | None:
    """A hinge T(N, C) fitted to the measured points.

    The baseline's step time at batch b is its TPOT (one token per sequence per step) with N = b.
    With a free proposer (r = 0) the speculative server's steps are samples too: each commits L
    tokens per sequence, so its step time is TPOT·L at N = b·(k+1). The hinge prior is built from
    the same points (flat at the smallest step time, rising at the overall slope), so the fit leans
    on nothing but the measurements; beyond the largest N measured the curve is an extrapolation.
    """
    samples: list[perf.StepSample] = []
    for t in tiers:
        base = t.get("baseline") or {}
        spec = t.get("speculative") or {}
        b = base.get("running_mean") or t["concurrency"]
        # the engine's own step period (its inter-token latency) where the server gave it: a
        # request's TPOT also holds the time the engine idled between steps
        if base.get("step_period_s") and base.get("computed_tokens_per_step"):
            samples.append(perf.StepSample(float(base["computed_tokens_per_step"]), float(base["step_period_s"]),
                                           float(b) * context))
        else:
            tpot = base.get("tpot_mean_s") or base.get("tpot_p50_s")
            if tpot:
                samples.append(perf.StepSample(float(b), float(tpot), float(b) * context))
        if not free_proposer:
            continue
        sb = spec.get("running_mean") or t["concurrency"]
        if spec.get("step_period_s") and spec.get("computed_tokens_per_step"):
            samples.append(perf.StepSample(float(spec["computed_tokens_per_step"]), float(spec["step_period_s"]),
                                           float(sb) * context))
            continue
        spec_tpot = spec.get("tpot_mean_s") or spec.get("tpot_p50_s")
        spec_length = spec.get("acceptance_length") or length
        if spec_tpot:
            samples.append(perf.StepSample(float(sb) * (k + 1), float(spec_tpot) * spec_length, float(sb) * context))
    if len(samples) < 2:
        return None
    n = np.array([s.tokens_per_step for s in samples])
    y = np.array([s.step_time_s for s in samples])
    # the prior is these points' own hinge, not a datasheet: its shape is for the data to set
    fit = perf.fit_step_time(samples, _hinge_from_points(n, y), shape_known=False)
    used = "baseline and speculative steps" if free_proposer else "baseline steps"
    note = (f"fitted to {fit.n_samples} measured step times ({used}), N = {fit.tokens_min:.0f}..{fit.tokens_max:.0f} "
            f"tokens per step; beyond that it is an extrapolation")
    return fit, note


def _baseline_busy_share(tier: dict) -> float | None:
    return (tier.get("baseline") or {}).get("busy_share")


def _added_prefill_share(tier: dict) -> float | None:
    """How much later the speculative server's first token came than the baseline's, as a share of a
    baseline request's time (its concurrency over its requests per second): a cost of speculation
    that the decode steps do not show."""
    base, spec = tier.get("baseline") or {}, tier.get("speculative") or {}
    ttft_base, ttft_spec, rate = base.get("ttft_p50_s"), spec.get("ttft_p50_s"), base.get("requests_per_s")
    if ttft_base is None or ttft_spec is None or not rate:
        return None
    return max(0.0, ttft_spec - ttft_base) / (tier["concurrency"] / rate)


def _by_tier(tiers: Sequence[dict], figure):
    """`figure` of each tier as a function of concurrency (interpolated over log concurrency between
    the tiers, held flat beyond them), or None where no tier has it."""
    known = sorted((float(t["concurrency"]), float(v)) for t in tiers if (v := figure(t)) is not None)
    if not known:
        return None
    xs = np.log([c for c, _ in known])
    ys = np.array([u for _, u in known])

    def at(concurrency: float) -> float:
        return float(np.interp(math.log(concurrency), xs, ys))

    return at


def _fitted_on_speculative_steps(step_model: perf.StepTimeModel, inputs: PredictionInputs, basis: str,
                                 free: bool) -> bool:
    """Whether the step model's samples were speculative steps (their verification attention is in it)."""
    if inputs.step_model is not None:
        return isinstance(step_model, perf.StepTimeFit) and step_model.n_samples > 0
    return basis == BASIS_FITTED and free


def _hinge_from_points(n: np.ndarray, y: np.ndarray) -> perf.HingeParameters:
    """A plain two-piece hinge (flat, then rising) through the points, by least squares over knees
    on a log grid across their span: the prior that fit_step_time refines, taken from the data
    because a sweep without --gpu/--model has no datasheet to lean on."""
    best: tuple[float, float, float, float] | None = None  # (cost, knee, base, slope)
    low, high = max(float(n.min()), 1.0), max(float(n.max()), 1.0)
    for knee in np.geomspace(low, high, 48) if high > low else [low]:
        design = np.column_stack([np.ones_like(n), np.maximum(0.0, n - knee)])
        (base, slope), *_ = np.linalg.lstsq(design, y, rcond=None)
        if slope < 0 or base <= 0:  # a falling or negative fit: flat at the mean instead
            base, slope = float(np.mean(y)), 0.0
        cost = float(np.sum((design @ np.array([base, slope]) - y) ** 2))
        if best is None or cost < best[0]:
            best = (cost, float(knee), float(base), float(slope))
    assert best is not None
    _, knee, base, slope = best
    return perf.HingeParameters(base_s=base, knee=knee, slope_s_per_token=slope, kv_s_per_token=0.0, per_token_s=0.0)


def predicted_curve(
    tiers: Sequence[dict],
    inputs: PredictionInputs,
    *,
    method: str | None = None,
    max_tokens: float | None = None,
) -> tuple[dict | None, str]:
    """The model's speedup S(b) over the sweep's concurrency range, and a note on its basis.

    With a GPU and a model architecture the step time is the datasheet prior
    (`specwatch.perf.prior_for_model`); otherwise it is fitted from the measured points: the
    engine's step periods (inter-token latency) at the positions its steps computed where the
    server gave them, else each request's TPOT. Both use the measured acceptance length (mean over
    the speculative tiers) and k. Where the baseline engine idled part of a tier (its busy share,
    steps per second × step period), the engine's speedup is applied to that share only, as the
    live advisor applies it, and where the speculative server's first token came later than the
    baseline's, that time counts against it. Returns (None, why) when there is not enough to draw it.
    """
    concurrencies = sorted(t["concurrency"] for t in tiers)
    if not concurrencies:
        return None, "no tiers"
    k = inputs.k or _measured_k(tiers)
    length = _mean([(t.get("speculative") or {}).get("acceptance_length") for t in tiers])
    if k is None:
        return None, "k is unknown: the speculative server's /metrics had no spec-decode counters (give --k)"
    if length is None:
        return None, "no acceptance length was measured on the speculative server"
    length = min(max(length, 1.0), k + 1.0)
    # what a decode step really emitted and verified per sequence, n-gram misses included, where the
    # speculative server's counters gave it: the acceptance length counts drafted steps only
    emitted = _mean([(t.get("speculative") or {}).get("emitted_per_sequence_step") for t in tiers])
    verified = _mean([(t.get("speculative") or {}).get("verified_per_sequence_step") for t in tiers])
    per_step = emitted is not None and verified is not None
    method = inputs.method or method
    context = _context_per_sequence(tiers, max_tokens)
    target_params = None
    step_model: perf.StepTimeModel
    if inputs.step_model is not None:
        step_model = inputs.step_model
        basis = BASIS_FITTED
        note = "the step time given"
        fit_details = None
    elif inputs.gpu and inputs.model:
        from specwatch.perf.hardware import lookup, lookup_model
        from specwatch.perf.models import weight_format

        gpu, arch = lookup(inputs.gpu), lookup_model(inputs.model)
        if gpu is None:
            return None, f"unknown GPU {inputs.gpu!r}"
        if arch is None:
            return None, f"unknown model architecture {inputs.model!r}"
        target_params = arch.params
        dtype, _ = weight_format(arch, inputs.dtype)
        try:
            step_model = perf.prior_for_model(gpu, arch, tp=inputs.tp, dtype=dtype)
        except ValueError as exc:
            return None, str(exc)
        basis = BASIS_DATASHEET
        note = f"datasheet step time for {arch.name} on {gpu.key} (tp {inputs.tp}, {dtype})"
        fit_details: dict | None = None
    try:
        pricing = _draft_pricing(inputs, method, target_params)
    except ValueError as exc:
        return None, str(exc)
    draft_ratio, draft_basis = pricing.ratio, f"{pricing.method or 'unknown'}: {pricing.basis}"
    free = pricing.kind == "lookup" or (pricing.kind == "ratio" and pricing.ratio == 0)
    if inputs.step_model is None and not (inputs.gpu and inputs.model):
        fitted = _fitted_step_model(tiers, k, length, free, context)
        if fitted is None:
            return None, "too few measured points to fit a step time (and no --gpu/--model for the datasheet)"
        step_model, note = fitted
        basis = BASIS_FITTED
        fit_details = fitted[0].to_dict()
    low, high = concurrencies[0], concurrencies[-1]
    grid = sorted({round(float(b), 6) for b in np.geomspace(low, high, PREDICTED_GRID_POINTS)}
                  | {float(c) for c in concurrencies}) if high > low else [float(low)]
    # the shared decision (specwatch.perf.decide), as predict, check and tune take it
    decision_inputs = perf.DecisionInputs(step_model=step_model, k=k, draft=pricing, running=float(low),
                                          length=emitted if per_step else length, context_per_sequence=context,
                                          verified_per_step=verified if per_step else None,
                                          fitted_on_speculative_steps=_fitted_on_speculative_steps(
                                              step_model, inputs, basis, free),
                                          max_batch=max(float(high), PREDICTED_MAX_BATCH),
                                          prompt_per_output=inputs.prompt_per_output)
    try:
        speedups = perf.decide_many(decision_inputs, grid)
        # the model's crossover is searched past the tiers too: where it lies beyond them is worth knowing
        cross = perf.decide(decision_inputs).crossover
    except ValueError as exc:
        return None, str(exc)
    # the engine's speedup reaches the node only through the share of the time the engine steps:
    # the baseline's busy share per tier, interpolated over log concurrency between the tiers
    busy = _by_tier(tiers, _baseline_busy_share)
    added = _by_tier(tiers, _added_prefill_share)
    if busy is not None or added is not None:
        speedups = [perf.node_speedup(value, busy(b) if busy else None, speculating=False,
                                      added_share=added(b) if added else 0.0) for b, value in zip(grid, speedups)]
        note += ("; the engine's speedup applied to the share of the time the baseline engine decoded, and the "
                 "speculative server's later first token counted against it (per tier)")
    points = [{"concurrency": float(b), "speedup": value} for b, value in zip(grid, speedups)]
    return {
        "basis": basis,
        "note": note,
        "k": k,
        "acceptance_length": length,
        "emitted_per_sequence_step": emitted,
        "verified_per_sequence_step": verified,
        "draft_ratio": draft_ratio,
        "draft_ratio_basis": draft_basis,
        "context_per_sequence": context,
        "crossover": cross.concurrency,
        "crossover_state": cross.state,
        "fit": fit_details,
        "points": points,
    }, note
