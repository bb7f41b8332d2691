"""A wheel's RECORD (path, hash, size per file) and where patchkit caches fetched releases.

Kept apart from `fetch` so that the checks can read a RECORD without loading the fetcher.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import errno
import hashlib
import io
import os
import re
import stat
import sys
import time
from collections.abc import Collection
from pathlib import Path

import platformdirs

from patchkit import fsutil
from patchkit.errors import FetchError

# The hashes a wheel's RECORD may use: "sha256 or better" (the binary distribution format spec;
# md5 and sha1 are not permitted). An entry with any other algorithm is not evidence of anything.
HASHES = frozenset({"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s"})


def cache_dir() -> Path:
    """$PATCHKIT_CACHE_DIR if set, else the platform's user cache dir for patchkit."""
    env = os.environ.get("PATCHKIT_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()

    return Path(platformdirs.user_cache_dir("patchkit"))


def parse_record(data: bytes, only: Collection[str] | None = None) -> dict[str, tuple[str, str]]:
    """RECORD rows as ``{path: (hash, size)}``; with `only`, just the rows of those paths (a check
    of a few files need not build vLLM's ~5,000 rows: csv reads them all in C, the rest is Python)."""
    out = {}
    try:
        text = data.decode("utf-8")
        for row in csv.reader(io.StringIO(text)):
            if row and (only is None or row[0] in only):
                row = [*row, "", ""]
                out[row[0]] = (row[1], row[2])
    except (UnicodeDecodeError, csv.Error) as e:
        raise FetchError(f"cannot parse the wheel's RECORD: {e}", hint="the wheel looks malformed") from None
    return out


def record_hash(data: bytes, algo: str = "sha256") -> str:
    """``algo=<urlsafe-b64 digest without padding>``, as written in RECORD; ValueError for an
    algorithm wheels do not allow (not in HASHES)."""
    if algo not in HASHES:
        raise ValueError(f"{algo!r} is not a hash a wheel's RECORD may use ({allowed_hashes()})")
    return record_digest(hashlib.new(algo, data).digest(), algo)


def record_algorithm(entry: str) -> str:
    """The algorithm a RECORD hash entry names ("sha256=..." -> "sha256")."""
    return entry.partition("=")[0]


def allowed_hashes() -> str:
    return "sha256 or stronger: " + ", ".join(sorted(HASHES))


def record_digest(digest: bytes, algo: str) -> str:
    """A digest as RECORD writes it."""
    return f"{algo}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# In a dist-info: the provenance of a wheel patchkit built (patchkit.provenance writes and reads it).
PROVENANCE = "patchkit.json"


def has_provenance(tree: Path) -> bool:
    """Whether a vllm-*.dist-info in the tree holds a provenance file (a symlink counts): the cheap
    test made before patchkit.installed_wheel is loaded, for most trees are stock installs."""
    return any(os.path.lexists(d / PROVENANCE) for d in tree.glob("vllm-*.dist-info"))


def find_record(tree: Path, version=None) -> Path | None:
    """The vllm-*.dist-info/RECORD of a tree; of several, the one of `version` if it is there."""
    candidates = sorted(tree.glob("vllm-*.dist-info/RECORD"))
    exact = [c for c in candidates if version is not None and c.parent.name == f"vllm-{version}.dist-info"]
    return next(iter(exact or candidates), None)


RECORD_LIMIT = 64 << 20  # vLLM's RECORD is ~300 kB


def read_record_file(tree: Path, path: Path) -> bytes:
    """A RECORD's bytes (find_record's answer): a regular file of at most RECORD_LIMIT bytes, in a
    real dist-info directory of `tree`; fsutil.NotRegularFile for a symlink, a fifo, a device, a
    symlinked dist-info or a file too large (the tree is untrusted input: never hang, never follow)."""

    if not fsutil.plain_directory(tree, path.parent):
        raise fsutil.NotRegularFile(errno.ELOOP, f"{path.parent.name} is not a plain directory (a symlink?)", str(path))
    return fsutil.read_regular(path, RECORD_LIMIT)


def listed_by_other_distributions(tree: Path, paths: Collection[str]) -> set[str]:
    """Those of `paths` outside vllm/ that another installed distribution's RECORD lists (torch's,
    a user's package's): files of theirs, never patchkit's to delete. A RECORD that cannot be read
    plainly lists nothing (the tree is untrusted input: bounded, no symlink followed)."""
    wanted = {p for p in paths if p.split("/", 1)[0] != "vllm"}
    listed: set[str] = set()
    if not wanted:
        return listed
    for record in sorted(tree.glob("*.dist-info/RECORD")):
        if record.parent.name.startswith(("vllm-", "patchkit_guard-")):
            continue
        try:
            listed |= wanted & parse_record(read_record_file(tree, record), only=wanted).keys()
        except (OSError, FetchError):
            continue
    return listed


UNUSED_DAYS = 30  # a cache entry nothing read for this long is removed


# The names patchkit gives cache entries: a hex digest with ".json", and atomic_write's
# temporary files for one. prune() deletes nothing else (a cache directory is untrusted input).
_ENTRY_NAME = re.compile(r"(\.)?[0-9a-f]{64}\.json(\.patchkit-[0-9a-f]{8}\.tmp)?")


def touch(path: Path) -> None:
    """Mark a cache entry as used (pruning goes by modification time); a symlink itself at most."""
    with contextlib.suppress(OSError, NotImplementedError):
        os.utime(path, follow_symlinks=False)


def prune(directory: Path, *, unused_days: float = UNUSED_DAYS, every_hours: float = 24) -> int:
    """Remove the entries under a cache directory that nothing used for `unused_days`; walks the
    directory at most once per `every_hours` (a marker file says when). Returns how many went.
    Only regular files named as patchkit names its entries go; a symlink is never followed (not
    `directory` itself, not one below it, not the marker)."""

    marker = directory / ".pruned"
    now = time.time()
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return 0
        info = os.lstat(marker)
        if stat.S_ISREG(info.st_mode) and now - info.st_mtime < every_hours * 3600:
            return 0
    except FileNotFoundError:
        pass
    except OSError:
        return 0
    removed = 0
    for dirpath, _dirs, files in os.walk(directory):  # followlinks=False: symlinked dirs not entered
        for name in files:
            path = os.path.join(dirpath, name)
            if name == marker.name or not _ENTRY_NAME.fullmatch(name):
                continue
            try:
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode) and now - info.st_mtime > unused_days * 86400:
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
    _mark(directory, marker)
    return removed


def _mark(directory: Path, marker: Path) -> None:
    """Create or touch the prune marker, never through a symlink."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if marker.is_symlink():
            marker.unlink()  # the link itself, never what it points at
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        os.close(fd)
        os.utime(marker, follow_symlinks=False)
    except OSError:
        pass


_NOTED: set[str] = set()


def usable_cache_dir(directory: Path) -> bool:
    """Whether patchkit may write into and prune `directory`, a directory of its cache: a real
    directory inside the cache (no symlink between the cache root and it). If not, the cache is not
    used for this run, with a note on stderr (once); it is never written or pruned through."""

    if fsutil.plain_directory(cache_dir(), directory):
        return True
    if str(directory) not in _NOTED:
        _NOTED.add(str(directory))
        with contextlib.suppress(OSError, ValueError):
            print(
                f"note: {directory} is not a plain directory inside patchkit's cache (a symlink?): "
                "the cache is not used for this run",
                file=sys.stderr,
            )
    return False
