"""The crossover search in `decide` against searches that trust nothing but S itself: bisection
over the same grid (what the search replaced) and a dense scan of S, on generated configurations
(hinges and datasheet priors, every kind of drafter, KV caps, trees, long contexts), including
ones that never pay, that cross at b = 1, that pay up to MAX_BATCH and curves that are not
monotone."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from specwatch import perf
from specwatch.perf.hardware import lookup, lookup_model
from specwatch.perf import DecisionInputs, HingeParameters, decide
from specwatch.perf.decision import MAX_BATCH, _Model, _positions
from specwatch.perf.speedup import first_fall_through_one

# decide's grid and the precision its bisection had: 48 points, then 34 halvings of a cell
GRID_POINTS = 48
BISECTIONS = 34
# Two searches that each end within 2^-34 of a cell (≤ 16 % of b wide) of the same fall agree to
# about 1e-11 of b; a dense scan to 1e-13.
AGREEMENT = 1e-9
DENSE_POINTS = 2000

_PRIORS = [
    perf.prior_for_model(lookup(gpu), lookup_model(model), tp=tp)
    for gpu, model, tp in (("H100", "Llama-3.1-70B", 8), ("A100-80GB-SXM", "Llama-3.1-8B", 1),
                           ("L4", "Qwen2.5-7B", 1), ("H200", "Mixtral-8x7B", 2), ("MI300X", "Llama-3.1-405B", 8))
]
_DRAFT_PRIOR = perf.prior_for_model(lookup("H100"), lookup_model("Llama-3.2-1B"), tp=1)


def _excess(inputs: DecisionInputs):
    model = _Model(inputs)
    k = int(inputs.k)
    length = min(inputs.length, _positions(inputs, k)) if inputs.tree_tokens else min(inputs.length, k + 1.0)

    def excess(b: float) -> float:
        return model.speedup(b, 0.0, k, length) - 1.0

    return excess


def _bisection_reference(inputs: DecisionInputs) -> float | None:
    """The grid and plain bisection, to 60 halvings. Where S is below 1 at one sequence, the search
    starts at the first grid point where S is back at or above 1 (speedup.Crossover.pays_from; the
    rise's own root lies in the cell before it, where S is below 1 and no fall can be)."""
    excess = _excess(inputs)
    start = 0
    if excess(1.0) < 0:
        start = next((step for step in range(1, GRID_POINTS + 1)
                      if excess(inputs.max_batch ** (step / GRID_POINTS)) >= 0), None)
        if start is None:
            return None
    previous = 1.0 if start == 0 else inputs.max_batch ** (start / GRID_POINTS)
    for step in range(start + 1, GRID_POINTS + 1):
        b = inputs.max_batch ** (step / GRID_POINTS)
        if excess(b) < 0:
            low, high = previous, b
            for _ in range(60):
                middle = 0.5 * (low + high)
                if excess(middle) >= 0:
                    low = middle
                else:
                    high = middle
            return 0.5 * (low + high)
        previous = b
    return None


def _dense_falls(inputs: DecisionInputs) -> list[float]:
    """Every fall of S through 1 on a dense log grid, each bisected: where S truly crosses (where S is
    below 1 at one sequence, the falls after it first rises through 1)."""
    excess = _excess(inputs)
    points = [inputs.max_batch ** (i / DENSE_POINTS) for i in range(DENSE_POINTS + 1)]
    values = [excess(b) for b in points]
    first = next((i for i, v in enumerate(values) if v >= 0), None)
    if first is None:
        return []
    points, values = points[first:], values[first:]
    falls = []
    for (b0, v0), (b1, v1) in zip(zip(points, values), zip(points[1:], values[1:])):
        if v0 >= 0 > v1:
            low, high = b0, b1
            for _ in range(80):
                middle = 0.5 * (low + high)
                if excess(middle) >= 0:
                    low = middle
                else:
                    high = middle
            falls.append(0.5 * (low + high))
    return falls


def _random_inputs(rng: random.Random) -> DecisionInputs:
    if rng.random() < 0.5:
        step = HingeParameters(base_s=rng.uniform(0.004, 0.05), knee=math.exp(rng.uniform(math.log(16), math.log(4096))),
                               slope_s_per_token=rng.uniform(0.0, 1e-4), kv_s_per_token=rng.choice([0.0, rng.uniform(0, 2e-8)]),
                               per_token_s=rng.choice([0.0, rng.uniform(0.0, 3e-5)]))
    else:
        step = rng.choice(_PRIORS)
    k = rng.randint(1, 7)
    draft = rng.choice([
        perf.draft_pricing("ngram"), perf.draft_pricing("eagle"),
        perf.draft_pricing("draft", ratio=rng.uniform(0.0, 0.3)),
        perf.draft_pricing("draft", draft_model=_DRAFT_PRIOR),
    ])
    values: dict = dict(step_model=step, k=k, draft=draft, running=rng.uniform(1, 300),
                        length=rng.uniform(1.0, k + 1.0), context_per_sequence=rng.choice([0.0, rng.uniform(0, 32000)]))
    if rng.random() < 0.3:  # a KV budget that caps the batch (tens to thousands of sequences)
        values.update(kv_budget_bytes=rng.uniform(1e8, 5e10), target_kv_bytes_per_token=rng.uniform(1e4, 4e5))
    if rng.random() < 0.2:
        values["max_running"] = rng.uniform(4, 512)
    if rng.random() < 0.15:
        values["tree_tokens"] = k + 1.0 + rng.uniform(0, 40)
    if rng.random() < 0.15:
        values["fitted_on_speculative_steps"] = True
    if rng.random() < 0.1:
        values["max_batch"] = rng.uniform(2.0, 300.0)
    return DecisionInputs(**values)


def _generated(count: int, seed: int) -> list[DecisionInputs]:
    rng = random.Random(seed)
    return [_random_inputs(rng) for _ in range(count)]


@pytest.mark.parametrize("seed", range(4))
def test_the_crossover_is_the_first_fall_bisection_finds_on_the_same_grid(seed):
    states = set()
    for inputs in _generated(150, seed):
        crossover = decide(inputs).crossover
        reference = _bisection_reference(inputs)
        states.add(crossover.state)
        if reference is None:
            assert crossover.concurrency is None
            continue
        assert crossover.state == "crosses"
        assert crossover.concurrency == pytest.approx(reference, rel=AGREEMENT)
    assert states == {"crosses", "never_pays", "pays_throughout"}  # the generator covers all three


def test_the_crossover_is_where_a_dense_scan_of_s_first_falls_through_one():
    """Against S alone: the first fall on a grid 40 times finer. Curves that rise and fall (not
    monotone) are among the cases; a fall is missed only if S dips below 1 and back within one cell
    of decide's grid (16 % in b)."""
    not_monotone = 0
    for inputs in _generated(120, 11):
        crossover = decide(inputs).crossover
        excess = _excess(inputs)
        falls = _dense_falls(inputs)
        values = [excess(inputs.max_batch ** (i / 200)) for i in range(201)] if falls or excess(1.0) >= 0 else []
        steps = [b - a for a, b in zip(values, values[1:])]
        not_monotone += any(d > 1e-12 for d in steps) and any(d < -1e-12 for d in steps)
        if not falls:
            assert crossover.concurrency is None
        else:
            assert crossover.concurrency == pytest.approx(falls[0], rel=AGREEMENT)
    assert not_monotone > 0  # the generator reaches curves that rise before they fall


def test_edges_never_pays_crosses_at_one_and_pays_to_max_batch():
    flat = HingeParameters(base_s=0.010, knee=64.0, slope_s_per_token=1e-4, kv_s_per_token=0.0, per_token_s=0.0)
    ngram = perf.draft_pricing("ngram")
    # L = 1 with a drafter that costs: S(1) < 1
    costly = DecisionInputs(step_model=flat, k=3, draft=perf.draft_pricing("draft", ratio=0.1), running=1.0, length=1.0)
    assert decide(costly).crossover.state == "never_pays"
    # free drafting, L = 1 exactly: S = 1 up to where b·(k+1) reaches the knee (b = 16), then falls
    at_one = decide(DecisionInputs(step_model=flat, k=3, draft=ngram, running=1.0, length=1.0)).crossover
    assert at_one.state == "crosses" and at_one.concurrency == pytest.approx(16.0, rel=AGREEMENT)
    # a knee beyond MAX_BATCH·(k+1): S ≥ 1 all the way
    far = HingeParameters(base_s=0.010, knee=1e7, slope_s_per_token=1e-4, kv_s_per_token=0.0, per_token_s=0.0)
    assert decide(DecisionInputs(step_model=far, k=3, draft=ngram, running=1.0, length=2.0)).crossover.state \
        == "pays_throughout"
    # crossing just below MAX_BATCH: the verify step leaves the flat part at b = knee / 4
    near = HingeParameters(base_s=0.010, knee=4 * (MAX_BATCH - 1.0), slope_s_per_token=1e-4, kv_s_per_token=0.0,
                           per_token_s=0.0)
    crossing = decide(DecisionInputs(step_model=near, k=3, draft=ngram, running=1.0, length=1.0)).crossover
    assert crossing.concurrency == pytest.approx(MAX_BATCH - 1.0, rel=AGREEMENT)


def test_a_curve_with_two_falls_gives_the_first():
    # S falls through 1, rises above it and falls again: the first fall is the answer
    def excess(b: float) -> float:
        return math.cos(math.log(b) * 1.2) * 0.5 + 0.1

    crossing = first_fall_through_one(excess, MAX_BATCH, GRID_POINTS, BISECTIONS)
    first = math.exp(math.acos(-0.2) / 1.2)
    assert crossing.concurrency == pytest.approx(first, rel=AGREEMENT)


def test_the_search_takes_fewer_evaluations_than_bisection():
    calls = []

    def excess(b: float) -> float:
        calls.append(b)
        return 40.0 / b - 1.0  # S = 40 / b: one smooth fall at 40

    crossing = first_fall_through_one(excess, MAX_BATCH, GRID_POINTS, BISECTIONS)
    assert crossing.concurrency == pytest.approx(40.0, rel=AGREEMENT)
    grid = math.ceil(GRID_POINTS * math.log(40) / math.log(MAX_BATCH))
    assert len(calls) < grid + BISECTIONS // 2


def test_pricing_the_grid_at_once_finds_what_the_point_by_point_scan_finds():
    for inputs in _generated(200, 5):
        model = _Model(inputs)
        k = int(inputs.k)
        length = min(inputs.length, _positions(inputs, k)) if inputs.tree_tokens else min(inputs.length, k + 1.0)
        excess = _excess(inputs)
        if excess(1.0) < 0:
            continue

        def on_grid(grid):
            values = model.speedup_on_grid(grid, k, length)
            assert values is not None  # every generated model takes arrays
            return values - 1.0

        scanned = first_fall_through_one(excess, inputs.max_batch, GRID_POINTS, BISECTIONS)
        priced = first_fall_through_one(excess, inputs.max_batch, GRID_POINTS, BISECTIONS, excess_on_grid=on_grid)
        assert priced.state == scanned.state
        if scanned.concurrency is not None:
            assert priced.concurrency == pytest.approx(scanned.concurrency, rel=1e-12)


def test_a_model_that_takes_no_arrays_is_scanned_point_by_point():
    class ScalarOnly:
        """A step-time model that refuses arrays."""

        def __init__(self, inner):
            self.inner = inner
            self.knee_tokens = inner.knee_tokens

        def step_time(self, n, c=0.0):
            if not isinstance(n, float) and not isinstance(n, int):
                raise TypeError("scalars only")
            return self.inner.step_time(float(n), float(c))

        def confidence(self, n):
            return 1.0

    hinge = HingeParameters(base_s=0.010, knee=64.0, slope_s_per_token=1e-4, kv_s_per_token=0.0, per_token_s=0.0)
    ngram = perf.draft_pricing("ngram")
    plain = decide(DecisionInputs(step_model=hinge, k=3, draft=ngram, running=1.0, length=1.0)).crossover
    scalar = decide(DecisionInputs(step_model=ScalarOnly(hinge), k=3, draft=ngram, running=1.0, length=1.0)).crossover
    assert plain.concurrency == pytest.approx(16.0, rel=AGREEMENT)
    assert scalar.concurrency == pytest.approx(plain.concurrency, rel=AGREEMENT)


@pytest.mark.parametrize("seed", range(3))
def test_a_hinge_written_out_decides_to_the_bit_what_the_generic_model_decides(seed, monkeypatch):
    """decide prices a hinge of plain floats with its step times written out (`_HingeModel`): every
    figure of every decision, and each step it prices, is the generic model's to the last bit."""
    from specwatch.perf import decision

    hinges = [inputs for inputs in _generated(400, 100 + seed) if decision._hinge_terms(inputs.step_model)]
    # a fit of a hinge, requests waiting, a tree, prompts and a k searched past the measured one
    hinges += [replace(inputs, step_model=perf.fit_step_time([perf.StepSample(n, 0.01 + 2e-5 * n, 300.0 * n)
                                                              for n in (4.0, 40.0, 400.0)], inputs.step_model),
                       waiting=5.0, prompt_tokens=900.0, output_tokens=120.0, k_max=inputs.k + 2)
               for inputs in hinges[:60]]
    # a lookup drafter on steps fitted with speculation on (the advisor's n-gram case: its grid is kept)
    hinges += [replace(inputs, draft=perf.draft_pricing("ngram"), fitted_on_speculative_steps=True)
               for inputs in hinges[:80]]
    assert len(hinges) > 200
    written_out = [decide(inputs) for inputs in hinges]
    assert {type(decision._model(inputs)) for inputs in hinges} == {decision._HingeModel}
    for inputs in hinges:
        fast, generic = decision._model(inputs), decision._Model(inputs)
        for b in (1.0, 2, 7.5, 63.0, 333.3, 1024.0):
            for k in {1, inputs.k}:
                assert repr(fast._parts(b, k)) == repr(generic._parts(b, k))
                assert repr(fast.plain(b)) == repr(generic.plain(b))
                if fast.capacity(k).plain is None and fast.capacity(k).speculative is None:
                    assert repr(fast.excess_without_caps(k, 1.7)(b)) == repr(generic.excess_without_caps(k, 1.7)(b))
    monkeypatch.setattr(decision, "_model", decision._Model)
    assert [repr(d) for d in written_out] == [repr(decide(inputs)) for inputs in hinges]
