"""specwatch.dataclass_init: the quicker __init__ takes what the dataclass's own took and makes the
same object, for every class that has one and for each kind of field."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field

import pytest

import specwatch.advice.monitor  # noqa: F401 - imports every class given a quicker __init__
from specwatch.dataclass_init import DATACLASS_INITS, set_fields_at_once


def _parameters(init) -> list[tuple[str, inspect._ParameterKind, object]]:
    """(name, kind, default) of each parameter; a default_factory's marker compares as 'factory'."""
    out = []
    for p in inspect.signature(init).parameters.values():
        default = p.default
        if default is not inspect.Parameter.empty and type(default).__name__ in ("_HAS_DEFAULT_FACTORY_CLASS", "object"):
            default = "factory"
        out.append((p.name, p.kind, default))
    return out


def _made_both_ways(cls: type, **given: object) -> tuple[object, object]:
    quick = cls(**given)
    own = object.__new__(cls)
    DATACLASS_INITS[cls](own, **given)
    return quick, own


def _every_field(obj: object) -> dict[str, object]:
    return {f.name: getattr(obj, f.name, "<unset>") for f in dataclasses.fields(obj)}


def test_the_hot_classes_have_one() -> None:
    names = {cls.__name__ for cls in DATACLASS_INITS}
    assert {"EngineFigures", "DecisionInputs", "Decision", "Judged", "Verdict", "TargetWindow"} <= names


@pytest.mark.parametrize("cls", sorted(DATACLASS_INITS, key=lambda c: c.__qualname__), ids=lambda c: c.__qualname__)
def test_each_takes_the_same_arguments_and_makes_the_same_object(cls: type) -> None:
    assert _parameters(cls.__init__) == _parameters(DATACLASS_INITS[cls])
    # a distinct value for every parameter, given by name: each must land in its own field
    given = {name: 1000 + i for i, (name, kind, _) in enumerate(_parameters(cls.__init__)[1:])}
    quick, own = _made_both_ways(cls, **given)
    assert _every_field(quick) == _every_field(own)
    assert quick == own and repr(quick) == repr(own)
    assert pickle.loads(pickle.dumps(quick)) == quick
    # the defaults as the dataclass's own gives them (factories called afresh)
    required = {name: given[name] for name, _, default in _parameters(cls.__init__)[1:]
                if default is inspect.Parameter.empty}
    quick, own = _made_both_ways(cls, **required)
    assert _every_field(quick) == _every_field(own)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(quick, dataclasses.fields(cls)[0].name, 1)


@pytest.mark.parametrize("slots", [True, False])
def test_every_kind_of_field(slots: bool) -> None:
    @set_fields_at_once
    @dataclass(frozen=True, slots=slots)
    class Kinds:
        plain: int
        defaulted: str = "d"
        made: list = field(default_factory=list)
        hidden: tuple = field(default=(1,), init=False)
        hidden_made: dict = field(default_factory=dict, init=False)
        named: float = field(default=2.0, kw_only=True)
        named_required: int = field(kw_only=True, default=0)

    assert _parameters(Kinds.__init__) == _parameters(DATACLASS_INITS[Kinds])
    a, b = Kinds(1), Kinds(1)
    assert a == Kinds(1, "d", [], named=2.0) and a.hidden == (1,) and a.hidden_made == {}
    assert a.made is not b.made and a.hidden_made is not b.hidden_made  # factories run per object
    assert Kinds(1, named=3.0).named == 3.0
    with pytest.raises(TypeError):
        Kinds(1, "d", [], 3.0)  # keyword-only stays keyword-only
    with pytest.raises(TypeError):
        Kinds()  # the required field stays required
    with pytest.raises(TypeError, match="unexpected keyword"):
        Kinds(1, plains=2)  # as the dataclass's own says it
    with pytest.raises(TypeError, match="multiple values"):
        Kinds(1, plain=2)
    with pytest.raises(TypeError):
        Kinds(1, hidden=(2,))  # not an init field
    assert dataclasses.replace(a, plain=5) == Kinds(5)


def test_what_it_cannot_serve_is_refused() -> None:
    @dataclass(frozen=True)
    class After:
        x: int

        def __post_init__(self) -> None:
            pass

    @dataclass
    class Mutable:
        x: int

    @dataclass(frozen=True)
    class WithInitVar:
        x: int
        y: dataclasses.InitVar[int] = 0

    for cls in (After, Mutable, WithInitVar, int):
        with pytest.raises(TypeError):
            set_fields_at_once(cls)
