"""Filesystem rules every module shares: the one path-safety rule and the one atomic write.

Kept import-light (stdlib only): the engine, the fetcher and the caches all use it.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_reason(path: str) -> str | None:
    """Why a relative POSIX path (a diff's file, a zip member, a recorded path) may not be used
    under a tree, or None when it is safe: no absolute path, no backslash, no NUL, no '..', no
    empty or '.' component. Resolving symlinks is the caller's job (the path is only text here)."""
    if _plainly_safe(path):  # the common case, in a few C-level string tests (a wheel has thousands)
        return None
    if not path:
        return "is empty"
    if "\\" in path:
        return "contains a backslash"
    if "\x00" in path:
        return "contains a NUL byte"
    if path.startswith("/") or _DRIVE.match(path):
        return "is absolute"
    parts = path.split("/")
    if ".." in parts:
        return "contains '..'"
    if any(p in ("", ".") for p in parts):
        return "is not a normalized relative path"
    return None


def _plainly_safe(path: str) -> bool:
    """A conservative shortcut: true only for paths unsafe_reason's rule accepts (a "/." anywhere, a
    leading "." or a drive-like second character send a path the long way)."""
    return bool(
        path
        and not path.startswith(("/", "."))
        and path[1:2] != ":"
        and not path.endswith("/")
        and "//" not in path
        and "/." not in path
        and "\\" not in path
        and "\x00" not in path
    )


def inside(tree: Path, path: Path) -> bool:
    """Whether `path`, symlinks resolved, lies inside `tree` (symlinks resolved too)."""
    try:
        path.resolve().relative_to(tree.resolve())
    except (ValueError, OSError):
        return False
    return True


def atomic_write(
    path: Path,
    data: bytes,
    *,
    mode: int | None = None,
    durable: bool = False,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Write `data` to `path` through a temporary file in the same directory and os.replace, so a
    reader sees the old bytes or the new ones, never a part. `durable` fsyncs the data before the
    rename (the transaction's files); `before_replace` runs between the write and the rename (the
    fault-injection tests). The temporary file never outlives a failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.patchkit-{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o777)  # never setuid, setgid or sticky
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
