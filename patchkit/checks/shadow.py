"""shadow: no file Python imports first may stand beside a source the series patches.

importlib's FileFinder looks in a module's directory for, in this order: a package (`<stem>/`
holding `__init__` with a suffix it loads), an extension module (`<stem>` + one of
EXTENSION_SUFFIXES: `.cpython-312-x86_64-linux-gnu.so`, `.abi3.so`, `.so`, `.cp312-win_amd64.pyd`,
`.pyd`), the source `<stem>.py`, legacy bytecode `<stem>.pyc` (FileFinder.find_spec,
_get_supported_file_loaders). A package or an extension module beside a patched `.py` is what
runs: the patch is dead. A directory without `__init__` is a namespace portion, taken only when
nothing else is found: a module or extension named like a package on the way without `__init__`
shadows every source below it, and an extension `__init__` of a package on the way (`vllm/__init__.abi3.so`)
is that package even beside its `__init__.py`. Which suffixes an interpreter loads is its own: every form CPython and PyPy
use is taken as one it may load. FileFinder takes each of these only when it is a regular file
(`_path_isfile`, which follows symlinks): a directory, a fifo or a link to a directory of that name is none.

Not in default_checks(): apply refuses such a tree (a target problem, before anything is written),
verify reports it (scan), and `patchkit wheel` refuses such a wheel (bad input).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.base import hints
from patchkit.base.errors import TargetError
from patchkit.checks import CheckResult

if TYPE_CHECKING:
    from patchkit.series.patchfile import Patch

NAME = "shadow"
_EXTENSION = re.compile(r"(?:\.(?:cpython-[A-Za-z0-9_-]+|pypy[A-Za-z0-9_-]+|cp\d+-[A-Za-z0-9_-]+|abi3))?\.(?:so|pyd)")
_PACKAGE_INIT = re.compile(rf"__init__(?:\.py|\.pyc|{_EXTENSION.pattern})")
ORDER = "Python imports a package, then an extension module, before a .py"


def shadow(path: str, names_in: Callable[[str], Iterable[str]]) -> str | None:
    """The file Python imports instead of the source `path` (a `.py`), or None. `names_in(dir)`:
    the names of the regular files in that directory (relative to the same root; empty when it is none)."""
    if not path.endswith(".py"):
        return None
    parent, _, name = path.rpartition("/")
    found = _ancestor_shadow(parent, names_in)
    if found:
        return found
    stem = name[: -len(".py")]
    if stem != "__init__":  # a package's own __init__.py: no package of that name comes first
        package = _join(parent, stem)
        inits = sorted(n for n in names_in(package) if _PACKAGE_INIT.fullmatch(n))
        if inits:
            return _join(package, inits[0])
    extensions = sorted(
        n for n in names_in(parent) if n.startswith(f"{stem}.") and _EXTENSION.fullmatch(n[len(stem) :])
    )
    return _join(parent, extensions[0]) if extensions else None


def _ancestor_shadow(directory: str, names_in: Callable[[str], Iterable[str]]) -> str | None:
    """The module imported instead of a package on the way to a source (top-down, as imports run):
    an extension `__init__` wins over the package's `__init__.py`; a directory without `__init__` is
    only a namespace portion, and a module or extension module of its name beside it wins over it."""
    parts = directory.split("/") if directory else []
    for depth in range(1, len(parts) + 1):
        package = "/".join(parts[:depth])
        inits = sorted(n for n in names_in(package) if _PACKAGE_INIT.fullmatch(n))
        extension_inits = [n for n in inits if _EXTENSION.fullmatch(n[len("__init__") :])]
        if extension_inits:  # FileFinder tries `__init__` + extension suffixes before `__init__.py`
            return _join(package, extension_inits[0])
        if inits:
            continue
        parent, _, stem = package.rpartition("/")
        modules = sorted(
            n
            for n in names_in(parent)
            if n.startswith(f"{stem}.") and (n[len(stem) :] in (".py", ".pyc") or _EXTENSION.fullmatch(n[len(stem) :]))
        )
        if modules:
            return _join(parent, modules[0])
    return None


def sources(patches: Iterable[Patch]) -> list[str]:
    """The `.py` files the series leaves in place (changed, created, renamed to): those imported."""
    return sorted({f.target_path for p in patches for f in p.files if f.target_path and f.target_path.endswith(".py")})


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def planned(names_in: Callable[[str], Iterable[str]], patches: Iterable[Patch]) -> Callable[[str], set[str]]:
    """`names_in` as the series leaves the tree: without the files it deletes or renames away, with
    those it creates (a release diff may turn a module into a package of the same name). Each
    directory is listed once: a release diff's sources ask for their few hundred thousands of times."""
    gone: dict[str, set[str]] = defaultdict(set)
    new: dict[str, set[str]] = defaultdict(set)
    for f in (f for p in patches for f in p.files):
        if f.source_path and f.source_path != f.target_path:
            parent, _, name = f.source_path.rpartition("/")
            gone[parent].add(name)
        if f.target_path:
            parts = f.target_path.split("/")
            for depth in range(len(parts)):
                new["/".join(parts[:depth])].add(parts[depth])
    listed: dict[str, set[str]] = {}

    def names(directory: str) -> set[str]:
        if directory not in listed:
            listed[directory] = (set(names_in(directory)) - gone.get(directory, set())) | new.get(directory, set())
        return listed[directory]

    return names


def tree_shadows(root: Path, patches: list[Patch]) -> dict[str, str]:
    """path -> the file that shadows it, for each `.py` the series leaves in the tree at `root`."""

    names_in = planned(lambda directory: regular_names(root / directory), patches)
    return {path: found for path in sources(patches) if (found := shadow(path, names_in))}


def regular_names(directory: Path) -> list[str]:
    """The names of the regular files in `directory`, as FileFinder sees them."""
    try:
        with os.scandir(directory) as entries:
            return [entry.name for entry in entries if _regular_file(entry)]
    except OSError:  # none, a file, unreadable: nothing Python could import from either
        return []


def _regular_file(entry: os.DirEntry[str]) -> bool:
    """What FileFinder's _path_isfile accepts: a regular file, through symlinks (a dangling one: no)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def scan(root: Path, patches: list[Patch]) -> list[CheckResult]:
    """verify: a failure for each patched source a shadowing file keeps from being imported."""
    return [
        CheckResult(NAME, path, False, f"{found} is imported instead ({ORDER}): the patch never runs")
        for path, found in tree_shadows(root, patches).items()
    ]


def refuse(root: Path, patches: list[Patch]) -> None:
    """apply: a tree where a patched source would not be the module imported is refused unwritten."""
    found = tree_shadows(root, patches)
    if found:
        path, shadowing = next(iter(found.items()))
        raise TargetError(
            f"{root / shadowing} is imported instead of {path} ({ORDER}): the patch would never run; "
            "nothing was written",
            hint=fix(shadowing),
        )


def fix(shadowing: str = "the file imported instead") -> str:
    """What to do about a file that keeps a patched source from being imported: one answer for
    apply's refusal, verify's failure and preflight's (the series is not at fault; the file is)."""
    return (
        f"if {shadowing} is not vLLM's own, remove it and run {hints.command('apply')} again; "
        "if vLLM ships it, this series cannot patch this install"
    )
