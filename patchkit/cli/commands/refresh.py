from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.base.enums import Outcome
from patchkit.base.errors import Finished
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import dry_run_option, format_option, output_options
from patchkit.cli.ui.console import UI
from patchkit.maintainer.refresh import refresh_workspace
from patchkit.maintainer.states import SharedState
from patchkit.series import library
from patchkit.series.library import free_name, installed_copy_hint

if TYPE_CHECKING:
    from patchkit.maintainer.reports import RefreshReport


@click.command()
@click.argument("directory", required=False, metavar="[DIR]")
@click.option(
    "--new-patch",
    metavar="NAME",
    help="Record changes to files no patch touched in a new patch NNNN-NAME.patch "
    "(default: in the series' last patch).",
)
@dry_run_option("Show what would be written; write nothing.")
@format_option
@output_options
def command(
    directory: str | None, new_patch: str | None, dry_run: bool, fmt: str, quiet: bool, verbose: int
) -> Finished:
    """Write a workspace's changes back into the library as its release's diffs.

    DIR (default: the current directory or the workspace above it) is diffed against its stock
    commit, committed or not. Each patch keeps the files it touched and its DEP-3 header
    (Last-Update becomes today where the diff changed); the series file records the new sha256.
    Other releases sharing the series directory are checked against their own stock files.
    """
    ui = make_ui(fmt, quiet, verbose)
    report = refresh_workspace(directory, new_patch=new_patch, dry_run=dry_run, progress=ui.detail)
    broken = [c for c in report.shared if c.state == SharedState.CONFLICT]
    if ui.json_mode:
        ui.json({**asdict(report), "changed": report.changed})
    else:
        _show(ui, report)
    return Finished(Outcome.CONFLICT if broken else Outcome.OK)


def _installed(series_dir: Path) -> bool:
    """A series of the library a wheel installed inside the package (not a checkout's patches/)."""
    return series_dir.resolve().is_relative_to(library.PACKAGE_DIR / "_library")


def _show(ui: UI, report: RefreshReport) -> None:
    changed = report.changed or report.registered
    verb = ("would write" if report.dry_run else "wrote") if changed else "unchanged"
    ui.line(f"workspace  {report.directory}  (vllm {report.version})")
    ui.line(f"series     {report.series_dir}  [{verb}]")
    if changed and not report.dry_run and _installed(Path(report.series_dir)):
        # a new workspace on a copy: in a directory of its own (this one is bound to the installed library)
        again = ["workspace", report.version, free_name(f"vllm-{report.version}-workspace"), "--set", report.set_name]
        ui.warn(
            "that is the library installed with patchkit: every apply uses the edit from now on, and a "
            f"reinstall or upgrade of patchkit undoes it; {installed_copy_hint(again)}"
        )
    ui.table(
        ["patch", "state", "files"], ([p.name, p.state, ", ".join(p.files)] for p in report.patches), state_column=1
    )
    for note in report.notes:
        ui.note(note)
    if report.registered:
        ui.line("set.toml   added:\n" + report.registered.rstrip())
    for check in report.shared:
        message = f"vllm {check.version} shares this series: {check.state}" + (
            f": {check.detail}" if check.detail else ""
        )
        if check.state == SharedState.APPLIES:
            ui.line(message)
        else:
            ui.warn(message)
    if any(c.state == SharedState.CONFLICT for c in report.shared):
        ui.warn(
            "give those releases their own series: drop their [[releases]] entry from set.toml, then "
            f"`patchkit port --from {report.version} --to VERSION`"
        )
