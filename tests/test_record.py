"""porter.record: the records of the diagnose path behave as the dataclasses they replace."""

from __future__ import annotations

import dataclasses

import pytest

from porter.record import FrozenInstanceError, asdict, field, record, replace


@record(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@record
class Bag:
    name: str
    items: list[int] = field(default_factory=list)
    hidden: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name.strip()


@dataclasses.dataclass(frozen=True)
class DPoint:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


def test_construction_defaults_and_errors():
    assert Point(1).y == 0 and Point(1, 2).y == 2 and Point(x=1, tags=("a",)).tags == ("a",)
    with pytest.raises(TypeError):
        Point()
    with pytest.raises(TypeError):
        Point(1, x=2)
    with pytest.raises(TypeError):
        Point(1, z=2)
    with pytest.raises(TypeError):
        Point(1, 2, (), 4)
    a, b = Bag(" n "), Bag("m")
    assert a.name == "n" and a.items == [] and a.items is not b.items  # post-init ran; one list each


def test_repr_eq_hash_frozen_like_dataclasses():
    assert repr(Point(1, 2)) == repr(DPoint(1, 2)).replace("DPoint", "Point")
    assert repr(Bag("n", [1], hidden=5)) == "Bag(name='n', items=[1])"
    assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(2, 1) and Point(1) != DPoint(1)
    assert hash(Point(1, 2)) == hash(Point(1, 2)) and len({Point(1), Point(1)}) == 1
    with pytest.raises(FrozenInstanceError):
        Point(1).x = 3
    with pytest.raises(TypeError):
        hash(Bag("n"))  # eq without frozen: unhashable, as a dataclass
    Bag("n").name = "changed"  # not frozen


def test_asdict_replace_and_the_dataclasses_module():
    nested = Bag("n", [1, 2], hidden=Point(3, tags=("t",)))
    assert asdict(Point(1, 2, ("a",))) == dataclasses.asdict(DPoint(1, 2, ("a",)))
    assert asdict(nested) == {"name": "n", "items": [1, 2], "hidden": {"x": 3, "y": 0, "tags": ("t",)}}
    assert replace(Point(1, 2), y=5) == Point(1, 5)
    # other modules keep using dataclasses' functions on records
    assert dataclasses.is_dataclass(Point(1))
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags"]
    assert dataclasses.replace(Point(1, 2), x=7) == Point(7, 2)
    assert dataclasses.asdict(nested) == asdict(nested)
