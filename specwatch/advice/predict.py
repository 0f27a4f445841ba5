"""`specwatch predict`'s input resolution: from what the user typed to the shared decision's inputs.

It parses and checks the figures (refusing non-finite, negative and impossible ones with one line),
builds the datasheet step-time prior for the model on the GPU and the draft's pricing, and hands
them to `specwatch.perf.decide`, the decision every command takes; then it words the result. The
command's flags and exit statuses live in `specwatch.commands.predict`. No I/O here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from specwatch import perf
from specwatch.advice.drafter_pricing import draft_model_law
from specwatch.advice.judging import MOE_ROUTING_ERROR
from specwatch.telemetry.snapshot import FROM_FLAGS
from specwatch.advice.token_budget import FROM_VLLM_DEFAULT, TokenBudget, vllm_default_token_budget
from specwatch.advice.predict_inputs import (
    EP_CHOICES,
    TP_CHOICES,
    MemoryFit,
    PredictInputError,
    Target,
    check_routing,
    memory_fit,
    non_negative as _non_negative,
    parse_quantity,
    positive as _positive,
    positive_int as _positive_int,
    resolve_target,
)
from specwatch.advice.predict_scale import (PoolLayout, PrefillPool, check_engine, check_prefill_fit,
                                            check_prefill_layout, check_role, disaggregated, expert_parallel_words,
                                            per_position, prefills_apart_words)
from specwatch.advice.verdict import hold_words
from specwatch.perf.models import WEIGHTS_AS_RELEASED, weight_format
from specwatch.perf.hardware import (
    GIBI,
    GpuSpec,
    ModelSpec,
    custom_gpu,
    known_gpu_names,
    known_model_names,
    lookup,
)

__all__ = ["PredictInputError", "predict", "parse_quantity", "MOE_ROUTING_ERROR"]

SCHEMA = "specwatch.predict/1"


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


def _resolve_length(k: int, acceptance_length: Any, acceptance_rate: Any, alpha: Any = None) -> float | None:
    """L from exactly one of: the length itself; vLLM's acceptance rate accepted/draft tokens
    (L = 1 + k·rate); the papers' per-token acceptance probability α (L = (1 − α^(k+1))/(1 − α))."""
    given = [name for name, value in (("--acceptance-length", acceptance_length),
                                      ("--acceptance-rate", acceptance_rate), ("--alpha", alpha)) if value is not None]
    if len(given) > 1:
        raise PredictInputError(f"give only one of {' or '.join(given)}, not both")
    if acceptance_length is not None:
        length = parse_quantity(acceptance_length, "acceptance length")
        if length < 1 or length > k + 1:
            raise PredictInputError(
                f"acceptance length must be between 1 and k+1 = {k + 1} (it counts the bonus token), got {length:g}"
            )
        return length
    if acceptance_rate is not None:
        rate = parse_quantity(acceptance_rate, "acceptance rate")
        if not 0 <= rate <= 1:
            hint = f" (a percentage? did you mean {rate / 100:g}?)" if 1 < rate <= 100 else ""
            raise PredictInputError(f"acceptance rate (accepted / draft tokens) must be between 0 and 1, "
                                    f"got {rate:g}{hint}")
        return perf.length_from_rate(rate, k)
    if alpha is not None:
        value = parse_quantity(alpha, "alpha")
        if not 0 <= value <= 1:
            raise PredictInputError(f"alpha (per-token acceptance probability) must be between 0 and 1, got {value:g}")
        return perf.expected_length(value, k)
    return None


def _fmt(value: float) -> str:
    """Numbers for reasons: 2 decimals below 10, whole numbers above."""
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.0f}"


def _draft_model(gpu_spec: GpuSpec, name: str | None, params: float | None, dtype: str, kv: float | None,
                 tp: int) -> tuple[perf.StepTimePrior | None, str | None, float | None]:
    """A draft model's own step-time prior (its size, dtype and KV cache) and a note on what was
    assumed: drafter_pricing.draft_model_law, the advisor's own, with predict's errors."""
    if name is None and params is None:
        return None, None, None
    try:
        return draft_model_law(gpu_spec, name, params, dtype, kv, tp)
    except LookupError:
        raise PredictInputError(f"unknown draft model {name!r}; known models: {', '.join(known_model_names())}") from None
    except ValueError as error:
        raise PredictInputError(f"draft model: {error}") from None


def _anchored(prior: perf.StepTimePrior, step_model: Any, tpot_ms: Any, tpot_batch: Any, batch: float,
              context: float) -> perf.AnchoredLaw | None:
    """The datasheet law anchored to the operator's plain TPOT (`--tpot-ms`, measured at
    `--tpot-batch` running, by default --batch), or None where none is given."""
    if tpot_ms is None:
        if tpot_batch is not None:
            raise PredictInputError("--tpot-batch says where --tpot-ms was measured: give --tpot-ms too")
        return None
    if step_model is not None:
        raise PredictInputError("--tpot-ms anchors the datasheet law, and a measured step model replaces it: give one")
    at = batch if tpot_batch is None else _positive(tpot_batch, "tpot batch")
    try:
        return perf.anchor_fixed_latency(prior, _positive(tpot_ms, "tpot ms") / 1e3, at, at * context)
    except ValueError as error:
        raise PredictInputError(f"--tpot-ms: {error}") from None


def _target_prior(gpu_spec: GpuSpec, target: Target, dtype: str, layout: PoolLayout) -> perf.StepTimePrior:
    """The target's datasheet step law on GPUs laid out so (raises ValueError on a bad layout)."""
    return perf.datasheet_prior(
        gpu_spec,
        params=target.params,
        active_params=target.active_params,
        kv_bytes_per_token=target.kv_bytes_per_token or 0.0,
        kv_replicated=target.kv_replicated,  # an MLA latent every rank holds whole
        tp=layout.tp,
        dtype=dtype,
        layers=target.layers,
        hidden_size=target.hidden_size,
        experts=target.experts,
        experts_per_token=target.experts_per_token,
        moe_layers=target.moe_layers,
        ep=layout.ep,
        dp_attention=layout.dp_attention,
    )


def predict(
    gpu: str | GpuSpec | None,
    *,
    model: str | ModelSpec | None = None,
    params: Any = None,
    active_params: Any = None,
    experts: Any = None,
    experts_per_token: Any = None,
    kv_bytes_per_token: Any = None,
    dtype: str | None = None,
    tp: Any = 1,
    batch: Any = None,
    waiting: Any = None,
    k: Any = None,
    acceptance_length: Any = None,
    acceptance_rate: Any = None,
    alpha: Any = None,
    method: str | None = None,
    draft_params: Any = None,
    draft_model: str | None = None,
    draft_dtype: str | None = None,
    draft_kv_bytes_per_token: Any = None,
    draft_context: Any = None,
    draft_ratio: Any = None,
    draft_scale: Any = None,
    context: Any = None,
    tree_tokens: Any = None,
    max_running: Any = None,
    prompt_tokens: Any = None,
    output_tokens: Any = None,
    peak_flops: Any = None,
    memory_bandwidth: Any = None,
    gpu_memory: Any = None,
    step_model: perf.StepTimeModel | None = None,
    verifier: str | None = None,
    max_num_batched_tokens: Any = None,
    prompt_per_output: Any = None,
    ep: Any = None,
    dp_attention: bool = False,
    role: str | None = None,
    acceptance_per_position: Any = None,
    engine: str | None = None,
    prefill_tp: Any = None,
    prefill_ep: Any = None,
    prefill_dp_attention: bool = False,
    tpot_ms: Any = None,
    tpot_batch: Any = None,
) -> dict[str, Any]:
    """The verdict block for a configuration with no live node: resolves and checks the inputs,
    then hands them to the shared decision (`specwatch.perf.decide`).

    `context` is the mean context length per sequence (prompt plus generated tokens so far); the
    batch's KV reads are batch × context tokens. `step_model` replaces the datasheet prior with a
    measured step time (e.g. the fit a recording gave). `experts` and `experts_per_token` (both or
    neither) make the target an MoE whose expert reads grow with the tokens a step routes; with
    `model` they replace the table's. Returns {schema, inputs, verdict, bound, details}; `verdict`
    has the DESIGN §5 fields and the batch the answer is for. When the GPUs cannot hold the weights
    and one sequence's KV, the state is "unknown" and the reason names the smallest tp that would.
    Raises PredictInputError on bad input.
    """
    check_routing(experts, experts_per_token)  # a half-given routing (--experts alone) before a missing --gpu
    gpu_spec = _resolve_gpu(gpu, peak_flops, memory_bandwidth)
    if gpu_memory is not None:
        gpu_spec = replace(gpu_spec, memory_bytes=_positive(gpu_memory, "GPU memory"))
    target = resolve_target(model, params, active_params, kv_bytes_per_token, experts, experts_per_token)
    if batch is None:
        raise PredictInputError("--batch (running sequences) is required")
    if k is None:
        raise PredictInputError("--k (draft tokens per step) is required")
    batch_size = _positive(batch, "batch")
    waiting_count = 0.0 if waiting is None else _non_negative(waiting, "waiting")
    draft_k = _positive_int(k, "k")
    tp_degree = _positive_int(tp, "tp")
    _check_tp_splits_heads(target.spec, tp_degree)
    ep_degree = None if ep is None else _positive_int(ep, "ep")
    dp_attention = bool(dp_attention)
    dtype_name, dtype_from = weight_format(target.spec, dtype)
    try:
        dtype_name = perf.weight_format_key(dtype if dtype is not None else dtype_name)
        draft_dtype_name = perf.weight_format_key(draft_dtype or dtype_name, "draft dtype")
    except ValueError as error:
        raise PredictInputError(str(error)) from None
    context_per_sequence = 0.0 if context is None else _non_negative(context, "context")
    rates = per_position(acceptance_per_position, draft_k, (acceptance_length, acceptance_rate, alpha))
    length = (1.0 + sum(rates[:draft_k]) if rates
              else _resolve_length(draft_k, acceptance_length, acceptance_rate, alpha))
    tree = None if tree_tokens is None else _positive_int(tree_tokens, "tree tokens")
    if tree is not None and tree < draft_k + 1:
        raise PredictInputError(f"--tree-tokens counts the positions verified per sequence: at least k+1 = "
                                f"{draft_k + 1}, got {tree}")
    cap = None if max_running is None else _positive_int(max_running, "max running")
    prompt = None if prompt_tokens is None else _non_negative(prompt_tokens, "prompt tokens")
    output = None if output_tokens is None else _non_negative(output_tokens, "output tokens")
    if (prompt is None) != (output is None):
        raise PredictInputError("give both --prompt-tokens and --output-tokens for the end-to-end speedup")
    draft_budget = None if draft_context is None else _non_negative(draft_context, "draft context")
    verifier_name = (verifier or "multi-query").lower()
    if verifier_name not in perf.VERIFIERS:
        raise PredictInputError(f"unknown verifier {verifier!r}; known: {', '.join(perf.VERIFIERS)}")
    budget = None if max_num_batched_tokens is None else _positive(max_num_batched_tokens, "max num batched tokens")
    role_name = check_role(role, prompt, output, prompt_per_output, budget)
    prefill_layout = check_prefill_layout(role_name, prefill_tp, prefill_ep, prefill_dp_attention, tp_degree)
    if prefill_layout is not None:
        _check_tp_splits_heads(target.spec, prefill_layout.tp, "--prefill-tp")
    prefill_apart = check_engine(engine, budget, prompt_per_output) and role_name is None
    # the traffic's prompt tokens per output token: their prefill shares the steps (chunked prefill),
    # except in a disaggregated deployment, whose decode steps carry none (the prefill pool has them),
    # and in an engine that prefills apart from its decode steps (SGLang under speculation)
    if role_name is not None or prefill_apart:
        mix = 0.0
    elif prompt_per_output is not None:
        mix = _non_negative(prompt_per_output, "prompt per output")
    elif prompt is not None and output:
        mix = prompt / output
    else:
        mix = 0.0
    if budget is not None and mix == 0.0:
        raise PredictInputError("--max-num-batched-tokens needs the traffic's shape: give --prompt-tokens and "
                                "--output-tokens")
    budget_from = FROM_FLAGS if budget is not None else None
    if budget is None and mix > 0.0:
        # the prefill shares the step, and an engine always has a budget: vLLM's default for its API
        # server on this GPU, where the operator does not give the one it runs
        budget, budget_from = float(vllm_default_token_budget(gpu_spec)), FROM_VLLM_DEFAULT

    if draft_ratio is not None and (draft_params is not None or draft_model is not None):
        raise PredictInputError("give either --draft-params/--draft-model or --draft-ratio, not both")
    if method is None and (draft_params is not None or draft_model is not None):
        method = "draft"
    method_name = None
    if method is not None:
        try:
            method_name = perf.canonical_method(method)
        except ValueError as error:
            raise PredictInputError(str(error)) from None
    if (draft_params is not None or draft_model is not None) and method_name != "draft":
        raise PredictInputError(f"--draft-params only applies to a draft model, not method {method!r}")
    ratio_override = None if draft_ratio is None else _non_negative(draft_ratio, "draft ratio")
    draft_count = None if draft_params is None else _positive(draft_params, "draft params")
    draft_kv = None if draft_kv_bytes_per_token is None else _non_negative(draft_kv_bytes_per_token,
                                                                               "draft KV bytes per token")
    if method_name == "draft" and draft_count is None and draft_model is None and ratio_override is None:
        raise PredictInputError("a draft model needs --draft-params N (or --draft-model NAME) or --draft-ratio R")
    given_draft_count = draft_count
    draft_prior, draft_note, draft_count = _draft_model(gpu_spec, draft_model, draft_count, draft_dtype_name,
                                                        draft_kv, tp_degree)
    scale = 1.0 if draft_scale is None else _positive(draft_scale, "draft scale")

    def priced(layout: PoolLayout, drafter: perf.StepTimePrior | None,
               pool: str = "") -> tuple[perf.StepTimePrior, perf.DraftPricing]:
        """The target's step law and the drafter's pricing on a pool of this layout (`pool` names it
        in an error)."""
        try:
            pricing = perf.draft_pricing(method_name, ratio=ratio_override, draft_model=drafter, scale=scale,
                                         draft_params=draft_count, target_params=target.params,
                                         target=_head_target(target), dtype=dtype_name)
            return _target_prior(gpu_spec, target, dtype_name, layout), pricing
        except ValueError as error:
            raise PredictInputError(f"{pool}{error}") from None

    prior, pricing = priced(PoolLayout(tp_degree, ep_degree, dp_attention), draft_prior)
    anchored = _anchored(prior, step_model, tpot_ms, tpot_batch, batch_size, context_per_sequence)
    if anchored is not None:
        prior = anchored.prior

    model_weight_bytes = perf.WEIGHT_FORMATS[dtype_name][0] * target.params
    draft_model_bytes = (perf.WEIGHT_FORMATS[draft_dtype_name][0] * draft_count
                         if draft_prior is not None and draft_count else 0.0)
    # the GPUs the experts are spread over where that is not the tp GPUs: expert parallelism with DP
    # attention (without it the experts live on the tp GPUs, and each holds the model over tp)
    ep_gpus = ep_degree if dp_attention else None
    kv_budget = fit = None
    if gpu_spec.memory_bytes is not None:
        # each GPU's weights as the prior lays them out (the experts' share under EP)
        kv_budget = (gpu_spec.memory_bytes * perf.KV_MEMORY_UTILISATION - prior.shared_weight_bytes
                     - prior.expert_weight_bytes - draft_model_bytes / tp_degree)
        fit = memory_fit(gpu_spec.memory_bytes, perf.KV_MEMORY_UTILISATION, model_weight_bytes + draft_model_bytes,
                         target, context_per_sequence, tp_degree,
                         expert_weight_bytes=prior.expert_weight_bytes * (ep_gpus or tp_degree),
                         ep_gpus=ep_gpus)
    extra_error = 0.0
    if gpu_spec.approximate:
        extra_error = math.hypot(extra_error, perf.decision.APPROXIMATE_GPU_ERROR)
    if target.moe:
        extra_error = math.hypot(extra_error, MOE_ROUTING_ERROR)
    if fit is not None and not fit.fits:
        # a setup that cannot load gets no verdict: the speedup of a batch it cannot hold means nothing
        result = _refused(fit, gpu_spec, target, prior, pricing, dtype_name, tp_degree, batch_size, waiting_count,
                          draft_k, length, context_per_sequence, tree, cap, prompt, output, method_name)
        result["inputs"]["verifier"] = verifier_name
        result["inputs"].update(ep=ep_degree, dp_attention=dp_attention)
        _weights_said(result, target, dtype_from)
        return result
    fitted = isinstance(step_model, perf.StepTimeFit) and step_model.n_samples > 0
    decision = perf.decide(perf.DecisionInputs(
        step_model=prior if step_model is None else step_model, k=draft_k, fitted_on_speculative_steps=fitted, draft=pricing, running=batch_size, length=length,
        context_per_sequence=context_per_sequence, waiting=waiting_count, tree_tokens=tree, max_running=cap,
        kv_budget_bytes=kv_budget, target_kv_bytes_per_token=prior.kv_bytes_per_token,
        rates=rates, k_max=len(rates) if rates else None,
        draft_context_per_sequence=draft_budget, prompt_tokens=prompt, output_tokens=output,
        extra_level_error=extra_error, verify_attention_per_position=perf.VERIFIERS[verifier_name],
        prompt_per_output=mix, token_budget=budget, prefill_apart=prefill_apart,
        token_budget_from=TokenBudget(int(budget), budget_from).words if budget_from == FROM_VLLM_DEFAULT else "",
    ))
    result = _result(decision, gpu_spec, target, prior, pricing, dtype_name, tp_degree, batch_size, waiting_count,
                     draft_k, length, context_per_sequence, context, tree, cap, prompt, output, draft_note, method_name, rates=rates)
    result["inputs"]["verifier"] = verifier_name
    result["inputs"].update(ep=ep_degree, dp_attention=dp_attention, role=role_name,
                            engine=(engine or "").lower() or None, prefill_apart=prefill_apart)
    result["inputs"]["prompt_per_output"] = mix
    if anchored is not None:
        result["inputs"].update(tpot_ms=anchored.step_s * 1e3, tpot_batch=anchored.tokens)
        result["details"]["anchor"] = {"fixed_latency_added_s": anchored.added_s, "tpot_s": anchored.step_s,
                                       "tpot_batch": anchored.tokens, "datasheet_step_s": anchored.datasheet_step_s}
        result["verdict"]["reasons"].append(anchored.words())
    if role_name is not None:
        pool = PrefillPool(prior, pricing, PoolLayout(tp_degree, ep_degree, dp_attention), from_flags=False)
        if prefill_layout is not None:
            drafter, _, _ = _draft_model(gpu_spec, draft_model, given_draft_count, draft_dtype_name, draft_kv,
                                         prefill_layout.tp)
            pool = PrefillPool(*priced(prefill_layout, drafter, "the prefill pool (--prefill-tp, --prefill-ep): "),
                               prefill_layout, from_flags=True)
            if gpu_spec.memory_bytes is not None:
                check_prefill_fit(pool, gpu_spec, target, model_weight_bytes + draft_model_bytes, prompt)
        disaggregated(result, role_name, decision, pool, target, gpu_spec, prompt, output)
    elif prefill_apart:
        prefills_apart_words(result, prior if step_model is None else step_model, batch_size, prompt)
    result["inputs"]["max_num_batched_tokens"] = budget
    result["inputs"]["max_num_batched_tokens_source"] = budget_from  # flags, vllm_default or None
    result["verdict"]["throughput_speedup"] = decision.throughput_speedup
    _weights_said(result, target, dtype_from)
    return result


def _weights_said(result: dict[str, Any], target: Target, dtype_from: str) -> None:
    """Where the weight format came from, in the inputs; and in the reasons where the operator did not
    choose it and it is not BF16 (DeepSeek-V3 as released is FP8: priced in BF16 it would not fit)."""
    result["inputs"]["dtype_source"] = dtype_from
    dtype = result["inputs"]["dtype"]
    if dtype_from == WEIGHTS_AS_RELEASED and dtype != "bf16":
        result["verdict"]["reasons"].append(f"weights priced in {dtype}, {target.name}'s format as released (its "
                                            "config.json's quantization_config, or the nearest format priced) or as "
                                            "its name says (-FP8, -AWQ, ...); --dtype prices another")


# What the figures of predict --json that read alike are, said in the document itself.
JSON_NOTES = {
    "knee_tokens": "tokens per step where the GEMMs' math time equals the time to read the weights "
                   "(the roofline's knee): below it a step is memory-bound and verifying more positions "
                   "costs little",
    "step_time_model.knee_tokens": "the hinge's corner, where its steep slope begins: past knee_tokens, "
                                   "because a small share of the GEMMs' math (per_token_s) is never hidden "
                                   "under the weight reads and the hinge keeps that share on its flat side",
    "decision.terms.ln_*": "each term's share of ln(expected speedup): ln_acceptance the gain of the "
                           "acceptance length, the others what each cost takes off (they add up to ln S)",
    "decision.confidence": "the chance that the true speedup lies on the side of 1 the verdict says, "
                           "with ln S off by a normal error of sigma decision.level_error (the prior's "
                           "error against published data, or the live fit's)",
}


def _head_target(target: Target) -> ModelSpec | None:
    """The shapes a draft head's r is derived from: the table's model, with --active-params where
    given (None for a model given by its size: r is then assumed)."""
    spec = target.spec
    if spec is None or spec.active_params == target.active_params:
        return spec
    return replace(spec, active_params=target.active_params)


def _check_tp_splits_heads(spec: Any, tp_degree: int, flag: str = "--tp") -> None:
    """vLLM splits the attention heads across tensor-parallel ranks: the query heads evenly, the KV
    heads evenly or each replicated on tp / kv_heads ranks. A degree that does neither is one vLLM
    refuses to start with; PredictInputError names the degrees that work."""
    if spec is None or tp_degree == 1:
        return
    heads = spec.attention_heads
    kv = spec.kv_heads if spec.kv_latent_dim is None else None  # an MLA latent is not split by head

    def splits(t: int) -> bool:
        return heads % t == 0 and (kv is None or kv % t == 0 or t % kv == 0)

    if splits(tp_degree):
        return
    works = ", ".join(str(t) for t in TP_CHOICES if splits(t))
    of_kv = f" and {kv} KV heads" if kv is not None else ""
    raise PredictInputError(f"{flag} {tp_degree} cannot split {spec.name}'s {heads} attention heads{of_kv} across its "
                            f"ranks, and vLLM will not start with it: use {flag} {works}")


_count = perf.count_words


def _answered_batch(decision: perf.Decision, batch_size: float, cap: int | None) -> dict[str, Any]:
    """The batch each mode's answer is for, and why it is below the one asked for when it is: the KV
    memory holds fewer sequences (`decide` judges at the batch each mode holds), or --max-running."""
    plain, spec = decision.terms["batch_plain"], decision.terms["batch_speculative"]
    capped = plain < batch_size * (1 - 1e-9) or spec < batch_size * (1 - 1e-9)
    why = None
    if plain < batch_size * (1 - 1e-9):
        # 55.95 of 56 is not "56 of the 56": a cap that rounds to the batch asked for shows its decimal
        held = _count(plain) if _count(plain) != f"{batch_size:g}" else f"{math.floor(plain * 10) / 10:.1f}"
        why = f"KV memory holds {held} of the {batch_size:g} asked for"
    elif capped and cap is not None and spec >= cap * (1 - 1e-9):
        why = f"--max-running holds speculation to {_count(spec)} of the {batch_size:g} asked for"
    elif capped:
        why = f"with speculation's lookahead slots KV memory holds {_count(spec)} of the {batch_size:g} asked for"
    words = (f"batch {_count(plain)}" if _count(plain) == _count(spec)
             else f"batch {_count(plain)} plain, {_count(spec)} with speculation")
    return {"asked": batch_size, "plain": plain, "speculative": spec, "capped": capped, "why": why, "words": words}


def _inputs(gpu_spec: GpuSpec, target: Target, dtype_name: str, tp_degree: int, batch_size: float, waiting: float,
            draft_k: int, length: float | None, method_name: str | None, pricing: perf.DraftPricing,
            context_per_sequence: float, tree: int | None, cap: int | None, prompt: float | None,
            output: float | None) -> dict[str, Any]:
    return {
        "gpu": gpu_spec.key,
        "gpu_name": gpu_spec.name,
        "model": target.name,
        "params": target.params,
        "active_params": target.active_params,
        "experts": target.experts,
        "experts_per_token": target.experts_per_token,
        "kv_bytes_per_token": target.kv_bytes_per_token,
        "kv_replicated_under_tp": target.kv_replicated,
        "dtype": dtype_name,
        "tp": tp_degree,
        "batch": batch_size,
        "waiting": waiting,
        "k": draft_k,
        "acceptance_length": length,
        "method": method_name or pricing.method,
        "method_assumed": method_name is None,
        "draft_ratio": pricing.ratio,
        "context_per_sequence": context_per_sequence,
        "tree_tokens": tree,
        "max_running": cap,
        "prompt_tokens": prompt,
        "output_tokens": output,
    }


def _gib(value: float) -> str:
    """Bytes in GiB, as NVML and nvidia-smi count GPU memory (an "80GB" H100 holds 79.6 GiB); a
    tenth below 100 GiB, where a tight set-up's KV left and KV needed can be a fraction apart."""
    return f"{value / GIBI:.0f}" if value >= 100 * GIBI else f"{value / GIBI:.1f}"


def _refusal_words(fit: MemoryFit, gpu_spec: GpuSpec, context_per_sequence: float) -> str:
    # every figure in GiB: the GPU's capacity is binary (NVML's total), and weights and KV are
    # weighed against it in the same unit
    usable = f"{_gib(fit.usable_bytes)} GiB usable of {_gib(gpu_spec.memory_bytes or 0.0)} GiB ({gpu_spec.name})"
    if fit.ep is not None:
        raise_tp = (f"spread the experts over at least {fit.min_ep} GPUs (--ep)" if fit.min_ep is not None
                    else f"no --ep up to {EP_CHOICES[-1]} holds it")
    else:
        raise_tp = (f"raise --tp to at least {fit.min_tp}" if fit.min_tp is not None
                    else f"no --tp up to {TP_CHOICES[-1]} holds it")
    if fit.weight_bytes > fit.usable_bytes:
        return (f"{_gib(fit.weight_bytes)} GiB of weights per GPU do not fit in {usable}: {raise_tp} or quantise "
                "(--dtype)")
    return (f"{_gib(fit.weight_bytes)} GiB of weights per GPU leave {_gib(fit.usable_bytes - fit.weight_bytes)} GiB "
            f"of the {usable} for KV, and one sequence of {max(context_per_sequence, 1.0):.0f} tokens needs "
            f"{_gib(fit.one_sequence_kv_bytes)} GiB: {raise_tp}, shorten --context or quantise (--dtype)")


def _refused(fit: MemoryFit, gpu_spec: GpuSpec, target: Target, prior: perf.StepTimePrior,
             pricing: perf.DraftPricing, dtype_name: str, tp_degree: int, batch_size: float, waiting: float,
             draft_k: int, length: float | None, context_per_sequence: float, tree: int | None, cap: int | None,
             prompt: float | None, output: float | None, method_name: str | None) -> dict[str, Any]:
    """No verdict for a setup whose GPUs cannot hold the weights and one sequence's KV."""
    reasons = [_refusal_words(fit, gpu_spec, context_per_sequence)]
    reasons.extend(_model_notes(target, prior, tp_degree, None, None))
    verdict = {
        "speculation": "unknown",
        "confidence": 0.0,
        "expected_speedup": None,
        "request_speedup": None,
        "break_even_length": None,
        "crossover_concurrency": None,
        "batch": {"asked": batch_size, "plain": None, "speculative": None, "capped": None, "why": None},
        "reasons": reasons,
    }
    details = {"memory": fit.to_dict(), "step_model": prior.hinge().to_dict(), "knee_tokens": prior.knee_tokens}
    inputs = _inputs(gpu_spec, target, dtype_name, tp_degree, batch_size, waiting, draft_k, length, method_name,
                     pricing, context_per_sequence, tree, cap, prompt, output)
    return {"schema": SCHEMA, "inputs": inputs, "verdict": verdict, "bound": perf.combine_bound([]).to_dict(),
            "details": details}


def _model_notes(target: Target, prior: perf.StepTimePrior, tp_degree: int, plain_tokens: float | None,
                 verify_tokens: float | None) -> list[str]:
    """What the model's shape does to the answer: MoE expert reads (priced or not), an MLA cache."""
    notes = []
    if target.moe:
        experts, top_k = target.experts, target.experts_per_token
        # t, not k: k is the draft's speculative tokens everywhere else in the output
        words = (f"MoE: a step of N tokens reads E·(1 − (1 − t/E)^N) of the E = {experts} experts per layer "
                 f"(t = {top_k} routed experts per token, uniform routing)")
        if plain_tokens is not None and verify_tokens is not None:
            touched = [float(prior.expert_bytes(n)) / prior.expert_weight_bytes for n in (plain_tokens, verify_tokens)]
            plain_s, verify_s = (float(prior.expert_blocks_s(n)) for n in (plain_tokens, verify_tokens))
            words += (f": {touched[0]:.0%} of them at {plain_tokens:.0f} tokens, {touched[1]:.0%} verifying "
                      f"{verify_tokens:.0f}; the {prior.moe_layers} MoE layers' expert blocks take "
                      f"{plain_s * 1e3:.1f} ms and {verify_s * 1e3:.1f} ms of the step (each "
                      f"{prior.expert_latency_s * 1e6:.0f} µs of routing, the grouped GEMMs' launches and the "
                      "combine, then the reads of the experts touched)")
        notes.append(words + f"; real routing is skewed, which adds {MOE_ROUTING_ERROR:g} to the level error")
        if prior.expert_gpus > 1:
            notes.append(expert_parallel_words(prior, experts, tp_degree, plain_tokens, verify_tokens))
    elif target.experts_unpriced:
        notes.append(f"active params ({target.active_params / 1e9:.4g}B) are below params "
                     f"({target.params / 1e9:.4g}B) but no --experts/--experts-per-token were given: the expert "
                     "reads are not priced, every weight is taken as read every step as in a dense model (which "
                     "hides the extra experts verification reads); give both to price them")
    if target.kv_replicated and target.kv_bytes_per_token:
        notes.append(f"MLA: the KV cache is a latent of {target.kv_bytes_per_token / 1e3:.1f} kB a token"
                     + (f", which each of the {tp_degree} GPUs holds whole (it is not split across tensor-parallel "
                        "ranks)" if tp_degree > 1 else ""))
    return notes


def _result(decision: perf.Decision, gpu_spec: GpuSpec, target: Target, prior: perf.StepTimePrior,
            pricing: perf.DraftPricing, dtype_name: str, tp_degree: int, batch_size: float, waiting: float,
            draft_k: int, length: float | None, context_per_sequence: float, context: Any, tree: int | None,
            cap: int | None, prompt: float | None, output: float | None,
            draft_note: str | None, method_name: str | None, rates: tuple[float, ...] = ()) -> dict[str, Any]:
    terms = decision.terms
    positions = tree or draft_k + 1
    answered = _answered_batch(decision, batch_size, cap)
    tokens_per_step = terms["batch_speculative"] * positions
    knee = prior.knee_tokens
    rho = terms["speculative_s"] / max(terms["plain_s"], 1e-12)
    be = decision.break_even_length
    low_be = decision.low_load_break_even
    kv_time = terms["batch_plain"] * context_per_sequence * prior.kv_bytes_per_token / prior.bandwidth
    kv_share = kv_time / terms["plain_at_plain_batch_s"]
    bound = perf.combine_bound([perf.tokens_per_step_signal(tokens_per_step, knee)])
    words = pricing.words
    running = f"{_count(terms['batch_plain']) if answered['capped'] else f'{batch_size:g}'} running"
    reasons: list[str] = []
    side = "past" if tokens_per_step > knee else "below"
    reasons.append(
        f"{_count(terms['batch_speculative'])} running × {positions} tokens = {tokens_per_step:.0f} tokens per step, "
        f"{side} the {gpu_spec.name} knee of about {knee:.0f}: a speculative step costs {rho:.2f}× a plain one"
        + (f", so break-even rises to {_fmt(be)}" if side == "past" else "")
    )
    if answered["capped"]:
        reasons.insert(0, f"the answer is for {answered['words']}: {answered['why']}")
    details: dict[str, Any] = {
        "low_load_break_even_length": low_be,
        "verify_ratio": terms["verify_s"] / max(terms["plain_s"], 1e-12),
        "tokens_per_step": tokens_per_step,
        "knee_tokens": knee,
        "ridge": gpu_spec.ridge_for(perf.WEIGHT_FORMATS[dtype_name][1]),
        "step_time_plain_s": terms["plain_at_plain_batch_s"],
        "step_time_verify_s": terms["verify_s"],
        "step_time_speculative_s": terms["speculative_s"],
        "kv_share_of_plain_step": kv_share,
        "draft_ratio": pricing.ratio,
        "draft_ratio_basis": pricing.basis,
        "step_time_model": prior.hinge().to_dict(),
        "decision": decision.to_dict(),
        "carried_by": decision.carried_by,
        "notes": JSON_NOTES,
    }
    if length is None:
        reasons.insert(0, f"no acceptance given: an acceptance length above {_fmt(be)} would pay at {running} "
                          f"for {words} with k={draft_k} (at most {draft_k + 1} is possible)")
        details["required_acceptance_length"] = be
        details["crossover_state"] = None
        details["best_k"] = None
    else:
        expected = decision.expected_speedup
        relation = "above" if length > be else "below"
        reasons.insert(0, f"acceptance length {_fmt(length)} is {relation} break-even {_fmt(be)} for {words} with "
                          f"k={draft_k} at {running}"
                          + (f" ({_fmt(low_be)} at low load)" if abs(be - low_be) > 0.005 else ""))
        reasons.append(f"expected speedup {expected:.2f}× at {running}"
                       + (f" and {waiting:g} waiting (throughput at the batch each mode holds)" if waiting else ""))
        if decision.request_speedup is not None:
            budget_paced = "ln_token_budget" in decision.terms and decision.request_speedup == expected
            why = ("each request waits its turn for a step the token budget holds, at the engine's pace"
                   if budget_paced else "speculation does nothing for the prefill"
                   + (", and the draft model prefills too" if pricing.kind == "model" else ""))
            reasons.append(f"end to end, with {prompt:g} prompt and {output:g} output tokens per request: "
                           f"{decision.request_speedup:.2f}× ({why})")
        crossover = decision.crossover
        details["crossover_state"] = crossover.state
        if crossover.state == "crosses" and expected > 1 and crossover.concurrency < terms["batch_plain"]:
            # not monotonic (an MoE: a few sequences' verification wakes experts a plain step leaves idle)
            reasons.append(f"the speedup dips below 1 from about {crossover.concurrency:.0f} running sequences and "
                           "climbs back above it by this load")
        elif crossover.state == "crosses":
            reasons.append(f"speculation stops paying above about {crossover.concurrency:.0f} running sequences")
        elif crossover.state == "never_pays":
            reasons.append("it does not pay even with a single running sequence")
        else:
            why = (f" (KV reads at {context_per_sequence:.0f} tokens of context keep the step memory-bound)"
                   if context_per_sequence > 0 else "")
            reasons.append(perf.pays_throughout_words(decision.capacity, crossover.max_batch, "sequences") + why)
        if crossover.pays_from is not None:
            reasons.append(perf.pays_from_words(crossover.pays_from, "sequences", moe=target.experts is not None))
        if decision.carried_by == "token budget":
            reasons[-1] += perf.BUDGET_DECIDES_WORDS
        choice = decision.best_k
        basis, lengths_from = ("per-position", "per-position rates") if rates else ("i.i.d. α", "i.i.d. α")
        details["best_k"] = {"k": choice.k, "length": choice.length, "speedup": choice.speedup, "basis": basis}
        details["by_k"] = [{"k": c.k, "length": c.length, "speedup": c.speedup, "extrapolated": c.extrapolated}
                           for c in decision.by_k]
        if len(decision.by_k) > 1:
            reasons.append(perf.by_k_words(decision.by_k, choice.k, lengths_from))
        if choice.k != draft_k and choice.speedup > expected * 1.02:
            if choice.k == 0:
                reasons.append("no shorter chain pays here either: turn speculation off at this load")
            else:
                reasons.append(f"k={choice.k} would do better here: {choice.speedup:.2f}× "
                               f"(L ≈ {choice.length:.2f} from the {lengths_from})")
        if decision.state == "hold":
            reasons.append(hold_words(perf.BAND))
        reasons.append(f"the term that carries the answer: {decision.carried_by}")
    reasons.extend(decision.reasons)
    if kv_share >= 0.2:
        reasons.append(f"KV reads are {kv_share:.0%} of a plain step at {context_per_sequence:.0f} tokens of context "
                       "per sequence; verification reads them once, which keeps it cheap")
    if context is None and target.kv_bytes_per_token:
        reasons.append("no --context given: KV reads are left out, which understates how long contexts help speculation")
    if target.kv_bytes_per_token is None and context_per_sequence > 0:
        reasons.append("KV bytes per token unknown (give --kv-bytes-per-token or --model): context is not priced")
    if method_name is None:
        reasons.append(f"no --method given: {perf.UNKNOWN_METHOD_WORDS}")
    elif pricing.kind in ("model", "ratio", "head") and method_name not in ("ngram", "suffix"):
        reasons.append(f"draft cost: {pricing.basis}")
    if draft_note:
        reasons.append(draft_note)
    if gpu_spec.approximate:
        reasons.append(f"{gpu_spec.name} figures are approximate (no datasheet): calibrate on the node")
    reasons.extend(_model_notes(target, prior, tp_degree, terms["batch_plain"], tokens_per_step))
    verdict = {
        "speculation": decision.state,
        "confidence": round(decision.confidence, 3),
        "expected_speedup": decision.expected_speedup,
        "request_speedup": decision.request_speedup,
        "break_even_length": be,
        "crossover_concurrency": decision.crossover.concurrency if decision.crossover else None,
        # the batch each mode's answer is for: below the one asked for where the KV memory (or
        # --max-running) holds fewer sequences
        "batch": {key: answered[key] for key in ("asked", "plain", "speculative", "capped", "why")},
        "reasons": reasons,
    }
    inputs = _inputs(gpu_spec, target, dtype_name, tp_degree, batch_size, waiting, draft_k, length, method_name,
                     pricing, context_per_sequence, tree, cap, prompt, output)
    return {"schema": SCHEMA, "inputs": inputs, "verdict": verdict, "bound": bound.to_dict(), "details": details}
