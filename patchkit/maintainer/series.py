"""The library's series as the maintainer tools change them: which one a release uses, that a new
one reproduces the workspace, writing it, and set.toml's [[releases]] entries."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.base.enums import StepState
from patchkit.base.errors import InternalError, NoPatchSet
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


def append_release(set_dir: Path, versions: str, dir: str, comment: str | None = None) -> str:
    """Append a [[releases]] entry to set.toml as text (its comments and layout stay as they are)."""
    manifest = set_dir / MANIFEST
    text = manifest.read_text(encoding="utf-8")
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
