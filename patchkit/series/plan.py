"""The engine: compute every new file content in memory; nothing is written here.

A plan applies (or reverses) a series of patches to a view of the tree. Each patch ends in one
state (enums.StepState): `apply` (will change the tree), `applied` (its change is already present:
it reverse-applies cleanly), or `conflict`. Context must match exactly; a hunk may land at an offset, which is kept
so it can be reported. There is no fuzz.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from patchkit.base import hints
from patchkit.base.enums import FileKind, StepState
from patchkit.base.errors import BadInput, Drift, drift_refused, escaped, few
from patchkit.base.fsutil import Origin, read_file_and_origin
from patchkit.base.hashing import hash_soon, sha256
from patchkit.base.values import FrozenValue, Value, frozen
from patchkit.series.hunks import (
    NEW_FILE_EXISTS,
    RENAME_TARGET_EXISTS,
    Mismatch,
    Placement,
    place_hunks,
    reverse_file,
    splice,
)
from patchkit.series.patchfile import (
    FilePatch,
    Hunk,
    Patch,
    byte_lines,
    touched_paths,
)
from patchkit.store.objects import read_object
from patchkit.store.state import Entry, is_adhoc, missing_patch_files, recorded_patch_files, shown_set
from patchkit.tree.target import stock_files_command


@frozen
class FileStep(FrozenValue):
    """What one patch does to one file: its content before, where each hunk goes."""

    patch: FilePatch
    before: bytes | None
    placements: tuple[Placement, ...]

    @cached_property
    def after(self) -> bytes | None:
        """The new content, made when first asked for (a dry run only places the hunks)."""
        return None if self.patch.kind == FileKind.DELETE else splice(self.before or b"", self.placements)


@dataclass(eq=False, repr=False)
class PatchStep(Value):
    """One patch of the plan: its state on the tree and its files."""

    patch: Patch
    state: StepState
    files: list[FileStep] = field(default_factory=list)
    mismatch: Mismatch | None = None


class View:
    """The tree as the plan sees it: disk contents, overlaid with what earlier steps computed."""

    def __init__(self, root: Path):
        self.root = root
        self._prefix = os.path.join(root, "")
        self.original: dict[str, bytes | None] = {}
        self.current: dict[str, bytes | FileStep | None] = {}  # a FileStep: content not made yet
        self.origins: dict[str, Origin] = {}  # the file each original was read from
        # the release's own file at a path, and where it is from: a lost saved original's last source
        self.stock: Callable[[str], tuple[bytes, str] | None] | None = None
        self.from_release: set[str] = set()  # originals taken from the release's own files (so vouched for)

    @classmethod
    def holding(cls, root: Path, contents: dict[str, bytes | None]) -> View:
        """A view that starts from these contents (paths it lacks are read under root)."""
        view = cls(root)
        view.original = dict(contents)
        view.current = dict(contents)
        return view

    def original_content(self, path: str) -> bytes | None:
        if path not in self.current:
            data, origin = _read_target(self._prefix + path, path)
            if origin is not None:
                self.origins[path] = origin
            hash_soon(data)  # a large original: its digest is wanted by the integrity check and the record
            self.original[path] = data
            self.current[path] = data
        return self.original[path]

    def read(self, path: str) -> bytes | None:
        self.original_content(path)
        content = self.current[path]
        if isinstance(content, FileStep):
            content = self.current[path] = content.after
        return content

    def write(self, path: str, content: bytes | FileStep | None) -> None:
        """A file's new content, or the step that makes it (made when the content is read)."""
        self.original_content(path)
        self.current[path] = content

    def changes(self) -> dict[str, tuple[bytes | None, bytes | None]]:
        """path -> (before, after) for every file whose content the plan changes."""
        return {p: (self.original[p], self.read(p)) for p in self.changed_paths()}

    def changed_paths(self) -> list[str]:
        """The paths of `changes`, without making contents that are not made yet where it can."""
        return [p for p in list(self.current) if self._changed(p)]

    def _changed(self, path: str) -> bool:
        pending = self.current[path]
        if isinstance(pending, FileStep) and pending.before is self.original[path]:
            return True  # the first step on a file from disk: each of its hunks changes something
        return self.read(path) != self.original[path]


@dataclass(eq=False, repr=False)
class Plan(Value):
    """A series planned on a tree: each patch's step, the contents they leave."""

    root: Path
    steps: list[PatchStep]
    view: View
    _stock: Plan | None = field(default=None, repr=False)
    # plan_revert's found_only, with no patch found applied: the steps whose files take neither the
    # patch nor its reverse (edited?), left as they are: nothing tells what to undo there
    left: list[PatchStep] = field(default_factory=list)
    # planned over the stock bytes of a set applied from another library (vouched.plan_over_stock):
    # those bytes, which the disk does not hold
    stock: dict[str, bytes | None] | None = None
    # with `stock`: the sha256 of each patch the earlier apply recorded; such a patch's change is in
    # the tree before and after this plan, which `shown_state` says (every step is planned on stock)
    kept: frozenset[str] = frozenset()

    def shown_state(self, step: PatchStep) -> StepState:
        """A step's state as the plan table says it: a patch the earlier apply wrote, unchanged
        since, is `applied` (there already), not `apply`."""
        if step.state == StepState.WILL_CHANGE and step.patch.sha256 in self.kept:
            return StepState.ALREADY_APPLIED
        return step.state

    def undone_paths(self) -> list[str]:
        """The files this plan changes that no patch it applies touches: an earlier series' change
        taken out (a file back to stock, or to what the kept patches make of it)."""
        applying = {f.patch.path for s in self.steps if self.shown_state(s) == StepState.WILL_CHANGE for f in s.files}
        return [p for p in self.changed_paths if p not in applying] if self.stock is not None else []

    @property
    def conflicts(self) -> list[PatchStep]:
        return [s for s in self.steps if s.state == StepState.CONFLICT]

    def describe_conflicts(self, separator: str = "; ") -> str:
        """Why each conflicting patch does not apply."""
        return separator.join(s.mismatch.describe() for s in self.conflicts if s.mismatch)

    @property
    def changes(self) -> dict[str, tuple[bytes | None, bytes | None]]:
        return self.view.changes()

    @property
    def changed_paths(self) -> list[str]:
        return self.view.changed_paths()

    def content(self, path: str) -> bytes | None:
        """The planned content of a path (the disk's where the plan does not touch it)."""
        return self.view.read(path)

    def disk_content(self, path: str) -> bytes | None:
        """The content on disk when the plan was made (read once, shared by the checks)."""
        return self.view.original_content(path)

    def stock_content(self, path: str) -> bytes | None:
        """The content before this plan's series: the disk's, with patches found applied undone."""
        if self.stock is not None and path in self.stock:
            return self.stock[path]
        present = [s.patch for s in self.steps if s.state == StepState.ALREADY_APPLIED]
        if not present:
            return self.disk_content(path)
        if self._stock is None:
            # a fresh view of the disk as this plan first read it
            self._stock = plan_revert(self.root, present, view=View.holding(self.root, self.view.original))
        return self._stock.content(path)

    @property
    def touched_paths(self) -> list[str]:
        return touched_paths([s.patch for s in self.steps])


def plan_apply(root: Path, patches: list[Patch], view: View | None = None) -> Plan:
    return _plan(root, patches, view)


# A path the file system cannot hold or reach: the diff (or the tree) is bad input, not a bug.
_UNREACHABLE = {
    errno.ENAMETOOLONG: "is too long for the file system (a name over 255 bytes or a path over PATH_MAX)",
    errno.ELOOP: "runs through a symlink loop",
    errno.ENOTDIR: "runs through something that is not a directory",
}


def _read_target(full: str, path: str) -> tuple[bytes | None, Origin | None]:
    """A target file's bytes (None when there is none) and the file they came from; BadInput for a
    path that cannot be a file."""
    try:
        read = read_file_and_origin(full)
    except OSError as exc:
        if exc.errno in _UNREACHABLE:
            raise BadInput(f"{escaped(path)}: the path {_UNREACHABLE[exc.errno]}; refusing it") from None
        raise
    if read is None:
        _refuse_special(full, path)
        return None, None
    return read


def _refuse_special(full: str, path: str) -> None:
    """A directory, fifo or device where the tree should hold a file (or nothing) is refused,
    never mistaken for a missing file; so is a path no file can have."""
    try:
        os.lstat(full)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno in _UNREACHABLE:
            raise BadInput(f"{escaped(path)}: the path {_UNREACHABLE[exc.errno]}; refusing it") from None
        raise
    raise BadInput(
        f"{escaped(path)} is not a regular file (a directory, fifo, device or dangling symlink); refusing it",
        hint=_special_hint(full),
    )


def _special_hint(full: str) -> str:
    """What to do with what stands where a file should: no command writes through it or removes
    what it did not write; once it is gone, status names the fix (a file patchkit patched: revert
    --force puts the original back, then apply)."""
    revert, apply = hints.command("revert", "--force"), hints.command("apply")
    return (
        f"remove {full} (rm -r for a directory), then {hints.command('status')} names the fix: "
        f"for a file patchkit patched, {revert}, then {apply}"
    )


@dataclass(eq=False, repr=False)
class Restored(Value):
    """What restore_recorded did beyond putting originals back."""

    edited: list[str] = field(default_factory=list)  # changed since the apply: kept aside by --force
    # deleted on the record's word alone (its --patch file gone): kept aside, said as what it was
    alone: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # originals rebuilt by reverse-applying
    # a patched wheel's files put back on its own record's word alone (its texts reversed): kept aside
    unvouched: list[str] = field(default_factory=list)


def restore_recorded(
    view: View,
    entry: Entry,
    *,
    force: bool = False,
    patches: list[Patch] | None = None,
    restored: Restored | None = None,
    first: tuple[str, ...] = (),
) -> Restored:
    """Put back into `view` the originals an apply recorded (checked by sha256). A file edited
    since that apply is refused (Drift), or with `force` restored too; those are listed. A saved
    original that is missing or corrupt is rebuilt by reverse-applying the entry's `patches` (those
    of them it recorded) and kept only when its sha256 is the recorded one. `first`: the
    commands that must run before this entry can be reverted alone (sets applied after it), for
    the hint when it cannot be reverted here."""
    restored = restored or Restored()
    recorded = {(p["name"], p["sha256"]) for p in entry.patches}
    own = [p for p in patches or [] if (p.name, p.sha256) in recorded]
    if not force:
        _refuse_drift(view, entry, own)
    unmade: list[str] = []  # created by none of its patches: not patchkit's, left where they are
    for path, shas in sorted(entry.files.items()):
        content = view.read(path)
        current = sha256(content)
        if current == shas["before"]:
            continue
        created = shas["before"] is None and content is not None  # judged before the edit: --force would not delete it
        if created and _made_by_none(entry, path, own, recorded):
            unmade.append(path)
            continue
        if created and _require_creator(
            entry, path, own, first, wrote_it=current == shas["after"], notes=restored.notes
        ):
            restored.alone.append(path)  # only the record vouches for it: a copy is kept
        if current != shas["after"] and content is not None:  # (--force) a deleted file has nothing to keep
            restored.edited.append(path)
        view.write(path, _original(view, path, shas["before"], own, restored.notes, entry=entry))
    if unmade:
        restored.notes.append(
            f"kept {len(unmade)} file(s) the record of {shown_set(entry)} says patchkit created, though none of the "
            f"set's patches creates them (not patchkit's to delete; the record no longer names them): {few(unmade, sep=', ')}"
        )
    return restored


def _made_by_none(entry: Entry, path: str, own: list[Patch], recorded: set[tuple[str, str]]) -> bool:
    """Whether `path`, a file the record of a library set says patchkit created, is created by none of
    the set's recorded patches, every one of them at hand: the record is wrong (read back from the
    tree, it may name any file), and the file is not patchkit's to delete."""
    at_hand = {(p.name, p.sha256) for p in own}
    return not is_adhoc(entry.set_name) and bool(recorded) and at_hand == recorded and not _creates(own, path)


def _refuse_drift(view: View, entry: Entry, own: list[Patch]) -> None:
    """Drift naming every recorded file edited or deleted since the apply (each, one a line, as git
    names the files a checkout would overwrite), before any is written back. A created file no patch
    at hand creates is left to _require_creator: --force would not delete it either."""
    drifted = {}
    for path, shas in sorted(entry.files.items()):
        content = view.read(path)
        if shas["before"] is None and content is not None and not _creates(own, path):
            continue
        if sha256(content) not in (shas["before"], shas["after"]):
            drifted[path] = "deleted" if content is None else "edited"
    if not drifted:
        return
    if list(drifted.values()) == ["deleted"]:  # one file, and nothing of the user's to keep
        ((path, _),) = drifted.items()
        fix = hints.command("revert", "--force")
        raise Drift(f"{escaped(path)} was deleted after patchkit patched it", hint=f"{fix} restores the original")
    raise drift_refused(
        drifted,
        lambda path, _: f"{escaped(path)} was edited after patchkit patched it; keeping your version",
        f"{len(drifted)} files were changed after patchkit patched them; keeping your versions",
        restores="the original",
    )


def _require_creator(
    entry: Entry, path: str, own: list[Patch], first: tuple[str, ...], *, wrote_it: bool, notes: list[str]
) -> bool:
    """A file the record says patchkit created is deleted only when a patch at hand that the record
    names creates it: the record alone is no evidence (it is read back from the tree). A --patch
    file that is gone leaves only the record's word that the file holds the bytes patchkit wrote:
    deleted with a copy kept (True), since a planted record could name any file with its hash."""
    if _creates(own, path):
        return False
    gone = missing_patch_files(entry) if is_adhoc(entry.set_name) else ()
    if gone and wrote_it:
        notes.append(
            f"{escaped(path)} deleted: {gone[0]} that created it is gone, and it held what the record says patchkit wrote"
        )
        return True
    if gone:  # nothing proves the file is patchkit's: the user decides
        raise BadInput(
            f"the record of {shown_set(entry)} says patchkit created {escaped(path)}, but {gone[0]} is gone and "
            f"{escaped(path)} was changed since: kept, nothing was written",
            hint=f"delete {escaped(path)} yourself if you no longer need it, then {hints.command('revert')}",
        )
    if not is_adhoc(entry.set_name):  # the set's own patches do not create it: the record is wrong
        raise BadInput(
            f"the record of {shown_set(entry)} says patchkit created {escaped(path)}, but none of the set's patches "
            "creates it: kept, nothing was written",
            hint=f"move {escaped(path)} out of the tree (if it is yours), run {hints.command('revert')}, then put it back",
        )
    names = recorded_patch_files(entry) or ("FILE",)
    this = hints.command("revert", chosen=hints.for_set(None, names))
    order = f"revert the sets applied after it first: {', then '.join([*first, this])}" if first else this
    # the one way, said plainly: a revert deletes a file only on the word of a patch the user names
    # (the record is read back from the tree), so a plain revert cannot undo a --patch that created one
    raise BadInput(
        f"the record of {shown_set(entry)} says patchkit created {escaped(path)}, but no patch at hand that it names "
        "creates it: kept, nothing was written",
        hint=f"a revert deletes a created file only when you name the patch that created it: {order}",
    )


def _creates(patches: list[Patch], path: str) -> bool:
    return any(f.target_path == path and f.source_path != path for p in patches for f in p.files)


def _original(
    view: View, path: str, digest: str | None, patches: list[Patch], notes: list[str], *, entry: Entry
) -> bytes | None:
    """The original `digest` of `path`: its saved object, else the patches reversed, else the
    release's own file (sha256 checked); else refused, naming the fetch that fills the release cache
    and the revert that then reads it."""
    if digest is None:
        return None
    try:
        return read_object(view.root, digest)
    except BadInput as damaged:
        rebuilt = reverse_file(view.read, path, patches)
        if rebuilt is None or sha256(rebuilt) != digest:
            released = view.stock(path) if view.stock is not None else None
            if released is not None and sha256(released[0]) == digest:
                notes.append(f"{damaged.message}: {escaped(path)} was restored from {released[1]} (sha256 checked)")
                view.from_release.add(path)
                return released[0]
            raise BadInput(
                f"{damaged.message}, and reverse-applying the recorded patches does not give the original "
                f"of {escaped(path)} back",
                hint=_fetch_then_revert(view.root, entry),
            ) from damaged
        notes.append(f"{damaged.message}: {escaped(path)} was restored by reverse-applying the series (sha256 checked)")
        return rebuilt


def _fetch_then_revert(root: Path, entry: Entry) -> str:
    """The way on when only the release's own file gives an original back: the fetch that takes the
    stock files from the package index (every file for a --patch record's: it may be no set's), then
    the revert again, which reads them from patchkit's cache; the record's diff by --patch where it is."""
    adhoc = is_adhoc(entry.set_name)
    again = hints.command("revert")
    if adhoc and entry.patches and not missing_patch_files(entry):
        again = hints.command("revert", chosen=hints.for_set(None, recorded_patch_files(entry)))
    return (
        f"only vLLM's own file gives it back: {stock_files_command(root, None, every=adhoc)} takes the release's "
        f"files from the package index (offline: run it once the index is reachable), then run {again} again"
    )


def plan_revert(root: Path, patches: list[Patch], view: View | None = None, *, found_only: bool = False) -> Plan:
    """Reverse-apply the series, last patch first. A patch not present counts as `applied` (done).
    `found_only`: only the patches found in the tree (each reverses, cleanly) and those that neither
    reverse nor apply (a conflict) stay in the plan; with none found, the conflicts are `left`."""
    return _plan(root, [p.reversed() for p in reversed(patches)], view, found_only=found_only)


def _plan(root: Path, patches: list[Patch], view: View | None, *, found_only: bool = False) -> Plan:
    view = view or View(root)
    steps = [_step(view, patch) for patch in patches]
    if found_only:  # a step that does not change the tree wrote nothing in the view: left out, that is all
        steps = [step for step in steps if step.state != StepState.ALREADY_APPLIED]
        if all(step.state == StepState.CONFLICT for step in steps):  # none found applied: no conflict of its
            return Plan(root, [], view, left=steps)
    return Plan(root, steps, view)


def _step(view: View, patch: Patch) -> PatchStep:
    forward = _try_patch(view, patch)
    if isinstance(forward, list) and any(_misfit(forward)):
        # A change found in place beats the same change again elsewhere: a hunk that only adds
        # lines at the top still finds its context, one line lower, once applied; one that adds
        # lines at the end finds its context in place, but no longer at the end of the file.
        backward = _try_patch(view, patch.reversed())
        if isinstance(backward, list) and _misfit(backward) < _misfit(forward):
            return PatchStep(patch, StepState.ALREADY_APPLIED, [])
    if isinstance(forward, list):
        for file_step in forward:
            if file_step.patch.kind == FileKind.RENAME:
                view.write(file_step.patch.source_path, None)  # type: ignore[arg-type]
            view.write(file_step.patch.path, file_step)
        return PatchStep(patch, StepState.WILL_CHANGE, forward)
    backward = _try_patch(view, patch.reversed())
    if isinstance(backward, list):
        return PatchStep(patch, StepState.ALREADY_APPLIED, [])
    return PatchStep(patch, StepState.CONFLICT, [], mismatch=forward)


def _misfit(steps: list[FileStep]) -> tuple[int, int]:
    """How far the placed hunks are from where the patch puts them: hunks the diff put at the end
    of the file found elsewhere, then lines of offset."""
    off_end = sum(
        _ends_file(p.hunk) and p.position + len(p.hunk.source) != len(step.before or b"")
        for step in steps
        for p in step.placements
    )
    return off_end, sum(abs(p.offset) for step in steps for p in step.placements)


def _ends_file(hunk: Hunk) -> bool:
    """Whether the diff put the hunk at the end of its file: it has leading context but none after
    its changes (its last lines differ, or one block is the other's head: lines added or removed at
    the end). A diff without context (-U0) says nothing of where a file ends."""
    source, target = hunk.source_lines, byte_lines(hunk.target)
    if not source or not target or source[0] != target[0]:
        return False
    shorter, longer = sorted((source, target), key=len)
    return source[-1] != target[-1] or (len(shorter) < len(longer) and longer[: len(shorter)] == shorter)


def _try_patch(view: View, patch: Patch) -> list[FileStep] | Mismatch:
    steps = []
    for file_patch in patch.files:
        result = _apply_file(view, file_patch)
        if isinstance(result, Mismatch):
            return result
        steps.append(result)
    return steps


def _apply_file(view: View, fp: FilePatch) -> FileStep | Mismatch:
    if fp.kind == FileKind.ADD:
        if view.read(fp.path) is not None:
            return Mismatch(fp.path, 1, 0, "", None, NEW_FILE_EXISTS)
        before = None
    else:
        before = view.read(fp.source_path)  # type: ignore[arg-type]
        if before is None:
            return Mismatch(fp.source_path, 1, 0, "", None, "does not exist")  # type: ignore[arg-type]
        if fp.kind == FileKind.RENAME and view.read(fp.path) is not None:
            return Mismatch(fp.path, 1, 0, "", None, RENAME_TARGET_EXISTS)
    placements = place_hunks(fp.path, before or b"", fp.hunks)
    if isinstance(placements, Mismatch):
        return placements
    if fp.kind == FileKind.DELETE and splice(before or b"", placements):
        return Mismatch(
            fp.path, len(fp.hunks), 0, "", None, "is deleted by the patch but has content the patch does not remove"
        )
    return FileStep(fp, before, placements)
