"""GPU peak figures and common model shapes, as data.

The performance model (specwatch.perf) needs two things about a node that no metric reports: the
GPU's datasheet roofs (dense tensor FLOP/s and DRAM bytes/s) and the served model's shape (parameter
count, layers, KV bytes per context token). Both are frozen tables with their sources, so a number
can be traced back to the datasheet it came from; the model table lives in specwatch.perf.models
and is re-exported here.

All FLOP/s figures are **dense** (no 2:4 sparsity): NVIDIA datasheets print the sparse figure with
an asterisk, and the dense one is half of it. Bandwidth is bytes per second (decimal units, as on
datasheets: 3.35 TB/s = 3.35e12).

Memory capacity is not decimal: an "80GB" H100 holds 80 GiB of HBM, and NVML reports 81,559 MiB of
it (85.5e9 bytes, 7 % more than 80e9). Each entry's `memory_bytes` is the total NVML reports for the
part (nvidia-smi's memory.total, ECC on), in MiB × 2**20, so that a KV budget sized from it matches
the one an engine sizes from the device's own total (vLLM: gpu_memory_utilization × total − weights).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

# The model table lives in specwatch.perf.models; its names are read from here too.
from specwatch.perf.models import MODELS, ModelSpec, known_model_names, lookup_model

__all__ = [
    "GpuSpec",
    "ModelSpec",
    "GPUS",
    "MODELS",
    "lookup",
    "lookup_model",
    "custom_gpu",
    "clock_scaled_flops",
    "scale_for_clock",
    "scale_to_mig",
    "known_gpu_names",
    "known_model_names",
]

TERA = 1e12
GIGA = 1e9
# Binary units, for memory capacity only (NVML and CUDA count memory in them; bandwidth and FLOP/s
# stay decimal, as datasheets give them).
MEBI = 2.0**20
GIBI = 2.0**30


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet roofs of one GPU model (per GPU, not per node)."""

    key: str  # canonical short name, e.g. "H100-SXM"
    name: str  # human name, e.g. "H100 SXM"
    bf16_flops: float  # dense BF16/FP16 tensor FLOP/s with FP32 accumulate
    fp8_flops: float | None  # dense FP8 tensor FLOP/s; None where the part has no FP8 tensor path
    memory_bandwidth: float  # DRAM bytes/s
    memory_bytes: float | None  # DRAM capacity in bytes, as NVML reports it (binary: 80 GiB ≈ 85.9e9)
    max_sm_clock_mhz: float | None  # boost clock the peak FLOP/s figure assumes
    source: str  # where the figures come from (datasheet name / URL as text)
    # Per-direction GPU-to-GPU bandwidth used for tensor-parallel all-reduce. NVLink parts list the
    # bidirectional aggregate (e.g. 900 GB/s for H100 SXM); half of that flows each way.
    interconnect_bandwidth: float | None = None
    approximate: bool = False  # True where no official datasheet exists (A10G)
    vendor: str = "NVIDIA"
    # The fraction of the boost clock the FLOP/s figures are at: below 1 once scale_for_clock has
    # scaled them to a capped clock.
    clock_fraction: float = 1.0

    @property
    def ridge(self) -> float:
        """Dense BF16 roofline ridge in FLOP per DRAM byte (H100 SXM ≈ 295)."""
        return self.bf16_flops / self.memory_bandwidth

    def peak_flops(self, precision: str = "bf16") -> float:
        """Peak dense tensor FLOP/s for a compute precision ("bf16", "fp16" or "fp8").

        Parts without an FP8 tensor path (Ampere) run FP8 models as weight-only FP8 with BF16 math,
        so they fall back to the BF16 figure.
        """
        precision = precision.lower()
        if precision in ("bf16", "fp16"):
            return self.bf16_flops
        if precision == "fp8":
            return self.fp8_flops if self.fp8_flops is not None else self.bf16_flops
        raise ValueError(f"unknown compute precision {precision!r} (bf16, fp16 or fp8)")

    def ridge_for(self, precision: str = "bf16") -> float:
        return self.peak_flops(precision) / self.memory_bandwidth

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "name": self.name,
            "bf16_flops": self.bf16_flops,
            "fp8_flops": self.fp8_flops,
            "memory_bandwidth": self.memory_bandwidth,
            "memory_bytes": self.memory_bytes,
            "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "ridge": self.ridge,
            "approximate": self.approximate,
            "vendor": self.vendor,
            "source": self.source,
        }


_A100_DATASHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf, via "
    "glennklockwood.com/garden/processors/A100): BF16 312 TFLOPS dense / 624 sparse"
)
_H100_DATASHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet (via archive-lib.hpctech.co.jp table and glennklockwood.com H100 "
    "page; datasheet figures are sparse, dense = 1/2)"
)

_GPU_LIST: tuple[GpuSpec, ...] = (
    GpuSpec(
        key="A100-40GB-SXM",
        name="A100 40GB SXM",
        bf16_flops=312 * TERA,
        fp8_flops=None,
        memory_bandwidth=1555 * GIGA,
        memory_bytes=40960 * MEBI,  # 40 GiB: NVML total 40,960 MiB (older drivers said 40,536)
        max_sm_clock_mhz=1410,
        interconnect_bandwidth=300 * GIGA,  # NVLink 3: 600 GB/s aggregate
        source=_A100_DATASHEET + "; 1,555 GB/s HBM2",
    ),
    GpuSpec(
        key="A100-40GB-PCIE",
        name="A100 40GB PCIe",
        bf16_flops=312 * TERA,
        fp8_flops=None,
        memory_bandwidth=1555 * GIGA,
        memory_bytes=40960 * MEBI,  # 40 GiB: NVML total 40,960 MiB (older drivers said 40,536)
        max_sm_clock_mhz=1410,
        interconnect_bandwidth=32 * GIGA,  # PCIe 4.0 x16, one way
        source=_A100_DATASHEET + "; 1,555 GB/s; same peak at 250 W, so it sustains less",
    ),
    GpuSpec(
        key="A100-80GB-SXM",
        name="A100 80GB SXM",
        bf16_flops=312 * TERA,
        fp8_flops=None,
        memory_bandwidth=2039 * GIGA,
        memory_bytes=81920 * MEBI,  # 80 GiB: NVML total 81,920 MiB
        max_sm_clock_mhz=1410,
        interconnect_bandwidth=300 * GIGA,
        source=_A100_DATASHEET + "; 2,039 GB/s HBM2e",
    ),
    GpuSpec(
        key="A100-80GB-PCIE",
        name="A100 80GB PCIe",
        bf16_flops=312 * TERA,
        fp8_flops=None,
        memory_bandwidth=1935 * GIGA,
        memory_bytes=81920 * MEBI,  # 80 GiB: NVML total 81,920 MiB
        max_sm_clock_mhz=1410,
        interconnect_bandwidth=32 * GIGA,
        source=_A100_DATASHEET + "; 1,935 GB/s for the 80GB PCIe part (not re-checked)",
    ),
    GpuSpec(
        key="H100-SXM",
        name="H100 SXM",
        bf16_flops=989.4 * TERA,
        fp8_flops=1978.9 * TERA,
        memory_bandwidth=3350 * GIGA,
        memory_bytes=81559 * MEBI,  # 80 GiB part: NVML total 81,559 MiB (79.6 GiB, 85.5e9 bytes)
        max_sm_clock_mhz=1980,
        interconnect_bandwidth=450 * GIGA,  # NVLink 4: 900 GB/s aggregate
        source=_H100_DATASHEET + ": BF16 1,979* (dense 989.4), FP8 3,958* (dense 1,978.9), 3.35 TB/s HBM3",
    ),
    GpuSpec(
        key="H100-PCIE",
        name="H100 PCIe",
        bf16_flops=756.5 * TERA,
        fp8_flops=1513 * TERA,
        memory_bandwidth=2000 * GIGA,
        memory_bytes=81559 * MEBI,  # 80 GiB part: NVML total 81,559 MiB, as the SXM part
        max_sm_clock_mhz=1755,
        interconnect_bandwidth=64 * GIGA,  # PCIe 5.0 x16, one way
        source=_H100_DATASHEET + ": BF16 1,513* (dense 756.5), FP8 3,026* (dense 1,513), 2,000 GB/s HBM2e",
    ),
    GpuSpec(
        key="H100-NVL",
        name="H100 NVL",
        bf16_flops=835.5 * TERA,
        fp8_flops=1670.5 * TERA,
        memory_bandwidth=3900 * GIGA,
        memory_bytes=95830 * MEBI,  # "94 GB": NVML total 95,830 MiB (93.6 GiB)
        max_sm_clock_mhz=1785,
        interconnect_bandwidth=300 * GIGA,  # NVLink bridge: 600 GB/s aggregate
        source="NVIDIA H100 product page, NVL column: BF16 1,671* (dense 835.5), FP8 3,341* (dense 1,670.5), "
        "3.9 TB/s HBM3, 94 GB",
    ),
    GpuSpec(
        key="H200-SXM",
        name="H200 SXM",
        bf16_flops=989.4 * TERA,
        fp8_flops=1978.9 * TERA,
        memory_bandwidth=4800 * GIGA,
        memory_bytes=143771 * MEBI,  # "141 GB": NVML total 143,771 MiB (140.4 GiB)
        max_sm_clock_mhz=1980,
        interconnect_bandwidth=450 * GIGA,
        source="NVIDIA H200 product page / datasheet: same GH100 compute as H100 SXM (BF16 989.4 dense, FP8 1,978.9 "
        "dense), 4.8 TB/s HBM3e, 141 GB (aiwiki.ai/wiki/nvidia_h200)",
    ),
    GpuSpec(
        key="H200-NVL",
        name="H200 NVL",
        bf16_flops=835.5 * TERA,
        fp8_flops=1670.5 * TERA,
        memory_bandwidth=4800 * GIGA,
        memory_bytes=143771 * MEBI,  # "141 GB": NVML total 143,771 MiB, as the SXM part
        max_sm_clock_mhz=1785,
        interconnect_bandwidth=450 * GIGA,
        source="NVIDIA H200 product page, NVL column: BF16 1,671* (dense 835.5), 4.8 TB/s (from memory, not re-fetched)",
    ),
    GpuSpec(
        key="B200",
        name="B200 (HGX, 1000 W)",
        bf16_flops=2250 * TERA,
        fp8_flops=4500 * TERA,
        memory_bandwidth=8000 * GIGA,
        memory_bytes=183359 * MEBI,  # "180 GB": NVML total 183,359 MiB (179.1 GiB)
        max_sm_clock_mhz=None,
        interconnect_bandwidth=900 * GIGA,  # NVLink 5: 1.8 TB/s aggregate
        source="glennklockwood.com/garden/processors/B200 (HGX B200: FP16/BF16 2,250 dense / 4,500 sparse; FP8 "
        "4,500 dense; 8 TB/s HBM3e)",
    ),
    GpuSpec(
        key="GB200",
        name="B200 in GB200 (1200 W)",
        bf16_flops=2500 * TERA,
        fp8_flops=5000 * TERA,
        memory_bandwidth=8000 * GIGA,
        memory_bytes=189471 * MEBI,  # "186 GB": NVML total 189,471 MiB (185.0 GiB)
        max_sm_clock_mhz=None,
        interconnect_bandwidth=900 * GIGA,
        source="glennklockwood.com/garden/processors/B200 (GB200 variant at 1,200 W: BF16 2,500 dense, ridge ≈ 312); "
        "NVIDIA GB200 NVL72 page (per GPU: FP8 10 PF sparse / 5 PF dense, 8 TB/s)",
    ),
    GpuSpec(
        key="L40S",
        name="L40S",
        bf16_flops=362.05 * TERA,
        fp8_flops=733 * TERA,
        memory_bandwidth=864 * GIGA,
        memory_bytes=46068 * MEBI,  # "48 GB" GDDR6: NVML total 46,068 MiB with ECC on (45.0 GiB)
        max_sm_clock_mhz=2520,
        interconnect_bandwidth=32 * GIGA,  # PCIe 4.0 x16
        source="NVIDIA L40S datasheet (reseller copy, mullet.se): BF16 362.05 / 733*; FP8 733 / 1,466*; 864 GB/s GDDR6",
    ),
    GpuSpec(
        key="L4",
        name="L4",
        bf16_flops=121 * TERA,
        fp8_flops=242.5 * TERA,
        memory_bandwidth=300 * GIGA,
        memory_bytes=23034 * MEBI,  # "24 GB" GDDR6: NVML total 23,034 MiB (22.5 GiB)
        max_sm_clock_mhz=2040,
        interconnect_bandwidth=32 * GIGA,
        source="NVIDIA L4 datasheet: FP16/BF16 242* (dense 121), FP8 485* (dense 242.5), 300 GB/s GDDR6",
    ),
    GpuSpec(
        key="A10",
        name="A10",
        bf16_flops=125 * TERA,
        fp8_flops=None,
        memory_bandwidth=600 * GIGA,
        memory_bytes=23028 * MEBI,  # "24 GB" GDDR6: NVML total 23,028 MiB with ECC on (22.5 GiB)
        max_sm_clock_mhz=1695,
        interconnect_bandwidth=32 * GIGA,
        source="NVIDIA A10 datasheet: BF16 125 / 250*; 600 GB/s GDDR6",
    ),
    GpuSpec(
        key="A10G",
        name="A10G (AWS G5)",
        bf16_flops=70 * TERA,
        fp8_flops=None,
        memory_bandwidth=600 * GIGA,
        memory_bytes=23028 * MEBI,  # "24 GB" GDDR6: NVML total 23,028 MiB (AWS G5, ECC on)
        max_sm_clock_mhz=1710,
        interconnect_bandwidth=32 * GIGA,
        approximate=True,
        source="No NVIDIA datasheet exists. ~70 TFLOPS dense BF16 is an unofficial estimate; Baseten 'A10 vs A10G' "
        "says A10G shares the A10's 600 GB/s with lower tensor throughput. Calibrate on the node.",
    ),
    GpuSpec(
        key="A40",
        name="A40",
        bf16_flops=149.7 * TERA,
        fp8_flops=None,
        memory_bandwidth=696 * GIGA,
        memory_bytes=46068 * MEBI,  # "48 GB" GDDR6: NVML total 46,068 MiB with ECC on (49,140 off)
        max_sm_clock_mhz=1740,
        interconnect_bandwidth=32 * GIGA,  # PCIe 4.0 x16 (an NVLink bridge pairs two cards)
        source="NVIDIA A40 datasheet: BF16 tensor 149.7 / 299.4*; 696 GB/s GDDR6; 48 GB",
    ),
    GpuSpec(
        key="RTX-3090",
        name="GeForce RTX 3090",
        # GeForce Ampere runs FP16/BF16 tensor math with FP32 accumulate at half rate (71 vs 142).
        bf16_flops=71 * TERA,
        fp8_flops=None,
        memory_bandwidth=936 * GIGA,
        memory_bytes=24576 * MEBI,  # 24 GiB GDDR6X, no ECC: NVML total 24,576 MiB
        max_sm_clock_mhz=1695,
        interconnect_bandwidth=32 * GIGA,
        source="NVIDIA Ampere GA102 GPU architecture whitepaper: RTX 3090 FP16 tensor with FP32 accumulate "
        "71 dense / 142 sparse; 936 GB/s GDDR6X; 24 GB",
    ),
    GpuSpec(
        key="RTX-4090",
        name="GeForce RTX 4090",
        # GeForce parts run FP16/BF16 tensor math with FP32 accumulate at half rate (165.2 vs 330.3);
        # PyTorch BF16 GEMMs accumulate in FP32, so the half-rate figure is the one that applies.
        bf16_flops=165.2 * TERA,
        fp8_flops=330.3 * TERA,
        memory_bandwidth=1008 * GIGA,
        memory_bytes=24564 * MEBI,  # 24 GiB GDDR6X: NVML total 24,564 MiB
        max_sm_clock_mhz=2520,
        interconnect_bandwidth=32 * GIGA,
        source="NVIDIA Ada Lovelace architecture whitepaper (via waredb.com): FP16/BF16 tensor with FP32 accumulate "
        "165.2 dense; FP8 330.3 taken as the conservative (FP32-accumulate) dense figure; 1,008 GB/s GDDR6X "
        "(thefpsreview)",
    ),
    GpuSpec(
        key="MI300X",
        name="AMD Instinct MI300X",
        bf16_flops=1307.4 * TERA,
        fp8_flops=2614.9 * TERA,
        memory_bandwidth=5300 * GIGA,
        memory_bytes=196592 * MEBI,  # 192 GiB HBM3: the VRAM pool rocminfo gives (201,310,208 KiB)
        max_sm_clock_mhz=2100,
        interconnect_bandwidth=448 * GIGA,  # Infinity Fabric, 7 links × 64 GB/s one way
        vendor="AMD",
        source="AMD Instinct MI300X spec: BF16/FP16 dense 1,307.4 (sparse 2,614.9), FP8 dense 2,614.9, 5.3 TB/s HBM3 "
        "(quoted in alpharomercoma/MI300X-vs-H200 METHODOLOGY.md). Data only: NVML never reports AMD parts.",
    ),
)

GPUS: dict[str, GpuSpec] = {spec.key: spec for spec in _GPU_LIST}


def known_gpu_names() -> list[str]:
    return [spec.key for spec in _GPU_LIST]


def _tokens(name: str) -> list[str]:
    """Lower-case alphanumeric words of a GPU name: "NVIDIA A100-SXM4-80GB" → [nvidia, a100, sxm4, 80gb]."""
    return [token for token in re.split(r"[^0-9a-z]+", name.lower()) if token]


def lookup(name: str) -> GpuSpec | None:
    """Find the table entry for an NVML device name or a CLI short form; None if not known.

    Matching works on words, not substrings, so "GH200" is not taken for "H200" and "L40S" not for
    "L4". Short forms pick the common part: "H100" is the SXM part, "A100" the 80 GB SXM part.
    MIG device names ("NVIDIA H100 80GB HBM3 MIG 1g.10gb") resolve to the parent GPU; the caller must
    scale peaks to the slice.
    """
    if not isinstance(name, str):
        return None
    tokens = _tokens(name)
    if not tokens:
        return None
    words = set(tokens)
    joined = "".join(tokens)
    # Exact canonical keys first ("H100-SXM", "h100_sxm", "a100-80gb-pcie").
    for spec in _GPU_LIST:
        if joined == "".join(_tokens(spec.key)):
            return spec

    def has(*candidates: str) -> bool:
        return any(candidate in words for candidate in candidates)

    # Words may carry the memory size glued on ("h100sxm5", "a100 80gb"); also split "rtx4090".
    pcie = has("pcie") or "pcie" in joined
    nvl = has("nvl") or joined.endswith("nvl")
    if has("gb200") or joined == "gb200":
        return GPUS["GB200"]
    if has("b200"):
        return GPUS["B200"]
    if has("h200") or joined.startswith("h200"):
        return GPUS["H200-NVL" if nvl else "H200-SXM"]
    if has("h100") or joined.startswith("h100"):
        if nvl:
            return GPUS["H100-NVL"]
        if pcie:
            return GPUS["H100-PCIE"]
        return GPUS["H100-SXM"]
    if has("a100") or joined.startswith("a100"):
        forty = has("40gb", "40g", "40") or "40gb" in joined
        memory = "40GB" if forty else "80GB"
        return GPUS[f"A100-{memory}-{'PCIE' if pcie else 'SXM'}"]
    if has("l40s"):
        return GPUS["L40S"]
    if has("l4"):
        return GPUS["L4"]
    if has("a10g"):
        return GPUS["A10G"]
    if has("a10"):
        return GPUS["A10"]
    if has("a40"):
        return GPUS["A40"]
    if has("3090", "rtx3090"):
        return GPUS["RTX-3090"]
    if has("4090", "rtx4090"):
        return GPUS["RTX-4090"]
    if has("mi300x"):
        return GPUS["MI300X"]
    return None


def _positive_finite(value: float, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")
    return number


def custom_gpu(
    peak_flops: float,
    memory_bandwidth: float,
    *,
    fp8_flops: float | None = None,
    name: str = "custom",
    max_sm_clock_mhz: float | None = None,
    memory_bytes: float | None = None,
    interconnect_bandwidth: float | None = None,
) -> GpuSpec:
    """A user-supplied GPU (explicit override): dense BF16 FLOP/s and DRAM bytes/s.

    Use it for parts not in the table (RTX 3090, A40, MIG slices) or to replace datasheet peaks with
    measured ones. Raises ValueError on non-positive or non-finite figures.
    """
    flops = _positive_finite(peak_flops, "peak FLOP/s")
    bandwidth = _positive_finite(memory_bandwidth, "memory bandwidth")
    fp8 = _positive_finite(fp8_flops, "FP8 FLOP/s") if fp8_flops is not None else None
    clock = _positive_finite(max_sm_clock_mhz, "max SM clock") if max_sm_clock_mhz is not None else None
    capacity = _positive_finite(memory_bytes, "memory size") if memory_bytes is not None else None
    link = (
        _positive_finite(interconnect_bandwidth, "interconnect bandwidth") if interconnect_bandwidth is not None else None
    )
    return GpuSpec(
        key=name,
        name=name,
        bf16_flops=flops,
        fp8_flops=fp8,
        memory_bandwidth=bandwidth,
        memory_bytes=capacity,
        max_sm_clock_mhz=clock,
        interconnect_bandwidth=link,
        source="user override",
    )


def scale_to_mig(spec: GpuSpec, sm_fraction: float, memory_fraction: float, profile: str | None = None) -> GpuSpec:
    """The roofs of one MIG slice of `spec`: compute by the instance's share of the SMs, memory
    bandwidth and capacity by its share of the memory slices (each memory slice brings its own
    memory controllers and L2, NVIDIA's MIG user guide lists both as fractions of the GPU).

    The SM share is the guide's fraction of SMs (compute slices over the GPU's slices, 3/7 for a
    3g profile); MIG leaves a few SMs of the chip unused (an A100 7g instance has 98 of 108), so
    the scaled peak is an upper bound by up to about a tenth. A slice has no NVLink to other GPUs'
    slices: no interconnect figure. Raises ValueError on a share outside (0, 1].
    """
    compute = _positive_finite(sm_fraction, "SM share")
    memory = _positive_finite(memory_fraction, "memory share")
    if compute > 1.0 or memory > 1.0:
        raise ValueError(f"a MIG slice's share is at most the whole GPU, not {compute:g} / {memory:g}")
    label = f"MIG {profile}" if profile else f"MIG {compute:.0%} SMs"
    return replace(
        spec,
        key=f"{spec.key} {label}",
        name=f"{spec.name} · {label}",
        bf16_flops=spec.bf16_flops * compute,
        fp8_flops=spec.fp8_flops * compute if spec.fp8_flops is not None else None,
        memory_bandwidth=spec.memory_bandwidth * memory,
        memory_bytes=spec.memory_bytes * memory if spec.memory_bytes is not None else None,
        interconnect_bandwidth=None,
        source=f"{spec.source}; scaled to {label} ({compute:.3f} of the SMs, {memory:.3f} of the memory)",
    )


def clock_scaled_flops(peak_flops: float, current_sm_clock_mhz: float, max_sm_clock_mhz: float) -> float:
    """Peak FLOP/s at the current SM clock.

    Tensor throughput scales with the SM clock, so a power-capped GPU (SwPowerCap) reaches its
    compute roof sooner and its ridge moves left. The ratio is clamped to (0, 1]: boost clocks a few
    MHz above the listed maximum are reading noise, not extra capacity.
    """
    peak = _positive_finite(peak_flops, "peak FLOP/s")
    current = _positive_finite(current_sm_clock_mhz, "current SM clock")
    maximum = _positive_finite(max_sm_clock_mhz, "max SM clock")
    return peak * min(1.0, current / maximum)


def scale_for_clock(spec: GpuSpec, current_sm_clock_mhz: float, max_sm_clock_mhz: float | None = None) -> GpuSpec:
    """The spec with FLOP/s scaled to the current SM clock (bandwidth is unaffected by SM clock).

    `max_sm_clock_mhz` defaults to the table's figure; pass the NVML max clock when known. With no
    maximum available the spec is returned unchanged.
    """
    maximum = max_sm_clock_mhz if max_sm_clock_mhz is not None else spec.max_sm_clock_mhz
    if maximum is None:
        return spec
    bf16 = clock_scaled_flops(spec.bf16_flops, current_sm_clock_mhz, maximum)
    fp8 = clock_scaled_flops(spec.fp8_flops, current_sm_clock_mhz, maximum) if spec.fp8_flops is not None else None
    return replace(spec, bf16_flops=bf16, fp8_flops=fp8,
                   clock_fraction=spec.clock_fraction * bf16 / spec.bf16_flops)

