from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from patchkit.base.errors import Conflict
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import format_option, one_set_options, output_options
from patchkit.cli.ui.console import UI
from patchkit.maintainer.port import PortRequest, port_set
from patchkit.maintainer.states import PortOutcome

if TYPE_CHECKING:
    from patchkit.maintainer.reports import FileMerge, PortReport


@click.command()
@click.option("--from", "from_version", required=True, metavar="V1", help="The release whose series is ported.")
@click.option("--to", "to_version", required=True, metavar="V2", help="The release to port it to.")
@click.option("--out", metavar="DIR", help="Write V2's series into DIR instead of the library (set.toml untouched).")
@click.option(
    "--workspace", metavar="DIR", help="Where to leave the workspace on conflicts (default ./vllm-V2-workspace)."
)
@one_set_options
@format_option
@output_options
def command(
    from_version: str,
    to_version: str,
    out: str | None,
    workspace: str | None,
    library: str | None,
    set_name: str | None,
    fmt: str,
    quiet: bool,
    verbose: int,
) -> None:
    """Carry the set from release V1 to V2 by a three-way merge per file (`git merge-file`).

    Base: V1 stock; ours: V1 patched; theirs: V2 stock. Clean: V2's series (same patches, same
    DEP-3 headers) goes into the library (a new directory and a [[releases]] entry) or --out.
    Conflicts: a workspace of V2 holds the merge with conflict markers; resolve them, then
    `patchkit refresh`. Already upstream in V2: nothing is written. Same stock files: V2's entry
    points at V1's directory.
    """
    ui = make_ui(fmt, quiet, verbose)
    ui.knows({"from_version": from_version, "to_version": to_version})
    request = PortRequest(from_version, to_version, library, set_name, out, workspace, progress=ui.detail)
    report = port_set(request)
    if ui.json_mode:
        ui.json(asdict(report))
    else:
        _show(ui, report)
    if report.outcome == PortOutcome.CONFLICTS:
        files = sorted({m.path for m in report.conflicts})
        raise Conflict(
            f"{len(files)} file(s) conflict porting {report.from_version} to {report.to_version}",
            hint=f"resolve the conflict markers in {report.workspace}, then `patchkit refresh {report.workspace}`",
        )


def _show(ui: UI, report: PortReport) -> None:
    ui.line(f"port       vllm {report.from_version} -> {report.to_version}: {report.outcome}")
    if report.merges:
        ui.table(
            ["file", "patch", "merge"], ([m.path, m.patch, _merge_state(m, report.to_version)] for m in report.merges)
        )
    if report.outcome in (PortOutcome.PORTED, PortOutcome.IDENTICAL) and report.patches:
        ui.table(
            ["patch", "state", "files"],
            ([p.name, _patch_state(p.state), ", ".join(p.files)] for p in report.patches),
        )
    if report.destination and report.outcome != PortOutcome.CONFLICTS:
        ui.line(f"series     {report.destination}")
    if report.registered:
        ui.line("set.toml   added:\n" + report.registered.rstrip())
    if report.workspace:
        ui.line(f"workspace  {report.workspace}")
    for note in report.notes:
        ui.note(note)


def _patch_state(state: str) -> str:
    """What became of a patch file: dropped, shared with the release it was ported from, or written."""
    return {"removed": "dropped (upstream)", "unchanged": "shared (not copied)"}.get(state, "written")


def _merge_state(merge: FileMerge, version: str) -> str:
    if merge.conflicts < 0:
        return f"missing in {version}"
    if merge.conflicts:
        return f"{merge.conflicts} conflict(s)"
    return f"clean (already in {version})" if merge.present else "clean"
