"""Common model shapes, as data: the served model's parameter count, depth, attention shape (KV
bytes per context token) and MoE routing, each row with the Hugging Face config.json and model card
it comes from. `specwatch.perf.hardware` re-exports these names beside the GPU table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["ModelSpec", "MODELS", "lookup_model", "known_model_names", "weight_format"]

@dataclass(frozen=True)
class ModelSpec:
    """The shape of a served model, as far as the step-time model needs it."""

    name: str
    params: float  # total parameters
    active_params: float  # parameters used per token (= params for dense models)
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    source: str
    experts: int | None = None  # routed experts per MoE layer
    experts_per_token: int | None = None  # top-k routing
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): the cache holds one compressed latent
    # per layer and token, kv_lora_rank + qk_rope_head_dim wide, instead of K and V per KV head.
    kv_latent_dim: int | None = None
    # The format the checkpoint is released in (a specwatch.perf.steptime.WEIGHT_FORMATS key, from
    # its config.json's quantization_config): what predict and the advisor price the weights at
    # where the operator does not say (--dtype). An 8×H200 node serves DeepSeek-V3 as released, in
    # FP8; priced in BF16 its weights would not fit.
    weights: str = "bf16"
    # The vocabulary (config.json's vocab_size) and whether the LM head is the input embedding
    # (tie_word_embeddings): what prices the LM head a draft head reads and one layer's share of the
    # weights (`layer_active_params`). None where not tabled.
    vocab_size: int | None = None
    tied_embeddings: bool = False
    # Layers of a mixture of experts whose FFN is dense (DeepSeek's first_k_dense_replace, the layers
    # between Llama-4-Maverick's MoE layers): they pay no routing, no grouped GEMMs.
    dense_layers: int = 0

    @property
    def lm_head_params(self) -> float | None:
        """The LM head's weights, vocab × hidden (None where the vocabulary is not tabled)."""
        return None if self.vocab_size is None else float(self.vocab_size) * self.hidden_size

    @property
    def layer_active_params(self) -> float | None:
        """One decoder layer's weights a token uses (attention + MLP; for a mixture of experts the
        shared weights and its top-k experts): the active parameters less the input embedding and
        the LM head (one matrix when tied), shared across the layers. Dense layers before the first
        MoE layer (DeepSeek's first_k_dense_replace) are averaged in. None without the vocabulary."""
        lm_head = self.lm_head_params
        if lm_head is None:
            return None
        embeddings = lm_head if self.tied_embeddings else 2.0 * lm_head
        return max(self.active_params - embeddings, 0.0) / self.layers

    @property
    def kv_bytes_per_token(self) -> int:
        """BF16 KV-cache bytes per context token, whole model: K and V, every layer, every KV head;
        for MLA the latent (kv_lora_rank + qk_rope_head_dim), every layer."""
        if self.kv_latent_dim is not None:
            return self.layers * self.kv_latent_dim * 2
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @property
    def kv_replicated_under_tp(self) -> bool:
        """Whether every tensor-parallel rank holds the whole KV cache. K and V split by heads across
        the ranks; MLA's latent is one vector per layer shared by every head, so vLLM keeps all of it
        on every rank."""
        return self.kv_latent_dim is not None

    def kv_bytes_per_token_per_gpu(self, tp: int = 1) -> float:
        """KV bytes per context token on one GPU of `tp`: split across the ranks, or the whole of it
        where the cache is replicated (MLA)."""
        return float(self.kv_bytes_per_token) if self.kv_replicated_under_tp else self.kv_bytes_per_token / tp

    @property
    def is_moe(self) -> bool:
        return self.experts is not None and self.experts_per_token is not None

    @property
    def moe_layers(self) -> int:
        """Layers that route over experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "params": self.params,
            "active_params": self.active_params,
            "layers": self.layers,
            "hidden_size": self.hidden_size,
            "attention_heads": self.attention_heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_latent_dim": self.kv_latent_dim,
            "kv_replicated_under_tp": self.kv_replicated_under_tp,
            "experts": self.experts,
            "experts_per_token": self.experts_per_token,
            "moe_layers": self.moe_layers,
            "weights": self.weights,
            "vocab_size": self.vocab_size,
            "tied_embeddings": self.tied_embeddings,
            "source": self.source,
        }


def _hf(repo: str) -> str:
    return f"config.json of huggingface.co/{repo} (num_hidden_layers, hidden_size, num_attention_heads, " \
           "num_key_value_heads, vocab_size, tie_word_embeddings); parameter count from the model card"


def _hf_moe(repo: str, shape: str, params: str) -> str:
    return f"config.json of huggingface.co/{repo}: {shape}; {params} from the model card"


# Mixture-of-experts models. The step-time prior solves shared + routed = total and
# shared + routed·k/E = active for the routed share, so a shared expert (always on) is part of the
# shared weights through the active count: it needs no field of its own. Dense layers before the
# first MoE layer (DeepSeek's first_k_dense_replace) or between them (Llama-4-Maverick) are shared
# weights too; the union of experts a step touches is the same fraction in every MoE layer.
_DEEPSEEK_V3 = ModelSpec(
    "DeepSeek-V3", 671e9, 37e9, 61, 7168, 128, 128, 128,
    _hf_moe("deepseek-ai/DeepSeek-V3",
            "num_hidden_layers 61, hidden_size 7168, num_attention_heads 128, MLA with kv_lora_rank 512 + "
            "qk_rope_head_dim 64 (the cache holds this 576-wide latent per layer, replicated on every TP rank), "
            "v_head_dim 128, n_routed_experts 256, num_experts_per_tok 8, n_shared_experts 1, "
            "first_k_dense_replace 3, quantization_config fp8 (e4m3 weights in 128×128 blocks, dynamic "
            "activations)", "671B total / 37B activated (the 14B MTP module left out)"),
    experts=256, experts_per_token=8, kv_latent_dim=512 + 64, weights="fp8", vocab_size=129280, dense_layers=3,
)
_KIMI_K2 = ModelSpec(
    "Kimi-K2", 1.04e12, 32e9, 61, 7168, 64, 64, 128,
    _hf_moe("moonshotai/Kimi-K2-Instruct",
            "num_hidden_layers 61, hidden_size 7168, num_attention_heads 64, MLA with kv_lora_rank 512 + "
            "qk_rope_head_dim 64 (576-wide latent per layer, replicated on every TP rank), v_head_dim 128, "
            "n_routed_experts 384, num_experts_per_tok 8, n_shared_experts 1, first_k_dense_replace 1, "
            "quantization_config fp8 (e4m3 weights in 128×128 blocks)", "1.04T total / 32B activated"),
    experts=384, experts_per_token=8, kv_latent_dim=512 + 64, weights="fp8", vocab_size=163840, dense_layers=1,
)
_MOE_MODELS: tuple[ModelSpec, ...] = (
    _DEEPSEEK_V3,
    replace(_DEEPSEEK_V3, name="DeepSeek-R1",
            source=_DEEPSEEK_V3.source.replace("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1")
            + " (R1 is DeepSeek-V3's architecture, retrained)"),
    _KIMI_K2,
    replace(_KIMI_K2, name="Kimi-K2-Thinking", weights="w4a16",
            source=_KIMI_K2.source.replace("moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Thinking").replace(
                "quantization_config fp8 (e4m3 weights in 128×128 blocks)",
                "quantization_config compressed-tensors, the routed experts int4 weight-only in groups of 32 "
                "(quantisation-aware training), the rest bf16")),
    ModelSpec(
        "MiniMax-M2", 230e9, 10e9, 62, 3072, 48, 8, 128,
        _hf_moe("MiniMaxAI/MiniMax-M2",
                "num_hidden_layers 62, hidden_size 3072, num_attention_heads 48, num_key_value_heads 8, head_dim 128, "
                "num_local_experts 256, num_experts_per_tok 8, no shared expert, quantization_config fp8 (e4m3 "
                "weights in 128×128 blocks, dynamic activations)", "230B total / 10B activated"),
        experts=256, experts_per_token=8, weights="fp8", vocab_size=200064,
    ),
    ModelSpec(
        "GLM-4.5", 355e9, 32e9, 92, 5120, 96, 8, 128,
        _hf_moe("zai-org/GLM-4.5",
                "num_hidden_layers 92, hidden_size 5120, num_attention_heads 96, num_key_value_heads 8, head_dim 128, "
                "n_routed_experts 160, num_experts_per_tok 8, n_shared_experts 1, moe_intermediate_size 1536, "
                "first_k_dense_replace 3, num_nextn_predict_layers 1 (its MTP layer), bf16 (GLM-4.6 and GLM-4.7 "
                "keep the shape)", "355B total / 32B active"),
        experts=160, experts_per_token=8, vocab_size=151552, dense_layers=3,
    ),
    ModelSpec(
        "GLM-4.5-Air", 106e9, 12e9, 46, 4096, 96, 8, 128,
        _hf_moe("zai-org/GLM-4.5-Air",
                "num_hidden_layers 46, hidden_size 4096, num_attention_heads 96, num_key_value_heads 8, head_dim 128, "
                "n_routed_experts 128, num_experts_per_tok 8, n_shared_experts 1, moe_intermediate_size 1408, "
                "first_k_dense_replace 1, num_nextn_predict_layers 1, bf16", "106B total / 12B active"),
        experts=128, experts_per_token=8, vocab_size=151552, dense_layers=1,
    ),
    ModelSpec(
        "Qwen3-30B-A3B", 30.5e9, 3.3e9, 48, 2048, 32, 4, 128,
        _hf_moe("Qwen/Qwen3-30B-A3B",
                "num_hidden_layers 48, hidden_size 2048, num_attention_heads 32, num_key_value_heads 4, head_dim 128, "
                "num_experts 128, num_experts_per_tok 8, no shared expert", "30.5B total / 3.3B activated"),
        experts=128, experts_per_token=8, vocab_size=151936,
    ),
    ModelSpec(
        "Qwen3-235B-A22B", 235e9, 22e9, 94, 4096, 64, 4, 128,
        _hf_moe("Qwen/Qwen3-235B-A22B",
                "num_hidden_layers 94, hidden_size 4096, num_attention_heads 64, num_key_value_heads 4, head_dim 128, "
                "num_experts 128, num_experts_per_tok 8, no shared expert", "235B total / 22B activated"),
        experts=128, experts_per_token=8, vocab_size=151936,
    ),
    ModelSpec(
        "gpt-oss-20b", 20.9e9, 3.6e9, 24, 2880, 64, 8, 64,
        _hf_moe("openai/gpt-oss-20b",
                "num_hidden_layers 24, hidden_size 2880, num_attention_heads 64, num_key_value_heads 8, head_dim 64, "
                "num_local_experts 32, experts_per_token 4; every other layer attends through a 128-token sliding "
                "window, which the KV figure (full attention in every layer) does not take off; the released "
                "experts are MXFP4 (about 4.25 bits) and the rest bf16: the whole is priced as w4a16, the nearest "
                "format", "20.9B total / 3.6B active"),
        experts=32, experts_per_token=4, weights="w4a16", vocab_size=201088,
    ),
    ModelSpec(
        "gpt-oss-120b", 116.8e9, 5.1e9, 36, 2880, 64, 8, 64,
        _hf_moe("openai/gpt-oss-120b",
                "num_hidden_layers 36, hidden_size 2880, num_attention_heads 64, num_key_value_heads 8, head_dim 64, "
                "num_local_experts 128, experts_per_token 4; every other layer attends through a 128-token sliding "
                "window, which the KV figure (full attention in every layer) does not take off; the released "
                "experts are MXFP4 (about 4.25 bits) and the rest bf16: the whole is priced as w4a16, the nearest "
                "format", "116.8B total / 5.1B active"),
        experts=128, experts_per_token=4, weights="w4a16", vocab_size=201088,
    ),
    ModelSpec(
        "Llama-4-Scout-17B-16E", 109e9, 17e9, 48, 5120, 40, 8, 128,
        _hf_moe("meta-llama/Llama-4-Scout-17B-16E-Instruct",
                "text_config num_hidden_layers 48, hidden_size 5120, num_attention_heads 40, num_key_value_heads 8, "
                "head_dim 128, num_local_experts 16, num_experts_per_tok 1 plus a shared expert in every layer; "
                "3 of 4 layers attend in 8192-token chunks, which the KV figure (full attention) does not take off",
                "109B total / 17B active"),
        experts=16, experts_per_token=1, vocab_size=202048,
    ),
    ModelSpec(
        "Llama-4-Maverick-17B-128E", 400e9, 17e9, 48, 5120, 40, 8, 128,
        _hf_moe("meta-llama/Llama-4-Maverick-17B-128E-Instruct",
                "text_config num_hidden_layers 48, hidden_size 5120, num_attention_heads 40, num_key_value_heads 8, "
                "head_dim 128, num_local_experts 128, num_experts_per_tok 1 plus a shared expert, "
                "interleave_moe_layer_step 2 (MoE in every other layer, dense FFNs between: their weights are "
                "shared weights, and the union of experts touched is the same in each MoE layer); 3 of 4 layers "
                "attend in 8192-token chunks, which the KV figure does not take off", "400B total / 17B active"),
        experts=128, experts_per_token=1, vocab_size=202048, dense_layers=24,
    ),
)

_MODEL_LIST: tuple[ModelSpec, ...] = (
    ModelSpec("Llama-3.1-8B", 8.03e9, 8.03e9, 32, 4096, 32, 8, 128, _hf("meta-llama/Llama-3.1-8B"),
              vocab_size=128256),
    ModelSpec("Llama-3.1-70B", 70.6e9, 70.6e9, 80, 8192, 64, 8, 128, _hf("meta-llama/Llama-3.1-70B"),
              vocab_size=128256),
    ModelSpec("Llama-3.1-405B", 405.9e9, 405.9e9, 126, 16384, 128, 8, 128, _hf("meta-llama/Llama-3.1-405B"),
              vocab_size=128256),
    ModelSpec("Llama-3.2-1B", 1.24e9, 1.24e9, 16, 2048, 32, 8, 64, _hf("meta-llama/Llama-3.2-1B"),
              vocab_size=128256, tied_embeddings=True),
    ModelSpec("Llama-3.2-3B", 3.21e9, 3.21e9, 28, 3072, 24, 8, 128, _hf("meta-llama/Llama-3.2-3B"),
              vocab_size=128256, tied_embeddings=True),
    ModelSpec("Llama-2-7B", 6.74e9, 6.74e9, 32, 4096, 32, 32, 128, _hf("meta-llama/Llama-2-7b-hf") + " (MHA)",
              vocab_size=32000),
    ModelSpec("Qwen2.5-0.5B", 0.49e9, 0.49e9, 24, 896, 14, 2, 64, _hf("Qwen/Qwen2.5-0.5B"),
              vocab_size=151936, tied_embeddings=True),
    ModelSpec("Qwen2.5-7B", 7.62e9, 7.62e9, 28, 3584, 28, 4, 128, _hf("Qwen/Qwen2.5-7B"),
              vocab_size=152064),
    ModelSpec("Qwen2.5-72B", 72.7e9, 72.7e9, 80, 8192, 64, 8, 128, _hf("Qwen/Qwen2.5-72B"),
              vocab_size=152064),
    ModelSpec("TinyLlama-1.1B", 1.1e9, 1.1e9, 22, 2048, 32, 4, 64, _hf("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"),
              vocab_size=32000),
    ModelSpec(
        "Mixtral-8x7B",
        46.7e9,
        12.9e9,
        32,
        4096,
        32,
        8,
        128,
        _hf("mistralai/Mixtral-8x7B-v0.1") + "; 8 experts, top-2 (num_local_experts, num_experts_per_tok)",
        experts=8,
        experts_per_token=2,
        vocab_size=32000,
    ),
    *_MOE_MODELS,
)

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _MODEL_LIST}

# Names people type for the same weights (instruct tunes and point releases share the architecture).
_MODEL_ALIASES: dict[str, str] = {
    "llama-3-8b": "Llama-3.1-8B",
    "llama-3-70b": "Llama-3.1-70B",
    "llama-3.3-70b": "Llama-3.1-70B",
    "qwama-0.5b": "Qwen2.5-0.5B",  # turboderp/Qwama-0.5B-Instruct: a Qwen2-0.5B with the Llama-3 vocabulary
    "qwen2-0.5b": "Qwen2.5-0.5B",
    "deepseek-v3-0324": "DeepSeek-V3",
    "deepseek-v3.1": "DeepSeek-V3",
    "deepseek-v3.1-terminus": "DeepSeek-V3",
    "deepseek-r1-0528": "DeepSeek-R1",
    "kimi-k2-instruct-0905": "Kimi-K2",
    "glm-4.6": "GLM-4.5",  # GLM-4.6 and GLM-4.7 keep GLM-4.5's shape (Glm4MoeForCausalLM, 92 layers)
    "glm-4.7": "GLM-4.5",
    "llama-4-scout": "Llama-4-Scout-17B-16E",
    "llama-4-maverick": "Llama-4-Maverick-17B-128E",
}


def known_model_names() -> list[str]:
    return [spec.name for spec in _MODEL_LIST]


# Suffixes of fine-tunes, point releases and weight formats that keep the architecture, taken off
# the end of a name until none is left ("Qwen3-30B-A3B-Instruct-2507-FP8" → "qwen3-30b-a3b").
_MODEL_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base", "-2507", "-thinking")
# A quantised copy's usual name ends in its format ("Qwen3-235B-A22B-Instruct-2507-FP8",
# "Llama-3.1-70B-Instruct-AWQ"): the same architecture, its weights in that format.
_WEIGHT_SUFFIXES = (("-fp8-dynamic", "fp8"), ("-fp8", "fp8"), ("-awq-int4", "awq"), ("-awq", "awq"),
                    ("-gptq-int4", "gptq"), ("-gptq-int8", "w8a16"), ("-gptq", "gptq"),
                    ("-quantized.w4a16", "w4a16"), ("-quantized.w8a8", "w8a8"), ("-w4a16", "w4a16"),
                    ("-w8a8", "w8a8"), ("-int4", "int4"))


def _weight_suffix(key: str) -> tuple[str, str | None]:
    """A lower-case model name less its quantisation suffix, and the weight format that suffix names."""
    for suffix, weights in _WEIGHT_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)], weights
    return key, None


def _base_key(key: str) -> str:
    """A lower-case model name less the suffixes of its tunes and point releases (-Instruct, -2507)."""
    stripped = True
    while stripped:
        stripped = False
        for suffix in _MODEL_SUFFIXES:
            if key.endswith(suffix):
                key = key[: -len(suffix)]
                stripped = True
    return key.replace("_", "-").replace("meta-", "")


def lookup_model(name: str) -> ModelSpec | None:
    """Find a model architecture by name, case-insensitive; Hugging Face ids and -Instruct suffixes
    work. A name that ends in a quantisation format (-FP8, -AWQ, ...) gives the architecture with its
    weights in that format; a row whose own name has a suffix (Kimi-K2-Thinking, released in int4
    where Kimi-K2-Instruct is FP8) is found before the suffix is taken off."""
    if not isinstance(name, str) or not name.strip():
        return None
    # "meta-llama/Llama-3.1-8B-Instruct" → "llama-3.1-8b-instruct"
    named, weights = _weight_suffix(name.strip().lower().split("/")[-1])
    spec = _lookup_key(named.replace("_", "-")) or _lookup_key(_base_key(named))
    if spec is None or weights is None or weights == spec.weights:
        return spec
    return replace(spec, weights=weights)


def _lookup_key(key: str) -> ModelSpec | None:
    for spec in _MODEL_LIST:
        if key == spec.name.lower():
            return spec
    alias = _MODEL_ALIASES.get(key)
    return MODELS[alias] if alias else None


# Where the weight format priced came from (weight_format): the operator's --dtype, the table's
# model as released, or the BF16 default for a model the table does not know.
WEIGHTS_FROM_FLAGS, WEIGHTS_AS_RELEASED, WEIGHTS_DEFAULT = "flags", "release", "default"


def weight_format(model: ModelSpec | None, dtype: str | None) -> tuple[str, str]:
    """The weight format to price `model` at, and where it came from: --dtype (`dtype`) wins, then the
    format the table's model is released in, then BF16 (a model given by its size alone)."""
    if dtype is not None:
        return dtype.lower(), WEIGHTS_FROM_FLAGS
    if model is not None:
        return model.weights, WEIGHTS_AS_RELEASED
    return "bf16", WEIGHTS_DEFAULT
