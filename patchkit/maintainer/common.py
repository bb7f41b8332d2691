"""What the maintainer tools share: records, patch text, git, library and release files."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import Version

from patchkit import fetch
from patchkit.errors import BadInput, NoPatchSet, PatchkitError
from patchkit.library import MANIFEST, PATCH, UPSTREAM, PatchSetDef, Selection, load_set, select, write_series
from patchkit.patchfile import Patch, decode, encode, parse_patch
from patchkit.plan import WILL_CHANGE, View, plan_apply
from patchkit.state import read_file

META = ".patchkit-workspace.json"
SCHEMA = 1
STOCK_TAG = "stock"
# Our git calls whose output lands in the library ignore the user's git configuration
# (diff.noprefix, merge.conflictStyle, diff.algorithm, attributes ...).
ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}
DIFF_OPTIONS = (
    "--no-index",
    "--no-prefix",
    "--no-renames",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--unified=3",
    "--inter-hunk-context=0",
    "--diff-algorithm=myers",
    "--indent-heuristic",
)
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
    header, rest = text[: match.start()], text[match.start() :]
    if rest.startswith("---\n"):
        rest = rest[len("---\n") :]
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
        return (
            parse_patch(encode(a), "a", roots=tuple(roots)).files
            == parse_patch(encode(b), "b", roots=tuple(roots)).files
        )
    except BadInput:
        return False


def today_iso() -> str:
    return datetime.date.today().isoformat()


# -- git -------------------------------------------------------------------------------------------


def _git(cwd: Path):
    import git

    return git.Git(str(cwd))


def _run(cmd, *args) -> tuple[int, bytes, str]:
    status, out, err = cmd(
        *args,
        with_extended_output=True,
        with_exceptions=False,
        stdout_as_string=False,
        strip_newline_in_stdout=False,
        env=ISOLATED,
    )
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


def merge_file(
    ours: bytes | None, base: bytes | None, theirs: bytes | None, labels: tuple[str, str, str]
) -> tuple[bytes | None, int]:
    """Three-way merge of one file (`git merge-file -p`): (result, number of conflicts)."""
    if theirs == base:
        return ours, 0
    if ours in (base, theirs):
        return theirs, 0
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-") as tmp:
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data or b"")
        status, out, err = _run(
            _git(Path(tmp)).merge_file,
            "-p",
            "-L",
            labels[0],
            "-L",
            labels[1],
            "-L",
            labels[2],
            "ours",
            "base",
            "theirs",
        )
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


def init_repo(directory: Path):
    import git

    repo = git.Repo.init(str(directory))
    with repo.config_writer() as config:
        config.set_value("core", "autocrlf", "false")
    exclude = directory / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8") as handle:
        handle.write(f"/{META}\n/.patchkit/\n__pycache__/\n*.pyc\n")
    return repo


def commit_all(repo, message: str) -> str:
    repo.git.add("-A")
    return repo.index.commit(message).hexsha


# -- library and release files ---------------------------------------------------------------------


def series_for(patch_set: PatchSetDef, version: Version) -> Selection:
    selection = select(patch_set, version)
    if selection.kind == UPSTREAM:
        raise NoPatchSet(f"the set {patch_set.name!r} is upstream in vLLM {version}: there is no series to work on")
    if selection.kind != PATCH:
        raise NoPatchSet(selection.note or f"the set {patch_set.name!r} has no series for vLLM {version}")
    return selection


def stock_paths(patches: list[Patch]) -> list[str]:
    """The files a series reads from the stock release (a new file has none)."""
    return sorted({f.source_path for p in patches for f in p.files if f.source_path})


def release_contents(version: str, paths: list[str], progress: Progress | None) -> tuple[Path, Contents]:
    tree = fetch.release_tree(version, paths, progress=progress)
    return tree, {p: read_file(tree / p) for p in paths}


def write_file(root: Path, path: str, data: bytes | None) -> None:
    full = root / path
    if data is None:
        if full.exists():
            full.unlink()
        return
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(data)


def require_empty(directory: Path) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadInput(f"{directory} exists and is not an empty directory", hint="choose another DIR")


@contextlib.contextmanager
def fresh_dir(directory: Path):
    """A new (or empty) directory to fill; emptied again if filling it fails."""
    require_empty(directory)
    existed = directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield directory.resolve()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        if existed:
            directory.mkdir(exist_ok=True)
        raise


def record_of(patch: Patch, *, parts: str | None = None, library_copy: bool = True) -> PatchRecord:
    """What a workspace remembers of a patch; `library_copy`: it is the library's file (its sha256)."""
    header, body = split_header(decode(patch.raw))
    return PatchRecord(
        patch.name, header, body, [f.path for f in patch.files], parts, patch.sha256 if library_copy else None
    )


def metadata_file(tree: Path) -> Path | None:
    return next(iter(sorted(tree.glob("vllm-*.dist-info/METADATA"))), None)


# -- shared by refresh, port and workspace ---------------------------------------------------------


def check_reproduces(patches: list[Patch], stock: Contents, work: Contents) -> None:
    """The new series, applied to the stock contents, must give the workspace's contents exactly."""
    with tempfile.TemporaryDirectory() as empty:
        plan = plan_apply(Path(empty), patches, view=View.holding(Path(empty), stock))
        wrong = [s.patch.name for s in plan.steps if s.state != WILL_CHANGE]
        wrong += [p for p in work if plan.content(p) != work[p]]
    if wrong:
        raise PatchkitError(
            f"the refreshed series does not reproduce the workspace ({', '.join(wrong)}); "
            "this is a patchkit bug: nothing was written"
        )


def write_series_files(series_dir: Path, texts: dict[str, str], outcomes: list[PatchOutcome]) -> None:
    series_dir.mkdir(parents=True, exist_ok=True)
    for outcome in outcomes:
        path = series_dir / outcome.name
        if outcome.state == "removed":
            if path.exists():
                path.unlink()
        elif outcome.state != "unchanged":
            path.write_bytes(encode(texts[outcome.name]))
    write_series(series_dir, [o.name for o in outcomes if o.state != "removed"])


def append_release(set_dir: Path, versions: str, dir: str, comment: str | None = None) -> str:
    """Append a [[releases]] entry to set.toml as text (its comments and layout stay as they are)."""
    manifest = set_dir / MANIFEST
    text = manifest.read_text(encoding="utf-8")
    line = f'versions = "{versions}"' + (f"      # {comment}" if comment else "")
    entry = f'[[releases]]\n{line}\ndir = "{dir}"\n'
    manifest.write_text(text + ("" if text.endswith("\n") else "\n") + "\n" + entry, encoding="utf-8")
    load_set(set_dir)  # still readable
    return entry


def shared_releases(patch_set: PatchSetDef, directory: Path, version: Version) -> list[str]:
    """The other [[releases]] entries using the same series directory."""
    return [
        str(pinned_version(r.versions) or r.versions)
        for r in patch_set.releases
        if r.directory.resolve() == directory.resolve() and not r.covers(version)
    ]


def pinned_version(specifier) -> Version | None:
    specs = list(specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return Version(specs[0].version)
    return None
