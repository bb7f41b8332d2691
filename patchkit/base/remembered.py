"""Verdicts of checks that are pure functions of their inputs, kept across runs: a module's syntax
(its bytes, the interpreter) and the contract's results on a file (its bytes, the requirements,
the release, the contract's code); and the library's TOML files as parsed (series.library). Parsing and compiling vLLM's modules is most of a check's time,
and `patchkit wheel` or `apply` on the same release checks the same contents again.

    <cache>/verdicts/<check>/<key[:2]>/<key>.json   {"seal": ..., "verdict": ...}

The key is the sha256 of every input; the entry is sealed with this user's key (patchkit.base.seal): an
entry this user's patchkit did not write (edited, restored from another machine) is not believed,
and the check runs. Read never through a symlink, bounded; a cache that cannot be written only
costs time. Entries unused for a while are pruned, as the other caches' are.
"""

from __future__ import annotations

import hashlib
import importlib
from functools import cache
from pathlib import Path

from patchkit.base import fsutil, seal
from patchkit.base.usercache import cache_dir, prune, touch, usable_cache_dir

MISSING = object()
MAX_ENTRY_BYTES = 1 << 20
_SEAL_KIND = "check-verdict"


def key_of(inputs: object) -> str:
    return hashlib.sha256(seal.canonical(inputs)).hexdigest()


def recall(check: str, key: str) -> object:
    """The verdict remembered for `key`, or MISSING."""

    path = _entry(check, key)
    if path is None:
        return MISSING
    try:
        entry = fsutil.load_json_text(fsutil.read_regular(path, MAX_ENTRY_BYTES))
        verdict = entry["verdict"]
        if not seal.sealed(_SEAL_KIND, f"{check}/{key}", seal.canonical(verdict), entry.get("seal")):
            return MISSING
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return MISSING
    touch(path)
    return verdict


def remember(check: str, key: str, verdict: object) -> None:
    path = _entry(check, key)
    if path is None:
        return
    entry = {"seal": seal.seal(_SEAL_KIND, f"{check}/{key}", seal.canonical(verdict)), "verdict": verdict}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if fsutil.plain_directory(path.parents[3], path.parent):
            fsutil.atomic_write(path, fsutil.json_text(entry, "a cache entry").encode())
    except OSError:
        pass  # a read-only cache only costs time


def _entry(check: str, key: str) -> Path | None:
    """Where the entry goes: None when the cache may not be used (a symlink on the way from its
    root: never read, written or pruned through)."""

    root = cache_dir()
    path = root / "verdicts" / check / key[:2] / f"{key}.json"
    if not (_prepared(path.parents[1]) and fsutil.plain_directory(root, path.parent)):
        return None
    return path


@cache
def _prepared(directory: Path) -> bool:
    """Whether a check's directory may be used (a note on stderr, once, if not); pruned first."""

    if not usable_cache_dir(directory):
        return False
    prune(directory)
    return True


@cache
def code_of(*modules: str) -> str:
    """The sha256 of these modules' source files: a verdict of other code is another key."""

    digest = hashlib.sha256()
    for name in modules:
        module = importlib.import_module(name)
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()
