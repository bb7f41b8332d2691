from __future__ import annotations

from pathlib import Path

import click

from patchkit import fetch
from patchkit.base import hints
from patchkit.base.errors import BadInput, NoPatchSet
from patchkit.base.options import Options
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import all_python_option, force_option, library_options, os_refuses, output_options
from patchkit.releases.files import files_for, lay_out_said, not_covered, replaced_said


@click.command()
@click.argument("version")
@click.option(
    "--dest",
    metavar="DIR",
    callback=os_refuses(BadInput, "--dest"),
    help="Also lay the files out under DIR (usable as --target DIR).",
)
@all_python_option("Fetch every vllm/**/*.py, not only the patched files.")
@force_option("Overwrite files in --dest DIR that hold other contents.")
@library_options
@output_options
def command(
    version: str,
    dest: str | None,
    all_python: bool,
    force: bool,
    library: str | None,
    set_name: str | None,
    quiet: bool,
    verbose: int,
) -> None:
    """Fetch the stock sources of vllm==VERSION from the package index pip is configured with.

    Only the needed files are read out of the remote wheel (HTTP range requests), each checked
    against the wheel's RECORD, and cached; a second fetch does no network I/O. With --dest, a file
    there that holds other contents is refused unless --force; a symlink there is always refused.
    """
    ui = make_ui("text", quiet, verbose)
    version = fetch.normalize_version(version)
    uncovered = None if all_python else not_covered(version, library, set_name)
    if uncovered is not None:  # nothing of it to fetch: no file of it is patched or checked
        more = f"; {uncovered.hint}" if uncovered.hint else ""
        raise NoPatchSet(
            f"nothing to fetch: {uncovered.message}{more}",
            hint=f"{hints.command('list', chosen=Options(library=library))} shows what each set covers; "
            f"{hints.command('fetch', version, '--all', *(['--dest', dest] if dest else []), chosen=Options(library=library))}"
            " fetches it anyway",
        )
    paths = files_for(version, library, set_name)
    with ui.activity(f"fetching vllm {version}") as say:
        tree = fetch.release_tree(version, paths, all_python=all_python, progress=say, warn=ui.warn, recheck_index=True)
    ui.line(f"vllm {version}: {tree}")
    if dest:
        # what this fetch asked for, not whatever earlier fetches left in the cache's tree
        laid, written, kept, resumed, replaced, saved = lay_out_said(
            tree, dest, None if all_python else paths, force=force, target=True
        )
        if saved is not None:
            ui.warn(replaced_said(Path(dest).resolve(), replaced, saved))
        if resumed is not None:  # what the next run found, said: a kill prints nothing itself
            of = f" of vllm {resumed.removesuffix(' --all')}" if resumed else ""
            narrower = resumed.endswith(" --all") and not all_python  # this fetch writes the sets' files only
            rest = hints.command("fetch", *resumed.split(), "--dest", dest) if narrower else ""
            done = (
                f"the files this fetch lays out are written now; {rest} writes the rest"
                if narrower
                else "its missing files are written now"
            )
            ui.warn(f"{dest} held a lay-out{of} cut short (killed, or the disk filled): {done}")
        # a second fetch writes nothing: "nothing laid out" read as a failure
        did = (
            f"laid out {len(written)} file(s) under {dest}"
            if written
            else f"{dest} holds these {len(laid)} file(s) already"
        )
        also = f"; kept {len(kept)} file(s) as patchkit patched them" if kept else ""
        ui.line(f"{did}{also} (use --target {dest})")
