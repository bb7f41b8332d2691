"""Write a plan to the tree all-or-nothing: journal, stage, replace, record; roll back on failure.

Order of operations:
  1. preflight: every path inside the root, no symlinks on the way, every directory writable;
  2. write the journal (the files, their before/after hashes, the previous state.json);
  3. save each original to the object store and stage each new content as a temp file in the
     destination directory (same filesystem, so os.replace is atomic), then write the marker
     staged.json (the journal's id, each staged file's identity);
  4. replace/delete the files (a delete that empties a directory removes it), then write the new
     state.json, the old one kept under a second name;
  5. delete the journal: this is the commit point.
A journal found later means the transaction did not finish: `recover` rolls it back, restoring
every file to its recorded original. Originals are saved before any file changes, so this is
always possible. It acts on a file only on evidence the commit made, never on the journal's word
(a journal is read back from the tree and may be planted): without the marker the commit replaced
nothing; with it, the files before the first one still staged were replaced, and one that also
has its staged identity is the very file the commit wrote. The marker counts only when sealed with
this user's key for this tree: one that is not (planted, another user's crash, a tree moved since,
a key that could not be kept) is refused, nothing touched, until the user says `recover
--roll-back` (copies kept) or `--discard`. A file replaced or removed that is not the very one
staged (a tree restored from a tar) is kept aside first in .patchkit/saved/, and recovery says where. The rollback needs no new space: objects and the old state.json go back by
rename, and the directories the journal says the commit removed are made again. It and the
commit point defer SIGINT/SIGTERM/SIGHUP (patchkit.base.signals); each of its steps leaves the journal
true, so one cut short by SIGKILL is finished by the next command.

The journal, the objects and the record are the store's (patchkit/store/): this module decides
what is written and when, the store how its files are kept.

Durability: each file written is fsynced once (before its rename), and each directory once where
the order matters: .patchkit/ after the journal is written, objects/ before the first file is
replaced, each replaced file's directory after the replaces, .patchkit/ again at the commit.

The journal is read back from the tree, so recovery treats it as untrusted input (store.journal
checks its fields): beyond that, no symlink on the way, and every original needed read and checked
before the first file is touched. A journal that fails is refused whole (exit 2).
"""

from __future__ import annotations

import enum
import errno
import fcntl
import mmap
import os
import shlex
import signal
import stat
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import Version

from patchkit import fetch
from patchkit.base import hints, locks, notes, seal, signals
from patchkit.base.errors import BadInput, LockBusy, PatchkitError, TargetError, TreeRefused, escaped, few
from patchkit.base.fsutil import (
    NO_SPACE,
    Landed,
    Origin,
    blocks,
    fsync,
    fsync_dir,
    moved_package,
    no_space_hint,
    read_file,
    unsafe_reason,
)
from patchkit.base.hashing import sha256
from patchkit.base.values import FrozenValue, Value, frozen
from patchkit.distinfo import installed_wheel_reader
from patchkit.distinfo.record import has_provenance, listings
from patchkit.engine.guard import guard_files
from patchkit.engine.vouched import needs_force, patches_at_hand, recorded_in_library, series_at_hand
from patchkit.series.hunks import made_file, reverse_file
from patchkit.store import journal as store_journal
from patchkit.store.journal import (
    UNSETTLED,
    Journal,
    JournalEntry,
    journal_path,
    journal_refusal,
    settled_record,
    staged_name,
)
from patchkit.store.objects import objects_dir, prune_objects, read_object, save_original, take_object
from patchkit.store.saved import SHOWN, Aside, one_a_line, remove_if_empty
from patchkit.store.state import (
    GUARD_PATH,
    PERMISSIONS,
    READABLE_DIR_MODE,
    READABLE_FILE_MODE,
    Entry,
    State,
    check_meta_dir,
    checked_path,
    durable_write,
    is_adhoc,
    meta_dir,
    read_meta_file,
    read_state,
    remove_empty_store,
    state_path,
)
from patchkit.tree.target import stock_files_command, vllm_metadata_dirs

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from filelock import BaseFileLock

    from patchkit.base.options import Options
    from patchkit.series.patchfile import Patch

LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT = "PATCHKIT_LOCK_TIMEOUT", 60.0
_WRITABLE_HINT = "patchkit records its state inside the target tree; it must be writable"


@frozen
class FileWrite(FrozenValue):
    """One file a transaction writes: its path, its content before and after, its mode."""

    path: str  # relative to the root, POSIX
    before: bytes | None
    after: bytes | None
    origin: Origin | None = None  # the file `before` was read from, when known
    mode: int | None = None  # the permission bits `after` gets (None: the file's own, else 0644)


_FAULT_MODES = ("raise", "exit", "kill", "int", "term", "hup")


def _fault_plan() -> dict[int, str]:
    """PATCHKIT_FAULT_AFTER's plan. A value not of its form is ignored whole, with a warning: a test
    hook set by mistake must neither stop a command nor act on part of what it says."""
    planned = os.environ.get("PATCHKIT_FAULT_AFTER", "")
    default = os.environ.get("PATCHKIT_FAULT_MODE", "raise")
    items = [item.strip().partition(":") for item in planned.split(",") if item.strip()]
    if not items:
        return {}
    if default not in _FAULT_MODES or not all(_fault_item(number, mode) for number, _, mode in items):
        mode_said = "" if default == "raise" else f" (PATCHKIT_FAULT_MODE={default!r})"
        notes.say(f"patchkit: warning: PATCHKIT_FAULT_AFTER={planned!r}{mode_said} is ignored: a test hook")
        notes.say(f"  it takes N[:MODE][,N[:MODE]...], MODE one of {', '.join(_FAULT_MODES)}; unset it")
        return {}
    return {int(number): mode or default for number, _, mode in items if int(number)}


def _fault_item(number: str, mode: str) -> bool:
    return number.isascii() and number.isdigit() and len(number) <= 9 and (not mode or mode in _FAULT_MODES)


class _Faults:
    """Test-only: PATCHKIT_FAULT_AFTER=N[:MODE][,M[:MODE]...] acts at the Nth (Mth...) filesystem
    operation of a commit or a rollback. MODE (default PATCHKIT_FAULT_MODE, else raise): raise
    (fail it with ENOSPC), exit (end the process at once), kill (SIGKILL), int, term or hup (send
    that signal to this process)."""

    def __init__(self) -> None:
        self.plan, self.count = _fault_plan(), 0

    def tick(self) -> None:
        if not self.plan:
            return
        self.count += 1
        mode = self.plan.get(self.count)
        if mode is None:
            return
        if mode == "exit":
            os._exit(70)
        if mode in _FAULT_SIGNALS:
            os.kill(os.getpid(), _FAULT_SIGNALS[mode])
            return
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


_FAULT_SIGNALS = {"kill": signal.SIGKILL, "int": signal.SIGINT, "term": signal.SIGTERM, "hup": signal.SIGHUP}


_faults = _Faults()


def _tick() -> None:
    """A fault point: the store's steps count too (tests replace _faults)."""
    _faults.tick()


class Unsealed(enum.Enum):
    """What recovery does with a journal whose marker's seal does not verify: nothing shows this
    user's patchkit wrote it for this tree, so only the user decides (`recover --discard` or
    `--roll-back`); every other command refuses it, changing nothing."""

    REFUSE = "refuse"
    DISCARD = "discard"  # the journal and its marker removed, every file and the record as they are
    ROLL_BACK = "roll-back"  # rolled back as it says, a copy kept of each file replaced or removed


@contextmanager
def target_lock(root: Path, timeout: float | None = None, unsealed: Unsealed = Unsealed.REFUSE) -> Iterator[str | None]:
    """One writer per target. flock dies with its process, so a killed patchkit never blocks.

    Yields the recovery message, if an interrupted transaction had to be rolled back first.
    """
    with locked_record(root, timeout, unsealed) as (recovered, state):
        yield recovered
        if recovered:
            _without_emptied_store(root, state)


@contextmanager
def locked_record(
    root: Path, timeout: float | None = None, unsealed: Unsealed = Unsealed.REFUSE
) -> Iterator[tuple[str | None, State]]:
    """target_lock that also yields the tree's record as the recovery left it: read once, under
    the lock, for the operation that takes the lock to work on. A tree that had no .patchkit/
    keeps none when the command records nothing (it failed, or found nothing to write): the
    lock goes with it (issue 22 item 8: a `revert --force` whose fetch failed, say)."""
    fresh = not os.path.lexists(meta_dir(root))
    try:
        lock = _acquire(root, timeout)
    except KeyboardInterrupt:  # Ctrl-C while .patchkit/ or its lock was made: nothing changed, none left
        if fresh and not os.path.lexists(state_path(root)):
            remove_empty_store(root, State(entries=[]))
        raise
    try:
        yield _recover(root, unsealed)
    finally:
        try:
            if fresh and not os.path.lexists(state_path(root)):
                remove_empty_store(root, State(entries=[]))
        finally:
            lock.release()


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file is there: every commit writes a new state.json (a new inode, by rename)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_mtime_ns


@contextmanager
def read_only_view(root: Path, reader: str = "dry run") -> Iterator[bool]:
    """A reader's consistent view of the tree without the lock (a dry run writes nothing, not even
    the lock file, and no start-up of filelock): yields True when the tree is settled (then raises
    LockBusy if a transaction changed it meanwhile), False when the caller must take the lock
    (an unfinished transaction, which the lock's recovery rolls back first)."""
    before = settled_record(root), _identity(state_path(root))
    if before[0] is UNSETTLED:
        yield False
        return
    yield True
    if (settled_record(root), _identity(state_path(root))) != before:  # bytes and inode: A, B, then A again
        raise LockBusy(f"another patchkit changed {root} while this {reader} read it", hint="run it again")


def never_locked(root: Path) -> bool:
    """No patchkit ever took this tree's lock (no .patchkit/lock): a reader creates none there."""
    return not os.path.lexists(meta_dir(root) / "lock")


def lock_timeout() -> float:
    """PATCHKIT_LOCK_TIMEOUT, read when a command runs, not at import: a bad value is the command's
    error (BadInput), before any write, whether it takes the lock or finds it needs none."""
    return locks.seconds_from_env(LOCK_TIMEOUT_ENV, DEFAULT_LOCK_TIMEOUT, zero_ok=True)


def _acquire(root: Path, timeout: float | None) -> BaseFileLock:
    if timeout is None:
        timeout = lock_timeout()
    meta = meta_dir(root)

    def prepare() -> None:  # again after a revert removed .patchkit/ while this one waited
        check_meta_dir(root)  # a symlinked .patchkit/ or lock would take the lock file elsewhere
        try:
            make_readable_dir(meta)
        except OSError as exc:
            raise TargetError(f"cannot create {meta}: {exc.strerror}", hint=_unwritable_hint(root, exc)) from exc

    def waiting() -> None:  # said once the lock is not free at once: a wait of up to a minute is no hang
        notes.say(
            f"note: another patchkit is working on {root}{locks.holder(meta / 'lock')}; waiting up to {timeout:g} s "
            f"for it ({LOCK_TIMEOUT_ENV} sets the wait)"
        )

    return locks.acquire(
        meta / "lock",
        timeout,
        prepare=prepare,
        busy=lambda waited: LockBusy(
            f"another patchkit is working on {root} (waited {waited:.0f} s{locks.holder(meta / 'lock')})",
            hint="try again when it has finished",
        ),
        unusable=lambda exc: _lock_unusable(root, exc),
        on_wait=waiting if timeout > locks.QUIET_WAIT else None,
    )


def commit_changes(
    root: Path,
    changes: dict[str, tuple[bytes | None, bytes | None]],
    new_state: State,
    *,
    undo: bool = False,
    origins: Mapping[str, Origin] | None = None,
    modes: Mapping[str, int] | None = None,
    first: Collection[str] = (),
    last: Collection[str] = (),
) -> dict[str, tuple[Landed, bytes]]:
    """commit() a plan's changes (path -> (before, after)), or with `undo` their reverse. `origins`:
    the files the befores were read from (plan.View.origins), so that originals can be linked.
    `modes`: the permission bits a file written gets (a revert's recorded originals'). `first`,
    `last`: the sets' `gates` (files vLLM checks at start) written before every other file (a
    revert, an undo: they go back to stock) or after (an apply: they are patched), see _order."""
    origins, modes = origins or {}, modes or {}
    writes = [
        FileWrite(p, after, before) if undo else FileWrite(p, before, after, origins.get(p), modes.get(p))
        for p, (before, after) in sorted(changes.items())
    ]
    landed = commit(root, sorted(writes, key=lambda w: _order(w.path, w.after is None, first, last)), new_state)
    if undo:
        signals.note(signals.UNDONE)
    return landed


def _order(path: str, removed: bool, first: Collection[str], last: Collection[str]) -> int:
    """Where a write goes (sorted() keeps the paths' order otherwise). The launch guard's files are
    written first and removed last: every tree a commit cut short leaves, and its rollback, holds
    the guard, which refuses a launch while the journal is there. A gate goes last when the commit
    patches (apply), first when it restores (revert, undo): a tree cut short anywhere, or rolled
    back part-way (the reverse order), has its gates stock while any other file is, so that with no
    guard vLLM refuses the launch at start (EAGLE-3 not whitelisted), not after the model loaded."""
    if GUARD_PATH.fullmatch(path):
        return 4 if removed else 0
    return 1 if path in first else 3 if path in last else 2


def save_originals(root: Path, originals: Mapping[str, bytes]) -> None:
    """Keep originals (digest -> bytes) in the store before a record that names them is committed
    with no file written (a series found applied, recorded as found). One left by a crash before
    that commit is named by no record: pruned by the next commit."""
    if not originals:
        return
    objects_dir(root).mkdir(parents=True, exist_ok=True)
    for digest, data in originals.items():
        save_original(root, digest, data, root, None, tick=_tick)
    fsync_dir(objects_dir(root))


def commit(root: Path, writes: list[FileWrite], new_state: State) -> dict[str, tuple[Landed, bytes]]:
    """Write `writes` and `new_state` all or nothing (see the module docstring). Returns what was
    written: path -> the file's identity as fstat saw it once written and fsynced (a rename keeps
    it) and the content, so that a reader can tell the file there is still the one written."""
    preflight(root, [w.path for w in writes])
    previous = read_meta_file(state_path(root))
    journal = _journal(root, writes, previous)
    with signals.uncut_rollback():  # a second Ctrl-C waits until the first one's rollback has ended
        landed = _committed_or_rolled_back(root, writes, journal, new_state, previous is not None)
    store_journal.drop_previous_state(root, journal["id"])
    prune_objects(root, new_state)
    remove_if_empty(root)  # the user's copies deleted as revert said: no empty saved/ stays
    return landed


def _committed_or_rolled_back(
    root: Path, writes: list[FileWrite], journal: Journal, new_state: State, had_previous: bool
) -> dict[str, tuple[Landed, bytes]]:
    committed = False
    try:
        store_journal.begin(root, journal, tick=_tick)
        landed = _write_files(root, writes, journal)
        with signals.deferred():  # the record and the commit point, whole: a signal waits for them
            # the previous record keeps a second name: the rollback then puts it back by a rename
            store_journal.commit_point(root, journal["id"], new_state, previous=had_previous, tick=_tick)
            committed = True
            signals.note(signals.COMMITTED)
    except BaseException as exc:
        if committed:  # a signal that waited for the commit point: the change is in place
            raise
        left = _roll_back_failed_commit(root, journal, writes, exc)
        if isinstance(exc, OSError):
            where = f" ({exc.filename})" if exc.filename else ""
            raise TargetError(
                f"writing the tree failed: {exc.strerror or exc}{where}; every file was rolled back"
                + (f", but {left}" if left else ""),
                hint=_no_space_hint(root, writes) if exc.errno in NO_SPACE else None,
            ) from exc
        raise
    return landed


def _lock_unusable(root: Path, exc: OSError) -> TargetError:
    """The lock cannot be taken: a directory where the lock file goes says so and how it goes;
    else the store is unwritable, or its device full."""
    meta = meta_dir(root)
    in_the_way = locks.directory_in_the_way(meta / "lock")
    if in_the_way is not None:
        what, _, remove = in_the_way.partition(": ")
        return TargetError(
            f"cannot take the lock: {what}", hint=f"{remove}; the next command makes the lock file again"
        )
    return TargetError(f"cannot create the lock in {meta}: {exc.strerror}", hint=_unwritable_hint(root, exc))


def _unwritable_hint(root: Path, exc: OSError) -> str:
    """A store that cannot be made: a full device (of bytes or inodes) says what it needs."""
    return _no_space_hint(root, []) if exc.errno in NO_SPACE else _WRITABLE_HINT


def _no_space_hint(root: Path, writes: list[FileWrite]) -> str:
    return no_space_hint(root, *_needs(writes))


def commit_needs(changes: Mapping[str, tuple[bytes | None, bytes | None]]) -> tuple[int, int]:
    """What commit_changes(changes) needs free: bytes and inodes (see _needs)."""
    return _needs([FileWrite(p, before, after) for p, (before, after) in changes.items()])


def _needs(writes: list[FileWrite]) -> tuple[int, int]:
    """What a commit on a full disk needs: room for every new content it stages, in whole 4 KB
    blocks (the originals it keeps are hard links where the file system allows), and 128 KB for the
    record, the journal and directories; and an inode for each file it creates (a staged content, a
    saved original, the record's and journal's files and directories)."""
    need = sum(blocks(len(w.after)) for w in writes if w.after is not None) + (128 << 10)
    files = sum((w.after is not None) + (w.before is not None) for w in writes) + 16
    return need, files


def _journal(root: Path, writes: list[FileWrite], previous: bytes | None) -> Journal:
    """The journal of a commit: each write's entry, and the record it starts from."""
    txid = store_journal.new_id()
    emptied = _emptied_directories(root, writes)
    entries = [_journal_entry(root, w, txid, emptied) for w in writes]
    return {"id": txid, "previous_state": previous.decode() if previous else None, "files": entries}


def _write_files(root: Path, writes: list[FileWrite], journal: Journal) -> dict[str, tuple[Landed, bytes]]:
    """Save every original and stage every new content, mark it so, then replace the files (see _landed)."""
    entries = journal["files"]
    written = {
        w.path: (origin, w.after)
        for w, entry in zip(writes, entries, strict=True)
        if (origin := _stage(root, w, entry)) and w.after is not None
    }
    fsync_dir(objects_dir(root))  # every original is on disk before the first file is replaced
    staged = {path: (o.inode, o.size, o.mtime_ns) for path, (o, _data) in written.items()}
    store_journal.mark_staged(root, journal, staged, tick=_tick)
    changed_dirs = {_install(root, entry) for entry in entries}
    changed_dirs |= {(root / rel).parent for entry in entries for rel in entry["created_dirs"]}
    for directory in sorted(changed_dirs):
        fsync_dir(directory)
    return _landed(root, written)


def _roll_back_failed_commit(root: Path, journal: Journal, writes: list[FileWrite], cause: BaseException) -> str:
    """The rollback of a failed commit; what it could not remove, said ("" when nothing): in the
    error of a failed write, else as a warning (an interrupt says its own words)."""
    with signals.deferred():  # a second Ctrl-C cannot cut the rollback: it acts once it ends
        left = _rollback_or_keep_journal(root, journal, _in_memory(writes), cause)
        signals.note(signals.ROLLED_BACK)
        _forget_objects(root, journal)
    said = _left_said(root, left)
    if said and not isinstance(cause, OSError):
        notes.say(f"warning: {said}")
    return said


def _rollback_or_keep_journal(
    root: Path, journal: Journal, originals: dict[str, bytes], cause: BaseException
) -> dict[str, str]:
    """Roll back a failed commit (the directories it could not remove, see _Undoing.left_directories);
    when even that fails (the disk, the machine), keep the journal for the next command and say so
    (exit 4), never a traceback."""
    try:
        return _rollback(root, journal, originals).left
    except OSError as exc:
        raise _unfinished_rollback(root, exc) from cause


def _left_said(root: Path, left: dict[str, str]) -> str:
    """The directories a rollback created and could not remove, each with why, and the command that
    removes them once empty, deepest first (a file written there since is someone else's: `rmdir`
    keeps it)."""
    if not left:
        return ""
    them = "it" if len(left) == 1 else "them"
    what = "the directory" if len(left) == 1 else f"{len(left)} directories"
    order = sorted(left, key=lambda rel: (-rel.count("/"), rel))
    command = "`" + shlex.join(["rmdir", "--", *(str(root / rel) for rel in order)]) + "`"
    why = few([f"{rel} ({left[rel]})" for rel in order], sep=", ")
    return f"could not remove {what} the transaction had created: {why}; {command} removes {them} once empty"


def _unfinished_rollback(root: Path, exc: OSError) -> TargetError:
    where = f" ({exc.filename})" if exc.filename else ""
    return TargetError(
        f"writing the tree failed, and so did rolling it back: {exc.strerror or exc}{where}; "
        f"the journal is kept in {meta_dir(root)}",
        hint=f"free space (or fix the cause) and run {hints.command('recover')}: it finishes the rollback",
    )


def _landed(root: Path, written: dict[str, tuple[Origin, bytes]]) -> dict[str, tuple[Landed, bytes]]:
    """Each file written, as it is in place (lstat: its identity and ctime), with its bytes; a file
    no longer the one written (changed since its fsync) is left out: a reader reads it again."""
    landed = {}
    for path, (origin, data) in written.items():
        info = os.lstat(root / path)
        if stat.S_ISREG(info.st_mode) and Origin.of(info) == origin:
            landed[path] = (Landed.of(info), data)
    return landed


def _forget_objects(root: Path, journal: Journal) -> None:
    """After a failed commit's rollback: the originals it saved that the state before does not
    name are removed (a hard-linked one would stay a second link to a tree file until the next
    commit pruned it). Best effort: the rollback has restored the tree already."""
    with suppress(OSError, BadInput):
        prune_objects(root, store_journal.previous_state(root, journal))


def _in_memory(writes: list[FileWrite]) -> dict[str, bytes]:
    """The originals a failing commit still holds (digest -> bytes): its rollback reads no object."""
    return {str(sha256(w.before)): w.before for w in writes if w.before is not None}


def recover(root: Path) -> str | None:
    """Roll back a transaction a crash left unfinished, and remove the temporary files a killed
    patchkit left beside the files it manages. Returns what was done, if anything. Called with the
    target's lock held. A journal or state that fails validation is refused before anything is
    touched."""
    return _recover(root)[0]


def _recover(root: Path, unsealed: Unsealed = Unsealed.REFUSE) -> tuple[str | None, State]:
    """recover's message, and the record as it leaves it (read once). A journal whose marker is
    there but not sealed is refused, changing nothing, unless `unsealed` says what the user chose."""
    check_meta_dir(root)
    journal = _checked_journal(root)
    undoing, discarded = None, None
    if journal:
        evidence = _evidence(root, journal)
        if evidence.identities is not None and not evidence.sealed and unsealed is not Unsealed.ROLL_BACK:
            if unsealed is Unsealed.REFUSE:
                raise _unsealed_refusal(root, journal)
            discarded = _discard(root, journal)
        else:
            undoing = _roll_back_interrupted(root, journal, evidence)
    else:
        store_journal.remove_stale_marker(root)
    managed = {entry["path"] for entry in journal["files"]} if journal else set()
    state = read_state(root)  # rolled back
    managed |= {path for entry in state.entries for path in entry.files} | set(state.guard)
    store_journal.remove_leftovers(root, managed)
    if discarded:
        said = f"removed the journal of an unfinished transaction ({discarded}); no file changed"
        return f"{said}: {hints.command('status')} judges the tree", state
    if undoing is None or undoing.evidence is None:
        return None, state
    said = f"rolled back an interrupted patchkit transaction: {undoing.count.said()}"
    listed_kept = sorted(path for path in undoing.kept if path in undoing.evidence.theirs)
    changed = sorted(path for path in undoing.kept if path not in undoing.evidence.theirs)
    every = _kept_list(root, journal, [*changed, *listed_kept]) if journal else None
    if changed:
        said += f"\nkept, not written by it or changed since:{one_a_line(changed, every or '')}"
    if listed_kept:
        files = "file" if len(listed_kept) == 1 else "files"
        said += f"\nkept, an installed distribution's own {files}:{one_a_line(listed_kept, every or '')}"
    if undoing.left:
        said += f"\n{_left_said(root, undoing.left)}"
    for how, paths in sorted(undoing.rebuilt.items()):
        said += f"\nthe saved original of {_one_or_count(paths)} was damaged or missing: made again from {how}"
        said += f" (sha256 checked):{one_a_line(paths, '')}" if len(paths) > 1 else " (sha256 checked)"
    return said + undoing.aside.said(), state


def _kept_list(root: Path, journal: Journal, paths: list[str]) -> str | None:
    """Where every file a recovery kept is listed, once there are more than a message names: a file
    of its own in .patchkit/ (the journal that named them is gone). None: a list short enough."""
    if len(paths) <= SHOWN:
        return None
    where = meta_dir(root) / f"recovered-{journal['id']}.txt"
    try:
        _write_atomic(where, "".join(f"{path}\n" for path in paths).encode())
    except OSError as exc:  # a full disk: the count alone, and why there is no list
        return f"not listed: {where} could not be written ({exc.strerror})"
    return f"{where} lists every one"


def _roll_back_interrupted(root: Path, journal: Journal, evidence: _Evidence) -> _Undoing:
    needed, rebuilt = _needed_originals(root, journal, evidence)
    try:
        with signals.deferred():  # a second Ctrl-C cannot cut it: it ends, then the signal acts
            undoing = _rollback(root, journal, needed, evidence)
    except OSError as exc:
        raise _unfinished_rollback(root, exc) from exc
    undoing.rebuilt = rebuilt
    return undoing


def _discard(root: Path, journal: Journal) -> str:
    """The user's `recover --discard`: the journal, its marker and its staged files (patchkit's own
    temp names) removed; every file and state.json stay as they are. Returns the journal's id."""
    try:
        for entry in journal["files"]:
            if entry.get("staged"):
                (root / entry["staged"]).unlink(missing_ok=True)
        store_journal.end(root, tick=_tick)
    except OSError as exc:
        raise _unfinished_rollback(root, exc) from exc
    txid: str = journal["id"]  # text: read_journal checked it
    return txid


def _unsealed_refusal(root: Path, journal: Journal) -> TreeRefused:
    """A marker whose seal does not verify: nothing shows that this user's patchkit wrote the
    journal for this tree, so nothing is touched, and the user is told why and how to go on."""
    paths = [entry["path"] for entry in journal["files"]]
    problem = seal.unusable_key()
    why = (
        f"this run could not keep its key, so no marker verifies ({problem})"
        if problem
        else "another user's or machine's, a tree moved or copied since, a key since lost, or planted"
    )
    files = f"{len(paths)} file(s)" if paths else "no file"
    said = (
        f"{journal_path(root)} names an unfinished transaction ({journal['id']}, {files}), but its "
        f"marker {store_journal.staged_path(root)} is not sealed with this user's key ({seal.key_path()}) "
        f"for {root}, so nothing shows this user's patchkit wrote it here ({why}); nothing was touched"
    )
    fix = f"{seal.unusable_fix()}, so that a later crash recovers by itself. For this one: " if problem else ""
    hint = (
        f"{fix}if an apply or revert of yours was cut short here, {hints.command('recover', '--roll-back')} "
        "rolls it back, keeping a copy of each file it replaces or removes (state.json stays as it is); "
        f"if not, {hints.command('recover', '--discard')} removes the journal and changes no file"
    )
    return TreeRefused(
        said + (":" + one_a_line(paths, f"{journal_path(root)} lists every one") if paths else ""), hint=hint
    )


@dataclass(eq=False, repr=False)
class _Count(Value):
    """What a rollback undid: originals put back, and files it had created removed."""

    restored: int = 0
    removed: int = 0
    guard_removed: int = 0  # a guard file whose original the journal may not choose (UNVOUCHED): not created by it
    guard_lost: int = 0  # a guard file whose original is lost (LOST_GUARD): removed, not restored

    def said(self) -> str:
        parts = [f"{self.restored} file(s) restored"] if self.restored else []
        parts += [f"{self.removed} file(s) it had created removed"] if self.removed else []
        parts += [_GUARD_REMOVED.format(self.guard_removed, hints.command("apply"))] if self.guard_removed else []
        parts += [_GUARD_LOST.format(self.guard_lost, hints.command("apply"))] if self.guard_lost else []
        return ", ".join(parts) or "no file had changed yet"


_GUARD_LOST = (
    "the launch guard's {} file(s) it replaced removed, not restored (the saved original is damaged or missing, and "
    "is not this patchkit's guard): {} installs this patchkit's guard"
)
_GUARD_REMOVED = (
    "the launch guard's {} file(s) it replaced removed, not restored (no seal of this user's vouches for the "
    "guard's bytes the journal names): {} installs this patchkit's guard"
)


def _evidence(root: Path, journal: Journal) -> _Evidence:
    """What the tree shows the interrupted commit did (see _Evidence). The marker is written once
    every original is saved and every content staged, and the replaces run in the journal's
    order: the files before the first one still staged were replaced or deleted. Without the
    marker, none was (a commit cut short while staging, or a journal patchkit did not write).
    A created file an installed distribution's RECORD lists is theirs, unless the record the
    rollback returns to keeps its bytes (a revert put it back: removing it again loses nothing)."""
    files = journal["files"]
    identities = store_journal.staged_identities(root, journal)
    reached = 0
    if identities is not None:
        staged = [i for i, e in enumerate(files) if e.get("staged") and os.path.lexists(root / e["staged"])]
        reached = staged[0] if staged else len(files)
    listed = listings(root, [e["path"] for e in files if e["before"] is None])
    theirs = (listed.by_vllm() | listed.by_others()) - _kept_by_the_record(root, journal)
    sealed = identities is not None and store_journal.marker_sealed(root, journal)
    return _Evidence(frozenset(e["path"] for e in files[:reached]), identities, sealed, frozenset(theirs))


def _undecided(root: Path, paths: list[str], journal: Journal, sealed: bool) -> TreeRefused:
    """Recovery whose originals for these files cannot go back (damaged or gone) stops: the
    journal and the saved originals stay, the files are named, and so are the ways on. A journal
    is read back from the tree and may be none of patchkit's: no file is deleted on its word alone,
    so the hint never says to delete the files it names."""
    kept = f"nothing was touched, and the journal and the saved originals are kept in {meta_dir(root)}"
    said = (
        f"the saved original of {_one_or_count(paths)} is damaged or missing (no file in {objects_dir(root)} "
        f"holds its sha256's bytes), so an interrupted patchkit transaction cannot be rolled back; {kept}"
        + (":" + one_a_line(paths, f"{journal_path(root)} lists every one") if len(paths) > 1 else "")
    )
    return TreeRefused(said, hint=_undecided_hint(root, paths, journal, sealed))


def _one_or_count(paths: list[str]) -> str:
    return paths[0] if len(paths) == 1 else f"{len(paths)} files"


def _undecided_hint(root: Path, paths: list[str], journal: Journal, sealed: bool) -> str:
    """What patchkit will and will not do with the files, and the commands that go on safely: the
    journal removed (every file stays as it is), or vLLM's stock files back, then recover (with
    --roll-back for a journal not `sealed` by this user: plain `recover` refuses it)."""
    created = {entry["path"] for entry in journal["files"] if entry["before"] is None}
    forget, staged = _forget_journal(root, journal)
    said = (
        "patchkit changes and deletes none of these files on the journal's word. If no apply or revert "
        f"of yours was cut short here, the journal is not patchkit's: {forget} removes it"
        f"{' and the new contents its commit staged' if staged else ''} (every file stays "
        f"as it is), then {hints.command('status')} judges the tree"
    )
    if all(path in created for path in paths):  # vLLM's stock files back would leave these as they are
        return said
    finish = _finishing_revert(root, paths, journal)
    if finish is not None:  # the record names them patched: fetch keeps them, and recover fails again
        return (
            f"{said}. If one was, the record still names {'it' if len(paths) == 1 else 'them'} as patchkit "
            f"patched {'it' if len(paths) == 1 else 'them'}: {forget}, then {finish} takes "
            f"{'it' if len(paths) == 1 else 'them'} back to stock from the saved originals that are whole"
        )
    release = _wheel_release(root, paths, journal)
    if release is not None:  # a revert of the wheel's sets cut short: its stock files, then no journal, end it
        return (
            f"{said}. If one was, it was taking the installed patched wheel's files back to stock, and the patches "
            f"it ships cannot make the lost ones again: put the stock files back with "
            f"{stock_files_command(root, release, every=True)}, then {forget}; {hints.command('status')} then "
            "judges the tree"
        )
    return (
        f"{said}. If one was, put the stock files back with {stock_files_command(root, None, every=True)}, then "
        f"run {hints.command('recover', *([] if sealed else ['--roll-back']))}. If it was an apply --patch FILE, "
        "the same command again (or status) with that --patch FILE rolls it back offline, from FILE's hunks "
        f"reversed. The saved originals are in {objects_dir(root)}"
    )


def _wheel_release(root: Path, paths: list[str], journal: Journal) -> str | None:
    """The release of the installed patched wheel whose provenance records each lost file patched with
    the lost bytes (a revert of its sets cut short, which its shipped patches did not make again):
    read as it is, believed or not, for a hint's words alone. None: no such wheel."""
    if not has_provenance(root):
        return None
    lost = {entry["path"]: entry["before"] for entry in journal["files"] if entry["path"] in paths}
    for dist_info in vllm_metadata_dirs(root):
        with suppress(OSError, PatchkitError):
            record = installed_wheel_reader().read_provenance(dist_info)
            if all(p in record.files and record.files[p].patched_sha256 == d for p, d in lost.items()):
                release: str = record.vllm_version
                return release
    return None


def _forget_journal(root: Path, journal: Journal) -> tuple[str, bool]:
    """The command that removes the journal, and with it the staged files its commit left (by their
    temp name of this journal's id, `.NAME.patchkit-<id>.tmp`, a glob a directory: a release's
    commit stages a thousand), and whether any is there; nothing else is named."""
    where = sorted({str((root / e["staged"]).parent) for e in journal["files"] if _left_staged(root, e)})
    globs = [f"{shlex.quote(d + '/')}.*.patchkit-{journal['id']}.tmp" for d in where]
    words = ["rm", *(["-f"] if globs else []), "--", str(journal_path(root))]
    return "`" + " ".join([shlex.join(words), *globs]) + "`", bool(globs)


def _left_staged(root: Path, entry: JournalEntry) -> bool:
    staged = entry.get("staged")  # read_journal held it to staged_name(path, id)
    return isinstance(staged, str) and os.path.lexists(root / staged)


def _finishing_revert(root: Path, paths: list[str], journal: Journal) -> str | None:
    """The revert that takes the lost files to stock once the journal is gone, when the record it
    started from names each as patched with the lost bytes (a revert or an update cut short): of
    their sets, with --force when a file is not the record's stock (an update's newer bytes: a copy
    is kept) or only the record vouches for an original (engine.vouched.needs_force). None: a lost
    file no record names so (vLLM's stock files back do then)."""
    entries = store_journal.previous_state(root, journal).entries
    lost = {entry["path"]: entry["before"] for entry in journal["files"] if entry["path"] in paths}
    owners: dict[str, Entry] = {}
    force = False
    for path, digest in lost.items():
        owner = next((e for e in entries if path in e.files and e.files[path].get("after") == digest), None)
        if owner is None:
            return None
        owners[owner.set_name] = owner
        force |= file_sha(root, path) != owner.files[path].get("before") or needs_force(root, owner)
    chosen = hints.for_set(None) if len(owners) > 1 else _chosen(next(iter(owners.values())))
    return hints.command("revert", *(["--force"] if force else []), chosen=chosen)


def _chosen(entry: Entry) -> Options:
    """The selection of one recorded set: a library set in the library it was applied from, an
    ad-hoc one by its recorded name (its --patch file may be gone)."""
    return hints.for_set(entry.set_name, library=None if is_adhoc(entry.set_name) else entry.library)


def _kept_by_the_record(root: Path, journal: Journal) -> set[str]:
    """The created files whose bytes the record the rollback returns to keeps, intact, as the saved
    original of a file its patches delete: what a revert put back, vLLM's own files among them (a
    release diff deletes some). Removing them again loses no byte: the next revert restores them."""
    deleted = {
        path: change["before"]
        for entry in store_journal.previous_state(root, journal).entries
        for path, change in entry.files.items()
        if change.get("before") and change.get("after") is None
    }
    kept = set()
    for entry in journal["files"]:
        digest = deleted.get(entry["path"])
        if entry["before"] is None and digest is not None and digest == entry["after"]:
            try:
                read_object(root, digest)  # there, a regular file, its bytes the digest's
            except BadInput:
                continue
            kept.add(entry["path"])
    return kept


def _checked_journal(root: Path) -> Journal | None:
    """The journal (store.journal checks its fields), held to the tree before recovery acts on it:
    its paths pass preflight, the guard's files get back only this patchkit's bytes, and no
    original returns into a directory its commit did not remove."""
    journal = store_journal.read_journal(root)
    if journal is None:
        return None
    try:
        preflight(root, [entry["path"] for entry in journal["files"]])
    except BadInput as exc:
        raise journal_refusal(root, exc.message) from exc
    vouched = store_journal.journal_sealed(root, journal)  # this user's own commit: an older guard comes back
    for entry in journal["files"]:
        if GUARD_PATH.fullmatch(entry["path"]) and entry["before"] is not None and not vouched:
            claimed, entry["before"] = entry["before"], _guard_original(entry["path"], entry["before"])
            if entry["before"] is None:  # in memory only: what the rollback says of this file
                entry[UNVOUCHED] = claimed
        why = _unrestorable_directory(root, entry) if entry["before"] is not None else None
        if why:
            raise journal_refusal(
                root, f"{entry['path']}: its directory is gone and {why}, so it cannot have been patchkit's file"
            )
    return journal


def _unrestorable_directory(root: Path, entry: JournalEntry) -> str | None:
    """Why an original may not come back (None: it may): it returns into its directory, or into one
    the journal says this very commit emptied and removed, inside a package that is still there
    (or the guard's dist-info, whose files get back only patchkit's own bytes). Never a new package."""
    missing = [str(d.relative_to(root)) for d in _missing_parents((root / entry["path"]).parent, root)]
    if not missing:
        return None
    if any(d not in entry.get("removed_dirs", []) for d in missing):
        return "the journal does not say that its own commit removed it"
    top = missing[0]
    if "/" not in top and not GUARD_PATH.fullmatch(top):
        return f"restoring it would make a new package {top!r}"
    return None


# a journal entry's key, in memory only: the guard original a journal not sealed by this user names
UNVOUCHED = "unvouched_before"
# the same for a guard original that is lost (and no guard of this patchkit's): the file is removed
LOST_GUARD = "lost_before"


def _guard_original(path: str, digest: str) -> str | None:
    """What a rollback of a journal not sealed by this user brings back at a path of the launch guard:
    its original only when it is this patchkit's own bytes for that very path, else nothing (the file
    is removed). The guard runs in every vLLM process, so such a journal must not choose what it
    becomes; a removed guard only stops guarding, and `patchkit status` says so."""
    own = guard_files().get(path)
    return digest if own is not None and sha256(own) == digest else None


def _needed_originals(
    root: Path, journal: Journal, evidence: _Evidence
) -> tuple[dict[str, bytes], dict[str, list[str]]]:
    """Every original the rollback will put back, read and checked by sha256 before it starts; no
    other (a file it keeps needs none, so a lost original of one stops nothing). A damaged or
    missing one is rebuilt where it can be (_rebuilt_original: the paths are returned, to be said);
    one that cannot stops recovery before it touches a file (_undecided)."""
    needed, lost, rebuilt = {}, [], dict[str, list[str]]()
    for entry in journal["files"]:
        if entry["before"] is None or entry["path"] not in evidence.written:
            continue
        if file_sha(root, entry["path"]) != entry["after"] or entry["after"] == entry["before"]:
            continue
        try:
            needed[entry["before"]] = read_object(root, entry["before"])
        except BadInput:
            again, how = _rebuilt_original(root, journal, entry)
            if again is None and GUARD_PATH.fullmatch(entry["path"]):  # it only stops guarding; apply puts it back
                entry[LOST_GUARD], entry["before"] = entry["before"], None
            elif again is None:
                lost.append(entry["path"])
            else:
                needed[entry["before"]] = again
                rebuilt.setdefault(how, []).append(entry["path"])
    if lost:
        raise _undecided(root, sorted(lost), journal, evidence.sealed)
    return needed, {how: sorted(paths) for how, paths in rebuilt.items()}


def _rebuilt_original(root: Path, journal: Journal, entry: JournalEntry) -> tuple[bytes | None, str]:
    """A lost original made again, kept only when its sha256 is the journal's, and what it was made
    from: this patchkit's own guard file; vLLM's stock file (an apply's original); or a patched file
    (a revert's, an update's) as the patches its record names make it (_recorded_patches), from the
    stock bytes (see _stock_candidates). None: it cannot be."""
    path, digest = entry["path"], entry["before"]
    own = guard_files().get(path) if GUARD_PATH.fullmatch(path) else None
    if own is not None and sha256(own) == digest:
        return own, "this patchkit's launch guard"
    recorded = [e for e in store_journal.previous_state(root, journal).entries if _wrote(e, path, digest)]
    makers = [(patches, "the patches its record names") for e in recorded if (patches := _recorded_patches(e, root))]
    wheel = _wheel_patches(root, path, digest)
    makers += [(wheel, "the patches the installed patched wheel ships")] if wheel else []
    reversed_ = _reversed_apply(root, path, digest)
    if reversed_ is not None:
        return reversed_
    for base, what in _stock_candidates(root, path, [e.files[path].get("before") for e in recorded]):
        if sha256(base) == digest:
            return base, what
        for patches, made_from in makers:
            made = made_file(_only(path, base), path, patches)
            if made is not None and sha256(made) == digest:
                return made, made_from
    return None, ""


def _reversed_apply(root: Path, path: str, digest: str) -> tuple[bytes, str] | None:
    """An apply's lost original (the stock file) from the tree's file, which holds what the apply
    wrote there (the journal's `after`: _needed_originals checked it), with a series the user's
    command names reversed (series_at_hand): offline, with no saved original, this is its stock."""
    try:
        current = read_file(root / path)
    except OSError:
        return None
    for series, what in series_at_hand(path):
        made = reverse_file(_only(path, current), path, series)
        if made is not None and sha256(made) == digest:
            return made, what
    return None


def _wheel_patches(root: Path, path: str, digest: str) -> list[Patch]:
    """The patches a patched wheel's install ships in its dist-info (each held to its sha256), when its
    provenance records `digest` as `path`'s patched bytes: the original a revert of the wheel's sets
    replaced (no record in state.json names it). []: no such wheel, or a provenance not believed."""
    if not has_provenance(root):
        return []
    try:
        found = installed_wheel_reader().find(root)
        shas = found.files.get(path) if found is not None else None
        return found.patches() if shas is not None and shas.patched_sha256 == digest else []
    except PatchkitError:
        return []


def _recorded_patches(entry: Entry, root: Path) -> list[Patch]:
    """The patches `entry` records, at hand: where its record says (patches_at_hand), else a library
    set's in the user's library (--patches, else the one patchkit finds; a revert reads it too),
    which may lie in the tree: patchkit installed beside vLLM. Each is held to its recorded sha256."""
    found = patches_at_hand(entry, root)
    return found or ([] if is_adhoc(entry.set_name) else recorded_in_library(entry, hints.current().library))


def _wrote(entry: Entry, path: str, digest: str) -> bool:
    """Whether the record `entry` says its apply left `path` holding `digest`'s bytes."""
    return path in entry.files and entry.files[path].get("after") == digest


def _stock_candidates(root: Path, path: str, saved: list[str | None]) -> Iterator[tuple[bytes, str]]:
    """What the file may have held before any patch, most likely first, and where it is: the tree's
    file (a revert cut short wrote the stock bytes back), the originals its records saved (`saved`:
    digests), then the release's own file by patchkit's fetcher (cached; checked against its RECORD)."""
    with suppress(OSError):
        current = read_file(root / path)
        if current is not None:
            yield current, "the tree's file"
    for digest in filter(None, saved):  # None: a file its patches created, no stock to start from
        with suppress(BadInput):
            yield read_object(root, digest), "a saved original"
    found = release_original(root, path)
    if found is not None:
        yield found


def release_original(root: Path, path: str) -> tuple[bytes, str] | None:
    """The release's own file at `path` by patchkit's fetcher (cached; checked against its RECORD), and
    where it is from; None offline, or where the tree's release or the file is not known."""
    release = _stock_release(root)
    if release is None:
        return None
    try:
        stock = read_file(fetch.release_tree(release, [path]) / path)
    except (PatchkitError, OSError):  # offline, not in the wheel: the hint names the way on
        return None
    return None if stock is None else (stock, f"vLLM {release}'s own file")


def _stock_release(root: Path) -> str | None:
    """The release whose wheel holds the tree's stock files: its one vLLM dist-info's version, less
    a local label (a patched wheel's, a rebuild's). None: none, several, or no version."""
    dirs = vllm_metadata_dirs(root)
    try:
        return Version(dirs[0].name.partition("-")[2].rpartition(".")[0]).public if len(dirs) == 1 else None
    except ValueError:
        return None


def _only(path: str, data: bytes | None) -> Callable[[str], bytes | None]:
    """A reader of one file: `data` at `path`, nothing elsewhere."""
    return lambda name: data if name == path else None


@contextmanager
def consistent_read(root: Path) -> Iterator[str | None]:
    """Hold the lock while reading several files, so no writer is half-way through them.

    Yields the recovery message, if an interrupted transaction had to be rolled back first. A
    reader that may not create the lock (a read-only tree) reads without it, unless a journal
    says a transaction is unfinished: that needs a writer to recover. On a tree no patchkit ever
    locked, a reader creates no lock (nor .patchkit/): it reads as a dry run does (read_only_view).
    """
    lock_timeout()  # a bad value is the command's error, lock or not
    if never_locked(root):
        with read_only_view(root, "command") as settled:
            if settled:
                yield None
        if settled:
            return
    try:
        lock = _acquire(root, None)
    except LockBusy:
        raise
    except TargetError:
        if os.path.lexists(journal_path(root)):
            raise
        lock = None
    recovered, state = None, None
    try:
        if lock:
            recovered, state = _recover(root)
            if recovered and state is not None and state.holds_nothing():
                prune_objects(root, state)  # before the reader looks: it would name originals that go at its end
        yield recovered
    finally:
        if lock:
            if recovered and state is not None:
                _without_emptied_store(root, state)
            lock.release()


def _without_emptied_store(root: Path, state: State) -> None:
    """A rollback that leaves nothing recorded (a first apply cut short) leaves no .patchkit/ either
    (its lock, an empty objects/): the tree is as it was before that apply. Called under the lock,
    by a reader or `recover` (a writer goes on to write there)."""
    if state.holds_nothing():
        prune_objects(root, state)
        remove_empty_store(root, state)


def preflight(root: Path, paths: list[str], *, writable: bool = True) -> None:
    """Refuse before writing anything: escapes, symlinks, special files, unwritable places (a dry
    run passes writable=False: it refuses what the real run refuses, save a read-only tree). Each
    directory on the way is looked at once (a release diff touches a thousand files in a few)."""
    directories: dict[str, bool] = {"": True}  # relative directory -> whether it exists (checked)
    writable_dirs: dict[str, bool] = {}
    for rel in paths:
        reason = unsafe_reason(rel)
        if reason:
            raise BadInput(f"{escaped(rel)}: the path {reason}; refusing to write")
        parent = _checked_directories(root, rel, directories)
        info = _lstat(root, rel)
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise BadInput(
                f"{escaped(rel)} is a symlink; refusing to write through it",
                hint=f"{hints.replace_symlink(root / rel, directory=False)}, then run again",
            )
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{escaped(rel)} is not a regular file (device, fifo or directory)")
        if not writable:
            continue
        if not writable_dirs.setdefault(parent, os.access(root / parent, os.W_OK)):
            raise TargetError(
                f"{root / parent} is not writable (needed for {escaped(rel)})",
                hint="run as the user that owns the vLLM install",
            )
        if info is not None and not os.access(root / rel, os.W_OK):
            raise TargetError(f"{escaped(rel)} is not writable", hint="run as the user that owns the vLLM install")


def _checked_directories(root: Path, rel: str, known: dict[str, bool]) -> str:
    """Every directory on the way to `rel` is a real directory (or missing), never a symlink; the
    deepest one that exists, relative to the root."""
    parts = rel.split("/")[:-1]
    deepest = ""
    for depth in range(1, len(parts) + 1):
        directory = "/".join(parts[:depth])
        if directory not in known:
            info = _lstat(root, directory)
            if depth == 1 and moved_package(root, directory):  # vllm/ on another volume: its files are vLLM's
                info = os.stat(os.path.join(root, directory))
            if info is not None and stat.S_ISLNK(info.st_mode):
                raise BadInput(
                    f"{escaped(rel)}: the path goes through a symlink ({root / directory}); refusing to write",
                    hint=f"{hints.replace_symlink(root / directory, directory=True)}, then run again",
                )
            if info is not None and not stat.S_ISDIR(info.st_mode):
                raise TargetError(f"{escaped(rel)}: {root / directory} is not a directory")
            known[directory] = info is not None
        if not known[directory]:
            break
        deepest = directory
    return deepest


def _lstat(root: Path, rel: str) -> os.stat_result | None:
    """lstat of root/rel, or None when nothing is there; a path no file can have is bad input."""
    try:
        return os.lstat(os.path.join(root, rel))  # a str: a Path per file is most of this loop
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR):
            raise BadInput(f"{escaped(rel)}: no file can have this path ({exc.strerror})") from None
        raise TargetError(f"cannot look at {root / rel}: {exc.strerror}") from None


def _journal_entry(root: Path, w: FileWrite, txid: str, emptied: set[str]) -> JournalEntry:
    full = root / w.path
    ancestors = w.path.split("/")[:-1]
    return {
        "path": w.path,
        "before": sha256(w.before),
        "after": sha256(w.after),
        "staged": staged_name(w.path, txid) if w.after is not None else None,
        "mode": stat.S_IMODE(full.stat().st_mode) & PERMISSIONS if w.before is not None else None,
        "created_dirs": [str(p.relative_to(root)) for p in _missing_parents(full.parent, root)],
        "removed_dirs": [d for n in range(1, len(ancestors) + 1) if (d := "/".join(ancestors[:n])) in emptied],
    }


def _emptied_directories(root: Path, writes: list[FileWrite]) -> set[str]:
    """The directories (relative) the deletes among `writes` leave empty, which _install removes:
    each holds nothing but deleted files and such directories, and receives no file."""
    deleted = {w.path for w in writes if w.after is None and w.before is not None}
    receiving = {
        "/".join(w.path.split("/")[:n]) for w in writes if w.after is not None for n in range(1, w.path.count("/") + 1)
    }
    known: dict[str, bool] = {}

    def emptied(directory: str) -> bool:
        if directory not in known:
            known[directory] = directory not in receiving and _holds_only(directory)
        return known[directory]

    def _holds_only(directory: str) -> bool:
        try:
            items = list(os.scandir(root / directory))
        except OSError:
            return False
        return all(
            f"{directory}/{item.name}" in deleted
            or (item.is_dir(follow_symlinks=False) and emptied(f"{directory}/{item.name}"))
            for item in items
        )

    candidates = {"/".join(p.split("/")[:n]) for p in deleted for n in range(1, p.count("/") + 1)}
    return {d for d in candidates if emptied(d)}


def _stage(root: Path, w: FileWrite, entry: JournalEntry) -> Origin | None:
    """Save the original and stage the new content beside its file (the file written, if any). No
    target file changes."""
    if w.before is not None:
        save_original(root, entry["before"], w.before, root / w.path, w.origin, tick=_tick)
    for rel in entry["created_dirs"]:
        _faults.tick()
        make_readable_dir(root / rel)
    if w.after is None:
        return None
    _faults.tick()
    return _write_file(root / entry["staged"], w.after, entry["mode"] if w.mode is None else w.mode)


def _install(root: Path, entry: JournalEntry) -> Path:
    """Replace (or delete) the file; the directory whose entries changed."""
    full: Path = root / entry["path"]
    _faults.tick()
    if entry["after"] is None:
        full.unlink()
        return _remove_empty_parents(full.parent, root)
    os.replace(root / entry["staged"], full)
    return full.parent


def _rollback(
    root: Path, journal: Journal, originals: dict[str, bytes] | None = None, evidence: _Evidence | None = None
) -> _Undoing:
    """Undo the journal's writes, needing no new space: each saved original goes back by a rename
    (see _put_back). `originals` (digest -> bytes, checked) are the fallback when one cannot be
    renamed; a failure inside commit holds them in memory, recovery read them beforehand. Each step
    leaves the journal true, so a rollback cut short (SIGKILL) is finished by the next command.
    Only a file that is still what the commit wrote (its `after`) is undone: one holding other
    bytes, or (recovery) not shown by its `evidence` to be written by the commit, is no file of
    this transaction and is kept. Returns the rollback: what it undid, kept and kept aside."""
    undoing = _Undoing.of(root, journal, originals or {}, evidence)
    for entry in reversed(journal.get("files", [])):
        undoing.undo(entry)
    undoing.left_directories()
    sealed = evidence is None or evidence.sealed  # a failing commit's own rollback knows what it did
    store_journal.restore_state(root, journal, sealed=sealed, tick=_tick)
    for directory in sorted(undoing.changed):
        fsync_dir(directory)
    store_journal.end(root, tick=_tick)
    return undoing


@frozen
class _Evidence(FrozenValue):
    """What recovery found the interrupted commit did: the files it replaced or deleted (those
    before the first one still staged, once its marker is there), the marker's identities of its
    staged files (None: no marker, nothing was replaced), whether this user's key sealed the
    marker, and the created files an installed distribution lists (kept whatever)."""

    written: frozenset[str]
    identities: dict[str, tuple[int, int, int]] | None
    sealed: bool  # identities are anyone's `stat`: only a sealed marker proves a file
    theirs: frozenset[str]

    def proven(self, root: Path, path: str) -> bool:
        """The file in place is the very file the commit staged (a rename keeps the identity),
        by a marker this user's patchkit sealed for this tree."""
        if not self.sealed:
            return False
        try:
            info = os.lstat(root / path)
        except OSError:
            return False
        return self.identities is not None and self.identities.get(path) == store_journal.file_identity(info)


# a step of one command, never compared nor printed: no __eq__ or __repr__ compiled at every start-up
@dataclass(eq=False, repr=False)
class _Undoing:
    """One rollback, file by file: what it restored and kept so far, and how often each original is still needed."""

    root: Path
    originals: dict[str, bytes]
    evidence: _Evidence | None  # recovery's (None: the failing commit's own rollback, which knows)
    uses: Counter[str]  # digest -> the files still to get it back
    keep: set[str]  # the objects the record it returns to names
    count: _Count = field(default_factory=_Count)
    changed: set[Path] = field(default_factory=set)  # directories whose entries changed
    kept: list[str] = field(default_factory=list)
    rebuilt: dict[str, list[str]] = field(default_factory=dict)  # how -> the lost originals made so (_rebuilt_original)
    emptied: set[str] = field(default_factory=set)  # the directories it created that remove_created removes
    left: dict[str, str] = field(default_factory=dict)  # those it could not remove -> why (left_directories)
    aside: Aside = field(init=False)

    def __post_init__(self) -> None:
        self.aside = Aside(self.root)

    @classmethod
    def of(cls, root: Path, journal: Journal, originals: dict[str, bytes], evidence: _Evidence | None) -> _Undoing:
        files = journal.get("files", [])
        to_restore = [e for e in files if e["before"] is not None and file_sha(root, e["path"]) != e["before"]]
        keep = store_journal.previous_state(root, journal).referenced_objects()
        return cls(root, originals, evidence, Counter(e["before"] for e in to_restore), keep)

    def ours(self, entry: JournalEntry, current: str | None) -> bool:
        """Whether the file is what this transaction wrote there."""
        path, evidence = entry["path"], self.evidence
        return current == entry["after"] and (
            evidence is None or (path in evidence.written and path not in evidence.theirs)
        )

    def set_aside(self, entry: JournalEntry, *, move: bool) -> None:
        """A file the rollback replaces or removes is kept aside first, unless it is the one staged
        or holds this patchkit's own guard bytes for its path (any apply writes them again)."""
        path = entry["path"]
        if self.evidence is None or self.evidence.proven(self.root, path):
            return
        own = guard_files().get(path) if GUARD_PATH.fullmatch(path) else None
        if own is None or sha256(own) != entry["after"]:
            _faults.tick()
            self.aside.keep(path, move=move)

    def undo(self, entry: JournalEntry) -> None:
        if entry.get("staged"):  # first: a created directory holding it could not be removed
            _faults.tick()
            (self.root / entry["staged"]).unlink(missing_ok=True)
        current = file_sha(self.root, entry["path"])
        if current != entry["before"] and not self.ours(entry, current):
            if current != entry.get(UNVOUCHED):  # else the file the journal names as there before, untouched
                self.kept.append(entry["path"])
            if entry["before"] is not None:
                self.uses[entry["before"]] -= 1
        elif entry["before"] is None:
            self.remove_created(entry, present=current is not None)
        elif current != entry["before"]:
            self.put_original_back(entry)

    def remove_created(self, entry: JournalEntry, *, present: bool) -> None:
        full = self.root / entry["path"]
        if present:
            self.set_aside(entry, move=True)
            _faults.tick()
            full.unlink(missing_ok=True)  # gone already when kept aside
            if UNVOUCHED in entry:
                self.count.guard_removed += 1
            elif LOST_GUARD in entry:
                self.count.guard_lost += 1
            else:
                self.count.removed += 1
            self.changed.add(full.parent)
        for rel in reversed(entry.get("created_dirs", [])):
            self.emptied.add(rel)
            with suppress(OSError):  # a sibling still there: tried again once every file is undone
                (self.root / rel).rmdir()

    def left_directories(self) -> None:
        """The directories the commit created, removed once every file is undone (deepest first); one
        that cannot be (an I/O error, a file written there since) is left and said, with its cause.
        One holding a file the rollback keeps stays: that file is said."""
        holding = {"/".join(p.split("/")[:n]) for p in self.kept for n in range(1, p.count("/") + 1)}
        for rel in sorted(self.emptied - holding, key=lambda d: (-d.count("/"), d)):
            try:
                (self.root / rel).rmdir()
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.left[rel] = exc.strerror or str(exc)

    def put_original_back(self, entry: JournalEntry) -> None:
        for rel in entry.get("removed_dirs", []):
            _faults.tick()
            make_readable_dir(self.root / rel)
        digest = entry["before"]
        self.uses[digest] -= 1
        last_use = not self.uses[digest] and digest not in self.keep
        if os.path.lexists(self.root / entry["path"]):
            self.set_aside(entry, move=False)
        _put_back(self.root, entry, self.originals, consume=last_use)
        self.count.restored += 1
        self.changed.add((self.root / entry["path"]).parent)


def _put_back(root: Path, entry: JournalEntry, originals: dict[str, bytes], *, consume: bool) -> None:
    """The original of entry's file back in place: its object renamed there when this is its last
    use (no byte written, so a full disk cannot stop it), else a new file of its bytes."""
    full, digest = root / entry["path"], entry["before"]
    _faults.tick()
    if consume and take_object(root, digest, full, entry.get("mode")):
        return
    original = originals[digest] if digest in originals else read_object(root, digest)
    _write_atomic(full, original, mode=entry.get("mode"))


def _remove_empty_parents(directory: Path, root: Path) -> Path:
    """A delete that empties a directory removes it too, so revert leaves no trace of an add (the
    guard's dist-info directory included, which lies directly under the root). Returns the
    directory that is left, whose entries changed."""
    while directory != root:
        try:
            directory.rmdir()
        except OSError:
            return directory
        directory = directory.parent
    return directory


def _missing_parents(directory: Path, root: Path) -> list[Path]:
    missing = []
    while not directory.exists() and directory != root:
        missing.append(directory)
        directory = directory.parent
    return list(reversed(missing))


def _write_file(path: Path, data: bytes, mode: int | None) -> Origin:
    with open(path, "wb", buffering=0) as fh:
        view = memoryview(data)
        done = _write_direct(fh.fileno(), view) if len(data) >= _DIRECT_FROM else 0
        while done < len(view):  # the rest (all of a small file) through the page cache
            done += os.write(fh.fileno(), view[done:])
        fsync(fh.fileno())
        os.fchmod(fh.fileno(), (READABLE_FILE_MODE if mode is None else mode) & PERMISSIONS)
        return Origin.of(os.fstat(fh.fileno()))


def make_readable_dir(path: Path) -> None:
    """A directory patchkit creates in a tree is readable by the user vLLM runs as, whatever
    patchkit's umask (an existing one is left as it is)."""
    try:
        path.mkdir()
    except FileExistsError:
        if path.is_dir():
            return
        raise
    os.chmod(path, READABLE_DIR_MODE)


# From 16 MiB a content goes past the page cache (O_DIRECT, from an 8 MiB page-aligned buffer): a
# buffered write first touches a new page per 4 KiB, most of a large write's time on a VM. A file
# system that refuses O_DIRECT (tmpfs before Linux 6.6, some FUSE) gets the page cache.
_DIRECT_FROM, _DIRECT_CHUNK, _DIRECT_BLOCK = 16 << 20, 8 << 20, 4096


def _write_direct(fd: int, view: memoryview) -> int:
    """Write the leading whole 4 KiB blocks of `view` to `fd` past the page cache; how many bytes
    were written (0 when the file system refuses O_DIRECT). The caller writes the rest buffered."""
    whole = len(view) - len(view) % _DIRECT_BLOCK
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except (AttributeError, OSError):  # no O_DIRECT on this system, or not on this file system
        return 0
    done = 0
    try:
        with mmap.mmap(-1, _DIRECT_CHUNK) as bounce, memoryview(bounce) as aligned:  # mmap: page-aligned
            while done < whole:
                size = min(_DIRECT_CHUNK, whole - done)
                aligned[:size] = view[done : done + size]
                with aligned[:size] as chunk:
                    written = os.write(fd, chunk)
                done += written
                if written < size:  # a short write leaves an unaligned offset: the rest buffered
                    break
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: this file or device takes no direct write after all
            raise
    finally:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    return done


def _write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    durable_write(path, data, mode=mode, tick=_tick)


def file_sha(root: Path, path: str) -> str | None:
    checked_path(path, state_path(root))  # never hash a file outside the tree
    full = root / path
    if full.is_dir():
        return "<directory>"
    return sha256(read_file(full))  # bounded, and a fifo is never opened for reading
