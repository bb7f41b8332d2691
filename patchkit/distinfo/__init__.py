"""What a vLLM dist-info holds: a wheel's RECORD, a patched wheel's provenance, and a vLLM installed from one."""

from __future__ import annotations

from dataclasses import replace
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
    from pathlib import Path

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
    return replace(_with_stock_hashes(root, record), patched_wheel=labelled_by_patchkit(path.parent.name)), ""


def _with_stock_hashes(root: Path, record: Record) -> Record:
    """Installed from a wheel patchkit built: its RECORD lists the patched files' own hashes, and
    the stock ones are in its provenance (patchkit.json), which is then the reference for them."""
    if not has_provenance(root):
        return record
    hashes = installed_wheel_reader().stock_hashes(root, record.hashes)
    if hashes == record.hashes:
        return record
    return replace(record, label=f"{record.label} (stock hashes from {PROVENANCE})", hashes=hashes)
