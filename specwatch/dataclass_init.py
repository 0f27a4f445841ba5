"""A quicker way into the frozen dataclasses made at every evaluation and every line of a recording.

A frozen dataclass's generated __init__ sets each field through object.__setattr__ (it must get
around the class's own __setattr__, which refuses): a global lookup, an attribute lookup and a call
for every field, after binding every argument by name. An evaluation of the advisor makes some 170
such fields (EngineFigures, DecisionInputs, Judged, Verdict, ...), most of them passed by keyword,
and a day's headless replay makes 17 280 evaluations: those calls were a twentieth of its time.

`set_fields_at_once` gives such a class an __init__ that takes the same arguments and sets the same
fields to the same values in fewer steps: each field through its slot's own descriptor in a slotted
class, the whole instance dict at once otherwise. A call it does not take whole (an argument too
many, one unknown, a required one missing) goes to the dataclass's own __init__, which says what is
wrong as it always did. Everything else (equality, hash, repr, `dataclasses.replace`, pickling,
refusing assignment afterwards) stays the dataclass's own. Classes with a __post_init__ or InitVar
fields are refused rather than half served. No source is generated: the package runs no exec.

`slots_maker` is the reader's: a function of every field's value, in order, that makes the object
through its slots and calls no __init__.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Any, Callable, TypeVar

__all__ = ["DATACLASS_INITS", "set_fields_at_once", "slots_maker"]

T = TypeVar("T", bound=type)

# Each class given a quicker __init__ → the __init__ dataclasses generated for it (the tests check
# that the two take the same arguments and make equal objects).
DATACLASS_INITS: dict[type, Callable[..., None]] = {}

_new_object = object.__new__
_set_attribute = object.__setattr__


def _slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    descriptor = inspect.getattr_static(cls, name, None)  # a slot may be a base class's
    if not isinstance(descriptor, types.MemberDescriptorType):
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return descriptor.__set__


def set_fields_at_once(cls: T) -> T:
    """Give the frozen dataclass `cls` a quicker __init__ (see the module docstring); applied above
    @dataclass(frozen=True, ...)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not params.init:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass that makes its own __init__")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which this __init__ would not call")
    fields = dataclasses.fields(cls)
    if len(fields) != len(cls.__dataclass_fields__):
        raise TypeError(f"{cls.__name__} has InitVar or ClassVar pseudo-fields")
    slotted = [isinstance(inspect.getattr_static(cls, f.name, None), types.MemberDescriptorType) for f in fields]
    if any(slotted) and not all(slotted):
        raise TypeError(f"{cls.__name__} keeps some fields in slots and some in its dict")

    # what the generated __init__ binds: positional fields in order (keyword-only ones last, by name)
    positional = tuple(f.name for f in fields if f.init and not f.kw_only)
    taken = frozenset(f.name for f in fields if f.init)
    # (name, is a factory, default) for each field it may fill: defaulted init fields when not given,
    # init=False fields always (a field with neither stays unset, as the generated __init__ leaves it)
    defaults = {f.name: (f.default is dataclasses.MISSING, f.default_factory if f.default is dataclasses.MISSING
                         else f.default)
                for f in fields if f.init and (f.default is not dataclasses.MISSING
                                               or f.default_factory is not dataclasses.MISSING)}
    never_given = tuple((f.name, f.default is dataclasses.MISSING,
                         f.default_factory if f.default is dataclasses.MISSING else f.default)
                        for f in fields if not f.init and (f.default is not dataclasses.MISSING
                                                           or f.default_factory is not dataclasses.MISSING))
    in_order = tuple(f.name for f in fields if f.init)
    setters = {f.name: _slot_setter(cls, f.name) for f in fields} if all(slotted) else None
    generated = cls.__init__

    @functools.wraps(generated)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            if len(args) > len(positional):
                return generated(self, *args, **kwargs)
            values = dict(zip(positional, args))
            if kwargs:
                if not values.keys().isdisjoint(kwargs):
                    return generated(self, *args, **kwargs)  # one field given twice
                values.update(kwargs)
        else:
            values = kwargs  # made for this call
        if len(values) != len(taken) or values.keys() != taken:
            for name in in_order:
                if name not in values:
                    default = defaults.get(name)
                    if default is None:
                        return generated(self, *args, **kwargs)  # a required field missing
                    values[name] = default[1]() if default[0] else default[1]
            if len(values) != len(taken):
                return generated(self, *args, **kwargs)  # a keyword that is no field
        for name, is_factory, default in never_given:
            values[name] = default() if is_factory else default
        if setters is None:
            _set_attribute(self, "__dict__", values)
        else:
            for name, value in values.items():
                setters[name](self, value)
        return None

    DATACLASS_INITS[cls] = generated
    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def slots_maker(cls: type, fields: tuple[str, ...] | None = None) -> Callable[..., Any]:
    """cls(*values), the values of its dataclass fields in order (or of `fields`, each a slot of it
    or of a base), all given, set through its slots without an __init__: the reader makes a dozen
    objects a line of a recording. A field added to the class later is set too (and one not given
    fails at once)."""
    names = tuple(cls.__dataclass_fields__) if fields is None else fields
    setters = tuple(_slot_setter(cls, name) for name in names)
    count = len(setters)

    def make(*values: Any) -> Any:
        if len(values) != count:
            raise TypeError(f"{cls.__name__} takes {count} fields, {len(values)} given")
        obj = _new_object(cls)
        for set_, value in zip(setters, values):
            set_(obj, value)
        return obj

    make.__qualname__ = make.__name__ = f"make_{cls.__name__}"
    return make
