"""A vLLM installed from a wheel `patchkit wheel` built (pip, uv, `installer`): no `.patchkit/` in the
tree, but the dist-info says what was applied.

    vllm-<version>+<label>.dist-info/patchkit.json      schema_version, patchkit, vllm_version (the stock
                                                        release), label, set, patches [{name, sha256}],
                                                        files {path: {stock_sha256, patched_sha256}}
    vllm-<version>+<label>.dist-info/patchkit/<name>    each patch's text

It is read back from the tree, so it is untrusted input like `.patchkit/state.json`:
`patchkit.distinfo.provenance.read_provenance` reads it (regular files only, never through a symlink,
size-limited, checked field by field, each text against its sha256), and its paths must also pass
the recorded-path rule, since revert writes them. It is believed only where a patched wheel's
install put it: a dist-info whose version is the release's with the label it names, whose RECORD
lists each file as it says the wheel holds it; and a set it names that the library at hand holds
is either that set's series for the release (patch names and sha256) or an older series of it
(an earlier library's: status says so, revert works from the wheel's texts). Anything else is BadInput
naming the file and the fix. Even then, revert keeps a copy of each file it deletes or overwrites
on the wheel's own word alone (its texts reversed, where the library's patches are not the same),
and replaces a file only when it is what the wheel's patches make of the original it puts back.

What it gives: the series (status, verify, apply, revert judge the tree by it), the stock sha256 of
each patched file (the integrity check's reference, since the wheel's RECORD holds the patched
ones), drift (a file that is neither), and revert's originals (the release's stock files from the
fetch cache or the index, each checked against its stock sha256; offline, the patches
reverse-applied, checked the same way). `revert` leaves the dist-info as installed: see docs/wheels.md.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from packaging.version import Version

from patchkit.base import fsutil, hints
from patchkit.base.enums import FileKind
from patchkit.base.errors import BadInput, FetchError, PatchkitError, drift_refused, escaped, quoted
from patchkit.base.hashing import sha256
from patchkit.distinfo.provenance import PATCH_DIR, FileRecord, read_provenance
from patchkit.distinfo.provenance import Provenance as Record
from patchkit.distinfo.record import PROVENANCE, parse_record, read_record_file, record_digest
from patchkit.series.hunks import made_file, reverse_file
from patchkit.series.library import PATCH, PatchSetDef, Selection, load_chosen, load_library, locate, select
from patchkit.series.patchfile import DEFAULT_ROOTS, Patch, parse_patch, touched_paths
from patchkit.series.plan import View, plan_apply, plan_revert
from patchkit.store.state import checked_path, read_state
from patchkit.tree.target import vllm_metadata_dirs

MAX_PATCH_BYTES = 64 << 20
# patchkit.fetch.release_tree: (version, paths, *, warn) -> the directory the release's files are in.
FetchRelease = Callable[..., Path]


@dataclass(frozen=True)
class Provenance:
    """A patched wheel's provenance as read back from the tree it was installed in."""

    root: Path
    dist_info: str  # the directory's name
    record: Record
    # every set it names is the library's own series (patch names and sha256): reversing them vouches
    # for a stock file; else only the wheel's texts do, and revert keeps a copy of what it replaces
    library_held: bool = False
    # a set it names is the library's with another series (an earlier library's): only the release's
    # own files vouch for the originals revert puts back, never its texts reversed alone
    older: bool = False

    @property
    def origin(self) -> str:
        return f"{self.dist_info}/{PROVENANCE}"

    @property
    def vllm_version(self) -> str:
        return self.record.vllm_version

    @property
    def set_name(self) -> str | None:
        return self.record.set_name

    @property
    def set_names(self) -> tuple[str, ...]:
        """The sets the wheel was built with, in the order applied (none: --patch files)."""
        if self.record.sets:
            return tuple(s.name for s in self.record.sets)
        return (self.record.set_name,) if self.record.set_name else ()

    def for_set(self, name: str) -> Provenance:
        """A wheel of several sets seen as set `name` alone: its patches, and the files they touch."""
        chosen = next(s for s in self.record.sets if s.name == name)
        alone = replace(self.record, set_name=name, patches=chosen.patches, sets=())
        touched = {p for patch in Provenance(self.root, self.dist_info, alone).patches() for p in _paths(patch)}
        files = {path: shas for path, shas in self.record.files.items() if path in touched}
        return Provenance(self.root, self.dist_info, replace(alone, files=files), self.library_held, self.older)

    @property
    def files(self) -> dict[str, FileRecord]:
        return self.record.files

    @property
    def patch_hashes(self) -> tuple[tuple[str, str], ...]:
        return tuple((p.name, p.sha256) for p in self.record.patches)

    def patches(self, roots: tuple[str, ...] = DEFAULT_ROOTS) -> list[Patch]:
        """The patch texts shipped in the dist-info, each checked against its sha256."""
        return [parse_patch(self.record.patch_text(p.name, p.folder), p.name, roots=roots) for p in self.record.patches]

    @cached_property
    def adhoc_name(self) -> str:
        """The set name an ad-hoc wheel's series goes by (as `--patch` would record it)."""

        digest = hashlib.sha256("\n".join(d for _n, d in self.patch_hashes).encode()).hexdigest()
        return f"adhoc-{digest[:12]}"

    @property
    def name(self) -> str:
        return self.set_name or ", ".join(self.set_names) or self.adhoc_name

    def describe(self) -> str:
        # the dist-info's name repeats the label: named again it is wider than a terminal's line
        return f"installed from a wheel patchkit {self.record.patchkit} built (+{self.record.label}), as its dist-info's {PROVENANCE} says"


# --------------------------------------------------------------------------- reading it


def find(root: Path) -> Provenance | None:
    """The provenance of the vLLM installed in `root`, or None when its dist-info has none (a
    stock install, a source checkout, several vllm dist-infos: version detection says so).
    read_provenance checks it whole; here, beyond that, every file it names must pass the
    recorded-path rule (revert writes them), its release must be a version, the install must be a
    patched wheel's (_held_to_the_install) and a library set it names the library's (held_sets)."""

    dist_infos = [p.name for p in vllm_metadata_dirs(root) if p.name.lower().endswith(".dist-info")]
    if len(dist_infos) != 1:
        return None
    dist_info = dist_infos[0]
    if not os.path.lexists(root / dist_info / PROVENANCE):
        return None  # a stock install (its dist-info judged elsewhere, a symlinked one included)
    try:
        record = read_provenance(root / dist_info)
    except FileNotFoundError:
        return None
    origin = root / dist_info / PROVENANCE
    for path in record.files:
        checked_path(path, origin, guard=False)
    try:
        Version(record.vllm_version)
    except ValueError:
        raise _refuse(
            f"{dist_info}/{PROVENANCE}", f"has a vllm_version {quoted(repr(record.vllm_version))} that is not a version"
        ) from None
    found = Provenance(root, dist_info, record)
    _held_to_the_install(found)
    wrong = _unlike_the_series(record.files, found.patches())
    if wrong:
        raise _refuse(f"{dist_info}/{PROVENANCE}", f"lists {wrong} otherwise than its own patches touch it")
    library = hints.current().library
    held = held_sets(found, library)
    return replace(
        found, library_held=held, older=not held and any(older_series(found, n, library) for n in found.set_names)
    )


def _held_to_the_install(found: Provenance) -> None:
    """A record is believed only in the dist-info a patched wheel's install has: its version the
    release's with the label the record names (`patchkit wheel` renames it so), and its RECORD
    listing each file as the record says the wheel holds it (the patched sha256; a file the wheel
    deletes, not at all). One planted in a stock install, or beside files pip did not write, fails."""
    record = found.record
    expected = _labelled(record.vllm_version, record.label)
    installed = _version_of(found.dist_info)
    if expected is None or installed != expected:
        raise untrusted(
            found,
            f"is no patched wheel's: it names vLLM {expected or record.vllm_version}, but the dist-info "
            f"is {found.dist_info}",
            installed=False,
        )
    hints.knows_release(installed, record.vllm_version)  # a hint names the release, whatever the label
    try:
        rows = parse_record(
            read_record_file(found.root, found.root / found.dist_info / "RECORD"), only=set(record.files)
        )
    except (OSError, PatchkitError):
        raise untrusted(found, "is beside no readable RECORD: nothing shows pip installed what it names") from None
    for path, shas in sorted(record.files.items()):
        wanted = None if shas.patched_sha256 is None else record_digest(bytes.fromhex(shas.patched_sha256), "sha256")
        listed = rows[path][0] if path in rows else None
        if listed != wanted:
            said = "installed no file" if wanted is None else "installed the patched file"
            raise untrusted(
                found, f"says the wheel {said} at {escaped(path)}, but {found.dist_info}/RECORD lists it otherwise"
            )


def _labelled(stock: str, label: str) -> Version | None:
    """The version `patchkit wheel` gives a wheel of release `stock` labelled `label` (a local label
    the stock version has already is extended with '.'), or None when it cannot be one."""
    try:
        release, local = Version(stock), Version(f"0+{label}").local
    except ValueError:
        return None
    if not local:
        return None
    return Version(f"{release.public}+{release.local + '.' if release.local else ''}{local}")


def _version_of(dist_info: str) -> Version | None:
    """The version a dist-info's name gives (`vllm-0.16.0+patchkit.eagle3.dist-info`), or None."""
    text = dist_info[: -len(".dist-info")].partition("-")[2]
    try:
        return Version(text)
    except ValueError:
        return None


def held_sets(found: Provenance, library: str | Path | None) -> bool:
    """Whether every set the record names is `library`'s own series for its release (patch names
    and sha256, in order). A set the library holds with no series for that release is refused. One
    it holds with other patches (an earlier library's series: older_series) or lacks (a wheel built
    with another library) leaves the wheel's own texts, each held to its sha256 and the install to
    its RECORD, as the only word on it: False, as for `--patch` files (revert keeps what it replaces)."""
    names = found.set_names
    if not names:
        return False
    try:
        sets = load_library(locate(library).path)
    except PatchkitError:  # no library to hold it to: the wheel's texts are all there is
        return False
    held = True
    for name in names:
        if name not in sets:
            held = False
            continue
        shipped = found.patch_hashes if len(names) == 1 else _hashes_of(found, name)
        series = _series_hashes(sets[name], Version(found.vllm_version))
        if series is None:
            raise untrusted(
                found,
                f"names set {name}, but the library at {locate(library).path} has no series of {name} "
                f"for vLLM {Version(found.vllm_version).public}",
                library=True,
            )
        held = held and series == shipped  # else an older series of the set: its own texts vouch for it
    return held


def older_series(found: Provenance, set_name: str, library: str | Path | None) -> list[str]:
    """The patches (numbers) by which the wheel's series of `set_name` differs from the library's
    series of that set for its release: an earlier patchkit's library built the wheel. Empty: the
    same series, or a set (or series) the library does not hold."""
    if set_name not in found.set_names:
        return []
    try:
        patch_set = load_library(locate(library).path).get(set_name)
    except PatchkitError:
        return []
    series = None if patch_set is None else _series_hashes(patch_set, Version(found.vllm_version))
    shipped = found.patch_hashes if len(found.set_names) == 1 else _hashes_of(found, set_name)
    if series is None or series == shipped:
        return []
    ours, theirs = {d for _n, d in shipped}, {d for _n, d in series}
    changed = [n for n, d in shipped if d not in theirs] + [n for n, d in series if d not in ours]
    return sorted({_number(n) for n in changed} or {_number(n) for n, _d in series})


def _number(name: str) -> str:
    head = name.split("-", 1)[0]
    return head if head.isdigit() else name


def _hashes_of(found: Provenance, name: str) -> tuple[tuple[str, str], ...]:
    return next(tuple((p.name, p.sha256) for p in s.patches) for s in found.record.sets if s.name == name)


def _series_hashes(patch_set: PatchSetDef, version: Version) -> tuple[tuple[str, str], ...] | None:
    try:
        chosen = select(patch_set, version)
    except PatchkitError:
        return None
    return tuple((p.name, p.sha256) for p in chosen.patches) if chosen.kind == PATCH else None


def _unlike_the_series(files: dict[str, FileRecord], patches: list[Patch]) -> str | None:
    """The first file the record lists that the series does not touch, or with a stock or patched
    hash where the series creates or deletes it (revert deletes a file whose stock hash is null)."""
    shape: dict[str, tuple[bool, bool]] = {}  # path -> (in the stock tree, in the patched tree)
    for patch in patches:
        for f in patch.files:
            if f.source_path is not None:
                shape[f.source_path] = (shape.get(f.source_path, (True, True))[0], f.kind == FileKind.MODIFY)
            if f.target_path is not None and f.target_path != f.source_path:
                shape[f.target_path] = (shape.get(f.target_path, (False, False))[0], True)
    for path, hashes in sorted(files.items()):
        if shape.get(path) != (hashes.stock_sha256 is not None, hashes.patched_sha256 is not None):
            return path
    return None


def _paths(patch: Patch) -> set[str]:
    return {p for f in patch.files for p in (f.source_path, f.target_path) if p}


def untrusted(found: Provenance, what: str, *, installed: bool = True, library: bool = False) -> BadInput:
    """The refusal of a record patchkit will not believe, with what fixes it: in a dist-info pip
    did not install from a patched wheel, the record removed (it is then a plain install); else
    the stock release reinstalled (or, for a library set, the library it was built with named)."""
    where = found.root / found.dist_info
    message = f"{found.origin} {what}: not believed"
    if not installed:
        remove = shlex.join(["rm", "-rf", "--", str(where / PROVENANCE), str(where / PATCH_DIR)])
        return BadInput(message, hint=f"remove it to treat the tree as the plain install it is: `{remove}`")
    reinstall = f"{hints.reinstall_vllm(found.vllm_version)}, then {hints.command('apply')}"
    if library:
        return BadInput(
            message, hint=f"if the wheel was built with another library, add --patches DIR; else {reinstall}"
        )
    return BadInput(message, hint=reinstall)


def _refuse(where: str, what: str) -> BadInput:
    return BadInput(
        f"{where} {what}",
        hint="this vLLM was installed from a wheel patchkit built; reinstall it, or remove that file "
        "to treat the tree as a plain install",
    )


# --------------------------------------------------------------------------- what it tells


def selection(found: Provenance, version: Version, library: str | Path | None) -> tuple[Selection, str]:
    """The series the wheel was built with, as a library Selection, and a note saying so. When the
    library holds the set, its series for this release must be the same patches (names and sha256:
    held_sets, else refused), and that selection is it (its release directory shown); a set the
    library lacks (another library's, or `--patch` files) is the shipped patch texts."""

    if Version(found.vllm_version).public != Version(str(version)).public:
        raise _refuse(found.origin, f"describes vLLM {found.vllm_version}, but the dist-info is vLLM {version}")
    held_sets(found, library)  # `library`: the command's, which find() took from the selection too
    patch_set = chosen = None
    if found.set_name:
        try:
            patch_set = load_chosen(library, found.set_name)
            chosen = select(patch_set, version)
        except PatchkitError:  # no such set, or no series of it for this release: the shipped one
            chosen = None
    patches = found.patches(patch_set.roots if patch_set else DEFAULT_ROOTS)  # each checked, used or not
    if (
        chosen is not None
        and chosen.kind == PATCH
        and tuple((p.name, p.sha256) for p in chosen.patches) == found.patch_hashes
    ):
        return chosen, f"{found.describe()}; its series is the library's"
    if chosen is not None and chosen.kind == PATCH and _past_the_wheel(found):
        # reverted, or applied since: the wheel's earlier series is not what the files hold
        return chosen, f"{found.describe()}; reverted or applied since, so the library's series is judged"
    # the library's series of the set differs: the wheel's is an earlier library's (apply replaces it)
    earlier = " (an earlier library's: this library's series of it differs)" * (
        chosen is not None and chosen.kind == PATCH
    )
    chosen = Selection(found.name, PATCH, Version(Version(str(version)).public), patches, patch_set=patch_set)
    return chosen, f"{found.describe()}; its series is read from there{earlier}"


def stock_hashes(root: Path, record: dict[str, str]) -> dict[str, str]:
    """A RECORD's {path: 'sha256=...'} with each file the wheel patched given its stock hash: the
    reference the integrity check holds a stock file to, and none for a file it created (the stock
    release has none). Only where RECORD lists the patched hash (find() refuses a RECORD that
    disagrees with the provenance)."""

    found = find(root)
    if found is None:
        return record
    out = dict(record)
    for path, shas in found.files.items():
        listed = out.get(path)
        if shas.patched_sha256 is None or listed != record_digest(bytes.fromhex(shas.patched_sha256), "sha256"):
            continue
        if shas.stock_sha256 is None:
            del out[path]
        else:
            out[path] = record_digest(bytes.fromhex(shas.stock_sha256), "sha256")
    return out


def earlier_series(root: Path, set_name: str) -> list[str]:
    """The patches (numbers) the library (the user's) changed since it built the wheel whose earlier
    series of `set_name` the tree still holds; empty once reverted or applied since, or for another."""
    found = find(root)
    if found is None or not found.older or set_name not in found.set_names:
        return []
    alone = found.for_set(set_name) if len(found.set_names) > 1 else found  # applied since: that set's record
    return [] if _past_the_wheel(alone) else older_series(found, set_name, hints.current().library)


@dataclass(frozen=True)
class EarlierWheel:
    """A patched wheel's earlier series of a set, as apply replaces it: the patches the library
    changed, the release's stock bytes of every file the wheel patched (None: one it created), and
    the library's series of the set for the release."""

    changed: list[str]
    stock: dict[str, bytes | None]
    selection: Selection


def earlier_wheel_stock(root: Path, set_name: str, fetch_release: FetchRelease) -> EarlierWheel | None:
    """earlier_series of a wheel of that one set, with the stock files each the release's own as
    revert would put them back (the drift and the originals nothing vouches for refused as revert
    refuses them, naming apply): apply plans the library's series on them, so that it replaces the
    earlier one in one transaction. None: no such wheel."""
    found = find(root)
    if found is None or not updates_in_one_step(root, set_name):
        return None
    library = hints.current().library
    changed = earlier_series(root, set_name)
    if not changed:
        return None
    alone = found.for_set(set_name) if len(found.set_names) > 1 else found
    chosen = select(load_chosen(library, set_name), Version(found.vllm_version))
    view = View(root)
    restore_stock(view, alone, force=False, fetch_release=fetch_release, verb="apply")
    return EarlierWheel(changed, {path: view.read(path) for path in sorted(alone.files)}, chosen)


def updates_in_one_step(root: Path, set_name: str) -> bool:
    """Whether apply replaces the wheel's earlier series of `set_name` in one step (earlier_wheel_stock):
    the wheel's one set, or one of several whose files no other set of it patches (`patchkit wheel`
    builds no other; a record read back from the tree may say otherwise: revert goes first then, the
    stock file of a file two sets patched would drop the other's change)."""
    found = find(root)
    if found is None or set_name not in found.set_names:
        return False
    if len(found.set_names) == 1:
        return True
    own = set(found.for_set(set_name).files)
    return not any(own & set(found.for_set(other).files) for other in found.set_names if other != set_name)


def _past_the_wheel(found: Provenance) -> bool:
    """Whether the set was applied since the install (recorded), or every file the wheel patched
    holds its stock bytes again (a revert), read as stock_again does."""
    if read_state(found.root).entry(found.name) is not None:
        return True
    return bool(found.files) and all(
        shas.stock_sha256 is not None
        and sha256(fsutil.read_file(found.root / p, follow_symlinks=False)) == shas.stock_sha256
        for p, shas in found.files.items()
    )


def stock_again(root: Path, read: Callable[[Path], bytes | None]) -> Provenance | None:
    """The wheel's provenance when every file it patched holds its stock bytes again (a revert): its
    dist-info still carries the +patchkit label and a RECORD of the patched files."""
    found = find(root)
    if found is None or not found.files:
        return None
    stock = all(
        shas.stock_sha256 is not None and sha256(read(root / p)) == shas.stock_sha256 for p, shas in found.files.items()
    )
    return found if stock else None


def drifted(root: Path, read: Callable[[Path], bytes | None], set_name: str | None = None) -> list[str]:
    """The files the wheel patched (of a wheel of several sets, those `set_name`'s own patches touch)
    whose content is neither the patched nor the stock one; none for a set the wheel does not hold
    (another set's edited file is not its drift)."""
    found = find(root)
    if found is None:
        return []
    if set_name is not None and set_name not in (*found.set_names, found.name):
        return []
    if set_name in found.set_names and len(found.set_names) > 1:
        found = found.for_set(set_name)
    return sorted(
        p for p, shas in found.files.items() if sha256(read(root / p)) not in (shas.stock_sha256, shas.patched_sha256)
    )


def not_the_series_output(root: Path, read: Callable[[Path], bytes | None], set_name: str | None = None) -> list[str]:
    """The files the wheel patched whose bytes are its record's patched sha256 but not what its
    patches make of the stock file it records (reversed from them, the stock sha256 is not what
    comes back): that record is read back from the tree (a hotfix a planted one names). As drifted
    chooses the files; a record whose patches do not parse: none said here (find judges it)."""
    found = find(root)
    if found is None or (set_name is not None and set_name not in (*found.set_names, found.name)):
        return []
    if set_name in found.set_names and len(found.set_names) > 1:
        found = found.for_set(set_name)
    try:
        patches = found.patches()
    except PatchkitError:
        return []
    there: Callable[[str], bytes | None] = lambda path: read(root / path)  # noqa: E731
    unlike = []
    for path, shas in sorted(found.files.items()):
        data = there(path)
        if data is None or shas.patched_sha256 is None or sha256(data) != shas.patched_sha256:
            continue  # stock, deleted or edited: drifted and the plan say those
        if shas.stock_sha256 is None:  # created by the wheel: made from nothing
            made = made_file(lambda _: None, path, patches, digest=False)
            unlike += [path] if made != data else []
        elif sha256(reverse_file(there, path, patches)) != shas.stock_sha256:
            unlike.append(path)
    return unlike


# --------------------------------------------------------------------------- revert


@dataclass
class StockRestore:
    """What restore_stock did beyond putting the stock files back."""

    edited: list[str]
    notes: list[str]
    # deleted, or given back as the wheel's own texts reversed give them, on its word alone (its
    # patches are not the library's, nor the release's file that one): kept aside
    unvouched: list[str] = field(default_factory=list)


def restore_stock(
    view: View, found: Provenance, *, force: bool, fetch_release: FetchRelease, verb: str = "revert"
) -> StockRestore:
    """Put the stock files into `view` for every file the wheel patched. The originals
    are the release's own files (fetch cache, else the index; checked against the release's RECORD
    by the fetcher), each held to the provenance's stock sha256; when they cannot be fetched, the
    shipped patches are reverse-applied and held to the same sha256. A file that is neither the
    patched nor the stock one, or not what the patches make of that original, is drift (with
    `force`: restored, and listed to be kept aside).
    `fetch_release` is patchkit.fetch.release_tree, handed down (the fetcher stands above this module);
    `verb`: the command that puts them back (revert, or apply over them: earlier_wheel_stock)."""
    done = StockRestore([], [])
    todo = []
    changed = {}  # edited or deleted since the install: each named
    for path, shas in sorted(found.files.items()):
        content = view.read(path)
        current = sha256(content)
        if current == shas.stock_sha256:
            continue
        if current != shas.patched_sha256:
            changed[path] = "deleted" if content is None else "edited"
            if content is not None:
                done.edited.append(path)
        todo.append(path)
    if changed and not force:
        _refuse_changed(changed)
    originals = _originals(view, found, todo, done, (fetch_release, verb)) if todo else {}
    _hold_to_the_series(view, found, originals, done, force=force)
    for path in todo:
        view.write(path, originals[path])
    return done


def _refuse_changed(changed: dict[str, str]) -> None:
    """Drift naming each file the wheel patched that was edited or deleted since (one a line, as git)."""
    raise drift_refused(
        changed,
        lambda path, what: f"{path} was {what} after the patched wheel installed it; keeping your version",
        f"{len(changed)} files were changed after the patched wheel installed them; keeping your versions",
        restores="the stock file",
    )


def _hold_to_the_series(
    view: View, found: Provenance, originals: dict[str, bytes | None], done: StockRestore, *, force: bool
) -> None:
    """A file revert replaces must be what the wheel's series makes of the original it gets back,
    reproduced here: the record's patched sha256 is read back from the tree, and a planted one names
    any bytes (a user's hotfix). Any other file is drift: refused, or with `force` kept aside."""
    unlike = [p for p in _unlike_the_output(view, found, originals) if p not in done.edited]
    if not unlike:
        return
    if not force:
        why, version = f"edited after the install, or {found.origin} is not the wheel's", found.vllm_version
        raise drift_refused(
            dict.fromkeys(unlike, ""),
            lambda path, _: (
                f"{path} is not what the wheel's patches make of vLLM {version}'s file: {why}; keeping your version"
            ),
            f"{len(unlike)} files are not what the wheel's patches make of vLLM {version}'s files ({why}); "
            "keeping your versions",
            restores="the stock file",
        )
    done.edited += [p for p in unlike if view.read(p) is not None]
    done.unvouched = [p for p in done.unvouched if p not in done.edited]


def _unlike_the_output(view: View, found: Provenance, originals: dict[str, bytes | None]) -> list[str]:
    """Those of `originals`' paths whose bytes in `view` are not what the wheel's patches, applied
    to those originals (and to the other files they touch as `view` holds them), make of them."""
    if not originals:
        return []
    patches = found.patches()
    contents = {p: view.read(p) for p in touched_paths(patches)}
    applied = plan_apply(found.root, patches, View.holding(found.root, {**contents, **originals}))
    if applied.conflicts:  # the series does not even apply to them: nothing made these bytes
        return sorted(originals)
    return sorted(p for p in originals if applied.content(p) != view.read(p))


def _originals(
    view: View, found: Provenance, paths: list[str], done: StockRestore, fetching: tuple[FetchRelease, str]
) -> dict[str, bytes | None]:
    """The stock bytes of `paths` (None: a file the wheel created). Where nothing but the wheel's
    own record vouches for them (no library series of the same patches, not the release's file),
    the path goes to done.unvouched, so that revert keeps the file it replaces."""
    wanted = {p: found.files[p].stock_sha256 for p in paths}
    out: dict[str, bytes | None] = {p: None for p, digest in wanted.items() if digest is None}
    needed = [p for p in paths if p not in out]
    fetched = _fetched(found, needed, done.notes, fetching[0]) if needed else {}
    alone = list(out)  # a created file's deletion: only the patches say the release lacks it
    for path in needed:
        data = fetched.get(path)
        if data is not None and sha256(data) == wanted[path]:
            out[path] = data
            continue
        if data is not None and sha256(data) == sha256(view.read(path)) == found.files[path].patched_sha256:
            raise untrusted(
                found, f"says the wheel patched {escaped(path)}, but it holds vLLM {found.vllm_version}'s own file"
            )
        if found.older:
            raise _unvouched_original(found, path, fetched=data is not None, verb=fetching[1])
        out[path] = _reversed(found, path, wanted[path])
        alone.append(path)
        done.notes.append(f"{escaped(path)}: restored by reverse-applying the wheel's patches (sha256 checked)")
    if not found.library_held:
        done.unvouched += sorted(p for p in alone if p not in done.edited and view.read(p) is not None)
    return out


def _unvouched_original(found: Provenance, path: str, *, fetched: bool, verb: str) -> PatchkitError:
    """The refusal to put back an original of an earlier series' wheel on its own texts' word: the
    release's file is not the one its record names (bad input), or could not be had (environment)."""
    if fetched:  # not another library's record: no --patches DIR makes it the release's file
        return untrusted(found, f"records a stock {escaped(path)} that is not vLLM {found.vllm_version}'s own file")
    # the command fetches exactly the wheel's files; `patchkit fetch` only those a library set names
    hint = f"once the package index is reachable, run {hints.command(verb)} again: it fetches them"
    if Version(found.vllm_version).local:  # a local build (+cu129): no public index serves its files
        hint = f"{hints.reinstall_vllm(found.vllm_version)}, then run {hints.command('apply')}"
    return FetchError(
        f"vLLM {found.vllm_version}'s stock {escaped(path)} could not be fetched: only the release's files vouch "
        f"for the originals of an earlier series of {found.name}, so nothing was {'applied' if verb == 'apply' else 'reverted'}",
        hint=hint,
    )


def _fetched(found: Provenance, paths: list[str], notes: list[str], fetch_release: FetchRelease) -> dict[str, bytes]:
    """The stock files of the release (fetch cache, else the index): {} when they cannot be had."""
    try:
        tree = fetch_release(found.vllm_version, paths, warn=notes.append)
    except PatchkitError as exc:
        notes.append(f"the stock files of vLLM {found.vllm_version} could not be fetched ({exc.message})")
        return {}
    out = {}
    for path in paths:
        try:
            out[path] = fsutil.read_regular(tree / path, MAX_PATCH_BYTES)
        except OSError:
            continue
    return out


def _reversed(found: Provenance, path: str, digest: str | None) -> bytes:

    view = View(found.root)
    plan = plan_revert(found.root, found.patches(), view=view)
    data = None if plan.conflicts else view.read(path)
    if data is None or sha256(data) != digest:
        raise BadInput(
            f"no stock original of {escaped(path)}: the release's file is not the one {found.origin} records, "
            "and reverse-applying its patches does not give it back",
            hint=f"{hints.reinstall_vllm(found.vllm_version)} to get stock files",
        )
    return data
