"""`shown.replaced`: dataclasses.replace for a Verdict, made cheaper (the banner makes one or two an evaluation)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from specwatch import perf
from specwatch.advice.shown import replaced
from specwatch.advice.verdict import OFF, ON, Verdict


def _verdict() -> Verdict:
    bound = perf.BoundEstimate("memory", -1.0, ())
    return Verdict(ON, 0.8, 1.3, 1.9, 120.0, False, ("why",), bound, time=5.0, configured=True,
                   flags=("dwell",), details={"prior": "datasheet"})


def test_replaced_is_dataclasses_replace():
    verdict = _verdict()
    changes = {"speculation": OFF, "expected_speedup": 0.9, "reasons": ("other",), "crossover_concurrency": None,
               "details": {"prior": "fit"}, "gpu_spec": None, "flags": ()}
    for name, value in changes.items():
        assert replaced(verdict, **{name: value}) == dataclasses.replace(verdict, **{name: value})
    both = replaced(verdict, **changes)
    assert both == dataclasses.replace(verdict, **changes) and both.speculation == OFF
    assert verdict == _verdict()  # the original is left as it was
    assert copy.deepcopy(both) == both  # the verdict index copies them
    with pytest.raises(dataclasses.FrozenInstanceError):
        both.speculation = ON  # type: ignore[misc]
    with pytest.raises(TypeError):
        replaced(verdict, speedup=1.0)


def test_a_verdict_is_still_a_plain_value_replaced_may_copy():
    # replaced copies the fields without __init__: right only while no field is computed in
    # __post_init__ or left out of __init__
    assert not hasattr(Verdict, "__post_init__")
    assert all(f.init for f in dataclasses.fields(Verdict))
