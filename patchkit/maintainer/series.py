"""The library's series as the maintainer tools change them: which one a release uses, that a new
one reproduces the workspace, writing it, and set.toml's [[releases]] entries."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.base.enums import StepState
from patchkit.base.errors import BadInput, InternalError, NoPatchSet
from patchkit.base.fsutil import atomic_write
from patchkit.maintainer.reports import PatchOutcome
from patchkit.maintainer.states import PatchChange
from patchkit.maintainer.stock import Contents
from patchkit.series.library import (
    MANIFEST,
    PATCH,
    SERIES,
    UPSTREAM,
    PatchSetDef,
    Release,
    Selection,
    load_set,
    select,
    write_series,
)
from patchkit.series.patchfile import Patch, encode
from patchkit.series.plan import PatchStep, View, plan_apply
from patchkit.tree.version import in_range


def series_for(patch_set: PatchSetDef, version: Version) -> Selection:
    """The series a workspace starts from: the library's, or none yet (a new set's first directory,
    its `series` file empty: `refresh --new-patch NAME` writes the first patch)."""
    first = next((r for r in patch_set.releases if r.covers(version)), None)
    upstream = patch_set.upstream is not None and in_range(patch_set.upstream, version)
    if first is not None and not upstream and (first.directory / SERIES).is_file() and not first.series():
        return Selection(patch_set.name, PATCH, version, [], first, None, patch_set)
    selection = select(patch_set, version)
    if selection.kind == UPSTREAM:
        raise NoPatchSet(f"the set {patch_set.name!r} is upstream in vLLM {version}: there is no series to work on")
    if selection.kind != PATCH:
        raise NoPatchSet(selection.note or f"the set {patch_set.name!r} has no series for vLLM {version}")
    return selection


def series_directory(selection: Selection) -> Path:
    """The directory of a series the library has (a PATCH selection always names its release)."""
    assert selection.release is not None, selection
    return selection.release.directory


def why_not_applied(step: PatchStep) -> str:
    """What stops a patch step from applying, for messages."""
    return step.mismatch.describe() if step.mismatch else step.state


def check_reproduces(patches: list[Patch], stock: Contents, work: Contents) -> None:
    """The new series, applied to the stock contents, must give the workspace's contents exactly."""
    with tempfile.TemporaryDirectory() as empty:
        plan = plan_apply(Path(empty), patches, view=View.holding(Path(empty), stock))
        wrong = [s.patch.name for s in plan.steps if s.state != StepState.WILL_CHANGE]
        wrong += [p for p in work if plan.content(p) != work[p]]
    if wrong:
        raise InternalError(
            f"the refreshed series does not reproduce the workspace ({', '.join(wrong)}); "
            "this is a patchkit bug: nothing was written"
        )


def write_series_files(series_dir: Path, texts: dict[str, str], outcomes: list[PatchOutcome]) -> None:
    series_dir.mkdir(parents=True, exist_ok=True)
    for outcome in outcomes:
        path = series_dir / outcome.name
        if outcome.state == PatchChange.REMOVED:
            if path.exists():
                path.unlink()
        elif outcome.state != PatchChange.UNCHANGED:
            atomic_write(path, encode(texts[outcome.name]))  # replaces a symlink, never writes through it
    write_series(series_dir, [o.name for o in outcomes if o.state != PatchChange.REMOVED])


def register_release(set_dir: Path, version: Version, dir: str, comment: str | None = None) -> str:
    """set.toml's entry for `version`'s new series `dir`: `==version` appended; or, where an entry
    open above `version` covers it (the pending set's `>=0.23.0`), that range split there: the old
    entry ends before `version`, the new one takes it on (`>=version`, and the old upper bound). ""
    when the entry covering `version` already names `dir`."""
    covering = next((r for r in load_set(set_dir).releases if r.covers(version)), None)
    if covering is None:
        return append_release(set_dir, f"=={version}", dir, comment)
    if covering.directory.resolve() == (set_dir / dir).resolve():
        return ""
    upper = open_above(covering)
    if upper is None:  # said by the overlap refusal, naming both entries
        return append_release(set_dir, f"=={version}", dir, comment)
    text = _with_range(set_dir, covering, f"{covering.said()},<{version}")
    entry = append_release(set_dir, ",".join([f">={version}", *upper]), dir, comment, text=text)
    return f"{entry}(and the entry for {covering.directory.name} now ends before {version})\n"


def open_above(release: Release) -> list[str] | None:
    """The upper bounds of an entry made of bounds only (`>=0.23.0`: none; `>=0.23.0,<0.40.0`:
    `<0.40.0`), which a later release's entry can take over; None: another kind of range."""
    clauses = list(release.versions)
    if any(c.operator not in (">=", ">", "<", "<=") for c in clauses):
        return None
    return [str(c) for c in clauses if c.operator in ("<", "<=")]


_DIR = re.compile(r"""^\s*dir\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_VERSIONS = re.compile(r"""^(\s*versions\s*=\s*)(["'])([^"']*)\2""", re.MULTILINE)


def _with_range(set_dir: Path, release: Release, versions: str) -> str:
    """set.toml's text with `release`'s range rewritten (the one [[releases]] table naming its
    directory, found as text: comments and layout stay); refused where it cannot be found once."""
    manifest = set_dir / MANIFEST
    text = manifest.read_text(encoding="utf-8")
    tables = re.split(r"(?m)^(?=\s*\[\[releases\]\])", text)
    mine = [
        i
        for i, table in enumerate(tables)
        if (found := _DIR.search(table)) and (set_dir / found[1]).resolve() == release.directory.resolve()
    ]
    ranges = _VERSIONS.findall(tables[mine[0]]) if len(mine) == 1 else []
    if len(ranges) != 1:
        raise BadInput(
            f"{manifest}: cannot find the one [[releases]] entry of {release.directory.name} to narrow",
            hint=f"write its versions as {versions!r} by hand, then run the command again",
        )
    tables[mine[0]] = _VERSIONS.sub(lambda m: f"{m[1]}{m[2]}{versions}{m[2]}", tables[mine[0]], count=1)
    return "".join(tables)


def append_release(set_dir: Path, versions: str, dir: str, comment: str | None = None, *, text: str = "") -> str:
    """Append a [[releases]] entry to set.toml as text (its comments and layout stay as they are),
    to `text` when given (set.toml as another change leaves it: written together)."""
    manifest = set_dir / MANIFEST
    text = text or manifest.read_text(encoding="utf-8")
    line = f'versions = "{versions}"' + (f"      # {comment}" if comment else "")
    entry = f'[[releases]]\n{line}\ndir = "{dir}"\n'
    new_text = text + ("" if text.endswith("\n") else "\n") + "\n" + entry
    with tempfile.TemporaryDirectory() as scratch:  # still readable, judged before anything is written
        shutil.copytree(set_dir, Path(scratch) / set_dir.name, symlinks=True)
        (Path(scratch) / set_dir.name / MANIFEST).write_text(new_text, encoding="utf-8")
        load_set(Path(scratch) / set_dir.name)
    atomic_write(manifest, new_text.encode())  # a new file in place: never written through a symlink
    return entry


def shared_releases(patch_set: PatchSetDef, directory: Path, version: Version) -> list[str]:
    """The other [[releases]] entries using the same series directory."""
    return [
        str(pinned_version(r.versions) or r.versions)
        for r in patch_set.releases
        if r.directory.resolve() == directory.resolve() and not r.covers(version)
    ]


def pinned_version(specifier: SpecifierSet) -> Version | None:
    specs = list(specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return Version(specs[0].version)
    return None
