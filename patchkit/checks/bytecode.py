"""bytecode: no compiled bytecode may keep running the old code of a file patchkit changed.

Images built with `compileall --invalidation-mode unchecked-hash` ship .pyc files Python never checks
against their source (PEP 552: the header's flags word, bit 0 = hash-based, bit 1 = check_source), so a
patched module would silently keep running its stock code. After apply and revert (inside the lock),
fix() looks at every `__pycache__/<module>.<tag>[.opt-N].pyc` and legacy `<module>.pyc` of the changed
files and
  - recompiles a stale one whose tag is the target interpreter's, with that interpreter and the
    pyc's own invalidation mode and optimization level, else (a full disk) removes it: that needs no room;
  - removes a stale one of another interpreter (it cannot be rebuilt here; Python rebuilds it);
  - removes a legacy one (only imported once the source is gone) and those of deleted sources;
  - treats a checked-hash pyc as an unchecked-hash one: Python re-validates it against the new source,
    except when run with --check-hash-based-pycs never, which loads it unchecked;
  - leaves timestamp pycs alone: Python re-validates them (mtime and size changed with the write).
scan() reports the same without changing anything (verify): a stale unchecked-hash pyc is a failure.

The work runs inside the target interpreter (patchkit/_target/bytecode.py; in-process when it is the one
running patchkit): only it knows its cache tag, its magic number and the key of its source hashes.

The tree is untrusted: a `__pycache__` or a .pyc that is a symlink (or a source directory that leads
out of the tree) is never followed, read, written or removed; nor is a .pyc that is not a regular file
(a fifo would hang the reader). Each is a failure naming it: Python may import from it, and patchkit
cannot tell what it holds.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from patchkit.base.errors import TargetError
from patchkit.base.fsutil import first_symlink, inside, judged_inside, unsafe_reason
from patchkit.checks import ERROR, WARNING, CheckResult
from patchkit.tree.target import run_worker

NAME = "bytecode"
# one .pyc: a job for the worker (path, source, pyc, tag, optimize, legacy, name), a refusal (path, name,
# refused), or a job with the worker's result for it (kind, mine, stale, action, attempt, error)
Item = dict[str, Any]
# a failure here is the tree's (a .pyc that could not be fixed, a symlink planted where bytecode
# goes), never the series': the fix is the same after apply, revert and verify
FIX = "remove what each line names (a .pyc file, or a symlink or special file where bytecode goes): Python then compiles the sources"


def fix(root: Path, paths: Iterable[str], python: str | None) -> list[CheckResult]:
    """After a write: rebuild or remove compiled bytecode that would shadow the new sources."""
    return _report(root, paths, python, fix=True)


def scan(root: Path, paths: Iterable[str], python: str | None) -> list[CheckResult]:
    """verify: stale bytecode, reported and left alone."""
    return _report(root, paths, python, fix=False)


def failures(results: list[CheckResult]) -> str:
    return "\n  ".join(f"{r.path}: {r.message}" for r in results if r.failed)


def _report(root: Path, paths: Iterable[str], python: str | None, *, fix: bool) -> list[CheckResult]:
    plain: set[str] = set()
    found = [item for path in sorted(paths) if path.endswith(".py") for item in compiled_files(root, path, plain)]
    if not found:
        return [CheckResult(NAME, None, True, "no compiled bytecode for the changed files")]
    jobs = [item for item in found if "refused" not in item]
    answer: dict[str, Any] = _run_worker(jobs, fix, python) if jobs else {"tag": "?", "results": []}
    by_path: dict[str, list[Item]] = {}
    for job, result in zip(jobs, answer["results"], strict=False):
        by_path.setdefault(job["path"], []).append({**job, **result})
    for item in found:
        if "refused" in item:
            by_path.setdefault(item["path"], []).append(item)
    return [_summarize(path, items, answer["tag"], fix) for path, items in by_path.items()]


def compiled_files(root: Path, path: str, plain: set[str] | None = None) -> list[Item]:
    """The .pyc files of one source: every interpreter's in __pycache__, and a legacy one beside it.
    One that may not be touched (see the module's doc) is an item with a "refused" reason instead.
    `plain`: the tree's directories found real so far (fsutil.first_symlink), kept across calls."""
    source = root / path
    stem = source.name[: -len(".py")]
    if not _directory_inside(root, path, plain):
        return [_refused(path, Path(path).parent.as_posix() + "/", "leads outside the target")]
    found = []
    cache = source.parent / "__pycache__"
    if cache.is_symlink():
        return [_refused(path, "__pycache__/", "a symlink"), *_legacy(path, source)]
    for pyc in sorted(cache.glob(f"{stem}.*.pyc")) if cache.is_dir() else ():
        parts = pyc.name[len(stem) + 1 : -len(".pyc")].split(".")
        if len(parts) > 2 or (len(parts) == 2 and not parts[1].startswith("opt-")):
            continue  # another module's (a dotted name cannot be a module)
        optimize = int(parts[1][len("opt-") :]) if len(parts) == 2 and parts[1][4:].isdigit() else 0
        found.append(_checked(_job(path, source, pyc, parts[0], optimize, legacy=False)))
    return found + _legacy(path, source)


def _directory_inside(root: Path, path: str, plain: set[str] | None) -> bool:
    """Whether the source's directory lies inside the tree, symlinks resolved: at once for a plain path with
    no symlink on its way, the source's own included (a moved vllm/'s aside), else resolved (fsutil.inside)."""
    if unsafe_reason(path) is None and first_symlink(root, path, plain) is None:
        return True
    return inside(judged_inside(root, path), (root / path).parent)


def _legacy(path: str, source: Path) -> list[Item]:
    legacy = source.with_suffix(".pyc")
    if legacy.is_symlink() or legacy.is_file():
        return [_checked(_job(path, source, legacy, None, 0, legacy=True))]
    return []


def _checked(job: Item) -> Item:
    """The job, or a refusal when its .pyc is a symlink or not a regular file."""
    try:
        mode = Path(job["pyc"]).lstat().st_mode
    except OSError as exc:
        return {**job, "refused": f"cannot be examined ({exc.strerror})"}
    if stat.S_ISLNK(mode):
        return {**job, "refused": "a symlink"}
    if not stat.S_ISREG(mode):
        return {**job, "refused": "not a regular file"}
    return job


def _refused(path: str, name: str, why: str) -> Item:
    return {"path": path, "name": name, "refused": why}


def _job(path: str, source: Path, pyc: Path, tag: str | None, optimize: int, *, legacy: bool) -> Item:
    return {
        "path": path,
        "source": str(source),
        "pyc": str(pyc),
        "tag": tag,
        "optimize": optimize,
        "legacy": legacy,
        "name": pyc.relative_to(source.parent).as_posix(),
    }


def _summarize(path: str, items: list[Item], tag: str, fix: bool) -> CheckResult:
    notes, level, ok = [], None, True
    for item in items:
        note, severity = _describe(item, tag, fix)
        notes.append(f"{item['name']}: {note}")
        if severity == ERROR:
            ok, level = False, ERROR
        elif severity == WARNING and level is None:
            ok, level = False, WARNING
    return CheckResult(NAME, path, ok, "; ".join(notes), level or ERROR)


def _describe(item: Item, tag: str, fix: bool) -> tuple[str, str | None]:
    """What one pyc is and what was (or would have to be) done; severity None when fine."""
    if "refused" in item:
        return f"{item['refused']}: not followed, so not checked or changed; remove it", ERROR
    kind, stale, action = item["kind"] or "unreadable", item["stale"], item["action"]
    if item["error"]:
        return f"{kind}, stale; could not {item.get('attempt') or 'fix'} it: {item['error']}", ERROR
    if action == "recompiled":
        return f"{kind}, stale: recompiled with {tag}", None
    if action == "removed" and item.get("not_recompiled"):  # removing needs no room: Python compiles the source
        return f"{kind}, stale; could not recompile it ({item['not_recompiled']}): removed", None
    if action == "removed":
        return f"{kind}, {_why_removed(item)}: removed", None
    if item["legacy"]:  # left alone by scan()
        if stale:
            return f"legacy {kind} pyc imported in place of the missing source", ERROR
        return "legacy pyc beside the source: not imported while the source exists", WARNING
    if kind == "unchecked-hash":
        if stale:
            return "unchecked-hash, stale: Python loads it without reading the source", ERROR
        if stale is None:
            return (
                "unchecked-hash pyc of another interpreter: cannot be checked with "
                + tag
                + (" (apply and revert remove such files)" if not fix else ""),
                WARNING,
            )
        return "unchecked-hash, up to date", None
    if kind == "timestamp":
        return (
            "timestamp, no longer matches the source's mtime/size: Python recompiles it"
            if fix
            else "timestamp: Python re-validates it by mtime/size"
        ), None
    if kind == "checked-hash":
        return "checked-hash: Python re-validates it against the source hash", None
    return f"{kind}: Python rejects it and compiles the source", None


def _why_removed(item: Item) -> str:
    if not Path(item["source"]).is_file():
        return "its source is gone"
    if item["legacy"]:
        return "legacy pyc beside the source (would be imported if the source went away)"
    if not item["mine"]:
        return "compiled by another interpreter, which alone could rebuild it"
    return "stale"


def _run_worker(jobs: list[Item], fix: bool, python: str | None) -> dict[str, Any]:
    request = {"jobs": [{k: v for k, v in job.items() if k != "path"} for job in jobs], "fix": fix}
    try:
        return run_worker(python, "bytecode", request, timeout=300)
    except TargetError as exc:
        return _all_failed(jobs, exc.message)


def _all_failed(jobs: list[Item], why: str) -> dict[str, Any]:
    return {
        "tag": "?",
        "results": [
            {
                "pyc": j["pyc"],
                "source": j["source"],
                "kind": None,
                "mine": False,
                "stale": None,
                "action": None,
                "error": why,
            }
            for j in jobs
        ],
    }
