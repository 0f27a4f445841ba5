"""The oracle the fast exposition reader is checked against: every sample through prometheus_client
alone, keyed so that a counter exposed as `x` or as `x_total` compares alike. Test-only: the
product never needs a second parser."""

from __future__ import annotations

import math
from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

from specwatch.telemetry.exposition import SAMPLE_NAMES, Sample, make_sample


def samples_by_series(samples: Iterable[Sample]) -> dict[tuple[str, str, tuple[tuple[str, str], ...]], float]:
    """(family, role, labels) → value for the wanted samples, so a counter exposed as `x` or as
    `x_total` compares alike: how the fast path is checked against prometheus_client."""
    out = {}
    for s in samples:
        if s.name in SAMPLE_NAMES:
            family, role = SAMPLE_NAMES[s.name]
            out[(family, role, tuple(sorted(s.labels.items())))] = s.value
    return out


def same_values(a: dict, b: dict) -> bool:
    """Equal series with equal values (NaN equals NaN here)."""
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a)


def full_parse_samples(text: str) -> list[Sample]:
    """Every sample, through prometheus_client alone: the oracle for tests and error diagnosis."""
    return [
        make_sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
