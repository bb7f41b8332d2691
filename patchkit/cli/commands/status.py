from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.base.enums import TreeState
from patchkit.cli.commands import make_ui, resolve_telling
from patchkit.cli.commands.options import format_option, target_options
from patchkit.cli.ui import status_json
from patchkit.cli.ui.reports import status_verdict
from patchkit.engine import inspection
from patchkit.engine.operations import refuse_unchangeable
from patchkit.engine.transaction import consistent_read
from patchkit.series.library import locate

if TYPE_CHECKING:
    from patchkit.base.options import Options


@click.command()
@target_options
@format_option
def command(opts: Options, quiet: bool, verbose: int, fmt: str) -> inspection.TreeStatus:
    """Where vLLM is, its version, the patch set chosen and each patch's state.

    Overall state: applied, not-applied, partial, upstream or unsupported. On an upstream release the
    set's static checks run on the stock files (vLLM is not imported; `verify` also import-probes);
    a failure there is an upstream regression (exit 1).
    """
    ui = make_ui(fmt, quiet, verbose)
    resolved = resolve_telling(ui, opts)
    where = None if opts.adhoc else locate(opts.library)  # --patch FILE: no library
    with consistent_read(resolved.target.root) as recovered:
        if recovered:
            ui.warn(recovered)
        status = inspection.inspect(resolved, check_upstream=True, import_probe=False)
        refuse_unchangeable(resolved)
    if ui.json_mode:
        ui.json(status_json(resolved, status, where))
    else:
        ui.status(resolved, status, where)
        if status.upstream_regression:  # the verdict names it; the failures, their fix
            ui.checks(status.checks, label="stock")
        elif status.checks:
            ui.line(f"checks   {sum(r.ok for r in status.checks)} passed on the stock files", style="green")
    if status.state == TreeState.UNSUPPORTED and not ui.json_mode:
        ui.error(resolved.selection.note or "unsupported vLLM version")
    elif not ui.json_mode:
        verdict, good = status_verdict(status)
        ui.verdict(verdict, ok=good)
    return status
