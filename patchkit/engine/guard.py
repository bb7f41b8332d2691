"""The guard `apply` installs inside vLLM: a tiny distribution `patchkit-guard` beside vllm/.

    <site-packages>/patchkit_guard.py                     patchkit/_target/guard.py, byte for byte
    <site-packages>/patchkit_guard-<v>.dist-info/METADATA
                                                 INSTALLER          "patchkit"
                                                 entry_points.txt   [vllm.general_plugins] patchkit_guard
                                                 RECORD             true sha256 and sizes, so pip uninstalls it

The files are written in the apply's transaction and recorded in state.json ("guard"), so revert
removes them in its own. Only an installed vLLM gets one (a vllm-*.dist-info beside vllm/): in a
source checkout the target root is no site-packages, and no entry point there would be seen.
"""

from __future__ import annotations

import _imp
import base64
import csv
import hashlib
import io
import os
import re
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import __version__
from patchkit.base import hints
from patchkit.base.errors import BadInput, PatchkitError, TargetError, escaped, few
from patchkit.base.fsutil import NotRegularFile, moved_package, read_file, read_regular
from patchkit.base.hashing import sha256
from patchkit.base.patterns import LazyPattern
from patchkit.checks import shadow
from patchkit.distinfo.entry_points import metadata_directories, named_entry_points, parse_entry_points, pth_directories
from patchkit.store.objects import read_object
from patchkit.store.state import META_DIR, State, read_state, state_path, through_a_symlink
from patchkit.tree.target import Target, launch_prefix, names_of, vllm_metadata_dirs

DISTRIBUTION = "patchkit-guard"
MODULE = "patchkit_guard.py"
ENTRY_POINT_NAME = "patchkit_guard"  # what a VLLM_PLUGINS allow-list must name
ENTRY_POINT_GROUP = "vllm.general_plugins"
ENTRY_POINT_ATTR = "check"  # the guard module's function vLLM's plugin loader must call

Changes = dict[str, tuple[bytes | None, bytes | None]]

if TYPE_CHECKING:  # pragma: no cover
    from types import ModuleType

    from patchkit._target.guard import Verdict


def _target_guard() -> ModuleType:
    """The guard module (patchkit/_target/guard.py), loaded on first use: a dry run judges no launch,
    and importing it is ~11 M instructions of one (bench/README)."""
    return import_module("patchkit._target.guard")


# The guard distribution's version: patchkit's with a local label (PEP 440), which no public index
# serves (PyPI refuses local versions): `pip freeze` in a patched venv prints `patchkit-guard==0.1.0+patchkit`,
# a pin `pip install -r` fails on (no such distribution) rather than one it installs from an index.
LOCAL_LABEL = "patchkit"
GUARD_VERSION = f"{__version__}{'.' if '+' in __version__ else '+'}{LOCAL_LABEL}"


def dist_info() -> str:
    return f"patchkit_guard-{GUARD_VERSION}.dist-info"


def builds_version(info: str) -> str:
    """The patchkit version whose guard a guard dist-info's name is (its local label dropped)."""
    version = info.removeprefix("patchkit_guard-").removesuffix(".dist-info")
    return version.removesuffix("." + LOCAL_LABEL).removesuffix("+" + LOCAL_LABEL)


def is_site_packages(root: Path) -> bool:
    """Whether the target root is where an installed vLLM lives (its dist-info beside vllm/)."""
    return any(p.is_dir() for p in vllm_metadata_dirs(root))


OWN_ENTRY_POINTS = f"[{ENTRY_POINT_GROUP}]\n{ENTRY_POINT_NAME} = patchkit_guard:{ENTRY_POINT_ATTR}\n"


def _own_source() -> bytes:
    """This patchkit's guard module, read from the file it was imported from (importlib.resources,
    which says the same of a package on disk, costs its imports: tempfile, zipfile, ~3 ms)."""
    return Path(_target_guard().__file__ or "").read_bytes()


def guard_files() -> dict[str, bytes]:
    """Every file of the guard distribution, path (relative to site-packages) -> bytes."""

    module = _own_source()
    info = dist_info()
    files = {
        MODULE: module,
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {GUARD_VERSION}\n"
            "Summary: patchkit's launch guard: refuses a vLLM tree that changed since `patchkit apply`\n"
        ).encode(),
        f"{info}/INSTALLER": INSTALLER,
        f"{info}/entry_points.txt": OWN_ENTRY_POINTS.encode(),
    }
    files[f"{info}/RECORD"] = _record(files, f"{info}/RECORD")
    return files


def _record(files: dict[str, bytes], own: str) -> bytes:
    """RECORD as pip writes it: path, sha256=<urlsafe base64, unpadded>, size; its own line bare."""

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([own, "", ""])
    return out.getvalue().encode()


STOPS_EVERY_LAUNCH = "it would stop every launch"
NOT_INSTALLED_VLLM = "the target is not an installed vLLM (no vllm-*.dist-info beside vllm/)"
NO_VERSION_READ = "so the guard would read no vLLM version"  # an empty or missing METADATA Version
NO_DIST_INFO = "no vllm-*.dist-info is beside vllm/"  # the guard's words for it: apply removes a guard there
NOT_BYTECODE = "is a fifo or a device, not bytecode: importing "  # a fifo or device named as a .pyc
PREFIXED = " (under the pycache prefix)"  # a .pyc under the pycache prefix


def unseen_guard_note(target: Target) -> str:
    """Why no guard goes into a tree its interpreter finds through a finder (an editable install of
    a checkout): nothing on its sys.path is beside vllm/, so a guard written there never loads."""
    return (
        f"no launch guard: {target.python} finds vllm/ through an editable install's finder, not with "
        f"{target.root} on its sys.path, so a guard there would never load and nothing refuses a launch "
        f"of a stale or half-patched tree; run {hints.command('status')} before each launch"
    )


def installed_vllm_version(root: Path) -> str | None:
    """The vLLM version the guard reads (vllm-*.dist-info/METADATA; None: none, or several), or a
    TargetError naming the file when it cannot be read: a tree problem, never patchkit's bug."""
    try:
        version: str | None = _target_guard().installed_vllm_version(str(root))  # its signature, through ModuleType
        return version
    except (_target_guard().TreeChanged, OSError) as exc:
        raise TargetError(
            f"the launch guard cannot read vLLM's version: {exc}",
            hint=f"put vLLM's own files back ({hints.pip_reinstall(None)}), then {hints.command('status')}",
        ) from None


def replace_fix(apply: str | None = None) -> str:
    """The fix for a guard patchkit did not write, or that changed since (`apply`: the apply --guard
    of the sets the record chose, where known)."""
    return f"run {apply or hints.command('apply', '--guard')} (it replaces the guard with this patchkit's, keeping a copy in .patchkit/saved/)"


def replace_hint() -> str:
    return f"{hints.command('apply', '--guard')} replaces it with this patchkit's guard (keeping a copy)"


def _unlike_version(root: Path, installed: str | None, applied_to: str) -> str:
    """Why the guard is not installed where the version it would read (vllm-*.dist-info's METADATA;
    apply refused several before) is not the one the series was applied to, and the fix: pip writes
    the dist-info (and vLLM's stock files) again, then apply patches them again."""
    found = vllm_metadata_dirs(root)
    where = f"{found[0].name}/METADATA" if len(found) == 1 else "vllm-*.dist-info/METADATA"
    if installed == "":
        read = f"{where}'s Version is empty, {NO_VERSION_READ}"
    elif installed is None:
        read = f"{where} has no Version, {NO_VERSION_READ}"
    else:
        read = f"the guard would read vLLM {installed} from {where}"
        if _VERSION_TEXT.fullmatch(installed):  # a release of its own: the series was applied by --vllm-version
            return f"{read}, but the series is applied to {applied_to}: no guard installed ({STOPS_EVERY_LAUNCH})"
    fix = f"{hints.pip_reinstall(applied_to)} writes it again, then {hints.command('apply')}"
    return f"{read}, but the series is applied to {applied_to}: no guard installed ({STOPS_EVERY_LAUNCH}); {fix}"


_VERSION_TEXT = LazyPattern(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9.]+)?")


def install_changes(
    root: Path, recorded: dict[str, str], vllm_version: str | None, *, replace: bool = False
) -> tuple[Changes, dict[str, str], str | None]:
    """The writes that install (or update) the guard; the guard record that results; or, when it
    cannot be installed (or would stop every launch), no writes, the record unchanged and why not.
    A guard file patchkit did not write, or that changed since, is replaced only with `replace`
    (the caller keeps a copy of it: replaced_files)."""
    if not is_site_packages(root):
        return {}, recorded, f"{NOT_INSTALLED_VLLM}: no guard installed"
    installed = installed_vllm_version(root)
    if vllm_version is not None and installed != vllm_version:
        return {}, recorded, _unlike_version(root, installed, vllm_version)
    wanted = guard_files()
    recorded = recorded or own_unrecorded(root)  # the record lost: an older build's guard is updated all the same
    foreign, edited = _not_patchkits(root, recorded, wanted)
    if foreign and not replace:
        return {}, recorded, f"{foreign[0]} exists and patchkit did not write it: kept; {replace_hint()}"
    if edited and not replace:
        return {}, recorded, f"{edited[0]} was changed after patchkit wrote it: kept; {replace_hint()}"
    changes, _kept = removal_changes(
        root, {p: sha for p, sha in recorded.items() if p not in wanted}
    )  # an older version's
    for path, data in wanted.items():
        current = _current(root, path)
        if current != data and read_file(root / path) != data:  # a symlink to the very bytes loads the same
            changes[path] = (current, data)
    return changes, {p: str(sha256(data)) for p, data in wanted.items()}, None


def own_unrecorded(root: Path) -> dict[str, str]:
    """This patchkit's guard files found in `root` with its very bytes (no record of them needed),
    or else the files of an older build's guard its own RECORD holds (the record lost): path ->
    sha256, as a guard record."""
    own = {path: str(sha256(data)) for path, data in guard_files().items() if _current(root, path) == data}
    info = None if MODULE in own else _unrecorded_build(root)
    if info is None:
        return own
    older = [MODULE, *(f"{info}/{name}" for name in _DIST_INFO_FILES)]
    return {path: digest for path in older if (digest := _digest(root, path)) is not None}


def foreign_files(root: Path, recorded: dict[str, str]) -> list[str]:
    """The guard's paths holding a file patchkit did not write (a user's own)."""
    return _not_patchkits(root, recorded, guard_files())[0]


def replaced_files(root: Path, recorded: dict[str, str]) -> list[str]:
    """The guard files an install with `replace` overwrites that patchkit did not write as they are."""
    foreign, edited = _not_patchkits(root, recorded, guard_files())
    return foreign + edited


def _not_patchkits(root: Path, recorded: dict[str, str], wanted: dict[str, bytes]) -> tuple[list[str], list[str]]:
    """The guard's paths holding a file patchkit did not write, and those changed since it did."""
    foreign = [p for p in wanted if p not in recorded and os.path.lexists(root / p) and _current(root, p) != wanted[p]]
    edited = [p for p in wanted if p in recorded and _edited(root, p, recorded[p], wanted[p])]
    return foreign, edited


def removal_changes(
    root: Path, recorded: dict[str, str], replaced: dict[str, str] | None = None
) -> tuple[Changes, list[str]]:
    """The writes that remove the recorded guard files still there, each only while it has the bytes
    patchkit recorded; and a note for each file kept because it was changed since. `replaced`: the
    user's files `apply --guard` replaced (path -> sha256, saved in objects/): put back instead."""
    changes: Changes = {}
    kept = []
    directories = {path.rpartition("/")[0] for path in recorded if "/" in path}
    linked = sorted(d for d in directories if os.path.islink(root / d))
    if linked:  # never written through; the guard kept whole stays loadable (nothing recorded: it passes)
        where = " ".join(str(root / p) for p in [*linked, MODULE])
        return {}, [f"{linked[0]} is a symlink: the launch guard is kept; to remove it: rm -r {where}"]
    for path, digest in recorded.items():
        current = _current(root, path)
        if current is None:
            continue
        if sha256(current) != digest:
            kept.append(f"{escaped(path)} was changed after patchkit wrote it: kept")
        elif not is_guard_file(path, current):
            kept.append(f"{escaped(path)} is not a file of patchkit's launch guard (its record says so): kept")
        else:
            changes[path] = (current, None)
    for path, digest in sorted((replaced or {}).items()):
        if path in changes:
            changes[path], said = _put_back(root, path, digest, changes[path][0])
            kept.append(said)
        elif not os.path.lexists(root / path):  # the guard went by its RECORD (pip uninstall): the place is free
            write, said = _put_back(root, path, digest, None)
            changes.update({path: write} if write[1] is not None else {})
            kept.append(said)
    return changes, kept


def _put_back(root: Path, path: str, digest: str, guard: bytes | None) -> tuple[tuple[bytes | None, bytes | None], str]:
    """The write that gives back the user's file `apply --guard` replaced at `path`, and the note
    that says so; when its saved bytes are gone, the guard file is removed all the same."""
    try:
        original = read_object(root, digest)
    except BadInput as exc:
        return (
            guard,
            None,
        ), f"{escaped(path)}: your own file that `apply --guard` replaced cannot be put back ({exc.message})"
    return (guard, original), f"{escaped(path)}: your own file that `apply --guard` replaced is put back"


def is_guard_file(path: str, data: bytes) -> bool:
    """Whether `data` is what a patchkit writes at `path` of a guard distribution (the version in
    its dist-info's name): a record naming a file there with its hash is no proof on its own (the
    record is read back from the tree). The module's bytes vary by patchkit: its name is the guard's."""
    info, _, name = path.rpartition("/")
    version = info.removeprefix("patchkit_guard-").removesuffix(".dist-info")
    if not info:
        return path == MODULE
    if name == "METADATA":
        return data.startswith(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n".encode())
    if name == "INSTALLER":
        return data == INSTALLER
    if name == "entry_points.txt":
        return data == OWN_ENTRY_POINTS.encode()
    if name == "RECORD":
        rows = data.decode("utf-8", "replace").splitlines()
        named = {row.partition(",")[0] for row in rows}
        return bool(rows) and named <= {MODULE, *(f"{info}/{n}" for n in _DIST_INFO_FILES)}
    return False


INSTALLER = b"patchkit\n"
_DIST_INFO_FILES = ("METADATA", "INSTALLER", "entry_points.txt", "RECORD")


def _edited(root: Path, path: str, digest: str, wanted: bytes) -> bool:
    """A recorded guard file that is neither as patchkit recorded it, nor gone, nor already what it will be."""
    current = _current(root, path)
    return current is not None and current != wanted and sha256(current) != digest


UNKNOWN_GUARD = "is not this patchkit's launch guard"
OLDER_GUARD = "is an older patchkit's launch guard"  # of other checks: apply updates it
NEWER_GUARD = "is a newer patchkit's launch guard"  # of other checks: this apply would replace it
STALE_GUARD = (OLDER_GUARD, NEWER_GUARD)  # another build's, of other checks than this one's
# refusal_text's leads for those: what the user did (an upgrade of patchkit), no ": " inside
UPGRADED_LEAD = "the launch guard is from before an upgrade of patchkit: "
NEWER_LEAD = "the launch guard is a newer patchkit build's: "
GUARD_REFUSES = "the launch guard refuses this tree: "
# what patchkit adds of another user's launch (unreadable_by_others): this user's guard may pass
OTHERS_REFUSED_LEAD = "another user's launch is refused: "
UNGUARDED_STALE_LEAD = "no launch guard runs, and a launch loads stale bytecode: "
UNGUARDED_UNJUDGED_LEAD = "no launch guard runs, and the bytecode a launch may load cannot be judged: "
NOT_OURS = "the installed launch guard is not this patchkit's: "
INSTEAD_OF_GUARD = "is imported instead of " + MODULE  # a file vLLM imports in the guard's place
# another plugin of the guard's entry point name, loaded after it: vLLM keeps one plugin per name, the last
DISPLACES_GUARD = f"declares another {ENTRY_POINT_GROUP} entry point named {ENTRY_POINT_NAME}"
SHADOWED_LEAD = "vLLM never runs the launch guard: "
# the guard module's own stale .pyc runs in its place: what that refuses cannot be told
STALE_OWN_LEAD = "the launch guard vLLM runs is stale bytecode, not the installed source: "
_OWN_STALE = " than " + MODULE + ":"  # own_stale_bytecode's findings name the guard module as their source


def refusal_summary(problems: list[str], guarded: bool = True) -> str:
    """launch_refusal's problems in a few words, for a verdict line: a guard module that is not this
    patchkit's is not said to refuse (what it does cannot be told)."""
    return refusal_text(problems, guarded).partition(": ")[0].replace("this tree", "the tree")


def of_other_checks(problem: str) -> bool:
    """The problem is another patchkit build's guard, as it wrote it, of other checks than this one's."""
    return any(said in problem for said in STALE_GUARD)


def refusal_text(problems: list[str], guarded: bool = True) -> str:
    """launch_refusal's problems as status, verify, preflight and run say them: a guard module that
    is not this patchkit's (edited, another's) refuses nothing patchkit can tell, so it is said as
    such; another build's is said as what made it so (most often an upgrade of patchkit). Not
    `guarded`: no guard is installed, and the problems are what the launch runs unrefused."""
    if not guarded and all(_stale_prefixed(p) or STALE_BYTECODE in p for p in problems):
        lead = UNGUARDED_STALE_LEAD
    elif not guarded and all(SYMLINKED in p or CACHE_OVERFULL.search(p) for p in problems):
        lead = UNGUARDED_UNJUDGED_LEAD  # unguarded_stale's refusal: no guard is there to refuse
    elif any(INSTEAD_OF_GUARD in p or DISPLACES_GUARD in p for p in problems):
        lead = SHADOWED_LEAD
    elif any(_OWN_STALE in p for p in problems):
        lead = STALE_OWN_LEAD
    elif any(OLDER_GUARD in p for p in problems):
        lead = UPGRADED_LEAD
    elif any(NEWER_GUARD in p for p in problems):
        lead = NEWER_LEAD
    elif all(p.startswith(OTHERS_CANNOT_READ) for p in problems):
        lead = OTHERS_REFUSED_LEAD
    else:
        lead = NOT_OURS if any(UNKNOWN_GUARD in p for p in problems) else GUARD_REFUSES
    return lead + few(problems)


def launch_refusal(root: Path, state: State | None = None) -> list[str]:
    """What the installed guard refuses a launch of this tree for (empty: no guard runs, or it
    passes): launch_verdict's problems."""
    return launch_verdict(root, state).problems


def _site_minor(root: Path) -> str | None:
    """The minor version of the Python 3 whose site-packages `root` is (ENV/lib/python3.X/site-packages:
    only that interpreter imports from there); None: the directory does not say."""
    match = re.fullmatch(r"python3\.([0-9]+)t?", root.parent.name) if root.name == "site-packages" else None
    return match.group(1) if match else None


def launch_tags(root: Path) -> tuple[str, ...]:
    """The bytecode tags of the Python that imports root's vllm, as its site-packages names it; else every CPython 3's."""
    minor = _site_minor(root)
    return (f"cpython-3{minor}",) if minor is not None else EVERY_CPYTHON


def launch_extensions(root: Path) -> tuple[str, ...]:
    """The extension module suffixes the Python that imports root's vllm imports: this one's, its
    version's tag in them made that Python's (every CPython 3's where the site does not say)."""
    own, tag = _imp.extension_suffixes(), sys.implementation.cache_tag or ""
    versioned = [suffix for suffix in own if tag and suffix.startswith(f".{tag}")]
    tags = {suffix.replace(tag, other, 1) for suffix in versioned for other in launch_tags(root)}
    return tuple(sorted({*own} - {*versioned} | tags))


# The bytecode names an unlistable __pycache__ is judged by here: patchkit may run on another Python than
# vLLM's (pipx on 3.12, vLLM on 3.11), so every CPython 3's, as a listable one is judged
EVERY_CPYTHON = tuple(f"cpython-3{minor}" for minor in range(100))


# launch_verdict's answers while verdicts_kept() holds them: (root, state, prefix, mode) -> the verdict
_kept: list[tuple[tuple[Path, State | None, str | None, str], Verdict]] | None = None


# the directories found real ones on the way to recorded files while verdicts_kept() holds: root -> them
_plain: dict[Path, set[str]] | None = None


@contextmanager
def verdicts_kept() -> Iterator[None]:
    """Within it, launch_verdict asked again of the same tree, record, prefix and mode gives its first
    answer (a copy): for a command that judges each covering set of a tree it does not change
    (status), the guard's check runs once, not once per set (its work grows with the record). So
    do the real directories on the way to the refused files (plain_directories)."""
    global _kept, _plain
    outer, plain = _kept, _plain
    _kept, _plain = [] if _kept is None else _kept, {} if _plain is None else _plain
    try:
        yield
    finally:
        _kept, _plain = outer, plain


def plain_directories(root: Path) -> set[str]:
    """The directories of `root` (relative) known to be real ones, for fsutil.first_symlink: kept
    across the covering sets while verdicts_kept() holds, else new."""
    return set() if _plain is None else _plain.setdefault(root, set())


def launch_verdict(root: Path, state: State | None = None, prefix: str | None = None, mode: str = "default") -> Verdict:
    """launch_verdict_of, kept while verdicts_kept() holds (see there)."""
    key = (root, state, prefix, mode)
    found = next((verdict for kept, verdict in _kept or () if kept == key), None)
    if found is None:
        found = launch_verdict_of(root, state, prefix, mode)
        if _kept is not None:
            _kept.append((key, found))
    verdict: type[Verdict] = _target_guard().Verdict  # the guard's class, seen through ModuleType
    return verdict(list(found.problems), found.stock_again, found.whole)  # a copy: callers change theirs


def launch_verdict_of(
    root: Path, state: State | None = None, prefix: str | None = None, mode: str = "default"
) -> Verdict:
    """What the installed guard finds (no problem: no guard runs, or it passes): this patchkit's
    guard check, run here as vLLM would run it, so that status, verify, preflight and run fail
    exactly when a launch would, and say the files stock again as it does. An installed module that
    is not this patchkit's guard (edited, another patchkit's) is a failure itself: what it does
    cannot be told; so is a guard's entry_points.txt vLLM's plugin loader could not read (a fifo
    hangs it). `state`: the record as the caller parsed it (None: parsed here, where needed);
    `prefix`: the launch's pycache prefix (None: this process's, "": none), where its bytecode is judged;
    `mode`: the launch's Python's --check-hash-based-pycs (status: the default mode)."""
    declared, unreadable = _declared(root)
    verdict: type[Verdict] = _target_guard().Verdict  # the guard's class, seen through ModuleType
    if unreadable:
        return verdict(unreadable)
    if not (declared and (root / MODULE).is_file()):
        return verdict(unguarded_stale(root, state, prefix, mode))
    prefix = launch_prefix(root) if prefix is None else prefix
    unknown = _shadowing_module(root) or _unknown_module(root, state)
    unknown += displacing_entry_point(root)
    closed = ", ".join(
        f"{escaped(path)} ({stat.S_IMODE(mode):04o})" for path, mode in unreadable_by_others(root, state)
    )
    hidden = [f"{OTHERS_CANNOT_READ} {closed}"] if closed else []
    try:
        found = _target_guard().judge(str(root), launch_tags(root), prefix, launch_extensions(root), mode)
        named = _prefixed_as_named(root, prefix, found.problems, mode) + own_stale_bytecode(root, prefix, mode)
    except Exception as exc:  # what check() catches and refuses for (guard.check): a refusal all the same
        return verdict([*unknown, *hidden, str(exc)])
    return verdict(unknown + hidden + found.problems + named, found.stock_again, found.whole)


def unguarded_stale(root: Path, state: State | None, prefix: str | None, mode: str = "default") -> list[str]:
    """Without a guard, nothing refuses the stale unchecked-hash bytecode of a recorded file at start-up,
    where the launch reads it (under its pycache prefix, None: launch_prefix; else __pycache__): the
    launch runs it, so status, verify and preflight say it (apply's bytecode fix, or removing it, ends it)."""
    prefix = launch_prefix(root) if prefix is None else prefix
    try:
        recorded = sorted({path for entry in (state or read_state(root)).entries for path in entry.files})
    except PatchkitError:  # a damaged record: status says so on its own
        return []
    # one reached through a symlink is said as that (its repair first): where it leads is never listed
    recorded = [path for path in recorded if not through_a_symlink(root, path)]
    try:
        found = [said for _rel, said in _stale_bytecode(root, recorded, prefix, mode)]
    except _target_guard().TreeChanged as exc:  # a planted symlink, a cache no Python wrote: refused as the guard does
        return [str(exc)]
    return [said for said in dict.fromkeys(found) if _stale_prefixed(said) or (not prefix and STALE_BYTECODE in said)]


def own_stale_bytecode(root: Path, prefix: str, mode: str = "default") -> list[str]:
    """The guard module's own stale bytecode, judged as a recorded file's: vLLM runs it in place of
    patchkit_guard.py, so the guard (that bytecode) cannot judge it; status and preflight do."""
    return list(dict.fromkeys(said for _rel, said in _stale_bytecode(root, [MODULE], prefix, mode)))


def with_stale_bytecode(root: Path, paths: list[str], prefix: str) -> list[str]:
    """Those of `paths` whose bytecode status judges stale (or a fifo or device), as the guard's own
    (none where it refuses to judge them: a planted symlink; status says that)."""
    try:
        return list(dict.fromkeys(rel for rel, _said in _stale_bytecode(root, paths, prefix)))
    except _target_guard().TreeChanged:
        return []


def _stale_bytecode(root: Path, paths: list[str], prefix: str, mode: str = "default") -> Iterator[tuple[str, str]]:
    """(source, finding) for each stale .pyc of `paths`, in the tree and each path it was reached by."""
    for site in (str(root), *(names_of(root) if prefix else ())):
        for rel, said, _pyc in _target_guard().stale_places(site, paths, launch_tags(root), prefix, mode):
            # a file at the top of site-packages: no directory before its __pycache__
            yield rel, said[1:] if said.startswith("/__pycache__/") else said


def _prefixed_as_named(root: Path, prefix: str | None, said: list[str], mode: str = "default") -> list[str]:
    """The stale bytecode under the pycache prefix at the other paths this run reached the tree by
    (a symlinked site): Python keys it by the import path as given, and the guard judges it there."""
    if not (launch_prefix(root) if prefix is None else prefix):
        return []
    found: list[str] = []
    for name in names_of(root):
        found += [
            p for p in _target_guard().judge(name, EVERY_CPYTHON, prefix, None, mode).problems if _stale_prefixed(p)
        ]
    return [p for p in dict.fromkeys(found) if p not in said]


def _shadowing_module(root: Path) -> list[str]:
    """A package or extension module named as the guard beside it: vLLM's entry point imports that
    in its place (FileFinder's order), so the guard never runs and what runs cannot be told."""
    stem, loaded = MODULE.removesuffix(".py"), launch_extensions(root)  # the launch's Python's suffixes only
    inits = {"__init__.py", "__init__.pyc", *(f"__init__{suffix}" for suffix in loaded)}
    found = [f"{stem}/{name}" for name in sorted(inits & {*shadow.regular_names(root / stem)})]
    site = os.fspath(root)  # joined as text: a Path a suffix (~100 where the site names no Python) was most of it
    found += [stem + suffix for suffix in loaded if os.path.isfile(os.path.join(site, stem + suffix))]
    return [f"{root / found[0]} {INSTEAD_OF_GUARD}: what a launch runs cannot be told"] if found else []


def displacing_entry_point(root: Path, places: list[str] | None = None) -> list[str]:
    """Another distribution's vllm.general_plugins entry point of the guard's name that vLLM loads
    after the guard's (later on sys.path, or beside it later in the listing): vLLM keeps its plugins
    in a dict by name, so it calls that one, never the guard. `places`: the launch's sys.path from
    the site on (None: the site and the directories its .pth files add)."""
    places = [str(root), *pth_directories(str(root))] if places is None else places
    points = named_entry_points(places, ENTRY_POINT_GROUP, ENTRY_POINT_NAME)
    if not points or points[-1][1].replace(" ", "") == f"{MODULE.removesuffix('.py')}:{ENTRY_POINT_ATTR}":
        return []
    info, value = points[-1]
    return [f"{info}/entry_points.txt {DISPLACES_GUARD} ({value}), which vLLM loads after the guard's and runs instead"]


def _unknown_module(root: Path, state: State | None) -> list[str]:
    """The installed guard module as a problem when this patchkit cannot tell what it refuses: not
    a patchkit's as it wrote it, or another build's of other checks (`apply` updates that one):
    older or newer by its check format, the one number that orders builds (versions may be equal)."""
    if _own_module(root):
        return []
    older = older_guard(root, state)
    if older is None:
        return [f"{root / MODULE} {UNKNOWN_GUARD} (edited, or another patchkit's)"]
    version, found = older
    if found == _target_guard().GUARD_FORMAT:
        return []
    said = OLDER_GUARD if found < _target_guard().GUARD_FORMAT else NEWER_GUARD
    return [
        f"{root / MODULE} {said} (patchkit {version}'s, of check format {found}; this patchkit's is "
        f"{_target_guard().GUARD_FORMAT}), so what it refuses may differ from what this patchkit finds"
    ]


OTHERS_CANNOT_READ = "other users (a vLLM they launch) cannot read"
# what another user needs of each file the guard reads, and of each directory on the way to one
_FILE_BITS, _DIR_BITS = stat.S_IROTH, stat.S_IROTH | stat.S_IXOTH


def unreadable_by_others(root: Path, state: State | None = None) -> list[tuple[str, int]]:
    """(path relative to root, mode) of each file or directory patchkit wrote that the guard, or
    vLLM's loading of it, reads at a launch by another user and that user cannot read: the record,
    the guard's files, the files the record names (an older patchkit wrote them under the umask,
    0600 under 077). Such a launch is refused, or runs unguarded. None when vllm/ itself is closed
    to other users (they cannot launch it at all). `state`: the record as the caller read it (None:
    read here)."""
    if not _open_to_others(root / "vllm", directory=True):
        return []
    try:
        state = state if state is not None else read_state(root)
    except PatchkitError:  # a damaged record: status says so on its own
        return []
    recorded = [p for entry in state.entries for p, shas in entry.files.items() if shas["after"] is not None]
    paths = [META_DIR, state_path(root).relative_to(root).as_posix(), MODULE, *state.guard, *recorded]
    found: dict[str, int] = {}
    judged: set[tuple[str, bool]] = set()  # the directories on the way are shared: each judged once
    walked: dict[str, tuple[int | None, int | None]] = {"": (None, stat.S_IFDIR)}
    for rel in paths:
        parts, sub = rel.split("/"), ""
        for depth, part in enumerate(parts, 1):
            sub, directory = f"{sub}/{part}" if depth > 1 else part, depth < len(parts)
            if (sub, directory) in judged:
                continue
            judged.add((sub, directory))
            mode = _plain_mode(root, sub, walked)
            if mode is not None and _closed(mode, directory=directory):
                found.setdefault(sub, mode)
    return sorted(found.items())


def make_readable(root: Path, state: State | None = None) -> list[str]:
    """Give other users read access (and search access to directories) to what unreadable_by_others
    finds, adding those bits only: the paths changed."""
    changed = []
    for rel, mode in unreadable_by_others(root, state):
        bits = _DIR_BITS | stat.S_IRGRP | stat.S_IXGRP if stat.S_ISDIR(mode) else _FILE_BITS | stat.S_IRGRP
        os.chmod(root / rel, stat.S_IMODE(mode) | bits, follow_symlinks=False)
        changed.append(rel)
    return changed


def _plain_mode(root: Path, rel: str, walked: dict[str, tuple[int | None, int | None]]) -> int | None:
    """root/rel's lstat mode; None when it is absent or a symlink, or under one (never changed through
    it). `walked`: each prefix's (that mode; the mode of the directory its children are reached through,
    None: there is none to reach), its parent's first: one lstat a prefix, never a walk from the root
    for each (which was minutes for a record's file a thousand directories deep)."""
    if rel in walked:
        return walked[rel][0]
    parent, _, name = rel.rpartition("/")
    above = walked[parent][1]
    mode = through = None
    if above is not None and stat.S_ISDIR(above) and name not in ("", ".", ".."):
        with suppress(OSError):
            mode = through = os.lstat(f"{os.fspath(root)}/{rel}").st_mode
    if mode is not None and stat.S_ISLNK(mode):
        # a moved vllm/ (a symlink to its directory): its files are judged inside it, as Python imports them
        through = stat.S_IFDIR if not parent and moved_package(root, rel) else None
        mode = None
    walked[rel] = (mode, through)
    return mode


def _closed(mode: int, *, directory: bool) -> bool:
    """Whether a regular file (or a directory) of this mode is closed to other users; on the way to
    a file (`directory`), only a directory counts."""
    kind_ok = stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode) or stat.S_ISDIR(mode)
    bits = _DIR_BITS if stat.S_ISDIR(mode) else _FILE_BITS
    return kind_ok and mode & bits != bits


def _open_to_others(path: Path, *, directory: bool, mode: int | None = None) -> bool:
    if mode is None:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return False
    bits = _DIR_BITS if directory else _FILE_BITS
    return mode & bits == bits


def older_guard(root: Path, state: State | None = None) -> tuple[str, int] | None:
    """The version and check format (the guard's GUARD_FORMAT) of another patchkit build whose
    guard is installed as it wrote it, or None. Recorded in state.json: every guard file it recorded
    has its recorded bytes; recorded nowhere (the record lost): its dist-info's RECORD holds them."""
    try:
        recorded = (state if state is not None else read_state(root)).guard
    except PatchkitError:  # a damaged record: status says so on its own
        return None
    info = _recorded_build(root, recorded) if recorded else _unrecorded_build(root)
    module = _current_bounded(root, MODULE, ENTRY_POINTS_BYTES) if info is not None else None
    if info is None or module is None:
        return None
    return builds_version(info), guard_format(module)


def _recorded_build(root: Path, recorded: dict[str, str]) -> str | None:
    """The guard dist-info of the build the record names, when its files are as recorded."""
    infos = {p.partition("/")[0] for p in recorded if "/" in p}
    if MODULE not in recorded or len(infos) != 1:
        return None
    if any(_digest(root, path) != digest for path, digest in recorded.items()):
        return None
    info = infos.pop()
    # the same version: another build of it (any two builds of main are both 0.1.0) when the guard's
    # own RECORD holds its bytes too; an edit with the record's hash rewritten is caught there
    return None if info == dist_info() and not _record_holds(root, info) else info


def _unrecorded_build(root: Path) -> str | None:
    """The one guard dist-info in `root` whose RECORD holds its files as a patchkit wrote them."""
    infos = _guard_dist_infos(root)
    return infos[0] if len(infos) == 1 and _record_holds(root, infos[0]) else None


def _guard_dist_infos(root: Path) -> list[str]:
    """The guard dist-info directories in `root` (real directories: none reached through a symlink)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = [n for n in names if n.startswith("patchkit_guard-") and n.endswith(".dist-info")]
    return sorted(n for n in found if (root / n).is_dir() and not (root / n).is_symlink())


_FORMAT_LINE = LazyPattern(rb"^GUARD_FORMAT = ([0-9]{1,9})$", re.MULTILINE)


def guard_format(module: bytes) -> int:
    """The check format a guard module declares (1: a build from before formats were numbered)."""
    found = _FORMAT_LINE.search(module)
    return int(found.group(1)) if found else 1


def other_build(root: Path, state: State | None = None) -> tuple[str, bool] | None:
    """The version of another patchkit build whose guard is installed here as it wrote it (an
    apply updates it to this build's), and whether its checks are newer than this build's; None:
    this build's, none, or not a patchkit's."""
    if not is_installed(root) or _own_module(root):
        return None
    found = older_guard(root, state)
    return (found[0], found[1] > _target_guard().GUARD_FORMAT) if found is not None else None


def judges_as_this_build(root: Path, state: State | None = None) -> bool:
    """Whether the installed guard module judges a tree as this patchkit does: its own, or an older
    build's of the same check format, as that build wrote it."""
    if _own_module(root):
        return True
    older = older_guard(root, state)
    return older is not None and older[1] == _target_guard().GUARD_FORMAT


RECORD_BYTES = 1 << 16  # a guard's RECORD is five lines


def _record_holds(root: Path, info: str) -> bool:
    """Whether the guard dist-info's RECORD names its module and each file of the dist-info with
    their very bytes, each what a patchkit writes there: a guard as a patchkit wrote it, not edited."""
    own = f"{info}/RECORD"
    record = _current_bounded(root, own, RECORD_BYTES)
    if record is None or not is_guard_file(own, record):
        return False
    rows = list(csv.reader(record.decode("utf-8", "replace").splitlines()))
    listed = {row[0]: row[1] for row in rows if len(row) == 3 and row[0] != own}
    if set(listed) != {MODULE, *(f"{info}/{name}" for name in _DIST_INFO_FILES if name != "RECORD")}:
        return False
    for path, digest in listed.items():
        data = _current_bounded(root, path, ENTRY_POINTS_BYTES)
        if data is None or not is_guard_file(path, data):
            return False
        if digest != "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode():
            return False
    return True


def _current_bounded(root: Path, path: str, limit: int) -> bytes | None:
    """root/path's bytes when it is a regular file (not a symlink) of at most `limit` bytes; else None."""
    try:
        return read_regular(root / path, limit, follow_symlinks=False)
    except OSError:  # NotRegularFile too: a fifo, a symlink, over the limit
        return None


def older_guard_notes(root: Path, state: State | None = None) -> list[str]:
    """An older build's guard of this build's checks: it refuses what this patchkit finds (a note)."""
    found = older_guard(root, state) if is_installed(root) and not _own_module(root) else None
    if found is None or found[1] != _target_guard().GUARD_FORMAT:
        return []
    older = found[0]
    if older == __version__:
        return [f"the launch guard is an older build of patchkit {older}'s: {hints.command('apply')} updates it"]
    return [f"the launch guard is patchkit {older}'s (this is {__version__}): {hints.command('apply')} updates it"]


UNRECORDED_GUARD = "the launch guard is installed, but no record names it"


def unrecorded_guard_notes(root: Path, state: State | None = None) -> list[str]:
    """This patchkit's guard installed where no record names it (state.json removed by hand): it
    checks nothing (the guard passes), and `revert` removes it."""
    try:
        state = state if state is not None else read_state(root)
    except PatchkitError:  # a damaged record: status says so on its own
        return []
    if state.entries or state.guard or not (is_installed(root) and judges_as_this_build(root, state)):
        return []
    # apply first: it records the sets it finds applied, and the guard checks the tree again
    return [
        f"{UNRECORDED_GUARD}, so it checks nothing: "
        f"{hints.command('apply')} records the tree as it is ({hints.command('revert')} removes the guard and any patches applied)"
    ]


GUARD_GONE = "the launch guard an apply installed no longer loads"
CHANGED_SINCE = "changed since apply"  # a guard file edited: apply keeps it, apply --guard replaces it


def missing_guard(root: Path, state: State | None) -> str | None:
    """What to say when the record names a guard that vLLM would no longer load (`pip uninstall
    patchkit-guard` took its files, or its entry point was changed): the tree is patched, but no
    launch is checked. None: as recorded, or loaded all the same."""
    several = _unguarded_among_several(root, state) or _unguarded_for_its_version(root, state)
    if several is not None:
        return several
    recorded = state.guard if state is not None and not state.no_guard else {}
    gone = [path for path in recorded if not os.path.lexists(root / path)]
    changed = [] if gone else [path for path, digest in recorded.items() if _digest(root, path) != digest]
    if not (gone or changed) or is_installed(root):
        return None
    why = f"{gone[0]} is gone" if gone else f"{changed[0]} {CHANGED_SINCE}"
    return f"{GUARD_GONE} ({why}): vLLM launches this tree unchecked"


def _unguarded_among_several(root: Path, state: State | None) -> str | None:
    """An applied tree of several vllm-*.dist-info with no guard, none told --no-guard: an apply
    with --vllm-version there used to remove the guard (it would stop every launch)."""
    if state is None or not state.entries or state.guard or state.no_guard or is_installed(root):
        return None
    names = [d.name for d in vllm_metadata_dirs(root)]
    if len(names) < 2:
        return None
    return (
        f"no launch guard: {_target_guard().SEVERAL} ({', '.join(names)}), which stops a guard, "
        "so none is installed: vLLM launches this tree unchecked"
    )


def _unguarded_for_its_version(root: Path, state: State | None) -> str | None:
    """An applied tree with no guard, none told --no-guard, whose one vllm-*.dist-info's METADATA
    has an empty or no Version (the release told by vllm/_version.py): apply installed no guard, as
    it would stop every launch. Said with the version its fix reinstalls (guard_missing_fix)."""
    if state is None or not state.entries or state.guard or state.no_guard or len(vllm_metadata_dirs(root)) != 1:
        return None
    applied_to = state.entries[-1].vllm_version
    try:
        installed = installed_vllm_version(root)
    except TargetError:  # unreadable: status says so on its own
        return None
    if installed or applied_to is None or is_installed(root):
        return None
    read = _unlike_version(root, installed, applied_to).partition(", but ")[0]
    return f"no launch guard: {read}, but the series is applied to {applied_to}: vLLM launches this tree unchecked"


def several_vllms_refusal(root: Path) -> TargetError | None:
    """The refusal of an apply that would install the guard on a tree of several vllm-*.dist-info:
    the guard could not tell which vLLM runs and would stop every launch (None: one, or none)."""
    names = [d.name for d in vllm_metadata_dirs(root)]
    if len(names) < 2:
        return None
    return TargetError(
        f"several vLLM distributions in {root}: {', '.join(names)}: the launch guard could not tell which "
        f"one runs, so it would stop every launch; nothing was written",
        hint=f"{SEVERAL_FIX}, then run the same command again (or add --no-guard to apply without the guard)",
    )


SEVERAL = "several vLLM distributions are installed"  # the guard's words for several vllm-*.dist-info (its fix is SEVERAL_FIX)
SHADOWED = "is imported instead of"  # a package or extension module imported instead of a recorded file
STALE_BYTECODE = "is unchecked-hash bytecode compiled from other bytes than"  # a stale unchecked-hash .pyc of a recorded file (apply fixes it)
# a symlinked __pycache__ or .pyc of a recorded file, never followed (apply writes through none): removed by hand
SYMLINKED = " is a symlink, which Python never writes there: the guard does not follow it"
MORE_SYMLINKED = " more of the recorded files' bytecode are symlinks too"
CACHE_OVERFULL = LazyPattern(r"(\S+/__pycache__) holds more than [0-9]+ files")  # no cache Python wrote
_PREFIXED_STALE = PREFIXED + " " + STALE_BYTECODE
# a stale checked-hash .pyc, which only a launch's Python run with --check-hash-based-pycs never loads
STALE_CHECKED = "is checked-hash bytecode compiled from other bytes than"


def _stale_prefixed(problem: str) -> bool:
    return _PREFIXED_STALE in problem or PREFIXED + " " + STALE_CHECKED in problem


def stale_under_prefix(root: Path, paths: list[str], prefix: str | None) -> list[tuple[str, Path]]:
    """(source, .pyc) for each stale unchecked-hash .pyc of `paths` under the pycache `prefix` (None:
    the launch's, launch_prefix), which Python reads in place of __pycache__: none without a prefix."""
    prefix = launch_prefix(root) if prefix is None else prefix
    if not prefix:
        return []
    # the tree as named too (a symlinked site): the path Python keys the launch's bytecode by
    found: dict[str, str] = {}
    for site in (str(root), *names_of(root)):
        try:
            places = _target_guard().stale_places(site, paths, EVERY_CPYTHON, prefix, "default")
        except _target_guard().TreeChanged:  # a planted symlink there: removed by hand (status says so)
            continue
        for rel, _said, pyc in places:
            found.setdefault(pyc, rel)
    return [(rel, Path(pyc)) for pyc, rel in found.items()]


def prefixed_bytecode(problems: list[str]) -> list[str]:
    """The stale .pyc files under a pycache prefix the guard's `problems` name (apply, which looks in
    __pycache__ only, leaves them: each is removed by hand)."""
    return [problem.partition(PREFIXED + " ")[0] for problem in problems if _stale_prefixed(problem)]


# an ad-hoc --patch apply an older patchkit recorded without holding it to the sets' contracts (the guard's UNHELD)
UNHELD = "was applied by a patchkit that did not hold --patch diffs to the patch sets' contracts"
# an older patchkit's `wheel --patch` build installed, its patchkit.json recorded held by no apply (the guard's UNHELD_WHEEL)
UNHELD_WHEEL = "came in a `patchkit wheel --patch` build that no apply of this patchkit held to the sets' contracts"
SEVERAL_FIX = "remove the stale vllm-*.dist-info directories (pip left them; keep the installed vLLM's)"


def _digest(root: Path, path: str) -> str | None:
    try:
        current = _current(root, path)
    except OSError:  # a fifo or a directory there: not what apply wrote
        return None
    return str(sha256(current)) if current is not None else None


def _own_module(root: Path) -> bool:

    own = _own_source()
    try:  # through a symlink, as Python's import reads it
        return read_regular(root / MODULE, len(own) + 1, follow_symlinks=True) == own
    except OSError:
        return False


def is_installed(root: Path) -> bool:
    """Whether vLLM would load a guard here: its module, and a distribution declaring its entry point."""
    return (root / MODULE).is_file() and _declared(root)[0]


ENTRY_POINTS_BYTES = 1 << 20  # a guard's entry_points.txt is two lines


def _declared(root: Path) -> tuple[bool, list[str]]:
    """Whether a distribution in `root` declares an entry point of the guard's module in vLLM's
    plugin group, found by importlib.metadata's own rules (metadata_directories: any *.dist-info or
    *.egg-info, whatever its case, symlinks followed; its entry_points.txt parsed by importlib); and
    the guard's entry_points.txt files it could not read (a fifo, a device, a huge file), each a problem."""
    declared, unreadable = False, []
    for info in sorted(metadata_directories(str(root))):
        path = Path(info) / "entry_points.txt"
        try:
            text = read_regular(path, ENTRY_POINTS_BYTES, follow_symlinks=True).decode("utf-8", "replace")
        except FileNotFoundError:
            continue
        except NotRegularFile as exc:
            if Path(info).name.lower().replace("-", "_").startswith("patchkit_guard"):
                unreadable.append(
                    f"{escaped(str(path))} is {exc.strerror}: vLLM's plugin loader reads it at every launch"
                )
            continue
        except OSError:
            continue
        declared = declared or _declares_guard(text)
    return declared, unreadable


def _declares_guard(text: str) -> bool:
    """Whether an entry_points.txt declares the guard's module in vLLM's plugin group, as importlib
    reads it. The text patchkit writes, and one that never names the module, need no parser: that
    keeps importlib.metadata (and email) out of `run`'s fast path and status."""
    module = MODULE.removesuffix(".py")
    if text == OWN_ENTRY_POINTS:
        return True
    if module not in text:
        return False
    try:
        # the module alone is not the guard: vLLM calls what the entry point names (`patchkit_guard:nothing`
        # fails to load, and vLLM logs it and launches unchecked)
        points = parse_entry_points(text).select(group=ENTRY_POINT_GROUP)
        return any(ep.module == module and ep.attr == ENTRY_POINT_ATTR for ep in points)
    except (ValueError, TypeError, AttributeError):  # importlib raises on it: vLLM loads no plugin
        return False


def remove_empty_cache(root: Path) -> None:
    """The __pycache__/ Python made beside the guard module when it ran, once its .pyc is removed
    and nothing else is in it (a site-packages without any other top-level module)."""
    with suppress(OSError):
        (root / "__pycache__").rmdir()


def _current(root: Path, path: str) -> bytes | None:
    return read_file(root / path, follow_symlinks=False)
