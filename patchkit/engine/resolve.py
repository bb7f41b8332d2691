"""From command-line options to a target, its version and the patch series that applies to it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.enums import Holder, SelectionKind, StepState
from patchkit.base.errors import Conflict, NoPatchSet, TargetError, few
from patchkit.base.fsutil import read_file
from patchkit.base.options import Options
from patchkit.base.values import Value
from patchkit.distinfo import installed_record, installed_wheel_reader
from patchkit.distinfo.record import has_provenance, local_label
from patchkit.engine.guard import launch_refusal
from patchkit.engine.stale import stale_note
from patchkit.engine.vouched import needs_force
from patchkit.series import dry_run, library
from patchkit.series.library import PatchSetDef, Selection
from patchkit.series.patchfile import Patch, touched_paths
from patchkit.store.journal import journal_path
from patchkit.store.state import (
    WORKSPACE_RECORD,
    Entry,
    applied_on,
    earlier_applies,
    is_adhoc,
    read_state,
    record_apply,
)
from patchkit.tree import target as target_mod
from patchkit.tree import version as version_mod
from patchkit.tree.target import Target, checkout_restore
from patchkit.tree.version import DetectedVersion

if TYPE_CHECKING:
    from patchkit.distinfo.installed_wheel import Provenance
    from patchkit.distinfo.record import Record


@dataclass(eq=False, repr=False)
class Resolved(Value):
    """The target, its vLLM version and what the set holds for it."""

    target: Target
    version: DetectedVersion | None
    selection: Selection
    notes: list[str] = field(default_factory=list)
    # an ad-hoc --patch: the library's sets whose contracts its writes are held to (engine/held.py)
    held_by: tuple[PatchSetDef, ...] = ()

    @property
    def patches(self) -> list[Patch]:
        return self.selection.patches

    @property
    def set_name(self) -> str:
        return self.selection.set_name

    @property
    def vllm_version(self) -> Version | None:
        """The detected (or given) release, a packaging Version; None when unknown."""
        return self.version.version if self.version else None

    @property
    def gates(self) -> frozenset[str]:
        """The set's files vLLM checks at start (set.toml's `gates`): none for an ad-hoc --patch."""
        patch_set = self.selection.patch_set
        return frozenset(patch_set.gates) if patch_set is not None else frozenset()

    def apply_record(self, changes: dict[str, tuple[bytes | None, bytes | None]], previous: Entry | None) -> Entry:
        """The state entry an apply of this series with these changes writes."""

        release, patch_set = self.selection.release, self.selection.patch_set
        return record_apply(
            previous,
            set_name=self.set_name,
            vllm_version=str(self.vllm_version) if self.version else None,
            release=release.directory.name if release else None,
            patches=self.patches,
            changes=changes,
            library=patch_set.directory.parent if patch_set else None,
            root=self.target.root,
            gates=self.gates,
            held=is_adhoc(self.set_name),  # an ad-hoc apply holds its files to the sets' contracts first
        )


def resolve_target(opts: Options) -> Target:
    return target_mod.resolve(opts.target_dir, opts.python, here=not opts.python_of_launch)


def resolve(
    opts: Options,
    *,
    target: Target | None = None,
    sets: dict[str, PatchSetDef] | None = None,
    detected: DetectedVersion | None = None,
) -> Resolved:
    """`sets`: the library's sets when the caller has loaded them already (library_sets);
    `detected`: the target's version when the caller has told it already (one set of several)."""
    tgt = target or resolve_target(opts)
    if opts.adhoc:
        found = _detect_quietly(tgt, opts.vllm_version)
        selection = library.adhoc_selection(list(opts.adhoc), found.version if found else None)
        _refuse_over_earlier_text(tgt.root, opts.adhoc, selection.set_name)
        held_by = tuple(library.load_library(library.locate(opts.library).path).values())
        return Resolved(tgt, found, selection, held_by=held_by)
    detected = detected or version_mod.detect(tgt, opts.vllm_version)
    wheel = None if opts.vllm_version else _installed_wheel(tgt.root)
    if wheel is not None and len(wheel.set_names) > 1:  # a wheel of several sets: the one asked for, if it holds it
        wheel = wheel.for_set(opts.set_name) if opts.set_name in wheel.set_names else None
    if wheel is not None and opts.set_name in (None, wheel.set_name):  # a vLLM installed from a patched wheel
        selection, said = installed_wheel_reader().selection(wheel, detected.version, opts.library)
        return Resolved(tgt, detected, selection, [said])
    if sets is not None or opts.set_name is None:
        loaded = sets if sets is not None else library.load_library(library.locate(opts.library).path)
        patch_set = library.choose_set(loaded, opts.set_name)
    else:  # one set named: the other sets are not read
        patch_set = library.load_named(library.locate(opts.library).path, opts.set_name)
    detected, notes = _as_applied(tgt, patch_set.name, detected)
    selection = _upstream_in_stock(tgt, _selection(tgt, patch_set, detected))
    notes += [selection.note] if selection.note else []
    return Resolved(tgt, detected, selection, notes)


def _refuse_over_earlier_text(root: Path, paths: tuple[str, ...], set_name: str) -> None:
    """A --patch file whose earlier text the tree records applied (the file edited since): its new
    text is judged or applied only once that apply is undone, never on top of it nor called "a
    local edit". `revert --patch` undoes it (earlier_apply_chosen). Where the same files' one apply
    can be undone with no --force, apply puts the new texts in its place itself (adopted_earlier)."""
    state = read_state(root)
    earlier = earlier_applies(state, paths)
    if not earlier or state.entry(set_name) is not None:
        return
    same_files = sorted(str(Path(p).absolute()) for p in paths)
    one = len(earlier) == 1 and sorted(str(p.get("path")) for p in earlier[0].patches) == same_files
    if one and not needs_force(root, earlier[0]):  # apply puts the new texts in place of the earlier
        return
    names = ", ".join(p["name"] for e in earlier for p in e.patches)
    raise Conflict(
        f"an earlier {names} (applied {applied_on(earlier[-1])}) is applied here; the file changed since",
        hint=f"{hints.command('revert', *_force_for(root, earlier))} undoes it, then {hints.command('apply')} "
        "applies the new one",
    )


def _force_for(root: Path, entries: list[Entry]) -> tuple[str, ...]:
    """--force where only the record vouches for what the revert of these applies writes back."""
    return ("--force",) if any(needs_force(root, entry) for entry in entries) else ()


def _as_applied(tgt: Target, set_name: str, detected: DetectedVersion) -> tuple[DetectedVersion, list[str]]:
    """A build between releases patched with `--vllm-version R` (the fix patchkit gives where no
    series fits it): its record says R, and the set is judged as R was applied, not by the series
    a dry run would pick now. Not a record an upgrade of vLLM made stale; only on such builds."""
    if detected.source == "--vllm-version" or not library.between_releases(detected.version):
        return detected, []
    entry = read_state(tgt.root).entry(set_name)
    if entry is None or not entry.vllm_version or entry.vllm_version == str(detected.version):
        return detected, []
    try:
        applied = Version(entry.vllm_version)
    except ValueError:  # the record is read back from the tree: said by status, not trusted here
        return detected, []
    if stale_note(tgt.root, entry, detected.version) is not None:
        return detected, []
    said = f"vLLM {detected.version} was patched with --vllm-version {applied}: judged as {applied}"
    return DetectedVersion(applied, "the record of `apply --vllm-version`"), [said]


def _upstream_in_stock(tgt: Target, selection: Selection) -> Selection:
    """The patches of a series whose change the tree already holds with no apply of patchkit's
    recorded (a stale record, which an upgrade of vLLM left, is none): upstream's, so apply and revert
    leave their files alone. With the tree's RECORD their files must match it (stock, proven); with no
    RECORD (a checkout) the change is upstream's or a hand's, never patchkit's: the fetch cache's
    copy of the release, where it holds one, tells which (Holder).
    All of them: the set is upstream on this tree; some (the rest apply cleanly, on other files): the
    set is the rest. Not a patched wheel's RECORD (it lists the patched files)."""
    if selection.kind != SelectionKind.PATCH or not selection.patches:
        return selection
    root = tgt.root
    if os.path.lexists(journal_path(root)):
        # an apply cut short wrote these files (a kill before its record): the command's lock rolls
        # it back before it reads them, so they are judged as the set's, never as upstream's
        return selection
    # the record first: on a tree that records the set (run's fast path) it is ~0.3 ms, where the
    # RECORD's parse and the files' hashes it spares were ~2 ms
    candidates = _unrecorded(root, selection)
    if not candidates:
        return selection
    paths = touched_paths(selection.patches)
    record, _why = installed_record(root, selection.version, paths)
    if record is not None and record.patched_wheel:
        return selection
    proven = record is not None and all(path in record.hashes for path in paths)
    stock = {path for path in paths if record is not None and _as_listed(root, path, record)} if proven else set()
    if proven and not stock:
        return selection
    plan = dry_run(root, selection.patches)
    applied = {step.patch.name for step in plan.steps if step.state == StepState.ALREADY_APPLIED}
    held = [p for p in candidates if p.name in applied and (not proven or set(touched_paths([p])) <= stock)]
    rest = [p for p in selection.patches if p not in held]
    if not held or set(touched_paths(held)) & set(touched_paths(rest)):
        return selection  # (a file both upstream's and still to patch: the series as it is, conflicts said)
    holder = Holder.STOCK if proven else _holder(root, selection.version, touched_paths(held))
    # a build with a local label of its own: its RECORD lists what it packed, maybe patched
    local = local_label(record.label.partition("/")[0]) if record is not None and proven else ""
    if not rest:
        said = _held(root, selection, holder, held, local=local)
        return replace(selection, kind=SelectionKind.UPSTREAM, note=said, in_stock=True, holder=holder, local=local)
    said = f"{_held(root, selection, holder, held, all_of=False, local=local)}; the set applies its other patches "
    note = f"{said}({len(rest)} of {len(held) + len(rest)})"
    return replace(selection, patches=rest, note=note, holder=holder, local=local)


def _holder(root: Path, version: Version | None, paths: list[str]) -> Holder:
    """Who put a change in files no RECORD of the tree proves stock: the release's stock files as
    the fetch cache holds them (no fetch) tell, where they list every file; else nothing does."""
    record = _integrity().published_record(version, set(paths))
    if record is None or not all(path in record.hashes for path in paths):
        return Holder.UNKNOWN
    return Holder.STOCK if all(_as_listed(root, path, record) for path in paths) else Holder.HAND


def _unrecorded(root: Path, selection: Selection) -> list[Patch]:
    """The series' patches no apply of patchkit's recorded on the tree: all of them with no record
    entry for the set, or one an upgrade of vLLM made stale; none in a maintainer's workspace (its
    record says patchkit wrote the series there)."""
    if (root / WORKSPACE_RECORD).is_file():  # a maintainer's workspace: patchkit wrote the series there
        return []
    if os.path.lexists(journal_path(root)):  # patchkit's own commit, cut short: the command's lock rolls it back
        return []
    entry = read_state(root).entry(selection.set_name)
    if entry is None or stale_note(root, entry, selection.version) is not None:
        return list(selection.patches)
    recorded = {patch["name"] for patch in entry.patches}
    return [p for p in selection.patches if p.name not in recorded and not set(touched_paths([p])) & set(entry.files)]


def _held(
    root: Path, selection: Selection, holder: Holder, held: list[Patch], *, all_of: bool = True, local: str = ""
) -> str:
    """Who holds the change: the stock files (a RECORD says so); else a hand, or either, with the
    way to hand it to patchkit (the files put back, then apply: its record, revert and guard). A
    build of a `local` label's RECORD lists its own files, which proves no release's stock files."""
    what = "this set's change" if all_of else f"the change of {', '.join(p.name for p in held)}"
    version = selection.version
    if holder == Holder.STOCK and local:
        return (
            f"the files of this build of vLLM {version} (local label +{local}) already hold {what}, as its "
            "RECORD lists them: patched before it was built (`patchkit wheel --local-label`?), or upstream's"
        )
    if holder == Holder.STOCK:
        return f"the stock files of vLLM {version} already hold {what}"
    then = unrecorded_fix(root, version, held)
    if holder == Holder.HAND:
        return (
            f"vLLM {version}'s files hold {what} with no apply recorded, unlike its stock files (the fetch "
            f"cache's): applied by hand; {then}"
        )
    return f"vLLM {version}'s files already hold {what} with no apply recorded: upstream, or applied by hand ({then})"


def unrecorded_fix(root: Path, version: Version | None, held: list[Patch]) -> str:
    """How files that hold a change with no apply recorded are handed to patchkit: the files put
    back (git or the user's source in a checkout, else the release's), then apply records it."""
    paths = touched_paths(held)
    back = checkout_restore(root, paths) or f"run {target_mod.stock_files_command(root, version)}"
    return f"{back}, then {hints.command('apply')} applies it with a record"


def in_stock_fix(version: object, patch_set: PatchSetDef | None) -> str:
    """The stock files of `version` hold the set's change and pass its checks (issue 23's words)."""
    pending = patch_set.pending_fix if patch_set else None
    merged = f" (was {pending} merged?)" if pending else ""
    return f"upstream may have fixed this in {version}{merged}: close the set's range"


def cached_stock(root: Path, version: Version | None, paths: list[str]) -> dict[str, bytes] | None:
    """The stock bytes of `paths` the fetch cache holds (checks.integrity.cached_stock), no fetch."""
    found: dict[str, bytes] | None = _integrity().cached_stock(root, version, paths)
    return found


def _integrity() -> ModuleType:
    """The integrity check's module, for its readers of the fetch cache."""
    # lazy: it (and the fetch cache's reader) loads only to judge files against the cached stock (a
    # conflict, a checkout holding a change), off `run`'s fast path
    from patchkit.checks import integrity

    return integrity


def _as_listed(root: Path, path: str, record: Record) -> bool:
    """The file is there, a regular file, with the hash its RECORD lists."""
    try:
        data = read_file(root / path)
    except OSError:
        return False
    return data is not None and path in record.hashes and record.matches(path, data)


def _selection(tgt: Target, patch_set: PatchSetDef, detected: DetectedVersion) -> Selection:
    """What the set holds for the version; for a build between releases (not named by
    --vllm-version, which overrides), the series a dry run finds to fit."""
    between = _between(detected)
    try:
        selection = library.select(patch_set, detected.version)
    except NoPatchSet as exc:
        if not between:
            raise unsupported(tgt.root, exc.message, exc.hint) from None
        return _cleanly_applying(tgt, patch_set, detected.version)
    if between and selection.kind == SelectionKind.PATCH:
        return _cleanly_applying(tgt, patch_set, detected.version)
    return selection


def _cleanly_applying(tgt: Target, patch_set: PatchSetDef, version: Version) -> Selection:
    """A build between releases (a nightly, a vLLM git checkout): the series of the newest release
    at or below its base version whose dry run on the tree applies cleanly (or is applied)."""
    tried = []
    for release, _newest in library.newest_first(patch_set, version):
        patches = release.read_patches(patch_set.roots)
        series = f"{release.said()} [{release.directory.name}]"
        if patches and not dry_run(tgt.root, patches).conflicts:
            said = (
                f"vLLM {version} is a build between releases: the series {series} is the newest "
                "that applies cleanly (--vllm-version overrides)"
            )
            return library.series_for(patch_set, release, version, said)
        tried.append(series)
    raise unsupported(
        tgt.root,
        f"no series of the set {patch_set.name!r} applies cleanly to vLLM {version} (a build between "
        f"releases; tried: {', '.join(tried) or 'none at or below its base version'})",
        "pass --vllm-version with the release it derives from",
    )


def library_sets(opts: Options) -> dict[str, PatchSetDef] | None:
    """The library's sets, loaded once for a command that may work on several of them (no --patch,
    not one --set) and passed on to resolve; None when it works on one set or ad-hoc patches."""
    if opts.adhoc or opts.set_name is not None:
        return None
    return library.load_library(library.locate(opts.library).path)


def several(opts: Options, sets: dict[str, PatchSetDef] | None = None) -> bool:
    """Whether the command works on several sets: no --patch, not one --set, and a library of
    more than one set (a library of one set works as it always has). `sets`: library_sets(opts)."""
    if opts.adhoc or opts.set_name is not None:
        return False
    return len(opts.set_names) > 1 or len(sets if sets is not None else library_sets(opts) or {}) > 1


# A set of the library the version is in no range of (its release has no series): said, not an error.
NOT_COVERED = "not-covered"


@dataclass(eq=False, repr=False)
class Chosen(Value):
    """One set of the library for the target: its series (None: the library has none for this version)."""

    name: str
    resolved: Resolved | None
    note: str = ""  # why there is no series
    # a set whose range holds the version but that has no series for it (resolved None): its
    # definition, with the tree and version, for the launch checks on the files as they are
    gap: Resolved | None = None

    @property
    def kind(self) -> SelectionKind | None:
        return self.resolved.selection.kind if self.resolved else None


def resolve_sets(opts: Options, target: Target, *, sets: dict[str, PatchSetDef] | None = None) -> list[Chosen]:
    """Every set of the library (or those --set names), in the library's order, resolved for the
    target. `sets`: the library's sets when the caller has loaded them already (library_sets)."""
    loaded = sets if sets is not None else library.load_library(library.locate(opts.library).path)
    detected = version_mod.detect(target, opts.vllm_version)  # the tree's, once: the same for every set
    chosen = []
    for patch_set in library.choose_sets(loaded, opts.set_names):
        try:
            one = replace(opts, set_name=patch_set.name)
            chosen.append(Chosen(patch_set.name, resolve(one, target=target, sets=loaded, detected=detected)))
        except NoPatchSet as exc:  # a gap in the set's range: no series to apply, the tree left unsafe for it
            chosen.append(Chosen(patch_set.name, None, exc.message, _gap(target, detected, patch_set, exc)))
    if not any(c.kind in (SelectionKind.PATCH, SelectionKind.UPSTREAM) for c in chosen):
        named = [loaded[c.name] for c in chosen]
        said = library.outside_every_range(str(detected.version), named) or "; ".join(why_not(c) for c in chosen)
        hint = f"{hints.command('list')} shows each set's range"
        raise unsupported(target.root, f"no set of the library covers this vLLM: {said}", hint)
    return chosen


def _gap(target: Target, detected: DetectedVersion, patch_set: PatchSetDef, exc: NoPatchSet) -> Resolved:
    """A set with no series for the version, as an unsupported selection whose note says the gap
    (a build between releases that no series fits: why, as resolve said it)."""
    said = exc.message if _between(detected) else library.no_series_said(patch_set, detected.version)
    kind = SelectionKind.UNSUPPORTED
    selection = Selection(patch_set.name, kind, detected.version, note=said, patch_set=patch_set, gap=True)
    return Resolved(target, detected, selection)


def _between(detected: DetectedVersion | None) -> bool:
    """A build between releases that resolve matches by a dry run (not one --vllm-version names)."""
    return detected is not None and library.between_releases(detected.version) and detected.source != "--vllm-version"


def no_series(chosen: list[Chosen]) -> list[Chosen]:
    """The sets whose range holds the tree's version but that have no series for it: apply cannot
    make the tree safe for them (upstream and out-of-range sets are not among them)."""
    return [c for c in chosen if c.resolved is None and c.gap is not None]


def no_series_fix(chosen: Chosen) -> str:
    """What makes the tree safe for a set with no series (a release with one, or a new series)."""
    assert chosen.gap is not None and chosen.gap.selection.patch_set is not None
    return gap_fix(chosen.gap)


def gap_fix(gap: Resolved) -> str:
    """no_series_fix of a gap's Resolved; a build between releases may name the release it derives from."""
    assert gap.selection.patch_set is not None and gap.vllm_version is not None
    fix = library.no_series_fix(gap.selection.patch_set, gap.vllm_version)
    return f"pass --vllm-version with the release it derives from, or {fix}" if _between(gap.version) else fix


def why_not(chosen: Chosen) -> str:
    if chosen.resolved is not None and chosen.resolved.selection.note:
        return chosen.resolved.selection.note
    return chosen.note or f"{chosen.name}: no series"


def judged(chosen: list[Chosen]) -> list[Chosen]:
    """The sets status and verify judge: those with a series or an upstream release (the others are notes)."""
    return [c for c in chosen if c.kind in (SelectionKind.PATCH, SelectionKind.UPSTREAM)]


def _installed_wheel(root: Path) -> Provenance | None:
    """The provenance of a vLLM installed from a wheel patchkit built, or None; its module is loaded
    only for a tree that has a provenance file."""
    if not has_provenance(root):
        return None
    found: Provenance | None = installed_wheel_reader().find(root)  # its signature, through ModuleType
    return found


def require_patches(resolved: Resolved) -> list[Patch]:
    """The series to apply; an unsupported version is exit 3 for commands that must patch."""
    if resolved.selection.kind == SelectionKind.UNSUPPORTED:
        raise unsupported(resolved.target.root, resolved.selection.note or "unsupported vLLM version")
    return resolved.patches if resolved.selection.kind == SelectionKind.PATCH else []


def unsupported(root: Path, message: str, hint: str | None = None) -> NoPatchSet:
    """No series for this vLLM (exit 3), saying so when the launch guard an earlier apply installed
    refuses the tree, and what clears it."""
    refusal = launch_refusal(root)
    if refusal:
        cleared = f"run {hints.command('revert')} (it drops the old record, and the guard with it)"
        hint = f"{hint + '; ' if hint else ''}the launch guard refuses this tree ({few(refusal)}): {cleared}"
    return NoPatchSet(message, hint=hint)


def tree_version(opts: Options, target: Target) -> DetectedVersion | None:
    """The target's version when it can be found (a revert of every set does not need it)."""
    return _detect_quietly(target, opts.vllm_version)


def _detect_quietly(tgt: Target, override: str | None) -> DetectedVersion | None:
    """Ad-hoc patches do not need a version; report it when it can be found."""
    try:
        return version_mod.detect(tgt, override)
    except TargetError:
        return None
