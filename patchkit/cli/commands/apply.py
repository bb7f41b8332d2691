from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from patchkit import engine
from patchkit.base.enums import Outcome, SelectionKind
from patchkit.cli.commands import make_ui, resolve_telling
from patchkit.cli.commands.options import dry_run_option, force_option, format_option, no_import_option, target_options
from patchkit.cli.ui.console import UI
from patchkit.cli.ui.header import show_header
from patchkit.cli.ui.json_views import plan_json, resolved_json, target_json, tree_version_json
from patchkit.cli.ui.steps import Shown
from patchkit.engine.operations import ApplyResult, apply_series
from patchkit.engine.resolve import (
    Chosen,
    library_sets,
    no_series,
    require_patches,
    resolve_sets,
    resolve_target,
    several,
    why_not,
)
from patchkit.store.state import read_state

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from packaging.version import Version

    from patchkit.base.options import Options
    from patchkit.engine.several import SetApplied, SetsApplied
    from patchkit.launch.relevance import LaunchNeeds
    from patchkit.series.library import PatchSetDef


@click.command()
@target_options(sets_repeatable=True)
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
) -> ApplyResult | SetsApplied:
    """Apply the patch series for the target's vLLM: all files or none, verified, recorded.

    Without --set, every set of the library that covers the version, in the library's order (each
    its own transaction and record: a failure keeps the sets before it, tries none after it)."""
    ui = make_ui(fmt, quiet, verbose)
    sets = library_sets(opts)  # loaded once: whether there are several, then the one chosen
    if several(opts, sets):
        return _apply_sets(ui, opts, sets, dry_run=dry_run, force=force, no_import=no_import, guard_choice=guard_choice)
    resolved = resolve_telling(ui, opts, sets=sets)
    require_patches(resolved)
    if not ui.json_mode:
        show_header(ui, resolved)
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


def _apply_sets(
    ui: UI,
    opts: Options,
    sets: dict[str, PatchSetDef] | None,
    *,
    dry_run: bool,
    force: bool,
    no_import: bool,
    guard_choice: bool | None,
) -> SetsApplied:
    """apply of every covering set (or those --set names): each shown as a single apply is, under its header."""
    target = resolve_target(opts)
    ui.knows(target_json(target))
    chosen = resolve_sets(opts, target, sets=sets)
    ui.knows(tree_version_json(chosen))
    engine.several.require_order(opts, chosen, sets)
    engine.several.refuse_no_series(chosen)
    if not ui.json_mode:
        for each in chosen:
            if each.resolved is None or each.kind == SelectionKind.UNSUPPORTED:
                ui.note(why_not(each))

    said: set[str] = set()  # a note every set's header has: once
    warned: set[str] = set()  # a warning about the whole tree, said once for every set

    def watch_for(each: Chosen) -> Shown:
        assert each.resolved is not None
        if not ui.json_mode:  # the tree once, then each set's own lines
            show_header(ui, each.resolved, said, target=each is chosen[0])
        return Shown(ui, dry_run=dry_run, said=warned)

    result = engine.several.apply_sets(
        chosen,
        watch_for=watch_for,
        dry_run=dry_run,
        force=force,
        import_probe=not no_import,
        guard=guard_choice is not False,
        guard_choice=guard_choice,
    )
    _finish_sets(ui, result)
    return result


def _finish_sets(ui: UI, result: SetsApplied) -> None:
    """A line per set, then the overall one; or the JSON document, a part per set."""
    if ui.json_mode:
        ui.json({"result": result.outcome, "sets": [_set_json(each) for each in result.sets]})
        return
    for each in result.sets:
        if each.result is not None and each.result.error is None:
            ui.line(f"{each.chosen.name}: {each.result.message}")
    if result.error is None:
        ui.line(result.message, style=None if result.launch_refused else "green")


def _set_json(each: SetApplied) -> dict[str, Any]:
    found = resolved_json(each.chosen.resolved) if each.chosen.resolved is not None else {"set": each.chosen.name}
    part: dict[str, Any] = {**found, "result": each.state}
    if each.result is not None:
        part |= _result_json(each.result)
    elif each.chosen.resolved is None or each.skipped != engine.several.NOT_TRIED:
        part["note"] = why_not(each.chosen)
    return part


def _result_json(result: ApplyResult) -> dict[str, Any]:
    plan = {"plan": plan_json(result.plan)} if result.plan is not None else {}
    checks = {"checks": [r.to_json() for r in result.checks]} if result.checks is not None else {}
    error = {"error": result.error.message} if result.error is not None else {}
    return {**plan, **checks, **error, **_guard_json(result)}


def _guard_json(result: ApplyResult) -> dict[str, Any]:
    """What the launch guard still refuses once the set is applied, and the fix, as status's `guard`."""
    if result.guard_refuses is None:
        return {}
    refuses, fix = result.guard_refuses
    return {"guard": {"refuses": refuses, "fix": fix}}


def _finish(ui: UI, result: ApplyResult) -> None:
    """The last word (the steps were shown as they happened): the JSON document, or one line."""
    if ui.json_mode:
        plan = {"plan": plan_json(result.plan)} if result.plan is not None else {}
        checks = {"checks": [r.to_json() for r in result.checks]} if result.checks is not None else {}
        ui.json({"result": result.outcome, **plan, **checks, **_guard_json(result)})
    elif result.error is None:
        done = (
            result.outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED, Outcome.UPSTREAM) and not result.launch_refused
        )
        ui.line(result.message, style="green" if done else None)


def _recorded(covering: list[Chosen]) -> set[str]:
    """The sets the tree's record names. The guard, on in the launch, refuses the tree for any of them
    (a vLLM upgrade under it: a stale record), needed or not: their apply is its fix, as before the
    launch said which sets it needs."""
    root = next((c.resolved.target.root for c in covering if c.resolved is not None), None)
    return {e.set_name for e in read_state(root).entries} if root is not None else set()


def apply_for_launch(
    ui: UI,
    chosen: Options,
    launch_needs: Callable[[Version | None, dict[str, PatchSetDef] | None, Path], LaunchNeeds],
) -> ApplyResult | SetsApplied | None:
    """`run --apply`: each covering set (or each --set) that the launch needs (`launch_needs`, of the
    tree's version and the library's sets: set.toml's [needed_by]) and that needs it applied as
    `patchkit apply` does; None when none does."""
    sets = library_sets(chosen)
    if several(chosen, sets):
        target = resolve_target(chosen)
        ui.knows(target_json(target))
        covering = resolve_sets(chosen, target, sets=sets)
        engine.several.require_order(chosen, covering, sets)
        root = target.root
    else:
        resolved = resolve_telling(ui, chosen, sets=sets)
        covering = [Chosen(resolved.set_name, resolved)]
        root = resolved.target.root
    many = len(covering) > 1
    version = next((c.resolved.vllm_version for c in covering if c.resolved is not None), None)
    needs = launch_needs(version, sets, root)
    if any(needs.needs(c.name) for c in no_series(covering)):  # no apply makes the tree safe for it:
        return None  # nothing written, and the preflight fails naming the set (tree-state)
    recorded = _recorded(covering) if needs.guard_runs else set()
    covering = [c for c in covering if needs.needs(c.name) or c.name in recorded]

    said: set[str] = set()
    warned: set[str] = set()  # a warning about the whole tree, said once for every set

    def watch_for(each: Chosen) -> Shown:
        if many and each.resolved is not None:  # as `patchkit apply` shows each set
            show_header(ui, each.resolved, said, target=each is covering[0])
        return Shown(ui, said=warned)

    result = engine.several.apply_needed(covering, watch_for=watch_for, several=many)
    if result is not None and result.error is None:
        for each in result.sets if isinstance(result, engine.several.SetsApplied) else []:
            if each.result is not None:
                ui.line(f"{each.chosen.name}: {each.result.message}")
        drifted = isinstance(result, engine.several.SetsApplied) and " changed after apply (" in result.message
        ui.line(result.message, style=None if drifted else "green")  # a drifted set: the preflight fails on it
    return result
