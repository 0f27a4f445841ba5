"""The advisor: a target's Window (and the GPU readings) → a Verdict (DESIGN §4).

It is deterministic: its only state is what earlier updates fed it, and it reads time from the
Snapshots, so replaying a recording gives the verdicts the live run gave.

How a verdict is reached (reference/model.md §5):
1. acceptance L over the window (per-position data give L for shorter chains exactly);
2. the draft cost r from the method and the draft model's size (the target's SpeculationConfig:
   /server_info, else the operator's flags) and the break-even 1 + k·r;
3. a step-time model T(N, C): the datasheet prior when the GPU (and model) are known, else a roofline
   shape anchored on the node's own step times, refitted from live windows as a hinge;
4. the speedup S(b) at the running batch and context, the crossover b×, and the best k′;
5. hysteresis: S must leave the band 1 ± δ for `confirm_windows` consecutive updates to flip.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

from specwatch import perf
from specwatch.advice.gpu_identity import throttled_spec
from specwatch.perf.hardware import GpuSpec, ModelSpec, lookup, scale_to_mig
from specwatch.telemetry.snapshot import GpuSample, SpeculationConfig, TargetSample, resolve_speculation
from specwatch.advice.sweep_evidence import SweepIdentity, reconcile_crossover
from specwatch.advice.verdict import HOLD, OFF, ON, UNKNOWN, UNKNOWN_BOUND, QuotedFigures, Verdict, unknown_verdict
from specwatch.readings.health import PREFILL_HEAVY_RATIO, Goodput, goodput, prefill_heavy_share, prefill_heavy_share_words
from specwatch.readings.figures import Acceptance
from specwatch.readings.window import EngineFigures, TargetWindow


# A knee (tokens per step) to assume when no GPU is identified: about that of an H100 in bf16
# (0.875 × the 295 ridge). Said in the reasons, and the confidence pays for it.
GENERIC_KNEE_TOKENS = 256.0
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
# What a node without speculation is told: the k it is judged for, and the acceptance lengths that
# typical drafters reach at that k (n-gram on chat ≈ 1.3–1.6, EAGLE-3 ≈ 2.5–3.5: model.md §1, §4).
UNCONFIGURED_K = 3
EASY_LENGTH = 1.5
HARD_LENGTH = 2.5
# Relative spread of one draft's accepted count around L (so L's error over D drafts is this / √D).
ACCEPTANCE_SPREAD = 0.5
# Lifetime acceptance stands in for the window's: it may have drifted.
STALE_ACCEPTANCE_ERROR = 0.3
# What an assumed draft cost adds: r could be anything from a lookup's 0 to a draft model's 0.3.
METHOD_ASSUMED_ERROR = 0.2
MAX_CONFIDENCE = 0.99
# KV cache usage from which, with requests waiting, the cache is what limits the batch.
KV_FULL_USAGE = 0.9
UNCONFIGURED_CONFIDENCE_CAP = 0.6
# r for a draft model whose size is not known: the fixed per-forward cost plus about 5 % in bytes.
UNSIZED_DRAFT_RATIO = 0.1
# The most an answer whose sign depends on hardware nobody identified can claim: a coin flip.
SHAPE_ASSUMED_CONFIDENCE = 0.5
# The one reason of a verdict `Advisor.assess` left unexplained (see there): never shown, since only
# verdicts that change nothing are left so, and said plainly should one ever be.
UNEXPLAINED = "not explained: this evaluation changed no verdict, and only the changes were read"


@dataclass(frozen=True)
class AdvisorConfig:
    # The operator's word on the method and the draft model's size. The target's own /server_info
    # (in TargetSample.speculation) wins over them; they win over what a sample was declared with.
    method: str | None = None  # ngram, eagle, draft_model, ... (None: unknown)
    draft_ratio: float | None = None  # r, when the operator knows it
    draft_params: float | None = None
    gpu: GpuSpec | None = None  # overrides the GPU read from NVML/DCGM
    model: ModelSpec | None = None  # enables the datasheet step-time prior
    tp: int = 1
    # the operator's service-level targets: goodput is the share of requests within them
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    dtype: str = "bf16"
    hysteresis: float = 0.05  # δ: S must leave 1 ± δ
    confirm_windows: int = 3  # consecutive updates before a flip
    sample_interval_s: float = 5.0  # data time between step-time samples
    refit_interval_s: float = 60.0  # data time between refits of the hinge
    sample_half_life_s: float = 600.0  # old step-time samples fade (model.md §5.2)
    max_samples: int = 240


def kv_capacity_inputs(capacity_tokens: float | None) -> dict[str, float | None]:
    """The decision's KV budget when the cache limits the batch: the capacity is counted in tokens,
    so each target token takes one unit of it; none (no limit) otherwise."""
    return {"kv_budget_bytes": capacity_tokens, "target_kv_bytes_per_token": 1.0 if capacity_tokens else 0.0}


@dataclass(frozen=True)
class AdvisorInputs:
    """The model inputs behind the latest verdict of a node with speculation configured."""

    step_model: perf.StepTimeModel
    draft_ratio: float
    draft_ratio_known: bool
    method: str | None
    per_position: tuple[float, ...]
    k: int
    running: float
    context_per_sequence: float
    stale_acceptance: bool
    prior_words: str
    pricing: perf.DraftPricing | None = None
    waiting: float = 0.0
    kv_capacity_tokens: float | None = None  # only when the KV cache limits the batch (full, requests waiting)

    def decision_inputs(self, *, length: float | None = None, running: float | None = None,
                        extra_level_error: float = 0.0, **overrides: Any) -> perf.DecisionInputs:
        """These inputs as the shared decision takes them (tune and the tests call it too)."""
        fitted = isinstance(self.step_model, perf.StepTimeFit) and self.step_model.n_samples > 0
        values: dict[str, Any] = dict(
            step_model=self.step_model, k=self.k,
            draft=self.pricing or perf.DraftPricing(self.method, "ratio", self.draft_ratio, "advisor"),
            running=self.running if running is None else running, length=length, rates=self.per_position,
            context_per_sequence=self.context_per_sequence, waiting=self.waiting,
            **kv_capacity_inputs(self.kv_capacity_tokens),
            observed_with_speculation=True, fitted_on_speculative_steps=fitted,
            extra_level_error=extra_level_error,
        )
        values.update(overrides)
        return perf.DecisionInputs(**values)


_UNSEEN = object()


@dataclass(frozen=True, slots=True)
class _Judged:
    """What `Advisor._judge` worked out and read for one evaluation on the decision's path: all that
    `Advisor._explain` needs to give the verdict its reasons and figures, later or at once."""

    tw: TargetWindow  # its total is the figures judged
    gpus: tuple[GpuSample, ...]
    gpu: GpuSpec | None
    step_model: perf.StepTimeModel
    method: str | None
    pricing: perf.DraftPricing
    mig_unscaled: GpuSample | None  # a MIG slice whose share of its GPU NVML did not give
    ttft_note: str | None  # the TTFT check's reason (it moves the TTFT history: made once)
    prior_words: str
    acceptance: Acceptance  # the window's (or the lifetime's, when stale)
    stale_acceptance: bool
    k: int
    running: float
    inputs: perf.DecisionInputs
    decision: perf.Decision | None  # None: made without its figures, so made again whole
    state: str  # after the hysteresis (which it moved)
    hysteresis_note: str | None

    @property
    def figures(self) -> EngineFigures:
        return self.tw.total  # type: ignore[return-value] - judged only when the window has a total

    @property
    def length(self) -> float:
        return self.acceptance.acceptance_length  # type: ignore[return-value] - judged only when known


def engine_stall(tw: TargetWindow, figures: EngineFigures) -> str | None:
    """Why the engine looks stalled over the window, or None: requests ran from its first reading to
    its last, and no engine step ran, or no token was emitted and no prompt token computed."""
    running, before = figures.running, tw.running_at_start
    if not running or running <= 0 or not before or before <= 0 or figures.seconds <= 0:
        return None
    seconds = figures.seconds
    tokens = figures.step_tokens
    if tokens is not None and tokens.steps <= 0:
        return (f"engine stalled: {running:.0f} requests running and no engine step in {seconds:.0f} s "
                "(the server answers, its engine does not advance)")
    emitted = figures.generation_tokens_per_s
    prompt = figures.prompt_tokens_per_s
    if emitted is not None and emitted <= 0 and not prompt:
        return (f"engine stalled: {running:.0f} requests running and no token out in {seconds:.0f} s "
                "(the server answers, its engine does not advance)")
    return None


def _model_name(target: TargetSample) -> str | None:
    """The served model's name, as the engines label their metrics."""
    return next((e.model_name for e in target.engines if e.model_name), None)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


class Advisor:
    """One target's advisor. Feed it every update; it keeps the hysteresis and the step-time fit."""

    def __init__(self, config: AdvisorConfig | None = None) -> None:
        self.config = config or AdvisorConfig()
        self.committed: str | None = None  # the last on/off decision that passed hysteresis
        self._pending: str | None = None
        self._pending_count = 0
        # Evaluations judged so far: an explanation (assess) is good until the next one.
        self._judged_count = 0
        # The step-time samples as the fit's (N, T, C, weight) rows, written once each as they come
        # into a ring (a sample's slot: its count modulo max_samples), and their times, oldest first:
        # a refit then only weighs the rows by the times, since their weights fade with the refit's.
        self._sample_rows = np.empty((self.config.max_samples, 4))
        self._samples_recorded = 0
        self._sample_times: deque[float] = deque(maxlen=self.config.max_samples)
        self._last_sample_time: float | None = None
        self._fit: perf.StepTimeFit | None = None
        self._fit_time: float | None = None
        self._fit_prior_key: tuple | None = None
        self._ttft_history: deque[float] = deque(maxlen=60)
        self._gpu_by_name: dict[str, Any] = {}
        self._pricing_cache: tuple[perf.DraftCost | None, perf.DraftPricing] | None = None
        self._draft_cost_cache: tuple[AdvisorConfig, SpeculationConfig | None,
                                      tuple[perf.DraftCost | None, str | None]] | None = None
        # The speculation config the latest verdict was judged with: the target's, with this config's
        # method and draft size where the target does not say (what the front ends show).
        self.speculation: SpeculationConfig | None = None
        self._datasheet_prior: tuple[Any, Any, tuple[int, str], tuple[perf.HingeParameters, str]] | None = None
        # The running batch sizes the step-time samples came from: where the fit is measured.
        self.observed_batch: tuple[float, float] | None = None
        # What the last verdict rested on, for `tune` to build a schedule from.
        self.last_inputs: AdvisorInputs | None = None
        # The GPU spec of the current update (see _gpu_spec), carried on its Verdict.
        self._gpu_in_use: GpuSpec | None = None
        self._mig_unscaled: GpuSample | None = None  # a MIG slice found whose share NVML did not give
        # A saved sweep of this node (watch/check --sweep): its measured crossover is reconciled with
        # the predicted one in each verdict, and used only when it measured this configuration.
        self.sweep: SweepIdentity | None = None

    # -- inputs -------------------------------------------------------------------------------

    def _gpu_spec(self, gpus: Sequence[GpuSample]) -> GpuSpec | None:
        """The GPU this update reasons about; also remembered for the Verdict it produces."""
        self._gpu_in_use = self._find_gpu_spec(gpus)
        return self._gpu_in_use

    def _find_gpu_spec(self, gpus: Sequence[GpuSample]) -> GpuSpec | None:
        self._mig_unscaled = None
        if self.config.gpu is not None:
            return self.config.gpu
        # A GPU in MIG mode runs nothing itself: its MIG devices do, and the one running processes
        # is the likelier home of the engine. Whole GPUs first, as before MIG was read.
        candidates = [g for g in gpus if not g.lost and not g.mig_mode]
        if any(g.mig is not None for g in candidates):  # without MIG devices the order stands as read
            candidates.sort(key=lambda g: (g.mig is not None, g.mig is not None and not g.processes))
        for g in candidates:
            if g.mig is not None:
                spec = self._mig_spec(g)
                if spec is not None:
                    return spec
                continue
            spec = self._gpu_by_name.get(g.name, _UNSEEN)
            if spec is _UNSEEN:
                spec = self._gpu_by_name[g.name] = lookup(g.name)  # a pure function of the name
            if spec is not None:
                return throttled_spec(spec, g)
        return None

    def _mig_spec(self, g: GpuSample) -> GpuSpec | None:
        """A MIG slice's roofs: its parent's, identified by the parent's name, scaled by the slice's
        share of SMs and of memory. Without a share from NVML there is nothing to scale by: None,
        and the verdict says the shape is assumed (`_mig_unscaled`)."""
        mig = g.mig
        assert mig is not None
        key = (mig.parent_name, mig.profile, mig.sm_fraction, mig.memory_fraction)
        spec = self._gpu_by_name.get(key, _UNSEEN)
        if spec is _UNSEEN:
            parent = lookup(mig.parent_name)
            spec = None
            if parent is not None and mig.sm_fraction and mig.memory_fraction:
                spec = scale_to_mig(parent, mig.sm_fraction, mig.memory_fraction, mig.profile)
            self._gpu_by_name[key] = spec
        if spec is None and self._mig_unscaled is None and lookup(mig.parent_name) is not None:
            self._mig_unscaled = g
        return spec

    def _draft_cost(self, observed: SpeculationConfig | None = None) -> tuple[perf.DraftCost | None, str | None]:
        """r and the canonical method; (None, None) when the method is not known. `observed` is the
        target's SpeculationConfig; the one judged with becomes `self.speculation`."""
        cached = self._draft_cost_cache  # a pure function of the (frozen) config and the sample's
        if cached is not None and cached[0] is self.config and cached[1] == observed:
            return cached[2]
        declared = SpeculationConfig.from_flags(self.config.method, draft_params=self.config.draft_params)
        self.speculation = resolve_speculation(observed, declared)
        result = self._compute_draft_cost(self.speculation)
        self._draft_cost_cache = (self.config, observed, result)
        return result

    def _compute_draft_cost(self, speculation: SpeculationConfig | None) -> tuple[perf.DraftCost | None, str | None]:
        c = self.config
        method = speculation.method if speculation else None
        draft_params = speculation.draft_params if speculation else None
        if method is None and c.draft_ratio is None:
            return None, None
        try:
            name = perf.canonical_method(method) if method else "draft"
        except ValueError:
            return None, method
        target_params = c.model.params if c.model else None
        try:
            return perf.draft_cost(name, draft_params=draft_params, target_params=target_params,
                                   override=c.draft_ratio), name
        except ValueError:
            # a draft model of unknown size: its fixed per-forward overhead plus a small model's bytes
            return perf.DraftCost(name, UNSIZED_DRAFT_RATIO,
                                  f"draft model size unknown: assumed r ≈ {UNSIZED_DRAFT_RATIO} "
                                  "(pass --draft-ratio)"), name

    def _prior(self, gpu: GpuSpec | None,
               figures: EngineFigures) -> tuple[float, Callable[[], perf.HingeParameters], str]:
        """The step-time prior: the datasheet one, or a roofline shape anchored on this node. Its
        knee, the prior itself as a function that makes it (a roofline prior takes the median level
        of every sample: _step_model asks for it only to refit, or when there is no fit), and words."""
        c = self.config
        if gpu is not None and c.model is not None:
            # a pure function of the GPU, the model, tp and dtype: kept while they are the same objects
            cached = self._datasheet_prior
            if cached is None or cached[0] is not gpu or cached[1] is not c.model or cached[2] != (c.tp, c.dtype):
                try:
                    prior = perf.prior_for_model(gpu, c.model, tp=c.tp, dtype=c.dtype)
                    cached = self._datasheet_prior = (gpu, c.model, (c.tp, c.dtype),
                                                      (prior.hinge(), f"datasheet prior for {c.model.name} on {gpu.name}"))
                except ValueError:
                    cached = None
            if cached is not None:
                hinge, words = cached[3]
                return hinge.knee, lambda: hinge, words
        knee = gpu.ridge_for("bf16") * perf.FLOPS_EFFICIENCY / perf.BANDWIDTH_EFFICIENCY if gpu else GENERIC_KNEE_TOKENS
        where = f"the {gpu.name} knee" if gpu else f"an assumed knee of {knee:.0f} tokens (no GPU identified)"
        return knee, lambda: self._roofline_prior(knee), f"roofline shape at {where}, level from this node's step times"

    def _roofline_prior(self, knee: float) -> perf.HingeParameters:
        # Below the knee a step costs about the weight read, whatever N; the node's own mean step
        # time sets that level. Above the knee, time grows in proportion to N (compute-bound).
        # Each sample implies a level through the same shape: T / max(1, N / knee).
        kept = min(self._samples_recorded, len(self._sample_rows))
        observed = sorted(step_time / max(1.0, tokens / knee)
                          for tokens, step_time in self._sample_rows[:kept, :2].tolist())
        base = observed[len(observed) // 2] if observed else 0.02
        return perf.HingeParameters(base_s=base, knee=knee, slope_s_per_token=base / knee,
                                    kv_s_per_token=0.0, per_token_s=0.0)

    def _record_step_sample(self, time: float, figures: EngineFigures, k: int | None, r: float) -> None:
        """A (tokens per step, step time, context) sample, once per sample interval of data time."""
        # x is the positions the steps computed (window.StepTokens), not iteration_tokens_total's
        # mean, which counts tokens emitted: b·L on a speculative step rather than the b·(k+1) verified
        tokens_per_step = figures.computed_tokens_per_step_mean
        if figures.steps_per_s is None or figures.steps_per_s <= 0 or tokens_per_step is None:
            return
        if not figures.running:  # an idle engine's step rate says nothing about step time
            return
        if self._last_sample_time is not None and time - self._last_sample_time < self.config.sample_interval_s:
            return
        step_time = 1.0 / figures.steps_per_s
        if k and r > 0 and figures.running:
            # a speculative step also ran the drafter k times at about r of a plain step each
            step_time /= 1.0 + k * r
        ring = self._sample_rows
        if len(ring):
            ring[self._samples_recorded % len(ring), :3] = (tokens_per_step, step_time, figures.context_tokens or 0.0)
            self._samples_recorded += 1
            self._sample_times.append(time)
        self._last_sample_time = time
        low, high = self.observed_batch or (figures.running, figures.running)
        self.observed_batch = (min(low, figures.running), max(high, figures.running))

    def _step_model(self, time: float, prior_knee: float, prior: Callable[[], perf.HingeParameters],
                    shape_known: bool) -> perf.StepTimeModel:
        """The live fit, refitted every refit interval (or when the prior's knee or shape changes)
        against `prior()`; the prior itself before there is a fit."""
        key = (prior_knee, self.config.model.name if self.config.model else None, shape_known)
        stale = (
            self._fit is None
            or self._fit_prior_key != key
            or self._fit_time is None
            or time - self._fit_time >= self.config.refit_interval_s
        )
        if stale and self._samples_recorded:
            half_life = self.config.sample_half_life_s
            ring, recorded = self._sample_rows, self._samples_recorded
            if recorded <= len(ring):
                rows = ring[:recorded]
            else:  # the oldest sample's slot first
                oldest = recorded % len(ring)
                rows = np.concatenate((ring[oldest:], ring[:oldest]))
            rows[:, 3] = [0.5 ** ((time - t) / half_life) for t in self._sample_times]
            self._fit = perf.fit_step_time_rows(rows, prior(), shape_known=shape_known)
            self._fit_time = time
            self._fit_prior_key = key
        return self._fit if self._fit is not None else prior()

    # -- the decision -------------------------------------------------------------------------

    def update(self, tw: TargetWindow | None, gpus: Sequence[GpuSample] = ()) -> Verdict:
        """The verdict on this window, explained: its reasons, figures, bound and flags."""
        verdict, _ = self._judge(tw, gpus, explained=True)
        return verdict

    def assess(self, tw: TargetWindow | None,
               gpus: Sequence[GpuSample] = ()) -> tuple[Verdict, Callable[[], Verdict] | None]:
        """`update` without what only explains the verdict, for a reader of verdict changes alone (a
        headless timeline reads one evaluation in a hundred): the verdict's state, change and load
        are `update`'s, and `explain`, when not None, gives the verdict `update` would have given
        (its reasons, crossover, best k, bound, flags and confidence). The advisor's own state (the
        step-time samples and fit, the TTFT history, the hysteresis) moves exactly as in `update`.
        Call `explain` before the next evaluation: it reads the settings this one left."""
        return self._judge(tw, gpus, explained=False)

    def _judge(self, tw: TargetWindow | None, gpus: Sequence[GpuSample],
               explained: bool) -> tuple[Verdict, Callable[[], Verdict] | None]:
        """What moves the advisor's state, in the order `update` has always moved it, then the
        explanation (`_explain`), at once or when asked. Verdicts that end the judging early (no
        reading, no traffic, no drafts, no decision) are explained at once: they are cheap."""
        time = None
        self._judged_count += 1
        if tw is None:
            return unknown_verdict("the target has not been read yet"), None
        target = tw.latest
        if not target.ok:
            return unknown_verdict(f"cannot read the target: {target.message or target.state}",
                                   gpu_spec=self._gpu_spec(gpus)), None
        figures = tw.total
        if figures is None:
            return unknown_verdict(
                "one reading so far: rates need two scrapes a window apart", bound=self._bound(None, gpus, None, None),
                gpu_spec=self._gpu_spec(gpus),
            ), None
        time = tw.time
        stalled = engine_stall(tw, figures)
        if stalled is not None:
            # frozen counters while requests run: no reading of acceptance or step time is usable,
            # and the lifetime acceptance must not stand in for it
            return self._verdict(UNKNOWN, 0.0, time, [stalled], self._bound(None, gpus, None, None),
                                 ["engine_stalled"], tw, running=figures.running), None
        gpu = self._gpu_spec(gpus)
        k = tw.k
        cost, method = self._draft_cost(target.speculation)
        r = cost.ratio if cost else perf.HEAD_DRAFT_RATIO
        self._record_step_sample(time, figures, k if tw.speculation_configured else None, r)
        prior_knee, prior, prior_words = self._prior(gpu, figures)
        step_model = self._step_model(time, prior_knee, prior, shape_known=gpu is not None)
        mig_unscaled = self._mig_unscaled if gpu is None else None
        ttft_note = self._ttft_check(figures)

        def opening() -> tuple[perf.BoundEstimate, list[str], list[str]]:
            return self._opening(tw, figures, gpus, gpu, step_model, method, mig_unscaled, ttft_note)

        running = figures.running
        if running is None or running < 1:
            if figures.generation_tokens_per_s:
                running = max(1.0, running or 0.0)
            else:
                bound, reasons, flags = opening()
                reasons.insert(0, "no requests running in the window: nothing to judge until traffic arrives")
                return self._verdict(UNKNOWN, 0.0, time, reasons, bound, flags, tw, running=running,
                                     details=self._sweep_not_this_target(target, method, k, time, reasons,
                                                                         flags)), None
        context_per_seq = (figures.context_tokens or 0.0) / running if running else 0.0

        if not tw.speculation_configured:
            bound, reasons, flags = opening()
            return self._unconfigured(tw, figures, step_model, running, context_per_seq, r, cost, reasons,
                                      bound, flags, time, gpu, prior_words), None

        acc = figures.acceptance
        stale_acceptance = False
        if acc is None or acc.acceptance_length is None:
            life = tw.lifetime.acceptance if tw.lifetime else None  # computed only when needed
            if life is not None and life.acceptance_length is not None:
                acc = life
                stale_acceptance = True
            else:
                bound, reasons, flags = opening()
                reasons.insert(0, "speculation is configured but no drafts have been verified yet")
                return self._verdict(UNKNOWN, 0.0, time, reasons, bound, flags, tw, running=running,
                                     details=self._sweep_not_this_target(target, method, k, time, reasons,
                                                                         flags)), None
        length = acc.acceptance_length
        k = k or len(acc.per_position)
        if not k:
            # an old engine without per-position or draft-token counters: judging with a guessed k
            # could set L against an impossible k+1, so say it cannot be judged
            bound, reasons, flags = opening()
            reasons.insert(0, "k (draft tokens per step) cannot be read from this server's counters: "
                              "no verdict without it")
            return self._verdict(UNKNOWN, 0.0, time, reasons, bound, flags, tw, running=running), None
        pricing = self._pricing(cost, method)
        self.last_inputs = AdvisorInputs(step_model, r, cost is not None, method, tuple(acc.per_position), k,
                                         running, context_per_seq, stale_acceptance, prior_words,
                                         pricing=pricing, waiting=figures.waiting or 0.0,
                                         kv_capacity_tokens=_kv_limit(figures))
        extra = self._extra_error(acc.drafts, gpu, stale_acceptance, pricing.assumed)
        prompt, output = _per_request(figures)
        inputs = self.last_inputs.decision_inputs(length=length, extra_level_error=extra, prompt_tokens=prompt,
                                                  output_tokens=output)
        # Without its figures the decision fails where the whole one does only when the model prices
        # every batch and k they search: otherwise it is whole now, so the verdict is the same.
        with_figures = explained or not perf.figures_priced_everywhere(inputs)
        try:
            decision = perf.decide(inputs, figures=with_figures)
        except ValueError as exc:
            bound, reasons, flags = opening()
            reasons.insert(0, f"no decision from these readings: {exc}")
            return self._verdict(UNKNOWN, 0.0, time, reasons, bound, flags, tw, running=running), None
        s_now = decision.expected_speedup
        state, hysteresis_note = self._hysteresis(s_now)
        judged = _Judged(tw, tuple(gpus), gpu, step_model, method, pricing, mig_unscaled, ttft_note,
                         prior_words, acc, stale_acceptance, k, running, inputs,
                         decision if with_figures else None, state, hysteresis_note)
        if explained:
            return self._explain(judged), None
        return Verdict(state, 0.0, s_now, decision.break_even_length, None, state == OFF, (UNEXPLAINED,),
                       UNKNOWN_BOUND, time=time, configured=True, acceptance_length=length,
                       low_load_break_even=decision.low_load_break_even, running=running,
                       gpu_spec=self._gpu_in_use), partial(self._explain_now, judged, self._judged_count)

    def _explain_now(self, j: _Judged, judged_count: int) -> Verdict:
        """`_explain`, while nothing has been judged since: it reads the advisor's settings as that
        evaluation left them (the speculation config, the GPU in use, the sweep)."""
        if judged_count != self._judged_count:
            raise RuntimeError("a verdict can be explained only until the advisor judges the next window")
        return self._explain(j)

    def _opening(self, tw: TargetWindow, figures: EngineFigures, gpus: Sequence[GpuSample], gpu: GpuSpec | None,
                 step_model: perf.StepTimeModel, method: str | None, mig_unscaled: GpuSample | None,
                 ttft_note: str | None) -> tuple[perf.BoundEstimate, list[str], list[str]]:
        """The bound, and the reasons and flags every verdict on a read window opens with: the
        disagreements over the speculation config, an unscaled MIG slice, prefill-heavy traffic and
        a rising TTFT."""
        bound = self._bound(figures, gpus, gpu, step_model)
        reasons: list[str] = list(self.speculation.disagreements) if self.speculation else []
        flags: list[str] = []
        if mig_unscaled is not None:
            flags.append("mig_shape_assumed")
            reasons.append(f"{mig_unscaled.name}: NVML did not give this MIG slice's share of the GPU "
                           f"({mig_unscaled.errors.get('mig_shares', 'no share read')}), so its peaks cannot be "
                           "scaled from the whole GPU's: the step-time shape is assumed, not known")
        self._prefill_tax(figures, tw, method, reasons, flags)
        if ttft_note is not None:
            flags.append("ttft_rising")
            reasons.append(ttft_note)
        return bound, reasons, flags

    def _explain(self, j: _Judged) -> Verdict:
        """The verdict `_judge` reached, with its reasons and figures: pure, over what it judged."""
        tw, figures, running, length, k, state = j.tw, j.figures, j.running, j.length, j.k, j.state
        decision = j.decision if j.decision is not None else perf.decide(j.inputs)
        bound, reasons, flags = self._opening(tw, figures, j.gpus, j.gpu, j.step_model, j.method, j.mig_unscaled,
                                              j.ttft_note)
        acc, gpu, step_model, method, pricing, target = j.acceptance, j.gpu, j.step_model, j.method, j.pricing, tw.latest
        if pricing.assumed:
            reasons.append(f"speculation {perf.UNKNOWN_METHOD_WORDS} (pass --method)")
            flags.append("method_assumed")
        low_be = decision.low_load_break_even
        be_here = decision.break_even_length
        s_now = decision.expected_speedup
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
                               crossover_quoted=self.sweep is None and crossover.state == "crosses")
        words = quoted.words(be_here, low_be, s_now, crossover.concurrency)
        reasons.insert(0, words["break_even_length"])
        n_verify = running * (k + 1)
        reasons.append(self._load_words(running, k, n_verify, step_model, gpu, figures))
        reasons.append(words["expected_speedup"])
        crossover_shown = crossover.concurrency
        sweep_details: dict[str, Any] = {}
        sweep_disagrees = False
        if self.sweep is not None:
            # one line naming both crossovers, the one used and why, in place of the predicted one's
            reconciled = reconcile_crossover(self.sweep, _model_name(target), method, k, target.version, tw.time,
                                             crossover.concurrency if crossover.state == "crosses" else None)
            reasons.append(reconciled.line)
            if reconciled.flag:
                flags.append(reconciled.flag)
            if reconciled.used == "measured":
                crossover_shown = reconciled.crossover
                sweep_disagrees = self._sweep_disagrees(running, s_now, reasons)
                if sweep_disagrees:
                    flags.append("sweep_disagrees")
            sweep_details["sweep"] = reconciled.to_dict()
        elif crossover.state == "crosses":
            reasons.append(words["crossover_concurrency"])
        elif crossover.state == "never_pays":
            reasons.append("it would not pay even with one request running")
        else:
            reasons.append(f"it keeps paying up to {perf.MAX_BATCH:.0f} running")
        reasons.extend(decision.reasons)
        if decision.request_speedup is not None and "prefill_tax" in flags:
            reasons.append(f"end to end, with {j.inputs.prompt_tokens:.0f} prompt and {j.inputs.output_tokens:.0f} "
                           f"output tokens per request: {decision.request_speedup:.2f}× (the prefill gains nothing)")
        best = decision.best_k if acc.per_position else None
        if best is not None and best.k != k and best.speedup > s_now * (1 + self.config.hysteresis):
            if best.k == 0:
                reasons.append("no shorter chain pays here either")
            else:
                reasons.append(f"k={best.k} would do better here: {best.speedup:.2f}× "
                               f"(L={best.length:.2f} from the per-position rates)")
        if j.stale_acceptance:
            reasons.append("no drafts in this window: acceptance is the lifetime figure")
            flags.append("stale_acceptance")

        shape_assumed = False
        if gpu is None and j.mig_unscaled is None and s_now > 1.0 \
                and not _shape_measured(step_model, running, n_verify):
            # With no GPU identified the step time's shape is assumed, not known: below a GPU's knee
            # verifying k+1 tokens costs what one does, but on a CPU, or past the knee, each verified
            # position costs a token's compute. When the answer flips between the two, say so and
            # do not claim more than a coin flip.
            pessimistic = length / (k + 1)
            if pessimistic < 1.0:
                shape_assumed = True
                flags.append("gpu_unidentified")
                reasons.append(f"no GPU identified (no NVML driver, no dcgm-exporter, no --gpu): the speedup lies "
                               f"between {pessimistic:.2f}× (every verified position costs a token's compute, as on "
                               f"a CPU or past the knee) and {s_now:.2f}× (below a GPU's knee); give --gpu, or "
                               f"traffic at several loads, to decide")
        # speculation is on: switched off, each token takes s_now times as long
        slo = _slo_goodput(self.config, tw, tpot_ratio_if_toggled=s_now, toggled_words="with speculation off")
        if slo is not None:
            reasons.append(slo[0])

        if j.hysteresis_note is not None:
            reasons.append(j.hysteresis_note)
        confidence = self._confidence(decision)
        if shape_assumed or j.mig_unscaled is not None or sweep_disagrees:
            confidence = min(confidence, SHAPE_ASSUMED_CONFIDENCE)
        if step_model.confidence(n_verify) < 0.2:
            flags.append("extrapolated")
            reasons.append(f"the step-time model is extrapolated at {n_verify:.0f} tokens per step "
                           f"({j.prior_words}): confidence is low")
        change = state == OFF  # speculation is on here: a change is recommended when it should be off
        return self._verdict(state, confidence, tw.time, reasons, bound, flags, tw, running=running,
                             expected=s_now, be=be_here, low_be=low_be,
                             crossover=crossover_shown, length=length,
                             best=best, change=change,
                             details={**sweep_details, "quoted": quoted, "prior": j.prior_words,
                                      "carried_by": decision.carried_by,
                                      "level_error": decision.level_error,
                                      "request_speedup": decision.request_speedup,
                                      **({"goodput": slo[1]} if slo is not None else {})})

    def _sweep_disagrees(self, running: float, s_now: float, reasons: list[str]) -> bool:
        """Whether this load lies clearly on the other side of the measured crossover from where the
        model puts it (beyond the crossing's interval): said, and the direction is then no better
        than a coin flip until the two agree again (a new sweep, or a refit)."""
        sweep = self.sweep
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

    def _pricing(self, cost: perf.DraftCost | None, method: str | None) -> perf.DraftPricing:
        """The draft's pricing for the decision: the same as predict's for the same method. A pure
        function of the (frozen) cost, which _draft_cost keeps while the settings stand: made once."""
        cached = self._pricing_cache
        if cached is not None and cached[0] is cost:
            return cached[1]
        pricing = self._price(cost)
        self._pricing_cache = (cost, pricing)
        return pricing

    def _price(self, cost: perf.DraftCost | None) -> perf.DraftPricing:
        if cost is None:
            return perf.draft_pricing(None)
        if cost.basis != "given" and cost.method in ("ngram", "suffix", "eagle", "eagle3", "mtp", "medusa"):
            return perf.draft_pricing(cost.method)
        return perf.DraftPricing(cost.method, "ratio", cost.ratio, cost.basis)

    def _unconfigured(self, tw, figures, step_model, running, context_per_seq, r, cost, reasons, bound, flags,
                      time, gpu, prior_words) -> Verdict:
        k = UNCONFIGURED_K
        pricing = self._pricing(cost, cost.method if cost else None)
        try:
            decision = perf.decide(perf.DecisionInputs(
                step_model=step_model, k=k, draft=pricing, running=running, context_per_sequence=context_per_seq,
                waiting=figures.waiting or 0.0, **kv_capacity_inputs(_kv_limit(figures)),
                extra_level_error=self._extra_error(None, gpu, False, pricing.assumed)))
        except ValueError as exc:
            reasons.insert(0, f"no decision from these readings: {exc}")
            return self._verdict(UNKNOWN, 0.0, time, reasons, bound, flags, tw, running=running)
        needed = decision.break_even_length
        method_words = pricing.words if cost else f"a drafter ({perf.UNKNOWN_METHOD_WORDS})"
        quoted = QuotedFigures(False, None, running, method_words, k)
        reasons.insert(0, quoted.words(needed, None, None, None)["break_even_length"])
        reasons.append(self._load_words(running, k, running * (k + 1), step_model, gpu, figures))
        reasons.extend(decision.reasons)
        if needed <= EASY_LENGTH:
            state, change = ON, True
            reasons.append(f"typical drafters reach L ≈ {EASY_LENGTH}–{HARD_LENGTH + 1:.1f}: "
                           "speculation would likely pay here")
            confidence = perf.direction_confidence(EASY_LENGTH / needed, decision.level_error)
        elif needed >= HARD_LENGTH:
            state, change = OFF, False
            reasons.append(f"few drafters reach L ≈ {needed:.1f} at k={k}: keep speculation off at this load")
            confidence = perf.direction_confidence(HARD_LENGTH / needed, decision.level_error)
        else:
            state, change = UNKNOWN, False
            reasons.append("whether it pays depends on the drafter's acceptance on this traffic: measure it "
                           "(specwatch sweep) before turning it on")
            confidence = 0.0
        # acceptance is not measured here, so neither is what speculation would do to TPOT
        slo = _slo_goodput(self.config, tw)
        if slo is not None:
            reasons.append(slo[0])
        # acceptance is not measured here: a typical drafter's is a guess, so never above 0.6
        return self._verdict(state, min(confidence, UNCONFIGURED_CONFIDENCE_CAP), time, reasons, bound, flags, tw,
                             running=running, be=needed, change=change, required=needed,
                             details={"quoted": quoted, "prior": prior_words,
                                      **({"goodput": slo[1]} if slo is not None else {})})

    def _load_words(self, running, k, n_verify, step_model, gpu, figures) -> str:
        knee = step_model.knee_tokens
        where = f"the {gpu.name} knee" if gpu else "the knee"
        side = "past" if n_verify > knee else "below"
        return (f"{running:.0f} running × {k + 1} tokens = {n_verify:.0f} tokens per step, {side} {where} "
                f"of about {knee:.0f}")

    def _prefill_tax(self, figures: EngineFigures, tw: TargetWindow, method: str | None, reasons: list[str],
                     flags: list[str]) -> None:
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

    def _ttft_check(self, figures: EngineFigures) -> str | None:
        """Whether TTFT p95 rises against its recent median (the reason, or None); then the p95 joins
        the history."""
        p95 = figures.ttft_p95_s
        if p95 is None:
            return None
        note = None
        history = sorted(self._ttft_history)
        if len(history) >= 5:
            median = history[len(history) // 2]
            if median > 0 and p95 > TTFT_RISE * median and p95 > 0.05:
                note = f"TTFT p95 is rising: {p95 * 1000:.0f} ms against a recent median of {median * 1000:.0f} ms"
        self._ttft_history.append(p95)
        return note

    def _bound(self, figures: EngineFigures | None, gpus: Sequence[GpuSample], gpu: GpuSpec | None,
               step_model: perf.StepTimeModel | None) -> perf.BoundEstimate:
        signals = []
        ridge = gpu.ridge_for("bf16") if gpu else None
        if figures is not None and figures.mfu_intensity is not None:
            signals.append(perf.intensity_signal(figures.mfu_intensity, 1.0, ridge))
        live = [g for g in gpus if not g.lost]
        dram = _mean([g.values["dram_bw_util"] for g in live if "dram_bw_util" in g.values])
        tensor = _mean([g.values["tensor_active"] for g in live if "tensor_active" in g.values])
        if dram is not None or tensor is not None:
            signals.append(perf.counter_signal(dram, tensor))
        computed = figures.computed_tokens_per_step_mean if figures is not None else None
        if computed is not None and step_model is not None:
            signals.append(perf.tokens_per_step_signal(computed, step_model.knee_tokens))
        return perf.combine_bound(signals)

    def _hysteresis(self, s_now: float) -> tuple[str, str | None]:
        """The state this speedup moves the hysteresis to, and the reason when it holds."""
        delta = self.config.hysteresis
        raw = ON if s_now >= 1 + delta else OFF if s_now <= 1 - delta else HOLD
        if raw == HOLD:
            self._pending, self._pending_count = None, 0
            return HOLD, f"within ±{delta:.0%} of break-even: keep the current setting"
        if self.committed is None or raw == self.committed:
            self.committed = raw
            self._pending, self._pending_count = None, 0
            return raw, None
        if raw == self._pending:
            self._pending_count += 1
        else:
            self._pending, self._pending_count = raw, 1
        if self._pending_count >= self.config.confirm_windows:
            self.committed = raw
            self._pending, self._pending_count = None, 0
            return raw, None
        return HOLD, (f"speedup has pointed {raw} for {self._pending_count} of {self.config.confirm_windows} "
                      f"updates: holding {self.committed} until it is confirmed")

    def _extra_error(self, drafts: float | None, gpu: GpuSpec | None, stale: bool,
                     method_assumed: bool = False) -> float:
        """What this node's readings add to the step model's level error (σ of ln S): an unidentified
        GPU, few drafts behind L (its relative error shrinks as 1/√drafts), lifetime acceptance."""
        parts = []
        if gpu is None:
            parts.append(perf.decision.UNKNOWN_GPU_ERROR)
        elif gpu.approximate:
            parts.append(perf.decision.APPROXIMATE_GPU_ERROR)
        if drafts is not None:
            parts.append(ACCEPTANCE_SPREAD / math.sqrt(max(drafts, 1.0)))
        if stale:
            parts.append(STALE_ACCEPTANCE_ERROR)
        if method_assumed:
            parts.append(METHOD_ASSUMED_ERROR)
        return math.sqrt(sum(p * p for p in parts))

    def _confidence(self, decision: perf.Decision) -> float:
        """The decision's chance that the direction is right, capped: no reading is certain."""
        return float(min(MAX_CONFIDENCE, max(0.0, decision.confidence)))

    def _sweep_not_this_target(self, target, method, k, time, reasons, flags) -> dict[str, Any]:
        """Before there is a verdict (no traffic, no drafts yet): a sweep of another model, method or
        k is said at once, so that its crossover is never shown as this target's. The rest of the
        reconciliation waits for a predicted crossover to set the measured one against."""
        if self.sweep is None:
            return {}
        reconciled = reconcile_crossover(self.sweep, _model_name(target), method, k, target.version, time, None)
        if reconciled.flag != "sweep_mismatch":
            return {}
        reasons.append(reconciled.line.split(" — ")[0])  # no "predicted none": nothing is predicted yet
        flags.append(reconciled.flag)
        return {"sweep": reconciled.to_dict()}

    def _verdict(self, state, confidence, time, reasons, bound, flags, tw, *, running=None, expected=None,
                 be=None, low_be=None, crossover=None, length=None, best=None, change=False, required=None,
                 details=None) -> Verdict:
        reasons, flags, confidence = _engine_caveats(tw, list(reasons), list(flags), confidence)
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
            gpu_spec=self._gpu_in_use,
        )


# SGLang's acceptance is a gauge of its own last log interval, time-weighted by the collector
# (specwatch.collectors.sglang): no count of drafts stands behind it and no per-position rates, so other k are
# extrapolated from L alone. The direction's confidence is scaled by this for each such gap.
GAUGE_ACCEPTANCE_CONFIDENCE = 0.8


def _engine_caveats(tw: TargetWindow, reasons: list[str], flags: list[str],
                    confidence: float) -> tuple[list[str], list[str], float]:
    """What an engine other than vLLM could not give, said in the reasons and paid for in confidence."""
    target = tw.latest
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


def _shape_measured(step_model: perf.StepTimeModel, plain_tokens: float, verify_tokens: float) -> bool:
    """Whether live step times cover the token counts a speedup compares (plain and verified, each
    within a factor of 2), so that the step time's shape between them is measured, not assumed."""
    if not isinstance(step_model, perf.StepTimeFit) or step_model.n_samples < 3:
        return False
    low, high = step_model.tokens_min, step_model.tokens_max
    if low is None or high is None or high < 2.0 * low:
        return False
    return low <= 2.0 * max(plain_tokens, 1.0) and high >= 0.5 * verify_tokens


def _per_request(figures: EngineFigures) -> tuple[float | None, float | None]:
    """Mean prompt and output tokens of the requests that finished in the window (None, None when
    none did): what the end-to-end speedup weighs the prefill by."""
    finished = figures.requests_finished
    if not finished or finished <= 0 or figures.prompt_tokens_per_s is None or not figures.generation_tokens_per_s:
        return None, None
    return (figures.prompt_tokens_per_s * figures.seconds / finished,
            figures.generation_tokens_per_s * figures.seconds / finished)


def _kv_limit(figures: EngineFigures) -> float | None:
    """The KV cache's size in tokens when it is what limits the batch (requests waiting and the cache
    near full): then speculation's lookahead slots cost running sequences. None otherwise, when the
    limit, if any, is the scheduler's and holds both modes at the same batch."""
    usage = figures.kv_cache_usage
    if figures.waiting and usage is not None and usage >= KV_FULL_USAGE and figures.kv_capacity_tokens:
        return figures.kv_capacity_tokens
    return None


def _method_words(method: str | None) -> str:
    return perf.method_words(method) or "the drafter"


def _slo_words(config: AdvisorConfig) -> str:
    parts = []
    if config.slo_ttft_s is not None:
        parts.append(f"TTFT ≤ {_seconds_words(config.slo_ttft_s)}")
    if config.slo_tpot_s is not None:
        parts.append(f"TPOT ≤ {_seconds_words(config.slo_tpot_s)}")
    return ", ".join(parts)


def _seconds_words(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1.0 else f"{seconds:.3g} s"


def _share_words(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "unknown"
    if abs(high - low) < 0.005:
        return f"{high:.0%}"
    return f"{low:.0%}–{high:.0%}"


def _slo_goodput(config: AdvisorConfig, tw: TargetWindow, tpot_ratio_if_toggled: float | None = None,
                 toggled_words: str = "") -> tuple[str, Goodput] | None:
    """The reason naming the SLO, and the goodput behind it; None without an SLO or requests.
    TPOT follows the per-token speedup when speculation is switched; TTFT does not (the prefill)."""
    if (config.slo_ttft_s is None and config.slo_tpot_s is None) or tw.increases is None:
        return None
    g = goodput(tw.increases, config.slo_ttft_s, config.slo_tpot_s, tpot_ratio_if_toggled)
    if g is None:
        return None
    words = (f"SLO {_slo_words(config)}: {_share_words(g.share_low, g.share_high)} of requests within it "
             "over the window (estimated from histogram buckets)")
    if g.share_high_if_toggled is not None and toggled_words:
        words += f"; {toggled_words} at this load: {_share_words(g.share_low_if_toggled, g.share_high_if_toggled)}"
    return words, g
