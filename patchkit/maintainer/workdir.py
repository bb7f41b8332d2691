"""The directories the maintainer tools fill: a new (or empty) one, emptied again on failure."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from patchkit.base.errors import BadInput


def write_file(root: Path, path: str, data: bytes | None) -> None:
    """Write `path` under `root`, or delete it when `data` is None."""
    full = root / path
    if data is None:
        if full.exists():
            full.unlink()
        return
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(data)


def require_empty(directory: Path) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadInput(f"{directory} exists and is not an empty directory", hint="choose another DIR")


@contextlib.contextmanager
def fresh_dir(directory: Path) -> Iterator[Path]:
    """A new (or empty) directory to fill; emptied again if filling it fails."""
    require_empty(directory)
    existed = directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield directory.resolve()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        if existed:
            directory.mkdir(exist_ok=True)
        raise
