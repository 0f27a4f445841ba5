"""Tests for specwatch.advice.predict: the verdict, its reasons, the argparse options and exit statuses."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from specwatch.commands.predict import add_arguments as add_predict_arguments
from specwatch.commands.predict import run as run_predict
from specwatch.advice.predict import PredictInputError, parse_quantity, predict


def _run(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="specwatch predict")
    add_predict_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    status = run_predict(parser.parse_args(argv), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


H100_70B_NGRAM = ["--gpu", "H100", "--model", "Llama-3.1-70B", "--tp", "4", "--k", "4", "--method", "ngram"]


def test_ngram_pays_at_batch_1_on_h100_70b():
    result = predict("H100", model="Llama-3.1-70B", tp=4, batch=1, k=4, acceptance_length=2.5, method="ngram")
    verdict = result["verdict"]
    assert verdict["speculation"] == "on"
    assert verdict["expected_speedup"] == pytest.approx(2.5, rel=0.03)
    assert verdict["break_even_length"] == pytest.approx(1.0, abs=0.01)
    assert verdict["crossover_concurrency"] > 1
    assert result["bound"]["state"] == "memory"
    assert result["bound"]["signals"][0]["name"] == "tokens_per_step"
    assert 0.0 <= verdict["confidence"] <= 1.0
    reasons = " | ".join(verdict["reasons"])
    assert "acceptance length 2.50 is above break-even 1.01 for n-gram lookup with k=4" in reasons
    assert "5 tokens per step" in reasons


def test_ngram_costs_at_very_high_batch():
    result = predict("H100", model="Llama-3.1-70B", tp=4, batch=1024, k=4, acceptance_length=2.5, method="ngram")
    verdict = result["verdict"]
    assert verdict["speculation"] == "off"
    assert verdict["expected_speedup"] < 0.95
    assert verdict["break_even_length"] > 2.5
    assert result["bound"]["state"] == "compute"
    assert any("past the H100 SXM knee" in reason for reason in verdict["reasons"])
    # The crossover sits between the two loads.
    assert 1 < verdict["crossover_concurrency"] < 1024


def test_long_context_keeps_speculation_paying_at_high_batch():
    short = predict("H100", model="Llama-3.1-8B", batch=128, k=3, acceptance_length=2.9, method="eagle3", context=500)
    long = predict("H100", model="Llama-3.1-8B", batch=128, k=3, acceptance_length=2.9, method="eagle3", context=32000)
    assert long["verdict"]["expected_speedup"] > short["verdict"]["expected_speedup"]
    assert long["verdict"]["speculation"] == "on"
    assert long["details"]["kv_share_of_plain_step"] > 0.5


def test_draft_model_break_even_includes_its_cost():
    result = predict(
        "H100", model="Llama-3.1-70B", tp=4, batch=1, k=5, acceptance_length=1.2, method="draft", draft_params="1B"
    )
    verdict = result["verdict"]
    assert verdict["speculation"] == "off"
    assert verdict["break_even_length"] > 1.2
    assert any("is below break-even" in reason and "a draft model with k=5" in reason for reason in verdict["reasons"])


def test_acceptance_rate_converts_to_length():
    by_rate = predict("H200", model="Qwen2.5-72B", tp=2, batch=8, k=4, acceptance_rate=0.5, method="mtp")
    by_length = predict("H200", model="Qwen2.5-72B", tp=2, batch=8, k=4, acceptance_length=3.0, method="mtp")
    assert by_rate["inputs"]["acceptance_length"] == pytest.approx(3.0)
    assert by_rate["verdict"] == by_length["verdict"]


def test_params_instead_of_model_and_custom_gpu():
    result = predict(
        "RTX 3090",
        peak_flops="71e12",
        memory_bandwidth="936e9",
        params="8B",
        kv_bytes_per_token="128KiB",
        batch=2,
        k=2,
        acceptance_length=2.4,
        method="eagle3",
        context=1000,
    )
    assert result["inputs"]["gpu"] == "RTX 3090"
    assert result["inputs"]["kv_bytes_per_token"] == 131072
    assert result["verdict"]["speculation"] == "on"


def test_no_acceptance_says_what_would_pay():
    result = predict("L40S", model="Llama-3.1-8B", batch=32, k=3, method="eagle")
    verdict = result["verdict"]
    assert verdict["speculation"] == "unknown"
    assert verdict["expected_speedup"] is None
    assert result["details"]["required_acceptance_length"] == pytest.approx(verdict["break_even_length"])
    assert "would pay" in verdict["reasons"][0]


def test_json_output_and_exit_statuses():
    status, out, err = _run(H100_70B_NGRAM + ["--batch", "1", "--acceptance-length", "2.5", "--json"])
    assert status == 0 and err == ""
    payload = json.loads(out)
    assert payload["schema"] == "specwatch.predict/1"
    assert set(payload["verdict"]) == {
        "speculation",
        "confidence",
        "expected_speedup",
        "request_speedup",
        "throughput_speedup",
        "break_even_length",
        "crossover_concurrency",
        "batch",
        "reasons",
    }
    assert payload["verdict"]["batch"] == {"asked": 1, "plain": 1, "speculative": 1, "capped": False, "why": None}
    assert set(payload["bound"]) == {"state", "signals"}

    status, out, _ = _run(H100_70B_NGRAM + ["--batch", "1024", "--acceptance-length", "2.5"])
    assert status == 1
    assert out.startswith("speculation: off")

    status, out, _ = _run(H100_70B_NGRAM + ["--batch", "8"])
    assert status == 2
    assert "speculation: unknown" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--gpu", "Z100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3"], "H100-SXM"),
        (["--gpu", "H100", "--model", "Llama-9", "--batch", "1", "--k", "3"], "Llama-3.1-70B"),
        (["--model", "Llama-3.1-8B", "--batch", "1", "--k", "3"], "--gpu is required"),
        (["--gpu", "H100", "--batch", "1", "--k", "3"], "--model"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--params", "8B", "--batch", "1", "--k", "3"], "not both"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "many", "--k", "3"], "batch"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "-4", "--k", "3"], "batch must be positive"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "2.5"], "whole number"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1"], "--k"),
        (
            ["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3", "--acceptance-length", "7"],
            "between 1 and k+1 = 4",
        ),
        (
            ["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3", "--acceptance-rate", "70"],
            "did you mean 0.7",
        ),
        (
            ["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3", "--acceptance-length", "2",
             "--acceptance-rate", "0.3"],
            "not both",
        ),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3", "--method", "magic"], "magic"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3", "--method", "draft"], "--draft-params"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3", "--dtype", "fp3"], "unknown dtype"),
        (["--gpu", "H100", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3", "--tp", "0"], "tp"),
        (["--gpu", "X", "--peak-flops", "1e14", "--model", "Llama-3.1-8B", "--batch", "1", "--k", "3"], "both"),
    ],
)
def test_bad_input_exits_with_the_usage_status_and_a_message(argv, message):
    status, out, err = _run(argv)
    assert status == 64
    assert out == ""
    assert message in err
    assert "Traceback" not in err


def test_run_predict_tolerates_a_sparse_namespace():
    # The lead's parser may not define every option; missing ones read as absent.
    namespace = argparse.Namespace(gpu="H100", model="Llama-3.1-8B", batch="1", k="3", acceptance_length="2.2")
    out, err = io.StringIO(), io.StringIO()
    assert run_predict(namespace, out=out, err=err) == 0
    assert "speculation: on" in out.getvalue()


def test_parse_quantity():
    assert parse_quantity("70B", "params") == 70e9
    assert parse_quantity("0.5b", "params") == 0.5e9
    assert parse_quantity("500M", "params") == 500e6
    assert parse_quantity("320KiB", "kv") == 320 * 1024
    assert parse_quantity("3.35e12", "bw") == 3.35e12
    assert parse_quantity(7, "k") == 7.0
    for bad in ("", "1.2.3", "5 parsecs", "nan", True):
        with pytest.raises(PredictInputError):
            parse_quantity(bad, "thing")


def test_the_kv_cap_of_a_tight_setup_is_what_vllm_holds_on_nvmls_memory_total():
    """Issue 45, item 9: the GPU table held an "80GB" H100 as 80e9 bytes, where NVML (and vLLM, which
    takes gpu_memory_utilization of the device's total) counts 81,559 MiB; in a set-up where the
    weights nearly fill the GPU that left the KV cap at a fifth of what the engine holds.

    Llama-3.1-70B in FP8 on one H100 SXM, 2,000 tokens of context per sequence, worked out here
    in bytes rather than by the product's own functions."""
    total = 81559 * 1024 * 1024  # NVML's memory.total for "NVIDIA H100 80GB HBM3": 85,520,809,984 B
    assert total == 85_520_809_984
    utilisation = 0.9  # vLLM's gpu_memory_utilization default
    weights = 70.6e9 * 1  # 70.6 B parameters at one byte each (FP8), all on the one GPU
    # KV per token: 80 layers × 8 KV heads × 128 dims × (K and V) × 2 bytes (BF16 cache)
    kv_per_token = 80 * 8 * 128 * 2 * 2
    assert kv_per_token == 327_680
    kv_bytes = total * utilisation - weights  # 6.37e9 B for the cache
    sequences = kv_bytes / (2000 * kv_per_token)
    assert sequences == pytest.approx(9.718, abs=0.001)
    decimal = (80e9 * utilisation - weights) / (2000 * kv_per_token)  # what the decimal table gave
    assert decimal == pytest.approx(2.136, abs=0.001)

    result = predict("H100", model="Llama-3.1-70B", dtype="fp8", batch=64, k=3, acceptance_length=2.5,
                     method="eagle", context=2000)
    batch = result["verdict"]["batch"]
    assert batch["capped"] is True
    assert batch["plain"] == pytest.approx(sequences, rel=1e-9)
    assert batch["why"] == "KV memory holds 9.7 of the 64 asked for"


def test_a_crossover_that_never_comes_names_the_kv_cap_not_the_search_limit():
    """Issue 45: predict said "it keeps paying up to 1024 running sequences" (the crossover search's
    end) where the KV memory holds a few dozen. At 8000 tokens of context 0.9 of an H100's 80 GiB
    less Llama-3.1-8B's 16 GB holds about 58 sequences at 128 KiB a token: the limit named is that."""
    result = predict("H100", model="Llama-3.1-8B", batch=4, k=3, acceptance_length=2.5, method="ngram", context=8000)
    assert result["details"]["crossover_state"] == "pays_throughout"
    (words,) = [r for r in result["verdict"]["reasons"] if r.startswith("it keeps paying up to")]
    assert "1024" not in words and "the KV memory holds: more requests wait rather than run" in words
    held = int(words.split("up to the ")[1].split()[0])
    assert 30 < held < 70, words  # (0.9 × 85.52 − 16.06) GB / (8000 × 131072 B) ≈ 58
    # a longer context holds fewer, and the words follow: 32000 tokens hold a quarter as many
    longer = predict("H100", model="Llama-3.1-8B", batch=4, k=3, acceptance_length=2.5, method="ngram", context=32000)
    (words,) = [r for r in longer["verdict"]["reasons"] if r.startswith("it keeps paying up to")]
    assert int(words.split("up to the ")[1].split()[0]) == pytest.approx(held / 4, abs=1)


@pytest.mark.parametrize("method, k", [("ngram", 3), ("eagle3", 3), ("draft_model", 5)])
def test_an_acceptance_length_of_1_cannot_pay_and_says_so_with_certainty(method, k):
    """Issue 45: --acceptance-length 1 gave "off" at confidence 0.845. Nothing accepted, a speculative
    step emits one token as a plain step does and never costs less: it cannot pay, whatever the
    step-time error, and the confidence says certain."""
    extra = {"draft_params": 1e9} if method == "draft_model" else {}
    result = predict("H100", model="Llama-3.1-8B", batch=4, k=k, acceptance_length=1.0, method=method, **extra)
    verdict = result["verdict"]
    assert verdict["speculation"] == "off" and verdict["confidence"] == 1.0
    assert verdict["expected_speedup"] <= 1.0
    assert any("accepts no draft token" in r for r in verdict["reasons"])
    if method == "ngram":  # a free drafter just above 1: the step-time error still counts
        close = predict("H100", model="Llama-3.1-8B", batch=4, k=k, acceptance_length=1.05, method=method)
        assert close["verdict"]["confidence"] < 1.0


def test_a_tensor_parallel_degree_that_cannot_split_the_heads_is_refused():
    """Issue 45: `predict --tp 3` on a model of 32 query heads and 8 KV heads was priced; vLLM refuses
    to start with it. The degrees that split the heads (KV heads evenly, or replicated) are named."""
    status, _, err = _run(["--gpu", "H100", "--model", "Llama-3.1-8B", "--tp", "3", "--k", "3",
                           "--acceptance-length", "2", "--batch", "4"])
    assert status == 64
    assert "--tp 3 cannot split Llama-3.1-8B's 32 attention heads and 8 KV heads" in err
    assert "use --tp 1, 2, 4, 8, 16, 32" in err
    with pytest.raises(PredictInputError):
        predict("H100", model="Llama-3.1-8B", batch=4, k=3, acceptance_length=2.0, tp=6)
    # 64 query heads, 8 KV heads: 16 ranks hold each KV head twice, as vLLM does
    assert predict("H100", model="Llama-3.1-70B", batch=4, k=3, acceptance_length=2.0, tp=16)["verdict"]
    # a model known only by its size has no heads to split
    assert predict("H100", params=8e9, batch=4, k=3, acceptance_length=2.0, tp=3)["verdict"]


def test_predict_json_says_what_its_alike_figures_are_and_the_ln_terms_add_up():
    """Issue 45: two different knee_tokens, and ln_* terms and a confidence with no word on them. The
    document carries notes; the note on the ln terms holds: they add up to ln S."""
    import math

    status, out, _ = _run(H100_70B_NGRAM + ["--acceptance-length", "2.4", "--batch", "32", "--context", "1500",
                                            "--json"])
    details = json.loads(out)["details"]
    notes = details["notes"]
    assert {"knee_tokens", "step_time_model.knee_tokens", "decision.terms.ln_*", "decision.confidence"} <= set(notes)
    assert details["step_time_model"]["knee_tokens"] > details["knee_tokens"]  # the hinge's corner lies past it
    terms = details["decision"]["terms"]
    assert sum(v for k, v in terms.items() if k.startswith("ln_")) == pytest.approx(
        math.log(details["decision"]["expected_speedup"]), abs=1e-9)


def test_counts_below_ten_keep_their_decimal_and_a_cap_that_rounds_to_the_batch_shows_it():
    """Issue 45: "about 0 prompt tokens" (0.3 of a token per step) and "56 of the 56" (55.95 held of 56
    asked for). A count below ten keeps one decimal; a cap that rounds to the batch keeps its own."""
    from specwatch import perf

    assert perf.count_words(0.3) == "0.3" and perf.count_words(4.0) == "4" and perf.count_words(55.95) == "56"
    low, *_ = perf.prefill_shared(0.3, 1.0, 1.0, 2.0, 0.01, 0.012, 0.3, 0.8, None)
    words = perf.prefill_shared(0.3, 1.0, 1.0, 2.0, 0.01, 0.012, 0.3, 0.8, None)[2]
    assert "about 0.3 prompt tokens and a speculative one 0.8" in words and low > 0
    from specwatch.advice.predict import _answered_batch

    class _Held:  # the decision's batches: 55.95 held where 56 were asked for
        terms = {"batch_plain": 55.95, "batch_speculative": 55.95}

    assert _answered_batch(_Held(), 56.0, None)["why"] == "KV memory holds 55.9 of the 56 asked for"
