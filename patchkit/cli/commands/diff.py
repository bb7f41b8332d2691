from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.base.enums import SelectionKind
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import target_options
from patchkit.cli.ui.console import UI
from patchkit.engine.resolve import (
    judged,
    library_sets,
    require_patches,
    resolve,
    resolve_sets,
    resolve_target,
    several,
)
from patchkit.series.patchfile import decode

if TYPE_CHECKING:
    from patchkit.base.options import Options
    from patchkit.series.library import PatchSetDef


@click.command()
@target_options(without={"adhoc", "verbose"})  # the library's series; nothing more to say
def command(opts: Options, quiet: bool, verbose: int) -> None:
    """Print the patch series for the target's vLLM version (highlighted in a terminal).

    A library of several sets: the series of every set that covers the version, in the order
    `apply` applies them."""
    ui = make_ui("text", quiet, verbose)
    sets = library_sets(opts)  # loaded once: whether there are several, then the one chosen
    if several(opts, sets):
        _diff_of_sets(ui, opts, sets)
        return
    resolved = resolve(opts, sets=sets)
    patches = require_patches(resolved)
    if not patches:
        ui.line(f"vLLM {resolved.vllm_version}: the set is upstream; there is no diff")
        return
    ui.diff("".join(decode(p.raw) for p in patches))  # each ends in a newline: parse_patch makes sure


def _diff_of_sets(ui: UI, opts: Options, sets: dict[str, PatchSetDef] | None) -> None:
    covering = judged(resolve_sets(opts, resolve_target(opts), sets=sets))
    series = [c.resolved for c in covering if c.resolved is not None and c.kind == SelectionKind.PATCH]
    if not series:
        first = covering[0].resolved
        assert first is not None  # judged: every set it keeps has a selection
        ui.line(f"vLLM {first.vllm_version}: every set is upstream; there is no diff")
        return
    ui.diff("".join(decode(p.raw) for resolved in series for p in resolved.patches))
