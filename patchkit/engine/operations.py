"""apply, revert and verify on a target, as operations that return what happened and print nothing.

apply:  plan in memory -> stock integrity (--force overrides) -> checks on the planned contents
        -> one transaction with the record -> stale bytecode fixed -> checks on disk (rolled back
        if they fail) -> stale bytecode that could not be fixed refused.
revert: the originals the record saved (an edited file refused, or with --force kept aside), the
        rest of the series reverse-applied -> one transaction -> stale bytecode fixed.

A command shows each step as it happens (a Watcher) and renders the result; `verify`'s release
pipeline (release_check) runs the same operations on a scratch tree. A result carries its outcome, and the error to report when the
operation did not do what was asked; refusals that come before any plan (drift, a busy lock, an
unsupported version) are raised.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from packaging.version import Version

from patchkit import __version__, fetch
from patchkit.base import hints
from patchkit.base.enums import Outcome, SelectionKind, StepState, TreeState
from patchkit.base.errors import (
    BadInput,
    BreaksSet,
    CheckFailed,
    Conflict,
    Drift,
    NoPatchSet,
    PatchkitError,
    escaped,
    few,
)
from patchkit.base.fsutil import Landed, read_file
from patchkit.base.hashing import sha256
from patchkit.base.heads import Heads
from patchkit.base.options import Options
from patchkit.base.values import Value
from patchkit.checks import WARNING, Check, CheckResult, integrity, shadow
from patchkit.checks import bytecode as pyc  # `bytecode` names the results of a fix here
from patchkit.distinfo import installed_wheel_reader, patched_build, tree_record, unlike_stock
from patchkit.distinfo.record import (
    Listings,
    Record,
    find_record,
    has_provenance,
    listings,
    parsed_record,
    read_record_file,
)
from patchkit.engine.guard import (
    MODULE,
    NOT_INSTALLED_VLLM,
    STALE_BYTECODE,
    STALE_GUARD,
    STOPS_EVERY_LAUNCH,
    dist_info,
    foreign_files,
    install_changes,
    installed_vllm_version,
    is_site_packages,
    launch_tags,
    make_readable,
    other_build,
    own_unrecorded,
    removal_changes,
    remove_empty_cache,
    replaced_files,
    several_vllms_refusal,
    stale_under_prefix,
    unreadable_by_others,
    unseen_guard_note,
    with_stale_bytecode,
)
from patchkit.engine.held import marked_held, refuse_breaking, unheld_breaks, wheel_breaks
from patchkit.engine.inspection import (
    TreeStatus,
    apply_of,
    as_its_fix_leaves,
    check_context,
    chosen_sets,
    conflicting_files,
    drifted_files,
    found_applied,
    found_edit_said,
    guard_refusal,
    in_the_way,
    inspect,
    local_edit_fix,
    local_edit_said,
    run_checks,
    selection_of,
    shown_name,
    stale_grouped,
    stale_said,
    with_found_judged,
)
from patchkit.engine.resolve import Resolved, judged, require_patches, resolve, resolve_sets, resolve_target, several
from patchkit.engine.stale import pip_wrote, stale_entries, stale_note
from patchkit.engine.transaction import (
    commit_changes,
    commit_needs,
    consistent_read,
    lock_timeout,
    locked_record,
    never_locked,
    preflight,
    read_only_view,
    release_original,
    save_originals,
)
from patchkit.engine.unrecorded_edits import edited_unrecorded, unproven, unproven_found
from patchkit.engine.vouched import adopted_earlier, changed_since, patches_at_hand, plan_over_stock, refuse_unvouched
from patchkit.series import dry_run as plan_holding
from patchkit.series.hunks import made_file, reverse_file
from patchkit.series.library import adhoc_set_name, load_library, locate
from patchkit.series.patchfile import Patch, read_patch, touched_paths
from patchkit.series.plan import (
    PatchStep,
    Plan,
    Restored,
    View,
    plan_apply,
    plan_revert,
    restore_recorded,
)
from patchkit.store.journal import journal_path
from patchkit.store.objects import prune_objects
from patchkit.store.saved import keep_copies
from patchkit.store.state import (
    Entry,
    State,
    earlier_applies,
    is_adhoc,
    left_in_store,
    meta_dir,
    read_state,
    remove_empty_store,
    shown_set,
    state_path,
)
from patchkit.tree.modules import hanging_modules
from patchkit.tree.target import Target, checkout_restore, launch_prefix, stock_files_command
from patchkit.tree.version import detect

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.distinfo.installed_wheel import EarlierWheel, Provenance
    from patchkit.engine.guard import Changes
    from patchkit.series.library import PatchSetDef

# Called with a phase's name ("dry_run", "checks", "apply"), it times the work done inside it.
Timer = Callable[[str], AbstractContextManager[object]]


def _untimed(phase: str) -> AbstractContextManager[object]:
    return nullcontext()


class Watcher(Protocol):
    """Told of each step as it happens, so a command can show it at once (the result holds it too)."""

    def warning(self, text: str) -> None: ...

    def planned(self, plan: Plan) -> None: ...

    def checked(self, results: list[CheckResult]) -> None: ...


class Unwatched:
    def warning(self, text: str) -> None:
        pass

    def planned(self, plan: Plan) -> None:
        pass

    def checked(self, results: list[CheckResult]) -> None:
        pass


@dataclass(eq=False, repr=False)
class ApplyResult(Value):
    """What an apply (or its dry run) did: its outcome, plan, checks and the files written."""

    outcome: Outcome
    message: str = ""  # the last line of a text report (an error says it instead)
    plan: Plan | None = None
    checks: list[CheckResult] | None = None  # the results reported with the outcome (None: no checks ran)
    tables: list[list[CheckResult]] = field(default_factory=list)  # the check tables shown (Watcher.checked), in order
    planned_checks: list[CheckResult] = field(default_factory=list)  # on the planned contents
    on_disk_checks: list[CheckResult] = field(default_factory=list)  # on the files as written
    written: bool = False  # the transaction was committed (and maybe rolled back since)
    warnings: list[str] = field(default_factory=list)
    error: PatchkitError | None = None
    recorded: bool = False  # found applied with no record of it, and recorded (or would be)
    # already applied, and the launch guard still refuses the tree: (why, the fix), as status says them
    guard_refuses: tuple[list[str], str] | None = None

    @property
    def launch_refused(self) -> bool:
        """The set is applied, yet every launch is refused: a check failed (exit 1), as status says."""
        return self.guard_refuses is not None


@dataclass(eq=False, repr=False)
class RevertResult(Value):
    """What a revert did: its outcome, the files restored, the checks and warnings."""

    outcome: Outcome
    message: str = ""
    files: list[str] = field(default_factory=list)  # restored, or that would be
    checks: list[CheckResult] = field(default_factory=list)  # bytecode, after writing
    saved: Path | None = None  # where copies of edited files were kept (--force)
    saved_files: list[str] = field(default_factory=list)  # the edited files copied there
    unproven: list[str] = field(default_factory=list)  # hunks reversed, no RECORD to prove them stock (copied)
    kept: list[str] = field(default_factory=list)  # a dry run's: the files the revert would keep a copy of
    warnings: list[str] = field(default_factory=list)
    error: PatchkitError | None = None
    record: State | None = None  # the tree's record as the revert left it (None: not written)


# --------------------------------------------------------------------------- apply


def apply_series(
    resolved: Resolved,
    *,
    dry_run: bool = False,
    force: bool = False,
    import_probe: bool = True,
    guard: bool = False,
    guard_choice: bool | None = None,
    watch: Watcher | None = None,
    timed: Timer = _untimed,
    checked: ApplyResult | None = None,
    chosen: Sequence[str] = (),
    judge_guard: bool = True,
) -> ApplyResult:
    """Apply the resolved series to its target: all files or none, checked, recorded; with `guard`,
    the launch guard (patchkit/engine/guard.py) is installed in the same transaction, where it is missing,
    unless an earlier apply was told not to. `guard_choice`: the user's word (--guard, --no-guard),
    recorded for the applies after this one. The dry run runs the same checks on the planned
    contents and ends as apply would. `checked`: a dry run just made of this tree, whose checks
    are reused when this plan writes the very same contents (verify --all: checked once per release).
    `chosen`: every set this run sets out to apply, which the record remembers (State.chosen);
    by default this set alone. `judge_guard`: False for a set a later set of the same run follows
    (what the guard refuses is judged once, after the last: a later set may settle it)."""

    over_wheel = _over_an_earlier_wheel(resolved)
    if over_wheel is not None:  # the library's series, in place of the wheel's
        resolved = replace(resolved, selection=over_wheel.selection)
    patches = require_patches(resolved)
    if resolved.selection.kind == SelectionKind.UPSTREAM:
        return _settle_upstream(resolved, dry_run=dry_run, watch=watch or Unwatched())
    applying = _Applying(resolved, patches, watch or Unwatched(), timed, import_probe, guard, guard_choice, checked)
    applying.chosen = (*chosen, resolved.set_name)
    applying.over_wheel = over_wheel
    applying.judge_guard = judge_guard
    if dry_run:
        with read_only_view(resolved.target.root) as settled:
            if settled:
                return applying.run(read_state(resolved.target.root), dry_run=True, force=force)
    root = resolved.target.root
    with locked_record(root) as (recovered, state):  # a first apply that fails leaves no .patchkit/
        if recovered:
            applying.warn(recovered)
        return applying.run(state, dry_run=dry_run, force=force)


def _over_an_earlier_wheel(resolved: Resolved) -> EarlierWheel | None:
    """A patched wheel's earlier series of the set (an earlier library's): the patches the library
    changed, the release's stock files of the wheel's on which apply plans the library's series, and
    that series (installed_wheel.earlier_wheel_stock). A set of a wheel of several that shares a file
    with another: refused, revert puts the release's files back first (it reverts them together)."""
    root = resolved.target.root
    if not has_provenance(root):
        return None
    reader = installed_wheel_reader()
    if reader.updates_in_one_step(root, resolved.set_name):
        found: EarlierWheel | None = reader.earlier_wheel_stock(root, resolved.set_name, fetch.release_tree)
        return found
    changed = reader.earlier_series(root, resolved.set_name)
    if changed:
        raise CheckFailed(
            f"the {resolved.set_name} series on vLLM {resolved.vllm_version} came with a wheel of another library "
            f"({', '.join(changed)} changed): nothing was applied",
            hint=f"run {hints.command('revert')} (from the wheel's own patch texts), then {hints.command('apply')}",
        )
    return None


# a step of one command, never compared nor printed: no __eq__ or __repr__ compiled at every start-up
@dataclass(eq=False, repr=False)
class _Applying:
    """One apply: what it has shown so far goes into each result it ends with."""

    resolved: Resolved
    patches: list[Patch]
    watch: Watcher
    timed: Timer
    import_probe: bool
    guard: bool
    guard_choice: bool | None
    checked: ApplyResult | None = None  # an earlier dry run of the same tree (its planned checks)
    tables: list[list[CheckResult]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # set name -> why its record is stale
    guard_installed: bool = False  # this apply wrote the launch guard
    guard_was: tuple[str, bool] | None = None  # the other patchkit build whose guard it replaced (other_build)
    guard_replaced: list[str] = field(default_factory=list)  # guard files patchkit did not write, replaced
    guard_removed: Changes = field(default_factory=dict)  # the guard's removal (--no-guard)
    state: State = field(default_factory=lambda: State([]))  # the tree's record, read once (see run)
    made_readable: list[str] = field(default_factory=list)  # files an older patchkit left 0600, opened
    chosen: tuple[str, ...] = ()  # the sets this run sets out to apply (the record remembers them)
    judge_guard: bool = True  # say what the guard still refuses (False: a later set of this run will)
    found_recorded: bool = False  # the series was found applied with no record of it: now recorded
    # the set's patches found applied with no record of them: their entry and originals (digest -> bytes)
    found: tuple[Entry | None, dict[str, bytes]] = (None, {})
    guard_refuses: tuple[list[str], str] | None = None  # what the guard still refuses once applied, and its fix
    reinstalled: list[str] = field(default_factory=list)  # the set's recorded files pip wrote since (pip_wrote)
    changed: list[str] = field(default_factory=list)  # applied from another library: the patches it changed
    over_wheel: EarlierWheel | None = None  # a patched wheel's earlier series of the set: planned over its stock

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        self.watch.warning(text)

    def show(self, results: list[CheckResult]) -> list[CheckResult]:
        self.tables.append(results)
        self.watch.checked(results)
        return results

    def result(self, outcome: Outcome, message: str = "", **details: Any) -> ApplyResult:
        details.setdefault("recorded", self.found_recorded)
        details.setdefault("guard_refuses", self.guard_refuses)
        return ApplyResult(outcome, message, tables=self.tables, warnings=self.warnings, **details)

    def run(self, state: State, *, dry_run: bool, force: bool) -> ApplyResult:
        """`state`: the tree's record, read once under the lock (or in the dry run's settled view),
        which holds for the whole apply: every phase works on it."""
        root = self.resolved.target.root
        state = adopted_earlier(state, self.resolved.set_name, self.patches)  # --patch files edited since their apply
        self.state = state
        self.open_to_others(state, dry_run=dry_run)
        self.stale = stale_entries(root, state, self.resolved.vllm_version)
        for entry in state.entries:  # a record revert would refuse is never carried into the new one
            if entry.set_name not in self.stale:
                refuse_unvouched(root, entry, self.patches)
        for names, note in stale_grouped(self.stale):  # several sets' records say the same note: said once
            them = "them" if len(names) > 1 else "it"
            said = stale_said([shown_name(name, state) for name in names], note)
            self.warn(f"{said}: {f'apply would discard {them}' if dry_run else 'discarded'}")
        self.reinstalled = self.pip_wrote(state, dry_run=dry_run)
        if self.resolved.set_name not in self.stale:
            self.changed = changed_since(state.entry(self.resolved.set_name), self.patches) or (
                self.over_wheel.changed if self.over_wheel else []
            )
        drifted = drifted_files(self.resolved, state)
        if drifted:
            raise Drift(
                f"files edited after patchkit patched them: {few(drifted, sep=', ')}",
                hint=f"{hints.command('revert', '--force')} (keeps a copy of the edits), then {apply_of(chosen_sets(state, self.resolved.vllm_version))}",
            )
        with self.timed("dry_run"):
            plan = self.planned()
        self.watch.planned(plan)
        if plan.conflicts:
            return self.result(
                Outcome.CONFLICT,
                plan=plan,
                error=Conflict(
                    "the series does not apply; nothing was written:\n  " + plan.describe_conflicts("\n  "),
                    hint=self.conflict_fix(plan),
                ),
            )
        shadow.refuse(root, self.patches)  # else the patch would never be what runs
        self.refuse_writing_under_later_sets(state, plan.changed_paths)
        self.refuse_breaking_sets(state, plan)
        self.found = self.over_the_wheel(plan) if self.over_wheel else self.found_unrecorded(plan)
        if not plan.changed_paths:
            return self.already_applied(plan, dry_run=dry_run)
        preflight(root, plan.changed_paths, writable=not dry_run)  # the dry run refuses what apply would
        stock = self.stock_integrity(plan, force=force)
        if stock.outcome != Outcome.DRY_RUN:
            return stock
        return self.check_then_write(plan, stock, dry_run=dry_run)

    def planned(self) -> Plan:
        """The series planned on the tree; for a set applied from another library (an upgrade of
        patchkit changed its series), on the stock bytes a revert would restore, so the library's
        series replaces the earlier one in this one transaction (the originals not at hand: on disk)."""
        root = self.resolved.target.root
        entry = self.state.entry(self.resolved.set_name)
        if self.over_wheel is not None:  # a patched wheel's earlier series: on the release's stock files
            plan = plan_holding(root, self.patches, self.over_wheel.stock, from_disk=True)
            plan.stock = self.over_wheel.stock
            return plan
        over_stock = plan_over_stock(root, entry, self.patches) if self.changed and entry is not None else None
        return over_stock or plan_apply(root, self.patches)

    def over_the_wheel(self, plan: Plan) -> tuple[Entry | None, dict[str, bytes]]:
        """The entry that records the wheel's files as the stock files they replace (an apply found
        over them), so the record's originals are the release's, and those stock files (digest -> bytes)."""
        stock = self.over_wheel.stock if self.over_wheel else {}
        entry = self.resolved.apply_record(
            {p: (data, plan.view.original_content(p)) for p, data in stock.items()}, None
        )
        return entry, {str(sha256(data)): data for data in stock.values() if data is not None}

    def pip_wrote(self, state: State, *, dry_run: bool) -> list[str]:
        """The set's recorded files pip wrote since its apply (vLLM reinstalled, another build of the
        same version maybe): no edit; the record starts afresh from them (without_reinstalled), said."""
        entry = state.entry(self.resolved.set_name)
        if entry is None or self.resolved.set_name in self.stale:
            return []
        found = pip_wrote(self.resolved.target.root, state, entry, self.resolved.vllm_version)
        if found:
            one = len(found) == 1
            self.warn(
                f"{', '.join(found)} {'was' if one else 'were'} written by pip when vLLM was reinstalled (its RECORD "
                f"lists {'these' if one else 'their'} bytes): the record {'would start' if dry_run else 'starts'} "
                f"afresh from the installed {'file' if one else 'files'}"
            )
        return found

    def without_reinstalled(self, state: State) -> State:
        """`state` with no record of the set's files pip wrote: apply records them as it finds them."""
        entry = state.entry(self.resolved.set_name)
        return (
            state if entry is None or not self.reinstalled else state.with_entry(entry.without_files(self.reinstalled))
        )

    def conflict_fix(self, plan: Plan) -> str | None:
        """Where the tree records none of the set, a file the series does not match differs from stock
        (an edit by hand): its stock file back, then apply."""
        if self.changed and plan.stock is None:  # only the record vouches for the originals: revert asks for --force
            return (
                f"the set was applied from another library ({', '.join(self.changed)} changed), and only the "
                f"record vouches for its originals: {hints.command('revert', '--force')}, then {hints.command('apply')}"
            )
        if self.state.entry(self.resolved.set_name) is not None:
            return None
        files, there = conflicting_files(plan.conflicts), in_the_way(plan.conflicts)
        root, version = self.resolved.target.root, self.resolved.vllm_version
        said = local_edit_said(files, version, root, there)
        return f"{said}: {local_edit_fix(root, version, files, self.resolved.set_name, there)}"

    def open_to_others(self, state: State, *, dry_run: bool) -> None:
        """Make readable what an older patchkit wrote under a strict umask (0600), or what this
        apply patched in place of a file that was 0600, and the guard reads at every launch: another
        user's vLLM is refused (or runs unguarded) otherwise. `state`: the record that names them."""
        root = self.resolved.target.root
        closed = [rel for rel, _mode in unreadable_by_others(root, state)] if dry_run else make_readable(root, state)
        if closed:
            self.made_readable += closed
            verb = "would make" if dry_run else "made"
            self.warn(f"{verb} {', '.join(closed)} readable by other users (the launch guard reads them)")

    def dry_run_message(self, plan: Plan, results: list[CheckResult]) -> str:
        """Counted as apply counts them (cli count_line): the stock files' checks and the planned ones;
        an update of a set applied from another library says so, as apply's own line does."""
        ran = sum(r.ok and r.level != WARNING for r in results)
        update = (
            f"{_updated_said(self.resolved.set_name, self.changed, dry_run=True)}: " if plan.stock is not None else ""
        )
        return (
            f"dry run: {update}{len(plan.changed_paths)} file(s) would change, {ran} check(s) passed; nothing written"
        )

    def check_then_write(self, plan: Plan, stock: ApplyResult, *, dry_run: bool) -> ApplyResult:
        """The checks on the planned contents, which end a dry run as they would end apply."""
        assert stock.checks is not None
        planned = self.planned_checks(plan)
        results = stock.checks + planned
        failed = [r for r in results if r.failed]
        self.show(results)  # a dry run that passes shows them with -v only (cli Shown): its last line counts them
        if failed:
            nothing = "apply would write nothing" if dry_run else "nothing was written"
            return self.result(
                Outcome.CHECK_FAILED,
                plan=plan,
                checks=results,
                planned_checks=planned,
                error=_check_failure(f"verification of the patched files failed; {nothing}", failed),
            )
        if dry_run:
            return replace(stock, checks=results, planned_checks=planned, message=self.dry_run_message(plan, results))
        return self.write(plan, stock.checks, planned)

    def planned_checks(self, plan: Plan) -> list[CheckResult]:
        """The checks on the planned contents; those of `checked` when it planned the same writes."""
        earlier = self.checked
        if earlier is not None and earlier.plan is not None and _same_writes(earlier.plan, plan):
            return earlier.planned_checks
        with self.timed("checks"):
            return run_checks(check_context(self.resolved, plan, import_probe=self.import_probe))

    def refuse_writing_under_later_sets(self, state: State, paths: list[str]) -> None:
        """A set applied again keeps its place in the record, so it may not write a file a set
        applied after it recorded: that set's original is what this one wrote before, and a revert
        would put the wrong bytes back. Refused, with the order that works."""
        for name in self.stale:
            state = state.without(name)
        under = state.recorded_later(self.resolved.set_name, paths)
        if not under:
            return
        path, name = sorted(under.items())[0]
        later = state.entry(name)
        assert later is not None
        this = self.resolved.set_name
        raise Conflict(
            f"{escaped(path)} was changed by set {name}, applied after {this}: applying {this} again would "
            f"write under {name}'s record; nothing was written",
            hint=f"{hints.command('revert', chosen=selection_of(later))}, then apply {this} again "
            f"({hints.command('apply')}), then {hints.command('apply', chosen=selection_of(later))}",
        )

    def refuse_breaking_sets(self, state: State, plan: Plan) -> None:
        """An ad-hoc diff is held to the contract of each library set whose files it touches (held.py):
        those it writes, and those an earlier apply of it wrote (the record marks it held: Entry.held)."""
        if not is_adhoc(self.resolved.set_name):
            return
        recorded = {e.set_name: list(e.files) for e in state.entries if e.set_name not in self.stale}
        reads = (plan.disk_content, plan.content)
        earlier = state.entry(self.resolved.set_name)
        touched = {*plan.changed_paths, *plan.touched_paths, *(earlier.files if earlier is not None else ())}
        try:
            refuse_breaking(self.resolved.held_by, self.resolved.vllm_version, touched, reads, recorded)
        except BreaksSet as exc:
            if earlier is not None and not earlier.held and not plan.changed_paths:  # an older patchkit's apply
                exc.hint = f"revert it first ({hints.command('revert', chosen=selection_of(earlier))}), then {exc.hint}"
            raise

    def already_applied(self, plan: Plan, *, dry_run: bool) -> ApplyResult:
        """No file of the series to write; but the record is brought up to the tree (see
        settle_record) and stale bytecode an earlier apply could not fix is repaired here (only
        stale files are touched)."""
        # a file reached through a symlink (or not a regular file) is refused as a write would be: the
        # record and the guard would otherwise name it, and the guard refuse every launch
        preflight(self.resolved.target.root, plan.touched_paths, writable=False)
        message = "already applied: nothing to do"
        if self.made_readable:
            message = (
                f"already applied; {len(self.made_readable)} file(s) {'would be ' if dry_run else ''}made readable"
            )
        if self.settle_record(plan.content, dry_run=dry_run):
            noun, verb = ("launch guard", self.guard_verb()) if self.guard_installed else ("record", "updated")
            noun, verb = ("launch guard", "removed") if self.guard_removed else (noun, verb)
            message = f"already applied; {noun} {'would be ' if dry_run else ''}{verb}"
            if self.found_recorded:  # the tree recorded no apply of it: said, with the guard's fate
                found = f"already applied, with no record of it; {'would be ' if dry_run else ''}recorded"
                message = found + (f"; {noun} {'would be ' if dry_run else ''}{verb}" if noun != "record" else "")
        # before the guard is judged: a stale .pyc it refuses is what this fixes; the guard's own too, a
        # stale .pyc of it is what vLLM runs (status names apply as the fix). This run wrote none of
        # the files: only what status judges stale is touched (a pip-compiled .pyc is fresh)
        target = self.resolved.target
        bytecode = [] if dry_run else self.show(fix_bytecode(target, [], [*plan.touched_paths, MODULE]))
        fixed = sorted({r.path or "" for r in bytecode if r.ok and any(w in r.message for w in _BYTECODE_FIXED)})
        if fixed and message.endswith(": nothing to do"):  # what it did is said, not "nothing"
            message = f"already applied; stale bytecode of {', '.join(fixed)} fixed (-v shows each)"
        if self.judge_guard and self.warn_of_what_the_guard_refuses(dry_run=dry_run):
            message = (
                message.replace(": nothing to do", "") + "; the launch guard still refuses the tree (see the warning)"
            )
        if dry_run:
            return self.result(Outcome.ALREADY_APPLIED, message, plan=plan, checks=[])
        return _refuse_stale_bytecode(
            self.result(Outcome.ALREADY_APPLIED, message, plan=plan, checks=bytecode), "already applied"
        )

    def refusing_left(self, state: State) -> str:
        """What the launch guard still refuses once this apply wrote its set (an older patchkit's
        --patch record, another set's file edited by hand): the warning that names its fix, and the
        words the result line ends with ("" when there is none): a check failed, as status says."""
        if not self.judge_guard:
            return ""
        self.state = state  # the record as written: the guard judges it
        return (
            "; the launch guard still refuses the tree (see the warning)"
            if self.warn_of_what_the_guard_refuses()
            else ""
        )

    def warn_of_what_the_guard_refuses(self, *, dry_run: bool = False) -> bool:
        """This set has nothing to write, but the guard may still refuse the tree for another set's
        file (a patched wheel's set, another record): "nothing to do" alone would hide it. True: it
        does. A `dry_run` leaves out the stale bytecode the apply itself would fix."""
        root = self.resolved.target.root
        written = touched_paths(self.resolved.patches)
        refused = guard_refusal(root, self.resolved.set_name, self.state, written, self.resolved.vllm_version)
        # what the dry run's apply would fix: stale bytecode in __pycache__ (none reached through a
        # symlink), and another build's guard it updates
        apply_fixes = [p for p in refused[0] if STALE_BYTECODE in p] if refused else []
        apply_fixes += [p for p in refused[0] if self.guard_was and any(s in p for s in STALE_GUARD)] if refused else []
        left = [p for p in refused[0] if not (dry_run and p in apply_fixes)] if refused is not None else []
        refused = (left, refused[1]) if refused is not None and left else None
        if refused is not None:
            problems, fix = refused
            self.guard_refuses = (problems, fix)  # for the JSON document: a fleet's row shows it
            self.warn(f"the launch guard still refuses this tree: {few(problems)}; to fix it, {fix}")
        return refused is not None

    def stock_integrity(self, plan: Plan, *, force: bool) -> ApplyResult:
        """Refuse to patch files that are not the release's stock files (RECORD), unless --force.
        Passing, the result is the dry run's."""
        results = integrity.CHECK.run(check_context(self.resolved, plan, state=self.state))
        failed = [r for r in results if r.failed]
        if failed and not force:
            self.show(results)
            refusal = integrity.refusal(failed, self.resolved.vllm_version, self.resolved.target.root)
            return self.result(Outcome.CHECK_FAILED, plan=plan, checks=results, error=refusal)
        return self.result(Outcome.DRY_RUN, plan=plan, checks=integrity.forced(results))

    def write(self, plan: Plan, stock: list[CheckResult], planned: list[CheckResult]) -> ApplyResult:
        """Write the checked plan with the record, check what landed (undo if that fails)."""
        resolved, root = self.resolved, self.resolved.target.root
        results = stock + planned
        changes = plan.changes
        with self.timed("apply"):
            all_changes, state, written, new_state = self.commit(plan)
            bytecode = fix_bytecode(resolved.target, changes)  # before the probe imports the modules
            _fix_guard_bytecode(resolved.target, {p: c for p, c in all_changes.items() if p not in changes})
        with self.timed("checks"):
            on_disk = run_checks(
                check_context(resolved, plan, on_disk=True, import_probe=self.import_probe, written=written)
            )
        if any(r.failed for r in on_disk):
            self.show(bytecode)
            commit_changes(root, all_changes, state, undo=True, first=resolved.gates)
            self.show(fix_bytecode(resolved.target, changes))  # the rollback rewrote the sources once more
            return self.result(
                Outcome.CHECK_FAILED,
                plan=plan,
                checks=stock + on_disk + bytecode,
                planned_checks=planned,
                on_disk_checks=on_disk,
                written=True,
                error=_check_failure(
                    "verification after writing failed; the tree was rolled back", [r for r in on_disk if r.failed]
                ),
            )
        self.open_to_others(new_state, dry_run=False)  # a patched file kept the 0600 of the file it replaced
        written_only = [r for r in on_disk if r not in results]  # what only the written files show: the probe
        self.show(bytecode + written_only)  # one count of the checks on the files written
        done = _applied_said(plan) if plan.stock is None else _updated_said(self.resolved.set_name, self.changed)
        applied = self.result(
            Outcome.APPLIED,
            f"{done}: {len(changes)} file(s) changed" + self.guard_said() + self.refusing_left(new_state),
            plan=plan,
            checks=stock + on_disk + bytecode,
            planned_checks=planned,
            on_disk_checks=on_disk,
            written=True,
        )
        return _refuse_stale_bytecode(applied, done)

    def commit(self, plan: Plan) -> tuple[Changes, State, dict[str, tuple[Landed, bytes]], State]:
        """Write the plan's changes, the guard's and the record in one transaction: what was
        written, the state to return to, what landed (for the checks on disk), the state written."""
        resolved, root = self.resolved, self.resolved.target.root
        state = self.state
        for name in self.stale:  # describes files an upgrade of vLLM replaced
            state = state.without(name)
        state = self.without_reinstalled(state)
        found, originals = self.found  # the set's files already patched, with no record of them
        entry = resolved.apply_record(plan.changes, state.entry(resolved.set_name) or found)
        if plan.stock is not None:  # another library's series replaced: a file put back to stock is no longer patched
            entry = replace(entry, files={p: f for p, f in entry.files.items() if f["after"] != f["before"]})
        recorded = self.held_earlier(state.with_entry(entry).with_chosen(self.chosen), plan.content)
        recorded = self.wheel_judged(recorded, plan.content)
        guard_changes, new_state = self.with_guard(recorded)
        _refuse_a_record_too_large(root, new_state)
        self.keep_replaced_guard()
        changes = {**plan.changes, **guard_changes}
        save_originals(root, originals)  # before the record that names them
        landed = commit_changes(root, changes, new_state, origins=plan.view.origins, last=resolved.gates)
        return changes, state, landed, new_state

    def settle_record(self, read: Callable[[str], bytes | None], *, dry_run: bool = False) -> bool:
        """On a tree the series is applied to as it is: drop the records an upgrade of vLLM made
        stale, record this set's apply for the installed version (pip replaced the dist-info under
        the same files: a patched wheel, a rebuild), and install the guard where it is missing.
        Otherwise the guard refuses a tree every command calls applied. Whether anything was (or,
        with `dry_run`, would be) written."""

        root = self.resolved.target.root
        state = settled = self.state
        for name in self.stale:
            settled = settled.without(name)
        version = str(self.resolved.vllm_version) if self.resolved.vllm_version is not None else None
        settled = self.without_reinstalled(settled.with_version(self.resolved.set_name, version))
        earlier = settled.entry(self.resolved.set_name)
        if self.changed and earlier is not None:  # another library's patches that made the same bytes: now this one's
            settled = settled.with_entry(self.resolved.apply_record({}, earlier))
        elif earlier is not None and is_adhoc(earlier.set_name) and not earlier.held:  # refuse_breaking_sets held it
            settled = settled.with_entry(replace(earlier, held=True))
        settled, originals = self.found_applied(settled)
        settled = self.wheel_judged(self.held_earlier(settled, read), read)
        guard_changes, settled = self.with_guard(settled)
        settled = settled.with_wheel(_guarded_wheel(root, settled))
        if settled == state and not guard_changes:
            return False
        if not dry_run:
            self.keep_replaced_guard()
            save_originals(root, originals)  # before the record that names them
            commit_changes(root, guard_changes, settled)
            # the guard written (updated too, not only removed): an old unchecked-hash .pyc of it would run
            _fix_guard_bytecode(self.resolved.target, guard_changes)
            self.state = settled  # the record as it now is (the guard's check reads it)
        return True

    def held_earlier(self, state: State, read: Callable[[str], bytes | None]) -> State:
        """An older patchkit's --patch records (no "held" mark: the guard refuses them) in the record
        this apply writes, judged as a new diff is (engine/held.py) on the tree it leaves (`read`):
        those that break no library set's contract marked held; the others stay as they are (the
        guard refuses them: the warning names the set and the fix)."""
        if not any(is_adhoc(e.set_name) and not e.held for e in state.entries):
            return state
        sets = self.judging_sets()
        if not sets:  # no library to judge them by: they stay unmarked
            return state
        root, version = self.resolved.target.root, self.resolved.vllm_version
        return marked_held(state, unheld_breaks(root, state, sets, version, read))

    def wheel_judged(self, state: State, read: Callable[[str], bytes | None]) -> State:
        """The installed `wheel --patch` build (an older patchkit's held its diffs to no contract: the
        guard refuses it unless the record names it held), judged as held_earlier judges a record:
        its patchkit.json's digest recorded held where it breaks no set's contract, else none."""
        root = self.resolved.target.root
        judged = (
            wheel_breaks(root, self.judging_sets(), self.resolved.vllm_version, read) if has_provenance(root) else None
        )
        return state.with_wheel_held(judged[0] if judged is not None and judged[1] is None else None)

    def judging_sets(self) -> tuple[PatchSetDef, ...]:
        """The library sets an ad-hoc diff is held to (none: no library at hand)."""
        if self.resolved.held_by:
            return tuple(self.resolved.held_by)
        try:
            return tuple(load_library(locate(hints.current().library).path).values())
        except PatchkitError:
            return ()

    def found_applied(self, state: State) -> tuple[State, dict[str, bytes]]:
        """A series found applied that the tree does not record (its .patchkit/ lost or emptied, the
        patches applied by hand) is recorded as found (found_unrecorded): a revert and the guard then
        know its files. Its originals: digest -> bytes, for the store."""
        found, originals = self.found
        if found is None or state.entry(self.resolved.set_name) is not None:
            return state, {}
        self.found_recorded = True
        return state.with_entry(found), originals

    def found_unrecorded(self, plan: Plan) -> tuple[Entry | None, dict[str, bytes]]:
        """The set's patches `plan` finds applied with no record of the set: the entry that records
        them, with the originals that reversing them gives (digest -> bytes). An original vLLM's RECORD
        does not list as stock is an edit since, not patchkit's: refused, nothing written (else
        a revert restores the edit and calls it stock). A patched wheel's files are its
        provenance's, not an apply's: left to it."""
        stale = self.resolved.set_name in self.stale
        found = found_applied(self.resolved, self.state, plan, stale=stale)
        if found is None:
            return None, {}
        edited = unlike_stock(
            self.resolved.target.root, self.resolved.vllm_version, {path: pair[0] for path, pair in found.items()}
        )
        if edited:
            message, fix = found_edit_said(self.resolved, edited[0])
            raise Drift(f"{message}; nothing was written", hint=fix)
        originals = [data for data, _now in found.values() if data is not None]  # a file a patch created has none
        entry = self.resolved.apply_record(found, None)
        for path in found:  # their originals are the hunks reversed, which a revert says (unproven_found)
            entry.files[path]["found"] = True
        return entry, {str(sha256(data)): data for data in originals}

    def guard_verb(self) -> str:
        """What this apply did to the guard it wrote: another build's updated is said so (its
        output was "installed", or nothing, where status had named apply to update it)."""
        if self.guard_was is None:
            return "installed"
        version, newer = self.guard_was
        whose = f"{'another build of ' if version == __version__ else ''}patchkit {version}'s"
        if newer:  # a downgrade is no update
            return f"replaced with this patchkit's, of older checks (it was {whose})"
        return f"updated to this patchkit's (it was {whose})"

    def guard_said(self) -> str:
        if self.guard_installed:
            return f"; launch guard {self.guard_verb()}"
        return "; launch guard removed" if self.guard_removed else ""

    def with_guard(self, state: State) -> tuple[dict[str, tuple[bytes | None, bytes | None]], State]:
        """The guard's writes (none without --guard, or where it cannot go: said in a warning), and
        the state that records them."""
        no_guard = state.no_guard if self.guard_choice is None else not self.guard_choice
        state = replace(state, no_guard=no_guard)
        if (
            no_guard and not state.guard
        ):  # a record removed by hand: this patchkit's own guard is still known by its bytes
            state = state.with_guard(own_unrecorded(self.resolved.target.root))
        if no_guard and state.guard:  # told no guard: the one installed goes (a file changed since stays)
            return self.without_guard(state)
        if not self.guard or no_guard:
            return {}, state
        if self.resolved.target.guard_unseen:  # written, it would be claimed and inert
            self.warn(unseen_guard_note(self.resolved.target))
            return {}, state
        several = several_vllms_refusal(self.resolved.target.root)
        if several is not None:  # never a guard removed and the tree called applied
            raise several
        entry = state.entry(self.resolved.set_name)
        version = entry.vllm_version if entry else None
        root, asked = self.resolved.target.root, self.guard_choice is True  # --guard: replace one not patchkit's
        was = other_build(root, state)
        changes, recorded, why_not = install_changes(root, state.guard, version, replace=asked)
        if why_not and state.guard and not is_site_packages(root):  # it cannot tell the version it compares
            self.warn(
                f"{NOT_INSTALLED_VLLM}: the launch guard an earlier apply installed cannot tell which vLLM runs: removed"
            )
            return self.without_guard(state)
        if why_not:
            self.warn(why_not)
        if why_not and STOPS_EVERY_LAUNCH in why_not and state.guard:  # an earlier apply's guard would too
            return self.without_guard(state)
        self.guard_installed = bool(changes)
        self.guard_was = was if changes else None
        self.guard_replaced = [p for p in replaced_files(root, state.guard) if p in changes] if asked else []
        users = {p: str(sha256(changes[p][0])) for p in foreign_files(root, state.guard) if p in self.guard_replaced}
        return changes, state.with_guard(recorded).with_guard_replaced(users)  # revert puts them back

    def without_guard(self, state: State) -> tuple[dict[str, tuple[bytes | None, bytes | None]], State]:
        """The writes that remove the recorded guard (a file changed since stays, said), and the state."""
        changes, kept = removal_changes(self.resolved.target.root, state.guard, state.guard_replaced)
        for note in kept:
            self.warn(note)
        self.guard_removed = dict(changes)
        return changes, state.with_guard({})

    def keep_replaced_guard(self) -> None:
        """A copy of each guard file --guard replaces that patchkit did not write (as it is)."""
        if self.guard_replaced:
            where = keep_copies(self.resolved.target.root, self.guard_replaced)
            self.warn(f"replaced {', '.join(self.guard_replaced)} with this patchkit's guard; a copy kept in {where}")


_APPLY_GOES_ON = (TreeState.NOT_APPLIED, TreeState.PARTIAL)  # the states apply writes from


def with_stock_judged(resolved: Resolved, status: TreeStatus) -> TreeStatus:
    """`status` with the files apply would patch that are not the release's stock files: apply
    refuses them on integrity, so status says so with its fix, never "apply" alone. Status
    only: the launch's fast path never loads the integrity check."""
    status = with_found_judged(resolved, status)
    plan = status.plan
    if status.state not in _APPLY_GOES_ON or status.drifted or plan is None or not plan.changed_paths:
        return status
    results = integrity.CHECK.run(check_context(resolved, plan, state=status.record))
    return replace(status, not_stock=[r for r in results if r.failed])


def _same_writes(earlier: Plan, plan: Plan) -> bool:
    return earlier.touched_paths == plan.touched_paths and earlier.changes == plan.changes


def _check_failure(what: str, failed: list[CheckResult]) -> CheckFailed:
    return CheckFailed(what + ":\n  " + "\n  ".join(r.describe() for r in failed))


def _settle_upstream(resolved: Resolved, *, dry_run: bool, watch: Watcher) -> ApplyResult:
    """A release that ships the change: nothing to patch, but the records an upgrade of vLLM made
    stale are dropped (and the guard with them once no set is left), which the guard would refuse.
    A tree with none is neither locked nor written to."""

    root, version = resolved.target.root, resolved.vllm_version
    patch_set = resolved.selection.patch_set
    declared = f"vLLM {patch_set.upstream}" if patch_set is not None and patch_set.upstream else "it"
    # as the set declares it: apply runs no check that would show this release holds the change
    said = f"nothing to patch in vLLM {version}: the set {resolved.set_name} declares that {declared} ships its change"
    if resolved.selection.in_stock:  # found, not declared: its files are left as they are
        said = f"nothing to patch in vLLM {version}: {resolved.selection.note} (its files left as they are)"
    result = ApplyResult(Outcome.UPSTREAM, said)
    settled, dropped, guard_changes, kept = _without_stale(root, read_state(root), version)
    if dropped and not dry_run:
        with locked_record(root) as (recovered, state):
            if recovered:
                result.warnings.append(recovered)
            settled, dropped, guard_changes, kept = _without_stale(root, state, version)  # again, under the lock
            if dropped:
                commit_changes(root, guard_changes, settled)
                _fix_guard_bytecode(resolved.target, guard_changes)
    verb = "would drop" if dry_run else "dropped"
    result.warnings += [f"{note}: {verb} the record of {name}" for name, note in dropped.items()] + kept
    if dropped and guard_changes:
        result.message += f"; launch guard {'would be ' if dry_run else ''}removed"
    for note in result.warnings:
        watch.warning(note)
    return result


def _guarded_wheel(root: Path, state: State) -> str | None:
    """The version of the patched wheel a guard recorded with no set guards: the vLLM installed,
    when it came from a patched wheel; else none (the guard then goes by the entries)."""
    if not state.guard or state.entries or not has_provenance(root):
        return None
    return installed_vllm_version(root)


def _without_stale(
    root: Path, state: State, version: Version | None
) -> tuple[State, dict[str, str], Changes, list[str]]:
    """`state` without the records an upgrade of vLLM made stale (a guarded patched wheel's too,
    once another vLLM replaced it), and without the guard once no set is left: that state, set name
    -> why its record is stale, the guard's removal, and a note for each guard file kept (changed
    since patchkit wrote it)."""
    stale = stale_entries(root, state, version)
    installed = installed_vllm_version(root)
    if state.wheel and state.wheel != installed:
        stale[f"the patched wheel {state.wheel}"] = f"vLLM {installed} replaced the patched wheel"
        state = state.with_wheel(None)
    if not stale:
        return state, {}, {}, []
    for name in stale:
        state = state.without(name)
    guard_changes, state, kept = _without_guard(root, state)
    return state, stale, guard_changes, kept


def _applied_said(plan: Plan) -> str:
    """ "applied 1 patch(es) (3 already there)": the patches this apply wrote, not every patch of the
    series (after one file put back, "applied 4 patch(es)" would overstate what it did)."""
    wrote = sum(step.state == StepState.WILL_CHANGE for step in plan.steps)
    there = len(plan.steps) - wrote
    return f"applied {wrote} patch(es)" + (f" ({there} already there)" if there else "")


def _updated_said(set_name: str, changed: list[str], *, dry_run: bool = False) -> str:
    """What an apply over another library's series (or the earlier texts of --patch files) did (or,
    `dry_run`, would do)."""
    if is_adhoc(set_name):
        return f"{'would apply' if dry_run else 'applied'} in place of the earlier text of {', '.join(changed)}"
    return f"{'would update' if dry_run else 'updated'} from another library ({', '.join(changed)} changed)"


def _refuse_stale_bytecode(result: ApplyResult, done: str) -> ApplyResult:
    stale = [r for r in result.checks or [] if r.check == pyc.NAME and r.failed]
    if stale:
        result.outcome = Outcome.BYTECODE_FAILED
        result.error = CheckFailed(
            f"{done}, but compiled bytecode that shadows the change could not be fixed:\n  " + pyc.failures(stale),
            hint=f"{pyc.FIX}; {hints.command('verify')} reports any stale bytecode left",
        )
    return result


_BYTECODE_FIXED = (": removed", "stale: recompiled")  # fix_bytecode's words for a .pyc it changed


def fix_bytecode(target: Target, changed: Iterable[str], others: Iterable[str] = ()) -> list[CheckResult]:
    """After apply or revert: rebuild or remove compiled bytecode that would keep running the old
    code of the files the series `changed` (unchecked-hash pycs), in __pycache__ and under this
    environment's pycache prefix (a launch from it reads them there, and the guard refuses them).
    Of `others`, only the files status judges stale: the fixer's rules fit a file just written (a
    timestamp .pyc of its second and size is stale), not an up-to-date one the series left alone."""
    root = target.root
    stale = with_stale_bytecode(root, list(others), launch_prefix(root)) if others else []
    paths = [*changed, *stale]
    return pyc.fix(root, paths, target.python) + _remove_prefixed(root, paths)


def _remove_prefixed(root: Path, paths: list[str]) -> list[CheckResult]:
    """The stale unchecked-hash .pyc files of `paths` under this process's pycache prefix, removed:
    Python compiles the source again (no interpreter of the tree is asked to rebuild them there)."""
    results = []
    for rel, found in stale_under_prefix(root, sorted(p for p in paths if p.endswith(".py")), None):
        try:
            found.unlink()
            results.append(CheckResult(pyc.NAME, rel, True, f"{found} (under the pycache prefix): stale: removed"))
        except FileNotFoundError:
            continue
        except OSError as exc:
            results.append(
                CheckResult(
                    pyc.NAME,
                    rel,
                    False,
                    f"{found} (under the pycache prefix), stale; could not remove it: {exc.strerror or exc}",
                )
            )
    return results


# --------------------------------------------------------------------------- verify


@dataclass(eq=False, repr=False)
class VerifyResult(Value):
    """`verify` on a target: its status, and the checks on its files as they are (applied,
    upstream) or as apply would leave them."""

    status: TreeStatus
    checks: list[CheckResult]
    warnings: list[str] = field(default_factory=list)
    error: PatchkitError | None = None
    # drifted: the failed checks that fail on what the drift's fix leaves too (the series' fault)
    series_fails: frozenset[str] = frozenset()

    @property
    def conflicts(self) -> list[PatchStep]:
        return self.status.plan.conflicts if self.status.plan else []

    @property
    def ok(self) -> bool:
        """As status: a partial tree fails (exit 1) even where its checks pass once applied."""
        # an earlier library's series (a patched wheel's, whose own texts it is judged by): not this one's
        return self.passes_if_applied and self.status.state != TreeState.PARTIAL and not self.status.other_library

    @property
    def passes_if_applied(self) -> bool:
        status = self.status
        return (
            not any(r.failed for r in self.checks)
            and not self.conflicts
            and not status.drifted
            and not status.guard
            and not status.hanging
            and not status.unjudged_bytecode
        )

    @property
    def outcome(self) -> Outcome:
        return Outcome.OK if self.ok else Outcome.CHECK_FAILED


def verify_tree(
    resolved: Resolved, *, import_probe: bool = True, watch: Watcher | None = None, verifying: Sequence[Check] = ()
) -> VerifyResult:
    """The checks on the target's files, nothing written (under the lock: no writer is half-way).
    `verifying`: the checks only verify runs, after the others (the set's behaviour test)."""

    warnings = []
    with consistent_read(resolved.target.root) as recovered:
        if recovered:
            warnings.append(recovered)
            (watch or Unwatched()).warning(recovered)
        # a module the import would hang on: no import probe (status's failure names it)
        import_probe = import_probe and not hanging_modules(resolved.target.root, launch_tags(resolved.target.root))
        status = inspect(resolved, check_upstream=True, import_probe=import_probe, verifying=verifying)
        refuse_unchangeable(resolved, status=status)  # as status does; and fleet's phase 1 is this verify
        checks = _tree_checks(resolved, status, import_probe, verifying)
        return VerifyResult(
            status, checks, warnings, series_fails=_failing_after_the_drift_fix(resolved, status, checks)
        )


def _failing_after_the_drift_fix(resolved: Resolved, status: TreeStatus, checks: list[CheckResult]) -> frozenset[str]:
    """The checks failed on a drifted tree that fail again on the files its fix (revert --force,
    then apply) leaves: that fix does not make them pass, so it is not theirs to give."""
    failed = tuple(sorted({r.check for r in checks if r.failed}))
    leaves = as_its_fix_leaves(resolved, status) if status.drifted and failed and status.plan is not None else None
    if leaves is None or status.plan is None:
        return frozenset()
    context = replace(check_context(resolved, status.plan, import_probe=False), read=leaves[0], read_current=leaves[0])
    return frozenset(r.check for r in run_checks(context, failed) if r.failed)


def refuse_unchangeable(resolved: Resolved, known: Sequence[Patch] = (), status: TreeStatus | None = None) -> None:
    """A series file behind a symlinked directory, or a symlink or special file in its place: apply
    and revert refuse to write it (exit 2), so status and verify refuse it too rather than report a
    state patchkit could not change (or pass a phase 1 whose phase 2 would refuse). After the plan,
    as apply checks it: a path no file can have is the plan's refusal (exit 2), not this one's.
    Likewise a record revert refuses. A recorded file the guard refuses for the symlink, in
    `status` with the repair, is that tree state's failure (exit 1), as the guard's own file is."""

    refuse_unrevertable_record(resolved, read_state(resolved.target.root), known)
    if resolved.selection.kind != SelectionKind.PATCH:
        return
    paths = sorted({file.path for patch in resolved.patches for file in patch.files})
    if status is not None and status.symlink_fix:
        heads = Heads(status.guard)
        paths = [path for path in paths if not heads.any_starts(f"{path} ")]
    try:
        preflight(resolved.target.root, paths, writable=False)
    except BadInput as exc:
        hint = "apply and revert refuse this tree too: patchkit goes only through real directories to regular files"
        raise BadInput(exc.message, hint=exc.hint or hint) from None


def _tree_checks(
    resolved: Resolved, status: TreeStatus, import_probe: bool, verifying: Sequence[Check]
) -> list[CheckResult]:
    if status.plan is None:  # upstream or unsupported: what inspect ran on the stock files
        return list(status.checks)
    results = []
    # Applied: the files are on disk, so the probe can import them. Drifted: the hand edits are
    # what runs, so the checks name what they broke, conflict or not.
    on_disk = status.state == TreeState.APPLIED or bool(status.drifted)
    if on_disk or not status.plan.conflicts:
        context = check_context(resolved, status.plan, on_disk=on_disk, import_probe=import_probe)
        results = run_checks(context, verifying=verifying)
    # The files as on disk, conflict or not: stock (RECORD), stale bytecode.
    return (
        integrity.CHECK.run(check_context(resolved, status.plan))
        + results
        + shadow.scan(resolved.target.root, resolved.patches)
        + pyc.scan(resolved.target.root, status.plan.touched_paths, resolved.target.python)
    )


# --------------------------------------------------------------------------- revert


def resolve_for_revert(opts: Options, sets: dict[str, PatchSetDef] | None = None) -> tuple[Target, Resolved | None]:
    """The target, and its series where the library still covers its version: a recorded apply
    can be undone without it. `sets`: the library's sets, when loaded already (library_sets)."""

    target = resolve_target(opts)
    if several(opts, sets):  # what the tree records is undone, set by set
        return target, None
    try:
        resolved = resolve(opts, target=target, sets=sets)
        require_patches(resolved)
    except NoPatchSet:
        return target, None
    except PatchkitError:
        if opts.adhoc or not _records(target.root, opts.set_name):
            raise
        return target, None  # what the tree records is undone whatever the library holds
    return target, resolved


def earlier_apply_chosen(opts: Options) -> tuple[Options, Entry | None]:
    """`revert --patch FILE` where the record holds an apply of FILE's earlier text (FILE edited,
    or moved, since): that apply is what the user means to undo, chosen as its recorded set.
    Else the selection as given."""
    if not opts.adhoc:
        return opts, None
    state = read_state(resolve_target(opts).root)
    earlier = earlier_applies(state, opts.adhoc)
    if len(earlier) != 1:
        return opts, None
    try:
        name = adhoc_set_name([read_patch(Path(p), follow_symlinks=True) for p in opts.adhoc])
    except PatchkitError:  # the file is gone: its recorded apply is still the one to undo
        name = None
    if name is not None and state.entry(name) is not None:
        return opts, None
    return replace(opts, adhoc=(), set_name=earlier[0].set_name), earlier[0]


def covering_series(opts: Options, target: Target, sets: dict[str, PatchSetDef] | None) -> list[Patch]:
    """Every covering set's series, in the library's order: what a revert of every set reverse-applies
    on a tree that records no apply (its .patchkit/ lost or emptied), and compares with RECORD.
    None covers the tree (or its version cannot be told): no series."""
    try:
        chosen = judged(resolve_sets(opts, target, sets=sets))
    except PatchkitError:
        return []
    return [p for c in chosen if c.resolved is not None for p in require_patches(c.resolved)]


def nothing_to_undo(root: Path, state: State | None = None) -> bool:
    """No set recorded, no guard, no patched wheel, no unfinished transaction (the revert's lock
    rolls it back first): a revert of every set has nothing to do. `state`: the record as read."""
    if state is None and os.path.lexists(journal_path(root)):
        return False
    state = read_state(root) if state is None else state
    return not (state.entries or state.guard or own_unrecorded(root)) and _patched_wheel(root, None) is None


def _records(root: Path, set_name: str | None) -> bool:

    state = read_state(root)
    return state.entry(set_name) is not None if set_name else bool(state.entries)


def revert_series(
    target: Target,
    resolved: Resolved | None,
    only: str | None = None,
    *,
    force: bool = False,
    dry_run: bool = False,
    watch: Watcher | None = None,
    series: Sequence[Patch] = (),
) -> RevertResult:
    """Restore the stock files: the originals the record saved (checked by sha256), and the series
    patches it does not cover reverse-applied. Every set the tree records, or `only` that one (a
    later set that changed the same files again is refused: undo it first). `series`: without
    `resolved`, every covering set's (covering_series), undone where the tree records nothing."""

    watch = watch or Unwatched()
    patches = require_patches(resolved) if resolved else list(series)
    unlocked = _revert_unlocked(target, resolved, only, patches, force=force, dry_run=dry_run)
    if unlocked is not None:
        for note in unlocked.warnings:
            watch.warning(note)
        return unlocked
    with locked_record(target.root) as (recovered, state):
        if recovered:
            watch.warning(recovered)
        # nothing recorded (a rollback undid it, or a revert cut short after its commit left its store)
        if resolved is None and not patches and nothing_to_undo(target.root, state):
            result = RevertResult(Outcome.NOT_APPLIED, "nothing to revert: the tree records no apply of any set")
        else:
            result = _revert_locked(target, resolved, only, patches, state, force=force, dry_run=dry_run)
        if not dry_run and result.error is None:
            result.warnings += _without_empty_record(target.root, result, state)
        for note in result.warnings:
            watch.warning(note)
        if result.outcome in (Outcome.REVERTED, Outcome.BYTECODE_FAILED):  # written, so bytecode was fixed
            watch.checked(result.checks)
    if result.saved:
        said = _saved_said(result)
        # the copies alone, never .patchkit/: the apply that usually follows records the tree there
        said += f"; `{_deleting(result.saved)}` deletes them once not wanted"
        result.warnings.append(said)
        watch.warning(result.warnings[-1])
    if recovered:
        result.warnings.insert(0, recovered)
    return result


def _saved_said(result: RevertResult) -> str:
    """Where the copies a revert kept are: the user's edits (--force), and the files it could not
    prove stock once reversed, as they were."""
    said = []
    if result.saved_files:
        said.append(f"your edits to {', '.join(result.saved_files)}")
    if result.unproven:
        was = "it was" if len(result.unproven) == 1 else "they were"
        # more than a few: counted (a set's files are the revert's own line; 80 columns)
        named = ", ".join(result.unproven) if len(result.unproven) <= 3 else f"the {len(result.unproven)} files"
        said.append(f"{named} as {was} before the revert")
    verb = "were" if result.saved_files or len(result.unproven) > 1 else "was"  # "your edits … were"
    return f"{' and '.join(said)} {verb} saved under {result.saved}"


def _deleting(saved: Path) -> str:
    """The command that deletes the copies in `saved`, and saved/ with them when they are all it
    holds (rmdir takes an empty directory only: another run's copies stay)."""
    shown = shlex.join(["rm", "-r", str(saved)])
    alone = [p.name for p in saved.parent.iterdir()] == [saved.name]
    return f"{shown} && {shlex.join(['rmdir', str(saved.parent)])}" if alone else shown


def _revert_unlocked(
    target: Target,
    resolved: Resolved | None,
    only: str | None,
    patches: list[Patch],
    *,
    force: bool,
    dry_run: bool,
) -> RevertResult | None:
    """A dry run, or a revert of a tree no patchkit ever locked that finds nothing to write, said
    without taking the lock: nothing is created in the tree (None: the lock is needed)."""
    if not (dry_run or never_locked(target.root)):
        return None
    lock_timeout()  # a bad value is the command's error, lock or not
    with read_only_view(target.root, "revert") as settled:
        state = read_state(target.root) if settled else None
        would = (
            None if state is None else _revert_locked(target, resolved, only, patches, state, force=force, dry_run=True)
        )
    if would is None or dry_run:
        return would
    nothing = would.outcome == Outcome.NOT_APPLIED or (would.outcome == Outcome.DRY_RUN and not would.files)
    if nothing and not own_unrecorded(target.root):
        with suppress(OSError):  # an empty .patchkit/ a killed apply made: only an empty one goes
            meta_dir(target.root).rmdir()
        if not os.path.lexists(meta_dir(target.root)):  # else what is left there goes under the lock
            said = f"nothing to revert: {_stock_said(target.root, patches)}"
            return RevertResult(Outcome.NOT_APPLIED, said, warnings=would.warnings)
    return None


def _without_empty_record(root: Path, result: RevertResult, found: State) -> list[str]:
    """Once nothing is recorded, .patchkit/ goes too; the copies of the user's edits stay, said.
    `found`: the record read under the lock; when it was empty already and nothing was written,
    what is left is a killed command's (objects no record names, the lock): it goes too."""
    record = found if result.record is None else result.record  # nothing written: the record is what it was
    if not record.holds_nothing():
        return []
    prune_objects(root, record)  # no record names them, and a journal was recovered first
    kept = remove_empty_store(root, record)
    said = _left_in_store_said(root)
    if kept is None or result.saved is not None:  # this revert's copies are named on their own
        return said
    # a reminder, not a fault: the copies are the user's, so say how they go once not wanted
    return [*said, f"copies of your edits from an earlier `revert --force` stay; `rm -r {kept}` deletes them"]


def _left_in_store_said(root: Path) -> list[str]:
    """Files in .patchkit/ that patchkit did not write (no object's name, no file of its own) stay,
    and so does .patchkit/: said, with the command that removes them once not wanted."""
    left = left_in_store(root)
    if not left:
        return []
    meta = meta_dir(root)
    return [
        f"kept {len(left)} file(s) in {meta} that patchkit did not write ({few(left, sep=', ')}), and {meta} with "
        f"them; `rm -r {shlex.quote(str(meta))}` deletes them if you do not need them"
    ]


def _revert_locked(
    target: Target,
    resolved: Resolved | None,
    only: str | None,
    patches: list[Patch],
    state: State,
    *,
    force: bool,
    dry_run: bool,
) -> RevertResult:
    """The revert of the record `state` (read once, under the lock or in a settled view)."""
    reverting = _Reverting(
        target, patches, state, only, _undo_of(target, resolved, state, only, has_series=bool(patches))
    )
    return reverting.run(force=force, dry_run=dry_run)


# a step of one command, never compared nor printed: no __eq__ or __repr__ compiled at every start-up
@dataclass(eq=False, repr=False)
class _Reverting:
    """One revert of the record `state`, in phases: plan the reversal, refuse what it cannot undo,
    then write the files, or the record alone when no file changes."""

    target: Target
    patches: list[Patch]
    state: State
    only: str | None
    undo: _Undo
    warnings: list[str] = field(default_factory=list)
    alone: list[str] = field(default_factory=list)  # written back on the record's word alone (--force)

    @property
    def root(self) -> Path:
        return self.target.root

    def run(self, *, force: bool, dry_run: bool) -> RevertResult:
        undo = self.undo
        self.warnings += [
            f"{note}: {'would drop' if dry_run else 'dropped'} the record of {name}; none of its files is written"
            for name, note in undo.stale.items()
        ]
        for entry in undo.entries:
            _refuse_created_stock_files(self.root, entry, undo.installed)
            refuse_unvouched(self.root, entry, self.patches)
            _refuse_another_releases_originals(self.root, entry, undo.installed)
        self.undo = undo = replace(undo, entries=[self.without_reinstalled(e, dry_run=dry_run) for e in undo.entries])
        view = View(self.root)
        restored = _restore_from_record(view, undo, self.patches, force=force)
        self.warnings += restored.notes
        plan, unrecorded = self.planned(view)
        refused = self.refused(plan, unrecorded)
        if refused is not None:
            return refused
        self.refuse_writing_under_records(plan, unrecorded)
        unsure = list(restored.unvouched)  # a patched wheel's, on its own word: a copy is kept
        if undo.wheel is None:  # a patched wheel's RECORD lists its patched files: no stock to tell edits by
            installed = undo.installed
            restored.edited += edited_unrecorded(self.root, view, unrecorded, installed, force=force, dry_run=dry_run)
            unsure += unproven(self.root, view, unrecorded, installed)
        files = sorted(plan.changes)
        self.refuse_unvouched_originals(view, plan, restored, force=force)
        preflight(self.root, files, writable=not dry_run)
        if dry_run:
            _unlike, copied = self.to_keep(plan, restored, unsure, dry_run=True)
            said = _would_restore(files, self.undo.entries) + _would_keep(self.root, copied)
            return RevertResult(Outcome.DRY_RUN, said, files, warnings=self.warnings, kept=copied)
        guard_changes, new_state, removed = self.record_after()
        if not plan.changes:
            return self.record_only(guard_changes, new_state, removed)
        return self.write(plan, view, restored, unsure, (guard_changes, new_state, removed))

    def without_reinstalled(self, entry: Entry, *, dry_run: bool) -> Entry:
        """The entry less the files pip wrote since its apply (pip_wrote: vLLM reinstalled): the
        installed build's file stays, never the old install's original over it; its record goes."""
        found = pip_wrote(self.root, self.state, entry, self.undo.installed)
        if not found:
            return entry
        one = len(found) == 1
        self.warnings.append(
            f"{', '.join(found)} {'was' if one else 'were'} written by pip when vLLM was reinstalled (its RECORD "
            f"lists {'these' if one else 'their'} bytes): {'would be ' if dry_run else ''}kept as installed, "
            f"{'its' if one else 'their'} record {'would be ' if dry_run else ''}dropped"
        )
        return entry.without_files(found)

    def planned(self, view: View) -> tuple[Plan, list[Patch]]:
        """The reversal of the series' patches the record does not cover, on top of the restored originals."""
        unrecorded, found_only = _unrecorded(self.undo, self.patches, self.only, self.root)
        plan = plan_revert(self.root, unrecorded, view=view, found_only=found_only)
        if plan.left:  # none of the unnamed sets' patches found applied: their edited files are said, and left
            self.warnings.append(_left_unnamed(self.root, plan.left))
        return plan, [step.patch for step in plan.steps] if found_only else unrecorded  # reversed: the same paths

    def refused(self, plan: Plan, unrecorded: list[Patch]) -> RevertResult | None:
        """A series that does not reverse: nothing to undo (never applied), or a conflict."""
        if not plan.conflicts:
            return None
        if not self.undo.entries and not _any_applied(self.root, unrecorded):
            # an edit inside a hunk of a tree never applied: nothing to undo, nothing lost
            said = f"nothing to revert: {_stock_said(self.root, self.patches)}"
            return RevertResult(Outcome.NOT_APPLIED, said, warnings=self.warnings)
        return RevertResult(
            Outcome.CONFLICT,
            warnings=self.warnings,
            error=Conflict(
                "cannot reverse the series; nothing was written:\n  " + plan.describe_conflicts("\n  "),
                hint=_unnamed_conflict_hint(self.root) if self.undo.entries else _unrecorded_conflict_hint(self.root),
            ),
        )

    def refuse_writing_under_records(self, plan: Plan, unrecorded: list[Patch]) -> None:
        """Diffs no record holds are reversed only where no other set's record names the file: that
        set's record would still call it patched (eagle3 half-reverted, its gate admitting)."""
        reverting = {e.set_name for e in self.undo.entries} | set(self.undo.stale)
        owned = {p: e.set_name for e in self.state.entries if e.set_name not in reverting for p in e.files}
        hit = sorted(p for p in set(plan.changes) & set(touched_paths(unrecorded)) if p in owned)
        if not hit:
            return
        name = owned[hit[0]]
        entry = self.state.entry(name)
        assert entry is not None
        raise Conflict(
            f"{escaped(hit[0])} is in set {name}'s record, not this diff's: reversing it there would "
            f"leave {name} half-reverted; nothing was written",
            hint=f"to undo {name}: {hints.command('revert', chosen=selection_of(entry))}",
        )

    def record_after(self) -> tuple[dict[str, tuple[bytes | None, bytes | None]], State, str]:
        """The record once reverted, the guard's removal when no set is left, and the line's note of it."""
        wheel_left = self.undo.wheel is None and _patched_wheel(self.root, None) is not None
        dropped = self.undo.dropped_from(self.state)
        if self.only is not None and any(e.set_name == self.only for e in self.undo.entries):
            dropped = dropped.with_reverted(self.only)  # status says so, not "no apply chose"
        guard_changes, new_state, kept = _without_guard(self.root, dropped, wheel_left=wheel_left)
        removed = "; launch guard removed" if guard_changes else ""
        start, end = UNRECORDED_GUARD_REMOVED
        whole = [note for note in kept if note.startswith(start) and note.endswith(end)]
        if whole:  # said once, in the result's line
            kept, removed = [note for note in kept if note not in whole], f"{removed} (no record named it)"
        self.warnings += kept
        return guard_changes, new_state, removed

    def record_only(
        self, guard_changes: dict[str, tuple[bytes | None, bytes | None]], new_state: State, removed: str
    ) -> RevertResult:
        """No file to write: a record of files already stock goes too (it describes none), and the guard."""
        left = self.state
        if self.undo.stale or guard_changes or self.undo.entries:
            commit_changes(self.root, guard_changes, new_state)
            _fix_guard_bytecode(self.target, guard_changes)
            left = new_state
        said = _nothing_said(self.root, self.undo, self.only, left, removed, self.patches)
        return RevertResult(Outcome.NOT_APPLIED, said, warnings=self.warnings, record=left)

    def refuse_unvouched_originals(self, view: View, plan: Plan, restored: Restored, *, force: bool) -> None:
        """Without --force, no file goes back to an original only the record vouches for (no vLLM
        RECORD lists it, the recorded patches reversed do not give it): the record is read back from
        the tree, and a planted one names any bytes. With it, they go back and a copy of each file
        they replace is kept (write)."""
        self.alone = sorted({*self.on_the_records_word(view, plan.changes), *restored.alone})
        if not self.alone or force:
            return
        sets = ", ".join(shown_set(e) for e in self.undo.entries if set(e.files) & set(self.alone))
        where = escaped(self.alone[0]) if len(self.alone) == 1 else f"{len(self.alone)} files"
        listed = (
            "".join(f"\n  {escaped(path)}" for path in self.alone) if len(self.alone) > 1 else ""
        )  # one a line, as git
        raise CheckFailed(
            f"nothing but {state_path(self.root)} vouches for what revert would put back at {where} (the record "
            f"of {sets}: no vLLM RECORD lists those bytes there, and the recorded patches reversed do not give "
            f"them); nothing was written{':' if listed else ''}{listed}",
            hint=f"if that record is yours, {hints.command('revert', '--force')} puts it back and keeps a copy of "
            f"what it replaces; else put the stock files back with {stock_files_command(self.root, self.undo.installed)}",
        )

    def found_unproven(self, changes: Changes) -> list[str]:
        """The files this revert writes back to an original an apply found by reversing the hunks
        (no record of the set then) that no vLLM RECORD vouches for: nothing proved them stock."""
        found = _found_files(self.undo.entries)
        written = {path: after for path, (_before, after) in changes.items() if path in found}
        return unproven_found(self.root, self.undo.installed, written)

    def on_the_records_word(self, view: View, changes: Changes) -> list[str]:
        """The files written back with an original that neither vLLM's RECORD lists nor the recorded
        patches reversed give: only the record says so, and it is read back from the tree (a planted
        one names any bytes), so the file it replaces is kept."""
        recorded = {(p["name"], p["sha256"]) for e in self.undo.entries for p in e.patches}
        given = [p for p in self.patches if (p.name, p.sha256) in recorded]
        own = given + [
            p
            for e in self.undo.entries
            for p in patches_at_hand(e, self.root)
            if p.sha256 not in {g.sha256 for g in given}
        ]
        restored = {path for e in self.undo.entries for path in e.files} - view.from_release
        written = {path: data for path, data in _written(changes).items() if path in restored}
        listed = _tree_record(self.root, list(written))
        # vouched for: vLLM's RECORD lists these very bytes (a path it lists with others' is no proof)
        return sorted(
            path
            for path, data in written.items()
            if (listed is None or path not in listed.hashes or not listed.matches(path, data))
            and reverse_file(view.original_content, path, own, digest=False) != data
        )

    def not_the_patches_output(self, changes: Changes) -> tuple[list[str], list[str]]:
        """The recorded files this revert writes over whose bytes are not what the recorded patches
        make of their originals: the record's "after" is read back from the tree (a planted one names
        any bytes, a hotfix's), so only the series reversed back to the original proves them
        patchkit's. Then the files of a set whose recorded patches are not at hand: nothing proves
        them (the other sets' files are judged by theirs). A patch is known by its bytes (sha256):
        the name a record gives it is read back from the tree too."""
        paths = [p for e in self.undo.entries for p in e.files if p in changes and changes[p][0] is not None]
        if not paths:
            return [], []
        at_hand = {p.sha256: p for p in self.patches}

        def missing(entry: Entry) -> bool:
            return any(p["sha256"] not in at_hand for p in entry.patches)

        for entry in [e for e in self.undo.entries if missing(e)]:
            at_hand.update({p.sha256: p for p in patches_at_hand(entry, self.root)})
        unknown = {path for e in self.undo.entries if missing(e) for path in e.files}
        judged = [path for path in paths if path not in unknown]
        # what the revert writes: the first set's original, read (and its sha256 checked) once by the plan
        originals = {path: after for path, (_before, after) in changes.items()}
        # the recorded series reversed from the bytes there gives the original only where those bytes are its
        # output (an edit outside its hunks stays, one inside them does not reverse); compared, never hashed
        recorded = [p["sha256"] for e in self.undo.entries if not missing(e) for p in e.patches]
        series = [at_hand[digest] for digest in dict.fromkeys(recorded)]
        there = {path: before for path, (before, _after) in changes.items()}
        # a file the series created (the revert deletes it) has no original to reverse to: made forward instead
        unmade = {
            path
            for path in judged
            if (
                made_file(originals.get, path, series, digest=False) != there[path]
                if originals[path] is None
                else reverse_file(there.get, path, series, digest=False) != originals[path]
            )
        }
        return sorted(unmade), sorted(set(paths) & unknown)

    def to_keep(
        self, plan: Plan, restored: Restored, unsure: list[str], *, dry_run: bool = False
    ) -> tuple[list[str], list[str]]:
        """The files written back unlike vLLM's RECORD, and those the revert keeps a copy of (`unsure`
        grows by the found files nothing proves stock), said for a dry run as for the revert."""
        # the files as they were, where nothing proves the revert gives stock: the user's edit, maybe;
        # and where the record's original is not vLLM's own file (the user's edit apply --force took, or
        # a planted record's bytes: the file it replaces is kept)
        unlike = _unlike_record(self.root, plan.changes)
        unsure += [path for path in self.found_unproven(plan.changes) if path not in unsure + unlike]
        unmade, unjudged = (
            [p for p in found if p not in restored.edited] for found in self.not_the_patches_output(plan.changes)
        )
        kept = "a copy would be kept" if dry_run else "a copy is kept"
        self.warnings += [
            f"{escaped(path)} held bytes the recorded patches do not make of its original (edited since?): {kept}"
            for path in unmade
        ] + [
            f"{escaped(path)}: the patches its record names are in no library at hand, so nothing proves it held "
            f"their output: {kept}"
            for path in unjudged
        ]
        # and where nothing but the record (read back from the tree) says what the file held before (--force)
        others = [*unsure, *unlike, *self.alone, *unmade, *unjudged]
        copied = [*restored.edited, *(p for p in others if p not in restored.edited and os.path.lexists(self.root / p))]
        return unlike, list(dict.fromkeys(copied))

    def not_the_release(self, plan: Plan) -> list[str]:
        """The files written back unlike the published wheel's RECORD of the tree's release, where the
        fetch cache holds it (no network): a vendor's build lists its own bytes in vLLM's RECORD, so
        that RECORD alone does not make them the release's."""
        written = _written(plan.changes)
        published = integrity.published_record(self.undo.installed, set(written)) if written else None
        if published is None:
            return []
        return sorted(p for p, data in written.items() if p in published.hashes and not published.matches(p, data))

    def write(
        self,
        plan: Plan,
        view: View,
        restored: Restored,
        unsure: list[str],
        after: tuple[dict[str, tuple[bytes | None, bytes | None]], State, str],
    ) -> RevertResult:
        """The files and the record written in one commit, their bytecode fixed."""
        guard_changes, new_state, removed = after
        root = self.root
        unlike, copied = self.to_keep(plan, restored, unsure)
        alone = self.alone
        changes = {**plan.changes, **guard_changes}
        saved = keep_copies(root, copied, after=commit_needs(changes)) if copied else None  # a full disk: the sum
        modes = _recorded_modes(self.undo.entries, plan.changes)
        gates = {path for entry in self.undo.entries for path in _gates_of(entry)}
        commit_changes(root, changes, new_state, origins=view.origins, modes=modes, first=gates)
        bytecode = fix_bytecode(self.target, plan.changes) + _fix_guard_bytecode(self.target, guard_changes)
        files = sorted(plan.changes)
        result = RevertResult(
            Outcome.REVERTED,
            f"reverted: {_reverted_said(len(files), len(unsure), unlike, alone, self.not_the_release(plan))}{removed}",
            files,
            checks=bytecode,
            saved=saved,
            saved_files=restored.edited,
            unproven=[path for path in copied if path not in restored.edited],
            warnings=self.warnings,
            record=new_state,
        )
        return _refuse_stale_revert(result)


def _found_files(entries: list[Entry]) -> set[str]:
    """The files the entries record as found patched (their original is the hunks reversed)."""
    return {path for entry in entries for path, shas in entry.files.items() if shas.get("found") is True}


def _unlike_record(root: Path, changes: Changes) -> list[str]:
    """The files a revert writes back unlike vLLM's RECORD lists them: apply --force took them
    edited, so their original is the user's edit, not stock."""
    written = _written(changes)
    parsed = _tree_record(root, list(written))
    if parsed is None:
        return []
    return sorted(path for path, data in written.items() if path in parsed.hashes and not parsed.matches(path, data))


def _would_restore(files: list[str], entries: list[Entry]) -> str:
    """A dry run's line: the files, and the records of the sets it undoes (a set the library at hand
    lacks is named here, or nowhere)."""
    named = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    sets = ", ".join(shown_set(e) for e in entries)
    return f"would restore {len(files)} file(s){': ' + named if files else ''}" + (
        f" (the record of {sets})" if sets else ""
    )


def _would_keep(root: Path, copied: list[str]) -> str:
    """A dry run's word on the copies the revert would keep, as the revert names them."""
    if not copied:
        return ""
    named = ", ".join(copied) if len(copied) <= 3 else f"the {len(copied)} files"
    return f"; would keep a copy of {named} under {meta_dir(root) / 'saved'}/"


def _written(changes: Changes) -> dict[str, bytes]:
    return {path: after for path, (_before, after) in changes.items() if after is not None}


def _tree_record(root: Path, paths: list[str]) -> Record | None:
    """vLLM's RECORD as it lists `paths` (None: no RECORD, or a patched wheel's, which lists them patched)."""
    return tree_record(root, None, paths) if paths else None


def _reverted_said(
    count: int, unsure: int, unlike: list[str], alone: Sequence[str] = (), vendor: Sequence[str] = ()
) -> str:
    """How many files a revert wrote, and how many of them it can call stock (revert27: without a
    RECORD, a series reversed is all it can say; `unlike`: those back unlike vLLM's RECORD; `alone`:
    those back as only the record says they were; `vendor`: those back as vLLM's RECORD lists them,
    unlike the published release's)."""
    reversed_ = "the series' hunks reversed (no vLLM RECORD proves them stock)"
    vendor = [path for path in vendor if path not in unlike]
    if unlike or alone or vendor:
        said = [f"{len(unlike)} not stock: {', '.join(unlike)}"] if unlike else []
        said += (
            [f"{len(vendor)} as this build's RECORD lists, not the release's: {', '.join(vendor)}"] if vendor else []
        )
        said += [f"{len(alone)} as only the record says: {', '.join(alone)}"] if alone else []
        said += [f"{unsure} with {reversed_}"] if unsure else []
        return f"{count} file(s) restored as before apply ({'; '.join(said)})"
    if not unsure:
        return f"{count} file(s) restored to stock"
    if unsure == count:
        return f"{count} file(s) with {reversed_}"
    return f"{count} file(s): {count - unsure} restored to stock, {unsure} with {reversed_}"


def _any_applied(root: Path, patches: list[Patch]) -> bool:
    """Whether a patch of these is found applied on the tree (its change there, as a dry run finds it)."""
    return any(step.state == StepState.ALREADY_APPLIED for step in plan_apply(root, patches).steps)


def _unnamed_conflict_hint(root: Path) -> str:
    """A set the record does not name, found applied, with a file that no longer takes
    its reverse (edited inside a hunk): said, not left patched under "reverted"."""
    return (
        "the record does not name every set found applied, so only their series could undo them; "
        f"{stock_files_command(root, None)} puts the stock files back (edits to them are lost)"
    )


def _left_unnamed(root: Path, left: list[PatchStep]) -> str:
    """A file of a set the record does not name, and none of that series found applied: neither its
    stock text nor the set's change (an edit?), so nothing tells what to undo: left, and said."""
    files = ", ".join(sorted({escaped(f.path) for step in left for f in step.patch.files}))
    return (
        f"{files}: neither the stock text nor the change of a set the record does not name (your edit?): "
        f"left as it is; {stock_files_command(root, None)} puts the stock files back"
    )


def _unrecorded_conflict_hint(root: Path) -> str:
    """A tree that records no apply can only be undone by reversing the series: where a file no
    longer takes it (edited), the stock files come back from the release."""
    return (
        "the tree records no apply (its .patchkit/ lost or emptied), so only the series could undo it; "
        f"{stock_files_command(root, None)} puts the stock files back (edits to them are lost)"
    )


def _nothing_said(root: Path, undo: _Undo, only: str | None, left: State, removed: str, patches: list[Patch]) -> str:
    """A revert that wrote no file: the tree is stock, or (with --set) only that set's files are.
    Without a record, "stock" only as far as vLLM's RECORD vouches for the series' files."""
    others = [e.set_name for e in left.entries]
    if only is not None and not undo.entries and others:  # the other sets' files are not stock
        return f"nothing to revert: {only} is not applied (the tree records {', '.join(others)})"
    dropped = " (its record dropped)" if undo.entries else ""
    if undo.entries:  # one set's revert speaks of its files only: the others may be applied
        stock = f"the files of {only} are stock" if only is not None else "the tree is stock"
    else:
        stock = _stock_said(root, patches)
    return f"nothing to revert: {stock}{dropped}{removed}"


def _stock_said(root: Path, patches: list[Patch]) -> str:
    """What a revert that found no record may say of the tree: "stock" only when vLLM's RECORD
    vouches for every file the series names (each there with its hash, or absent and unlisted);
    else only that nothing is recorded, and which files differ from the RECORD."""
    paths = touched_paths(patches)
    record = find_record(root)
    if not paths:  # no series for the tree (its changes are upstream): nothing to compare
        return "the tree records no apply"
    if record is None:
        return "the tree records no apply (no RECORD to compare its files with)"
    if patched_build(root, record.parent):  # its RECORD lists the patched files: no proof of stock
        return _patched_build_said(root, record.parent)
    label = record.parent.name + "/RECORD"
    try:
        parsed = parsed_record(read_record_file(root, record), label, only=paths)
    except OSError as exc:
        return f"the tree records no apply, and {label} could not be read to compare its files with: {exc.strerror}"
    if parsed is None:
        return f"the tree records no apply, and {label} is no RECORD csv can read to compare its files with"
    differ = [path for path in paths if not _as_recorded(root, path, parsed)]
    if not differ:
        return "the tree is stock (its files are as vLLM's RECORD lists them)"
    return (
        f"the tree records no apply, but {', '.join(differ[:3])}{' and more' if len(differ) > 3 else ''} "
        f"{'differs' if len(differ) == 1 else 'differ'} from vLLM's RECORD; {stock_files_command(root, None)} "
        "puts the stock files back"
    )


def _patched_build_said(root: Path, dist_info: Path) -> str:
    """A tree installed from a patched wheel that records no apply: never "stock", and what undoes
    the wheel (a revert of it; its provenance lost, the stock wheel reinstalled)."""
    if installed_wheel_reader().find(root) is None:  # a `+patchkit…` label, its record lost
        undo = (
            f"{stock_files_command(root, dist_info.name[len('vllm-') : -len('.dist-info')])} puts the stock files back"
        )
    else:
        every = hints.command("revert", chosen=replace(hints.current(), set_name=None, set_names=()))
        undo = f"{every} reverts the wheel's patches"
    return f"the tree records no apply, but its vLLM is a patched wheel's ({dist_info.name}), not stock; {undo}"


def _as_recorded(root: Path, path: str, record: Record) -> bool:
    """The file is as vLLM's RECORD lists it: there with its hash, or absent and not listed."""
    try:
        data = read_file(root / path)
    except OSError:
        return False
    if data is None:
        return path not in record.hashes and path not in record.untrusted and not os.path.lexists(root / path)
    return path in record.hashes and record.matches(path, data)


@dataclass(eq=False, repr=False)
class _Undo(Value):
    """What a revert undoes: the recorded sets it restores, those an upgrade of vLLM left stale
    (their records dropped, no file written), and a patched wheel's own patches."""

    entries: list[Entry]
    stale: dict[str, str]  # set name -> why its record is stale
    wheel: Provenance | None  # installed from a patched wheel, no apply recorded
    installed: Version | None  # the installed vLLM, when it can be told

    def dropped_from(self, state: State) -> State:
        for name in [*self.stale, *(e.set_name for e in self.entries)]:
            state = state.without(name)
        return state


def _undo_of(target: Target, resolved: Resolved | None, state: State, only: str | None, *, has_series: bool) -> _Undo:
    """What the record says to undo (refused when there is nothing at all, not even a series)."""
    root = target.root
    entries = _entries_to_revert(state, only)
    installed = resolved.vllm_version if resolved else _installed_version(target)
    stale = {e.set_name: note for e in entries if (note := stale_note(root, e, installed))}
    entries = [e for e in entries if e.set_name not in stale]
    # A patched wheel's own patches are undone with the sets applied on it (a record left stale by its
    # install describes no file), never one set of it alone: only a set with an apply of its own is.
    wheel = None if only is not None and state.entry(only) is not None else _patched_wheel(root, only)
    if (
        resolved is None
        and not has_series
        and not entries
        and not stale
        and wheel is None
        and not state.guard
        and not own_unrecorded(root)
    ):
        raise NoPatchSet("no patch series for this vLLM version and no record of an apply to undo")
    return _Undo(entries, stale, wheel, installed)


def _restore_from_record(view: View, undo: _Undo, patches: list[Patch], *, force: bool) -> Restored:
    """The originals the record saved back in `view` (the last applied first: its "before" is what
    the earlier one wrote), or a patched wheel's stock files."""
    restored = Restored()
    view.stock = functools.partial(release_original, view.root)
    for index, entry in reversed(list(enumerate(undo.entries))):
        later = undo.entries[index + 1 :]  # reverted one by one, last first, before this one alone
        first = tuple(hints.command("revert", chosen=selection_of(e)) for e in reversed(later))
        restore_recorded(view, entry, force=force, patches=patches, restored=restored, first=first)
    if undo.wheel is not None:
        from_wheel = installed_wheel_reader().restore_stock(
            view, undo.wheel, force=force, fetch_release=fetch.release_tree
        )
        restored.edited += from_wheel.edited
        restored.notes += from_wheel.notes
        restored.unvouched += from_wheel.unvouched
    return restored


def _gates_of(entry: Entry) -> set[str]:
    """The files of `entry` a revert writes first: those its record marks as gates. A record written
    before the marks existed (no file marked) takes the `gates` its set declares in the library it was
    applied from, where that library is at hand: a gate sorting after a model would otherwise go last."""
    marked = {path for path, shas in entry.files.items() if shas.get("gate")}
    if marked or entry.library is None or is_adhoc(entry.set_name):
        return marked
    try:
        declared = load_library(Path(entry.library)).get(entry.set_name)
    except (PatchkitError, OSError):  # gone, damaged: path order, as before the marks
        return set()
    return set(declared.gates if declared is not None else ()) & set(entry.files)


def _recorded_modes(entries: list[Entry], changes: Changes) -> dict[str, int]:
    """path -> the permission bits its original had when it was first recorded, for each file the
    revert gives that original back (apply may have widened them: o+r for the launch guard)."""
    modes: dict[str, int] = {}
    for entry in entries:  # in the order applied: the first set's original is the stock file
        for path, shas in entry.files.items():
            restored = changes.get(path, (None, None))[1]
            if "mode" in shas and restored is not None and sha256(restored) == shas["before"]:
                modes.setdefault(path, shas["mode"])
    return modes


def _unrecorded(undo: _Undo, patches: list[Patch], only: str | None, root: Path) -> tuple[list[Patch], bool]:
    """The series' patches to reverse-apply: those the record does not cover (applied by hand), and
    whether only those of them found applied are (planned once: plan_revert's found_only).
    Reverse-applying a recorded one again could re-insert an insertion-only hunk. `revert` alone
    undoes what the tree records, whatever the library holds; its series only when the tree
    records nothing."""
    recorded = {(p["name"], p["sha256"]) for e in undo.entries for p in e.patches}
    if undo.wheel is not None:
        recorded |= set(undo.wheel.patch_hashes)
    found_only = False
    if only is not None or not (undo.entries or undo.stale):
        series = patches
    elif undo.stale:  # another release installed: the series is not this tree's
        series = []
    else:  # a record naming some sets: the others' patches found applied go too
        paths = {path for e in undo.entries for path in e.files}
        series = [p for p in patches if not any({f.path, f.source_path or f.path} & paths for f in p.files)]
        found_only = True
    stock = _stock_by_record(root, touched_paths(series))
    # a file that matches vLLM's RECORD is stock (upstream's own fix, maybe): never reversed
    kept = [p for p in series if (p.name, p.sha256) not in recorded and not stock & set(touched_paths([p]))]
    return kept, found_only


def _stock_by_record(root: Path, paths: list[str]) -> set[str]:
    """Those of `paths` whose file is as the tree's vLLM RECORD lists it (none without a RECORD)."""
    record = find_record(root)
    if record is None or not paths:
        return set()
    try:
        parsed = parsed_record(read_record_file(root, record), record.parent.name + "/RECORD", only=paths)
    except OSError:
        return set()
    if parsed is None:
        return set()
    return {path for path in paths if path in parsed.hashes and _as_recorded(root, path, parsed)}


def _refuse_a_record_too_large(root: Path, state: State) -> None:
    """A record no command would read back (store.state.record_size_damage) is never written."""
    too_large = state.size_problem()
    if too_large is not None:
        raise BadInput(
            f"{state_path(root)} would be larger than patchkit records: {too_large}; nothing was written",
            hint=f"revert the sets you no longer use ({hints.command('revert', '--set', 'NAME')}), "
            "or check the patch files: none of vLLM's changes names so many",
        )


def refuse_unrevertable_record(resolved: Resolved, state: State, known: Sequence[Patch] = ()) -> None:
    """A record revert refuses (a file it says patchkit created is an installed distribution's own):
    status and verify refuse it as revert does (exit 2), never "applied" beside a revert that fails."""
    root, installed = resolved.target.root, resolved.vllm_version
    judged = [entry for entry in state.entries if stale_note(root, entry, installed) is None]
    # the RECORDs read once for every entry's created files, not once per entry
    listed = listings(root, {path for entry in judged for path, shas in entry.files.items() if shas["before"] is None})
    for entry in judged:
        _refuse_created_stock_files(root, entry, installed, listed)
        refuse_unvouched(root, entry, [*resolved.patches, *known])


def _refuse_created_stock_files(
    root: Path, entry: Entry, installed: Version | None, listed: Listings | None = None
) -> None:
    """A record that says patchkit created a file (no original) which an installed distribution's
    RECORD lists as its own (vLLM's, torch's) is no record patchkit wrote: reverting it would delete
    that file. (A vLLM installed from a patched wheel lists the files its patches add: not judged.)
    `listed`: the RECORDs' listings of these files, when read already."""
    created = sorted(path for path, shas in entry.files.items() if shas["before"] is None)
    listed = listings(root, created) if listed is None else listed
    stock = sorted(listed.by_others() & set(created))
    if created and installed is not None and not has_provenance(root):
        vllms = listed.by_vllm(installed)
        stock += [path for path in created if path in vllms]
    if stock:
        origin = state_path(root)
        raise BadInput(
            f"{origin} says patchkit created {escaped(stock[0])}, but an installed distribution's RECORD lists it as its own "
            "file: reverting that record would delete it; nothing was written",
            hint=f"inspect or remove {origin} (patchkit records no original only for a file its patches add)",
        )


def _refuse_another_releases_originals(root: Path, entry: Entry, installed: Version | None) -> None:
    """A record of another vLLM release than the installed one, with a file neither as patchkit
    left it nor its original: pip (or an edit since) replaced it, and the originals patchkit saved
    are that other release's files. Restoring them, even with --force, would mix two releases."""
    if installed is None or not entry.vllm_version or entry.vllm_version == str(installed):
        return
    for path, shas in sorted(entry.files.items()):
        current = sha256(read_file(root / path))
        if current not in (shas["before"], shas["after"]):
            # a checkout's files are put back by git (or its source), not pip: stale once none is patchkit's
            back = checkout_restore(root, sorted(entry.files))
            raise Drift(
                f"{escaped(path)} is not the file patchkit patched: the record is of vLLM {entry.vllm_version}, vLLM "
                f"{installed} is installed, and the originals it saved would mix the two; nothing was written",
                hint=f"{back} (vLLM {installed}'s files back), then {hints.command('apply')} (it drops the record)"
                if back
                else f"reinstall vLLM ({hints.pip_reinstall(installed)}), then "
                f"{hints.command('apply')} (it drops the record once its files are stock)",
            )


def _patched_wheel(root: Path, only: str | None) -> Provenance | None:
    """The provenance of a vLLM installed from a patched wheel (and no apply recorded), when the
    revert is of its set (or of everything)."""
    found = installed_wheel_reader().find(root)
    if found is not None and len(found.set_names) > 1 and only is not None and only in found.set_names:
        raise _one_set_of_the_wheel(found, only)
    return found if found is not None and only in (None, found.name) else None


def _one_set_of_the_wheel(found: Provenance, only: str) -> BadInput:
    """The refusal of `revert --set` of one set of a wheel of several: its files are the installed
    wheel's (no original of patchkit's), and the guard holds that wheel's files all patched or all
    stock. What does it: every set reverted, or another wheel installed."""
    everything = hints.command("revert", chosen=replace(hints.current(), set_name=None, set_names=()))
    others = [name for name in found.set_names if name != only]
    without = hints.command(
        "wheel", found.vllm_version, *(w for name in others for w in ("--set", name)), chosen=hints.for_set(None)
    )
    return BadInput(
        f"vLLM was installed from a wheel of several sets ({found.name}): {only}'s files are that wheel's, "
        "so its sets are reverted together",
        hint=f"{everything} reverts every set; to drop only {only}, build a wheel without it ({without}) and "
        f"install it, or reinstall the stock wheel ({hints.pip_reinstall(found.vllm_version)}) and apply the sets you use",
    )


UNRECORDED_GUARD_REMOVED = ("removed this patchkit's launch guard (", ": no record named it")  # its whole removal


def _without_guard(
    root: Path, state: State, *, wheel_left: bool = False
) -> tuple[dict[str, tuple[bytes | None, bytes | None]], State, list[str]]:
    """Once no set is recorded, the guard goes too: the writes that remove it (a guard file changed
    since patchkit wrote it is kept, and said; a user's file `apply --guard` replaced is put back),
    and the state without it. With no guard recorded (state.json removed by hand), this patchkit's
    guard goes where its files have its very bytes, and only those. `wheel_left`: a patched wheel's
    set is still in place, and the recorded guard holds it too (kept)."""
    if state.entries or (wheel_left and state.guard):
        return {}, state, []
    if not state.guard:
        found = own_unrecorded(root)
        changes, kept = removal_changes(root, found) if found else ({}, [])
        return changes, state, kept + _unrecorded_guard_removed(root, changes)
    changes, kept = removal_changes(root, state.guard, state.guard_replaced)
    return changes, state.with_guard({}), kept


def _unrecorded_guard_removed(root: Path, changes: dict[str, tuple[bytes | None, bytes | None]]) -> list[str]:
    """What a revert says of the unrecorded guard files it removes: a module that is not this
    patchkit's (a user's own, at the guard's name) stays, and is said to."""
    if not changes:
        return []
    infos = sorted({path.partition("/")[0] for path in changes if "/" in path})
    whose = "this patchkit's" if dist_info() in infos or not infos else "an older patchkit's"
    if MODULE in changes:
        what = f"({MODULE} and its dist-info)" if infos else f"module ({MODULE})"
        return [f"removed {whose} launch guard {what}: no record named it"]
    kept = f"; kept {MODULE}: not this patchkit's guard module" if os.path.lexists(root / MODULE) else ""
    return [f"removed {whose} launch guard's dist-info ({', '.join(infos)}): no record named it{kept}"]


def _fix_guard_bytecode(target: Target, removed: Changes) -> list[CheckResult]:
    """The guard's .pyc goes with its source (and the __pycache__/ that held only it). Only a .pyc
    that could not be removed is reported: the guard is no file of the series."""
    if not removed:
        return []
    results = fix_bytecode(target, removed)
    remove_empty_cache(target.root)
    return [r for r in results if r.failed]


def _entries_to_revert(state: State, only: str | None) -> list[Entry]:
    """The recorded sets a revert undoes, in the order they were applied: all, or `only` that one."""
    if only is None:
        return list(state.entries)
    entry = state.entry(only)
    if entry is None:
        return []
    later = state.overlapping(entry)
    if later:
        path, name = sorted(later.items())[0]
        # every set applied after it, last first, then this one: each step is a revert of the last set
        order = [hints.command("revert", chosen=selection_of(e)) for e in reversed(state.later(entry))]
        order.append(hints.command("revert", chosen=selection_of(entry)))
        raise Conflict(
            f"{escaped(path)} was changed again by set {name}, applied after {only}: reverting {only} alone would "
            f"undo {name} there too; nothing was written",
            hint=f"revert the sets applied after {only} first: {', then '.join(order)}",
        )
    return [entry]


def _installed_version(target: Target) -> Version | None:
    """The installed vLLM version when it can be told (only to recognise a stale record)."""

    try:
        return detect(target).version
    except PatchkitError:
        return None


def _refuse_stale_revert(result: RevertResult) -> RevertResult:
    stale = [r for r in result.checks if r.failed]
    if stale:
        result.outcome = Outcome.BYTECODE_FAILED
        result.error = CheckFailed(
            f"reverted {len(result.files)} file(s), but compiled bytecode of the patched code could not "
            "be fixed:\n  " + pyc.failures(stale),
            hint=pyc.FIX,
        )
    return result
