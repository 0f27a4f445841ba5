"""The headless replay of this tree against another checkout's, measured side by side.

    python benchmarks/bench_replay_against.py BASELINE_CHECKOUT [--hours 24] [--rounds 5]
    python benchmarks/bench_replay_against.py BASELINE_CHECKOUT --instructions --hours 1

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

With --instructions it counts instructions under valgrind's callgrind instead (see instructions()
and benchmarks/README.md): a CPU ratio on a shared machine moves 10-20 % between rounds, a count
about 1 %.

Needs two idle cores (the machine's other load slows both alike only while both run). The child
code uses only what both trees have had since the recording package existed: SyntheticNode,
generate, ramp, RecordingWriter, open_snapshots, Monitor, advisor_config; and the Monitor as that
tree's `replay --headless` builds it (`changes_only` where it has it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# Run in each tree: `write PATH HOURS` writes the synthetic recording; `replay PATH EVERY` replays it
# through a Monitor evaluating every EVERY seconds of data time and prints its CPU time. Both first print the specwatch they imported.
CHILD = r"""
import json, os, sys, time
import specwatch
if os.environ.get("BENCH_SWITCH_INTERVAL_S"):
    sys.setswitchinterval(float(os.environ["BENCH_SWITCH_INTERVAL_S"]))
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
    import itertools
    wall, cpu = time.perf_counter(), time.process_time()
    header, snapshots = open_snapshots(sys.argv[2])
    # as each tree's `replay --headless` reads it: a tree whose Monitor can leave the evaluations that
    # change nothing unexplained does so there
    import inspect
    headless = {"changes_only": True} if "changes_only" in inspect.signature(Monitor).parameters else {}
    monitor = Monitor(window_s=30.0, advisor_config=advisor_config(None, header.advisor),
                      evaluate_every_s=float(sys.argv[3]), **headless)
    # `replay PATH EVERY [LIMIT]` stops after LIMIT Snapshots (0: the imports and the set-up alone);
    # `read PATH EVERY [LIMIT]` makes the same Monitor (the same set-up) but only reads the Snapshots
    limit = int(sys.argv[4]) if len(sys.argv) > 4 else None
    changes = 0
    for snapshot in itertools.islice(snapshots, limit):
        if sys.argv[1] == "replay":
            changes += len(monitor.ingest(snapshot))
    print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                      "changes": changes}), flush=True)
"""

# The instruction count of a child run under valgrind's callgrind, from its summary line.
COLLECTED = re.compile(r"Collected : (\d+)")


def start(tree: Path, *args: str, counted: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", CHILD, *args]
    if counted:  # every instruction the child runs, its inflating thread's included
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command]
        env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
        # The GIL changes hands every 5 ms of wall time (the inflating thread asks for it): under
        # valgrind, 50 times slower and sharing the machine, how often it does, and the instructions
        # spent handing it over, follow the machine's load (4 % of a reading's count between two runs
        # of the same tree). Handed over only when the main thread waits, they do not.
        env["BENCH_SWITCH_INTERVAL_S"] = "1000"
    return subprocess.Popen(command, cwd=tree, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(child: subprocess.Popen[str], tree: Path) -> dict:
    out, err = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"the child in {tree} failed ({child.returncode}):\n{err}")
    first, *rest = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    imported = Path(first["specwatch"]).resolve()
    if not imported.is_relative_to(tree):
        raise SystemExit(f"the child meant for {tree} imported {imported}: an installed specwatch took "
                         "precedence over PYTHONPATH, so the two trees would not differ")
    result = dict(rest[-1])
    collected = COLLECTED.search(err)
    if collected:
        result["instructions"] = int(collected.group(1))
    return result


def together(trees: list[Path], args: list[list[str]], counted: bool = False) -> list[dict]:
    children = [start(tree, *a, counted=counted) for tree, a in zip(trees, args)]
    return [finish(child, tree) for child, tree in zip(children, trees)]


def instructions(trees: list[Path], paths: list[Path], every: list[float]) -> dict:
    """Each tree's replay counted in instructions under callgrind: the replay, the reading alone and
    the set-up alone (imports, opening the file, making the Monitor), each tree's run beside the
    other's. The replay's instructions are the replay's count less the set-up's, the Monitor's the
    replay's less the reading's. Unlike CPU time, a count does not move with the machine's other
    load: a change of 1 % shows, where CPU time on a shared machine moves 10-20 % from run to run."""
    counts: list[dict[str, int]] = [{}, {}]
    changes = [0, 0]
    for mode, limit in (("setup", "0"), ("read", ""), ("replay", "")):
        child_mode = "read" if mode == "read" else "replay"
        runs = together(trees, [[child_mode, str(p), str(e), *([limit] if limit else [])]
                                for p, e in zip(paths, every)], counted=True)
        for i, run in enumerate(runs):
            if "instructions" not in run:
                raise SystemExit("valgrind printed no instruction count")
            counts[i][mode] = run["instructions"]
            if mode == "replay":
                changes[i] = run["changes"]
    parts = []
    for c in counts:
        replay, read = c["replay"] - c["setup"], c["read"] - c["setup"]
        parts.append({"replay": replay, "read": read, "monitor": replay - read, "setup": c["setup"]})
    this, base = parts
    return {
        "instructions_millions": {"this": {k: round(v / 1e6, 1) for k, v in this.items()},
                                  "baseline": {k: round(v / 1e6, 1) for k, v in base.items()}},
        "instruction_ratios": {k: round(this[k] / base[k], 3) for k in ("replay", "read", "monitor")},
        "changes": changes[0], "baseline_changes": changes[1],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="a checkout of the tree to compare against")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--evaluate-every", type=float, default=5.0, metavar="SECONDS",
                        help="this tree's cadence in seconds of data time (default 5, the Monitor's): what a "
                             "coarser cadence would buy, against the baseline at --baseline-evaluate-every")
    parser.add_argument("--baseline-evaluate-every", type=float, default=5.0, metavar="SECONDS")
    parser.add_argument("--instructions", action="store_true",
                        help="count each replay's instructions under valgrind's callgrind instead of timing "
                             "it (about 50 times slower: give --hours 1)")
    args = parser.parse_args()
    this, baseline = HERE, args.baseline.resolve()
    if this == baseline:
        parser.error("the baseline is this tree")
    if args.rounds < 1 or args.hours <= 0 or min(args.evaluate_every, args.baseline_evaluate_every) < 0:
        parser.error("--rounds must be at least 1, --hours above 0 and the cadences 0 (every Snapshot) or more")
    if not (baseline / "specwatch" / "__init__.py").is_file():
        parser.error(f"{baseline} is not a specwatch checkout")
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on PATH (Debian: apt install valgrind)")
    trees = [this, baseline]
    every = [args.evaluate_every, args.baseline_evaluate_every]
    with tempfile.TemporaryDirectory(prefix="specwatch-replay-against-") as folder:
        paths = [Path(folder) / "this.swrec", Path(folder) / "baseline.swrec"]
        together(trees, [["write", str(p), str(args.hours)] for p in paths])
        measured = instructions(trees, paths, every) if args.instructions else timed(trees, paths, every, args.rounds)
    print(json.dumps({"hours": args.hours, "baseline": str(baseline), "evaluate_every_s": args.evaluate_every,
                      "baseline_evaluate_every_s": args.baseline_evaluate_every, **measured}, indent=2))
    return 0


def timed(trees: list[Path], paths: list[Path], every: list[float], count: int) -> dict:
    """`count` rounds of both trees' replays at once, in alternating start order: each round's CPU
    seconds and ratio, and their medians."""
    rounds = []
    for i in range(count):
        order = [0, 1] if i % 2 == 0 else [1, 0]
        results = together([trees[j] for j in order], [["replay", str(paths[j]), str(every[j])] for j in order])
        this_run, base_run = (results[0], results[1]) if order == [0, 1] else (results[1], results[0])
        rounds.append({"cpu_s": round(this_run["cpu_s"], 2), "baseline_cpu_s": round(base_run["cpu_s"], 2),
                       "ratio": round(this_run["cpu_s"] / base_run["cpu_s"], 3),
                       "changes": this_run["changes"], "baseline_changes": base_run["changes"]})
    return {
        "rounds": rounds,
        "median_ratio": round(statistics.median(r["ratio"] for r in rounds), 3),
        "median_cpu_s": round(statistics.median(r["cpu_s"] for r in rounds), 2),
        "median_baseline_cpu_s": round(statistics.median(r["baseline_cpu_s"] for r in rounds), 2),
    }

if __name__ == "__main__":
    sys.exit(main())
