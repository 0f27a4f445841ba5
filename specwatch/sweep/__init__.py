"""The baseline-vs-speculative concurrency sweep: where speculation stops paying, measured.

Two otherwise identical servers, one without speculation and one with it, get the same prompts in
the same order at each concurrency tier (closed loop, specwatch.sweep.loadgen). Each tier records TPOT and
TTFT percentiles, output tokens/s, requests ok and failed, and, from both servers' /metrics scraped
during the tier, the acceptance length and the running batch. The report gives both measured
curves, the concurrency at which each speedup (throughput, TPOT) falls through 1, interpolated
between tiers, and the curve specwatch.perf predicts, beside them.

Targets: two running servers (URLs), or `serve`: vLLM launched here twice, without and then with
`--speculative-config` (a subprocess with no shell, arguments validated). `vllm bench serve
--save-result` files give the same report without running anything.

A server that dies, a tier where nothing succeeds, or a bad bench file ends the sweep with a clear
message; the partial results are kept (and, with an output folder, written after every tier).

Each tier runs in rounds of both sides, interleaved A B, B A, A B, … (`live.round_order`); every
figure gets a 95 % interval over the rounds and the speedup's interval decides "pays", "costs" or
"within noise" (`intervals`). With a time budget, a tier gets rounds until its interval clears 1.
What can skew a round (GPU clocks and throttling, GPU neighbours, CPU steal and load, failures) is
recorded per side and rounds run under different conditions are flagged (`noise`).

One module per part: `common` (vocabulary), `loadgen` (the closed-loop load), `live`, `serve`, `probe`,
`bench` (targets), `intervals`, `noise`, `crossing`, `predicted`, `report`, `plot`, `files` (results).
"""

from __future__ import annotations

from specwatch.sweep.common import *  # noqa: F401,F403
from specwatch.sweep.crossing import *  # noqa: F401,F403
from specwatch.sweep.intervals import *  # noqa: F401,F403
from specwatch.sweep.noise import *  # noqa: F401,F403
from specwatch.sweep.predicted import *  # noqa: F401,F403
from specwatch.sweep.report import *  # noqa: F401,F403
from specwatch.sweep.plot import *  # noqa: F401,F403
from specwatch.sweep.probe import *  # noqa: F401,F403
from specwatch.sweep.live import *  # noqa: F401,F403
from specwatch.sweep.serve import *  # noqa: F401,F403
from specwatch.sweep.bench import *  # noqa: F401,F403
from specwatch.sweep.files import *  # noqa: F401,F403
