"""Tests for specwatch.perf.hardware: the GPU table, NVML name lookup, overrides, clocks, model table."""

from __future__ import annotations

import pytest

from specwatch.perf import hardware as hw
from specwatch.perf.steptime import WEIGHT_FORMATS

NVML_NAMES = {
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA H100 PCIe": "H100-PCIE",
    "NVIDIA H100 NVL": "H100-NVL",
    "NVIDIA A100-SXM4-80GB": "A100-80GB-SXM",
    "NVIDIA A100-SXM4-40GB": "A100-40GB-SXM",
    "NVIDIA A100 80GB PCIe": "A100-80GB-PCIE",
    "NVIDIA A100-PCIE-40GB": "A100-40GB-PCIE",
    "NVIDIA H200": "H200-SXM",
    "NVIDIA H200 NVL": "H200-NVL",
    "NVIDIA L4": "L4",
    "NVIDIA L40S": "L40S",
    "NVIDIA A10": "A10",
    "NVIDIA A10G": "A10G",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
    "NVIDIA B200": "B200",
    "NVIDIA GB200": "GB200",
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb": "H100-SXM",
}

SHORT_FORMS = {
    "H100": "H100-SXM",
    "h100": "H100-SXM",
    "H100-PCIe": "H100-PCIE",
    "h100 nvl": "H100-NVL",
    "H200": "H200-SXM",
    "A100": "A100-80GB-SXM",
    "a100-40gb": "A100-40GB-SXM",
    "L40S": "L40S",
    "l4": "L4",
    "A10G": "A10G",
    "rtx4090": "RTX-4090",
    "4090": "RTX-4090",
    "B200": "B200",
    "MI300X": "MI300X",
    "AMD Instinct MI300X": "MI300X",
    "H100-SXM": "H100-SXM",
    "a100_80gb_pcie": "A100-80GB-PCIE",
}


@pytest.mark.parametrize("name,key", sorted(NVML_NAMES.items()))
def test_lookup_real_nvml_names(name, key):
    assert hw.lookup(name).key == key


@pytest.mark.parametrize("name,key", sorted(SHORT_FORMS.items()))
def test_lookup_short_forms_case_insensitive(name, key):
    assert hw.lookup(name).key == key
    assert hw.lookup(name.upper()).key == key


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "NVIDIA L40", "Tesla V100-SXM2-16GB", "", "   ", "Z100"])
def test_lookup_unknown_names(name):
    # Word matching: GH200 is not an H200, L40 is not an L4 or L40S.
    assert hw.lookup(name) is None


def test_lookup_rejects_non_strings():
    assert hw.lookup(None) is None  # type: ignore[arg-type]


def test_ridges_match_the_reference_table():
    expected = {
        "A100-40GB-SXM": 201,
        "A100-80GB-SXM": 153,
        "A100-80GB-PCIE": 161,
        "H100-SXM": 295,
        "H100-PCIE": 378,
        "H100-NVL": 214,
        "H200-SXM": 206,
        "H200-NVL": 174,
        "B200": 281,
        "GB200": 312,
        "L40S": 419,
        "L4": 403,
        "A10": 208,
        "A10G": 117,
        "RTX-4090": 164,
        "MI300X": 247,
    }
    for key, ridge in expected.items():
        assert hw.GPUS[key].ridge == pytest.approx(ridge, abs=1.0), key


def test_every_entry_is_complete():
    for spec in hw.GPUS.values():
        assert spec.bf16_flops > 0 and spec.memory_bandwidth > 0
        assert spec.source
        if spec.fp8_flops is not None:
            assert spec.fp8_flops == pytest.approx(2 * spec.bf16_flops, rel=0.02)
    assert [spec.key for spec in hw.GPUS.values() if spec.approximate] == ["A10G"]
    assert hw.GPUS["MI300X"].vendor == "AMD"


# What NVML reports as each part's memory total (nvidia-smi's memory.total, MiB, ECC on where the
# part has it): an "80GB" H100 is 80 GiB of HBM of which NVML gives 81,559 MiB, not 80e9 bytes.
NVML_MEMORY_MIB = {
    "A100-40GB-SXM": 40960, "A100-40GB-PCIE": 40960, "A100-80GB-SXM": 81920, "A100-80GB-PCIE": 81920,
    "H100-SXM": 81559, "H100-PCIE": 81559, "H100-NVL": 95830, "H200-SXM": 143771, "H200-NVL": 143771,
    "B200": 183359, "GB200": 189471, "L40S": 46068, "L4": 23034, "A10": 23028, "A10G": 23028, "A40": 46068,
    "RTX-3090": 24576, "RTX-4090": 24564, "MI300X": 196592,
}


def test_memory_is_the_binary_total_nvml_reports_and_bandwidth_stays_decimal():
    assert set(NVML_MEMORY_MIB) == set(hw.GPUS)
    for key, mib in NVML_MEMORY_MIB.items():
        assert hw.GPUS[key].memory_bytes == mib * 1024 * 1024, key
    h100 = hw.GPUS["H100-SXM"]
    assert h100.memory_bytes == pytest.approx(85.52e9, rel=1e-3)  # 79.65 GiB, 7 % over a decimal 80 GB
    assert h100.memory_bytes / hw.GIBI == pytest.approx(79.65, abs=0.01)
    assert hw.GPUS["A100-80GB-SXM"].memory_bytes == 80 * hw.GIBI
    # datasheet bandwidth and FLOP/s are decimal, as printed: 3.35 TB/s is 3.35e12 bytes/s
    assert h100.memory_bandwidth == 3.35e12 and h100.bf16_flops == pytest.approx(989.4e12)
    # a MIG slice takes its share of the binary total
    assert hw.scale_to_mig(h100, 3 / 7, 4 / 8).memory_bytes == 81559 * 1024 * 1024 / 2


def test_peak_flops_by_precision():
    h100 = hw.GPUS["H100-SXM"]
    assert h100.peak_flops("fp8") == pytest.approx(2 * h100.peak_flops("bf16"), rel=0.01)
    assert h100.ridge_for("fp8") == pytest.approx(2 * h100.ridge, rel=0.01)
    a100 = hw.GPUS["A100-80GB-SXM"]
    assert a100.peak_flops("fp8") == a100.bf16_flops  # no FP8 tensor path on Ampere
    with pytest.raises(ValueError):
        h100.peak_flops("fp4")


def test_custom_gpu_override():
    rtx3090 = hw.custom_gpu(71e12, 936e9, name="RTX 3090")
    assert rtx3090.ridge == pytest.approx(75.9, abs=0.1)
    assert rtx3090.source == "user override"
    for flops, bandwidth in ((0, 1e12), (1e12, -1), (float("nan"), 1e12), (1e12, float("inf")), ("fast", 1e12)):
        with pytest.raises(ValueError):
            hw.custom_gpu(flops, bandwidth)


def test_clock_scaling():
    assert hw.clock_scaled_flops(1000.0, 990, 1980) == pytest.approx(500.0)
    assert hw.clock_scaled_flops(1000.0, 1985, 1980) == 1000.0  # a few MHz over max is not extra capacity
    h100 = hw.GPUS["H100-SXM"]
    throttled = hw.scale_for_clock(h100, 1485)
    assert throttled.bf16_flops == pytest.approx(h100.bf16_flops * 0.75)
    assert throttled.fp8_flops == pytest.approx(h100.fp8_flops * 0.75)
    assert throttled.memory_bandwidth == h100.memory_bandwidth
    assert throttled.ridge < h100.ridge  # a throttled GPU becomes compute-bound sooner
    assert hw.scale_for_clock(hw.GPUS["B200"], 1000) == hw.GPUS["B200"]  # no max clock known
    assert hw.scale_for_clock(hw.GPUS["B200"], 1000, 2000).bf16_flops == pytest.approx(1125e12)
    with pytest.raises(ValueError):
        hw.clock_scaled_flops(1000.0, 0, 1980)


def test_model_table():
    assert hw.MODELS["Llama-3.1-8B"].kv_bytes_per_token == 128 * 1024  # model.md §2
    assert hw.MODELS["Llama-3.1-70B"].kv_bytes_per_token == 320 * 1024
    assert hw.MODELS["Llama-2-7B"].kv_bytes_per_token == 512 * 1024
    for spec in hw.MODELS.values():
        assert 0 < spec.active_params <= spec.params
        assert spec.source
        assert spec.kv_bytes_per_token > 0
    mixtral = hw.MODELS["Mixtral-8x7B"]
    assert mixtral.is_moe and mixtral.active_params < 0.3 * mixtral.params
    assert not hw.MODELS["Qwen2.5-72B"].is_moe


def test_moe_rows():
    # KV bytes per token by hand: 2 (K, V) × layers × KV heads × head_dim × 2 bytes; MLA: layers × latent × 2
    assert hw.MODELS["Qwen3-235B-A22B"].kv_bytes_per_token == 2 * 94 * 4 * 128 * 2 == 192_512
    assert hw.MODELS["gpt-oss-120b"].kv_bytes_per_token == 2 * 36 * 8 * 64 * 2 == 73_728
    assert hw.MODELS["MiniMax-M2"].kv_bytes_per_token == 2 * 62 * 8 * 128 * 2 == 253_952
    assert hw.MODELS["Kimi-K2"].kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert hw.MODELS["DeepSeek-R1"].kv_bytes_per_token == 70_272
    assert hw.MODELS["GLM-4.5"].kv_bytes_per_token == 2 * 92 * 8 * 128 * 2 == 376_832
    assert hw.MODELS["GLM-4.5-Air"].kv_bytes_per_token == 2 * 46 * 8 * 128 * 2 == 188_416
    # first_k_dense_replace: GLM-4.5's first 3 layers and GLM-4.5-Air's first are dense
    assert (hw.MODELS["GLM-4.5"].moe_layers, hw.MODELS["GLM-4.5-Air"].moe_layers) == (89, 45)
    assert not hw.MODELS["MiniMax-M2"].kv_replicated_under_tp
    assert hw.MODELS["MiniMax-M2"].kv_bytes_per_token_per_gpu(8) == 253_952 / 8
    shapes = {"DeepSeek-V3": (256, 8), "Kimi-K2": (384, 8), "MiniMax-M2": (256, 8), "Qwen3-30B-A3B": (128, 8),
              "Qwen3-235B-A22B": (128, 8), "gpt-oss-20b": (32, 4), "gpt-oss-120b": (128, 4),
              "Llama-4-Scout-17B-16E": (16, 1), "Llama-4-Maverick-17B-128E": (128, 1), "GLM-4.5": (160, 8),
              "GLM-4.5-Air": (128, 8)}
    for name, (experts, top_k) in shapes.items():
        spec = hw.MODELS[name]
        assert (spec.experts, spec.experts_per_token) == (experts, top_k), name
        assert "config.json of huggingface.co/" in spec.source and "model card" in spec.source
    for spec in hw.MODELS.values():
        if spec.is_moe:
            assert spec.experts_per_token < spec.experts
            # shared + routed = total and shared + routed·k/E = active leave shared ≥ 0 only here
            assert spec.params * spec.experts_per_token / spec.experts <= spec.active_params < spec.params
        assert spec.to_dict()["kv_bytes_per_token"] == spec.kv_bytes_per_token


@pytest.mark.parametrize(
    "name,expected",
    [
        ("Llama-3.1-70B", "Llama-3.1-70B"),
        ("llama-3.1-70b", "Llama-3.1-70B"),
        ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
        ("meta-llama/Meta-Llama-3-70B-Instruct", "Llama-3.1-70B"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
        ("mixtral-8x7b", "Mixtral-8x7B"),
        ("turboderp/Qwama-0.5B-Instruct", "Qwen2.5-0.5B"),
        ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3"),
        ("deepseek-ai/DeepSeek-V3-0324", "DeepSeek-V3"),
        ("deepseek-r1", "DeepSeek-R1"),
        ("deepseek-ai/DeepSeek-R1-0528", "DeepSeek-R1"),
        ("moonshotai/Kimi-K2-Instruct", "Kimi-K2"),
        ("moonshotai/Kimi-K2-Instruct-0905", "Kimi-K2"),
        ("MiniMaxAI/MiniMax-M2", "MiniMax-M2"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("gpt-oss-20b", "gpt-oss-20b"),
        ("Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen3-235B-A22B"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "Llama-4-Scout-17B-16E"),
        ("llama-4-scout", "Llama-4-Scout-17B-16E"),
        ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "Llama-4-Maverick-17B-128E"),
        ("zai-org/GLM-4.5", "GLM-4.5"),
        ("zai-org/GLM-4.6", "GLM-4.5"),
        ("zai-org/GLM-4.7-FP8", "GLM-4.5"),
        ("zai-org/GLM-4.5-Air", "GLM-4.5-Air"),
    ],
)
def test_lookup_model(name, expected):
    assert hw.lookup_model(name).name == expected


def test_lookup_model_unknown():
    assert hw.lookup_model("GPT-5") is None
    assert hw.lookup_model("zai-org/GLM-4.7-Flash") is None  # MLA, 30B: not GLM-4.7's shape
    assert hw.lookup_model("") is None


def test_each_model_is_priced_in_the_format_it_is_released_in():
    released = {"DeepSeek-V3": "fp8", "DeepSeek-R1": "fp8", "Kimi-K2": "fp8", "Kimi-K2-Thinking": "w4a16",
                "MiniMax-M2": "fp8", "gpt-oss-20b": "w4a16", "gpt-oss-120b": "w4a16", "Qwen3-235B-A22B": "bf16",
                "Llama-4-Maverick-17B-128E": "bf16", "Llama-3.1-70B": "bf16"}
    assert {name: hw.MODELS[name].weights for name in released} == released
    assert all(spec.weights in WEIGHT_FORMATS for spec in hw.MODELS.values())


@pytest.mark.parametrize("name, expected, weights", [
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen3-235B-A22B", "fp8"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "Llama-4-Maverick-17B-128E", "fp8"),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "Llama-3.1-70B", "awq"),
    ("RedHatAI/Kimi-K2-Instruct-quantized.w4a16", "Kimi-K2", "w4a16"),
    # Kimi-K2-Thinking is a row of its own (int4 as released), not Kimi-K2 (FP8) less "-thinking"
    ("moonshotai/Kimi-K2-Thinking", "Kimi-K2-Thinking", "w4a16"),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507", "Qwen3-235B-A22B", "bf16"),
    ("deepseek-ai/DeepSeek-V3-0324", "DeepSeek-V3", "fp8"),
])
def test_a_quantised_copy_is_found_with_its_weights(name, expected, weights):
    spec = hw.lookup_model(name)
    assert (spec.name, spec.weights) == (expected, weights)
    assert spec.params == hw.MODELS[expected].params

