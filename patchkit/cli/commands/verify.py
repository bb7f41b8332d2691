from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import click
from packaging.version import Version

from patchkit import fetch
from patchkit.base import hints
from patchkit.base.enums import Outcome, OutputFormat, TreeState
from patchkit.base.errors import BadInput, Finished, NoPatchSet
from patchkit.checks import behaviour
from patchkit.cli.commands import make_ui, resolve_telling
from patchkit.cli.commands.options import format_option, no_import_option, target_options
from patchkit.cli.ui import reports
from patchkit.cli.ui.console import UI
from patchkit.cli.ui.json_views import target_json, tree_version_json
from patchkit.cli.ui.junit import releases_junit, sets_releases_junit
from patchkit.cli.ui.matrix import Matrix, release_cell, write_markdown
from patchkit.cli.ui.run import write_junit
from patchkit.cli.ui.steps import Shown
from patchkit.engine.operations import VerifyResult, verify_tree
from patchkit.engine.resolve import library_sets, require_patches, resolve_sets, resolve_target, several, why_not
from patchkit.engine.several import SetsVerified, no_series_next_step, no_series_said, verify_sets
from patchkit.releases import check as release_check
from patchkit.series.library import choose_set
from patchkit.tree.version import parse

if TYPE_CHECKING:
    from patchkit.base.options import Options
    from patchkit.series.library import PatchSetDef

VERIFY_FORMATS = tuple(OutputFormat)
# The checks only verify runs, after apply's (patchkit.checks.registry): the set's behaviour test.
VERIFYING = (behaviour.CHECK,)


@click.command()
@target_options(
    versions_repeatable=True,
    version_help="Without --target/--python: a vLLM release to verify from its stock files "
    "(repeatable). With them: override the detected version.",
)
@format_option(
    formats=VERIFY_FORMATS,
    help="Output format (junit: a testcase per release, or per check on a target; markdown: releases "
    "only, the compatibility matrix: a row per release, its cell applied, upstream, conflict or failed).",
)
@click.option(
    "--all", "every", is_flag=True, help="Verify every vLLM release on the index from the set's supported minimum on."
)
@click.option("--latest", is_flag=True, help="Verify the newest vLLM release on the index.")
@no_import_option()
@click.option(
    "--no-result-cache",
    "no_result_cache",
    is_flag=True,
    help="Releases: run every release again, even when a result for the same inputs is cached.",
)
def command(
    opts: Options,
    quiet: bool,
    verbose: int,
    fmt: str,
    every: bool,
    latest: bool,
    no_import: bool,
    no_result_cache: bool,
) -> Finished | VerifyResult | SetsVerified:
    """Run the checks on the patched files: as they are, or as `apply` would leave them.

    Exit 0 when the series applies (or is applied) and every check passes; 1 otherwise (a partial
    series too, as status). On an
    upstream release, the set's checks run on the stock files; a failure is an upstream regression (1).

    With --vllm-version V (no --target/--python), --all or --latest: verify real releases instead,
    each from its stock files fetched from the package index, in a scratch directory: dry-run, checks,
    apply, checks on disk, revert, byte-identical to stock. Outcome per release: patched, upstream,
    conflict, check-failed, unsupported. Exit 1 if any conflict, failed check, upstream regression or
    non-identical revert; else 3 if a release asked for by name (or --latest) is unsupported; else 0.
    A release's result is cached under a key over all its inputs (stock files, the set, patchkit's
    code, the Python and checking libraries).
    """

    named = opts.vllm_versions
    on_target = bool(opts.target_dir or opts.python)
    if every or latest or (named and not on_target):
        if on_target:
            raise BadInput(
                "--all and --latest verify releases fetched from the index, not a target",
                hint="drop --target/--python, or verify the target without them",
            )
        if opts.adhoc:
            raise BadInput("--patch cannot be verified against releases; the library's series are")
        sets = library_sets(opts)  # loaded once: whether there are several, then each
        return _verify_releases(
            replace(opts, vllm_version=None, vllm_versions=()),
            named,
            every,
            latest,
            fmt,
            quiet,
            verbose,
            use_cache=not no_result_cache,
            sets=sets,
            several_sets=several(opts, sets),
        )
    if fmt == OutputFormat.MARKDOWN:
        raise BadInput(
            "--format markdown is the compatibility matrix of releases, not a target's report",
            hint="add --all, --latest or --vllm-version V without --target/--python; or use text, json or junit",
        )
    if len(named) > 1:
        raise BadInput(
            "several --vllm-version values verify releases, not a target",
            hint="drop --target/--python, or give one --vllm-version",
        )
    return _verify_target(opts, fmt, quiet, verbose, import_probe=not no_import)


def _verify_releases(
    opts: Options,
    named: tuple[str, ...],
    every: bool,
    latest: bool,
    fmt: str,
    quiet: bool,
    verbose: int,
    *,
    use_cache: bool,
    sets: dict[str, PatchSetDef] | None,
    several_sets: bool,
) -> Finished:
    """verify of releases from their stock files, for the set chosen, or (`several_sets`) for each
    set of the library in turn: a set no release on the index is in is then said, not an error.
    One document for all: a report per set (text, JSON), JUnit cases "SET: vllm X", a matrix column
    per set. `sets`: the library's sets, when loaded already (library_sets)."""
    # JUnit, JSON and Markdown are the whole of stdout; quiet keeps text lines out of it.
    ui = make_ui(
        fmt if fmt == OutputFormat.JSON else OutputFormat.TEXT,
        quiet or fmt in (OutputFormat.JUNIT, OutputFormat.MARKDOWN),
        verbose,
    )
    by_set: dict[str, list[release_check.ReleaseResult]] = {}
    # each in the release's spelling (0.16 and 0.16.0.0 are 0.16.0), as fetch names it
    versions_named = [Version(fetch.normalize_version(str(parse(v, "--vllm-version")))) for v in named]
    with fetch.reuse_index_pages():
        for name in list(sets or {}) if several_sets else [opts.set_name]:
            chosen = replace(opts, set_name=name)
            patch_set = choose_set(sets, name) if sets is not None else release_check.load_patch_set(chosen)
            if not several_sets:
                ui.knows({"set": patch_set.name})
            try:
                versions, requested = release_check.releases_to_verify(
                    patch_set, versions_named, every=every, latest=latest
                )
            except NoPatchSet as exc:
                if not several_sets:
                    raise
                ui.note(exc.message)
                continue
            label = f"{patch_set.name}: " if several_sets else ""
            with ui.progress(len(versions), f"{label}verifying {len(versions)} release(s)") as advance:
                by_set[patch_set.name] = release_check.verify_releases(
                    versions, requested, chosen, advance, use_cache=use_cache, patch_set=patch_set
                )
    _show_releases(ui, fmt, by_set, several_sets=several_sets)
    return Finished(_worst(list(by_set.values())))


def _show_releases(
    ui: UI, fmt: str, by_set: dict[str, list[release_check.ReleaseResult]], *, several_sets: bool
) -> None:
    """The releases' results in `fmt`: of one set as they always were; of several, a part per set."""
    if fmt == OutputFormat.JSON:
        parts = [{"set": n, "releases": [r.to_json(n) for r in rs]} for n, rs in by_set.items()]
        ui.json({"sets": parts} if several_sets else parts[0])
    elif fmt == OutputFormat.JUNIT and several_sets:
        write_junit(sets_releases_junit(by_set, "patchkit"))
    elif fmt == OutputFormat.JUNIT:
        write_junit("".join(releases_junit(results, f"patchkit.{name}") for name, results in by_set.items()))
    elif fmt == OutputFormat.MARKDOWN:
        write_markdown(_matrix_of_sets(by_set))
    else:
        for name, results in by_set.items():
            if several_sets:
                ui.line(f"set      {name}", style="bold")
            reports.verdict_of_releases(ui, results)
        if several_sets:
            _total_of_sets(ui, by_set)


def _total_of_sets(ui: UI, by_set: dict[str, list[release_check.ReleaseResult]]) -> None:
    """The last line of releases verified for several sets: all of them (a CI
    log's last line is read alone), the sets that failed first."""
    outcomes = {name: release_check.overall_outcome(results) for name, results in by_set.items()}
    versions = sorted({r.version for results in by_set.values() for r in results})
    on = f"vLLM {versions[0]}" if len(versions) == 1 else f"{len(versions)} releases"
    failed = [name for name, outcome in outcomes.items() if outcome == Outcome.CHECK_FAILED]
    refused = [name for name, outcome in outcomes.items() if outcome == Outcome.UNSUPPORTED]
    if failed:
        ui.verdict(
            f"verify: FAILED: {len(failed)} of {len(outcomes)} sets fail on {on} ({', '.join(failed)})", ok=False
        )
    elif refused:
        ui.verdict(f"verify: not covered: {len(refused)} of {len(outcomes)} sets ({', '.join(refused)})", ok=False)
    elif outcomes:
        ui.verdict(f"verify: ok: all {len(outcomes)} sets pass on {on}", ok=True)


def _matrix_of_sets(by_set: dict[str, list[release_check.ReleaseResult]]) -> Matrix:
    matrix = Matrix(list(by_set))
    for name, results in by_set.items():
        for r in results:
            matrix.put(str(r.version), name, release_cell(r))
    return matrix


def _worst(per_set: list[list[release_check.ReleaseResult]]) -> Outcome:
    """Failed if any set's release failed; unsupported only when every set's run says so."""
    outcomes = [release_check.overall_outcome(results) for results in per_set]
    if Outcome.CHECK_FAILED in outcomes:
        return Outcome.CHECK_FAILED
    return Outcome.UNSUPPORTED if outcomes and set(outcomes) == {Outcome.UNSUPPORTED} else Outcome.OK


def _verify_target(
    opts: Options, fmt: str, quiet: bool, verbose: int, *, import_probe: bool = True
) -> VerifyResult | SetsVerified:
    ui = make_ui(fmt if fmt == OutputFormat.JSON else OutputFormat.TEXT, quiet or fmt == OutputFormat.JUNIT, verbose)
    sets = library_sets(opts)  # loaded once: whether there are several, then the one chosen
    if several(opts, sets):
        return _verify_sets(ui, opts, fmt, sets, import_probe=import_probe)
    resolved = resolve_telling(ui, opts, sets=sets)
    require_patches(resolved)
    verified = verify_tree(resolved, import_probe=import_probe, watch=Shown(ui), verifying=VERIFYING)
    if fmt == OutputFormat.JUNIT:
        reports.verified_target_junit([(resolved, verified)])
    elif ui.json_mode:
        reports.verified_target_json(ui, resolved, verified)
    else:
        reports.verified_target_text(ui, resolved, verified)
    return verified


def _verify_sets(
    ui: UI, opts: Options, fmt: str, sets: dict[str, PatchSetDef] | None, *, import_probe: bool
) -> SetsVerified:
    """verify of every covering set on a target: each reported as `verify --set` reports it, then
    one verdict (ok only when every set is)."""
    target = resolve_target(opts)
    ui.knows(target_json(target))
    chosen = resolve_sets(opts, target, sets=sets)
    ui.knows(tree_version_json(chosen))
    verified = verify_sets(chosen, import_probe=import_probe, watch=Shown(ui), verifying=VERIFYING)
    pairs = [(c.resolved, r) for c, r in zip(verified.chosen, verified.results, strict=True) if c.resolved is not None]
    if fmt == OutputFormat.JUNIT:
        reports.verified_target_junit(pairs, not_applied=verified.not_applied())
    elif ui.json_mode:
        documents = [reports.verified_target_document(r, v) for r, v in pairs]
        gaps = {"no_series": [c.name for c in verified.no_series]} if verified.no_series else {}
        ui.json({"ok": verified.ok, "state": verified.state, "sets": documents, **gaps})
    else:
        # the guard's refusal and a --vllm-version naming another release are the tree's: said by the first set they fail
        guard_said = version_said = False
        for index, (resolved, result) in enumerate(pairs):  # the tree once, then each set's own lines
            reports.verified_target_text(
                ui, resolved, result, target=index == 0, guard=not guard_said, version=not version_said
            )
            guard_said = guard_said or bool(result.status.guard)
            version_said = version_said or bool(reports.another_release(resolved) and not result.ok)
        for each in chosen:
            if each not in verified.chosen and each not in verified.no_series:
                ui.note(why_not(each))
        _sets_verdict(ui, verified)
    return verified


def _sets_verdict(ui: UI, verified: SetsVerified) -> None:
    """The last line of verify on several sets; sets that pass only as planned (not applied) are
    named, with the command that applies them: a dry check passing is no pass of the tree."""
    pairs = list(zip(verified.chosen, verified.results, strict=True))
    failed = [c.name for c, r in pairs if not r.ok]
    passed = len(verified.results) - len(failed)
    planned = [c.name for c, r in pairs if r.ok and r.status.state == TreeState.NOT_APPLIED]
    if verified.no_series and not failed:  # no apply makes the tree safe for them: no pass
        ui.note(no_series_next_step(verified.chosen, verified.no_series))
        ui.verdict(f"verify: FAILED: {no_series_said(verified.no_series)}", ok=False)
        return
    if failed:
        others = f"the other {passed} set(s) pass" if passed else "no set passes"
        gaps = f"; {no_series_said(verified.no_series)}" if verified.no_series else ""
        ui.verdict(f"verify: FAILED: {', '.join(failed)} ({others}){gaps}", ok=False)
        return
    missing = verified.not_applied()
    if missing:  # status's verdict too: an apply chose them and stopped before (a CI gate must not pass it)
        ui.note(f"chosen, not applied: {', '.join(missing)}: {hints.command('apply')} applies them")
        ui.verdict(
            f"verify: FAILED: partial: {', '.join(missing)} not applied; ok if applied: all {passed} sets pass",
            ok=False,
        )
        return
    if planned and len(planned) == passed:
        ui.note(f"none is applied: {hints.command('apply')} applies them")
    elif planned:
        ui.note(f"not applied: {', '.join(planned)}: {hints.command('apply')} applies them")
    if planned and len(planned) == passed:
        ui.verdict(f"verify: ok if applied: all {passed} sets would pass; none is applied", ok=True)
    elif planned:
        ui.verdict(f"verify: ok if applied: all {passed} sets pass, {len(planned)} of them once applied", ok=True)
    else:
        ui.verdict(f"verify: ok: all {passed} sets pass", ok=True)
