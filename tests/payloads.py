"""Real /metrics captures, and payloads built from them (several data-parallel engines)."""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).parent / "data"
NGRAM_K4 = DATA / "vllm-0.32-cpu-ngram-k4.metrics.txt"
DOCS_EXAMPLE = DATA / "vllm_metrics_general_docs_example.prom"
DCGM_L4 = DATA / "dcgm-exporter-L4-idle.prom"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def multi_engine_payload(engines: int = 8, base: str | None = None) -> str:
    """One real engine's payload replicated as `engines` data-parallel engines, as vLLM exposes them:
    one HELP/TYPE block per family, then the series of every engine, each with its own values."""
    text = base if base is not None else read(NGRAM_K4)
    families: list[tuple[list[str], list[str]]] = []  # (comment lines, sample lines)
    for line in text.splitlines():
        if line.startswith("# HELP"):
            families.append(([line], []))
        elif line.startswith("#"):
            if not families:
                families.append(([], []))
            families[-1][0].append(line)
        elif line.strip():
            if not families:
                families.append(([], []))
            families[-1][1].append(line)
    out: list[str] = []
    for comments, samples in families:
        out.extend(comments)
        for e in range(engines):
            for s in samples:
                if 'engine="0"' in s:
                    s = s.replace('engine="0"', f'engine="{e}"')
                    s = _scale_value(s, e)
                elif e > 0:
                    continue  # process-level series appear once
                out.append(s)
    return "\n".join(out) + "\n"


_VALUE = re.compile(r"^(.*\s)(\S+)$")


def _scale_value(line: str, engine: int) -> str:
    """Give each engine distinct values, keeping counters monotone across buckets."""
    m = _VALUE.match(line)
    if not m or engine == 0:
        return line
    try:
        v = float(m.group(2))
    except ValueError:
        return line
    return f"{m.group(1)}{v * (1 + engine) if v == v and abs(v) != float('inf') else m.group(2)}"
