"""What patchkit did to a target, recorded inside the target tree, and the checks every file of the store passes.

    <root>/.patchkit/state.json        one small JSON: cheap for a launch guard to read (here)
    <root>/.patchkit/objects/<sha256>  the original bytes of every file patchkit changed (objects.py)
    <root>/.patchkit/journal.json      exists only while a transaction is unfinished (journal.py)
    <root>/.patchkit/staged.json       with it, once the commit staged every file (journal.py)
    <root>/.patchkit/saved/            user edits kept aside by `revert --force` or a recovery (saved.py)
    <root>/.patchkit/lock              the target's lock (engine/transaction.py)

Everything here is read back from the tree, so it is untrusted input, exactly like a diff:
`.patchkit/` and what it holds may not be symlinks or of the wrong kind (check_meta_dir), the
state is parsed strictly (every path by fsutil.unsafe_reason, every hash a sha256 hex digest, a
size limit), objects are named by digest only and read without following a symlink.

state.json:
    {"format": 1, "entries": [{"set", "vllm_version", "release", "applied_at",
      "patches": [{"name", "sha256", "path"}],   ("path": an ad-hoc patch's, where it was applied from)
      "library": path,        (a library set's: the library it was applied from; absent in older records)
      "files": {path: {"before": sha|null, "after": sha|null, "mode": int, "gate": true}}}],
                              ("mode": the original's permission bits, which revert puts back;
                               absent in older records and for a file patchkit created;
                               "gate": one of the set's `gates`, which revert writes first; absent
                               otherwise)
     "guard": {path: sha},   (the launch guard's files, patchkit/engine/guard.py; absent when none)
     "guard_replaced": {path: sha},  (a user's own file at a guard path that `apply --guard` replaced:
                              its bytes are kept in objects/, and revert puts them back)
     "wheel": version,       (the patched wheel's vLLM version the guard was installed on, no set
                              recorded: the guard refuses another; absent otherwise)
     "wheel_held": sha,      (the sha256 of the installed `wheel --patch` build's patchkit.json an apply
                              held to the sets' contracts (engine/held.py): the guard refuses such a
                              wheel's files without it; absent otherwise)
     "no_guard": true}       (an apply was told --no-guard; absent otherwise)
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shlex
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, TypedDict

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import TreeRefused, escaped, quoted
from patchkit.base.fsutil import (
    MAX_TREE_FILE_BYTES,
    Origin,
    atomic_write,
    file_name_problem,
    first_symlink,
    json_text,
    load_json_text,
    open_regular,
    read_opened,
    read_regular,
    set_name_problem,
    too_deep,
    unsafe_reason,
)
from patchkit.base.hashing import hash_side_by_side, sha256
from patchkit.base.patterns import LazyPattern
from patchkit.base.values import Value

FORMAT = 1
META_DIR = ".patchkit"
# in a maintainer's workspace (patchkit workspace/port): the set whose series patchkit wrote into it
WORKSPACE_RECORD = ".patchkit-workspace.json"
# state.json and journal.json: a few hundred bytes a file; far above any real record, far below harm.
MAX_RECORD_BYTES = 16 * 1024 * 1024
DIGEST = LazyPattern(r"[0-9a-f]{64}")
# What .patchkit/ may hold, and of which kind (anything else in it is left alone, never read).
_META_FILES = ("state.json", "journal.json", "staged.json")
_META_DIRS = ("objects", "saved")
# The mode bits a written file may have. Never setuid, setgid or sticky: patchkit often runs as root on
# a tree another account may own, and a root-owned setuid copy of a file would be a privilege it gave.
PERMISSIONS = 0o775  # nor writable by every local user

# A fault point of a transaction: called before each filesystem operation (engine/transaction._Faults).
Tick = Callable[[], None]


def durable_write(path: Path, data: bytes, *, tick: Tick, mode: int | None = None) -> None:
    """Write a file of the store (or of the tree) atomically and fsynced, a fault point before it and before its rename."""
    tick()
    atomic_write(path, data, mode=None if mode is None else mode & PERMISSIONS, durable=True, before_replace=tick)


def meta_dir(root: Path) -> Path:
    return root / META_DIR


def _recovery_lists(meta: Path) -> list[Path]:
    """The lists of kept files a crash recovery wrote (recovered-<journal id>.txt, regular files):
    patchkit's own, said when they were written; nothing recorded is left for them to explain."""
    try:
        names = os.listdir(meta)
    except OSError:
        return []
    lists = [meta / n for n in names if re.fullmatch(r"recovered-[0-9A-Za-z]{1,64}\.txt", n)]
    return [path for path in lists if _is_regular(path)]


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def remove_empty_store(root: Path, record: State) -> Path | None:
    """Once the record holds nothing (no set, no guard, no choice remembered), .patchkit/ goes:
    state.json, the emptied objects/, the lock (the caller holds it: a waiter checks the file it
    locked is still there), then the directory. What patchkit did not make there stays, and the
    copies of the user's edits (saved/): that directory is returned when it stays. `record`: the
    record the caller just committed (or found), under the lock."""
    meta = meta_dir(root)
    if not meta.is_dir() or not record.holds_nothing():
        return None
    for remove in (
        (meta / "state.json").unlink,
        (meta / "objects").rmdir,
        (meta / "saved").rmdir,  # emptied by the user's `rm -r` of each copy, as revert says
        *(listed.unlink for listed in _recovery_lists(meta)),
        (meta / "lock").unlink,
        meta.rmdir,
    ):
        with contextlib.suppress(OSError):  # what cannot go stays (no state.json is an empty record too)
            remove()
    saved = meta / "saved"
    return saved if saved.is_dir() else None


def left_in_store(root: Path) -> list[str]:
    """What .patchkit/ still holds once remove_empty_store ran, saved/ aside (said on its own): files
    patchkit did not write there (relative to .patchkit/), which it keeps; sorted, objects/ entered once."""
    meta = meta_dir(root)
    left: list[str] = []
    for name in _listed(meta):
        if name == "saved":
            continue
        inside = _listed(meta / name) if name == "objects" and not (meta / name).is_symlink() else []
        left += [f"{name}/{item}" for item in inside] or [name]
    return left


def _listed(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory)) if directory.is_dir() else []
    except OSError:
        return []


def check_meta_dir(root: Path) -> None:
    """Refuse a .patchkit/ that would send patchkit's reads or writes elsewhere: a symlink, or a
    state file, lock or store of the wrong kind (a symlink, a directory, a fifo). Runs before
    anything in it is read or written; a missing one is fine (it is made when needed)."""
    meta = meta_dir(root)
    _require_kind(meta, stat.S_ISDIR, "a directory")
    if not meta.is_dir():
        return
    for name in _META_FILES:
        _require_kind(meta / name, stat.S_ISREG, "a regular file")
    for name in _META_DIRS:
        _require_kind(meta / name, stat.S_ISDIR, "a directory")
    _require_kind(meta / "lock", _lock_kind, "a regular file")


def _lock_kind(mode: int) -> bool:
    """A directory as the lock is left to the lock (it cannot be made: exit 4, as any unusable lock)."""
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _require_kind(path: Path, is_kind: Callable[[int], bool], kind: str) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TreeRefused(f"cannot inspect {path}: {exc.strerror}") from exc
    if not is_kind(mode):
        what = "a symlink (patchkit never follows one out of the tree)" if stat.S_ISLNK(mode) else "not " + kind
        raise TreeRefused(
            f"{path} is {what}",
            hint=f"inspect or remove {path} (patchkit wrote none like it)",
        )


def read_meta_file(path: Path) -> bytes | None:
    """state.json or journal.json, untrusted: never through a symlink, a regular file, size-limited.
    None when there is none."""
    try:
        return read_regular(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:  # NotRegularFile (a symlink, a fifo, too large), or unreadable
        raise _damaged(path, exc.strerror or str(exc)) from exc


def _damaged(path: Path, what: str) -> TreeRefused:
    """A damaged record: patchkit wrote nothing. Moved aside, not deleted (it names the originals
    kept in objects/); with no record, revert undoes the series it finds applied."""
    if path.name != "state.json":  # the journal (read_meta_file) says its own
        return TreeRefused(f"{path} is damaged ({what})", hint=f"inspect or remove {path}; patchkit wrote nothing")
    return TreeRefused(
        f"{path} is damaged ({what}); patchkit wrote nothing",
        hint=f"inspect it, or move it aside (mv {shlex.quote(str(path))} {shlex.quote(f'{path}.damaged')}); "
        f"then {hints.command('revert')} undoes the series it finds applied",
    )


# The recorded files' bytes one command hashes at most (the guard's MAX_JUDGED_BYTES): a patched vLLM's
# are under 1 MB; hard links to one large file, or sparse files, cost no disk and each its whole size.
MAX_HASHED_BYTES = 256 * 1024 * 1024
# Of those, the bytes kept for a second look in the same command (vouched reads the files the drift
# check hashed): one file at most MAX_TREE_FILE_BYTES, hard links to it kept once.
MAX_KEPT_BYTES = 64 * 1024 * 1024
# recorded_sha256 of a path that is, or lies under, a symlink: never a recorded sha256 (the guard refuses it)
THROUGH_A_SYMLINK = "through a symlink"
_hashed: dict[Origin, str] = {}  # each file's sha256 by its (device, inode, size, mtime): hashed once a command
_kept: dict[Origin, bytes] = {}  # and its bytes, while they are few (MAX_KEPT_BYTES)
_hashed_bytes: list[int] = []  # the bytes read so far by this command, and kept (none: 0, 0)
# a tree -> the directories found real ones on the way to recorded files, and the symlinks found: each once
_walked: dict[str, tuple[set[str], set[str]]] = {}


def recorded_sha256(root: Path, path: str) -> str | None:
    """The sha256 of the recorded file root/path (None: no regular file there; THROUGH_A_SYMLINK: it
    is a symlink or lies under one), as recorded_file finds it; a file hashed before is not read."""
    found = _recorded(root, path, content=False)
    return found if found is None or isinstance(found, str) else found[0]


def recorded_file(root: Path, path: str) -> tuple[str, bytes] | str | None:
    """The sha256 and bytes of the recorded file root/path; None: no regular file there; THROUGH_A_SYMLINK:
    it is a symlink or lies under one (a moved vllm/ aside), never opened. The path is walked from the
    tree as the guard walks it (one lstat a directory, each once a command, up to the first symlink):
    a planted symlink into a deep directory is never expanded. A file is read once a command (a
    record naming hard links to one file reads it once), and MAX_HASHED_BYTES in all: a record naming
    more is damaged (no patched tree holds that much)."""
    return _recorded(root, path, content=True)


def _recorded(root: Path, path: str, *, content: bool) -> tuple[str, bytes] | str | None:
    if through_a_symlink(root, path):
        return THROUGH_A_SYMLINK
    opened = open_regular(root / path, follow_symlinks=False)
    if opened is None:
        return None
    fd, info = opened
    try:
        if (key := Origin.of(info)) in (_kept if content else _hashed):
            return _hashed[key], _kept.get(key, b"")
        spent, kept = _hashed_bytes or (0, 0)
        if spent + info.st_size > MAX_HASHED_BYTES and info.st_size <= MAX_TREE_FILE_BYTES:  # else: read_opened's
            raise _damaged(state_path(root), f"the files it names hold over {MAX_HASHED_BYTES >> 20} MiB together")
        data, origin = read_opened(root / path, fd, info)
    finally:
        os.close(fd)
    digest, keep = str(sha256(data)), origin is not None and kept + len(data) <= MAX_KEPT_BYTES
    _hashed_bytes[:] = [spent + len(data), kept + len(data) * keep]
    if origin is not None:
        _hashed[origin] = digest
        if keep:
            _kept[origin] = data
    return digest, data


def through_a_symlink(root: Path, path: str) -> bool:
    """Whether root/path is, or lies under, a symlink (a moved vllm/ aside): fsutil.first_symlink, each
    directory and symlink looked at once a command."""
    plain, links = _walked.setdefault(str(root), (set(), set()))
    parts = path.split("/")
    if any("/".join(parts[:depth]) in links for depth in range(1, len(parts) + 1)):
        return True
    found = first_symlink(root, path, plain)
    if found is not None:
        links.add(found[0].relative_to(root).as_posix())
    return found is not None


def checked_path(path: object, origin: Path, *, directory: bool = False, guard: bool = True) -> str:
    """A recorded path, checked by the one path rule (the same as a diff's) and, like a diff's, kept to
    the patched packages: a file inside a package directory (`vllm/...`), never a file beside them in
    site-packages (a `.pth`, `sitecustomize.py`), a dist-info, patchkit's own `.patchkit/` or bytecode.
    The launch guard's files are the exception, where they may be recorded (`guard`): a transaction's,
    the guard's own record; never a series' (no patch changes the guard)."""
    if not isinstance(path, str):
        raise _damaged(origin, f"a path is {type(path).__name__}, not text")
    reason = unsafe_reason(path) or _too_long(path) or _outside_packages(path, directory=directory, guard=guard)
    if reason:
        raise _damaged(origin, f"the recorded path {quoted(repr(path))} {reason}")
    return path


# A name over NAME_MAX (255 bytes on Linux file systems) is no file at all, and the tree's path before a
# recorded one needs room under PATH_MAX (4,096): reading either would fail in the middle of a command.
_MAX_NAME, _MAX_RECORDED_PATH = 255, 2048


def _too_long(path: str) -> str | None:
    encoded = path.encode("utf-8", "surrogateescape")
    if any(len(part) > _MAX_NAME for part in encoded.split(b"/")):
        return f"has a name over {_MAX_NAME} bytes, which no file system here holds"
    if len(encoded) > _MAX_RECORDED_PATH:
        return f"is over {_MAX_RECORDED_PATH:,} bytes, longer than any file of a package"
    return too_deep(path)


# The one exception: the files of the launch guard `apply` installs beside vllm/ (patchkit.engine.guard).
GUARD_PATH = LazyPattern(
    r"patchkit_guard\.py|patchkit_guard-[A-Za-z0-9_.+!]+\.dist-info(?:/(?:METADATA|RECORD|INSTALLER|entry_points\.txt))?"
)
# The guard's files themselves (its dist-info directory aside): all that state.json's "guard" may name.
GUARD_FILE = LazyPattern(
    r"patchkit_guard\.py|patchkit_guard-[A-Za-z0-9_.+!]+\.dist-info/(?:METADATA|RECORD|INSTALLER|entry_points\.txt)"
)


# Packages Python itself imports at start-up (site's hooks; setuptools' .pth shim): never patched.
STARTUP_HOOKS = frozenset({"sitecustomize", "usercustomize", "_distutils_hack"})


def _outside_packages(path: str, *, directory: bool, guard: bool) -> str | None:
    if guard and GUARD_PATH.fullmatch(path) and (directory or "/" in path or path.endswith(".py")):
        return None
    parts = path.split("/")
    if parts[0] in STARTUP_HOOKS:
        return "is code Python runs at every start, which patchkit never records"
    if not parts[0].isidentifier():
        return "is not inside a package directory (vllm/...)"
    if len(parts) < 2 and not directory:
        return "is not inside a package directory (vllm/...)"
    if "__pycache__" in parts:
        return "is compiled bytecode, which patchkit never records"
    return None


def checked_digest(value: object, origin: Path, *, optional: bool = True) -> str | None:
    """A recorded sha256: 64 lowercase hex digits (the only names in objects/), or None."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not DIGEST.fullmatch(value):
        raise _damaged(origin, f"{quoted(repr(value))} is not a sha256 hex digest")
    return value


def state_path(root: Path) -> Path:
    return meta_dir(root) / "state.json"


class _NamedRecordedPatch(TypedDict):
    name: str
    sha256: str


class RecordedPatch(_NamedRecordedPatch, total=False):
    path: str  # an ad-hoc patch: the absolute path it was applied from (for the hints that name it)


MAX_PATCH_PATH = 4096


class _Hashes(TypedDict):
    before: str | None
    after: str | None


class RecordedFile(_Hashes, total=False):
    """A file's sha256 before and after an apply (None: the file did not exist), and the original's
    permission bits (`mode`), which apply may widen (o+r) and revert puts back."""

    mode: int
    # true: apply found the file patched with no record of it, and its "before" is what reversing
    # the set's hunks gave, not a file apply saw (revert says so unless vLLM's RECORD vouches for it)
    found: bool
    gate: bool  # true: one of the set's `gates` (set.toml), which a revert writes first


# What a recorded mode may hold: permission bits only (never setuid, setgid or sticky).
MODE_BITS = 0o777
OWNER_READ = 0o400


@dataclass(eq=False, repr=False)
class Entry(Value):
    """One set's record in state.json: its release, patches and files."""

    set_name: str
    vllm_version: str | None
    release: str | None
    applied_at: str
    patches: list[RecordedPatch]
    files: dict[str, RecordedFile]  # path -> its hashes
    library: str | None = None  # a library set: the absolute path of the library it was applied from
    # a --patch apply's: its writes were held to the library sets' contracts (engine/held.py); an older
    # patchkit's record has no mark, and the guard refuses it (it cannot judge the contracts)
    held: bool = False

    def to_json(self) -> dict[str, Any]:
        data = {
            "set": self.set_name,
            "vllm_version": self.vllm_version,
            "release": self.release,
            "applied_at": self.applied_at,
            "patches": self.patches,
            "files": self.files,
        }
        data = data if self.library is None else {**data, "library": self.library}
        return {**data, "held": True} if self.held else data

    def without_files(self, paths: Iterable[str]) -> Entry:
        """The entry with no record of `paths` (pip wrote them since: an apply records them afresh)."""
        dropped = set(paths)
        return replace(self, files={path: shas for path, shas in self.files.items() if path not in dropped})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:  # checked by _entry first
        return cls(
            data["set"],
            data.get("vllm_version"),
            data.get("release"),
            data.get("applied_at", ""),
            data.get("patches", []),
            data["files"],
            data.get("library"),
            data.get("held", False),
        )


@dataclass(eq=False, repr=False)
class State(Value):
    """state.json: each applied set's entry, and the guard's."""

    entries: list[Entry]
    guard: dict[str, str] = field(default_factory=dict)  # the launch guard's files: path -> sha256
    no_guard: bool = False  # an apply was told --no-guard: later ones install no guard either
    wheel: str | None = None  # the patched wheel's version the guard guards (no entry recorded)
    guard_replaced: dict[str, str] = field(
        default_factory=dict
    )  # a user's file `apply --guard` replaced: path -> sha256
    # The sets the applies that wrote this record set out to apply (`apply --set X` chose X alone;
    # `run --apply`, the sets its launch needs): status fails one of them left unapplied (a run
    # that stopped half-way), and only notes a set never chosen. None: a record from before.
    chosen: tuple[str, ...] | None = None
    # the sets `revert --set` took out of the record (no longer chosen): said so, not "no apply chose"
    reverted: tuple[str, ...] = ()
    # the sha256 of the installed --patch wheel's patchkit.json an apply found to break no set's contract
    wheel_held: str | None = None

    def entry(self, set_name: str) -> Entry | None:
        return next((e for e in self.entries if e.set_name == set_name), None)

    def holds_nothing(self) -> bool:
        """No set, no guard, nothing remembered: a choice with no set left counts for nothing (as
        `without` drops it), else a record `"chosen"` alone keeps .patchkit/ for ever."""
        return not self.entries and replace(self, chosen=None) == State(entries=[])

    def without(self, set_name: str) -> State:
        entries = [e for e in self.entries if e.set_name != set_name]
        # a choice outlives no set's entry: with none left, the record is as empty as before any apply
        chosen = None if self.chosen is None or not entries else tuple(n for n in self.chosen if n != set_name)
        reverted = self.reverted if entries else ()  # with no set left, as empty as before any apply
        return replace(self, entries=entries, chosen=chosen, reverted=reverted)

    def with_reverted(self, set_name: str) -> State:
        """The state that remembers `revert --set` took this set out (while other sets stay recorded)."""
        if not self.entries or set_name in self.reverted:
            return self
        return replace(self, reverted=(*self.reverted, set_name))

    def wanted(self) -> tuple[str, ...]:
        """The sets chosen (see `chosen`); for a record from before, the sets it holds."""
        return self.chosen if self.chosen is not None else tuple(e.set_name for e in self.entries)

    def with_chosen(self, names: Iterable[str]) -> State:
        """The state that also remembers these sets as chosen by an apply."""
        wanted, names = self.wanted(), tuple(dict.fromkeys(names))
        reverted = tuple(n for n in self.reverted if n not in names)  # chosen again
        return replace(self, chosen=(*wanted, *(n for n in names if n not in wanted)), reverted=reverted)

    def size_problem(self) -> str | None:
        """Why this record is larger than patchkit writes one (record_size_damage, or a path too deep;
        None: it is not)."""
        deep = next((p for entry in self.entries for p in entry.files if too_deep(p)), None)
        if deep is not None:
            return f"the path {quoted(repr(deep))} {too_deep(deep)}"
        return record_size_damage([{"files": entry.files} for entry in self.entries])

    def with_entry(self, entry: Entry) -> State:
        """The state with `entry` recorded: the entries describe the tree from now on, not a wheel.
        A set applied again keeps its place: a later set's "before" is what this one wrote, so
        revert must still undo that one first."""
        if self.entry(entry.set_name) is None:
            return replace(self, entries=[*self.entries, entry], wheel=None)
        entries = [entry if e.set_name == entry.set_name else e for e in self.entries]
        return replace(self, entries=entries, wheel=None)

    def recorded_later(self, set_name: str, paths: list[str]) -> dict[str, str]:
        """path -> the first set applied after `set_name` whose record holds that file: a re-apply
        of `set_name` that writes it would change a file under that set's record."""
        entry = self.entry(set_name)
        later = self.later(entry) if entry is not None else []
        found: dict[str, str] = {}
        for e in later:
            for path in paths:
                if path in e.files:
                    found.setdefault(path, e.set_name)
        return found

    def with_guard(self, guard: dict[str, str]) -> State:
        """The state with the guard's files; without a guard, no wheel is guarded either, and a
        user's file the guard replaced is kept only while the guard holds its path."""
        replaced = {path: sha for path, sha in self.guard_replaced.items() if path in guard}
        return replace(
            self,
            guard=guard,
            wheel=self.wheel if guard else None,
            guard_replaced=replaced,
            wheel_held=self.wheel_held if guard else None,
        )

    def with_guard_replaced(self, replaced: dict[str, str]) -> State:
        """The state that also keeps these users' files (path -> sha256) the guard replaced."""
        return replace(self, guard_replaced={**self.guard_replaced, **replaced})

    def with_wheel(self, version: str | None) -> State:
        return replace(self, wheel=version)

    def with_wheel_held(self, digest: str | None) -> State:
        return replace(self, wheel_held=digest)

    def with_version(self, set_name: str, version: str | None) -> State:
        """The state with `set_name`'s entry recorded for `version`, in its place among the others."""
        return replace(
            self,
            entries=[replace(e, vllm_version=version) if e.set_name == set_name else e for e in self.entries],
        )

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {"format": FORMAT, "entries": [e.to_json() for e in self.entries]}
        if self.guard:
            data["guard"] = self.guard
        if self.no_guard:
            data["no_guard"] = True
        if self.wheel:
            data["wheel"] = self.wheel
        if self.guard_replaced:
            data["guard_replaced"] = self.guard_replaced
        if self.chosen is not None:
            data["chosen"] = list(self.chosen)
        if self.reverted:
            data["reverted"] = list(self.reverted)
        if self.wheel_held:
            data["wheel_held"] = self.wheel_held
        return (json_text(data, "the state file", indent=1, sort_keys=True) + "\n").encode()

    def later(self, entry: Entry) -> list[Entry]:
        """The entries applied after `entry` (entries are kept in the order they were applied)."""
        return self.entries[self.entries.index(entry) + 1 :]

    def overlapping(self, entry: Entry) -> dict[str, str]:
        """path -> the name of a set applied after `entry` that changed the same file again: its
        record's "before" is this entry's "after", so this entry alone cannot be undone."""
        return {path: e.set_name for e in self.later(entry) for path in e.files if path in entry.files}

    def accepted(self, entry: Entry, path: str) -> set[str | None]:
        """The contents (sha256) a file `entry` recorded may have without being edited by hand:
        its original, what this entry wrote, and what any set applied after it wrote there."""
        shas = entry.files[path]
        return {shas["before"], shas["after"]} | {e.files[path]["after"] for e in self.later(entry) if path in e.files}

    def referenced_objects(self) -> set[str]:
        befores = {before for e in self.entries for f in e.files.values() if (before := f.get("before"))}
        return befores | set(self.guard_replaced.values())


class NamedPatch(Protocol):
    """What a record keeps of a patch (series.patchfile.Patch, a layer above the store)."""

    @property
    def name(self) -> str: ...

    @property
    def sha256(self) -> str: ...


def record_apply(
    previous: Entry | None,
    *,
    set_name: str,
    vllm_version: str | None,
    release: str | None,
    patches: Iterable[NamedPatch],
    changes: dict[str, tuple[bytes | None, bytes | None]],
    library: Path | None = None,
    root: Path | None = None,
    gates: frozenset[str] = frozenset(),
    held: bool = False,
) -> Entry:
    """The entry an apply records: each file's original hash and permission bits (kept from an
    earlier apply of the same set) and the hash written now. `library`: the library the set was
    read from (for hints given where another library is at hand). `root`: the tree, whose files
    are still the originals (their modes are read there). `gates`: the set's files a revert writes
    first (marked so in the record: a revert goes by the record, whatever the library holds).
    `held`: a --patch apply's files were held to the library sets' contracts (Entry.held)."""

    files = dict(previous.files) if previous else {}
    hash_side_by_side([content for pair in changes.values() for content in pair])
    for path, (before, after) in changes.items():
        earlier = files.get(path)
        if earlier is not None:
            files[path] = {**earlier, "after": sha256(after)}
        else:
            files[path] = {"before": sha256(before), "after": sha256(after)}
            mode = _original_mode(root, path) if before is not None and root is not None else None
            if mode is not None:
                files[path]["mode"] = mode
        files[path].pop("gate", None)  # as the set declares it now (a library update may change it)
        if path in gates:
            files[path]["gate"] = True
    return Entry(
        set_name=set_name,
        vllm_version=vllm_version,
        release=release,
        applied_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        patches=[_recorded_patch(p, adhoc=is_adhoc(set_name)) for p in patches],
        files=files,
        library=_recorded_library(library),
        held=held,
    )


def _original_mode(root: Path, path: str) -> int | None:
    """The permission bits of the file at `path` (never through a symlink), or None."""
    try:
        info = os.lstat(root / path)
    except OSError:
        return None
    mode = stat.S_IMODE(info.st_mode) & PERMISSIONS  # as patchkit writes a file
    return mode if stat.S_ISREG(info.st_mode) and mode & OWNER_READ else None


def _recorded_library(library: Path | None) -> str | None:
    where = None if library is None else str(library.absolute())
    return where if where is not None and len(where) <= MAX_PATCH_PATH and where.isprintable() else None


def _recorded_patch(patch: NamedPatch, *, adhoc: bool) -> RecordedPatch:
    """A patch as the record keeps it; an ad-hoc one with where it was read from, so that a hint
    can name a path that works from any directory (its library names a series' patches)."""
    recorded: RecordedPatch = {"name": patch.name, "sha256": patch.sha256}
    path = getattr(patch, "path", None)
    if adhoc and path is not None and len(str(path)) <= MAX_PATCH_PATH:
        recorded["path"] = str(Path(path).absolute())
    return recorded


ADHOC_PREFIX = "adhoc-"  # series.library.adhoc_set_name: the record's name of a --patch apply
ADHOC_ROOT = "vllm"  # series.patchfile.DEFAULT_ROOTS: the one package a --patch file may change


def is_adhoc(set_name: str) -> bool:
    return set_name.startswith(ADHOC_PREFIX)


def shown_set(entry: Entry) -> str:
    """A recorded set as a person knows it: `set NAME`, or a --patch apply by its patch files (its
    record name, adhoc-<hex>, is patchkit's own)."""
    if not is_adhoc(entry.set_name):
        return f"set {entry.set_name}"
    return "the " + adhoc_files([p["name"] for p in entry.patches])


def adhoc_files(names: list[str]) -> str:
    """`--patch file x.diff` (`--patch files a.diff, b.diff`): --patch files by their names."""
    names = [Path(name).name for name in names] or ["?"]
    return f"--patch file{'s' if len(names) > 1 else ''} {', '.join(names)}"


def recorded_patch_files(entry: Entry) -> tuple[str, ...]:
    """The --patch arguments that name an ad-hoc entry's patches in a hint: the path each was
    applied from while that file is still that very patch (its sha256), so the hint works from any
    directory; else its name."""
    return tuple(_location(p) for p in entry.patches)


def missing_patch_files(entry: Entry) -> tuple[str, ...]:
    """The recorded paths (else names) of an ad-hoc entry's patches no longer where it was applied
    from, or no longer that very patch."""
    return tuple(p.get("path") or p["name"] for p in entry.patches if _location(p) != p.get("path"))


_PATCH_LIMIT = 64 << 20  # series.patchfile.PATCH_LIMIT: a larger file is no patch patchkit applied


def _location(patch: RecordedPatch) -> str:
    where = patch.get("path")
    if where is None:
        return patch["name"]
    try:
        raw = read_regular(Path(where), _PATCH_LIMIT, follow_symlinks=True)
    except OSError:
        return patch["name"]
    return where if sha256(raw) == patch["sha256"] else patch["name"]


def moved_patches(entry: Entry) -> list[str]:
    """The recorded patch files of an ad-hoc apply that are no longer where it read them (moved or
    deleted): a `--patch` hint naming them would fail."""
    if not is_adhoc(entry.set_name):
        return []
    return [p["name"] for p in entry.patches if "path" in p and not os.path.isfile(p["path"])]


def earlier_applies(state: State, paths: Sequence[str]) -> list[Entry]:
    """The ad-hoc applies the record holds of these --patch files (by the path each was read from),
    whatever the files hold now: an apply of an earlier version of a patch file edited since."""
    wanted = {os.path.abspath(p) for p in paths}
    return [e for e in state.entries if is_adhoc(e.set_name) and any(p.get("path") in wanted for p in e.patches)]


def applied_on(entry: Entry) -> str:
    """When the record says the set was applied, as a person reads it (`2026-12-03 14:31 UTC`)."""
    try:
        when = datetime.fromisoformat(entry.applied_at).astimezone(timezone.utc)
    except ValueError:
        return entry.applied_at
    return when.strftime("%Y-%m-%d %H:%M UTC")


# What patchkit writes into a tree (the record, the guard, the files it adds) is read by whichever user
# runs vLLM: its mode is set, whatever the umask of the patchkit run.
READABLE_FILE_MODE, READABLE_DIR_MODE = 0o644, 0o755


def write_state(root: Path, state: State, *, tick: Tick) -> None:
    durable_write(state_path(root), state.to_bytes(), tick=tick, mode=READABLE_FILE_MODE)


def read_state(root: Path) -> State:
    check_meta_dir(root)
    path = state_path(root)
    raw = read_meta_file(path)
    if raw is None:
        return State([])
    # one run asks for the same record several times (resolve, inspect, the guard's check): the
    # same bytes are validated once, and each caller gets its own copy to change
    key = (path, raw)
    if key not in _parsed:
        _parsed[key] = parse_state(raw, path)
        while len(_parsed) > 4:
            del _parsed[next(iter(_parsed))]
    return copy.deepcopy(_parsed[key])


_parsed: dict[tuple[Path, bytes], State] = {}


def parse_state(raw: bytes, origin: Path) -> State:
    """state.json, checked field by field before any of it is used: each path by the one path
    rule, each hash a digest. Anything else is refused whole (exit 2), naming the file."""
    try:
        data = load_json_text(raw)
    except (ValueError, RecursionError) as exc:
        raise _damaged(origin, f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise _damaged(origin, f"a {type(data).__name__}, not an object")
    if data.get("format") != FORMAT:
        raise _damaged(origin, f"unknown state format {quoted(repr(data.get('format')))}")
    entries = data.get("entries", [])
    if not isinstance(entries, list):
        raise _damaged(origin, "'entries' is not a list")
    too_many = record_size_damage(entries)
    if too_many is not None:  # before each is checked: the work of every command is bounded by it
        raise _damaged(origin, too_many)
    no_guard = data.get("no_guard", False)
    if not isinstance(no_guard, bool):
        raise _damaged(origin, "'no_guard' is not true or false")
    guard = _checked_guard(data.get("guard", {}), origin)
    replaced = _checked_guard(data.get("guard_replaced", {}), origin)
    if not replaced.keys() <= guard.keys():  # revert writes them back only where the guard is
        raise _damaged(origin, "'guard_replaced' names a file its guard record does not")
    return State(
        [_checked_entry(e, origin) for e in entries],
        guard,
        no_guard,
        _checked_wheel(data.get("wheel"), origin),
        replaced,
        _checked_chosen(data.get("chosen"), origin),
        _checked_chosen(data.get("reverted"), origin, "reverted") or (),
        _checked_wheel_held(data.get("wheel_held"), origin),
    )


_MAX_CHOSEN = 256  # far more sets than a library holds: a longer list is no record patchkit wrote
# Files a record names, summed over its sets: five times every file of a vLLM release (0.16.0's wheel
# holds 1,905). apply records no more; a record naming more is damaged, and each command's work (and
# the guard's, in every vLLM process) stays bounded by it.
MAX_RECORDED_FILES = 10_000


def record_size_damage(entries: list[object]) -> str | None:
    """Why a record of these entries is larger than any patchkit writes (None: it is not)."""
    if len(entries) > _MAX_CHOSEN:
        return f"it records {len(entries):,} sets, more than patchkit records (at most {_MAX_CHOSEN})"
    files = sum(len(e["files"]) for e in entries if isinstance(e, dict) and isinstance(e.get("files"), dict))
    if files > MAX_RECORDED_FILES:
        return (
            f"it records {files:,} files, more than patchkit records (at most {MAX_RECORDED_FILES:,}; "
            "a vLLM release holds about 2,000)"
        )
    return None


def _checked_chosen(chosen: object, origin: Path, key: str = "chosen") -> tuple[str, ...] | None:
    """The sets the applies chose (or `revert --set` took out): short printable names, as a
    library's sets are named."""
    if chosen is None:
        return None
    if not isinstance(chosen, list) or len(chosen) > _MAX_CHOSEN:
        raise _damaged(origin, f"'{key}' is not a list of set names")
    for name in chosen:
        if not isinstance(name, str) or set_name_problem(name):
            raise _damaged(origin, f"'{key}' names {quoted(repr(name))}, which is no set name")
    return tuple(chosen)


def _checked_wheel(wheel: object, origin: Path) -> str | None:
    """The guarded wheel's version: a version, as a dist-info's METADATA gives it."""
    if wheel is None:
        return None
    if not isinstance(wheel, str) or len(wheel) > 200:
        raise _damaged(origin, "'wheel' is not a vLLM version")
    try:
        Version(wheel)
    except ValueError:
        raise _damaged(origin, f"'wheel' is {quoted(repr(wheel))}, not a vLLM version") from None
    return wheel


def _checked_wheel_held(digest: object, origin: Path) -> str | None:
    """The held --patch wheel's patchkit.json sha256 (State.wheel_held), or None."""
    if digest is None:
        return None
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise _damaged(origin, "'wheel_held' is not a sha256 hex digest")
    return digest


def _checked_guard(guard: object, origin: Path) -> dict[str, str]:
    if not isinstance(guard, dict):
        raise _damaged(origin, "'guard' is not an object")
    checked = {
        _checked_guard_path(path, origin): str(checked_digest(sha, origin, optional=False))
        for path, sha in guard.items()
    }
    infos = {path.partition("/")[0] for path in checked if "/" in path}
    if len(infos) > 1:  # one patchkit writes one guard distribution
        raise _damaged(origin, f"its guard record names {len(infos)} guard distributions; patchkit writes one")
    return checked


def _checked_guard_path(path: object, origin: Path) -> str:
    """A path the guard record names: one of the guard's own files, never any other file (removing
    the guard deletes what its record names)."""
    if not isinstance(path, str) or not GUARD_FILE.fullmatch(path):
        raise _damaged(
            origin,
            f"its guard record names {quoted(repr(path))}, which is no file of patchkit's launch guard "
            "(patchkit_guard.py, patchkit_guard-<version>.dist-info/...)",
        )
    version = path.partition("/")[0].removeprefix("patchkit_guard-").removesuffix(".dist-info") if "/" in path else "0"
    try:
        Version(version)
    except ValueError:
        raise _damaged(
            origin, f"its guard record names {quoted(repr(path))}, whose version {quoted(repr(version))} is no version"
        ) from None
    return checked_path(path, origin)


def _checked_entry(data: object, origin: Path) -> Entry:
    if not isinstance(data, dict):
        raise _damaged(origin, "an entry is not an object")
    problem = set_name_problem(_require(data, "set", str, origin))
    if problem:  # no library set is so named (load_set refuses it): the record is not patchkit's
        raise _damaged(origin, f"its set {quoted(repr(data['set']))} is no set name: it {problem}")
    for key in ("vllm_version", "release"):
        _require(data, key, (str, type(None)), origin, default=None)
    _require(data, "applied_at", str, origin, default="")
    patches = _require(data, "patches", list, origin, default=[])
    for patch in patches:
        if not (isinstance(patch, dict) and isinstance(patch.get("name"), str)):
            raise _damaged(origin, "a recorded patch has no name")
        problem = file_name_problem(patch["name"])
        if problem:  # a patch is named by its file (Path.name): no apply recorded this one
            raise _damaged(
                origin, f"a recorded patch's name {quoted(repr(patch['name']))} is no file name: it {problem}"
            )
        checked_digest(patch.get("sha256"), origin, optional=False)
        _checked_absolute(patch.get("path", "/"), "a recorded patch's path", origin)
    if not isinstance(data.get("held", False), bool):
        raise _damaged(origin, "'held' is not true or false")
    _checked_library(data.get("library", "/"), origin)
    files = _require(data, "files", dict, origin)
    for path, shas in files.items():
        checked_path(path, origin, guard=False)
        if not isinstance(shas, dict) or not {"before", "after"} <= shas.keys():
            raise _damaged(origin, f"{escaped(path)}: 'before' and 'after' hashes are required")
        checked_digest(shas["before"], origin)
        checked_digest(shas["after"], origin)
        _checked_mode(shas.get("mode", OWNER_READ), path, origin)  # none recorded: revert leaves the mode
        if not isinstance(shas.get("gate", True), bool):
            raise _damaged(origin, f"{escaped(path)}: 'gate' {quoted(repr(shas['gate']))} is not true or false")
    if is_adhoc(data["set"]):
        _checked_adhoc_paths(files, origin)
    return Entry.from_json(data)


def _checked_adhoc_paths(files: dict[str, Any], origin: Path) -> None:
    """A --patch apply records only files under vllm/: a --patch file changes nothing else (it is read
    with patchfile's default roots). A path outside is no record patchkit wrote, and a revert would
    write the record's bytes there."""
    outside = next((path for path in files if path.split("/", 1)[0] != ADHOC_ROOT), None)
    if outside is not None:
        raise _damaged(
            origin,
            f"a --patch apply's record names {quoted(repr(outside))}, outside vllm/, which no --patch file changes",
        )


def _checked_mode(mode: object, path: str, origin: Path) -> None:
    """A recorded mode: permission bits only (revert sets them on a file of the tree)."""
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= MODE_BITS:
        raise _damaged(
            origin, f"{escaped(path)}: 'mode' {quoted(repr(mode))} is not a file's permission bits (0 to 0o777)"
        )
    if not mode & OWNER_READ or mode & ~PERMISSIONS:  # revert would write it: never a mode apply records
        raise _damaged(
            origin,
            f"{escaped(path)}: 'mode' {quoted(oct(mode))} is not a mode patchkit records "
            "(the owner reads the file; not writable by every local user)",
        )


def _checked_library(where: object, origin: Path) -> None:
    _checked_absolute(where, "a recorded library's path", origin)


def _checked_absolute(where: object, what: str, origin: Path) -> None:
    """A recorded absolute path (a patch's, a library's), each of its faults in its own words."""
    if not (isinstance(where, str) and where.startswith("/")):
        raise _damaged(origin, f"{what} is not an absolute path")
    if len(where) > MAX_PATCH_PATH:
        raise _damaged(
            origin, f"{what} is {len(where):,} characters long, more than a path may be ({MAX_PATCH_PATH:,})"
        )
    if not where.isprintable():
        raise _damaged(origin, f"{what} holds a control character")


_REQUIRED = object()


def _require(
    data: dict[str, Any], key: str, kind: type | tuple[type, ...], origin: Path, default: object = _REQUIRED
) -> Any:  # JSON, checked here to be of `kind`
    """data[key], of type `kind`; a missing key is `default` if one is given, else refused."""
    if key not in data and default is not _REQUIRED:
        return default
    value = data.get(key)
    if not isinstance(value, kind):
        raise _damaged(origin, f"'{key}' is missing or of the wrong type")
    return value
