from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from patchkit.base import signals
from patchkit.base.enums import Outcome
from patchkit.cli.commands import make_ui
from patchkit.cli.commands.options import dry_run_option, force_option, format_option, target_options
from patchkit.cli.ui.console import UI
from patchkit.cli.ui.header import show_header
from patchkit.cli.ui.json_views import resolved_json, target_json, version_json
from patchkit.cli.ui.steps import Shown
from patchkit.engine.operations import (
    RevertResult,
    covering_series,
    earlier_apply_chosen,
    nothing_to_undo,
    resolve_for_revert,
    revert_series,
)
from patchkit.engine.resolve import library_sets, several, tree_version
from patchkit.engine.transaction import never_locked
from patchkit.store.state import applied_on

if TYPE_CHECKING:
    from patchkit.base.options import Options


@click.command()
@target_options  # -v: each check on the restored files, in a table
@format_option
@force_option("Revert files edited after apply (a copy of each is kept).")
@dry_run_option("Say what would be restored; write nothing.")
def command(opts: Options, quiet: bool, verbose: int, fmt: str, force: bool, dry_run: bool) -> RevertResult:
    """Restore the stock files byte-for-byte.

    Uses the originals recorded at apply (checked by sha256); without a record, reverse-applies
    the series. Without --set/--patch, undoes every set the tree records; with them, that set only.
    """
    ui = make_ui(fmt, quiet, verbose)
    signals.reverting()  # an interrupt after its commit leaves the stock files: the hint is apply
    opts, earlier = earlier_apply_chosen(opts)
    if earlier is not None and not ui.json_mode:
        names = ", ".join(p["name"] for p in earlier.patches)
        ui.note(f"{names} was edited or moved since its apply of {applied_on(earlier)}: that apply is undone")
    sets = library_sets(opts)  # loaded once: whether there are several, then the one chosen
    target, resolved = resolve_for_revert(opts, sets)
    ui.knows(resolved_json(resolved) if resolved is not None else target_json(target))
    if resolved is None and several(opts, sets):  # one tree: its version at the top, as one set's revert says it
        ui.knows(version_json(tree_version(opts, target)))
    if resolved is not None and not ui.json_mode:
        show_header(ui, resolved)
    # without a record (.patchkit/ lost or emptied), what is recognisably applied is undone all the same
    series = covering_series(opts, target, sets) if resolved is None and several(opts, sets) else []
    # a tree patchkit ever locked goes on under the lock: a killed command's store is cleared there
    if (
        resolved is None
        and several(opts, sets)
        and not series
        and (dry_run or never_locked(target.root))
        and nothing_to_undo(target.root)
    ):
        result = RevertResult(Outcome.NOT_APPLIED, "nothing to revert: the tree records no apply of any set")
        _finish(ui, result)
        return result
    chosen = opts.set_name or opts.adhoc  # one set; without either, every set the tree records
    only = resolved.set_name if resolved is not None and chosen else opts.set_name
    result = revert_series(target, resolved, only, force=force, dry_run=dry_run, watch=Shown(ui), series=series)
    _finish(ui, result)
    return result


def _finish(ui: UI, result: RevertResult) -> None:
    """The last word (the steps were shown as they happened): the JSON document, or one line."""
    if ui.json_mode:
        ui.json({"result": result.outcome, "files": result.files, **_written_json(result)})
    elif result.error is None:
        ui.line(result.message, style="green")


def _written_json(result: RevertResult) -> dict[str, Any]:

    if result.outcome == Outcome.REVERTED:
        return {"saved": str(result.saved) if result.saved else None, "checks": [r.to_json() for r in result.checks]}
    if result.outcome == Outcome.DRY_RUN:
        return {"would_keep": result.kept}
    if result.outcome == Outcome.BYTECODE_FAILED:
        return {"checks": [r.to_json() for r in result.checks]}
    return {}
