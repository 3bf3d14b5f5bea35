"""kernel/records.py: a ``@fast`` class builds and copies exactly as its dataclass would, is
as frozen, and refuses what it cannot reproduce."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import FrozenInstanceError, InitVar, dataclass, field
from typing import Any

import pytest

from coordinator.domain.decide.decision import Context, Decision
from coordinator.domain.model import Actor, Attempt, NewEvent, Run, RunEvent
from kernel.records import fast, is_fast, replace


@fast
@dataclass(frozen=True, slots=True)
class Sample:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Twin:  # the same class without @fast: what the fast one must equal
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)


def _as_twin(sample: Sample) -> Twin:
    return Twin(sample.a, sample.b, sample.c)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((1,), {}), ((1, "x"), {}), ((1,), {"c": [2]}), ((), {"a": 3, "b": "y", "c": [4]})],
)
def test_construction_matches_the_dataclass(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    assert _as_twin(Sample(*args, **kwargs)) == Twin(*args, **kwargs)


def test_each_instance_gets_its_own_default_factory_value() -> None:
    first, second = Sample(1), Sample(2)
    assert first.c == [] and second.c == [] and first.c is not second.c


def test_the_signature_is_the_dataclass_one() -> None:
    assert list(inspect.signature(Sample).parameters) == ["a", "b", "c"]
    with pytest.raises(TypeError):
        Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Sample(1, d=2)  # type: ignore[call-arg]


def test_instances_stay_frozen() -> None:
    sample = Sample(1)
    with pytest.raises(FrozenInstanceError):
        sample.a = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        replace(sample, a=2).b = "z"  # type: ignore[misc]


def test_replace_copies_and_changes_only_what_it_names() -> None:
    sample = Sample(1, "x", [5])
    copy = replace(sample, b="y")
    assert (copy.a, copy.b, copy.c) == (1, "y", [5]) and copy.c is sample.c
    assert replace(sample) == sample and replace(sample) is not sample
    assert sample == Sample(1, "x", [5])  # the original is untouched


def test_replace_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="Sample has no field d"):
        replace(Sample(1), d=2)


def test_replace_of_any_other_dataclass_is_the_standard_one() -> None:
    assert replace(Twin(1), b="y") == Twin(1, "y")
    with pytest.raises(TypeError):
        replace(Twin(1), d=2)


def test_what_cannot_be_reproduced_is_refused() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = field(kw_only=True)

    @dataclass(frozen=True, slots=True)
    class Hidden:
        a: int = field(init=False, default=0)

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        b: InitVar[int]

    @dataclass(frozen=True, slots=True)
    class Private:
        _a: int

    for cls in (NoSlots, NotFrozen, PostInit, KeywordOnly, Hidden, WithInitVar, Private):
        with pytest.raises(TypeError):
            fast(cls)


@pytest.mark.parametrize("cls", [Actor, Run, Attempt, NewEvent, RunEvent, Context, Decision])
def test_the_hot_path_records_are_fast(cls: type) -> None:
    """Each record is built by the fast __init__, its defaults are its dataclass defaults,
    and a copy that changes every field equals a construction from those values."""
    assert is_fast(cls)
    init = inspect.signature(cls).parameters
    fields = dataclasses.fields(cls)
    for f in fields:
        if f.default is not dataclasses.MISSING:
            assert init[f.name].default is f.default
    values = {f.name: object() for f in fields}  # distinct markers: no field mixed up
    built = cls(**values)
    assert {f.name: getattr(built, f.name) for f in fields} == values
    first = cls(**{f.name: None for f in fields})
    assert replace(first, **values) == built
