"""Ramp legs on tests/step_law.py's law (test-only): how soon the shown verdict, and the advisor's
own answer behind it, flip after the load crosses the law's crossover.

Eight nodes of the law (n-gram at three acceptances, a longer context, an H200, draft models at
k = 3 and 5, and a 0.5B draft at k = 5 on an A10G, whose long requests make the running count
noisy and whose steps at the top tiers hold more tokens than vLLM's default budget on that GPU),
each ramped through TIERS a tier at a time (up to the top and down again) and started cold at the
top: three legs a node, 24 in all. A leg is met when its flip lands within one tier of
the law's own: OFF on the way up at the first tier past the crossover or one either side, ON on the
way down and from the cold start at the last tier below it or one either side (and the cold start's
first decided answer OFF). Used by tests/test_verdict_under_load.py (a minute a tier) and
benchmarks/bench_ramp_legs.py (other dwells, and the earlier shared-roofline law).

`noisy_legs` runs the same legs on step_law.generate_noisy's simulated traffic (Poisson arrivals,
request lengths and acceptance drawn per request, scrape jitter) for one seed, with a leg held at
the tier nearest the crossover (its banner changes), a fresh start at low load, the data seconds to
each fresh start's first committed verdict, and every on/off evaluation's confidence and whether the
law agrees (`calibration`). benchmarks/bench_ramp_legs.py --noisy reports them; no test asserts
their pass rate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specwatch.advice import shown
from specwatch.advice.advisor import AdvisorConfig
from specwatch.advice.monitor import Monitor
from specwatch.perf.hardware import lookup_model
from step_law import A10G, LLAMA_1B, QWEN_05B, Gpu, LawNode, Noise, generate, generate_noisy, tiers_load, true_crossover

TIERS = [16, 32, 64, 96, 128, 192, 256, 384, 512]
H200_LAW = Gpu(name="NVIDIA H200", bandwidth=4.8e12 * 0.85)
_NGRAM = AdvisorConfig(method="ngram", model=lookup_model("Llama-3.1-8B"))
_DRAFT = AdvisorConfig(method="draft_model", draft_params=LLAMA_1B.params, model=lookup_model("Llama-3.1-8B"))
RAMP_NODES: dict[str, tuple[LawNode, AdvisorConfig]] = {
    "ngram": (LawNode(per_position=(0.45, 0.25, 0.12, 0.05)), _NGRAM),
    "ngram_high_acceptance": (LawNode(per_position=(0.55, 0.35, 0.2, 0.1)), _NGRAM),
    "ngram_low_acceptance": (LawNode(per_position=(0.35, 0.15, 0.06, 0.02)), _NGRAM),
    "ngram_1200_context": (LawNode(per_position=(0.35, 0.15, 0.06, 0.02), context_per_sequence=1200.0,
                                   kv_capacity_tokens=1.5e6), _NGRAM),
    "ngram_h200": (LawNode(gpu=H200_LAW, per_position=(0.45, 0.25, 0.12, 0.05)), _NGRAM),
    "draft_k3": (LawNode(draft=LLAMA_1B, k=3, per_position=(0.6, 0.4, 0.25)), _DRAFT),
    "draft_k5": (LawNode(draft=LLAMA_1B, k=5, per_position=(0.75, 0.55, 0.4, 0.28, 0.18)), _DRAFT),
    "a10g_draft_k5": (LawNode(gpu=A10G, draft=QWEN_05B, k=5, per_position=(0.7, 0.5, 0.35, 0.22, 0.12)),
                      AdvisorConfig(method="draft_model", draft_params=QWEN_05B.params,
                                    model=lookup_model("Llama-3.1-8B"))),
}


@dataclass(frozen=True)
class Leg:
    words: str
    shown_ok: bool
    advisor_ok: bool  # the advisor's own answer, before the banner's confirmation


class _AdvisorAnswers:
    """The advisor's own answers as the banner is handed them, each second's latest."""

    def __init__(self) -> None:
        self.latest: str | None = None

    def __enter__(self) -> "_AdvisorAnswers":
        self._show = shown.ShownVerdict.show
        outer = self

        def show(self, verdict, *args, **kwargs):  # noqa: ANN001 - ShownVerdict.show, wrapped
            outer.latest = verdict.speculation
            return outer._show(self, verdict, *args, **kwargs)

        shown.ShownVerdict.show = show  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        shown.ShownVerdict.show = self._show  # type: ignore[method-assign]


def _answers_each_second(node: LawNode, config: AdvisorConfig, tiers: list[int],
                         dwell_s: int) -> tuple[list[str], list[str | None]]:
    monitor = Monitor(window_s=30.0, advisor_config=config)
    banner, advisor = [], []
    with _AdvisorAnswers() as answers:
        for snap in generate(node, tiers_load(tiers, dwell_s)):
            monitor.ingest(snap)
            banner.append(monitor.states[node.url].verdict.speculation)
            advisor.append(answers.latest)
    return banner, advisor


def _legs(name: str, crossover: float, dwell_s: int, round_trip_answers: tuple[list, list],
          cold_answers: tuple[list, list], label: str = "") -> list[Leg]:
    """The up, down and cold-start legs judged from each second's answers (banner, advisor) of a round
    trip through TIERS and of a cold start at its top."""
    above = TIERS.index(next(t for t in TIERS if t > crossover))

    def near(tier: int | None, of: int) -> bool:
        return tier is not None and abs(TIERS.index(tier) - of) <= 1

    def tier_of(tiers: list[int], second: int | None) -> int | None:
        return None if second is None else tiers[second // dwell_s]

    round_trip = TIERS + TIERS[::-1][1:]
    top = len(TIERS) * dwell_s
    cold_tiers = TIERS[::-1]

    def round_trip_flips(answers: list) -> tuple[int | None, int | None]:
        """The tier turned off in on the way up, and the tier turned on in again after it."""
        off = next((t for t, v in enumerate(answers) if v == "off"), None)
        off_tier = tier_of(round_trip, off) if off is not None and off < top else None
        on = next((t for t, v in enumerate(answers) if v == "on" and t >= max(off or 0, top)), None)
        return off_tier, tier_of(round_trip, on)

    def cold_start(answers: list) -> tuple[str | None, int | None]:
        """The first answer decided, and the tier turned on in."""
        first = next((v for v in answers if v in ("on", "off")), None)
        return first, tier_of(cold_tiers, next((t for t, v in enumerate(answers) if v == "on"), None))

    (banner_up, banner_down), (advisor_up, advisor_down) = map(round_trip_flips, round_trip_answers)
    (banner_first, banner_on), (advisor_first, advisor_on) = map(cold_start, cold_answers)
    words = [f"{name}{label} up: off at {banner_up}, crossing at {crossover:.0f}",
             f"{name}{label} down: on at {banner_down}", f"{name}{label} cold: first {banner_first}, on at {banner_on}"]
    if label:  # the noisy legs say the advisor's own answers too
        words = [f"{words[0]} (advisor {advisor_up})", f"{words[1]} (advisor {advisor_down})",
                 f"{words[2]} (advisor: first {advisor_first}, on at {advisor_on})"]
    return [
        Leg(words[0], near(banner_up, above), near(advisor_up, above)),
        Leg(words[1], near(banner_down, above - 1), near(advisor_down, above - 1)),
        Leg(words[2], banner_first == "off" and near(banner_on, above - 1),
            advisor_first == "off" and near(advisor_on, above - 1)),
    ]


def ramp_legs(name: str, dwell_s: int = 60, kernels_in_sequence: bool = True) -> list[Leg]:
    node, config = RAMP_NODES[name]
    node = dataclasses.replace(node, kernels_in_sequence=kernels_in_sequence)
    return _legs(name, true_crossover(node), dwell_s,
                 _answers_each_second(node, config, TIERS + TIERS[::-1][1:], dwell_s),
                 _answers_each_second(node, config, TIERS[::-1], dwell_s))


# --- noisy legs: the same legs on tests/step_law.py's simulated traffic (generate_noisy) ------------

HOLD_S = 600  # the held-at-the-crossover leg: ten minutes at the tier nearest the crossover
LOW_START_TIER = 2  # a fresh start at a low load, where a window's acceptance is a few requests' own
CHANGE_SPACING_S = 300.0  # the bound: at most one banner change per 5 minutes


@dataclass(frozen=True)
class NoisyRun:
    """One Monitor fed one noisy load: each Snapshot's time, wanted load, shown verdict and the
    advisor's latest answer, and each evaluation's (Snapshot index, shown state, its confidence)."""

    times: list[float]
    load: list[float]
    banner: list[str]
    advisor: list[str | None]
    evaluations: list[tuple[int, str, float]]

    def first_committed(self, end: int | None = None) -> int | None:
        """The index of the first Snapshot whose banner shows on or off (before `end`)."""
        return next((i for i, v in enumerate(self.banner[:end]) if v in ("on", "off")), None)

    def seconds_to(self, index: int | None) -> float | None:
        return None if index is None else self.times[index] - self.times[0]


def noisy_run(node: LawNode, config: AdvisorConfig, load: list[float], seed: int | tuple[int, ...],
              noise: Noise = Noise()) -> NoisyRun:
    monitor = Monitor(window_s=30.0, advisor_config=config)
    times, banner, advisor, evaluations = [], [], [], []
    with _AdvisorAnswers() as answers:
        for i, snap in enumerate(generate_noisy(node, load, seed, noise=noise)):
            evaluated = monitor.evaluates(snap)
            monitor.ingest(snap)
            verdict = monitor.states[node.url].verdict
            times.append(snap.time)
            banner.append(verdict.speculation)
            advisor.append(answers.latest)
            if evaluated:
                evaluations.append((i, verdict.speculation, float(verdict.confidence)))
    return NoisyRun(times, list(load), banner, advisor, evaluations)


@dataclass(frozen=True)
class Call:
    """One evaluation's banner on or off, at a confidence, and whether the law agrees at the load
    wanted then (the tier): on where node.speedup(tier) > 1, off where < 1."""

    state: str
    confidence: float
    right: bool
    leg: str = ""  # round_trip, cold, held, low_start
    tier: float = 0.0
    speedup: float = 1.0  # the law's at the tier
    since_change_s: float = 0.0  # data seconds since the load wanted last changed (or since the start)
    # the situation the call was made in: (node, seed, leg, visit), a visit being one stay at one load
    # wanted. A situation's evaluations share its window and its fit, so they are not independent calls.
    situation: tuple = ()


@dataclass(frozen=True)
class NoisyLegs:
    name: str
    seed: int
    crossover: float
    legs: list[Leg]  # up, down, cold: as `ramp_legs` judges them
    cold_first_committed_s: float | None  # data seconds from the first Snapshot to the first on/off
    start_first_committed_s: float | None  # the same, for the round trip's start at the lowest tier
    cold_first: str | None  # the cold start's first on/off, and the banner at the end of its first tier
    cold_end_of_first_tier: str
    start_first: str | None  # the same for the round trip's start (a fresh start at the lowest tier)
    start_end_of_first_tier: str
    low_first_committed_s: float | None  # and for a fresh start at LOW_START_TIER running, one dwell long
    low_first: str | None
    low_end: str
    held_tier: int
    held_changes: list[tuple[float, str, str]]  # (data seconds, from, to); unknown not counted
    calls: list[Call]

    @staticmethod
    def _reversed(first: str | None, end: str) -> bool:
        return first in ("on", "off") and end in ("on", "off") and end != first

    @property
    def cold_reversed(self) -> bool:
        """The fresh start at the top showed on or off and, still at that load, showed the other."""
        return self._reversed(self.cold_first, self.cold_end_of_first_tier)

    @property
    def start_reversed(self) -> bool:
        return self._reversed(self.start_first, self.start_end_of_first_tier)

    @property
    def low_reversed(self) -> bool:
        return self._reversed(self.low_first, self.low_end)

    @property
    def held_max_changes_per_5_min(self) -> int:
        """The most banner changes in any 5 minutes of the held leg."""
        times = [t for t, _, _ in self.held_changes]
        return max((sum(1 for u in times if t <= u < t + CHANGE_SPACING_S) for t in times), default=0)


def _calls(node: LawNode, leg: str, run: NoisyRun, where: tuple = ()) -> list[Call]:
    changed = [0] * len(run.load)  # the Snapshot at which the load wanted last changed
    visit = [0] * len(run.load)  # and how many changes came before it
    for j in range(1, len(run.load)):
        moved = run.load[j] != run.load[j - 1]
        changed[j] = j if moved else changed[j - 1]
        visit[j] = visit[j - 1] + moved
    calls = []
    for i, state, confidence in run.evaluations:
        if state in ("on", "off"):
            speedup = node.speedup(run.load[i])
            calls.append(Call(state, confidence, speedup > 1.0 if state == "on" else speedup < 1.0, leg,
                              run.load[i], speedup, run.times[i] - run.times[changed[i]],
                              (*where, leg, visit[i])))
    return calls


def held_tier(crossover: float) -> int:
    return min(TIERS, key=lambda t: abs(t - crossover))


def _banner_changes(run: NoisyRun) -> list[tuple[float, str, str]]:
    changes, previous = [], None
    for t, v in zip(run.times, run.banner):
        if v == "unknown":
            continue
        if previous is not None and v != previous:
            changes.append((t - run.times[0], previous, v))
        previous = v
    return changes


def noisy_legs(name: str, seed: int, dwell_s: int = 60, hold_s: int = HOLD_S,
               noise: Noise = Noise()) -> NoisyLegs:
    """The up, down and cold-start legs of `ramp_legs`, a held leg, and a fresh start at
    LOW_START_TIER running for one dwell, on generate_noisy's traffic from `seed`: each run its own
    stream, (seed, the node's place in RAMP_NODES, 0 round trip, 1 cold start, 2 held, 3 low start)."""
    node, config = RAMP_NODES[name]
    crossover = true_crossover(node)
    place = list(RAMP_NODES).index(name)
    round_trip = noisy_run(node, config, tiers_load(TIERS + TIERS[::-1][1:], dwell_s), (seed, place, 0), noise)
    cold = noisy_run(node, config, tiers_load(TIERS[::-1], dwell_s), (seed, place, 1), noise)
    hold = held_tier(crossover)
    held = noisy_run(node, config, tiers_load([hold], hold_s), (seed, place, 2), noise)
    legs = _legs(name, crossover, dwell_s, (round_trip.banner, round_trip.advisor), (cold.banner, cold.advisor),
                 f" seed {seed}")
    low = noisy_run(node, config, tiers_load([LOW_START_TIER], dwell_s), (seed, place, 3), noise)
    calls = [call for leg, run in (("round_trip", round_trip), ("cold", cold), ("held", held), ("low_start", low))
             for call in _calls(node, leg, run, (name, seed))]

    def first(run: NoisyRun) -> str | None:
        index = run.first_committed(dwell_s)
        return None if index is None else run.banner[index]

    return NoisyLegs(
        name=name, seed=seed, crossover=crossover, legs=legs,
        cold_first_committed_s=cold.seconds_to(cold.first_committed()),
        start_first_committed_s=round_trip.seconds_to(round_trip.first_committed()),
        cold_first=first(cold), cold_end_of_first_tier=cold.banner[dwell_s - 1],
        start_first=first(round_trip), start_end_of_first_tier=round_trip.banner[dwell_s - 1],
        low_first_committed_s=low.seconds_to(low.first_committed()), low_first=first(low), low_end=low.banner[-1],
        held_tier=hold, held_changes=_banner_changes(held), calls=calls,
    )


CONFIDENCE_BINS = ((0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0))


def calibration(calls: list[Call], by_situation: bool = False) -> list[dict]:
    """Per confidence bin (the last closed above): the calls, and the share of them that were right.
    Calls below 0.5 are counted in a bin of their own. `by_situation`: each situation (Call.situation)
    weighs one, shared by its calls, and "calls" counts situations (fractions where a situation's calls
    fall in several bins): a ten-minute hold at one load is one situation judged, not 120 calls."""
    weight: dict[tuple, float] = {}
    if by_situation:
        for c in calls:
            weight[c.situation] = weight.get(c.situation, 0.0) + 1.0

    def counted(inside: list[Call]) -> tuple[float, float]:
        if not by_situation:
            return len(inside), sum(c.right for c in inside)
        weights = [1.0 / weight[c.situation] for c in inside]
        return sum(weights), sum(w for w, c in zip(weights, inside) if c.right)

    rows = []
    below = [c for c in calls if c.confidence < CONFIDENCE_BINS[0][0]]
    if below:
        n, right = counted(below)
        rows.append({"bin": f"<{CONFIDENCE_BINS[0][0]:.1f}", "calls": n, "right": right / n})
    for low, high in CONFIDENCE_BINS:
        inside = [c for c in calls if low <= c.confidence < high or (high == 1.0 and c.confidence == 1.0)]
        n, right = counted(inside)
        rows.append({"bin": f"{low:.1f}-{high:.1f}", "calls": n, "right": right / n if inside else None})
    return rows
