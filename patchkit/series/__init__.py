"""Patch series: the library's sets, their patch files and contracts, and a series applied in memory (the plan)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.series.patchfile import Patch
    from patchkit.series.plan import Plan


def dry_run(
    root: Path, patches: list[Patch], holding: dict[str, bytes | None] | None = None, *, from_disk: bool = False
) -> Plan:
    """The series applied in memory to the tree at `root` (plan.plan_apply), its module loaded on the
    first call; `holding`: contents that stand for those paths' files (others are read under root).
    `from_disk`: the plan's changes still start from the bytes on disk (what a transaction replaces)."""
    # lazy: `run`'s fast path reads the record and never plans
    from patchkit.series.plan import View, plan_apply

    view = View.holding(root, holding) if holding is not None and not from_disk else View(root)
    for path, data in (holding or {}).items() if from_disk else ():
        view.original_content(path)  # read from disk, then stood for
        view.current[path] = data
    return plan_apply(root, patches, view)
