"""The serving weight formats the step law prices: bytes per weight and the precision the GEMMs
compute in, and how fast a weight-only quantised GEMM runs past its knee. Pure.
"""

from __future__ import annotations

__all__ = ["WEIGHT_ONLY_GEMM_EFFICIENCY", "WEIGHT_FORMATS", "weight_format_key"]


# Weight-only quantised GEMMs (W8A16, W4A16: AWQ, GPTQ through Marlin-class kernels) dequantise
# every weight in the main loop and, on Hopper, run on mma.sync rather than wgmma: past their knee
# they reach about 0.7 of a BF16 GEMM's rate (Marlin's own curves fall back to FP16 speed only by
# batch 128 on Ampere, below it on Hopper). Below the knee they are read-bound as any GEMM.
WEIGHT_ONLY_GEMM_EFFICIENCY = 0.7

# Bytes per weight and compute precision for the serving dtypes predict accepts. Weight-only
# quantisation (w8a16, w4a16) reads fewer bytes but computes in bf16, so its knee moves left.
WEIGHT_FORMATS: dict[str, tuple[float, str]] = {
    "bf16": (2.0, "bf16"),
    "fp16": (2.0, "bf16"),
    "fp8": (1.0, "fp8"),  # W8A8: FP8 weights and FP8 GEMMs
    "w8a8": (1.0, "fp8"),
    "int8": (1.0, "bf16"),  # W8A16
    "w8a16": (1.0, "bf16"),
    "int4": (0.5, "bf16"),  # W4A16: AWQ / GPTQ
    "w4a16": (0.5, "bf16"),
    "awq": (0.5, "bf16"),
    "gptq": (0.5, "bf16"),
}


def weight_format_key(name: str, what: str = "dtype") -> str:
    """`name` as a WEIGHT_FORMATS key (case aside); a name that is none is a ValueError saying
    `what` was unknown and listing the formats priced."""
    key = name.lower()
    if key not in WEIGHT_FORMATS:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(WEIGHT_FORMATS)}")
    return key
