from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from patchkit.base import hints
from patchkit.base.enums import OutputFormat, TreeState
from patchkit.base.errors import TargetError
from patchkit.cli.commands import make_ui, resolve_telling
from patchkit.cli.commands.options import format_option, no_import_option, target_options
from patchkit.cli.main import INVOKED
from patchkit.cli.ui.console import UI
from patchkit.cli.ui.findings import Failure, fix_once
from patchkit.cli.ui.json_views import target_json
from patchkit.cli.ui.junit import JUnitCase, junit
from patchkit.cli.ui.run import write_junit
from patchkit.engine.inspection import inspect, overall_state
from patchkit.engine.resolve import judged, library_sets, no_series, resolve_sets, resolve_target, several
from patchkit.launch.command import LaunchCommand, frame, read
from patchkit.launch.findings import PASS, Finding
from patchkit.launch.preflight import (
    TREE,
    PreflightResult,
    another_vllm,
    default_options,
    in_fix_order,
    launch_target_finding,
    left_out,
    needs_of,
    one_apply,
    preflight,
    runs_python_vllm,
    tree_finding,
    vllm_validation,
)
from patchkit.launch.quant_match import decided_by_vllm
from patchkit.launch.relevance import LaunchNeeds, unused_parser_note
from patchkit.launch.shortcut import recorded_state, recorded_status
from patchkit.store.journal import settled_record

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from pathlib import Path

    from patchkit.base.options import Options
    from patchkit.engine.inspection import TreeStatus
    from patchkit.engine.resolve import Resolved
    from patchkit.series.library import PatchSetDef
    from patchkit.store.state import State
    from patchkit.tree.target import Target

LAUNCH_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}
# why `run` asks vLLM nothing (it has no --no-import: it never imports vLLM before the launch does)
RUN = "run checks the launch statically (preflight asks vLLM)"
launch_argument = click.argument("launch", nargs=-1, type=click.UNPROCESSED, required=True, metavar="-- COMMAND...")


def launch_words(launch: tuple[str, ...]) -> list[str]:
    """The launch's words. A first word that is an option is one this command does not take (no
    program starts with `-`), said as click says any unknown option, not as `not a vLLM launch`."""
    if launch and launch[0].startswith("-"):
        raise click.NoSuchOption(launch[0].partition("=")[0], ctx=click.get_current_context())
    return list(launch)


def framed(launch: tuple[str, ...]) -> LaunchCommand:
    """The launch framed (launch.command.frame), knowing the user's own patchkit command: a hint
    that names it again (a wrapper's: `numactl -N 0 patchkit run --apply -- ...`) keeps each option."""
    ctx = click.get_current_context()
    name, _command, args = ctx.meta.get(INVOKED, (None, None, []))
    root = ctx.find_root().params  # `patchkit -q run ...`: the group's own -q and -v
    before = ["-q"] * bool(root.get("quiet")) + ["-v"] * int(root.get("verbose") or 0)
    given = list(args[: len(args) - len(launch)]) if launch and list(args[-len(launch) :]) == list(launch) else None
    own = (str(name), ["patchkit", *before, str(name), *given]) if name and given is not None else None
    return frame(launch_words(launch), invoked=own)


@click.command(context_settings=LAUNCH_SETTINGS)
@target_options
@format_option(formats=(OutputFormat.TEXT, OutputFormat.JSON, OutputFormat.JUNIT))
@no_import_option("Ask vLLM nothing in the target's interpreter (its engine-config validation, supports_eagle3()).")
@launch_argument
def command(
    opts: Options, quiet: bool, verbose: int, fmt: str, no_import: bool, launch: tuple[str, ...]
) -> PreflightResult:
    """Check a vLLM launch command before anything loads: every fault in one run.

    COMMAND is `vllm serve MODEL [args]` or `python -m vllm.entrypoints.openai.api_server --model
    MODEL [args]`, either behind `env VAR=...`. What vLLM reads of the models (config.json, a local
    model's weight file heads, generation_config.json, LoRA adapters: local directories or the Hugging
    Face cache, never downloaded) is held against the installed vLLM: the tree's state
    and the checks the patch set declares (asking vLLM itself where they can), then vLLM's own
    create_engine_config(), each in the target's interpreter (--no-import skips both). Exit 0: the launch passes; 1: a finding failed; 2: the
    command cannot be read; 4: a model or the target is missing.
    """
    ui = make_ui(OutputFormat.JSON if fmt == OutputFormat.JSON else OutputFormat.TEXT, quiet, verbose)
    launch_command = framed(launch)
    # a live line while vLLM is asked (its import in the target's interpreter can take minutes);
    # drawn only for a person (ui.live: text, both streams a terminal, not -q)
    working = (
        nullcontext()
        if no_import or fmt != OutputFormat.TEXT
        else ui.activity("checking the launch (asking vLLM: its import may take minutes)")
    )
    with working:
        result = run_preflight(ui, opts, launch_command, no_import=no_import)
    show(ui, result, fmt)
    return result


def run_preflight(
    ui: UI, opts: Options, launch_command: LaunchCommand, *, no_import: bool, shortcut: bool = False
) -> PreflightResult:
    """Target resolution (default: the command's own interpreter), the command read as that vLLM's
    parser reads it, then the findings (`shortcut`: `run`'s fast path on an applied tree,
    patchkit/launch/shortcut.py)."""
    chosen = default_options(opts, launch_command)
    # no --python was given when the tree is the command's own: its findings must not name one
    found_by = f"the command's interpreter {chosen.python}" if chosen is not opts else None
    with hints.selected(chosen):  # its hints name the tree checked: the launch's own, by default
        return _preflight(ui, chosen, launch_command, no_import=no_import, shortcut=shortcut, found_by=found_by)


def _preflight(
    ui: UI, chosen: Options, launch_command: LaunchCommand, *, no_import: bool, shortcut: bool, found_by: str | None
) -> PreflightResult:
    sets = library_sets(chosen)  # loaded once: whether there are several, then the one chosen
    if several(chosen, sets):
        return _preflight_of_sets(
            ui, chosen, launch_command, sets, no_import=no_import, shortcut=shortcut, found_by=found_by
        )
    resolved = resolve_telling(ui, chosen, found_by=found_by, sets=sets)
    another = another_vllm(resolved.target)  # told once: the note, each preflight, vLLM's validation
    _whose_vllm(ui, resolved.target, another, no_import)
    launch_command = read(launch_command, resolved.vllm_version)
    needs = needs_of(chosen, sets, launch_command, resolved.vllm_version, resolved.target.root)
    needs = replace(needs, judged=frozenset([resolved.set_name]))
    recorded = recorded_state(resolved.target.root) if shortcut else None
    result = _set_findings(
        ui, resolved, launch_command, needs, no_import=no_import, shortcut=shortcut, recorded=recorded, another=another
    )
    # preflight takes one --set, run several (shortcut: run's own preflight)
    left = left_out(needs, resolved.target.root, resolved.vllm_version, one_set=not shortcut, recorded=recorded)
    result.findings += [left] if left is not None else []
    result.findings += _launched_vllm(chosen, sets, resolved.target, launch_command, needs, another)
    names = [resolved.set_name]
    return _launch_findings(resolved, launch_command, result, names, no_import=no_import, another=another)


def _launched_vllm(
    chosen: Options,
    sets: dict[str, PatchSetDef] | None,
    target: Target,
    launch_command: LaunchCommand,
    needs: LaunchNeeds,
    another: str,
) -> list[Finding]:
    """--target DIR --python P where the launch runs P's own vLLM, not DIR's: that vLLM's state for
    each set the launch needs, as `status --python P` reads it (not DIR's: "ok" for a launch of an
    unpatched vLLM). `another`: another_vllm() of the tree."""
    if not runs_python_vllm(target, launch_command, another):
        return []
    own = replace(chosen, target_dir=None)  # --python alone: the vLLM the launch imports
    with hints.selected(own):  # its fixes name --python, not DIR
        launched = resolve_target(own)
        found: list[Finding] = []
        names: list[str] = []
        every = resolve_sets(own, launched, sets=sets)
        for chosen_set in [c for c in every if c in judged(every) or c in no_series(every)]:
            resolved = chosen_set.resolved or chosen_set.gap  # a gap: its tree-state fails (no series)
            if resolved is None or not needs.needs(resolved.set_name):
                continue
            names.append(resolved.set_name)
            finding = tree_finding(resolved, _static_status(resolved))
            where = f"the vLLM the launch runs ({launched.package_dir}, --python's, not --target's)"
            found += [] if finding.ok else [replace(finding, message=f"{where}: {finding.message}")]
        return one_apply(found, names)


def _static_status(resolved: Resolved) -> TreeStatus:
    with _consistent_read(resolved.target.root):
        return inspect(resolved, check_upstream=False, import_probe=False)


def _consistent_read(root: Path) -> AbstractContextManager[str | None]:
    # lazy: `run`'s fast path (a recorded status) takes no lock: the lock and recovery load on a miss
    from patchkit.engine.transaction import consistent_read

    return consistent_read(root)


def _whose_vllm(ui: UI, target: Target, another: str, no_import: bool) -> None:
    """--target DIR --python PATH: vLLM is asked through PATH about PATH's own vLLM, said when that
    is not DIR (`another`)."""
    if another and not no_import:
        ui.note(
            f"--python {target.python} imports vLLM from {target.python_vllm}, not {target.package_dir}: "
            "what vLLM answers through it (its validation, supports_eagle3()) is about that vLLM's files"
        )


def _preflight_of_sets(
    ui: UI,
    chosen: Options,
    launch_command: LaunchCommand,
    sets: dict[str, PatchSetDef] | None,
    *,
    no_import: bool,
    shortcut: bool,
    found_by: str | None,
) -> PreflightResult:
    """Each covering set's findings (its tree state, its launch checks), merged; then the launch's own once."""
    target = resolve_target(chosen)
    target = replace(target, found_by=found_by) if found_by else target
    ui.knows(target_json(target))
    another = another_vllm(target)  # told once: the note, each set's preflight, vLLM's validation
    _whose_vllm(ui, target, another, no_import)
    every = resolve_sets(chosen, target, sets=sets)
    covering = [c.resolved for c in judged(every) if c.resolved is not None]
    launch_command = read(launch_command, covering[0].vllm_version)
    needs = needs_of(chosen, sets, launch_command, covering[0].vllm_version, target.root)
    # a set the launch needs with no series for this vLLM: its tree-state fails, its launch checks
    # run on the files as they are (as for an upstream release), in the library's order
    gaps = {c.name: c.gap for c in no_series(every) if c.gap is not None and needs.needs(c.name)}
    covering = [c.resolved or gaps[c.name] for c in every if c.resolved in covering or c.name in gaps]
    needs = replace(needs, judged=frozenset(r.set_name for r in covering))
    recorded = recorded_state(target.root) if shortcut else None  # read once: each set's status is told from it
    results = [
        _set_findings(
            ui, r, launch_command, needs, no_import=no_import, shortcut=shortcut, recorded=recorded, another=another
        )
        for r in covering
    ]
    result = merged(results)
    left = left_out(needs, target.root, covering[0].vllm_version, one_set=not shortcut, recorded=recorded)
    result.findings += [left] if left is not None else []
    result.findings += _launched_vllm(chosen, sets, target, launch_command, needs, another)
    names = [r.set_name for r in covering]
    return _launch_findings(covering[0], launch_command, result, names, no_import=no_import, another=another)


def _set_findings(
    ui: UI,
    resolved: Resolved,
    launch_command: LaunchCommand,
    needs: LaunchNeeds,
    *,
    no_import: bool,
    shortcut: bool,
    recorded: State | None,
    another: str,
) -> PreflightResult:
    """preflight() of one set: on `run`'s fast path, from its recorded status (`recorded`: the tree's
    record as recorded_state read it once for every set; no lock: see there why none is needed),
    else under the lock. `another`: another_vllm() of the tree."""
    if shortcut:
        status = recorded_status(resolved, recorded)
        if status is not None:
            return preflight(
                resolved,
                launch_command,
                no_import=no_import,
                status=status,
                kept=True,
                needs=needs,
                not_asked=RUN,
                another=another,
            )
    root = resolved.target.root
    with _consistent_read(root) as recovered:
        if recovered:
            ui.warn(recovered)
        if no_import:
            why = RUN if shortcut else "--no-import"
            return preflight(
                resolved, launch_command, no_import=True, kept=shortcut, needs=needs, not_asked=why, another=another
            )
        status = inspect(resolved, check_upstream=False, import_probe=False)
        before = settled_record(root)
    # vLLM's questions import it (up to minutes each): asked without the lock, which a concurrent
    # apply, revert or preflight waits for. Sound as run's fast path is: every patchkit writer writes
    # its journal first and a new state.json last, so the same record, with no journal, before and
    # after means none ran in between
    result = preflight(
        resolved, launch_command, no_import=False, status=status, kept=shortcut, needs=needs, another=another
    )
    if settled_record(root) != before:
        raise TargetError(
            f"cannot judge: {root} changed while preflight read it (a patchkit apply, revert or recovery ran)",
            hint="run preflight again once it is done",
        )
    return result


def _launch_findings(
    resolved: Resolved,
    launch_command: LaunchCommand,
    result: PreflightResult,
    names: list[str],
    *,
    no_import: bool,
    another: str,
) -> PreflightResult:
    """What holds for the launch whatever the sets: the tree it imports, vLLM's own validation
    (`names`: the sets judged, in the library's order, for the one apply that fixes them)."""
    named = launch_target_finding(resolved, launch_command)  # is the tree checked the one the launch imports?
    result.findings += [named] if named is not None else []
    unused = unused_parser_note(launch_command)
    result.said += [unused] if unused else []
    if not no_import:  # vLLM's import takes seconds to minutes: not under the lock
        result.findings = decided_by_vllm(
            result.findings + vllm_validation(resolved, result, another), launch_command.argv
        )
    result.findings = in_fix_order(one_apply(result.findings, names))
    return result


def merged(results: list[PreflightResult]) -> PreflightResult:
    """Several sets' preflights as one: per check, the failures of every set (each once), else one
    pass, and what could not be judged (each once); tree-state, each set's own (a pass too: -v and
    JSON show every set judged); the tree's state `partial` when the sets' differ; fixable when any
    set's apply would fix."""
    first = results[0]
    by_check: dict[str, list[Finding]] = {}
    for finding in (f for r in results for f in r.findings):
        kept = by_check.setdefault(finding.check, [])
        # one pass says it; a failure is said by every set it concerns, and so is what is not judged
        if finding.check != TREE and finding.ok and finding.judged and any(f.judged for f in kept):
            continue
        if finding.check != TREE and not finding.ok:
            kept[:] = [f for f in kept if not f.ok or not f.judged]
        if all((f.ok, f.message) != (finding.ok, finding.message) for f in kept):
            kept.append(finding)
    states = {r.tree_state for r in results}
    return replace(
        first,
        findings=[f for found in by_check.values() for f in found],
        tree_state=_overall(states),
        fixable=any(r.fixable for r in results),
        unused=_first_said([r.unused for r in results]),
        guard_off=next((r.guard_off for r in results if r.guard_off), None),
    )


def _overall(states: set[str | None]) -> str | None:
    """The sets' states as one, by status's rule (an upstream set beside applied ones is no partial tree);
    unsupported when a set the launch needs has no series (no apply makes the tree safe for it)."""
    if len(states) == 1:
        return states.pop()
    if TreeState.UNSUPPORTED in states:
        return str(TreeState.UNSUPPORTED)
    return str(overall_state({TreeState(s) for s in states if s is not None}))


def _first_said(notes: list[dict[str, str]]) -> dict[str, str]:
    """The sets' notes in order, each set's first."""
    said: dict[str, str] = {}
    for each in notes:
        for name, state in each.items():
            said.setdefault(name, state)
    return said


def show(ui: UI, result: PreflightResult, fmt: str) -> None:
    if fmt == OutputFormat.JSON:
        ui.json(
            {
                "launch": result.command.argv,
                "tree_state": result.tree_state,
                "findings": findings_json(result),
                "unused_sets": result.unused,
                "notes": result.notes,  # what text says as notes (a headless node, an unused parser)
            }
        )
    elif fmt == OutputFormat.JUNIT:
        write_junit(findings_junit(result))
    else:
        show_findings(ui, result)


def show_findings(ui: UI, result: PreflightResult) -> None:
    """Failures first (what the launch would hit, and its fix), then one verdict line; every
    finding in a table with -v."""
    if ui.verbose:
        # the result column says "cannot judge": the cell does not say it again
        rows = [[f.check, f.result, f.message.removeprefix(f"{f.result}: "), f.fix or ""] for f in result.findings]
        ui.table(["check", "result", "found", "fix"], rows, title="preflight", state_column=1)
    # a check that could not judge is said with what gives it: never counted as a pass; with -v
    # the table above says each finding with its fix already
    if not ui.verbose:
        ui.failures(
            fix_once(
                [
                    Failure(f.check, f.message, fix=f.fix or "", warning=f.ok)
                    for f in result.findings
                    if f.result != PASS
                ]
            )
        )
    result.shown = True  # a model found nowhere is one of these: the exit code (4) says it, not another line
    for note in result.notes:
        ui.note(note)
    total, failed = len(result.findings), sum(not f.ok for f in result.findings)
    unjudged = sum(not f.judged for f in result.findings)
    cannot = f", {unjudged} cannot judge" if unjudged else ""
    more = "" if ui.verbose else " (-v shows each)"
    passed = total - failed - unjudged
    if result.ok and not passed:  # "ok: 0 checks passed" read as a pass: nothing was judged
        said = f"{unjudged} cannot judge{more}" if unjudged else "no check applies to this launch"
        ui.verdict(f"preflight: nothing judged: {said}", ok=True)
    elif result.ok:
        ui.verdict(f"preflight: ok: {passed} check{'s' * (passed != 1)} passed{cannot}{more}", ok=True)
    else:
        ui.verdict(f"preflight: FAILED: {failed} of {total} checks failed, {passed} passed{cannot}{more}", ok=False)


def findings_json(result: PreflightResult) -> list[dict[str, Any]]:
    return [f.to_json() for f in result.findings]


def findings_junit(result: PreflightResult) -> str:
    cases = [
        JUnitCase(
            name=f.check,
            failure=None if f.ok else f.message,
            skipped=None if f.judged else f.message,
            details=f.message + (f"\nfix: {f.fix}" if f.fix else ""),
            output="" if not f.ok else f.message,
        )
        for f in result.findings
    ]
    return junit("patchkit.preflight", cases, "preflight")
