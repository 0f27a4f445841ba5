"""`specwatch tune`: the speculation schedule by batch size for this node, ready to paste into vLLM.

vLLM (0.26+) takes `speculative_config.num_speculative_tokens_per_batch_size = [[start, end, k], ...]`
(inclusive ranges from batch size 1; k = 0 turns speculation off there). specwatch has what it takes
to fill it in: the per-position acceptance (L(k′) exactly for k′ ≤ k), the fitted step time T(N, C)
and the draft cost r — the advisor's inputs. The schedule itself is `model.speculation_schedule`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any, Sequence

from specwatch import perf
from specwatch.advisor import AdvisorInputs

TUNE_SCHEMA = "specwatch.tune/1"

# vLLM's own spellings for the methods the model prices, for the --speculative-config line.
_VLLM_METHOD = {"draft": "draft_model", "ngram": "ngram", "suffix": "suffix", "eagle": "eagle",
                "eagle3": "eagle3", "mtp": "mtp", "medusa": "medusa"}

# Runs vLLM's own validator in an interpreter where vLLM is installed. Reads the schedule as JSON
# from stdin; prints the normalised schedule and the dense lookup's distinct values as JSON.
_VALIDATOR = """
import json, sys
import vllm
from vllm.v1.spec_decode.dynamic.utils import (build_dynamic_sd_schedule_lookup,
                                               validate_and_normalize_dynamic_sd_schedule)
request = json.load(sys.stdin)
try:
    normalised = validate_and_normalize_dynamic_sd_schedule(request["schedule"])
    dense = build_dynamic_sd_schedule_lookup(request["schedule"], request["max_batch"], request["k"])
    print(json.dumps({"ok": True, "version": vllm.__version__, "normalised": [list(e) for e in normalised],
                      "dense": dense[1:]}))
except ValueError as exc:
    print(json.dumps({"ok": False, "version": vllm.__version__, "error": str(exc)}))
"""


def tune_report(
    inputs: AdvisorInputs,
    *,
    observed_batch: tuple[float, float] | None,
    k_max: int | None = None,
    max_batch: int = 256,
    margin: float = perf.SCHEDULE_MARGIN,
    source: str = "",
) -> dict[str, Any]:
    """The schedule and its evidence, as the specwatch.tune/1 object (pure). Every speedup in it is
    the shared decision's (`specwatch.perf.decide`), the one check and watch show."""
    decision_inputs = inputs.decision_inputs(length=perf.length_at_k(inputs.per_position, inputs.k).length
                                             if inputs.per_position else None)
    schedule = perf.speculation_schedule(
        inputs.step_model, inputs.per_position, inputs.draft_ratio, inputs.context_per_sequence,
        k_max=k_max, max_batch=max_batch, current_k=inputs.k, observed_batch=observed_batch, margin=margin,
        speedup_at=perf.speedup_function(decision_inputs),
    )
    try:
        now = perf.decide(decision_inputs) if decision_inputs.length is not None else None
    except ValueError:
        now = None  # the schedule above already stands on the same step times
    top_k = max(schedule.k_max, 1)
    config: dict[str, Any] = {}
    method = _VLLM_METHOD.get(inputs.method or "")
    if method:
        config["method"] = method
    config["num_speculative_tokens"] = max(top_k, max(r.k for r in schedule.ranges))
    config["num_speculative_tokens_per_batch_size"] = schedule.entries
    notes = []
    if schedule.never_pays:
        notes.append(f"speculation does not pay at any batch size from 1 to {max_batch} with k up to {top_k}: "
                     "turn it off")
    if not method:
        notes.append("method unknown (pass --method): add it, and your draft model if any, to the config")
    if not inputs.draft_ratio_known:
        notes.append(f"{perf.UNKNOWN_METHOD_WORDS} (pass --method or --draft-ratio)")
    if inputs.stale_acceptance:
        notes.append("no drafts in the last window: the per-position rates are lifetime figures")
    if any(r.extrapolated for r in schedule.ranges):
        notes.append("ranges marked extrapolated rest on the step-time prior, not on measured steps: "
                     "confirm them with `specwatch sweep` before relying on them")
    notes.append("keep the rest of your --speculative-config (draft model, prompt_lookup_*) as it is; "
                 "vLLM caps each k at num_speculative_tokens")
    return {
        "schema": TUNE_SCHEMA,
        "source": source,
        "schedule": schedule.entries,
        "speculative_config": config,
        "ranges": [r.to_dict() for r in schedule.ranges],
        "inputs": {
            "method": inputs.method,
            "k": inputs.k,
            "k_max": schedule.k_max,
            "max_batch": max_batch,
            "per_position": [round(p, 4) for p in inputs.per_position],
            "draft_ratio": inputs.draft_ratio,
            "context_per_sequence": round(inputs.context_per_sequence, 1),
            "observed_batch": list(observed_batch) if observed_batch else None,
            "step_time_model": inputs.prior_words,
            "knee_tokens": round(inputs.step_model.knee_tokens, 1),
        },
        "never_pays": schedule.never_pays,
        "expected_speedup": now.expected_speedup if now else None,  # at the running batch, as check says
        "notes": notes,
        "validation": None,
    }


def validate_with_vllm(schedule: list[list[int]], k: int, max_batch: int,
                       python: str | None = None) -> dict[str, Any]:
    """Check the schedule with vLLM's own validator: in this interpreter when vLLM imports here,
    else in `python` (an interpreter with vLLM, run without a shell). Never raises."""
    request = json.dumps({"schedule": schedule, "k": k, "max_batch": max_batch})
    interpreter = python
    if interpreter is None:
        try:
            import vllm.v1.spec_decode.dynamic.utils  # noqa: F401
        except Exception:  # noqa: BLE001 - any failure to import means "not available here"
            return {"ok": None, "message": "not validated: vLLM is not installed here (pip install "
                                           "'specwatch[vllm]', or pass --vllm-python)"}
        interpreter = sys.executable
    try:
        r = subprocess.run([interpreter, "-c", _VALIDATOR], input=request, capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": None, "message": f"not validated: could not run {interpreter}: {exc}"}
    try:
        result = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"ok": None, "message": f"not validated: vLLM's validator did not run ({tail[0]})"}
    if result["ok"]:
        result["message"] = f"vLLM {result['version']}'s schedule validator accepts it"
    else:
        result["message"] = f"vLLM {result['version']}'s schedule validator rejects it: {result['error']}"
    return result


def format_tune(report: dict[str, Any]) -> str:
    lines = [f"specwatch tune  {report['source']}"]
    inp = report["inputs"]
    observed = inp["observed_batch"]
    lines.append(
        f"  {inp['method'] or 'method unknown'}, k={inp['k']}, per-position "
        f"[{', '.join(f'{p:.2f}' for p in inp['per_position'])}], r={inp['draft_ratio']:.2f}, "
        f"observed batch {f'{observed[0]:.0f}–{observed[1]:.0f}' if observed else 'none'}"
    )
    lines.append(f"  step time: {inp['step_time_model']} (knee ≈ {inp['knee_tokens']:.0f} tokens per step)")
    lines.append("")
    lines.append(f"schedule: {json.dumps(report['schedule'])}")
    lines.append(f"  --speculative-config '{json.dumps(report['speculative_config'], separators=(',', ':'))}'")
    lines.append("")
    k_now = inp["k"]
    lines.append(f"  {'batch':>9}  {'k':>2}  {'L':>5}  {'vs off':>13}  {'vs k=' + str(k_now):>13}  evidence")
    for r in report["ranges"]:
        batch = f"{r['start']}–{r['end']}"
        vs_off = f"{r['speedup_vs_off'][0]:.2f}–{r['speedup_vs_off'][1]:.2f}×"
        vs_cur = "n/a" if r["speedup_vs_current"] is None else \
            f"{r['speedup_vs_current'][0]:.2f}–{r['speedup_vs_current'][1]:.2f}×"
        mark = " (extrapolated)" if r["extrapolated"] else ""
        lines.append(f"  {batch:>9}  {r['k']:>2}  {r['acceptance_length']:>5.2f}  {vs_off:>13}  {vs_cur:>13}  "
                     f"{r['evidence']}{mark}")
    lines.append("")
    for note in report["notes"]:
        lines.append(f"  - {note}")
    if report["validation"] is not None:
        lines.append(f"  - {report['validation']['message']}")
    return "\n".join(lines)


def add_tune_arguments(p: argparse.ArgumentParser) -> None:
    from specwatch.cli import add_source_arguments

    add_source_arguments(p)
    p.add_argument("--from", dest="from_file", metavar="FILE", help="a recording, instead of a live server")
    p.add_argument("--duration", type=float, default=30.0, metavar="SECONDS",
                   help="how long to watch a live server before answering (default %(default)s)")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                   help="seconds between scrapes of a live server (default %(default)s)")
    p.add_argument("--k-max", type=int, metavar="K", help="largest k to consider (default: the k in use; "
                                                          "larger values are extrapolated)")
    p.add_argument("--max-batch", type=int, default=256, metavar="N",
                   help="largest batch size to schedule, vLLM's max_num_seqs (default %(default)s)")
    p.add_argument("--margin", type=float, default=perf.SCHEDULE_MARGIN, metavar="FRACTION",
                   help="gain a range needs over plain decoding to keep speculation (default %(default)s)")
    p.add_argument("--vllm-python", metavar="PATH", help="an interpreter with vLLM installed, to validate "
                                                         "the schedule with vLLM's own validator")
    p.add_argument("--json", action="store_true", help="print the specwatch.tune/1 object")


def run_tune(args: argparse.Namespace) -> int:
    """Exit 0 with a schedule; 2 when the data cannot support one; 3 when the source cannot be read."""
    from specwatch.advisor import AdvisorConfig
    from specwatch.cli import advisor_config
    from specwatch.monitor import Monitor

    if args.k_max is not None and args.k_max < 1 or args.max_batch < 1:
        print("specwatch tune: --k-max and --max-batch must be at least 1", file=sys.stderr)
        return 3
    try:
        config: AdvisorConfig = advisor_config(args)
    except ValueError as exc:
        print(f"specwatch tune: {exc}", file=sys.stderr)
        return 3
    # Sample the step time at every scrape: tune wants as many measured points as it can get.
    config = AdvisorConfig(**{**config.__dict__, "sample_interval_s": 0.0, "refit_interval_s": 0.0})
    monitor = Monitor(window_s=max(10.0, args.interval * 3), advisor_config=config,
                      evaluate_every_s=0.0)
    if args.from_file:
        problem, url = _feed_recording(monitor, args.from_file)
    else:
        problem, url = asyncio.run(_feed_live(monitor, args))
    if problem:
        print(f"specwatch tune: {problem}", file=sys.stderr)
        return 3
    state = monitor.states.get(url)
    advisor = monitor.advisor_of(url)
    inputs = advisor.last_inputs if advisor else None
    if state is None or inputs is None or not inputs.per_position:
        reason = state.verdict.reasons[0] if state and state.verdict.reasons else "no verdict"
        print(f"specwatch tune: no schedule: the data hold no per-position acceptance ({reason})", file=sys.stderr)
        return 2
    report = tune_report(inputs, observed_batch=advisor.observed_batch, k_max=args.k_max,
                         max_batch=args.max_batch, margin=args.margin, source=args.from_file or url)
    report["validation"] = validate_with_vllm(report["schedule"], report["speculative_config"]
                                              ["num_speculative_tokens"], args.max_batch, args.vllm_python)
    print(json.dumps(report, indent=2) if args.json else format_tune(report))
    return 0


async def _feed_live(monitor: Any, args: argparse.Namespace) -> tuple[str | None, str]:
    from specwatch.cli import _source_settings, gpu_poller
    from specwatch.collectors.vllm import DEFAULT_URL, TokenError, VllmSource
    from specwatch.sources import LiveSource

    urls = args.urls or [DEFAULT_URL]
    if len(urls) > 1:
        return "tune reads one target", urls[0]
    try:
        vllm = VllmSource(urls, **_source_settings(args))
    except (TokenError, ValueError) as exc:
        return str(exc), urls[0]
    url = vllm.targets[0].url
    source = LiveSource(vllm, gpu_poller(args), interval_s=args.interval, gpu_timeout_s=args.timeout)
    deadline = time.monotonic() + args.duration
    try:
        while True:
            snapshot = await source.read()
            monitor.ingest(snapshot)
            target = snapshot.targets[0]
            if not target.ok:
                return target.message, url
            if time.monotonic() >= deadline:
                return None, url
            await asyncio.sleep(args.interval)
    finally:
        await source.aclose()


def _feed_recording(monitor: Any, path: str) -> tuple[str | None, str]:
    from specwatch.recording import RecordingError, read_recording

    try:
        recording = read_recording(path)
    except (OSError, RecordingError) as exc:
        return str(exc), ""
    url = ""
    for snapshot in recording.snapshots:
        monitor.ingest(snapshot)
        if snapshot.targets:
            url = snapshot.targets[0].url
    if not url:
        return f"{path} holds no vLLM readings", url
    return None, url


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - convenience for `python -m`
    p = argparse.ArgumentParser(prog="specwatch tune")
    add_tune_arguments(p)
    return run_tune(p.parse_args(argv))
