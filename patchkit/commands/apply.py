from __future__ import annotations

import click

from patchkit.commands import fix_bytecode, format_option, make_ui, target_options


@click.command()
@target_options
@format_option
@click.option("--dry-run", is_flag=True, help="Show per file and hunk where each change lands; write nothing.")
@click.option("--no-import", is_flag=True, help="Do not import the patched modules after writing (probe check).")
@click.option(
    "--force", is_flag=True, help="Patch files that are not the release's stock files (integrity check against RECORD)."
)
def command(opts, quiet, verbose, fmt, dry_run, no_import, force):
    """Apply the patch series for the target's vLLM: all files or none, verified, recorded."""
    from patchkit.checks import run_checks
    from patchkit.errors import CheckFailed, Conflict, Drift
    from patchkit.inspection import check_context, drifted_files
    from patchkit.library import UPSTREAM
    from patchkit.plan import plan_apply
    from patchkit.resolve import require_patches, resolve
    from patchkit.state import read_state
    from patchkit.transaction import commit_changes, target_lock
    from patchkit.ui import plan_json

    ui = make_ui(fmt, quiet, verbose)
    resolved = resolve(opts)
    patches = require_patches(resolved)
    root = resolved.target.root
    if not ui.json_mode:
        ui.header(resolved)
    if resolved.selection.kind == UPSTREAM:
        _finish(ui, "upstream", f"vLLM {resolved.version.version} ships this change itself: nothing to patch")
        return

    with target_lock(root) as recovered:
        if recovered:
            ui.warn(recovered)
        drifted = drifted_files(resolved)
        if drifted:
            raise Drift(
                f"files edited after patchkit patched them: {', '.join(drifted)}",
                hint="revert (with --force to keep a copy of the edits) before applying again",
            )
        plan = plan_apply(root, patches)
        ui.plan(plan, dry_run=dry_run)
        if plan.conflicts:
            if ui.json_mode:
                ui.json({"result": "conflict", "plan": plan_json(plan)})
            raise Conflict(
                "the series does not apply; nothing was written:\n  "
                + "\n  ".join(s.mismatch.describe() for s in plan.conflicts)
            )
        changed = plan.changed_paths
        if not changed:
            # Nothing to write, but a fix of stale bytecode that an earlier apply could not finish
            # is repaired here (only stale files are touched).
            bytecode = [] if dry_run else fix_bytecode(ui, resolved.target, plan.touched_paths)
            _refuse_stale_bytecode(ui, plan, bytecode, "already applied")
            _finish(ui, "already-applied", "already applied: nothing to do", lambda: _details(plan, bytecode))
            return

        integrity = _stock_integrity(ui, resolved, plan, force)
        if dry_run:
            # Like `git apply --check`: where each hunk lands. `verify` also runs the checks.
            _finish(
                ui,
                "dry-run",
                f"dry run: {len(changed)} file(s) would change; nothing written "
                "(`patchkit verify` also runs the checks)",
                lambda: _details(plan, integrity),
            )
            return

        results = integrity + run_checks(check_context(resolved, plan, import_probe=not no_import))
        ui.checks(results)
        failed = [r for r in results if r.failed]
        if failed:
            if ui.json_mode:
                ui.json({"result": "check-failed", **_details(plan, results)})
            raise CheckFailed(
                "verification of the patched files failed; nothing was written:\n  "
                + "\n  ".join(r.describe() for r in failed)
            )
        changes = plan.changes
        state = read_state(root)
        entry = resolved.apply_record(changes, state.entry(resolved.set_name))
        commit_changes(root, changes, state.with_entry(entry))
        # Before the on-disk checks: the probe imports the patched modules.
        bytecode = fix_bytecode(ui, resolved.target, changes)
        try:
            on_disk = _verify_on_disk(resolved, plan, changes, state, import_probe=not no_import)
        except CheckFailed:
            fix_bytecode(ui, resolved.target, changes)  # the rollback rewrote the sources once more
            raise
        written_only = [r for r in on_disk if r not in results]  # what only the written files show: probe
        if written_only:
            ui.checks(written_only)
        results = integrity + on_disk + bytecode
    _refuse_stale_bytecode(ui, plan, results, f"applied {len(patches)} patch(es)")
    _finish(
        ui,
        "applied",
        f"applied {len(patches)} patch(es): {len(changes)} file(s) changed",
        lambda: _details(plan, results),
    )


def _verify_on_disk(resolved, plan, changes, previous_state, *, import_probe=True):
    """Re-run the checks on what landed (and import it); undo the transaction if they fail there."""
    from patchkit.checks import run_checks
    from patchkit.errors import CheckFailed
    from patchkit.inspection import check_context
    from patchkit.transaction import commit_changes

    root = resolved.target.root

    results = run_checks(check_context(resolved, plan, on_disk=True, import_probe=import_probe))
    failed = [r for r in results if r.failed]
    if failed:
        commit_changes(root, changes, previous_state, undo=True)
        raise CheckFailed(
            "verification after writing failed; the tree was rolled back:\n  "
            + "\n  ".join(r.describe() for r in failed)
        )
    return results


def _stock_integrity(ui, resolved, plan, force):
    """Refuse to patch files that are not the release's stock files (RECORD), unless --force."""
    from patchkit.checks import integrity
    from patchkit.inspection import check_context

    results = integrity.CHECK.run(check_context(resolved, plan))
    failed = [r for r in results if r.failed]
    if failed and not force:
        ui.checks(results)
        if ui.json_mode:
            ui.json({"result": "check-failed", **_details(plan, results)})
        raise integrity.refusal(failed, resolved.vllm_version)
    return integrity.forced(results)


def _refuse_stale_bytecode(ui, plan, results, done):
    from patchkit.checks import bytecode
    from patchkit.errors import CheckFailed

    stale = [r for r in results if r.check == bytecode.NAME and r.failed]
    if stale:
        if ui.json_mode:
            ui.json({"result": "bytecode-failed", **_details(plan, results)})
        raise CheckFailed(
            f"{done}, but compiled bytecode that shadows the change could not be fixed:\n  " + bytecode.failures(stale),
            hint="remove those .pyc files (Python then compiles the sources); "
            "`patchkit verify` reports any stale bytecode left",
        )


def _details(plan, results) -> dict:
    from patchkit.ui import plan_json

    return {"plan": plan_json(plan), "checks": [r.to_json() for r in results]}


def _finish(ui, result, message, details=None):
    """The last word: `details` (built only for JSON output) goes with the result."""
    if ui.json_mode:
        ui.json({"result": result, **(details() if details else {})})
    else:
        ui.line(message, style="green" if result in ("applied", "already-applied", "upstream") else None)
