"""The launch checks' reads outside the tree (a drafter's weights headers and index, its directory's
listings, a hub cache ref, a redirect file), each kept as a question and its answer while a recording
is on, so that `run`'s kept findings (patchkit/launch/shortcut.py) answer only while every question
gets the answer it got: a file read is its bytes' sha256, a listing its names, a test its truth.

Outside a recording each call is the plain operation. A question's path is made absolute against
the working directory when it is recorded: the key of a kept entry names that directory too.
"""

from __future__ import annotations

import glob as globbing
import hashlib
import itertools
import json
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from patchkit.base.fsutil import read_regular as _read_regular

# the recordings under way, innermost last (one while `run` finds a set's launch findings)
_ACTIVE: list[dict[str, str]] = []


@contextmanager
def recording() -> Iterator[dict[str, str]]:
    """Every question asked here while it lasts, as question -> the digest of its answer."""
    seen: dict[str, str] = {}
    _ACTIVE.append(seen)
    try:
        yield seen
    finally:
        _ACTIVE.remove(seen)


def noted(question: str, args: list[object], answer: object) -> None:
    """A question answered elsewhere (LaunchContext's: a distribution's METADATA), its `answer` kept
    while recording; holds() asks it again through the `asked` it is given."""
    if _ACTIVE:
        _ACTIVE[-1][json.dumps([question, *args])] = _digest(answer)


def isdir(path: str | os.PathLike[str]) -> bool:
    return bool(_asked("isdir", _path(path)))


def isfile(path: str | os.PathLike[str]) -> bool:
    return bool(_asked("isfile", _path(path)))


def exists(path: str | os.PathLike[str]) -> bool:
    return bool(_asked("exists", _path(path)))


def lexists(path: str | os.PathLike[str]) -> bool:
    return bool(_asked("lexists", _path(path)))


def regular(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a regular file, symlinks followed; OSError as os.stat raises it."""
    return bool(_asked("regular", _path(path)))


def glob(pattern: str) -> list[str]:
    """glob.glob(pattern)'s names, sorted (glob's own order is the directory's)."""
    found = _asked("glob", _path(pattern))
    return [_as_given(pattern, name) for name in found] if isinstance(found, list) else []


def walk(directory: str, limit: int) -> list[tuple[str, list[str]]]:
    """(directory, its file names) of os.walk(directory), in its order, until more than `limit`
    entries were seen (the last pair then the one past it)."""
    found = _asked("walk", _path(directory), limit)
    return [(_as_given(directory, place), list(names)) for place, names in found] if isinstance(found, list) else []


def listing(directory: str | os.PathLike[str], limit: int) -> list[str]:
    """The names of the first `limit` entries os.scandir(directory) gives, sorted; OSError as scandir
    raises it (not a directory, gone). Never blocks: a fifo or device is no directory."""
    found = _asked("listing", _path(directory), limit)
    return list(found) if isinstance(found, list) else []


def read_regular(
    path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = False, head: bool = False
) -> bytes:
    """fsutil.read_regular, its bytes (or what it raised) recorded."""
    data = _asked("read", _path(path), limit, follow_symlinks, head)
    return data if isinstance(data, bytes) else b""


def holds(seen: object, asked: dict[str, Callable[..., object]] | None = None) -> bool:
    """Whether each question `seen` (a recording, untrusted) holds gets the answer it got: asked
    again here, or through `asked` for a question noted elsewhere."""
    if not isinstance(seen, dict):
        return False
    for question, digest in seen.items():
        kind, *args = json.loads(question)
        ask = (asked or {}).get(kind) or _ASKED.get(kind)
        if ask is None:
            return False
        try:
            answer: object = ask(*args)
        except (OSError, ValueError) as exc:
            answer = _raised(exc)
        if _digest(answer) != digest:
            return False
    return True


def _path(path: str | os.PathLike[str]) -> str:
    """`path` as a str, absolute when it is recorded (the working directory may differ next time)."""
    text = os.fspath(path)
    return os.path.join(os.getcwd(), text) if _ACTIVE and not os.path.isabs(text) else text


def _as_given(asked: str, name: str) -> str:
    """A name an absolute question gave, as the relative one `asked` would have given it."""
    if os.path.isabs(asked) or not _ACTIVE:
        return name
    return name.removeprefix(os.path.join(os.getcwd(), ""))


def _asked(kind: str, *args: object) -> object:
    """The answer of `kind`'s operation on `args`, recorded while a recording is on; what it raised
    is raised again, after it is recorded."""
    if not _ACTIVE:
        return _ASKED[kind](*args)
    question = json.dumps([kind, *args])
    try:
        answer = _ASKED[kind](*args)
    except (OSError, ValueError) as exc:
        _ACTIVE[-1][question] = _digest(_raised(exc))
        raise
    _ACTIVE[-1][question] = _digest(answer)
    return answer


def _raised(exc: BaseException) -> list[object]:
    return ["raised", type(exc).__name__, getattr(exc, "errno", None)]


def _digest(answer: object) -> str:
    if isinstance(answer, bytes):
        return "bytes:" + hashlib.sha256(answer).hexdigest()
    return hashlib.sha256(json.dumps(answer, sort_keys=True, default=repr).encode()).hexdigest()


def _regular(path: str) -> bool:
    return stat.S_ISREG(os.stat(path).st_mode)


def _globbed(pattern: str) -> list[str]:
    return sorted(globbing.glob(pattern))


def _walked(directory: str, limit: int) -> list[tuple[str, list[str]]]:
    found, seen = [], 0
    for place, _, files in os.walk(directory):
        found.append((place, sorted(files)))
        seen += len(files) + 1
        if seen > limit:
            break
    return found


def _listed(directory: str, limit: int) -> list[str]:
    with os.scandir(directory) as entries:
        return sorted(entry.name for entry in itertools.islice(entries, limit))


def _read(path: str, limit: int, follow_symlinks: bool, head: bool) -> bytes:
    return _read_regular(path, limit, follow_symlinks=follow_symlinks, head=head)


_ASKED: dict[str, Callable[..., object]] = {
    "isdir": os.path.isdir,
    "isfile": os.path.isfile,
    "exists": os.path.exists,
    "lexists": os.path.lexists,
    "regular": _regular,
    "glob": _globbed,
    "walk": _walked,
    "listing": _listed,
    "read": _read,
}
