"""The names `specwatch export` serves and `specwatch fleet` reads back through Prometheus.

One place for every metric name, its help text and its label names, so that the exporter and the
fleet view cannot drift apart (tests/test_export_schema.py checks the fleet's names against what
the exporter really serves).

Naming follows the Prometheus conventions: base units in the suffix (`_seconds`, `_ratio` for 0..1
fractions and for the speedup, `_tokens`, `_requests`), `_info` for constant-1 label carriers, and
state sets as one series per state with the current one at 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.perf import BOUND_STATES
from specwatch.advice.verdict import VERDICT_STATES

__all__ = [
    "MetricName",
    "VERDICT_STATES",
    "BOUND_STATES",
    "KNOWN_FLAGS",
    "NOT_CONFIGURED_STATES",
    "ALL_METRICS",
    "SERIES_SELECTOR",
]

# Label names.
NODE = "node"
TARGET = "target"
STATE = "state"
SIGNAL = "signal"
FLAG = "flag"
GPU = "gpu"
GPU_NAME = "name"
SOURCE = "source"
KIND = "kind"
PHASE = "phase"
QUANTILE = "quantile"
BOUND_LABEL = "bound"
REASON = "reason"


# Flags exported as 0/1 even when clear, so alert rules and dashboards always find the series.
KNOWN_FLAGS = ("misaligned_draft", "prefill_tax", "ttft_rising", "extrapolated", "stale_acceptance",
               "method_assumed", "engine_stalled", "gpu_unidentified", "mig_shape_assumed", "sweep_mismatch",
               "sweep_stale", "sweep_unverified", "sweep_disagrees", "not_judged", "reading_failed")
# Source states that mean "not configured here" rather than "failing": a dcgm-exporter probed
# quietly and not found, NVML turned off by a flag, no NVIDIA driver on the node. They are exported with up=1 so that a node
# without dcgm-exporter does not page anyone; the state label still says what happened.
# A node without an NVIDIA driver ("no_driver": a CPU node, or one whose GPUs are read through
# dcgm-exporter) has no NVML by design: that is not a failure either.
NOT_CONFIGURED_STATES = ("absent", "off", "no_driver")


@dataclass(frozen=True)
class MetricName:
    """One metric family: its name, help text, label names, and whether it is an info family."""

    name: str
    help: str
    labels: tuple[str, ...]
    info: bool = False

    @property
    def series(self) -> str:
        """The name its samples carry on the wire (an info family's gain `_info`)."""
        return f"{self.name}_info" if self.info else self.name


_TARGET = (NODE, TARGET)
_GPU = (NODE, GPU, GPU_NAME)

# -- the agent ---------------------------------------------------------------------------------------
AGENT = MetricName("specwatch_agent", "The export agent: its version and where it reads from.", (NODE,), info=True)
LAST_SNAPSHOT = MetricName("specwatch_last_snapshot_timestamp_seconds",
                           "Agent wall-clock time when the last Snapshot arrived (unix seconds).", (NODE,))
DATA_TIME = MetricName("specwatch_data_timestamp_seconds",
                       "The last Snapshot's own time (unix seconds; a replay's recorded time).", (NODE,))
POLL_DURATION = MetricName("specwatch_poll_duration_seconds", "How long the last poll of the sources took.", (NODE,))

# -- per vLLM target -------------------------------------------------------------------------------
VERDICT = MetricName("specwatch_verdict", "The speculation verdict: 1 for the current state, 0 for the others.",
                     _TARGET + (STATE,))
TARGET_UP = MetricName(
    "specwatch_target_up",
    "1 if the agent's last reading of this target succeeded, 0 if the target cannot be read; state says how "
    "(ok, connection_refused, timeout, http_401, ...). The verdict holds its last judged state through one "
    "failed evaluation (flag reading_failed: one missed reading does not flip a fleet's verdicts), then "
    "says unknown, and specwatch_speculation_configured goes absent: nothing is known about a server that "
    "stays silent.",
    _TARGET + (STATE,))
CONFIGURED = MetricName("specwatch_speculation_configured",
                        "1 if the server runs speculative decoding (absent while the target cannot be read).",
                        _TARGET)
CHANGE_RECOMMENDED = MetricName(
    "specwatch_change_recommended",
    "1 if a change is recommended (configured but costing, or off but it would pay).", _TARGET)
CONFIDENCE = MetricName("specwatch_confidence_ratio", "Confidence in the verdict, 0..1.", _TARGET)
EXPECTED_SPEEDUP = MetricName("specwatch_expected_speedup_ratio",
                              "Expected throughput with speculation over without, at this load (>1 pays).", _TARGET)
SPEEDUP_INTERVAL = MetricName(
    "specwatch_expected_speedup_interval_ratio",
    "The expected speedup's two-sided 90 % interval from the window's evidence (bound: low, high); the verdict "
    "is on or off only once it lies on one side of 1 (absent where no acceptance was measured).",
    _TARGET + ("bound",))
ACCEPTANCE_LENGTH = MetricName("specwatch_acceptance_length_tokens",
                               "Mean acceptance length L: tokens committed per verify step, bonus included.", _TARGET)
ACCEPTANCE_RATE = MetricName("specwatch_acceptance_rate_ratio",
                             "Accepted draft tokens over draft tokens in the window.", _TARGET)
BREAK_EVEN = MetricName("specwatch_break_even_length_tokens",
                        "Acceptance length above which speculation pays at this load (or would, if off).", _TARGET)
CROSSOVER = MetricName("specwatch_crossover_concurrency_requests",
                       "Running requests above which speculation stops paying (absent: it never crosses).", _TARGET)
RUNNING = MetricName("specwatch_running_requests", "Requests running on the target.", _TARGET)
BOUND = MetricName("specwatch_bound", "Roofline bound state: 1 for the current state.", _TARGET + (STATE,))
BOUND_SIGNAL = MetricName("specwatch_bound_signal", "Value behind one bound signal, labelled with what it says.",
                          _TARGET + (SIGNAL, STATE))
ENGINE_STALLED = MetricName(
    "specwatch_engine_stalled",
    "1 if requests ran through the whole window and the engine emitted no token and ran no step: the server "
    "answers, its engine does not advance.", _TARGET)
SPECULATION = MetricName(
    "specwatch_speculation",
    "The speculation setup the verdict is judged with: the method, the draft model (none for lookup methods), "
    "and where the method came from (server_info: the server's /server_info; flags: the operator's --method; "
    "unknown).", _TARGET, info=True)
TARGET_INFO = MetricName(
    "specwatch_target",
    "What the target is: its engine (vllm, sglang, trtllm, triton, dynamo), and where it sits in a deployment "
    "(deployment: a Dynamo namespace, none for a bare server; role: frontend, prefill, decode, aggregated, or "
    "none).", _TARGET, info=True)
FLAGS = MetricName("specwatch_flag", "Advisor flags (misaligned_draft, prefill_tax, ...): 1 when raised.",
                   _TARGET + (FLAG,))

# -- the node's health, per vLLM target, over the window -------------------------------------------------
SLO = MetricName("specwatch_slo_seconds", "The service-level targets goodput counts against (kind: ttft, tpot).",
                 (NODE, KIND))
GOODPUT = MetricName(
    "specwatch_goodput_ratio",
    "Share of requests within the SLO over the window, estimated from histogram buckets. With both a TTFT and "
    "a TPOT target the share meeting both lies between bound=low and bound=high.", _TARGET + (BOUND_LABEL,))
GOODPUT_IF_TOGGLED = MetricName(
    "specwatch_goodput_if_toggled_ratio",
    "The same with speculation switched the other way at this load: TPOT scaled by the expected speedup, "
    "TTFT unchanged.", _TARGET + (BOUND_LABEL,))
LATENCY = MetricName(
    "specwatch_request_latency_seconds",
    "Latency quantiles over the window from bucket deltas (phase: e2e, queue, ttft, prefill, decode, tpot, itl).",
    _TARGET + (PHASE, QUANTILE))
FINISH_REASON = MetricName("specwatch_finish_reason_ratio",
                           "Share of the requests finished in the window by reason (stop, length, abort, ...).",
                           _TARGET + (REASON,))
INPUT_OUTPUT = MetricName("specwatch_request_input_output_ratio",
                          "Mean prompt tokens over mean output tokens of the requests finished in the window.",
                          _TARGET)
PREFILL_HEAVY_SHARE = MetricName(
    "specwatch_prefill_heavy_share_ratio",
    "Share of the requests finished in the window whose prompt is over 10 times their output, between "
    "bound=low and bound=high: the length histograms do not pair prompts with outputs, so only the range "
    "over every pairing is known.", _TARGET + (BOUND_LABEL,))
REQUEST_RATE = MetricName("specwatch_requests_finished_per_second",
                          "Requests finished per second over the window.", _TARGET)
PREEMPTION_RATE = MetricName("specwatch_preemptions_per_second",
                             "Requests preempted (their KV blocks taken back) per second over the window.", _TARGET)
PREFIX_CACHE_HIT = MetricName("specwatch_prefix_cache_hit_ratio",
                              "Prompt tokens found in the prefix cache over those looked up, over the window.",
                              _TARGET)
KV_CAPACITY = MetricName("specwatch_kv_cache_capacity_tokens",
                         "The KV cache's size in tokens (vLLM's cache_config_info), all engines of the target.",
                         _TARGET)
ENERGY_PER_TOKEN = MetricName(
    "specwatch_energy_per_token_joules",
    "Energy of all GPUs over the window (NVML/DCGM total-energy counters) per output token of all targets.",
    (NODE,))
ENERGY_IF_TOGGLED = MetricName(
    "specwatch_energy_per_token_if_toggled_joules",
    "Energy per output token with this target's speculation switched the other way at this load, at the same "
    "power draw.", _TARGET)
GPU_ENERGY_PER_TOKEN = MetricName("specwatch_gpu_energy_per_token_joules",
                                  "One GPU's energy over the window per output token of the node.", _GPU)

# -- per GPU -----------------------------------------------------------------------------------------
GPU_DRAM = MetricName("specwatch_gpu_dram_active_ratio",
                      "DRAM bandwidth utilisation, 0..1 (GPM or DCGM_FI_PROF_DRAM_ACTIVE).", _GPU)
GPU_TENSOR = MetricName("specwatch_gpu_tensor_active_ratio",
                        "Tensor pipe activity, 0..1 (GPM or DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).", _GPU)
GPU_SM = MetricName("specwatch_gpu_sm_active_ratio", "SM activity, 0..1.", _GPU)
GPU_LOST = MetricName("specwatch_gpu_lost", "1 if the GPU fell off the bus or stopped answering.", _GPU)

# -- per source --------------------------------------------------------------------------------------
SOURCE_UP = MetricName("specwatch_source_up",
                       "1 if the agent's last reading of this source succeeded (or the source is not configured "
                       "here: see state), 0 if it failed; state says how.", (NODE, SOURCE, KIND, STATE))
SOURCE_LAST_SUCCESS = MetricName("specwatch_source_last_success_timestamp_seconds",
                                 "Agent wall-clock time of this source's last successful reading.", (NODE, SOURCE))

ALL_METRICS = (AGENT, LAST_SNAPSHOT, DATA_TIME, POLL_DURATION, TARGET_UP, VERDICT, CONFIGURED, CHANGE_RECOMMENDED, CONFIDENCE,
               EXPECTED_SPEEDUP, SPEEDUP_INTERVAL, ACCEPTANCE_LENGTH, ACCEPTANCE_RATE, BREAK_EVEN, CROSSOVER, RUNNING, BOUND,
               BOUND_SIGNAL, FLAGS, SPECULATION, TARGET_INFO, ENGINE_STALLED, SLO, GOODPUT, GOODPUT_IF_TOGGLED, LATENCY,
               FINISH_REASON, INPUT_OUTPUT, PREFILL_HEAVY_SHARE, REQUEST_RATE, PREEMPTION_RATE,
               PREFIX_CACHE_HIT, KV_CAPACITY, ENERGY_PER_TOKEN, ENERGY_IF_TOGGLED, GPU_ENERGY_PER_TOKEN, GPU_DRAM, GPU_TENSOR, GPU_SM, GPU_LOST, SOURCE_UP, SOURCE_LAST_SUCCESS)

# Every specwatch series, as a PromQL selector (optionally narrowed to one node by the caller).
SERIES_SELECTOR = '{__name__=~"specwatch_.+"}'
