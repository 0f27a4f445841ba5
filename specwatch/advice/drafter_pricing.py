"""What the drafter costs: the speculation config judged with (the target's own, completed by the
operator's flags), the draft cost r it implies, and the pricing the decision takes (the same as
predict's for the same method), with the caveats when the method or the draft's size is assumed.
"""

from __future__ import annotations

import dataclasses

from specwatch import perf
from specwatch.perf.hardware import GpuSpec, ModelSpec, lookup_model
from specwatch.telemetry.snapshot import FROM_FLAGS, FROM_METRICS, SpeculationConfig, resolve_speculation

# r for a draft model whose size is not known: the fixed per-forward cost plus about 5 % in bytes.
UNSIZED_DRAFT_RATIO = 0.1
# The caveat of a verdict whose draft cost rests on an assumed method (flag method_assumed).
METHOD_ASSUMED_WORDS = f"speculation {perf.UNKNOWN_METHOD_WORDS} (pass --method)"


class DrafterPricing:
    """One advisor's drafter: its speculation config, draft cost and pricing, each kept while what
    it is made from stands (they are pure functions of the settings and the target's config)."""

    def __init__(self, *, method: str | None = None, draft_ratio: float | None = None,
                 draft_params: float | None = None, target_params: float | None = None,
                 k: int | None = None, tp: int = 1, dtype: str = "bf16",
                 target: ModelSpec | None = None) -> None:
        # The operator's word on the method, k and the draft model's size. The target's own /server_info
        # (and, for k, its counters) wins over them; they win over what a sample was declared with.
        self.method = method
        self.k = k
        self.draft_ratio = draft_ratio
        self.draft_params = draft_params
        self.target_params = target_params
        # the target's tensor parallelism and dtype, which a draft model runs at too
        self.tp = tp
        self.dtype = dtype
        # the target's shapes, which a draft head's r is derived from (None: r assumed)
        self.target = target
        # The speculation config the latest verdict was judged with: the target's, with the operator's
        # method and draft size where the target does not say (what the front ends show).
        self.speculation: SpeculationConfig | None = None
        self._pricing_cache: tuple[perf.DraftCost | None, GpuSpec | None, perf.DraftPricing] | None = None
        self._draft_cost_cache: tuple[SpeculationConfig | None,
                                      tuple[perf.DraftCost | None, str | None]] | None = None

    def draft_cost(self, observed: SpeculationConfig | None = None,
                   counted_k: int | None = None) -> tuple[perf.DraftCost | None, str | None]:
        """r and the canonical method; (None, None) when the method is not known. `observed` is the
        target's SpeculationConfig; the one judged with becomes `self.speculation`. `counted_k` is the
        k the window's counters give: with --k given, it overrules the flag (and says so)."""
        if self.k is not None and counted_k:
            observed = with_counted_k(observed, counted_k)
        cached = self._draft_cost_cache  # a pure function of the (fixed) settings and the sample's
        if cached is not None and cached[0] == observed:
            return cached[1]
        declared = SpeculationConfig.from_flags(self.method, draft_params=self.draft_params, k=self.k)
        self.speculation = resolve_speculation(observed, declared)
        result = self._compute_draft_cost(self.speculation)
        self._draft_cost_cache = (observed, result)
        return result

    def _compute_draft_cost(self, speculation: SpeculationConfig | None) -> tuple[perf.DraftCost | None, str | None]:
        method = speculation.method if speculation else None
        draft_params = speculation.draft_params if speculation else None
        if method is None and self.draft_ratio is None:
            return None, None
        try:
            name = perf.canonical_method(method) if method else "draft"
        except ValueError:
            return None, method
        try:
            return perf.draft_cost(name, draft_params=draft_params, target_params=self.target_params,
                                   override=self.draft_ratio, target=self.target,
                                   bytes_per_weight=_bytes_per_weight(self.dtype)), name
        except ValueError:
            # a draft model of unknown size: its fixed per-forward overhead plus a small model's bytes
            return perf.DraftCost(name, UNSIZED_DRAFT_RATIO,
                                  f"draft model size unknown: assumed r ≈ {UNSIZED_DRAFT_RATIO} "
                                  "(pass --draft-ratio)"), name

    def pricing(self, cost: perf.DraftCost | None, gpu: GpuSpec | None = None) -> perf.DraftPricing:
        """The draft's pricing for the decision: the same as predict's for the same method and GPU. A
        draft model on an identified GPU runs its own roofline (its weights, its fixed forward cost,
        its KV cache where the model is known by name), as predict prices it; elsewhere r of a plain
        target step. A pure function of the (frozen) cost and the GPU, which draft_cost and the GPU
        identity keep while the settings stand: made once."""
        cached = self._pricing_cache
        if cached is not None and cached[0] is cost and cached[1] is gpu:
            return cached[2]
        pricing = price(cost, self.target, self.dtype)
        speculation = self.speculation
        if gpu is not None and cost is not None and pricing.kind == "ratio" and cost.basis != "given" \
                and speculation is not None and (speculation.draft_model or speculation.draft_params):
            try:
                law, _, params = draft_model_law(gpu, speculation.draft_model, speculation.draft_params,
                                                 self.dtype, None, self.tp)
                pricing = perf.draft_pricing(cost.method, draft_model=law, draft_params=params,
                                             target_params=self.target_params)
            except (LookupError, ValueError):
                pass  # a draft the table does not know, and no size: r of a plain step, as before
        self._pricing_cache = (cost, gpu, pricing)
        return pricing


def draft_model_law(gpu: GpuSpec, name: str | None, params: float | None, dtype: str, kv: float | None,
                    tp: int) -> tuple[perf.StepTimePrior, str | None, float]:
    """A draft model's own step-time law on `gpu` (its size, dtype and KV cache, at the target's
    tensor parallelism), a note on what was assumed, and its size. The table's figures where the model is
    known by name (its size unless `params` says it, its KV bytes unless `kv` does); a KV cache not
    priced where neither says it. Raises LookupError for a name the table does not know, ValueError
    for sizes no model has."""
    spec = None
    replicated = False
    if name is not None:
        spec = lookup_model(str(name))
        if spec is None:
            raise LookupError(f"unknown draft model {name!r}")
        params = params or spec.params
        if kv is None:  # the table's figure, whole on every rank where the cache is an MLA latent
            kv, replicated = spec.kv_bytes_per_token, spec.kv_replicated_under_tp
    if params is None:
        raise ValueError("a draft model's law needs its size or its name")
    note = None
    if kv is None:
        kv = 0.0
        note = "draft KV cache not priced (give --draft-model or --draft-kv-bytes-per-token)"
    law = perf.datasheet_prior(
        gpu, params=params, kv_bytes_per_token=kv, tp=tp, dtype=dtype,
        layers=spec.layers if spec else None, hidden_size=spec.hidden_size if spec else None,
        kv_replicated=replicated,
    )
    return law, note, params


def with_counted_k(observed: SpeculationConfig | None, counted_k: int) -> SpeculationConfig:
    """The target's config with the k its counters give, where its /server_info did not say k (a k
    the flags put there gives way: the server's count is what it runs)."""
    if observed is not None and observed.k is not None and observed.source_of("k") not in (FROM_FLAGS, None):
        return observed
    if observed is None:
        return SpeculationConfig.known(FROM_METRICS, k=counted_k)
    sources = tuple(pair for pair in observed.sources if pair[0] != "k") + (("k", FROM_METRICS),)
    return dataclasses.replace(observed, k=counted_k, sources=sources)


def _bytes_per_weight(dtype: str | None) -> float | None:
    """Bytes per weight of a format the laws know (None for any other: the words then say BF16)."""
    try:
        return perf.WEIGHT_FORMATS[perf.weight_format_key(dtype)][0] if dtype else None
    except ValueError:
        return None


def price(cost: perf.DraftCost | None, target: ModelSpec | None = None, dtype: str | None = None) -> perf.DraftPricing:
    """A draft cost as the decision prices it: a known method's own pricing unless r was given (a
    draft head's r derived from the target's shapes where `target` gives them)."""
    if cost is None:
        return perf.draft_pricing(None)
    if cost.basis != "given" and cost.method in ("ngram", "suffix", "eagle", "eagle3", "mtp", "medusa"):
        return perf.draft_pricing(cost.method, target=target, dtype=dtype)
    return perf.DraftPricing(cost.method, "ratio", cost.ratio, cost.basis)

