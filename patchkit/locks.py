"""The one file lock patchkit takes (a target's, a cached release's): filelock's FileLock, which
dies with its process, so a killed patchkit never blocks the next one.

The caller says what a failure means in its own terms: `busy` makes the error for a lock still
held after the timeout, `unusable` the one for a lock file that cannot be made or locked.
filelock is imported only when a lock is taken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from filelock import BaseFileLock

# With an `on_wait` notice, how long to try quietly first: most locks are free or soon freed.
QUIET_WAIT = 0.2


def acquire(
    path: Path,
    timeout: float,
    *,
    busy: Callable[[float], Exception],
    unusable: Callable[[OSError], Exception],
    on_wait: Callable[[], None] | None = None,
) -> BaseFileLock:
    """Take the lock file `path`, waiting up to `timeout` seconds; the caller releases it.

    `on_wait` is called once when the lock is not free within QUIET_WAIT seconds (to say why
    nothing happens), before the wait of `timeout`."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path))
    try:
        if on_wait is None:
            lock.acquire(timeout=timeout)
        elif not _try(lock, QUIET_WAIT):
            on_wait()
            lock.acquire(timeout=timeout)
    except Timeout as exc:
        raise busy(timeout) from exc
    except OSError as exc:
        raise unusable(exc) from exc
    return lock


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
    from filelock import Timeout

    try:
        lock.acquire(timeout=seconds)
    except Timeout:
        return False
    return True
