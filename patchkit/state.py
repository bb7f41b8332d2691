"""What patchkit did to a target, recorded inside the target tree.

    <root>/.patchkit/state.json        one small JSON: cheap for a launch guard to read
    <root>/.patchkit/objects/<sha256>  the original bytes of every file patchkit changed
    <root>/.patchkit/journal.json      exists only while a transaction is unfinished
    <root>/.patchkit/saved/            user edits kept aside by `revert --force`
    <root>/.patchkit/lock              the target's lock

Everything here is read back from the tree, so it is untrusted input, exactly like a diff:
`.patchkit/` and what it holds may not be symlinks or of the wrong kind (check_meta_dir), the
state is parsed strictly (every path by fsutil.unsafe_reason, every hash a sha256 hex digest, a
size limit), objects are named by digest only and read without following a symlink.

state.json:
    {"format": 1, "entries": [{"set", "vllm_version", "release", "applied_at",
      "patches": [{"name", "sha256"}], "files": {path: {"before": sha|null, "after": sha|null}}}],
     "guard": {path: sha},   (the launch guard's files, patchkit/guard.py; absent when none)
     "wheel": version,       (the patched wheel's vLLM version the guard was installed on, no set
                              recorded: the guard refuses another; absent otherwise)
     "no_guard": true}       (an apply was told --no-guard; absent otherwise)
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from packaging.version import InvalidVersion, Version

from patchkit.errors import BadInput
from patchkit.fsutil import load_json_text, read_regular, unsafe_reason

FORMAT = 1
META_DIR = ".patchkit"
# state.json and journal.json: a few hundred bytes a file; far above any real record, far below harm.
MAX_RECORD_BYTES = 16 * 1024 * 1024
MAX_TREE_FILE_BYTES = (
    64 * 1024 * 1024
)  # a source file or a saved original; the guard reads no more (its MAX_FILE_BYTES)
_DIGEST = re.compile(r"[0-9a-f]{64}")
# What .patchkit/ may hold, and of which kind (anything else in it is left alone, never read).
_META_FILES = ("state.json", "journal.json")
_META_DIRS = ("objects", "saved")


def sha256(data: bytes | None) -> str | None:
    """The hex sha256 of a content. A large content is hashed once per run: the digest is kept with
    the very bytes object it was computed from (held, so its id names no other object while kept),
    since one apply asks for the digest of the same original and new content in the plan's record,
    the journal, the object store and the integrity check. A content being hashed on a thread
    (hash_soon, joined) is waited for."""
    if data is None:
        return None
    if len(data) < _REMEMBERED_FROM or type(data) is not bytes:  # only an immutable content keeps its digest
        return hashlib.sha256(data).hexdigest()
    known = _digests.get(id(data))
    if known is not None and known[0] is data:
        digest = known[1] if isinstance(known[1], str) else known[1].result()
        if digest is not None:
            return digest
    digest = hashlib.sha256(data).hexdigest()
    _remember(data, digest)
    return digest


class _Hashing:
    """The sha256 of a content's pieces, computed on a daemon thread: hashlib lets go of the GIL
    for large buffers, so it runs beside the main thread's work (and never delays the exit).

    It hashes a step at a time and keeps the hash's state after each step (`snapshots`: bytes
    hashed so far, a copy of the hasher then), so that a new content which starts with a prefix of
    this one (a patched file, up to its first hunk) resumes from there (`resume`): the prefix the
    two share is hashed once."""

    def __init__(self, pieces: list[bytes | memoryview], resume: _Hashing | None = None):

        self._digest: str | None = None
        self.snapshots: list[tuple[int, Any]] = []
        self._thread: threading.Thread | None = threading.Thread(target=self._run, args=(pieces, resume), daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # no thread to be had (a pids limit, no memory for a stack): sha256() hashes itself
            self._thread = None

    def _run(self, pieces: list[bytes | memoryview], resume: _Hashing | None) -> None:
        try:
            self._hash(pieces, resume)
        except Exception:  # the digest stays None: sha256() hashes again, and says what fails
            self._digest = None

    def _hash(self, pieces: list[bytes | memoryview], resume: _Hashing | None) -> None:
        # `resume` hashed the first `skip` bytes of the first piece already (it is a prefix of its content)
        skip, hasher = resume.state_within(len(pieces[0])) if resume is not None else (0, hashlib.sha256())
        hashed = skip
        for piece in pieces:
            view = memoryview(piece)[skip:]
            skip = 0
            for start in range(0, len(view), _HASH_STEP):
                step = view[start : start + _HASH_STEP]
                hasher.update(step)
                hashed += len(step)
                self.snapshots.append((hashed, hasher.copy()))
        self._digest = hasher.hexdigest()

    def state_within(self, size: int) -> tuple[int, Any]:
        """(n, a new hasher that has hashed the first n bytes) for the largest n <= size hashed so far."""
        done = [(n, hasher) for n, hasher in list(self.snapshots) if n <= size]
        if not done:
            return 0, hashlib.sha256()
        n, hasher = done[-1]
        return n, hasher.copy()

    def result(self) -> str | None:
        """The digest (None: the thread failed, or never started, so the caller hashes)."""
        if self._thread is None:
            return None
        self._thread.join()
        return self._digest


def _remember(data: bytes, digest: str | _Hashing) -> None:
    _digests[id(data)] = (data, digest)
    while len(_digests) > _REMEMBERED:  # the oldest first (dicts keep insertion order)
        del _digests[next(iter(_digests))]


def hash_soon(content: bytes | None) -> None:
    """Start hashing a large content on a thread now, if it is not hashed or being hashed already:
    sha256() then takes the digest (waiting for it if need be). A large file's original is hashed
    this way from when it is read, beside the placing of hunks and the making of the new content."""
    if type(content) is not bytes or len(content) < _REMEMBERED_FROM:
        return
    known = _digests.get(id(content))
    if known is None or known[0] is not content:
        _remember(content, _Hashing([content]))


def hash_side_by_side(contents: list[bytes | None]) -> None:
    """sha256 the large contents among these on threads at once (hashlib lets go of the GIL), so a
    large file's original and new content cost one pass of wall time, not two; sha256() then
    answers from what it remembers."""
    for content in contents:
        hash_soon(content)


def joined(pieces: list[bytes | memoryview], prefix_of: bytes | None = None) -> bytes:
    """b"".join(pieces). A large result's sha256 is computed from the pieces on a thread meanwhile
    (the join holds the GIL, hashlib does not), and sha256() of the result takes it. `prefix_of`: a
    content the first piece is the start of (the original of a patched file); where that content is
    being hashed, the new one's hash resumes from its state (the shared prefix is hashed once)."""
    if sum(map(len, pieces)) < _REMEMBERED_FROM:
        return b"".join(pieces)
    known = _digests.get(id(prefix_of)) if prefix_of is not None else None
    resume = known[1] if known is not None and known[0] is prefix_of and isinstance(known[1], _Hashing) else None
    hashing = _Hashing(pieces, resume)
    content = b"".join(pieces)
    _remember(content, hashing)
    return content


# Contents from 1 MiB on (hashing one takes milliseconds); a few of them, which an apply or a revert
# holds anyway (the original and the new content of its large files).
_REMEMBERED_FROM, _REMEMBERED = 1 << 20, 4
_HASH_STEP = 8 << 20
_digests: dict[int, tuple[bytes, str | _Hashing]] = {}


def meta_dir(root: Path) -> Path:
    return root / META_DIR


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


def _require_kind(path: Path, is_kind, kind: str) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadInput(f"cannot inspect {path}: {exc.strerror}") from exc
    if not is_kind(mode):
        what = "a symlink (patchkit never follows one out of the tree)" if stat.S_ISLNK(mode) else "not " + kind
        raise BadInput(
            f"{path} is {what}",
            hint=f"inspect or remove {path} (patchkit wrote none like it)",
        )


def read_record(path: Path) -> bytes | None:
    """state.json or journal.json, untrusted: never through a symlink, a regular file, size-limited.
    None when there is none."""
    try:
        return read_regular(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:  # NotRegularFile (a symlink, a fifo, too large), or unreadable
        raise _damaged(path, exc.strerror or str(exc)) from exc


def _damaged(path: Path, what: str) -> BadInput:
    return BadInput(f"{path} is damaged ({what})", hint=f"inspect or remove {path}; patchkit wrote nothing")


def checked_path(path: object, origin: Path, *, directory: bool = False, guard: bool = True) -> str:
    """A recorded path, checked by the one path rule (the same as a diff's) and, like a diff's, kept to
    the patched packages: a file inside a package directory (`vllm/...`), never a file beside them in
    site-packages (a `.pth`, `sitecustomize.py`), a dist-info, patchkit's own `.patchkit/` or bytecode.
    The launch guard's files are the exception, where they may be recorded (`guard`): a transaction's,
    the guard's own record; never a series' (no patch changes the guard)."""
    if not isinstance(path, str):
        raise _damaged(origin, f"a path is {type(path).__name__}, not text")
    reason = unsafe_reason(path) or _outside_packages(path, directory=directory, guard=guard)
    if reason:
        raise _damaged(origin, f"the recorded path {path!r} {reason}")
    return path


# The one exception: the files of the launch guard `apply` installs beside vllm/ (patchkit.guard).
GUARD_PATH = re.compile(
    r"patchkit_guard\.py|patchkit_guard-[A-Za-z0-9_.+!]+\.dist-info(?:/(?:METADATA|RECORD|INSTALLER|entry_points\.txt))?"
)
# The guard's files themselves (its dist-info directory aside): all that state.json's "guard" may name.
GUARD_FILE = re.compile(
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
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise _damaged(origin, f"{value!r} is not a sha256 hex digest")
    return value


def state_path(root: Path) -> Path:
    return meta_dir(root) / "state.json"


def object_path(root: Path, digest: str) -> Path:
    if not _DIGEST.fullmatch(digest):
        raise BadInput(f"{digest!r} is not a sha256 hex digest; objects are named by digest only")
    return meta_dir(root) / "objects" / digest


@dataclass
class Entry:
    set_name: str
    vllm_version: str | None
    release: str | None
    applied_at: str
    patches: list[dict]
    files: dict[str, dict]  # path -> {"before": sha|None, "after": sha|None}

    def to_json(self) -> dict:
        return {
            "set": self.set_name,
            "vllm_version": self.vllm_version,
            "release": self.release,
            "applied_at": self.applied_at,
            "patches": self.patches,
            "files": self.files,
        }

    @classmethod
    def from_json(cls, data: dict) -> Entry:
        return cls(
            data["set"],
            data.get("vllm_version"),
            data.get("release"),
            data.get("applied_at", ""),
            data.get("patches", []),
            data["files"],
        )


@dataclass
class State:
    entries: list[Entry]
    guard: dict[str, str] = field(default_factory=dict)  # the launch guard's files: path -> sha256
    no_guard: bool = False  # an apply was told --no-guard: later ones install no guard either
    wheel: str | None = None  # the patched wheel's version the guard guards (no entry recorded)

    def entry(self, set_name: str) -> Entry | None:
        return next((e for e in self.entries if e.set_name == set_name), None)

    def without(self, set_name: str) -> State:
        return replace(self, entries=[e for e in self.entries if e.set_name != set_name])

    def with_entry(self, entry: Entry) -> State:
        """The state with `entry` recorded: the entries describe the tree from now on, not a wheel."""
        return replace(self, entries=[*self.without(entry.set_name).entries, entry], wheel=None)

    def with_guard(self, guard: dict[str, str]) -> State:
        """The state with the guard's files; without a guard, no wheel is guarded either."""
        return replace(self, guard=guard, wheel=self.wheel if guard else None)

    def with_wheel(self, version: str | None) -> State:
        return replace(self, wheel=version)

    def with_version(self, set_name: str, version: str | None) -> State:
        """The state with `set_name`'s entry recorded for `version`, in its place among the others."""
        return replace(
            self,
            entries=[replace(e, vllm_version=version) if e.set_name == set_name else e for e in self.entries],
        )

    def to_bytes(self) -> bytes:
        data: dict = {"format": FORMAT, "entries": [e.to_json() for e in self.entries]}
        if self.guard:
            data["guard"] = self.guard
        if self.no_guard:
            data["no_guard"] = True
        if self.wheel:
            data["wheel"] = self.wheel
        return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()

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
        return {f["before"] for e in self.entries for f in e.files.values() if f.get("before")}


def record_apply(
    previous: Entry | None,
    *,
    set_name: str,
    vllm_version: str | None,
    release: str | None,
    patches,
    changes: dict[str, tuple[bytes | None, bytes | None]],
) -> Entry:
    """The entry an apply records: each file's original hash (kept from an earlier apply of the
    same set) and the hash written now."""

    files = dict(previous.files) if previous else {}
    hash_side_by_side([content for pair in changes.values() for content in pair])
    for path, (before, after) in changes.items():
        earlier = files.get(path)
        files[path] = {"before": earlier["before"] if earlier else sha256(before), "after": sha256(after)}
    return Entry(
        set_name=set_name,
        vllm_version=vllm_version,
        release=release,
        applied_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        patches=[{"name": p.name, "sha256": p.sha256} for p in patches],
        files=files,
    )


def read_state(root: Path) -> State:
    check_meta_dir(root)
    path = state_path(root)
    raw = read_record(path)
    return State([]) if raw is None else parse_state(raw, path)


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
        raise _damaged(origin, f"unknown state format {data.get('format')!r}")
    entries = data.get("entries", [])
    if not isinstance(entries, list):
        raise _damaged(origin, "'entries' is not a list")
    no_guard = data.get("no_guard", False)
    if not isinstance(no_guard, bool):
        raise _damaged(origin, "'no_guard' is not true or false")
    guard = _checked_guard(data.get("guard", {}), origin)
    return State(
        [_checked_entry(e, origin) for e in entries], guard, no_guard, _checked_wheel(data.get("wheel"), origin)
    )


def _checked_wheel(wheel: object, origin: Path) -> str | None:
    """The guarded wheel's version: a version, as a dist-info's METADATA gives it."""
    if wheel is None:
        return None
    if not isinstance(wheel, str) or len(wheel) > 200:
        raise _damaged(origin, "'wheel' is not a vLLM version")
    try:
        Version(wheel)
    except InvalidVersion:
        raise _damaged(origin, f"'wheel' is {wheel!r}, not a vLLM version") from None
    return wheel


def _checked_guard(guard: object, origin: Path) -> dict[str, str]:
    if not isinstance(guard, dict):
        raise _damaged(origin, "'guard' is not an object")
    return {
        _checked_guard_path(path, origin): str(checked_digest(sha, origin, optional=False))
        for path, sha in guard.items()
    }


def _checked_guard_path(path: object, origin: Path) -> str:
    """A path the guard record names: one of the guard's own files, never any other file (removing
    the guard deletes what its record names)."""
    if not isinstance(path, str) or not GUARD_FILE.fullmatch(path):
        raise _damaged(
            origin,
            f"its guard record names {path!r}, which is no file of patchkit's launch guard "
            "(patchkit_guard.py, patchkit_guard-<version>.dist-info/...)",
        )
    return checked_path(path, origin)


def _checked_entry(data: object, origin: Path) -> Entry:
    if not isinstance(data, dict):
        raise _damaged(origin, "an entry is not an object")
    _require(data, "set", str, origin)
    for key in ("vllm_version", "release"):
        _require(data, key, (str, type(None)), origin, default=None)
    _require(data, "applied_at", str, origin, default="")
    patches = _require(data, "patches", list, origin, default=[])
    for patch in patches:
        if not (isinstance(patch, dict) and isinstance(patch.get("name"), str)):
            raise _damaged(origin, "a recorded patch has no name")
        checked_digest(patch.get("sha256"), origin, optional=False)
    files = _require(data, "files", dict, origin)
    for path, shas in files.items():
        checked_path(path, origin, guard=False)
        if not isinstance(shas, dict) or not {"before", "after"} <= shas.keys():
            raise _damaged(origin, f"{path}: 'before' and 'after' hashes are required")
        checked_digest(shas["before"], origin)
        checked_digest(shas["after"], origin)
    return Entry.from_json(data)


_REQUIRED = object()


def _require(data: dict, key: str, kind, origin: Path, default: object = _REQUIRED):
    """data[key], of type `kind`; a missing key is `default` if one is given, else refused."""
    if key not in data and default is not _REQUIRED:
        return default
    value = data.get(key)
    if not isinstance(value, kind):
        raise _damaged(origin, f"'{key}' is missing or of the wrong type")
    return value


def read_object(root: Path, digest: str) -> bytes:
    """A saved original, checked against its name."""
    path = object_path(root, digest)
    try:
        data = read_file(path, follow_symlinks=False)
    except OSError as exc:
        raise BadInput(f"the saved original {path} is missing: {exc.strerror}") from exc
    if data is None:
        raise BadInput(f"the saved original {path} is missing (or not a regular file)")
    if sha256(data) != digest:
        raise BadInput(f"the saved original {path} is corrupt (sha256 mismatch)")
    return data


def read_file(path: Path | str, *, follow_symlinks: bool = True) -> bytes | None:
    """A regular file's bytes; None when there is none (a fifo or device is never read: it could block;
    without `follow_symlinks`, a symlink is none either)."""
    read = read_file_and_origin(path, follow_symlinks=follow_symlinks)
    return None if read is None else read[0]


class Origin(NamedTuple):
    """The file a content was read from, as fstat saw it: while these four are unchanged, that inode
    still holds the content (the transaction then links it as the saved original, see transaction)."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> Origin:
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class Landed(NamedTuple):
    """A file as a commit left it: its Origin and its ctime once in place. Only the kernel sets a
    ctime, and any write moves it: a rewrite of the same size that puts the mtime back still shows."""

    origin: Origin
    ctime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> Landed:
        return cls(Origin.of(info), info.st_ctime_ns)


def read_file_and_origin(path: Path | str, *, follow_symlinks: bool = True) -> tuple[bytes, Origin | None] | None:
    """read_file, with the file it came from (None when it changed while being read)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a fifo must not wait
    except OSError as exc:
        if exc.errno in _NO_FILE:
            return None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        _refuse_too_large(path, info.st_size)
        data = os.read(fd, info.st_size)
        while more := os.read(fd, 1 << 20):  # the file grew since fstat
            data += more
            _refuse_too_large(path, len(data))
        unchanged = len(data) == info.st_size and Origin.of(os.fstat(fd)) == Origin.of(info)
        return data, Origin.of(info) if unchanged else None
    finally:
        os.close(fd)


def _refuse_too_large(path: Path | str, size: int) -> None:
    """No file patchkit reads in a tree (a source file, a saved original, a dist-info file) comes near
    MAX_TREE_FILE_BYTES: a larger one is not what it looks for, and is never read into memory."""
    if size > MAX_TREE_FILE_BYTES:
        raise BadInput(
            f"{path} is larger than {MAX_TREE_FILE_BYTES >> 20} MiB: not a file patchkit wrote or patches; "
            "nothing was written",
            hint=f"inspect or remove {path} (a reinstall of vLLM puts its own files back)",
        )


_NO_FILE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO}


def file_sha(root: Path, path: str) -> str | None:
    checked_path(path, state_path(root))  # never hash a file outside the tree
    full = root / path
    if full.is_dir():
        return "<directory>"
    return sha256(read_file(full))  # bounded, and a fifo is never opened for reading


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
