"""Patch series: the library's sets, their patch files and contracts, and a series applied in memory (the plan)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.series.patchfile import Patch
    from patchkit.series.plan import Plan


def dry_run(root: Path, patches: list[Patch], holding: dict[str, bytes | None] | None = None) -> Plan:
    """The series applied in memory to the tree at `root` (plan.plan_apply), its module loaded on the
    first call; `holding`: contents that stand for those paths' files (others are read under root)."""
    # lazy: `run`'s fast path reads the record and never plans
    from patchkit.series.plan import View, plan_apply

    return plan_apply(root, patches, View.holding(root, holding) if holding is not None else None)
