"""What predict says of a deployment at scale, beside its verdict: a disaggregated deployment's
pools (`--role`), expert parallelism and DP attention in words, and the per-position acceptance an
operator reads off vLLM (`--acceptance-per-position`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specwatch import perf
from specwatch.advice.predict_inputs import PredictInputError, Target, memory_fit, parse_quantity, positive_int
from specwatch.advice.token_budget import prefills_apart
from specwatch.perf.hardware import GpuSpec

__all__ = ["ROLES", "PoolLayout", "PrefillPool", "check_prefill_fit", "check_prefill_layout", "check_role",
           "disaggregated", "expert_parallel_words", "per_position"]


def per_position(given: Any, k: int, others: tuple[Any, ...]) -> tuple[float, ...]:
    """The per-position acceptance (vLLM's per-position rates: the share of drafts whose position i
    was accepted), from a sequence or "0.92,0.66,0.24"; () when not given. The best k is then
    searched over every position given, on the measured L(k′) rather than an i.i.d. α."""
    if given is None:
        return ()
    if any(value is not None for value in others):
        raise PredictInputError("give the acceptance once: --acceptance-per-position, or a length, rate or alpha")
    parts = given.split(",") if isinstance(given, str) else list(given)
    try:
        rates = tuple(parse_quantity(part, "acceptance at a position") for part in parts if str(part).strip())
    except PredictInputError:
        raise PredictInputError(f"--acceptance-per-position takes rates between 0 and 1, comma-separated "
                                f"(position 1 first), got {given!r}") from None
    if not rates or any(not 0.0 <= rate <= 1.0 for rate in rates):
        raise PredictInputError(f"--acceptance-per-position takes rates between 0 and 1, comma-separated "
                                f"(position 1 first), got {given!r}")
    if any(later > earlier + 1e-9 for earlier, later in zip(rates, rates[1:])):
        raise PredictInputError("--acceptance-per-position: a position cannot be accepted more often than the one "
                                "before it (each needs all before it accepted)")
    if len(rates) < k:
        raise PredictInputError(f"--acceptance-per-position gives {len(rates)} positions for k={k}: give one for "
                                "each draft position, at least")
    return rates


# The pools of a disaggregated deployment predict prices (--role).
ROLES = ("decode", "prefill")


def check_role(role: str | None, prompt: float | None, output: float | None, prompt_per_output: Any,
                budget: float | None) -> str | None:
    """The pool of a disaggregated deployment asked about (None: aggregated), or one clear line."""
    if role is None or str(role).lower() in ("aggregated", "none", ""):
        return None
    name = str(role).lower()
    if name not in ROLES:
        raise PredictInputError(f"unknown role {role!r}: decode or prefill (a disaggregated deployment's pools), "
                                "or leave it out for an aggregated one")
    if name == "prefill" and (prompt is None or output is None):
        raise PredictInputError("--role prefill prices each request's prefill: give --prompt-tokens and "
                                "--output-tokens")
    if budget is not None or prompt_per_output is not None:
        raise PredictInputError(f"a {name} pool's decode steps carry no prefill chunks: --max-num-batched-tokens "
                                "and a prompt mix do not apply to it")
    return name


# The engines predict knows how to schedule (--engine): which of them prefill apart from their
# decode steps is token_budget.PREFILLS_APART.
ENGINES = ("vllm", "trtllm", "sglang")


def check_engine(engine: str | None, budget: float | None, prompt_per_output: Any) -> bool:
    """Whether the engine asked about prefills apart from its decode steps (False where none is
    named: priced as vLLM chunks it), or one clear line."""
    if engine is None or str(engine) == "":
        return False
    name = str(engine).lower()
    if name not in ENGINES:
        raise PredictInputError(f"unknown engine {engine!r}: {', '.join(ENGINES)}")
    if prefills_apart(name) and (budget is not None or prompt_per_output is not None):
        raise PredictInputError(f"{name} prefills apart from its speculative decode steps: "
                                "--max-num-batched-tokens and a prompt mix do not apply to it")
    return prefills_apart(name)


def prefills_apart_words(result: dict[str, Any], step_model: perf.StepTimeModel, batch: float,
                         prompt: float | None) -> None:
    """The reason an engine that prefills apart from its decode steps gives: the prefills each
    request waits out (perf.prefills_waited_out), priced by the step model the decision used, where
    the request's shape is known."""
    words = "the engine prefills in batches of its own (SGLang under speculation): its decode steps carry no prompt tokens"
    if prompt is not None:
        each = perf.prefill_time_s(step_model, prompt)
        waits = perf.prefills_waited_out(batch, True)
        words += (f", and at {batch:g} running each request waits out about {waits:g} prefills of "
                  f"{each * 1e3:.0f} ms ({waits * each:.2f} s), which speculation does not shorten")
    result["verdict"]["reasons"].append(words)


@dataclass(frozen=True)
class PoolLayout:
    """How a pool's GPUs are laid out: tensor parallelism, and expert parallelism with or without
    data-parallel attention."""

    tp: int
    ep: int | None = None
    dp_attention: bool = False

    @property
    def words(self) -> str:
        words = f"TP {self.tp}"
        if self.ep is not None:
            words += f", EP {self.ep}" + (" with DP attention" if self.dp_attention else "")
        return words

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "ep": self.ep, "dp_attention": self.dp_attention}


@dataclass(frozen=True)
class PrefillPool:
    """A disaggregated deployment's prefill pool as priced: the target's step law and the drafter's
    pricing on its layout, which is its own (`--prefill-tp`, `--prefill-ep`) or the decode pool's."""

    prior: perf.StepTimePrior
    pricing: perf.DraftPricing
    layout: PoolLayout
    from_flags: bool


def check_prefill_layout(role: str | None, tp: Any, ep: Any, dp_attention: bool, decode_tp: int) -> PoolLayout | None:
    """The prefill pool's own layout where one is given (None: the decode pool's; its TP where only
    its EP is given), or one clear line."""
    if tp is None and ep is None and not dp_attention:
        return None
    if role is None:
        raise PredictInputError("--prefill-tp, --prefill-ep and --prefill-dp-attention describe a disaggregated "
                                "deployment's prefill pool: give --role decode or --role prefill")
    layout = PoolLayout(decode_tp if tp is None else positive_int(tp, "prefill tp"),
                        None if ep is None else positive_int(ep, "prefill ep"), bool(dp_attention))
    if layout.dp_attention and layout.ep is None:
        raise PredictInputError("--prefill-dp-attention spreads the experts over --prefill-ep GPUs: give it")
    return layout


def check_prefill_fit(pool: PrefillPool, gpu_spec: GpuSpec, target: Target, weight_bytes: float,
                      prompt: float | None) -> None:
    """A prefill pool whose GPUs cannot hold the weights (target and drafter) and one prompt's KV is
    refused, as a decode pool is: its prefill time would mean nothing."""
    layout = pool.layout
    ep_gpus = layout.ep if layout.dp_attention else None
    fit = memory_fit(gpu_spec.memory_bytes or 0.0, perf.KV_MEMORY_UTILISATION, weight_bytes, target, prompt or 0.0,
                     layout.tp, expert_weight_bytes=pool.prior.expert_weight_bytes * (ep_gpus or layout.tp),
                     ep_gpus=ep_gpus)
    if fit.fits:
        return
    smallest = (f"EP {fit.min_ep} would" if fit.min_ep is not None else
                f"TP {fit.min_tp} would" if fit.min_tp is not None else "no TP up to the largest tried would")
    raise PredictInputError(f"the prefill pool ({layout.words}) cannot hold the model: "
                            f"{fit.weight_bytes / 1e9:.0f} GB of weights and {fit.one_sequence_kv_bytes / 1e9:.1f} GB "
                            f"of one prompt's KV a GPU, against {fit.usable_bytes / 1e9:.0f} GB usable of each "
                            f"{gpu_spec.name}; {smallest}")


def disaggregated(result: dict[str, Any], role: str, decision: perf.Decision, pool: PrefillPool, target: Target,
                  gpu_spec: GpuSpec, prompt: float | None, output: float | None) -> None:
    """A disaggregated deployment's pools: the decode pool's steps carry no prefill, and each
    request's prefill (the draft's too) and the KV handed from the prefill pool to the decode pool
    are paid on the prefill pool, priced on its own layout, and on the wire, not in the decode
    steps. Adds `verdict.disaggregated` and, where the request's shape is known, the reasons that
    price the prefill pool's share."""
    verdict = result["verdict"]
    prior, pricing = pool.prior, pool.pricing
    block: dict[str, Any] = {"role": role, "prefill_layout": dict(pool.layout.to_dict(), from_flags=pool.from_flags)}
    words = ["disaggregated decode pool: its steps carry no prefill chunks (the prefill pool runs them)"
             if role == "decode" else
             "disaggregated prefill pool: what speculation costs it is the drafter's prefill of each prompt and "
             "the drafter's KV it hands over; the verdict below is the decode pool's"]
    if prompt is not None and output is not None and prompt > 0:
        prefill = perf.prefill_time_s(prior, prompt)
        draft_prefill = pricing.prefill_time_s(prompt, prefill)
        if pricing.kind == "model" and pricing.model is not None:
            draft_kv = pricing.kv_bytes_per_token * pool.layout.tp * prompt  # its whole cache, every rank's share
        elif pricing.kind == "lookup":
            draft_kv = 0.0
        else:  # a head: one layer's KV
            draft_kv = (target.kv_bytes_per_token or 0.0) / (target.layers or 32) * prompt
        kv = (target.kv_bytes_per_token or 0.0) * prompt
        # the decode pool takes its prompts' KV from the prefill pool over the NIC, as the all-to-all
        # past one node (Dynamo's NIXL, SGLang's Mooncake: RDMA)
        link = perf.NIC_BANDWIDTH
        handover, draft_handover = kv / link, draft_kv / link
        tax = (draft_prefill + draft_handover) / (prefill + handover) if prefill + handover > 0 else 0.0
        block.update(prefill_s=prefill, draft_prefill_s=draft_prefill, kv_handover_bytes=kv,
                     draft_kv_handover_bytes=draft_kv, kv_handover_s=handover, draft_kv_handover_s=draft_handover,
                     prefill_tax=tax)
        speedup = decision.expected_speedup
        if speedup is not None and output > 0:
            # a plain step's time per token of each sequence: the step, at the batch the plain mode holds
            plain_token = float(result["details"]["step_time_plain_s"])
            plain = prefill + handover + output * plain_token
            speculative = prefill + handover + draft_prefill + draft_handover + output * plain_token / speedup
            block["request_speedup"] = plain / speculative
            verdict["request_speedup"] = block["request_speedup"]
        laid_out = (f"its own layout, {pool.layout.words}" if pool.from_flags else
                    f"laid out as the decode pool, {pool.layout.words} (--prefill-tp and --prefill-ep give its own)")
        words.append(f"each request's prefill on the prefill pool ({laid_out}): {prefill * 1e3:.0f} ms"
                     + (f", {draft_prefill * 1e3:.0f} ms more for the drafter's" if draft_prefill > 0 else "")
                     + f"; the KV handed to the decode pool: {kv / 1e6:.0f} MB ({handover * 1e3:.0f} ms at "
                     f"{link / 1e9:.0f} GB/s)"
                     + (f", {draft_kv / 1e6:.1f} MB more for the drafter's cache" if draft_kv > 0 else "")
                     + (f": speculation taxes the prefill pool {tax:.1%}" if tax > 0 else
                        ": speculation costs the prefill pool nothing (a lookup drafter)"))
        if "request_speedup" in block:
            words.append(f"end to end, the prefill paid on its pool: {block['request_speedup']:.2f}× a request")
    verdict["disaggregated"] = block
    if "request_speedup" in block:  # the aggregated end-to-end line left its handover out
        verdict["reasons"] = [r for r in verdict["reasons"] if not r.startswith("end to end, with")]
    if role == "prefill":
        verdict["reasons"] = words + verdict["reasons"]
    else:
        verdict["reasons"].extend(words)


def expert_parallel_words(prior: perf.StepTimePrior, experts: int, tp_degree: int, plain_tokens: float | None,
                           verify_tokens: float | None) -> str:
    """What expert parallelism (and DP attention) does to the step, with what its all-to-all costs."""
    gpus, ranks = prior.expert_gpus, int(round(prior.expert_token_scale))
    words = f"expert parallelism over {gpus} GPUs ({experts / gpus:.3g} experts each, whole)"
    if ranks > 1:
        words += (f", attention data-parallel over {ranks} ranks of {tp_degree} GPU{'s' if tp_degree > 1 else ''}: "
                  "the batch is one rank's running requests, whose KV it holds, and every rank's tokens meet in "
                  "the experts")
    words += (f"; the busiest rank's expert math is counted at {perf.EP_IMBALANCE:g}× the mean (routing is uneven "
              "even after a load balancer)")
    if plain_tokens is not None and verify_tokens is not None and prior.alltoall_count:
        plain_s, verify_s = (float(prior.alltoall_s(n)) for n in (plain_tokens, verify_tokens))
        link = ("the NIC" if prior.alltoall_bandwidth == perf.NIC_BANDWIDTH else "NVLink")
        words += (f"; each MoE layer's dispatch (FP8) and combine (BF16) over {link} take {plain_s * 1e3:.1f} ms of "
                  f"the step at {plain_tokens:.0f} tokens and {verify_s * 1e3:.1f} ms verifying {verify_tokens:.0f} "
                  "(their volume grows with every verified position; a two-batch overlap hides part of it, which "
                  "the fit on the node measures)")
    return words
