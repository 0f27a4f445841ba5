"""The speculation schedule by batch size for this node, ready to paste into vLLM (the command is
`specwatch.commands.tune`).

vLLM (0.26+) takes `speculative_config.num_speculative_tokens_per_batch_size = [[start, end, k], ...]`
(inclusive ranges from batch size 1; k = 0 turns speculation off there). specwatch has what it takes
to fill it in: the per-position acceptance (L(k′) exactly for k′ ≤ k), the fitted step time T(N, C)
and the draft cost r — the advisor's inputs. The schedule itself is `model.speculation_schedule`.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

from specwatch import perf
from specwatch.advice.advisor import AdvisorInputs
from specwatch.advice.verdict import OFF, ON, Verdict

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


# TensorRT-LLM's decoding_type for the methods the model prices (its speculative_config).
_TRTLLM_DECODING_TYPE = {"mtp": "MTP", "eagle3": "Eagle3", "eagle": "Eagle", "ngram": "NGram", "draft": "DraftTarget",
                         "medusa": "Medusa"}
# TensorRT-LLM's AUTO speculation turns drafting off above this batch (its blog 7).
TRTLLM_AUTO_LIMIT = 32


def trtllm_knobs(ranges: list[list[int]], method: str | None, max_batch: int) -> dict[str, Any]:
    """The schedule ([[start, end, k], ...], inclusive, from batch 1) as TensorRT-LLM's own knobs.

    - `draft_len_schedule` maps a batch-size threshold to the draft length used from that batch up
      (tensorrt_llm/llmapi/llm_args.py: {1: 4, 4: 2, 8: 0} drafts 4 from batch 1, 2 from 4, none
      from 8); it must map batch 1 to max_draft_len, the longest draft: where the schedule wants a
      shorter one at batch 1, batch 1 alone drafts the longest and the shorter one starts at 2;
    - `max_concurrency` (the simpler knob, exclusive with the schedule): speculation off above it,
      where the schedule turns it off once and for all;
    - how TensorRT-LLM's AUTO mode (off above batch 32) compares with where it stops paying here."""
    longest = max((k for _start, _end, k in ranges), default=0)
    schedule: dict[int, int] = {}
    for start, end, k in ranges:
        if start == 1 and k != longest:
            schedule[1] = longest  # TensorRT-LLM's rule; batch 1 alone departs from the schedule
            if end < 2:
                continue
            start = 2
        if not schedule or list(schedule.values())[-1] != k:
            schedule[start] = k
    first_k = longest
    raised = bool(ranges) and ranges[0][2] != longest
    off_from = next((start for start, _end, k in ranges if k == 0), None)
    stays_off = off_from is not None and all(k == 0 for start, _end, k in ranges if start >= off_from)
    max_concurrency = off_from - 1 if stays_off and off_from > 1 else None
    decoding_type = _TRTLLM_DECODING_TYPE.get(method or "", "<your decoding_type>")
    yaml = ["speculative_config:", f"  decoding_type: {decoding_type}", f"  max_draft_len: {first_k}",
            "  draft_len_schedule:"] + [f"    {start}: {k}" for start, k in schedule.items()]
    notes = []
    if first_k == 0:
        notes.append("speculation does not pay at batch 1 here: leave it off (no draft_len_schedule)")
    if raised and first_k:
        notes.append(f"batch 1 drafts {first_k}, not the schedule's {ranges[0][2]}: TensorRT-LLM maps batch 1 to "
                     "max_draft_len, the longest draft")
    if off_from is None:
        auto = (f"TensorRT-LLM's AUTO mode turns speculation off above batch {TRTLLM_AUTO_LIMIT}; here it pays "
                f"at every batch up to {max_batch}: AUTO gives it up early")
    elif off_from - 1 > TRTLLM_AUTO_LIMIT * 1.25 or off_from - 1 < TRTLLM_AUTO_LIMIT / 1.25:
        auto = (f"TensorRT-LLM's AUTO mode turns speculation off above batch {TRTLLM_AUTO_LIMIT}; here it "
                f"stops paying above batch {off_from - 1}: use this schedule or max_concurrency instead")
    else:
        auto = (f"TensorRT-LLM's AUTO mode (off above batch {TRTLLM_AUTO_LIMIT}) is close to this node's "
                f"crossover (speculation stops paying above batch {off_from - 1})")
    notes.append(auto)
    return {"draft_len_schedule": {str(b): k for b, k in schedule.items()}, "max_draft_len": first_k,
            "max_concurrency": max_concurrency, "decoding_type": decoding_type, "yaml": "\n".join(yaml),
            "notes": notes}


def tune_report(
    inputs: AdvisorInputs,
    *,
    observed_batch: tuple[float, float] | None,
    k_max: int | None = None,
    max_batch: int = 256,
    margin: float = perf.SCHEDULE_MARGIN,
    source: str = "",
    engine: str | None = None,
    shown: Verdict | None = None,
) -> dict[str, Any]:
    """The schedule and its evidence, as the specwatch.tune/1 object (pure). Every speedup in it is
    the shared decision's (`specwatch.perf.decide`), the one check and watch show. `shown`: the
    verdict watch's or replay's banner shows for the same data (its figures steadied over the last
    minute), which the report quotes and, where the schedule at the running batch points the other
    way, says why."""
    decision_inputs = inputs.decision_inputs(length=perf.length_at_k(inputs.per_position, inputs.k).length
                                             if inputs.per_position else None)
    schedule = perf.speculation_schedule(
        inputs.step_model, inputs.per_position, inputs.draft_ratio, inputs.context_per_sequence,
        k_max=k_max, max_batch=max_batch, current_k=inputs.k, observed_batch=observed_batch, margin=margin,
        speedup_at=perf.speedup_function(decision_inputs),
    )
    try:
        # at the running batch, the best k searched as far as the schedule's (the decision's by-k sweep)
        now = perf.decide(dataclasses.replace(decision_inputs, k_max=schedule.k_max or None)) \
            if decision_inputs.length is not None else None
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
    banner = _banner(shown, schedule.entries, inputs.running, now.expected_speedup if now else None)
    if banner is not None and banner.get("note"):
        notes.append(banner["note"])
    trtllm = trtllm_knobs(schedule.entries, inputs.method, max_batch) if engine == "trtllm" else None
    return {
        "schema": TUNE_SCHEMA,
        "source": source,
        "engine": engine,
        # TensorRT-LLM's own knobs for the same schedule, for a trtllm-serve target
        "trtllm": trtllm,
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
        # the speedup at each k at the running batch, and the k chosen there (predict's, for the same inputs)
        "by_k": _by_k(now, inputs.running),
        "banner": banner,  # what watch and replay show for the same data
        "notes": notes,
        "validation": None,
    }


def _by_k(now: perf.Decision | None, running: float) -> dict[str, Any] | None:
    if now is None or not now.by_k:
        return None
    best = now.best_k.k if now.best_k else None
    return {"running": running, "best_k": best,
            "speedups": [{"k": c.k, "length": round(c.length, 4), "speedup": round(c.speedup, 4),
                          "extrapolated": c.extrapolated} for c in now.by_k],
            "words": perf.by_k_words(now.by_k, best or 0, "per-position rates")}


def _banner(shown: Verdict | None, entries: list[list[int]], running: float,
            last_speedup: float | None) -> dict[str, Any] | None:
    """The banner's verdict beside the schedule: its state and figure, and a note where the schedule
    at the running batch says the opposite (the schedule follows the last evaluation, the banner
    changes only once the minute's evidence confirms it)."""
    if shown is None:
        return None
    batch = max(1, round(running))
    k_here = next((k for start, end, k in entries if start <= batch <= end), None)
    out: dict[str, Any] = {"speculation": shown.speculation, "expected_speedup": shown.expected_speedup,
                           "running": running, "k_scheduled_here": k_here, "note": None}
    schedule_on = None if k_here is None else k_here > 0
    banner_on = {ON: True, OFF: False}.get(shown.speculation)
    if schedule_on is not None and banner_on is not None and schedule_on != banner_on:
        last = f" ({last_speedup:.2f}×)" if last_speedup is not None else ""
        out["note"] = (f"watch and replay show {shown.speculation.upper()} for the same data: the schedule follows "
                       f"the last evaluation{last}, the banner the last minute's evidence, and it has not yet "
                       f"confirmed a change; the schedule {'drafts' if schedule_on else 'turns speculation off'} "
                       f"at {batch} running")
    return out


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
    by_k = report.get("by_k")
    if by_k:
        lines.append("")
        lines.append(f"at {by_k['running']:.0f} running, {by_k['words']}")
    trtllm = report.get("trtllm")
    if trtllm is not None:
        lines.append("")
        lines.append("TensorRT-LLM (the --extra_llm_api_options YAML; draft_len_schedule and max_concurrency "
                     "exclude each other):")
        lines.extend(f"  {line}" for line in trtllm["yaml"].splitlines())
        if trtllm["max_concurrency"] is not None:
            lines.append(f"  or, simpler: max_concurrency: {trtllm['max_concurrency']}")
        lines.extend(f"  - {note}" for note in trtllm["notes"])
    lines.append("")
    for note in report["notes"]:
        lines.append(f"  - {note}")
    if report["validation"] is not None:
        lines.append(f"  - {report['validation']['message']}")
    return "\n".join(lines)
