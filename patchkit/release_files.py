"""Which files of a release patchkit needs, and laying a fetched tree out for --target."""

from __future__ import annotations

import shutil
from pathlib import Path

from patchkit.errors import PatchkitError
from patchkit.library import (
    PATCH, UPSTREAM, PatchSetDef, Selection, choose_set, default_root, load_library, select,
)
from patchkit.version import parse


def files_for(version: str, library: str | None = None, set_name: str | None = None) -> list[str]:
    """The files patchkit reads of a release: those its series touches, or for an upstream release
    those the set's checks read; none for an unsupported one."""
    root = Path(library).resolve() if library else default_root()
    try:
        patch_set = choose_set(load_library(root), set_name)
        selection = select(patch_set, parse(version, "VERSION"))
    except PatchkitError:
        return []
    return needed_files(patch_set, selection)


def needed_files(patch_set: PatchSetDef, selection: Selection) -> list[str]:
    from patchkit.inspection import upstream_check_paths

    if selection.kind == PATCH:
        paths = {f.source_path or f.path for p in selection.patches for f in p.files}
    elif selection.kind == UPSTREAM:
        paths = set(upstream_check_paths(patch_set))
    else:
        return []
    contract = {req.file for req in patch_set.contract if req.applies_to(selection.version)}
    return sorted(paths | contract)


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
