from __future__ import annotations

import click

from patchkit.commands import format_option, make_ui, target_options


@click.command()
@target_options
@format_option
def command(opts, quiet, verbose, fmt):
    """Run the checks on the patched files: as they are, or as `apply` would leave them.

    Exit 0 when the series applies (or is applied) and every check passes; 1 otherwise.
    """
    from patchkit.checks import run_checks
    from patchkit.errors import CHECK_FAILED
    from patchkit.inspection import check_context, inspect
    from patchkit.library import UPSTREAM
    from patchkit.transaction import recover_pending
    from patchkit.resolve import require_patches, resolve
    from patchkit.ui import plan_json, status_json

    ui = make_ui(fmt, quiet, verbose)
    resolved = resolve(opts)
    recovered = recover_pending(resolved.target.root)
    if recovered:
        ui.warn(recovered)
    require_patches(resolved)
    status = inspect(resolved)
    results = []
    if status.plan is not None and not status.plan.conflicts:
        results = run_checks(check_context(resolved, status.plan))
    failed = [r for r in results if r.failed]
    conflicts = status.plan.conflicts if status.plan else []
    ok = not failed and not conflicts and not status.drifted
    if ui.json_mode:
        ui.json({**status_json(resolved, status), "ok": ok,
                 "checked": "as-is" if status.state == "applied" else "as-planned",
                 "plan": plan_json(status.plan) if status.plan else [],
                 "checks": [r.to_json() for r in results]})
    else:
        ui.status(resolved, status)
        if status.state == UPSTREAM:
            ui.line("upstream: this vLLM release ships the change; nothing to verify against the set")
        elif results:
            if status.state != "applied":
                ui.line("checked as the tree would be after apply (nothing written)")
            ui.checks(results)
        ui.line("verify: ok" if ok else "verify: FAILED", style="green" if ok else "bold red")
    if not ok:
        raise SystemExit(CHECK_FAILED)
