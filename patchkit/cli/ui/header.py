"""What a command says first of a target and a set: where vLLM is, its version, the set and its
series in words, and the notes (apart from reports, whose checks and findings a dry run of one set
never shows: it loads this module alone)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.store.state import adhoc_files, is_adhoc

if TYPE_CHECKING:  # pragma: no cover
    from packaging.specifiers import SpecifierSet

    from patchkit.cli.ui.screen import Screen
    from patchkit.engine.resolve import Resolved
    from patchkit.series.library import Location, Release


def show_header(ui: Screen, resolved: Resolved, said: set[str] | None = None, *, target: bool = True) -> None:
    """Where vLLM is and its version (`target`: a later set of the same tree says only its set),
    the set and its series in words, and the notes; `said`: the notes already said for another
    set of this command (said once), updated."""
    sel = resolved.selection
    if target:
        show_target(ui, resolved)
    if sel.patch_set is None and is_adhoc(sel.set_name):  # --patch files: by their names, not adhoc-<hex>
        ui.line(f"patch    {adhoc_files([p.name for p in sel.patches])}")
    else:
        ui.line(f"set      {sel.set_name}" + (f"  {series_words(sel.release)}" if sel.release else ""))
    show_notes(ui, resolved, said)


def show_target(ui: Screen, resolved: Resolved) -> None:
    version = resolved.version
    ui.line(f"vLLM     {resolved.target.package_dir}  (found by {resolved.target.found_by})")
    if version:
        ui.line(f"version  {version.version}  (from {_source_words(str(version.version), version.source)})")


def _source_words(version: str, source: str) -> str:
    """Where the version was read; a dist-info named by a long local version (a patched wheel's
    +patchkit… label) as "its dist-info's METADATA": the name again is wider than a terminal's line."""
    for name in (f"vllm-{version}.dist-info", f"vllm-{version.replace('-', '_')}.dist-info"):
        if "+" in version and source.lower().startswith(name.lower() + "/"):
            return f"its dist-info's {source[len(name) + 1 :]}"
    return source


def series_words(release: Release) -> str:
    """`series 0.13.0 (covers 0.13.0 to before 0.19.0)`, not `<0.19.0,>=0.13.0 [0.13.0]`:
    the release the series was made for, and the releases it is used for when that is more."""
    made = release.directory.name
    used = _range_words(release.versions)
    return f"series {made}" if used == made else f"series {made} (covers {used})"


def _range_words(versions: SpecifierSet) -> str:
    bounds = {spec.operator: spec.version for spec in versions}
    if set(bounds) == {"=="}:
        return bounds["=="]
    if set(bounds) == {">=", "<"}:
        return f"{bounds['>=']} to before {bounds['<']}"
    if set(bounds) == {">="}:
        return f"{bounds['>=']} and later"
    return str(versions)


def show_notes(ui: Screen, resolved: Resolved, said: set[str] | None) -> None:
    said = set() if said is None else said
    for note in resolved.notes:
        if note not in said:
            said.add(note)
            ui.note(note)


def show_library(ui: Screen, where: Location) -> None:
    """Which library root, and what chose it (--patches, PATCHKIT_LIBRARY or installed)."""
    ui.line(f"library  {where.path}  ({where.source})")
