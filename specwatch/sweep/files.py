"""Reading a saved sweep, and the dashboard's crossover marker."""

from __future__ import annotations

import json
import math
from pathlib import Path

from specwatch.sweep.common import JSON_NAME, NEVER_PAYS, PAYS_THROUGHOUT, READABLE_SCHEMAS, SCHEMA, SweepFileError

__all__ = [
    "load_sweep",
    "crossover_marker",
    "crossing_interval_words",
]


def load_sweep(path: str | Path) -> dict:
    """A saved sweep (its sweep.json, or the folder holding it), checked for the schema and tiers.
    specwatch.sweep/1 files (no rounds, no intervals) are read as they are."""
    file = Path(path)
    if file.is_dir():
        file = file / JSON_NAME
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SweepFileError(f"cannot read the sweep file {file}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SweepFileError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") not in READABLE_SCHEMAS:
        raise SweepFileError(f"{file}: not a specwatch sweep (schema {SCHEMA} expected)")
    tiers = data.get("tiers")
    if not isinstance(tiers, list) or not all(
            isinstance(t, dict) and isinstance(t.get("concurrency"), (int, float)) for t in tiers):
        raise SweepFileError(f"{file}: 'tiers' must be a list of objects with a concurrency")
    crossing = data.get("crossing")
    if not isinstance(crossing, dict) or not {"throughput", "tpot"} <= set(crossing):
        raise SweepFileError(f"{file}: 'crossing' must hold throughput and tpot")
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in crossing.values()):
        raise SweepFileError(f"{file}: 'crossing' values must be numbers or null")
    if not all(isinstance(t["concurrency"], (int, float)) and not isinstance(t["concurrency"], bool)
               and math.isfinite(t["concurrency"]) for t in tiers):
        raise SweepFileError(f"{file}: every tier's concurrency must be a finite number")
    if not isinstance(data.get("crossing_state") or {}, dict):
        raise SweepFileError(f"{file}: 'crossing_state' must be an object")
    if not isinstance(data.get("crossing_interval") or {}, dict) or not all(
            isinstance(v, dict) and all(v.get(end) is None or (isinstance(v.get(end), (int, float))
                                                              and not isinstance(v.get(end), bool)
                                                              and math.isfinite(v[end])) for end in ("low", "high"))
            for v in (data.get("crossing_interval") or {}).values()):
        raise SweepFileError(f"{file}: 'crossing_interval' must map each speedup to numeric low and high ends")
    return data


def crossing_interval_words(sweep: dict, key: str = "throughput") -> str | None:
    """The crossing's interval in words ("95 % 3.1–7.9", "95 % below 1–7.9", ...), or None when the
    file has none (a specwatch.sweep/1 file, or single rounds)."""
    interval = (sweep.get("crossing_interval") or {}).get(key)
    if not isinstance(interval, dict) or interval.get("low_state") == "no_data":
        return None
    tiers = [t["concurrency"] for t in sweep.get("tiers") or []]
    low, high = interval.get("low"), interval.get("high")
    low_text = f"{low:.1f}" if low is not None else (
        f"below {min(tiers):g}" if interval.get("low_state") == NEVER_PAYS and tiers else "?")
    high_text = f"{high:.1f}" if high is not None else (
        f"beyond {max(tiers):g}" if interval.get("high_state") == PAYS_THROUGHOUT and tiers else "?")
    return f"95 % {low_text}–{high_text}"


def crossover_marker(sweep: dict, current_concurrency: float | None) -> str:
    """One line for the live view: the measured crossover against the current concurrency."""
    crossing = (sweep.get("crossing") or {}).get("throughput")
    state = (sweep.get("crossing_state") or {}).get("throughput")
    tiers = [t["concurrency"] for t in sweep.get("tiers") or []]
    span = f"{min(tiers):g}–{max(tiers):g}" if tiers else "no tiers"
    now = "now unknown" if current_concurrency is None else f"now {current_concurrency:.0f}"
    words = crossing_interval_words(sweep)
    interval = (sweep.get("crossing_interval") or {}).get("throughput") or {}
    if crossing is not None:
        where = f"sweep crossover ≈ {crossing:.1f}" + (f" ({words})" if words else "")
        if current_concurrency is None:
            return f"{where} ({now})" if not words else f"{where}, {now}"
        low = interval.get("low") if words else crossing
        high = interval.get("high") if words else crossing
        below = current_concurrency < low if low is not None else False
        above = current_concurrency > high if high is not None else False
        if words and not below and not above:
            return f"{where}, {now}, inside the crossing's interval: too close to call"
        side = "below it: speculation paid here" if (below if words else current_concurrency < crossing) else \
            "above it: speculation cost throughput here"
        return f"{where}, {now}, {side}"
    if state == PAYS_THROUGHOUT:
        beyond = current_concurrency is not None and tiers and current_concurrency > max(tiers)
        tail = ", beyond the measured range" if beyond else ""
        return f"sweep: speculation paid at every tier ({span}), {now}{tail}"
    if state == NEVER_PAYS:
        return f"sweep: speculation cost at every tier ({span}), {now}"
    return f"sweep: no crossover measured ({now})"
