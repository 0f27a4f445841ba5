"""Ramp legs: how soon the shown verdict (and the advisor's own answer behind it) flips after the
load crosses the crossover of a node law that is not specwatch's model.

    python benchmarks/bench_ramp_legs.py [--dwell 30 60 120 360] [--law sequence shared]

Seven nodes of tests/step_law.py's law (n-gram at three acceptances, a longer context, an H200,
draft models at k = 3 and 5), each ramped a tier at a time through 16 … 512 running and back, and
started cold at the top: 21 legs (tests/ramp_legs.py says when a leg is met). For each dwell (data
seconds a tier) and each law: `sequence`, kernels in sequence as a serving engine runs them (the
GEMMs, then attention; the law the tests use), and `shared`, the earlier law that put every read and
every FLOP of a step in one soft maximum (a step's attention hidden under its GEMMs past the knee).
Prints one JSON object: the legs met by the banner and by the advisor, and the missed legs' words.
It measures decisions, not time, and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ramp_legs import RAMP_NODES, ramp_legs  # noqa: E402

LAWS = {"sequence": True, "shared": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dwell", type=int, nargs="+", default=[30, 60, 120, 360],
                        help="data seconds a tier (default: 30 60 120 360)")
    parser.add_argument("--law", choices=sorted(LAWS), nargs="+", default=["sequence", "shared"])
    args = parser.parse_args()
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


if __name__ == "__main__":
    raise SystemExit(main())
