"""Reports of a target's status, of checks and of releases, as text, JSON or JUnit."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from patchkit.base import hints
from patchkit.base.enums import CheckStatus, Holder, PatchState, ReleaseOutcome, TreeState
from patchkit.checks import CheckResult, integrity, shadow
from patchkit.checks import bytecode as pyc
from patchkit.cli.ui.findings import GUARD, Failure, check_failures, count_line, fold, located
from patchkit.cli.ui.header import show_header, show_library, show_target
from patchkit.cli.ui.json_views import plan_json, status_json
from patchkit.cli.ui.junit import JUnitCase, check_cases, junit_suites
from patchkit.cli.ui.run import write_junit
from patchkit.cli.ui.screen import Screen
from patchkit.cli.ui.text import NAME_ROOM, STATE_STYLES, broken
from patchkit.engine.guard import UNRECORDED_GUARD, refusal_summary, refusal_text
from patchkit.engine.inspection import (
    STALE_PREFIX,
    found_edit_said,
    local_edit_fix,
    local_edit_said,
    stale_said,
    upgrade_said,
)
from patchkit.engine.resolve import in_stock_fix, unrecorded_fix
from patchkit.tree.modules import hanging_fix, hanging_said, unjudged_fix, unjudged_said
from patchkit.tree.target import stock_files_command
from patchkit.tree.version import release_version

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from packaging.version import Version

    from patchkit.engine.inspection import TreeStatus
    from patchkit.engine.operations import VerifyResult
    from patchkit.engine.resolve import Resolved
    from patchkit.releases.check import ReleaseResult
    from patchkit.series.library import Location

BEHAVIOUR = "behaviour"  # the set's behaviour test (checks/behaviour.py): said when it passes too
UNGUARDED = "unguarded"  # the recorded launch guard is gone (the tree's: said once)
STALE = "stale"  # a record an upgrade of vLLM left behind (the tree's: each note names its set)
HANGS = "import"  # a module the launch's import hangs on (the tree's: said once)


def show_status(
    ui: Screen,
    resolved: Resolved,
    status: TreeStatus,
    where: Location | None = None,
    *,
    failures: list[Failure] | None = None,
    each: bool = True,
    context: str = "",
    header: bool = True,
    target: bool = True,
    noted: set[str] | None = None,
) -> None:
    """The header, what is wrong first (drifted files, conflicts, stale records, the guard's
    refusal: `failures`, else the status's own), then a line per patch (`each`; a table with
    their files and descriptions with -v)."""
    if header:
        show_header(ui, resolved, noted, target=target)
    if where:
        show_library(ui, where)
    if header:
        ui.line(f"state    {status.state}", style=STATE_STYLES.get(status.state))
    if context:
        ui.line(context)
    ui.failures(fold(status_failures(resolved, status)) if failures is None else failures)
    for note in status.guard_notes + status.store_notes:
        ui.line(f"note     {note}", style="yellow")
    if status.patches and ui.verbose:
        ui.table(
            ["patch", "state", "files", "description"],
            ([p.name, p.state, ", ".join(p.files), p.description] for p in status.patches),
            state_column=1,  # no title: the `patch` column says what the rows are (a bare line did not)
        )
    elif status.patches and each:
        widest = max(len(p.state) for p in status.patches)
        lead = 2 + widest + 2
        for p in status.patches:  # a long name wrapped after a `-`, under itself
            name = broken(p.name, max((ui.width or 10_000) - lead, NAME_ROOM))
            said = [f"  {p.state:<{widest}}  {name[0]}", *(" " * lead + more for more in name[1:])]
            ui.line("\n".join(said), style=STATE_STYLES.get(p.state))


def show_sets_status(ui: Screen, found: list[tuple[Resolved, TreeStatus]], where: Location) -> None:
    """Several sets on one tree: the tree once, what is wrong first (each failure said once, a
    set's own named), then a line per set (its patches under it with -v); the caller says the verdict."""
    show_target(ui, found[0][0])
    show_library(ui, where)
    # a set found applied with an edit: apply records nothing then, so no set's note says it will
    edited = any(status.found_edited for _, status in found)
    said = {n for _, status in found for n in status.guard_notes if edited and n.startswith(UNRECORDED_GUARD)}
    for resolved, status in found:
        for note in [n for n in resolved.notes + status.guard_notes + status.store_notes if n not in said]:
            said.add(note)
            ui.note(note) if note in resolved.notes else ui.line(f"note     {note}", style="yellow")
    # folded together: another set's guard refusal of a file one set's failure names is that failure's
    failures = [f for r, s in found for f in _of_set(r.set_name, status_failures(r, s))]
    # the guard's refusal is the tree's, each set's the same: said once, with the first set's fix
    # (its status holds the tree's stale records: what the refusal is made of, and what apply drops)
    refusal = [f for f in failures if f.what == GUARD][:1]
    failures = fold([f for f in failures if f.what != GUARD] + refusal)
    ui.failures(list({(f.heading(), f.fix, tuple(f.also)): f for f in failures}.values()))  # the same, once
    names = max(len(r.set_name) for r, _ in found)
    states = max(len(s.state) for _, s in found)
    for resolved, status in found:
        counted = _applied_count(status)
        if status.checks and not status.upstream_regression:  # counted as verify counts them
            files = checked_files(resolved) + ":" * (resolved.selection.holder not in (None, Holder.STOCK))
            counted = f"on {files} {count_line(status.checks, verbose=True)}"
        series = [f"series {resolved.selection.release.directory.name}"] if resolved.selection.release else []
        counted = "; ".join([counted, *status_problems(status, guard=False), *series]).strip("; ")  # the guard's: above
        line = f"set      {resolved.set_name:<{names}}  {status.state:<{states}}  {counted}".rstrip()
        ui.line(line, style=STATE_STYLES.get(status.state))
        if ui.verbose:
            show_status(ui, resolved, status, failures=[], header=False)
        if status.upstream_regression:
            show_checks(ui, status.checks, label="stock", resolved=resolved)


def _of_set(name: str, failures: list[Failure]) -> list[Failure]:
    """A failure that names no file, named by its set (`partial`: which set is); the guard's
    refusal and the stale records (each note names its set) are the tree's."""
    tree_wide = (GUARD, STALE, UNGUARDED, HANGS)
    return [f if f.where or f.what in tree_wide else replace(f, message=f"{name}: {f.message}") for f in failures]


LINKED = "is a symlink, or under one: not the file patchkit wrote"  # the guard's words


def status_failures(resolved: Resolved, status: TreeStatus) -> list[Failure]:
    """What `status` finds wrong, each with the command that fixes it (a drifted file deleted is
    said so: "edited" sends the user looking for an edit to keep)."""
    drift_fix, linked = status.drift_fix, set(status.linked)  # through a symlink: never followed, nor said deleted
    deleted = {p for p in status.drifted if p not in linked and not os.path.lexists(resolved.target.root / p)}
    # a patched wheel's install with no apply of the set: the wheel wrote the file, as revert says it
    by_wheel = status.record is not None and status.record.entry(resolved.set_name) is None
    after = "after the patched wheel installed it" if by_wheel else "after patchkit patched it"
    failures = [
        Failure("drifted", f"deleted {after}", path, fix=status.deleted_fix)
        if path in deleted
        else Failure("drifted", LINKED if path in linked else f"edited {after}", path, fix=drift_fix)
        for path in status.drifted
    ]
    for result in status.does_not_compile:  # the drifted file's syntax error leads its line
        where, message = located(result)
        failures.append(Failure("syntax", message, where, result.excerpt, fix=drift_fix))
    if status.other_library:  # before the conflicts it explains (its originals not at hand)
        label = "patch" if status.earlier_texts else "library"
        failures.append(Failure(label, status.other_library_said, fix=status.other_library_fix))
    failures += [Failure(p.state, p.problem, p.name) for p in status.patches if p.problem]
    if status.state == TreeState.PARTIAL:
        failures.append(
            Failure("partial", "some patches of the series are applied, others not", fix=status.partial_fix or "")
        )
    if status.state == TreeState.CONFLICT:  # none applied: no partial series, and apply --force would not do
        failures.append(_local_edit(resolved, status))
    if status.not_stock:
        failures += _not_stock(resolved, status.not_stock)
    for path in status.found_edited:  # what apply says when it refuses to record the set found applied
        message, fix = found_edit_said(resolved, path)
        failures.append(Failure(integrity.NAME, f"{message.removeprefix(path + ' ')}: apply refuses it", path, fix=fix))
    failures += [
        Failure(
            STALE,
            note,
            fix=_stale_fix(status, it),
            warning=True,
        )
        for note, it in _stale_said(status.stale)
    ]
    root = resolved.target.root
    if status.unjudged_bytecode:  # first: no other fix is tried while the launch may hang
        failures.insert(0, Failure(HANGS, unjudged_said(status.unjudged_bytecode), fix=unjudged_fix(root)))
    if status.hanging:
        failures.insert(0, Failure(HANGS, hanging_said(status.hanging), fix=hanging_fix(root, status.hanging)))
    if status.guard:
        failures.append(
            Failure("guard", refusal_text(upgrade_said(status.guard), status.guard_installed), fix=status.guard_fix)
        )
    if status.guard_missing:
        failures.append(Failure(UNGUARDED, status.guard_missing, fix=status.guard_missing_fix, warning=True))
    return failures


def _not_stock(resolved: Resolved, failed: list[CheckResult]) -> list[Failure]:
    """Files apply would refuse on integrity (an edit outside the hunks): each, and apply's own fix."""
    fix = integrity.refusal(failed, resolved.vllm_version, resolved.target.root).hint or ""
    said = [r.message.removesuffix(f": {integrity.LIKELY_CAUSES}") for r in failed]
    return [
        Failure(integrity.NAME, f"{m}: apply refuses it", r.path or "", fix=fix)
        for r, m in zip(failed, said, strict=True)
    ]


def _local_edit(resolved: Resolved, status: TreeStatus) -> Failure:
    """A series that records nothing and does not apply: which file differs, and the fix that works."""
    files, version = status.edited_in_hunks, resolved.vllm_version
    root, there = resolved.target.root, status.in_the_way
    fix = local_edit_fix(root, version, files, resolved.set_name, there)
    return Failure("conflict", f"the series does not apply: {local_edit_said(files, version, root, there)}", fix=fix)


def _stale_fix(status: TreeStatus, it: str) -> str:
    """apply discards stale records, revert drops them; where no recorded set has a series for the
    installed vLLM, apply refuses: revert alone."""
    revert = hints.command("revert")
    if status.no_series_sets and not status.series_sets:
        return f"{revert} drops {it} (no recorded set has a series for this vLLM)"
    return f"{status.apply_recorded} discards {it}; {revert} drops {it}"


def _stale_said(notes: list[str]) -> list[tuple[str, str]]:
    """(note, "it" or "them"): the records an upgrade made stale for the same reason, said once
    ("the records of eagle3, kimi-k2-tool-calls: recorded 0.16.0, installed 0.17.1: ...")."""
    by_reason: dict[str, list[str]] = {}
    for note in notes:
        name, sep, reason = note.removeprefix(STALE_PREFIX).partition(": ")
        if not note.startswith(STALE_PREFIX) or not sep:
            by_reason.setdefault(note, [])
            continue
        by_reason.setdefault(reason, []).append(name)
    return [
        (stale_said(names, reason) if names else reason, "them" if len(names) > 1 else "it")
        for reason, names in by_reason.items()
    ]


def show_checks(
    ui: Screen, results: list[CheckResult], label: str = "checks", resolved: Resolved | None = None
) -> None:
    """Failures first, then one count line; every row in a table with -v. `resolved`: the tree whose
    stock files these are (a dev build's fix names the release below first)."""
    if ui.verbose:
        rows = [[r.check, r.path or "", r.status, r.message] for r in results]
        ui.table(["check", "file", "result", "detail"], rows, title="checks", state_column=2)
        return
    # apply's checks on the planned files ("checks"), on the files written ("written"); an upstream
    # release's own files ("stock")
    stock = _upstream_fix(resolved) if resolved is not None else UPSTREAM_FIX
    fix = {"checks": as_planned_fix(), "stock": stock}.get(label, "")
    ui.failures(fold(check_failures(results, fix, {"integrity": "", pyc.NAME: pyc.FIX})))
    ui.line(
        f"{label:<8} {count_line(results, verbose=False)}", style=None if any(r.failed for r in results) else "green"
    )


def show_releases(ui: Screen, results: list[ReleaseResult]) -> None:
    """`verify` against releases: one row per vLLM release."""
    rows = [
        [
            str(r.version),
            r.label,
            r.series or "",
            f"{r.timings.get('total', 0.0):.2f} s" + (" (cached)" if r.cached else ""),
            _release_detail(r),
        ]
        for r in results
    ]
    ui.table(["vLLM", "outcome", "series", "time", "detail"], rows, title="releases", state_column=1)


def _release_detail(release: ReleaseResult) -> str:
    """A release's row: its detail; a release whose checks failed counts them (each is said below);
    one the set's behaviour test did not judge says so (its "1 warning" alone says not why)."""
    failed = sum(c.failed for c in release.checks)
    if release.failed and failed:
        return f"{failed} check(s) failed (below)"
    return release.detail + ("; behaviour not judged (below)" if _unjudged(release) else "")


def _unjudged(release: ReleaseResult) -> list[CheckResult]:
    """The set's behaviour test that gave no verdict on the release (a warning: not a pass); not its
    verdict on the stock files beside a conflict ("stock: …", said in the detail)."""
    return [
        c
        for c in release.checks
        if c.check == BEHAVIOUR and c.status == CheckStatus.WARNING and c.message.startswith("not judged")
    ]


def _behaviour_lines(ui: Screen, results: list[ReleaseResult]) -> None:
    """With -v, the set's behaviour verdict on each release where it passed, one short line each
    (a failure or no verdict is said among the findings, always)."""
    if not ui.verbose:
        return
    for release in results:
        for check in release.checks:
            if check.check == BEHAVIOUR and check.status == CheckStatus.PASS:
                ui.line(f"{release.version} behaviour: {check.message}")


def verdict_of_releases(ui: Screen, results: list[ReleaseResult]) -> None:
    """`verify` against releases as text: the table, what failed on each release (its failed
    checks, else the reason), then the verdict line (failures and verdict on stderr with -q)."""
    show_releases(ui, results)
    _behaviour_lines(ui, results)
    failures = []
    for r in results:
        failures += [
            Failure(f"{r.version} {c.check}", c.message, excerpt=c.excerpt, warning=True)
            for c in (_unjudged(r) if not r.failed else [])
        ]
        if r.failed:
            failed = [c for c in r.checks if c.failed]
            failures += [_release_failure(r, c) for c in failed]
            failures += [] if failed else [Failure(str(r.version), r.detail, fix=r.hint)]
        elif r.outcome == ReleaseOutcome.UNSUPPORTED and r.requested:
            failures.append(Failure(str(r.version), f"asked for but not covered: {r.detail}"))
    ui.failures(failures)
    summary = ", ".join(f"{n} {label}" for label, n in Counter(r.label for r in results).items())
    failed_versions = [str(r.version) for r in results if r.failed]
    refused = [str(r.version) for r in results if r.outcome == ReleaseOutcome.UNSUPPORTED and r.requested]
    if failed_versions:
        ui.verdict(f"verify: FAILED on {', '.join(failed_versions)} ({summary})", ok=False)
    elif refused:
        ui.verdict(f"verify: not covered: {', '.join(refused)} ({summary})", ok=False)
    else:
        ui.verdict(f"verify: ok ({summary}{_behaviour_unjudged(results)})", ok=True)


def _behaviour_unjudged(results: list[ReleaseResult]) -> str:
    """ "; behaviour not judged on 0.34.0": the releases that pass though the set's behaviour test
    could not run there (its stand-ins lack a class): what CI reads of a run is this line."""
    unjudged = [str(r.version) for r in results if _unjudged(r)]
    if not unjudged:
        return ""
    said = ", ".join(unjudged) if len(unjudged) <= 3 else f"{unjudged[0]} to {unjudged[-1]} ({len(unjudged)} releases)"
    return f"; behaviour not judged on {said}"


def _release_failure(release: ReleaseResult, result: CheckResult) -> Failure:
    where, message = located(result)
    return Failure(f"{release.version} {result.check}", message, where, result.excerpt)


def verified_target_junit(pairs: list[tuple[Resolved, VerifyResult]], *, not_applied: Sequence[str] = ()) -> None:
    """`verify` on a target as JUnit: one document, a <testsuite> per set ("patchkit.SET"), a
    testcase per conflict, drifted file and check; a failed `partial` one in each set of
    `not_applied` (chosen sets of a partial tree, not applied: status fails it)."""
    write_junit(
        junit_suites([(f"patchkit.{r.set_name}", _verified_cases(v, r.set_name in not_applied)) for r, v in pairs])
    )


def _verified_cases(verified: VerifyResult, chosen_not_applied: bool = False) -> list[JUnitCase]:
    conflicts = [
        CheckResult("apply", s.mismatch.path, False, s.mismatch.describe()) for s in verified.conflicts if s.mismatch
    ]
    drifted = [
        CheckResult("drift", path, False, f"{path} was edited after patchkit patched it")
        for path in verified.status.drifted
    ]
    partial = (  # failed as status fails it, though its checks pass once applied
        [CheckResult("partial", None, False, f"{_applied_count(verified.status)}; the others are not")]
        if verified.status.state == TreeState.PARTIAL
        else [CheckResult("partial", None, False, "chosen by an apply, not applied; other sets are")]
        if chosen_not_applied
        else []
    )
    return check_cases(conflicts + drifted + partial + verified.checks)


def verified_target_json(ui: Screen, resolved: Resolved, verified: VerifyResult) -> None:
    ui.json(verified_target_document(resolved, verified))


def verified_target_document(resolved: Resolved, verified: VerifyResult) -> dict[str, Any]:
    """`verify` of one set on a target, as JSON (several sets: one of these per set)."""
    status = verified.status
    return {
        **status_json(resolved, status),
        "ok": verified.ok,
        "checked": "as-is"
        if status.state in (TreeState.APPLIED, TreeState.UPSTREAM, TreeState.UNRECORDED) or status.drifted
        else "as-planned",
        "plan": plan_json(status.plan) if status.plan else [],
        "checks": [r.to_json() for r in verified.checks],
    }


def verified_target_text(
    ui: Screen,
    resolved: Resolved,
    verified: VerifyResult,
    *,
    target: bool = True,
    guard: bool = True,
    version: bool = True,
) -> None:
    """The header (`target`: where vLLM is, said by the first set only), the failures (the command
    that fixes each), then the verdict with the count of the checks that passed (every row with -v).
    `guard` False: an earlier set said the guard's refusal, the tree's and the same for each set;
    `version` False: an earlier set said that --vllm-version names another release than the tree's."""
    mismatch = another_release(resolved)
    if mismatch and not verified.ok:  # its conflicts and integrity warnings only follow from it
        _another_release_failed(ui, resolved, mismatch, target=target, version=version)
        return
    status, results = verified.status, verified.checks
    fixes = {**_fixes_by_check(status), **dict.fromkeys(verified.series_fails, SERIES_FAULT_FIX)}
    found = status_failures(resolved, status) + check_failures(results, _check_fix(resolved, status), fixes)
    refused_above = any(f.what == GUARD for f in found)  # said above: by this set, or an earlier one
    found = [f for f in found if guard or f.what != GUARD]
    show_status(
        ui,
        resolved,
        status,
        failures=[] if ui.verbose else fold(found),
        each=False,
        context=_checked_as(verified, resolved),
        target=target,
    )
    if ui.verbose:  # every row, then what failed with its fix
        if results:
            show_checks(ui, results)
        ui.failures(fold(found))
    _behaviour_passed(ui, results)
    _verify_verdict(ui, resolved, verified, refused_above=refused_above)


def _another_release_failed(ui: Screen, resolved: Resolved, mismatch: str, *, target: bool, version: bool) -> None:
    """--vllm-version names another release than the tree's: the cause said once (`version`), in the
    finding with its fix; the verdict points to it."""
    show_header(ui, resolved, target=target)
    if version:
        ui.failures([Failure("version", mismatch, fix=_without_version("verify"))])
    ui.verdict("verify: FAILED: --vllm-version names another release than the tree's (above)", ok=False)


def _behaviour_passed(ui: Screen, results: list[CheckResult]) -> None:
    """The set's behaviour test is said when it passes too: what it judged (and, below, why not with
    vLLM's classes when --python asked for them)."""
    for passed in (r for r in results if r.check == BEHAVIOUR and r.status == CheckStatus.PASS):
        if not ui.verbose:
            ui.line(f"{passed.check}: {passed.message}")
        for line in passed.excerpt.splitlines():
            ui.line(f"    {line}")


def _verify_verdict(ui: Screen, resolved: Resolved, verified: VerifyResult, *, refused_above: bool) -> None:
    """verify's last line (what CI shows), with the count of the checks that passed."""
    status, results = verified.status, verified.checks
    counted = count_line(results, verbose=bool(ui.verbose)) if results else "no checks ran"
    if verified.ok and status.state == TreeState.NOT_APPLIED:
        # a dry check passing is no pass of the tree: the last line says so
        ui.verdict(f"verify: ok if applied: {counted}", ok=True)
    elif verified.ok and resolved.selection.local:  # a build of its own: its RECORD proves no release's files
        ui.verdict(f"verify: ok: {counted}; this build (+{resolved.selection.local}) holds the change itself", ok=True)
    elif (
        verified.ok and resolved.selection.holder == Holder.STOCK
    ):  # found, not declared: the range is the maintainer's
        ui.verdict(
            f"verify: ok: {counted}; {in_stock_fix(resolved.vllm_version, resolved.selection.patch_set)}", ok=True
        )
    elif verified.ok:
        ui.verdict(f"verify: ok: {counted}", ok=True)
    elif verified.passes_if_applied and status.state == TreeState.PARTIAL:  # status's verdict too: not a pass
        ui.verdict(f"verify: FAILED: partial: {_applied_count(status)}; ok if applied: {counted}", ok=False)
    elif status.upstream_regression and resolved.selection.local:
        own = f"vLLM {resolved.vllm_version}'s own files, not the release's"
        ui.verdict(f"verify: FAILED: this build's files fail the set's checks ({own}; {counted})", ok=False)
    elif status.upstream_regression:
        ui.verdict(f"verify: FAILED: upstream regression: the stock files fail the set's checks ({counted})", ok=False)
    elif status.other_library and all(r.status != CheckStatus.FAIL for r in results):
        # its checks pass on the earlier series: the count alone read as a pass marked FAILED
        ui.verdict(f"verify: FAILED: {status.other_library_said}: run the fix above", ok=False)
    else:
        # the guard's refusal is named only where no check failed, else the count alone says FAILED
        none_failed = all(r.status != CheckStatus.FAIL for r in results)
        refused = (
            refusal_summary(status.guard, status.guard_installed)
            if status.guard
            else "the launch guard refuses the tree"
        )
        refused = _hangs_said(status) or refused
        above = f"; {refused} (above)" if (refused_above or _hangs_said(status)) and none_failed else ""
        ui.verdict(f"verify: FAILED: {counted}{above}", ok=False)


def _hangs_said(status: TreeStatus) -> str:
    """The summary's words for bytecode the launch's import hangs (or may hang) on; "" when none."""
    if status.hanging:
        return "the launch hangs in its import"
    return "the launch may hang in its import" if status.unjudged_bytecode else ""


def another_release(resolved: Resolved) -> str:
    """--vllm-version naming another release than the tree's dist-info, in one line ("" if not)."""
    version = resolved.version
    if version is None or not version.tree_says:
        return ""
    return f"--vllm-version says {version.version}, the tree's dist-info {version.tree_says}"


def _without_version(verb: str) -> str:
    """The command again without --vllm-version: the tree's own release is then used."""
    return f"{hints.command(verb, chosen=replace(hints.current(), vllm_version=None))} (the tree's own release)"


def _checked_as(verified: VerifyResult, resolved: Resolved) -> str:
    status = verified.status
    if resolved.selection.in_stock:  # "upstream" only where the stock files are proven to hold it
        said = "upstream: " * (resolved.selection.holder == Holder.STOCK and not resolved.selection.local)
        return f"{said}{resolved.selection.note}; the set's checks ran on them"
    if status.state == TreeState.UPSTREAM:
        return "upstream: this vLLM release ships the change; the set's checks ran on its stock files"
    if status.drifted:
        return "drifted: the checks ran on the files as they are"
    if verified.checks and status.state != TreeState.APPLIED:
        return "checked as the tree would be after apply (nothing written)"
    return ""


def checked_files(resolved: Resolved) -> str:
    """The files an upstream set's checks ran on: the stock files, unless nothing proves them so."""
    holder = resolved.selection.holder
    if holder == Holder.HAND:
        return "its files, applied by hand"
    return "its files (upstream's or a hand's)" if holder == Holder.UNKNOWN else "its stock files"


def _applied_count(status: TreeStatus) -> str:
    """ "3 of 4 patches applied" ("0 of 1 patch applied"); nothing without patches."""
    total = len(status.patches)
    applied = sum(p.state == PatchState.APPLIED for p in status.patches)
    return f"{applied} of {total} patch{'es' * (total != 1)} applied" if total else ""


def status_verdict(status: TreeStatus) -> tuple[str, bool]:
    """`status`'s last line, and whether it is good news."""
    said = f"{status.state}: {_applied_count(status)}" if status.patches else status.state
    problems = status_problems(status)
    if problems:
        return f"status: FAILED: {said}; {'; '.join(problems)}", False
    return f"status: {said}", status.state not in (TreeState.PARTIAL, TreeState.UNSUPPORTED)


def status_problems(status: TreeStatus, *, guard: bool = True) -> list[str]:
    """What makes a set's status a failure, in a few words each (`guard`: the guard's refusal of
    the tree too)."""
    problems = [
        _drift_said(status) if status.drifted else "",
        f"{sum(bool(p.problem) for p in status.patches)} patch(es) do not apply"
        if any(p.problem for p in status.patches)
        else "",
        refusal_summary(status.guard, status.guard_installed) if status.guard and guard else "",
        "upstream regression" if status.upstream_regression else "",
        f"{len(status.not_stock)} file(s) not stock" if status.not_stock else "",
        "a file edited beyond the set's change (no record): apply refuses it" if status.found_edited else "",
        _hangs_said(status),
        status.other_library_said if status.other_library else "",
    ]
    return [p for p in problems if p]


def _drift_said(status: TreeStatus) -> str:
    """ "1 file drifted", with the patches it no longer holds ("(0001-x no longer in it)")."""
    many = len(status.drifted) > 1
    lost = f" ({', '.join(status.lost)} no longer in {'them' if many else 'it'})" if status.lost else ""
    return f"{len(status.drifted)} file{'s' if many else ''} drifted{lost}"


def _check_fix(resolved: Resolved, status: TreeStatus) -> str:
    """What fixes a failed check: the tree's own edits revert; an applied series that fails is
    reverted; a series that would fail is not applied (apply refuses it)."""
    if status.drifted:
        return status.drift_fix
    if status.state == TreeState.APPLIED:
        return f"{status.fix_command('revert')} (the stock files back); report the series"
    if status.state == TreeState.UPSTREAM:
        return _upstream_fix(resolved)
    if status.state == TreeState.UNRECORDED:  # upstream's or a hand's: handed to patchkit, then judged
        return f"{unrecorded_fix(resolved.target.root, resolved.vllm_version, resolved.selection.patches)}; if it still fails, report the series"
    return as_planned_fix()


# a drifted tree's check that fails on what revert --force and apply leave too: not the user's edit
SERIES_FAULT_FIX = (
    "not your edit alone: the series fails this on the stock files too, so revert --force and apply "
    "would not make it pass; report the library's series"
)


def _upstream_fix(resolved: Resolved) -> str:
    """A build before a release (0.23.0.dev5) is judged as that release, upstream for the set, though
    its files may be the release below's: naming that release is the first thing to try."""
    version = resolved.vllm_version
    if resolved.selection.local and version is not None:
        return _local_build_fix(resolved, version)
    if version is None or not (version.is_devrelease or version.is_prerelease):
        return UPSTREAM_FIX
    base = release_version(version)
    retry = hints.command("verify", chosen=replace(hints.current(), vllm_version="RELEASE"))
    return (
        f"{version.public} comes before release {base}, whose stock files the set's upstream range judges: "
        f"first try {retry}, RELEASE the release it derives from (the last before {base}); "
        "if that fails too, report the upstream regression"
    )


def _local_build_fix(resolved: Resolved, version: Version) -> str:
    """A build with a local label of its own (0.16.0+corp) whose files hold the change and fail a
    check: its files are its builder's, not the release's, so nothing says upstream changed. The
    release's stock files back, then apply; or the build made again from them."""
    release = version.public
    back = stock_files_command(resolved.target.root, release)
    wheel = hints.command("wheel", release, "--local-label", resolved.selection.local)
    return (
        f"this build differs from vLLM {release}: put the release's files back with {back} and run "
        f"{hints.command('apply')}, or build it again from them with {wheel}"
    )


UPSTREAM_FIX = "nothing to apply: vLLM changed what the set checks; report the upstream regression"


def as_planned_fix() -> str:
    """A check that fails on the files as apply would write them: the change is at fault."""
    adhoc = hints.current().adhoc
    if adhoc:  # `diff` shows the library's series, not these
        return f"nothing is written (apply refuses this): fix the patch ({', '.join(adhoc)})"
    return (
        f"nothing is written (apply refuses this); {hints.command('diff')} shows the change that breaks it: "
        "report the library's series"
    )


def _fixes_by_check(status: TreeStatus) -> dict[str, str]:
    """A file that shadows a patched source, or bytecode that could not be fixed, is the tree's to fix
    (as apply's refusal says), and, on a tree not patched yet, so is a file that is not the release's
    stock file."""
    fixes = {shadow.NAME: shadow.fix(), pyc.NAME: pyc.FIX}
    if status.drifted or status.state in (TreeState.APPLIED, TreeState.UPSTREAM, TreeState.UNRECORDED):
        return fixes
    if status.state == TreeState.CONFLICT:  # --force accepts a file unlike the RECORD, never a hunk that does not match
        return fixes | {"integrity": "as the conflict's fix (above)"}
    return fixes | {
        "integrity": f"put the release's stock file back, or {hints.command('apply', '--force')} patches it"
    }
