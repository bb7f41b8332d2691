"""Bytecode that would hang the launch's import: a fifo or a device (often a symlink to /dev/zero) named
as a module's .pyc in __pycache__. Python's import finds a module by its source, which must be a
regular file (a fifo or a device named x.py is passed over, as if there were none), then opens its
bytecode with no such test: it waits on a fifo, or reads a device without end, before any check of
patchkit's runs (the guard loads after `import vllm`). Found by listing, never by opening a file."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from patchkit.base import hints

PACKAGE = "vllm"
GUARD_MODULE = "patchkit_guard"  # the guard's own module, beside vllm/ (engine.guard.MODULE)
NOT_BYTECODE = "is a fifo or a device, not bytecode"
# vLLM's package holds ~1,400 modules in ~200 directories; a listing past this is no vLLM's
MOST_ENTRIES = 200_000
# (tree, tags) -> what the scan found, within scanned_once() alone
_SCANNED: ContextVar[dict[tuple[Path, tuple[str, ...]], list[str]] | None] = ContextVar("patchkit_hanging")


@contextmanager
def scanned_once() -> Iterator[None]:
    """Within it (one command), each tree's bytecode is scanned once, however many sets judge it:
    patchkit never makes or removes a fifo or device (bytecode.fix refuses them)."""
    token = _SCANNED.set({})
    try:
        yield
    finally:
        _SCANNED.reset(token)


def hanging_modules(root: Path, tags: Iterable[str], recorded: Iterable[str] = ()) -> list[str]:
    """The .pyc paths (relative to `root`, the directory holding vllm/) in vllm's __pycache__
    directories and the guard's, of the bytecode tags `tags` (the importing Python's), beside a regular
    source, that are a fifo or a device, themselves or through a symlink. `recorded`: sources the
    guard judges the bytecode of itself (status says its refusal), left out."""
    tags, skipped = tuple(tags), {os.path.join(root, path) for path in recorded}
    told, key = _SCANNED.get(None), (root, tags)
    found = told[key] if told is not None and key in told else _scan(root, tags)
    if told is not None:
        told[key] = found
    kept = [path for path in found if _source_of(path) not in skipped]
    return sorted(os.path.relpath(path, root) for path in kept)


def _scan(root: Path, tags: tuple[str, ...]) -> list[str]:
    """The hanging .pyc paths under `root` (the guard's and vllm's caches), every one."""
    found = _hanging_in(root / "__pycache__", tags, {GUARD_MODULE})
    pending, seen = [root / PACKAGE], 0
    while pending and seen < MOST_ENTRIES:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        found += _hanging_in(Path(entry.path), tags) if entry.name == "__pycache__" else []
                        pending += [] if entry.name == "__pycache__" else [Path(entry.path)]
        except OSError:  # unlistable: Python cannot list it either, and imports nothing from it
            continue
    return found


def _hanging_in(cache: Path, tags: tuple[str, ...], modules: set[str] | None = None) -> list[str]:
    """The fifos and devices among `cache`'s .pyc files of `tags` (of `modules` only, when given)
    whose source beside the cache is a regular file."""
    found = []
    try:
        with os.scandir(cache) as entries:
            for entry in entries:
                name, _, rest = entry.name.partition(".")
                if not rest.endswith(".pyc") or entry.is_file(follow_symlinks=False):
                    continue
                if rest.split(".")[0] in tags and (modules is None or name in modules) and _hangs(entry.path):
                    found.append(entry.path)
    except OSError:
        return []
    return found


def _source_of(pyc: str) -> str:
    cache, name = os.path.split(pyc)
    return os.path.join(os.path.dirname(cache), name.partition(".")[0] + ".py")


def _hangs(pyc: str) -> bool:
    """Whether reading `pyc` (following symlinks, as the import does) may never end, where the import
    opens it at all: its source is a regular file."""
    try:
        mode = os.stat(pyc).st_mode
        source = os.stat(_source_of(pyc)).st_mode
    except OSError:  # no source, or a dangling link: the import never opens it, or fails at once
        return False
    blocks = stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
    return blocks and stat.S_ISREG(source)


def hanging_said(paths: list[str]) -> str:
    """hanging_modules' paths, said."""
    if len(paths) == 1:
        return f"{paths[0]} {NOT_BYTECODE}: {_HANGS}"
    named = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return f"{named} are fifos or devices, not bytecode: {_HANGS}"


_HANGS = "importing its module opens it and waits on it or reads it without end, so the launch hangs"


def hanging_fix(root: Path, paths: list[str]) -> str:
    """What ends it: the file removed (`rm` removes a symlink, never what it leads to); Python
    writes its bytecode again."""
    removal = hints.remove_files([str(root / p) for p in paths])
    return f"run {removal} (Python writes its bytecode again), then run {hints.command('status')}"
