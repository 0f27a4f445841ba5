"""Draft cost r per method and the low-load break-even length 1 + k·r (reference/model.md §1).

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specwatch.perf.acceptance import check_k
from specwatch.perf.models import ModelSpec


__all__ = [
    "method_words",
    "LOOKUP_DRAFT_RATIO",
    "HEAD_DRAFT_RATIO",
    "HEAD_METHODS",
    "EAGLE3_DRAFT_VOCAB",
    "HEAD_ASSUMED_WORDS",
    "HeadWeights",
    "head_weights",
    "DRAFT_MODEL_FIXED_OVERHEAD",
    "METHOD_WORDS",
    "canonical_method",
    "DraftCost",
    "draft_cost",
    "break_even_length",
]


# Lookup proposers (n-gram / prompt lookup, suffix trees) run no model forward; their CPU work
# overlaps the GPU step, so to first order they cost nothing (DESIGN §3).
LOOKUP_DRAFT_RATIO = 0.0
# EAGLE/EAGLE-3/MTP/Medusa heads read about one decoder layer plus an LM head per draft token, so
# their share of a target step falls with the target's depth and vocabulary: ~0.27 of a plain step
# on Llama-3.2-1B (16 layers, a 128k × 2048 LM head), ~0.05–0.10 on Llama-3.1-8B, ~0.012–0.014 on 405B.
# Where the target's shapes are known (a ModelSpec with its vocabulary) r is derived from them
# (`head_weights`); HEAD_DRAFT_RATIO is only the fallback where they are not, and is said to be
# assumed (HEAD_ASSUMED_WORDS): a middle value for 7–70B targets.
HEAD_DRAFT_RATIO = 0.05
HEAD_METHODS = ("eagle", "eagle3", "mtp", "medusa")
HEAD_ASSUMED_WORDS = (f"draft head ≈ one decoder layer and the LM head: r = {HEAD_DRAFT_RATIO:.2f} assumed, "
                      "not derived (the target's shapes are not known: give --model)")
# EAGLE-3 heads are trained with a reduced draft vocabulary mapped onto the target's tokens:
# draft_vocab_size 32000 in the published heads (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B and its 70B
# sibling); a head trained over the whole vocabulary reads the target-sized LM head instead.
EAGLE3_DRAFT_VOCAB = 32_000
# A separate draft model pays its own per-forward fixed cost (kernel launches, sampling, scheduling,
# TP collectives) that does not shrink with its size; measured small-draft ratios in vLLM sit well
# above bytes(draft)/bytes(target). 0.05 per draft token is a middle value; override when measured.
DRAFT_MODEL_FIXED_OVERHEAD = 0.05

_METHODS = {
    "ngram": "ngram",
    "n_gram": "ngram",
    "ngram_gpu": "ngram",
    "prompt_lookup": "ngram",
    "suffix": "suffix",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "eagle_3": "eagle3",
    "mtp": "mtp",
    "medusa": "medusa",
    "mlp_speculator": "mtp",
    "draft": "draft",
    "draft_model": "draft",
}


# How the reasons name each method.
METHOD_WORDS = {
    "ngram": "n-gram lookup",
    "suffix": "suffix lookup",
    "eagle": "an EAGLE head",
    "eagle3": "an EAGLE-3 head",
    "mtp": "an MTP head",
    "medusa": "Medusa heads",
    "draft": "a draft model",
}


def method_words(method: str | None) -> str | None:
    """How the reasons and the dashboard name a method ("n-gram lookup", ...); None when unknown."""
    return METHOD_WORDS.get(method, method) if method else None


def canonical_method(method: str) -> str:
    """Map vLLM's method spellings onto the ones this model prices; ValueError on unknown methods."""
    key = method.strip().lower().replace("-", "_").replace(" ", "_")
    if key.endswith("_mtp"):  # vLLM's per-architecture MTP types (deepseek_mtp, qwen3_next_mtp, ...)
        key = "mtp"
    if key not in _METHODS:
        raise ValueError(f"unknown speculation method {method!r}; known: {', '.join(sorted(set(_METHODS)))}")
    return _METHODS[key]


@dataclass(frozen=True)
class HeadWeights:
    """The weights a draft head reads per draft token, against those a plain target step reads at
    low load (both in parameters: the head is taken to be in the target's weight format, so the
    ratio is the bytes ratio). `ratio` is r's weight-read share; the head's own fixed cost per
    forward is priced beside it (`specwatch.perf.costs.HEAD_FORWARD_OVERHEAD_S`).

    Shapes, per method (h: the target's hidden size, V its vocabulary):
    - eagle (EAGLE-1/2): one decoder layer, the h·2h FC that fuses the token embedding with the
      target's feature, and the target's LM head (V·h);
    - eagle3: one decoder layer whose q/k/v projections take 2h (embedding and fused feature), the
      3h→h FC fusing three target layers' features, and its own LM head over EAGLE3_DRAFT_VOCAB;
    - mtp (DeepSeek-V3's module): one full transformer block (for an MoE target the active weights
      of one MoE layer), the 2h→h embedding projection and the target's LM head;
    - medusa: per draft token one h×h residual block and that head's own LM head (V·h).
    One decoder layer is the target's own: its active weights per layer (`ModelSpec.layer_active_params`),
    also for an EAGLE head on an MoE target (whose layer is dense in the published heads).
    """

    method: str
    model: str  # the target's name
    layer: float  # the decoder layer (0 for Medusa)
    projection: float  # the FC into it (EAGLE, EAGLE-3, MTP) or Medusa's residual block
    lm_head: float
    vocab: int  # the LM head's vocabulary
    target: float  # the weights a plain low-load step reads (the active ones of an MoE target)
    layer_is_moe: bool = False  # the target's layers route over experts

    @property
    def params(self) -> float:
        return self.layer + self.projection + self.lm_head

    @property
    def ratio(self) -> float:
        return self.params / self.target

    def words(self, bytes_per_weight: float) -> str:
        """How r was derived, in bytes at `bytes_per_weight` (the target's weight format)."""
        def gb(params: float) -> str:
            return f"{params * bytes_per_weight / 1e9:.3g} GB"

        if self.method == "medusa":
            parts = f"one residual block ({gb(self.projection)}) and its own LM head over {self.vocab:,} tokens"
        else:
            fc = {"eagle": "the 2·hidden→hidden FC", "eagle3": "the 3·hidden→hidden FC and wider q/k/v",
                  "mtp": "the 2·hidden→hidden projection"}[self.method]
            layer = "one MoE layer's active weights" if self.method == "mtp" and self.layer_is_moe else \
                "one decoder layer"
            if self.method == "eagle3":
                head = (f"its own LM head over a {self.vocab:,}-token draft vocabulary (assumed, as in the "
                        f"published EAGLE-3 heads)")
            else:
                head = f"the target's LM head over {self.vocab:,} tokens"
            parts = f"{layer} ({gb(self.layer)}), {fc} ({gb(self.projection)}) and {head}"
        return (f"derived from {self.model}'s shapes: {parts} ({gb(self.lm_head)}) read per draft token, "
                f"{gb(self.params)} of the {gb(self.target)} a plain step reads → r ≈ {self.ratio:.3f}")


def head_weights(method: str, target: ModelSpec | None) -> HeadWeights | None:
    """What a draft head of `method` reads per draft token on `target` (see HeadWeights), or None
    where the method is no head or the target's shapes (its vocabulary) are not known."""
    name = canonical_method(method)
    if name not in HEAD_METHODS or target is None:
        return None
    layer = target.layer_active_params
    lm_head = target.lm_head_params
    if layer is None or lm_head is None or target.vocab_size is None or not target.active_params > 0:
        return None
    h = float(target.hidden_size)
    vocab = target.vocab_size
    if name == "eagle":
        projection = 2.0 * h * h
    elif name == "eagle3":
        vocab = min(vocab, EAGLE3_DRAFT_VOCAB)
        lm_head = float(vocab) * h
        q_width = target.attention_heads * target.head_dim
        kv_width = target.kv_heads * target.head_dim
        projection = 3.0 * h * h + h * (q_width + 2.0 * kv_width)  # the fusing FC; q/k/v over 2h, not h
    elif name == "mtp":
        projection = 2.0 * h * h
    else:  # medusa: no decoder layer, a residual block and an LM head per draft token
        layer, projection = 0.0, h * h
    return HeadWeights(name, target.name, layer, projection, lm_head, vocab, float(target.active_params),
                       layer_is_moe=target.is_moe)


@dataclass(frozen=True)
class DraftCost:
    """Draft cost r per draft token, relative to one plain target step at the same load."""

    method: str
    ratio: float
    basis: str  # plain words: where the number comes from


def draft_cost(
    method: str,
    *,
    draft_params: float | None = None,
    target_params: float | None = None,
    override: float | None = None,
    target: ModelSpec | None = None,
    bytes_per_weight: float | None = None,
) -> DraftCost:
    """r for a speculation method, or the explicit override when given.

    A draft head's r is its weight reads over the target's (`head_weights`), derived from the
    target's shapes (`target`, the weights priced at `bytes_per_weight`, by default 2) where they are
    known, else HEAD_DRAFT_RATIO, said to be assumed. A draft model costs about its weight bytes over
    the target's (both steps are weight-read-bound at low load) plus a fixed per-forward overhead;
    it needs draft and target parameter counts.
    """
    name = canonical_method(method)
    if override is not None:
        if not math.isfinite(override) or override < 0:
            raise ValueError(f"draft cost ratio must be ≥ 0, got {override!r}")
        return DraftCost(name, float(override), "given")
    if name in ("ngram", "suffix"):
        return DraftCost(name, LOOKUP_DRAFT_RATIO, "lookup proposer: no model forward")
    if name in HEAD_METHODS:
        head = head_weights(name, target)
        if head is None:
            return DraftCost(name, HEAD_DRAFT_RATIO, HEAD_ASSUMED_WORDS)
        return DraftCost(name, head.ratio, head.words(bytes_per_weight or 2.0))
    if draft_params is None or target_params is None:
        raise ValueError("a draft model's cost needs its parameter count (or an explicit draft ratio)")
    if not (draft_params > 0 and target_params > 0):
        raise ValueError("draft and target parameter counts must be positive")
    ratio = draft_params / target_params + DRAFT_MODEL_FIXED_OVERHEAD
    return DraftCost(
        name,
        ratio,
        f"draft/target params {draft_params / target_params:.3f} + fixed overhead {DRAFT_MODEL_FIXED_OVERHEAD:.2f}",
    )


def break_even_length(k: int, draft_ratio: float, verify_ratio: float = 1.0) -> float:
    """The acceptance length at which speculation breaks even: ρ_v + k·r.

    With the memory-bound target of low load, verifying k+1 tokens costs what one token does
    (ρ_v = 1) and this is Leviathan's 1 + k·r.
    """
    check_k(k)
    if not math.isfinite(draft_ratio) or draft_ratio < 0:
        raise ValueError(f"draft cost ratio must be ≥ 0, got {draft_ratio!r}")
    return verify_ratio + k * draft_ratio
