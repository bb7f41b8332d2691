"""What a vLLM dist-info holds: a wheel's RECORD, a patched wheel's provenance, and a vLLM installed from one."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from patchkit.base import fsutil
from patchkit.distinfo.record import (
    PROVENANCE,
    Record,
    find_record,
    has_provenance,
    labelled_by_patchkit,
    parsed_record,
    read_record_file,
)

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Collection

    from packaging.version import Version


def installed_wheel_reader() -> ModuleType:
    """distinfo.installed_wheel, for a tree with a provenance file (record.has_provenance): it loads
    the planner, which a stock tree's dry run and `run`'s fast path never need."""
    # lazy: only a vLLM installed from a patched wheel needs it
    import patchkit.distinfo.installed_wheel

    return patchkit.distinfo.installed_wheel


def installed_record(
    root: Path, version: Version | str | None, only: Collection[str] | None = None
) -> tuple[Record | None, str]:
    """The target's own RECORD (with `only`, its entries for those paths), or None and why there is none."""
    path = find_record(root, version)
    if path is None:
        return None, "no vllm-*.dist-info/RECORD in the tree (a source checkout?)"
    label = path.relative_to(root).as_posix()
    try:
        record = parsed_record(read_record_file(root, path), label, only)
    except fsutil.NotRegularFile as exc:
        return None, f"{label} is not readable as a RECORD: {exc.strerror or exc}"
    except OSError:
        record = None
    if record is None:
        return None, f"{label} is unreadable"
    return replace(_with_stock_hashes(root, record), patched_wheel=patched_build(root, path.parent)), ""


def _with_stock_hashes(root: Path, record: Record) -> Record:
    """Installed from a wheel patchkit built: its RECORD lists the patched files' own hashes, and
    the stock ones are in its provenance (patchkit.json), which is then the reference for them."""
    if not has_provenance(root):
        return record
    hashes = installed_wheel_reader().stock_hashes(root, record.hashes)
    if hashes == record.hashes:
        return record
    return replace(record, label=f"{record.label} (stock hashes from {PROVENANCE})", hashes=hashes)


def patched_build(root: Path, dist_info: Path) -> bool:
    """Whether `dist_info` is a patched wheel's install, so that its RECORD lists patched files and
    proves no file stock: it holds a provenance, which find() must believe (else BadInput, naming
    the fix), whatever its label (`--local-label corp1` names no patchkit). A `+patchkit…` label
    with no provenance is one whose record was lost: its RECORD is no evidence either."""
    if not os.path.lexists(dist_info / PROVENANCE):
        return labelled_by_patchkit(dist_info.name)
    installed_wheel_reader().find(root)  # refuses one it does not believe; several dist-infos: None, still no stock
    return True


def unlike_stock(root: Path, installed: Version | None, originals: dict[str, bytes | None]) -> list[str]:
    """Of the originals a series reversed gives (path -> bytes, None: a file it created), those vLLM's
    RECORD lists with other bytes: not stock, so not what patchkit's apply found (an edit since)."""
    record = tree_record(root, installed, sorted(originals))
    if record is None:  # nothing tells stock: the series reversed is all there is
        return []
    return [
        path
        for path, data in sorted(originals.items())
        if path in record.hashes and (data is None or not record.matches(path, data))
    ]


def tree_record(root: Path, installed: Version | str | None, paths: Collection[str]) -> Record | None:
    """vLLM's RECORD as evidence of stock: none where there is none, or where it is a patched build's
    (patched_build: its RECORD lists the patched files)."""
    found = find_record(root, installed)
    if found is None or patched_build(root, found.parent):
        return None
    try:
        return parsed_record(read_record_file(root, found), found.parent.name + "/RECORD", only=paths)
    except OSError:
        return None
