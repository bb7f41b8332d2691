"""A wheel's RECORD (path, hash, size per file) and where patchkit caches fetched releases.

Kept apart from `fetch` so that the checks can read a RECORD without loading the fetcher.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import os
from pathlib import Path

from patchkit.errors import FetchError

# The hashes a wheel's RECORD may use: "sha256 or better" (the binary distribution format spec;
# md5 and sha1 are not permitted). An entry with any other algorithm is not evidence of anything.
HASHES = frozenset({"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s"})


def cache_dir() -> Path:
    """$PATCHKIT_CACHE_DIR if set, else the platform's user cache dir for patchkit."""
    env = os.environ.get("PATCHKIT_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("patchkit"))


def parse_record(data: bytes) -> dict[str, tuple[str, str]]:
    """RECORD rows as ``{path: (hash, size)}``."""
    out = {}
    try:
        text = data.decode("utf-8")
        for row in csv.reader(io.StringIO(text)):
            if row:
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


def find_record(tree: Path, version=None) -> Path | None:
    """The vllm-*.dist-info/RECORD of a tree; of several, the one of `version` if it is there."""
    candidates = sorted(tree.glob("vllm-*.dist-info/RECORD"))
    exact = [c for c in candidates if version is not None and c.parent.name == f"vllm-{version}.dist-info"]
    return next(iter(exact or candidates), None)


UNUSED_DAYS = 30  # a cache entry nothing read for this long is removed


def touch(path: Path) -> None:
    """Mark a cache entry as used (pruning goes by modification time)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def prune(directory: Path, *, unused_days: float = UNUSED_DAYS, every_hours: float = 24) -> int:
    """Remove the entries under a cache directory that nothing used for `unused_days`; walks the
    directory at most once per `every_hours` (a marker file says when). Returns how many went."""
    import time

    marker = directory / ".pruned"
    now = time.time()
    try:
        if now - marker.stat().st_mtime < every_hours * 3600:
            return 0
    except FileNotFoundError:
        pass
    except OSError:
        return 0
    removed = 0
    for dirpath, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                if name != marker.name and now - os.stat(path).st_mtime > unused_days * 86400:
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
    try:
        directory.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass
    return removed
