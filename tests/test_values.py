"""Issue 21: the value classes on the start-up paths share one `__eq__`, `__hash__` and `__repr__`
(patchkit/base/values.py) instead of compiling their own at import. They behave as a dataclass's
generated methods do, held here side by side on classes of the test's own, and no dataclass of a
module a start-up path loads compiles its own again."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from patchkit.base.values import FrozenValue, Shown, Value, frozen

RECORDED = Path(__file__).parent / "startup_modules.json"


@dataclass(frozen=True)
class GenFrozen:
    name: str
    size: int = 0
    note: str = field(default="", compare=False)
    bag: dict = field(default_factory=dict, hash=False)
    secret: str = field(default="", repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class SharedFrozen(FrozenValue):
    name: str
    size: int = 0
    note: str = field(default="", compare=False)
    bag: dict = field(default_factory=dict, hash=False)
    secret: str = field(default="", repr=False)


@dataclass
class GenPlain:
    items: list
    one: float = 0.0


@dataclass(eq=False, repr=False)
class SharedPlain(Value):
    items: list
    one: float = 0.0


@dataclass(frozen=True, eq=False, repr=False)
class SharedOne(FrozenValue):
    only: str


@dataclass(frozen=True, eq=False, repr=False)
class SharedNone(FrozenValue):
    pass


def _same(kind: str, a: tuple, b: tuple) -> None:
    """`a` and `b` are the same arguments given to the generated class and to the shared one."""
    gen, shared = (GenFrozen, SharedFrozen) if kind == "frozen" else (GenPlain, SharedPlain)
    ga, gb, sa, sb = gen(*a), gen(*b), shared(*a), shared(*b)
    assert (sa == sb, sa != sb) == (ga == gb, ga != gb)
    assert repr(sa) == repr(ga).replace(gen.__name__, shared.__name__)
    if kind == "frozen":
        assert (hash(sa), hash(sb)) == (hash(ga), hash(gb))  # the same fields, as one tuple


@pytest.mark.parametrize(
    "a, b",
    [
        (("x", 1), ("x", 1)),
        (("x", 1), ("x", 2)),
        (("x", 1, "a note"), ("x", 1, "another")),  # compare=False: equal
        (("x", 1, "", {"k": 1}), ("x", 1, "", {"k": 2})),  # hash=False, but compared
        (("x", 1, "", {}, "hidden"), ("x", 1, "", {}, "hidden")),
    ],
)
def test_a_frozen_value_compares_hashes_and_reads_as_a_generated_one(a, b):
    _same("frozen", a, b)


@pytest.mark.parametrize(
    "a, b",
    [
        (([1, 2],), ([1, 2],)),
        (([1],), ([2],)),
        (([], math.nan), ([], math.nan)),  # different NaN objects: unequal, as tuples of them are
    ],
)
def test_a_mutable_value_compares_and_reads_as_a_generated_one(a, b):
    _same("plain", a, b)


def test_the_same_nan_object_compares_equal_as_in_a_tuple():
    items, nan = [], math.nan
    assert (SharedPlain(items, nan) == SharedPlain(items, nan)) == (GenPlain(items, nan) == GenPlain(items, nan))


def test_a_mutable_value_is_unhashable_and_a_frozen_one_stays_frozen():
    with pytest.raises(TypeError, match="unhashable"):
        hash(SharedPlain([]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        SharedFrozen("x").name = "y"  # type: ignore[misc]


def test_values_of_other_classes_are_never_equal():
    assert SharedFrozen("x") != GenFrozen("x")
    assert SharedPlain([]) != SharedFrozen("x")
    assert SharedFrozen("x").__eq__(SharedOne("x")) is NotImplemented


def test_one_field_and_no_field_values():
    assert SharedOne("a") == SharedOne("a") and SharedOne("a") != SharedOne("b")
    assert hash(SharedOne("a")) == hash(("a",)) and hash(SharedNone()) == hash(())
    assert SharedNone() == SharedNone() and repr(SharedNone()) == "SharedNone()"
    assert {SharedOne("a"), SharedOne("a")} == {SharedOne("a")}


def test_a_value_holding_itself_reads_as_a_generated_one():
    gen, shared = GenPlain([]), SharedPlain([])
    gen.items.append(gen)
    shared.items.append(shared)
    assert repr(shared) == repr(gen).replace("GenPlain", "SharedPlain")


@dataclass(frozen=True, eq=False, repr=False)
class SharedIdentity(Shown):
    name: str


def test_an_identity_value_reads_as_a_generated_one_and_is_itself_alone():
    one = SharedIdentity("x")
    assert repr(one) == "SharedIdentity(name='x')"
    assert one != SharedIdentity("x") and one == one and hash(one) == object.__hash__(one)


@frozen
class OnceFrozen(FrozenValue):
    name: str
    size: int = 0
    note: str = field(default="", compare=False)
    bag: dict = field(default_factory=dict, hash=False)
    secret: str = field(default="", repr=False)


@frozen
class OnceDerived(FrozenValue):
    text: str
    length: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "length", len(self.text))


def _refusal(action) -> str:
    with pytest.raises(dataclasses.FrozenInstanceError) as refused:
        action()
    return str(refused.value)


@pytest.mark.parametrize("name", ["name", "size", "bag", "secret", "other"])
def test_a_frozen_value_refuses_a_change_as_a_generated_frozen_one_does(name):
    made, generated = OnceFrozen("x", 1, "n", {"k": 1}, "s"), GenFrozen("x", 1, "n", {"k": 1}, "s")

    def assign(value):
        return lambda: setattr(value, name, "y")

    def delete(value):
        return lambda: delattr(value, name)

    assert _refusal(assign(made)) == _refusal(assign(generated))
    assert _refusal(delete(made)) == _refusal(delete(generated))
    assert (made.name, made.size, made.bag, made.secret) == ("x", 1, {"k": 1}, "s")  # unchanged


def test_a_frozen_value_is_made_replaced_and_derived_as_a_generated_one():
    made = OnceFrozen("x")
    assert (made.size, made.note, made.bag, made.secret) == (0, "", {}, "")
    assert made.bag is not OnceFrozen("x").bag  # a default_factory per instance
    changed = dataclasses.replace(made, size=2)
    assert (changed.name, changed.size, made.size) == ("x", 2, 0)
    assert repr(changed) == repr(GenFrozen("x", 2)).replace("GenFrozen", "OnceFrozen")
    derived = OnceDerived("abc")
    assert derived.length == 3 and derived == OnceDerived("abc") and hash(derived) == hash(("abc", 3))
    assert dataclasses.fields(OnceFrozen) and dataclasses.is_dataclass(made)


def _startup_modules() -> list[str]:
    recorded = json.loads(RECORDED.read_text())
    return sorted({m for kinds in recorded.values() for m in kinds["patchkit"]})


def test_no_dataclass_a_start_up_path_loads_compiles_its_own_eq_or_repr():
    """Each is one more `exec` at every start-up: a value class is `@dataclass(eq=False, repr=False)`
    over Value (frozen: FrozenValue), or over Shown where identity is its equality."""
    compiled = []
    for name in _startup_modules():
        for cls in vars(importlib.import_module(name)).values():
            if isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls):
                params = cls.__dataclass_params__  # type: ignore[attr-defined]
                if params.eq or params.repr:
                    compiled.append(f"{name}.{cls.__qualname__}")
    assert compiled == []


# Frozen dataclasses a start-up path loads that keep `frozen=True`, with why: an instance of a
# `@frozen` class is slower to make (its __init__ sets each field through a Python __setattr__).
STAYS_FROZEN = {
    "patchkit.checks.CheckResult": "~6,000 a dry run of a 1,294-file diff (+67 M instructions as @frozen)",
}


def test_no_dataclass_a_start_up_path_loads_compiles_its_own_setattr_or_delattr():
    """`frozen=True` compiles a `__setattr__` and a `__delattr__` per class (~0.25 ms each class at every
    start-up): a frozen value class is `@frozen` (patchkit.base.values), which makes one of each
    without compiling, but for the few made in bulk (STAYS_FROZEN)."""
    compiled = []
    for name in _startup_modules():
        for cls in vars(importlib.import_module(name)).values():
            ours = isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls)
            if ours and cls.__dataclass_params__.frozen:  # type: ignore[union-attr]
                compiled.append(f"{name}.{cls.__qualname__}")
    assert sorted(compiled) == sorted(STAYS_FROZEN)
