"""A release's stock files as the maintainer tools read them (through the fetch cache)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from patchkit import fetch
from patchkit.base.fsutil import read_file
from patchkit.series.patchfile import Patch

Progress = Callable[[str], None]
Contents = dict[str, bytes | None]  # path -> bytes (None: the file does not exist)


def stock_paths(patches: list[Patch]) -> list[str]:
    """The files a series reads from the stock release (a new file has none)."""
    return sorted({f.source_path for p in patches for f in p.files if f.source_path})


def release_contents(version: str, paths: list[str], progress: Progress | None) -> tuple[Path, Contents]:
    tree = fetch.release_tree(version, paths, progress=progress)
    return tree, {p: read_file(tree / p) for p in paths}


def metadata_file(tree: Path) -> Path | None:
    return next(iter(sorted(tree.glob("vllm-*.dist-info/METADATA"))), None)
