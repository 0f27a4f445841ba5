"""`--from-bench`: `vllm bench serve --save-result` files give the same report without running anything."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from specwatch.sweep.common import MAX_BENCH_FILE_BYTES, SIDES, SweepFileError
from specwatch.sweep.report import SweepRecord

__all__ = [
    "bench_side",
    "load_bench_dir",
    "load_bench_rounds",
    "record_from_bench",
]


def _number(data: dict, key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _ms(data: dict, key: str) -> float | None:
    value = _number(data, key)
    return None if value is None else value / 1000.0


def bench_side(data: Any, name: str) -> tuple[int, dict[str, Any]]:
    """(concurrency, side figures) from one `vllm bench serve --save-result` object (vllm.md §4).

    Latencies are in ms there and in seconds here. Percentiles other than the median exist only as
    selected with --metric-percentiles (default 99): p95 is null unless the file has it.
    """
    if not isinstance(data, dict):
        raise SweepFileError(f"{name}: not a JSON object")
    concurrency = data.get("max_concurrency")
    if concurrency is None:
        raise SweepFileError(f"{name}: no max_concurrency (run vllm bench serve with --max-concurrency N)")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise SweepFileError(f"{name}: max_concurrency must be a positive integer, got {concurrency!r}")
    missing = [k for k in ("completed", "output_throughput", "median_tpot_ms") if _number(data, k) is None]
    if missing:
        raise SweepFileError(f"{name}: not a vllm bench serve result (missing {', '.join(missing)})")
    completed = int(data["completed"])
    per_position = data.get("spec_decode_per_position_acceptance_rates")
    k = None
    if isinstance(per_position, list) and per_position:
        k = len(per_position)
    elif _number(data, "spec_decode_num_drafts") and _number(data, "spec_decode_draft_tokens"):
        ratio = data["spec_decode_draft_tokens"] / data["spec_decode_num_drafts"]
        k = max(1, round(ratio)) if math.isfinite(ratio) else None  # 5 / 1e-320 is inf
    rate = _number(data, "spec_decode_acceptance_rate")
    total_in = _number(data, "total_input_tokens")
    failed = _number(data, "failed")
    side = {
        "requests_ok": completed,
        "requests_failed": int(failed) if failed is not None else 0,
        "failures": {},
        "output_tokens": int(_number(data, "total_output_tokens") or 0),
        "duration_s": _number(data, "duration"),
        "output_tokens_per_s": _number(data, "output_throughput"),
        "requests_per_s": _number(data, "request_throughput"),
        "ttft_p50_s": _ms(data, "median_ttft_ms"),
        "ttft_p95_s": _ms(data, "p95_ttft_ms"),
        "ttft_p99_s": _ms(data, "p99_ttft_ms"),
        "tpot_p50_s": _ms(data, "median_tpot_ms"),
        "tpot_p95_s": _ms(data, "p95_tpot_ms"),
        "tpot_p99_s": _ms(data, "p99_tpot_ms"),
        "tpot_mean_s": _ms(data, "mean_tpot_ms"),
        "latency_p50_s": _ms(data, "median_e2el_ms"),
        "prompt_tokens_mean": total_in / completed if total_in is not None and completed > 0 else None,
        "first_failure": None,
        "acceptance_length": _number(data, "spec_decode_acceptance_length"),
        "acceptance_rate": None if rate is None else rate / 100.0,
        "drafts": _number(data, "spec_decode_num_drafts"),
        "k": k,
        "running_mean": None,
        "server_generation_tokens_per_s": None,
        "bench_file": name,
        "bench_date": data.get("date"),
        "model_id": data.get("model_id"),
    }
    return concurrency, side


def load_bench_rounds(directory: str | Path) -> tuple[dict[int, list[dict]], list[str]]:
    """Every bench result in a folder, by concurrency: several files of one tier are its rounds,
    oldest first (by the file's date, then its name). Bad files are skipped and named in the
    problems. Raises SweepFileError when the folder itself cannot be read."""
    folder = Path(directory)
    if not folder.is_dir():
        raise SweepFileError(f"{folder}: not a folder of vllm bench serve --save-result files")
    files = sorted(p for p in folder.iterdir() if p.suffix == ".json" and p.is_file())
    if not files:
        raise SweepFileError(f"{folder}: no .json files in it")
    tiers: dict[int, list[dict]] = {}
    errors: list[str] = []
    for path in files:
        try:
            if path.stat().st_size > MAX_BENCH_FILE_BYTES:
                raise SweepFileError(f"{path}: larger than {MAX_BENCH_FILE_BYTES} bytes")
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise SweepFileError(f"{path}: not valid JSON ({exc})") from None
            concurrency, side = bench_side(data, str(path))
        except SweepFileError as exc:
            errors.append(str(exc))
            continue
        except OSError as exc:
            errors.append(f"{path}: cannot read it ({exc.strerror or exc})")
            continue
        tiers.setdefault(concurrency, []).append(side)
    for rounds in tiers.values():
        rounds.sort(key=lambda side: (str(side.get("bench_date") or ""), side["bench_file"]))
    return tiers, errors


def load_bench_dir(directory: str | Path) -> tuple[dict[int, dict], list[str]]:
    """One result per concurrency: the later by date where a folder holds two (and a problem saying
    so). Raises SweepFileError when the folder itself cannot be read."""
    rounds, errors = load_bench_rounds(directory)
    tiers: dict[int, dict] = {}
    for concurrency, sides in sorted(rounds.items()):
        tiers[concurrency] = sides[-1]
        if len(sides) > 1:
            errors.append(f"{Path(directory)}: {len(sides)} results for concurrency {concurrency} "
                          f"({', '.join(Path(s['bench_file']).name for s in sides[:-1])}, "
                          f"{Path(sides[-1]['bench_file']).name}); kept the later, {Path(sides[-1]['bench_file']).name}")
    return tiers, errors


def record_from_bench(baseline_dir: str | Path, speculative_dir: str | Path) -> SweepRecord:
    """A sweep record from two folders of bench results: several files of one tier are its rounds,
    the i-th baseline file (by date) paired with the i-th speculative one. Problems go to `errors`,
    and a folder that cannot be used at all sets `stopped`."""
    record = SweepRecord(source="bench")
    record.settings = {"baseline_dir": str(baseline_dir), "speculative_dir": str(speculative_dir),
                       "round_order": "bench files paired by date"}
    sides: dict[str, dict[int, list[dict]]] = {}
    for side, folder in zip(SIDES, (baseline_dir, speculative_dir)):
        try:
            tiers, errors = load_bench_rounds(folder)
        except SweepFileError as exc:
            record.stopped = str(exc)
            tiers, errors = {}, []
        sides[side] = tiers
        record.errors += errors
        models = {r.get("model_id") for rounds in tiers.values() for r in rounds if r.get("model_id")}
        record.servers[side] = {"bench_dir": str(folder), "model": sorted(models)[0] if len(models) == 1 else None}
    for side, tiers in sides.items():
        for concurrency, rounds in sorted(tiers.items()):
            for figures in rounds:
                record.put(concurrency, side, figures)
    for concurrency in sorted(record.rounds):
        counts = {side: len(sides[side].get(concurrency, [])) for side in SIDES}
        for side in SIDES:
            if counts[side] == 0:
                record.errors.append(f"concurrency {concurrency} has no {side} result")
        if all(counts.values()) and counts["baseline"] != counts["speculative"]:
            record.errors.append(f"concurrency {concurrency}: {counts['baseline']} baseline results and "
                                 f"{counts['speculative']} speculative; the rounds without a partner count "
                                 f"for their side's figures, not for the speedup")
    record.planned_tiers = tuple(sorted(record.rounds))
    return record
