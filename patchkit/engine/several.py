"""Several sets on one tree: `apply` without --set applies every set of the library that covers the
target's version (or the sets --set names), in the library's order, each as its own apply; `status`
and `verify` judge each covering set, and the worst is the run's.

Each set is its own transaction and its own entry in the record (what `revert --set` undoes). A
failure stops the run at that set: it wrote nothing (its transaction is all or nothing), the sets
before it stay applied and recorded, the sets after it are not tried; the result says which.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from packaging.version import Version

from patchkit.base import hints, signals
from patchkit.base.enums import Outcome, SelectionKind, TreeState
from patchkit.base.errors import CHECK_FAILED, CheckFailed, Conflict, PatchkitError
from patchkit.base.heads import naming
from patchkit.base.values import Value
from patchkit.engine import inspection
from patchkit.engine.guard import verdicts_kept
from patchkit.engine.inspection import TreeStatus, overall_state
from patchkit.engine.operations import (
    ApplyResult,
    VerifyResult,
    Watcher,
    apply_series,
    refuse_unchangeable,
    verify_tree,
    with_stock_judged,
)
from patchkit.engine.resolve import NOT_COVERED, Chosen, Resolved, judged, no_series, no_series_fix
from patchkit.engine.transaction import consistent_read
from patchkit.series import library
from patchkit.store.state import Entry, State, is_adhoc, read_state, recorded_sha256

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from patchkit.base.options import Options
    from patchkit.checks import Check
    from patchkit.series.library import PatchSetDef

# How a set that was not applied is shown (ApplyResult's outcomes say the rest).
NOT_TRIED = "not-tried"  # an earlier set failed


def require_order(opts: Options, chosen: list[Chosen], sets: dict[str, PatchSetDef] | None = None) -> None:
    """The covering sets that change the same file are in the library's declared order (else refused).
    `sets`: the library's sets when the caller has loaded them already (resolve.library_sets)."""
    root = library.locate(opts.library).path
    files = {
        c.name: {f.path for p in c.resolved.patches for f in p.files}
        for c in chosen
        if c.resolved is not None and c.kind == SelectionKind.PATCH
    }
    library.refuse_unordered(root, sets if sets is not None else library.load_library(root), files)


def refuse_no_series(chosen: list[Chosen]) -> None:
    """apply of several sets (every covering one, or those --set names) refuses, before anything is
    written, when one of them is in its range without a series for the version: applying the rest
    would leave the tree unsafe for that set without a word. `--set` naming the others is the choice."""
    gaps = no_series(chosen)
    if not gaps:
        return
    them = "it" if len(gaps) == 1 else "them"
    raise CheckFailed(
        f"{no_series_said(gaps)}: apply would leave the tree unsafe for {them}; nothing written",
        hint=no_series_next_step(chosen, gaps),
    )


def no_series_said(gaps: Sequence[Chosen]) -> str:
    """Each set with no series for the version, and the releases nearest that have one."""
    return "; ".join(c.gap.selection.note or c.name if c.gap is not None else c.name for c in gaps)


def no_series_next_step(chosen: Sequence[Chosen], gaps: Sequence[Chosen]) -> str:
    """What to do about sets with no series for the version: apply the others alone (the sets that
    have one, named with --set), or install a release each has a series for (or port one)."""
    them = "it" if len(gaps) == 1 else "them"
    others = [c.name for c in chosen if c.resolved is not None and c.kind != SelectionKind.UNSUPPORTED]
    chosen_others = replace(hints.current(), set_name=None, set_names=())
    named = hints.command("apply", *(w for name in others for w in ("--set", name)), chosen=chosen_others)
    rest = f"apply the others alone ({named}): launches that need {them} stay refused" if others else ""
    fix = no_series_fix(gaps[0]) if len(gaps) == 1 else f"install {_release_for_each(gaps)}"
    return f"{rest}; or {fix}" if rest else fix


def _release_for_each(gaps: Sequence[Chosen]) -> str:
    """The releases nearest the version that every one of `gaps` has a series for, in words."""
    found = [
        set(library.nearest_series(c.gap.selection.patch_set, c.gap.vllm_version))
        for c in gaps
        if c.gap is not None and c.gap.selection.patch_set is not None and c.gap.vllm_version is not None
    ]
    common = sorted(set.intersection(*found), key=Version) if found else []
    return f"vLLM {' or '.join(common)}" if common else "a vLLM release each set has a series for"


@dataclass(eq=False, repr=False)
class SetApplied(Value):
    """What the run did with one set: its result, or why it was not applied."""

    chosen: Chosen
    result: ApplyResult | None = None
    skipped: str = ""  # NOT_COVERED, SelectionKind.UNSUPPORTED or NOT_TRIED

    @property
    def state(self) -> str:
        return str(self.result.outcome) if self.result is not None else self.skipped


@dataclass(eq=False, repr=False)
class SetsApplied(Value):
    """`apply` of several sets: one entry per set, in the order tried; the first error ends the run."""

    sets: list[SetApplied]
    outcome: Outcome
    message: str = ""
    error: PatchkitError | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def launch_refused(self) -> bool:
        return any(each.result is not None and each.result.launch_refused for each in self.sets)


def apply_sets(
    chosen: list[Chosen],
    *,
    watch_for: Callable[[Chosen], Watcher],
    dry_run: bool = False,
    force: bool = False,
    import_probe: bool = True,
    guard: bool = False,
    guard_choice: bool | None = None,
) -> SetsApplied:
    """Apply each covering set in turn (upstream ones settle their records as `apply` does); the
    first that fails ends the run (see the module's docstring). `watch_for`: the Watcher of a set,
    called as the set is tried (a command shows its header there)."""
    done: list[SetApplied] = []
    names = [c.name for c in chosen if c.resolved is not None and c.kind != SelectionKind.UNSUPPORTED]
    first = _first_drifted(chosen)
    if first:  # a set before it would be written before the apply stops at its drift: it goes first
        chosen = [chosen[first], *chosen[:first], *chosen[first + 1 :]]
    for index, each in enumerate(chosen):
        if each.resolved is None or each.kind == SelectionKind.UNSUPPORTED:
            done.append(SetApplied(each, skipped=NOT_COVERED if each.resolved is None else SelectionKind.UNSUPPORTED))
            continue
        kept = [d.chosen.name for d in done if d.result is not None and d.result.outcome == Outcome.APPLIED]
        if not dry_run:  # an interrupt in this set says what of the others stays
            signals.new_set(kept, each.name, [c.name for c in chosen[index + 1 :]])
        try:
            result = apply_series(
                each.resolved,
                dry_run=dry_run,
                force=force,
                import_probe=import_probe,
                guard=guard,
                guard_choice=guard_choice,
                watch=watch_for(each),
                chosen=names,
                judge_guard=each.name == names[-1],  # the guard judged once, on the record the last leaves
            )
        except PatchkitError as exc:
            result = ApplyResult(_failed_as(exc), error=exc)
        done.append(SetApplied(each, result))
        if result.error is not None:
            done += [SetApplied(c, skipped=NOT_TRIED) for c in chosen[index + 1 :]]
            return _failed(done, each.name, result, dry_run=dry_run)
    return SetsApplied(_guard_said_once(done), _overall(done), _summary(done, dry_run=dry_run))


def _first_drifted(chosen: list[Chosen]) -> int | None:
    """The index of the first set whose recorded files were edited (its apply refuses: Drift), read
    from the record as it is now (each apply reads it again under the lock)."""
    state: State | None = None
    for index, each in enumerate(chosen):
        if each.resolved is None or each.kind == SelectionKind.UNSUPPORTED:
            continue
        try:
            state = state if state is not None else read_state(each.resolved.target.root)
            if inspection.drifted_files(each.resolved, state):
                return index
        except PatchkitError:  # a record it cannot read: the set's own apply says so, as it would
            return None
    return None


GUARD_REMOVED = ("; launch guard removed", "; launch guard would be removed")
GUARD_INSTALLED = ("; launch guard installed", "; launch guard would be installed")
GUARD_UPDATED = ("; launch guard updated to this patchkit's", "; launch guard would be updated to this patchkit's")


def _guard_said_once(done: list[SetApplied]) -> list[SetApplied]:
    """A set that dropped the last record removes the guard, and a later set of the same run
    installs it again: its fate is said once, by the last set that changed it (the guard is there)."""
    results = [d.result for d in done if d.result is not None]
    installed = [i for i, r in enumerate(results) if r.message.endswith(GUARD_INSTALLED) or _updates_guard(r.message)]
    for result in results[: installed[-1]] if installed else []:
        for said in GUARD_REMOVED:
            result.message = result.message.replace(said, "")
    return done


def _updates_guard(message: str) -> bool:
    """The set's apply replaced another patchkit build's guard with this one's (its last words)."""
    return any(said in message for said in GUARD_UPDATED)


def _failed_as(exc: PatchkitError) -> Outcome:
    """A set's error as its result: a full disk or a symlink refused is no failed check (exit 4, 2)."""
    if isinstance(exc, Conflict):
        return Outcome.CONFLICT
    return Outcome.CHECK_FAILED if exc.exit_code == CHECK_FAILED else Outcome.FAILED


def _overall(done: list[SetApplied]) -> Outcome:
    """APPLIED when any set was written; else DRY_RUN, ALREADY_APPLIED or UPSTREAM, as every set ended."""
    outcomes = [d.result.outcome for d in done if d.result is not None]
    for outcome in (Outcome.APPLIED, Outcome.DRY_RUN, Outcome.ALREADY_APPLIED):
        if outcome in outcomes:
            return outcome
    return Outcome.UPSTREAM


def _summary(done: list[SetApplied], *, dry_run: bool) -> str:
    # the sets this run wrote (or would): one already applied is said as such, not counted as applied
    wrote = (Outcome.DRY_RUN,) if dry_run else (Outcome.APPLIED,)
    applied = [d.chosen.name for d in done if d.result is not None and d.result.outcome in wrote]
    # a set found applied with no record: this run recorded it, which is what it did
    recorded = [
        d.chosen.name for d in done if d.result is not None and d.result.recorded and d.chosen.name not in applied
    ]
    # a set applied from another library that this run moved to this one's series: updated, not applied
    updated = [d.chosen.name for d in done if d.chosen.name in applied and _updates_library(d)]
    fresh = [name for name in applied if name not in updated]
    verb = "would apply" if dry_run else "applied"
    said = [f"{len(fresh)} set(s) {verb}" + (f" ({', '.join(fresh)})" if fresh else "")] if fresh or not updated else []
    if updated:
        said.append(
            f"{len(updated)} set(s) {'would be updated' if dry_run else 'updated'} from another library ({', '.join(updated)})"
        )
    if recorded:
        found = (
            f"{'would record' if dry_run else 'recorded'} {len(recorded)} set(s) found applied ({', '.join(recorded)})"
        )
        said = [*said, found] if applied else [found]
    others = [f"{d.chosen.name} {d.state}" for d in done if d.chosen.name not in applied + recorded]
    return "; ".join(said) + (f"; {', '.join(others)}" if others else "")


def _updates_library(done: SetApplied) -> bool:
    """The set's apply replaced (or would) the series of another library it was applied from."""
    plan = done.result.plan if done.result is not None else None
    return plan is not None and plan.stock is not None and not is_adhoc(done.chosen.name)


NOTHING_WRITTEN = "nothing was written"  # a set's refusal: true of that set only, once another wrote


def _failed(done: list[SetApplied], name: str, result: ApplyResult, *, dry_run: bool) -> SetsApplied:
    """The run ended at set `name`: its error, saying what stays applied and what was not tried."""
    assert result.error is not None
    kept = [d.chosen.name for d in done if d.result is not None and d.result.outcome == Outcome.APPLIED]
    untried = [d.chosen.name for d in done if d.skipped == NOT_TRIED]
    # a set found applied with no record of it, recorded by this run before the failure
    recorded = [d.chosen.name for d in done if d.result is not None and d.result.recorded and d.chosen.name not in kept]
    error = copy.copy(result.error)
    error.message = f"set {name}: {error.message}"
    if (kept or recorded) and not dry_run:  # the run wrote the earlier sets' files or record: this set's nothing
        error.message = error.message.replace(NOTHING_WRITTEN, f"nothing was written for {name}")
    after = []
    if kept and not dry_run:
        after.append(
            f"{_listed(kept)} {_verb(kept, 'stays', 'stay')} applied ({hints.command('revert')} undoes every set)"
        )
    if recorded and not dry_run:
        after.append(f"{_listed(recorded)}, found applied, {_verb(recorded, 'is', 'are')} recorded now")
    if untried:
        after.append(_not_tried(done, untried))
    if after:
        error.hint = "; ".join([*after, *([error.hint] if error.hint else [])])
    return SetsApplied(done, result.outcome, error=error)


def _not_tried(done: list[SetApplied], untried: list[str]) -> str:
    """The sets after the failed one; those whose files hold what the record says they wrote are said
    to be applied (they stay)."""
    resolved = next((d.chosen.resolved for d in done if d.chosen.resolved is not None), None)
    root = resolved.target.root if resolved is not None else None
    state = read_state(root) if root is not None else None
    applied = [n for n in untried if root is not None and state is not None and _holds_its_writes(root, state, n)]
    said = f"not tried: {', '.join(untried)}"
    if not applied:
        return said
    if applied == untried:  # their names once
        return f"{said} (already applied; {_verb(applied, 'it stays', 'they stay')} applied)"
    return f"{said} ({_listed(applied)} {_verb(applied, 'is', 'are')} already applied and {_verb(applied, 'stays', 'stay')} applied)"


def _holds_its_writes(root: Path, state: State, name: str) -> bool:
    """The set's recorded files hold what the last set to write each wrote there: its files, not
    its record alone, say it is applied (pip may have put them back since)."""
    entry = state.entry(name)
    if entry is None or not entry.files:
        return False
    written = {path: shas.get("after") for e in state.entries for path, shas in e.files.items()}
    return all(recorded_sha256(root, path) == written[path] for path in entry.files)


def _listed(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`: names in a sentence."""
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def _verb(names: list[str], one: str, several: str) -> str:
    return one if len(names) == 1 else several


# --------------------------------------------------------------------------- run --apply


def needs_apply(resolved: Resolved, status: TreeStatus) -> bool:
    """`run --apply` applies a set that is not applied, or one on a tree the launch guard refuses
    where this set's apply is the fix (its record brought up to the tree; status names it): not a
    refusal for another set's file, which this apply leaves as it is."""
    if status.state == TreeState.NOT_APPLIED or (status.updatable and not status.drifted):
        return True  # updatable: applied from another library, which apply replaces with this one's
    if not status.guard or status.state == TreeState.UNSUPPORTED or status.drifted:
        return False
    root = resolved.target.root
    others = [path for e in read_state(root).entries if e.set_name != resolved.set_name for path in e.files]
    return bool(set(status.guard) - naming(status.guard, others))


def apply_needed(
    chosen: list[Chosen], *, watch_for: Callable[[Chosen], Watcher], several: bool
) -> ApplyResult | SetsApplied | None:
    """`run --apply`: each covering set that needs it (needs_apply), applied as `patchkit apply`
    does (its guard too; several sets: each its own transaction and record entry, in order). None
    when no set needs it and none drifted: the preflight judges the tree as it is. `several`: the
    result of several sets (SetsApplied, its summary naming each drifted set with its fix) even when
    one or none needs applying; else the one set's ApplyResult."""
    looked = [(c, inspection.inspect(c.resolved, import_probe=False)) for c in judged(chosen) if c.resolved is not None]
    needed = [c for c, status in looked if c.resolved is not None and needs_apply(c.resolved, status)]
    drifted = [_drift_said(c, status) for c, status in looked if status.drifted]
    # a set whose series does not apply (a local edit) is skipped: said, with its fix, never in silence
    drifted += [_conflict_fix(c, status) for c, status in looked if status.state == TreeState.CONFLICT]
    if not several:
        if not needed:
            return None
        assert needed[0].resolved is not None
        return apply_series(needed[0].resolved, guard=True, watch=watch_for(needed[0]))
    if not needed:
        return SetsApplied([], Outcome.ALREADY_APPLIED, "; ".join(["0 set(s) applied", *drifted])) if drifted else None
    result = apply_sets(needed, watch_for=watch_for, guard=True)
    if result.error is None:
        result.message = "; ".join([result.message, *drifted])
    return result


def _conflict_fix(chosen: Chosen, status: TreeStatus) -> str:
    """A set skipped for a local edit where its series changes a file, and the fix (status's)."""
    assert chosen.resolved is not None
    files, version = status.edited_in_hunks, chosen.resolved.vllm_version
    root, there = chosen.resolved.target.root, status.in_the_way
    fix = inspection.local_edit_fix(root, version, files, chosen.name, there)
    return f"{chosen.name} not applied: {inspection.local_edit_said(files, version, root, there)}; fix: {fix}"


def _drift_said(chosen: Chosen, status: TreeStatus) -> str:
    """A drifted set, its files and the fix preflight gives too (`run --apply` applies no drifted set:
    the edits are the user's)."""
    assert chosen.resolved is not None
    fix = inspection.set_drift_fix(chosen.resolved, status)
    return f"{chosen.name} changed after apply ({', '.join(status.drifted)}): {fix}"


# --------------------------------------------------------------------------- status and verify


@dataclass(eq=False, repr=False)
class SetsStatus(Value):
    """`status` of several sets: each covering set's status, in the library's order. `unchosen`: the
    sets not applied that no apply of this tree chose (State.chosen): `apply --set X` or `run
    --apply` leave them so on purpose, so they are named, not a partial tree."""

    chosen: list[Chosen]
    statuses: list[TreeStatus]
    unchosen: tuple[str, ...] = ()
    adhoc: tuple[Entry, ...] = ()  # the --patch applies the record holds (no library set: listed apart)
    reverted: tuple[str, ...] = ()  # the record's sets `revert --set` took out (State.reverted)
    no_series: tuple[Chosen, ...] = ()  # chosen sets in their range with no series for the version (gaps_chosen)

    @property
    def state(self) -> TreeState:
        """applied when every set chosen is; not-applied when none is; partial otherwise (or when
        one set is partial); conflict when none is applied and a set does not apply; upstream when
        every set is."""
        return overall_state(
            {s.state for c, s in zip(self.chosen, self.statuses, strict=True) if c.name not in self.unchosen}
        )

    @property
    def outcome(self) -> Outcome:
        """The worst set's: a partial set, a drifted file, an upstream regression or the guard's
        refusal fail (exit 1); so do chosen sets applied and not applied side by side (a partial
        tree, as a multi-set apply that stopped half-way leaves it): a CI gate must not pass it."""
        outcomes = [s.outcome for s in self.statuses]
        failed = Outcome.CHECK_FAILED in outcomes or self.state == TreeState.PARTIAL or bool(self.no_series)
        return Outcome.CHECK_FAILED if failed else Outcome.OK

    def applied(self) -> list[str]:
        return [c.name for c, s in zip(self.chosen, self.statuses, strict=True) if s.state == TreeState.APPLIED]


def status_sets(chosen: list[Chosen]) -> tuple[SetsStatus, str | None]:
    """Each covering set's status, read under one lock (no writer half-way); and the recovery message."""
    covering = judged(chosen)
    assert covering and covering[0].resolved is not None
    root = covering[0].resolved.target.root
    statuses = []
    series = [p for each in covering if each.resolved is not None for p in each.resolved.patches]
    with consistent_read(root) as recovered, verdicts_kept():  # the tree does not change: one guard verdict
        for each in covering:
            assert each.resolved is not None
            found = inspection.inspect(each.resolved, check_upstream=True, import_probe=False)
            statuses.append(with_stock_judged(each.resolved, found))
            refuse_unchangeable(each.resolved, series)  # every set's series: what each record may name
        record = read_state(root)
    adhoc = tuple(e for e in record.entries if is_adhoc(e.set_name))
    unchosen = _unchosen(covering, statuses, record)
    gaps = gaps_chosen(chosen, record)
    return SetsStatus(covering, statuses, unchosen, adhoc, reverted=record.reverted, no_series=gaps), recovered


def gaps_chosen(chosen: list[Chosen], record: State) -> tuple[Chosen, ...]:
    """The sets with no series for the version (in their range) that the tree's applies chose, or
    every one on a tree no apply chose a set of (apply's default is every covering set): the tree
    cannot be made safe for them. One an `apply --set` left out is a note."""
    wanted = record.wanted() if record.entries else None
    return tuple(c for c in no_series(chosen) if wanted is None or c.name in wanted)


def _unchosen(covering: list[Chosen], statuses: list[TreeStatus], record: State) -> tuple[str, ...]:
    """The sets not applied that no apply recorded in `record` chose (none on a tree with no record)."""
    if not record.entries:
        return ()
    wanted = record.wanted()
    pairs = zip(covering, statuses, strict=True)
    return tuple(c.name for c, s in pairs if s.state == TreeState.NOT_APPLIED and c.name not in wanted)


@dataclass(eq=False, repr=False)
class SetsVerified(Value):
    """`verify` of several sets on a target: each covering set's result; the worst is the run's."""

    chosen: list[Chosen]
    results: list[VerifyResult]
    unchosen: tuple[str, ...] = ()  # as SetsStatus's: not applied, and no apply chose them
    no_series: tuple[Chosen, ...] = ()  # as SetsStatus's: chosen sets with no series for the version

    @property
    def ok(self) -> bool:
        """As status: chosen sets applied and not applied side by side fail, each set passing or not;
        so does a chosen set with no series for the version."""
        return self.passes_if_applied and self.state != TreeState.PARTIAL and not self.no_series

    @property
    def passes_if_applied(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def state(self) -> TreeState:
        """The tree's overall state, as status says it (SetsStatus.state)."""
        return SetsStatus(self.chosen, [r.status for r in self.results], self.unchosen).state

    def not_applied(self) -> list[str]:
        """On a partial tree, the chosen sets not applied: those the apply status names completes."""
        if self.state != TreeState.PARTIAL:
            return []
        pairs = zip(self.chosen, self.results, strict=True)
        return [c.name for c, r in pairs if r.status.state == TreeState.NOT_APPLIED and c.name not in self.unchosen]

    @property
    def outcome(self) -> Outcome:
        return Outcome.OK if self.ok else Outcome.CHECK_FAILED


def verify_sets(
    chosen: list[Chosen], *, import_probe: bool = True, watch: Watcher | None = None, verifying: Sequence[Check] = ()
) -> SetsVerified:
    """verify_tree for each covering set, in the library's order."""
    covering = judged(chosen)
    results = []
    root = None
    for each in covering:
        assert each.resolved is not None
        root = each.resolved.target.root
        results.append(verify_tree(each.resolved, import_probe=import_probe, watch=watch, verifying=verifying))
    # status's partial: the sets an apply chose, not those left out on purpose
    record = read_state(root) if root is not None else None
    unchosen = _unchosen(covering, [r.status for r in results], record) if record is not None else ()
    gaps = gaps_chosen(chosen, record) if record is not None else ()
    return SetsVerified(covering, _guard_blames_the_drifted(results), unchosen, gaps)


def _guard_blames_the_drifted(results: list[VerifyResult]) -> list[VerifyResult]:
    """The guard refuses the whole tree for one drifted file: that refusal is the drifted set's,
    not the verdict of a set whose own files are as patchkit wrote them."""
    drifted = {path for r in results for path in r.status.drifted}
    if not drifted:
        return results

    def own(result: VerifyResult) -> VerifyResult:
        if result.status.drifted:
            return result
        theirs = naming(result.status.guard, drifted)
        kept = [p for p in result.status.guard if p not in theirs]
        return replace(result, status=replace(result.status, guard=kept))

    return [own(r) for r in results]
