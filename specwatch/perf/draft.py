"""Draft cost r per method and the low-load break-even length 1 + k·r (reference/model.md §1).

Conventions: k is the number of draft tokens per step; L counts the bonus token, so 1 ≤ L ≤ k+1;
r is the draft cost per draft token as a fraction of one plain target step at the same load.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specwatch.perf.acceptance import check_k


__all__ = [
    "method_words",
    "LOOKUP_DRAFT_RATIO",
    "HEAD_DRAFT_RATIO",
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
# EAGLE/EAGLE-3/MTP/Medusa heads are about one decoder layer plus (a slice of) the LM head run per
# draft token: for Llama-3.1-8B that is ~4 % with EAGLE-3's reduced vocabulary, for 70B ~3 %.
HEAD_DRAFT_RATIO = 0.05
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
) -> DraftCost:
    """r for a speculation method, or the explicit override when given.

    A draft model costs about its weight bytes over the target's (both steps are weight-read-bound
    at low load) plus a fixed per-forward overhead; it needs draft and target parameter counts.
    """
    name = canonical_method(method)
    if override is not None:
        if not math.isfinite(override) or override < 0:
            raise ValueError(f"draft cost ratio must be ≥ 0, got {override!r}")
        return DraftCost(name, float(override), "given")
    if name in ("ngram", "suffix"):
        return DraftCost(name, LOOKUP_DRAFT_RATIO, "lookup proposer: no model forward")
    if name in ("eagle", "eagle3", "mtp", "medusa"):
        return DraftCost(name, HEAD_DRAFT_RATIO, "draft head ≈ one decoder layer")
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
