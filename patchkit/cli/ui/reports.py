"""Reports of a target's status, of checks and of releases, as text, JSON or JUnit."""

from __future__ import annotations

from collections import Counter

from patchkit.base.enums import ReleaseOutcome, TreeState
from patchkit.checks import CheckResult
from patchkit.cli.ui.json_views import plan_json, status_json
from patchkit.cli.ui.junit import checks_junit
from patchkit.cli.ui.run import write_junit
from patchkit.cli.ui.text import STATE_STYLES


def show_header(ui, resolved) -> None:
    sel = resolved.selection
    version = resolved.version
    ui.line(f"vLLM     {resolved.target.package_dir}  (found by {resolved.target.found_by})")
    if version:
        ui.line(f"version  {version.version}  (from {version.source})")
    ui.line(
        f"set      {sel.set_name}"
        + (f"  series {sel.release.versions} [{sel.release.directory.name}]" if sel.release else "")
    )
    for note in resolved.notes:
        ui.note(note)


def show_library(ui, where) -> None:
    """Which library root, and what chose it (--patches, PATCHKIT_LIBRARY or installed)."""
    ui.line(f"library  {where.path}  ({where.source})")


def show_status(ui, resolved, status, where=None) -> None:
    show_header(ui, resolved)
    if where:
        show_library(ui, where)
    ui.line(f"state    {status.state}", style=STATE_STYLES.get(status.state))
    if status.patches:
        ui.table(
            ["patch", "state", "files", "description"],
            ([p.name, p.state, ", ".join(p.files), p.description] for p in status.patches),
            title="patches",
            state_column=1,
        )
    for p in status.patches:
        if p.problem:
            ui.line(f"  {p.name}: {p.problem}", style="red")
    for path in status.drifted:
        ui.line(f"drifted  {path} was edited after patchkit patched it", style="red")
        if path in status.does_not_compile:
            ui.line(f"         and does not compile: {path}: {status.does_not_compile[path]}", style="red")
    for note in status.stale:
        ui.line(f"stale    {note} (apply discards it; revert drops it)", style="yellow")
    for note in status.guard_notes:
        ui.line(f"note     {note}", style="yellow")
    if status.guard:
        ui.line(f"guard    the launch guard refuses this tree: {'; '.join(status.guard)}", style="red")


def status_failures(status) -> list[str]:
    """What makes a status fail, one line each (said on stderr under -q)."""
    found = [f"{p.name}: {p.problem}" for p in status.patches if p.problem]
    if status.state == TreeState.PARTIAL:
        found.append("state partial: some patches of the series are applied, others not")
    for path in status.drifted:
        compiled = status.does_not_compile.get(path)
        found.append(f"drifted: {path}: " + (f"does not compile: {compiled}" if compiled else "edited since apply"))
    return found


def show_checks(ui, results) -> None:
    rows = [[r.check, r.path or "", r.status, r.message] for r in results]
    ui.table(["check", "file", "result", "detail"], rows, title="checks", state_column=2)


def show_releases(ui, results) -> None:
    """`verify` against releases: one row per vLLM release."""
    rows = [
        [
            str(r.version),
            r.label,
            r.series or "",
            f"{r.timings.get('total', 0.0):.2f} s" + (" (cached)" if r.cached else ""),
            r.detail,
        ]
        for r in results
    ]
    ui.table(["vLLM", "outcome", "series", "time", "detail"], rows, title="releases", state_column=1)


def verdict_of_releases(ui, results) -> None:
    """`verify` against releases as text: the table, each failed check, and the verdict line."""
    show_releases(ui, results)
    for r in results:
        if r.failed:
            for c in r.checks:
                if c.failed:
                    ui.line(f"  {r.version}: {c.describe()}", style="red")
            ui.failures(f"{r.version}: {c.describe()}" for c in r.checks if c.failed)
            ui.failures([f"{r.version}: {r.detail}"] if not any(c.failed for c in r.checks) else [])
        elif r.outcome == ReleaseOutcome.UNSUPPORTED and r.requested:
            ui.error(f"vLLM {r.version} was asked for but is not covered: {r.detail}")
    summary = ", ".join(f"{n} {label}" for label, n in Counter(r.label for r in results).items())
    failed = [str(r.version) for r in results if r.failed]
    refused = [str(r.version) for r in results if r.outcome == ReleaseOutcome.UNSUPPORTED and r.requested]
    if failed:
        ui.line(f"verify: FAILED on {', '.join(failed)} ({summary})", style="bold red")
        ui.failures([f"verify: FAILED on {', '.join(failed)} ({summary})"])
    elif refused:
        ui.line(f"verify: not covered: {', '.join(refused)} ({summary})", style="magenta")
    else:
        ui.line(f"verify: ok ({summary})", style="green")


def verified_target_junit(resolved, verified) -> None:
    """`verify` on a target as JUnit: a testcase per conflict, drifted file and check."""
    conflicts = [
        CheckResult("apply", s.mismatch.path, False, s.mismatch.describe()) for s in verified.conflicts if s.mismatch
    ]
    drifted = [
        CheckResult("drift", path, False, f"{path} was edited after patchkit patched it")
        for path in verified.status.drifted
    ]
    write_junit(checks_junit(conflicts + drifted + verified.checks, f"patchkit.{resolved.set_name}"))


def verified_target_json(ui, resolved, verified) -> None:
    status = verified.status
    ui.json(
        {
            **status_json(resolved, status),
            "ok": verified.ok,
            "checked": "as-is"
            if status.state in (TreeState.APPLIED, TreeState.UPSTREAM) or status.drifted
            else "as-planned",
            "plan": plan_json(status.plan) if status.plan else [],
            "checks": [r.to_json() for r in verified.checks],
        }
    )


def verified_target_text(ui, resolved, verified) -> None:
    status, results = verified.status, verified.checks
    show_status(ui, resolved, status)
    if status.state == TreeState.UPSTREAM:
        ui.line("upstream: this vLLM release ships the change; the set's checks ran on its stock files")
        if status.upstream_regression:
            ui.line("upstream regression: the stock files fail the set's checks", style="bold red")
    elif status.drifted:
        ui.line("drifted: the checks ran on the files as they are", style="red")
    elif results and status.state != TreeState.APPLIED:
        ui.line("checked as the tree would be after apply (nothing written)")
    if results:
        show_checks(ui, results)
    ui.line("verify: ok" if verified.ok else "verify: FAILED", style="green" if verified.ok else "bold red")
    if not verified.ok:
        ui.failures([*verify_failures(verified), "verify: FAILED"])


def verify_failures(verified) -> list[str]:
    """Each finding that fails `verify` on a target, one line each: a conflict, a drifted file, a
    failed check, the guard's refusal."""
    status = verified.status
    guard = [f"guard: the launch guard refuses this tree: {'; '.join(status.guard)}"] if status.guard else []
    return status_failures(status) + [r.describe() for r in verified.checks if r.failed] + guard
