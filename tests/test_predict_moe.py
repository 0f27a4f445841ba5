"""`specwatch predict` for mixture-of-experts models (table rows and --experts/--experts-per-token),
MLA's replicated latent KV cache, setups whose GPUs cannot hold the model (no verdict), and a
batch the KV memory caps (the answer names the batch it is for)."""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specwatch.advice.judging import MOE_ROUTING_ERROR, extra_level_error
from specwatch.advice.predict import PredictInputError, predict
from specwatch.commands.predict import add_arguments, run
from specwatch.perf import hardware as hw
from specwatch.perf import prior_for_model

ROOT = Path(__file__).resolve().parent.parent

DEEPSEEK = dict(gpu="H200", tp=8, dtype="fp8", batch=32, k=2, acceptance_length=2.0, method="mtp", context=2000)


def _run(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="specwatch predict")
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    status = run(parser.parse_args(argv), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------------------------------
# MoE expert reads
# --------------------------------------------------------------------------------------------------


def test_deepseek_v3_verification_reads_more_experts():
    # Uniform routing over E = 256 experts, 8 per token: the share of experts a step of N tokens touches.
    plain_share = 1 - (1 - 8 / 256) ** 32  # 32 sequences, one token each
    verify_share = 1 - (1 - 8 / 256) ** 96  # 32 sequences × 3 positions
    assert plain_share == pytest.approx(0.638, abs=0.001)
    assert verify_share == pytest.approx(0.952, abs=0.001)
    # shared + routed = 671B, shared + routed·8/256 = 37B
    routed = (671e9 - 37e9) / (1 - 8 / 256)
    shared = 671e9 - routed
    assert routed == pytest.approx(654.45e9, rel=1e-3)
    read_ratio = (shared + routed * verify_share) / (shared + routed * plain_share)
    assert read_ratio == pytest.approx(1.474, abs=0.002)

    result = predict(model="DeepSeek-V3", **DEEPSEEK)
    ratio = result["details"]["verify_ratio"]
    # the read grows by ~47 %; the fixed costs (overheads, all-reduces, KV) dilute it
    assert 1.2 < ratio < read_ratio
    reasons = " | ".join(result["verdict"]["reasons"])
    assert "MoE" in reasons and "256 experts" in reasons
    assert "64% of them at 32 tokens, 95% verifying 96" in reasons
    assert result["inputs"]["experts"] == 256 and result["inputs"]["experts_per_token"] == 8


def test_moe_answers_carry_the_routing_error():
    moe = predict(model="DeepSeek-V3", **DEEPSEEK)["details"]["decision"]["level_error"]
    dense = predict(model="Llama-3.1-70B", **DEEPSEEK)["details"]["decision"]["level_error"]
    assert MOE_ROUTING_ERROR == 0.2
    assert moe == pytest.approx(math.hypot(dense, 0.2))
    custom = predict(params=671e9, active_params=37e9, experts=256, experts_per_token=8, **DEEPSEEK)
    assert custom["details"]["decision"]["level_error"] == pytest.approx(moe)


def test_custom_moe_flags_give_the_tables_verify_ratio():
    table = predict(model="DeepSeek-V3", **DEEPSEEK)["details"]["verify_ratio"]
    # the whole model's KV bytes such that each of the 8 GPUs holds the whole latent, as the table's row
    custom = predict(params="671B", active_params="37B", experts=256, experts_per_token=8,
                     kv_bytes_per_token=70272 * 8, **DEEPSEEK)["details"]["verify_ratio"]
    # the custom target has no depth, so its fixed cost per step and all-reduces differ a little
    assert custom == pytest.approx(table, rel=0.04)
    assert custom > 1.2


def test_flags_override_the_table_routing():
    top2 = predict(model="DeepSeek-V3", experts=256, experts_per_token=2, **DEEPSEEK)
    assert top2["inputs"]["experts_per_token"] == 2
    # fewer experts per token touch fewer experts: verification's extra reads grow relatively more
    assert "1 − (1 − t/E)^N) of the E = 256 experts per layer (t = 2 routed experts per token" in " ".join(
        top2["verdict"]["reasons"])
    assert "(k = " not in " ".join(top2["verdict"]["reasons"])  # k is the draft's tokens, never the routing's
    # a dense table model becomes MoE with its active params and the routing
    moe = predict(model="Llama-3.1-70B", active_params="20B", experts=8, experts_per_token=2, **DEEPSEEK)
    assert moe["inputs"]["experts"] == 8 and any("MoE" in reason for reason in moe["verdict"]["reasons"])


def test_active_below_params_without_routing_says_the_experts_are_not_priced():
    result = predict(params=671e9, active_params=37e9, kv_bytes_per_token=70272 * 8, **DEEPSEEK)
    reasons = " | ".join(result["verdict"]["reasons"])
    assert "expert reads are not priced" in reasons and "dense" in reasons
    assert "MoE:" not in reasons
    # every weight read every step: verifying 3 tokens per sequence reads no more weights than one
    assert result["details"]["verify_ratio"] < 1.1
    dense = predict(model="Llama-3.1-70B", **DEEPSEEK)["details"]["decision"]["level_error"]
    assert result["details"]["decision"]["level_error"] == pytest.approx(dense)


@pytest.mark.parametrize(
    "keywords,message",
    [
        (dict(params="30B", active_params="3B", experts=128), "give both --experts"),
        (dict(params="30B", active_params="3B", experts_per_token=8), "give both --experts"),
        (dict(params="30B", active_params="3B", experts=8, experts_per_token=8), "must be below --experts (8)"),
        (dict(params="30B", active_params="3B", experts=128.5, experts_per_token=8), "--experts must be a whole"),
        (dict(params="30B", active_params="3B", experts=128, experts_per_token=0), "--experts-per-token must be"),
        (dict(params="30B", experts=128, experts_per_token=8), "needs --active-params below"),
        (dict(model="Llama-3.1-8B", experts=8, experts_per_token=2), "needs --active-params below"),
        # 8 of 128 experts are 1/16 of 30B = 1.875B on their own
        (dict(params="30B", active_params="1B", experts=128, experts_per_token=8), "at least params × "),
        (dict(params="30B", active_params="31B"), "cannot exceed"),
    ],
)
def test_moe_flags_are_checked(keywords, message):
    with pytest.raises(PredictInputError) as caught:
        predict("H100", batch=1, k=3, acceptance_length=2, **keywords)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_experts_alone_on_the_command_line_is_a_usage_error():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "specwatch", "predict", "--experts", "8"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 64
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--experts-per-token" in lines[0]


# --------------------------------------------------------------------------------------------------
# MLA: the latent KV cache, whole on every GPU
# --------------------------------------------------------------------------------------------------


def test_deepseek_v3_kv_is_the_latent_whole_on_every_gpu():
    spec = hw.MODELS["DeepSeek-V3"]
    assert spec.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70272
    assert spec.kv_replicated_under_tp
    assert spec.kv_bytes_per_token_per_gpu(8) == 70272
    assert hw.MODELS["Llama-3.1-70B"].kv_bytes_per_token_per_gpu(8) == 320 * 1024 / 8
    assert prior_for_model(hw.GPUS["H200-SXM"], spec, tp=8, dtype="fp8").kv_bytes_per_token == 70272
    result = predict(model="DeepSeek-V3", **DEEPSEEK)
    # seconds per context token: the whole latent over 0.8 of the H200's 4.8 TB/s
    assert result["details"]["step_time_model"]["kv_s_per_token"] == pytest.approx(70272 / (0.8 * 4.8e12))
    assert result["inputs"]["kv_replicated_under_tp"] is True
    assert any("MLA" in reason and "8 GPUs holds whole" in reason for reason in result["verdict"]["reasons"])


def test_deepseek_v3_fp8_fits_eight_h200s():
    # 671 GB of FP8 weights over 8 GPUs: 83.9 GB each, of 0.9 × 141 = 126.9 GB
    result = predict(model="DeepSeek-V3", **DEEPSEEK)
    assert result["verdict"]["speculation"] in ("on", "off", "hold")
    assert result["verdict"]["expected_speedup"] is not None


# --------------------------------------------------------------------------------------------------
# Setups that cannot load: no verdict
# --------------------------------------------------------------------------------------------------

LLAMA_70B_H100 = ["--gpu", "H100", "--model", "Llama-3.1-70B", "--batch", "64", "--k", "3",
                  "--acceptance-length", "2.5"]


def test_weights_that_do_not_fit_give_no_verdict_and_name_the_smallest_tp():
    status, out, err = _run(LLAMA_70B_H100)
    assert status == 2 and err == ""
    assert out.startswith("speculation: unknown")
    # 70.6B × 2 bytes = 141.2e9 B = 131.5 GiB against 0.9 × 81,559 MiB (NVML's total) = 71.7 GiB;
    # over 2 GPUs 65.7 GiB each fits. Capacity and weights are both said in GiB.
    assert ("132 GiB of weights per GPU do not fit in 71.7 GiB usable of 79.6 GiB (H100 SXM): raise --tp to at "
            "least 2") in out
    assert "expected speedup" not in out

    status, out, _ = _run(LLAMA_70B_H100 + ["--json"])
    assert status == 2
    payload = json.loads(out)
    assert payload["verdict"]["speculation"] == "unknown"
    assert payload["verdict"]["expected_speedup"] is None
    assert payload["details"]["memory"]["min_tp"] == 2
    assert payload["details"]["memory"]["weight_bytes_per_gpu"] == pytest.approx(141.2e9)

    status, out, _ = _run(LLAMA_70B_H100 + ["--tp", "2"])
    assert status in (0, 1)
    assert "expected speedup" in out


def test_the_cli_module_exits_2_for_a_setup_that_cannot_load():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "specwatch", "predict", *LLAMA_70B_H100], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert "raise --tp to at least 2" in done.stdout


def test_a_replicated_latent_counts_whole_on_every_gpu_when_sizing_tp():
    # DeepSeek-V3 FP8 on H100s: 671 GB of weights; one sequence of 500,000 tokens holds
    # 70,272 × 500,000 = 35.1 GB of latent on every GPU. tp 16: 41.9 + 35.1 = 77.07 GB > 0.9 ×
    # 81,559 MiB = 76.97 GB; tp 32: 21.0 + 35.1 = 56.1 GB fits. Split by tp as K/V heads would be,
    # tp 16 would fit.
    result = predict("H100", model="DeepSeek-V3", dtype="fp8", tp=8, batch=1, k=2, acceptance_length=2.0,
                     method="mtp", context=500_000)
    assert result["verdict"]["speculation"] == "unknown"
    memory = result["details"]["memory"]
    assert memory["min_tp"] == 32
    assert memory["one_sequence_kv_bytes_per_gpu"] == pytest.approx(70272 * 500_000)
    assert "raise --tp to at least 32" in result["verdict"]["reasons"][0]
    at_16 = predict("H100", model="DeepSeek-V3", dtype="fp8", tp=16, batch=1, k=2, acceptance_length=2.0,
                    method="mtp", context=500_000)
    assert at_16["verdict"]["speculation"] == "unknown"
    # 35.1e9 B of latent is 32.7 GiB; the 32.6 GiB the weights leave is a tenth short
    assert "leave 32.6 GiB of the 71.7 GiB usable" in at_16["verdict"]["reasons"][0]
    assert "one sequence of 500000 tokens needs 32.7 GiB" in at_16["verdict"]["reasons"][0]
    at_32 = predict("H100", model="DeepSeek-V3", dtype="fp8", tp=32, batch=1, k=2, acceptance_length=2.0,
                    method="mtp", context=500_000)
    assert at_32["verdict"]["expected_speedup"] is not None


# --------------------------------------------------------------------------------------------------
# A batch the KV memory caps
# --------------------------------------------------------------------------------------------------

CAPPED = ["--gpu", "H100", "--model", "Llama-3.1-70B", "--tp", "2", "--context", "8000", "--batch", "64",
          "--k", "3", "--acceptance-length", "2.5"]


def test_a_capped_batch_is_named_in_the_headline_and_the_json():
    # per GPU, as vLLM sizes it: gpu_memory_utilization 0.9 of the device's total (NVML: 81,559 MiB
    # on an H100 80GB, 85.52e9 bytes) less 70.6e9 bytes of weights = 6.37e9 bytes for KV; a sequence
    # of 8,000 tokens takes 8,000 × 327,680 / 2 bytes = 1.31e9, so the memory holds about 4.86
    # sequences, not 64 (the decimal "80 GB" the datasheet table once held gave 1.07)
    holds = (0.9 * 81559 * 2**20 - 70.6e9) / (8000 * 327680 / 2)
    assert holds == pytest.approx(4.859, abs=0.001)
    status, out, err = _run(CAPPED)
    assert status == 0 and err == ""
    assert "at batch 4.9 (KV memory holds 4.9 of the 64 asked for)" in out.splitlines()[1]
    assert "64 running" not in out

    status, out, _ = _run(CAPPED + ["--json"])
    batch = json.loads(out)["verdict"]["batch"]
    assert batch["asked"] == 64 and batch["capped"] is True
    assert batch["plain"] == pytest.approx(holds)
    assert batch["speculative"] < batch["plain"]  # speculation's lookahead slots take a little more
    assert "KV memory holds 4.9 of the 64" in batch["why"]


def test_an_uncapped_batch_reads_as_asked():
    status, out, _ = _run(["--gpu", "H100", "--model", "Llama-3.1-70B", "--tp", "4", "--context", "2000",
                           "--batch", "16", "--k", "3", "--acceptance-length", "2.5"])
    assert status in (0, 1)
    assert "at batch 16 ·" in out and "KV memory holds" not in out.splitlines()[1]


# --------------------------------------------------------------------------------------------------
# The advisor's MoE routing error
# --------------------------------------------------------------------------------------------------


def test_the_advisors_level_error_takes_the_routing_error_for_an_moe_model():
    gpu = hw.GPUS["H100-SXM"]
    assert extra_level_error(gpu, False) == 0.0
    assert extra_level_error(gpu, False, moe=True) == pytest.approx(0.2)
    assert extra_level_error(gpu, False, True, moe=True) == pytest.approx(math.hypot(0.2, 0.2))


@pytest.mark.parametrize("model,moe", [("Mixtral-8x7B", True), ("Qwen3-30B-A3B", True), ("Llama-3.1-8B", False)])
def test_the_advisor_adds_the_routing_error_for_an_moe_model(monkeypatch, model, moe):
    from specwatch import perf
    from specwatch.advice.advisor import AdvisorConfig
    from specwatch.advice.monitor import Monitor
    from specwatch.collectors.synthetic import SyntheticNode, generate

    extras: list[float] = []
    decide = perf.decide

    def recording(inputs, **keywords):
        extras.append(inputs.extra_level_error)
        return decide(inputs, **keywords)

    monkeypatch.setattr(perf, "decide", recording)
    step = perf.HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0,
                                per_token_s=2e-5)
    node = SyntheticNode(step=step, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                         context_per_sequence=0.0, noise=0.0)
    monitor = Monitor(window_s=10.0, advisor_config=AdvisorConfig(method="ngram", model=hw.MODELS[model]),
                      evaluate_every_s=0.0)
    for snapshot in generate(node, [16.0] * 40):
        monitor.ingest(snapshot)
    assert monitor.states[node.url].verdict.expected_speedup is not None
    assert extras
    # the node's other terms (acceptance spread over its drafts) join in quadrature
    floor = min(extras)
    if moe:
        assert floor >= 0.2
    else:
        assert floor < 0.2


def test_the_issues_deepseek_command_without_a_dtype_prices_the_released_fp8():
    # `predict --gpu H200 --tp 8 --model DeepSeek-V3 --batch 32 --k 2 ...` with no --dtype: the model
    # as released is FP8, and 8 H200s hold it; in BF16 (1342 GB, 168 GB = 156 GiB a GPU) they do not.
    args = dict(gpu="H200", tp=8, batch=32, k=2, acceptance_length=2.0, method="mtp")
    released = predict(model="DeepSeek-V3", **args)
    assert released["inputs"]["dtype"] == "fp8"
    assert released["verdict"]["speculation"] != "unknown"
    assert released["details"]["verify_ratio"] > 1.2  # the verify step wakes more experts
    assert any("weights priced in fp8" in r and "--dtype prices another" in r for r in released["verdict"]["reasons"])
    told = predict(model="DeepSeek-V3", dtype="bf16", **args)
    assert told["inputs"]["dtype_source"] == "flags"
    assert told["verdict"]["speculation"] == "unknown"
    assert "156 GiB of weights per GPU do not fit in 126 GiB usable of 140 GiB (H200 SXM)" in \
        told["verdict"]["reasons"][0]
    # a model given by its size has no release to go by: BF16, said nowhere as a choice made for it
    custom = predict(params="70B", **{**args, "method": "ngram"})
    assert (custom["inputs"]["dtype"], custom["inputs"]["dtype_source"]) == ("bf16", "default")
    assert not any("weights priced in" in r for r in custom["verdict"]["reasons"])
