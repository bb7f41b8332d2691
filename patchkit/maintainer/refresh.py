"""`patchkit refresh`: a workspace's changes written back into the library as the series' diffs."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

import git
from packaging.version import Version

from patchkit import fetch
from patchkit.base import hints
from patchkit.base.enums import StepState
from patchkit.base.errors import BadInput, Conflict, PatchkitError
from patchkit.base.fsutil import read_file, unsafe_reason
from patchkit.maintainer.gitrepo import Changes, git_diff
from patchkit.maintainer.merge import conflict_lines
from patchkit.maintainer.meta import STOCK_TAG, PatchRecord, WorkspaceMeta
from patchkit.maintainer.patchtext import join_header, keep_or_touch, split_header, today_iso
from patchkit.maintainer.reports import PatchOutcome, RefreshReport, SharedCheck
from patchkit.maintainer.series import (
    check_reproduces,
    pinned_version,
    register_release,
    why_not_applied,
    write_series_files,
)
from patchkit.maintainer.states import PatchChange, SharedState
from patchkit.maintainer.stock import Contents, Progress, stock_paths
from patchkit.maintainer.workspace import find_workspace
from patchkit.series.library import load_set
from patchkit.series.patchfile import Patch, encode, parse_patch
from patchkit.series.plan import View, plan_apply


def refresh_workspace(
    directory: str | None = None,
    *,
    new_patch: str | None = None,
    dry_run: bool = False,
    today: str | None = None,
    progress: Progress | None = None,
) -> RefreshReport:
    root = find_workspace(directory)
    meta = WorkspaceMeta.load(root)
    repo = _open_repo(root)
    stock_commit = _stock_commit(repo, meta)
    paths = sorted(_changed_paths(repo, meta) | {f for r in meta.patches for f in r.files})
    stock = {p: _blob(stock_commit, p) for p in paths}
    work = _workspace_files(root, paths)
    _refuse_conflict_markers(work, stock)
    uncarried = _uncarried_changes(repo, meta)
    records = list(meta.patches)
    if new_patch and any(stock[p] != work[p] for p in paths if not _owners(records).get(p)):
        records.append(_new_record(new_patch, records, today or today_iso()))
    if not records and any(stock[p] != work[p] for p in paths):  # a new set's first series
        raise BadInput(
            "the series has no patch yet to record the changes in",
            hint=hints.command("refresh", str(root), "--new-patch", "NAME") + " names the first one",
        )
    assigned, notes = split_changes(records, stock, work, meta.roots)
    if uncarried:
        notes.append(
            f"changes outside {', '.join(r + '/' for r in meta.roots)} are not carried into the library "
            f"(they stay in the workspace only): {', '.join(uncarried)}"
        )
    series_dir = Path(meta.series_dir)
    texts, outcomes = _new_texts(records, assigned, series_dir, today or today_iso(), meta.roots)
    patches = [
        parse_patch(encode(texts[o.name]), o.name, roots=tuple(meta.roots))
        for o in outcomes
        if o.state != PatchChange.REMOVED
    ]
    check_reproduces(patches, stock, work)
    notes += _library_drift(records, series_dir)
    report = RefreshReport(
        str(root), meta.version, str(series_dir), dry_run, outcomes, notes=notes, set_name=meta.set_name
    )
    report.shared = _check_shared(meta, patches, progress)
    if dry_run:
        return report
    if report.changed or meta.register:
        write_series_files(series_dir, texts, outcomes)
    if meta.register and _covered(Path(meta.set_dir), meta.version, series_dir):
        report.notes.append(f"set.toml already has an entry for vLLM {meta.version}: not added again")
    elif meta.register:
        report.registered = register_release(Path(meta.set_dir), Version(meta.version), meta.register["dir"])
    _remember(meta, texts, outcomes, root)
    return report


def _open_repo(root: Path) -> git.Repo:
    try:
        return git.Repo(str(root))
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise BadInput(
            f"{root} has a workspace record but is not a git repository",
            hint="make the workspace again with `patchkit workspace VERSION`",
        ) from exc


def _stock_commit(repo: git.Repo, meta: WorkspaceMeta) -> git.Commit:
    """The commit of the release's stock files; gone (history rewritten, objects pruned): exit 2."""
    try:
        return repo.commit(meta.stock_commit)
    except (ValueError, git.BadName, git.BadObject, git.GitCommandError) as exc:
        tag = next((t for t in repo.tags if t.name == STOCK_TAG), None)
        where = f"the tag {STOCK_TAG!r} now names {tag.commit.hexsha}" if tag else f"the tag {STOCK_TAG!r} is gone too"
        raise BadInput(
            f"the workspace's stock commit {meta.stock_commit} is not in {repo.working_tree_dir} ({where}); "
            "was its history rewritten?",
            hint=f"make a new workspace with `patchkit workspace {meta.version}` and carry your edits over",
        ) from exc


def _workspace_files(root: Path, paths: list[str]) -> Contents:
    """Each path's bytes in the working tree (None: absent). A symlink (on the way or at the end)
    or a special file is refused, as `apply` refuses mode 120000 entries: its target is not the
    workspace's to put into a library patch."""
    refused = [f"{path} ({why})" for path in paths if (why := _not_a_plain_file(root, path))]
    if refused:
        raise BadInput(
            f"the workspace holds what a patch cannot carry: {', '.join(refused)}",
            hint="replace it with a regular file (or delete it), then refresh again",
        )
    return {path: read_file(root / path) for path in paths}


def _not_a_plain_file(root: Path, path: str) -> str | None:
    """Why `path` under the workspace is not a regular file reached without symlinks (None: it is, or absent)."""
    if why := unsafe_reason(path):
        return why
    current = root
    parts = path.split("/")
    for depth, part in enumerate(parts, 1):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            return "a symlink" if depth == len(parts) else f"{'/'.join(parts[:depth])} is a symlink"
        if depth < len(parts) and not stat.S_ISDIR(mode):
            return None  # a file where a directory would be: the path is absent
    return None if stat.S_ISREG(mode) else "not a regular file"


def _uncarried_changes(repo: git.Repo, meta: WorkspaceMeta) -> list[str]:
    """Changes since the stock commit a library patch cannot hold: outside the set's roots (the
    dist-info among them)."""
    listed = repo.git.diff(meta.stock_commit, "--name-only", "--no-renames", "--no-ext-diff", "-z")
    changed = {p for p in listed.split("\0") if p} | set(repo.untracked_files)
    return sorted(p for p in changed if p.split("/", 1)[0] not in meta.roots)


def _changed_paths(repo: git.Repo, meta: WorkspaceMeta) -> set[str]:
    """Paths under the set's roots that differ from the stock commit, tracked or not (ignored excluded)."""
    listed = repo.git.diff(meta.stock_commit, "--name-only", "--no-renames", "--no-ext-diff", "-z", "--", *meta.roots)
    changed = {p for p in listed.split("\0") if p}
    changed |= {p for p in repo.untracked_files if p.split("/", 1)[0] in meta.roots}
    return changed


def _blob(commit: git.Commit, path: str) -> bytes | None:
    try:
        blob = commit.tree[path]
    except KeyError:
        return None
    if blob.type != "blob" or blob.mode not in (0o100644, 0o100755):
        raise BadInput(f"{path} in the stock commit is not a regular file (mode {blob.mode:o})")
    data: bytes = blob.data_stream.read()  # GitPython's OStream: untyped
    return data


def _refuse_conflict_markers(work: Contents, stock: Contents) -> None:
    marked = {p: lines for p in work if work[p] != stock[p] and (lines := conflict_lines(work[p]))}
    if marked:
        where = "; ".join(f"{p} line {', '.join(map(str, lines[:5]))}" for p, lines in marked.items())
        raise Conflict(
            f"conflict markers left in the workspace: {where}",
            hint="resolve them (keep the right lines, drop the <<<<<<< ======= >>>>>>> lines), then refresh again",
        )


def _owners(records: list[PatchRecord]) -> dict[str, list[PatchRecord]]:
    owners: dict[str, list[PatchRecord]] = {}
    for record in records:
        for path in record.files:
            owners.setdefault(path, []).append(record)
    return owners


def _new_record(name: str, records: list[PatchRecord], today: str) -> PatchRecord:
    """--new-patch NAME: NNNN-NAME.patch after the series' last number (NAME may be a full file name)."""
    stem = name.removesuffix(".patch")
    numbered = re.match(r"(\d{4})-(.+)$", stem)
    if numbered:
        stem = numbered.group(2)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") or "change"
    numbers = [int(m.group(1)) for r in records if (m := re.match(r"(\d+)-", r.name))]
    number = numbered.group(1) if numbered else f"{max(numbers, default=len(records)) + 1:04d}"
    header = f"Description: {stem}\nOrigin: patchkit\nForwarded: not-needed\nLast-Update: {today}\n"
    return PatchRecord(f"{number}-{slug}.patch", header, "", [])


def split_changes(
    records: list[PatchRecord], stock: Contents, work: Contents, roots: list[str]
) -> tuple[dict[str, Changes], list[str]]:
    """Each patch's (before, after) per file. A file a patch touched stays with it; a file no patch
    touched goes to the last patch; a file several patches change keeps the earlier patches' parts
    (when they still apply) and the rest goes to the last of them."""
    owners = _owners(records)
    assigned: dict[str, Changes] = {r.name: {} for r in records}
    notes = []
    for path in sorted(stock):
        chain = owners.get(path) or [records[-1]]
        if not owners.get(path) and stock[path] != work[path]:
            notes.append(f"{path}: changed, and no patch touched it: recorded in {records[-1].name}")
        stages = _stages(chain, path, stock[path], work[path], roots)
        if stages is None:
            notes.append(
                f"{path}: changed by {', '.join(r.name for r in chain)}; their earlier parts no "
                f"longer apply, so the whole change is recorded in {chain[-1].name}"
            )
            stages = [(chain[-1], stock[path], work[path])]
        for record, before, after in stages:
            assigned[record.name][path] = (before, after)
    return assigned, notes


Stage = tuple[PatchRecord, bytes | None, bytes | None]  # (patch, before, after) of one file


class _PartFails(Exception):
    """A patch's part for a file no longer applies to what the earlier patches leave."""


def _stages(
    chain: list[PatchRecord], path: str, stock: bytes | None, work: bytes | None, roots: list[str]
) -> list[Stage] | None:
    """(patch, before, after) along the chain of patches changing one file, or None if a part fails."""
    stages: list[Stage] = []
    before = stock
    for record in chain[:-1]:
        try:
            after = _apply_part(record, path, before, roots)
        except _PartFails:
            return None
        if conflict_lines(after):
            return None
        stages.append((record, before, after))
        before = after
    stages.append((chain[-1], before, work))
    return stages


def _apply_part(record: PatchRecord, path: str, before: bytes | None, roots: list[str]) -> bytes | None:
    """The record's part for one file applied to `before`: the new content; _PartFails if it does not apply."""
    text = record.parts if record.parts is not None else record.body
    if not text.strip():  # the patch has no diff left (e.g. upstream in a port)
        return before
    try:
        patch = parse_patch(encode(text), record.name, roots=tuple(roots))
    except BadInput as exc:
        raise _PartFails(record.name) from exc
    part = [f for f in patch.files if f.path == path]
    if not part:
        return before
    with tempfile.TemporaryDirectory() as empty:
        plan = plan_apply(
            Path(empty), [Patch(record.name, b"", tuple(part))], view=View.holding(Path(empty), {path: before})
        )
        if plan.steps[0].state != StepState.WILL_CHANGE:
            raise _PartFails(record.name)
        return plan.content(path)


def _new_texts(
    records: list[PatchRecord], assigned: dict[str, Changes], series_dir: Path, today: str, roots: list[str]
) -> tuple[dict[str, str], list[PatchOutcome]]:
    texts, outcomes = {}, []
    for record in records:
        diffs = git_diff(assigned[record.name])
        order = [p for p in record.files if p in diffs] + sorted(p for p in diffs if p not in record.files)
        body = "".join(diffs[p] for p in order)
        if not body:
            outcomes.append(PatchOutcome(record.name, PatchChange.REMOVED, []))
            continue
        header, body = keep_or_touch(record.header, record.body, body, today, roots)
        texts[record.name] = join_header(header, body)
        existing = read_file(series_dir / record.name)
        if existing is None:
            state = PatchChange.NEW
        else:
            state = PatchChange.UNCHANGED if existing == encode(texts[record.name]) else PatchChange.UPDATED
        outcomes.append(PatchOutcome(record.name, state, order))
    return texts, outcomes


def _library_drift(records: list[PatchRecord], series_dir: Path) -> list[str]:
    notes = []
    for record in records:
        current = read_file(series_dir / record.name)
        if record.sha256 and current is not None and hashlib.sha256(current).hexdigest() != record.sha256:
            notes.append(
                f"{record.name} changed in the library since the workspace was made; "
                "the workspace's version replaces it"
            )
    return notes


def _check_shared(meta: WorkspaceMeta, patches: list[Patch], progress: Progress | None) -> list[SharedCheck]:
    """Every other release whose [[releases]] entry uses the same series directory."""
    try:
        patch_set = load_set(Path(meta.set_dir))
    except PatchkitError as exc:
        return [SharedCheck("?", SharedState.NOT_VERIFIED, f"cannot read the set: {exc.message}")]
    target = Path(meta.series_dir).resolve()
    checks = []
    for release in patch_set.releases:
        if release.directory.resolve() != target:
            continue
        version = pinned_version(release.versions)
        if version is None:
            checks.append(SharedCheck(str(release.versions), SharedState.NOT_VERIFIED, "not a single release"))
        elif version != Version(meta.version):
            checks.append(_check_release(str(version), patches, progress))
    return checks


def _covered(set_dir: Path, version: str, series_dir: Path) -> bool:
    """set.toml gives `version` this series already (not another's open range: register_release splits that)."""
    return any(
        r.covers(Version(version)) and r.directory.resolve() == series_dir.resolve() for r in load_set(set_dir).releases
    )


def _check_release(version: str, patches: list[Patch], progress: Progress | None) -> SharedCheck:
    try:
        tree = fetch.release_tree(version, stock_paths(patches), progress=progress)
    except PatchkitError as exc:
        return SharedCheck(version, SharedState.NOT_VERIFIED, exc.message)
    plan = plan_apply(tree, patches)
    for step in plan.steps:
        if step.state == StepState.ALREADY_APPLIED:
            return SharedCheck(
                version, SharedState.CONFLICT, f"{step.patch.name} is already present in stock {version}"
            )
        if step.state != StepState.WILL_CHANGE:
            return SharedCheck(version, SharedState.CONFLICT, f"{step.patch.name}: {why_not_applied(step)}")
    return SharedCheck(version, SharedState.APPLIES)


def _remember(meta: WorkspaceMeta, texts: dict[str, str], outcomes: list[PatchOutcome], root: Path) -> None:
    """What the library now holds becomes the workspace's baseline (a second refresh changes nothing)."""

    kept = []
    for outcome in outcomes:
        if outcome.state == PatchChange.REMOVED:
            continue
        header, body = split_header(texts[outcome.name])
        kept.append(
            PatchRecord(
                outcome.name, header, body, outcome.files, None, hashlib.sha256(encode(texts[outcome.name])).hexdigest()
            )
        )
    meta.patches = kept
    meta.register = None
    meta.save(root)
