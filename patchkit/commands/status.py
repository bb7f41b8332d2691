from __future__ import annotations

import click

from patchkit.commands import format_option, make_ui, target_options
from patchkit.errors import CHECK_FAILED, NO_PATCH_SET


@click.command()
@target_options
@format_option
def command(opts, quiet, verbose, fmt):
    """Where vLLM is, its version, the patch set chosen and each patch's state.

    Overall state: applied, not-applied, partial, upstream or unsupported.
    """
    from patchkit.inspection import PARTIAL, inspect
    from patchkit.library import UNSUPPORTED
    from patchkit.transaction import recover_pending
    from patchkit.resolve import resolve
    from patchkit.ui import status_json

    ui = make_ui(fmt, quiet, verbose)
    resolved = resolve(opts)
    recovered = recover_pending(resolved.target.root)
    if recovered:
        ui.warn(recovered)
    status = inspect(resolved)
    if ui.json_mode:
        ui.json(status_json(resolved, status))
    else:
        ui.status(resolved, status)
    if status.state == UNSUPPORTED:
        if not ui.json_mode:
            ui.error(resolved.selection.note or "unsupported vLLM version")
        raise SystemExit(NO_PATCH_SET)
    if status.state == PARTIAL or status.drifted:
        raise SystemExit(CHECK_FAILED)
