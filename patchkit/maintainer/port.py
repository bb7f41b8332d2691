"""`patchkit port`: a set carried from one release to another by three-way merges."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from patchkit.base.enums import FileKind, StepState
from patchkit.base.errors import BadInput, Conflict, NoPatchSet
from patchkit.base.fsutil import read_file
from patchkit.maintainer.gitrepo import Changes, commit_all, git_diff, init_repo
from patchkit.maintainer.merge import merge_file
from patchkit.maintainer.meta import STOCK_TAG, WorkspaceMeta, record_of, registered_entry
from patchkit.maintainer.patchtext import join_header, keep_or_touch, split_header, today_iso
from patchkit.maintainer.reports import FileMerge, PatchOutcome, PortReport
from patchkit.maintainer.series import (
    check_reproduces,
    open_above,
    register_release,
    series_directory,
    series_for,
    write_series_files,
)
from patchkit.maintainer.states import PatchChange, PortOutcome
from patchkit.maintainer.stock import Contents, Progress, metadata_file, release_contents, stock_paths
from patchkit.maintainer.workdir import fresh_dir, require_empty, write_file
from patchkit.series.library import PATCH, UPSTREAM, PatchSetDef, Selection, load_chosen, select, write_series
from patchkit.series.patchfile import decode, encode, parse_patch
from patchkit.series.plan import plan_apply
from patchkit.tree.version import parse

Stage = tuple[str, str, bytes | None, bytes | None]  # (patch, path, before, after) of one file step


@dataclass(frozen=True)
class PortRequest:
    """What `patchkit port` is asked: a set of the library, the releases it goes from and to, and
    where the result goes."""

    from_version: str
    to_version: str
    library: str | None = None
    set_name: str | None = None
    out: str | None = None  # a directory for V2's series instead of the library
    workspace: str | None = None  # where a merge that conflicts is left
    today: str | None = None  # the date a rewritten DEP-3 header gets (today's when None)
    progress: Progress | None = None


def port_set(request: PortRequest) -> PortReport:
    patch_set = load_chosen(request.library, request.set_name)
    v1, v2 = parse(request.from_version, "--from"), parse(request.to_version, "--to")
    if v1 == v2:
        raise BadInput(f"--from and --to are the same release ({v1})")
    selection = series_for(patch_set, v1)
    report = PortReport(str(v1), str(v2), PortOutcome.PORTED, None)
    declared = _declared(patch_set, v2, request.out, selection)
    if declared == UPSTREAM:
        report.outcome = PortOutcome.UPSTREAM
        report.notes.append(f"set.toml declares the set upstream in vLLM {v2} ({patch_set.upstream})")
        return report
    dest = _destination(patch_set, v2, request.out)
    report.destination = str(dest)
    return _Port(request, patch_set, selection, report, dest).run()


def _destination(patch_set: PatchSetDef, version: Version, out: str | None) -> Path:
    """Where V2's series goes: --out, or a new directory of the library; never over files."""
    dest = Path(out).resolve() if out else patch_set.directory / str(version)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BadInput(
            f"{dest} already exists and is not empty",
            hint="choose another --out directory"
            if out
            else f"the library already has a directory {dest.name}; remove it or use --out",
        )
    return dest


@dataclass
class _Merged:
    """V1's series merged onto V2: V2's tree and stock files, the files as merged, the diffs' texts."""

    tree2: Path
    stock2: Contents
    current: Contents
    texts: dict[str, str]


@dataclass
class _Port:
    """One port, phase by phase: V2's stock files, the merge, then the series written (or a workspace)."""

    request: PortRequest
    patch_set: PatchSetDef
    selection: Selection
    report: PortReport
    dest: Path

    def run(self) -> PortReport:
        report, selection = self.report, self.selection
        paths = stock_paths(selection.patches)
        tree1, stock1 = release_contents(report.from_version, paths, self.request.progress)
        tree2, stock2 = release_contents(report.to_version, paths, self.request.progress)
        if stock1 == stock2:
            return self.identical()
        if all(s.state == StepState.ALREADY_APPLIED for s in plan_apply(tree2, selection.patches).steps):
            return _port_upstream(report, "the series is found applied on its stock files")
        stages = _v1_stages(tree1, selection)
        current, results = _merge_stages(stages, stock2, report, report.from_version, report.to_version)
        self.refuse_missing()
        if all(current[p] == stock2.get(p) for p in current) and not report.conflicts:
            return _port_upstream(report, "merging the series changes none of its files")
        today = self.request.today or today_iso()
        texts, outcomes = _ported_texts(selection, results, today, self.patch_set.roots)
        report.patches = outcomes
        merged = _Merged(tree2, stock2, current, texts)
        return self.leave_workspace(merged) if report.conflicts else self.write(merged, outcomes)

    def refuse_missing(self) -> None:
        missing = [m for m in self.report.merges if m.conflicts < 0]
        if missing:
            raise Conflict(
                f"files the series changes are missing in vLLM {self.report.to_version}: "
                f"{', '.join(sorted({m.path for m in missing}))}",
                hint="they were moved or removed upstream: port those patches by hand",
            )

    def write(self, merged: _Merged, outcomes: list[PatchOutcome]) -> PortReport:
        """A clean merge: V2's series, checked to reproduce the merge, into the library (or --out)."""
        texts, roots, out = merged.texts, self.patch_set.roots, self.request.out
        ported = [
            parse_patch(encode(texts[o.name]), o.name, roots=roots) for o in outcomes if o.state != PatchChange.REMOVED
        ]
        check_reproduces(ported, merged.stock2, merged.current)
        source = series_directory(self.selection)
        if out is None and all(read_file(source / o.name) == encode(texts.get(o.name, "")) for o in outcomes):
            self.report.notes.append(f"the ported diffs are byte-identical to {source.name}'s")
            return self.identical()
        write_series_files(self.dest, texts, outcomes)
        if out is None:
            version = self.report.to_version
            self.report.registered = register_release(self.patch_set.directory, Version(version), version)
        return self.report

    def identical(self) -> PortReport:
        """V2 needs exactly V1's diffs: point V2 at V1's directory (or copy them into --out)."""
        report, selection, patch_set, dest = self.report, self.selection, self.patch_set, self.dest
        source = series_directory(selection)
        report.outcome = PortOutcome.IDENTICAL
        names = [p.name for p in selection.patches]
        if self.request.out:
            dest.mkdir(parents=True, exist_ok=True)
            for name in names:
                shutil.copyfile(source / name, dest / name)
            write_series(dest, names)
            report.patches = [
                PatchOutcome(p.name, PatchChange.NEW, [f.path for f in p.files]) for p in selection.patches
            ]
            report.notes.append(
                f"vLLM {report.to_version} needs the same series as {report.from_version}: copied into {dest}"
            )
            return report
        relative = source.relative_to(patch_set.directory).as_posix()
        report.destination = str(source)
        # the new entry points at the old series: no patch file is written (a merge's outcomes said "new")
        report.patches = [
            PatchOutcome(p.name, PatchChange.UNCHANGED, [f.path for f in p.files]) for p in selection.patches
        ]
        report.registered = register_release(
            patch_set.directory, Version(report.to_version), relative, comment=f"same series as {report.from_version}"
        )
        report.notes.append(
            f"vLLM {report.to_version} needs the same series as {report.from_version}: "
            f"its entry points at {relative}/ (nothing copied)"
        )
        return report

    def leave_workspace(self, merged: _Merged) -> PortReport:
        """Leave a workspace of V2 with the merge (and its conflict markers) committed on top of stock."""
        report = self.report
        report.outcome = PortOutcome.CONFLICTS
        conflicted = sorted({m.path for m in report.conflicts})
        target = Path(self.request.workspace or f"vllm-{report.to_version}-workspace")
        try:
            require_empty(target)
        except BadInput as exc:
            raise BadInput(
                f"the merge conflicts ({', '.join(conflicted)}) and the workspace for them cannot be made: {exc.message}",
                hint="pass --workspace DIR (a new or empty directory)",
            ) from exc
        with fresh_dir(target) as dest:
            self.fill_workspace(dest, merged, conflicted)
        report.workspace = str(dest)
        return report

    def fill_workspace(self, dest: Path, merged: _Merged, conflicted: list[str]) -> None:
        report, patch_set = self.report, self.patch_set
        for path, data in merged.stock2.items():
            write_file(dest, path, data)
        metadata = metadata_file(merged.tree2)
        if metadata:
            write_file(dest, metadata.relative_to(merged.tree2).as_posix(), metadata.read_bytes())
        repo = init_repo(dest)
        stock = commit_all(repo, f"stock vllm {report.to_version}")
        repo.create_tag(STOCK_TAG, ref=stock)
        for path, data in merged.current.items():
            write_file(dest, path, data)
        commit_all(
            repo,
            f"{patch_set.name} series ported from vllm {report.from_version}: conflicts to resolve\n\n"
            + "".join(f"{p}\n" for p in conflicted),
        )
        records = [
            record_of(
                patch,
                parts=split_header(merged.texts[patch.name])[1] if patch.name in merged.texts else "",
                library_copy=False,
            )
            for patch in self.selection.patches
        ]
        register = None if self.request.out else registered_entry(report.to_version)
        WorkspaceMeta(
            patch_set.name,
            str(patch_set.directory.resolve()),
            report.to_version,
            list(patch_set.roots),
            str(report.destination),
            stock,
            records,
            register=register,
            ported_from=report.from_version,
        ).save(dest)


def _declared(patch_set: PatchSetDef, version: Version, out: str | None, source: Selection) -> str | None:
    """What set.toml says of V2; a series of its own refused (not written over), unless it is the
    series ported from, by a range open above V2: the port's entry then takes V2 on (register_release)."""
    try:
        selection = select(patch_set, version)
    except NoPatchSet:
        return None
    if selection.kind == PATCH and out is None and not _splits(selection, source):
        raise BadInput(
            f"the library already has a series for vLLM {version} ({series_directory(selection).name})",
            hint=f"change it with `patchkit workspace {version}` + `patchkit refresh`, "
            "or port into another directory with --out",
        )
    return selection.kind


def _splits(selection: Selection, source: Selection) -> bool:
    """V2's series is V1's, by an entry open above V2 (`>=0.23.0`): a port splits that range."""
    release = selection.release
    return release is not None and release == source.release and open_above(release) is not None


def _port_upstream(report: PortReport, why: str) -> PortReport:
    report.outcome = PortOutcome.UPSTREAM
    report.destination = None
    report.notes.append(f"vLLM {report.to_version} already contains the change ({why}): nothing written")
    return report


def _v1_stages(tree1: Path, selection: Selection) -> list[Stage]:
    """(patch, path, before, after) for every file step of the series on V1's stock files."""
    plan = plan_apply(tree1, selection.patches)
    stages = []
    for step in plan.steps:
        if step.state != StepState.WILL_CHANGE:
            problem = step.mismatch.describe() if step.mismatch else f"already present in stock {selection.version}"
            raise BadInput(f"{step.patch.name} does not apply to stock vLLM {selection.version}: {problem}")
        for file_step in step.files:
            if file_step.patch.kind == FileKind.RENAME:
                raise BadInput(f"{step.patch.name}: renames ({file_step.patch.source_path}) cannot be ported")
            stages.append((step.patch.name, file_step.patch.path, file_step.before, file_step.after))
    return stages


def _merge_stages(
    stages: list[Stage], stock2: Contents, report: PortReport, v1: str, v2: str
) -> tuple[Contents, dict[str, Changes]]:
    """Merge each patch's change of each file onto V2, patch after patch."""
    current: Contents = dict(stock2)
    results: dict[str, Changes] = {}
    for name, path, base, ours in stages:
        theirs = current.get(path)
        if theirs is None and base is not None:
            report.merges.append(FileMerge(path, name, -1))
            continue
        labels = (f"{name} (vllm {v1})", f"before {name} (vllm {v1})", f"vllm {v2}")
        merged, conflicts = merge_file(ours, base, theirs, labels)
        report.merges.append(FileMerge(path, name, conflicts, present=not conflicts and merged == theirs))
        results.setdefault(name, {})[path] = (theirs, merged)
        current[path] = merged
    return current, results


def _ported_texts(
    selection: Selection, results: dict[str, Changes], today: str, roots: tuple[str, ...]
) -> tuple[dict[str, str], list[PatchOutcome]]:
    texts, outcomes = {}, []
    patch_roots = list(roots)
    for patch in selection.patches:
        header, v1_body = split_header(decode(patch.raw))
        diffs = git_diff(results.get(patch.name, {}))
        order = [f.path for f in patch.files if f.path in diffs]
        body = "".join(diffs[p] for p in order)
        if not body:
            outcomes.append(PatchOutcome(patch.name, PatchChange.REMOVED, []))
            continue
        texts[patch.name] = join_header(*keep_or_touch(header, v1_body, body, today, patch_roots))
        outcomes.append(PatchOutcome(patch.name, PatchChange.NEW, order))
    return texts, outcomes
