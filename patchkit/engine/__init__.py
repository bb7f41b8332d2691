"""Apply, revert and verify on a target: resolve it, inspect it, transact on it, guard it."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from types import ModuleType

    from patchkit.engine import several

# Loaded when first named as `engine.several`: `apply --set` (one set) never needs the several-set
# steps (their module and its four classes, ~1 ms of a dry run's start-up)
_ON_FIRST_USE = {"several"}


def __getattr__(name: str) -> ModuleType:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return import_module(f"{__name__}.{name}")


__all__ = ["several"]
