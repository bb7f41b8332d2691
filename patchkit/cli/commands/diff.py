from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import target_options
from patchkit.engine.resolve import require_patches, resolve
from patchkit.series.patchfile import decode

if TYPE_CHECKING:
    from patchkit.base.options import Options


@click.command()
@target_options(without={"adhoc", "verbose"})  # the library's series; nothing more to say
def command(opts: Options, quiet: bool, verbose: int) -> None:
    """Print the patch series for the target's vLLM version (highlighted in a terminal)."""
    ui = make_ui("text", quiet, verbose)
    resolved = resolve(opts)
    patches = require_patches(resolved)
    if not patches:
        ui.line(f"vLLM {resolved.vllm_version}: the set is upstream; there is no diff")
        return
    ui.diff("".join(decode(p.raw) for p in patches))  # each ends in a newline: parse_patch makes sure
