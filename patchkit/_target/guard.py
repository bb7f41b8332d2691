"""patchkit's guard inside vLLM: refuse to launch a tree that changed since `patchkit apply`.

`patchkit apply` copies this file byte for byte into the target's site-packages as
`patchkit_guard.py`, with a `patchkit_guard-<version>.dist-info` declaring it a
`vllm.general_plugins` entry point. vLLM calls `check()` in every process it starts, before the
model loads; an exception there stops the launch.

Standard library only, Python 3.9+, silent and cheap on a healthy tree: it reads the record
patchkit keeps beside vllm/ (`.patchkit/state.json`, or a patched wheel's provenance), compares
the installed vLLM version with the recorded one and hashes each recorded file. It judges the
vllm the process imported, wherever that lives, by the record beside it: never by the record
beside this file (PYTHONPATH, a user site or a second venv can put another vLLM first); a vllm
with no record of its own is not judged. The record is untrusted input: size-limited, checked
for shape, every path kept inside the site-packages directory.

PATCHKIT_GUARD=warn logs the finding instead of raising; PATCHKIT_GUARD=off skips the check.
Records come from `_RECORD_READERS`: the provenance of a vLLM installed from a wheel `patchkit
wheel` built (`vllm-*.dist-info/patchkit.json`, believed only where a patched wheel's install
put it, as patchkit's commands believe it), then `.patchkit/state.json`.
"""

from __future__ import annotations

import _imp
import base64
import csv
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import stat
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only (the guard runs on Python 3.9)
    from collections.abc import Callable, Iterable

ENV = "PATCHKIT_GUARD"
# The number of the guard's checks: patchkit tells an older build's guard that judges a tree as it
# does (the same number: a note, `apply` updates it) from one that may not (a failure until `apply`).
# tests/test_guard_format.py holds it to this module's code: a change of the code bumps it.
GUARD_FORMAT = 36
MAX_RECORD_BYTES = 16 * 1024 * 1024
if TYPE_CHECKING:  # (vllm version or None, {path: recorded sha256 or None}, {path: its original's sha256 or None})
    Record = tuple[str | None, dict[str, str | None], dict[str, str | None]]
MAX_FILE_BYTES = 64 * 1024 * 1024  # a patched source file: far below; a larger one is not what patchkit wrote
# the recorded files' bytes one judging reads (a patched vLLM's: under 1 MB): hard links to one large file,
# or sparse ones, cost no disk, and each costs its whole size (patchkit.store.state.MAX_HASHED_BYTES)
MAX_JUDGED_BYTES = 256 * 1024 * 1024
TOO_LARGE_TOGETHER = "the files its record names hold over 256 MiB together (a patched vLLM's hold a few MB)"


class TreeChanged(RuntimeError):
    """The vLLM tree is not the one patchkit patched."""


def check() -> None:
    """The vllm.general_plugins entry point."""
    mode = os.environ.get(ENV, "").strip().lower()
    if mode == "off":
        return
    for site in imported_sites():
        try:
            problems = find_problems(site)
        except Exception as exc:  # whatever stops the judging is a refusal too, said as one (warn honoured)
            problems = ["the guard cannot judge it (" + type(exc).__name__ + ": " + str(exc) + ")"]
        if problems:
            _refuse(site, problems, mode)
            return


def _refuse(site: str, problems: list[str], mode: str) -> None:
    message = refusal(site, problems)
    if mode == "warn":
        # lazy: the guard runs in every vLLM process: only a refusal logs
        import logging

        logging.getLogger("patchkit_guard").warning(message)
        return
    raise TreeChanged(message)


def refusal(site: str, problems: list[str]) -> str:
    """The guard's message: the tree, what changed, and the command that names the fix, with the
    tree itself (`--target`: it names that tree from any shell; `--python` found it only where
    PYTHONPATH or the like put it on the interpreter's path)."""
    selection = "--target " + _shell_word(site)
    if problems == [UNFINISHED]:  # not a changed tree: a change of patchkit's own, cut short or running
        return (
            "patchkit guard: "
            + UNFINISHED
            + " in "
            + _escaped(site)
            + ": some of vLLM's files may be patched and some not. Run `patchkit recover "
            + selection
            + "` (any patchkit command rolls it back first), then the apply or revert again; if one is"
            " running, wait for it (PATCHKIT_GUARD=warn only logs this, =off skips it)"
        )
    return (
        "patchkit guard: this vLLM tree is not the one `patchkit apply` left in "
        + _escaped(site)
        + ": "
        + _few(problems)
        + ". Run `patchkit status "
        + selection
        + "`: it names the command that fixes it (PATCHKIT_GUARD=warn only logs this, =off skips it)"
    )


def _few(problems: list[str], shown: int = 3) -> str:
    """The first few problems, each with its control characters escaped (a recorded path holding a
    newline would split the log line), then how many more: a record naming thousands of files is a
    line, not megabytes (patchkit.base.errors.few, which this module cannot import)."""
    said = "; ".join(_escaped(problem) for problem in problems[:shown])
    return said + (f" +{len(problems) - shown:,} more" if len(problems) > shown else "")


def _escaped(text: str) -> str:
    """`text` with each non-printable character escaped as patchkit.base.errors.escaped does: a
    surrogate-escaped byte and C0/C1 as \\xNN, above U+00FF as \\uNNNN (its low byte would misread)."""
    return "".join(c if c.isprintable() else _escape_of(ord(c)) for c in text)


def _shell_word(text: str) -> str:
    """`text` as one shell word on one line: shlex's quoting, or bash's $'...' (whose \\xNN and
    \\uNNNN are the escapes above) when it holds a character a log line cannot show."""
    if text.isprintable():
        return shlex.quote(text)
    return "$'" + "".join("\\" + c if c in "'\\" else c if c.isprintable() else _escape_of(ord(c)) for c in text) + "'"


def _escape_of(code: int) -> str:
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def imported_sites() -> list[str]:
    """The site directory of the vllm this process imported (see imported_site). When its vllm/ is
    a symlink, the directory that symlink is in, if that holds vLLM's dist-info or patchkit's record
    (vllm/ moved to another volume: patchkit applies through that one symlink and keeps its record
    there), else where it leads (a checkout's vllm/ linked in): the tree patchkit's commands judge
    (patchkit.tree.target._tree_of)."""
    site = imported_site()
    if site is None:
        return []
    linked = _linked_package_parent()
    if linked is None or linked == site:
        return [site]
    try:
        beside = bool(_vllm_dist_infos(linked)) or os.path.isdir(os.path.join(linked, ".patchkit"))
    except OSError:  # not listable: not where patchkit applied
        beside = False
    return [linked] if beside else [site]


def _linked_package_parent() -> str | None:
    found = _vllm_locations()
    if not found or not os.path.islink(found[0].rstrip(os.sep)):
        return None
    return os.path.dirname(os.path.abspath(found[0].rstrip(os.sep)))


def imported_site() -> str | None:
    """The site directory of the vllm this process imported (what it runs), symlinks resolved: not
    the one beside this file, which PYTHONPATH, a user site or a second venv may shadow. Before
    vllm is imported, the one an import would load; None: no vllm at all."""
    found = _vllm_locations()
    if not found:
        return None
    return os.path.dirname(os.path.realpath(found[0]))


def _vllm_locations() -> list[str]:
    """The directories of the vllm package this process imported, as its import path names them
    (symlinks kept); before vllm is imported, those an import would load; none: no vllm at all."""
    module = sys.modules.get("vllm")
    if module is not None:
        locations = getattr(module, "__path__", None)
    else:
        try:
            spec = importlib.util.find_spec("vllm")
        except (ImportError, ValueError):
            return []
        locations = spec.submodule_search_locations if spec is not None else None
    # the package's directory (a namespace package, as a tree cut to a few files, has no __file__)
    return [entry for entry in list(locations or []) if isinstance(entry, str) and entry]


def find_problems(site: str) -> list[str]:
    """What differs from the records in `site`, in words (empty: healthy, or nothing recorded)."""
    return judge(site).problems


STOCK_AGAIN = "stock again (vLLM reinstalled?)"


class Verdict:
    """What the guard finds: its problems in words, and the recorded files that hold their
    originals again (the stock bytes `pip install --force-reinstall` of the same vLLM leaves).
    `whole`: every file the record names is one of them, said in one line with a count."""

    def __init__(self, problems: list[str], stock_again: Iterable[str] = (), whole: bool = False) -> None:
        self.problems = problems
        self.stock_again = frozenset(stock_again)
        self.whole = whole


def judge(
    site: str,
    tags: Iterable[str] | None = None,
    prefix: str | None = None,
    extensions: Iterable[str] | None = None,
    mode: str | None = None,
) -> Verdict:
    """find_problems, with which refused files are stock again (patchkit's status says the same).
    `tags`: the bytecode cache tags an unlistable __pycache__ is opened by (None: this Python's own);
    `prefix`: the pycache prefix of the launch judged (stale_bytecode's; None: this process's);
    `extensions`: the extension module suffixes the launch's Python imports (None: this one's);
    `mode`: the launch's Python's --check-hash-based-pycs (default, always, never; None: this one's)."""
    problems, upgraded = [], False
    expected: dict[str, str | None] = {}
    original: dict[str, str | None] = {}
    versions: dict[str | None, list[str]] = {}  # the installed version read once, not once per set recorded
    for reader in _RECORD_READERS:
        try:
            records = reader(site)
        except TreeChanged as exc:
            return Verdict([str(exc)])
        for version, files, before in records:  # in the order applied: a later set's hash of a file wins
            found = _version_problems(site, version, versions)
            problems += found
            upgraded = upgraded or bool(found)
            expected.update(files)
            for rel, sha in before.items():  # the first set to record a file holds its stock hash
                original.setdefault(rel, sha)
    try:
        differing = _differing(site, expected)
    except TreeChanged as exc:  # a recorded path that is a fifo, a directory...: said, as any change
        return Verdict([str(exc)])
    # after an upgrade the files are another release's: no original of this record says them
    again = [] if upgraded else [rel for rel, actual, _ in differing if rel in original and actual == original[rel]]
    stock = set(again)  # looked up once per differing file: a record may name thousands
    # another build of the same version reinstalled (a vendor's): pip wrote the file, no edit
    pip = [] if upgraded else _pip_wrote(site, [(r, a) for r, a, _ in differing if original.get(r) and r not in stock])
    whole = bool(again or pip) and len(again) + len(pip) == len(original)
    wrote = set(pip)
    for rel, actual, problem in differing:
        if rel in wrote and not whole:
            problems.append(rel + PIP_WROTE)
        elif rel not in stock and rel not in wrote:
            problems.append(problem)
        elif not whole:  # said as what it is: stock bytes, no edit to keep (apply alone fixes it)
            problems.append(
                rel + (" is gone, as before patchkit created it" if actual is None else " holds its stock bytes again")
            )
    if whole:  # one line, the files a count: a reinstall is one fact, not one per file
        problems.append(
            "the files are " + (PIP_WROTE_ALL if pip else STOCK_AGAIN) + ": all " + str(len(original)) + " recorded"
        )
    changed = {rel for rel, _, _ in differing}
    kept = [rel for rel, sha in sorted(expected.items()) if sha and rel not in changed]
    try:
        problems += stale_bytecode(site, kept, tags, prefix, mode) + _shadowed(site, kept, extensions)
    except TreeChanged as exc:
        return Verdict([*problems, str(exc)])
    return Verdict(list(dict.fromkeys(problems)), again + pip, whole)  # each once, in the order found


# a recorded file pip wrote again (vLLM reinstalled, maybe another build of the same version): apply
# records it afresh, revert keeps it (patchkit.engine.stale.pip_wrote tells it the same way)
PIP_WROTE = " was written by pip when vLLM was reinstalled (its RECORD lists these bytes)"
PIP_WROTE_ALL = "as pip installed them (vLLM reinstalled: its RECORD lists their bytes)"


def _pip_wrote(site: str, found: list[tuple[str, str | None]]) -> list[str]:
    """Of (path, its sha256 on disk), those whose bytes the installed vLLM's RECORD lists (sha256
    and size): one vLLM dist-info, not a patched wheel's (its RECORD lists the patched files)."""
    files = [(rel, actual) for rel, actual in found if actual]
    infos = _vllm_dist_infos(site) if files else []
    if len(infos) != 1 or os.path.lexists(os.path.join(site, infos[0], "patchkit.json")):
        return []
    label = infos[0].lower().rpartition(".")[0].partition("+")[2]
    if "patchkit" in label.replace("_", ".").replace("-", ".").split("."):
        return []
    rows = _record_entries(os.path.join(site, infos[0], "RECORD"), [rel for rel, _ in files]) or {}
    said = []
    with _Tree(site) as tree:
        for rel, actual in files:
            digest, size = rows.get(rel, ("", ""))
            wanted = "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(actual)).rstrip(b"=").decode()
            if digest == wanted and size == str(tree.size(rel)):
                said.append(rel)
    return said


# patchkit.checks.shadow's rule, for the recorded files: FileFinder imports a package `<stem>/`, then
# an extension module `<stem><suffix>`, before `<stem>.py` (each a regular file, through symlinks); the
# suffixes are the importing Python's own (importlib.machinery.EXTENSION_SUFFIXES, _imp's): another Python's
# .so, or a .pyd on Linux, is never imported
SHADOWED = "is imported instead of"
_MAX_DIRECTORY_ENTRIES = 1 << 16  # vLLM's largest directory holds a few hundred


def _shadowed(site: str, paths: list[str], extensions: Iterable[str] | None = None) -> list[str]:
    """Each recorded source a package or an extension module beside it keeps from being imported
    (apply refuses such a tree; one planted after it leaves the patch dead): a listing of the
    directories of the recorded files, nothing read. `extensions`: as judge's."""
    found, listed = [], {}  # type: list[str], dict[str, dict[str, list[str]]]
    suffixes = set(_imp.extension_suffixes() if extensions is None else extensions)
    for rel in paths:
        directory, _, name = rel.rpartition("/")
        if not name.endswith(".py") or name == "__init__.py":
            continue
        stem = name[: -len(".py")]
        package = os.path.join(directory, stem)
        inits = [
            n
            for n in _regular_names(site, package, listed).get("__init__", ())
            if _split(n, "__init__") in suffixes | {".py", ".pyc"}
        ]
        beside = [n for n in _regular_names(site, directory, listed).get(stem, ()) if _split(n, stem) in suffixes]
        shadow = package + "/" + min(inits) if inits else directory + "/" + min(beside) if beside else None
        if shadow is not None:
            found.append(shadow + " " + SHADOWED + " " + rel + ": the patch never runs")
    return found


def _split(name: str, stem: str) -> str | None:
    """What follows `stem` in `name` (`.py`, `.cpython-311-x86_64-linux-gnu.so`); None: another stem's."""
    return name[len(stem) :] if name.startswith(stem + ".") else None


def _regular_names(site: str, directory: str, listed: dict[str, dict[str, list[str]]]) -> dict[str, list[str]]:
    """The names of the regular files in site/directory (through symlinks, as FileFinder takes them),
    by the module name before their first dot (each recorded file looks up its own, not every name
    there), each directory listed once and bounded; none when it is no directory."""
    if directory not in listed:
        names = {}  # type: dict[str, list[str]]
        try:
            with os.scandir(os.path.join(site, directory)) as entries:
                for count, entry in enumerate(entries):
                    if count >= _MAX_DIRECTORY_ENTRIES:
                        raise TreeChanged(
                            os.path.join(site, directory) + " holds more than " + str(_MAX_DIRECTORY_ENTRIES) + " files"
                        )
                    if _is_file(entry):
                        names.setdefault(entry.name.partition(".")[0], []).append(entry.name)
        except OSError:
            pass
        listed[directory] = names
    return listed[directory]


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


STALE_BYTECODE = "is unchecked-hash bytecode compiled from other bytes than"
RUNS_IN_ITS_PLACE = ": Python loads it without reading the source"
# checked-hash bytecode is re-validated against its source, except under this interpreter option
STALE_CHECKED = "is checked-hash bytecode compiled from other bytes than"
NEVER_CHECKED = ": Python run with --check-hash-based-pycs never loads it without reading the source"
_MAX_CACHE_ENTRIES = 1 << 16  # a package's __pycache__: a few hundred; more is no cache Python wrote
_UNCHECKED_HASH = 1  # PEP 552's flags word: hash-based (bit 0), without check_source (bit 1)
_CHECKED_HASH = 3  # with check_source
# the hash-based kinds Python loads without reading the source, by its --check-hash-based-pycs (default: unchecked)
_UNCHECKED_KINDS = {"never": (_UNCHECKED_HASH, _CHECKED_HASH), "always": ()}


def stale_bytecode(
    site: str,
    paths: list[str],
    tags: Iterable[str] | None = None,
    prefix: str | None = None,
    mode: str | None = None,
) -> list[str]:
    """Each unchecked-hash .pyc (PEP 552) of a recorded source whose hash is not of its bytes:
    Python imports it without reading the source, so the patched file is not what runs.
    Every interpreter's is judged, keyed by the magic number in its own header, so that
    patchkit's interpreter (status) and vLLM's (a launch) say the same. __pycache__ is untrusted:
    listed bounded, through a symlink as Python's import follows one (said, since apply's fix
    writes through none); a .pyc that is not a regular file is not read. `tags`: as judge's;
    `prefix`: the pycache prefix whose mirror of the tree is judged in place of __pycache__ (None:
    this process's; "": none); `mode`: the launch's --check-hash-based-pycs (None: this process's):
    under `never` checked-hash bytecode is judged too (Python loads it unchecked), under `always` none
    is (Python checks every hash-based .pyc against its source)."""
    return [said for _rel, said, _pyc in stale_places(site, paths, tags, prefix, mode)]


def stale_places(
    site: str,
    paths: list[str],
    tags: Iterable[str] | None = None,
    prefix: str | None = None,
    mode: str | None = None,
) -> list[tuple[str, str, str]]:
    """stale_bytecode's findings, each as (the recorded source, the finding, the .pyc's path).
    Under a pycache prefix Python reads a source's bytecode there alone (importlib's
    cache_from_source), never __pycache__: only the prefix's mirror is judged then."""
    mode = getattr(_imp, "check_hash_based_pycs", "default") if mode is None else mode
    kinds = _UNCHECKED_KINDS.get(mode, (_UNCHECKED_HASH,))
    mirrors = prefix_mirrors(site, sys.pycache_prefix if prefix is None else prefix)
    found, hashes, spent = [], {}, [0]  # type: list[tuple[str, str, str]], dict[tuple[int, ...], bytes | None], list[int]
    listed = {}  # type: dict[str, dict[str, list[tuple[str, bool]]] | None]
    links = []  # type: list[str]
    for rel in paths:
        directory, _, name = rel.rpartition("/")
        if not name.endswith(".py"):
            continue
        places = [
            (os.path.join(mirror, directory), os.path.join(mirror, directory, ""), PREFIXED) for mirror in mirrors
        ] or [(os.path.join(site, directory, "__pycache__"), (directory + "/__pycache__/").lstrip("/"), "")]
        for cache, shown, where in places:
            if not where and cache not in listed and os.path.islink(cache):  # one lstat a directory
                links.append(shown[:-1])
                listed[cache] = {}
            for pyc, linked in _compiled(cache, name[: -len(".py")], tags, listed):
                if linked:  # never followed: one planted per recorded file was a deep expansion each
                    links.append(shown + pyc + where)
                elif _blocks(os.path.join(cache, pyc), pyc, tags):
                    found.append(
                        (rel, shown + pyc + where + " " + NOT_BYTECODE + rel + WAITS, os.path.join(cache, pyc))
                    )
                elif _stale(os.path.join(cache, pyc), os.path.join(site, rel), kinds, hashes, spent):
                    checked = _flags(os.path.join(cache, pyc)) == _CHECKED_HASH
                    kind, runs = (STALE_CHECKED, NEVER_CHECKED) if checked else (STALE_BYTECODE, RUNS_IN_ITS_PLACE)
                    said = shown + pyc + where + " " + kind + " " + rel + runs
                    found.append((rel, said, os.path.join(cache, pyc)))
    if links:
        more = " (" + format(len(links) - 1, ",") + MORE_SYMLINKED + ")" if len(links) > 1 else ""
        raise TreeChanged(links[0] + SYMLINKED + more)
    return found


NOT_BYTECODE = "is a fifo or a device, not bytecode: importing "  # patchkit.engine.inspection names its removal
WAITS = " opens it, and waits on it or reads it without end"


def _blocks(path: str, name: str, tags: Iterable[str] | None) -> bool:
    """Whether `path`, a .pyc the importing Python opens (its own tags': `tags`, None: this one's) before
    the source, is a fifo or a device (through a symlink, as the import opens it): a hang, not a cache."""
    own = sys.implementation.cache_tag
    if name.split(".")[1] not in (([own] if own else []) if tags is None else tags):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


PREFIXED = " (under the pycache prefix)"  # a stale .pyc where PYTHONPYCACHEPREFIX or -X pycache_prefix puts them


def prefix_mirrors(site: str, prefix: str | None) -> list[str]:
    """Where Python looks for the bytecode of site's files under a pycache prefix (sys.pycache_prefix:
    `prefix/<the source's absolute directory>`, importlib's cache_from_source): by the path given and by
    its real path, the one the guard judges; none without a prefix."""
    if not prefix:
        return []
    found = []
    for where in (os.path.abspath(site), os.path.realpath(site), *_imported_from(site)):
        mirror = os.path.join(prefix, os.path.splitdrive(where)[1].lstrip(os.sep))
        if mirror not in found:
            found.append(mirror)
    return found


def _imported_from(site: str) -> list[str]:
    """The directory this process imports site's vllm from, as its import path names it: Python keys
    bytecode under a prefix by that path, symlinks kept (none: it imports another vllm, or none)."""
    found = _vllm_locations()
    parent = os.path.dirname(os.path.abspath(found[0].rstrip(os.sep))) if found else None
    if parent is None or os.path.realpath(found[0]) != os.path.realpath(os.path.join(site, "vllm")):
        return []
    return [parent]


def _stale(
    pyc: str, source_path: str, kinds: tuple[int, ...], hashes: dict[tuple[int, ...], bytes | None], spent: list[int]
) -> bool:
    """Whether `pyc` is hash-based bytecode of `kinds` (those Python loads without checking) keyed by
    another hash than `source_path`'s bytes (`hashes`, `spent`: as _keyed_source's)."""
    header = _header(pyc)
    if header is None or int.from_bytes(header[4:8], "little") & 3 not in kinds:
        return False
    keyed = _keyed_source(source_path, header[:4], hashes, spent)
    return keyed is not None and keyed != header[8:16]


def _keyed_source(
    path: str, magic: bytes, hashes: dict[tuple[int, ...], bytes | None], spent: list[int]
) -> bytes | None:
    """The source hash of the file at `path` for bytecode of `magic` (None: no file, or not known
    here). `hashes`: those found, by (device, inode, size, mtime, magic): a file hard-linked to many
    recorded paths is read once; `spent`: the bytes read so far, MAX_JUDGED_BYTES at most."""
    opened = _open_regular(path, None, path)
    if opened is None:
        return None
    with os.fdopen(opened[0], "rb") as fh:
        info = opened[1]
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, int.from_bytes(magic, "little"))
        if key not in hashes:
            if info.st_size > MAX_FILE_BYTES:
                raise TreeChanged(path + " is larger than " + str(MAX_FILE_BYTES) + " bytes")
            if spent[0] + info.st_size > MAX_JUDGED_BYTES:
                raise TreeChanged(TOO_LARGE_TOGETHER)
            data = fh.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise TreeChanged(path + " is larger than " + str(MAX_FILE_BYTES) + " bytes")
            spent[0] += len(data)
            hashes[key] = _source_hash(magic, data)
        return hashes[key]


# A symlinked __pycache__ or .pyc: Python writes neither (it makes the directory, and renames each
# .pyc into place), so one is planted; the import would follow it, the guard does not (a deep chain
# was ~10 ms a file): refused, its removal the fix (patchkit.engine.inspection names it)
SYMLINKED = " is a symlink, which Python never writes there: the guard does not follow it"
MORE_SYMLINKED = " more of the recorded files' bytecode are symlinks too"


def _compiled(
    cache: str,
    stem: str,
    tags: Iterable[str] | None = None,
    listed: dict[str, dict[str, list[tuple[str, bool]]] | None] | None = None,
) -> list[tuple[str, bool]]:
    """The names in `cache` of a module `stem`'s bytecode, any interpreter's and optimization's
    (`stem.<tag>.pyc`, `stem.<tag>.opt-N.pyc`), each with whether it is a symlink. `listed`: each
    cache's .pyc names by stem, listed once a call (the recorded files of a directory share it)."""
    listed = {} if listed is None else listed
    if cache not in listed:
        listed[cache] = _pyc_names(cache)
    names = listed[cache]
    if names is None:  # not ours to list (root's under umask 027): Python opens only its own names there
        return _own_compiled(cache, stem, tags)
    found = []
    for name, linked in names.get(stem, ()):
        parts = name[len(stem) + 1 : -len(".pyc")].split(".")
        if len(parts) == 1 or (len(parts) == 2 and parts[1].startswith("opt-")):
            found.append((name, linked))
    return sorted(found)


def _pyc_names(cache: str) -> dict[str, list[tuple[str, bool]]] | None:
    """The .pyc names in the directory `cache`, by the module name before their first dot, each with
    whether it is a symlink (the listing's file type: nothing followed) (none: no directory; None:
    not ours to list), bounded."""
    if not os.path.isdir(cache):
        return {}
    try:
        entries = os.scandir(cache)
    except OSError:
        return None
    found = {}  # type: dict[str, list[tuple[str, bool]]]
    with entries:
        for count, entry in enumerate(entries):
            if count >= _MAX_CACHE_ENTRIES:
                raise TreeChanged(
                    cache + " holds more than " + str(_MAX_CACHE_ENTRIES) + " files: not what Python writes"
                )
            if entry.name.endswith(".pyc"):
                found.setdefault(entry.name.partition(".")[0], []).append((entry.name, _is_link(entry)))
    return found


def _is_link(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink()
    except OSError:
        return False


def _own_compiled(cache: str, stem: str, tags: Iterable[str] | None = None) -> list[tuple[str, bool]]:
    """The names this interpreter would load `stem`'s bytecode by (any optimization), of those it can
    open: what an unlistable __pycache__ can hand this launch's imports. `tags`: another interpreter's
    (patchkit's status judging for vLLM's Python, which may be another version)."""
    own = sys.implementation.cache_tag
    if tags is None:
        tags = [own] if own is not None else []  # None: it writes and reads no bytecode
    names = [stem + "." + tag + suffix for tag in tags for suffix in (".pyc", ".opt-1.pyc", ".opt-2.pyc")]
    linked = [(name, True) for name in names if os.path.islink(os.path.join(cache, name))]
    return linked or [(name, False) for name in names if _header(os.path.join(cache, name)) is not None]


def _flags(pyc: str) -> int | None:
    """A .pyc's PEP 552 kind bits (hash-based, check_source); None: no header."""
    header = _header(pyc)
    return None if header is None else int.from_bytes(header[4:8], "little") & 3


def _header(pyc: str) -> bytes | None:
    """A .pyc's 16-byte header (PEP 552), through a symlink as Python reads it; None when it is no
    regular file (a fifo is opened without waiting, and not read) or is shorter."""
    try:
        fd = os.open(pyc, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        header = fh.read(16) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    return header if len(header) == 16 else None


def _source_hash(magic: bytes, source: bytes) -> bytes | None:
    """The source hash an interpreter of this magic number keys a hash-based .pyc by (CPython's
    importlib.util.source_hash, with that interpreter's key); None: not known here."""
    keyed = getattr(_imp, "source_hash", None)
    if keyed is not None:
        hashed: bytes = keyed(int.from_bytes(magic, "little"), source)  # CPython's _imp.source_hash
        return hashed
    # not CPython: only this interpreter's own key is known
    return importlib.util.source_hash(source) if magic == importlib.util.MAGIC_NUMBER else None


def _state_records(site: str) -> list[Record]:
    """(vllm version or None, {path: sha256 or None}, {path: its original's sha256 or None}) for
    each set `.patchkit/state.json` records, and (the patched wheel's version, {}, {}) when the
    guard was installed on one."""
    path = os.path.join(site, ".patchkit", "state.json")
    if os.path.lexists(os.path.join(site, ".patchkit")):
        _refuse_odd_store(site)
    data = _read_json(path)
    if data is None:
        return []
    damage = state_damage(data)
    if damage is not None:  # what patchkit's commands refuse as damaged (exit 2), the guard refuses
        raise TreeChanged(path + " is damaged (" + damage + ")")
    entries = data.get("entries", [])
    wheel = data.get("wheel")
    unheld = [entry for entry in entries if entry["set"].startswith("adhoc-") and not entry.get("held")]
    if unheld:  # no patchkit held its diffs to the sets' contracts: what vLLM fails on after the load is unknown
        raise TreeChanged(_unheld(unheld[0]))
    records = [_entry_record(entry) for entry in entries]
    _refuse_created_stock_files(site, path, _created(entries))
    # the patched wheel this guard was installed on (no apply recorded): its version is what must run
    return records + ([(wheel, {}, {})] if wheel else [])


# a --patch apply an older patchkit recorded: written before a --patch diff was held to the library sets'
# contracts (patchkit.engine.held), so it may have left a set's gate admitting what its other files
# lack (eagle3's whitelist without the model's SupportsEagle3), which vLLM fails on only after the model
# load; the guard cannot judge the contracts, a patchkit can (its apply of the same files marks it held)
UNHELD = "was applied by a patchkit that did not hold --patch diffs to the patch sets' contracts"
UNHELD_WHY = (
    ": the guard cannot judge whether it leaves a set half-applied (EAGLE-3's whitelist without its model"
    " support passes vLLM's config check and fails after the model load)"
)


def _unheld(entry: dict[str, Any]) -> str:
    names = [os.path.basename(patch["name"]) for patch in entry.get("patches", [])] or ["?"]
    return "--patch file" + ("s " if len(names) > 1 else " ") + ", ".join(names) + " " + UNHELD + UNHELD_WHY


def _created(entries: list[dict[str, Any]]) -> list[str]:
    """The paths the record says patchkit created (`"before": null`: no original), entries checked."""
    found = {rel for entry in entries for rel, shas in entry["files"].items() if shas.get("before", "") is None}
    return sorted(found)


# RECORD's hash algorithms a wheel may use (patchkit.distinfo.record.HASHES): a row with another is no evidence
_HASHES = ("sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s")


def _refuse_created_stock_files(site: str, origin: str, created: list[str]) -> None:
    """A record saying patchkit created a file an installed distribution's RECORD lists as its own
    (vLLM's, torch's) is none patchkit wrote: status and revert refuse it (exit 2), so the guard
    does (patchkit.engine.operations._refuse_created_stock_files)."""
    if not created:
        return
    listed = _listed_by_vllm(site, created) | _listed_by_others(site, created)
    if listed:
        raise TreeChanged(
            origin + " says patchkit created " + sorted(listed)[0] + ", but an installed distribution's RECORD"
            " lists it as its own file"
        )


def _listed_by_vllm(site: str, paths: list[str]) -> set[str]:
    """Those the installed vLLM's RECORD lists with a hash (none when vLLM came from a patched wheel,
    whose RECORD lists the files its patches add, or when several vLLMs are installed)."""
    found = _vllm_dist_infos(site)
    if len(found) != 1 or os.path.lexists(os.path.join(site, found[0], "patchkit.json")):
        return set()
    rows = _record_rows(os.path.join(site, found[0], "RECORD"), paths)
    return {path for path, digest in rows if "=" in digest and digest.partition("=")[0] in _HASHES}


def _listed_by_others(site: str, paths: list[str]) -> set[str]:
    """Those outside vllm/ another distribution's RECORD lists (not vLLM's, not the guard's)."""
    outside = [path for path in paths if path.split("/", 1)[0] != "vllm"]
    listed: set[str] = set()
    for name in sorted(os.listdir(site)) if outside else []:
        if name.endswith(".dist-info") and not name.startswith(("vllm-", "patchkit_guard-")):
            listed |= {path for path, _digest in _record_rows(os.path.join(site, name, "RECORD"), outside)}
    return listed


def _record_rows(path: str, paths: list[str]) -> list[tuple[str, str]]:
    """(path, its hash entry) for each row of `paths` a RECORD lists; none when it cannot be read
    plainly (as patchkit reads it: a symlink, a fifo, too large or not csv lists nothing)."""
    try:
        raw = _read_regular(path, MAX_RECORD_BYTES)
        rows = list(csv.reader(io.StringIO((raw or b"").decode("utf-8"))))
    except (TreeChanged, UnicodeDecodeError, csv.Error):
        return []
    wanted = set(paths)
    return [(row[0], row[1] if len(row) > 1 else "") for row in rows if row and row[0] in wanted]


# what patchkit keeps in .patchkit/ (itself a directory), and the kind each is: any other kind (a
# symlink, a directory for a file) is a hand repair every command refuses (exit 2), so the guard does
# (patchkit.store.state.check_meta_dir; the lock may be a directory: the lock refuses that itself)
_STORE_KINDS: dict[str, Callable[[int], bool]] = {
    "": stat.S_ISDIR,
    "state.json": stat.S_ISREG,
    "journal.json": stat.S_ISREG,
    "objects": stat.S_ISDIR,
    "saved": stat.S_ISDIR,
    "lock": lambda mode: stat.S_ISREG(mode) or stat.S_ISDIR(mode),
}


# an apply or revert writes its journal before it changes a file and deletes it last: a tree that has
# one holds some files of the change and not others (the commit writes the guard first, so it is here)
UNFINISHED = "an apply or revert of patchkit did not finish (.patchkit/journal.json is there)"


def _unfinished(site: str) -> list[Record]:
    """No record to judge by while a journal is in .patchkit/: refused (whatever the records say,
    the files are mid-change), the one finding. An lstat, nothing read (it is untrusted; recovery
    checks it); an odd store (a symlinked .patchkit/ or journal) is refused as the commands do."""
    if os.path.lexists(os.path.join(site, ".patchkit")):
        _refuse_odd_store(site)
        if os.path.lexists(os.path.join(site, ".patchkit", "journal.json")):
            raise TreeChanged(UNFINISHED)
    return []


def _refuse_odd_store(site: str) -> None:
    for name, kind in _STORE_KINDS.items():
        path = os.path.join(site, ".patchkit", name) if name else os.path.join(site, ".patchkit")
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError:
            mode = 0
        if not kind(mode):
            raise TreeChanged(path + " is not what patchkit keeps there (a symlink, or another kind of file)")


def _read_json(path: str) -> Any:
    """A record file's JSON value; None when there is none."""
    raw = _read_regular(path, MAX_RECORD_BYTES)
    if raw is None:
        return None
    try:
        data = json.loads(raw, parse_int=_bounded_int, parse_constant=_no_constant)
        json.dumps(data, ensure_ascii=False).encode()  # a lone surrogate escape is no path: malformed
        return data
    except (ValueError, RecursionError):
        raise TreeChanged(path + " is not JSON") from None


def _no_constant(name: str) -> object:
    """NaN and Infinity are no JSON (patchkit.base.fsutil.no_constant): malformed, as the commands say."""
    raise ValueError(name + " is no JSON number")


def _bounded_int(text: str) -> int:
    """An integer as Python 3.11+ parses JSON's (patchkit.base.fsutil.load_json_text): more digits are
    malformed on every Python the guard runs on."""
    if len(text) > 4300:
        raise ValueError("an integer of " + str(len(text)) + " digits")
    return int(text)


# -- state.json's shape, by patchkit.store.state.parse_state's rules (tests/test_guard_state.py holds
# the two to the same verdict): a record every command refuses as damaged is refused at a launch too

STATE_FORMAT = 1
_DIGEST = re.compile(r"[0-9a-f]{64}")
# PEP 440's version syntax (packaging.version.Version, which this stdlib-only module cannot import)
_VERSION = re.compile(
    r"\s*v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:[._-]?(?:alpha|a|beta|b|preview|pre|c|rc)[._-]?[0-9]*)?"
    r"(?:-[0-9]+|[._-]?(?:post|rev|r)[._-]?[0-9]*)?(?:[._-]?dev[._-]?[0-9]*)?(?:\+[a-z0-9]+(?:[._-][a-z0-9]+)*)?\s*",
    re.IGNORECASE | re.ASCII,
)
_GUARD_FILE = re.compile(
    r"patchkit_guard\.py|patchkit_guard-[A-Za-z0-9_.+!]+\.dist-info/(?:METADATA|RECORD|INSTALLER|entry_points\.txt)"
)
_STARTUP_HOOKS = ("sitecustomize", "usercustomize", "_distutils_hack")
_MAX_CHOSEN, _MAX_PATCH_PATH = 256, 4096
_MAX_RECORDED_FILES = 10000  # patchkit.store.state.MAX_RECORDED_FILES
# patchkit.store.state._too_long's bounds (a name's and a path's bytes), base.fsutil.MAX_RECORDED_DEPTH
_MAX_NAME, _MAX_RECORDED_PATH, _MAX_RECORDED_DEPTH = 255, 2048, 32


def state_damage(data: object) -> str | None:
    """Why a state.json value is no record patchkit wrote (what its commands call it damaged for),
    or None."""
    if not isinstance(data, dict):
        return "a " + type(data).__name__ + ", not an object"
    if data.get("format") != STATE_FORMAT:
        return "unknown state format " + repr(data.get("format"))
    entries = data.get("entries", [])
    if not isinstance(entries, list):
        return "'entries' is not a list"
    if len(entries) > _MAX_CHOSEN:  # patchkit.store.state.record_size_damage: no record patchkit writes
        return "it records " + str(len(entries)) + " sets, more than patchkit records"
    files = sum(len(e["files"]) for e in entries if isinstance(e, dict) and isinstance(e.get("files"), dict))
    if files > _MAX_RECORDED_FILES:
        return (
            "it records " + str(files) + " files, more than patchkit records (at most " + str(_MAX_RECORDED_FILES) + ")"
        )
    if not isinstance(data.get("no_guard", False), bool):
        return "'no_guard' is not true or false"
    guard, replaced = data.get("guard", {}), data.get("guard_replaced", {})
    found = _guard_damage(guard) or _guard_damage(replaced)
    if found is None and not set(replaced) <= set(guard):
        found = "'guard_replaced' names a file its guard record does not"
    for entry in entries:
        found = found or _entry_damage(entry)
    found = found or _chosen_damage(data.get("chosen"), "chosen") or _chosen_damage(data.get("reverted"), "reverted")
    wheel = data.get("wheel")
    if found is None and wheel is not None and not (isinstance(wheel, str) and len(wheel) <= 200):
        return "'wheel' is not a vLLM version"
    if found is None and wheel is not None and not _VERSION.fullmatch(wheel):
        return "'wheel' is " + repr(wheel) + ", not a vLLM version"
    if found is None and not (data.get("wheel_held") is None or _is_digest(data.get("wheel_held"))):
        return "'wheel_held' is not a sha256 hex digest"
    return found


def _guard_damage(guard: object) -> str | None:
    if not isinstance(guard, dict):
        return "'guard' is not an object"
    for path, digest in guard.items():
        if not (isinstance(path, str) and _GUARD_FILE.fullmatch(path)):
            return "its guard record names " + repr(path) + ", which is no file of patchkit's launch guard"
        if _too_long(path):
            return "the recorded path " + repr(path) + " " + _too_long(path)
        version = path.partition("/")[0][len("patchkit_guard-") : -len(".dist-info")] if "/" in path else "0"
        if not _VERSION.fullmatch(version):
            return "its guard record names " + repr(path) + ", whose version " + repr(version) + " is no version"
        if not _is_digest(digest):
            return repr(digest) + " is not a sha256 hex digest"
    if len({path.partition("/")[0] for path in guard if "/" in path}) > 1:
        return "its guard record names several guard distributions; patchkit writes one"
    return None


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def _entry_damage(entry: object) -> str | None:
    if not isinstance(entry, dict):
        return "an entry is not an object"
    kinds = {"set": (str,), "vllm_version": (str, type(None)), "release": (str, type(None)), "applied_at": (str,)}
    for key, kind in kinds.items():
        if (key in entry or key == "set") and not isinstance(entry.get(key), kind):
            return "'" + key + "' is missing or of the wrong type"
    if not _set_name(entry["set"]):
        return "it names a set " + repr(entry["set"]) + ", which is no set name"
    patches = entry.get("patches", [])
    if not isinstance(patches, list):
        return "'patches' is missing or of the wrong type"
    for patch in patches:
        if not (isinstance(patch, dict) and isinstance(patch.get("name"), str)):
            return "a recorded patch has no name"
        if not _file_name(patch["name"]):
            return "a recorded patch's name " + repr(patch["name"]) + " is no file name"
        if not _is_digest(patch.get("sha256")):
            return repr(patch.get("sha256")) + " is not a sha256 hex digest"
        if not _is_absolute(patch.get("path", "/")):
            return _absolute_damage(patch.get("path"), "a recorded patch's path")
    if not isinstance(entry.get("held", False), bool):
        return "'held' is not true or false"
    if not _is_absolute(entry.get("library", "/")):
        return _absolute_damage(entry.get("library"), "a recorded library's path")
    files = entry.get("files")
    if not isinstance(files, dict):
        return "'files' is missing or of the wrong type"
    for path, shas in files.items():
        found = _file_damage(path, shas)
        if found is not None:
            return found
    return _adhoc_damage(entry["set"], files)


def _adhoc_damage(set_name: str, files: dict[str, Any]) -> str | None:
    """A --patch apply records only files under vllm/ (no --patch file changes another package)."""
    if not set_name.startswith("adhoc-"):
        return None
    for path in files:
        if path.split("/", 1)[0] != "vllm":
            return "a --patch apply's record names " + repr(path) + ", outside vllm/, which no --patch file changes"
    return None


def _absolute_damage(where: object, what: str) -> str:
    """What is wrong with a recorded absolute path _is_absolute refuses, in words."""
    if isinstance(where, str) and where.startswith("/") and len(where) > _MAX_PATCH_PATH:
        most = format(_MAX_PATCH_PATH, ",")
        return what + " is " + format(len(where), ",") + " characters long, more than a path may be (" + most + ")"
    if isinstance(where, str) and where.startswith("/"):
        return what + " holds a control character"
    return what + " is not an absolute path"


def _is_absolute(where: object) -> bool:
    return isinstance(where, str) and where.startswith("/") and len(where) <= _MAX_PATCH_PATH and where.isprintable()


def _file_damage(path: object, shas: object) -> str | None:
    if not isinstance(path, str):
        return "a path is " + type(path).__name__ + ", not text"
    parts = path.split("/")
    unsafe = not path or "\\" in path or "\x00" in path or path.startswith("/") or re.match(r"[A-Za-z]:", path)
    if unsafe or any(part in ("", ".", "..") for part in parts):
        return "the recorded path " + repr(path) + " is no relative path inside the tree"
    if _too_long(path):
        return "the recorded path " + repr(path) + " " + _too_long(path)
    if parts[0] in _STARTUP_HOOKS or not parts[0].isidentifier() or len(parts) < 2 or "__pycache__" in parts:
        return "the recorded path " + repr(path) + " is not a package file patchkit records"
    if not isinstance(shas, dict) or not {"before", "after"} <= set(shas):
        return path + ": 'before' and 'after' hashes are required"
    for digest in (shas["before"], shas["after"]):
        if digest is not None and not _is_digest(digest):
            return repr(digest) + " is not a sha256 hex digest"
    mode = shas.get("mode", 0o400)  # none recorded: revert leaves the mode
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
        return path + ": 'mode' " + repr(mode) + " is not a file's permission bits (0 to 0o777)"
    if not mode & 0o400 or mode & 0o002:  # revert would write it: never a mode apply records
        return path + ": 'mode' " + oct(mode) + " is not a mode patchkit records"
    return None


def _too_long(path: str) -> str:
    """Why a recorded path is none patchkit records ("": it is one): a name no file system holds, a
    path longer or deeper than any package's file (every directory on the way is judged)."""
    encoded = path.encode("utf-8", "surrogatepass")
    if any(len(part) > _MAX_NAME for part in encoded.split(b"/")):
        return "has a name over " + str(_MAX_NAME) + " bytes, which no file system here holds"
    if len(encoded) > _MAX_RECORDED_PATH:
        return "is over " + str(_MAX_RECORDED_PATH) + " bytes, longer than any file of a package"
    if path.count("/") >= _MAX_RECORDED_DEPTH:
        return "lies " + str(path.count("/")) + " directories deep, deeper than any file of a package"
    return ""


def _chosen_damage(chosen: object, key: str) -> str | None:
    if chosen is None:
        return None
    if not isinstance(chosen, list) or len(chosen) > _MAX_CHOSEN:
        return "'" + key + "' is not a list of set names"
    for name in chosen:
        if not _set_name(name):
            return "'" + key + "' names " + repr(name) + ", which is no set name"
    return None


def _file_name(name: str) -> bool:
    """patchkit.base.fsutil.file_name_problem's rule: a patch is named by its file (Path.name)."""
    if name in ("", ".", "..") or "/" in name or "\x00" in name:
        return False
    return len(name.encode("utf-8", "surrogateescape")) <= 255


def _set_name(name: object) -> bool:
    """patchkit.base.fsutil.set_name_problem's rule: printable, no '/' or '\\', not '.' or '..', no leading '-'."""
    if not (isinstance(name, str) and 0 < len(name) <= 200 and name.isprintable()):
        return False
    return "/" not in name and "\\" not in name and name not in (".", "..") and not name.startswith("-")


def _entry_record(entry: dict[str, Any]) -> Record:
    """An entry's record (its shape checked by state_damage)."""
    files = entry["files"]
    expected = {rel: shas["after"] for rel, shas in files.items()}
    before = {rel: shas["before"] for rel, shas in files.items()}  # None: patchkit created it
    version = entry.get("vllm_version")
    return version, expected, before


def _wheel_records(site: str) -> list[Record]:
    """(None, {path: patched sha256}, {}) when vLLM was installed from a wheel `patchkit wheel` built:
    its dist-info's patchkit.json. It describes the installed vLLM itself (pip replaces it with the
    dist-info), so no version is compared. A tree whose files are all back to stock (`patchkit
    revert`) records nothing; any other mix is a change. The record is believed only where a patched
    wheel's install put it (_held_to_the_install), as patchkit's commands believe it: else refused."""
    found = [name for name in _vllm_dist_infos(site) if name.lower().endswith(".dist-info")]
    if len(found) != 1:
        return []
    path = os.path.join(site, found[0], "patchkit.json")
    if not os.path.lexists(path):
        return []
    if not stat.S_ISDIR(os.lstat(os.path.join(site, found[0])).st_mode):
        raise TreeChanged(os.path.join(site, found[0]) + " is not a directory (a symlink?)")
    data = _read_json(path)
    damage = provenance_damage(data)
    if damage is not None:
        raise TreeChanged(path + " is damaged: " + damage)
    files = data["files"]
    patched, stock = {}, {}
    for rel, shas in files.items():
        if not isinstance(shas, dict) or not all(
            _digest_or_none(shas.get(k)) for k in ("stock_sha256", "patched_sha256")
        ):
            raise TreeChanged(path + " records " + repr(rel) + " without its sha256")
        if _file_damage(rel, {"before": None, "after": None}) is not None:
            raise TreeChanged(path + " records " + repr(rel) + ", no file a patch changes")
        patched[rel], stock[rel] = shas["patched_sha256"], shas["stock_sha256"]
    _held_to_the_install(site, found[0], data, patched)
    _shipped_patches(os.path.join(site, found[0]), data)
    if not _differing(site, stock):
        return []
    if data.get("set", "") is None and _wheel_held(site) != _provenance_digest(path):
        raise TreeChanged(_unheld_wheel(data))
    return [(None, patched, {})]


# a `wheel --patch` build (no set) an older patchkit made before its diffs were held to the sets'
# contracts: an apply of this patchkit judges it (patchkit.engine.held) and records its digest held
UNHELD_WHEEL = "came in a `patchkit wheel --patch` build that no apply of this patchkit held to the sets' contracts"


def _unheld_wheel(data: dict[str, Any]) -> str:
    names = [patch["name"] for patch in data["patches"]]
    return "--patch file" + ("s " if len(names) > 1 else " ") + ", ".join(names) + " " + UNHELD_WHEEL + UNHELD_WHY


def _provenance_digest(path: str) -> str:
    raw = _read_regular(path, MAX_RECORD_BYTES)
    return hashlib.sha256(raw or b"").hexdigest()


def _wheel_held(site: str) -> object:
    """The digest of the --patch wheel's patchkit.json an apply held (state.json's "wheel_held")."""
    if os.path.lexists(os.path.join(site, ".patchkit")):
        _refuse_odd_store(site)
    path = os.path.join(site, ".patchkit", "state.json")
    data = _read_json(path)
    damage = None if data is None else state_damage(data)
    if damage is not None:
        raise TreeChanged(path + " is damaged (" + damage + ")")
    return data.get("wheel_held") if isinstance(data, dict) else None


def _shipped_patches(dist_info: str, data: dict[str, Any]) -> None:
    """patchkit.distinfo.provenance.Provenance.patch_text: each patch the record names is in the
    dist-info (patchkit/, or patchkit/SET/ for a wheel of several sets; no symlink on the way), a
    regular file whose sha256 is the recorded one. (The files its diff touches are not compared
    here: that needs a diff parser, which status has.)"""
    sets = data["sets"] if "sets" in data else [{"set": "", "patches": data["patches"]}]
    for item in sets:
        directory = (
            os.path.join(dist_info, "patchkit", item["set"]) if item["set"] else os.path.join(dist_info, "patchkit")
        )
        for place in (os.path.join(dist_info, "patchkit"), directory):
            if os.path.lexists(place) and not stat.S_ISDIR(os.lstat(place).st_mode):
                raise TreeChanged(directory + " is not a plain directory (a symlink?); refusing to read it")
        for patch in item["patches"]:
            path = os.path.join(directory, patch["name"])
            try:
                raw = _read_regular(path, _PATCH_TEXT_BYTES)
            except TreeChanged:  # a symlink, a fifo, a device, too large: not the file the wheel put there
                raise TreeChanged("cannot read " + path + ": not a regular file of at most 16 MiB") from None
            if raw is None:
                raise TreeChanged("cannot read " + path + ": No such file or directory")
            if hashlib.sha256(raw).hexdigest() != patch["sha256"]:
                raise TreeChanged(path + " is not the patch patchkit.json records (sha256 differs)")


_PATCH_TEXT_BYTES = 16 << 20  # patchkit.distinfo.provenance.LIMIT


# -- a patched wheel's patchkit.json, by patchkit.distinfo.provenance.read_provenance's rules
# (tests/test_guard_provenance.py holds the two to the same verdict)
_PROVENANCE_KEYS = {"schema_version", "patchkit", "vllm_version", "label", "set", "patches", "files"}
_SEVERAL_SETS_KEYS = {"schema_version", "patchkit", "vllm_version", "label", "sets", "files"}


def provenance_damage(data: object) -> str | None:
    """Why a patchkit.json value is no record `patchkit wheel` wrote (what status calls it damaged
    for), or None."""
    if isinstance(data, dict) and data.get("schema_version") == 2:
        return _several_sets_damage(data)
    if not isinstance(data, dict) or set(data) != _PROVENANCE_KEYS:
        return "not a patchkit provenance record"
    if type(data["schema_version"]) is not int or data["schema_version"] != 1:
        return "schema_version " + repr(data["schema_version"]) + " is not 1"
    found = _texts_damage(data)
    name = data["set"]
    if found is None and name is not None and (not isinstance(name, str) or not name):
        found = "set is neither a name nor null"
    return found or _patch_list_damage(data["patches"]) or _provenance_files_damage(data["files"])


def _several_sets_damage(data: dict[str, Any]) -> str | None:
    if set(data) != _SEVERAL_SETS_KEYS or type(data["schema_version"]) is not int:
        return "not a patchkit provenance record of several sets"
    found = _texts_damage(data)
    sets = data["sets"]
    if found is None and (not isinstance(sets, list) or not 2 <= len(sets) <= 64):
        found = "sets is not a list of 2 to 64 sets"
    for item in sets if found is None else []:
        if not isinstance(item, dict) or set(item) != {"set", "patches"}:
            return "a set entry is not {set, patches}"
        if not _plain_name(item["set"]):
            return "set name " + repr(item["set"]) + " is not a plain name"
        found = found or _patch_list_damage(item["patches"])
    if found is None and len({item["set"] for item in sets}) != len(sets):
        found = "a set appears twice"
    return found or _provenance_files_damage(data["files"])


def _texts_damage(data: dict[str, Any]) -> str | None:
    for key in ("patchkit", "vllm_version", "label"):
        value = data[key]
        if not isinstance(value, str) or not value or len(value) > 200:
            return key + " is not a short string"
    return None


def _plain_name(name: object) -> bool:
    """patchkit.base.fsutil.plain_name_problem's rule: one safe path component."""
    if not isinstance(name, str) or not name or name in (".", ".."):
        return False
    return not any(c in name for c in "/\\\x00") and re.match(r"[A-Za-z]:", name) is None


def _patch_list_damage(patches: object) -> str | None:
    if not isinstance(patches, list) or not patches:
        return "patches is not a non-empty list"
    for item in patches:
        if not isinstance(item, dict) or set(item) != {"name", "sha256"}:
            return "a patch entry is not {name, sha256}"
        if not _plain_name(item["name"]):
            return "patch name " + repr(item["name"]) + " is not a plain file name"
        if not _is_digest(item["sha256"]):
            return "the sha256 of " + str(item["name"]) + " is not 64 lowercase hex digits"
    if len({item["name"] for item in patches}) != len(patches):
        return "a patch name appears twice"
    return None


def _provenance_files_damage(files: object) -> str | None:
    if not isinstance(files, dict) or not files:
        return "files is not a non-empty object"
    entries: dict[str, object] = files  # a JSON object: its keys are text
    for path, item in entries.items():
        if not isinstance(item, dict) or set(item) != {"stock_sha256", "patched_sha256"}:
            return "the entry of " + path + " is not {stock_sha256, patched_sha256}"
        if item["stock_sha256"] is None and item["patched_sha256"] is None:
            return "the entry of " + path + " records neither a stock nor a patched file"
        if not all(digest is None or _is_digest(digest) for digest in item.values()):
            return "the sha256 of " + path + " is not 64 lowercase hex digits"
    return None


NOT_BELIEVED = ": not believed"  # patchkit.distinfo.installed_wheel.untrusted's word for the same refusal


def _held_to_the_install(site: str, dist_info: str, data: dict[str, Any], patched: dict[str, str | None]) -> None:
    """patchkit.distinfo.installed_wheel._held_to_the_install: the dist-info's version is the release's
    with the label the record names, and its RECORD lists each file as the record says the wheel
    holds it (the patched sha256; a file the wheel deletes, not at all)."""
    origin = os.path.join(site, dist_info, "patchkit.json")
    stock, label = data.get("vllm_version"), data.get("label")
    expected = _labelled_key(stock, label)
    if expected is None or _version_key(dist_info[: -len(".dist-info")].partition("-")[2]) != expected:
        raise TreeChanged(
            origin
            + " is no patched wheel's: it names vLLM "
            + str(stock)
            + "+"
            + str(label)
            + ", but the dist-info is "
            + dist_info
            + NOT_BELIEVED
        )
    rows = _record_hashes(os.path.join(site, dist_info, "RECORD"), list(patched))
    if rows is None:
        raise TreeChanged(
            origin + " is beside no readable RECORD: nothing shows pip installed what it names" + NOT_BELIEVED
        )
    for rel, sha in sorted(patched.items()):
        wanted = None if sha is None else "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(sha)).rstrip(b"=").decode()
        if rows.get(rel) != wanted:
            said = "installed no file" if wanted is None else "installed the patched file"
            raise TreeChanged(
                origin
                + " says the wheel "
                + said
                + " at "
                + rel
                + ", but "
                + dist_info
                + "/RECORD lists it otherwise"
                + NOT_BELIEVED
            )


def _record_hashes(path: str, paths: list[str]) -> dict[str, str] | None:
    """{path: its hash entry} of the RECORD rows of `paths`, by patchkit.distinfo.record.parse_record's
    rule (a row without a hash never replaces one with a hash; two different hashes are neither:
    "twice"); None when the RECORD cannot be read plainly."""
    rows = _record_entries(path, paths)
    return None if rows is None else {rel: digest for rel, (digest, _size) in rows.items()}


def _record_entries(path: str, paths: list[str]) -> dict[str, tuple[str, str]] | None:
    """_record_hashes's rows, each (its hash entry, its size)."""
    try:
        raw = _read_regular(path, MAX_RECORD_BYTES)
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8")))) if raw is not None else None
    except (TreeChanged, UnicodeDecodeError, csv.Error):
        return None
    if rows is None:
        return None
    wanted, out, twice = set(paths), {}, set()  # type: set[str], dict[str, tuple[str, str]], set[str]
    for row in rows:
        if not row or row[0] not in wanted:
            continue
        digest, earlier = row[1] if len(row) > 1 else "", out.get(row[0], ("", ""))[0]
        if earlier and digest != earlier:
            if digest:
                twice.add(row[0])
            continue
        out[row[0]] = (digest, row[2] if len(row) > 2 else "")
    return {**out, **{rel: ("twice", "") for rel in twice}}


# PEP 440 (packaging.version's pattern, which this stdlib-only module cannot import), in groups
_PEP440 = re.compile(
    r"\s*v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)"
    r"(?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?"
    r"(?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?"
    r"(?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*",
    re.IGNORECASE | re.ASCII,
)
if TYPE_CHECKING:  # (epoch, release, pre, post, dev, local): what packaging's Version orders by
    VersionKey = tuple[int, tuple[int, ...], tuple[str, int] | None, int | None, int | None, tuple[int | str, ...]]
_PRE = {"alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc"}


def _version_key(text: object) -> VersionKey | None:
    """What packaging.version.Version compares two versions by (equal keys: equal versions), or None
    when `text` is no version."""
    found = _PEP440.fullmatch(text) if isinstance(text, str) and len(text) <= 200 else None
    if found is None:
        return None
    group = found.groupdict()
    release = [int(part) for part in group["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    pre = (
        None
        if group["pre_l"] is None
        else (_PRE.get(group["pre_l"].lower(), group["pre_l"].lower()), int(group["pre_n"] or 0))
    )
    post = group["post_n1"] or group["post_n2"] or ("0" if group["post_l"] else None)
    dev = None if group["dev_l"] is None else int(group["dev_n"] or 0)
    local = tuple(re.split(r"[-_.]", group["local"].lower())) if group["local"] else ()
    local_key = tuple(int(part) if part.isdigit() else part for part in local)
    return (int(group["epoch"] or 0), tuple(release), pre, None if post is None else int(post), dev, local_key)


def _labelled_key(stock: object, label: object) -> VersionKey | None:
    """The key of the version `patchkit wheel` gives a wheel of release `stock` labelled `label`
    (patchkit.distinfo.installed_wheel._labelled: a local label the release has already is extended)."""
    release, local = _version_key(stock), _version_key("0+" + label) if isinstance(label, str) else None
    if release is None or local is None or not local[-1]:
        return None
    return (*release[:-1], release[-1] + local[-1])


def _digest_or_none(value: object) -> bool:
    return value is None or (isinstance(value, str) and len(value) == 64)


# An unfinished change first; then the wheel's record: an apply recorded later in .patchkit/ changes
# files after it.
_RECORD_READERS = (_unfinished, _wheel_records, _state_records)


def _version_problems(site: str, recorded: str | None, seen: dict[str | None, list[str]]) -> list[str]:
    """What the installed vLLM's version says against `recorded`; `seen`: those said already."""
    if recorded not in seen:
        seen[recorded] = _against_installed(site, recorded)
    return seen[recorded]


def _against_installed(site: str, recorded: str | None) -> list[str]:
    if recorded is None:
        return []
    installed = installed_vllm_version(site)
    if installed == recorded:
        return []
    several = _vllm_dist_infos(site)
    if installed is None and len(several) > 1:  # never "vLLM None": which one runs cannot be told
        return [
            SEVERAL
            + " ("
            + ", ".join(several)
            + "), so the guard cannot tell which one runs; the patches were applied to vLLM "
            + recorded
        ]
    if not installed:  # never "vLLM None" nor "vLLM  ": no dist-info (a slimmed image), or one naming no version
        why = several[0] + " names no version" if several else NO_DIST_INFO
        return [why + ", so the guard cannot tell which vLLM runs; the patches were applied to vLLM " + recorded]
    return ["vLLM " + installed + " is installed, but the patches were applied to vLLM " + recorded]


NO_DIST_INFO = "no vllm-*.dist-info is beside vllm/"  # patchkit.engine.inspection names the fix by it


SEVERAL = "several vLLM distributions are installed"  # patchkit.engine.inspection names the fix by it


def _vllm_dist_infos(site: str) -> list[str]:
    """vLLM's metadata directories in site, by importlib.metadata's rule: a name ending in .dist-info
    or .egg-info in any case, `vllm` before the first '-' (patchkit.tree.target.vllm_metadata_dirs,
    which this worker cannot import; tests/test_distinfo_case.py checks that they agree)."""
    found = []
    for name in sorted(os.listdir(site)):
        low = name.lower()
        if low.endswith((".dist-info", ".egg-info")) and low.rpartition(".")[0].partition("-")[0] == "vllm":
            found.append(name)
    return found


def installed_vllm_version(site: str) -> str | None:
    """The Version header of vllm-*.dist-info/METADATA beside vllm/ (None: none, or several)."""
    found = _vllm_dist_infos(site)
    if len(found) != 1:
        return None
    # through a symlink, as importlib.metadata (vLLM's own reading, and patchkit's) reads it
    metadata = os.path.join(site, found[0], "METADATA")
    if not os.path.lexists(metadata):  # importlib.metadata reads PKG-INFO then (an .egg-info)
        metadata = os.path.join(site, found[0], "PKG-INFO")
    if os.path.exists(metadata) and not _resolves_inside(site, metadata):
        raise TreeChanged(metadata + " leads outside " + site + " (a symlink)")
    raw = _read_regular(metadata, 1 << 20, follow=True) or b""
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        if line.lower().startswith("version:"):
            return line.split(":", 1)[1].strip()
    return None


def _differing(site: str, files: dict[str, str | None]) -> list[tuple[str, str | None, str]]:
    """(path, its sha256 on disk or None, the problem) for each file not as `files` records it; a
    path outside site, or through a symlink, has the sha256 "" (no file's)."""
    found: list[tuple[str, str | None, str]] = []
    with _Tree(site) as tree:
        for rel, expected in sorted(files.items()):
            if not _plain_path(rel):
                found.append((rel, "", repr(rel) + " is recorded with a path outside " + site))
            elif tree.symlink_on_the_way(rel):
                found.append((rel, "", rel + " is a symlink, or under one: not the file patchkit wrote"))
            else:
                actual = tree.digest(rel)
                if actual != expected:
                    found.append((rel, actual, rel + " " + _how_changed(expected, actual)))
    return found


class _Tree:
    """The recorded files under site, each reached by its own path from site (a moved vllm/'s files
    from the directory its symlink names, _moved), one lstat a directory, each directory once: a
    symlink on the way is a refusal, so what it leads to is never resolved (a planted one may name a
    path thousands of directories long, each of them looked at again for each file)."""

    def __init__(self, site: str) -> None:
        self.site, self.moved = site, _moved(site)
        self.plain: set[str] = set()  # the directories (relative) found real ones
        self.links: set[str] = set()  # and the symlinks found: each path on the way looked at once
        self.digests: dict[tuple[int, int, int, int], str] = {}  # by (device, inode, size, mtime)
        self.hashed = 0
        self._fds: dict[str, int] = {}  # "": site, "vllm": a moved vllm/, each opened once
        if os.lstat in os.supports_dir_fd and os.open in os.supports_dir_fd:
            for first in ("", "vllm") if self.moved else ("",):
                fd = _directory_fd(os.path.join(site, first))
                if fd is not None:
                    self._fds[first] = fd

    def __enter__(self) -> _Tree:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self._fds.values():
            os.close(fd)

    def _place(self, sub: str) -> tuple[str, int | None]:
        """(the name os.lstat or os.open is given for site/sub, the directory it is relative to)."""
        first, _, rest = sub.partition("/")
        if rest and first == "vllm" and "vllm" in self._fds:
            return rest, self._fds["vllm"]
        return (sub, self._fds[""]) if "" in self._fds else (os.path.join(self.site, sub), None)

    def symlink_on_the_way(self, rel: str) -> bool:
        """Whether site/rel is, or is reached through, a symlink other than a moved vllm/."""
        parts, sub = rel.split("/"), ""
        for depth, part in enumerate(parts, 1):
            sub = sub + "/" + part if sub else part
            if sub in self.plain or (depth == 1 < len(parts) and self.moved and part == "vllm"):
                continue
            if sub in self.links:
                return True
            name, fd = self._place(sub)
            try:
                mode = os.lstat(name, dir_fd=fd).st_mode
            except OSError:  # nothing there, or nothing to look in: reading it says which
                return False
            if stat.S_ISLNK(mode):
                self.links.add(sub)
                return True
            if not stat.S_ISDIR(mode):
                return False
            self.plain.add(sub)
        return False

    def digest(self, rel: str) -> str | None:
        """The sha256 of site/rel, a regular file reached through no symlink (None: absent). A file
        (device, inode, size, mtime) is hashed once, and MAX_JUDGED_BYTES at most in all."""
        name, fd = self._place(rel)
        shown = os.path.join(self.site, rel)
        opened = _open_regular(name, fd, shown)
        if opened is None:
            return None
        with os.fdopen(opened[0], "rb") as fh:
            key = (opened[1].st_dev, opened[1].st_ino, opened[1].st_size, opened[1].st_mtime_ns)
            if key not in self.digests:
                if opened[1].st_size > MAX_FILE_BYTES:  # not read at all
                    raise TreeChanged(shown + " is larger than " + str(MAX_FILE_BYTES) + " bytes")
                if self.hashed + opened[1].st_size > MAX_JUDGED_BYTES:
                    raise TreeChanged(TOO_LARGE_TOGETHER)
                digest, read = hashlib.sha256(), 0
                # in pieces: one read of the bound would allocate all of it for any file
                for piece in iter(lambda: fh.read(1 << 20), b""):
                    read += len(piece)
                    if read > MAX_FILE_BYTES:
                        raise TreeChanged(shown + " is larger than " + str(MAX_FILE_BYTES) + " bytes")
                    digest.update(piece)
                self.hashed += read
                self.digests[key] = digest.hexdigest()
            return self.digests[key]

    def size(self, rel: str) -> int | None:
        """The size of the regular file site/rel, reached through no symlink (None: none there)."""
        if self.symlink_on_the_way(rel):
            return None
        name, fd = self._place(rel)
        try:
            info = os.lstat(name, dir_fd=fd)
        except OSError:
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None


def _directory_fd(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # its paths are then given whole: reading one says what fails
        return None


def _moved(site: str) -> bool:
    """Whether site/vllm is vLLM's package directory moved to another volume, a symlink to a
    directory left in its place (Python imports through it; patchkit applies through it): the files
    under it are judged from that directory; any other symlink on the way leads out."""
    linked = os.path.join(site, "vllm")
    return os.path.islink(linked) and os.path.isdir(linked)


def _how_changed(expected: str | None, actual: str | None) -> str:
    if actual is None:
        return "is missing"
    if expected is None:
        return "exists, but the patches removed it"
    return "was changed after patchkit patched it"


def _plain_path(rel: str) -> bool:
    """Whether `rel` is a relative path with no `..` (a record's path as patchkit writes it)."""
    return bool(rel) and "\x00" not in rel and "\\" not in rel and not os.path.isabs(rel) and ".." not in rel.split("/")


def _resolves_inside(site: str, path: str) -> bool:
    root = os.path.realpath(site)
    return os.path.realpath(path).startswith(root + os.sep)


def _read_regular(path: str, limit: int | None, *, follow: bool = False) -> bytes | None:
    """A regular file's bytes (up to `limit`; more is an error), not through a symlink unless
    `follow`; None if absent."""
    opened = _open_regular(path, None, path, follow=follow)
    if opened is None:
        return None
    with os.fdopen(opened[0], "rb") as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise TreeChanged(path + " is larger than " + str(limit) + " bytes")
    return data


def _open_regular(
    path: str, dir_fd: int | None, shown: str, *, follow: bool = False
) -> tuple[int, os.stat_result] | None:
    """(an open descriptor, its fstat) of the regular file `path` (relative to `dir_fd`, when given),
    not through a symlink unless `follow`; None if absent. `shown`: the path said."""
    nofollow = 0 if follow else getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TreeChanged("cannot read " + shown + " (" + (exc.strerror or str(exc)) + ")") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # before fdopen, which refuses a directory with its own error
        os.close(fd)
        raise TreeChanged(shown + " is not a regular file")
    return fd, info
