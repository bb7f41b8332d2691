"""`patchkit verify` against real vLLM releases, for CI.

Each release's stock files are fetched (patchkit.fetch.release_tree: cached, range requests) and
laid out in a scratch directory. There the operations the commands run do the work unchanged
(patchkit.engine.operations): apply --dry-run, apply (the checks on the planned contents, one transaction
with the record, the checks on disk), status, revert from the record; then the tree must be
byte-identical to stock. An upstream release's stock files go through the checks as they are: a
failure there is an upstream regression. Outcome per release: patched, upstream, conflict, check-failed, unsupported.

Releases whose stock files the set reads are byte-identical are judged once. Each release's RECORD
is fetched first (it comes with the wheel's central directory: no file is read); the releases are
then grouped by everything their result depends on besides the version: the series directory and
its patches' bytes, the sha256 RECORD gives for each file, the contract requirements that apply,
and the key under which the set's behaviour test judges the version (checks/behaviour.version_keys:
the tool-call sets' end-of-stream top-up differs by release). The oldest of a group is fetched and
done; the others take its result (`same_as`). A file that differs by one byte is another group.

A result is kept in the fetch cache (<cache>/verify-results/), under a key that covers every input
it depends on: the release, its stock files, the set's directory (series, patches, contract,
probe), patchkit's own code, the Python and the libraries that judge (pyflakes, unidiff,
packaging). The pipeline is deterministic in those, so an unchanged key gives the same result;
`--no-result-cache` runs everything again. The cache is shared (CI restores it from other runs), so
an entry is only a shortcut: sealed with this user's key (patchkit.base.seal), or run again.

Before anything else, the stock files go through the integrity check against the release's RECORD,
as `verify --target` does: files that are not the release's are reported as such, never as a
conflict blamed on the library.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.version import Version

import patchkit
from patchkit import fetch
from patchkit.base import fsutil, hints, seal
from patchkit.base.enums import CheckStatus, Outcome, ReleaseOutcome, SelectionKind, StepState, TreeState
from patchkit.base.errors import NoPatchSet, PatchkitError, exit_code_for
from patchkit.base.fsutil import read_file
from patchkit.base.options import Options
from patchkit.base.usercache import prune, touch, usable_cache_dir
from patchkit.checks import ERROR, WARNING, CheckContext, CheckResult, behaviour, integrity, registry
from patchkit.checks.behaviour import version_keys
from patchkit.distinfo.record import find_record, parse_record, read_record_file
from patchkit.engine.inspection import TreeStatus, check_context, inspect
from patchkit.engine.operations import ApplyResult, apply_series, revert_series
from patchkit.engine.resolve import Resolved, in_stock_fix, resolve
from patchkit.releases.files import lay_out, needed_files
from patchkit.series import dry_run
from patchkit.series.library import PatchSetDef, Selection, load_chosen, select
from patchkit.series.plan import Plan, plan_revert
from patchkit.store.state import META_DIR
from patchkit.tree.version import in_range

PATCHED = ReleaseOutcome.PATCHED
UPSTREAM = ReleaseOutcome.UPSTREAM
CONFLICT = ReleaseOutcome.CONFLICT
CHECK_FAILED_OUTCOME = ReleaseOutcome.CHECK_FAILED
UNSUPPORTED = ReleaseOutcome.UNSUPPORTED

# Fetches are network-bound (a range request or two per release): run them side by side.
FETCH_WORKERS = 8

Advance = Callable[[str], None]


@dataclass
class ReleaseResult:
    """One release's verdict in verify --all: its outcome, its checks, their times."""

    version: Version
    outcome: ReleaseOutcome
    detail: str
    requested: bool = False  # named by --vllm-version/--latest, not only by --all's range
    series: str | None = None  # the series directory, "upstream", or None
    checks: list[CheckResult] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    reverted_identical: bool | None = None  # None: nothing was written
    upstream_regression: bool = False
    stock_behaviour: str | None = None  # on a conflict: "passes", "fails" or "not judged" (None: no test)
    hint: str = ""  # what to do about it (a conflict: close the range, or port the series)
    same_as: Version | None = None  # the release whose (identical) stock files were done instead
    cached: bool = False  # taken from the result cache: same inputs, same result

    @property
    def failed(self) -> bool:
        return (
            self.outcome in (CONFLICT, CHECK_FAILED_OUTCOME)
            or self.upstream_regression
            or self.reverted_identical is False
        )

    @property
    def label(self) -> str:
        return "upstream-regression" if self.upstream_regression else self.outcome

    def to_json(self, set_name: str) -> dict[str, Any]:
        return {
            "vllm_version": str(self.version),
            "outcome": self.outcome,
            "ok": not self.failed,
            "detail": self.detail,
            "requested": self.requested,
            "set": set_name,
            "series": self.series,
            "same_as": str(self.same_as) if self.same_as else None,
            "reverted_identical": self.reverted_identical,
            "upstream_regression": self.upstream_regression,
            "stock_behaviour": self.stock_behaviour,
            "hint": self.hint,
            "cached": self.cached,
            "checks": [r.to_json() for r in self.checks],
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


def overall_outcome(results: list[ReleaseResult]) -> Outcome:
    """Failed if any release failed; else unsupported if a release asked for by name is; else ok."""
    if any(r.failed for r in results):
        return Outcome.CHECK_FAILED
    if any(r.outcome == UNSUPPORTED and r.requested for r in results):
        return Outcome.UNSUPPORTED
    return Outcome.OK


def exit_code(results: list[ReleaseResult]) -> int:
    """1 if any release failed; else 3 if a release asked for by name is unsupported; else 0."""
    return exit_code_for(overall_outcome(results))


# --------------------------------------------------------------------------- which releases


def load_patch_set(opts: Options) -> PatchSetDef:
    return load_chosen(opts.library, opts.set_name)


def releases_to_verify(
    patch_set: PatchSetDef, named: list[Version], *, every: bool, latest: bool
) -> tuple[list[Version], set[Version]]:
    """(the versions to verify, oldest first; those asked for explicitly)."""
    requested = set(named)
    chosen = set(named)
    if every or latest:
        available = fetch.available_versions()
        if latest and available:
            requested.add(available[-1])
            chosen.add(available[-1])
        if every:
            chosen.update(release_range(patch_set, available))
    if not chosen:
        raise NoPatchSet(f"no vLLM release on the index is in the range of the set {patch_set.name!r}")
    return sorted(chosen), requested


def release_range(patch_set: PatchSetDef, available: list[Version]) -> list[Version]:
    """Every available release from the set's supported minimum on."""
    start = next((v for v in available if _in_set(patch_set, v)), None)
    return [v for v in available if start is not None and v >= start]


def _in_set(patch_set: PatchSetDef, version: Version) -> bool:

    if patch_set.supported is not None:
        return in_range(patch_set.supported, version)
    upstream = patch_set.upstream is not None and in_range(patch_set.upstream, version)
    return upstream or any(r.covers(version) for r in patch_set.releases)


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True, eq=False)  # identity: one job per release
class _Job:
    """One release to judge: its version, its series, the paths its set reads."""

    version: Version
    selection: Selection
    paths: tuple[str, ...]

    @property
    def series(self) -> str:
        release = self.selection.release
        return release.directory.name if release else UPSTREAM


def verify_releases(
    versions: list[Version],
    requested: set[Version],
    opts: Options,
    advance: Advance = lambda label: None,
    *,
    use_cache: bool = True,
    patch_set: PatchSetDef | None = None,
) -> list[ReleaseResult]:
    """Verify each release (see the module docstring); results oldest first. `patch_set`: opts'
    set, when the caller has loaded it already."""
    patch_set = patch_set if patch_set is not None else load_patch_set(opts)
    store = ResultStore(patch_set) if use_cache else None
    results: dict[Version, ReleaseResult] = {}
    jobs = []
    for version in versions:
        job_or_result = _job(patch_set, version, opts)
        if isinstance(job_or_result, ReleaseResult):
            results[version] = job_or_result
            advance(f"{version} {job_or_result.outcome}")
        else:
            jobs.append(job_or_result)
    with tempfile.TemporaryDirectory(prefix="patchkit-verify-") as scratch:
        for result in _run_jobs(jobs, _Sharing(patch_set, jobs), Path(scratch), opts, advance, store):
            results[result.version] = result
    for version, result in results.items():
        result.requested = version in requested
    return [results[v] for v in sorted(results)]


def _job(patch_set: PatchSetDef, version: Version, opts: Options) -> _Job | ReleaseResult:
    try:
        selection = select(patch_set, version)
    except NoPatchSet as exc:  # inside the supported range, but no series covers it
        return ReleaseResult(version, UNSUPPORTED, exc.message)
    if selection.kind == SelectionKind.UNSUPPORTED:
        return ReleaseResult(version, UNSUPPORTED, selection.note or "unsupported")
    return _Job(version, selection, tuple(needed_files(patch_set, selection)))


Shared = tuple[object, ...]


class _Sharing:
    """Which releases of one set's run share a result: the same prefix (everything it depends on
    besides the stock files: the selection's kind, the series directory and its patches' bytes, the
    contract requirements that apply, the behaviour test's key) and the same RECORD sha256 of each
    file (see the module docstring)."""

    def __init__(self, patch_set: PatchSetDef, jobs: list[_Job]):
        self.behaviour = (
            version_keys(patch_set.behaviour, [job.version for job in jobs]) if patch_set.behaviour is not None else {}
        )
        self.patches: dict[str, str] = {}  # each series' patches' digest, computed once per run

    def prefix(self, job: _Job) -> Shared:
        selection = job.selection
        if job.series not in self.patches:
            digests = "\0".join(p.sha256 for p in selection.patches)
            self.patches[job.series] = hashlib.sha256(digests.encode()).hexdigest()
        contract = getattr(selection.patch_set, "contract", ())
        return (
            selection.kind,
            job.series,
            self.patches[job.series],
            tuple(i for i, req in enumerate(contract) if req.applies_to(job.version)),
            self.behaviour.get(job.version, ""),
        )

    def key(self, job: _Job, tree: Path) -> Shared | None:
        """None: no RECORD vouches for the files, so the release is judged on its own."""
        rows = _record(tree, set(job.paths))
        if rows is None:
            return None
        return (*self.prefix(job), tuple((path, rows.get(path, ("absent",))[0]) for path in job.paths))


def _run_jobs(
    jobs: list[_Job], sharing: _Sharing, scratch: Path, opts: Options, advance: Advance, store: ResultStore | None
) -> list[ReleaseResult]:
    """Fetch side by side: the first release of each prefix (see _Sharing) with its files, as it is
    judged whatever its RECORD says; the others RECORD first. In version order, a release whose key
    an earlier one has takes its result; the first of each key has its files fetched (if not yet)
    and is verified as soon as they are there."""
    done: dict[_Job, ReleaseResult] = {}
    recorded: dict[_Job, tuple[Path, float]] = {}  # fetched (RECORD only, or with its files)
    firsts: dict[Shared, _Job] = {}
    mates: dict[_Job, _Job] = {}
    ordered = sorted(jobs, key=lambda job: job.version)
    waiting, prefixes = iter(ordered), set()
    following = next(waiting, None)
    pool = ThreadPoolExecutor(max_workers=FETCH_WORKERS)
    try:
        pending: dict[Future[tuple[Path, float]], tuple[_Job, bool]] = {}
        for job in ordered:
            new = sharing.prefix(job) not in prefixes
            prefixes.add(sharing.prefix(job))
            pending[pool.submit(_fetch, job, job.paths if new else ())] = (job, new)
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                job, with_files = pending.pop(future)
                recorded[job] = future.result()
                if with_files:
                    done[job] = _verify_or_recall(job, *recorded[job], scratch, opts, store)
                    advance(f"{job.version} {done[job].label}")
            while following is not None and following in recorded:  # decided in version order
                key = sharing.key(following, recorded[following][0])
                if key is not None and key in firsts:
                    mates[following] = firsts[key]
                elif key is not None:
                    firsts[key] = following
                if following not in mates and following not in done:  # a first whose files are not here yet
                    pending[pool.submit(_fetch, following, following.paths)] = (following, True)
                following = next(waiting, None)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    for mate, first in mates.items():
        done[mate] = _reused(mate, done[first], recorded[mate][1])
        advance(f"{mate.version} {done[mate].label}")
    return list(done.values())


def _fetch(job: _Job, paths: Iterable[str]) -> tuple[Path, float]:
    start = time.perf_counter()
    tree = fetch.release_tree(str(job.version), paths, recheck_index=True)
    return tree, time.perf_counter() - start


def _record(tree: Path, paths: set[str]) -> dict[str, tuple[str, str]] | None:
    """The rows of `paths` in the tree's RECORD (vLLM's has ~5,000 rows: building them all is most
    of a warm `verify --all`)."""
    found = find_record(tree)
    if found is None:
        return None
    try:
        return parse_record(read_record_file(tree, found), paths)
    except OSError:  # not a regular file, or too large: no evidence
        return None


def _reused(mate: _Job, lead: ReleaseResult, fetched: float) -> ReleaseResult:
    return replace(
        lead,
        version=mate.version,
        series=mate.series,
        same_as=lead.version,
        detail=f"{lead.detail} (stock files identical to {lead.version}'s by RECORD sha256; its result)",
        timings={"fetch": fetched, "total": fetched},
    )


# --------------------------------------------------------------------------- result cache


class ResultStore:
    """Results by a key over all their inputs (see the module docstring), each sealed with this
    user's key (patchkit.base.seal): an entry is a shortcut for a result this user's patchkit made, never
    evidence. One that does not verify (edited, made elsewhere, for another release) is run again."""

    KIND = "verify-result"

    def __init__(self, patch_set: PatchSetDef):
        self.directory = fetch.cache_dir() / "verify-results"
        self.fingerprint = _fingerprint(patch_set)
        self.usable = usable_cache_dir(self.directory)  # never written or pruned through a symlink
        if self.usable:
            prune(self.directory)  # results of earlier code or sets are never asked for again

    def key(self, job: _Job, stock: Path) -> str:
        digest = hashlib.sha256(f"{self.fingerprint}\0{job.version}".encode())
        for path in job.paths:
            full = stock / path
            content = hashlib.sha256(full.read_bytes()).hexdigest() if full.is_file() else "absent"
            digest.update(f"\0{path}\0{content}".encode())
        return digest.hexdigest()

    def recall(self, key: str, job: _Job) -> tuple[ReleaseResult | None, str | None]:
        """(the cached result, None) or (None, why an entry there was not believed); (None, None): none."""
        path = self.directory / f"{key}.json"
        if not self.usable:
            return None, None
        try:
            raw = _read_entry(self.directory, path)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"unreadable ({exc.strerror or exc})"
        try:
            result = self._believe(key, job, fsutil.load_json_text(raw))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            return None, str(exc) or type(exc).__name__
        touch(path)
        return result, None

    def _believe(self, key: str, job: _Job, entry: dict[str, Any]) -> ReleaseResult:
        data = entry["result"]  # a cache file's JSON: a wrong shape fails as the TypeError recall catches
        if not seal.sealed(self.KIND, key, seal.canonical(data), entry.get("seal")):
            raise ValueError("not sealed by this user's patchkit (edited, or made on another machine)")
        if data["vllm_version"] != str(job.version) or data["series"] != job.series:
            raise ValueError(f"made for {data['vllm_version']} ({data['series']}), not {job.version} ({job.series})")
        rows = data["checks"]
        if not all(not isinstance(c, dict) or c.get("level", ERROR) in (ERROR, WARNING) for c in rows):
            raise ValueError("a check result is malformed")
        checks = [CheckResult(**c) for c in rows]
        if not all(isinstance(c.ok, bool) for c in checks):
            raise ValueError("a check result is malformed")
        outcome = ReleaseOutcome(data["outcome"])  # ValueError for an outcome patchkit does not know
        if outcome == UNSUPPORTED:
            raise ValueError("a fetched release is never unsupported")
        return ReleaseResult(
            job.version,
            outcome,
            str(data["detail"]),
            series=job.series,
            checks=checks,
            reverted_identical=_optional_bool(data["reverted_identical"]),
            upstream_regression=bool(data["upstream_regression"]),
            stock_behaviour=_stock_behaviour(data.get("stock_behaviour")),
            hint=str(data.get("hint") or ""),
            cached=True,
        )

    def keep(self, key: str, result: ReleaseResult, set_name: str) -> None:
        data = result.to_json(set_name)
        entry = {"seal": seal.seal(self.KIND, key, seal.canonical(data)), "result": data}
        path = self.directory / f"{key}.json"
        if not self.usable:
            return
        with suppress(OSError):  # a cache that cannot be written only costs time
            self.directory.mkdir(parents=True, exist_ok=True)
            if fsutil.inside(self.directory, path.parent):
                fsutil.atomic_write(path, fsutil.json_text(entry, "a cache entry").encode())


def _stock_behaviour(value: object) -> str | None:
    if value is not None and value not in STOCK_BEHAVIOUR:
        raise ValueError(f"stock_behaviour is {value!r}")
    return value


def _optional_bool(value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"reverted_identical is {value!r}")
    return value


def _read_entry(directory: Path, path: Path) -> bytes:
    """A cache entry's bytes: a regular file inside the cache (a symlink is never followed)."""
    if not fsutil.inside(directory, path.parent):
        raise OSError(f"{path.name} is not in the cache")
    return fsutil.read_regular(path, 1 << 22)  # never a symlink, never a fifo


def _fingerprint(patch_set: PatchSetDef) -> str:
    """What every result depends on besides the release: patchkit's code, the set, the judges."""

    digest = hashlib.sha256(sys.version.encode())
    for name in ("pyflakes", "unidiff", "packaging"):
        digest.update(f"\0{name}={metadata.version(name)}".encode())
    for root in (Path(patchkit.__file__).resolve().parent, patch_set.directory):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(f"\0{path.relative_to(root).as_posix()}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def _verify_or_recall(
    job: _Job, stock: Path, fetched: float, scratch: Path, opts: Options, store: ResultStore | None
) -> ReleaseResult:
    if store is None:
        return _verify_release(job, stock, fetched, scratch, opts)
    key = store.key(job, stock)
    recalled, distrusted = store.recall(key, job)
    if recalled is not None:
        recalled.timings = {"fetch": fetched, "total": fetched}
        return recalled
    result = _verify_release(job, stock, fetched, scratch, opts)
    store.keep(key, result, job.selection.set_name)  # before the note: it is this run's, never replayed
    if distrusted:
        result.detail += f" (re-checked: a cached result for these inputs was not believed, {distrusted})"
    return result


# --------------------------------------------------------------------------- one release


class _Clock:
    def __init__(self, fetched: float):
        self.timings = {"fetch": fetched}
        self._start = time.perf_counter()

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - start

    def total(self) -> dict[str, float]:
        return {**self.timings, "total": self.timings["fetch"] + time.perf_counter() - self._start}


def _verify_release(job: _Job, stock: Path, fetched: float, scratch: Path, opts: Options) -> ReleaseResult:
    with fsutil.scratch_writes():  # the scratch tree is deleted afterwards: nothing to make durable
        return _verify_in_scratch(job, stock, fetched, scratch, opts)


def _verify_in_scratch(job: _Job, stock: Path, fetched: float, scratch: Path, opts: Options) -> ReleaseResult:
    clock = _Clock(fetched)
    site = scratch / str(job.version)
    (site / "vllm").mkdir(parents=True)
    copied = lay_out(stock, site, job.paths)
    try:
        resolved = resolve(replace(opts, target_dir=str(site), python=None, vllm_version=None, adhoc=()))
        with clock("checks"):
            stock_checks = _stock_integrity(site, job, copied)
        if any(r.failed for r in stock_checks):
            result = _damaged_stock(job.version, stock_checks)
        elif job.selection.kind == SelectionKind.UPSTREAM:
            result = _verify_upstream(resolved, clock)
        elif resolved.selection.in_stock:  # the release's own files hold the series: judged as they are
            result = _verify_in_stock(resolved, clock)
        elif len(resolved.patches) < len(job.selection.patches):  # they hold some of it (resolve's in-stock rule)
            result = _verify_partly_in_stock(resolved, job.selection, clock)
        else:
            result = _verify_patched(resolved, clock)
        counted = _passed(result.checks)
        result.checks = stock_checks + [r for r in result.checks if r.check != integrity.NAME]
        # the count said is of the checks reported with it (JSON, JUnit), the stock files' integrity too
        result.detail = result.detail.replace(counted, _passed(result.checks), 1)
        differences = _differences(stock, site, copied)
        if differences and result.outcome in (PATCHED, UPSTREAM):
            result.outcome = CHECK_FAILED_OUTCOME
            result.detail = f"the tree differs from stock afterwards: {', '.join(differences)}"
        if result.reverted_identical is not None or differences:
            result.reverted_identical = not differences
        result.series = job.series
        result.timings = clock.total()
        return result
    finally:
        shutil.rmtree(site, ignore_errors=True)


def _stock_integrity(site: Path, job: _Job, copied: list[str]) -> list[CheckResult]:
    """integrity, as `verify --target` runs it: each stock file against the release's RECORD. A file
    the behaviour test reads that the release lacks is no file of it (not "added by the series")."""
    reads = set(job.selection.patch_set.behaviour_reads) if job.selection.patch_set else set()
    paths = [path for path in job.paths if path in copied or path not in reads]
    context = CheckContext(
        paths=paths, read=lambda path: read_file(site / path), python=None, root=site, version=job.version
    )
    return integrity.CHECK.run(context)


def _damaged_stock(version: Version, results: list[CheckResult]) -> ReleaseResult:
    """Files that are not the release's own: nothing said about them would be about the library."""
    return ReleaseResult(
        version,
        CHECK_FAILED_OUTCOME,
        "the stock files are not the release's (RECORD sha256 differs; a damaged fetch cache?): " + _failures(results),
        checks=results,
    )


def _verify_patched(resolved: Resolved, clock: _Clock) -> ReleaseResult:
    """apply --dry-run, apply, status, revert: what a user would run, on the release's stock files."""
    version = _release(resolved)
    dry = apply_series(resolved, dry_run=True, timed=clock)  # its plan timed as dry_run, its checks as checks
    plan = dry.plan
    assert plan is not None  # a library series is always planned
    refused = _refused_by_plan(version, plan)
    if refused:
        return _with_stock_behaviour(resolved, plan, refused) if refused.outcome == CONFLICT else refused
    applied = apply_series(resolved, timed=clock, checked=dry)  # the dry run's checks, not run twice
    results = applied.planned_checks
    if not applied.written:
        failed = any(r.failed for r in results)
        detail = "checks failed on the planned files: " + _failures(results) if failed else None
        return ReleaseResult(version, CHECK_FAILED_OUTCOME, detail or _message(applied.error), checks=results)
    with clock("checks"):
        status = inspect(resolved)
        reverse_problems = _reverse_apply_problems(resolved, plan.changes)
        behaved = registry.run_checks(check_context(resolved, plan, on_disk=True), [behaviour.CHECK])  # once, written
    with clock("revert"):
        _revert(resolved)
    problems = _problems_after_apply(applied, status) + reverse_problems
    problems += [f"behaviour: {r.message}" for r in behaved if r.failed]
    checks = results + [r for r in applied.on_disk_checks if r.failed] + behaved
    if problems:
        return ReleaseResult(version, CHECK_FAILED_OUTCOME, "; ".join(problems), checks=checks, reverted_identical=True)
    return ReleaseResult(
        version,
        PATCHED,
        # counted as the checks reported with it (JSON, JUnit): the set's behaviour test too
        f"{len(resolved.patches)} patch(es), {len(plan.changes)} file(s), {_passed(checks)}; reverted byte-identical",
        checks=checks,
        reverted_identical=True,
    )


def _refused_by_plan(version: Version, plan: Plan) -> ReleaseResult | None:
    """A conflict, or a patch the stock release already contains."""
    if plan.conflicts:
        return ReleaseResult(version, CONFLICT, plan.describe_conflicts())
    present = [s.patch.name for s in plan.steps if s.state == StepState.ALREADY_APPLIED]
    if present:
        return ReleaseResult(
            version, CHECK_FAILED_OUTCOME, f"the stock release already contains {', '.join(present)}: is it upstream?"
        )
    return None


STOCK_BEHAVIOUR = ("passes", "fails", "not judged")


def _port_command(set_name: str, series: Selection, version: Version) -> str:
    """`patchkit port … --from D --to V`: V's own series merged from D's (a patch V's stock files
    already hold is dropped; an open range through V ends before it)."""
    release = series.release
    source = release.directory.name if release else "V1"
    return hints.command("port", "--from", source, "--to", str(version), chosen=hints.for_set(set_name))


def _with_stock_behaviour(resolved: Resolved, plan: Plan, conflict: ReleaseResult) -> ReleaseResult:
    """A conflict: the stock files changed. The set's behaviour test on them says whether the change
    may be upstream's fix (an open-ended set's range then closes) or the series needs porting."""
    version, changed = conflict.version, f"the stock files changed ({conflict.detail})"
    port = _port_command(resolved.set_name, resolved.selection, version)
    judged = registry.run_checks(check_context(resolved, plan, on_disk=True), [behaviour.CHECK])
    if not judged:  # no behaviour test: the port is the fix
        return replace(conflict, hint=f"port the series: {port}")
    stock = judged[0]
    said = replace(stock, message=f"stock: {stock.message}", level=WARNING)  # the conflict is the failure
    if stock.ok:
        pending = resolved.selection.patch_set.pending_fix if resolved.selection.patch_set else None
        merged = f" (was {pending} merged?)" if pending else ""
        verdict, hint = "passes", f"upstream may have fixed this in {version}{merged}: close the set's range"
        detail = f"{changed}; they pass the set's behaviour test ({stock.message})"
    elif stock.failed:
        verdict, hint = "fails", f"port the series: {port}"
        detail = f"{changed} and still fail the set's behaviour test ({stock.message})"
    else:
        verdict, hint = "not judged", f"port the series: {port}"
        detail = f"{changed}; the set's behaviour test did not judge them ({stock.message})"
    return replace(conflict, detail=detail, checks=[*conflict.checks, said], stock_behaviour=verdict, hint=hint)


def _verify_in_stock(resolved: Resolved, clock: _Clock) -> ReleaseResult:
    """A release whose stock files already hold every patch of the series (upstream merged a fix
    that matches it): never patched; the set's behaviour test on those files says whether the set's
    range should close there. A failure either way: the library does not say this release yet."""
    version = _release(resolved)
    with clock("checks"):
        status = inspect(resolved, check_upstream=True, verifying=(behaviour.CHECK,))
    names = ", ".join(patch.name for patch in resolved.selection.patches)
    changed = f"the stock files of {version} already hold this set's change ({names})"
    stock = next((r for r in status.checks if r.check == behaviour.CHECK.name), None)
    others = [r for r in status.checks if r.failed and r is not stock]
    if stock is None:
        verdict, hint, detail = None, "is it upstream? close the set's range if so", changed
    elif stock.ok:
        verdict, hint = "passes", in_stock_fix(version, resolved.selection.patch_set)
        detail = f"{changed}; they pass the set's behaviour test ({stock.message})"
    elif stock.failed:
        verdict, hint = "fails", "the change is there but the behaviour is not: see what else upstream changed"
        detail = f"{changed}, and fail the set's behaviour test ({stock.message})"
    else:
        verdict, hint = "not judged", "is it upstream? close the set's range if so"
        detail = f"{changed}; the set's behaviour test did not judge them ({stock.message})"
    if others:
        detail += "; checks failed on them: " + _failures(others)
    return ReleaseResult(
        version, CHECK_FAILED_OUTCOME, detail, checks=status.checks, stock_behaviour=verdict, hint=hint
    )


def _verify_partly_in_stock(resolved: Resolved, series: Selection, clock: _Clock) -> ReleaseResult:
    """A release whose stock files hold some of the series' patches (upstream fixed part of it): the
    set's behaviour test on every file of the series as the release ships it, then the rest applied,
    checked and reverted as a user's apply does. A failure either way: the library should say it."""
    version, root = _release(resolved), resolved.target.root
    held = ", ".join(p.name for p in series.patches if p not in resolved.patches)
    whole = replace(resolved, selection=replace(resolved.selection, patches=series.patches))
    with clock("checks"):
        judged = registry.run_checks(
            check_context(whole, dry_run(root, series.patches), on_disk=True), [behaviour.CHECK]
        )
    rest = _verify_patched(resolved, clock)
    detail = f"the stock files of {version} already hold {held}'s change"
    port = _port_command(resolved.set_name, series, version)
    hint = f"upstream merged {held} in {version}: {port} gives {version} a series without {held}"
    verdict, checks = None, rest.checks
    if judged:
        stock = judged[0]
        verdict = "passes" if stock.ok else "fails" if stock.failed else "not judged"
        detail += f"; stock, the set's behaviour test {_verdict_said[verdict]} ({stock.message})"
        hint = in_stock_fix(version, series.patch_set) if stock.ok else hint
        checks = [*checks, replace(stock, message=f"stock: {stock.message}", level=WARNING)]  # not the verdict
    outcome = rest.outcome if rest.outcome == CONFLICT else CHECK_FAILED_OUTCOME
    detail = f"{detail}; the rest: {rest.detail}"
    return replace(rest, outcome=outcome, detail=detail, checks=checks, stock_behaviour=verdict, hint=hint)


_verdict_said = {"passes": "passes", "fails": "fails", "not judged": "did not judge them"}


def _problems_after_apply(applied: ApplyResult, status: TreeStatus) -> list[str]:
    problems = []
    if applied.outcome == Outcome.APPLIED and status.state != TreeState.APPLIED:
        problems.append(f"after apply the status is {status.state}, not applied")
    if any(r.failed for r in applied.on_disk_checks):  # apply rolled the tree back
        problems.append("checks failed on the written files: " + _failures(applied.on_disk_checks))
    elif applied.error is not None:
        problems.append(applied.error.message)
    return problems


def _release(resolved: Resolved) -> Version:
    """The release a scratch tree holds (its dist-info names it)."""
    assert resolved.vllm_version is not None
    return resolved.vllm_version


def _message(error: PatchkitError | None) -> str:
    return error.message if error is not None else "nothing was written"


def _verify_upstream(resolved: Resolved, clock: _Clock) -> ReleaseResult:
    version = _release(resolved)
    with clock("checks"):
        status = inspect(resolved, check_upstream=True, verifying=(behaviour.CHECK,))
    if status.upstream_regression:
        return ReleaseResult(
            version,
            UPSTREAM,
            "upstream regression: the stock files fail the set's checks: " + _failures(status.checks),
            checks=status.checks,
            upstream_regression=True,
        )
    files = len({r.path for r in status.checks if r.path})
    unjudged = [r.excerpt or r.message for r in status.checks if r.check == "behaviour" and not r.ok]  # warnings
    said = (
        f"; its behaviour test did not judge them ({unjudged[0]}): upstream by the set's range alone"
        if unjudged
        else ""
    )
    return ReleaseResult(
        version,
        UPSTREAM,
        f"vLLM ships the change; on its {files} stock file(s) {_passed(status.checks)}{said}",
        checks=status.checks,
    )


def _passed(results: list[CheckResult]) -> str:
    """ "20 check(s) passed, 1 skipped": passing results; a passing warning is a check that did not run."""

    counts = Counter(r.status for r in results)
    others = "".join(
        f", {counts[status]} {status}" for status in (CheckStatus.SKIPPED, CheckStatus.WARNING) if counts[status]
    )
    return f"{counts[CheckStatus.PASS]} check(s) passed{others}"


def _failures(results: list[CheckResult]) -> str:
    return "; ".join(r.describe() for r in results if r.failed)


def _revert(resolved: Resolved) -> None:
    """What `revert` does: restore each recorded file's saved original (what a failed on-disk
    check already rolled back leaves nothing to do)."""
    reverted = revert_series(resolved.target, resolved)
    if reverted.error is not None:
        raise reverted.error


def _reverse_apply_problems(resolved: Resolved, changes: dict[str, tuple[bytes | None, bytes | None]]) -> list[str]:
    """`revert` without a record reverse-applies the series: that must give stock back as well."""
    plan = plan_revert(resolved.target.root, resolved.patches)
    if plan.conflicts:
        return ["the series does not reverse-apply: " + plan.describe_conflicts()]
    wrong = sorted(p for p, (before, _after) in changes.items() if plan.content(p) != before)
    return [f"reverse-applying the series does not restore {', '.join(wrong)}"] if wrong else []


# --------------------------------------------------------------------------- trees


def _differences(stock: Path, site: Path, copied: list[str]) -> list[str]:
    """Files that are not byte-identical to stock, appeared or vanished (patchkit's own record aside)."""
    present = sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*")
        if p.is_file() and p.relative_to(site).parts[0] != META_DIR
    )
    differ = [p for p in copied if p in present and (site / p).read_bytes() != (stock / p).read_bytes()]
    return sorted(set(present) ^ set(copied)) + differ
