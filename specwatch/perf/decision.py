"""The decision: one pure function from the inputs to whether speculation pays at this load.

The Advisor (check, watch), `predict`, sweep's predicted curve and `tune` all call `decide`, so
they give the same expected speedup for the same inputs. None of them keeps its own band,
confidence, defaults or batch cap; the Advisor adds only its hysteresis over time.

The speculative step (reference/model.md §5.4, with the terms of `specwatch.perf.costs`):

    T_plain(b) = T(b, C)                                      C = b·s̄ context tokens in the batch
    T_spec(b)  = T(b·v, C) + attention(v) + k·T_draft(b)      v = k+1 (tree drafts: more)
    S(b)       = L·T_plain(b) / T_spec(b)

and, when the node saturates (requests waiting, or the KV cache cannot hold the batch with the
lookahead slots and the draft's cache), the throughput ratio at the batch each mode can hold:

    S = [b_spec·L / T_spec(b_spec)] / [b_plain / T_plain(b_plain)]

Conventions: k draft tokens per step; L counts the bonus token, 1 ≤ L ≤ k+1. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from specwatch.perf.acceptance import LengthsAtK, check_k
from specwatch.perf.costs import (
    Capacity,
    Settled,
    budget_bound_words,
    budget_stepped_batch,
    DraftPricing,
    capacity,
    prefill_chunk,
    prefill_time_s,
    prefills_waited_out,
    request_speedup,
    seconds,
    prefill_shared,
    verify_attention_s,
    VERIFY_ATTENTION_PER_POSITION,
)
from specwatch.perf.speedup import Crossover, KChoice, better_k, first_fall_through_one, first_rise_through_one
from specwatch.perf.confidence import NOTHING_ACCEPTED_WORDS, direction_confidence, level_error
from specwatch.perf.steptime import HingeParameters, StepTimeFit, StepTimeModel


__all__ = [
    "MAX_BATCH",
    "BAND",
    "DecisionInputs",
    "Decision",
    "decide",
    "decide_many",
    "figures_priced_everywhere",
    "speedup_function",
]


# The largest concurrency the crossover is searched to (and sweep's predicted curve): vLLM's
# max_num_seqs rarely exceeds it.
MAX_BATCH = 1024.0
# S within 1 ± BAND is a wash: "hold", keep whatever is configured.
BAND = 0.05
# What an approximate GPU (no datasheet) or an unidentified one adds to the level error.
APPROXIMATE_GPU_ERROR = 0.2
UNKNOWN_GPU_ERROR = 0.3


@dataclass(frozen=True)
class DecisionInputs:
    step_model: StepTimeModel  # the target's T(N, C): a datasheet prior or a live fit
    k: int
    draft: DraftPricing
    running: float  # sequences decoding now (the batch b)
    length: float | None = None  # L; None: say what L would pay
    rates: tuple[float, ...] = ()  # per-position acceptance (exact L for shorter chains)
    context_per_sequence: float = 0.0
    waiting: float = 0.0
    tree_tokens: float | None = None  # positions verified per sequence, when more than k+1
    # measured: positions verified per sequence per decode step, and `length` then the tokens each
    # emits, both over every decode step, those whose drafter proposed nothing (an n-gram miss
    # verifies one position and emits one token) and those with a short proposal included
    verified_per_step: float | None = None
    max_running: float | None = None  # the engine's cap on running requests under speculation
    kv_budget_bytes: float | None = None  # per GPU: memory the KV cache may take
    target_kv_bytes_per_token: float = 0.0  # per GPU
    draft_context_per_sequence: float | None = None  # a draft's KV budget (default: the full context)
    observed_with_speculation: bool = False  # the running count was taken with speculation on
    fitted_on_speculative_steps: bool = False  # the fit already holds the verification attention
    verify_attention_per_position: float = VERIFY_ATTENTION_PER_POSITION  # the verifier's kernel factor
    # prompt tokens (cached prefix excluded) per output token of the traffic: each step carries the
    # prefill its completions bring (chunked prefill), in proportion to the tokens it emits; and the
    # engine's token budget per step (max_num_batched_tokens; None: not known, no cut)
    prompt_per_output: float = 0.0
    token_budget: float | None = None
    token_budget_from: str = ""  # where the budget came from, in the reason's words ("" says nothing)
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    prefill_apart: bool = False  # prefill batches apart from the decode steps (SGLang): prefills_waited_out
    k_max: int | None = None  # best k searched over 1..k_max (default k)
    extra_level_error: float = 0.0  # what the caller knows adds to the error (GPU, acceptance, ...)
    max_batch: float = MAX_BATCH


@dataclass(frozen=True)
class Decision:
    state: str  # on | off | hold | unknown: the raw band, before any hysteresis
    expected_speedup: float | None
    break_even_length: float  # the L that pays at this load
    low_load_break_even: float  # the same at one running sequence
    crossover: Crossover | None
    best_k: KChoice | None
    confidence: float  # the chance that the direction (gain / loss) is right
    level_error: float  # σ of ln S the confidence rests on
    terms: dict[str, float]  # seconds per step (and the capacity in sequences)
    carried_by: str  # the term that moves ln S the most
    capacity: Capacity
    request_speedup: float | None
    assumptions: tuple[str, ...]
    reasons: tuple[str, ...] = field(default_factory=tuple)
    throughput_speedup: float | None = None  # requests completed per second, when prefill shares the step
    # the decode steps' speedup (the prefill they carry in them): expected_speedup is this, or the
    # request throughput's where the token budget holds the prefill back and that is lower
    decode_speedup: float | None = None
    # the speedup at each k′ the best k was chosen from (at this load), shortest first
    by_k: tuple[KChoice, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "expected_speedup": self.expected_speedup,
            "break_even_length": self.break_even_length,
            "low_load_break_even_length": self.low_load_break_even,
            "crossover_concurrency": self.crossover.concurrency if self.crossover else None,
            "crossover_state": self.crossover.state if self.crossover else None,
            "best_k": None if self.best_k is None else {"k": self.best_k.k, "length": self.best_k.length,
                                                        "speedup": self.best_k.speedup},
            "confidence": self.confidence,
            "level_error": self.level_error,
            "terms": dict(self.terms),
            "carried_by": self.carried_by,
            "capacity": {"plain": self.capacity.plain, "speculative": self.capacity.speculative,
                         "fits": self.capacity.fits},
            "request_speedup": self.request_speedup,
            "throughput_speedup": self.throughput_speedup,
            "decode_speedup": self.decode_speedup,
            "assumptions": list(self.assumptions),
        }


# ln S's terms by name, as `Decision.terms` keys them
_TERM_KEYS = {name: f"ln_{name.replace(' ', '_')}" for name in
              ("acceptance", "verify compute", "verification attention", "draft", "KV capacity", "token budget")}


def _positions(inputs: DecisionInputs, k: int) -> float:
    if inputs.verified_per_step is not None and k == inputs.k:
        return max(1.0, float(inputs.verified_per_step))
    if inputs.tree_tokens is not None and k == inputs.k:
        return max(float(inputs.tree_tokens), k + 1.0)
    return k + 1.0


class _Model:
    """The step times of one configuration, at any batch and k (`plain` and `parts` also take an
    array of batches, with the same arithmetic elementwise)."""

    def __init__(self, inputs: DecisionInputs) -> None:
        self.i = inputs
        self._capacities: dict[int, Capacity] = {}  # capacity depends on k only
        self._positions: dict[int, float] = {}  # and so do the positions verified
        # A fit's step time is its parameters': calling theirs directly saves a call in each of the
        # few hundred step times a decision prices (the same arithmetic).
        step_model = inputs.step_model
        self._step_time = (step_model.parameters if isinstance(step_model, StepTimeFit) else step_model).step_time
        # the prefill each step carries: m·b prompt tokens on a plain step, m·b·L on a speculative one
        # (it emits L tokens a sequence, so its completions bring L times the prompts), where L is this
        # decision's acceptance length; the break-even and the crossover keep that prefill
        self._prompt_per_output = inputs.prompt_per_output if inputs.prompt_per_output > 0 else 0.0
        self._emitted = inputs.length if inputs.length is not None else 1.0

    def plain_chunk(self, b):
        """Prompt tokens a plain step at batch b carries (0 without prefill in the steps)."""
        m = self._prompt_per_output
        return prefill_chunk(b, m * b, self.i.token_budget) if m else 0.0

    def spec_chunk(self, b, positions: float):
        """Prompt tokens a speculative step at batch b carries, what the budget leaves of m·b·L."""
        m = self._prompt_per_output
        return prefill_chunk(b * positions, m * b * min(self._emitted, positions), self.i.token_budget) if m else 0.0

    def positions(self, k: int) -> float:
        known = self._positions.get(k)
        if known is None:
            known = self._positions[k] = _positions(self.i, k)
        return known

    def plain(self, b: float) -> float:
        return seconds(self._step_time(b + self.plain_chunk(b), b * self.i.context_per_sequence))

    def parts(self, b: float, k: int) -> dict[str, float]:
        plain, verify, attention, draft = self._parts(b, k)
        return {"plain_s": plain, "verify_s": verify, "attention_s": attention, "draft_s": draft,
                "speculative_s": verify + attention + draft}

    def _parts(self, b: float, k: int) -> tuple[float, float, float, float]:
        """(plain, verify, attention, draft) seconds at batch b: `parts` without its dict, for
        `speedup` (a dozen calls a decision, most of them the crossover's root search)."""
        i = self.i
        step_time = self._step_time
        context = b * i.context_per_sequence
        positions = self.positions(k)
        plain_tokens = b + self.plain_chunk(b)
        plain = seconds(step_time(plain_tokens, context))
        verify = seconds(step_time(b * positions + self.spec_chunk(b, positions), context))
        attention = 0.0
        if not i.fitted_on_speculative_steps:
            kv_read = plain - seconds(step_time(plain_tokens, 0.0))
            attention = verify_attention_s(kv_read, positions, i.verify_attention_per_position)
        if i.draft.kind == "ratio" and self._prompt_per_output:
            # r of a plain step as the engine runs it, its prefill chunk in it (as _HingeModel prices it)
            draft = i.draft.scale * k * i.draft.ratio * plain
        else:
            draft_context = None if i.draft_context_per_sequence is None else b * i.draft_context_per_sequence
            draft = i.draft.drafting_s(i.step_model, b, k, positions, context, draft_context)
        return plain, verify, attention, draft

    def excess_without_caps(self, k: int, length: float):
        """S(b) − 1 with no one waiting and no cap on either mode (both run b itself): what the
        crossover search calls at each point of its root search."""
        steps_at = self.steps_at

        def excess(b: float) -> float:
            return _speedup(steps_at(b, b, k, b), length) - 1.0

        return excess

    def capacity(self, k: int) -> Capacity:
        known = self._capacities.get(k)
        if known is None:
            known = self._capacities[k] = self._capacity(k)
        return known

    def _capacity(self, k: int) -> Capacity:
        i = self.i
        if i.kv_budget_bytes is None or i.target_kv_bytes_per_token <= 0:
            # no KV budget: capacity() answers the same whatever k (the positions do not enter)
            for known in self._capacities.values():
                return known
        return capacity(
            kv_budget_bytes=i.kv_budget_bytes,
            target_kv_per_token=i.target_kv_bytes_per_token,
            context_per_sequence=i.context_per_sequence,
            positions=self.positions(k),
            draft_kv_per_token=i.draft.kv_bytes_per_token if i.draft.kind == "model" else 0.0,
            draft_context_per_sequence=i.draft_context_per_sequence,
            max_running=i.max_running,
            batch=i.running,
        )

    def batches(self, demand: float, waiting: float, k: int) -> tuple[float, float, Capacity]:
        """The batch each mode runs at for this demand: (plain, speculative)."""
        cap = self.capacity(k)
        plain_cap, spec_cap = cap.plain, cap.speculative
        if waiting > 0:
            # the node is full: what it holds now is its limit in the mode it runs
            held = self.i.running
            if self.i.observed_with_speculation:
                ratio = (cap.plain / cap.speculative) if cap.plain and cap.speculative else 1.0
                spec_cap = held if spec_cap is None else min(spec_cap, held)
                plain_cap = held * ratio if plain_cap is None else min(plain_cap, held * ratio)
            else:
                ratio = (cap.speculative / cap.plain) if cap.plain and cap.speculative else 1.0
                plain_cap = held if plain_cap is None else min(plain_cap, held)
                spec_cap = held * ratio if spec_cap is None else min(spec_cap, held * ratio)
        return _held_to(demand, plain_cap), _held_to(demand, spec_cap), cap

    def speedup(self, demand: float, waiting: float, k: int, length: float) -> float:
        if not self._prompt_per_output:
            return _speedup(self.steps(demand, waiting, k), length)
        # the prefill a speculative step carries follows the tokens it emits at this length
        decision_length, self._emitted = self._emitted, length
        try:
            return _speedup(self.steps(demand, waiting, k), length)
        finally:
            self._emitted = decision_length

    def steps(self, demand: float, waiting: float, k: int) -> tuple[float, float, float, float]:
        """What S at this demand is made of, whatever L: (plain batch, speculative batch, plain step
        at the plain batch, speculative step at its own), each step time checked usable."""
        if not waiting > 0:
            cap = self.capacity(k)
            if cap.plain is None and cap.speculative is None:  # batches(): both modes run the demand
                return self.steps_at(demand, demand, k, demand)
        b_plain, b_spec, _ = self.batches(demand, waiting, k)
        return self.steps_at(b_plain, b_spec, k, demand)

    def steps_at(self, b_plain: float, b_spec: float, k: int, demand: float) -> tuple[float, float, float, float]:
        """`steps` at the batches each mode holds (`demand` only names the load in the error)."""
        plain_at_spec, verify, attention, draft = self._parts(b_spec, k)
        # the same batch in both modes (no cap binds) is the same plain step, priced once
        return self.checked_steps(b_plain, b_spec, plain_at_spec if b_plain == b_spec else self.plain(b_plain),
                                  verify + attention + draft, demand)

    @staticmethod
    def checked_steps(b_plain: float, b_spec: float, plain: float, spec: float,
                      demand: float) -> tuple[float, float, float, float]:
        """`steps_at`'s answer from its two step times, once each is checked usable: positive and
        finite, and not so small that a batch over it overflows, which would make S at L = 1 zero or
        NaN (a break-even of 1/0)."""
        if not (spec > 0 and plain > 0 and math.isfinite(spec) and math.isfinite(plain)
                and (b_spec / spec) / (b_plain / plain) > 0):
            raise _unusable_steps(demand, plain, spec)
        return b_plain, b_spec, plain, spec

    def speedup_on_grid(self, grid: np.ndarray, k: int, length: float) -> np.ndarray | None:
        """`speedup` at every batch of `grid` with no one waiting, in one pass of array arithmetic
        (the same operations, elementwise). None where a step time is not positive and finite
        somewhere on the grid, or the step-time model takes no arrays: `speedup` says why."""
        cap = self.capacity(k)
        b_plain, b_spec = _held_to(grid, cap.plain), _held_to(grid, cap.speculative)
        try:
            plain_at_spec, verify, attention, draft = self._parts(b_spec, k)
            spec = np.asarray(verify + attention + draft, dtype=float)
            # no cap binds: both modes run the grid itself, and the plain step is priced once
            plain = np.asarray(plain_at_spec if b_plain is b_spec else self.plain(b_plain), dtype=float)
        except (TypeError, ValueError):
            return None
        # min > 0 and max < inf: positive and finite everywhere (a NaN fails both)
        if spec.shape != grid.shape or plain.shape != grid.shape \
                or not (spec.min() > 0 and plain.min() > 0 and spec.max() < math.inf and plain.max() < math.inf):
            return None
        return (b_spec * length / spec) / (b_plain / plain)

    def break_even(self, demand: float, waiting: float, k: int) -> float:
        """The L at which S = 1 (S is linear in L)."""
        return _break_even(self.steps(demand, waiting, k))


def _unusable_steps(demand: float, plain: float, spec: float) -> ValueError:
    """What `checked_steps` (and the crossover's written-out copy of its check) raise for a step time
    that is not positive and finite."""
    return ValueError(f"the step-time model gives no usable step time at batch {demand:g} "
                      f"(plain {plain!r} s, speculative {spec!r} s)")


def _hinge_terms(step_model: StepTimeModel) -> tuple[float, float, float, float, float] | None:
    """(base, knee, slope, kv, per-token) of a hinge step-time model (or a fit of one) whose terms
    are plain floats, else None: its scalar step time can then be written out where it is used."""
    hinge = step_model.parameters if type(step_model) is StepTimeFit else step_model
    if type(hinge) is not HingeParameters:
        return None
    terms = base, knee, slope, kv, per_token = (hinge.base_s, hinge.knee, hinge.slope_s_per_token,
                                                 hinge.kv_s_per_token, hinge.per_token_s)
    if type(base) is float and type(knee) is float and type(slope) is float and type(kv) is float \
            and type(per_token) is float:
        return terms
    return None


class _HingeModel(_Model):
    """`_Model` for a hinge of plain floats and a plain-float context: the scalar step times written
    out, operation for operation as `HingeParameters.step_time` and `DraftPricing.drafting_s` do them
    (the values are the same to the bit), without the calls between them. A decision prices a few
    dozen step times, most of them in the crossover's root search. Arrays, and batches that are not
    plain numbers, take `_Model`'s way."""

    def __init__(self, inputs: DecisionInputs, hinge: tuple[float, float, float, float, float]) -> None:
        super().__init__(inputs)
        self._hinge = hinge
        draft = inputs.draft
        # the drafts written out here: none, or r plain steps per draft token (DraftPricing.drafting_s)
        self._draft_kind = draft.kind if type(draft) is DraftPricing and draft.kind in ("lookup", "ratio") else None

    def plain(self, b: float) -> float:
        if type(b) is not float and type(b) is not int:
            return super().plain(b)
        base, knee, slope, kv, per_token = self._hinge
        n = b + self.plain_chunk(b) if self._prompt_per_output else b
        above = n - knee
        return base + kv * (b * self.i.context_per_sequence) + per_token * n + slope * (above if above > 0.0 else 0.0)

    def _parts(self, b: float, k: int) -> tuple[float, float, float, float]:
        if type(b) is not float and type(b) is not int:
            return super()._parts(b, k)
        i = self.i
        base, knee, slope, kv, per_token = self._hinge
        context = b * i.context_per_sequence
        positions = self.positions(k)
        n = b
        tokens = b * positions
        if self._prompt_per_output:  # the prefill chunks the steps carry
            n = b + self.plain_chunk(b)
            tokens = tokens + self.spec_chunk(b, positions)
        above = n - knee
        plain = base + kv * context + per_token * n + slope * (above if above > 0.0 else 0.0)
        above = tokens - knee
        verify = base + kv * context + per_token * tokens + slope * (above if above > 0.0 else 0.0)
        attention = 0.0
        if not i.fitted_on_speculative_steps:
            above = n - knee
            kv_read = plain - (base + kv * 0.0 + per_token * n + slope * (above if above > 0.0 else 0.0))
            attention = verify_attention_s(kv_read, positions, i.verify_attention_per_position)
        kind = self._draft_kind
        if kind == "lookup":
            draft = 0.0
        elif kind == "ratio":
            pricing = i.draft
            draft = pricing.scale * k * pricing.ratio * plain
        else:
            draft_context = None if i.draft_context_per_sequence is None else b * i.draft_context_per_sequence
            draft = i.draft.drafting_s(i.step_model, b, k, positions, context, draft_context)
        return plain, verify, attention, draft

    def speedup_on_grid(self, grid: np.ndarray, k: int, length: float) -> np.ndarray | None:
        i = self.i
        if self._draft_kind != "lookup" or not i.fitted_on_speculative_steps or grid.dtype != np.float64 \
                or grid.ndim != 1 or self._prompt_per_output:
            return super().speedup_on_grid(grid, k, length)
        cap = self.capacity(k)
        if cap.plain is not None or cap.speculative is not None:
            return super().speedup_on_grid(grid, k, length)
        # no cap: both modes run the grid itself (b_plain and b_spec are the grid)
        steps = _lookup_steps_on_grid(grid.tobytes(), self._hinge, i.context_per_sequence, self.positions(k))
        if steps is None:
            return None
        spec, plain_rate = steps
        return (grid * length / spec) / plain_rate

    def excess_without_caps(self, k: int, length: float):
        parts = self._parts

        def excess(b: float) -> float:
            # steps_at(b, b, k, b) and _speedup, written out (a lookup drafter's attention and draft
            # are the 0.0 that _parts gives)
            plain, verify, attention, draft = parts(b, k)
            spec = verify + attention + draft
            if not (spec > 0 and plain > 0 and math.isfinite(spec) and math.isfinite(plain)):
                raise _unusable_steps(b, plain, spec)
            return (b * length / spec) / (b / plain) - 1.0

        return excess


@lru_cache(maxsize=8)
def _lookup_steps_on_grid(grid_bytes: bytes, hinge: tuple[float, float, float, float, float],
                          context_per_sequence: float, positions: float) -> tuple[np.ndarray, np.ndarray] | None:
    """For a lookup drafter on a fitted hinge with no cap: the speculative step at each batch of a
    grid, and the batch over the plain step there (`_Model.speedup_on_grid`'s arrays, the same
    arithmetic, with the part the plain and the verify steps share computed once), or None where a
    step is not positive and finite. They do not depend on L: kept while the fit and the context
    stand (a refit comes once a minute, evaluations every few seconds)."""
    grid = np.frombuffer(grid_bytes)
    base, knee, slope, kv, per_token = hinge
    shared = base + kv * (grid * context_per_sequence)
    plain = shared + per_token * grid + slope * np.maximum(0.0, grid - knee)
    tokens = grid * positions
    # no attention and no draft to add: adding their zeros changes no value the check below lets through
    spec = shared + per_token * tokens + slope * np.maximum(0.0, tokens - knee)
    # min > 0 and max < inf: positive and finite everywhere (a NaN fails both)
    if not (spec.min() > 0 and plain.min() > 0 and spec.max() < math.inf and plain.max() < math.inf):
        return None
    plain_rate = grid / plain
    spec.flags.writeable = plain_rate.flags.writeable = False  # shared by the decisions that hit the cache
    return spec, plain_rate


def _model(inputs: DecisionInputs) -> _Model:
    """The step times of this configuration: written out for a hinge of plain floats."""
    hinge = _hinge_terms(inputs.step_model)
    if hinge is not None and type(inputs.context_per_sequence) is float:
        return _HingeModel(inputs, hinge)
    return _Model(inputs)


def _speedup(steps: tuple[float, float, float, float], length: float) -> float:
    """S from `_Model.steps` at acceptance length L."""
    b_plain, b_spec, plain, spec = steps
    return (b_spec * length / spec) / (b_plain / plain)


def _break_even(steps: tuple[float, float, float, float]) -> float:
    """The L at which S = 1 (S is linear in L), from `_Model.steps`."""
    return 1.0 / _speedup(steps, 1.0)


def _held_to(demand: float | np.ndarray, cap: float | None) -> float | np.ndarray:
    """The batch a mode runs at for this demand under its cap (at least 1), elementwise for a grid."""
    if cap is None:
        return demand
    if isinstance(demand, np.ndarray):
        return np.maximum(1.0, np.minimum(demand, cap))
    return max(1.0, min(demand, cap))


def _crossover(model: _Model, k: int, length: float, max_batch: float,
               steps_at_one: tuple[float, float, float, float]) -> Crossover:
    """Where S falls through 1 with no one waiting; `steps_at_one` is model.steps(1.0, 0.0, k)."""
    cap = model.capacity(k)
    plain_cap, spec_cap = cap.plain, cap.speculative
    steps_at = model.steps_at

    if plain_cap is None and spec_cap is None:
        # model.speedup(b, 0.0, k, length) − 1: no cap, so both modes run b itself
        excess = model.excess_without_caps(k, length)
    else:
        def excess(b: float) -> float:
            # model.speedup(b, 0.0, k, length) − 1: with no one waiting each mode holds b under its cap
            return _speedup(steps_at(_held_to(b, plain_cap), _held_to(b, spec_cap), k, b), length) - 1.0

    def excess_on_grid(grid: np.ndarray) -> np.ndarray | None:
        values = model.speedup_on_grid(grid, k, length)
        return None if values is None else values - 1.0

    at_one = _speedup(steps_at_one, length) - 1.0  # excess(1.0)
    if at_one < 0:
        # below 1 at one sequence is not below 1 everywhere: an MoE's verification at a few sequences
        # wakes experts a plain step leaves idle, and from a dozen on every step reads them all
        rise = first_rise_through_one(excess, max_batch, grid_points=48, bisections=34,
                                      excess_on_grid=excess_on_grid, excess_at_one=at_one)
        if rise is None:
            return Crossover(None, "never_pays", max_batch)
        # the first fall after the rise: below it, the search sees S as paying
        after = first_fall_through_one(
            lambda b: excess(b) if b > rise else max(0.0, excess(b)), max_batch, grid_points=48, bisections=34,
            excess_on_grid=lambda grid: _paying_below(excess_on_grid(grid), grid, rise), excess_at_one=0.0)
        return Crossover(after.concurrency, after.state, max_batch, pays_from=rise)
    # a factor of 1.16 between grid points up to 1024, then the root to bisection's 1e-10
    return first_fall_through_one(excess, max_batch, grid_points=48, bisections=34, excess_on_grid=excess_on_grid,
                                  excess_at_one=at_one)


def _paying_below(values: np.ndarray | None, grid: np.ndarray, rise: float) -> np.ndarray | None:
    """Grid excesses with those at or below `rise` held at ≥ 0 (the fall searched is the one after it)."""
    return None if values is None else np.where(grid > rise, values, np.maximum(values, 0.0))


def _settled(model: _Model, budget: float | None, b_plain: float, b_spec: float, k: int, positions: float,
             m: float, length: float) -> Settled | None:
    """Where each mode settles under its token budget (costs.Settled), or None where the budget
    steps both modes' batches whole."""
    plain_batch = budget_stepped_batch(budget, 1.0, m, 1.0)
    spec_batch = budget_stepped_batch(budget, positions, m, length)
    if plain_batch >= b_plain and spec_batch >= b_spec:
        return None
    plain_rate = plain_batch / model.plain(plain_batch) if plain_batch < b_plain else 0.0
    spec_rate = spec_batch * length / model.parts(spec_batch, k)["speculative_s"] if spec_batch < b_spec else 0.0
    return Settled(min(plain_batch, b_plain), plain_rate, min(spec_batch, b_spec), spec_rate)


def decide(inputs: DecisionInputs, *, figures: bool = True) -> Decision:
    """The decision for one configuration at one load (see the module docstring).

    `figures=False` leaves out what only explains the decision (the crossover, the best k and the
    end-to-end speedup: None) and works out the rest the same way: a headless timeline explains
    only the evaluations that change the verdict. Where `figures_priced_everywhere(inputs)`, it
    raises exactly where the whole decision does."""
    check_k(inputs.k)
    if not (math.isfinite(inputs.running) and inputs.running > 0):
        raise ValueError(f"running must be a positive number, got {inputs.running!r}")
    if inputs.length is not None and not (math.isfinite(inputs.length) and 1.0 <= inputs.length):
        raise ValueError(f"acceptance length must be ≥ 1, got {inputs.length!r}")
    k = int(inputs.k)
    model = _model(inputs)
    waiting = max(0.0, inputs.waiting or 0.0)
    demand = inputs.running + waiting
    b_plain, b_spec, cap = model.batches(demand, waiting, k)
    parts = model.parts(b_spec, k)
    plain_here = model.plain(b_plain)
    # model.steps(demand, waiting, k) from the parts just priced (the same batches, the same steps)
    steps_here = model.checked_steps(b_plain, b_spec, parts["plain_s"] if b_plain == b_spec else plain_here,
                                     parts["speculative_s"], demand)
    break_even = _break_even(steps_here)
    steps_low = model.steps(1.0, 0.0, k)
    low_load = _break_even(steps_low)
    assumptions: list[str] = []
    reasons: list[str] = []
    if inputs.draft.assumed:
        assumptions.append(inputs.draft.basis)
    if not cap.fits:
        reasons.append(f"{inputs.running:.0f} sequences × {inputs.context_per_sequence:.0f} tokens of context do not "
                       f"fit the GPUs' KV memory (about {cap.plain:.0f} do): the batch is capped there")
    terms = {**parts, "plain_at_plain_batch_s": plain_here, "batch_plain": b_plain, "batch_speculative": b_spec}

    expected = decode = crossover = best = request = throughput = None
    by_k: tuple[KChoice, ...] = ()
    sigma = level_error(inputs.step_model, (b_plain, b_spec * _positions(inputs, k)), inputs.extra_level_error)
    if inputs.length is None:
        state, confidence = "unknown", 0.0
        carried = "acceptance (unknown)"
    else:
        length = min(inputs.length, _positions(inputs, k)) if inputs.tree_tokens or inputs.verified_per_step \
            else min(inputs.length, k + 1.0)
        expected = decode = length / break_even
        # the terms in ln S: acceptance gains, each cost loses its share of ln(T_spec / T_plain)
        plain_at_spec = parts["plain_s"]  # the plain step at the speculative batch
        loss = math.log(parts["speculative_s"] / plain_at_spec)
        extra = parts["speculative_s"] - plain_at_spec
        shares = {"verify compute": parts["verify_s"] - plain_at_spec, "verification attention":
                  parts["attention_s"], "draft": parts["draft_s"]}
        contributions = {"acceptance": math.log(length)}
        for name, seconds in shares.items():
            contributions[name] = -loss * (seconds / extra) if extra > 0 else 0.0
        contributions["KV capacity"] = math.log((b_spec / b_plain) * (plain_here / plain_at_spec)) \
            if b_spec != b_plain else 0.0
        m, positions = inputs.prompt_per_output, _positions(inputs, k)
        settled = _settled(model, inputs.token_budget, b_plain, b_spec, k, positions, m, length)
        if m > 0:
            plain_chunk, held = model.plain_chunk(b_plain), model.spec_chunk(b_spec, positions)
            throughput, held_back, words = prefill_shared(m, b_plain, b_spec, length, steps_here[2], steps_here[3],
                                                          plain_chunk, held, inputs.token_budget,
                                                          inputs.token_budget_from, settled=settled)
            # verified positions that overfill the budget: the decode figure prices a step no engine runs
            overfilled = inputs.token_budget is not None and b_spec * positions >= inputs.token_budget
            if held_back and (throughput < decode or overfilled):
                # The engine's output is requests: faster steps whose prefill is held back only move the
                # queue to the first token. The verdict follows the requests; the decode figure stays.
                expected = throughput
                contributions["token budget"] = math.log(throughput / decode)
                words += (f": the verdict follows the requests ({throughput:.2f}×), not the decode steps "
                          f"({decode:.2f}×)")
            reasons.append(words)
        elif settled is not None:
            # no prefill in the steps, and more positions than the budget holds: the engine steps
            # what it holds, the rest wait
            spec_rate = settled.spec_rate if settled.spec_batch < b_spec else b_spec * length / steps_here[3]
            plain_rate = settled.plain_rate if settled.plain_batch < b_plain else b_plain / steps_here[2]
            expected = throughput = spec_rate / plain_rate
            contributions["token budget"] = math.log(throughput / decode)
            reasons.append(budget_bound_words(inputs.token_budget, inputs.token_budget_from, b_spec,
                                              settled.spec_batch, positions, throughput))
        state = "on" if expected >= 1 + BAND else "off" if expected <= 1 - BAND else "hold"
        confidence = direction_confidence(expected, sigma)
        if length <= 1.0:  # nothing accepted: no error in the step time moves the answer
            state, confidence = "off", 1.0
            reasons.append(NOTHING_ACCEPTED_WORDS)
        if expected < 1:
            carried = min(contributions, key=lambda name: contributions[name])
        else:
            carried = max(contributions, key=lambda name: abs(contributions[name]))
        terms.update({_TERM_KEYS[name]: value for name, value in contributions.items()})
        if figures:
            crossover = _crossover(model, k, length, inputs.max_batch, steps_low)
            best, by_k = _best_k(inputs, model, k, length, steps_here, demand, waiting)
            request = _request_speedup(inputs, expected, plain_here)
            if request is not None and m > 0 and "token budget" in contributions:  # the prefill in the
                request = expected  # budget's rates: a request waits its turn for a step at the engine's pace
    return Decision(
        state=state,
        expected_speedup=expected,
        break_even_length=break_even,
        low_load_break_even=low_load,
        crossover=crossover,
        best_k=best,
        by_k=by_k,
        confidence=confidence,
        level_error=sigma,
        terms=terms,
        carried_by=carried,
        capacity=cap,
        request_speedup=request,
        assumptions=tuple(assumptions),
        reasons=tuple(reasons),
        throughput_speedup=throughput,
        decode_speedup=decode,
    )


def _best_k(inputs: DecisionInputs, model: _Model, k: int, length: float,
            steps_here: tuple[float, float, float, float], demand: float,
            waiting: float) -> tuple[KChoice, tuple[KChoice, ...]]:
    """The k′ in 1..k_max (or k) with the highest speedup at this load (k′ = 0, S = 1, when none
    beats it; a longer k′ must beat a shorter one by LONGER_K_MARGIN), and every k′ priced;
    `steps_here` are k's own steps at this load."""
    choice = KChoice(0, 1.0, 1.0, False)
    priced: list[KChoice] = []
    lengths = LengthsAtK(inputs.rates, inputs.length, inputs.k)
    for candidate in range(1, (inputs.k_max or k) + 1):
        estimate = lengths.at(candidate) if candidate != k else (length, False)
        if estimate is None:
            continue
        value = _speedup(steps_here, estimate[0]) if candidate == k else \
            model.speedup(demand, waiting, candidate, estimate[0])
        priced.append(KChoice(candidate, estimate[0], value, estimate[1]))
        if better_k(value, choice.speedup, choice.k):
            choice = priced[-1]
    # the k running stays the best where the one chosen does not beat it by the margin either
    current = next((c for c in priced if c.k == k), None)
    if current is not None and choice.k != k and not better_k(choice.speedup, current.speedup, current.k):
        choice = current
    return choice, tuple(priced)


def _request_speedup(inputs: DecisionInputs, expected: float, plain_here: float) -> float | None:
    """The end-to-end speedup of a request, its prefill included (None without its mean shape)."""
    if not (inputs.prompt_tokens and inputs.output_tokens):
        return None
    prefill = prefill_time_s(inputs.step_model, inputs.prompt_tokens)
    draft_prefill = inputs.draft.prefill_time_s(inputs.prompt_tokens, prefill)
    prefills = prefills_waited_out(inputs.running, inputs.prefill_apart)
    return request_speedup(expected, plain_here, inputs.prompt_tokens, inputs.output_tokens, prefills * prefill,
                           prefills * draft_prefill)


def figures_priced_everywhere(inputs: DecisionInputs) -> bool:
    """Whether every step time that only the figures (`decide(..., figures=True)`) price is positive
    and finite, so that working them out cannot fail: a hinge of finite terms with a positive base
    and no negative cost, a finite context, and a lookup drafter or a finite, non-negative draft
    ratio. The crossover prices batches 1 to max_batch and the best k every k′ up to k_max, where the
    decision itself prices only the load: a step-time model that fails out there fails the whole
    decision (said as such), which the decision without its figures would not see."""
    hinge = _hinge_terms(inputs.step_model)
    if hinge is None:
        return False
    base, knee, slope, kv, per_token = hinge
    if not (0.0 < base < math.inf and math.isfinite(knee) and 0.0 <= slope < math.inf and 0.0 <= kv < math.inf
            and 0.0 <= per_token < math.inf):
        return False
    context = inputs.context_per_sequence
    if type(context) is not float or not 0.0 <= context < math.inf:
        return False
    draft = inputs.draft
    if type(draft) is not DraftPricing:
        return False
    return draft.kind == "lookup" or (draft.kind == "ratio" and 0.0 <= draft.ratio < math.inf)


def decide_many(inputs: DecisionInputs, batches: Sequence[float]) -> list[float]:
    """The expected speedup at each batch (no one waiting): sweep's predicted curve."""
    if inputs.length is None:
        raise ValueError("a speedup curve needs an acceptance length")
    model = _model(inputs)
    length = min(inputs.length, _positions(inputs, inputs.k))
    return [model.speedup(float(b), 0.0, int(inputs.k), length) for b in batches]


def speedup_function(inputs: DecisionInputs):
    """S(b, k′, L) for this configuration with no one waiting: what a schedule by batch size reads."""
    model = _model(inputs)

    def at(batch: float, k: int, length: float) -> float:
        return model.speedup(float(batch), 0.0, int(k), float(length))

    return at

