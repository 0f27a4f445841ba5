"""A draft head's cost r derived from the target's shapes (issue 45, item 10).

A head reads about one decoder layer and an LM head per draft token, so its share of a target step
is large on a shallow model with a big vocabulary and small on a deep, wide one. The expected values
here are worked out from the published config.json shapes (hidden, intermediate, heads, vocabulary)
and the model cards' parameter counts, not from the table's own per-layer arithmetic.
"""

from __future__ import annotations

import pytest

from specwatch import perf
from specwatch.advice.drafter_pricing import DrafterPricing
from specwatch.advice.predict import predict
from specwatch.perf.hardware import GPUS
from specwatch.perf.models import lookup_model


def llama_layer(hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """One Llama decoder layer's weights: q, k, v, o projections, the SwiGLU MLP and two RMSNorms."""
    attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    return attention + 3 * hidden * intermediate + 2 * hidden


# config.json of meta-llama/Llama-3.2-1B, -3.1-8B, -3.1-70B, -3.1-405B: (hidden, intermediate, heads,
# kv heads, head_dim), vocabulary 128,256; parameter counts from the model cards
LLAMA = {
    "Llama-3.2-1B": ((2048, 8192, 32, 8, 64), 1.24e9),
    "Llama-3.1-8B": ((4096, 14336, 32, 8, 128), 8.03e9),
    "Llama-3.1-70B": ((8192, 28672, 64, 8, 128), 70.6e9),
    "Llama-3.1-405B": ((16384, 53248, 128, 8, 128), 405.9e9),
}
VOCAB = 128256


def eagle_ratio(name: str) -> float:
    """EAGLE-1: one decoder layer, the 2·hidden → hidden FC and the target's LM head, over the
    weights a plain step reads."""
    shape, params = LLAMA[name]
    hidden = shape[0]
    return (llama_layer(*shape) + 2 * hidden * hidden + VOCAB * hidden) / params


def eagle3_ratio(name: str) -> float:
    """EAGLE-3: one decoder layer whose q/k/v take 2·hidden, the 3·hidden → hidden FC and an LM head
    over a 32,000-token draft vocabulary."""
    shape, params = LLAMA[name]
    hidden, _, heads, kv_heads, head_dim = shape
    wider_qkv = hidden * (heads * head_dim + 2 * kv_heads * head_dim)
    return (llama_layer(*shape) + wider_qkv + 3 * hidden * hidden + 32000 * hidden) / params


@pytest.mark.parametrize("name", sorted(LLAMA))
def test_an_eagle_heads_r_is_its_layer_and_lm_head_over_the_targets_weights(name):
    spec = lookup_model(name)
    assert perf.draft_pricing("eagle", target=spec).ratio == pytest.approx(eagle_ratio(name), rel=0.01)
    assert perf.draft_pricing("eagle3", target=spec).ratio == pytest.approx(eagle3_ratio(name), rel=0.01)
    # the advisor's r (DraftCost) is the same number
    assert perf.draft_cost("eagle", target=spec).ratio == pytest.approx(eagle_ratio(name), rel=0.01)


def test_a_head_costs_far_more_of_a_small_models_step_than_of_a_large_ones():
    # Llama-3.2-1B: 16 layers and a 128k × 2048 LM head (tied to the embedding): ≈ 0.27 of a step;
    # Llama-3.1-405B: 126 layers of 16384: ≈ 0.014. A flat 0.05 was 5× too cheap on the one and 3×
    # too dear on the other.
    assert eagle_ratio("Llama-3.2-1B") == pytest.approx(0.268, abs=0.002)
    assert eagle_ratio("Llama-3.1-405B") == pytest.approx(0.0144, abs=0.0005)
    r = {name: perf.draft_pricing("eagle", target=lookup_model(name)).ratio for name in LLAMA}
    assert r["Llama-3.2-1B"] > 4 * perf.HEAD_DRAFT_RATIO
    assert r["Llama-3.2-1B"] > r["Llama-3.1-8B"] > r["Llama-3.1-70B"] > r["Llama-3.1-405B"]
    assert r["Llama-3.1-70B"] < perf.HEAD_DRAFT_RATIO and r["Llama-3.1-405B"] < perf.HEAD_DRAFT_RATIO / 3
    assert r["Llama-3.2-1B"] / r["Llama-3.1-405B"] > 15


def test_deepseeks_mtp_module_is_one_moe_layers_active_weights_and_the_shared_lm_head():
    # config.json of deepseek-ai/DeepSeek-V3: hidden 7168, MLA (q_lora_rank 1536, 128 heads of
    # 128 + 64, kv_lora_rank 512, v_head_dim 128), MoE layers of 8 routed + 1 shared expert of
    # moe_intermediate_size 2048, vocabulary 129,280; 37 B activated per token
    hidden = 7168
    attention = (hidden * 1536 + 1536 * 128 * (128 + 64) + hidden * (512 + 64) + 512 * 128 * (128 + 128)
                 + 128 * 128 * hidden)
    experts = 9 * 3 * hidden * 2048 + 256 * hidden  # top-8 routed + the shared one, and the router
    expected = (attention + experts + 2 * hidden * hidden + 129280 * hidden) / 37e9
    pricing = perf.draft_pricing("deepseek_mtp", target=lookup_model("DeepSeek-V3"))
    assert pricing.ratio == pytest.approx(expected, rel=0.02)
    assert "one MoE layer's active weights" in pricing.basis


def test_the_words_say_how_r_was_derived_or_that_it_is_assumed():
    derived = perf.draft_pricing("eagle", target=lookup_model("Llama-3.2-1B"))
    assert derived.basis.startswith("derived from Llama-3.2-1B's shapes: one decoder layer")
    assert "the target's LM head over 128,256 tokens" in derived.basis
    assert f"r ≈ {derived.ratio:.3f}" in derived.basis and "0.268" in derived.basis
    assert "2.48 GB a plain step reads" in derived.basis  # 1.24 B weights in BF16
    assert "plus 50 µs a forward of its own" in derived.basis
    eagle3 = perf.draft_pricing("eagle3", target=lookup_model("Llama-3.1-8B"))
    assert "32,000-token draft vocabulary (assumed" in eagle3.basis
    # FP8 weights: the same ratio, half the bytes in the words
    fp8 = perf.draft_pricing("eagle", target=lookup_model("Llama-3.2-1B"), dtype="fp8")
    assert fp8.ratio == derived.ratio and "1.24 GB a plain step reads" in fp8.basis
    for assumed in (perf.draft_pricing("eagle"), perf.draft_cost("mtp")):
        assert assumed.ratio == perf.HEAD_DRAFT_RATIO
        assert "assumed, not derived" in assumed.basis and "r = 0.05" in assumed.basis
    # a model without a tabled vocabulary is not derived from either
    from dataclasses import replace

    unknown_vocab = replace(lookup_model("Llama-3.1-8B"), vocab_size=None)
    assert perf.draft_pricing("eagle", target=unknown_vocab).ratio == perf.HEAD_DRAFT_RATIO


def test_a_derived_heads_forward_pays_its_weight_share_and_its_own_fixed_cost():
    # at low load: r × (the target's step less its fixed cost) + the head's 50 µs, where the flat r
    # scaled the target's fixed cost too
    gpu, spec = GPUS["H100-SXM"], lookup_model("Llama-3.2-1B")
    prior = perf.prior_for_model(gpu, spec)
    pricing = perf.draft_pricing("eagle", target=spec)
    step = float(prior.step_time(1.0, 0.0))
    fixed = perf.step_overhead_s(spec.layers)
    assert pricing.target_overhead_s == fixed
    assert pricing.forward_s(prior, 1.0, 0.0) == pytest.approx(pricing.ratio * (step - fixed)
                                                                + perf.HEAD_FORWARD_OVERHEAD_S)
    # a draft forward is ≈ a fifth of a plain 1B step at batch 1, where 0.05 priced it at ≈ 0.08
    assert 0.15 < pricing.forward_s(prior, 1.0, 0.0) / step < 0.25
    big = lookup_model("Llama-3.1-405B")
    big_prior = perf.prior_for_model(gpu, big, tp=8)
    share = perf.draft_pricing("eagle3", target=big).forward_s(big_prior, 1.0, 0.0) / float(big_prior.step_time(1.0))
    assert share < 0.02


def test_predict_prices_a_head_from_the_models_shapes_and_says_so():
    small = predict("H100", model="Llama-3.2-1B", batch=1, k=3, acceptance_length=2.5, method="eagle")
    large = predict("H100", model="Llama-3.1-70B", tp=4, batch=1, k=3, acceptance_length=2.5, method="eagle")
    assert small["inputs"]["draft_ratio"] == pytest.approx(eagle_ratio("Llama-3.2-1B"), rel=0.01)
    assert large["inputs"]["draft_ratio"] == pytest.approx(eagle_ratio("Llama-3.1-70B"), rel=0.01)
    # the same head needs a longer acceptance length to pay on the small model
    assert small["verdict"]["break_even_length"] > 1.5 > 1.15 > large["verdict"]["break_even_length"]
    said = [r for r in small["verdict"]["reasons"] if r.startswith("draft cost: ")]
    assert said and "derived from Llama-3.2-1B's shapes" in said[0]
    # a model known only by its size: r is assumed, and the reason says it
    sized = predict("H100", params=8e9, batch=1, k=3, acceptance_length=2.5, method="eagle")
    assert sized["inputs"]["draft_ratio"] == perf.HEAD_DRAFT_RATIO
    assert any("assumed, not derived" in r for r in sized["verdict"]["reasons"])


def test_the_advisor_derives_a_heads_r_from_the_model_it_was_given():
    derived = DrafterPricing(method="eagle", target=lookup_model("Llama-3.2-1B"))
    cost, method = derived.draft_cost()
    assert method == "eagle" and cost.ratio == pytest.approx(eagle_ratio("Llama-3.2-1B"), rel=0.01)
    assert derived.pricing(cost).ratio == cost.ratio and derived.pricing(cost).target_overhead_s
    assumed = DrafterPricing(method="eagle")
    cost, _ = assumed.draft_cost()
    assert cost.ratio == perf.HEAD_DRAFT_RATIO and "assumed" in assumed.pricing(cost).basis
