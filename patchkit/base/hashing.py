"""sha256 of contents and open files: a large content hashed once per run, on a thread beside the work."""

from __future__ import annotations

import hashlib
import threading
from typing import Any, BinaryIO


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


def stream_sha256(fh: BinaryIO) -> str:
    """The sha256 of what is left to read in an open binary file."""
    if hasattr(hashlib, "file_digest"):
        found: str = hashlib.file_digest(fh, "sha256").hexdigest()  # 3.11+: unknown to mypy at 3.10
        return found
    digest = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()
