"""One step law for predict and the live advisor, each GEMM cost counted once.

The advisor's prior (before its node has given it step times) must be the law `predict` prices
with, for the same GPU, model, TP and dtype; and that law must charge the GEMM math once past the
knee. The expected values here are written from the datasheet figures by hand, not read back from
the code under test.
"""

from __future__ import annotations

import pytest

from specwatch import perf
from specwatch.advice.predict import predict
from specwatch.advice.step_samples import StepSamples
from specwatch.perf.hardware import GPUS, MODELS

H200 = GPUS["H200-SXM"]
LLAMA_8B = MODELS["Llama-3.1-8B"]


@pytest.mark.parametrize("model_name, tp, dtype, batch, k, context", [
    ("Llama-3.1-8B", 1, "bf16", 64, 3, 1000),
    ("Llama-3.1-70B", 4, "fp8", 128, 4, 3000),
    ("Mixtral-8x7B", 2, "bf16", 16, 2, 500),
])
def test_predict_and_the_advisors_prior_give_the_same_step_times(model_name, tp, dtype, batch, k, context):
    result = predict("H200", model=model_name, tp=tp, dtype=dtype, batch=batch, k=k, acceptance_length=2.0,
                     method="ngram", context=context)
    samples = StepSamples(model=MODELS[model_name], tp=tp, dtype=dtype)
    law, words = samples.step_model(0.0, H200)
    assert "datasheet prior" in words
    plain = float(law.step_time(batch, batch * context))
    verify = float(law.step_time(batch * (k + 1), batch * context))
    assert result["details"]["step_time_plain_s"] == pytest.approx(plain, rel=1e-9)
    assert result["details"]["step_time_verify_s"] == pytest.approx(verify, rel=1e-9)


def test_the_gemm_math_is_charged_once_past_the_knee():
    # Llama-3.1-8B on one H200: 16.06 GB of BF16 weights read at 0.8 × 4.8 TB/s, 16.06 GFLOP per
    # token at 0.7 × 989 TFLOP/s. At 1024 tokens per step the math (23.7 ms) is far past the read
    # (4.2 ms): the GEMMs cost their math, once, and nothing of it again per token.
    prior = perf.prior_for_model(H200, LLAMA_8B)
    read = 2 * 8.03e9 / (0.8 * 4.8e12)
    math_per_token = 2 * 8.03e9 / (0.7 * 989.4e12)
    fixed = 0.4e-3 + 32 * 15e-6
    gemm_1024 = float(prior.step_time(1024)) - fixed - 1024 * 2e-6
    # (the soft maximum rounds the bend, as measured GEMMs do: a few per cent at 3× the bend)
    assert gemm_1024 == pytest.approx(1024 * math_per_token, rel=0.06)
    assert gemm_1024 < 1.1 * max(read, 1024 * math_per_token)
    # Below the knee half the math shows on top of the read (small-M GEMMs).
    gemm_16 = float(prior.step_time(16)) - fixed - 16 * 2e-6
    assert gemm_16 == pytest.approx(read + 0.5 * 16 * math_per_token, rel=0.02)
    # The live fit's hinge is the same law: max(W + f·G, G) with its bend where G = W + f·G.
    hinge = prior.hinge()
    for tokens in (16, 256, 1024, 4096):
        assert float(hinge.step_time(tokens)) == pytest.approx(
            fixed + tokens * 2e-6 + max(read + 0.5 * tokens * math_per_token, tokens * math_per_token), rel=1e-6)


def test_issue_example_prices_a_batch_256_verify_step_near_the_per_operator_roofline():
    # predict --gpu H200 --params 8e9 --kv-bytes-per-token 131072 --batch 256 --context 3000 --k 3:
    # the double count said 1.97×; operators in sequence (O + max(W, G) + KV read) give about 1.5×,
    # and the verification attention (a tenth of the KV read per extra position) brings it to ~1.7×.
    result = predict("H200", params=8e9, kv_bytes_per_token=131072, batch=256, context=3000, k=3,
                     acceptance_length=2.0, method="ngram")
    ratio = result["details"]["step_time_speculative_s"] / result["details"]["step_time_plain_s"]
    read = 2 * 8e9 / (0.8 * 4.8e12)
    kv = 256 * 3000 * 131072 / (0.8 * 4.8e12)
    math_per_token = 2 * 8e9 / (0.7 * 989.4e12)
    plain = 1e-3 + max(read + 0.5 * 256 * math_per_token, 256 * math_per_token) + kv
    verify = 1e-3 + 1024 * math_per_token + kv * (1 + 3 * 0.1)
    assert ratio == pytest.approx(verify / plain, rel=0.05)
    assert 1.4 < ratio < 1.8


# A hinge written by hand: a flat 10 ms to a knee of 100 tokens, then 0.1 ms per token.
FLAT_TO_100 = perf.HingeParameters(base_s=0.010, knee=100.0, slope_s_per_token=1e-4, kv_s_per_token=0.0,
                                   per_token_s=0.0)


def _decide(prompt_per_output: float, budget: float | None = None, running: float = 8.0):
    return perf.decide(perf.DecisionInputs(step_model=FLAT_TO_100, k=3, draft=perf.draft_pricing("ngram"),
                                           running=running, length=2.5, prompt_per_output=prompt_per_output,
                                           token_budget=budget))


def test_prefill_chunks_share_the_step_and_its_budget():
    # Without prefill, 8 × 4 = 32 verified positions stay below the knee: the step is free, S = L.
    alone = _decide(0.0)
    assert alone.expected_speedup == pytest.approx(2.5)
    assert alone.throughput_speedup is None
    # 10 prompt tokens per output token: a plain step emits 8 tokens and prefills 80 beside them,
    # T(88) = 10 ms; a speculative one emits 20 and prefills 200 beside its 32 positions,
    # T(232) = 10 + 0.1 × 132 = 23.2 ms. Decode runs 2.5 × 10 / 23.2 as fast, and so do whole
    # requests (the prefill keeps pace with the completions).
    shared = _decide(10.0)
    assert shared.expected_speedup == pytest.approx(2.5 * 10.0 / 23.2)
    assert shared.throughput_speedup == pytest.approx(2.5 * 10.0 / 23.2)
    assert any("prefill shares the step" in reason for reason in shared.reasons)
    # A budget of 128 tokens a step: beside 32 verified positions only 96 prompt tokens fit of the
    # 200 the completions need, so requests start slower than they finish and the running batch
    # falls until its prefill keeps pace: b verified at 4 positions and the 10 × 2.5 × b prompt
    # tokens that replace what they complete fill the 128, b = 128 / 29 ≈ 4.41. The step is
    # T(128) = 12.8 ms either way; the engine emits 2.5 × 4.41 = 11.03 tokens a step against the
    # plain engine's 8 a step of 10 ms: 1.08×. (Held at 8 running with its prefill starved it would
    # complete 96 / 10 = 9.6 a step, 0.94×; no engine stays there: running falls as completions
    # outpace starts.) Each request's decode still runs 2.5 × 10 / 12.8 as fast. The engine's output
    # is requests: the verdict follows them, and says the decode steps' figure beside it.
    capped = _decide(10.0, budget=128.0)
    settled = 128.0 / (4 + 10.0 * 2.5)
    assert capped.decode_speedup == pytest.approx(2.5 * 10.0 / 12.8)
    assert capped.throughput_speedup == pytest.approx((2.5 * settled / 12.8) / (8 / 10.0))
    assert capped.expected_speedup == capped.throughput_speedup == pytest.approx(1.078, abs=0.001)
    assert capped.state == "on"
    assert any("the engine settles at about 4.4 of the 8 running" in reason and
               "the verdict follows the requests (1.08×), not the decode steps (1.95×)" in reason
               for reason in capped.reasons), capped.reasons
    # a tighter budget holds both modes' prefill back: 64 tokens settle the plain engine at
    # 64 / (1 + 10) ≈ 5.8 running and the speculative one at 64 / 29 ≈ 2.2, both stepping T(64) =
    # 10 ms, so the ratio is L (1 + m) / (k + 1 + m L) = 2.5 × 11 / 29 ≈ 0.948: a loss
    tight = _decide(10.0, budget=64.0)
    assert tight.expected_speedup == pytest.approx(2.5 * 11.0 / 29.0)
    assert tight.state == "off" and tight.carried_by == "token budget"
    # where the budget leaves room, the verdict is the decode steps' as before
    assert shared.decode_speedup == shared.expected_speedup and shared.carried_by != "token budget"
    assert any("leaves the prefill 48% of what" in reason for reason in capped.reasons)


@pytest.mark.parametrize("draft", [dict(draft_params=1.24e9), dict(draft_model="Llama-3.2-1B")])
def test_predict_and_the_advisor_price_a_draft_model_alike(draft):
    """A draft model on an identified GPU runs its own roofline in both (its weights, its fixed
    forward cost, and its KV cache where it is known by name): the advisor priced it as r of a
    plain target step, whatever predict said for the same inputs."""
    from specwatch.advice.drafter_pricing import DrafterPricing
    from specwatch.telemetry.snapshot import FROM_SERVER_INFO, SpeculationConfig

    batch, k, context = 64, 3, 800
    result = predict("H200", model="Llama-3.1-8B", batch=batch, k=k, acceptance_length=2.0, method="draft",
                     context=context, **draft)
    # the size as the operator's flag, the name as the server's /server_info says it
    drafter = DrafterPricing(method="draft_model", target_params=LLAMA_8B.params,
                             draft_params=draft.get("draft_params"))
    served = SpeculationConfig.known(FROM_SERVER_INFO, method="draft", k=k, draft_model=draft.get("draft_model"))
    cost, _ = drafter.draft_cost(served)
    pricing = drafter.pricing(cost, H200)
    assert pricing.kind == "model"
    law, _ = StepSamples(model=LLAMA_8B).step_model(0.0, H200)
    drafting = pricing.drafting_s(law, batch, k, k + 1.0, batch * context)
    # predict's speculative step is its verify step, the verify positions' extra attention, and the drafter
    kv_read = float(law.step_time(batch, batch * context)) - float(law.step_time(batch, 0.0))
    attention = perf.verify_attention_s(kv_read, k + 1.0)
    details = result["details"]
    assert details["step_time_speculative_s"] - details["step_time_verify_s"] == pytest.approx(
        attention + drafting, rel=1e-9)
    # without a GPU to run it on, r of a plain step, as before
    assert drafter.pricing(cost, None).kind == "ratio"


def test_predict_and_the_advisor_price_a_model_as_it_is_released():
    # DeepSeek-V3 is released in FP8 (config.json's quantization_config): 671 GB of weights, 84 GB on
    # each of 8 H200s. Neither predict nor the advisor is told a dtype; both price FP8 and agree.
    from specwatch.advice.advisor import Advisor, AdvisorConfig

    spec = MODELS["DeepSeek-V3"]
    result = predict("H200", model="DeepSeek-V3", tp=8, batch=32, k=2, acceptance_length=2.0, method="mtp",
                     context=2000)
    assert (result["inputs"]["dtype"], result["inputs"]["dtype_source"]) == ("fp8", "release")
    law, words = Advisor(AdvisorConfig(model=spec, tp=8, method="mtp")).step_samples.step_model(0.0, H200)
    assert words == "datasheet prior for DeepSeek-V3 in fp8 on H200 SXM"
    assert result["details"]["step_time_plain_s"] == pytest.approx(float(law.step_time(32, 32 * 2000)), rel=1e-9)
    # FP8 is a byte a weight. Routed experts: (671 − 37) B / (1 − 8/256) = 654.5 B; shared weights (read
    # by every step): 671 − 654.5 = 16.5 B; each over 8 GPUs. BF16 is twice the bytes.
    routed = (671e9 - 37e9) / (1 - 8 / 256)
    assert law.shared_weight_bytes == pytest.approx((671e9 - routed) / 8, rel=1e-9)
    assert law.expert_weight_bytes == pytest.approx(routed / 8, rel=1e-9)
    bf16 = StepSamples(model=spec, tp=8, dtype="bf16").step_model(0.0, H200)[0]
    assert bf16.shared_weight_bytes == pytest.approx(2 * (671e9 - routed) / 8, rel=1e-9)
