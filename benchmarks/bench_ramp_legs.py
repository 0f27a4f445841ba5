"""Ramp legs: how soon the shown verdict (and the advisor's own answer behind it) flips after the
load crosses the crossover of a node law that is not specwatch's model.

    python benchmarks/bench_ramp_legs.py [--dwell 30 60 120 360] [--law sequence shared]
    python benchmarks/bench_ramp_legs.py --noisy [--seeds 5] [--dwell 60] [--hold 600] [--json]

Eight nodes of tests/step_law.py's law (n-gram at three acceptances, a longer context, an H200,
draft models at k = 3 and 5, a 0.5B draft at k = 5 on an A10G), each ramped a tier at a time
through 16 … 512 running and back, and started cold at the top: 24 legs (tests/ramp_legs.py says when a leg is met). For each dwell (data
seconds a tier) and each law: `sequence`, kernels in sequence as a serving engine runs them (the
GEMMs, then attention; the law the tests use), and `shared`, the earlier law that put every read and
every FLOP of a step in one soft maximum (a step's attention hidden under its GEMMs past the knee).
Prints one JSON object: the legs met by the banner and by the advisor, and the missed legs' words.
It measures decisions, not time, and asserts nothing.

--noisy: the same three legs a node (24 a seed), a leg held at the crossover and a start at low
load, on tests/step_law.py's `generate_noisy` (its docstring says
what is drawn: Poisson arrivals holding each tier's mean running, request lengths, each request's
own acceptance, each draft's accepted count, step-time noise, scrape jitter), once per seed (seeds
0 … N−1; each leg its own stream), kernels in sequence, one dwell (the first given, default 60 s):
- per node, the legs whose banner (the shown verdict) and whose advisor answer (before the
  banner's confirmation) flip within one tier of the law's crossover, out of 3 × seeds, and totals;
- the cold start at the top: data seconds from the first Snapshot to the first committed banner
  (on or off), median and max per node; the same for the round trip's fresh start at 16 running;
- the same for a fresh start at 2 running (one dwell long), where a window holds few drafts;
- fresh-start reversals: a start whose first on/off is the opposite word by the end of its first
  tier, at the same load (at the top for the cold start, at 16 running for the round trip's start,
  at 2 for the low start);
- held at the crossover: `--hold` seconds (default 600) at the tier nearest the law's crossover,
  the banner's changes (unknown not counted), the most in any 5 minutes (the issue's bound: 1);
- calibration: every evaluation whose banner is on or off, binned by its confidence, and the share
  right (on where the law's speedup at the tier wanted then is above 1, off where below); again
  without the tiers within 5 % of parity and the first 30 s after a load change, and where the
  wrong calls fall; again with each situation (a node, seed, leg and stay at one load) weighing one,
  shared by its calls, with and without the legs held ten minutes at the crossover.
Prints a table (stderr with --json, which prints one JSON object on stdout). The shares come from
one run: seeded and reproducible against the same specwatch, but 5 seeds are 15 legs a node, so a
node's share moves by a leg (7 points) on another seed set; read the totals, and the misses' words.
It asserts nothing (the pass rate is not a test's), and times data seconds, not the machine's: the
whole run, 5 seeds, takes a minute or two on two shared cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ramp_legs import LOW_START_TIER, RAMP_NODES, TIERS, calibration, noisy_legs, ramp_legs  # noqa: E402

LAWS = {"sequence": True, "shared": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dwell", type=int, nargs="+", default=[30, 60, 120, 360],
                        help="data seconds a tier (default: 30 60 120 360)")
    parser.add_argument("--law", choices=sorted(LAWS), nargs="+", default=["sequence", "shared"])
    parser.add_argument("--noisy", action="store_true", help="the legs on generate_noisy's simulated traffic")
    parser.add_argument("--seeds", type=int, default=5, help="--noisy: seeds 0 … N−1 (default 5)")
    parser.add_argument("--hold", type=int, default=600,
                        help="--noisy: seconds held at the tier nearest the crossover (default 600)")
    parser.add_argument("--json", action="store_true", help="--noisy: one JSON object on stdout")
    args = parser.parse_args()
    if args.noisy:
        return noisy(args.seeds, args.dwell[0] if args.dwell != parser.get_default("dwell") else 60,
                     args.hold, args.json)
    out = {}
    for law in args.law:
        for dwell in args.dwell:
            legs = [leg for name in RAMP_NODES for leg in ramp_legs(name, dwell, LAWS[law])]
            out[f"{law}/{dwell}s"] = {
                "legs": len(legs),
                "shown_met": sum(leg.shown_ok for leg in legs),
                "advisor_met": sum(leg.advisor_ok for leg in legs),
                "shown_missed": [leg.words for leg in legs if not leg.shown_ok],
            }
            print(f"{law:8s} {dwell:4d} s a tier: banner {out[f'{law}/{dwell}s']['shown_met']}/{len(legs)}, "
                  f"advisor {out[f'{law}/{dwell}s']['advisor_met']}/{len(legs)}", file=sys.stderr)
    print(json.dumps(out, indent=1))
    return 0


def _seconds(values: list[float | None]) -> dict:
    known = [v for v in values if v is not None]
    return {"median": round(statistics.median(known), 1) if known else None,
            "max": round(max(known), 1) if known else None, "never": len(values) - len(known)}


def _words(figures: dict) -> str:
    never = f" ({figures['never']} never)" if figures["never"] else ""
    return f"{figures['median']}/{figures['max']}{never}"


NEAR_PARITY = 0.05  # a tier where the law's speedup is within 5 % of 1: a call there is a coin toss
SETTLED_S = 30.0  # a window's length after the load wanted changed


def _table(calls: list, by_situation: bool = False) -> list[dict]:
    return [dict(row, calls=round(row["calls"], 1), right=None if row["right"] is None else round(row["right"], 3))
            for row in calibration(calls, by_situation)]


def _print_table(title: str, table: list[dict], text, noun: str = "calls") -> None:
    print(title, file=text)
    for row in table:
        right = "—" if row["right"] is None else f"{100 * row['right']:.1f} %"
        print(f"  confidence {row['bin']:>7s}: {row['calls']:8,.0f} {noun}, right {right}", file=text)


def noisy(seeds: int, dwell: int, hold: int, as_json: bool) -> int:
    began = time.monotonic()
    nodes, calls, missed_banner, missed_advisor = {}, [], [], []
    for name in RAMP_NODES:
        runs = [noisy_legs(name, seed, dwell, hold) for seed in range(seeds)]
        legs = [leg for run in runs for leg in run.legs]
        calls += [call for run in runs for call in run.calls]
        missed_banner += [leg.words for leg in legs if not leg.shown_ok]
        missed_advisor += [leg.words for leg in legs if not leg.advisor_ok]
        nodes[name] = {
            "crossover": round(runs[0].crossover, 1),
            "held_tier": runs[0].held_tier,
            "legs": len(legs),
            "banner_met": sum(leg.shown_ok for leg in legs),
            "advisor_met": sum(leg.advisor_ok for leg in legs),
            "cold_first_committed_s": _seconds([run.cold_first_committed_s for run in runs]),
            "start_first_committed_s": _seconds([run.start_first_committed_s for run in runs]),
            "low_start_first_committed_s": _seconds([run.low_first_committed_s for run in runs]),
            "cold_first": [f"{run.cold_first}→{run.cold_end_of_first_tier}" for run in runs],
            "cold_reversals": sum(run.cold_reversed for run in runs),
            "start_first": [f"{run.start_first}→{run.start_end_of_first_tier}" for run in runs],
            "start_reversals": sum(run.start_reversed for run in runs),
            "low_start_first": [f"{run.low_first}→{run.low_end}" for run in runs],
            "low_start_reversals": sum(run.low_reversed for run in runs),
            "held_changes": [len(run.held_changes) for run in runs],
            "held_max_changes_per_5_min": max(run.held_max_changes_per_5_min for run in runs),
            "held_change_words": [[f"{t:.0f}s {a}→{b}" for t, a, b in run.held_changes] for run in runs],
        }
    total = sum(n["legs"] for n in nodes.values())
    banner = sum(n["banner_met"] for n in nodes.values())
    advisor = sum(n["advisor_met"] for n in nodes.values())
    clear = [c for c in calls if abs(c.speedup - 1.0) >= NEAR_PARITY and c.since_change_s >= SETTLED_S]
    near = [c for c in calls if abs(c.speedup - 1.0) < NEAR_PARITY]
    lagging = [c for c in calls if abs(c.speedup - 1.0) >= NEAR_PARITY and c.since_change_s < SETTLED_S]
    wrong = [c for c in calls if not c.right]
    out = {
        "seeds": seeds, "dwell_s": dwell, "hold_s": hold, "low_start_tier": LOW_START_TIER, "nodes": nodes,
        "total": {"legs": total, "banner_met": banner, "advisor_met": advisor,
                  "banner_share": round(banner / total, 3), "advisor_share": round(advisor / total, 3),
                  "cold_reversals": sum(n["cold_reversals"] for n in nodes.values()),
                  "start_reversals": sum(n["start_reversals"] for n in nodes.values()),
                  "low_start_reversals": sum(n["low_start_reversals"] for n in nodes.values()),
                  "held_max_changes_per_5_min": max(n["held_max_changes_per_5_min"] for n in nodes.values())},
        "calibration": _table(calls),
        "calibration_clear_and_settled": _table(clear),
        "calibration_by_situation": _table(calls, by_situation=True),
        "calibration_by_situation_without_held": _table([c for c in calls if c.leg != "held"], by_situation=True),
        "wrong_calls": {"all": len(wrong), "near_parity": sum(not c.right for c in near),
                        "within_a_window_of_a_load_change": sum(not c.right for c in lagging),
                        "clear_and_settled": sum(not c.right for c in clear)},
        "banner_missed": missed_banner, "advisor_missed": missed_advisor,
        "seconds": round(time.monotonic() - began, 1),
    }
    text = sys.stderr if as_json else sys.stdout
    print(f"noisy legs: {seeds} seeds, {dwell} s a tier, held {hold} s; first committed: data seconds from the "
          f"first Snapshot to the first on/off (median/max) for the cold start at the top, the round trip's "
          f"start at {TIERS[0]} and a start at {LOW_START_TIER} running; reversals out of {seeds} each", file=text)
    print(f"{'node':22s} {'cross':>5s} {'banner':>7s} {'advisor':>7s} {'cold 1st':>9s} {'start 1st':>9s} "
          f"{'low 1st':>17s} {'rev c/s/l':>9s} {'held':>4s} {'chg/5m':>6s}", file=text)
    for name, n in nodes.items():
        print(f"{name:22s} {n['crossover']:5.0f} {n['banner_met']:3d}/{n['legs']:<3d} "
              f"{n['advisor_met']:3d}/{n['legs']:<3d} {_words(n['cold_first_committed_s']):>9s} "
              f"{_words(n['start_first_committed_s']):>9s} {_words(n['low_start_first_committed_s']):>17s} "
              f"{n['cold_reversals']:3d}/{n['start_reversals']}/{n['low_start_reversals']:<3d} "
              f"{n['held_tier']:4d} {n['held_max_changes_per_5_min']:6d}", file=text)
    t = out["total"]
    print(f"total: banner {banner}/{total} ({100 * banner / total:.0f} %), advisor {advisor}/{total} "
          f"({100 * advisor / total:.0f} %); fresh-start reversals (of {seeds * len(nodes)} each): cold "
          f"{t['cold_reversals']}, start {t['start_reversals']}, low start {t['low_start_reversals']}; held at "
          f"the crossover: at most {t['held_max_changes_per_5_min']} banner change(s) in any 5 minutes", file=text)
    _print_table("calibration, every evaluation whose banner is on or off (right: the law's speedup at the tier "
                 "wanted is > 1 for on, < 1 for off):", out["calibration"], text)
    _print_table(f"  the same, at tiers where the law's speedup is {100 * NEAR_PARITY:.0f} % or more from 1, "
                 f"{SETTLED_S:.0f} s or more after the load changed:", out["calibration_clear_and_settled"], text)
    _print_table("  each situation (a node, seed, leg and stay at one load) weighing one, shared by its calls "
                 "(the calls of one stay share its window and its fit: they are not independent):",
                 out["calibration_by_situation"], text, "situations")
    _print_table("  the same without the legs held ten minutes at the crossover tier:",
                 out["calibration_by_situation_without_held"], text, "situations")
    w = out["wrong_calls"]
    print(f"wrong calls: {w['all']}; at tiers within {100 * NEAR_PARITY:.0f} % of parity {w['near_parity']}, "
          f"within {SETTLED_S:.0f} s of a load change {w['within_a_window_of_a_load_change']}, otherwise "
          f"{w['clear_and_settled']}", file=text)
    for words in missed_banner:
        print(f"  banner missed: {words}", file=text)
    for words in missed_advisor:
        print(f"  advisor missed: {words}", file=text)
    for name, n in nodes.items():
        for seed, changes in enumerate(n["held_change_words"]):
            if changes:
                print(f"  held {name} seed {seed}: {', '.join(changes)}", file=text)
    print(f"{out['seconds']} s", file=text)
    if as_json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
