"""How a model is laid out over GPUs beyond tensor parallelism: expert parallelism (the routed
experts spread over GPUs, each holding its share whole), DP attention (each rank its own requests),
and what the MoE layers' all-to-all costs then. The step law (`steptime.datasheet_prior`) reads it.
Pure: no I/O, no clock, no mutable globals.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ALLTOALL_LATENCY_S",
    "NIC_BANDWIDTH",
    "NVLINK_ALLTOALL_EFFICIENCY",
    "GPUS_PER_NODE",
    "EP_IMBALANCE",
    "parallel_layout",
]

# Expert parallelism: each MoE layer sends every token to the ranks holding its experts (dispatch,
# FP8: one byte a hidden unit) and gathers their outputs back (combine, BF16: two), where tensor
# parallelism all-reduces. DeepEP's low-latency kernels (its README: 128 tokens a rank, hidden 7168,
# top-8, H800 with a 400 Gb/s CX7 NIC each) take 192 µs to dispatch and 369 µs to combine at EP 128,
# 173 and 314 µs at EP 64: the volume over about 40 GB/s of RDMA, plus a few µs. Inside one node
# the same kernels run over NVLink.
ALLTOALL_LATENCY_S = 10.0e-6
NIC_BANDWIDTH = 40.0e9
NVLINK_ALLTOALL_EFFICIENCY = 0.8
GPUS_PER_NODE = 8
# The busiest rank sets an expert-parallel step's pace: routing is not uniform, and a load balancer
# (DeepSeek's EPLB, redundant experts) narrows the gap without closing it. Assumed: the busiest rank
# gets 1.3× the mean tokens (its expert math and what it receives).
EP_IMBALANCE = 1.3


def parallel_layout(tp: int, ep: int | None, dp_attention: bool, moe: bool,
                     experts: int | None) -> tuple[int, int]:
    """(GPUs the experts are spread over, data-parallel attention ranks whose tokens meet in them),
    or a ValueError naming what does not fit together."""
    if ep is None:
        if dp_attention:
            raise ValueError("DP attention needs the experts' parallelism too (--ep: the GPUs of the deployment)")
        return tp, 1
    if isinstance(ep, bool) or not isinstance(ep, (int, np.integer)) or ep < 1:
        raise ValueError(f"ep must be an integer ≥ 1, got {ep!r}")
    if not moe:
        raise ValueError("expert parallelism needs a mixture of experts (a model with routed experts)")
    if experts is not None and ep > experts:
        raise ValueError(f"ep ({ep}) is more GPUs than the model has experts ({experts})")
    if dp_attention:
        if ep % tp:
            raise ValueError(f"with DP attention, tp ({tp}) is attention's parallelism inside each DP group: it "
                             f"must divide ep ({ep}), the GPUs of the deployment")
        return ep, ep // tp
    if tp % ep:
        raise ValueError(f"without DP attention the experts live on the tp GPUs: ep ({ep}) must divide tp ({tp})")
    return tp, 1
