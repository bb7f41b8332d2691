"""Write a plan to the tree all-or-nothing: journal, stage, replace, record; roll back on failure.

Order of operations:
  1. preflight: every path inside the root, no symlinks on the way, every directory writable;
  2. save each original to the object store and stage each new content as a temp file in the
     destination directory (same filesystem, so os.replace is atomic);
  3. write the journal (the files, their before/after hashes, the previous state.json);
  4. replace/delete the files, then write the new state.json;
  5. delete the journal: this is the commit point.
A journal found later means the transaction did not finish: `recover` rolls it back, restoring
every file to its recorded original. Originals are saved before any file changes, so this is
always possible.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import locks
from patchkit.errors import BadInput, LockBusy, TargetError
from patchkit.fsutil import atomic_write
from patchkit.state import (
    State,
    file_sha,
    fsync_dir,
    meta_dir,
    object_path,
    read_object,
    sha256,
    state_path,
)

if TYPE_CHECKING:  # pragma: no cover
    from filelock import BaseFileLock

LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT = "PATCHKIT_LOCK_TIMEOUT", 60.0
_WRITABLE_HINT = "patchkit records its state inside the target tree; it must be writable"


@dataclass(frozen=True)
class FileWrite:
    path: str  # relative to the root, POSIX
    before: bytes | None
    after: bytes | None


class _Faults:
    """Test-only: PATCHKIT_FAULT_AFTER=N makes the Nth filesystem operation fail
    with ENOSPC (PATCHKIT_FAULT_MODE=raise, the default) or end the process at once (=exit)."""

    def __init__(self) -> None:
        self.after = int(os.environ.get("PATCHKIT_FAULT_AFTER", "0") or 0)
        self.mode = os.environ.get("PATCHKIT_FAULT_MODE", "raise")
        self.count = 0

    def tick(self) -> None:
        if not self.after:
            return
        self.count += 1
        if self.count == self.after:
            if self.mode == "exit":
                os._exit(70)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


_faults = _Faults()


@contextmanager
def target_lock(root: Path, timeout: float | None = None):
    """One writer per target. flock dies with its process, so a killed patchkit never blocks.

    Yields the recovery message, if an interrupted transaction had to be rolled back first.
    """
    lock = _acquire(root, timeout)
    try:
        yield recover(root)
    finally:
        lock.release()


def _acquire(root: Path, timeout: float | None) -> BaseFileLock:
    if timeout is None:  # read here, not at import: a bad value is the command's error, before any write
        timeout = locks.seconds_from_env(LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT, zero_ok=True)
    meta = meta_dir(root)
    try:
        meta.mkdir(exist_ok=True)
    except OSError as exc:
        raise TargetError(f"cannot create {meta}: {exc.strerror}", hint=_WRITABLE_HINT) from exc
    return locks.acquire(
        meta / "lock",
        timeout,
        busy=lambda waited: LockBusy(
            f"another patchkit is working on {root} (waited {waited:.0f} s)", hint="try again when it has finished"
        ),
        unusable=lambda exc: TargetError(f"cannot create the lock in {meta}: {exc.strerror}", hint=_WRITABLE_HINT),
    )


def journal_path(root: Path) -> Path:
    return meta_dir(root) / "journal.json"


def commit_changes(
    root: Path, changes: dict[str, tuple[bytes | None, bytes | None]], new_state: State, *, undo: bool = False
) -> None:
    """commit() a plan's changes (path -> (before, after)), or with `undo` their reverse."""
    commit(
        root,
        [
            FileWrite(p, after, before) if undo else FileWrite(p, before, after)
            for p, (before, after) in sorted(changes.items())
        ],
        new_state,
    )


def commit(root: Path, writes: list[FileWrite], new_state: State) -> None:
    preflight(root, [w.path for w in writes])
    previous = state_path(root).read_bytes() if state_path(root).is_file() else None
    txid = secrets.token_hex(8)
    entries = [_journal_entry(root, w, txid) for w in writes]
    journal = {"id": txid, "previous_state": previous.decode() if previous else None, "files": entries}
    try:
        _write_atomic(journal_path(root), json.dumps(journal).encode())
        for w, entry in zip(writes, entries, strict=True):
            _stage(root, w, entry)
        for entry in entries:
            _install(root, entry)
        _write_atomic(state_path(root), new_state.to_bytes())
        _faults.tick()
        journal_path(root).unlink()
        fsync_dir(meta_dir(root))
    except OSError as exc:
        _rollback(root, journal)
        where = f" ({exc.filename})" if exc.filename else ""
        raise TargetError(f"writing the tree failed: {exc.strerror or exc}{where}; every file was rolled back") from exc
    except BaseException:
        _rollback(root, journal)
        raise
    _prune_objects(root, new_state)


def recover(root: Path) -> str | None:
    """Roll back a transaction a crash left unfinished. Returns what was done, if anything."""
    path = journal_path(root)
    if not path.is_file():
        return None
    try:
        journal = json.loads(path.read_bytes())
    except ValueError as exc:  # written atomically, so only outside damage gets here
        raise BadInput(f"the journal {path} is damaged ({exc}); inspect the tree by hand") from exc
    restored = _rollback(root, journal)
    return (
        f"rolled back an interrupted patchkit transaction: {restored} file(s) restored"
        if restored
        else "rolled back an interrupted patchkit transaction: no file had changed yet"
    )


@contextmanager
def consistent_read(root: Path):
    """Hold the lock while reading several files, so no writer is half-way through them.

    Yields the recovery message, if an interrupted transaction had to be rolled back first. A
    reader that may not create the lock (a read-only tree) reads without it, unless a journal
    says a transaction is unfinished: that needs a writer to recover.
    """
    try:
        lock = _acquire(root, None)
    except LockBusy:
        raise
    except TargetError:
        if journal_path(root).is_file():
            raise
        lock = None
    try:
        yield recover(root) if lock else None
    finally:
        if lock:
            lock.release()


def preflight(root: Path, paths: list[str]) -> None:
    """Refuse before writing anything: escapes, symlinks, special files, unwritable places."""
    real_root = root.resolve()
    for rel in paths:
        full = root / rel
        parent = full.parent
        current = root
        for part in Path(rel).parts[:-1]:
            current = current / part
            if current.is_symlink():
                raise BadInput(f"{rel}: the path goes through a symlink ({current}); refusing to write")
            if current.exists() and not current.is_dir():
                raise TargetError(f"{rel}: {current} is not a directory")
        if full.is_symlink():
            raise BadInput(f"{rel} is a symlink; refusing to write through it")
        if not str(full.resolve()).startswith(str(real_root) + os.sep):
            raise BadInput(f"{rel} resolves outside the target {root}")
        if full.exists() and not full.is_file():
            raise BadInput(f"{rel} is not a regular file (device, fifo or directory)")
        existing = parent
        while not existing.exists():
            existing = existing.parent
        if not os.access(existing, os.W_OK):
            raise TargetError(
                f"{existing} is not writable (needed for {rel})", hint="run as the user that owns the vLLM install"
            )
        if full.exists() and not os.access(full, os.W_OK):
            raise TargetError(f"{rel} is not writable", hint="run as the user that owns the vLLM install")


def _journal_entry(root: Path, w: FileWrite, txid: str) -> dict:
    full = root / w.path
    staged = full.parent / f".{full.name}.patchkit-{txid}.tmp"
    return {
        "path": w.path,
        "before": sha256(w.before),
        "after": sha256(w.after),
        "staged": str(staged.relative_to(root)) if w.after is not None else None,
        "mode": stat.S_IMODE(full.stat().st_mode) if w.before is not None else None,
        "created_dirs": [str(p.relative_to(root)) for p in _missing_parents(full.parent, root)],
    }


def _stage(root: Path, w: FileWrite, entry: dict) -> None:
    """Save the original and stage the new content beside its file. No target file changes."""
    if w.before is not None:
        obj = object_path(root, entry["before"])
        if not obj.is_file():
            obj.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(obj, w.before)
    for rel in entry["created_dirs"]:
        _faults.tick()
        (root / rel).mkdir(exist_ok=True)
    if w.after is not None:
        _faults.tick()
        _write_file(root / entry["staged"], w.after, entry["mode"])


def _install(root: Path, entry: dict) -> None:
    full = root / entry["path"]
    _faults.tick()
    if entry["after"] is None:
        full.unlink()
        _remove_empty_parents(full.parent, root)
    else:
        os.replace(root / entry["staged"], full)
    fsync_dir(full.parent)


def _rollback(root: Path, journal: dict) -> int:
    restored = 0
    for entry in reversed(journal.get("files", [])):
        full = root / entry["path"]
        current = file_sha(root, entry["path"])
        if entry["before"] is None:
            if current is not None:
                full.unlink()
                restored += 1
            for rel in reversed(entry.get("created_dirs", [])):
                with suppress(OSError):
                    (root / rel).rmdir()
        elif current != entry["before"]:
            _write_atomic(full, read_object(root, entry["before"]), mode=entry.get("mode"))
            restored += 1
        if entry.get("staged"):
            (root / entry["staged"]).unlink(missing_ok=True)
    previous = journal.get("previous_state")
    if previous is None:
        state_path(root).unlink(missing_ok=True)
    else:
        _write_atomic(state_path(root), previous.encode())
    journal_path(root).unlink(missing_ok=True)
    return restored


def _remove_empty_parents(directory: Path, root: Path) -> None:
    """A delete that empties a directory removes it too, so revert leaves no trace of an add."""
    while directory != root and directory.parent != root:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent


def _missing_parents(directory: Path, root: Path) -> list[Path]:
    missing = []
    while not directory.exists() and directory != root:
        missing.append(directory)
        directory = directory.parent
    return list(reversed(missing))


def _write_file(path: Path, data: bytes, mode: int | None) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if mode is not None:
        os.chmod(path, mode)


def _write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    _faults.tick()
    atomic_write(path, data, mode=mode, durable=True, before_replace=_faults.tick)


def _prune_objects(root: Path, state: State) -> None:
    keep = state.referenced_objects()
    store = meta_dir(root) / "objects"
    if store.is_dir():
        for obj in store.iterdir():
            if obj.name not in keep:
                obj.unlink(missing_ok=True)
