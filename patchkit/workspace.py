"""Maintainer tools: a git workspace of a release with its series applied, refresh, port.

A workspace is a git repository (GitPython):

    commit 1  "stock vllm V"       the release's stock files the series touches (or every .py),
                                   tagged `stock`
    commit 2  the series applied   by patchkit's own engine (plan_apply, planned contents written)
    .patchkit-workspace.json       untracked and excluded in .git/info/exclude: the set, version,
                                   series directory, each patch's DEP-3 header, diff and files

`refresh` diffs the stock commit against the working tree (committed or not) and writes the
changes back as the series' diffs, split by file: each patch keeps the files it touched; a file no
patch touched goes to the last patch (or to a new one with --new-patch). A file several patches
change keeps the earlier patches' parts (when they still apply) and the rest goes to the last.

`port` carries a set from one release to another by a three-way merge per file and patch
(`git merge-file`: base V1 before the patch, ours V1 after it, theirs V2 so far).

Diffs are git's own (`git diff --no-index`, 3 lines of context, myers), rewritten to the library's
form: `diff --git a/P b/P`, `--- a/P`, `+++ b/P`, no `index` line.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from packaging.version import Version

from patchkit import fetch
from patchkit.errors import BadInput, Conflict, NoPatchSet, PatchkitError
from patchkit.library import (MANIFEST, PATCH, UPSTREAM, PatchSetDef, Selection, choose_set, default_root,
                              load_library, load_set, select, write_series)
from patchkit.patchfile import Patch, decode, encode, parse_patch
from patchkit.plan import ALREADY, WILL_CHANGE, View, plan_apply
from patchkit.release_files import lay_out
from patchkit.state import read_file
from patchkit.version import parse

META = ".patchkit-workspace.json"
SCHEMA = 1
STOCK_TAG = "stock"
# Our git calls whose output lands in the library ignore the user's git configuration
# (diff.noprefix, merge.conflictStyle, diff.algorithm, attributes ...).
ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}
DIFF_OPTIONS = ("--no-index", "--no-prefix", "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv",
                "--unified=3", "--inter-hunk-context=0", "--diff-algorithm=myers", "--indent-heuristic")
_DIFF_START = re.compile(r"^(?:diff |--- |Index: |---$)", re.MULTILINE)
_LAST_UPDATE = re.compile(r"^Last-Update:.*$", re.MULTILINE)
_MARKER = re.compile(rb"^(?:<{7}|>{7})(?: |$)", re.MULTILINE)

Progress = Callable[[str], None]
Contents = dict  # path -> bytes | None (None: the file does not exist)


# -- records ---------------------------------------------------------------------------------------

@dataclass
class PatchRecord:
    name: str
    header: str  # the DEP-3 header, the text before the "---" line ("" if none)
    body: str  # the diff refresh compares with: unchanged body, unchanged Last-Update
    files: list[str]
    parts: str | None = None  # a diff whose per-file parts split a file several patches change
    sha256: str | None = None  # of the library's file when the workspace was made


@dataclass
class WorkspaceMeta:
    set_name: str
    set_dir: str
    version: str
    roots: list[str]
    series_dir: str
    stock_commit: str
    patches: list[PatchRecord]
    register: dict | None = None  # a [[releases]] entry refresh appends to set.toml
    ported_from: str | None = None
    all_python: bool = False
    schema: int = SCHEMA

    def save(self, directory: Path) -> None:
        (directory / META).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> WorkspaceMeta:
        try:
            data = json.loads((directory / META).read_text(encoding="utf-8"))
            data["patches"] = [PatchRecord(**p) for p in data["patches"]]
            return cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise BadInput(f"unreadable workspace record {directory / META}: {exc}") from exc


@dataclass
class PatchOutcome:
    name: str
    state: str  # unchanged, updated, new, removed
    files: list[str]


@dataclass
class SharedCheck:
    version: str
    state: str  # applies, conflict, not-verified
    detail: str = ""


@dataclass
class WorkspaceReport:
    directory: str
    set_name: str
    version: str
    series_dir: str
    files: int
    stock_commit: str
    patched_commit: str
    patches: list[str]
    shared_with: list[str] = field(default_factory=list)


@dataclass
class RefreshReport:
    directory: str
    version: str
    series_dir: str
    dry_run: bool
    patches: list[PatchOutcome]
    shared: list[SharedCheck] = field(default_factory=list)
    registered: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(p.state != "unchanged" for p in self.patches)


@dataclass
class FileMerge:
    path: str
    patch: str
    conflicts: int  # 0: clean; -1: the file is missing in the new release
    present: bool = False  # clean, and the new release already has the patch's change


@dataclass
class PortReport:
    from_version: str
    to_version: str
    outcome: str  # ported, conflicts, upstream, identical
    destination: str | None
    merges: list[FileMerge] = field(default_factory=list)
    patches: list[PatchOutcome] = field(default_factory=list)
    workspace: str | None = None
    registered: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def conflicts(self) -> list[FileMerge]:
        return [m for m in self.merges if m.conflicts]


# -- patch text ------------------------------------------------------------------------------------

def split_header(text: str) -> tuple[str, str]:
    """(DEP-3 header, diff): the header is what precedes the first diff line or the '---' line."""
    match = _DIFF_START.search(text)
    if not match:
        return text, ""
    header, rest = text[:match.start()], text[match.start():]
    if rest.startswith("---\n"):
        rest = rest[len("---\n"):]
    return header, rest


def join_header(header: str, body: str) -> str:
    return f"{header}---\n{body}" if header else body


def touch_header(header: str, today: str) -> str:
    """The header with Last-Update set to today (added when missing)."""
    if not header:
        return header
    if _LAST_UPDATE.search(header):
        return _LAST_UPDATE.sub(f"Last-Update: {today}", header, count=1)
    return header + f"Last-Update: {today}\n"


def keep_or_touch(header: str, old_body: str, new_body: str, today: str, roots: list[str]) -> tuple[str, str]:
    """An unchanged diff keeps its text and header byte for byte (even if another tool wrote it, with
    `index` lines); a changed one is written in patchkit's form with Last-Update set to today."""
    if new_body == old_body or _same_hunks(old_body, new_body, roots):
        return header, old_body
    return touch_header(header, today), new_body


def _same_hunks(a: str, b: str, roots: list[str]) -> bool:
    try:
        return (parse_patch(encode(a), "a", roots=tuple(roots)).files
                == parse_patch(encode(b), "b", roots=tuple(roots)).files)
    except BadInput:
        return False


def today_iso() -> str:
    return datetime.date.today().isoformat()


# -- git -------------------------------------------------------------------------------------------

def _git(cwd: Path):
    import git

    return git.Git(str(cwd))


def _run(cmd, *args) -> tuple[int, bytes, str]:
    status, out, err = cmd(*args, with_extended_output=True, with_exceptions=False, stdout_as_string=False,
                           strip_newline_in_stdout=False, env=ISOLATED)
    return status, out, decode(err) if isinstance(err, bytes) else str(err)


def git_diff(changes: dict[str, tuple[bytes | None, bytes | None]]) -> dict[str, str]:
    """git's unified diff of each path's (before, after), keyed by path, in the library's form."""
    changes = {p: ba for p, ba in changes.items() if ba[0] != ba[1]}
    if not changes:
        return {}
    with tempfile.TemporaryDirectory(prefix="patchkit-diff-") as tmp:
        for side, index in (("a", 0), ("b", 1)):
            (Path(tmp) / side).mkdir()
            for path, contents in changes.items():
                if contents[index] is not None:
                    out = Path(tmp) / side / path
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(contents[index])
        status, out, err = _run(_git(Path(tmp)).diff, *DIFF_OPTIONS, "a", "b")
    if status not in (0, 1):
        raise PatchkitError(f"git diff failed: {err.strip()}")
    sections = {}
    for section in re.split(r"(?m)^(?=diff --git )", decode(out)):
        if section:
            path, text = _library_form(section)
            sections[path] = text
    return sections


def _library_form(section: str) -> tuple[str, str]:
    """`diff --git a/P b/P`, the mode lines of a new or deleted file, `--- `, `+++ `, the hunks."""
    lines = section.splitlines(True)
    hunks_at = next((i for i, line in enumerate(lines) if line.startswith("@@ ")), None)
    if hunks_at is None or any(line.startswith("Binary files ") for line in lines):
        raise BadInput(f"{lines[0].split()[-1][2:]}: binary or empty change; only text diffs are supported")
    head = lines[1:hunks_at]
    minus = next(line for line in head if line.startswith("--- "))[4:].rstrip("\n")
    plus = next(line for line in head if line.startswith("+++ "))[4:].rstrip("\n")
    path = (plus if plus != "/dev/null" else minus)[2:]
    kept = [line for line in head if not line.startswith("index ")]
    return path, f"diff --git a/{path} b/{path}\n" + "".join(kept) + "".join(lines[hunks_at:])


def merge_file(ours: bytes | None, base: bytes | None, theirs: bytes | None,
               labels: tuple[str, str, str]) -> tuple[bytes | None, int]:
    """Three-way merge of one file (`git merge-file -p`): (result, number of conflicts)."""
    if theirs == base:
        return ours, 0
    if ours == base or ours == theirs:
        return theirs, 0
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-") as tmp:
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data or b"")
        status, out, err = _run(_git(Path(tmp)).merge_file, "-p", "-L", labels[0], "-L", labels[1],
                                "-L", labels[2], "ours", "base", "theirs")
    if status < 0 or status > 127:
        raise PatchkitError(f"git merge-file failed: {err.strip()}")
    if not out and ours is None and not status:
        return None, 0
    return out, status


def conflict_lines(data: bytes | None) -> list[int]:
    """1-based lines holding a conflict marker (<<<<<<< or >>>>>>>)."""
    if not data:
        return []
    return [data.count(b"\n", 0, m.start()) + 1 for m in _MARKER.finditer(data)]


def _init_repo(directory: Path):
    import git

    repo = git.Repo.init(str(directory))
    with repo.config_writer() as config:
        config.set_value("core", "autocrlf", "false")
    exclude = directory / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8") as handle:
        handle.write(f"/{META}\n/.patchkit/\n__pycache__/\n*.pyc\n")
    return repo


def _commit_all(repo, message: str) -> str:
    repo.git.add("-A")
    return repo.index.commit(message).hexsha


# -- library and release files ---------------------------------------------------------------------

def _library(library: str | None, set_name: str | None) -> PatchSetDef:
    root = Path(library).resolve() if library else default_root()
    return choose_set(load_library(root), set_name)


def _series_for(patch_set: PatchSetDef, version: Version) -> Selection:
    selection = select(patch_set, version)
    if selection.kind == UPSTREAM:
        raise NoPatchSet(f"the set {patch_set.name!r} is upstream in vLLM {version}: there is no series to work on")
    if selection.kind != PATCH:
        raise NoPatchSet(selection.note or f"the set {patch_set.name!r} has no series for vLLM {version}")
    return selection


def stock_paths(patches: list[Patch]) -> list[str]:
    """The files a series reads from the stock release (a new file has none)."""
    return sorted({f.source_path for p in patches for f in p.files if f.source_path})


def _release_contents(version: str, paths: list[str], progress: Progress | None) -> tuple[Path, Contents]:
    tree = fetch.release_tree(version, paths, progress=progress)
    return tree, {p: read_file(tree / p) for p in paths}


def _write(root: Path, path: str, data: bytes | None) -> None:
    full = root / path
    if data is None:
        if full.exists():
            full.unlink()
        return
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(data)


def _memory_view(contents: Contents, root: Path) -> View:
    """A plan view holding the given contents (root must be an empty directory: nothing else is read)."""
    view = View(root)
    view.original = dict(contents)
    view.current = dict(contents)
    return view


def _require_empty(directory: Path) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadInput(f"{directory} exists and is not an empty directory", hint="choose another DIR")


@contextlib.contextmanager
def _fresh_dir(directory: Path):
    """A new (or empty) directory to fill; emptied again if filling it fails."""
    _require_empty(directory)
    existed = directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield directory.resolve()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        if existed:
            directory.mkdir(exist_ok=True)
        raise


def _record(patch: Patch, parts: str | None = None) -> PatchRecord:
    header, body = split_header(decode(patch.raw))
    files = [f.path for f in patch.files]
    return PatchRecord(patch.name, header, body, files, parts, patch.sha256)


def _metadata_file(tree: Path) -> Path | None:
    return next(iter(sorted(tree.glob("vllm-*.dist-info/METADATA"))), None)


# -- workspace -------------------------------------------------------------------------------------

def create_workspace(version: str, directory: str | None = None, *, library: str | None = None,
                     set_name: str | None = None, all_python: bool = False,
                     progress: Progress | None = None) -> WorkspaceReport:
    patch_set = _library(library, set_name)
    ver = parse(version, "VERSION")
    selection = _series_for(patch_set, ver)
    series_dir: Path = selection.release.directory  # type: ignore[union-attr]
    paths = stock_paths(selection.patches)
    tree = fetch.release_tree(str(ver), paths, all_python=all_python, progress=progress)
    names = [p.name for p in selection.patches]
    with _fresh_dir(Path(directory or f"vllm-{ver}-workspace")) as dest:
        wanted = paths + ([f.relative_to(tree).as_posix() for f in (tree / "vllm").rglob("*.py")]
                          if all_python else [])
        copied = sum(1 for rel in lay_out(tree, dest, wanted) if rel.startswith("vllm/"))
        plan = plan_apply(dest, selection.patches)
        if plan.conflicts:
            raise Conflict(f"the library's series does not apply to stock vLLM {ver}: "
                           f"{plan.conflicts[0].mismatch.describe()}")  # type: ignore[union-attr]
        repo = _init_repo(dest)
        stock = _commit_all(repo, f"stock vllm {ver}")
        repo.create_tag(STOCK_TAG, ref=stock)
        for path, (_, after) in plan.changes.items():
            _write(dest, path, after)
        patched = _commit_all(repo, f"{patch_set.name} series for vllm {ver}\n\n" + "\n".join(names) + "\n")
        WorkspaceMeta(patch_set.name, str(patch_set.directory.resolve()), str(ver), list(patch_set.roots),
                      str(series_dir.resolve()), stock, [_record(p) for p in selection.patches],
                      all_python=all_python).save(dest)
    return WorkspaceReport(str(dest), patch_set.name, str(ver), str(series_dir), copied, stock, patched, names,
                           shared_releases(patch_set, series_dir, ver))


def find_workspace(directory: str | None) -> Path:
    """The workspace holding DIR (DIR itself or a parent), by its record file."""
    start = Path(directory or ".").resolve()
    for candidate in (start, *start.parents):
        if (candidate / META).is_file():
            return candidate
    raise BadInput(f"{start} is not inside a patchkit workspace (no {META})",
                   hint="create one with `patchkit workspace VERSION`")


# -- refresh ---------------------------------------------------------------------------------------

def refresh_workspace(directory: str | None = None, *, new_patch: str | None = None, dry_run: bool = False,
                      today: str | None = None, progress: Progress | None = None) -> RefreshReport:
    import git

    root = find_workspace(directory)
    meta = WorkspaceMeta.load(root)
    repo = git.Repo(str(root))
    stock_commit = repo.commit(meta.stock_commit)
    paths = sorted(_changed_paths(repo, meta) | {f for r in meta.patches for f in r.files})
    stock = {p: _blob(stock_commit, p) for p in paths}
    work = {p: read_file(root / p) for p in paths}
    _refuse_conflict_markers(work, stock)
    records = list(meta.patches)
    if new_patch and any(stock[p] != work[p] for p in paths if not _owners(records).get(p)):
        records.append(_new_record(new_patch, records, today or today_iso()))
    assigned, notes = split_changes(records, stock, work, meta.roots)
    series_dir = Path(meta.series_dir)
    texts, outcomes = _new_texts(records, assigned, series_dir, today or today_iso(), meta.roots)
    patches = [parse_patch(encode(texts[o.name]), o.name, roots=tuple(meta.roots))
               for o in outcomes if o.state != "removed"]
    _check_reproduces(patches, stock, work)
    notes += _library_drift(records, series_dir)
    report = RefreshReport(str(root), meta.version, str(series_dir), dry_run, outcomes, notes=notes)
    report.shared = _check_shared(meta, patches, progress)
    if dry_run:
        return report
    if report.changed or meta.register:
        _write_series(series_dir, texts, outcomes)
    if meta.register and _covered(Path(meta.set_dir), meta.version):
        report.notes.append(f"set.toml already has an entry for vLLM {meta.version}: not added again")
    elif meta.register:
        report.registered = append_release(Path(meta.set_dir), **meta.register)
    _remember(meta, texts, outcomes, root)
    return report


def _changed_paths(repo, meta: WorkspaceMeta) -> set[str]:
    """Paths under the set's roots that differ from the stock commit, tracked or not (ignored excluded)."""
    listed = repo.git.diff(meta.stock_commit, "--name-only", "--no-renames", "--no-ext-diff", "-z",
                           "--", *meta.roots)
    changed = {p for p in listed.split("\0") if p}
    changed |= {p for p in repo.untracked_files if p.split("/", 1)[0] in meta.roots}
    return changed


def _blob(commit, path: str) -> bytes | None:
    try:
        return commit.tree[path].data_stream.read()
    except KeyError:
        return None


def _refuse_conflict_markers(work: Contents, stock: Contents) -> None:
    marked = {p: lines for p in work if work[p] != stock[p] and (lines := conflict_lines(work[p]))}
    if marked:
        where = "; ".join(f"{p} line {', '.join(map(str, lines[:5]))}" for p, lines in marked.items())
        raise Conflict(f"conflict markers left in the workspace: {where}",
                       hint="resolve them (keep the right lines, drop the <<<<<<< ======= >>>>>>> lines), "
                            "then refresh again")


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


def split_changes(records: list[PatchRecord], stock: Contents, work: Contents,
                  roots: list[str]) -> tuple[dict[str, dict], list[str]]:
    """Each patch's (before, after) per file. A file a patch touched stays with it; a file no patch
    touched goes to the last patch; a file several patches change keeps the earlier patches' parts
    (when they still apply) and the rest goes to the last of them."""
    owners = _owners(records)
    assigned: dict[str, dict] = {r.name: {} for r in records}
    notes = []
    for path in sorted(stock):
        chain = owners.get(path) or [records[-1]]
        if not owners.get(path) and stock[path] != work[path]:
            notes.append(f"{path}: changed, and no patch touched it: recorded in {records[-1].name}")
        stages = _stages(chain, path, stock[path], work[path], roots)
        if stages is None:
            notes.append(f"{path}: changed by {', '.join(r.name for r in chain)}; their earlier parts no "
                         f"longer apply, so the whole change is recorded in {chain[-1].name}")
            stages = [(chain[-1], stock[path], work[path])]
        for record, before, after in stages:
            assigned[record.name][path] = (before, after)
    return assigned, notes


def _stages(chain: list[PatchRecord], path: str, stock: bytes | None, work: bytes | None, roots: list[str]):
    """(patch, before, after) along the chain of patches changing one file, or None if a part fails."""
    stages = []
    before = stock
    for record in chain[:-1]:
        after = _apply_part(record, path, before, roots)
        if after is False or conflict_lines(after):  # type: ignore[arg-type]
            return None
        stages.append((record, before, after))
        before = after
    stages.append((chain[-1], before, work))
    return stages


def _apply_part(record: PatchRecord, path: str, before: bytes | None, roots: list[str]) -> bytes | None | bool:
    """The record's part for one file applied to `before`: the new content, or False if it does not apply."""
    text = record.parts if record.parts is not None else record.body
    if not text.strip():  # the patch has no diff left (e.g. upstream in a port)
        return before
    try:
        patch = parse_patch(encode(text), record.name, roots=tuple(roots))
    except BadInput:
        return False
    part = [f for f in patch.files if f.path == path]
    if not part:
        return before
    with tempfile.TemporaryDirectory() as empty:
        plan = plan_apply(Path(empty), [Patch(record.name, b"", tuple(part))],
                          view=_memory_view({path: before}, Path(empty)))
        if plan.steps[0].state != WILL_CHANGE:
            return False
        return plan.content(path)


def _new_texts(records: list[PatchRecord], assigned: dict[str, dict], series_dir: Path,
               today: str, roots: list[str]) -> tuple[dict[str, str], list[PatchOutcome]]:
    texts, outcomes = {}, []
    for record in records:
        diffs = git_diff(assigned[record.name])
        order = [p for p in record.files if p in diffs] + sorted(p for p in diffs if p not in record.files)
        body = "".join(diffs[p] for p in order)
        if not body:
            outcomes.append(PatchOutcome(record.name, "removed", []))
            continue
        header, body = keep_or_touch(record.header, record.body, body, today, roots)
        texts[record.name] = join_header(header, body)
        existing = read_file(series_dir / record.name)
        state = "new" if existing is None else "unchanged" if existing == encode(texts[record.name]) else "updated"
        outcomes.append(PatchOutcome(record.name, state, order))
    return texts, outcomes


def _check_reproduces(patches: list[Patch], stock: Contents, work: Contents) -> None:
    """The new series, applied to the stock contents, must give the workspace's contents exactly."""
    with tempfile.TemporaryDirectory() as empty:
        plan = plan_apply(Path(empty), patches, view=_memory_view(stock, Path(empty)))
        wrong = [s.patch.name for s in plan.steps if s.state != WILL_CHANGE]
        wrong += [p for p in work if plan.content(p) != work[p]]
    if wrong:
        raise PatchkitError(f"the refreshed series does not reproduce the workspace ({', '.join(wrong)}); "
                            "this is a patchkit bug: nothing was written")


def _library_drift(records: list[PatchRecord], series_dir: Path) -> list[str]:
    notes = []
    for record in records:
        current = read_file(series_dir / record.name)
        if record.sha256 and current is not None:
            import hashlib

            if hashlib.sha256(current).hexdigest() != record.sha256:
                notes.append(f"{record.name} changed in the library since the workspace was made; "
                             "the workspace's version replaces it")
    return notes


def _check_shared(meta: WorkspaceMeta, patches: list[Patch], progress: Progress | None) -> list[SharedCheck]:
    """Every other release whose [[releases]] entry uses the same series directory."""
    try:
        patch_set = load_set(Path(meta.set_dir))
    except PatchkitError as exc:
        return [SharedCheck("?", "not-verified", f"cannot read the set: {exc.message}")]
    target = Path(meta.series_dir).resolve()
    checks = []
    for release in patch_set.releases:
        if release.directory.resolve() != target:
            continue
        version = pinned_version(release.versions)
        if version is None:
            checks.append(SharedCheck(str(release.versions), "not-verified", "not a single release"))
        elif version != Version(meta.version):
            checks.append(_check_release(str(version), patches, progress))
    return checks


def _covered(set_dir: Path, version: str) -> bool:
    return any(r.covers(Version(version)) for r in load_set(set_dir).releases)


def shared_releases(patch_set: PatchSetDef, directory: Path, version: Version) -> list[str]:
    """The other [[releases]] entries using the same series directory."""
    return [str(pinned_version(r.versions) or r.versions) for r in patch_set.releases
            if r.directory.resolve() == directory.resolve() and not r.covers(version)]


def pinned_version(specifier) -> Version | None:
    specs = list(specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return Version(specs[0].version)
    return None


def _check_release(version: str, patches: list[Patch], progress: Progress | None) -> SharedCheck:
    try:
        tree = fetch.release_tree(version, stock_paths(patches), progress=progress)
    except PatchkitError as exc:
        return SharedCheck(version, "not-verified", exc.message)
    plan = plan_apply(tree, patches)
    for step in plan.steps:
        if step.state == ALREADY:
            return SharedCheck(version, "conflict", f"{step.patch.name} is already present in stock {version}")
        if step.state != WILL_CHANGE:
            return SharedCheck(version, "conflict", f"{step.patch.name}: {step.mismatch.describe()}")  # type: ignore
    return SharedCheck(version, "applies")


def _write_series(series_dir: Path, texts: dict[str, str], outcomes: list[PatchOutcome]) -> None:
    series_dir.mkdir(parents=True, exist_ok=True)
    for outcome in outcomes:
        path = series_dir / outcome.name
        if outcome.state == "removed":
            if path.exists():
                path.unlink()
        elif outcome.state != "unchanged":
            path.write_bytes(encode(texts[outcome.name]))
    write_series(series_dir, [o.name for o in outcomes if o.state != "removed"])


def _remember(meta: WorkspaceMeta, texts: dict[str, str], outcomes: list[PatchOutcome], root: Path) -> None:
    """What the library now holds becomes the workspace's baseline (a second refresh changes nothing)."""
    import hashlib

    kept = []
    for outcome in outcomes:
        if outcome.state == "removed":
            continue
        header, body = split_header(texts[outcome.name])
        kept.append(PatchRecord(outcome.name, header, body, outcome.files, None,
                                hashlib.sha256(encode(texts[outcome.name])).hexdigest()))
    meta.patches = kept
    meta.register = None
    meta.save(root)


def append_release(set_dir: Path, versions: str, dir: str, comment: str | None = None) -> str:
    """Append a [[releases]] entry to set.toml as text (its comments and layout stay as they are)."""
    manifest = set_dir / MANIFEST
    text = manifest.read_text(encoding="utf-8")
    line = f'versions = "{versions}"' + (f"      # {comment}" if comment else "")
    entry = f'[[releases]]\n{line}\ndir = "{dir}"\n'
    manifest.write_text(text + ("" if text.endswith("\n") else "\n") + "\n" + entry, encoding="utf-8")
    load_set(set_dir)  # still readable
    return entry


# -- port ------------------------------------------------------------------------------------------

def port_set(from_version: str, to_version: str, *, library: str | None = None, set_name: str | None = None,
             out: str | None = None, workspace: str | None = None, today: str | None = None,
             progress: Progress | None = None) -> PortReport:
    patch_set = _library(library, set_name)
    v1, v2 = parse(from_version, "--from"), parse(to_version, "--to")
    if v1 == v2:
        raise BadInput(f"--from and --to are the same release ({v1})")
    selection = _series_for(patch_set, v1)
    report = PortReport(str(v1), str(v2), "ported", None)
    declared = _declared(patch_set, v2, out)
    if declared == UPSTREAM:
        report.outcome = "upstream"
        report.notes.append(f"set.toml declares the set upstream in vLLM {v2} ({patch_set.upstream})")
        return report
    dest = Path(out).resolve() if out else patch_set.directory / str(v2)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BadInput(f"{dest} already exists and is not empty", hint="choose another --out directory" if out
                       else f"the library already has a directory {dest.name}; remove it or use --out")
    report.destination = str(dest)
    paths = stock_paths(selection.patches)
    tree1, stock1 = _release_contents(str(v1), paths, progress)
    tree2, stock2 = _release_contents(str(v2), paths, progress)
    if stock1 == stock2:
        return _port_identical(report, patch_set, selection, dest, out)
    if all(s.state == ALREADY for s in plan_apply(tree2, selection.patches).steps):
        return _port_upstream(report, "the series is found applied on its stock files")
    stages = _v1_stages(tree1, selection)
    current, results = _merge_stages(stages, stock2, report, str(v1), str(v2))
    missing = [m for m in report.merges if m.conflicts < 0]
    if missing:
        raise Conflict("files the series changes are missing in vLLM "
                       f"{v2}: {', '.join(sorted({m.path for m in missing}))}",
                       hint="they were moved or removed upstream: port those patches by hand")
    if all(current[p] == stock2.get(p) for p in current) and not report.conflicts:
        return _port_upstream(report, "merging the series changes none of its files")
    texts, outcomes = _ported_texts(selection, results, today or today_iso(), patch_set.roots)
    report.patches = outcomes
    if report.conflicts:
        return _port_workspace(report, patch_set, selection, tree2, stock2, current, texts, workspace, out)
    ported = [parse_patch(encode(texts[o.name]), o.name, roots=patch_set.roots)
              for o in outcomes if o.state != "removed"]
    _check_reproduces(ported, stock2, current)
    if out is None and all(read_file(selection.release.directory / o.name) == encode(texts.get(o.name, ""))  # type: ignore
                           for o in outcomes):
        report.notes.append(f"the ported diffs are byte-identical to {selection.release.directory.name}'s")  # type: ignore
        return _port_identical(report, patch_set, selection, dest, out)
    _write_series(dest, texts, outcomes)
    if out is None:
        report.registered = append_release(patch_set.directory, f"=={v2}", str(v2))
    return report


def _declared(patch_set: PatchSetDef, version: Version, out: str | None) -> str | None:
    try:
        selection = select(patch_set, version)
    except NoPatchSet:
        return None
    if selection.kind == PATCH and out is None:
        raise BadInput(f"the library already has a series for vLLM {version} "
                       f"({selection.release.directory.name})",  # type: ignore[union-attr]
                       hint=f"change it with `patchkit workspace {version}` + `patchkit refresh`, "
                            "or port into another directory with --out")
    return selection.kind


def _port_upstream(report: PortReport, why: str) -> PortReport:
    report.outcome = "upstream"
    report.destination = None
    report.notes.append(f"vLLM {report.to_version} already contains the change ({why}): nothing written")
    return report


def _port_identical(report: PortReport, patch_set: PatchSetDef, selection: Selection, dest: Path,
                    out: str | None) -> PortReport:
    """V2 needs exactly V1's diffs: point V2 at V1's directory (or copy them into --out)."""
    source = selection.release.directory  # type: ignore[union-attr]
    report.outcome = "identical"
    names = [p.name for p in selection.patches]
    if out:
        dest.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(source / name, dest / name)
        write_series(dest, names)
        report.patches = [PatchOutcome(p.name, "new", [f.path for f in p.files]) for p in selection.patches]
        report.notes.append(f"vLLM {report.to_version} needs the same series as {report.from_version}: "
                            f"copied into {dest}")
        return report
    relative = source.relative_to(patch_set.directory).as_posix()
    report.destination = str(source)
    report.registered = append_release(patch_set.directory, f"=={report.to_version}", relative,
                                       comment=f"same series as {report.from_version}")
    report.notes.append(f"vLLM {report.to_version} needs the same series as {report.from_version}: "
                        f"its entry points at {relative}/ (nothing copied)")
    return report


def _v1_stages(tree1: Path, selection: Selection) -> list[tuple[str, str, bytes | None, bytes | None]]:
    """(patch, path, before, after) for every file step of the series on V1's stock files."""
    plan = plan_apply(tree1, selection.patches)
    stages = []
    for step in plan.steps:
        if step.state != WILL_CHANGE:
            problem = step.mismatch.describe() if step.mismatch else f"already present in stock {selection.version}"
            raise BadInput(f"{step.patch.name} does not apply to stock vLLM {selection.version}: {problem}")
        for file_step in step.files:
            if file_step.patch.kind == "rename":
                raise BadInput(f"{step.patch.name}: renames ({file_step.patch.source_path}) cannot be ported")
            stages.append((step.patch.name, file_step.patch.path, file_step.before, file_step.after))
    return stages


def _merge_stages(stages, stock2: Contents, report: PortReport, v1: str, v2: str):
    """Merge each patch's change of each file onto V2, patch after patch."""
    current: Contents = dict(stock2)
    results: dict[str, dict] = {}
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


def _ported_texts(selection: Selection, results: dict[str, dict], today: str,
                  roots: tuple[str, ...]) -> tuple[dict[str, str], list[PatchOutcome]]:
    texts, outcomes = {}, []
    patch_roots = list(roots)
    for patch in selection.patches:
        header, v1_body = split_header(decode(patch.raw))
        diffs = git_diff(results.get(patch.name, {}))
        order = [f.path for f in patch.files if f.path in diffs]
        body = "".join(diffs[p] for p in order)
        if not body:
            outcomes.append(PatchOutcome(patch.name, "removed", []))
            continue
        texts[patch.name] = join_header(*keep_or_touch(header, v1_body, body, today, patch_roots))
        outcomes.append(PatchOutcome(patch.name, "new", order))
    return texts, outcomes


def _port_workspace(report: PortReport, patch_set: PatchSetDef, selection: Selection, tree2: Path,
                    stock2: Contents, current: Contents, texts: dict[str, str], workspace: str | None,
                    out: str | None) -> PortReport:
    """Leave a workspace of V2 with the merge (and its conflict markers) committed on top of stock."""
    report.outcome = "conflicts"
    conflicted = sorted({m.path for m in report.conflicts})
    target = Path(workspace or f"vllm-{report.to_version}-workspace")
    try:
        _require_empty(target)
    except BadInput as exc:
        raise BadInput(f"the merge conflicts ({', '.join(conflicted)}) and the workspace for them cannot be "
                       f"made: {exc.message}", hint="pass --workspace DIR (a new or empty directory)") from exc
    with _fresh_dir(target) as dest:
        _fill_port_workspace(dest, report, patch_set, selection, tree2, stock2, current, texts, out, conflicted)
    report.workspace = str(dest)
    return report


def _fill_port_workspace(dest: Path, report: PortReport, patch_set: PatchSetDef, selection: Selection,
                         tree2: Path, stock2: Contents, current: Contents, texts: dict[str, str],
                         out: str | None, conflicted: list[str]) -> None:
    for path, data in stock2.items():
        _write(dest, path, data)
    metadata = _metadata_file(tree2)
    if metadata:
        _write(dest, metadata.relative_to(tree2).as_posix(), metadata.read_bytes())
    repo = _init_repo(dest)
    stock = _commit_all(repo, f"stock vllm {report.to_version}")
    repo.create_tag(STOCK_TAG, ref=stock)
    for path, data in current.items():
        _write(dest, path, data)
    _commit_all(repo, f"{patch_set.name} series ported from vllm {report.from_version}: conflicts to resolve\n\n"
                + "".join(f"{p}\n" for p in conflicted))
    records = []
    for patch in selection.patches:
        header, body = split_header(decode(patch.raw))
        records.append(PatchRecord(patch.name, header, body, [f.path for f in patch.files],
                                   parts=split_header(texts[patch.name])[1] if patch.name in texts else "",
                                   sha256=None))
    register = None if out else {"versions": f"=={report.to_version}", "dir": report.to_version}
    WorkspaceMeta(patch_set.name, str(patch_set.directory.resolve()), report.to_version, list(patch_set.roots),
                  str(report.destination), stock, records, register=register,
                  ported_from=report.from_version).save(dest)
