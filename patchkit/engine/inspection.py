"""The state of a target for a patch series: per patch, per recorded file, and overall."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.enums import Holder, Outcome, PatchState, SelectionKind, StepState, TreeState
from patchkit.base.errors import PatchkitError, escaped, few
from patchkit.base.fsutil import Landed, first_symlink, read_file
from patchkit.base.heads import Heads
from patchkit.base.options import Options
from patchkit.base.patterns import LazyPattern
from patchkit.base.values import Value
from patchkit.checks import LARGEST_PARSED, CheckContext, shadow
from patchkit.distinfo import installed_wheel_reader, tree_record, unlike_stock
from patchkit.distinfo.record import has_provenance
from patchkit.engine.guard import (
    CACHE_OVERFULL,
    CHANGED_SINCE,
    DISPLACES_GUARD,
    ENTRY_POINT_NAME,
    MORE_SYMLINKED,
    NEWER_GUARD,
    NO_DIST_INFO,
    NO_VERSION_READ,
    NOT_BYTECODE,
    OTHERS_CANNOT_READ,
    PREFIXED,
    SEVERAL,
    SEVERAL_FIX,
    SHADOWED,
    STALE_BYTECODE,
    SYMLINKED,
    UNHELD,
    UNHELD_WHEEL,
    UNKNOWN_GUARD,
    UNRECORDED_GUARD,
    is_installed,
    launch_tags,
    launch_verdict,
    missing_guard,
    of_other_checks,
    older_guard_notes,
    plain_directories,
    prefixed_bytecode,
    replace_fix,
    unrecorded_guard_notes,
    unseen_guard_note,
)
from patchkit.engine.stale import PIP_WROTE, PIP_WROTE_ALL, pip_wrote, stale_entries, stale_note
from patchkit.engine.vouched import adopted_earlier, changed_since, needs_force, not_made_by_the_series, plan_over_stock
from patchkit.series import dry_run
from patchkit.series.hunks import NEW_FILE_EXISTS, RENAME_TARGET_EXISTS
from patchkit.series.library import PatchSetDef, has_series, load_library, locate, select
from patchkit.series.patchfile import touched_paths
from patchkit.store.objects import is_object, read_object
from patchkit.store.state import (
    META_DIR,
    THROUGH_A_SYMLINK,
    Entry,
    State,
    applied_on,
    is_adhoc,
    meta_dir,
    moved_patches,
    read_state,
    recorded_patch_files,
    recorded_sha256,
    shown_set,
)
from patchkit.tree.modules import hanging_modules
from patchkit.tree.target import checkout_restore, stock_files_command
from patchkit.tree.version import in_range

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Collection, Mapping, Sequence

    from patchkit._target.guard import Verdict
    from patchkit.checks import Check, CheckContext, CheckResult, Reader
    from patchkit.engine.resolve import Resolved
    from patchkit.series.library import PatchSetDef, Release
    from patchkit.series.plan import PatchStep, Plan

# The plan and the checks are imported where they run: `run`'s fast path (patchkit/launch/shortcut.py)
# makes a TreeStatus without either.

_PATCH_STATE = {
    StepState.ALREADY_APPLIED: PatchState.APPLIED,
    StepState.WILL_CHANGE: PatchState.NOT_APPLIED,
    StepState.CONFLICT: PatchState.CONFLICT,
}

# the guard's fix of a tree the record no longer matches (after a vLLM upgrade): the apply of every
# set recorded, which preflight offers in place of a set's own (that apply drops the others' records)
RECORDS_AS_IS = "(it records the tree as it is, or drops what no longer applies)"


@dataclass(eq=False, repr=False)
class PatchReport(Value):
    """One patch's state on the tree, and the problem when there is one."""

    name: str
    description: str
    state: PatchState
    files: list[str]
    problem: str | None = None


@dataclass(eq=False, repr=False)
class TreeStatus(Value):
    """What status finds on the tree: its state, each patch's, drift, checks and the guard."""

    state: TreeState
    patches: list[PatchReport] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)
    # the syntax check's failures of drifted files: the error's line and message, the source line and its caret
    does_not_compile: list[CheckResult] = field(default_factory=list)
    plan: Plan | None = None
    checks: list[CheckResult] = field(default_factory=list)  # upstream: the checks run on the stock files
    stale: list[str] = field(default_factory=list)  # records an upgrade of vLLM made stale: why each is
    guard: list[str] = field(default_factory=list)  # why the installed launch guard would refuse a launch
    guard_notes: list[str] = field(default_factory=list)  # e.g. an older patchkit's guard: apply updates it
    store_notes: list[str] = field(default_factory=list)  # what an interrupted command left in .patchkit/
    guard_installed: bool = False  # vLLM would load a launch guard from this tree
    # the fix when what the guard refuses is another set's record (an ad-hoc patch's): applying this set cannot
    others_fix: str | None = None
    # the set came with a wheel of several sets (no apply of its own): revert and apply take them together
    whole_wheel: bool = False
    # the guard refuses a file a patched wheel's set patched (no apply of its own): only a revert of
    # every set puts it back, whichever set is asked about
    wheel_refused: bool = False
    # the sets the tree's record names, each of the user's library (empty: another's, or ad-hoc
    # patches): after a vLLM upgrade, the apply that moves their records forward, and no other set
    recorded_sets: tuple[str, ...] = ()
    # after a vLLM upgrade under the record: the recorded sets with no series for the installed
    # version (apply refuses them), and the other recorded sets (its fix applies those)
    no_series_sets: tuple[str, ...] = ()
    series_sets: tuple[str, ...] = ()
    # the guard refuses a recorded file reached through a symlink: what replaces it (apply refuses it)
    symlink_fix: str | None = None
    guard_missing: str | None = None  # the recorded guard is gone (missing_guard): no launch is checked
    # modules that are a fifo or a device (tree.modules): the launch's import hangs on them, before the guard
    hanging: list[str] = field(default_factory=list)
    # bytecode not a regular file past what a scan looks through (tree.modules.Scan): the import may hang
    unjudged_bytecode: list[str] = field(default_factory=list)
    # the guard refuses recorded files only for holding their originals again (a same-version reinstall
    # of vLLM), every recorded file: apply records them again
    all_stock_again: bool = False
    # the guard refuses recorded files only for holding their originals again, some of them: apply
    # patches those again (how many)
    some_stock_again: int = 0
    # of those, the files no patch of the set's series writes (the record names them, not the series):
    # apply leaves them, revert drops them from the record
    unwritten: int = 0
    lost: list[str] = field(default_factory=list)  # recorded patches a drifted file no longer holds
    record: State | None = None  # the tree's record as inspect read it (None: not read)
    # the sets the record chose, where fewer than the library's (else none): a drift's fix applies those
    chosen_sets: tuple[str, ...] = ()
    # a set apply would go on with: the files it would patch that are not stock (apply refuses them;
    # status fills it: operations.with_stock_judged)
    not_stock: list[CheckResult] = field(default_factory=list)
    # a set found applied with no record of it: the file that is not stock beyond its change (apply
    # refuses to record it; status, preflight and run fill it: with_found_judged)
    found_edited: list[str] = field(default_factory=list)
    # the set's recorded files pip wrote since its apply (vLLM reinstalled: stale.pip_wrote), not drifted
    reinstalled: list[str] = field(default_factory=list)
    # of `drifted`, the files reached through a symlink the guard does not refuse (none installed): no
    # command writes through it, so their fix is the hand repair (symlink_fix)
    linked: list[str] = field(default_factory=list)
    # the set applied whole from another library (an upgrade of patchkit changed its series): the
    # patches that changed (numbers), and whether apply updates it (False: the originals are not at hand)
    other_library: list[str] = field(default_factory=list)
    updatable: bool = False
    earlier_texts: bool = False  # of --patch files edited since their apply (their names, not numbers)
    from_wheel: bool = False  # the earlier series came with a patched wheel: revert works from its texts
    # of such a wheel built from a local build (+lab): the pip command that puts its stock files back
    # (no public index serves them, so neither apply nor revert can fetch them)
    reinstall: str = ""
    # an older patchkit's --patch records the guard refuses (no "held" mark): the set each breaks (held.py;
    # None: none, any apply marks it held; "": cannot be judged)
    unheld_breaks: dict[str, str | None] = field(default_factory=dict)
    # an older patchkit's `wheel --patch` build the guard refuses: the set its files break (held.py;
    # None: none, any apply records it held; "": cannot be judged)
    wheel_breaks: str | None = ""

    def fix_command(self, verb: str, *args: str) -> str:
        """`hints.command` for a fix: without --set where the set's files came with a wheel of
        several sets (revert refuses one set of it)."""
        return hints.command(verb, *args, chosen=_without_a_set() if self.whole_wheel else None)

    @property
    def drift_fix(self) -> str:
        if self.linked and self.symlink_fix:  # revert and apply refuse to write through it
            return f"{self.symlink_fix}, then run {hints.command('status')}"
        return f"{self.fix_command('revert', '--force')} (keeps a copy of the edits), then {self.apply_chosen}"

    @property
    def other_library_said(self) -> str:
        if self.earlier_texts:
            return f"the earlier text of {', '.join(self.other_library)} is applied"
        return f"applied from another library ({', '.join(self.other_library)} changed)"

    @property
    def other_library_fix(self) -> str:
        """apply plans the series on the stock files a revert restores; where it cannot, that revert first."""
        if self.reinstall:
            where = "a local build is on no public index: reinstall it from where it came"
            return f"{where} ({self.reinstall}), then {self.fix_command('apply')}"
        if self.updatable:
            return f"{self.fix_command('apply')} updates it"
        if self.from_wheel:
            return f"{self.fix_command('revert')} (from the wheel's own patch texts), then {self.apply_chosen}"
        return f"{self.fix_command('revert', '--force')} (only the record vouches for the originals), then {self.apply_chosen}"

    @property
    def partial_fix(self) -> str | None:
        """A partial set's one fix: apply writes the patches not applied (None: one of them has a
        problem, a conflict say, or the guard refuses the tree: their own lines name the fix)."""
        if self.state != TreeState.PARTIAL or self.guard or any(p.problem for p in self.patches):
            return None
        return f"{self.fix_command('apply')} applies the patches not applied"

    @property
    def deleted_fix(self) -> str:
        """drift_fix for a file deleted: no edit to keep a copy of."""
        if self.linked and self.symlink_fix:
            return self.drift_fix
        return f"{self.fix_command('revert', '--force')}, then {self.apply_chosen}"

    @property
    def apply_chosen(self) -> str:
        """The apply after a drift's revert --force: of the sets the record chose (a plain
        apply would apply again a set `revert --set` took out)."""
        return self.apply_chosen_with()

    def apply_chosen_with(self, *args: str) -> str:
        """apply_chosen with `args` (--guard, say)."""
        return self.fix_command("apply", *args) if self.whole_wheel else apply_of(self.chosen_sets, *args)

    @property
    def guard_fix(self) -> str:
        """The command that brings the tree to one the guard lets launch."""
        return self._guard_fix_of_its_cause() or f"run {self.apply_recorded} {RECORDS_AS_IS}"

    def _no_series_fix(self, *, upgraded: bool = False) -> str | None:
        """After an upgrade of vLLM to a version some recorded sets have no series for: apply refuses
        them, so the fix applies the others alone; a record apply does not drop (not stale: the files
        are the applied ones) goes first by revert; none left: revert alone. `upgraded`: known to be
        after one (else only where a record is stale or the guard says so)."""
        upgraded = upgraded or bool(self.stale) or any(UPGRADED in problem for problem in self.guard)
        if not self.no_series_sets or not upgraded:
            return None
        gaps = ", ".join(self.no_series_sets)
        revert = hints.command("revert", chosen=_without_a_set())
        if not self.series_sets:
            return f"run {revert} (no recorded set has a series for this vLLM: {gaps}; the guard goes with the record)"
        apply = hints.command("apply", *_set_words(self.series_sets), chosen=_without_a_set())
        have, them = ("has", "it") if len(self.no_series_sets) == 1 else ("have", "them")
        stale = all(
            any(note.startswith(f"{STALE_PREFIX}{name}:") for note in self.stale) for name in self.no_series_sets
        )
        if stale:  # apply drops the stale records of the sets it leaves out
            return f"run {apply} (it applies the sets with a series for this vLLM; {gaps} {have} none)"
        return f"run {revert}, then {apply} ({gaps} {have} no series for this vLLM: apply refuses {them})"

    @property
    def restores(self) -> tuple[str, ...] | None:
        """The sets guard_fix applies when it is the apply that records the tree as it is (after a
        vLLM upgrade, the recorded sets; empty: every set, or the one the selection names); None
        when it is another fix. A value to compare, where the fix's words are for a person."""
        if self._guard_fix_of_its_cause() is not None:
            return None
        if (self.stale or any(UPGRADED in problem for problem in self.guard)) and self.recorded_sets:
            return self.recorded_sets
        chosen = hints.current().set_name
        return (chosen,) if chosen else ()

    def _displaced_fix(self) -> str | None:
        """The fix of another plugin of the guard's name that vLLM runs in its place: the user's (that
        distribution is not patchkit's to change)."""
        displaced = next((p for p in self.guard if DISPLACES_GUARD in p), None)
        if displaced is None:
            return None
        info = displaced.partition("/entry_points.txt")[0]
        return (
            f"uninstall the distribution of {info}, or take its {ENTRY_POINT_NAME} entry point out "
            f"(vLLM then runs the guard's), then run {hints.command('status')}"
        )

    def _unheld_fix(self) -> str | None:
        """The fix of an older patchkit's --patch apply the guard cannot judge: this patchkit's apply of
        the same files holds them to the sets' contracts, and records them held or names the set they break."""
        if any(UNHELD_WHEEL in problem for problem in self.guard):
            return self._unheld_wheel_fix()
        if not any(UNHELD in problem for problem in self.guard) or self.record is None:
            return None
        unheld = [e for e in self.record.entries if is_adhoc(e.set_name) and not e.held]
        breaks = [self.unheld_breaks.get(e.set_name, "") for e in unheld]
        if not unheld:
            return None
        entry = next((e for e, broken in zip(unheld, breaks, strict=True) if broken), None)
        if entry is not None:  # its apply would be refused too: the set goes in whole once the diff is out
            broken = self.unheld_breaks[entry.set_name]
            whole = hints.command("apply", chosen=replace(hints.current(), adhoc=(), set_name=broken))
            revert = hints.command("revert", chosen=selection_of(entry))
            return f"run {revert} (it leaves set {broken} half-applied: its contract fails), then {whole}"
        if all(broken is None for broken in breaks):  # any apply of this patchkit marks them held
            chosen = next((e for e in self.record.entries if not is_adhoc(e.set_name)), unheld[0])
            return f"run {hints.command('apply', chosen=selection_of(chosen))} (it records them held: they break no set's contract)"
        entry = next(e for e, broken in zip(unheld, breaks, strict=True) if broken == "")
        apply, revert = (hints.command(verb, chosen=selection_of(entry)) for verb in ("apply", "revert"))
        return (
            f"run {apply} (it holds the diffs to the sets' contracts: they are recorded held, or refused with "
            f"the set they break named), or undo them: {revert}"
        )

    def _unheld_wheel_fix(self) -> str:
        """The fix of an older patchkit's `wheel --patch` build the guard cannot judge: this patchkit's
        apply holds its files to the sets' contracts and records it held; one that breaks a set goes
        by revert (the wheel's files back to stock), then the whole set."""
        revert = hints.command("revert", chosen=_without_a_set())
        if self.wheel_breaks:
            whole = hints.command("apply", chosen=replace(hints.current(), adhoc=(), set_name=self.wheel_breaks))
            return (
                f"run {revert} (it puts back the stock files of the wheel's, which leave set "
                f"{self.wheel_breaks} half-applied), then {whole}"
            )
        if self.wheel_breaks is None:
            apply = hints.command("apply", chosen=_without_a_set())
            return f"run {apply} (it records the wheel held: its patches break no set's contract)"
        return f"run {revert} (it puts the wheel's files back to stock: no library at hand judges them)"

    def _dist_info_fix(self) -> str | None:
        """The fix of a refusal for vLLM's dist-info: several (apply refuses until one is left), or none
        (the guard cannot tell the version: apply removes it, as it installs none on such a tree)."""
        if any(SEVERAL in problem for problem in self.guard):
            return f"{SEVERAL_FIX}, then run {hints.command('status')}"
        unread = next((p for p in self.guard if NAMES_NO_VERSION in p), None)
        if unread is not None and not self.drifted:  # pip writes the Version again; apply then patches anew
            applied_to = unread.rpartition(" vLLM ")[2]
            return (
                f"run {hints.pip_reinstall(applied_to)} (it writes vLLM's files and dist-info again), then "
                f"{hints.command('apply')}"
            )
        if any(problem.startswith(NO_DIST_INFO) for problem in self.guard) and not self.drifted:
            return f"run {hints.command('apply')} (the guard cannot tell vLLM's version there: it removes the guard)"
        return None

    def _guard_fix_of_its_cause(self) -> str | None:
        """guard_fix where a cause of the refusal has its own fix; None: apply's, of the tree as it is."""
        if self.state == TreeState.UNSUPPORTED:
            return (
                f"run {hints.command('revert')} (this vLLM has no series: the old record goes, and the guard with it)"
            )
        if self.symlink_fix:  # apply and revert refuse to write through it: a hand repair
            return f"{self.symlink_fix}, then run {hints.command('status')}"
        if (unheld := self._unheld_fix()) is not None:
            return unheld
        if (gaps := self._no_series_fix()) is not None:  # apply refuses a set with no series
            return gaps
        if self.all_stock_again:  # apply patches them again, and records it
            return f"run {self.apply_chosen}"
        if self.others_fix and not self.drifted and not self.stale:  # a stale record: apply drops it
            return self.others_fix
        if (self.whole_wheel or self.wheel_refused) and any(problem.endswith(EDITED) for problem in self.guard):
            # a wheel's file: this set's apply leaves it; the wheel's sets go together
            revert, apply = (hints.command(verb, *args, chosen=_without_a_set()) for verb, *args in _EVERY_SET)
            return f"run {revert} (it keeps a copy of the edits), then {apply}"
        if (dist_info := self._displaced_fix() or self._dist_info_fix()) is not None:
            return dist_info
        upgraded = [problem for problem in self.guard if UPGRADED in problem]
        if upgraded and len(upgraded) < len(self.guard) and not self.stale:
            # vLLM was upgraded under the record, and its files are not all the new release's: no
            # original patchkit saved belongs on it, and apply cannot tell the record is stale
            return (
                f"reinstall the installed vLLM release ({hints.pip_reinstall(None)}), "
                f"then run {hints.command('apply')} (it drops the record, stale once the files are stock)"
            )
        if any(NEWER_GUARD in problem for problem in self.guard) and not self.drifted:  # apply would downgrade it
            return (
                f"use the newer patchkit that applied this tree, or run {self.apply_chosen} "
                "(it replaces the launch guard with this patchkit's)"
            )
        if any(of_other_checks(problem) for problem in self.guard) and not self.drifted:  # apply replaces it
            return f"run {self.apply_chosen} (it updates the launch guard to this patchkit's)"
        if any(UNKNOWN_GUARD in problem for problem in self.guard):
            revert = self.fix_command("revert", "--force")
            first = f"run {revert} (it keeps a copy of the edits), then " if self.drifted else ""
            return first + replace_fix(self.apply_chosen_with("--guard")).removeprefix("run " if first else "")
        if self.drifted:
            return (
                f"run {self.fix_command('revert', '--force')} (it keeps a copy of the edits), then {self.apply_chosen}"
            )
        shadowed = [problem for problem in self.guard if SHADOWED in problem]
        # apply refuses until that file is gone: the fix is the user's
        if shadowed and len(shadowed) == len(self.guard):
            return shadow.fix(shadowed[0].partition(" ")[0])
        if all(STALE_BYTECODE in problem for problem in self.guard):  # apply's bytecode fix, as after a write
            return _bytecode_fix(self.guard)
        overfull = next((found for problem in self.guard if (found := CACHE_OVERFULL.search(problem))), None)
        if overfull:  # apply leaves a __pycache__ alone: no cache Python wrote holds that many
            return (
                f"remove {overfull.group(1)} (Python writes its bytecode there again), "
                f"then run {hints.command('status')}"
            )
        if all(problem.startswith(OTHERS_CANNOT_READ) for problem in self.guard):
            return f"run {self.apply_chosen} (it makes them readable, as pip installs files)"
        return self._stock_again_fix()

    def _stock_again_fix(self) -> str | None:
        """The fix of recorded files stock again (or gone): apply patches them again, unless no patch
        of the set writes them (it says "already applied" then): revert drops them from the record."""
        if self.unwritten:
            files = "a file" if self.unwritten == 1 else f"{self.unwritten:,} files"
            return (
                f"run {self.fix_command('revert')} (the record names {files} no patch of the set writes, "
                f"which apply leaves as they are), then {self.apply_chosen}"
            )
        if self.some_stock_again:  # not "records the tree as it is": it patches them again
            files = "that file" if self.some_stock_again == 1 else f"those {self.some_stock_again} files"
            return f"run {self.apply_chosen} (it patches {files} again)"
        return None

    @property
    def apply_recorded(self) -> str:
        """The apply that settles the records a vLLM upgrade made stale: of the recorded sets only
        (apply alone would apply every covering set, a launch's unneeded ones too), those with a
        series for the installed vLLM (apply refuses the others)."""
        upgraded = self.stale or any(UPGRADED in problem for problem in self.guard)
        if upgraded and self.no_series_sets and self.series_sets:
            return hints.command("apply", *_set_words(self.series_sets), chosen=_without_a_set())
        return self._apply_of_recorded() if upgraded else apply_of(self.chosen_sets)

    @property
    def guard_missing_fix(self) -> str:
        """Puts the recorded guard back (apply installs it when missing), or says to go without one."""
        if SEVERAL in (self.guard_missing or ""):  # apply refuses to install a guard until one is left
            return f"{SEVERAL_FIX}, then run {hints.command('apply')} (it installs the guard)"
        # a recorded set with no series for this vLLM was applied to another: apply refuses it
        gaps = self._no_series_fix(upgraded=True)
        if gaps is not None:
            return gaps + ("; apply puts the guard back" if self.series_sets else "")
        applied_to = _version_read_as_none(self.guard_missing)
        if applied_to is not None:  # apply installs none until pip writes the dist-info again
            return (
                f"run {hints.pip_reinstall(applied_to)} (it writes vLLM's files and dist-info again), then "
                f"{hints.command('apply')} (it patches them again and installs the guard), or "
                f"{self._apply_of_recorded('--no-guard')} to launch without it"
            )
        edited = CHANGED_SINCE in (self.guard_missing or "")  # apply leaves a guard file changed since
        apply, without = self._apply_of_recorded(*["--guard"] * edited), self._apply_of_recorded("--no-guard")
        return f"run {apply} (it puts the guard back), or {without} to launch without it"

    def _apply_of_recorded(self, *args: str) -> str:
        """apply of the recorded sets only (apply alone applies every covering set); alone where
        those are every set of the library, or are not known."""
        if not self.recorded_sets:
            return hints.command("apply", *args)
        sets = [w for name in self.recorded_sets for w in ("--set", name)]
        return hints.command("apply", *sets, *args, chosen=_without_a_set())

    @property
    def edited_in_hunks(self) -> list[str]:
        """The files where a patch of the series finds other lines than it expects (a local edit
        on a tree that records none of it, where the state is CONFLICT)."""
        return conflicting_files(self.plan.conflicts) if self.plan is not None else []

    @property
    def in_the_way(self) -> list[str]:
        """Of edited_in_hunks, the files the series would create that are there already."""
        return in_the_way(self.plan.conflicts) if self.plan is not None else []

    @property
    def upstream_regression(self) -> bool:
        """An upstream release whose own files fail the set's checks: vLLM dropped or broke the change."""
        return self.state == TreeState.UPSTREAM and any(r.failed for r in self.checks)

    @property
    def outcome(self) -> Outcome:
        """`status`'s verdict: unsupported (exit 3); partial, conflict, drifted or an upstream regression fail."""
        if self.state == TreeState.UNSUPPORTED:
            return Outcome.UNSUPPORTED
        if (
            self.state in (TreeState.PARTIAL, TreeState.CONFLICT)
            or self.drifted
            or self.upstream_regression
            or (self.state == TreeState.UNRECORDED and any(r.failed for r in self.checks))
            or self.guard
            or self.not_stock
            or self.found_edited
            or self.hanging
            or self.unjudged_bytecode
            or self.other_library  # the tree lacks a change the library now holds (a fix, say): a CI gate fails
        ):
            return Outcome.CHECK_FAILED
        return Outcome.OK


NAMES_NO_VERSION = ".dist-info names no version, so the guard cannot tell which vLLM runs"  # the guard's words


def _version_read_as_none(missing: str | None) -> str | None:
    """The release a guard_missing of an empty or missing METADATA Version names (None: another)."""
    if missing is None or NO_VERSION_READ not in missing:
        return None
    return missing.partition("the series is applied to ")[2].partition(":")[0] or None


def _bytecode_fix(problems: list[str]) -> str:
    """Stale .pyc files: apply recompiles or removes those in __pycache__; those under a pycache prefix
    (which apply does not look in) are removed by the exact command."""
    apply = f"run {hints.command('apply')} (it recompiles or removes the stale .pyc)"
    prefixed = prefixed_bytecode(problems)
    if not prefixed:
        return f"{apply}, or remove the .pyc"
    remove = f"run {hints.remove_files(prefixed)} (Python compiles the source again)"
    return remove if len(prefixed) == len(problems) else f"{remove}, then {apply.removeprefix('run ')}"


UPGRADED = " is installed, but the patches were applied to "  # the guard's words for another vLLM version
# the guard's words for a file apply alone settles: stock again, or written by pip (vLLM reinstalled)
STOCK_AGAIN_WORDS = (" holds its stock bytes again", " is gone, as before patchkit created it", PIP_WROTE)
EDITED = (" was changed after patchkit patched it", " is missing", " exists, but the patches removed it")  # a file's


def found_edit_said(resolved: Resolved, path: str) -> tuple[str, str]:
    """Why apply refuses to record a set found applied whose file is not stock beyond the set's
    change, and the fix: status and apply say the same."""
    version, name = resolved.vllm_version, resolved.set_name
    message = (
        f"{escaped(path)} differs from stock vLLM {version} beyond the set's change (your edit?): the tree records no "
        f"apply of {name}, so patchkit cannot record it as its own"
    )
    # this same apply after: every set it chose (the record so far names only the earlier ones)
    return message, f"{hints.command('revert', '--force')} (keeps a copy of the edits), then {hints.command('apply')}"


def upgrade_said(problems: list[str], shown: int = 2) -> list[str]:
    """The guard's problems; after an upgrade of vLLM under the record, the files it patched are
    counted with the first `shown` named, not each said "changed after patchkit patched it" (the
    upgrade replaced them, most likely): one line, not one of hundreds of characters per file."""
    if not any(UPGRADED in problem for problem in problems):
        return problems
    files = [problem for problem in problems if problem.endswith(EDITED)]
    if len(files) < 2:
        return problems
    names = [problem.partition(" ")[0] for problem in files]
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    counted = (
        f"{len(files)} files it patched no longer hold what it wrote (replaced by the upgrade, or edited): "
        f"{', '.join(names[:shown])}{more}"
    )
    return [problem for problem in problems if problem not in files] + [counted]


def inspect(
    resolved: Resolved, *, check_upstream: bool = False, import_probe: bool = True, verifying: Sequence[Check] = ()
) -> TreeStatus:
    """The tree's state; with check_upstream, an upstream release's stock files also go through the
    checks (and `verifying`, the checks only verify runs: the set's behaviour test)."""
    status = _inspect(resolved, check_upstream=check_upstream, import_probe=import_probe, verifying=verifying)
    if resolved.target.guard_unseen:  # no guard can run there: said wherever the tree's state is
        status.guard_notes.append(unseen_guard_note(resolved.target))
    return status


def _inspect(resolved: Resolved, *, check_upstream: bool, import_probe: bool, verifying: Sequence[Check]) -> TreeStatus:
    kind = resolved.selection.kind
    root = resolved.target.root
    if kind == SelectionKind.UPSTREAM:
        checks = run_upstream_checks(resolved, import_probe=import_probe, verifying=verifying) if check_upstream else []
        state = read_state(root)
        stale = stale_entries(root, state, resolved.vllm_version)
        held = resolved.selection.holder in (Holder.UNKNOWN, Holder.HAND)  # nothing proves them stock
        return TreeStatus(
            TreeState.UNRECORDED if held else TreeState.UPSTREAM,
            checks=checks,
            stale=_named(stale, state),
            record=state,
            **_guard_fields(root, resolved.set_name, state, stale=bool(stale), version=resolved.vllm_version),
        )
    if kind == SelectionKind.UNSUPPORTED:  # its guard_fix is revert's, whoever else's record the guard names
        return TreeStatus(TreeState.UNSUPPORTED, **_guard_fields(root, resolved.set_name, None))
    assert kind == SelectionKind.PATCH

    plan = dry_run(resolved.target.root, resolved.patches)
    reports = [
        PatchReport(
            step.patch.name,
            step.patch.description,
            _PATCH_STATE[step.state],
            [f.path for f in step.patch.files],
            step.mismatch.describe() if step.mismatch else None,
        )
        for step in plan.steps
    ]
    state = adopted_earlier(read_state(root), resolved.set_name, resolved.patches)  # --patch files edited since
    stale = stale_entries(root, state, resolved.vllm_version)
    drifted, reinstalled, linked = drifted_and_reinstalled(resolved, state)
    fields = _guard_fields(
        root, resolved.set_name, state, stale=bool(stale), written=plan.touched_paths, version=resolved.vllm_version
    )
    linked = _unrefused(linked, fields["guard"])  # the guard's refusal says the others, with the repair
    if linked:
        drifted = sorted([*drifted, *linked])
        fields["symlink_fix"] = fields["symlink_fix"] or _symlink_fix(root, [f"{rel} " for rel in linked], state)
    reports = _applied_though_drifted(reports, drifted, state.entry(resolved.set_name))
    lost = _lost_to_drift(reports, drifted, state.entry(resolved.set_name))
    overall = _overall([replace(r, state=PatchState.APPLIED) if r.name in lost else r for r in reports])
    overall, reports = _other_library(resolved, state, fields, (overall, reports), drifted, stale)
    fields["store_notes"] += edited_since_apply(resolved, state, drifted) + _reinstalled_note(reinstalled, fields)
    return TreeStatus(
        # the state as recorded: a patch lost to the drift is that drift (its fix), not a partial series
        overall,
        reports,
        drifted,
        not_compiling(resolved, drifted, linked),
        plan,
        stale=_named(stale, state),
        lost=lost,
        record=state,
        chosen_sets=chosen_sets(state, resolved.vllm_version),
        reinstalled=reinstalled,
        linked=linked,
        **fields,
    )


def _other_library(
    resolved: Resolved,
    state: State,
    fields: dict[str, Any],
    found: tuple[TreeState, list[PatchReport]],
    drifted: list[str],
    stale: dict[str, str],
) -> tuple[TreeState, list[PatchReport]]:
    """A set applied from another library (changed_since: the patches that changed, into `fields`), and
    whether apply updates it: the library's series applies to the stock bytes a revert would restore.
    Then it is the earlier series whole (`found`'s state and reports so said), not a conflict. Its files
    drifted, or its record stale: that is what is said."""
    entry = state.entry(resolved.set_name)
    if entry is None and not drifted and has_provenance(resolved.target.root):
        _older_wheel_series(resolved, fields)
        return found
    changed = [] if drifted or resolved.set_name in stale else changed_since(entry, resolved.patches)
    if not changed or entry is None:
        return found
    over = plan_over_stock(resolved.target.root, entry, resolved.patches)
    updatable = over is not None and not over.conflicts
    fields.update(other_library=changed, updatable=updatable, earlier_texts=is_adhoc(resolved.set_name))
    if not updatable:
        return found
    # the library's changed patches are not applied yet; the earlier ones are, whole
    return TreeState.APPLIED, [
        replace(r, state=PatchState.NOT_APPLIED if r.problem else r.state, problem=None) for r in found[1]
    ]


def _older_wheel_series(resolved: Resolved, fields: dict[str, Any]) -> None:
    """A patched wheel's install whose series of the set is an earlier library's (its own texts
    judge it): the patches the library changed since, into `fields`, with apply as the fix (a set that
    shares a file with another set of the wheel: revert first, it reverts them together)."""
    reader = installed_wheel_reader()
    changed = reader.earlier_series(resolved.target.root, resolved.set_name)
    if changed:
        one = reader.updates_in_one_step(resolved.target.root, resolved.set_name)
        fields.update(other_library=changed, updatable=one, from_wheel=True)
        found = reader.find(resolved.target.root)
        if found is not None and Version(found.vllm_version).local:
            fields.update(reinstall=hints.pip_reinstall(found.vllm_version))


def _unrefused(linked: list[str], refused: list[str]) -> list[str]:
    """Those of `linked` the guard's refusal does not name (none runs, or an older one)."""
    heads = Heads(refused)
    return [rel for rel in linked if not heads.any_starts(f"{rel} ", f"{rel!r} ")]


def _reinstalled_note(files: list[str], fields: dict[str, Any]) -> list[str]:
    """The set's recorded files pip wrote since its apply, where the guard does not say so itself
    (none installed): no edit, and apply records them afresh."""
    if not files or any(problem.endswith(PIP_WROTE) or PIP_WROTE_ALL in problem for problem in fields["guard"]):
        return []
    one = len(files) == 1
    return [
        f"{few(files, sep=', ')} {'was' if one else 'were'} written by pip when vLLM was reinstalled (its RECORD lists "
        f"{'these' if one else 'their'} bytes): {hints.command('apply')} patches {'it' if one else 'them'} "
        "and records the installed build"
    ]


def edited_since_apply(resolved: Resolved, state: State, drifted: list[str]) -> list[str]:
    """A note of the set's recorded files that its record calls patched but that are not what its
    patches make of their originals (a hotfix, the record then changed), and what revert does."""
    entry = state.entry(resolved.set_name)
    root = resolved.target.root
    if entry is None and has_provenance(root):  # a patched wheel's install: its record's patched files
        recorded = {path for other in state.entries for path in other.files}  # a later apply's: judged by it
        read = lambda path: read_file(path, follow_symlinks=False)  # noqa: E731
        unlike = installed_wheel_reader().not_the_series_output(root, read, resolved.set_name)
        files = [p for p in unlike if p not in recorded and p not in drifted]
        if not files:
            return []
        revert = hints.command("revert", chosen=replace(hints.current(), set_name=None, set_names=()))
        return [
            f"{few(files, sep=', ')}: edited since the install (not what the wheel's patches make of the stock "
            f"file, though its record says so); {revert} refuses to replace it without --force (which keeps a copy)"
        ]
    if entry is None or resolved.patches is None or stale_note(root, entry, resolved.vllm_version):
        return []
    unmade = [p for p in not_made_by_the_series(root, entry, resolved.patches) if p not in drifted]
    touched = set(touched_paths(resolved.patches))
    # said created, yet no patch of the set touches them: not patchkit's, and revert leaves them (plan.restore_recorded)
    alien = [p for p in unmade if entry.files[p]["before"] is None and p not in touched]
    files = [p for p in unmade if p not in alien]
    copy = "a copy of it" if len(files) == 1 else "copies of them"
    notes = [
        f"{few(files, sep=', ')}: edited since apply (not what the recorded patches make of the original, "
        f"though the record says so); {hints.command('revert')} keeps {copy}"
    ] * bool(files)
    it, there = ("it", "it is") if len(alien) == 1 else ("them", "they are")
    return notes + [
        f"{few(alien, sep=', ')}: the record says patchkit created {it}, but none of the set's patches does "
        f"(not patchkit's); {hints.command('revert')} leaves {it} where {there}"
    ] * bool(alien)


def apply_finishes(status: TreeStatus) -> bool:
    """Whether `apply` brings the set whole from here: not applied, or partly applied with no conflict
    and no drift (apply refuses an edited file: revert --force, then apply, is the fix there)."""
    if status.plan is None or status.state not in (TreeState.NOT_APPLIED, TreeState.PARTIAL) or status.drifted:
        return False
    return status.state == TreeState.NOT_APPLIED or not status.plan.conflicts


def record_of(root: Path, status: TreeStatus) -> State:
    """The tree's record: as inspect read it for `status`, else read now (a status told from elsewhere)."""
    return status.record if status.record is not None else read_state(root)


def as_its_fix_leaves(resolved: Resolved, status: TreeStatus) -> tuple[Reader, bool] | None:
    """The set's files as the fix status names leaves them, and whether that fix is revert --force
    then apply (a drift; else apply): a set not applied or partly applied with no conflict, the
    plan; a drifted one, the series on the saved originals of the set's files (a check
    judged on the files as they are would fail where the fix makes it pass). None: no fix leaves the set whole that can be told (a conflict, no record or original)."""
    if apply_finishes(status):
        return (status.plan.content, False) if status.plan is not None else None
    if not status.drifted or status.linked:  # through a symlink: its hand repair first
        return None
    root = resolved.target.root
    entry = record_of(root, status).entry(resolved.set_name)
    if entry is None:
        return None
    originals: dict[str, bytes | None] = {}
    # every file of the set: revert --force puts them all back (a patch across a drifted file and
    # another, on the drifted one's original alone, would read as partly applied: a conflict)
    for path in entry.files:
        before = entry.files[path]["before"]
        try:
            originals[path] = None if before is None else read_object(root, before)
        except PatchkitError:  # a damaged saved original: status names it
            return None
    plan = dry_run(root, resolved.patches, originals)
    return None if plan.conflicts else (plan.content, True)


def chosen_sets(state: State, version: Version | None) -> tuple[str, ...]:
    """The sets the record chose (State.wanted), where the library holds another with a series for
    `version` (one apply alone would apply too: never chosen, or taken out by `revert --set`); else none."""
    names = state.wanted()
    if not names or version is None:
        return ()
    try:
        library = load_library(locate(hints.current().library).path)
    except PatchkitError:
        return ()
    left_out = [name for name, patch_set in library.items() if name not in names and has_series(patch_set, version)]
    return names if left_out and set(names) <= set(library) else ()


def set_drift_fix(resolved: Resolved, status: TreeStatus) -> str:
    """The fix of a drifted set, one for `run --apply`'s summary and preflight's finding: revert --force,
    then apply, of the set alone where only some launches need it (set.toml's [needed_by], as
    apply_fix names it) and revert takes it alone (not one set of a wheel of several); else status's
    (the sets the record chose); a file reached through a symlink: its hand repair."""
    if status.linked and status.symlink_fix:
        return status.drift_fix
    if getattr(resolved.selection.patch_set, "needed_by", None) is None or status.whole_wheel:
        return f"run {status.drift_fix}"
    chosen = hints.for_set(resolved.set_name)
    revert, apply = hints.command("revert", "--force", chosen=chosen), hints.command("apply", chosen=chosen)
    return f"run {revert} (it keeps a copy of your edits), then {apply}"


def apply_of(names: tuple[str, ...], *args: str) -> str:
    """apply of these sets (with `args`), where the user named none (their choice stands) and there are some."""
    opts = hints.current()
    if not names or opts.set_name or opts.set_names or opts.adhoc:
        return hints.command("apply", *args)
    return hints.command("apply", *_set_words(names), *args, chosen=_without_a_set())


def _named(stale: dict[str, str], state: State) -> list[str]:
    """Each stale record's note with its set: two sets applied to one release say the same note."""
    return [f"{STALE_PREFIX}{shown_name(name, state)}: {note}" for name, note in stale.items()]


def shown_name(name: str, state: State) -> str:
    """A recorded set's name as a person knows it: a --patch apply by its files (`the --patch file
    x.diff`), never its record name adhoc-<hex> (patchkit's own, not a name the user gave)."""
    entry = next((e for e in state.entries if e.set_name == name), None) if is_adhoc(name) else None
    return name if entry is None else shown_set(entry)


STALE_PREFIX = "the record of "  # a stale record's note begins with it, then the set's name


def stale_said(names: list[str], note: str) -> str:
    """The records of `names`, stale for the same `note`, said in one sentence (an upgrade of vLLM
    under three sets is one fact, not three)."""
    if len(names) == 1:
        return f"{STALE_PREFIX}{names[0]}: {note}"
    return f"the records of {', '.join(names)}: " + note.replace("the old record is stale", "the old records are stale")


def stale_grouped(stale: dict[str, str]) -> list[tuple[list[str], str]]:
    """(the sets, their note) for each note the stale records (set name -> note) say."""
    by_note: dict[str, list[str]] = {}
    for name, note in stale.items():
        by_note.setdefault(note, []).append(name)
    return [(names, note) for note, names in by_note.items()]


def _guard_fields(
    root: Path,
    set_name: str,
    state: State | None,
    *,
    stale: bool = False,
    written: Collection[str] | None = None,
    version: Version | None = None,
) -> dict[str, Any]:
    """What the installed guard refuses, its notes, and the fix when another set's record (in
    `state`, None: not asked) is what it refuses. The recorded sets (the library loaded again)
    only where a fix names them: a refusal, a guard gone, a `stale` record. `written`: the files
    the set's series writes (None: not known); `version`: the installed vLLM's (None: not known)."""
    verdict = launch_verdict(root, state)  # the guard says files stock again itself, folded when all are
    refused = verdict.problems
    missing = missing_guard(root, state)
    some_stock_again = _stock_again_only(refused, verdict)
    series = _series_of_recorded(state, version) if refused or missing or stale else {}
    return {
        "all_stock_again": verdict.whole and len(refused) == 1,
        "some_stock_again": some_stock_again,
        "unwritten": _unwritten(state, set_name, written, verdict.stock_again) if some_stock_again else 0,
        "guard": refused,
        "guard_notes": older_guard_notes(root, state)
        + unrecorded_guard_notes(root, state)
        + _wheel_without_guard(root, state),
        "store_notes": left_by_a_killed_command(root, state) + unknown_in_objects(root) + records_unjudged(state),
        "guard_installed": is_installed(root),
        "others_fix": _others_fix(state, set_name, refused, verdict.stock_again, version)
        if state is not None
        else None,
        "whole_wheel": state is not None and _of_a_wheel_of_several_sets(root, set_name, state),
        "wheel_refused": state is not None and _refuses_the_wheels_files(root, state, refused),
        "recorded_sets": _recorded_sets(state) if refused or missing or stale else (),
        **series,
        "guard_missing": missing,
        **_hanging(root, state),
        "symlink_fix": _symlink_fix(root, refused, state),
        "unheld_breaks": _unheld_breaks(root, state, version) if any(UNHELD in p for p in refused) else {},
        "wheel_breaks": _wheel_breaks(root, version) if any(UNHELD_WHEEL in p for p in refused) else "",
    }


def _wheel_breaks(root: Path, version: Version | None) -> str | None:
    """TreeStatus.wheel_breaks: the installed `wheel --patch` build judged by the library at hand on the tree."""
    held = import_module("patchkit.engine.held")  # as _unheld_breaks: no start-up path parses contracts
    judged: tuple[str, str | None] | None = held.wheel_breaks(root, _sets_at_hand(), version, _tree_reader(root))
    return "" if judged is None else judged[1]


def _unheld_breaks(root: Path, state: State | None, version: Version | None) -> dict[str, str | None]:
    """TreeStatus.unheld_breaks: the older --patch records judged by the library at hand on the tree."""
    if state is None:
        return {}
    # loaded here only: it parses the sets' contracts, which no start-up path (`run`'s fast one) needs
    held = import_module("patchkit.engine.held")
    breaks: dict[str, str | None] = held.unheld_breaks(root, state, _sets_at_hand(), version, _tree_reader(root))
    return breaks


def _sets_at_hand() -> tuple[Any, ...]:
    """The sets of the library at hand (none where it cannot be read): what held judges a diff against."""
    try:
        return tuple(load_library(locate(hints.current().library).path).values())
    except PatchkitError:
        return ()


def _tree_reader(root: Path) -> Callable[[str], bytes | None]:
    """A reader of the tree's files that follows no link out of it."""
    return lambda path: read_file(root / path, follow_symlinks=False)


def _hanging(root: Path, state: State | None) -> dict[str, list[str]]:
    """TreeStatus' hanging and unjudged_bytecode: the recorded files' bytecode is the guard's to judge."""
    scan = hanging_modules(root, launch_tags(root), [p for e in (state.entries if state else []) for p in e.files])
    return {"hanging": scan.paths, "unjudged_bytecode": scan.unjudged}


def records_unjudged(state: State | None) -> list[str]:
    """A note for each set the record holds that the library at hand lacks (applied from another
    library, or a record nobody wrote): no set judged here names it, and revert would write back
    what its record says."""
    if state is None or not state.entries or hints.current().adhoc:
        return []
    try:
        known = set(load_library(locate(hints.current().library).path))
    except PatchkitError:
        return []
    found = []
    for entry in (e for e in state.entries if not is_adhoc(e.set_name) and e.set_name not in known):
        files = sorted(entry.files)
        named = ", ".join(map(escaped, files[:3])) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        chosen = hints.for_set(entry.set_name, library=entry.library) if entry.library else None
        judge = f"{hints.command('status', chosen=chosen)} judges it" if chosen else "no library is named"
        found.append(
            f"the record also holds {shown_set(entry)} ({named or 'no file'}), which the library at hand does not "
            f"have: not judged here ({judge})"
        )
    return found


def _unwritten(state: State | None, set_name: str, written: Collection[str] | None, stock: frozenset[str]) -> int:
    """Of the set's recorded files the guard refuses as `stock` again (or gone), how many no patch of
    its series (which writes `written`; None: not known) writes: apply cannot put them back."""
    entry = state.entry(set_name) if state is not None else None
    if entry is None or written is None:
        return 0
    written = set(written)
    return sum(1 for path in entry.files if path in stock and path not in written)


def _stock_again_only(refused: list[str], verdict: Verdict) -> int:
    """How many files the guard refuses, when it refuses only recorded files holding their
    originals again (some, not all: all is one line of its own); else 0."""
    said = {rel + words for rel in verdict.stock_again for words in STOCK_AGAIN_WORDS}
    return len(refused) if refused and not verdict.whole and set(refused) <= said else 0


def _symlink_fix(root: Path, refused: list[str], state: State | None) -> str | None:
    """What replaces the symlink on the way to a recorded file the guard refuses for it (None: none)."""
    if state is None or not refused:
        return None
    recorded = [*(path for entry in state.entries for path in entry.files), *state.guard]
    heads, plain = Heads(refused), plain_directories(root)  # the directories shared by the paths: each looked at once
    for rel in recorded:
        if not heads.any_starts(f"{rel} ", f"{rel!r} "):
            continue
        found = first_symlink(root, rel, plain)
        if found is not None:
            return hints.replace_symlink(found[0], directory=found[1])
    # a symlinked __pycache__ or .pyc, which the guard does not follow: apply's bytecode fix writes through none
    linked = next((problem for problem in refused if SYMLINKED in problem), None)
    if linked is not None:
        return symlinked_bytecode_fix(root, linked)
    # a fifo or a device named as a recorded file's bytecode: the import would wait on it; no command removes it
    blocking = [p.partition(" " + NOT_BYTECODE)[0].removesuffix(PREFIXED) for p in refused if NOT_BYTECODE in p]
    paths = [str(root / path) if not os.path.isabs(path) else path for path in blocking]
    return f"run {hints.remove_files(paths)} (Python writes its bytecode again)" if paths else None


def symlinked_bytecode_fix(root: Path, problem: str) -> str | None:
    """The removal of the symlinked bytecode the guard refuses: the one it names, or with more, every
    symlinked __pycache__ and .pyc in the tree (or the prefix's directory it names): Python writes none.
    None: `problem` is no such refusal."""
    if SYMLINKED not in problem:
        return None
    first = problem.partition(SYMLINKED)[0]
    path = Path(first.removesuffix(PREFIXED)) if first.endswith(PREFIXED) else root / first
    if MORE_SYMLINKED not in problem:
        return f"run {hints.remove_files([str(path)])} (Python then compiles the source)"
    where = shlex.quote(str(path.parent if first.endswith(PREFIXED) else root))
    return f"run `find {where} -type l \\( -name __pycache__ -o -name '*.pyc' \\) -delete` (Python then compiles the sources)"


def _series_of_recorded(state: State | None, version: Version | None) -> dict[str, tuple[str, ...]]:
    """no_series_sets and series_sets of TreeStatus: the recorded sets with no series for `version`
    (not shipped by vLLM either), and the others; none where a record is not of the user's library
    (an ad-hoc apply: --set cannot name it), or none lacks a series."""
    names = [entry.set_name for entry in state.entries] if state is not None and version is not None else []
    try:
        library = load_library(locate(hints.current().library).path) if names else {}
    except PatchkitError:
        return {}
    if not names or any(name not in library for name in names):
        return {}
    assert version is not None
    gaps = tuple(
        name for name in names if not has_series(library[name], version) and not _shipped(library[name], version)
    )
    if not gaps:
        return {}
    return {"no_series_sets": gaps, "series_sets": tuple(name for name in names if name not in gaps)}


def _set_words(names: Sequence[str]) -> list[str]:
    """--set NAME for each of `names`."""
    return [word for name in names for word in ("--set", name)]


def _shipped(patch_set: PatchSetDef, version: Version) -> bool:
    """vLLM `version` ships the set's change itself (its upstream range)."""
    return patch_set.upstream is not None and in_range(patch_set.upstream, Version(version.public))


def _recorded_sets(state: State | None) -> tuple[str, ...]:
    """The sets `state` records, when each is of the user's library and the library holds others
    (else none: apply alone applies the same sets, or a --set would not find one)."""
    return _fewer_than_the_library(tuple(entry.set_name for entry in state.entries) if state is not None else ())


def _fewer_than_the_library(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names`, when each is of the user's library and the library holds others (else none)."""
    try:
        library = set(load_library(locate(hints.current().library).path)) if names else set()
    except PatchkitError:
        return ()
    return names if set(names) < library else ()


def guard_refusal(
    root: Path, set_name: str, state: State, written: Collection[str] | None = None, version: Version | None = None
) -> tuple[list[str], str] | None:
    """What the installed guard refuses a launch of the tree for, and the fix `status` names for a
    set that is itself as applied (None: the guard lets it launch). `written`: the files the set's
    series writes, `version` the installed vLLM's (None: not known)."""
    fields = _guard_fields(root, set_name, state, written=written, version=version)
    if not fields["guard"]:
        return None
    found = TreeStatus(TreeState.APPLIED, **fields, record=state)
    return found.guard, found.guard_fix


_EVERY_SET = (("revert", "--force"), ("apply",))  # the fix of a patched wheel's edited file, without --set


def _refuses_the_wheels_files(root: Path, state: State, refused: list[str]) -> bool:
    """Whether the guard refuses a file the installed patched wheel patched and no apply recorded."""
    if not refused or not has_provenance(root):
        return False
    try:
        found = installed_wheel_reader().find(root)
    except PatchkitError:
        return False
    recorded = {path for entry in state.entries for path in entry.files}
    wheels = [path for path in (found.files if found is not None else ()) if path not in recorded]
    heads = Heads(refused)
    return any(heads.any_starts(f"{path} ") for path in wheels)


def _of_a_wheel_of_several_sets(root: Path, set_name: str, state: State) -> bool:
    """Whether the set's files came with a wheel of several sets that holds it (and no apply of its own)."""
    if state.entry(set_name) is not None or not has_provenance(root):
        return False
    try:
        found = installed_wheel_reader().find(root)
    except PatchkitError:
        return False
    return found is not None and len(found.set_names) > 1 and set_name in found.set_names


def _without_a_set() -> Options:
    return replace(hints.current(), set_name=None, set_names=())


def _wheel_without_guard(root: Path, state: State | None) -> list[str]:
    """A vLLM a patched wheel installed (no apply recorded, none told --no-guard) runs without the
    launch guard: a wheel installs none, and nothing else would lead to the apply that does."""
    if state is None or state.entries or state.no_guard or is_installed(root) or not has_provenance(root):
        return []
    try:
        reverted = installed_wheel_reader().stock_again(root, read_file)
    except PatchkitError:
        reverted = None
    if reverted is not None:  # nothing patched runs: a guard is not what it lacks
        return [
            f"the files the patched wheel (+{reverted.record.label}) changed hold their stock bytes again (reverted); "
            "its dist-info still names that label: reinstalling the stock vLLM wheel makes it agree"
        ]
    return [f"a patched wheel installs no launch guard: {hints.command('apply')} installs it"]


def left_by_a_killed_command(root: Path, state: State | None) -> list[str]:
    """With nothing recorded and no transaction under way, what a killed command (or a record removed
    by hand) left in .patchkit/: an empty one, or originals no record names. Harmless to a launch
    (the guard passes, as status does); `revert` removes it. `state`: the record (None: not read)."""
    meta = meta_dir(root)
    if (
        state is None
        or not state.holds_nothing()
        or meta.is_symlink()
        or not meta.is_dir()
        or (meta / "journal.json").exists()
    ):
        return []
    objects = meta / "objects"
    try:
        names = os.listdir(objects) if objects.is_dir() and not objects.is_symlink() else []
        empty = not os.listdir(meta)
    except OSError:
        return []
    held = sum(1 for name in names if is_object(objects / name))  # anything else: revert keeps it
    revert = hints.command("revert")
    if held:
        return [f"{META_DIR}/objects/ holds {held} file(s) no record names: {revert} removes them"]
    return [f"{META_DIR}/ is empty: {revert} removes it"] if empty else []


def unknown_in_objects(root: Path) -> list[str]:
    """The files in .patchkit/objects/ no object can be (not named by a sha256, nor patchkit's own
    temporary name): every command keeps them, revert too, and .patchkit/ with them."""
    objects = meta_dir(root) / "objects"
    try:
        names = os.listdir(objects) if objects.is_dir() and not objects.is_symlink() else []
    except OSError:
        return []
    unknown = sorted(n for n in names if not is_object(objects / n) and not _OBJECT_TEMP.fullmatch(n))
    if not unknown:
        return []
    return [
        f"{META_DIR}/objects/ holds {few(unknown, sep=', ')}: no saved original of patchkit's (those are regular "
        "files named by their sha256), so every command keeps it; remove it yourself if you do not need it"
    ]


_OBJECT_TEMP = LazyPattern(r"\.[0-9a-f]{64}\.patchkit-[0-9A-Za-z]+\.tmp")  # store.objects' link, store.state's write


def _others_fix(
    state: State, set_name: str, refused: list[str], stock: frozenset[str] = frozenset(), version: Version | None = None
) -> str | None:
    """The commands that settle the other records whose files the guard names (none: none does): a
    set whose refused files are all `stock` again is applied (reverted first where no patch of its
    series for `version` writes some of them: apply leaves those), others reverted (keeping the
    edits) and applied; then apply, where files those leave are stock again."""
    if not refused:
        return None
    entries = [e for e in state.entries if e.set_name != set_name]
    heads = Heads(refused)
    named = [e for e in entries if any(heads.any_starts(f"{path} ") for path in e.files)]
    if not named:
        return None
    fixes, at_hand = [], sets_at_hand()  # the library read once, not once per set named
    library: dict[str, PatchSetDef] | None = None  # its sets, read where a fix needs what a series writes
    for entry in named:
        chosen = selection_of(entry, at_hand)
        revert, apply = hints.command("revert", "--force", chosen=chosen), hints.command("apply", chosen=chosen)
        its = {path for path in entry.files if heads.any_starts(f"{path} ")}
        if its <= stock and library is None:
            library = _library_at_hand()
        written = _written_by(library.get(entry.set_name), version) if its <= stock and library else None
        if written is not None and not its <= written:
            revert = hints.command("revert", chosen=chosen)
            fixes.append(f"{revert} (its record names files no patch of the set writes), then {apply}")
        else:
            fixes.append(apply if its <= stock else f"{revert} (it keeps a copy of edits), then {apply}")
    whose = " and ".join(shown_set(entry) for entry in named)
    left_stock = stock - {path for entry in named for path in entry.files}
    then = f"; then {hints.command('apply')} (for the files stock again)" if left_stock else ""
    return f"the refused files belong to {whose}: run " + "; and ".join(fixes) + then


def _library_at_hand() -> dict[str, PatchSetDef]:
    try:
        return load_library(locate(hints.current().library).path)
    except PatchkitError:
        return {}


def _written_by(patch_set: PatchSetDef | None, version: Version | None) -> set[str] | None:
    """The files the set's series for `version` writes (None: not known: the set is not in the
    library at hand, or has no series, or the version is not known)."""
    try:
        selection = select(patch_set, version) if patch_set is not None and version is not None else None
    except PatchkitError:
        selection = None
    if selection is None or selection.kind != SelectionKind.PATCH:
        return None
    return set(touched_paths(selection.patches))


def selection_of(entry: Entry, at_hand: Collection[str] | None = None) -> Options:
    """The user's selection with this recorded set chosen: its --set, or an ad-hoc set's --patch files.
    `at_hand`: the sets of the user's library, when read already (None: read here)."""
    if is_adhoc(entry.set_name):
        return hints.for_set(None, recorded_patch_files(entry))
    held = entry.set_name in (sets_at_hand() if at_hand is None else at_hand)
    return hints.for_set(entry.set_name, library=None if held else entry.library)


def sets_at_hand() -> frozenset[str]:
    """The sets of the user's library (--patches, else the one patchkit finds); none when it cannot
    be read. A hint naming another set's record names the library it was applied from otherwise."""
    try:
        return frozenset(load_library(locate(hints.current().library).path))
    except PatchkitError:
        return frozenset()


def _applied_though_drifted(reports: list[PatchReport], drifted: list[str], entry: Entry | None) -> list[PatchReport]:
    """A recorded patch whose file was edited or deleted since, so that its hunk no longer matches
    (a conflict), is applied, its file drifted (said once, as the drift): not also a conflict that
    makes the series partial."""
    if entry is None or not drifted:
        return reports
    recorded = {p["name"] for p in entry.patches}
    return [
        replace(r, state=PatchState.APPLIED, problem=None)
        if r.state == PatchState.CONFLICT and r.name in recorded and set(r.files) & set(drifted)
        else r
        for r in reports
    ]


def conflicting_files(conflicts: Sequence[PatchStep]) -> list[str]:
    """The files these conflicting steps find other lines in than they expect."""
    return sorted({step.mismatch.path for step in conflicts if step.mismatch is not None})


def in_the_way(conflicts: Sequence[PatchStep]) -> list[str]:
    """The files these conflicting steps would create (or rename to) that are there already."""
    reasons = (NEW_FILE_EXISTS, RENAME_TARGET_EXISTS)
    return sorted({s.mismatch.path for s in conflicts if s.mismatch is not None and s.mismatch.reason in reasons})


def local_edit_said(files: list[str], version: Version | str | None, root: Path, in_the_way: Sequence[str] = ()) -> str:
    """Why a series that records nothing does not apply: its files differ from stock where it changes
    them: an earlier apply the record holds of them (a --patch file edited since), or an edit; or a
    file it creates is there already (`in_the_way`): not patchkit's, or vLLM's own."""
    owner = _earlier_owner(root, files)
    if owner is not None:
        entry = owner[0]
        return f"{', '.join(files)} {_differ(files)} from stock vLLM {version}: an earlier {_applied_as(entry)} is applied here"
    there = [f for f in files if f in in_the_way]
    edited = [f for f in files if f not in there]
    said = (
        []
        if not edited
        else [
            f"{', '.join(edited)} {_differ(edited)} from stock vLLM {version} where the series changes it (a local edit?)"
        ]
    )
    vllms = _listed_by_vllm(root, version, there)
    theirs = [f for f in there if f not in vllms]
    if theirs:
        one = len(theirs) == 1
        said.append(
            f"{', '.join(theirs)}, which the series creates, already {'exists' if one else 'exist'} and "
            f"{'is' if one else 'are'} not patchkit's (no record names {'it' if one else 'them'})"
        )
    if vllms:
        said.append(f"{', '.join(vllms)}, which the series creates, is vLLM {version}'s own (its RECORD lists it)")
    return "; ".join(said)


def _differ(files: list[str]) -> str:
    return "differs" if len(files) == 1 else "differ"


def _listed_by_vllm(root: Path, version: Version | str | None, paths: list[str]) -> list[str]:
    """Those of `paths` the installed vLLM's RECORD lists (its own files; none without a RECORD)."""
    record = tree_record(root, version, paths) if paths else None
    return [path for path in paths if record is not None and path in record.hashes]


def local_edit_fix(
    root: Path,
    version: Version | str | None,
    files: list[str],
    set_name: str | None = None,
    in_the_way: Sequence[str] = (),
) -> str:
    """The fix of that: the earlier apply undone, then apply; else the stock files back, then apply
    (--force would not help: it accepts files that differ from the RECORD, never a hunk that does not match).
    `set_name`: the set that does not apply, named on the fetch (which then lays out its files only,
    never another set's patched ones) and on the apply. `in_the_way`: files the series creates that
    are there already: the user's are moved aside (`mv`), the apply then creates its own."""
    chosen = hints.for_set(set_name) if set_name and not is_adhoc(set_name) else None
    owner = _earlier_owner(root, files)
    if owner is not None:
        again = hints.command("apply", chosen=chosen)
        return f"{undo_command(owner[0], len(owner[1].entries), root)} undoes it, then {again} applies the new one"
    there = [f for f in files if f in in_the_way]
    if there and _listed_by_vllm(root, version, there):  # vLLM's own file: moving it breaks vLLM
        return f"the series does not fit vLLM {version}: {hints.command('status')} names the sets that cover it"
    if there:
        aside = " && ".join(shlex.join(["mv", "--", str(root / f), f"{root / f}.mine"]) for f in there)
        rest = [f for f in files if f not in there]
        if not rest:  # --force would not help: no hunk of a file to create is judged, it is refused
            return f"move yours aside (as .mine), then apply: `{aside} && {hints.command('apply', chosen=chosen).strip('`')}`"
        return f"move yours aside (`{aside}`), then " + local_edit_fix(root, version, rest, set_name)
    which = "file" if len(files) == 1 else "files"
    # a checkout's files: git (or the user's source) has them, not pip: it installs no checkout's files
    back = checkout_restore(root, files) or f"run {stock_files_command(root, version, chosen)}"
    there = [f for f in files if os.path.isfile(root / f)]  # a file gone has no edit to keep
    keep = " && ".join(shlex.join(["cp", "-p", "--", str(root / f), f"{root / f}.mine"]) for f in there)
    steps = [f"`{keep}`"] * bool(there) + [back.removeprefix("run "), hints.command("apply", chosen=chosen)]
    said = ["keep your edit as .mine"] * bool(there) + [f"put the stock {which} back", "apply"]
    if all(step.startswith("`") and step.endswith("`") and step.count("`") == 2 for step in steps):
        # each a whole command: one line to paste, each step only once the one before it succeeded
        return f"{', '.join(said)}: `{' && '.join(step.strip('`') for step in steps)}`"
    kept = f"keep your edit ({steps[0]}), " if there else ""
    return f"{kept}{back} (the stock {which} back), then {steps[-1]}"


def _earlier_owner(root: Path, files: list[str]) -> tuple[Entry, State] | None:
    """The recorded apply whose change those files hold (the last of them), if the record holds one:
    patchkit's own change, never "a local edit"."""
    try:
        state = read_state(root)
    except PatchkitError:
        return None
    owners = [e for e in state.entries if set(files) & set(e.files)]
    return (owners[-1], state) if owners else None


def _applied_as(entry: Entry) -> str:
    """`my.patch (applied 2026-12-03 14:31 UTC)`, or `set eagle3 (applied …)`."""
    who = ", ".join(p["name"] for p in entry.patches) if is_adhoc(entry.set_name) else f"set {entry.set_name}"
    return f"{who} (applied {applied_on(entry)})"


def undo_command(entry: Entry, recorded: int, root: Path) -> str:
    """The revert of that one recorded set: its --set or --patch files; a --patch apply whose files
    moved since by its record's name, or plain `revert` when it is all the tree records; with
    --force where only the record vouches for what it writes back (revert asks for it then)."""
    force = ("--force",) if needs_force(root, entry) else ()
    if not moved_patches(entry):
        return hints.command("revert", *force, chosen=selection_of(entry))
    if recorded == 1:  # `recorded`: how many sets the tree records
        return hints.command("revert", *force, chosen=hints.for_set(None))
    return hints.command("revert", *force, chosen=hints.for_set(entry.set_name))


def _lost_to_drift(reports: list[PatchReport], drifted: list[str], entry: Entry | None) -> list[str]:
    """The recorded patches a drifted file no longer holds (it would apply again: a file put back to
    stock, then edited): not applied, said with the drift."""
    recorded = {p["name"] for p in entry.patches} if entry is not None else set()
    return [
        r.name
        for r in reports
        if r.state == PatchState.NOT_APPLIED and r.name in recorded and set(r.files) & set(drifted)
    ]


def _overall(reports: list[PatchReport]) -> TreeState:
    """applied, not applied, or partly; a conflict with none applied is no partial series (an
    edit inside a hunk of a tree never applied is a conflict, not "partly applied")."""
    states = {r.state for r in reports}
    if states == {PatchState.APPLIED}:
        return TreeState.APPLIED
    if states == {PatchState.NOT_APPLIED}:
        return TreeState.NOT_APPLIED
    return TreeState.PARTIAL if PatchState.APPLIED in states else TreeState.CONFLICT


def drifted_files(resolved: Resolved, state: State) -> list[str]:
    """Recorded files (of `state`, the tree's record) whose content is neither what patchkit wrote
    nor the original (a record left stale by an upgrade of vLLM is no evidence: see stale_entries)."""
    return drifted_and_reinstalled(resolved, state)[0]


class Drifted(NamedTuple):
    """The set's recorded files as the drift check finds them: drifted, written by pip since the
    apply (pip_wrote: no edit, not drifted), and reached through a symlink (never opened: no file
    patchkit wrote, and no command writes through it; the guard refuses it)."""

    drifted: list[str]
    reinstalled: list[str]
    linked: list[str]


def drifted_and_reinstalled(resolved: Resolved, state: State) -> Drifted:
    """drifted_files, the set's recorded files pip wrote since, and those reached through a symlink."""
    root = resolved.target.root
    entry = state.entry(resolved.set_name)
    if entry is None:  # installed from a patched wheel, perhaps (other sets applied on it or not): its provenance
        if not has_provenance(root):
            return Drifted([], [], [])
        read = lambda path: read_file(path, follow_symlinks=False)  # noqa: E731
        recorded = {
            path for other in state.entries for path in other.files
        }  # a later apply's file: its record judges it
        drifted = installed_wheel_reader().drifted(root, read, resolved.set_name)
        return Drifted([path for path in drifted if path not in recorded], [], [])
    if stale_note(root, entry, resolved.vllm_version):
        return Drifted([], [], [])
    found = {path: recorded_sha256(root, path) for path in sorted(entry.files)}  # each walked to a symlink
    linked = [path for path, sha in found.items() if sha == THROUGH_A_SYMLINK]
    changed = [
        path for path, sha in found.items() if sha != THROUGH_A_SYMLINK and sha not in state.accepted(entry, path)
    ]
    # pip wrote them (vLLM reinstalled): no edit; apply records them afresh (pip_wrote)
    reinstalled = pip_wrote(root, state, entry, resolved.vllm_version) if changed else []
    return Drifted([path for path in changed if path not in reinstalled], reinstalled, linked)


def not_compiling(resolved: Resolved, drifted: list[str], linked: Collection[str] = ()) -> list[CheckResult]:
    """The syntax check's failure ("line 14: invalid syntax", the line and a caret) for each drifted
    Python file that does not compile as it is on disk: the edit that drifted it then breaks the launch."""
    one: dict[str, str] = {}  # each drifted source -> the one of its file judged (hard links: one file)
    first: dict[tuple[int, int, int, int], str] = {}
    unread = set(linked)  # reached through a symlink: never followed
    for path in (path for path in drifted if path.endswith(".py") and path not in unread):
        try:
            info = os.stat(resolved.target.root / path)
        except OSError:
            continue
        if info.st_size <= LARGEST_PARSED:  # a larger one is not parsed (the check passes it unread)
            one[path] = first.setdefault((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns), path)
    if not one:
        return []
    results = run_checks(upstream_context(resolved, sorted(set(one.values())), import_probe=False), only=("syntax",))
    failed = {r.path: r for r in results if r.failed and r.path}
    return [replace(failed[judged], path=path) for path, judged in sorted(one.items()) if judged in failed]


def check_context(
    resolved: Resolved,
    plan: Plan,
    *,
    on_disk: bool = False,
    import_probe: bool = True,
    written: Mapping[str, tuple[Landed, bytes]] | None = None,
    state: State | None = None,
) -> CheckContext:
    """What the checks see: the planned contents (or the files as on disk), and the stock ones.
    `written`: what this plan's commit wrote (transaction.commit), read back as the very bytes
    written while each file is still the one written. `state`: the tree's record as the command
    read it (None: a check that needs it reads it)."""
    root = resolved.target.root
    disk = _disk_reader(root, written)
    return CheckContext(
        paths=plan.touched_paths,
        read=disk if on_disk else plan.content,
        python=resolved.target.python,
        read_stock=plan.stock_content,
        read_current=disk if on_disk else plan.disk_content,  # on disk: one read shared by every check
        root=root,
        patch_set=resolved.selection.patch_set,
        version=resolved.vllm_version,
        on_disk=on_disk,
        import_probe=import_probe,
        state=state,
    )


def _disk_reader(root: Path, written: Mapping[str, tuple[Landed, bytes]] | None = None) -> Reader:
    """Reads each file once for all the checks of one context. A file just written (`written`,
    path -> how the commit left it and the bytes) is not read again while lstat shows that very
    file there, unchanged since (device, inode, size, mtime, and the ctime no one but the kernel
    sets): its content is the bytes written, the same object, so a 200 MB file costs no second
    read and copy."""
    read = {}

    def reader(path: str) -> bytes | None:
        if path not in read:
            landed, content = written.get(path, (None, None)) if written else (None, None)
            read[path] = content if landed and _still(root / path, landed) else read_file(root / path)
        return read[path]

    return reader


def _still(path: Path, landed: Landed) -> bool:
    """Whether the file at `path` (not followed if a symlink) is still as `landed` describes it."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and Landed.of(info) == landed


def upstream_check_paths(patch_set: PatchSetDef | None) -> list[str]:
    """The files an upstream release is checked on: those of the set's newest series."""
    release = newest_release(patch_set) if patch_set else None
    if patch_set is None or release is None:
        return []
    return sorted({f.source_path or f.path for p in release.read_patches(patch_set.roots) for f in p.files})


def newest_release(patch_set: PatchSetDef) -> Release | None:
    """The series for the highest version the set's [[releases]] specifiers name."""

    def highest(release: Release) -> Version:
        named = []
        for spec in release.versions:
            try:
                named.append(Version(spec.version.removesuffix(".*")))
            except ValueError:
                continue
        return max(named, default=Version("0"))

    return max(patch_set.releases, key=highest, default=None)


def upstream_context(resolved: Resolved, paths: list[str], *, import_probe: bool = True) -> CheckContext:
    """The stock files as they are: what was patched before is checked as vLLM now ships it."""
    root = resolved.target.root
    disk = _disk_reader(root)
    return CheckContext(
        paths=paths,
        read=disk,
        python=resolved.target.python,
        read_stock=disk,
        root=root,
        patch_set=resolved.selection.patch_set,
        version=resolved.vllm_version,
        on_disk=True,
        import_probe=import_probe,
    )


def run_checks(
    ctx: CheckContext, only: tuple[str, ...] | None = None, *, verifying: Sequence[Check] = ()
) -> list[CheckResult]:
    """Every registered check on `ctx` (or those named `only`; `verifying`: the checks only verify
    runs, after them): the registry (each check module, pyflakes) loads on the first call."""
    # lazy: the checks load only when checks run
    from patchkit.checks import registry

    return registry.run_checks(ctx, registry.named(only) if only else registry.default_checks(verifying))


def run_upstream_checks(
    resolved: Resolved, *, import_probe: bool = True, verifying: Sequence[Check] = ()
) -> list[CheckResult]:
    # a series found in the stock files: its own files; else those of the set's newest series
    paths = touched_paths(resolved.selection.patches) or upstream_check_paths(resolved.selection.patch_set)
    context = upstream_context(resolved, paths, import_probe=import_probe)
    return run_checks(context, verifying=verifying) if paths else []


_FOUND_APPLIED = (TreeState.APPLIED, TreeState.PARTIAL)  # the states whose patches apply may find unrecorded


def found_applied(
    resolved: Resolved, state: State, plan: Plan, *, stale: bool = False
) -> dict[str, tuple[bytes | None, bytes | None]] | None:
    """The files of the set's patches `plan` finds applied where the tree records no apply of the
    set (`stale`: its entry is one an upgrade of vLLM made stale): path -> (original the patches
    reversed give, bytes now). None: recorded, none found, or a patched wheel's (its provenance's)."""
    root = resolved.target.root
    if (state.entry(resolved.set_name) is not None and not stale) or has_provenance(root):
        return None
    applied = [step.patch for step in plan.steps if step.state == StepState.ALREADY_APPLIED]
    undo = dry_run(root, [patch.reversed() for patch in reversed(applied)]) if applied else None
    if undo is None or undo.conflicts or not undo.changes:
        return None
    return {path: (original, now) for path, (now, original) in undo.changes.items()}


def with_found_judged(resolved: Resolved, status: TreeStatus) -> TreeStatus:
    """`status` of a set found applied that the tree does not record (its .patchkit/ lost): a file
    vLLM's RECORD says is not stock once the set's hunks are reversed is an edit apply refuses to
    record, so status says what apply will. Only that path pays for the RECORD read."""
    record, plan = status.record, status.plan
    if status.state not in _FOUND_APPLIED or status.drifted or record is None or plan is None:
        return status
    if record.entry(resolved.set_name) is not None:  # ordinary status: recorded (a stale record says so)
        return status
    found = found_applied(resolved, record, plan)
    if found is None:
        return status
    edited = unlike_stock(resolved.target.root, resolved.vllm_version, {path: pair[0] for path, pair in found.items()})
    if not edited:
        return status
    notes = [note for note in status.guard_notes if not note.startswith(UNRECORDED_GUARD)]  # "apply records it": no
    return replace(status, found_edited=edited[:1], guard_notes=notes)


# A set's state, worst last: the overall state is the worst of the covering sets' (upstream ones
# have nothing to apply: they count only when every set is upstream).
_STATE_ORDER = (
    TreeState.UPSTREAM,
    TreeState.APPLIED,
    TreeState.UNRECORDED,
    TreeState.NOT_APPLIED,
    TreeState.PARTIAL,
    TreeState.CONFLICT,
)


def overall_state(states: set[TreeState]) -> TreeState:
    """Several sets' states as one (status and preflight alike): an upstream set has nothing to
    apply, so it counts only when every set is upstream; sets applied (recorded or not) beside
    sets not applied make a partial tree; none applied: the worst."""
    if not states:
        return TreeState.NOT_APPLIED
    if states <= {TreeState.UPSTREAM}:
        return TreeState.UPSTREAM
    states = states - {TreeState.UPSTREAM}
    held = {TreeState.APPLIED, TreeState.UNRECORDED}  # the change in, recorded or not: no partial tree
    if len(states) > 1 and states & {*held, TreeState.PARTIAL} and not states <= held:
        return TreeState.PARTIAL
    return max(states, key=_STATE_ORDER.index)  # none applied: not-applied, or a conflict
