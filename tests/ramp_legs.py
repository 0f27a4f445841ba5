"""Ramp legs on tests/step_law.py's law (test-only): how soon the shown verdict, and the advisor's
own answer behind it, flip after the load crosses the law's crossover.

Seven nodes of the law (n-gram at three acceptances, a longer context, an H200, draft models at
k = 3 and 5), each ramped through TIERS a tier at a time (up to the top and down again) and started
cold at the top: three legs a node, 21 in all. A leg is met when its flip lands within one tier of
the law's own: OFF on the way up at the first tier past the crossover or one either side, ON on the
way down and from the cold start at the last tier below it or one either side (and the cold start's
first decided answer OFF). Used by tests/test_verdict_under_load.py (a minute a tier) and
benchmarks/bench_ramp_legs.py (other dwells, and the earlier shared-roofline law).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specwatch.advice import shown
from specwatch.advice.advisor import AdvisorConfig
from specwatch.advice.monitor import Monitor
from specwatch.perf.hardware import lookup_model
from step_law import LLAMA_1B, Gpu, LawNode, generate, tiers_load, true_crossover

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


def ramp_legs(name: str, dwell_s: int = 60, kernels_in_sequence: bool = True) -> list[Leg]:
    node, config = RAMP_NODES[name]
    node = dataclasses.replace(node, kernels_in_sequence=kernels_in_sequence)
    crossover = true_crossover(node)
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

    (banner_up, banner_down), (advisor_up, advisor_down) = map(
        round_trip_flips, _answers_each_second(node, config, round_trip, dwell_s))
    (banner_first, banner_on), (advisor_first, advisor_on) = map(
        cold_start, _answers_each_second(node, config, cold_tiers, dwell_s))
    return [
        Leg(f"{name} up: off at {banner_up}, crossing at {crossover:.0f}", near(banner_up, above),
            near(advisor_up, above)),
        Leg(f"{name} down: on at {banner_down}", near(banner_down, above - 1), near(advisor_down, above - 1)),
        Leg(f"{name} cold: first {banner_first}, on at {banner_on}",
            banner_first == "off" and near(banner_on, above - 1),
            advisor_first == "off" and near(advisor_on, above - 1)),
    ]
