"""Which files of a release patchkit needs, and laying a fetched tree out for --target."""

from __future__ import annotations

import shutil
from pathlib import Path

from patchkit.errors import PatchkitError
from patchkit.library import PATCH, choose_set, default_root, load_library, select
from patchkit.version import parse


def files_for(version: str, library: str | None = None, set_name: str | None = None) -> list[str]:
    """The files the set's series for `version` touches (none when upstream or unsupported)."""
    root = Path(library).resolve() if library else default_root()
    try:
        selection = select(choose_set(load_library(root), set_name), parse(version, "VERSION"))
    except PatchkitError:
        return []
    if selection.kind != PATCH:
        return []
    return sorted({f.source_path or f.path for p in selection.patches for f in p.files})


def lay_out(tree: Path, dest: str) -> int:
    """Copy a cached release tree to dest; the cache itself is never handed out for writing."""
    count = 0
    for src in tree.rglob("*"):
        if src.is_file():
            out = Path(dest) / src.relative_to(tree)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
            count += 1
    return count
