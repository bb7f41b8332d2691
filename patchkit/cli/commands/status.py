from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from patchkit.base import hints
from patchkit.base.enums import Outcome, TreeState
from patchkit.base.errors import NoPatchSet, few
from patchkit.cli.commands import make_ui, resolve_telling
from patchkit.cli.commands.options import format_option, target_options
from patchkit.cli.ui.console import UI
from patchkit.cli.ui.json_views import status_json, target_json, tree_version_json
from patchkit.cli.ui.reports import (
    checked_files,
    show_checks,
    show_sets_status,
    show_status,
    status_problems,
    status_verdict,
)
from patchkit.cli.ui.text import STATE_STYLES
from patchkit.engine import inspection
from patchkit.engine.guard import refusal_summary
from patchkit.engine.inspection import selection_of, undo_command
from patchkit.engine.operations import refuse_unchangeable, with_stock_judged
from patchkit.engine.resolve import NOT_COVERED, library_sets, resolve_sets, resolve_target, several, why_not
from patchkit.engine.several import SetsStatus, no_series_next_step, no_series_said, status_sets
from patchkit.engine.transaction import consistent_read
from patchkit.series.library import locate
from patchkit.store.state import Entry, moved_patches, read_state, shown_set

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.base.options import Options
    from patchkit.engine.resolve import Chosen
    from patchkit.series.library import Location, PatchSetDef
    from patchkit.tree.target import Target


@click.command()
@target_options
@format_option
def command(opts: Options, quiet: bool, verbose: int, fmt: str) -> inspection.TreeStatus | SetsStatus:
    """Where vLLM is, its version, the patch set chosen and each patch's state.

    Overall state: applied, not-applied, partial, upstream or unsupported. On an upstream release the
    set's static checks run on the stock files (vLLM is not imported; `verify` also import-probes);
    a failure there is an upstream regression (exit 1). A library of several sets: each set that
    covers the version, then one overall state (applied when every set the applies chose is; a set
    no apply chose is a note; exit code from the worst).
    """
    ui = make_ui(fmt, quiet, verbose)
    sets = library_sets(opts)  # loaded once: whether there are several, then the one chosen
    if several(opts, sets):
        return _status_of_sets(ui, opts, sets)
    resolved = resolve_telling(ui, opts, sets=sets)
    where = None if opts.adhoc else locate(opts.library)  # --patch FILE: no library
    with consistent_read(resolved.target.root) as recovered:
        if recovered:
            ui.warn(recovered)
        status = with_stock_judged(resolved, inspection.inspect(resolved, check_upstream=True, import_probe=False))
        refuse_unchangeable(resolved, status=status)
    if ui.json_mode:
        ui.json(status_json(resolved, status, where))
    else:
        show_status(ui, resolved, status, where)
        if status.upstream_regression:  # the verdict names it; the failures, their fix
            show_checks(ui, status.checks, label="stock", resolved=resolved)
        elif status.checks:
            ui.line(f"checks   {sum(r.ok for r in status.checks)} passed on {checked_files(resolved)}", style="green")
    if status.state == TreeState.UNSUPPORTED and not ui.json_mode:
        refused = (
            f"the launch guard refuses this tree ({few(status.guard)}): {status.guard_fix}" if status.guard else None
        )
        ui.error(resolved.selection.note or "unsupported vLLM version", hint=refused)
    elif not ui.json_mode:
        verdict, good = status_verdict(status)
        ui.verdict(verdict, ok=good)
    return status


def _status_of_sets(ui: UI, opts: Options, sets: dict[str, PatchSetDef] | None) -> SetsStatus:
    """Each covering set's status as `status --set` shows it, then the overall state."""
    target, chosen = _resolve_sets(ui, opts, sets)
    where = locate(opts.library)
    found, recovered = status_sets(chosen)
    if recovered:
        ui.warn(recovered)
    if ui.json_mode:
        ui.json(_sets_document(found, chosen, where))
        return found
    pairs = [(each.resolved, status) for each, status in zip(found.chosen, found.statuses, strict=True)]
    # the record's stale notes are the tree's: said once
    show_sets_status(ui, [(r, s if i == 0 else replace(s, stale=[])) for i, (r, s) in enumerate(pairs) if r], where)
    for each in chosen:
        if each not in found.chosen and each not in found.no_series:
            ui.note(why_not(each))
    for entry in found.adhoc:  # a --patch apply: no library set, but the tree's too
        ui.line(f"patch    {_adhoc_line(entry, target.root)}", style=STATE_STYLES.get(str(TreeState.APPLIED)))
    whole = _whole_sets(found)
    _sets_verdict(ui, found, whole)
    _sets_next_step(ui, found, whole)
    return found


def _resolve_sets(ui: UI, opts: Options, sets: dict[str, PatchSetDef] | None) -> tuple[Target, list[Chosen]]:
    """The target and each set of the library, as covering its vLLM or not; what is known told to the ui."""
    target = resolve_target(opts)
    ui.knows(target_json(target))
    try:
        chosen = resolve_sets(opts, target, sets=sets)
        ui.knows(tree_version_json(chosen))
    except NoPatchSet:  # no set covers this vLLM: unsupported, as status of one set says it (exit 3)
        ui.knows({"state": TreeState.UNSUPPORTED})
        raise
    return target, chosen


def _sets_document(found: SetsStatus, chosen: list[Chosen], where: Location) -> dict[str, Any]:
    """The JSON of status on several sets: each covering set's, the others', and the one fix."""
    parts = [status_json(c.resolved, s) for c, s in zip(found.chosen, found.statuses, strict=True) if c.resolved]
    others = [
        {"set": c.name, "state": c.kind or NOT_COVERED, "note": why_not(c)} for c in chosen if c not in found.chosen
    ]
    document = {"state": found.state, "library": where.to_json(), "sets": parts, "other_sets": others}
    document |= {"no_series": [c.name for c in found.no_series]} if found.no_series else {}
    hint = _partial_fix(found) or next((p["hint"] for p in parts if p["state"] == TreeState.CONFLICT), None)
    hint = no_series_next_step(chosen, found.no_series) if found.no_series and not hint else hint
    document |= {"hint": hint} if hint else {}
    return {**document, "not_chosen": list(found.unchosen)} if found.unchosen else document


def _sets_verdict(ui: UI, found: SetsStatus, whole: list[str]) -> None:
    """The last line: the overall state counted (`whole`: which sets are applied and which not,
    not `partial`), each set's problems, the sets no apply chose."""
    said = f"{found.state}: {_counted(found)}"
    if whole:
        said = _counted(found, not_applied=whole)
    ok = found.outcome == Outcome.OK
    problems = [
        f"{c.name}: {p}"
        for c, s in zip(found.chosen, found.statuses, strict=True)
        for p in status_problems(s, guard=False)
    ]
    refused = next((s for s in found.statuses if s.guard), None)
    problems += [refusal_summary(refused.guard, refused.guard_installed)] if refused else []
    problems += [no_series_said(found.no_series)] if found.no_series else []
    said += "".join(f"; {p}" for p in problems)
    said += f"; not chosen: {', '.join(found.unchosen)}" if found.unchosen else ""
    ui.verdict(f"status: {said}" if ok else f"status: FAILED: {said}", ok=ok)  # FAILED leads, as per set


def _sets_next_step(ui: UI, found: SetsStatus, whole: list[str]) -> None:
    """The note after the verdict: what applies the sets left out, or the rest."""
    if found.no_series:  # no apply makes the tree safe for them: what to do instead
        ui.note(no_series_next_step(found.chosen, found.no_series))
        return
    if found.unchosen:  # left out on purpose (`apply --set`, `run --apply`): what applies them
        named = [word for name in found.unchosen for word in ("--set", name)]
        them = "it" if len(found.unchosen) == 1 else "them"
        ui.note(f"{_why_unchosen(found)}; to apply {them}: {hints.command('apply', *named)}")
    checks_failed = any(s.outcome == Outcome.CHECK_FAILED for s in found.statuses)
    if whole and not checks_failed:
        # status takes one --set: a command per set, each runs
        applied = found.applied()
        used = ", ".join(hints.command("status", "--set", name) for name in applied)
        ui.note(f"{hints.command('apply')} applies the rest; if your launches use only {', '.join(applied)}: {used}")
    elif found.state == TreeState.PARTIAL and not checks_failed:
        ui.note(f"{hints.command('apply')} applies the rest; `--set NAME` judges only the sets you use")
    elif found.state == TreeState.NOT_APPLIED and found.outcome == Outcome.OK and not found.unchosen:
        # a stock tree: the next step
        ui.note(f"none is applied: {hints.command('apply')} applies {'it' if len(_sets_in(found)) == 1 else 'them'}")


def _sets_in(found: SetsStatus, state: TreeState | None = None) -> list[str]:
    """The names of the sets in `state` (None: those with something to apply, not upstream)."""
    pairs = zip(found.chosen, found.statuses, strict=True)
    return [c.name for c, s in pairs if (s.state == state if state else s.state != TreeState.UPSTREAM)]


def _counted(found: SetsStatus, *, not_applied: list[str] | None = None) -> str:
    """ "1 of 1 set(s) applied (a), 2 upstream (b, c)": a set vLLM ships (upstream) has nothing to
    apply, so it is counted as such, not as one missing; a set applied in part is counted apart."""
    applied, upstream, judged = found.applied(), _sets_in(found, TreeState.UPSTREAM), len(_sets_in(found))
    if not judged:
        return f"all {len(upstream)} set(s) upstream (this vLLM ships them: nothing to apply)"
    said = f"{len(applied)} of {judged} set(s) applied" + (f" ({', '.join(applied)})" if applied else "")
    partly = _sets_in(found, TreeState.PARTIAL)  # a set with some of its patches applied: not "0 of N" alone
    said += f", {len(partly)} in part ({', '.join(partly)})" if partly else ""
    unrecorded = _sets_in(found, TreeState.UNRECORDED)  # the change in its files, no apply recorded
    said += f", {len(unrecorded)} in the files, not recorded ({', '.join(unrecorded)})" if unrecorded else ""
    said += f", not {', '.join(not_applied)}" if not_applied else ""
    return said + (f"; {len(upstream)} upstream ({', '.join(upstream)})" if upstream else "")


def _adhoc_line(entry: Entry, root: Path) -> str:
    """A --patch apply the record holds, by its patch files, with the commands that judge and undo it;
    a patch file no longer where it was applied from: the revert that needs none."""
    chosen = selection_of(entry)
    files = f"{len(entry.files)} file(s)"
    moved = moved_patches(entry)
    if moved:
        undo = undo_command(entry, len(read_state(root).entries), root)
        return f"{shown_set(entry).removeprefix('the ')} recorded ({files}), {', '.join(moved)} moved since: {undo} undoes it"
    status, revert = hints.command("status", chosen=chosen), hints.command("revert", chosen=chosen)
    return f"{shown_set(entry).removeprefix('the ')} recorded ({files}): {status} judges it, {revert} undoes it"


def _partial_fix(found: SetsStatus) -> str | None:
    """A partial tree's one fix, as the text's note names it: apply applies the rest (None where a
    set's own failure, or the guard's refusal, names its fix)."""
    if found.state != TreeState.PARTIAL or found.unchosen:
        return None
    if any(s.outcome == Outcome.CHECK_FAILED or s.guard or any(p.problem for p in s.patches) for s in found.statuses):
        return None
    return f"{hints.command('apply')} applies the rest"


def _why_unchosen(found: SetsStatus) -> str:
    """The sets not chosen, each as the record tells it: never chosen, or taken out by `revert --set`."""
    reverted = [name for name in found.unchosen if name in found.reverted]
    never = [name for name in found.unchosen if name not in found.reverted]
    said = [f"no apply chose {', '.join(never)}"] if never else []
    return "; ".join([*said, *([f"{', '.join(reverted)} reverted by `revert --set`"] if reverted else [])])


def _whole_sets(found: SetsStatus) -> list[str]:
    """The sets not applied, on a tree where each set is applied or not, whole (a `partial` state
    of sets side by side, as `run --apply` leaves it: only the sets a launch needs); else none."""
    states = [s.state for s in found.statuses]
    if found.state != TreeState.PARTIAL or TreeState.PARTIAL in states or TreeState.APPLIED not in states:
        return []
    return [c.name for c, s in zip(found.chosen, found.statuses, strict=True) if s.state == TreeState.NOT_APPLIED]
