"""The object store, <root>/.patchkit/objects/<sha256>: the original bytes of every file patchkit changed.

An original is saved by a hard link when that is as good as a copy: the file is about to be
replaced by a rename, so its inode (the bytes the plan read) survives as the object. Only an inode
that is patchkit's alone is linked: one link (the tree's), owned by the user patchkit runs as, no
bit beyond rwxr-xr-x, and still the file the plan read (device, inode, size and mtime as when it was
read); anything else is copied. An object is never written in place or linked back into the tree
(a revert writes a new file from its bytes); a rollback renames one back only when its inode is
patchkit's alone again (one link), so an object that shares its inode with another file, planted
or not, can change nothing through patchkit; its bytes are checked against its digest before
every use, as any object's.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from patchkit.base.errors import BadInput, quoted
from patchkit.base.fsutil import Origin, fsync, read_file
from patchkit.base.hashing import sha256, stream_sha256
from patchkit.store.state import DIGEST, PERMISSIONS, State, Tick, durable_write, meta_dir

# Bits an inode may have to be linked as an object: not setuid, setgid or sticky, and writable by
# its owner only (a group that could write the inode could change the saved original in place).
_LINKABLE_MODE = 0o755


def objects_dir(root: Path) -> Path:
    return meta_dir(root) / "objects"


def object_path(root: Path, digest: str) -> Path:
    if not DIGEST.fullmatch(digest):
        raise BadInput(f"{quoted(repr(digest))} is not a sha256 hex digest; objects are named by digest only")
    return objects_dir(root) / digest


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


def save_original(root: Path, digest: str, before: bytes, source: Path, origin: Origin | None, *, tick: Tick) -> None:
    """Keep `before`, the bytes read from `source`, as the object `digest`: linked where that is
    as good as a copy (see the module docstring), else written (a planted object is replaced)."""
    obj = object_path(root, digest)
    linked = origin is not None and _link_original(source, obj, origin, tick)
    if not linked and read_file(obj, follow_symlinks=False) != before:  # missing, or planted: write ours
        durable_write(obj, before, tick=tick)


def _link_original(source: Path, obj: Path, origin: Origin, tick: Tick) -> bool:
    """Save the original at `source` as the object `obj` by a hard link, if its inode is patchkit's
    alone and still holds what the plan read; False: copy it instead."""
    temporary = obj.with_name(f".{obj.name}.patchkit-{os.urandom(4).hex()}.tmp")
    tick()
    try:
        os.link(source, temporary, follow_symlinks=False)
    except OSError:  # another file system, links refused, a file that is gone: a copy does
        return False
    try:
        linked = _synced_if_own(temporary, origin)
        if linked:
            tick()
            os.replace(temporary, obj)
    finally:
        temporary.unlink(missing_ok=True)
    return linked


def _synced_if_own(path: Path, origin: Origin) -> bool:
    """Whether the inode at `path` may be the object (fsynced, then: its bytes are on disk before
    its file is replaced). Not a regular file we can open without following a symlink: no."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not _own_unchanged(os.fstat(fd), origin):
            return False
        fsync(fd)
        return True
    finally:
        os.close(fd)


def _own_unchanged(info: os.stat_result, origin: Origin) -> bool:
    return (
        stat.S_ISREG(info.st_mode)
        and Origin.of(info) == origin
        and info.st_nlink == 2  # the tree's name and the new one
        and _patchkits_alone(info)
    )


def _patchkits_alone(info: os.stat_result) -> bool:
    return info.st_uid == os.geteuid() and not stat.S_IMODE(info.st_mode) & ~_LINKABLE_MODE


# a rename cannot put the object there, a copy can: another file system (a mount inside the tree), a
# file that is a mount point itself (a bind-mounted file), or one that takes no rename
UNMOVABLE = frozenset({errno.EXDEV, errno.EBUSY, errno.ENOTSUP, errno.EOPNOTSUPP})


def take_object(root: Path, digest: str, full: Path, mode: int | None) -> bool:
    """Move the object `digest` to `full` when its inode is patchkit's alone (one link, ours, no bit
    beyond rwxr-xr-x) and holds the digest's bytes, so the tree shares it with no other file; False:
    it stays, and the caller writes a copy."""
    try:
        fd = os.open(object_path(root, digest), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and _patchkits_alone(info)):
            return False
        with open(fd, "rb", closefd=False) as handle:
            if stream_sha256(handle) != digest:
                return False
        if mode is not None:
            os.fchmod(fd, mode & PERMISSIONS)
        try:
            os.replace(object_path(root, digest), full)
        except OSError as exc:
            if exc.errno not in UNMOVABLE:
                raise
            return False  # the file is on another mount than .patchkit/: a copy written beside it does
        placed = os.lstat(full)
        return (placed.st_dev, placed.st_ino) == (info.st_dev, info.st_ino)  # else swapped meanwhile: write ours
    finally:
        os.close(fd)


def is_object(path: Path) -> bool:
    """Whether `path` (in objects/) can be patchkit's object: a regular file (not followed) named by a
    digest. patchkit writes nothing else there: a symlink or directory of such a name is not its own."""
    if not DIGEST.fullmatch(path.name):
        return False
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def prune_objects(root: Path, state: State) -> None:
    """Remove the objects `state` names no original of. Only what an object can be (is_object): any
    other entry there is not patchkit's, so it stays (and .patchkit/ with it)."""
    keep = state.referenced_objects()
    store = objects_dir(root)
    if store.is_dir() and not store.is_symlink():
        for obj in store.iterdir():
            if obj.name not in keep and is_object(obj):
                obj.unlink(missing_ok=True)
