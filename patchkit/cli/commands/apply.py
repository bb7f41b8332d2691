from __future__ import annotations

from typing import TYPE_CHECKING

import click

from patchkit.base.enums import Outcome
from patchkit.cli.commands import Shown, make_ui, resolve_telling
from patchkit.cli.commands.options import dry_run_option, force_option, format_option, no_import_option, target_options
from patchkit.cli.ui import UI, plan_json
from patchkit.engine.operations import ApplyResult, apply_series
from patchkit.engine.resolve import require_patches

if TYPE_CHECKING:
    from patchkit.base.options import Options


@click.command()
@target_options
@format_option
@dry_run_option("Show per file and hunk where each change lands; write nothing.")
@no_import_option("Do not import the patched modules after writing (probe check).")
@force_option("Patch files that are not the release's stock files (integrity check against RECORD).")
@click.option(
    "--guard/--no-guard",
    "guard_choice",
    default=None,
    help="Install the launch guard (a vLLM plugin refusing a tree that changed since apply), or not. "
    "Remembered: a later apply without either does as the last one was told (default: install).",
)
def command(
    opts: Options,
    quiet: bool,
    verbose: int,
    fmt: str,
    dry_run: bool,
    no_import: bool,
    force: bool,
    guard_choice: bool | None,
) -> ApplyResult:
    """Apply the patch series for the target's vLLM: all files or none, verified, recorded."""
    ui = make_ui(fmt, quiet, verbose)
    resolved = resolve_telling(ui, opts)
    require_patches(resolved)
    if not ui.json_mode:
        ui.header(resolved)
    shown = Shown(ui, dry_run=dry_run)
    result = apply_series(
        resolved,
        dry_run=dry_run,
        force=force,
        import_probe=not no_import,
        guard=guard_choice is not False,
        guard_choice=guard_choice,
        watch=shown,
    )
    _finish(ui, result)
    return result


def _finish(ui: UI, result: ApplyResult) -> None:
    """The last word (the steps were shown as they happened): the JSON document, or one line."""
    if ui.json_mode:
        plan = {"plan": plan_json(result.plan)} if result.plan is not None else {}
        checks = {"checks": [r.to_json() for r in result.checks]} if result.checks is not None else {}
        ui.json({"result": result.outcome, **plan, **checks})
    elif result.error is None:
        done = result.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED, Outcome.UPSTREAM)
        ui.line(result.message, style="green" if done else None)
