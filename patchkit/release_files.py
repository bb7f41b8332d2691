"""Which files of a release patchkit needs, and laying a fetched tree out for --target."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from patchkit.errors import PatchkitError
from patchkit.library import PATCH, UPSTREAM, PatchSetDef, Selection, load_chosen, select
from patchkit.version import parse


def files_for(version: str, library: str | None = None, set_name: str | None = None) -> list[str]:
    """The files patchkit reads of a release: those its series touches, or for an upstream release
    those the set's checks read; none for an unsupported one."""
    try:
        patch_set = load_chosen(library, set_name)
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


def lay_out(tree: Path, dest: str | Path, paths: Iterable[str] | None = None) -> list[str]:
    """Copy a cached release tree (or its dist-info and `paths`) to dest, returning what was copied.

    The cache itself is never handed out for writing."""
    if paths is None:
        chosen = [p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()]
    else:
        dist_info = [p.relative_to(tree).as_posix() for p in tree.glob("vllm-*.dist-info/*") if p.is_file()]
        chosen = dist_info + [p for p in paths if (tree / p).is_file()]
    for rel in chosen:
        out = Path(dest) / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / rel, out)
    return sorted(chosen)
