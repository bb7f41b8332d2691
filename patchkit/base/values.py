"""Shared `__eq__`, `__hash__`, `__repr__` and frozen `__setattr__`/`__delattr__` for dataclasses,
as the generated ones behave.

On Python 3.11 a dataclass compiles each generated method with an `exec` of its own when its module
is imported: ~50 value classes load on every start-up (issue 21). A class declared
`@dataclass(eq=False, repr=False)` over `Value` (`Shown` for one equal to itself alone), or
`@frozen` over `FrozenValue` (or `Shown`), compiles only `__init__`, and compares, hashes, reads and
refuses a change as the generated methods would: by the fields' compare/hash/repr flags, in order,
as tuples.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_said: object) -> Callable[[Any], Any]:
        return lambda decorated: decorated


Getter = Callable[[Any], tuple[Any, ...]]

# Per class, the getters of its compared, hashed and shown fields: made at the first use, not at import.
_GETTERS: dict[type, tuple[Getter, Getter, tuple[str, ...]]] = {}


def _as_tuple(names: list[str]) -> Getter:
    """A getter of these attributes as one tuple (attrgetter's, except for fewer than two names)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        only = names[0]
        return lambda value: (getattr(value, only),)
    return lambda value: ()


def _getters(cls: type) -> tuple[Getter, Getter, tuple[str, ...]]:
    found = _GETTERS.get(cls)
    if found is None:
        fields = dataclasses.fields(cls)
        compared = [f.name for f in fields if f.compare]
        # the generated __hash__'s fields: hash=True, or hash unset and compared
        hashed = [f.name for f in fields if f.hash or (f.hash is None and f.compare)]
        found = _GETTERS[cls] = (_as_tuple(compared), _as_tuple(hashed), tuple(f.name for f in fields if f.repr))
    return found


class Shown:
    """A dataclass's repr (a subclass is `@dataclass(repr=False)`); compared and hashed by identity
    if it is eq=False too."""

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _getters(self.__class__)[2])
        return f"{self.__class__.__qualname__}({shown})"


class Value(Shown):
    """A dataclass's equality and repr (a subclass is `@dataclass(eq=False, repr=False)`); unhashable,
    as a mutable dataclass with eq is."""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _getters(self.__class__)[0]
        return compared(self) == compared(other)


class FrozenValue(Value):
    """A frozen dataclass's equality, hash and repr (a subclass is `@frozen`)."""

    def __hash__(self) -> int:
        return hash(_getters(self.__class__)[1](self))


C = TypeVar("C")


@dataclass_transform(frozen_default=True, eq_default=False, field_specifiers=(dataclasses.field,))
def frozen(cls: type[C]) -> type[C]:
    """`@dataclass(frozen=True, eq=False, repr=False)`, but for the `__setattr__` and `__delattr__`
    that `frozen=True` compiles per class (~0.25 ms of start-up each, ~26 classes a dry run):
    these refuse what those refuse, a field set (FrozenInstanceError) or any other name, and let
    `__init__` set each field once. (An instance costs more to make: a class made in the thousands
    a run stays a frozen dataclass.)"""
    made: Any = dataclasses.dataclass(eq=False, repr=False)(cls)
    made.__setattr__ = _set_once(frozenset(f.name for f in dataclasses.fields(made)))
    made.__delattr__ = _never_delete
    return cls


def _set_once(fields: frozenset[str]) -> Callable[[Any, str, object], None]:
    """A class's `__setattr__`: a closure, made without compiling anything."""

    def set_once(self: Any, name: str, value: object, _set: Callable[..., None] = object.__setattr__) -> None:
        if name in fields and name not in self.__dict__:
            _set(self, name, value)
            return
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    return set_once


def _never_delete(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
