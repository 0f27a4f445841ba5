"""The step-time model T(N, C) the advisor judges with: live step-time samples, recorded from the
window's figures, and the hinge refitted to them against a prior (reference/model.md §5.2). The
prior is the datasheet's when the GPU and the model are known, else a roofline shape anchored on
the node's own step times. Pure: data time comes with each call.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

import numpy as np

from specwatch import perf
from specwatch.perf.hardware import GpuSpec, ModelSpec
from specwatch.readings.window import EngineFigures

# A knee (tokens per step) to assume when no GPU is identified: about that of an H100 in bf16
# (0.875 × the 295 ridge). Said in the reasons, and the confidence pays for it.
GENERIC_KNEE_TOKENS = 256.0


# The knee of an engine that runs on the CPU (its /server_info says device "cpu"): a CPU has no
# spare compute under its memory reads to hide a verified position in, so every position a step
# computes costs its share from the first token. What does not grow with the positions is vLLM's
# own work per step (scheduling, input preparation, sampling set-up), the fixed step cost the GPU
# law states (perf.step_overhead_s): on a small model it is a large part of a CPU step, and a
# prior without it prices a plain step as a verify step's time over its positions, a speedup far
# too low. The fit moves both from traffic at several loads.
CPU_KNEE_TOKENS = 1.0
# The fixed cost is at most this share of the node's median step: the rest is the positions'.
CPU_FIXED_SHARE_MAX = 0.5

# Below this share of the window spent decoding, the engine idled between steps: its step time is
# its step period, not the time between steps.
BUSY = 0.95


class StepSamples:
    """One target's step-time samples and the fit made from them: `record` each evaluation's
    figures, then ask `step_model` for the model to judge with."""

    def __init__(self, *, model: ModelSpec | None = None, tp: int = 1, dtype: str = "bf16",
                 ep: int | None = None, dp_attention: bool = False, sample_interval_s: float = 5.0, refit_interval_s: float = 60.0,
                 half_life_s: float = 600.0, max_samples: int = 240) -> None:
        self.model = model  # enables the datasheet prior
        self.tp = tp
        self.dtype = dtype
        self.ep = ep
        self.dp_attention = dp_attention
        self.sample_interval_s = sample_interval_s  # data time between samples
        self.refit_interval_s = refit_interval_s  # data time between refits of the hinge
        self.half_life_s = half_life_s  # old samples fade (model.md §5.2)
        # The samples as the fit's (N, T, C, weight) rows, written once each as they come into a
        # ring (a sample's slot: its count modulo max_samples), and their times, oldest first: a
        # refit then only weighs the rows by the times, since their weights fade with the refit's.
        self._rows = np.empty((max_samples, 4))
        self._recorded = 0
        self._times: deque[float] = deque(maxlen=max_samples)
        self._last_time: float | None = None
        self._fit: perf.StepTimeFit | None = None
        self._fit_time: float | None = None
        self._fit_prior_key: tuple | None = None
        self._datasheet_prior: tuple[Any, Any, tuple[int, str], tuple[perf.StepTimePrior, str]] | None = None
        # The running batch sizes the samples came from: where the fit is measured.
        self.observed_batch: tuple[float, float] | None = None

    def record(self, time: float, figures: EngineFigures, k: int | None, r: float,
               pricing: perf.DraftPricing | None = None) -> None:
        """A (tokens per step, step time, context) sample, once per sample interval of data time.
        `k` and `r` (the draft cost) when the steps were speculative: the drafter's share comes off,
        as the decision prices it (`pricing`) on this node's latest step-time model, once there is
        one to price it on."""
        # x is the positions the steps computed (window.StepTokens), not iteration_tokens_total's
        # mean, which counts tokens emitted: b·L on a speculative step rather than the b·(k+1) verified
        tokens_per_step = figures.computed_tokens_per_step_mean
        if figures.steps_per_s is None or figures.steps_per_s <= 0 or tokens_per_step is None:
            return
        # 1/steps per second is the mean step exactly as the positions per step are a mean per step,
        # while the engine never idles; where it does, it counts the idle time too, and the engine's
        # own step period (its inter-token latency) is the step time. (That latency is a mean per
        # decoding request, weighted by the batch: over a window in which the load stepped, it leans
        # on the larger batch's steps, and the steps' rate times it passes 1. It is not used then.)
        busy = figures.busy_share
        if busy is not None and busy < BUSY and figures.itl_mean_s:
            period = figures.itl_mean_s
        elif figures.running or (busy is not None and busy >= BUSY):
            # the engine decoded all through the window, whatever the running gauge read at the
            # scrape's instant (between two requests, on a node that serves one at a time, it reads 0)
            period = 1.0 / figures.steps_per_s
        else:  # an idle engine's step rate says nothing about step time
            return
        if self._last_time is not None and time - self._last_time < self.sample_interval_s:
            return
        step_time = period
        batch, context = window_load(figures)
        if k and r > 0:
            # A speculative step also ran the drafter k times. It comes off as the decision prices it
            # (on this node's latest model: r of a plain step, or the draft model's own roofline),
            # and at most as k·r of this step, its share where a verify step costs what a plain one
            # does (read-bound), the most it can be. It came off as k·r of this step at every load:
            # past the knee a verify step costs twice a plain one and more, and that left the
            # target's step too cheap exactly where speculation stops paying.
            flat_share = step_time / (1.0 + k * r)
            law = self._fit if self._fit is not None else self._datasheet_law()
            if pricing is None or law is None:
                step_time = flat_share  # no model to price on yet
            else:
                drafting = float(pricing.drafting_s(law, batch, k, k + 1.0, context))
                step_time = max(step_time - drafting, flat_share)
        ring = self._rows
        if len(ring):
            ring[self._recorded % len(ring), :3] = (tokens_per_step, step_time, context)
            self._recorded += 1
            self._times.append(time)
        self._last_time = time
        if figures.running:
            low, high = self.observed_batch or (figures.running, figures.running)
            self.observed_batch = (min(low, figures.running), max(high, figures.running))

    def _datasheet_law(self) -> perf.StepTimePrior | None:
        """The datasheet prior the latest step_model judged with, if it was one."""
        cached = self._datasheet_prior
        return cached[3][0] if cached is not None else None

    def step_model(self, time: float, gpu: GpuSpec | None,
                   cpu_engine: bool = False) -> tuple[perf.StepTimeModel, str]:
        """The step-time model at data time `time` on `gpu` (None: not identified, so the shape is
        assumed, unless `cpu_engine`: the server says it runs on the CPU, whose shape is known), and
        the words naming its prior."""
        prior_knee, prior, prior_words = self._prior(gpu, cpu_engine)
        return self._refitted(time, prior_knee, prior, shape_known=gpu is not None or cpu_engine), prior_words

    def _prior(self, gpu: GpuSpec | None,
               cpu_engine: bool = False) -> tuple[float, Callable[[], perf.HingeParameters | perf.StepTimePrior], str]:
        """The step-time prior: the datasheet one, or a roofline shape anchored on this node. Its
        knee, the prior itself as a function that makes it (a roofline prior takes the median level
        of every sample: _refitted asks for it only to refit, or when there is no fit), and words.
        The datasheet prior is predict's own law (StepTimePrior, MoE expert reads included) until
        there is a fit; the fit is a hinge regularised toward that law's hinge."""
        model = self.model
        if gpu is not None and model is not None:
            # a pure function of the GPU, the model and its layout: kept while they are the same objects
            layout = (self.tp, self.dtype, self.ep, self.dp_attention)
            cached = self._datasheet_prior
            if cached is None or cached[0] is not gpu or cached[1] is not model or cached[2] != layout:
                try:
                    prior = perf.prior_for_model(gpu, model, tp=self.tp, dtype=self.dtype, ep=self.ep,
                                                 dp_attention=self.dp_attention)
                    expert_parallel = (f", EP {self.ep}" + (" with DP attention" if self.dp_attention else "")
                                       if self.ep else "")
                    cached = self._datasheet_prior = (gpu, model, layout,
                                                      (prior, f"datasheet prior for {model.name}"
                                                             + ("" if self.dtype == "bf16" else f" in {self.dtype}")
                                                             + f" on {gpu.name}{expert_parallel}"))
                except ValueError:
                    cached = None
            if cached is not None:
                law, words = cached[3]
                return law.knee_tokens, lambda: law, words
        if gpu is None and cpu_engine:
            fixed = perf.step_overhead_s(model.layers if model is not None else None)
            return CPU_KNEE_TOKENS, lambda: self.cpu_prior(fixed), \
                (f"a CPU engine's shape (vLLM's fixed step cost, about {fixed * 1e3:.1f} ms, then every "
                 "position its compute), level from this node's step times")
        knee = gpu.ridge_for("bf16") * perf.FLOPS_EFFICIENCY / perf.BANDWIDTH_EFFICIENCY if gpu else GENERIC_KNEE_TOKENS
        where = f"the {gpu.name} knee" if gpu else f"an assumed knee of {knee:.0f} tokens (no GPU identified)"
        return knee, lambda: self.roofline_prior(knee), f"roofline shape at {where}, level from this node's step times"

    def roofline_prior(self, knee: float) -> perf.HingeParameters:
        """The roofline prior at `knee`, its level the median of the samples' levels (0.02 s without one)."""
        # Below the knee a step costs about the weight read, whatever N; the node's own mean step
        # time sets that level. Above the knee, time grows in proportion to N (compute-bound).
        # Each sample implies a level through the same shape: T / max(1, N / knee).
        kept = min(self._recorded, len(self._rows))
        observed = sorted(step_time / max(1.0, tokens / knee)
                          for tokens, step_time in self._rows[:kept, :2].tolist())
        base = observed[len(observed) // 2] if observed else 0.02
        return perf.HingeParameters(base_s=base, knee=knee, slope_s_per_token=base / knee,
                                    kv_s_per_token=0.0, per_token_s=0.0)

    def cpu_prior(self, fixed_s: float) -> perf.HingeParameters:
        """cpu_prior on this node's samples."""
        kept = min(self._recorded, len(self._rows))
        return cpu_prior(self._rows[:kept, :2].tolist(), fixed_s)

    def _refitted(self, time: float, prior_knee: float,
                  prior: Callable[[], perf.HingeParameters | perf.StepTimePrior],
                  shape_known: bool) -> perf.StepTimeModel:
        """The live fit, refitted every refit interval (or when the prior's knee or shape changes)
        against `prior()`; the prior itself before there is a fit."""
        key = (prior_knee, self.model.name if self.model else None, shape_known)
        stale = (
            self._fit is None
            or self._fit_prior_key != key
            or self._fit_time is None
            or time - self._fit_time >= self.refit_interval_s
        )
        if stale and self._recorded:
            half_life = self.half_life_s
            ring, recorded = self._rows, self._recorded
            if recorded <= len(ring):
                rows = ring[:recorded]
            else:  # the oldest sample's slot first
                oldest = recorded % len(ring)
                rows = np.concatenate((ring[oldest:], ring[:oldest]))
            rows[:, 3] = [0.5 ** ((time - t) / half_life) for t in self._times]
            self._fit = perf.fit_step_time_rows(rows, prior(), shape_known=shape_known)
            self._fit_time = time
            self._fit_prior_key = key
        return self._fit if self._fit is not None else prior()


def window_load(figures: EngineFigures) -> tuple[float, float]:
    """(sequences, context tokens) a step of the window decoded and read, on the window's mean as
    its positions and its time are: the sequences a step decoded, and the context each running
    sequence holds now times those. The gauges are read at the window's end: after a step in the
    load they are the new load's, while the steps' positions and time are a mean over both loads,
    and such a sample says that a step read more context for no more time (a KV read too cheap)."""
    context = figures.context_tokens or 0.0
    running, sequences = figures.running or 0.0, figures.sequences_per_step()
    if sequences is None:
        return running, context
    if context and running > 0:
        context *= sequences / running
    return sequences, context


def cpu_prior(samples: list[tuple[float, float]] | list[list[float]], fixed_s: float) -> perf.HingeParameters:
    """A CPU engine's prior from (positions per step, step time) samples: T(N) = F + c·N, the fixed
    step cost F (at most CPU_FIXED_SHARE_MAX of the median step) and c the median of the samples'
    (T − F)/N (a step of 0.02 s at one position without a sample)."""
    times = sorted(step_time for _, step_time in samples)
    median_step = times[len(times) // 2] if times else 0.02
    fixed = min(fixed_s, CPU_FIXED_SHARE_MAX * median_step)
    per_position = sorted((step_time - fixed) / max(tokens, 1.0) for tokens, step_time in samples
                          if step_time > fixed)
    cost = per_position[len(per_position) // 2] if per_position else median_step - fixed
    # the hinge at a knee of one token: F + c at N = 1, then c a position
    return perf.HingeParameters(base_s=fixed + cost, knee=CPU_KNEE_TOKENS, slope_s_per_token=cost,
                                kv_s_per_token=0.0, per_token_s=0.0)


def shape_measured(step_model: perf.StepTimeModel, plain_tokens: float, verify_tokens: float) -> bool:
    """Whether live step times cover the token counts a speedup compares (plain and verified, each
    within a factor of 2), so that the step time's shape between them is measured, not assumed."""
    if not isinstance(step_model, perf.StepTimeFit) or step_model.n_samples < 3:
        return False
    low, high = step_model.tokens_min, step_model.tokens_max
    if low is None or high is None or high < 2.0 * low:
        return False
    return low <= 2.0 * max(plain_tokens, 1.0) and high >= 0.5 * verify_tokens
