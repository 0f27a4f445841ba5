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
5. the speedup at the node: the engine's, applied to the share of the time it decodes (Amdahl), and
   the state it points to against the band 1 ± δ (how long it must hold before the banner shows it
   is specwatch.advice.shown's).

The Advisor composes the parts that decide, each in its own module: `node` (which GPU, what the
engine runs on, its token budget, weights and layout), `drafter_pricing` (step 2), `step_samples`
(step 3), `judging` (the bound, step 5 and the confidence) and `reasons` (health first: a window
with no usable reading; and the words of the verdict). `perf.decide` does step 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from specwatch import perf
from specwatch.perf.hardware import GpuSpec, ModelSpec
from specwatch.perf.models import weight_format
from specwatch.telemetry.snapshot import GpuSample, SourceStatus, SpeculationConfig
from specwatch.advice.drafter_pricing import DrafterPricing
from specwatch.advice.node import GpuIdentity, ToldOfNode, identify_node
from specwatch.advice.judging import (
    UNCONFIGURED_K, Hysteresis, Judged, extra_level_error, hold_settle, node_level_error,
)
from specwatch.advice.reasons import (
    TtftWatch, explain, explain_unconfigured, make_verdict, opening, sweep_not_this_target, unread_verdict,
)
from specwatch.advice.step_samples import GENERIC_KNEE_TOKENS, StepSamples
from specwatch.advice.sweep_evidence import SweepIdentity
from specwatch.advice.token_budget import NO_BUDGET, TokenBudget, checked_against_steps, prefills_apart
from specwatch.advice.verdict import HOLD, OFF, UNKNOWN, UNKNOWN_BOUND, Verdict, unknown_verdict
from specwatch.readings.figures import Acceptance
from specwatch.readings.window import EngineFigures, TargetWindow

# The public face. GENERIC_KNEE_TOKENS (step_samples) and UNCONFIGURED_K (judging) live with the parts
# that use them; the dashboard reads them from here.
__all__ = ["AdvisorConfig", "AdvisorInputs", "Advisor", "UNEXPLAINED", "K_UNKNOWN_WORDS", "GENERIC_KNEE_TOKENS",
           "UNCONFIGURED_K", "KV_FULL_USAGE", "kv_capacity_inputs"]

# KV cache usage from which, with requests waiting, the cache is what limits the batch.
KV_FULL_USAGE = 0.9
# The reason of a speculating node's unknown verdict when k is not known, naming the fix.
K_UNKNOWN_WORDS = ("k (draft tokens per step) cannot be read from this server's counters: no verdict without it; "
                   "give --k N (draft tokens per step) and --method NAME: this server's /get_server_info (SGLang) "
                   "or /server_info (vLLM dev mode) cannot be read")
# The one reason of a verdict `Advisor.assess` left unexplained (see there): never shown, since only
# verdicts that change nothing are left so, and said plainly should one ever be.
UNEXPLAINED = "not explained: this evaluation changed no verdict, and only the changes were read"


@dataclass(frozen=True)
class AdvisorConfig:
    # The operator's word on the method and the draft model's size. The target's own /server_info
    # (in TargetSample.speculation) wins over them; they win over what a sample was declared with.
    method: str | None = None  # ngram, eagle, draft_model, ... (None: unknown)
    k: int | None = None  # draft tokens per step, for a server whose counters and info do not say
    draft_ratio: float | None = None  # r, when the operator knows it
    draft_params: float | None = None
    gpu: GpuSpec | None = None  # overrides the GPU read from NVML/DCGM
    model: ModelSpec | None = None  # enables the datasheet step-time prior
    tp: int = 1
    # expert parallelism (--ep: the GPUs the routed experts are spread over) and DP attention: the
    # datasheet prior lays the weights, the tokens and the all-to-all out as predict does
    ep: int | None = None
    dp_attention: bool = False
    # the operator's service-level targets: goodput is the share of requests within them
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    # the engine's token budget per step (--max-num-batched-tokens), for a server whose /server_info
    # does not give its own (which wins): it cuts the prefill a step carries beside the verified positions
    token_budget: int | None = None
    # what the engine runs on (--device: "cpu" or "gpu"), for a server whose /server_info does not say
    # it (which wins): a CPU engine is judged with a CPU's step-time shape where no GPU is identified
    device: str | None = None
    # the weights' format (--dtype): None prices the model's as released (perf.models.weight_format)
    dtype: str | None = None
    # the settings above that came from a recording's header rather than a flag given now (a replay
    # that was not told otherwise): the panels say "from the recording", not "from --method"
    from_recording: frozenset[str] = frozenset()
    hysteresis: float = 0.05  # δ: a better k must beat the current by it; the banner's band where no evidence interval is worked out
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
    prompt_per_output: float = 0.0  # prompt tokens the steps prefilled per token they emitted (chunked prefill)
    token_budget: TokenBudget = NO_BUDGET  # the step's token budget that prefill gets what is left of
    prefill_apart: bool = False  # the engine prefills apart from its decode steps (SGLang)

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
            extra_level_error=extra_level_error, prompt_per_output=self.prompt_per_output,
            token_budget=self.token_budget.tokens, token_budget_from=self.token_budget.words,
            prefill_apart=self.prefill_apart,
        )
        values.update(overrides)
        return perf.DecisionInputs(**values)


def _prompt_per_output(figures: EngineFigures) -> float:
    """Prompt tokens (cached prefix excluded) the window's steps prefilled per token they emitted:
    the traffic's mix, which sets the prefill chunks that share each step with the decodes (0 when
    the counters do not say)."""
    tokens = figures.step_tokens
    if tokens is None or not tokens.emitted > 0:
        return 0.0
    return tokens.prompt_computed / tokens.emitted


def _per_request(figures: EngineFigures) -> tuple[float | None, float | None]:
    """Mean prompt and output tokens of the requests that finished in the window (None, None when
    none did): what the end-to-end speedup weighs the prefill by."""
    finished = figures.requests_finished
    if not finished or finished <= 0 or figures.prompt_tokens_per_s is None or not figures.generation_tokens_per_s:
        return None, None
    return (figures.prompt_tokens_per_s * figures.seconds / finished,
            figures.generation_tokens_per_s * figures.seconds / finished)


def _acceptance(tw: TargetWindow, figures: EngineFigures) -> tuple[Acceptance | None, bool]:
    """The acceptance judged: the window's, else the target's lifetime standing in for it (stale: it
    may have drifted), else None (no draft verified yet)."""
    acc = figures.acceptance
    if acc is not None and acc.acceptance_length is not None:
        return acc, False
    life = tw.lifetime.acceptance if tw.lifetime else None  # computed only when needed
    if life is not None and life.acceptance_length is not None:
        return life, True
    return None, False


def _kv_limit(figures: EngineFigures) -> float | None:
    """The KV cache's size in tokens when it is what limits the batch (requests waiting and the cache
    near full): then speculation's lookahead slots cost running sequences. None otherwise, when the
    limit, if any, is the scheduler's and holds both modes at the same batch."""
    usage = figures.kv_cache_usage
    if figures.waiting and usage is not None and usage >= KV_FULL_USAGE and figures.kv_capacity_tokens:
        return figures.kv_capacity_tokens
    return None


class Advisor:
    """One target's advisor. Feed it every update; it keeps the hysteresis and the step-time fit.

    Its parts are made from its config once, so the config is read-only here (a new config is a new
    advisor): `gpu_identity`, `drafter`, `step_samples`, `hysteresis` and `ttft` (the TTFT history)."""

    def __init__(self, config: AdvisorConfig | None = None) -> None:
        c = self._config = config or AdvisorConfig()
        # the weights' format: --dtype, else the model's as released; the server's word wins (_judge)
        self._weights = weight_format(c.model, c.dtype)
        # the format the latest verdict priced the weights at (a datasheet prior reads it where the
        # model and the GPU are known), and where it came from
        self.weights: tuple[str, str] = self._weights
        dtype = self._weights[0]
        self.gpu_identity = GpuIdentity(c.gpu)
        # the operator's word on the node, which the server's own overrides (node.identify_node)
        self._told = ToldOfNode(device=c.device, token_budget=c.token_budget, weights=self._weights,
                                layout=(c.tp, c.ep, c.dp_attention))
        self.drafter = DrafterPricing(method=c.method, draft_ratio=c.draft_ratio, draft_params=c.draft_params,
                                      target_params=c.model.params if c.model else None, k=c.k, tp=c.tp,
                                      dtype=dtype, target=c.model)
        self.step_samples = StepSamples(model=c.model, tp=c.tp, dtype=dtype, ep=c.ep, dp_attention=c.dp_attention,
                                        sample_interval_s=c.sample_interval_s, refit_interval_s=c.refit_interval_s,
                                        half_life_s=c.sample_half_life_s, max_samples=c.max_samples)
        self.hysteresis = Hysteresis()
        self.ttft = TtftWatch()
        # an MoE model's expert reads are priced under uniform routing: its error joins every decision's
        self._moe = bool(c.model is not None and c.model.is_moe)
        # Evaluations judged so far: an explanation (assess) is good until the next one.
        self._judged_count = 0
        # What the last verdict rested on, for `tune` to build a schedule from.
        self.last_inputs: AdvisorInputs | None = None
        # A saved sweep of this node (watch/check --sweep): its measured crossover is reconciled with
        # the predicted one in each verdict, and used only when it measured this configuration.
        self.sweep: SweepIdentity | None = None

    @property
    def config(self) -> AdvisorConfig:
        """The settings the parts were made from."""
        return self._config

    @property
    def committed(self) -> str | None:
        """The last on/off the speedup pointed to."""
        return self.hysteresis.committed

    @property
    def speculation(self) -> SpeculationConfig | None:
        """The speculation config the latest verdict was judged with: the target's, with this config's
        method and draft size where the target does not say (what the front ends show)."""
        return self.drafter.speculation

    @property
    def observed_batch(self) -> tuple[float, float] | None:
        """The running batch sizes the step-time samples came from: where the fit is measured."""
        return self.step_samples.observed_batch

    # -- the decision -------------------------------------------------------------------------

    def update(self, tw: TargetWindow | None, gpus: Sequence[GpuSample] = (),
               sources: Sequence[SourceStatus] = ()) -> Verdict:
        """The verdict on this window, explained: its reasons, figures, bound and flags. `sources`: the
        GPU sources' states in the same poll (a host without an NVIDIA driver tells a loopback
        server's device)."""
        verdict, _ = self._judge(tw, gpus, explained=True, sources=sources)
        return verdict

    def assess(self, tw: TargetWindow | None, gpus: Sequence[GpuSample] = (),
               sources: Sequence[SourceStatus] = ()) -> tuple[Verdict, Callable[[], Verdict] | None]:
        """`update` without what only explains the verdict, for a reader of verdict changes alone (a
        headless timeline reads one evaluation in a hundred): the verdict's state, change and load
        are `update`'s, and `explain`, when not None, gives the verdict `update` would have given
        (its reasons, crossover, best k, bound, flags and confidence). The advisor's own state (the
        step-time samples and fit, the TTFT history, the hysteresis) moves exactly as in `update`.
        Call `explain` before the next evaluation: it reads the settings this one left."""
        return self._judge(tw, gpus, explained=False, sources=sources)

    def _judge(self, tw: TargetWindow | None, gpus: Sequence[GpuSample], explained: bool,
               sources: Sequence[SourceStatus] = ()) -> tuple[Verdict, Callable[[], Verdict] | None]:
        """One evaluation, in the order its data flows: the node the window was read from
        (`node.identify_node`) and whether the window holds a usable reading (`reasons.unread_verdict`);
        the price of a step (the drafter's cost, the step-time samples and the law they give); the
        decision and its evidence interval (`perf.decide`, then the hysteresis), or why there is none;
        then the words (`reasons.explain`), at once or when asked. Verdicts that end the judging early
        (no reading, no traffic, no drafts, no decision) are explained at once: they are cheap."""
        self._judged_count += 1
        if tw is None:
            return unknown_verdict("the target has not been read yet"), None
        # 1. the node, and whether the window can be judged at all
        target = tw.latest
        identity = self.gpu_identity
        node = identify_node(identity, target, gpus, sources, self._told)
        unread = unread_verdict(tw, gpus, identity.in_use)
        if unread is not None:
            return unread, None
        figures, time, gpu = tw.total, tw.time, node.gpu
        assert figures is not None  # unread_verdict answers a window without its figures
        budget = checked_against_steps(node.budget, figures.computed_tokens_per_step_mean)
        # 2. the price of a step
        k = tw.k
        drafter = self.drafter
        cost, method = drafter.draft_cost(target.speculation, counted_k=k)
        if not k and drafter.k is not None:
            # the operator's --k, where the counters do not count it (or the server info's, which wins)
            k = drafter.speculation.k if drafter.speculation is not None else None
        r = cost.ratio if cost else perf.HEAD_DRAFT_RATIO
        pricing = drafter.pricing(cost, gpu)
        samples = self.step_samples
        samples.record(time, figures, k if tw.speculation_configured else None, r, pricing)
        self.weights = node.weights
        samples.dtype = node.weights[0]
        samples.tp, samples.ep, samples.dp_attention = node.layout
        step_model, prior_words = samples.step_model(time, gpu, node.cpu_engine)
        ttft_note = self.ttft.check(figures)

        def opened() -> tuple[perf.BoundEstimate, list[str], list[str]]:
            return opening(tw, figures, gpus, gpu, step_model, drafter.speculation, method, node.mig_unscaled,
                           ttft_note, budget_note=budget.note)

        # 3. the decision, or why there is none: (its words, flags, whether a saved sweep is named)
        why: tuple[str, tuple[str, ...], bool] | None = None
        # the window's time-averaged load where it is measured: the running gauge is read at an
        # instant, and with short requests it reads 0 at most scrapes while work flows
        running, _ = figures.judged_running()
        if target.unjudged is not None:
            # read, but not a target whose metrics can say whether speculation pays (Triton's backend,
            # a TensorRT-LLM without its counters, a Dynamo frontend, a prefill worker): no verdict on
            # guesses, and the reason says what would let it be judged
            why = (target.unjudged, ("not_judged",), False)
        elif (running is None or running < 1) and not figures.generation_tokens_per_s:
            why = ("no requests running in the window: nothing to judge until traffic arrives", (), True)
        else:
            running = max(1.0, running or 0.0)  # tokens flowed: at least one request ran
            if not tw.speculation_configured:
                bound, reasons, flags = opened()
                return self._unconfigured(tw, figures, step_model, running, cost, reasons, bound, flags, time, gpu,
                                          prior_words), None
        acc, stale_acceptance = (None, False) if why is not None else _acceptance(tw, figures)
        if why is None and acc is None:
            why = ("speculation is configured but no drafts have been verified yet", (), True)
        elif acc is not None:
            k = k or len(acc.per_position)
            if not k:
                # an old engine without per-position or draft-token counters: judging with a guessed k
                # could set L against an impossible k+1, so say it cannot be judged
                why = (K_UNKNOWN_WORDS, (), False)
        decision = inputs = None
        if why is None:
            assert acc is not None and running is not None and k
            context_per_seq = (figures.context_tokens or 0.0) / running
            self.last_inputs = AdvisorInputs(step_model, r, cost is not None, method, tuple(acc.per_position), k,
                                             running, context_per_seq, stale_acceptance, prior_words,
                                             pricing=pricing, waiting=figures.waiting or 0.0,
                                             kv_capacity_tokens=_kv_limit(figures),
                                             prompt_per_output=_prompt_per_output(figures), token_budget=budget,
                                             prefill_apart=prefills_apart(target.engine_name))
            # the requests the window's drafts came from: those that finished in it and those running at its end
            requests = max(1.0, (figures.requests_finished or 0.0) + (figures.running or 0.0))
            acceptance_error = perf.acceptance_error(acc.acceptance_length, acc.per_position, acc.drafts, requests)
            # the model's error (what no reading of this node removes) and the acceptance's sampling
            # error, in quadrature: the confidence's σ beside the step-time law's level error
            extra = math.hypot(extra_level_error(gpu, stale_acceptance, pricing.assumed, moe=self._moe),
                               acceptance_error)
            prompt, output = _per_request(figures)
            inputs = self.last_inputs.decision_inputs(length=acc.acceptance_length, extra_level_error=extra,
                                                      prompt_tokens=prompt, output_tokens=output)
            # Without its figures the decision fails where the whole one does only when the model
            # prices every batch and k they search: otherwise it is whole now, so the verdict is the same.
            with_figures = explained or not perf.figures_priced_everywhere(inputs)
            try:
                decision = perf.decide(inputs, figures=with_figures)
            except ValueError as exc:
                why = (f"no decision from these readings: {exc}", (), False)
        if why is not None:
            words, why_flags, names_sweep = why
            bound, reasons, flags = opened()
            reasons.insert(0, words)
            flags = [*flags, *why_flags]
            details = sweep_not_this_target(self.sweep, target, method, k, time, reasons, flags) if names_sweep \
                else None
            return make_verdict(UNKNOWN, 0.0, time, reasons, bound, flags, tw, gpu_spec=identity.in_use,
                                running=running, details=details), None
        assert decision is not None and inputs is not None and acc is not None and running is not None and k
        # the engine's speedup reaches the node through the share of the time the engine decodes
        busy = figures.busy_share
        s_now = perf.node_speedup(decision.expected_speedup, busy, speculating=True)
        # the window's evidence: the acceptance's sampling error and the step times' behind the law,
        # carried to the node's speedup; ON or OFF only when its interval leaves 1
        evidence = perf.evidence(s_now, acceptance_error, perf.step_evidence_error(step_model),
                                 scale=node_level_error(1.0, decision.expected_speedup, s_now, busy))
        rate = figures.requests_finished / figures.seconds if figures.requests_finished and figures.seconds else None
        hold_note, settle = hold_settle(evidence, acc.drafts, requests, rate, tw.window_s, figures.seconds)
        state, hysteresis_note = self.hysteresis.move(evidence, hold_note)
        judged = Judged(tw, tuple(gpus), gpu, step_model, method, pricing, node.mig_unscaled, ttft_note,
                        prior_words, acc, stale_acceptance, k, running, inputs,
                        decision if with_figures else None, state, hysteresis_note, busy, budget.note,
                        node.device, evidence=evidence, settle=settle if state == HOLD else None)
        if explained:
            return explain(judged, self._config, self.sweep, drafter.speculation, identity.in_use), None
        return Verdict(state, 0.0, s_now, decision.break_even_length, None, state == OFF, (UNEXPLAINED,),
                       UNKNOWN_BOUND, time=time, configured=True, acceptance_length=acc.acceptance_length,
                       low_load_break_even=decision.low_load_break_even, running=running,
                       gpu_spec=identity.in_use, details={"evidence": evidence}), \
            partial(self._explain_now, judged, self._judged_count)

    def _explain_now(self, j: Judged, judged_count: int) -> Verdict:
        """`reasons.explain`, while nothing has been judged since: it reads the advisor's settings as
        that evaluation left them (the speculation config, the GPU in use, the sweep)."""
        if judged_count != self._judged_count:
            raise RuntimeError("a verdict can be explained only until the advisor judges the next window")
        return explain(j, self._config, self.sweep, self.drafter.speculation, self.gpu_identity.in_use)

    def _unconfigured(self, tw: TargetWindow, figures: EngineFigures, step_model: perf.StepTimeModel,
                      running: float, cost: perf.DraftCost | None, reasons: list[str],
                      bound: perf.BoundEstimate, flags: list[str], time: float, gpu: GpuSpec | None,
                      prior_words: str) -> Verdict:
        """A node without speculation: the acceptance length speculation would need here at
        UNCONFIGURED_K, against what typical drafters reach (`reasons.explain_unconfigured`)."""
        k = UNCONFIGURED_K
        pricing = self.drafter.pricing(cost, gpu)
        context_per_seq = (figures.context_tokens or 0.0) / running
        try:
            decision = perf.decide(perf.DecisionInputs(
                step_model=step_model, k=k, draft=pricing, running=running, context_per_sequence=context_per_seq,
                waiting=figures.waiting or 0.0, **kv_capacity_inputs(_kv_limit(figures)),
                extra_level_error=extra_level_error(gpu, False, pricing.assumed, moe=self._moe)))
        except ValueError as exc:
            reasons.insert(0, f"no decision from these readings: {exc}")
            return make_verdict(UNKNOWN, 0.0, time, reasons, bound, flags, tw, gpu_spec=self.gpu_identity.in_use,
                                running=running)
        return explain_unconfigured(tw, decision, pricing, cost, k, running, step_model, gpu, prior_words, time,
                                    reasons, bound, flags, self._config, self.gpu_identity.in_use)
