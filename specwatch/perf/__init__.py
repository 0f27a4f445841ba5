"""The performance model: pure functions over numbers (numpy), no I/O, no clock, no mutable globals.

One module per part, in reading order (DESIGN §3, reference/model.md §1–5):

- `acceptance`: from vLLM's spec-decode counters to L, α and L at other k′;
- `draft`: the draft cost r per method and the low-load break-even 1 + k·r;
- `bound`: memory- or compute-bound, from independent signals;
- `formats`: the weight formats priced (bytes per weight, GEMM precision);
- `layout`: expert parallelism, DP attention and the MoE all-to-all;
- `steptime`: the step time T(N, C), a datasheet prior and an online fit;
- `anchor`: the prior's fixed latency moved to one measured plain step;
- `speedup`: S(b), the crossover concurrency and the best k′ at a load;
- `schedule`: the k by batch size that vLLM takes;
- `costs`: the terms of a speculative step beyond the GEMM roofline (draft, attention, KV, prefill);
- `confidence`: the level error of ln S and the chance the direction is right;
- `decision`: the one decision every command takes (speedup, break-even, crossover, confidence).

Named `perf` because "model" already means the served LLM.
"""

from __future__ import annotations

from specwatch.perf.acceptance import *  # noqa: F401,F403
from specwatch.perf.draft import *  # noqa: F401,F403
from specwatch.perf.bound import *  # noqa: F401,F403
from specwatch.perf.formats import *  # noqa: F401,F403
from specwatch.perf.layout import *  # noqa: F401,F403
from specwatch.perf.steptime import *  # noqa: F401,F403
from specwatch.perf.anchor import *  # noqa: F401,F403
from specwatch.perf.speedup import *  # noqa: F401,F403
from specwatch.perf.schedule import *  # noqa: F401,F403
from specwatch.perf.costs import *  # noqa: F401,F403
from specwatch.perf.confidence import *  # noqa: F401,F403
from specwatch.perf.decision import *  # noqa: F401,F403
