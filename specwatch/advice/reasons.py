"""The words of a verdict: its reasons and flags, what each says and when it is said. The opening
every read window's verdict starts with (the speculation config's and the token budget's
disagreements, an unscaled MIG slice, prefill-heavy traffic, a rising TTFT), the break-even and load
words, the crossover against a saved sweep, goodput against the operator's SLO, and what an engine
other than vLLM could not give.
`explain` words what the judging (`judging.Judged`) worked out; what only the words find (an answer
that hangs on an unidentified GPU, a sweep that disagrees, an extrapolated step model) is flagged
and caps the confidence. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math

from collections import deque
from typing import Any, Protocol, Sequence

from specwatch import perf
from specwatch.perf.hardware import GpuSpec
from specwatch.telemetry.snapshot import FROM_HOST, FROM_SERVER_INFO, GpuSample, SpeculationConfig, TargetSample
from specwatch.advice.drafter_pricing import METHOD_ASSUMED_WORDS
from specwatch.advice.judging import (
    EASY_LENGTH, HARD_LENGTH, MAX_CONFIDENCE, SHAPE_ASSUMED_CONFIDENCE, UNCONFIGURED_CONFIDENCE_CAP, Judged,
    band_confidence, bound_estimate, capped_confidence, engine_stall, judge_unconfigured, node_level_error,
)
from specwatch.advice.step_samples import shape_measured
from specwatch.advice.sweep_evidence import SweepIdentity, reconcile_crossover
from specwatch.advice.verdict import HOLD, OFF, ON, UNKNOWN, QuotedFigures, Verdict, unknown_verdict
from specwatch.readings.health import PREFILL_HEAVY_RATIO, Goodput, goodput, prefill_heavy_share, prefill_heavy_share_words
from specwatch.readings.window import EngineFigures, TargetWindow

# Acceptance rate under which a draft is called misaligned, and the drafts needed to say so.
MISALIGNED_RATE = 0.05
MISALIGNED_MIN_DRAFTS = 50
# Prefill tax (DESIGN §3): prompt tokens per output token above this.
PREFILL_RATIO = PREFILL_HEAVY_RATIO
# The prefill tax is raised too when at least this share of requests surely has a prompt over
# PREFILL_RATIO times its output, even with a mean ratio below it (a few long generations pull the
# mean down while most requests are prefill-heavy).
PREFILL_HEAVY_SHARE = 0.5
# TTFT p95 this many times its running median counts as rising.
TTFT_RISE = 1.5
# SGLang's acceptance is a gauge of its own last log interval, time-weighted by the collector
# (specwatch.collectors.sglang): no count of drafts stands behind it and no per-position rates, so other k are
# extrapolated from L alone. The direction's confidence is scaled by this for each such gap.
GAUGE_ACCEPTANCE_CONFIDENCE = 0.8


class ReasonSettings(Protocol):
    """The operator's settings the words read (an AdvisorConfig has them)."""

    @property
    def hysteresis(self) -> float: ...  # δ: a better k is named only beyond it

    @property
    def slo_ttft_s(self) -> float | None: ...

    @property
    def slo_tpot_s(self) -> float | None: ...


class TtftWatch:
    """Whether TTFT p95 rises against its recent median: the recent p95s, and the check."""

    def __init__(self) -> None:
        self._history: deque[float] = deque(maxlen=60)

    def check(self, figures: EngineFigures) -> str | None:
        """Whether TTFT p95 rises against its recent median (the reason, or None); then the p95 joins
        the history."""
        p95 = figures.ttft_p95_s
        if p95 is None:
            return None
        note = None
        history = sorted(self._history)
        if len(history) >= 5:
            median = history[len(history) // 2]
            if median > 0 and p95 > TTFT_RISE * median and p95 > 0.05:
                note = f"TTFT p95 is rising: {p95 * 1000:.0f} ms against a recent median of {median * 1000:.0f} ms"
        self._history.append(p95)
        return note


def unread_verdict(tw: TargetWindow, gpus: Sequence[GpuSample], gpu_spec: GpuSpec | None) -> Verdict | None:
    """The verdict of a window that holds no usable reading, or None where it does: its target could
    not be read, one reading so far (rates need two), or a stalled engine (frozen counters while
    requests run: no acceptance or step time is usable, and the lifetime acceptance must not stand
    in for it). The bound is the GPU counters' alone."""
    target = tw.latest
    if not target.ok:
        return unknown_verdict(f"cannot read the target: {target.message or target.state}", gpu_spec=gpu_spec)
    figures = tw.total
    if figures is None:
        return unknown_verdict("one reading so far: rates need two scrapes a window apart",
                               bound=bound_estimate(None, gpus, None, None), gpu_spec=gpu_spec)
    stalled = engine_stall(tw, figures)
    if stalled is None:
        return None
    return make_verdict(UNKNOWN, 0.0, tw.time, [stalled], bound_estimate(None, gpus, None, None), ["engine_stalled"],
                        tw, gpu_spec=gpu_spec, running=figures.running)


def opening(tw: TargetWindow, figures: EngineFigures, gpus: Sequence[GpuSample], gpu: GpuSpec | None,
            step_model: perf.StepTimeModel, speculation: SpeculationConfig | None, method: str | None,
            mig_unscaled: GpuSample | None, ttft_note: str | None,
            budget_note: str | None = None) -> tuple[perf.BoundEstimate, list[str], list[str]]:
    """The bound, and the reasons and flags every verdict on a read window opens with: the
    disagreements over the speculation config and the token budget (`budget_note`), an unscaled MIG
    slice, prefill-heavy traffic and a rising TTFT."""
    bound = bound_estimate(figures, gpus, gpu, step_model)
    reasons: list[str] = list(speculation.disagreements) if speculation else []
    if budget_note is not None:
        reasons.append(budget_note)
    flags: list[str] = []
    if mig_unscaled is not None:
        flags.append("mig_shape_assumed")
        reasons.append(f"{mig_unscaled.name}: NVML did not give this MIG slice's share of the GPU "
                       f"({mig_unscaled.errors.get('mig_shares', 'no share read')}), so its peaks cannot be "
                       "scaled from the whole GPU's: the step-time shape is assumed, not known")
    prefill_tax(figures, tw, method, reasons, flags)
    if ttft_note is not None:
        flags.append("ttft_rising")
        reasons.append(ttft_note)
    return bound, reasons, flags


def prefill_tax(figures: EngineFigures, tw: TargetWindow, method: str | None, reasons: list[str],
                flags: list[str]) -> None:
    """Prefill-heavy traffic, said (and flagged) when the mean ratio or the share of requests shows it."""
    ratio = figures.prompt_to_output_ratio
    heavy_share = prefill_heavy_share(tw.increases) if tw.increases is not None else None
    share_low = heavy_share[0] if heavy_share is not None else None
    by_ratio = ratio is not None and ratio > PREFILL_RATIO
    by_share = share_low is not None and share_low >= PREFILL_HEAVY_SHARE
    if by_ratio or by_share:
        flags.append("prefill_tax")
        mean = f"{ratio:.0f} prompt tokens per output token" if ratio is not None else "long prompts"
        # the length histograms bound the share of prefill-heavy requests, they do not give it: the
        # range says whether the tax falls on most requests or on a few long prompts
        share = prefill_heavy_share_words(*heavy_share) if heavy_share is not None else None
        reasons.append(f"prefill-heavy traffic ({mean}): speculation does nothing for TTFT"
                       + (", and the draft model runs its own prefill" if method == "draft" else "")
                       + (f"; {share} (bounds: the length histograms do not say which prompt went with "
                          "which output)" if share else ""))


def load_words(running: float, k: int, n_verify: float, step_model: perf.StepTimeModel, gpu: GpuSpec | None) -> str:
    """The load against the step time's knee: running × (k+1) tokens per step, past it or below."""
    knee = step_model.knee_tokens
    where = f"the {gpu.name} knee" if gpu else "the knee"
    side = "past" if n_verify > knee else "below"
    return (f"{running:.0f} running × {k + 1} tokens = {n_verify:.0f} tokens per step, {side} {where} "
            f"of about {knee:.0f}")


def explain(j: Judged, settings: ReasonSettings, sweep: SweepIdentity | None, speculation: SpeculationConfig | None,
            gpu_spec: GpuSpec | None) -> Verdict:
    """The verdict the judging reached, with its reasons and figures: pure, over what it judged (and
    the advisor's speculation config, sweep and GPU in use as that evaluation left them)."""
    tw, figures, running, length, k, state = j.tw, j.figures, j.running, j.length, j.k, j.state
    decision = j.decision if j.decision is not None else perf.decide(j.inputs)
    bound, reasons, flags = opening(tw, figures, j.gpus, j.gpu, j.step_model, speculation, j.method, j.mig_unscaled,
                                    j.ttft_note, budget_note=j.budget_note)
    acc, gpu, step_model, method, pricing, target = j.acceptance, j.gpu, j.step_model, j.method, j.pricing, tw.latest
    if pricing.assumed:
        reasons.append(METHOD_ASSUMED_WORDS)
        flags.append("method_assumed")
    if pricing.kind == "model" and not pricing.kv_bytes_per_token:
        # a draft model known by its size alone: its own KV reads grow with the context like the
        # target's, so at long contexts the drafter costs more than this prices
        reasons.append(f"the draft model is priced by its own roofline on the {gpu.name if gpu else 'GPU'} without "
                       "its KV cache: the server does not name a model the table knows (its size alone is known)")
    low_be = decision.low_load_break_even
    be_here = decision.break_even_length
    # the engine's steps, and the node: the engine's speedup applied to the share it decodes
    s_engine = decision.expected_speedup
    s_now = perf.node_speedup(s_engine, j.busy_share, speculating=True)
    crossover = decision.crossover
    method_words = pricing.words if method or pricing.assumed else _method_words(method)

    if acc.acceptance_rate is not None and acc.acceptance_rate < MISALIGNED_RATE \
            and acc.drafts >= MISALIGNED_MIN_DRAFTS:
        flags.append("misaligned_draft")
        reasons.append(
            f"misaligned draft: {acc.acceptance_rate:.1%} of {acc.draft_tokens:.0f} draft tokens accepted "
            "(does the drafter share the target's tokenizer, chat template and fine-tune?)"
        )
    quoted = QuotedFigures(True, length, running, method_words, k, waiting=bool(figures.waiting),
                           crossover_quoted=sweep is None and crossover.state == "crosses")
    words = quoted.words(be_here, low_be, s_now, crossover.concurrency)
    reasons.insert(0, words["break_even_length"])
    n_verify = running * (k + 1)
    reasons.append(load_words(running, k, n_verify, step_model, gpu))
    reasons.append(words["expected_speedup"])
    if s_now != s_engine:
        reasons.append(f"the engine is busy {j.busy_share:.0%} of the time decoding: speculation can speed only "
                       f"that share (its steps go {s_engine:.2f}× as fast; the rest, prefill, the API server, "
                       f"tokenizing and the clients, not at all)")
    crossover_shown = crossover.concurrency
    sweep_details: dict[str, Any] = {}
    disagrees = False
    if sweep is not None:
        # one line naming both crossovers, the one used and why, in place of the predicted one's
        reconciled = reconcile_crossover(sweep, _model_name(target), method, k, target.version, tw.time,
                                         crossover.concurrency if crossover.state == "crosses" else None)
        reasons.append(reconciled.line)
        if reconciled.flag:
            flags.append(reconciled.flag)
        if reconciled.used == "measured":
            crossover_shown = reconciled.crossover
            disagrees = sweep_disagrees(sweep, running, s_now, reasons)
            if disagrees:
                flags.append("sweep_disagrees")
        sweep_details["sweep"] = reconciled.to_dict()
    elif crossover.state == "crosses":
        reasons.append(words["crossover_concurrency"])
    elif crossover.state == "never_pays":
        reasons.append("it would not pay even with one request running")
    else:
        reasons.append(perf.pays_throughout_words(decision.capacity, crossover.max_batch))
    if crossover.pays_from is not None and sweep is None:
        reasons.append(perf.pays_from_words(crossover.pays_from))
    if decision.carried_by == "token budget" and sweep is None:
        reasons[-1] += perf.BUDGET_DECIDES_WORDS
    reasons.extend(decision.reasons)
    if decision.request_speedup is not None and "prefill_tax" in flags:
        reasons.append(f"end to end, with {j.inputs.prompt_tokens:.0f} prompt and {j.inputs.output_tokens:.0f} "
                       f"output tokens per request: {decision.request_speedup:.2f}× (the prefill gains nothing)")
    best = decision.best_k if acc.per_position else None
    if best is not None and best.k != k and best.speedup > s_engine * (1 + settings.hysteresis):
        if best.k == 0:
            reasons.append("no shorter chain pays here either")
        else:
            reasons.append(f"k={best.k} would do better here: {best.speedup:.2f}× "
                           f"(L={best.length:.2f} from the per-position rates)")
    if j.stale_acceptance:
        reasons.append("no drafts in this window: acceptance is the lifetime figure")
        flags.append("stale_acceptance")

    shape_assumed = False
    device, device_from = j.device
    if gpu is None and device == "cpu":
        said = {FROM_SERVER_INFO: "its /server_info says so",
                FROM_HOST: "it is on this machine, which has no NVIDIA driver"}.get(device_from, "--device cpu")
        reasons.append(f"the engine runs on the CPU ({said}): beyond vLLM's fixed step cost, every "
                       "position a step verifies costs its compute, as no GPU's knee would hide it")
    elif gpu is None and j.mig_unscaled is None and s_now > 1.0 \
            and not shape_measured(step_model, running, n_verify):
        # With no GPU identified the step time's shape is assumed, not known: below a GPU's knee
        # verifying k+1 tokens costs what one does, but on a CPU, or past the knee, each verified
        # position costs a token's compute. When the answer flips between the two, say so and
        # do not claim more than a coin flip.
        pessimistic = perf.node_speedup(length / (k + 1), j.busy_share, speculating=True)
        if pessimistic < 1.0:
            shape_assumed = True
            flags.append("gpu_unidentified")
            reasons.append(f"the device is not known (no GPU read here, no dcgm-exporter, no --gpu or --device): "
                           f"the speedup lies "
                           f"between {pessimistic:.2f}× (every verified position costs a token's compute, as on "
                           f"a CPU or past the knee) and {s_now:.2f}× (below a GPU's knee); give --gpu (or "
                           f"--device cpu for an engine on the CPU), or traffic at several loads, to decide")
    # speculation is on: switched off, each token takes the engine's speedup times as long
    slo = slo_goodput(settings, tw, tpot_ratio_if_toggled=s_engine, toggled_words="with speculation off")
    if slo is not None:
        reasons.append(slo[0])

    if j.hysteresis_note is not None:
        reasons.append(j.hysteresis_note)
    level_error = node_level_error(decision.level_error, s_engine, s_now, j.busy_share)
    cap = MAX_CONFIDENCE
    if shape_assumed or j.mig_unscaled is not None or disagrees:
        cap = SHAPE_ASSUMED_CONFIDENCE
    if step_model.confidence(n_verify) < 0.2:
        # a low confidence said in words is a low confidence in the figure too
        cap = SHAPE_ASSUMED_CONFIDENCE
        flags.append("extrapolated")
        reasons.append(f"the step-time model is extrapolated at {n_verify:.0f} tokens per step "
                       f"({j.prior_words}): confidence is low")
    # a hold is sure of lying inside the band, on or off of the direction
    # a hold is sure of lying inside the interval that keeps it one (the evidence's, else the band)
    hold_band = j.evidence.band if j.evidence is not None else settings.hysteresis
    confidence = min(cap, band_confidence(s_now, level_error, hold_band) if state == HOLD
                     else capped_confidence(decision))
    change = state == OFF  # speculation is on here: a change is recommended when it should be off
    return make_verdict(state, confidence, tw.time, reasons, bound, flags, tw, gpu_spec=gpu_spec, running=running,
                        expected=s_now, be=be_here, low_be=low_be,
                        crossover=crossover_shown, length=length,
                        best=best, change=change,
                        # where speculation stops paying, for an engine's own cut: past the search's
                        # largest batch when it never crossed, none when it never paid
                        pays_up_to=(crossover_shown if crossover_shown is not None
                                    else 0.0 if crossover.state == "never_pays" else math.inf),
                        details={**sweep_details, "quoted": quoted, "prior": j.prior_words,
                                 "carried_by": decision.carried_by,
                                 "level_error": level_error,
                                 "evidence": j.evidence,
                                 "settle": j.settle,
                                 "confidence_cap": cap,
                                 "engine_speedup": s_engine,
                                 "busy_share": j.busy_share,
                                 "request_speedup": decision.request_speedup,
                                 "decode_speedup": decision.decode_speedup,
                                 "throughput_speedup": decision.throughput_speedup,
                                 **({"goodput": slo[1]} if slo is not None else {})})


def explain_unconfigured(tw: TargetWindow, decision: perf.Decision, pricing: perf.DraftPricing,
                         cost: perf.DraftCost | None, k: int, running: float, step_model: perf.StepTimeModel,
                         gpu: GpuSpec | None, prior_words: str, time: float, reasons: list[str],
                         bound: perf.BoundEstimate, flags: list[str], settings: ReasonSettings,
                         gpu_spec: GpuSpec | None) -> Verdict:
    """The verdict of a node without speculation: the acceptance length speculation would need at
    this load (`decision`, judged at k), set against what typical drafters reach."""
    needed = decision.break_even_length
    method_words = pricing.words if cost else f"a drafter ({perf.UNKNOWN_METHOD_WORDS})"
    quoted = QuotedFigures(False, None, running, method_words, k)
    reasons.insert(0, quoted.words(needed, None, None, None)["break_even_length"])
    reasons.append(load_words(running, k, running * (k + 1), step_model, gpu))
    reasons.extend(decision.reasons)
    state, change, confidence = judge_unconfigured(needed, decision.level_error)
    if state == ON:
        reasons.append(f"typical drafters reach L ≈ {EASY_LENGTH}–{HARD_LENGTH + 1:.1f}: "
                       "speculation would likely pay here")
    elif state == OFF:
        reasons.append(f"few drafters reach L ≈ {needed:.1f} at k={k}: keep speculation off at this load")
    else:
        reasons.append("whether it pays depends on the drafter's acceptance on this traffic: measure it "
                       "(specwatch sweep) before turning it on")
    # acceptance is not measured here, so neither is what speculation would do to TPOT
    slo = slo_goodput(settings, tw)
    if slo is not None:
        reasons.append(slo[0])
    # acceptance is not measured here: a typical drafter's is a guess, so never above 0.6
    return make_verdict(state, min(confidence, UNCONFIGURED_CONFIDENCE_CAP), time, reasons, bound, flags, tw,
                        gpu_spec=gpu_spec, running=running, be=needed, change=change, required=needed,
                        details={"quoted": quoted, "prior": prior_words,
                                 **({"goodput": slo[1]} if slo is not None else {})})


def sweep_disagrees(sweep: SweepIdentity | None, running: float, s_now: float, reasons: list[str]) -> bool:
    """Whether this load lies clearly on the other side of the measured crossover from where the
    model puts it (beyond the crossing's interval): said, and the direction is then no better
    than a coin flip until the two agree again (a new sweep, or a refit)."""
    if sweep is None or sweep.crossing is None:
        return False
    high = sweep.high if sweep.high is not None else sweep.crossing
    low = sweep.low if sweep.low is not None else sweep.crossing
    if running > high and s_now > 1.0:
        reasons.append(f"at {running:.0f} running this node is past its measured crossover: the sweep measured "
                       f"speculation costing throughput here, while the model expects {s_now:.2f}×")
        return True
    if running < low and s_now < 1.0:
        reasons.append(f"at {running:.0f} running this node is below its measured crossover: the sweep measured "
                       f"speculation paying here, while the model expects {s_now:.2f}×")
        return True
    return False


def sweep_not_this_target(sweep: SweepIdentity | None, target: TargetSample, method: str | None, k: int | None,
                          time: float, reasons: list[str], flags: list[str]) -> dict[str, Any]:
    """Before there is a verdict (no traffic, no drafts yet): a sweep of another model, method or
    k is said at once, so that its crossover is never shown as this target's. The rest of the
    reconciliation waits for a predicted crossover to set the measured one against."""
    if sweep is None:
        return {}
    reconciled = reconcile_crossover(sweep, _model_name(target), method, k, target.version, time, None)
    if reconciled.flag != "sweep_mismatch":
        return {}
    reasons.append(reconciled.line.split(" — ")[0])  # no "predicted none": nothing is predicted yet
    flags.append(reconciled.flag)
    return {"sweep": reconciled.to_dict()}


def _method_words(method: str | None) -> str:
    return perf.method_words(method) or "the drafter"


def _model_name(target: TargetSample) -> str | None:
    """The served model's name, as the engines label their metrics."""
    return next((e.model_name for e in target.engines if e.model_name), None)


def make_verdict(state, confidence, time, reasons, bound, flags, tw, *, gpu_spec, running=None, expected=None,
                 be=None, low_be=None, crossover=None, length=None, best=None, change=False, required=None,
                 details=None, pays_up_to=None) -> Verdict:
    """The Verdict with these reasons and figures, once the engine's caveats are said. `pays_up_to`:
    the running requests up to which speculation pays (inf: beyond every batch searched), where judged."""
    reasons, flags, confidence = engine_caveats(tw, list(reasons), list(flags), confidence, pays_up_to)
    return Verdict(
        speculation=state,
        confidence=confidence,
        expected_speedup=expected,
        break_even_length=be,
        crossover_concurrency=crossover,
        change_recommended=change,
        reasons=tuple(reasons),
        bound=bound,
        time=time,
        configured=tw.speculation_configured,
        acceptance_length=length,
        low_load_break_even=low_be,
        required_acceptance_length=required,
        best_k=best.k if best else None,
        best_k_speedup=best.speedup if best else None,
        running=running,
        flags=tuple(flags),
        details=details or {},
        gpu_spec=gpu_spec,
    )


# TensorRT-LLM's AUTO speculation turns drafting off above this batch size (its blog 7), and the
# draft_len_schedule examples cut there too.
TRTLLM_AUTO_BATCH_LIMIT = 32


def trtllm_caveats(tw: TargetWindow, reasons: list[str], pays_up_to: float | None) -> list[str]:
    """How TensorRT-LLM counts drafts, and its own speculation cut (AUTO: off above batch 32) against
    where speculation stops paying on this node, where the window judged it."""
    if not tw.speculation_configured:
        return reasons
    reasons.append("TensorRT-LLM counts drafts per position as requests finish (trtllm_spec_decode_*_tokens_total): "
                   "the window's acceptance is that of the requests that ended in it")
    limit = TRTLLM_AUTO_BATCH_LIMIT
    if pays_up_to is not None and pays_up_to > limit * 1.25:
        where = f"up to {pays_up_to:.0f} running" if math.isfinite(pays_up_to) else "at every batch searched"
        reasons.append(f"TensorRT-LLM's AUTO mode turns speculation off above batch {limit}; on this node it "
                       f"keeps paying {where}, so AUTO would give it up early (specwatch tune gives "
                       "max_concurrency and a draft_len_schedule)")
    elif pays_up_to is not None and pays_up_to < limit / 1.25:
        reasons.append(f"TensorRT-LLM's AUTO mode speculates up to batch {limit}; on this node speculation "
                       f"stops paying at {pays_up_to:.0f} running (specwatch tune gives max_concurrency and a "
                       "draft_len_schedule)")
    return reasons


def engine_caveats(tw: TargetWindow, reasons: list[str], flags: list[str],
                   confidence: float, crossover: float | None = None) -> tuple[list[str], list[str], float]:
    """What an engine other than vLLM could not give, said in the reasons and paid for in confidence."""
    target = tw.latest
    if target.engine_name == "trtllm":
        return trtllm_caveats(tw, reasons, crossover), flags, confidence
    if target.engine_name != "sglang":
        return reasons, flags, confidence
    spec = target.speculation
    if tw.speculation_configured:
        reasons.append("SGLang gives acceptance only as a gauge (sglang:spec_accept_length, the mean of its "
                       "last log interval): L is its time-weighted mean over the window, with no count of drafts "
                       "and no per-position rates, so other k are extrapolated from L alone: confidence lowered")
        flags.append("acceptance_from_gauge")
        confidence *= GAUGE_ACCEPTANCE_CONFIDENCE
        if tw.k is None and (spec is None or spec.k is None):
            reasons.append("k is unknown (the server's /get_server_info was not read): no acceptance rate per "
                           "draft token: confidence lowered")
            flags.append("k_unknown")
            confidence *= GAUGE_ACCEPTANCE_CONFIDENCE
        if spec is not None and spec.token_tree:
            reasons.append(f"tree drafting ({spec.token_tree}): judged as a chain of k={spec.k}; the verify cost "
                           "of the tree's extra tokens is not modelled")
            flags.append("token_tree")
    elif spec is not None and spec.method is not None:
        reasons.append(f"the server speculates ({spec.method}) but this SGLang version exposes no acceptance "
                       "metric: judged as if speculation were off")
        flags.append("acceptance_not_exposed")
    return reasons, flags, confidence


def slo_goodput(settings: ReasonSettings, tw: TargetWindow, tpot_ratio_if_toggled: float | None = None,
                toggled_words: str = "") -> tuple[str, Goodput] | None:
    """The reason naming the SLO, and the goodput behind it; None without an SLO or requests.
    TPOT follows the per-token speedup when speculation is switched; TTFT does not (the prefill)."""
    if (settings.slo_ttft_s is None and settings.slo_tpot_s is None) or tw.increases is None:
        return None
    g = goodput(tw.increases, settings.slo_ttft_s, settings.slo_tpot_s, tpot_ratio_if_toggled)
    if g is None:
        return None
    words = (f"SLO {_slo_words(settings)}: {_share_words(g.share_low, g.share_high)} of requests within it "
             "over the window (estimated from histogram buckets)")
    if g.share_high_if_toggled is not None and toggled_words:
        words += f"; {toggled_words} at this load: {_share_words(g.share_low_if_toggled, g.share_high_if_toggled)}"
    return words, g


def _slo_words(settings: ReasonSettings) -> str:
    parts = []
    if settings.slo_ttft_s is not None:
        parts.append(f"TTFT ≤ {_seconds_words(settings.slo_ttft_s)}")
    if settings.slo_tpot_s is not None:
        parts.append(f"TPOT ≤ {_seconds_words(settings.slo_tpot_s)}")
    return ", ".join(parts)


def _seconds_words(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1.0 else f"{seconds:.3g} s"


def _share_words(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "unknown"
    if abs(high - low) < 0.005:
        return f"{high:.0%}"
    return f"{low:.0%}–{high:.0%}"
