"""Seals for what patchkit keeps in places others can write: an HMAC with a key of this user's.

The key lives in the user's state directory (platformdirs; never in patchkit's cache, which CI
restores from other runs), created on first use, mode 0600. Whoever lacks it cannot make an entry
that verifies, so a cache restored from elsewhere, or edited, is never believed: it is only a
shortcut for results this user's patchkit made. A fresh machine (a new CI runner) has a new key,
and the cache it restored is simply computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from functools import cache
from pathlib import Path

import platformdirs

from patchkit.base.fsutil import json_text

KEY_BYTES = 32
KEY_FILE = "cache-seal.key"


def key_path() -> Path:

    return Path(platformdirs.user_state_dir("patchkit")) / KEY_FILE


_unusable: list[tuple[str, str]] = []  # why this run's key is a throw-away one, and what fixes it


def unusable_key() -> str | None:
    """Why the key file was not used this run (what it sealed is computed again each time), if so."""
    return _unusable[0][0] if _unusable else None


def unusable_fix() -> str | None:
    """What makes the key file usable (a command or a step), when unusable_key() says why it is not."""
    return _unusable[0][1] if _unusable else None


@cache
def _key() -> bytes:
    """This user's key; a key that cannot be kept (no writable state directory) lives for this run
    only: what it seals is computed again next time."""
    path = key_path()
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        _unusable.append(_problem(path, exc, "use"))
        return secrets.token_bytes(KEY_BYTES)
    try:
        return _create_key(path)
    except OSError as exc:
        _unusable.append(_problem(path, exc, "create"))
        return secrets.token_bytes(KEY_BYTES)


def _problem(path: Path, exc: OSError, doing: str) -> tuple[str, str]:
    """Why the key file cannot be used, and the fix: its mode (a file that is there), or its directory."""
    if os.path.lexists(path) and not os.path.isdir(path):
        return str(exc), f"`chmod 600 {path}` if only you could read it, else remove it"
    why = f"cannot {doing} {exc.filename or path}: {exc.strerror or exc}"
    return why, f"make {path.parent} a directory you can write (or set XDG_STATE_HOME to one that is)"


def _read_key(path: Path) -> bytes:
    """The key file: a regular file of this user's, not a symlink, readable by nobody else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    private = info.st_mode & 0o077 == 0 and info.st_uid == os.getuid()
    if not (private and len(data) == KEY_BYTES):
        mode = f"mode {info.st_mode & 0o777:04o}, owner uid {info.st_uid}, {len(data)} bytes"
        raise OSError(f"{path} is not a private {KEY_BYTES}-byte key of this user's ({mode})")
    return data


def _create_key(path: Path) -> bytes:
    """A new key, written whole before it appears (link(2) fails if another process made one first)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the key
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key(path)


def key_id() -> bytes:
    """Which key seals now (a digest of it, not the key): a verdict remembered under it is this key's."""
    return hashlib.sha256(_key()).digest()


def canonical(data: object) -> bytes:
    """The bytes a JSON value is sealed as: one spelling, whatever its key order or spacing."""
    return json_text(data, "sealed data", sort_keys=True, separators=(",", ":")).encode()


def seal(kind: str, name: str, payload: bytes) -> str:
    """The seal of one entry: its kind (which cache), its name (its key there) and its content."""
    message = kind.encode() + b"\0" + name.encode("utf-8", "surrogateescape") + b"\0" + payload  # a path of any bytes
    return hmac.new(_key(), message, hashlib.sha256).hexdigest()


def sealed(kind: str, name: str, payload: bytes, mark: object) -> bool:
    """Whether `mark` is the seal of this entry (made with this user's key)."""
    return isinstance(mark, str) and hmac.compare_digest(mark, seal(kind, name, payload))
