"""The distributions importlib.metadata finds on a path, and the entry points it reads from them.

vLLM loads its plugins with `importlib.metadata.entry_points(group=...)`, so patchkit finds them the
same way: a path entry's children whose name, lower-cased, ends in .dist-info or .egg-info (an
`EGG-INFO` inside a *.egg directory), symlinks followed; one distribution per normalized name, the
first on the path; each entry_points.txt parsed by importlib.metadata itself. What differs: every
file is read bounded and never blocking (it is untrusted input), and importlib.metadata is loaded
only when a file could declare an entry point the caller does not pass over (the `ignored` test),
which keeps it (and the email package) out of `run`'s fast path.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.base.fsutil import NotRegularFile, read_regular
from patchkit.tree.version import metadata_headers

if TYPE_CHECKING:
    import importlib.metadata

SUFFIXES = (".dist-info", ".egg-info")
ENTRY_POINTS_LIMIT = 16 << 20  # an entry_points.txt: 30,000 console scripts take 1.5 MB
METADATA_LIMIT = 1 << 20  # METADATA read for a distribution's name (its long description included)
LISTING_LIMIT = 20000  # entries of one directory looked at for distributions
PTH_LIMIT = 1 << 20  # a .pth file
# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
# importlib.metadata.EntryPoint.pattern (the same in Python 3.10-3.13): what `value` names
_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"


class Found:
    """What group_entry_points found (a plain class: a dataclass costs `run`'s start-up more)."""

    def __init__(self) -> None:
        self.names: list[str] = []  # entry point names, in the order importlib gives them
        # entry_points.txt files importlib would hang on, fill memory with or raise on: (path, what it is)
        self.unreadable: list[tuple[str, str]] = []


class Unreadable(Exception):
    """A file of a distribution that cannot be read as importlib.metadata would read it: its message
    says what the file is and what vLLM's plugin loader (importlib.metadata) would do with it."""


LOADER = "vLLM's plugin loader (importlib.metadata, at every start)"


def metadata_directories(entry: str) -> list[str]:
    """The metadata directories importlib.metadata's path finder finds in the path entry `entry`
    (importlib.metadata.Lookup): grouped by normalized name, in the listing's order, eggs last."""
    base = os.path.basename(entry).lower()
    try:
        with os.scandir(entry) as listed:
            children = [e.name for e in itertools.islice(listed, LISTING_LIMIT)]
    except OSError:  # not a directory (a zip on the path: not read), gone, closed
        return []
    infos: dict[str, list[str]] = {}
    eggs = []
    for child in children:
        low = child.lower()
        if low.endswith(SUFFIXES):
            infos.setdefault(normalize(low.rpartition(".")[0].partition("-")[0]), []).append(child)
        elif base.endswith(".egg") and low == "egg-info":
            eggs.append(child)
    return [os.path.join(entry, child) for child in [*itertools.chain(*infos.values()), *eggs]]


def normalize(name: str) -> str:
    """importlib.metadata's Prepared.normalize (PEP 503, with underscores)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def group_entry_points(places: Iterable[str], group: str, ignored: Callable[[str], bool]) -> Found:
    """The names of the entry points in `group` importlib.metadata.entry_points() finds with
    `places` as sys.path, but those whose module `ignored` passes over; and the entry_points.txt
    files it would fail on (a fifo or device: it hangs or fills memory; too large to read here; not
    UTF-8 or not parsable: it raises). An entry whose value names no module is left out (vLLM logs it and loads nothing)."""
    found = Found()
    seen: set[str] = set()
    for info in (i for place in dict.fromkeys(places) for i in metadata_directories(place)):
        name = _distribution_name(info)
        if name is not None and name in seen:
            continue  # importlib's entry_points() reads the first distribution of a name only
        seen |= {name} if name is not None else set()
        try:
            found.names += _declared_names(info, group, ignored)
        except Unreadable as exc:
            found.unreadable.append((os.path.join(info, "entry_points.txt"), str(exc)))
    return found


def named_entry_points(places: Iterable[str], group: str, name: str) -> list[tuple[str, str]]:
    """(the distribution's metadata directory, the value) of each entry point called `name` in
    `group`, in the order importlib.metadata.entry_points() gives them with `places` as sys.path (one
    distribution per normalized name, the first). vLLM keeps its plugins in a dict by name: the last
    one is the one it runs. A file importlib cannot read is passed over (group_entry_points says it)."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for info in (i for place in dict.fromkeys(places) for i in metadata_directories(place)):
        distribution = _distribution_name(info)
        if distribution is not None and distribution in seen:
            continue
        seen |= {distribution} if distribution is not None else set()
        try:
            text = _read_text(info, "entry_points.txt", ENTRY_POINTS_LIMIT)
            found += [(info, value) for value in _values_of(text, group, name)] if text and name in text else []
        except (Unreadable, ValueError):
            continue
    return found


def distribution_headers(places: Iterable[str], name: str) -> list[tuple[str, str]] | None:
    """The METADATA headers (key, value), in order, of the distribution `name` importlib.metadata
    finds first with `places` as sys.path (what its version() reads); None when there is none or its
    METADATA cannot be read. Untrusted: read bounded, never blocking, the values not checked here."""
    wanted = normalize(name)
    for info in (i for place in dict.fromkeys(places) for i in metadata_directories(place)):
        if _distribution_name(info) != wanted:
            continue
        try:
            text = _read_text(info, "METADATA", METADATA_LIMIT) or _read_text(info, "PKG-INFO", METADATA_LIMIT)
        except Unreadable:
            return None
        return None if text is None else metadata_headers(text)
    return None


def _values_of(text: str, group: str, name: str) -> list[str]:
    """The values of the entry points called `name` in `group` of an entry_points.txt, read line by
    line as importlib.metadata's Sectioned reads it (its parser, without loading importlib.metadata
    and email on `run`'s fast path): ValueError where it raises (a line of a section without `=`)."""
    section, found = None, []
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        key, equals, value = line.partition("=")
        if not equals:
            raise ValueError(f"no '=' in {line!r}")
        if section == group and key.strip() == name:
            found.append(value.strip())
    return found


def _declared_names(info: str, group: str, ignored: Callable[[str], bool]) -> list[str]:
    text = _read_text(info, "entry_points.txt", ENTRY_POINTS_LIMIT)
    if text is None or _none_to_read(text, group, ignored):
        return []
    try:
        points = parse_entry_points(text).select(group=group)
    except (ValueError, TypeError) as exc:  # a line without `=`: importlib raises, vLLM loads no plugin
        raise Unreadable(f"not an entry-point file ({exc}): {LOADER} raises on it") from None
    return [p.name for p in points if (module := _module(p.value)) is not None and not ignored(module)]


def _none_to_read(text: str, group: str, ignored: Callable[[str], bool]) -> bool:
    """Whether importlib.metadata reads `text` without an error and finds no entry point of another
    module in `group` there: each line it reads (stripped, neither blank nor a comment) is a section
    or `name = value`, and `group` is named nowhere, or every value names an ignored module. When not
    sure, False: importlib.metadata then reads it."""
    named = group in text
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or line.startswith("#") or (line.startswith("[") and line.endswith("]")):
            continue
        _, equals, value = line.partition("=")
        module = _module(value.strip())
        if not equals or (named and (module is None or not ignored(module))):
            return False
    return True


def _module(value: str) -> str | None:
    match = re.compile(_VALUE).match(value)
    return match["module"] if match else None


def parse_entry_points(text: str) -> importlib.metadata.EntryPoints:
    """An entry_points.txt's entry points, parsed by importlib.metadata itself."""
    return _text_distribution()(text, "entry_points.txt").entry_points


def _read_text(info: str, name: str, limit: int) -> str | None:
    """A distribution's file as importlib.metadata's read_text gives it (UTF-8; None when absent or
    closed), read bounded; Unreadable for what importlib would hang on, fill memory with or raise on."""
    path = os.path.join(info, name)
    try:
        return read_regular(path, limit, follow_symlinks=True).decode("utf-8")
    except NotRegularFile as exc:
        if exc.errno in (20, 21):  # ENOTDIR, EISDIR: importlib's read_text gives None
            return None
        return _not_regular(path, exc)
    except (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError):
        return None
    except UnicodeDecodeError:
        raise Unreadable(f"not UTF-8 text: {LOADER} raises on it") from None
    except OSError as exc:
        raise Unreadable(f"unreadable ({exc.strerror or exc}): {LOADER} raises on it") from None


def _not_regular(path: str, exc: NotRegularFile) -> str | None:
    """What importlib's read_text gives of a file read_regular refused: None for a directory (it
    passes over it), "" for /dev/null; else Unreadable, saying what the file is."""
    try:
        info = os.stat(path)
    except OSError:
        raise Unreadable(f"unreadable ({exc.strerror}): {LOADER} raises on it") from None
    if stat.S_ISDIR(info.st_mode):
        return None
    if stat.S_ISREG(info.st_mode):  # over the limit
        raise Unreadable(f"{info.st_size:,} bytes, more than patchkit reads: {LOADER} reads it whole") from None
    if stat.S_ISFIFO(info.st_mode):
        raise Unreadable(f"a fifo: {LOADER} would block on it") from None
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        if info.st_rdev == os.stat(os.devnull).st_rdev:
            return ""  # an empty file to importlib
        device = os.path.realpath(path)
        raise Unreadable(f"a device ({device}): {LOADER} would read it without end or block on it") from None
    raise Unreadable(f"not a file importlib can open ({exc.strerror}): {LOADER} raises on it") from None


def _distribution_name(info: str) -> str | None:
    """The normalized name importlib.metadata tells distributions apart by (PathDistribution's
    _normalized_name): from the directory's name when it ends in exactly .dist-info or .egg-info,
    else its METADATA's Name (None: none readable; then it is told apart from none)."""
    stem, ext = os.path.splitext(os.path.basename(info))
    if ext in SUFFIXES:
        return normalize(stem.partition("-")[0])
    try:
        text = _read_text(info, "METADATA", METADATA_LIMIT) or _read_text(info, "PKG-INFO", METADATA_LIMIT)
    except Unreadable:
        return None
    name = next((value for key, value in metadata_headers(text or "") if key.lower() == "name"), None)
    return None if name is None else normalize(name)


@functools.cache
def _text_distribution() -> Callable[[str, str], importlib.metadata.Distribution]:
    """An importlib.metadata Distribution whose one file is a text patchkit read bounded."""
    # lazy: importlib.metadata (and the email package under it) loads only to read a tree's plugins
    import importlib.metadata

    class Text(importlib.metadata.Distribution):
        def __init__(self, text: str, filename: str) -> None:
            self.text, self.filename = text, filename

        def read_text(self, filename: str) -> str | None:
            return self.text if filename == self.filename else None

        def locate_file(self, path: str | os.PathLike[str]) -> Path:
            return Path(str(path))

    return Text


def pth_directories(site: str) -> list[str]:
    """The directories the .pth files of site-packages `site` add to sys.path, as site.addpackage
    reads them (a line naming a directory, relative to `site`; comments and `import` lines, which run
    code patchkit does not, passed over), each file read bounded."""
    try:
        with os.scandir(site) as entries:
            names = sorted(e.name for e in itertools.islice(entries, LISTING_LIMIT) if e.name.endswith(".pth"))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            lines = read_regular(os.path.join(site, name), PTH_LIMIT).decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if line.strip() and not line.startswith(("#", "import ", "import\t")):
                directory = os.path.join(site, line.rstrip())
                found += [directory] if os.path.exists(directory) else []
    return found
