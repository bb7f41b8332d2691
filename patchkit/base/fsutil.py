"""Filesystem rules every module shares: the one path-safety rule and the one atomic write.

Kept import-light (stdlib only): the engine, the fetcher and the caches all use it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, NamedTuple

from patchkit.base.errors import BadInput


def load_json_text(raw: bytes | str) -> Any:
    """JSON read back from a file patchkit does not trust, every string in it text: a lone surrogate
    escape ("\\ud800"), which no file name, UTF-8 output or JSON written back can carry, is a
    ValueError (UnicodeEncodeError) like any other malformed JSON; so is NaN or Infinity (json
    takes them, JSON has no such number: patchkit never writes one)."""

    data = json.loads(raw, parse_int=_bounded_int, parse_constant=no_constant)
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        run = exc.object[exc.start : exc.end]  # a run of them may be megabytes: its head, and how many
        bad = run[:4].encode("unicode_escape").decode() + (f"... ({len(run):,} in a row)" if len(run) > 4 else "")
        raise ValueError(f"a string holds a lone surrogate escape ({bad}), which is no text") from None
    return data


def json_text(data: object, what: str, **options: Any) -> str:
    """`data` as the JSON text patchkit writes (json.dumps with `options`): NaN and Infinity, which
    every reader here refuses (load_json_text), are refused as they would be written: BadInput."""
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError as exc:
        if "Out of range float" not in str(exc):
            raise
        raise BadInput(
            f"cannot write {what}: it holds NaN or Infinity, which is no JSON number",
            hint="give a finite number where the input holds NaN or Infinity",
        ) from None


def no_constant(name: str) -> object:
    """json's parse_constant: NaN, Infinity and -Infinity are malformed JSON (RFC 8259 has no such number)."""
    raise ValueError(f"{name} is no JSON number")


_MAX_INT_DIGITS = 4300  # Python's own limit for int(text): what it says past it is advice for programmers


def _bounded_int(text: str) -> int:
    if len(text) > _MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (more than {_MAX_INT_DIGITS})")
    return int(text)


# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_DRIVE = r"^[A-Za-z]:"


def unsafe_reason(path: str) -> str | None:
    """Why a relative POSIX path (a diff's file, a zip member, a recorded path) may not be used
    under a tree, or None when it is safe: no absolute path, no backslash, no NUL, no '..', no
    empty or '.' component. Resolving symlinks is the caller's job (the path is only text here)."""
    if _plainly_safe(path):  # the common case, in a few C-level string tests (a wheel has thousands)
        return None
    if not path:
        return "is empty"
    if "\\" in path:
        return "contains a backslash"
    if "\x00" in path:
        return "contains a NUL byte"
    if path.startswith("/") or re.compile(_DRIVE).match(path):
        return "is absolute"
    parts = path.split("/")
    if ".." in parts:
        return "contains '..'"
    if any(p in ("", ".") for p in parts):
        return "is not a normalized relative path"
    return None


# Components of a path patchkit writes and records: vLLM's deepest file has 8 (vllm/model_executor/
# layers/quantization/...). Each command looks at every directory on the way to each recorded file.
MAX_RECORDED_DEPTH = 32


def too_deep(path: str) -> str | None:
    """Why a relative path is deeper than any patchkit writes and records (None: it is not)."""
    depth = path.count("/") + 1
    if depth > MAX_RECORDED_DEPTH:
        return (
            f"lies {depth - 1:,} directories deep, deeper than any file of a package (at most {MAX_RECORDED_DEPTH - 1})"
        )
    return None


def plain_name_problem(name: str) -> str | None:
    """Why `name` is no plain file name (one safe path component), or None."""
    return "contains a '/'" if "/" in name else unsafe_reason(name)


def file_name_problem(name: str) -> str | None:
    """Why `name` is no file's name (a patch read from a file is named so: Path.name), or None."""
    if name in ("", ".", ".."):
        return f"is {name!r}"
    if "/" in name or "\x00" in name:
        return "contains a '/'" if "/" in name else "contains a NUL byte"
    return "is longer than 255 bytes" if len(name.encode("utf-8", "surrogateescape")) > 255 else None


MAX_SET_NAME = 200


def set_name_problem(name: str) -> str | None:
    """Why `name` is no set name, or None. A set is named on command lines (`--set NAME`) and in
    paths (a wheel's patchkit/<set>/): printable, no '/' or '\\', not '.' or '..', no leading '-'."""
    if not name or len(name) > MAX_SET_NAME:
        return f"is not 1 to {MAX_SET_NAME} characters"
    if not name.isprintable():
        return "holds a character that is not printable"
    slash = next((c for c in "/\\" if c in name), None)
    if slash:
        return f"contains a {slash!r}"
    if name in (".", ".."):
        return f"is {name!r}"
    return "begins with '-'" if name.startswith("-") else None


def _plainly_safe(path: str) -> bool:
    """A conservative shortcut: true only for paths unsafe_reason's rule accepts (a "/." anywhere, a
    leading "." or a drive-like second character send a path the long way)."""
    return bool(
        path
        and not path.startswith(("/", "."))
        and path[1:2] != ":"
        and not path.endswith("/")
        and "//" not in path
        and "/." not in path
        and "\\" not in path
        and "\x00" not in path
    )


def all_safe(paths: list[str]) -> bool:
    """Whether unsafe_reason accepts every one of these paths (a cached wheel's thousands of members).

    Its rule, tested on the paths joined by newlines, each test one C-level search: a newline stands
    for where a path begins and ends, so a path that contains one only adds such places; the
    shortcut may then send a list the long way, never pass one the rule refuses."""
    joined = "\n".join(paths)
    plainly = bool(
        joined
        and not joined.startswith(("/", "\n"))
        and not joined.endswith(("/", "\n"))
        and not any(part in joined for part in ("\n/", "/\n", "\n\n", "//", "\\", "\x00"))
        and (":" not in joined or not re.compile(_DRIVES).search(joined))
        and not re.compile(_DOT_PARTS).search(joined)
    )
    return plainly or all(unsafe_reason(path) is None for path in paths)


# a path's first two characters naming a drive, and a '.' or '..' component, in newline-joined paths
# (each begins with a literal, which the search skips to)
_DRIVES = r":(?<![^\n][^\n]:)(?<=[A-Za-z]:)"
_DOT_PARTS = r"\.(?<![^/\n]\.)\.?(?![^/\n])"


def inside(tree: Path, path: Path) -> bool:
    """Whether `path`, symlinks resolved, lies inside `tree` (symlinks resolved too)."""
    try:
        path.resolve().relative_to(tree.resolve())
    except (ValueError, OSError):
        return False
    return True


# A scratch tree (verify of releases lays each release out in a temporary directory and deletes it)
# needs no durability: fsync under a busy disk was a tenth of `verify --all`'s time. A context
# variable, so only the code that asked skips it (the fetch threads' cache writes still fsync).
_DURABLE: ContextVar[bool] = ContextVar("patchkit_durable", default=True)


@contextmanager
def scratch_writes() -> Iterator[None]:
    """Within it, this thread's writes are not fsynced: for trees deleted afterwards."""
    token = _DURABLE.set(False)
    try:
        yield
    finally:
        _DURABLE.reset(token)


def fsync(fd: int) -> None:
    """os.fsync, except within scratch_writes()."""
    if _DURABLE.get():
        os.fsync(fd)


def atomic_write(
    path: Path,
    data: bytes,
    *,
    mode: int | None = None,
    durable: bool = False,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Write `data` to `path` through a temporary file in the same directory and os.replace, so a
    reader sees the old bytes or the new ones, never a part. `durable` fsyncs the data before the
    rename (the transaction's files); `before_replace` runs between the write and the rename (the
    fault-injection tests). The temporary file never outlives a failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.patchkit-{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o777)  # never setuid, setgid or sticky
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class NotRegularFile(OSError):
    """A file patchkit was to read is not a plain regular file it may read: a symlink, a fifo, a
    device, a directory, or larger than the limit the caller set. The message names the path."""


def read_regular(path: Path | str, limit: int, *, follow_symlinks: bool = False, head: bool = False) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (`head`: its first `limit` bytes,
    whatever its size), opened without blocking (a fifo or device is refused, never read) and, unless
    `follow_symlinks`, without following a symlink in its last component. FileNotFoundError when
    there is none; NotRegularFile (its strerror says why, its filename names the path) for anything
    else in the way."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        why = "a symlink" if exc.errno == errno.ELOOP and not follow_symlinks else exc.strerror
        raise NotRegularFile(exc.errno, f"not a regular file ({why})", str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file (a fifo, a device or a directory)", str(path))
        data = _read_at_most(fd, limit + 1, info.st_size)
    finally:
        os.close(fd)
    if len(data) > limit:
        if head:
            return data[:limit]
        raise NotRegularFile(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


def _read_at_most(fd: int, most: int, size: int) -> bytes:
    """Up to `most` bytes of `fd`, to its end. The first read is sized to the file as fstat saw it,
    not to `most`: a buffered read(most) allocates `most` bytes each time (~25 us a file with a 16 MB
    limit, a third of `run`'s reads of its own code and library)."""
    data = os.read(fd, min(most, size + 1))
    while len(data) < most and (more := os.read(fd, min(most - len(data), 1 << 20))):  # it grew since fstat
        data += more
    return data


def plain_directory(root: Path, directory: Path) -> bool:
    """Whether `directory` (under `root`, which may itself be reached through a symlink) is, as far
    as it exists, a chain of real directories: no component below `root` down to it is a symlink or
    anything but a directory, nor `..`. A part not yet there is fine (creating it makes a real one).
    Such a chain lies inside `root` by construction: no realpath of either is needed (it was a
    third of a warm dry run's cache lookups)."""
    try:
        rel = directory.relative_to(root)
    except ValueError:
        return False
    if ".." in rel.parts:  # a way back up: it may leave `root`, even where the rest is not there yet
        return False
    current = root
    for part in rel.parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if not stat.S_ISDIR(mode):
            return False
    return True


Identity = tuple[int, ...]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


def file_identity(info: os.stat_result) -> Identity:
    """Which file this is and which version of it: any write, rename over it, chmod or utime
    changes the ctime, which no one can set back."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


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
    opened = open_regular(path, follow_symlinks=follow_symlinks)
    if opened is None:
        return None
    try:
        return read_opened(path, *opened)
    finally:
        os.close(opened[0])


def open_regular(path: Path | str, *, follow_symlinks: bool = True) -> tuple[int, os.stat_result] | None:
    """(an open descriptor, its fstat) of the regular file at `path`; None when there is none (as
    read_file's). The caller closes it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a fifo must not wait
    except OSError as exc:
        if exc.errno in _NO_FILE:
            return None
        raise
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info


def read_opened(path: Path | str, fd: int, info: os.stat_result) -> tuple[bytes, Origin | None]:
    """The bytes of the file open_regular opened (`info`: its fstat then), with the file they came
    from (None when it changed while being read)."""
    _refuse_too_large(path, info.st_size)
    data = os.read(fd, info.st_size)
    while more := os.read(fd, 1 << 20):  # the file grew since fstat
        data += more
        _refuse_too_large(path, len(data))
    unchanged = len(data) == info.st_size and Origin.of(os.fstat(fd)) == Origin.of(info)
    return data, Origin.of(info) if unchanged else None


_NO_FILE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO}
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full disk or quota: more room is the fix


def room_on(path: Path | str) -> tuple[int, int | None] | None:
    """What the device holding `path` has free for this user: bytes, and inodes (None where the file
    system does not count them, as btrfs); None where statvfs cannot tell."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, (st.f_favail if st.f_files else None)


def no_space_hint(root: Path, need: int, files: int) -> str:
    """What a command needs on a full device: `need` bytes and `files` inodes on the device holding
    `root`. A device out of inodes with bytes to spare is said as such: freeing megabytes would not help."""
    free, inodes = room_on(root) or (0, None)
    again = "then run the same command again"
    if inodes is not None and inodes < files and free >= need:
        return (
            f"the device holding {root} is out of inodes (one per file), not space ({size_said(free)} free): "
            f"it needs about {files} free inodes and has {inodes}; remove some files there (`df -i` counts "
            f"them), {again}"
        )
    if inodes is not None and inodes < files:
        return (
            f"it needs about {size_said(need)} and {files} inodes free on the device holding {root}: make room, {again}"
        )
    return f"it needs about {size_said(need)} free on the device holding {root}: make room, {again}"


def blocks(n: int) -> int:
    """The bytes `n` bytes take on disk, in whole 4 KB blocks."""
    return -(-n // 4096) * 4096


def size_said(n: int) -> str:
    """A byte count as a person frees space, rounded up (less would not do): KB below 0.1 MB, else
    MB with one decimal."""
    return f"{-(-n // 100_000) / 10:.1f} MB" if n >= 100_000 else f"{max(1, -(-n // 1000))} KB"


def fsync_dir(directory: Path) -> None:
    if not _DURABLE.get():
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MAX_TREE_FILE_BYTES = (
    64 * 1024 * 1024
)  # a source file or a saved original; the guard reads no more (its MAX_FILE_BYTES)


def _refuse_too_large(path: Path | str, size: int) -> None:
    """No file patchkit reads in a tree (a source file, a saved original, a dist-info file) comes near
    MAX_TREE_FILE_BYTES: a larger one is not what it looks for, and is never read into memory."""
    if size > MAX_TREE_FILE_BYTES:
        raise BadInput(
            f"{path} is larger than {MAX_TREE_FILE_BYTES >> 20} MiB: not a file patchkit wrote or patches; "
            "nothing was written",
            hint=f"inspect or remove {path} (a reinstall of vLLM puts its own files back)",
        )


MOVABLE = "vllm"  # the package directory a user may move to another volume, a symlink left in its place


def moved_package(root: Path | str, part: str) -> bool:
    """Whether root/part is vLLM's package directory moved away (`vllm -> /data/vllm`): a symlink to a
    directory, which Python imports through as the directory itself; patchkit writes through it
    (the files under it are vLLM's own), never through any other symlink."""
    path = os.path.join(root, part)
    return part == MOVABLE and os.path.islink(path) and os.path.isdir(path)


def judged_inside(root: Path, rel: str) -> Path:
    """The directory root/rel must stay inside, symlinks resolved: a moved vllm/'s own (moved_package)
    for a file under it, else `root`."""
    first, _, rest = rel.partition("/")
    return root / first if rest and moved_package(root, first) else root


def first_symlink(root: Path | str, rel: str, plain: set[str] | None = None) -> tuple[Path, bool] | None:
    """The first symlink on the way from `root` to root/rel (rel itself included), and whether
    more of the path lies under it (a symlinked directory); None when there is none. A moved
    vllm/ (moved_package) is none. `plain`: the directories (relative) known to be real ones, kept
    across calls: each is looked at once, not once a path below it."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    for depth, sub, mode in unplain_prefixes(root, parts, set() if plain is None else plain):
        if mode is None:
            return None
        if stat.S_ISLNK(mode) and depth == 1 < len(parts) and moved_package(root, parts[0]):
            continue
        if stat.S_ISLNK(mode):
            return Path(root, sub), depth < len(parts)
        if not stat.S_ISDIR(mode):
            return None
    return None


def unplain_prefixes(root: Path | str, parts: list[str], plain: set[str]) -> Iterator[tuple[int, str, int | None]]:
    """Each prefix of root/parts (its depth, relative path, lstat mode; None: nothing there) not yet
    in `plain`, the real directories found so far, kept across calls: each is looked at once, not
    once a path below it. One found a real directory is added to `plain`."""
    base, sub = os.fspath(root), ""
    for depth, part in enumerate(parts, 1):
        sub = f"{sub}/{part}" if sub else part
        if sub in plain:
            continue
        try:
            mode: int | None = os.lstat(f"{base}/{sub}").st_mode
        except OSError:
            mode = None
        yield depth, sub, mode
        if mode is not None and stat.S_ISDIR(mode):
            plain.add(sub)
