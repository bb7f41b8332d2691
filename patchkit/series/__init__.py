"""Patch series: the library's sets, their patch files and contracts, and a series applied in memory (the plan)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

    from patchkit.series import plan
    from patchkit.series.patchfile import Patch
    from patchkit.series.plan import Plan

# Loaded when first named as `series.plan`: `run`'s fast path reads the record and never plans
_ON_FIRST_USE = {"plan"}


def __getattr__(name: str) -> ModuleType:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return import_module(f"{__name__}.{name}")


def dry_run(root: Path, patches: list[Patch], holding: dict[str, bytes | None] | None = None) -> Plan:
    """The series applied in memory to the tree at `root` (plan.plan_apply), its module loaded on the
    first call; `holding`: contents that stand for those paths' files (others are read under root)."""
    # lazy: `run`'s fast path reads the record and never plans
    from patchkit.series.plan import View, plan_apply

    return plan_apply(root, patches, View.holding(root, holding) if holding is not None else None)


__all__ = ["dry_run", "plan"]
