"""Prometheus exposition text as series by sample name, for the adapters that map another engine's
families onto the window's names (TensorRT-LLM, Triton, Dynamo's frontend).

prometheus_client's parser does the reading (types, escapes, `_total`, `_created`); this module only
indexes what it gives and sums the series an adapter selects. A family whose HELP or TYPE line is
present but which has no series yet is remembered too: prometheus_client exposes a labelled counter
before its first child exists (TensorRT-LLM's per-position counters are created lazily), and
"present with no series" means zero so far, not "not exported".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families

from specwatch.telemetry.snapshot import Histogram

Labels = dict[str, str]
Select = Callable[[Labels], bool]


def _any(labels: Labels) -> bool:
    return True


@dataclass
class Series:
    """A payload's samples by sample name (`x_total`, `x_bucket`, ...), and its family names."""

    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    families: set[str] = field(default_factory=set)

    def has_family(self, name: str) -> bool:
        return name in self.families

    def has_prefix(self, prefix: str) -> bool:
        return any(f.startswith(prefix) for f in self.families)

    def series(self, name: str, select: Select = _any) -> list[tuple[Labels, float]]:
        return [(labels, value) for labels, value in self.samples.get(name, ()) if select(labels)]

    def total(self, name: str, select: Select = _any) -> float | None:
        """The sum of the selected series of one sample name; None when there is none."""
        found = self.series(name, select)
        return sum(value for _, value in found) if found else None

    def first(self, name: str, select: Select = _any) -> float | None:
        found = self.series(name, select)
        return found[0][1] if found else None

    def labels_of(self, name: str, select: Select = _any) -> Labels | None:
        found = self.series(name, select)
        return found[0][0] if found else None

    def histogram(self, base: str, select: Select = _any) -> Histogram | None:
        """The selected series of one histogram family summed bucket by bucket (over every label but
        `le`); None when the family has no buckets."""
        by_le: dict[float, float] = {}
        for labels, value in self.series(base + "_bucket", select):
            try:
                le = float(labels["le"])
            except (KeyError, ValueError):
                continue
            by_le[le] = by_le.get(le, 0.0) + value
        if not by_le:
            return None
        buckets = tuple(sorted(by_le.items()))
        count = self.total(base + "_count", select)
        return Histogram(buckets, self.total(base + "_sum", select) or 0.0,
                         count if count is not None else buckets[-1][1])


def read_series(text: str) -> Series:
    """The payload indexed. Non-finite values are left out (a NaN gauge says nothing). Raises
    ValueError when the text is not Prometheus exposition."""
    out = Series()
    try:
        for family in text_string_to_metric_families(text):
            out.families.add(family.name)
            for sample in family.samples:
                value = float(sample.value)
                if math.isfinite(value):
                    out.samples.setdefault(sample.name, []).append((dict(sample.labels), value))
    except (ValueError, TypeError, KeyError, IndexError) as exc:  # what the parser raises on bad text
        raise ValueError(f"not Prometheus exposition text: {exc!r}") from None
    return out
