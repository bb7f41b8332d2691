"""Which files a library set's record may name: those its series' patches change.

state.json is read back from the tree: an entry naming another file (any package's, in a
`--target site-packages`) with a planted original in objects/ would have revert write those bytes
there. apply records only the files the set's patches change, so a record naming another is none
patchkit wrote: every command refuses it, as it refuses a record saying patchkit created a file an
installed distribution lists (operations._refuse_created_stock_files). A --patch apply's record is
held to vllm/ when it is parsed (store.state), as no --patch file changes anything else.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import BadInput, PatchkitError
from patchkit.base.hashing import sha256
from patchkit.distinfo.record import listings, record_digest
from patchkit.series import dry_run
from patchkit.series.hunks import made_file, reverse_file
from patchkit.series.library import PatchSetDef, Release, load_library, locate
from patchkit.series.patchfile import DEFAULT_ROOTS, Patch, read_patch, touched_paths
from patchkit.store.objects import read_object
from patchkit.store.state import Entry, State, is_adhoc, recorded_file, state_path

if TYPE_CHECKING:
    from patchkit.series.plan import Plan


def refuse_unvouched(root: Path, entry: Entry, known: Sequence[Patch] = ()) -> None:
    """A library set's record naming a file it edited that none of the set's patches changes is
    refused (exit 2); with the patches it records in no library at hand, only files under vllm/ are
    taken on its word (revert keeps a copy of what it replaces where nothing else vouches for the original)."""
    if is_adhoc(entry.set_name):
        return
    allowed = series_paths(entry, known)
    # a file it says patchkit created is revert's to judge (plan._require_creator): deleted only on the
    # word of a patch that creates it, kept otherwise, nothing written over it
    edited = sorted(path for path, shas in entry.files.items() if shas["before"] is not None)
    stray = [
        path
        for path in edited
        if (path not in allowed if allowed is not None else path.split("/", 1)[0] not in DEFAULT_ROOTS)
    ]
    if not stray:
        return
    origin = state_path(root)
    why = "none of its patches changes it" if allowed is not None else "its patches are in no library at hand"
    elsewhere = (
        f"give --patches {shlex.quote(entry.library)} (the library it was applied from); else "
        if allowed is None and entry.library is not None
        else ""
    )
    raise BadInput(
        f"{origin} records {stray[0]} for set {entry.set_name}, but {why}: patchkit records no such file, "
        "and reverting that record would write its bytes there; nothing was written",
        hint=f"{elsewhere}inspect it, or move it aside (mv {shlex.quote(str(origin))} "
        f"{shlex.quote(f'{origin}.damaged')}); then {hints.command('revert')} undoes the series it finds applied",
    )


# what a series of patches changes, by their (name, sha256): the bytes decide it, so it is kept per
# process (status judges every record once per set it shows)
_TOUCHED: dict[frozenset[tuple[str, str]], frozenset[str]] = {}


def series_paths(entry: Entry, known: Sequence[Patch] = ()) -> frozenset[str] | None:
    """Every path the patches the entry records change, found by their sha256 among `known` (the
    series at hand) or in the library at hand; an entry recording no patch (none apply wrote), what
    that library's series for its vLLM version changes (every release's when none covers it). None
    when the patches it records are not at hand (the library changed since: judged by vllm/ alone)."""
    recorded = frozenset((p["name"], p["sha256"]) for p in entry.patches)
    found = _TOUCHED.get(recorded) or _own_touched(recorded, known)
    if found is None:
        try:
            patch_set = load_library(locate(hints.current().library).path).get(entry.set_name)
            if patch_set is None:
                return None
            releases = _covering(patch_set, entry.vllm_version) or list(patch_set.releases)
            series = [p for r in releases for p in r.read_patches(patch_set.roots)]
        except PatchkitError:
            return None
        if not recorded:
            return frozenset(touched_paths(series))
        found = _own_touched(recorded, series)
        if found is None:
            return None
    _TOUCHED[recorded] = found
    return found


def _own_touched(recorded: frozenset[tuple[str, str]], patches: Sequence[Patch]) -> frozenset[str] | None:
    """What the recorded patches change, when `patches` holds every one of them (by sha256)."""
    own = {(p.name, p.sha256): p for p in patches if (p.name, p.sha256) in recorded}
    if not recorded or own.keys() != recorded:
        return None
    return frozenset(touched_paths(list(own.values())))


def _covering(patch_set: PatchSetDef, version: str | None) -> list[Release]:
    try:
        found = Version(version) if version else None
    except ValueError:
        return []
    return [r for r in patch_set.releases if found is not None and r.covers(found)]


def patches_at_hand(entry: Entry, root: Path) -> list[Patch]:
    """A --patch apply's patches still where it read them, those very bytes (the record's sha256);
    a library set's, in the library the record says it was applied from (outside the tree `root`:
    one inside is as untrusted as the record): what a revert may reverse to tell the originals true."""
    if not is_adhoc(entry.set_name):
        return _in_recorded_library(entry, root)
    found = []
    for recorded in entry.patches:
        where = recorded.get("path")
        try:
            patch = read_patch(Path(where), follow_symlinks=True) if where else None
        except (OSError, PatchkitError):  # moved, unreadable, no diff: nothing at hand
            continue
        if patch is not None and patch.sha256 == recorded["sha256"]:
            found.append(patch)
    return found


def _in_recorded_library(entry: Entry, root: Path) -> list[Patch]:
    """The patches the entry records (by name and sha256) in the library it names, still there."""
    if entry.library is None or Path(entry.library).resolve().is_relative_to(root.resolve()):
        return []
    return recorded_in_library(entry, entry.library)


def recorded_in_library(entry: Entry, library: str | None) -> list[Patch]:
    """The patches a library set's record names (by name and sha256) in `library` (None: the one
    patchkit finds), in its series' order; none when it holds other bytes or cannot be read."""
    recorded = {(p["name"], p["sha256"]) for p in entry.patches}
    try:
        patch_set = load_library(locate(library).path).get(entry.set_name)
        series = [p for r in patch_set.releases for p in r.read_patches(patch_set.roots)] if patch_set else []
    except (OSError, PatchkitError):  # gone, moved, damaged: nothing at hand
        return []
    return list({p.sha256: p for p in series if (p.name, p.sha256) in recorded}.values())


def needs_force(root: Path, entry: Entry) -> bool:
    """Whether reverting the entry writes back an original that only its record vouches for (revert
    then asks for --force): its patches are not all at hand, and vLLM's RECORD does not list each
    original (a file it created: none, so the delete is on the record's word)."""
    at_hand = {p.sha256 for p in patches_at_hand(entry, root)}
    if entry.patches and all(p["sha256"] in at_hand for p in entry.patches):
        return False
    listed: dict[str, set[str]] = {}
    for name, rows in listings(root, list(entry.files)).rows.items():
        for path, hash_entry in (rows or {}).items() if name.startswith("vllm-") else ():
            listed.setdefault(path, set()).add(hash_entry)
    return any(
        shas["before"] is None or record_digest(bytes.fromhex(shas["before"]), "sha256") not in listed.get(path, ())
        for path, shas in entry.files.items()
    )


def not_made_by_the_series(root: Path, entry: Entry, known: Sequence[Patch] = ()) -> list[str]:
    """The files `entry` wrote last (their bytes its recorded "after") that are not what its recorded
    patches make of the original it saved: that "after" is read back from the tree (a hotfix the
    record was then made to name, or a planted one), so revert keeps a copy of them. Only the
    recorded patches at hand judge (`known`, else where the record says they were): none, none said."""
    recorded = [p["sha256"] for p in entry.patches]  # known by their bytes: a recorded name is read back too
    at_hand = {p.sha256: p for p in known}
    if any(key not in at_hand for key in recorded):
        at_hand.update({p.sha256: p for p in patches_at_hand(entry, root)})
    if not recorded or any(key not in at_hand for key in recorded):
        return []
    series = [at_hand[key] for key in dict.fromkeys(recorded)]
    # the drift check read each file: its bytes are kept, not read again (hard links: one file)
    there: Callable[[str], bytes | None] = lambda path: _bytes(recorded_file(root, path))  # noqa: E731
    unmade = []
    for path, shas in sorted(entry.files.items()):
        try:
            found = recorded_file(root, path)
            if not isinstance(found, tuple) or found[0] != shas.get("after"):  # drift, or a later set's
                continue
            data = found[1]
            before = shas.get("before")
            if before is None:  # created by the series: made from nothing
                unmade += [path] if made_file(lambda _: None, path, series, digest=False) != data else []
            elif reverse_file(there, path, series, digest=False) != read_object(root, before):
                unmade.append(path)
        except (OSError, PatchkitError):  # unreadable, its original lost: other checks say so
            continue
    return unmade


def series_at_hand(path: str) -> Iterator[tuple[list[Patch], str]]:
    """The series the user's command may have applied to `path`, each with its words: its --patch
    diffs, then each release's series of each set in the user's library (--patches, else the one
    patchkit finds) that changes it. What an apply cut short wrote is undone by reversing one; the
    result is held to the journal's sha256 by the caller. Unreadable ones are skipped."""
    adhoc = hints.current().adhoc
    with suppress(OSError, PatchkitError):
        diffs = [read_patch(Path(p), follow_symlinks=True) for p in adhoc]
        if diffs and path in touched_paths(diffs):
            yield diffs, "the tree's file with the --patch diffs reversed"
    if adhoc:  # the user chose ad-hoc diffs: no library set is theirs
        return
    try:
        sets = load_library(locate(hints.current().library).path).values()
    except (OSError, PatchkitError):
        return
    for patch_set in sets:
        for release in patch_set.releases:
            with suppress(OSError, PatchkitError):
                series = release.read_patches(patch_set.roots)
                if path in touched_paths(series):
                    yield series, f"the tree's file with set {patch_set.name}'s patches reversed"


def _bytes(found: tuple[str, bytes] | str | None) -> bytes | None:
    """recorded_file's bytes (None: no regular file, or one reached through a symlink)."""
    return found[1] if isinstance(found, tuple) else None


# --------------------------------------------------------------------------- applied from another library


def changed_since(entry: Entry | None, patches: Sequence[Patch]) -> list[str]:
    """The patches (their numbers) by which `patches`, the library's series for the release, differs
    from what the entry records applied, where the series no longer holds (by sha256) a patch the
    entry records: an upgrade of patchkit (or another --patches library) changed the series since.
    Empty: every recorded patch still in it (a patch added to the series: apply writes it on the tree
    as it is), no record, or one that records no patch (found applied by hand). An ad-hoc set's name
    is its diffs' own: only the earlier texts of its --patch files differ (adopted_earlier)."""
    if entry is None or not entry.patches:
        return []
    recorded, held = {p["sha256"] for p in entry.patches}, {p.sha256 for p in patches}
    gone = [p["name"] for p in entry.patches if p["sha256"] not in held]
    if not gone:
        return []
    return sorted({_number(name) for name in [*gone, *(p.name for p in patches if p.sha256 not in recorded)]})


def adopted_earlier(state: State, set_name: str, patches: Sequence[Patch]) -> State:
    """`state` with the one apply of the earlier texts of these --patch files (read from the same
    paths, all of them and no other) recorded under this ad-hoc set's name, in its place: apply
    then replaces it as it replaces a library set's earlier series, and status judges it so."""
    if not is_adhoc(set_name) or state.entry(set_name) is not None:
        return state
    wanted = sorted(str(Path(p.path).absolute()) for p in patches if p.path is not None)
    earlier = [
        e for e in state.entries if is_adhoc(e.set_name) and sorted(str(p.get("path")) for p in e.patches) == wanted
    ]
    if len(earlier) != 1 or len(wanted) != len(patches):
        return state
    entries = [replace(e, set_name=set_name) if e is earlier[0] else e for e in state.entries]
    return replace(state, entries=entries)


def _number(name: str) -> str:
    """`0003` for 0003-deepseek-v2-supports-eagle3.patch (a line of 80 columns holds several)."""
    head = name.split("-", 1)[0]
    return head if head.isdigit() else name


def stock_of(root: Path, entry: Entry) -> dict[str, bytes | None] | None:
    """What a revert of `entry` puts back in each file it records: the saved copy (sha256-checked),
    else the recorded patches reversed where they are at hand (the result held to the recorded
    sha256 too); None (a created file) for one the series created. None: some original is neither."""
    stock: dict[str, bytes | None] = {}
    reversing: list[Patch] | None = None
    for path, shas in sorted(entry.files.items()):
        before = shas["before"]
        if before is None:
            stock[path] = None
            continue
        try:
            stock[path] = read_object(root, before)
            continue
        except PatchkitError:  # lost or damaged: the recorded patches reversed, where they are at hand
            pass
        if reversing is None:
            at_hand = {p.sha256: p for p in patches_at_hand(entry, root)}
            wanted = [p["sha256"] for p in entry.patches]
            reversing = [at_hand[key] for key in dict.fromkeys(wanted)] if all(k in at_hand for k in wanted) else []
        data = reverse_file(lambda rel: _bytes(recorded_file(root, rel)), path, reversing) if reversing else None
        if data is None or sha256(data) != before:
            return None
        stock[path] = data
    return stock


def plan_over_stock(root: Path, entry: Entry, patches: list[Patch]) -> Plan | None:
    """The series planned on the stock bytes of the files `entry` records (stock_of), the others
    as on disk: each change goes from the bytes on disk to what the series makes of stock, so a
    file the earlier series patched and this one does not goes back to stock. None: no stock at hand,
    or only the record (read back from the tree) vouches for it: revert asks for --force there, and
    apply would write the record's word into the tree."""
    stock = None if needs_force(root, entry) else stock_of(root, entry)
    if stock is None:
        return None
    plan = dry_run(root, patches, stock, from_disk=True)  # each change from the bytes on disk, which it replaces
    plan.stock = stock  # what the integrity check and the record judge: not the earlier series' bytes
    plan.kept = frozenset(p["sha256"] for p in entry.patches)
    return plan
