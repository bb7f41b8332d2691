"""names: pyflakes on every touched Python file, as planned and as stock; only what the patch adds counts.

An undefined name the patch introduces (a base class used but never imported, a name exported in
__all__ but never defined, a local read before assignment) fails the check; any other new pyflakes
finding (unused import, redefinition, shadowing...) is a warning. Findings already in the stock file
are not the patch's doing and are ignored. Findings are compared by kind and arguments, not by line:
the patch moves lines. Two known false alarms are only warnings: an __all__ entry of a module with
a module-level __getattr__ (PEP 562), and a name pyflakes read out of a string inside an annotation.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import os
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pyflakes

from patchkit.base import fsutil, seal
from patchkit.base.usercache import cache_dir, prune, touch, usable_cache_dir
from patchkit.base.values import FrozenValue, frozen
from patchkit.checks import ERROR, WARNING, CheckContext, CheckResult, too_large_to_parse
from patchkit.checks.parsed import parsed

if TYPE_CHECKING:
    from pyflakes.messages import Message

UNDEFINED = frozenset({"UndefinedName", "UndefinedExport", "UndefinedLocal"})
# Messages whose last argument is the line of an earlier definition: it moves with the patch.
_LINE_ARGUMENT = frozenset(
    {"RedefinedWhileUnused", "ImportShadowedByLoopVar", "UndefinedLocal", "EagerUseOfLazyImport"}
)


@frozen
class Finding(FrozenValue):
    """One pyflakes message on a file, kept as plain values (the cache stores them)."""

    kind: str  # the pyflakes message class name
    args: tuple[
        str | int | float | bool | None, ...
    ]  # its arguments without line numbers: what identifies it across line shifts
    line: int
    text: str
    doubt: str | None = None  # why an undefined name may be a false alarm: then only a warning

    @property
    def is_error(self) -> bool:
        return self.kind in UNDEFINED and self.doubt is None

    def describe(self) -> str:
        return f"line {self.line}: {self.text}" + (f" ({self.doubt})" if self.doubt else "")


class NamesCheck:
    name = "names"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        planned = _present({p: ctx.read(p) for p in ctx.paths if p.endswith(".py")})  # None: deleted
        skipped = {p: result for p, data in planned.items() if (result := too_large_to_parse(self.name, p, data))}
        found = findings_of({p: data for p, data in planned.items() if p not in skipped})
        # Stock files only matter where the planned ones have findings (rare: vLLM is linted).
        read_stock = ctx.read_stock
        stock = _present({p: read_stock(p) for p, f in found.items() if f}) if read_stock else {}
        before = findings_of(stock)
        return [
            r
            for p in sorted(planned)
            for r in ([skipped[p]] if p in skipped else self._compare(p, found[p], before.get(p) or ()))
        ]

    def _compare(self, path: str, found: tuple[Finding, ...] | None, before: tuple[Finding, ...]) -> list[CheckResult]:
        if found is None:
            # The syntax check (run by the target's interpreter) judges files this Python cannot parse.
            return [
                CheckResult(
                    self.name,
                    path,
                    False,
                    "not checked: the Python running patchkit cannot parse this file (see the syntax check)",
                    WARNING,
                )
            ]
        if not found:
            return [CheckResult(self.name, path, True, "no pyflakes findings")]
        new = introduced(found, before)
        if not new:
            return [
                CheckResult(self.name, path, True, f"no new pyflakes findings ({len(found)} already in the stock file)")
            ]
        return [CheckResult(self.name, path, False, f.describe(), ERROR if f.is_error else WARNING) for f in new]


CHECK = NamesCheck()


def _present(contents: dict[str, bytes | None]) -> dict[str, bytes]:
    return {path: data for path, data in contents.items() if data is not None}


def introduced(after: tuple[Finding, ...], before: tuple[Finding, ...]) -> list[Finding]:
    """Findings in `after` beyond those `before` already had (as a multiset of kind + arguments)."""
    extra = Counter((f.kind, f.args) for f in after)
    extra.subtract(Counter((f.kind, f.args) for f in before))
    new = []
    for f in after:
        key = (f.kind, f.args)
        if extra[key] > 0:
            extra[key] -= 1
            new.append(f)
    return new


# apply checks the same contents twice (planned, then as written), and a large diff is slow to
# check (~35 ms a file): findings are kept per content, in memory and in patchkit's cache directory.
_SEEN: dict[str, tuple[Finding, ...] | None] = {}
_SEAL_KIND = "pyflakes"
_CACHE_SCHEMA = 2  # bump when what is stored per content changes (Finding, _doubt)


def findings(source: bytes) -> tuple[Finding, ...] | None:
    """pyflakes' findings for a module's source; None when this interpreter cannot parse it."""
    return findings_of({"": source})[""]


def findings_of(sources: dict[str, bytes]) -> dict[str, tuple[Finding, ...] | None]:
    """findings() for many sources at once, from the cache where it has them."""
    if len(_SEEN) > 8192:
        _SEEN.clear()
    digests = {key: hashlib.sha256(data).hexdigest() for key, data in sources.items()}
    todo = {digest: (key, sources[key]) for key, digest in digests.items() if digest not in _SEEN}
    if not todo:
        return {key: _SEEN[digest] for key, digest in digests.items()}
    cache = _cache_dir()
    for digest in list(todo):
        cached = _load(cache, digest)
        if cached is not _MISSING:
            _SEEN[digest] = cached
            del todo[digest]
    for digest, (key, data) in todo.items():
        found = _SEEN[digest] = _pyflakes(data, key)
        _store(cache, digest, found)
    return {key: _SEEN[digest] for key, digest in digests.items()}


class _Missing(enum.Enum):
    """No usable cache entry (a sentinel distinct from None, which caches "cannot parse")."""

    MISSING = enum.auto()


_MISSING = _Missing.MISSING


def _cache_dir() -> Path | None:
    """Per schema, pyflakes version, Python version (its ast, its builtins) and extra builtins; None
    when the cache may not be used (a symlink on the way: never written or pruned through)."""
    key = f"{_CACHE_SCHEMA}-{pyflakes.__version__}-py{sys.version_info[0]}.{sys.version_info[1]}"
    extra = os.environ.get("PYFLAKES_BUILTINS")
    if extra:
        key += "-" + hashlib.sha256(extra.encode()).hexdigest()[:12]
    directory = cache_dir() / "pyflakes"
    if not usable_cache_dir(directory / key):
        return None
    prune(directory)  # other pyflakes or Python versions leave whole keys behind
    return directory / key


MAX_ENTRY_BYTES = 1 << 22


def _load(cache: Path | None, digest: str) -> tuple[Finding, ...] | _Missing | None:
    """An entry's findings; _MISSING when there is none, or one this user's patchkit did not seal
    (the cache is shared: an edited "no findings" must not hide an undefined name)."""

    if cache is None:
        return _MISSING
    path = cache / digest[:2] / f"{digest}.json"
    if not fsutil.plain_directory(cache, path.parent):
        return _MISSING
    try:
        entry = fsutil.load_json_text(fsutil.read_regular(path, MAX_ENTRY_BYTES))  # never a symlink, never a fifo
        data = entry["findings"]
        if not seal.sealed(_SEAL_KIND, f"{cache.name}/{digest}", seal.canonical(data), entry.get("seal")):
            return _MISSING
        found = None if data is None else tuple(Finding(k, tuple(a), int(line), t, d) for k, a, line, t, d in data)
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return _MISSING
    touch(path)
    return found


def _store(cache: Path | None, digest: str, found: tuple[Finding, ...] | None) -> None:
    if cache is None:
        return
    data = None if found is None else [[f.kind, list(f.args), f.line, f.text, f.doubt] for f in found]
    entry = {"seal": seal.seal(_SEAL_KIND, f"{cache.name}/{digest}", seal.canonical(data)), "findings": data}
    path = cache / digest[:2] / f"{digest}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if fsutil.plain_directory(cache, path.parent) and fsutil.inside(cache, path.parent):
            fsutil.atomic_write(path, fsutil.json_text(entry, "a cache entry").encode())
    except OSError:
        pass  # a read-only cache only costs time


def _pyflakes(source: bytes, path: str) -> tuple[Finding, ...] | None:
    tree = parsed(source, path)  # kept for the contract, which reads the same contents next
    if not isinstance(tree, ast.Module):  # the syntax check says why
        return None
    # lazy: a warm dry run recalls every file's findings: pyflakes' checker loads on a miss (2.2 ms)
    from pyflakes.checker import Checker

    try:
        checker = Checker(tree, filename="<patched>")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    checker.messages.sort(key=lambda m: (m.lineno, m.col))
    lazy = _has_module_getattr(tree)
    names = _NamePositions(tree)
    return tuple(_finding(m, _doubt(m, lazy, names)) for m in checker.messages)


class _NamePositions:
    """Where the tree's names are, walked for only when a finding asks (rare: an undefined name)."""

    def __init__(self, tree: ast.Module) -> None:
        self._tree = tree
        self._found: set[tuple[int, int]] | None = None

    def __contains__(self, position: object) -> bool:
        if self._found is None:
            self._found = {(n.lineno, n.col_offset) for n in ast.walk(self._tree) if isinstance(n, ast.Name)}
        return position in self._found


def _doubt(message: Message, lazy_module: bool, name_positions: _NamePositions) -> str | None:
    kind = type(message).__name__
    if kind == "UndefinedExport" and lazy_module:
        return "unless the module's __getattr__ provides it"
    if kind == "UndefinedName" and (message.lineno, message.col) not in name_positions:
        # pyflakes reads string literals inside annotations as forward references; a subscript
        # like Array[..., d["words"]] is not one.
        return "read from a string inside an annotation"
    return None


def _has_module_getattr(tree: ast.Module) -> bool:
    """A module-level __getattr__ (PEP 562) can serve names __all__ lists but the module never binds."""
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__" for node in tree.body
    )


def _finding(message: Message, doubt: str | None) -> Finding:
    kind = type(message).__name__
    args = tuple(message.message_args)
    if kind in _LINE_ARGUMENT and args and isinstance(args[-1], int):
        args = args[:-1]
    # Compared for equality and cached as JSON: anything but a plain value by its repr.
    args = tuple(a if isinstance(a, (str, int, float, bool, type(None))) else repr(a) for a in args)
    return Finding(kind, args, message.lineno, message.message % message.message_args, doubt)
