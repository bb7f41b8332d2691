"""Bytecode that would hang the launch's import: a fifo or a device (often a symlink to /dev/zero) named
as a module's .pyc in __pycache__. Python's import finds a module by its source, which must be a
regular file (a fifo or a device named x.py is passed over, as if there were none), then opens its
bytecode with no such test: it waits on a fifo, or reads a device without end, before any check of
patchkit's runs (the guard loads after `import vllm`). Found by listing, never by opening a file."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from patchkit.base import hints
from patchkit.base.values import FrozenValue, frozen

PACKAGE = "vllm"
GUARD_MODULE = "patchkit_guard"  # the guard's own module, beside vllm/ (engine.guard.MODULE)
NOT_BYTECODE = "is a fifo or a device, not bytecode"
# vLLM's package holds ~1,400 modules in ~200 directories; a listing past this is no vLLM's
MOST_ENTRIES = 200_000
# .pyc that are not regular files (Python writes none) judged a scan: each stat may follow a planted
# chain of links (~5 ms each, 3,000 took 13 s); past these the rest are said unjudged, never passed
MOST_JUDGED = 64
# (tree, tags, sources left out) -> what the scan found, within scanned_once() alone
_SCANNED: ContextVar[dict[tuple[Path, tuple[str, ...], frozenset[str]], Scan] | None] = ContextVar("patchkit_hanging")


@frozen
class Scan(FrozenValue):
    """The bytecode a launch's import may hang on: `paths` that do (a fifo or a device, themselves or
    through a symlink), and `unjudged`, .pyc past MOST_JUDGED that are not regular files, each not looked
    through (relative to the tree; sorted). True when either holds one."""

    paths: list[str]
    unjudged: list[str]

    def __bool__(self) -> bool:
        return bool(self.paths or self.unjudged)


@contextmanager
def scanned_once() -> Iterator[None]:
    """Within it (one command), each tree's bytecode is scanned once, however many sets judge it:
    patchkit never makes or removes a fifo or device (bytecode.fix refuses them)."""
    token = _SCANNED.set({})
    try:
        yield
    finally:
        _SCANNED.reset(token)


def hanging_modules(root: Path, tags: Iterable[str], recorded: Iterable[str] = ()) -> Scan:
    """The .pyc paths (relative to `root`, the directory holding vllm/) in vllm's __pycache__
    directories and the guard's, of the bytecode tags `tags` (the importing Python's), beside a regular
    source, that are a fifo or a device, themselves or through a symlink. `recorded`: sources the
    guard judges the bytecode of itself (status says its refusal), left out unlooked at."""
    tags, skipped = tuple(tags), frozenset(os.path.join(root, path) for path in recorded)
    told, key = _SCANNED.get(None), (root, tags, skipped)
    found = told[key] if told is not None and key in told else _scan(root, tags, skipped)
    if told is not None:
        told[key] = found
    return found


def _scan(root: Path, tags: tuple[str, ...], skipped: frozenset[str]) -> Scan:
    """The hanging .pyc paths under `root` (the guard's and vllm's caches), and those left unjudged."""
    judging = _Judging(root, tags, skipped)
    judging.cache(root / "__pycache__", {GUARD_MODULE})
    pending, seen = [root / PACKAGE], 0
    while pending and seen < MOST_ENTRIES:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False) and entry.name == "__pycache__":
                        judging.cache(Path(entry.path))
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
        except OSError:  # unlistable: Python cannot list it either, and imports nothing from it
            continue
    return Scan(sorted(judging.hanging), sorted(judging.unjudged))


class _Judging:
    """One scan's findings, and how many .pyc it has looked through (MOST_JUDGED)."""

    def __init__(self, root: Path, tags: tuple[str, ...], skipped: frozenset[str]) -> None:
        self.root, self.tags, self.skipped = root, tags, skipped
        self.hanging: list[str] = []
        self.unjudged: list[str] = []
        self.judged = 0

    def cache(self, cache: Path, modules: set[str] | None = None) -> None:
        """The fifos and devices among `cache`'s .pyc files of the tags (of `modules` only, when
        given) whose source beside the cache is a regular file."""
        try:
            with os.scandir(cache) as entries:
                for entry in entries:
                    name, _, rest = entry.name.partition(".")
                    if not rest.endswith(".pyc") or entry.is_file(follow_symlinks=False):
                        continue
                    if rest.split(".")[0] in self.tags and (modules is None or name in modules):
                        self._judge(entry.path)
        except OSError:
            return

    def _judge(self, pyc: str) -> None:
        if _source_of(pyc) in self.skipped:
            return
        shown = os.path.relpath(pyc, self.root)
        if self.judged >= MOST_JUDGED:
            self.unjudged.append(shown)
            return
        self.judged += 1
        if _hangs(pyc):
            self.hanging.append(shown)


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


def unjudged_said(paths: list[str]) -> str:
    """Scan.unjudged, said: what was not looked at, and why it matters."""
    what = f"{paths[0]} and {len(paths) - 1:,} more .pyc are not regular files" if len(paths) > 1 else None
    return (
        f"{what or paths[0] + ' is not a regular file'}, which Python never writes: patchkit looked through "
        f"{MOST_JUDGED} such and no more; one leading to a fifo or a device hangs the launch's import"
    )


def unjudged_fix(root: Path) -> str:
    """Every .pyc under vllm/ that is not a regular file removed (`find -delete` removes a symlink,
    never what it leads to); Python writes its bytecode again."""
    where = shlex.quote(str(root / PACKAGE))
    removal = f"`find {where} -path '*/__pycache__/*.pyc' ! -type f ! -type d -delete`"
    return f"run {removal} (Python writes its bytecode again), then run {hints.command('status')}"


def hanging_fix(root: Path, paths: list[str]) -> str:
    """What ends it: the file removed (`rm` removes a symlink, never what it leads to); Python
    writes its bytecode again."""
    removal = hints.remove_files([str(root / p) for p in paths])
    return f"run {removal} (Python writes its bytecode again), then run {hints.command('status')}"
