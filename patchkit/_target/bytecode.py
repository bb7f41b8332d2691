"""Stale compiled bytecode of the changed files: found, and (with "fix") recompiled or removed.

Runs in the target's interpreter: only it knows its cache tag, its magic number and the key of its
source hashes. What the results mean and how patchkit reports them: patchkit/checks/bytecode.py.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import marshal
import os
import py_compile
import stat
import sys
from typing import Any

Job = dict[str, Any]  # {"pyc", "source", "tag", "optimize", "legacy", "name"}: one pyc of one source
Outcome = dict[str, Any]  # what became of one job: {"pyc", "source", "kind", "mine", "stale", "action", "error"}

MODES = {
    "timestamp": py_compile.PycInvalidationMode.TIMESTAMP,
    "checked-hash": py_compile.PycInvalidationMode.CHECKED_HASH,
    "unchecked-hash": py_compile.PycInvalidationMode.UNCHECKED_HASH,
}


def work(request: dict[str, Any]) -> dict[str, Any]:
    """{"jobs": [...], "fix": bool} -> {"tag": this interpreter's cache tag, "results": [outcome per job]}."""
    tag = sys.implementation.cache_tag
    return {"tag": tag, "results": [one(job, request["fix"], tag) for job in request["jobs"]]}


def one(job: Job, fix: bool, tag: str) -> Outcome:
    pyc, source = job["pyc"], job["source"]
    out: Outcome = {
        "pyc": pyc,
        "source": source,
        "kind": None,
        "mine": False,
        "stale": None,
        "action": None,
        "error": None,
    }
    try:
        blob = _read_regular(pyc)
    except OSError as exc:
        out["error"] = "cannot read: %s" % (exc.strerror or exc)
        return out
    header = blob[:16]
    out["kind"] = _kind(header)
    out["mine"] = (
        len(header) == 16 and header[:4] == importlib.util.MAGIC_NUMBER and (job["legacy"] or job["tag"] == tag)
    )
    data: bytes | None = None
    st: os.stat_result | None = None
    try:  # never blocks: a fifo or device put there since patchkit looked is no source
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            data = f.read() if stat.S_ISREG(st.st_mode) else None
        st = st if data is not None else None
    except OSError:
        data = st = None
    out["stale"] = _stale(out, header, data, st, fix, job["legacy"])
    if fix and _needs_fixing(out, job, data):
        _fix(out, job, blob)
    return out


def _read_regular(pyc: str) -> bytes:
    """The pyc's bytes; never through a symlink (the file or its __pycache__), never from a fifo or device.
    patchkit sends only regular files; this holds if the tree changed since."""
    if os.path.islink(os.path.dirname(pyc)):
        raise OSError(errno.ELOOP, "its directory is a symlink")
    fd = os.open(pyc, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return f.read()


def _kind(header: bytes) -> str:
    """PEP 552: the header's flags word, bit 0 = hash-based, bit 1 = check_source."""
    if len(header) < 16:
        return "damaged"
    flags = int.from_bytes(header[4:8], "little")
    if not flags & 1:
        return "timestamp"
    return "checked-hash" if flags & 2 else "unchecked-hash"


def _stale(
    out: Outcome, header: bytes, data: bytes | None, st: os.stat_result | None, fix: bool, legacy: bool
) -> bool | None:
    """True: Python would run it instead of the current source; None: cannot tell with this interpreter."""
    kind = out["kind"]
    if data is None or st is None:
        return legacy  # a legacy pyc is imported once its source is gone; __pycache__ ones are not
    if legacy or kind == "damaged" or (kind == "checked-hash" and not fix):
        return False  # ignored beside a source / rejected / re-validated against the source hash
    if kind == "timestamp":
        mtime = int.from_bytes(header[8:12], "little")
        size = int.from_bytes(header[12:16], "little")
        # The header still fits a file just rewritten: compiled in the same second from other bytes
        # of the same size. Python would trust it.
        return bool(fix) and (mtime, size) == (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
    # a written file's checked-hash pyc too: Python run with --check-hash-based-pycs never loads it unchecked
    if not out["mine"]:
        return None  # its hash is keyed by another interpreter's magic number
    return header[8:16] != importlib.util.source_hash(data)


def _needs_fixing(out: Outcome, job: Job, data: bytes | None) -> bool:
    if job["legacy"] or data is None:
        return True
    if out["kind"] in ("unchecked-hash", "checked-hash"):
        return out["stale"] is not False
    return out["stale"] is True


def _fix(out: Outcome, job: Job, blob: bytes) -> None:
    rebuild = out["mine"] and os.path.isfile(job["source"]) and not job["legacy"]
    out["attempt"] = "recompile" if rebuild else "remove"
    try:
        if os.path.islink(os.path.dirname(job["pyc"])) or os.path.islink(job["pyc"]):
            raise OSError(errno.ELOOP, "a symlink appeared: not followed")
        if rebuild:
            py_compile.compile(
                job["source"],
                cfile=job["pyc"],
                dfile=_compiled_as(blob),
                doraise=True,
                optimize=job["optimize"],
                invalidation_mode=MODES[out["kind"]],
            )
            out["action"] = "recompiled"
        else:
            os.remove(job["pyc"])
            out["action"] = "removed"
    except (OSError, py_compile.PyCompileError) as exc:
        out["error"] = str(exc)
        if rebuild:
            _remove_instead(out, job, getattr(exc, "strerror", None) or str(exc))


def _remove_instead(out: Outcome, job: Job, why: str) -> None:
    """A stale pyc that could not be rebuilt (a full disk: the new one is written beside it first)
    is removed: that needs no room, and Python then compiles the source. Never through a symlink."""
    if os.path.islink(os.path.dirname(job["pyc"])) or os.path.islink(job["pyc"]):
        return
    try:
        os.remove(job["pyc"])
    except OSError:
        return
    out["not_recompiled"], out["error"], out["action"] = why, None, "removed"


def _compiled_as(blob: bytes) -> str | None:
    """The file name the image compiled it under (compileall -d / -s rewrite it), kept on rebuild."""
    try:
        code: Any = marshal.loads(blob[16:])
        filename: str = code.co_filename  # a code object's (else AttributeError, caught below)
        return filename
    except Exception:
        return None


def write_answer(path: str, answer: object) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(answer, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    write_answer(sys.argv[1], work(json.load(sys.stdin)))
