"""patchkit's cache in the user's cache directory: where it is, which of its directories may be
used, and the pruning of entries nothing used for a while."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from pathlib import Path

import platformdirs

from patchkit.base import fsutil, notes


def cache_dir() -> Path:
    """$PATCHKIT_CACHE_DIR if set, else the platform's user cache dir for patchkit."""
    env = os.environ.get("PATCHKIT_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    # asked ~20 times a dry run: platformdirs' answer is kept while what it reads stays the same
    key = tuple(os.environ.get(name) for name in _PLATFORM_DIRS_READ)
    found = _USER_CACHE.get(key)
    if found is None:
        found = _USER_CACHE[key] = Path(platformdirs.user_cache_dir("patchkit"))
    return found


# The environment platformdirs reads for the user cache directory (Linux, macOS, Windows)
_PLATFORM_DIRS_READ = ("XDG_CACHE_HOME", "HOME", "USERPROFILE", "LOCALAPPDATA")
_USER_CACHE: dict[tuple[str | None, ...], Path] = {}


UNUSED_DAYS = 30  # a cache entry nothing read for this long is removed


# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
# The names patchkit gives cache entries: a hex digest with ".json", and atomic_write's
# temporary files for one. prune() deletes nothing else (a cache directory is untrusted input).
_ENTRY_NAME = r"(\.)?[0-9a-f]{64}\.json(\.patchkit-[0-9a-f]{8}\.tmp)?"


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
            if name == marker.name or not re.compile(_ENTRY_NAME).fullmatch(name):
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

    root = cache_dir()
    if fsutil.plain_directory(root, directory):
        return True
    said = _not_usable(root, directory)
    if said not in _NOTED:  # the cache root itself: one note for every directory of it
        _NOTED.add(said)
        notes.say(f"note: {said}: the cache is not used for this run")
    return False


def _not_usable(root: Path, directory: Path) -> str:
    """Why `directory` of the cache at `root` is not used: the root is no directory (a file, a
    device: PATCHKIT_CACHE_DIR=/dev/null), or a part of the way down is a symlink or no directory."""
    named = f"PATCHKIT_CACHE_DIR={root}" if os.environ.get("PATCHKIT_CACHE_DIR", "").strip() else f"the cache {root}"
    try:
        if not stat.S_ISDIR(os.stat(root).st_mode):
            return f"{named} is not a directory"
    except FileNotFoundError:
        pass  # made when first written
    except OSError as exc:
        return f"{named} cannot be used ({exc.strerror or exc})"
    current = root
    for part in directory.relative_to(root).parts if directory.is_relative_to(root) else ():
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            break
        if stat.S_ISLNK(mode):
            return f"{current} is a symlink inside patchkit's cache"
        if not stat.S_ISDIR(mode):
            return f"{current} is not a directory inside patchkit's cache"
    return f"{directory} is not a plain directory inside patchkit's cache"
