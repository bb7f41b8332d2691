"""A wheel's RECORD (path, hash, size per file) and where patchkit caches fetched releases.

Kept apart from `fetch` so that the checks can read a RECORD without loading the fetcher.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
from pathlib import Path

from patchkit.errors import FetchError

HASHES = {"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s"}


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
                row = row + ["", ""]
                out[row[0]] = (row[1], row[2])
    except (UnicodeDecodeError, csv.Error) as e:
        raise FetchError(f"cannot parse the wheel's RECORD: {e}", hint="the wheel looks malformed") from None
    return out


def record_hash(data: bytes, algo: str = "sha256") -> str:
    """``algo=<urlsafe-b64 digest without padding>``, as written in RECORD."""
    digest = hashlib.new(algo, data).digest()
    return f"{algo}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
