"""The saved copies, <root>/.patchkit/saved/<time>-<random>/: a user's edits kept aside where a forced revert (or --guard) overwrites them."""

from __future__ import annotations

import contextlib
import tempfile
from datetime import datetime
from pathlib import Path

from patchkit.base.errors import BadInput, TargetError
from patchkit.base.fsutil import atomic_write, inside, read_file
from patchkit.store.state import meta_dir


def keep_copies(root: Path, paths: list[str]) -> Path:
    """Copies of the files a forced revert overwrites, under .patchkit/saved/<time>-<random>/: a
    directory of its own per run, created exclusively (mkdtemp), so no run overwrites the copies
    of another; a symlinked saved/ is refused, never followed."""

    saved = meta_dir(root) / "saved"
    try:
        saved.mkdir(exist_ok=True)
    except OSError as exc:
        raise TargetError(f"cannot create {saved}: {exc.strerror}") from exc
    if saved.is_symlink() or not saved.is_dir() or not inside(root, saved):
        raise BadInput(f"{saved} is a symlink or not a directory; refusing to keep your edits there")
    try:
        where = Path(tempfile.mkdtemp(prefix=datetime.now().strftime("%Y%m%dT%H%M%S-"), dir=saved))
        for path in paths:
            # The contents (a regular file's, never through a symlink swapped in), readable by their
            # owner only: never a mode (a setuid bit) patchkit would then own.
            data = read_file(root / path, follow_symlinks=False)
            if data is None:
                raise BadInput(f"{path} is no longer a regular file; refusing to save it")
            atomic_write(where / path, data, mode=0o600)
    except OSError as exc:  # a full disk: before any tree file changed
        raise TargetError(f"cannot keep copies of your edits in {saved}: {exc.strerror}; nothing was reverted") from exc
    return where


def remove_if_empty(root: Path) -> None:
    """saved/ once its copies are deleted (the `rm -r` revert prints): an empty directory only,
    never followed through a symlink (rmdir takes neither a full directory nor a link)."""
    with contextlib.suppress(OSError):
        (meta_dir(root) / "saved").rmdir()
