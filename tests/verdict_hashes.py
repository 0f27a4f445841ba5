"""Digests of every verdict specwatch shows for a recording: the guard for code that only moves.

Each bundled recording, and a synthetic day of an 8-GPU node (benchmarks/bench_recording.py's node,
ramping 1 → 256 → 1 every 20 minutes; shortened here to `DAY_HOURS` so the test stays quick), is
replayed through the dashboard's Monitor (every evaluation explained) and through a headless
timeline's (changes only). The digest covers every field of every shown Verdict at every evaluation
(repr: floats at full precision), so a refactor that changes any figure, word or flag changes it.

    python tests/verdict_hashes.py             # print the digests
    python tests/verdict_hashes.py --write     # store them in tests/data/verdict_hashes.json
    python tests/verdict_hashes.py --hours 24  # the whole day (bench_recording's), printed only

A change that is meant to move verdicts rewrites the file, and its commit says why.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from specwatch.commands.replay import replay_monitor
from specwatch.recording import open_snapshots

ROOT = Path(__file__).resolve().parent.parent
# the day is bench_recording's own (its node and its writer's clock), shortened
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_recording import write_day  # noqa: E402
BUNDLED = sorted((ROOT / "specwatch" / "data").glob("*.swrec"))
GOLDEN = Path(__file__).resolve().parent / "data" / "verdict_hashes.json"
DAY_HOURS = 2.0


def digests(path: Path) -> dict[str, str]:
    """{'shown': every evaluation's shown verdicts, 'changes': the headless timeline's changes}."""
    out = {}
    for name, changes_only in (("shown", False), ("changes", True)):
        header, snapshots = open_snapshots(path)
        monitor = replay_monitor(header, changes_only=changes_only)
        h = hashlib.sha256()
        for snapshot in snapshots:
            due = monitor.evaluates(snapshot)
            changes = monitor.ingest(snapshot)
            if changes_only:
                for change in changes:
                    h.update(repr((change.time, change.url, change.previous, change.verdict)).encode())
            elif due:
                for url, state in sorted(monitor.states.items()):
                    h.update(repr((snapshot.time, url, state.reachable, state.verdict)).encode())
        out[name] = h.hexdigest()
    return out


def all_digests(hours: float = DAY_HOURS) -> dict[str, dict[str, str]]:
    result = {p.name: digests(p) for p in BUNDLED}
    with tempfile.TemporaryDirectory(prefix="specwatch-digests-") as tmp:
        result[f"synthetic-day-{hours:g}h"] = digests(write_day(Path(tmp) / "day.swrec", hours, "verdict digests"))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=DAY_HOURS)
    parser.add_argument("--write", action="store_true", help=f"store them in {GOLDEN.name}")
    args = parser.parse_args()
    result = all_digests(args.hours)
    print(json.dumps(result, indent=2))
    if args.write:
        if args.hours != DAY_HOURS:
            parser.error(f"--write stores the {DAY_HOURS:g} h day the test replays")
        GOLDEN.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
