"""Several sets on one tree: `apply` without --set applies every set of the library that covers the
target's version (or the sets --set names), in the library's order, each as its own apply.

Each set is its own transaction and its own entry in the record (what `revert --set` undoes). A
failure stops the run at that set: it wrote nothing (its transaction is all or nothing), the sets
before it stay applied and recorded, the sets after it are not tried; the result says which.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from patchkit.base import hints
from patchkit.base.enums import Outcome, SelectionKind
from patchkit.base.errors import Conflict, NoPatchSet, PatchkitError
from patchkit.engine.operations import ApplyResult, Watcher, apply_series
from patchkit.engine.resolve import Resolved, resolve
from patchkit.series import library

if TYPE_CHECKING:
    from collections.abc import Callable

    from patchkit.base.options import Options
    from patchkit.tree.target import Target

# How a set that was not applied is shown (ApplyResult's outcomes say the rest).
NOT_COVERED = "not-covered"  # the library has no series for this version in the set's range
NOT_TRIED = "not-tried"  # an earlier set failed


def several(opts: Options) -> bool:
    """Whether the command works on several sets: no --patch, not one --set, and a library of
    more than one set (a library of one set works as it always has)."""
    if opts.adhoc or opts.set_name is not None:
        return False
    return len(opts.set_names) > 1 or len(library.load_library(library.locate(opts.library).path)) > 1


@dataclass
class Chosen:
    """One set of the library for the target: its series (None: the library has none for this version)."""

    name: str
    resolved: Resolved | None
    note: str = ""  # why there is no series

    @property
    def kind(self) -> SelectionKind | None:
        return self.resolved.selection.kind if self.resolved else None


def resolve_sets(opts: Options, target: Target) -> list[Chosen]:
    """Every set of the library (or those --set names), in the library's order, resolved for the target."""
    sets = library.choose_sets(library.load_library(library.locate(opts.library).path), opts.set_names)
    chosen = []
    for patch_set in sets:
        try:
            chosen.append(Chosen(patch_set.name, resolve(replace(opts, set_name=patch_set.name), target=target)))
        except NoPatchSet as exc:  # a gap in the set's range: said, not an error of the run
            chosen.append(Chosen(patch_set.name, None, exc.message))
    if not any(c.kind in (SelectionKind.PATCH, SelectionKind.UPSTREAM) for c in chosen):
        said = "; ".join(why_not(c) for c in chosen)
        raise NoPatchSet(
            f"no set of the library covers this vLLM: {said}", hint=f"{hints.command('list')} shows each set's range"
        )
    return chosen


def why_not(chosen: Chosen) -> str:
    if chosen.resolved is not None and chosen.resolved.selection.note:
        return chosen.resolved.selection.note
    return chosen.note or f"{chosen.name}: no series"


@dataclass
class SetApplied:
    """What the run did with one set: its result, or why it was not applied."""

    chosen: Chosen
    result: ApplyResult | None = None
    skipped: str = ""  # NOT_COVERED, SelectionKind.UNSUPPORTED or NOT_TRIED

    @property
    def state(self) -> str:
        return str(self.result.outcome) if self.result is not None else self.skipped


@dataclass
class SetsApplied:
    """`apply` of several sets: one entry per set, in the order tried; the first error ends the run."""

    sets: list[SetApplied]
    outcome: Outcome
    message: str = ""
    error: PatchkitError | None = None
    warnings: list[str] = field(default_factory=list)


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
    for index, each in enumerate(chosen):
        if each.resolved is None or each.kind == SelectionKind.UNSUPPORTED:
            done.append(SetApplied(each, skipped=NOT_COVERED if each.resolved is None else SelectionKind.UNSUPPORTED))
            continue
        try:
            result = apply_series(
                each.resolved,
                dry_run=dry_run,
                force=force,
                import_probe=import_probe,
                guard=guard,
                guard_choice=guard_choice,
                watch=watch_for(each),
            )
        except PatchkitError as exc:
            result = ApplyResult(Outcome.CONFLICT if isinstance(exc, Conflict) else Outcome.CHECK_FAILED, error=exc)
        done.append(SetApplied(each, result))
        if result.error is not None:
            done += [SetApplied(c, skipped=NOT_TRIED) for c in chosen[index + 1 :]]
            return _failed(done, each.name, result, dry_run=dry_run)
    return SetsApplied(done, _overall(done), _summary(done, dry_run=dry_run))


def _overall(done: list[SetApplied]) -> Outcome:
    """APPLIED when any set was written; else DRY_RUN, ALREADY_APPLIED or UPSTREAM, as every set ended."""
    outcomes = [d.result.outcome for d in done if d.result is not None]
    for outcome in (Outcome.APPLIED, Outcome.DRY_RUN, Outcome.ALREADY_APPLIED):
        if outcome in outcomes:
            return outcome
    return Outcome.UPSTREAM


def _summary(done: list[SetApplied], *, dry_run: bool) -> str:
    applied = [d.chosen.name for d in done if d.result is not None and d.result.outcome != Outcome.UPSTREAM]
    verb = "would apply" if dry_run else "applied"
    said = f"{len(applied)} set(s) {verb}" + (f" ({', '.join(applied)})" if applied else "")
    others = [f"{d.chosen.name} {d.state}" for d in done if d.chosen.name not in applied]
    return said + (f"; {', '.join(others)}" if others else "")


def _failed(done: list[SetApplied], name: str, result: ApplyResult, *, dry_run: bool) -> SetsApplied:
    """The run ended at set `name`: its error, saying what stays applied and what was not tried."""
    assert result.error is not None
    kept = [d.chosen.name for d in done if d.result is not None and d.result.outcome == Outcome.APPLIED]
    untried = [d.chosen.name for d in done if d.skipped == NOT_TRIED]
    error = copy.copy(result.error)
    error.message = f"set {name}: {error.message}"
    after = []
    if kept and not dry_run:
        after.append(f"{', '.join(kept)} stay(s) applied ({hints.command('revert')} undoes every set)")
    if untried:
        after.append(f"not tried: {', '.join(untried)}")
    if after:
        error.hint = "; ".join([*after, *([error.hint] if error.hint else [])])
    return SetsApplied(done, result.outcome, error=error)
