"""Which files of a release patchkit needs, and laying a fetched tree out for --target."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from patchkit.base import hints, signals
from patchkit.base.errors import BadInput, FetchError, NoPatchSet, PatchkitError, TargetError
from patchkit.base.fsutil import NO_SPACE, atomic_write, blocks, room_on, size_said
from patchkit.base.hashing import sha256
from patchkit.distinfo.record import parse_record
from patchkit.engine.inspection import upstream_check_paths
from patchkit.fetch.cache import Damaged, mismatch, read_regular
from patchkit.series.library import (
    PATCH,
    UNSUPPORTED,
    UPSTREAM,
    PatchSetDef,
    Selection,
    load_chosen,
    load_library,
    locate,
    outside_every_range,
    select,
)
from patchkit.store.saved import keep_copies
from patchkit.store.state import read_state, shown_set
from patchkit.tree.target import vllm_metadata_dirs
from patchkit.tree.version import LAYOUT_MARK, marked_release, parse

RELEASE_MARKERS = frozenset({"vllm/__init__.py", "vllm/_version.py"})  # with the dist-info: what names a tree's release


def files_for(version: str, library: str | None = None, set_name: str | None = None) -> list[str]:
    """The files patchkit reads of a release: needed_files of each set; none for an unsupported one. Without a set, those of every set of
    the library. A library or set that cannot be loaded is the caller's error (BadInput), as it is
    for every other command."""
    found: set[str] = set()
    for patch_set in _sets(library, set_name):
        try:
            selection = select(patch_set, parse(version, "VERSION"))
        except NoPatchSet:
            continue
        found.update(needed_files(patch_set, selection))
    return sorted(found)


def not_covered(version: str, library: str | None = None, set_name: str | None = None) -> NoPatchSet | None:
    """The refusal for a release the set (without one: every set of the library) has no series for
    and does not call upstream (what the set covers is in it), or None when a set covers the release."""
    sets = _sets(library, set_name)
    refusals = [_refusal(patch_set, version) for patch_set in sets]
    if any(refusal is None for refusal in refusals):
        return None
    first = refusals[0]
    assert first is not None
    if len(refusals) == 1:
        return first
    said = outside_every_range(version, sets) or "; ".join(r.message for r in refusals if r is not None)
    return NoPatchSet(said, hint=first.hint)


def _sets(library: str | None, set_name: str | None) -> list[PatchSetDef]:
    """The named set, or every set of the library (one: the only one)."""
    if set_name:
        return [load_chosen(library, set_name)]
    return list(load_library(locate(library).path).values())


def _refusal(patch_set: PatchSetDef, version: str) -> NoPatchSet | None:
    try:
        selection = select(patch_set, parse(version, "VERSION"))
    except NoPatchSet as exc:
        return exc
    if selection.kind != UNSUPPORTED:
        return None
    return NoPatchSet(selection.note or f"the set {patch_set.name!r} does not cover vLLM {version}")


def needed_files(patch_set: PatchSetDef, selection: Selection) -> list[str]:
    """The files of the release `selection` is for that the set reads: those its series touches (an
    upstream release: those of its newest series), its contract's, and what its behaviour test reads
    besides them (set.toml `behaviour_reads`; a release lacking one simply has it absent)."""
    if selection.kind == PATCH:
        paths = {f.source_path or f.path for p in selection.patches for f in p.files}
    elif selection.kind == UPSTREAM:
        paths = set(upstream_check_paths(patch_set))
    else:
        return []
    contract = {req.file for req in patch_set.contract if req.applies_to(selection.version)}
    # what the behaviour test reads beside the judged files (vLLM's parser engine): judged, not "not loaded"
    behaviour = set(patch_set.behaviour_reads) if patch_set.behaviour is not None else set()
    return sorted(paths | contract | behaviour)


def lay_out(tree: Path, dest: str | Path, paths: Iterable[str] | None = None, *, force: bool = False) -> list[str]:
    """lay_out_said's files: every file dest now holds of the release (written or already there)."""
    return lay_out_said(tree, dest, paths, force=force)[0]


def lay_out_said(
    tree: Path, dest: str | Path, paths: Iterable[str] | None = None, *, force: bool = False, target: bool = False
) -> Laid:
    """Laid: every file, those written, those kept as patchkit patched them. Copy a cached release tree (or its dist-info and `paths`) to dest, returning what was copied.

    Each file is read without following a symlink and checked against the tree's RECORD (the cache
    is untrusted input; release_tree re-checked that RECORD). Nothing is written through a symlink
    in dest or over a directory or special file there (BadInput naming it), nor over a file that
    holds other contents unless `force` (BadInput listing them). A file the tree's record says
    patchkit patched from this very stock file is left as it is: `fetch --all` after `apply` adds
    the rest of the release and keeps the patch. The cache itself is never handed out for writing.
    `target`: dest is the command's target (`fetch --dest`), so an interrupt says what it left there."""
    files = _verified_files(tree, paths)
    root = Path(dest).resolve()
    _refuse_another_release(root, dest, _dist_info(tree))
    differing = _differing_in_dest(root, dest, files)
    patched = _patched_by_patchkit(root, {rel: files[rel] for rel in differing})
    differing = [rel for rel in differing if rel not in patched]
    if differing and not force:
        raise BadInput(
            f"{dest} holds {len(differing)} file(s) with other contents: {', '.join(differing[:10])}"
            + (f" and {len(differing) - 10} more" if len(differing) > 10 else ""),
            hint="they may be your edits: choose another directory, or pass --force to overwrite them",
        )
    to_write = [rel for rel in files if rel in differing or (rel not in patched and not (root / rel).exists())]
    # --force: what it replaces may be an edit, or patchkit's patch of a file that was not stock
    # (a set applied with --force): a copy is kept, before any file is written
    needs = (sum(blocks(len(files[rel])) for rel in to_write), len(to_write))
    saved = keep_copies(root, differing, untouched="nothing was laid out", after=needs) if differing else None
    resumed = marked_release(root)
    mark = _dist_info(tree).removeprefix("vllm-").removesuffix(".dist-info") + (" --all" if paths is None else "")
    written: list[str] = []
    for rel in [LAYOUT_MARK] * bool(to_write) + _markers_last(to_write):
        data = (mark + "\n").encode() if rel == LAYOUT_MARK else files[rel]
        try:
            atomic_write(root / rel, data, mode=0o644)
        except OSError as e:
            raise _write_error(dest, rel, e, {r: files[r] for r in to_write if r not in written}) from None
        if rel == LAYOUT_MARK and target:  # `fetch --dest`: from here an interrupt leaves some files written
            _interrupt_says(
                f"interrupted while laying out vllm {mark} in {root}: some files are written, not all", mark, root
            )
        written += [rel] if rel != LAYOUT_MARK else []
    if resumed is not None or to_write:  # every file is there: the mark of a lay-out under way goes
        (root / LAYOUT_MARK).unlink(missing_ok=True)
    if target and to_write:
        _interrupt_says(f"interrupted after the lay-out was written: {root} holds vllm {mark}'s files", None, root)
    return Laid(sorted(files), sorted(written), sorted(patched), resumed, differing, saved)


def _interrupt_says(message: str, mark: str | None, root: Path) -> None:
    """What a Ctrl-C now leaves in dest (the target, for `fetch --dest`), and the fetch that finishes it."""
    again = hints.command("fetch", *mark.split(), "--dest", str(root)) if mark else None
    signals.note_report(message, f"run {again} again: it writes only the missing files" if again else None)


class Laid(NamedTuple):
    """What lay_out_said did: every file, those written, those kept as patchkit patched them, the
    release of a lay-out cut short it found and finished (None: none; "": a mark not patchkit's),
    and those --force replaced that held other contents, with where their copies are."""

    files: list[str]
    written: list[str]
    kept: list[str]
    resumed: str | None
    replaced: list[str]
    saved: Path | None


def replaced_said(root: Path, replaced: list[str], saved: Path) -> str:
    """What --force replaced, the files a record names as patchkit's among them (their set's record
    now calls them drifted), where the copies are and the command that puts them back."""
    try:
        entries = read_state(root).entries
    except PatchkitError:
        entries = []
    owned = {rel: shown_set(e) for e in entries for rel in replaced if rel in e.files}
    some = ", ".join(replaced[:5]) + (f" and {len(replaced) - 5} more" if len(replaced) > 5 else "")
    theirs = "; ".join(f"{rel} is recorded as {who}'s patched file" for rel, who in owned.items())
    back = shlex.join(["cp", "-a", "--", f"{saved}/.", f"{root}/"])
    return (
        f"--force replaced {len(replaced)} file(s) that held other contents ({some})"
        + (f"; {theirs}" if theirs else "")
        + f": a copy is kept in {saved} (`{back}` puts it back)"
    )


def _markers_last(rels: list[str]) -> list[str]:
    """What says which release a tree is (vllm/__init__.py, vllm/_version.py, then the dist-info, its
    RECORD last of all) after every other file: a lay-out cut short (a full disk, a kill) leaves a
    fresh tree no command takes for a release, never one that looks like a partly patched one."""
    return sorted(rels, key=lambda rel: (_marker_rank(rel), rel))


def _marker_rank(rel: str) -> int:
    if rel.endswith(".dist-info/RECORD"):
        return 3
    if ".dist-info/" in rel:
        return 2
    return 1 if rel in RELEASE_MARKERS else 0


def _write_error(dest: str | Path, rel: str, e: OSError, unwritten: dict[str, bytes]) -> TargetError:
    """A full disk says so, how much more the rest needs, and that the same command completes it
    (the files already written are kept and not written again)."""
    if e.errno not in NO_SPACE:
        return TargetError(f"cannot write {Path(dest) / rel}: {e.strerror}")
    need = sum(len(data) for data in unwritten.values())
    whole = any(".dist-info/" in r or r in RELEASE_MARKERS for r in unwritten)
    free, inodes = room_on(dest) or (0, None)
    if inodes is not None and inodes < len(unwritten) and free >= need:  # out of inodes, not bytes
        said, room = (
            "no free inode (one per file) on",
            f"remove some files there (about {len(unwritten)} inodes; `df -i` counts them)",
        )
    else:
        said, room = "no space left on", f"free at least {size_said(need)} there"
    return TargetError(
        f"{said} the device holding {dest}: {len(unwritten)} file(s) ({size_said(need)}) not written"
        + (" (those that say which release it is among them: no command takes it for one yet)" if whole else ""),
        hint=f"{room}, then run the same command again: it writes only the missing files",
    )


def _refuse_another_release(root: Path, dest: str | Path, dist_info: str) -> None:
    """A dest that holds another vLLM release: its files differ for that reason, not the user's
    edits, and laying this release over it (--force too) leaves two releases in one tree, which
    every later command refuses."""
    others = [d.name for d in vllm_metadata_dirs(root) if d.name.lower() != dist_info.lower()] if root.is_dir() else []
    if others:
        raise BadInput(
            f"{dest} holds another vLLM release ({', '.join(sorted(others))}): {dist_info.removesuffix('.dist-info')} "
            "laid out over it would leave two releases in one tree",
            hint="choose another --dest (a fetch of the same release adds to a tree)",
        )


def _patched_by_patchkit(root: Path, stock: dict[str, bytes]) -> set[str]:
    """Those of `stock`'s paths whose file in root is what the tree's record says patchkit wrote
    over exactly that stock file (the first recorded "before" is its hash, the last "after" the
    file's). A record that cannot be read vouches for nothing."""
    try:
        entries = read_state(root).entries
    except PatchkitError:
        return set()
    patched = set()
    for rel, data in stock.items():
        chain = [entry.files[rel] for entry in entries if rel in entry.files]
        if not chain or chain[0]["before"] != sha256(data):
            continue
        try:
            if chain[-1]["after"] == sha256(read_regular(root, rel)):
                patched.add(rel)
        except (FileNotFoundError, Damaged):
            continue
    return patched


def _verified_files(tree: Path, paths: Iterable[str] | None) -> dict[str, bytes]:
    """What lay_out copies, each file a regular file read without following a symlink and, when
    the tree has its RECORD (a fetched release always has: release_tree sees to it), checked
    against it."""
    dist_info = _dist_info(tree)
    record_name = f"{dist_info}/RECORD"
    try:
        record_bytes: bytes | None = read_regular(tree, record_name)
    except FileNotFoundError:
        record_bytes = None
    except Damaged as e:
        raise _damaged(tree, e) from None
    record = parse_record(record_bytes) if record_bytes is not None else None
    wanted = _tree_members(tree, record) if paths is None else [f"{dist_info}/METADATA", *paths]
    files = {} if record_bytes is None else {record_name: record_bytes}
    for rel in wanted:
        if rel == record_name:
            continue
        try:
            data = read_regular(tree, rel)
            problem = mismatch(rel, data, record) if record is not None else None
        except FileNotFoundError:
            continue  # the release lacks it
        except Damaged as e:
            problem = str(e)
        if problem:
            raise _damaged(tree, problem)
        files[rel] = data
    return files


def _damaged(tree: Path, problem: object) -> FetchError:
    return FetchError(
        f"the cached release in {tree} is damaged: {problem}", hint="run the command again to fetch it anew"
    )


def _dist_info(tree: Path) -> str:
    """The dist-info directory of a cached release tree (a real directory, not a symlink)."""
    try:
        found = sorted(e.name for e in os.scandir(tree) if _is_dist_info(e))
    except OSError as e:
        raise FetchError(f"cannot read the cached release in {tree}: {e.strerror}") from None
    if not found:
        raise FetchError(f"the cached release in {tree} has no vllm-*.dist-info", hint="fetch it again")
    return found[0]


def _is_dist_info(entry: os.DirEntry[str]) -> bool:
    return entry.name.startswith("vllm-") and entry.name.endswith(".dist-info") and entry.is_dir(follow_symlinks=False)


def _tree_members(tree: Path, record: dict[str, tuple[str, str]] | None) -> list[str]:
    """The files of the tree (those RECORD lists, if there is one), never through a symlinked directory."""
    out = []
    for directory, _dirs, names in os.walk(tree):
        for name in names:
            rel = Path(directory, name).relative_to(tree).as_posix()
            if record is None or rel in record:
                out.append(rel)
    return out


def _differing_in_dest(root: Path, dest: str | Path, files: dict[str, bytes]) -> list[str]:
    """The files of dest that hold other contents; BadInput for a symlink, directory or special file
    where a file (or on the way to one) is about to be written."""
    differing = []
    for rel, data in files.items():
        try:
            if read_regular(root, rel) != data:
                differing.append(rel)
        except FileNotFoundError:
            continue
        except Damaged as e:
            raise _in_the_way(root, dest, rel, e) from None
    return sorted(differing)


def _in_the_way(root: Path, dest: str | Path, rel: str, problem: Damaged) -> BadInput:
    """The refusal of a symlink, directory or special file on the way to a file to write. A symlink
    to a directory (a vllm/ moved to another volume) is named with where it leads, and the way round
    it: the files laid out in a new directory, then copied through the link by the user."""
    parts = rel.split("/")
    for n in range(1, len(parts)):
        where = root.joinpath(*parts[:n])
        if where.is_symlink() and where.is_dir():
            name, leads = "/".join(parts[:n]), where.resolve()
            copy = shlex.join(["cp", "-a", "--", f"NEW/{name}/.", f"{leads}/"])
            return BadInput(
                f"refusing to lay files out under {dest}: {name} is a symlink to {os.readlink(where)} "
                "(patchkit writes no file through one)",
                hint=f"run the same command with --dest NEW (a new directory), then `{copy}` copies them into {leads}",
            )
    return BadInput(
        f"refusing to lay files out under {dest}: {problem}",
        hint="patchkit never writes through a symlink or over a directory or special file; move it away",
    )
