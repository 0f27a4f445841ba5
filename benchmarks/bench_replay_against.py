"""The headless replay of this tree against another checkout's, measured side by side.

    python benchmarks/bench_replay_against.py BASELINE_CHECKOUT [--hours 24] [--rounds 5]

A replay's absolute time follows the machine: the same tree replayed the same day in 10.7 s on one
day and 15.3 s on the next on the machine these figures come from. What a change to the replay is
worth is its ratio to the tree before it, measured in the same minutes, which this gives.

Each tree (this one and BASELINE_CHECKOUT, e.g. a `git worktree add` of an older commit) runs in
a child process of this interpreter that imports that tree (PYTHONPATH and working directory set to
it; the child says which specwatch it imported, and a child that imported the other tree is an
error). Each child first writes the benchmark's synthetic recording (bench_recording.py's node:
8 GPUs, n-gram k=4, the load ramping 1 → 256 → 1 every 20 minutes) with its own recorder, so each
tree reads the format it writes. Then, round after round, both replay their recording headless
through their Monitor at the same time, one process per core (start order alternating): each
round's ratio is this tree's CPU time over the baseline's. Prints one JSON object with every round
and the median ratio. It is a benchmark, not a test: it asserts nothing. Both evaluate every 5 s of
data time, as live, unless --evaluate-every (this tree) or --baseline-evaluate-every says otherwise.

Needs two idle cores (the machine's other load slows both alike only while both run). The child
code uses only what both trees have had since the recording package existed: SyntheticNode,
generate, ramp, RecordingWriter, open_snapshots, Monitor, advisor_config; and the Monitor as that
tree's `replay --headless` builds it (`changes_only` where it has it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# Run in each tree: `write PATH HOURS` writes the synthetic recording; `replay PATH EVERY` replays it
# through a Monitor evaluating every EVERY seconds of data time and prints its CPU time. Both first print the specwatch they imported.
CHILD = r"""
import json, sys, time
import specwatch
print(json.dumps({"specwatch": specwatch.__file__}), flush=True)
from specwatch.commands.options import advisor_config
from specwatch.advice.monitor import Monitor
from specwatch.recording import RecordingHeader, RecordingWriter, open_snapshots
if sys.argv[1] == "write":
    from specwatch import perf
    from specwatch.perf.hardware import lookup, lookup_model
    from specwatch.collectors.synthetic import SyntheticNode, generate, ramp
    path, seconds = sys.argv[2], int(float(sys.argv[3]) * 3600)
    node = SyntheticNode(step=perf.prior_for_model(lookup("H100"), lookup_model("Llama-3.1-70B"), tp=8).hinge(),
                         gpus=8, per_position=(0.6, 0.4, 0.25, 0.15))
    cycle = ramp(1, 256, 35)
    load = [cycle[i % len(cycle)] for i in range(seconds)]
    header = RecordingHeader(data="synthetic", notes="benchmark", interval_s=1.0,
                             advisor={"method": "ngram", "model": "Llama-3.1-70B", "tp": 8})
    now = [0.0]
    def clock():
        now[0] += 1.0
        return now[0]
    with RecordingWriter(path, header, overwrite=True, clock=clock) as writer:
        for snapshot in generate(node, load, seed=1):
            writer.write(snapshot)
    print(json.dumps({"written": path}), flush=True)
else:
    wall, cpu = time.perf_counter(), time.process_time()
    header, snapshots = open_snapshots(sys.argv[2])
    # as each tree's `replay --headless` reads it: a tree whose Monitor can leave the evaluations that
    # change nothing unexplained does so there
    import inspect
    headless = {"changes_only": True} if "changes_only" in inspect.signature(Monitor).parameters else {}
    monitor = Monitor(window_s=30.0, advisor_config=advisor_config(None, header.advisor),
                      evaluate_every_s=float(sys.argv[3]), **headless)
    changes = 0
    for snapshot in snapshots:
        changes += len(monitor.ingest(snapshot))
    print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                      "changes": changes}), flush=True)
"""


def start(tree: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=tree, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(child: subprocess.Popen[str], tree: Path) -> dict:
    out, err = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"the child in {tree} failed ({child.returncode}):\n{err}")
    first, *rest = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    imported = Path(first["specwatch"]).resolve()
    if not imported.is_relative_to(tree):
        raise SystemExit(f"the child meant for {tree} imported {imported}: an installed specwatch took "
                         "precedence over PYTHONPATH, so the two trees would not differ")
    return rest[-1]


def together(trees: list[Path], args: list[list[str]]) -> list[dict]:
    children = [start(tree, *a) for tree, a in zip(trees, args)]
    return [finish(child, tree) for child, tree in zip(children, trees)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="a checkout of the tree to compare against")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--evaluate-every", type=float, default=5.0, metavar="SECONDS",
                        help="this tree's cadence in seconds of data time (default 5, the Monitor's): what a "
                             "coarser cadence would buy, against the baseline at --baseline-evaluate-every")
    parser.add_argument("--baseline-evaluate-every", type=float, default=5.0, metavar="SECONDS")
    args = parser.parse_args()
    this, baseline = HERE, args.baseline.resolve()
    if this == baseline:
        parser.error("the baseline is this tree")
    if args.rounds < 1 or args.hours <= 0 or min(args.evaluate_every, args.baseline_evaluate_every) < 0:
        parser.error("--rounds must be at least 1, --hours above 0 and the cadences 0 (every Snapshot) or more")
    if not (baseline / "specwatch" / "__init__.py").is_file():
        parser.error(f"{baseline} is not a specwatch checkout")
    folder = Path(tempfile.mkdtemp(prefix="specwatch-replay-against-"))
    paths = [folder / "this.swrec", folder / "baseline.swrec"]
    trees = [this, baseline]
    together(trees, [["write", str(p), str(args.hours)] for p in paths])
    rounds = []
    for i in range(args.rounds):
        order = [0, 1] if i % 2 == 0 else [1, 0]
        every = [args.evaluate_every, args.baseline_evaluate_every]
        results = together([trees[j] for j in order], [["replay", str(paths[j]), str(every[j])] for j in order])
        this_run, base_run = (results[0], results[1]) if order == [0, 1] else (results[1], results[0])
        rounds.append({"cpu_s": round(this_run["cpu_s"], 2), "baseline_cpu_s": round(base_run["cpu_s"], 2),
                       "ratio": round(this_run["cpu_s"] / base_run["cpu_s"], 3),
                       "changes": this_run["changes"], "baseline_changes": base_run["changes"]})
    for p in paths:
        p.unlink(missing_ok=True)
    folder.rmdir()
    print(json.dumps({
        "hours": args.hours, "baseline": str(baseline), "evaluate_every_s": args.evaluate_every,
        "baseline_evaluate_every_s": args.baseline_evaluate_every, "rounds": rounds,
        "median_ratio": round(statistics.median(r["ratio"] for r in rounds), 3),
        "median_cpu_s": round(statistics.median(r["cpu_s"] for r in rounds), 2),
        "median_baseline_cpu_s": round(statistics.median(r["baseline_cpu_s"] for r in rounds), 2),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
