from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from patchkit.base import hints
from patchkit.base.enums import Outcome
from patchkit.base.errors import BadInput, Finished
from patchkit.base.options import Options
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import format_option, patches
from patchkit.cli.commands.options import quiet as quiet_option
from patchkit.cli.ui.header import show_library
from patchkit.cli.ui.matrix import LibraryPatchState, from_library
from patchkit.series.library import PatchSetDef, load_library, locate, refuse_unordered
from patchkit.series.patchfile import read_patch

if TYPE_CHECKING:
    from pathlib import Path


@click.command()
@patches
@format_option
@quiet_option
def command(library: str | None, fmt: str, quiet: bool) -> Finished:
    """The library: its sets, the releases each covers, each patch's description."""
    ui = make_ui(fmt, quiet)
    where = locate(library)
    ui.knows({"library": where.to_json()})
    sets = load_library(where.path)
    data = [_describe(s) for s in sets.values()]
    refuse_unordered(where.path, sets, {s["name"]: _files_changed(s) for s in data})
    damaged = any(p["state"] == LibraryPatchState.DAMAGED for s in data for r in s["releases"] for p in r["patches"])
    finished = Finished(Outcome.CHECK_FAILED if damaged else Outcome.OK)
    if ui.json_mode:
        ui.json({"library": where.to_json(), "sets": data})
        return finished
    show_library(ui, where)
    for s in data:
        ui.line(f"set      {s['name']}: {s['description']}", style="bold")
        upstream = f"vLLM has the change from {s['upstream']}" if s["upstream"] else "not in vLLM yet"
        ui.line(f"         supported {s['supported'] or 'any'}; {upstream}")
        if s["pending_fix"]:  # its own line: a URL is copied whole
            ui.line(f"         upstream fix pending: {s['pending_fix']}")
        ui.table(["patch", "state", "description"], _patches_once(s), state_column=1)
    matrix = from_library(data)
    # a cell says what the library holds for a release, never that a tree here is patched
    ui.line(
        "a cell is what the library holds for that release (list applies nothing): applied = a series of "
        f"the set patches it; upstream = vLLM has the change; - = the set does not cover it; failed = a "
        f"damaged patch. {_verify_all(library)} checks each"
    )
    ui.table(
        matrix.columns(),
        matrix.rows(),
        title="releases by set, as the library declares them",
        state_column=1 if len(matrix.sets) == 1 else None,
    )
    return finished


def _files_changed(described: dict[str, Any]) -> set[str]:
    """Every path a set's series change, in any release."""
    return {path for r in described["releases"] for p in r["patches"] for path in p["files"]}


def _verify_all(library: str | None) -> str:
    """`patchkit verify --all` on the library listed (--patches when one was given)."""
    return hints.command("verify", "--all", chosen=Options(library=library))


def _patches_once(described: dict[str, Any]) -> list[list[str]]:
    """Each patch name of a set once (its releases' copies share it), its worst state: a damaged
    copy is shown with what is wrong with it."""
    rows: dict[str, list[str]] = {}
    for release in described["releases"]:
        for p in release["patches"]:
            row = [p["name"], p["state"], p["problem"] or p["description"]]
            if p["name"] not in rows or p["state"] != LibraryPatchState.OK:
                rows[p["name"]] = (
                    row if p["state"] == LibraryPatchState.OK else [*row[:2], f"{release['dir']}: {row[2]}"]
                )
    return [rows[name] for name in sorted(rows)]


def _describe(patch_set: PatchSetDef) -> dict[str, Any]:
    releases = []
    for release in patch_set.releases:
        releases.append(
            {
                "versions": str(release.versions),
                "dir": release.directory.name,
                "patches": [
                    _patch_entry(release.directory / name, digest, patch_set.roots) for name, digest in release.series()
                ],
            }
        )
    return {
        "name": patch_set.name,
        "description": patch_set.description,
        "supported": str(patch_set.supported) if patch_set.supported else None,
        "upstream": str(patch_set.upstream) if patch_set.upstream else None,
        "pending_fix": patch_set.pending_fix,
        "releases": releases,
    }


def _patch_entry(path: Path, digest: str | None, roots: tuple[str, ...]) -> dict[str, Any]:
    """A patch as `list` shows it; a damaged one is reported, not fatal."""
    try:
        patch = read_patch(path, roots)
    except BadInput as exc:
        return {
            "name": path.name,
            "description": "",
            "sha256": None,
            "files": [],
            "state": LibraryPatchState.DAMAGED,
            "problem": exc.message,
        }
    if digest and patch.sha256 != digest:
        return {
            "name": patch.name,
            "description": patch.description,
            "sha256": patch.sha256,
            "files": [f.path for f in patch.files],
            "state": LibraryPatchState.DAMAGED,
            "problem": "sha256 differs from the one recorded in the series (corrupted or edited)",
        }
    return {
        "name": patch.name,
        "description": patch.description,
        "sha256": patch.sha256,
        "files": [f.path for f in patch.files],
        "state": LibraryPatchState.OK if digest else LibraryPatchState.UNRECORDED,
        "problem": None,
    }
