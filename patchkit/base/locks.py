"""The one file lock patchkit takes (a target's, a cached release's): filelock's FileLock, which
dies with its process, so a killed patchkit never blocks the next one.

The caller says what a failure means in its own terms: `busy` makes the error for a lock still
held after the timeout, `unusable` the one for a lock file that cannot be made or locked.
filelock is imported only when a lock is taken.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.base import signals
from patchkit.base.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    from filelock import BaseFileLock

# With an `on_wait` notice, how long to try quietly first: most locks are free or soon freed.
QUIET_WAIT = 0.2
# The longest wait a PATCHKIT_*_TIMEOUT may ask for: the OS's timers overflow long before inf.
MAX_SECONDS = 86400.0


def seconds_from_env(name: str, default: float, *, zero_ok: bool = False) -> float:
    """A wait in seconds from the environment variable `name` (unset or empty: `default`).

    Anything but a finite number from 0 (only with `zero_ok`: do not wait) to MAX_SECONDS is BadInput
    naming the variable: "abc", a negative number, inf and nan included."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    low_ok = value >= 0 if zero_ok else value > 0
    if not (low_ok and value <= MAX_SECONDS):
        least = "0" if zero_ok else "more than 0"
        raise BadInput(f"{name}={text!r} is not a number of seconds from {least} to {MAX_SECONDS:g}")
    return value


def acquire(
    path: Path,
    timeout: float,
    *,
    busy: Callable[[float], Exception],
    unusable: Callable[[OSError], Exception],
    on_wait: Callable[[], None] | None = None,
    prepare: Callable[[], None] | None = None,
) -> BaseFileLock:
    """Take the lock file `path`, waiting up to `timeout` seconds; the caller releases it.

    `on_wait` is called once when the lock is not free within QUIET_WAIT seconds (to say why
    nothing happens), before the wait of `timeout`. A lock file its holder removed while this one
    waited (a revert that leaves nothing recorded removes .patchkit/) is no lock: `prepare` (which
    makes its directory) runs again and the file there now is locked."""
    # lazy: a lock's library loads only when a lock is taken
    from filelock import FileLock, Timeout

    deadline = time.monotonic() + timeout
    while True:
        if prepare is not None:
            prepare()
        lock = FileLock(str(path))
        try:
            if on_wait is None:
                lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
            elif not _try(lock, QUIET_WAIT):
                on_wait()
                on_wait = None
                lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        except Timeout as exc:
            raise busy(timeout) from exc
        except FileNotFoundError as exc:  # its directory went while this one waited: made again
            if prepare is None or time.monotonic() >= deadline:
                raise unusable(exc) from exc
            continue
        except OSError as exc:
            raise unusable(exc) from exc
        except BaseException as exc:  # a double Ctrl-C in the take: raised as the interrupt it is
            interrupt = signals.grouped_interrupt(exc)
            if interrupt is None:
                raise
            raise interrupt from None
        if _still_the_file(lock, path):
            return lock
        lock.release()


def directory_in_the_way(path: Path) -> str | None:
    """Where the lock file `path` goes, a directory (no permission fixes that: patchkit never makes
    one there): the error's words and how it goes, or None."""
    if not path.is_dir() or path.is_symlink():
        return None
    try:
        empty = not any(path.iterdir())
    except OSError:
        empty = False
    remove = (
        f"`rmdir -- {shlex.quote(str(path))}`" if empty else f"`rm -r -- {shlex.quote(str(path))}` (inspect it first)"
    )
    return f"{path} is a directory where patchkit keeps its lock file (patchkit made no such directory): remove it with {remove}"


def holder(path: Path) -> str:
    """'; held by pid N: its command line' for the process that holds an flock on the file `path`, as
    Linux's /proc/locks lists it; '' where that cannot be told (another OS, the holder gone)."""
    try:
        inode = str(os.stat(path).st_ino)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read(1 << 20).splitlines()
    except OSError:
        return ""
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 4242 08:01:131 0 EOF"; a waiter's has "->"
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rpartition(":")[2] == inode:
            pid = parts[4]
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    argv = fh.read(4096).decode(errors="replace").split("\0")
            except OSError:
                argv = []
            shown = " ".join(word for word in argv if word)
            return f"; held by pid {pid}" + (f": {shown[:100]}" if shown else "")
    return ""


def _still_the_file(lock: BaseFileLock, path: Path) -> bool:
    """Whether the file `lock` holds is still the one at `path` (not removed or replaced since)."""
    context = getattr(lock, "_context", None)  # filelock keeps the descriptor there (3.12 to 4.x)
    fd = getattr(context, "lock_file_fd", None)
    if not isinstance(fd, int):
        return True  # nothing to compare: as before this check
    try:
        held, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


@contextmanager
def held(
    path: Path,
    timeout: float,
    *,
    busy: Callable[[float], Exception],
    unusable: Callable[[OSError], Exception],
    on_wait: Callable[[], None] | None = None,
) -> Iterator[None]:
    """acquire() for the duration of a `with` block."""
    lock = acquire(path, timeout, busy=busy, unusable=unusable, on_wait=on_wait)
    try:
        yield
    finally:
        lock.release()


def _try(lock: BaseFileLock, seconds: float) -> bool:
    try:
        lock.acquire(timeout=seconds)
    except TimeoutError:  # filelock's Timeout is one (filelock >= 3.12)
        return False
    return True
