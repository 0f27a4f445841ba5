"""A datasheet law anchored to one measured plain step (`predict --tpot-ms`): the fixed latency
moves, the reads and the math do not. The published figures here are the sources' own (AMD's
ROCm MTP blog, TensorRT-LLM's DeepSeek-R1 blog), not the model's."""

from __future__ import annotations

import json

import pytest

from specwatch import perf
from specwatch.advice.predict import predict
from specwatch.advice.predict_inputs import PredictInputError
from specwatch.perf.hardware import GPUS, MODELS
from specwatch.perf.steptime import prior_for_model

# AMD's baseline: 17,348 ms for a request of 800 tokens at concurrency 1 (3,200 in); TensorRT-LLM's
# DeepSeek-R1 on 8×B200: 111 tokens/s at batch 1; SGLang 0.5.7's DeepSeek-R1 FP8 on 8×H200 at 16
# running, 1k in / 1k out (SemiAnalysis InferenceX issue #870): 17.2 ms, about 1,500 tokens of context.
MI300X_STEP_S = 17348.25 / 800 / 1e3
B200_R1_STEP_S = 1 / 111
H200_R1_STEP_AT_16_S = 17.2e-3


def test_a_longer_step_adds_the_same_time_to_every_step():
    law = prior_for_model(GPUS["MI300X"], MODELS["DeepSeek-V3"], tp=8, dtype="fp8")
    anchored = perf.anchor_fixed_latency(law, MI300X_STEP_S, 1, 3600)
    assert float(anchored.prior.step_time(1, 3600)) == pytest.approx(MI300X_STEP_S, rel=1e-9)
    added = anchored.added_s
    assert added == pytest.approx(MI300X_STEP_S - float(law.step_time(1, 3600)))
    assert 0.013 < added < 0.017  # ROCm's SGLang of the time ran about 15 ms a step over the datasheet
    for tokens, context in ((3, 3600), (24, 8 * 3600), (192, 64 * 3600)):  # plain and verify steps alike
        moved = float(anchored.prior.step_time(tokens, context)) - float(law.step_time(tokens, context))
        assert moved == pytest.approx(added, rel=1e-9)
    assert anchored.prior.expert_latency_s == law.expert_latency_s
    assert "raised by 15.3 ms, in a plain and a verify step alike" in anchored.words()
    # TensorRT-LLM's step at batch 1 is longer than the datasheet's too, by less
    b200 = perf.anchor_fixed_latency(prior_for_model(GPUS["B200"], MODELS["DeepSeek-R1"], tp=8, dtype="w4a16"),
                                     B200_R1_STEP_S, 1, 1500)
    assert 0.002 < b200.added_s < 0.005


def test_a_shorter_step_scales_the_laws_own_fixed_latency_down():
    law = prior_for_model(GPUS["H200-SXM"], MODELS["DeepSeek-R1"], tp=8, dtype="fp8")
    assert float(law.step_time(16, 16 * 1500)) > H200_R1_STEP_AT_16_S  # the law says 18.4 ms there
    anchored = perf.anchor_fixed_latency(law, H200_R1_STEP_AT_16_S, 16, 16 * 1500)
    assert float(anchored.prior.step_time(16, 16 * 1500)) == pytest.approx(H200_R1_STEP_AT_16_S, abs=1e-7)
    scale = anchored.prior.overhead_s / law.overhead_s
    assert 0 < scale < 1 and anchored.prior.expert_latency_s / law.expert_latency_s == pytest.approx(scale)
    assert anchored.added_s < 0 and "lowered by" in anchored.words()


@pytest.mark.parametrize("step_s, words", [
    (0.001, "shorter than the weight reads and math alone"),
    (0.0, "needs a time"),
])
def test_a_step_no_fixed_latency_can_explain_is_refused(step_s, words):
    law = prior_for_model(GPUS["B200"], MODELS["DeepSeek-R1"], tp=8, dtype="w4a16")
    with pytest.raises(ValueError, match=words):
        perf.anchor_fixed_latency(law, step_s, 1, 1500)


# AMD's mean request latency (ms) without and with MTP, by max concurrency
AMD_LATENCY_MS = {1: (17348.25, 8229.37), 2: (17162.29, 8408.02), 4: (17948.30, 9736.64), 8: (19919.06, 11742.82),
                  16: (23708.94, 15483.11), 32: (30868.39, 21399.39), 64: (43848.20, 35074.26)}
AMD = dict(gpu="MI300X", model="DeepSeek-V3", tp=8, k=2, method="mtp", context=3600, prompt_tokens=3200,
           output_tokens=800, max_running=48, engine="sglang")


def _ratios(**anchor) -> dict[int, float]:
    """Predicted over published request speedup at each concurrency, L calibrated at concurrency 1."""
    def speedup(batch: int, length: float) -> float:
        return predict(**AMD, batch=batch, acceptance_length=length, **anchor)["verdict"]["request_speedup"]

    published = {b: base / spec for b, (base, spec) in AMD_LATENCY_MS.items()}
    low, high = 1.0, 3.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if speedup(1, mid) < published[1] else (low, mid)
    return {b: speedup(b, low) / published[b] for b in AMD_LATENCY_MS if b > 1}


def test_the_baselines_own_step_at_concurrency_1_flattens_the_amd_rows():
    """Two numbers from the source's lowest load (its speedup, which sets L, and its baseline's step,
    which anchors the fixed latency), then the six loads above it: anchored, every one within 21 %
    (0.97-1.20), and the spread from the lowest to the highest narrower than the datasheet law's
    alone (0.89-1.31): 15 ms more of fixed latency in every step makes the experts a verify step
    wakes a smaller share at every load."""
    bare = _ratios()
    anchored = _ratios(tpot_ms=MI300X_STEP_S * 1e3, tpot_batch=1)
    assert min(bare.values()) < 0.92 and max(bare.values()) > 1.25
    assert all(abs(ratio - 1.0) < 0.21 for ratio in anchored.values()), anchored
    assert max(anchored.values()) - min(anchored.values()) < max(bare.values()) - min(bare.values())


def test_predict_says_what_the_anchor_did_and_refuses_what_does_not_hold(capsys):
    from specwatch.cli import main
    code = main(["predict", "--gpu", "MI300X", "--model", "DeepSeek-V3", "--tp", "8", "--k", "2", "--method", "mtp",
                 "--acceptance-length", "2.3", "--batch", "8", "--context", "3600", "--tpot-ms", "21.7",
                 "--tpot-batch", "1", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    anchor = result["details"]["anchor"]
    assert anchor["tpot_s"] == pytest.approx(0.0217) and anchor["tpot_batch"] == 1
    assert result["inputs"]["tpot_ms"] == pytest.approx(21.7)
    assert any(r.startswith("the step's fixed latency raised by") for r in result["verdict"]["reasons"])
    with pytest.raises(PredictInputError, match="--tpot-batch says where --tpot-ms was measured"):
        predict("MI300X", model="DeepSeek-V3", tp=8, k=2, method="mtp", acceptance_length=2.3, batch=8, tpot_batch=1)
    with pytest.raises(PredictInputError, match="--tpot-ms: a plain step of 1.00 ms"):
        predict("MI300X", model="DeepSeek-V3", tp=8, k=2, method="mtp", acceptance_length=2.3, batch=8, tpot_ms=1)
    law = prior_for_model(GPUS["MI300X"], MODELS["DeepSeek-V3"], tp=8, dtype="fp8")
    with pytest.raises(PredictInputError, match="a measured step model replaces it"):
        predict("MI300X", model="DeepSeek-V3", tp=8, k=2, method="mtp", acceptance_length=2.3, batch=8, tpot_ms=21.7,
                step_model=law)
