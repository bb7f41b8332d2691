"""`patchkit wheel`: a stock vLLM wheel in, the patched wheel out.

1. The stock wheel is read as untrusted input (rawzip.members: names, kinds, headers), its one
   dist-info found and matched with the file name.
2. The files the plan and the checks need (the series' files, the contract's) are inflated into a
   scratch tree beside the wheel's METADATA and RECORD; there the same operations as `apply` run:
   resolve (version, set, series), the plan, `integrity` against the wheel's own RECORD, and the
   checks on the planned contents (syntax, names, contract). A conflict or a failed check ends
   here: no wheel is written.
3. The new wheel: every unchanged member's compressed bytes copied as they are (rawzip), the
   patched files deflated, the dist-info renamed to the labelled version (label.py) with its
   METADATA's Version rewritten, the provenance (provenance.py) added, and RECORD regenerated:
   every member's hash and size (an unchanged member keeps the stock RECORD's row, checked against
   the member's size, and for a labelled wheel FILE, which nothing else vouches for, against its
   contents, once per unchanged file: _OwnRecord; one the stock RECORD lacks is hashed here),
   RECORD's own row empty. It is written under a temporary name in the output directory and
   renamed into place. The members no patch touches (nearly all the bytes) are copied while step 2
   runs, first in the new wheel.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import hashlib
import io
import lzma
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from email.parser import Parser
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from patchkit import __version__
from patchkit.base import fsutil, hints, signals
from patchkit.base.enums import Outcome, SelectionKind
from patchkit.base.errors import BadInput, BreaksSet, CheckFailed, FetchError, NoPatchSet, PatchkitError, TargetError
from patchkit.base.options import Options
from patchkit.checks import ERROR, LARGEST_PARSED, WARNING, CheckResult, integrity, probe, shadow
from patchkit.distinfo.entry_points import parse_entry_points
from patchkit.distinfo.provenance import FileRecord, PatchRecord, Provenance, SetRecord, provenance_files
from patchkit.distinfo.record import HASHES, RECORD_LIMIT, parse_record_once, record_algorithm, record_digest
from patchkit.engine.operations import apply_series
from patchkit.engine.resolve import (
    Chosen,
    no_series,
    require_patches,
    resolve,
    resolve_sets,
    resolve_target,
    several,
    why_not,
)
from patchkit.tree.version import first_headers
from patchkit.wheel import label as labels
from patchkit.wheel import rawzip
from patchkit.wheel.published import Held, claims_a_release, held_to_release, refuse_unpublished
from patchkit.wheel.stock import members_vouched, remember_members

if TYPE_CHECKING:  # imported where used: the big members are being copied by then
    from patchkit.distinfo.provenance import Provenance
    from patchkit.engine.resolve import Resolved
    from patchkit.series.library import Selection
    from patchkit.series.patchfile import Patch
    from patchkit.series.plan import Plan

Say = Callable[[str], None]
METADATA_LIMIT = 16 << 20
WHEEL_VERSION_MAJOR = 1  # the Wheel-Version pip installs (1.x; a later 1.y with a warning)
SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # they sign the stock RECORD: meaningless for the new one
OUT_HINT = "give --out a directory you can write to (it is created if missing), such as ./dist"
DAMAGED_HINT = "download the wheel again, or build it again"
# what zipfile raises on a damaged archive or member (its decompressors' own errors included)
_DAMAGED = (OSError, zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, zlib.error, lzma.LZMAError)


@dataclass
class WheelResult:
    """What `wheel` built: its outcome, the stock wheel, the patched one."""

    outcome: Outcome
    stock: Path
    path: Path | None = None  # the patched wheel, once written
    version: str | None = None  # its version (the stock one with the label)
    label: str | None = None  # the label added
    set_name: str | None = None  # None for --patch files and for several sets
    patches: list[Patch] = field(default_factory=list)  # of every set, in the order applied
    sets: list[tuple[str, list[Patch]]] = field(default_factory=list)  # a wheel of several sets: each, in order
    checks: list[CheckResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: PatchkitError | None = None

    def sha256(self) -> str | None:
        """The written wheel's sha256 (read back on demand: it is the whole wheel)."""
        if self.path is None:
            return None
        with self.path.open("rb") as handle:
            digest = hashlib.sha256()
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()


@dataclass
class StockWheel:
    """The stock wheel, open: its checked members, and what its name and dist-info say."""

    path: Path
    fd: int
    zf: zipfile.ZipFile
    members: list[rawzip.Member]
    name_parts: list[str]  # the file name's fields: distribution, version, [build], python, abi, platform
    version: Version
    dist_info: str  # e.g. vllm-0.16.0.dist-info
    installs: dict[str, str]  # a file's path in site-packages (folded) -> the member installed there
    identity: fsutil.Identity  # the open file's when it was opened: what its members were read as
    abandoned: threading.Event = field(default_factory=threading.Event)  # the build ended: hashing stops

    @property
    def label(self) -> str:
        return self.path.name

    @cached_property
    def by_name(self) -> dict[str, rawzip.Member]:
        return {m.name: m for m in self.members}

    @cached_property
    def children(self) -> dict[str, set[str]]:
        """Each directory's entries, as the members' paths make them (built once: every set asks)."""
        children: dict[str, set[str]] = {}
        for member in self.members:
            path = None if member.is_dir else member.name
            parent, _, name = (path or "").rpartition("/")
            while name:  # each directory on the way holds the next one
                children.setdefault(parent, set()).add(name)
                parent, _, name = parent.rpartition("/")
        return children

    def member(self, name: str) -> rawzip.Member | None:
        return self.by_name.get(name)

    def read(self, name: str, limit: int) -> bytes:
        member = self.member(name)
        if member is None:
            raise BadInput(f"{self.label} has no {name}; refusing the wheel")
        if member.info.file_size > limit:
            raise BadInput(f"{self.label}: {name} is larger than {limit} bytes; refusing the wheel")
        try:
            return self.zf.read(member.info)
        except _DAMAGED as exc:
            raise BadInput(f"{self.label}: cannot read {name} (a damaged wheel?): {exc}") from None

    def sha256_of(self, member: rawzip.Member) -> str:
        return self.digest_of(member, "sha256")

    def digest_of(self, member: rawzip.Member, algorithm: str) -> str:
        """The member's contents' RECORD hash with `algorithm` (inflated: the whole member is read)."""
        try:
            digest = hashlib.new(algorithm)
        except ValueError:
            return ""  # an algorithm hashlib lacks matches nothing
        try:
            with self.zf.open(member.info) as stream:
                while not self.abandoned.is_set() and (chunk := stream.read(1 << 20)):
                    digest.update(chunk)
        except _DAMAGED as exc:
            raise BadInput(
                f"{self.label}: {rawzip.shown(member.name)} is damaged ({exc}); refusing the wheel", hint=DAMAGED_HINT
            ) from None
        return record_digest(digest.digest(), algorithm)


def build_patched_wheel(
    stock: Path,
    out_dir: Path,
    chosen: Options,
    *,
    label: str | None,
    say: Say = lambda message: None,
    expect_identity: tuple[int, ...] | None = None,
    again: str | None = None,
) -> WheelResult:
    """The patched wheel of `stock` in `out_dir`, for the set or --patch files `chosen` names
    (`label`: the local label instead of patchkit.<set>; `expect_identity`: the file's, as
    stock.py checked the cached wheel with it; `again`: the command that builds it again, for an
    interrupt's hint). A conflict or a failed check is a result with its error, nothing written;
    bad input raises.

    The members no patch touches are copied into the new wheel's temporary file while the plan and
    the checks run (the copy is the kernel's, the checks are Python's); those too large for any
    series to touch (nearly all the bytes) from the start, while the series is resolved. A refusal
    removes the file."""
    if label is not None:
        labels.normalized_label(label)  # a bad label is refused before any work
    say(f"reading {stock.name}")
    with (
        open_stock(stock, expect_identity) as wheel,
        _scratch_tree(say) as scratch,
        _Output(Path(out_dir), wheel.path.name, say, again) as output,
        ThreadPoolExecutor(max_workers=4) as pool,  # the copies and the hashes; this thread places every member
        _abandoned_on_exit(wheel),  # before the pool waits for its jobs: the hashing stops
    ):
        stock_record = _stock_record(wheel)
        own = _OwnRecord.of(wheel, expect_identity, stock_record, say)  # None: held to the published wheel
        writer = rawzip.Writer(output.fd, wheel.fd, wheel.label)
        early = _never_patched(wheel, stock_record)
        copies = [pool.submit(writer.fill, output.place(writer, early))]
        resolved, notes = _resolve(wheel, scratch, chosen, (out_dir, label))  # no series: it ends here, no index asked
        held = _hold_to_release(wheel, pool, say) if expect_identity is None else None
        added = labels.normalized_label(label or labels.default_label([r.set_name for r in resolved]))
        version = labels.labelled_version(wheel.version, added)
        untouched = _untouched(wheel, resolved, stock_record, {e.source.name for e in early if e.source})
        say("copying the unchanged members; planning and checking the series on the wheel's files")
        copies.append(pool.submit(writer.fill, output.place(writer, untouched)))
        hashing = own.hash_on(pool, early + untouched) if own else []
        checked = _plan_and_check_sets(wheel, scratch, resolved, chosen, stock_record)
        checked.warnings[:0] = notes
        output.wait([*copies, *hashing])  # a member untrue to RECORD: BadInput
        if held is not None:
            refuse_unpublished(held.result(), wheel.label, wheel.members, stock_record, wheel.digest_of, say)
        if checked.error is not None:
            return checked
        if own:
            own.finish()  # the members not hashed on the pool hashed here; then sealed as true
        result = _passed(checked, stock, version, added)
        final = Path(out_dir) / _file_name(wheel, version)
        say(f"writing {final.name}")
        output.write(writer, _entries(wheel, checked.changes, result, early + untouched, stock_record))
        if own:
            own.unchanged()  # the bytes copied are those hashed (or sealed as true)
        result.path = output.commit(final)
        return result


@contextmanager
def _abandoned_on_exit(wheel: StockWheel) -> Iterator[None]:
    """The wheel marked abandoned when the build ends (a refusal, an interrupt): members still being
    hashed on the pool stop at their next chunk, so the pool's exit does not wait for them."""
    try:
        yield
    finally:
        wheel.abandoned.set()


def _passed(checked: _Checked, stock: Path, version: Version, label: str) -> WheelResult:
    """The result of a build whose sets planned and checked clean, before its wheel is written."""
    return WheelResult(
        Outcome.OK,
        stock,
        version=str(version),
        label=label,
        set_name=checked.set_name,
        patches=checked.patches,
        sets=checked.sets,
        checks=checked.checks,
        warnings=list(dict.fromkeys(checked.warnings)),  # each set's notes of the one wheel (its label): once
    )


def _hold_to_release(wheel: StockWheel, pool: ThreadPoolExecutor, say: Say) -> Future[Held] | None:
    """A wheel FILE that claims to be a release (no local label) is held whole to the published
    wheel of its name, on a thread (published.py); a labelled one is another build, said (-v)."""
    if not claims_a_release(wheel.version):
        say(f"{wheel.version} has a local label: a build of its own, held to its own RECORD only")
        return None
    path = wheel.path.absolute()
    return pool.submit(held_to_release, str(wheel.version), wheel.path.name, wheel.fd, wheel.label, path)


class _Output:
    """The new wheel under a temporary name in the output directory until commit() renames it into
    place: the directory never holds a partial wheel (a failure removes it). The temporary file is
    locked while it is written, so that the next run can tell an interrupted run's leftovers (same
    name pattern, this user's, unlocked: removed) from a running one's (locked: kept)."""

    def __init__(self, out_dir: Path, stock_name: str, say: Say, again: str | None = None):
        token = secrets.token_hex(4)
        self.out_dir, self.say = out_dir, say
        self.temporary = out_dir / f".{stock_name}.patchkit-{token}.tmp"
        # Locked under a name the sweep of leftovers ignores, then renamed: it never sees it unlocked.
        self.pending = out_dir / f".{stock_name}.patchkit-{token}.new"
        self.committed = False
        self.again = again or "`patchkit wheel` again"
        self.created: list[Path] = []
        self.fd = -1

    def __enter__(self) -> _Output:
        # made here, not in __init__: a signal raised before `with` has the object leaves no file behind
        try:
            with signals.deferred():  # one that lands meanwhile is raised once the file has one name
                self.created = _make_out_dir(self.out_dir)
                self.fd = self._open_locked()
        except BaseException:
            self.__exit__()
            raise
        for name in _remove_leftovers(self.out_dir):
            self.say(f"removed {self.out_dir / name}, left by an interrupted patchkit wheel")
        return self

    def _open_locked(self) -> int:
        """The temporary file, created locked under the pending name and renamed to its own."""
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self.pending, flags, 0o644)
        except OSError as exc:
            raise TargetError(
                f"cannot write into {self.out_dir}: {exc.strerror}", hint=_out_hint(self.out_dir)
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(self.pending, self.temporary)
        except OSError as exc:
            os.close(fd)
            self.pending.unlink(missing_ok=True)
            raise TargetError(
                f"cannot write into {self.out_dir}: {exc.strerror}", hint=_out_hint(self.out_dir)
            ) from None
        return fd

    def __exit__(self, *exc_info: object) -> None:
        with signals.deferred():  # the file goes whole, under the name it has
            fd, self.fd = self.fd, -1
            if fd >= 0:  # the temporary file was made (and is under its own name)
                os.close(fd)
                if not self.committed:
                    self.temporary.unlink(missing_ok=True)
            if not self.committed:
                _remove_empty(self.created)  # no empty --out this run made, nor its parents

    def wait(self, copies: list[Future[None] | Future[bool]]) -> None:
        """The jobs' end (the copies, the members' hashes); an OSError (a full disk) as the write failure it is."""
        try:
            for copying in copies:
                copying.result()
        except OSError as exc:
            raise _write_error(self.temporary, exc) from None

    def place(self, writer: rawzip.Writer, entries: list[rawzip.Entry]) -> list[tuple[rawzip.Entry, int]]:
        try:
            return writer.place(entries)
        except OSError as exc:
            raise _write_error(self.temporary, exc) from None

    def write(self, writer: rawzip.Writer, entries: list[rawzip.Entry]) -> None:
        try:
            writer.add(entries)
            writer.finish()
        except OSError as exc:
            raise _write_error(self.temporary, exc) from None

    def commit(self, final: Path) -> Path:
        with signals.deferred():  # the rename and what an interrupt says after it, as one step
            try:
                os.replace(self.temporary, final)
            except OSError as exc:
                raise _write_error(final, exc) from None
            self.committed = True
            signals.note_report(
                f"interrupted after the wheel was written: it is in place, {final}",
                f"its report (and JSON's sha256) was not printed; {self.again} gives both",
            )
        return final


def _write_error(path: Path, exc: OSError) -> TargetError:
    """A write into --out that failed, with what to do about it."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free space there, or give --out a directory on another file system"
    elif exc.errno == errno.EISDIR:
        hint = f"{path.name} is a directory: remove or rename it, or give another --out"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "give --out a directory you can write to"
    else:
        hint = None
    return TargetError(f"cannot write {path}: {exc.strerror}", hint=hint)


_LEFTOVER = re.compile(r"\.vllm-[^/]+\.whl\.patchkit-[0-9a-f]{8}\.tmp")


def _out_hint(out_dir: Path) -> str:
    """OUT_HINT, unless --out was the working directory or below it: . may be what cannot be
    written then (a read-only root file system), and ./dist would fail the same way. The
    temporary directory is one Python found writable."""
    try:
        here = Path.cwd()
        inside = out_dir.absolute() == here or here in out_dir.absolute().parents
    except OSError:  # the working directory is gone
        inside = True
    if not inside:
        return OUT_HINT
    return OUT_HINT.replace("./dist", str(Path(tempfile.gettempdir()) / "dist"))


def _make_out_dir(out_dir: Path) -> list[Path]:
    """--out, created if missing; what is in the way (a dangling symlink, a file) named as it is.
    The directories it created, innermost first (a run that writes no wheel removes them)."""
    created = [path for path in [out_dir, *out_dir.parents] if not os.path.lexists(path)]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise _not_a_directory(out_dir, _in_the_way(out_dir)) from None
    except OSError as exc:
        raise TargetError(
            f"cannot create the --out directory {out_dir}: {exc.strerror}", hint=_out_hint(out_dir)
        ) from None
    return created


def _remove_empty(created: list[Path]) -> None:
    """The directories this run created for --out, innermost first, each only while empty (rmdir:
    another run's wheel, or a file put there meanwhile, keeps it and those above it)."""
    for path in created:
        try:
            path.rmdir()
        except OSError:
            return


def _in_the_way(out_dir: Path) -> Path:
    """The first of --out and the directories above it that is something else than a directory."""
    for path in [*reversed(out_dir.parents), out_dir]:
        if (path.is_symlink() or path.exists()) and not path.is_dir():
            return path
    return out_dir


def _not_a_directory(out_dir: Path, blocking: Path) -> TargetError:
    """Why `blocking` (--out or a directory above it) is no directory, and what to do."""
    hint = "give --out a directory, or a path where one can be created"
    where = f"--out {out_dir}" if blocking == out_dir else f"{blocking} (on the way to --out {out_dir})"
    try:
        if blocking.is_symlink() and _loops(blocking):
            return TargetError(f"{where} is a symlink that leads back to itself (a loop)", hint=hint)
        if blocking.is_symlink():
            target = os.readlink(blocking)
            state = "which does not exist" if not blocking.exists() else "which is not a directory"
            return TargetError(
                f"{where} is a symlink to {target}, {state}",
                hint=f"create the directory {target}, or {hint}" if not blocking.exists() else hint,
            )
        if blocking.exists() and not blocking.is_dir():
            return TargetError(f"{where} is a file, not a directory", hint=hint)
    except OSError:
        pass
    return TargetError(f"cannot create the --out directory {out_dir}: {blocking} is in the way", hint=hint)


def _loops(link: Path) -> bool:
    try:
        os.stat(link)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _remove_leftovers(out_dir: Path) -> list[str]:
    """The temporary wheels interrupted runs left in `out_dir` (by name, owner and lock), removed."""
    try:
        names = sorted(os.listdir(out_dir))
    except OSError:
        return []
    return [name for name in names if _LEFTOVER.fullmatch(name) and _remove_abandoned(out_dir / name)]


def _remove_abandoned(path: Path, kind: int = stat.S_IFREG, before: float | None = None) -> bool:
    """Remove `path` if it is a regular file (or with `kind` S_IFDIR a directory, with what it
    holds) of this user's that no running patchkit holds locked (and, with `before`, last
    modified before that time)."""
    try:
        seen = os.lstat(path)
        if stat.S_IFMT(seen.st_mode) != kind or seen.st_uid != os.geteuid():
            return False
        if before is not None and seen.st_mtime >= before:
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while a running build holds it
        opened, now = os.fstat(fd), os.lstat(path)
        if {(opened.st_dev, opened.st_ino), (now.st_dev, now.st_ino)} != {(seen.st_dev, seen.st_ino)}:
            return False  # replaced meanwhile: not the file judged
        if kind == stat.S_IFDIR:
            if not _marked_as_scratch(fd):
                return False  # a directory of that name patchkit did not make (a user's --out, say)
            _remove_scratch(path)
        else:
            os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the scratch tree

_SCRATCH_PREFIX = "patchkit-wheel-"
# Written into every scratch tree as it is made: the sweep removes only a directory holding it.
_SCRATCH_MARKER = ".patchkit-scratch"
_SCRATCH_MARKER_TEXT = b"patchkit wheel scratch tree: removed when no patchkit holds it locked\n"
_SCRATCH = re.compile(r"patchkit-wheel-[a-z0-9_]{8}")  # tempfile's 8 random characters
# Untouched this long: never a running build's, even one of a patchkit from before scratch trees were locked.
_SCRATCH_AGE = 600


@contextmanager
def _scratch_tree(say: Say) -> Iterator[Path]:
    """A directory in the system's temporary directory for the wheel's files the checks read,
    locked while in use (as the temporary wheel is) so that a later run can remove one a killed
    run left; removed afterwards."""
    temp = Path(tempfile.gettempdir())
    made: list[tuple[int, Path]] = []
    try:
        with signals.deferred():  # a signal that lands meanwhile is raised once the tree has one name
            made.append(_new_scratch(temp))
    except BaseException:
        for fd, path in made:
            _scratch_gone(fd, path)
        raise
    fd, path = made[0]
    try:
        for name in _abandoned_scratch(temp):
            say(f"removed {temp / name}, left by a killed patchkit wheel")
        yield path
    finally:
        _scratch_gone(fd, path)


def _new_scratch(temp: Path) -> tuple[int, Path]:
    """A new scratch tree in `temp`, marked and locked before it is renamed to the name a sweep knows:
    its open descriptor and that name."""
    try:
        pending = Path(tempfile.mkdtemp(prefix=f".{_SCRATCH_PREFIX}new-", dir=temp))
    except OSError as exc:
        raise scratch_error(temp, exc) from None
    try:
        _write_marker(pending)
    except OSError as exc:
        shutil.rmtree(pending, ignore_errors=True)
        raise scratch_error(temp, exc) from None
    try:
        fd = os.open(pending, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        shutil.rmtree(pending, ignore_errors=True)
        raise scratch_error(temp, exc) from None
    path = temp / (_SCRATCH_PREFIX + pending.name[-8:])
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(pending, path)  # locked before the sweep's pattern names it
    except OSError as exc:
        os.close(fd)
        shutil.rmtree(pending, ignore_errors=True)
        raise scratch_error(temp, exc) from None
    return fd, path


def _scratch_gone(fd: int, path: Path) -> None:
    with contextlib.suppress(OSError):  # what is left keeps its marker: a later sweep removes it
        _remove_scratch(path)
    os.close(fd)


def _remove_scratch(path: Path) -> None:
    """A scratch tree removed with its marker last, signals held: a removal cut short (SIGKILL, a
    crash) leaves a directory that still holds the marker, which the next sweep removes."""
    with signals.deferred():
        with os.scandir(path) as listing:
            entries = list(listing)
        for entry in entries:
            if entry.name == _SCRATCH_MARKER:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)  # never follows a symlink inside
            else:
                os.unlink(entry.path)
        os.unlink(path / _SCRATCH_MARKER)
        os.rmdir(path)


def _write_marker(scratch: Path) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(scratch / _SCRATCH_MARKER, flags, 0o600)
    try:
        os.write(fd, _SCRATCH_MARKER_TEXT)
    finally:
        os.close(fd)


def _marked_as_scratch(dir_fd: int) -> bool:
    """Whether the directory open as `dir_fd` holds patchkit's scratch marker: a regular file of this
    user's (never a symlink) with the marker's text."""
    try:
        fd = os.open(_SCRATCH_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        seen = os.fstat(fd)
        if not stat.S_ISREG(seen.st_mode) or seen.st_uid != os.geteuid():
            return False
        return os.read(fd, len(_SCRATCH_MARKER_TEXT) + 1) == _SCRATCH_MARKER_TEXT
    except OSError:
        return False
    finally:
        os.close(fd)


def _abandoned_scratch(temp: Path) -> list[str]:
    try:
        names = sorted(os.listdir(temp))
    except OSError:
        return []
    old = time.time() - _SCRATCH_AGE
    return [n for n in names if _SCRATCH.fullmatch(n) and _remove_abandoned(temp / n, stat.S_IFDIR, before=old)]


def scratch_error(temp: Path, exc: OSError) -> TargetError:
    """A write into the scratch tree failed: the system's temporary directory, named with the way out."""
    return TargetError(
        f"cannot write the scratch tree in the temporary directory {temp}: {exc.strerror}",
        hint="free space there, or set TMPDIR to a directory with room (a few MB)",
    )


# --------------------------------------------------------------------------- the stock wheel


@contextmanager
def open_stock(path: Path, expect_identity: tuple[int, ...] | None = None) -> Iterator[StockWheel]:
    label = path.name
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise BadInput(f"{path}: not a wheel's file name ({exc})") from None
    if name != "vllm":
        raise BadInput(f"{path} is a wheel of {name}, not of vllm")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{path} is not a regular file")
        if expect_identity is not None and fsutil.file_identity(info) != expect_identity:
            raise FetchError(f"the cached wheel {path} changed after it was checked", hint="run the command again")
        rawzip.check_member_count(fd, label)
        try:
            zf = zipfile.ZipFile(io.FileIO(os.dup(fd), "rb"))
        except _DAMAGED as exc:
            raise BadInput(f"{path} is not a zip archive: {exc}") from None
        with zf:
            members = rawzip.members(zf, fd, label)
            dist_info = _dist_info(members, version, label)
            installs = _installs(members, dist_info, label)
            wheel = StockWheel(
                path, fd, zf, members, path.name[: -len(".whl")].split("-"), version, dist_info, installs,
                fsutil.file_identity(info),
            )  # fmt: skip
            _refuse_other_scripts(wheel)
            _refuse_a_wheel_pip_refuses(wheel)
            yield wheel
    finally:
        os.close(fd)


def _installs(members: list[rawzip.Member], dist_info: str, label: str) -> dict[str, str]:
    """Each file's path in site-packages (folded as a case-insensitive system sees it) to the member
    that installs there (rawzip.members refused two of one folded name). BadInput for a member
    outside vllm/ and the dist-info."""
    for member in members:
        _refuse_outside(member.name, dist_info, label)
    return {rawzip.folded(m.name): m.name for m in members if not m.is_dir}


def _refuse_other_scripts(wheel: StockWheel) -> None:
    """BadInput for a script the installer would write beside `vllm` (entry_points.txt's
    console_scripts and gui_scripts): pip writes `python3 = …` over the environment's bin/python3.
    vLLM's wheels name one script, `vllm` (0.11.0, 0.16.0, 0.34.0 checked). Read as pip reads it,
    by importlib.metadata: each line stripped on its own (configparser took an indented line for the
    previous value's continuation, so `  python3 = os:system` passed)."""
    name = f"{wheel.dist_info}/entry_points.txt"
    if wheel.member(name) is None:
        return
    try:
        points = parse_entry_points(wheel.read(name, METADATA_LIMIT).decode("utf-8"))
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError; a line without `=`
        raise BadInput(f"{wheel.label}: {name} is not an entry points file ({exc}); refusing the wheel") from None
    others = [p.name for p in points if p.group.strip() in ("console_scripts", "gui_scripts") and p.name != "vllm"]
    if others:
        raise BadInput(
            f"{wheel.label}: {name} names the script {others[0]!r}, which the installer writes beside vllm "
            "(over a file of that name, bin/python3 say); vLLM's wheels name only vllm; refusing the wheel",
            hint="build from the release's stock wheel (`patchkit wheel VERSION` downloads it)",
        )


def _refuse_a_wheel_pip_refuses(wheel: StockWheel) -> None:
    """BadInput for a dist-info WHEEL that pip refuses to install (pip's own reading of it: the
    first Wheel-Version header, numbers joined by dots, major version 1 at most): the wheel built
    from it would fail at `pip install`, at image build, not here."""
    name = f"{wheel.dist_info}/WHEEL"
    if wheel.member(name) is None:
        raise BadInput(f"{wheel.label} has no {name}, which pip needs to install it; refusing the wheel")
    try:
        text = Parser().parsestr(wheel.read(name, METADATA_LIMIT).decode())["Wheel-Version"]
        version = None if text is None else tuple(map(int, text.strip().split(".")))
    except (UnicodeDecodeError, ValueError):
        version = ()
    if not version or version[0] > WHEEL_VERSION_MAJOR:
        said = "no Wheel-Version" if version is None else "a Wheel-Version pip refuses"
        raise BadInput(
            f"{wheel.label}: its {name} has {said} (pip installs {WHEEL_VERSION_MAJOR}.x); refusing the wheel",
            hint="build from the release's stock wheel (`patchkit wheel VERSION` downloads it)",
        )


def _refuse_outside(name: str, dist_info: str, label: str) -> None:
    """BadInput for a member outside vllm/ and the dist-info. vLLM's wheels hold nothing else (no
    .data, no other top level: 0.9.2 to 0.34.0 checked); anything else installs where it can run
    first (.pth, sitecustomize, a stdlib module, bin/python, a dependency) and put another vllm first."""
    top, slash, _rest = name.partition("/")
    if slash and top in ("vllm", dist_info):
        return
    raise BadInput(
        f"{label}: member {rawzip.shown(name)} lies outside vllm/ and {dist_info}/, where vLLM's wheels "
        "hold nothing; refusing the wheel",
        hint="build from the release's stock wheel (`patchkit wheel VERSION` downloads it)",
    )


def nothing_to_patch(selection: Selection) -> NoPatchSet:
    """A version in the range the set declares upstream: said as the set declares it, not as a fact
    about that release (0.99.0 may be no release at all, and no check ran on it)."""
    return NoPatchSet(
        f"the set {selection.set_name!r} has nothing to patch in vLLM {selection.version}: {_declared(selection)}",
        hint=f"build from a release the set has a series for ({hints.command('list')} names them)",
    )


def _declared(selection: Selection) -> str:
    declared = selection.patch_set.upstream if selection.patch_set else None
    return f"it declares that vLLM {declared} ships its change itself"


def _left_out(chosen: Chosen) -> str:
    """Why a set is not in a wheel of several sets: upstream as the set declares it."""
    if chosen.kind == SelectionKind.UPSTREAM and chosen.resolved is not None:
        return f"the set {chosen.name} is left out: {_declared(chosen.resolved.selection)}"
    return f"the set {chosen.name} is left out: {why_not(chosen)}"


def _refuse_gaps(chosen: list[Chosen], rebuild: list[str]) -> None:
    """A set in its range with no series for the release: a wheel of the others would leave its
    installs unsafe for it without a word, as apply would leave a tree (which apply refuses too)."""
    gaps = no_series(chosen)
    if not gaps:
        return
    them = "it" if len(gaps) == 1 else "them"
    said = "; ".join(c.gap.selection.note or c.name if c.gap is not None else c.name for c in gaps)
    others = [c.name for c in chosen if c.resolved is not None and c.kind == SelectionKind.PATCH]
    build = _wheel_of(others, rebuild)
    rest = f"build a wheel of the others alone ({build}): launches that need {them} stay refused; or " if others else ""
    raise CheckFailed(
        f"{said}: a wheel without {them} leaves its installs unsafe for {them}; no wheel written",
        hint=f"{rest}build from a release with a series of {them} ({hints.command('list')} names them)",
    )


def _wheel_of(sets: list[str], rebuild: list[str]) -> str:
    """The command that builds the wheel of `sets` alone from the same stock wheel, into the same place."""
    selection = replace(hints.current(), set_name=None, set_names=())
    return hints.command("wheel", *(w for name in sets for w in ("--set", name)), *rebuild, chosen=selection)


def _dist_info(members: list[rawzip.Member], version: Version, label: str) -> str:
    """The one top-level *.dist-info directory, which must be vllm's of the file name's version."""
    found = sorted({m.name.split("/", 1)[0] for m in members if m.name.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        raise BadInput(f"{label} has {len(found)} .dist-info directories, not one: {', '.join(found) or 'none'}")
    stem = found[0][: -len(".dist-info")]
    name, _, text = stem.partition("-")
    try:
        matches = canonicalize_name(name) == "vllm" and Version(text) == version
    except ValueError:
        matches = False
    if not matches:
        raise BadInput(f"{label}: its dist-info {found[0]} is not vllm {version}'s, as the file name says")
    return found[0]


def _file_name(wheel: StockWheel, version: Version) -> str:
    parts = list(wheel.name_parts)
    parts[1] = str(version)
    return "-".join(parts) + ".whl"


# --------------------------------------------------------------------------- plan and checks


@dataclass
class _Checked(WheelResult):
    """A set resolved, planned and checked on the wheel's stock files."""

    resolved: Resolved | None = None
    plan: Plan | None = None
    changes: dict[str, tuple[bytes | None, bytes | None]] = field(default_factory=dict)  # of every set


def _resolve(
    wheel: StockWheel, scratch: Path, chosen: Options, shape: tuple[Path, str | None]
) -> tuple[list[Resolved], list[str]]:
    """The version, and each set's series (several when the library holds several sets and no
    one --set is given: those with a series for the release, in the library's order), as for a tree
    of the wheel's files (its dist-info in `scratch`); and notes on the sets left out. `shape`: the
    --out and --local-label given."""

    _check_metadata(wheel)
    _lay_out(wheel, scratch, [f"{wheel.dist_info}/METADATA"], METADATA_LIMIT)
    _lay_out(wheel, scratch, [f"{wheel.dist_info}/RECORD"], RECORD_LIMIT)
    try:
        (scratch / "vllm").mkdir(exist_ok=True)
    except OSError as exc:
        raise scratch_error(scratch.parent, exc) from None
    # the version _check_metadata read and matched to the file name (detection would name the scratch tree)
    opts = replace(chosen, target_dir=str(scratch), python=None, vllm_version=str(wheel.version))
    if several(opts):
        out_dir, label = shape  # a hint that builds other sets builds them from this wheel, as asked
        rebuild = [str(wheel.path), "--out", os.path.abspath(out_dir), *(["--local-label", label] if label else [])]
        return _resolve_sets(opts, rebuild)
    resolved = resolve(opts)
    if resolved.selection.kind == SelectionKind.UPSTREAM:
        raise nothing_to_patch(resolved.selection)
    require_patches(resolved)
    return [resolved], []


def _resolve_sets(opts: Options, rebuild: list[str]) -> tuple[list[Resolved], list[str]]:
    """Every covering set with a series for the release (the others noted); sets that change the
    same file are refused (each set's plan is made on the stock files). `rebuild`: the stock wheel
    and the options that shape the output, as a hint to build other sets passes them."""
    chosen = resolve_sets(opts, resolve_target(opts))
    _refuse_gaps(chosen, rebuild)
    patching = [c.resolved for c in chosen if c.kind == SelectionKind.PATCH and c.resolved is not None]
    if not patching:
        upstream = next((c.resolved for c in chosen if c.kind == SelectionKind.UPSTREAM and c.resolved), None)
        if upstream is not None:
            raise nothing_to_patch(upstream.selection)
        raise NoPatchSet("; ".join(why_not(c) for c in chosen))
    _refuse_shared_files(patching, rebuild)
    notes = [_left_out(c) for c in chosen if c.kind != SelectionKind.PATCH]
    return patching, notes


def _refuse_shared_files(resolved: list[Resolved], rebuild: list[str]) -> None:
    """One wheel holds sets that change different files (each set is planned on the stock files)."""
    owner: dict[str, str] = {}
    for each in resolved:
        for path in sorted(_series_paths(each.patches)):
            if owner.setdefault(path, each.set_name) != each.set_name:
                raise BadInput(
                    f"the sets {owner[path]} and {each.set_name} both change {path}: one wheel holds sets "
                    "that change different files",
                    hint=f"build a wheel of one of them: {_wheel_of([each.set_name], rebuild)}",
                )


def _series_paths(patches: list[Patch]) -> set[str]:
    return {p for patch in patches for f in patch.files for p in (f.source_path, f.target_path) if p}


def _plan_and_check_sets(
    wheel: StockWheel,
    scratch: Path,
    resolved: list[Resolved],
    chosen: Options,
    stock_record: dict[str, tuple[str, str]],
) -> _Checked:
    """_plan_and_check of each set (one set: its own result); several: their changes and checks
    together, the first failure the result (naming its set)."""
    if len(resolved) == 1:
        checked = _plan_and_check(wheel, scratch, resolved[0], chosen, stock_record)
        checked.changes = checked.plan.changes if checked.plan is not None else {}
        return checked
    together = _Checked(Outcome.OK, wheel.path)
    for each in resolved:
        one = _plan_and_check(wheel, scratch, each, chosen, stock_record)
        together.warnings += one.warnings
        together.checks += one.checks
        if one.error is not None:
            one.error.message = f"set {each.set_name}: {one.error.message}"
            return replace(one, checks=together.checks, warnings=together.warnings)
        assert one.plan is not None
        together.patches += one.patches
        together.sets.append((each.set_name, one.patches))
        together.changes |= one.plan.changes
    return together


def _plan_and_check(
    wheel: StockWheel, scratch: Path, resolved: Resolved, chosen: Options, stock_record: dict[str, tuple[str, str]]
) -> _Checked:
    """What apply would do to a tree of the wheel's files, and its checks: nothing is written."""
    patches = resolved.patches
    _refuse_unrecordable_names(patches)
    _refuse_shadowed(wheel, patches)
    _lay_out_series(wheel, scratch, _needed(resolved, patches))
    result = _Checked(
        Outcome.OK,
        wheel.path,
        set_name=None if chosen.adhoc else resolved.set_name,
        patches=patches,
        warnings=list(resolved.notes),
        resolved=resolved,
    )

    try:
        dry = apply_series(resolved, dry_run=True, import_probe=False)  # apply's checks on the planned contents
    except BreaksSet as exc:  # the wheel's own fix: no tree to apply the set to
        exc.hint = f"build the whole set's wheel: `--set {exc.set_name}` in place of --patch"
        raise _nothing_written(exc) from None
    result.warnings += dry.warnings
    result.plan, result.checks = dry.plan, list(dry.checks or [])
    if dry.error is not None and not dry.planned_checks:  # refused before the checks (a conflict, integrity)
        result.outcome, result.error = dry.outcome, _nothing_written(dry.error)
        return result
    if dry.outcome == Outcome.ALREADY_APPLIED:  # the wheel holds the series
        _check_no_provenance(wheel)  # a wheel patchkit built: what it holds is in its patchkit.json
        of = f" of {resolved.set_name}" if resolved.set_name and not chosen.adhoc else ""
        raise BadInput(f"{wheel.label} already holds the series{of}: there is nothing to patch")
    assert dry.plan is not None
    stock = [r for r in result.checks if r.check == integrity.CHECK.name]
    result.checks = _unverified_fail(stock, dry.plan, stock_record) + _without_probe(dry.planned_checks)
    failed = [r for r in result.checks if r.failed]
    if failed:
        result.outcome = Outcome.CHECK_FAILED
        result.error = CheckFailed(
            "verification of the patched files failed; no wheel was written:\n  "
            + "\n  ".join(r.describe() for r in failed)
        )
    return result


def _refuse_unrecordable_names(patches: list[Patch]) -> None:
    """A patch name the installed wheel's record would be refused for (read_provenance's rule): refused now."""
    for patch in patches:
        problem = fsutil.plain_name_problem(patch.name)
        if problem:
            raise BadInput(
                f"patch file name {patch.name!r} {problem}: the patched wheel records each patch under its name",
                hint="rename the patch file",
            )


def _refuse_shadowed(wheel: StockWheel, patches: list[Patch]) -> None:
    """A member that installs where Python imports it before a patched source (a package of its
    name, an extension module beside it) leaves the patch dead once installed: refused."""
    children = wheel.children
    names_in = shadow.planned(lambda directory: children.get(directory, ()), patches)
    for path in shadow.sources(patches):
        found = shadow.shadow(path, names_in)
        if found is not None:
            member_name = wheel.installs.get(rawzip.folded(found), found)
            raise BadInput(
                f"{wheel.label}: {rawzip.shown(member_name)} installs as {rawzip.shown(found)}, which Python imports instead of the patched "
                f"{path} ({shadow.ORDER}): the patch would never run; refusing the wheel",
                hint="this series cannot patch this wheel: build from a wheel whose module is the .py source",
            )


def _unverified_fail(
    checks: list[CheckResult], plan: Plan, stock_record: dict[str, tuple[str, str]]
) -> list[CheckResult]:
    """integrity has no --force here: a stock file the series changes that the wheel's own RECORD
    does not list with a hash wheels may use cannot be shown stock, which fails the build."""

    def verifiable(path: str) -> bool:
        digest, _size = stock_record.get(path, ("", ""))
        return bool(digest) and record_algorithm(digest) in HASHES

    unverified = {p for p, (before, _after) in plan.changes.items() if before is not None and not verifiable(p)}
    return [
        replace(r, level=ERROR) if r.check == integrity.CHECK.name and r.path in unverified and not r.ok else r
        for r in checks
    ]


def _check_no_provenance(wheel: StockWheel) -> None:
    """The stock dist-info holds nothing where patchkit puts the provenance (patchkit.json, patchkit/)."""
    mine = (f"{wheel.dist_info}/patchkit.json", f"{wheel.dist_info}/patchkit")
    found = next((m.name for m in wheel.members if m.name in mine or m.name.startswith(f"{mine[1]}/")), None)
    if found is not None:
        raise BadInput(
            f"{wheel.label}: its dist-info already holds {found}, where patchkit records what it applied "
            "(a wheel patchkit built?); refusing the wheel",
            hint="start from the release's stock wheel",
        )


def _check_metadata(wheel: StockWheel) -> None:
    """METADATA names vllm and the file name's version (what version detection then reads)."""
    headers = first_headers(wheel.read(f"{wheel.dist_info}/METADATA", METADATA_LIMIT).decode("utf-8", "replace"))
    try:
        version = Version(headers.get("version", ""))
    except ValueError:
        raise BadInput(f"{wheel.label}: its METADATA has no valid Version header") from None
    if canonicalize_name(headers.get("name", "").strip()) != "vllm" or version != wheel.version:
        raise BadInput(f"{wheel.label}: its METADATA is not vllm {wheel.version}'s, as the file name says")


def _needed(resolved: Resolved, patches: list[Patch]) -> list[str]:
    """The files the plan and the checks read: every path the series names, the contract's files."""
    paths = {p for patch in patches for f in patch.files for p in (f.source_path, f.target_path) if p}
    for patch_set in (resolved.selection.patch_set, *resolved.held_by):  # held_by: an ad-hoc diff's (held.py)
        if patch_set is not None:
            paths |= {req.file for req in patch_set.contract if req.applies_to(resolved.vllm_version)}
    return sorted(paths)


def _lay_out(wheel: StockWheel, scratch: Path, paths: list[str], limit: int) -> None:
    for path in paths:
        member = wheel.member(path)
        if member is None or member.is_dir:
            continue  # a file the series creates, or one the release lacks
        target, data = scratch / path, wheel.read(path, limit)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as exc:
            raise scratch_error(scratch.parent, exc) from None


def _lay_out_series(wheel: StockWheel, scratch: Path, paths: list[str]) -> None:
    """The files the series and the contract read: none beyond what the checks parse, so that a
    wheel is never built with a file its checks skipped."""
    limit = LARGEST_PARSED
    for path in paths:
        member = wheel.member(path)
        if member is not None and member.info.file_size > limit:
            raise BadInput(
                f"{wheel.label}: {path}, which the series or its contract reads, is "
                f"{member.info.file_size / 2**20:.0f} MiB; patchkit wheel takes such files up to "
                f"{limit // 2**20} MiB (what the syntax and names checks parse); refusing the wheel"
            )
    _lay_out(wheel, scratch, paths, limit)


def _without_probe(results: list[CheckResult]) -> list[CheckResult]:
    """The import probe needs an installed vLLM: one row saying so, instead of the target's reasons."""
    kept = [r for r in results if r.check != probe.CHECK.name]
    verify = hints.command("verify", "--python", "PYTHON")  # the library and set the wheel was built with
    message = f"not run: a wheel is not an environment (install it, then {verify})"
    return [*kept, CheckResult(probe.CHECK.name, None, True, message, WARNING)]


def _nothing_written(error: PatchkitError) -> PatchkitError:
    error.message = error.message.replace("nothing was written", "no wheel was written")
    if error.hint and "--force" in error.hint:  # integrity's hint is for a tree
        error.hint = "the wheel's files are not the ones its RECORD lists: start from the release's stock wheel"
    return error


# --------------------------------------------------------------------------- the new wheel


def _touched(wheel: StockWheel, resolved: list[Resolved]) -> set[str]:
    """The members a patch of any set may change, their compiled bytecode, and the dist-info
    (rewritten): not copied ahead of the checks."""
    paths = {p for each in resolved for p in _series_paths(each.patches)}
    dist_info = {m.name for m in wheel.members if m.name.startswith(f"{wheel.dist_info}/")}
    return paths | _compiled(wheel, paths) | dist_info


def _compiled(wheel: StockWheel, sources: set[str]) -> set[str]:
    """The members that install as compiled bytecode of `sources` (`__pycache__/<stem>.<tag>[.opt-N].pyc`,
    a legacy `<stem>.pyc`): the new wheel leaves them out, since an unchecked-hash pyc would keep
    running the stock code; the installer (pip compiles by default) or Python rebuilds them."""
    wanted = {rawzip.folded(s) for s in sources if s.endswith(".py")}
    found = set()
    for member in wheel.members:
        path = None if member.is_dir else member.name
        source = _source_of_pyc(path) if path else None
        if source is not None and rawzip.folded(source) in wanted:
            found.add(member.name)
    return found


def _source_of_pyc(path: str) -> str | None:
    """The source a .pyc at `path` is the bytecode of, as Python's import system pairs them."""
    if not path.endswith(".pyc"):
        return None
    directory, _, name = path.rpartition("/")
    parent, _, cache = directory.rpartition("/")
    if cache != "__pycache__":
        return f"{path[: -len('.pyc')]}.py"  # legacy: beside its source
    stem, *tags = name[: -len(".pyc")].split(".")
    if not 1 <= len(tags) <= 2 or (len(tags) == 2 and not tags[1].startswith("opt-")):
        return None
    return f"{parent}/{stem}.py" if parent else f"{stem}.py"


def _never_patched(wheel: StockWheel, stock_record: dict[str, tuple[str, str]]) -> list[rawzip.Entry]:
    """The members no series can touch, known before the series is: those beyond LARGEST_PARSED
    (a series that names one is refused), outside the dist-info (renamed with the label)."""
    special = f"{wheel.dist_info}/"
    return [
        _raw(wheel, m, m.name, stock_record)
        for m in wheel.members
        if m.info.file_size > LARGEST_PARSED and not m.name.startswith(special) and not m.name.endswith(".pyc")
    ]


def _untouched(
    wheel: StockWheel, resolved: list[Resolved], stock_record: dict[str, tuple[str, str]], copied: set[str]
) -> list[rawzip.Entry]:
    """Every other member no patch touches (not `copied` already), outside the dist-info, in the
    stock order: copied raw."""
    skipped = _touched(wheel, resolved) | copied
    return [_raw(wheel, m, m.name, stock_record) for m in wheel.members if m.name not in skipped]


def _entries(
    wheel: StockWheel,
    changes: dict[str, tuple[bytes | None, bytes | None]],
    result: WheelResult,
    untouched: list[rawzip.Entry],
    stock_record: dict[str, tuple[str, str]],
) -> list[rawzip.Entry]:
    """The rest of the new wheel after `untouched`: the members patches touch (patched ones
    deflated, created ones added), the renamed dist-info with the provenance, RECORD last."""
    assert result.version is not None and result.label is not None
    _check_no_provenance(wheel)  # after the plan: a wheel patchkit built is told "already holds the series"
    old, new = wheel.dist_info, f"vllm-{result.version}.dist-info"
    when = _member(wheel, f"{old}/METADATA").info.date_time  # new members: the stock time, so a rebuild is identical
    copied = {e.source.name for e in untouched if e.source is not None}
    left_out = {f"{old}/RECORD", *(f"{old}/{s}" for s in SIGNATURES), *_compiled(wheel, set(changes))}
    body: list[rawzip.Entry] = []
    dist: list[rawzip.Entry] = []
    for member in wheel.members:
        name = member.name
        if name in copied or name in left_out:
            continue
        if name in changes:
            after = changes[name][1]
            if after is not None:
                body.append(rawzip.deflated(name, after, member, when))
        elif name.startswith(f"{old}/"):
            dist.append(_dist_info_entry(wheel, member, new, stock_record, when, result.version))
        else:  # touched by a patch the plan found already applied
            body.append(_raw(wheel, member, name, stock_record))
    created = [
        rawzip.deflated(_creatable(wheel, path), after, None, when)
        for path, (before, after) in sorted(changes.items())
        if before is None and after is not None and wheel.member(path) is None
    ]
    provenance = _provenance(wheel, changes, result)
    extra = [
        rawzip.deflated(f"{new}/{rel}", data, None, when)
        for rel, data in provenance_files(provenance, result.patches).items()
    ]
    rest = body + created + dist + extra
    record_name = f"{new}/RECORD"
    record = _record(untouched + rest, record_name)
    return [*rest, rawzip.deflated(record_name, record, _member(wheel, f"{old}/RECORD"), when)]


def _creatable(wheel: StockWheel, path: str) -> str:
    """A file the series creates, unless a member (in another case) installs there already."""
    other = wheel.installs.get(rawzip.folded(path))
    if other is not None:
        raise BadInput(
            f"{wheel.label}: the series creates {path}, and member {rawzip.shown(other)} installs there; refusing the wheel"
        )
    return path


def _dist_info_entry(
    wheel: StockWheel,
    member: rawzip.Member,
    new: str,
    stock_record: dict[str, tuple[str, str]],
    when: tuple[int, int, int, int, int, int],
    version: str,
) -> rawzip.Entry:
    """A dist-info member under the new dist-info's name: METADATA with the new Version, the rest raw."""
    name = new + member.name[len(wheel.dist_info) :]
    if member.name == f"{wheel.dist_info}/METADATA":
        metadata = _relabelled(wheel.read(member.name, METADATA_LIMIT), version, wheel.label)
        return rawzip.deflated(name, metadata, member, when)
    return _raw(wheel, member, name, stock_record)


def _raw(wheel: StockWheel, member: rawzip.Member, name: str, stock_record: dict[str, tuple[str, str]]) -> rawzip.Entry:
    entry = rawzip.raw(member, name)
    if not member.is_dir:
        entry.digest = _stock_digest(wheel, member, stock_record)
    return entry


@dataclass
class _OwnRecord:
    """A labelled wheel FILE, which only its own RECORD vouches for: each member its RECORD gives a
    hash is inflated and hashed against it (zipfile checks its CRC as it inflates), once. Then the
    cache seals that (stock.remember_members: the file's identity and `fingerprint`), and a later
    build of the same unchanged file hashes nothing; a changed or replaced file is hashed again."""

    wheel: StockWheel
    stock_record: dict[str, tuple[str, str]]
    fingerprint: str
    vouched: bool  # sealed as true, and unchanged since: nothing to hash
    hashed: set[str] = field(default_factory=set)  # the members hashed on the pool

    @classmethod
    def of(
        cls, wheel: StockWheel, expect: tuple[int, ...] | None, stock_record: dict[str, tuple[str, str]], say: Say
    ) -> _OwnRecord | None:
        if expect is not None or claims_a_release(wheel.version):
            return None  # the cache's wheel of VERSION, or a FILE held to the published wheel
        fingerprint = _fingerprint(wheel)
        vouched = members_vouched(wheel.path.absolute(), wheel.fd, wheel.identity, fingerprint)
        say(
            "its members hashed true before; the file is unchanged: not hashed again"
            if vouched
            else "hashing every member against its RECORD"
        )
        return cls(wheel, stock_record, fingerprint, vouched)

    def hash_on(self, pool: ThreadPoolExecutor, entries: list[rawzip.Entry]) -> list[Future[bool]]:
        if self.vouched:
            return []
        members = [e.source for e in entries if e.source is not None]
        self.hashed.update(m.name for m in members)
        return _hash_on(pool, self.wheel, members, self.stock_record)

    def finish(self) -> None:
        """The members the pool did not hash (the dist-info's, the patched files) hashed here, once
        the pool's all passed; then every member is true, sealed for the file as it was opened."""
        if self.vouched:
            return
        rest = [m for m in self.wheel.members if m.name not in self.hashed]
        if _true_to_record(self.wheel, rest, self.stock_record) and not self.wheel.abandoned.is_set():
            remember_members(self.wheel.path.absolute(), self.wheel.fd, self.fingerprint, self.wheel.identity)

    def unchanged(self) -> None:
        """BadInput unless the file is the one opened: a write while it was read could have put
        other bytes in the copies than those hashed."""
        if fsutil.file_identity(os.fstat(self.wheel.fd)) != self.wheel.identity:
            raise BadInput(
                f"{self.wheel.label} changed while it was read; refusing the wheel",
                hint="run the command again once nothing writes the file",
            )


def _fingerprint(wheel: StockWheel) -> str:
    """The sha256 of the file's central directory and end records (every member's name, CRC, sizes
    and place) and of RECORD's stored bytes: "" when they are not where a true archive has them."""
    size = wheel.identity[2]
    start = wheel.zf.start_dir
    record = wheel.member(f"{wheel.dist_info}/RECORD")
    if record is None or record.info.compress_size > RECORD_LIMIT:
        return ""
    if not 0 <= start <= size or size - start > rawzip.DIRECTORY_LIMIT + (1 << 17):
        return ""  # the end records' comment is at most 64 KiB
    digest = hashlib.sha256(os.pread(wheel.fd, size - start, start))
    digest.update(os.pread(wheel.fd, record.info.compress_size, record.data_offset))
    return digest.hexdigest()


def _hash_on(
    pool: ThreadPoolExecutor,
    wheel: StockWheel,
    members: list[rawzip.Member],
    stock_record: dict[str, tuple[str, str]],
    parts: int = 2,
) -> list[Future[bool]]:
    """_true_to_record of `members` on the pool, in `parts` jobs of about equal size (zlib and
    hashlib let go of the GIL: two jobs inflate on two cores)."""
    jobs: list[list[rawzip.Member]] = [[] for _ in range(parts)]
    sizes = [0] * parts
    for member in sorted(members, key=lambda m: m.info.file_size, reverse=True):
        least = sizes.index(min(sizes))
        jobs[least].append(member)
        sizes[least] += member.info.file_size
    return [pool.submit(_true_to_record, wheel, job, stock_record) for job in jobs if job]


def _true_to_record(wheel: StockWheel, members: list[rawzip.Member], stock_record: dict[str, tuple[str, str]]) -> bool:
    """True once each of `members` that its RECORD row gives a hash wheels may use has that hash
    (inflated, so zipfile also checks its CRC), else BadInput; False when the build ended first.
    A member without such a row gets the hash computed here (_stock_digest): nothing to hold."""
    for member in members:
        said, size = stock_record.get(member.name, ("", ""))
        if member.is_dir or not (said and size) or record_algorithm(said) not in HASHES:
            continue
        got = wheel.digest_of(member, record_algorithm(said))
        if wheel.abandoned.is_set():
            return False  # the build ended without this: no one reads the answer
        if got != said:
            raise BadInput(
                f"{wheel.label} is not true to its RECORD: {rawzip.shown(member.name)} hashes to {got!r}, "
                f"RECORD says {rawzip.shown(said)}; refusing the wheel",
                hint=f"its contents changed after its RECORD was written: {DAMAGED_HINT}",
            )
    return True


def _stock_digest(wheel: StockWheel, member: rawzip.Member, stock_record: dict[str, tuple[str, str]]) -> str:
    """A member's RECORD hash: the stock RECORD's (its size must be the member's), else computed."""
    digest, size = stock_record.get(member.name, ("", ""))
    if size and size != str(member.info.file_size):
        raise BadInput(
            f"{wheel.label} is not true to its RECORD: {rawzip.shown(member.name)} is {member.info.file_size} bytes, "
            f"RECORD says {size}",
            hint=f"its contents changed after its RECORD was written: {DAMAGED_HINT}",
        )
    if digest and size and record_algorithm(digest) in HASHES:
        return digest
    return wheel.sha256_of(member)  # not listed, or with a hash wheels may not use: hashed here


def _stock_record(wheel: StockWheel) -> dict[str, tuple[str, str]]:
    """The stock RECORD, parsed once for the whole build. One row per file member at most (a
    member's name holds no newline): a RECORD of more rows is refused before csv reads it (a few
    MiB of short rows would cost seconds and gigabytes)."""
    raw = wheel.read(f"{wheel.dist_info}/RECORD", RECORD_LIMIT)
    rows = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
    if rows > len(wheel.members) + 1:  # a blank line at the end: no row
        raise BadInput(
            f"{wheel.label}: its RECORD lists {rows:,} rows, but the wheel has {len(wheel.members):,} members; "
            "refusing the wheel"
        )
    try:
        return parse_record_once(raw)
    except PatchkitError as exc:
        raise BadInput(f"{wheel.label}: {exc.message}") from None


def _member(wheel: StockWheel, name: str) -> rawzip.Member:
    member = wheel.member(name)
    if member is None:
        raise BadInput(f"{wheel.label} has no {name}; refusing the wheel")
    return member


def _record(entries: list[rawzip.Entry], record_name: str) -> bytes:
    """RECORD: every member's hash and size, RECORD's own row empty (directories have none)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for entry in entries:
        if not entry.name.endswith("/"):
            writer.writerow([entry.name, entry.digest, entry.file_size])
    writer.writerow([record_name, "", ""])
    return out.getvalue().encode("utf-8")


def _relabelled(metadata: bytes, version: str, label: str) -> bytes:
    """METADATA with its Version header (the first, in the header block) set to `version`."""
    lines = metadata.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.strip():
            break  # the headers end at the first blank line
        if line.lower().startswith(b"version:"):
            ending = line[len(line.rstrip(b"\r\n")) :]
            lines[i] = b"Version: " + version.encode() + ending
            return b"".join(lines)
    raise BadInput(f"{label}: its METADATA has no Version header")


def _provenance(
    wheel: StockWheel, changes: dict[str, tuple[bytes | None, bytes | None]], result: WheelResult
) -> Provenance:
    assert result.label is not None
    files = {path: FileRecord(_sha256(before), _sha256(after)) for path, (before, after) in changes.items()}
    if result.sets:  # each set's patches in a folder of its own: names may repeat across sets
        sets = tuple(
            SetRecord(name, tuple(PatchRecord(p.name, p.sha256) for p in patches)) for name, patches in result.sets
        )
        return Provenance.of_sets(__version__, str(wheel.version), result.label, sets, files)
    names = [p.name for p in result.patches]
    if len(set(names)) != len(names):
        raise BadInput(
            "two patches share a file name: the wheel keeps each under its name",
            hint="rename one of the --patch files",
        )
    return Provenance(
        patchkit=__version__,
        vllm_version=str(wheel.version),
        label=result.label,
        set_name=result.set_name,
        patches=tuple(PatchRecord(p.name, p.sha256) for p in result.patches),
        files=files,
    )


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()
