"""The costs of a speculative step beyond the target's GEMM roofline, one term each, with its prior.

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
a step verifies v = k+1 positions per sequence (more with tree drafts). Pure: no I/O, no clock.

The terms (each used by `specwatch.perf.decision`):

- per-token engine cost that grows with tokens per step: below the knee the share of GEMM math that
  does not hide under the weight read at small M (the prior's `SMALL_GEMM_FRACTION`, charged only
  while the step is read-bound), plus sampling/rejection and bookkeeping. It lives in the target
  step-time model (the hinge's `per_token` term; the online hinge fit measures it live);
- verification attention over v query positions: `verify_attention_s`;
- the draft's own step at the current batch: `DraftPricing` (lookup: free; EAGLE/MTP/Medusa: a head;
  a draft model: its own roofline with its dtype and KV cache);
- the KV capacity speculation takes (v slots per sequence plus the draft's cache) and a cap on
  running requests under speculation: `capacity`;
- the prefill tax: `request_speedup`; and the prefill chunks that share each step, cut by the
  engine's token budget: `prefill_chunk`, `throughput_speedup`.

Mixture-of-experts weight reads that grow with tokens per step are in the step-time prior itself
(`StepTimePrior.weight_bytes`: E·(1 − (1 − top_k/E)^N) experts read per layer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specwatch.perf.draft import (HEAD_ASSUMED_WORDS, HEAD_DRAFT_RATIO, HEAD_METHODS, LOOKUP_DRAFT_RATIO,
                                  METHOD_WORDS, canonical_method, head_weights)
from specwatch.perf.models import ModelSpec
from specwatch.perf.steptime import (SMALL_GEMM_FRACTION, STEP_OVERHEAD_S, WEIGHT_FORMATS, StepTimeModel,  # noqa: F401
                                     StepTimePrior, step_overhead_s, weight_format_key, MOE_LAYER_LATENCY_S)


__all__ = [
    "count_words",
    "pays_throughout_words",
    "pays_from_words",
    "VERIFY_ATTENTION_PER_POSITION",
    "BATCH_EXPANSION_ATTENTION_PER_POSITION",
    "VERIFIERS",
    "DRAFT_FORWARD_OVERHEAD_S",
    "HEAD_FORWARD_OVERHEAD_S",
    "KV_MEMORY_UTILISATION",
    "UNKNOWN_METHOD_WORDS",
    "DraftPricing",
    "draft_pricing",
    "head_pricing",
    "verify_attention_s",
    "Capacity",
    "capacity",
    "prefill_time_s",
    "prefills_waited_out",
    "prefill_chunk",
    "throughput_speedup",
    "request_speedup",
    "prefill_shared",
    "budget_stepped_batch",
    "Settled",
    "budget_bound_words",
    "BUDGET_DECIDES_WORDS",
]


# Attention for v query positions per sequence reads each sequence's KV once, but decode kernels
# (paged/FlashAttention split-KV) do extra work per query row: each extra position costs about a
# tenth of the single-query KV read. This is a kernel factor: MagicDec's measured verify-to-decode
# ratio at long context, where the step is all KV read, is about 1–2 for the whole verify step
# (reference/model.md §5.4), and a tenth per position at k = 4–7 sits at its low end.
VERIFY_ATTENTION_PER_POSITION = 0.1
# vLLM's V0 engine before its multi-query scorer (PRs #8839/#9298, autumn 2024; the scorer was also
# off under CUDA graphs and for n-gram) verified by *batch expansion*: each of the k+1 positions
# became a sequence of its own, so every position read the sequence's KV again. PR #5691 measured
# the scoring step of Llama-7B on one A100 at k = 5 taking 1.36–1.55× the multi-query scorer's
# time at batch 32–128, which is what a full KV read per extra position gives there.
BATCH_EXPANSION_ATTENTION_PER_POSITION = 1.0
VERIFIERS = {"multi-query": VERIFY_ATTENTION_PER_POSITION, "batch-expansion": BATCH_EXPANSION_ATTENTION_PER_POSITION}
# A separate draft model's forward pays a fixed cost that does not shrink with its size: kernel
# launches, sampling, the proposer's bookkeeping, about what the target's step pays (measured
# small-draft costs in vLLM sit well above their bytes ratio).
DRAFT_FORWARD_OVERHEAD_S = STEP_OVERHEAD_S
# A draft head's forward (EAGLE, MTP, Medusa) has a fixed cost of its own besides its share of the
# target's GEMMs: one layer's launches (LAYER_OVERHEAD_S), the LM head's top-1 and the proposer's
# per-draft bookkeeping, about 50 µs a forward. Left out, a batch-1 calibration folds it into L.
HEAD_FORWARD_OVERHEAD_S = 50.0e-6
# vLLM's gpu_memory_utilization default: the share of GPU memory that weights + KV may take.
KV_MEMORY_UTILISATION = 0.9
# The one assumption made, everywhere, when the speculation method is not known.
UNKNOWN_METHOD_WORDS = f"method unknown: priced as a draft head (r = {HEAD_DRAFT_RATIO:.2f})"


@dataclass(frozen=True)
class DraftPricing:
    """How one draft token is priced at a load.

    kind: "lookup" (no model forward), "head" (EAGLE/MTP/Medusa: r of the target's weight-and-math
    step per draft token, plus the head's own fixed cost per forward), "model" (a draft model's own
    roofline) or "ratio" (r given: r of a plain target step at the same load).

    A head's r is derived from the target's shapes where they are known (`head_weights`: its weight
    reads over the target's), and `target_overhead_s` then holds the target step's fixed cost
    (`step_overhead_s` of its depth), which r does not scale: the head pays its own
    (HEAD_FORWARD_OVERHEAD_S) instead. Where the shapes are not known r is HEAD_DRAFT_RATIO of the
    whole step, assumed.
    """

    method: str | None  # canonical method; None when not known
    kind: str
    ratio: float  # r for "head"/"ratio"/"lookup"; the low-load r for "model" (informative)
    basis: str
    model: StepTimePrior | None = None  # the draft model's step-time prior ("model")
    kv_bytes_per_token: float = 0.0  # the draft's KV bytes per context token, per GPU
    params: float | None = None
    assumed: bool = False  # True when the method was not known
    scale: float = 1.0  # measured draft cost over the modelled one (a calibration), 1 when not measured
    target_overhead_s: float | None = None  # a derived head: the target step's fixed cost r leaves out
    # a head's own fixed cost a forward: HEAD_FORWARD_OVERHEAD_S, and a MoE layer's expert-block latency
    # where the head's layer routes over experts (an MTP module on a mixture of experts)
    head_overhead_s: float = HEAD_FORWARD_OVERHEAD_S

    @property
    def words(self) -> str:
        return METHOD_WORDS.get(self.method or "", "the drafter")

    def prefill_time_s(self, prompt_tokens: float, target_prefill_s: float) -> float:
        """The draft's own prefill of a prompt the target prefills in `target_prefill_s`: a draft
        model's forward over it, nothing for a lookup, r of the target's for a head."""
        if self.kind == "model" and self.model is not None:
            return prefill_time_s(self.model, prompt_tokens)
        return 0.0 if self.kind == "lookup" else self.ratio * target_prefill_s

    def forward_s(self, target: StepTimeModel, tokens: float, context_tokens: float,
                  draft_context_tokens: float | None = None) -> float:
        """Seconds for one draft forward over `tokens` tokens (model or head)."""
        if self.kind == "model" and self.model is not None:
            context = context_tokens if draft_context_tokens is None else draft_context_tokens
            return self.scale * (seconds(self.model.step_time(tokens, context)) - self.model.overhead_s
                                 + DRAFT_FORWARD_OVERHEAD_S)
        # a head: one decoder layer and the LM head over these tokens, a fixed share of the target's
        # step without its KV reads (the head's own KV is one layer's worth) and, where r was derived
        # from the shapes, without the step's fixed cost, and its own fixed cost
        step = seconds(target.step_time(tokens, 0.0))
        fixed = self.target_overhead_s
        if fixed:
            step = np.maximum(step - fixed, 0.0) if isinstance(step, np.ndarray) else max(step - fixed, 0.0)
        return self.scale * (self.ratio * step + self.head_overhead_s)

    def drafting_s(self, target: StepTimeModel, batch: float, k: int, positions: float, context_tokens: float,
                   draft_context_tokens: float | None = None) -> float:
        """Seconds of drafting per speculative step at this batch.

        A lookup proposer costs nothing on the GPU. A given ratio r costs k·r plain target steps. A
        draft model or head runs k forwards, and the first one catches up over the positions the
        last step verified (vLLM V1 pads it to b·(k+1) tokens) before the others draft one token
        per sequence each (tree drafts: several per level).
        """
        if self.kind == "lookup":
            return 0.0
        if self.kind == "ratio":
            return self.scale * k * self.ratio * seconds(target.step_time(batch, context_tokens))
        width = max(1.0, (positions - 1.0) / k)
        first = self.forward_s(target, batch * positions, context_tokens, draft_context_tokens)
        rest = (k - 1) * self.forward_s(target, batch * width, context_tokens, draft_context_tokens)
        return first + rest


def draft_pricing(
    method: str | None,
    *,
    ratio: float | None = None,
    scale: float = 1.0,
    draft_model: StepTimePrior | None = None,
    draft_params: float | None = None,
    target_params: float | None = None,
    target: ModelSpec | None = None,
    dtype: str | None = None,
) -> DraftPricing:
    """The pricing for a method: an explicit ratio wins; a draft model with a prior gets its own
    roofline; a draft head gets r derived from the target's shapes (`target`, its weights in `dtype`,
    by default the format it is released in) where they are known, else HEAD_DRAFT_RATIO, said to be
    assumed; a draft model known only by size gets bytes + overhead as r; an unknown method gets
    UNKNOWN_METHOD_WORDS. Raises ValueError for an unknown method name or a draft model with
    nothing to size it by."""
    pricing = _draft_pricing(method, ratio, draft_model, draft_params, target_params, target, dtype)
    if scale != 1.0:
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"draft cost scale must be positive, got {scale!r}")
        from dataclasses import replace

        pricing = replace(pricing, scale=float(scale), basis=f"{pricing.basis}, × {scale:.2f} as measured")
    return pricing


def head_pricing(name: str, target: ModelSpec | None, dtype: str | None = None) -> DraftPricing:
    """A draft head's pricing (`name` canonical): r derived from the target's shapes where they are
    known, with the target's fixed step cost left out of what r scales, else HEAD_DRAFT_RATIO."""
    head = head_weights(name, target)
    if head is None or target is None:
        return DraftPricing(name, "head", HEAD_DRAFT_RATIO, HEAD_ASSUMED_WORDS)
    try:  # the bytes only say the sizes in words: r is a ratio of weights in one format
        bytes_per_weight = WEIGHT_FORMATS[weight_format_key(dtype or target.weights)][0]
    except ValueError:
        bytes_per_weight = WEIGHT_FORMATS[weight_format_key(target.weights)][0]
    fixed = step_overhead_s(target.layers)
    own = HEAD_FORWARD_OVERHEAD_S
    if head.method == "mtp" and head.layer_is_moe:
        # its decoder layer is a MoE layer: its expert block pays the fixed latency every MoE layer
        # of the target's pays, however few tokens it drafts for
        own += MOE_LAYER_LATENCY_S
    basis = (f"{head.words(bytes_per_weight)}, plus {own * 1e6:.0f} µs a forward of its own"
             + (f" ({MOE_LAYER_LATENCY_S * 1e6:.0f} µs of it its MoE layer's expert-block latency)" if own > HEAD_FORWARD_OVERHEAD_S
                else "")
             + f" (the target's step: {fixed * 1e3:.2f} ms fixed)")
    return DraftPricing(name, "head", head.ratio, basis, target_overhead_s=fixed, head_overhead_s=own)


def _draft_pricing(method, ratio, draft_model, draft_params, target_params, target=None, dtype=None) -> DraftPricing:
    name = canonical_method(method) if method else None
    if ratio is not None:
        if not math.isfinite(ratio) or ratio < 0:
            raise ValueError(f"draft cost ratio must be ≥ 0, got {ratio!r}")
        return DraftPricing(name or "draft", "ratio", float(ratio), "given")
    if name is None:
        return DraftPricing(None, "head", HEAD_DRAFT_RATIO, UNKNOWN_METHOD_WORDS, assumed=True)
    if name in ("ngram", "suffix"):
        return DraftPricing(name, "lookup", LOOKUP_DRAFT_RATIO, "lookup proposer: no model forward")
    if name in HEAD_METHODS:
        return head_pricing(name, target, dtype)
    if draft_model is not None:
        return DraftPricing(name, "model", 0.0, "draft model's own roofline (weights, dtype, its KV cache)",
                            model=draft_model, kv_bytes_per_token=draft_model.kv_bytes_per_token,
                            params=draft_params)
    if draft_params is None or target_params is None:
        raise ValueError("a draft model's cost needs its parameter count (or an explicit draft ratio)")
    if not (draft_params > 0 and target_params > 0):
        raise ValueError("draft and target parameter counts must be positive")
    from specwatch.perf.draft import DRAFT_MODEL_FIXED_OVERHEAD

    r = draft_params / target_params + DRAFT_MODEL_FIXED_OVERHEAD
    return DraftPricing(name, "ratio", r, f"draft/target params {draft_params / target_params:.3f} + fixed overhead "
                                          f"{DRAFT_MODEL_FIXED_OVERHEAD:.2f}", params=draft_params)


def seconds(step_time: float | np.ndarray) -> float | np.ndarray:
    """A step time as a float, or as the array it is when the load is a grid of batches (the
    crossover search prices a whole grid at once, with the same arithmetic)."""
    return step_time if isinstance(step_time, np.ndarray) and step_time.ndim else float(step_time)


def verify_attention_s(kv_read_s: float | np.ndarray, positions: float,
                       per_position: float = VERIFY_ATTENTION_PER_POSITION) -> float | np.ndarray:
    """Extra attention time for verifying `positions` query positions per sequence over the same
    KV (`kv_read_s`: the single-query KV read time of the batch, or of each batch of a grid);
    `per_position` is the verifier's kernel factor (VERIFIERS)."""
    kv_read = np.maximum(0.0, kv_read_s) if isinstance(kv_read_s, np.ndarray) else max(0.0, kv_read_s)
    return max(0.0, positions - 1.0) * per_position * kv_read


@dataclass(frozen=True)
class Capacity:
    """How many sequences the node's KV cache holds, without and with speculation."""

    plain: float | None  # sequences at this context; None when memory is not known
    speculative: float | None  # with v lookahead slots per sequence, the draft's cache and the cap
    fits: bool  # the requested batch fits with speculation off
    note: str


def capacity(
    *,
    kv_budget_bytes: float | None,
    target_kv_per_token: float,
    context_per_sequence: float,
    positions: float,
    draft_kv_per_token: float = 0.0,
    draft_context_per_sequence: float | None = None,
    max_running: float | None = None,
    batch: float | None = None,
) -> Capacity:
    """Sequences the KV budget holds with speculation off and on (per GPU figures).

    Speculation reserves v slots of lookahead per sequence in the target cache and, for a draft
    model, the draft's own cache for the whole context; an engine may also cap running requests
    under speculation (`max_running`).
    """
    if kv_budget_bytes is None or target_kv_per_token <= 0:
        spec = max_running
        return Capacity(None, spec, True, "KV capacity unknown" if spec is None else
                        f"running capped at {max_running:.0f} under speculation")
    if kv_budget_bytes <= 0:
        return Capacity(0.0, 0.0, False, "the weights leave no memory for the KV cache")
    per_plain = target_kv_per_token * max(context_per_sequence, 1.0)
    draft_context = context_per_sequence if draft_context_per_sequence is None else draft_context_per_sequence
    per_spec = target_kv_per_token * (max(context_per_sequence, 1.0) + positions) + draft_kv_per_token * draft_context
    plain = kv_budget_bytes / per_plain
    spec = kv_budget_bytes / per_spec
    if max_running is not None:
        spec = min(spec, max_running)
    fits = batch is None or batch <= plain
    return Capacity(plain, spec, fits, f"KV holds {plain:.0f} sequences plain, {spec:.0f} with speculation")


def prefill_chunk(tokens: float | np.ndarray, prefill_tokens: float | np.ndarray,
                  token_budget: float | None) -> float | np.ndarray:
    """Prompt tokens a step carries beside `tokens` decode (or verified) positions: the prefill the
    load brings, cut to what the engine's token budget (max_num_batched_tokens) leaves. vLLM V1
    schedules the running decodes first, each with its k+1 verified positions, and fills the rest of
    the budget with prefill chunks; so speculation takes budget from the prefill once the budget binds."""
    if token_budget is None:
        return prefill_tokens
    room = token_budget - tokens
    if isinstance(room, np.ndarray) or isinstance(prefill_tokens, np.ndarray):
        return np.clip(room, 0.0, prefill_tokens)
    return min(max(room, 0.0), prefill_tokens)


def throughput_speedup(b_plain: float, b_spec: float, emitted: float, plain_s: float, spec_s: float,
                       plain_chunk: float, spec_chunk: float, prompt_per_output: float,
                       settled: Settled | None = None) -> float:
    """Requests the engine completes per second with speculation over without, when prefill shares
    the step. Each request brings `prompt_per_output` prompt tokens per output token, so a mode that
    emits more tokens per step must also prefill more per step; where the budget leaves a step's
    prefill chunk (`prefill_chunk`) short of that, the prefill sets the pace (and first tokens wait)
    until the mode settles where it keeps pace (`settled`), which it then does not fall below."""
    plain_rate = min(b_plain, plain_chunk / prompt_per_output) / plain_s
    spec_rate = min(b_spec * emitted, spec_chunk / prompt_per_output) / spec_s
    if settled is not None:
        plain_rate, spec_rate = max(plain_rate, settled.plain_rate), max(spec_rate, settled.spec_rate)
    return spec_rate / plain_rate


def prefill_time_s(model: StepTimeModel, prompt_tokens: float) -> float:
    """One prompt's prefill on its own: a step of `prompt_tokens` tokens (compute-bound when long)."""
    return float(model.step_time(max(prompt_tokens, 1.0), 0.0))


def prefills_waited_out(running: float, prefill_apart: bool) -> float:
    """The prefills one request's time holds: its own; where the engine prefills in batches apart
    from its decode steps (SGLang), those of the `running` requests that start while it runs, in a
    steady state (Little's law), which pause its decode and which speculation does not shorten."""
    return max(1.0, running) if prefill_apart else 1.0


def request_speedup(decode_speedup: float, plain_token_s: float, prompt_tokens: float, output_tokens: float,
                    prefill_s: float, draft_prefill_s: float) -> float:
    """End-to-end request speedup: speculation does nothing for the prefill (and a draft model pays
    its own), and divides the decode by the decode speedup."""
    plain = prefill_s + output_tokens * plain_token_s
    speculative = prefill_s + draft_prefill_s + output_tokens * plain_token_s / decode_speedup
    return plain / speculative


# What a crossover's words add when the token budget, not the step, carries the answer: the
# crossover is the decode steps' (where they stop paying), the verdict the requests'.
BUDGET_DECIDES_WORDS = "; that is the decode steps alone: at this load the token budget decides (below)"


def prefill_shared(prompt_per_output: float, b_plain: float, b_spec: float, emitted: float, plain_s: float,
                   spec_s: float, plain_chunk: float, spec_chunk: float, token_budget: float | None,
                   budget_from: str = "", settled: Settled | None = None) -> tuple[float, bool, str]:
    """The request-throughput speedup when prefill shares the step (`throughput_speedup`, each mode
    where it settles if its budget holds its prefill back), whether the budget holds the speculative
    engine's prefill back, and the words saying so. A plain engine whose decodes fill the budget
    exactly settles below it as the speculative one does (`settled`). Raises ValueError where more
    sequences decode than the budget holds: vLLM refuses a max_num_seqs above max_num_batched_tokens,
    so that budget is not the one this batch runs under."""
    m = prompt_per_output
    budget = f"{token_budget or 0:.0f}" + (f", {budget_from}" if budget_from else "")
    plain_settles = (settled is not None and settled.plain_batch < b_plain and token_budget is not None
                     and b_plain <= token_budget * (1.0 + 1e-9))
    if not (plain_chunk > 0 or plain_settles):  # no request would start, in either mode: no rate to compare
        raise ValueError(f"the step's token budget ({budget}) holds no prompt token beside the "
                         f"{b_plain:.0f} sequences decoding, so no request could start at this load; vLLM "
                         "never runs more sequences than its budget (max_num_seqs ≤ max_num_batched_tokens), "
                         "so that budget is not the one this load runs under")
    throughput = throughput_speedup(b_plain, b_spec, emitted, plain_s, spec_s, plain_chunk, spec_chunk, m, settled)
    wanted = m * b_spec * emitted
    words = (f"prefill shares the step: {m:.1f} prompt tokens per output token, so a plain step carries "
             f"about {count_words(plain_chunk)} prompt tokens and a speculative one {count_words(spec_chunk)}")
    held_back = spec_chunk < wanted * 0.995
    if held_back:
        settles = settled is not None and settled.spec_batch < b_spec
        words += (f"; the step's token budget ({budget}) leaves the prefill {spec_chunk / wanted:.0%} of what the "
                  f"speculative engine's completions need, so first tokens wait"
                  + (f" (the engine settles at about {count_words(settled.spec_batch)} of the "
                     f"{count_words(b_spec)} running, the rest waiting to start)" if settles else "")
                  + f" and requests complete {throughput:.2f}× as fast")
    if plain_settles:
        words += (f" (the plain engine's decodes fill the budget too: it settles at about "
                  f"{count_words(settled.plain_batch)} of the {count_words(b_plain)} running)")
    return throughput, held_back, words


def budget_stepped_batch(token_budget: float | None, positions: float, prompt_per_output: float,
                         emitted: float) -> float:
    """The most sequences an engine steps at once under its token budget (inf without one): each
    step's budget holds their `positions` positions (k + 1 verified, or 1 for a plain step) and the
    prompt tokens that start the requests replacing those they complete (`prompt_per_output` per
    token `emitted`). vLLM V1 schedules the running decodes first and starts waiting requests with
    what is left, so past this batch the running requests it cannot step, and the new ones, wait."""
    if token_budget is None:
        return math.inf
    return token_budget / (positions + prompt_per_output * min(emitted, positions))


@dataclass(frozen=True)
class Settled:
    """Where each mode settles when its token budget cannot step every running sequence beside the
    prefill that replaces those it completes (budget_stepped_batch): the batch it steps and the
    output tokens a second it then emits (0.0 where the budget holds them all: nothing to settle). A
    mode held past that batch starves its own prefill, its completions outpace its starts, and the
    running batch falls to it: that is the engine's steady state."""

    plain_batch: float
    plain_rate: float
    spec_batch: float
    spec_rate: float


def budget_bound_words(token_budget: float, budget_from: str, running: float, stepped: float, positions: float,
                       throughput: float) -> str:
    """The reason a budget that cannot step every running sequence's verified positions gives (no
    prefill in the steps: with it, prefill_shared says where the engine settles)."""
    source = f", {budget_from}" if budget_from else ""
    return (f"the step's token budget ({token_budget:.0f}{source}) holds {positions:.0f} verified positions for "
            f"about {count_words(stepped)} of the {count_words(running)} running sequences: a speculative "
            f"engine steps that many and the rest wait, so it completes {throughput:.2f}× the plain engine's "
            "tokens")


def count_words(value: float) -> str:
    """A count of sequences or tokens as people read it: whole numbers whole, a fraction below ten to
    one decimal (a batch of 1.3, a chunk of 0.4 prompt tokens, not "about 0")."""
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def pays_from_words(pays_from: float, noun: str = "", moe: bool = False) -> str:
    """The low end of where speculation pays, when it does not pay at one running sequence."""
    noun = f"running {noun}".strip()
    why = (": with few sequences a verify step wakes experts a plain step leaves idle; from there on every "
           "step reads most of them anyway" if moe else "")
    return f"below about {count_words(pays_from)} {noun} it does not pay{why}"


def pays_throughout_words(cap: Capacity, searched_to: float, noun: str = "") -> str:
    """Where a crossover that never comes was searched to (`searched_to` running), in words: the
    batch the KV memory holds (`cap`) where that is below the search's end (past it, more requests
    wait rather than run, so no larger batch is ever stepped), else the search's end."""
    noun = f"running {noun}".strip()
    held = [c for c in (cap.plain, cap.speculative) if c is not None and math.isfinite(c)]
    if held and max(held) < searched_to:
        plain, spec = cap.plain, cap.speculative
        limit = (f"the {count_words(max(held))} {noun} the KV memory holds"
                 if plain is None or spec is None or count_words(plain) == count_words(spec) else
                 f"the {count_words(plain)} {noun} the KV memory holds ({count_words(spec)} with speculation's slots)")
        return f"it keeps paying up to {limit}: more requests wait rather than run"
    return f"it keeps paying up to {searched_to:.0f} {noun}"
