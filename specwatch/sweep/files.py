"""Reading a saved sweep, and the dashboard's crossover marker."""

from __future__ import annotations

import json
import math
from pathlib import Path

from specwatch.sweep.common import JSON_NAME, NEVER_PAYS, PAYS_THROUGHOUT, SCHEMA, SweepFileError

__all__ = [
    "load_sweep",
    "crossover_marker",
]


def load_sweep(path: str | Path) -> dict:
    """A saved sweep (its sweep.json, or the folder holding it), checked for the schema and tiers."""
    file = Path(path)
    if file.is_dir():
        file = file / JSON_NAME
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SweepFileError(f"cannot read the sweep file {file}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SweepFileError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
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
    return data


def crossover_marker(sweep: dict, current_concurrency: float | None) -> str:
    """One line for the live view: the measured crossover against the current concurrency."""
    crossing = (sweep.get("crossing") or {}).get("throughput")
    state = (sweep.get("crossing_state") or {}).get("throughput")
    tiers = [t["concurrency"] for t in sweep.get("tiers") or []]
    span = f"{min(tiers):g}–{max(tiers):g}" if tiers else "no tiers"
    now = "now unknown" if current_concurrency is None else f"now {current_concurrency:.0f}"
    if crossing is not None:
        if current_concurrency is None:
            return f"sweep crossover ≈ {crossing:.1f} ({now})"
        side = "below it: speculation paid here" if current_concurrency < crossing else \
            "above it: speculation cost throughput here"
        return f"sweep crossover ≈ {crossing:.1f}, {now}, {side}"
    if state == PAYS_THROUGHOUT:
        beyond = current_concurrency is not None and tiers and current_concurrency > max(tiers)
        tail = ", beyond the measured range" if beyond else ""
        return f"sweep: speculation paid at every tier ({span}), {now}{tail}"
    if state == NEVER_PAYS:
        return f"sweep: speculation cost at every tier ({span}), {now}"
    return f"sweep: no crossover measured ({now})"
