"""Fast construction and copy of the hot path's frozen, slotted dataclasses.

A frozen dataclass's generated ``__init__`` stores every field through
``object.__setattr__`` (the class's own ``__setattr__`` refuses), and ``dataclasses.replace``
first gathers every field into a dict of keyword arguments for it: for a ``Run`` (35 fields)
that is about 6.6 us a construction and 8.3 us a copy, and one run's lifecycle makes some
twenty of them (bench/README.md, issue #16 of 2026-12-06: a tenth of the server's CPU).

``@fast`` (above ``@dataclass(frozen=True, slots=True)``) gives such a class an ``__init__``
with the same parameters and defaults that stores each field through its slot's descriptor
directly, and ``replace`` copies an instance of such a class the same way: about a third of
the time, the same values, and the instance is as frozen as before (assignment still raises
``FrozenInstanceError``). ``replace`` of any other dataclass is ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Copier = Callable[[Any, dict[str, Any]], Any]
_COPIERS: dict[type, tuple[frozenset[str], _Copier]] = {}
_FACTORY = object()  # the default of a parameter whose field has a default_factory


def fast(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass ``cls`` the fast ``__init__`` and register it for
    ``replace``. Refuses (TypeError) a class whose construction does more than store its
    fields: ``__post_init__``, ``InitVar``, fields left out of ``__init__``, keyword-only
    fields (and a field named ``self`` or ``_...``, which the generated code's names own)."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: @fast takes a @dataclass(slots=True) class")
    params = cls.__dict__["__dataclass_params__"]
    fields = dataclasses.fields(cls)
    if not params.frozen or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: @fast takes a frozen class without __post_init__")
    if any(not f.init or f.kw_only for f in fields) or len(fields) != len(
        cls.__dict__["__dataclass_fields__"]
    ):
        raise TypeError(f"{cls.__name__}: every field must be a plain __init__ parameter")
    if any(f.name == "self" or f.name.startswith("_") for f in fields):  # the code's own names
        raise TypeError(f"{cls.__name__}: @fast takes no field named self or _...")
    names = [f.name for f in fields]
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_FACTORY": _FACTORY}
    parameters, stores, copies = [], [], []
    for i, f in enumerate(fields):
        # the slot's own descriptor (an inherited field's lives on the base class)
        slot = next(k.__dict__[f.name] for k in cls.__mro__ if f.name in k.__dict__)
        scope[f"_set{i}"] = slot.__set__
        if f.default is not dataclasses.MISSING:
            scope[f"_default{i}"] = f.default
            parameters.append(f"{f.name}=_default{i}")
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"_factory{i}"] = f.default_factory
            parameters.append(f"{f.name}=_FACTORY")
            value = f"_factory{i}() if {f.name} is _FACTORY else {f.name}"
        else:
            parameters.append(f.name)
            value = f.name
        stores.append(f"    _set{i}(self, {value})")
        copies.append(
            f"    _set{i}(new, changes[{f.name!r}] if {f.name!r} in changes else old.{f.name})"
        )
    source = "\n".join(
        [
            f"def __init__(self, {', '.join(parameters)}):",
            *(stores or ["    pass"]),
            "def _copy(old, changes):",
            "    new = _new(_cls)",
            *copies,
            "    return new",
        ]
    )
    # Made here from the class's own field names (checked above), never from input.
    exec(source, scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)  # noqa: B010 - the class's own method, replaced
    _COPIERS[cls] = (frozenset(names), scope["_copy"])
    return cls


def is_fast(cls: type) -> bool:
    """``cls`` went through ``@fast``."""
    return cls in _COPIERS


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of the dataclass instance ``obj`` with ``changes`` (field name -> value), as
    ``dataclasses.replace``; fast for a ``@fast`` class. An unknown name raises TypeError."""
    known = _COPIERS.get(type(obj))
    if known is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    names, copy = known
    if not changes.keys() <= names:
        unknown = ", ".join(sorted(changes.keys() - names))
        raise TypeError(f"{type(obj).__name__} has no field {unknown}")
    new: T = copy(obj, changes)
    return new
