from __future__ import annotations

import shlex
from dataclasses import asdict

import click

from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import all_python_option, format_option, one_set_options, output_options
from patchkit.maintainer.workspace import create_workspace


@click.command()
@click.argument("version")
@click.argument("directory", required=False, metavar="[DIR]")
@all_python_option()
@one_set_options
@format_option
@output_options
def command(
    version: str,
    directory: str | None,
    all_python: bool,
    library: str | None,
    set_name: str | None,
    fmt: str,
    quiet: bool,
    verbose: int,
) -> None:
    """Make DIR (default ./vllm-VERSION-workspace) a git repository to work on VERSION's series.

    Its first commit, "stock vllm VERSION" (tag `stock`), holds the release's stock files; the
    second, the series applied by patchkit's engine. Edit the files (commit or not), then
    `patchkit refresh DIR` writes the diffs back. The library installed with patchkit is refused
    (a reinstall undoes what refresh writes there): work on a copy, with --patches.
    """
    ui = make_ui(fmt, quiet, verbose)
    ui.knows({"version": version})
    report = create_workspace(
        version, directory, library=library, set_name=set_name, all_python=all_python, progress=ui.detail
    )
    if ui.json_mode:
        ui.json(asdict(report))
        return
    ui.line(f"workspace  {report.directory}")
    ui.line(f"set        {report.set_name}  vllm {report.version}  series {report.series_dir}")
    if report.shared_with:
        ui.note(
            f"vllm {', '.join(report.shared_with)} share(s) this series: refresh checks that it still applies there"
        )
    ui.line(f"commits    {report.stock_commit[:12]} stock vllm {report.version} ({report.files} file(s), tag stock)")
    applied = (
        f"{len(report.patches)} patch(es) applied: " + ", ".join(report.patches) if report.patches else "no patch yet"
    )
    ui.line(f"           {report.patched_commit[:12]} {applied}")
    first = [] if report.patches else ["--new-patch"]  # a new set's first series: NAME is the user's
    refresh = shlex.join(["patchkit", "refresh", report.directory, *first]) + (" NAME" if first else "")
    # one `command`, pasted whole
    ui.line(f"next       edit the files, then: `{refresh}`")
