"""Modules of the tree that would hang the launch's import before any check of patchkit's runs: a
fifo or a device (often a symlink to /dev/zero) where Python looks for a module. Python's import opens
such a file and waits on it (a fifo), or reads it without end (/dev/zero); the guard, which vLLM loads
after `import vllm`, never runs. Found by listing the package, never by opening a file in it."""

from __future__ import annotations

import importlib.machinery
import os
import stat
from pathlib import Path

from patchkit.base import hints

PACKAGE = "vllm"
GUARD_MODULE = "patchkit_guard.py"  # the guard's own module, beside vllm/ (engine.guard.MODULE)
NOT_A_MODULE = "is a fifo or a device, not a module"
# vLLM's package holds ~1,400 modules in ~200 directories; a listing past this is no vLLM's
MOST_ENTRIES = 200_000


def hanging_modules(root: Path) -> list[str]:
    """The paths (relative to `root`, the directory holding vllm/) named as a module Python imports
    (a source, a sourceless .pyc, an extension module; vLLM's package, and the guard's module) that
    are a fifo or a device, themselves or through a symlink. The package's __pycache__ is not listed
    (the guard judges its recorded files' bytecode). Listing costs ~3 ms CPU on vLLM 0.16.0."""
    suffixes = tuple(importlib.machinery.all_suffixes())
    found = [GUARD_MODULE] if _blocks(root / GUARD_MODULE) else []
    pending, seen = [root / PACKAGE], 0
    while pending and seen < MOST_ENTRIES:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        pending += [] if entry.name == "__pycache__" else [Path(entry.path)]
                    elif entry.name.endswith(suffixes) and not entry.is_file(follow_symlinks=False):
                        found += [os.path.relpath(entry.path, root)] if _blocks(Path(entry.path)) else []
        except OSError:  # unlistable: Python cannot list it either, and imports nothing from it
            continue
    return sorted(found)


def _blocks(path: Path) -> bool:
    """Whether opening and reading `path` (following symlinks, as the import does) may never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # none, or a dangling link: the import fails at once, it does not wait
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def hanging_said(paths: list[str]) -> str:
    """hanging_modules' paths, said."""
    if len(paths) == 1:
        return f"{paths[0]} {NOT_A_MODULE}: {_HANGS}"
    named = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return f"{named} are fifos or devices, not modules: {_HANGS}"


_HANGS = "importing it waits on it or reads it without end, so a launch that imports it hangs before any check runs"


def hanging_fix(root: Path, paths: list[str], version: object | None = None) -> str:
    """What ends it: the file removed (`rm` removes a symlink, never what it leads to), then vLLM's own
    file put back by a reinstall, the guard's by apply."""
    removal = hints.remove_files([str(root / p) for p in paths])
    puts_back = [f"reinstall vLLM ({hints.pip_reinstall(version)})"] if any(p != GUARD_MODULE for p in paths) else []
    puts_back += [f"run {hints.command('apply', '--guard')}"] if GUARD_MODULE in paths else []
    return f"run {removal}, then {' and '.join(puts_back)}, then run {hints.command('status')}"
