from __future__ import annotations

import click

from patchkit.commands import fix_bytecode, format_option, make_ui, target_options


@click.command()
@target_options
@format_option
@click.option("--force", is_flag=True, help="Revert files edited after apply (a copy of each is kept).")
@click.option("--dry-run", is_flag=True, help="Say what would be restored; write nothing.")
def command(opts, quiet, verbose, fmt, force, dry_run):
    """Restore the stock files byte-for-byte.

    Uses the originals recorded at apply (checked by sha256); without a record, reverse-applies
    the series.
    """
    from patchkit.errors import Conflict, NoPatchSet
    from patchkit.plan import View, plan_revert, restore_recorded
    from patchkit.resolve import require_patches, resolve, resolve_target
    from patchkit.state import read_state
    from patchkit.transaction import commit_changes, target_lock

    ui = make_ui(fmt, quiet, verbose)
    target = resolve_target(opts)
    root = target.root
    try:
        resolved = resolve(opts, target=target)
        set_name, patches = resolved.set_name, require_patches(resolved)
        if not ui.json_mode:
            ui.header(resolved)
    except NoPatchSet:
        # A recorded apply can still be undone when the library no longer covers this version.
        resolved, set_name, patches = None, opts.set_name, []

    with target_lock(root) as recovered:
        if recovered:
            ui.warn(recovered)
        state = read_state(root)
        if set_name is None and len(state.entries) == 1:  # the one set this tree records
            set_name = state.entries[0].set_name
        entry = state.entry(set_name) if set_name else None
        if resolved is None and entry is None:
            raise NoPatchSet("no patch series for this vLLM version and no record of an apply to undo")
        view = View(root)
        saved = restore_recorded(view, entry, force=force) if entry else []
        recorded = {(p["name"], p["sha256"]) for p in entry.patches} if entry else set()
        # Patches the record covers are undone from the saved originals above; reverse-applying
        # them again could re-insert an insertion-only hunk. The rest (applied by hand) reverse.
        unrecorded = [p for p in patches if (p.name, p.sha256) not in recorded]
        plan = plan_revert(root, unrecorded, view=view)
        if plan.conflicts:
            raise Conflict(
                "cannot reverse the series; nothing was written:\n  "
                + "\n  ".join(s.mismatch.describe() for s in plan.conflicts)
            )
        changes = plan.changes
        if dry_run or not changes:
            _finish(
                ui,
                "dry-run" if dry_run else "not-applied",
                f"would restore {len(changes)} file(s)" if dry_run else "nothing to revert: the tree is stock",
                sorted(changes),
            )
            return
        kept = _keep_copies(root, saved) if saved else None
        commit_changes(root, changes, state.without(set_name))
        bytecode = fix_bytecode(ui, target, changes)
    if kept:
        ui.warn(f"your edits to {', '.join(saved)} were saved under {kept}")
    stale = [r for r in bytecode if r.failed]
    if stale:
        _refuse_stale_bytecode(ui, changes, bytecode, stale)
    _finish(
        ui,
        "reverted",
        f"reverted: {len(changes)} file(s) restored to stock",
        sorted(changes),
        saved=str(kept) if kept else None,
        checks=[r.to_json() for r in bytecode],
    )


def _refuse_stale_bytecode(ui, changes, results, stale):
    from patchkit.checks import bytecode
    from patchkit.errors import CheckFailed

    if ui.json_mode:
        ui.json({"result": "bytecode-failed", "files": sorted(changes), "checks": [r.to_json() for r in results]})
    raise CheckFailed(
        f"reverted {len(changes)} file(s), but compiled bytecode of the patched code could not "
        "be fixed:\n  " + bytecode.failures(stale),
        hint="remove those .pyc files (Python then compiles the sources)",
    )


def _keep_copies(root, paths):
    import shutil
    from datetime import datetime

    from patchkit.state import meta_dir

    where = meta_dir(root) / "saved" / datetime.now().strftime("%Y%m%dT%H%M%S")
    for path in paths:
        (where / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, where / path)
    return where


def _finish(ui, result, message, files, **extra):
    if ui.json_mode:
        ui.json({"result": result, "files": files, **extra})
    else:
        ui.line(message, style="green")
