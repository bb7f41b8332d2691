"""`patchkit run`'s fast path on an applied tree: what it would find, without re-deriving it.

- **The tree's state from its record.** When `.patchkit/state.json` (parsed as the untrusted input
  it is: patchkit.store.state) records an apply of this very series (the same patch names and sha256s),
  for the installed vLLM version, over exactly the files the series touches, and each file of every
  set it records (all on that version) still has the sha256 the last set to write it wrote (and the
  installed launch guard lets the launch go, and is there when recorded),
  the tree is the series applied with no drift: the series is not planned again. Anything else (no record, another set, a file changed, a symlink
  on the way, an unfinished transaction) says nothing, and the full inspection decides, under
  the target's lock, as it always did. This read takes no lock: the files' hashes are the proof
  that they are as the record says (a writer half-way through a transaction changes files the
  record does not describe yet), and the record is the same bytes, with no journal, before and
  after the files are read. The record is checked once a run (recorded_state), however many sets
  it holds; each set's status is then told from it alone (recorded_status).
- **The launch's findings, kept by what they read.** The command's findings (its options against
  the installed arg_utils.py and SpeculativeConfig) and the set's launch script's on an installed
  tree depend on the launch (its options, the models' configs), the installed version, the set's
  files, patchkit's code and the tree files they read. An entry is kept under a key over all but
  the last, with the sha256 of each tree file read and each question the checks asked of files
  outside the tree (patchkit.launch.observed: a drafter's weights headers, a listing of its directory,
  a distribution's METADATA), with its answer; it answers only when each of those files still has that
  hash and each question gets that answer, and only when sealed with this user's key (patchkit.base.seal): the cache is
  untrusted input, a shortcut for findings this user's patchkit made.
- **patchkit's code, named by its files' stat.** Each source file's path, size, inode, and
  modification and change times: no write to a file leaves its change time (ctime) as it was, and
  no one can set it back (utime sets the others), so a changed file changes the key; stat once a
  process. The set's files are untrusted input and small: they are hashed whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any

import packaging

from patchkit.base import fsutil, seal
from patchkit.base.enums import SelectionKind, TreeState
from patchkit.base.errors import PatchkitError
from patchkit.base.fsutil import read_regular
from patchkit.base.hashing import sha256
from patchkit.base.usercache import cache_dir, prune, touch, usable_cache_dir
from patchkit.engine.guard import launch_refusal, launch_tags, missing_guard
from patchkit.engine.inspection import TreeStatus
from patchkit.engine.resolve import Resolved
from patchkit.launch import observed
from patchkit.launch.command import LaunchCommand
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import CANNOT_JUDGE, Finding
from patchkit.launch.models import ModelConfig
from patchkit.launch.vllm_env import ENVS
from patchkit.series.patchfile import touched_paths
from patchkit.store.journal import settled_record
from patchkit.store.state import State, parse_state, recorded_sha256, state_path
from patchkit.tree.modules import hanging_modules

KIND = "launch-findings"
ENTRY_LIMIT = 1 << 20  # a few findings: far below this
FILE_LIMIT = 16 << 20  # a file of the set hashed into the key


def recorded_state(root: Path) -> State | None:
    """The tree's record when it can answer for every set it records: each file of every set (all
    applied on one vLLM version, each set once) has the sha256 the last set to write it wrote, and
    the installed launch guard lets the launch go; else None. Read once per run: each set's status
    is then told from it alone (recorded_status)."""
    try:
        before = _settled_record(root)
        state = None if before is None else parse_state(before, state_path(root))
        answers = (
            state is not None
            and as_written(root, state)
            and not launch_refusal(root, state)
            and missing_guard(root, state) is None
            and not hanging_modules(root, launch_tags(root))  # the full inspection names it
        )
        return state if answers and _settled_record(root) == before else None
    except (PatchkitError, OSError):  # damaged, of the wrong kind, unreadable: the full inspection says so
        return None


def recorded_status(resolved: Resolved, state: State | None) -> TreeStatus | None:
    """An applied tree's TreeStatus taken from its record (recorded_state's, of resolved's tree), or
    None when the record cannot say."""
    if resolved.selection.kind != SelectionKind.PATCH or resolved.version is None or state is None:
        return None
    return TreeStatus(TreeState.APPLIED) if _as_recorded(resolved, state) else None


def _settled_record(root: Path) -> bytes | None:
    """state.json's bytes when no transaction is under way (no journal); else None."""

    record = settled_record(root)
    return record if isinstance(record, bytes) else None


def as_written(root: Path, state: State) -> bool:
    """Whether every set the record holds (each once, all on one version) left every file as the
    record says."""
    if len({e.set_name for e in state.entries}) != len(state.entries):
        return False
    if len({e.vllm_version for e in state.entries}) > 1:
        return False
    # each walked from the tree up to a symlink (none on the way: inside the tree); hard links: hashed once
    return all(sha is not None and recorded_sha256(root, path) == sha for path, sha in _last_written(state).items())


def _as_recorded(resolved: Resolved, state: State) -> bool:
    """Whether the record holds one apply of this series on this version, over exactly its files."""
    entry = state.entry(resolved.set_name)
    if entry is None:
        return False
    series = [{"name": p.name, "sha256": p.sha256} for p in resolved.patches]
    if (entry.vllm_version, entry.patches) != (str(resolved.vllm_version), series):
        return False
    return sorted(entry.files) == touched_paths(resolved.patches)


def _last_written(state: State) -> dict[str, str | None]:
    """path -> what the last set to write it wrote there (None when a set's record of it does not
    start from what the set before it wrote: a chain the record itself breaks)."""
    written: dict[str, str | None] = {}
    for entry in state.entries:  # in the order they were applied
        for path, shas in entry.files.items():
            chained = path not in written or written[path] == shas.get("before")
            written[path] = shas.get("after") if chained else None
    return written


def kept_findings(context: LaunchContext, find: Callable[[LaunchContext], list[Finding]]) -> list[Finding]:
    """find(context), the launch's findings on an installed tree, from the cache when an entry there
    answers for it; else found and kept. Only for a tree read as it is (no planned files to judge)."""

    key = _key(context) if context.read_planned is None else None
    directory = cache_dir() / KIND
    if key is None or not usable_cache_dir(directory):
        return find(context)
    path = directory / f"{key}.json"
    found = _recall(directory, path, key, context)
    if found is not None:
        return found
    context.reads = {}
    with observed.recording() as seen:  # what they read outside the tree: a drafter's weights, a listing
        found = find(context)
    _keep(directory, path, key, found, context.reads, seen)
    return found


def _key(context: LaunchContext) -> str | None:
    """The key over everything the findings depend on but the tree's files; None (nothing is kept)
    when the launch is not plain JSON or a file of the set is not a regular file."""

    set_dir = getattr(context.patch_set, "directory", None)
    try:
        code = _own_code()
        set_files = _files_digest(Path(set_dir)) if set_dir is not None else None
    except OSError:  # a fifo, a symlink, an unreadable file: nothing is kept
        return None
    inputs = {
        "python": sys.version,
        "packaging": packaging.__version__,
        "code": code,
        "set": set_files,
        "set_name": getattr(context.patch_set, "name", None),  # each set's findings: a key of their own
        "root": str(context.root),
        "version": str(context.version),
        "command": asdict(context.command),
        "environment": _launch_setting(context.command, context.read),
        "models": [_model(context.target), _model(context.drafter)],
        "asks_vllm": context.python,  # findings with vLLM's own answers are not those without
        "plugins": context.general_plugins(),  # named in a finding vLLM was not asked for
    }
    try:
        return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=_refuse).encode()).hexdigest()
    except (TypeError, ValueError):
        return None


# the launch's variables that change what it imports or reads (a plugin, a path, a model cache, the
# locale a chat template is read in, the PATH its program is found on)
_SETTING_PREFIXES = ("PYTHON", "VLLM_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "XDG_", "LC_")
_SETTING_NAMES = ("HOME", "LANG", "PATH")


def _launch_setting(command: LaunchCommand, read: Callable[[str], bytes | None]) -> dict[str, object]:
    """What of the launch's environment and working directory its findings can depend on: with the
    variables above, each one the tree's envs.py names (vllm-environment judges every entry there:
    VERBOSE, LOCAL_RANK, ...; a quoted mention is enough, a key that holds more only misses)."""
    envs = read(ENVS) or b""
    variables = {
        k: v
        for k, v in command.environ.items()
        if k.startswith(_SETTING_PREFIXES) or k in _SETTING_NAMES or _quoted(k, envs)
    }
    # the directory too: relative and empty PYTHONPATH entries (and relative paths) resolve against it
    return {"variables": variables, "first_path": command.first_path(), "cwd": command.working_directory()}


def _quoted(name: str, text: bytes) -> bool:
    word = name.encode("utf-8", "surrogateescape")
    return b'"' + word + b'"' in text or b"'" + word + b"'" in text


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _model(model: ModelConfig | None) -> dict[str, object] | None:
    return None if model is None else {"name": model.name, "path": str(model.path), "config": model.config}


@cache
def _own_code() -> str:
    """The sha256 of _code_files of patchkit itself, once a process: every set's key names the same
    code (and a process runs the code it imported, whatever its files become)."""
    return hashlib.sha256(json.dumps(_code_files(Path(__file__).resolve().parent.parent)).encode()).hexdigest()


def _code_files(root: Path) -> list[tuple[str, int, int, int, int]]:
    """patchkit's source files under `root`, each as (path, size, inode, mtime, ctime in ns): what
    names the code that runs without reading it (a fifth of the time of hashing it, 141 files)."""

    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        here = _relative_dir(directory, root)
        for name in files:
            if name.endswith(".py"):
                stat = os.stat(os.path.join(directory, name), follow_symlinks=False)
                found.append((here(name), stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns))
    return sorted(found)


def _relative_dir(directory: str, root: Path) -> Callable[[str], str]:
    """A file of `directory` by its path relative to `root`, as os.path.relpath names it: worked
    out once a directory (relpath of each of patchkit's 150 files was ~1 ms of `run`'s fast path)."""
    rel = os.path.relpath(directory, root)
    return (lambda name: name) if rel == os.curdir else (lambda name: os.path.join(rel, name))


def _files_digest(root: Path) -> str:
    """The sha256 over the names and contents of the files under `root` (__pycache__ aside): os.walk, not pathlib, which costs more than the hashing here. OSError
    for anything but a regular file there."""

    paths = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        here = _relative_dir(directory, root)
        paths += [(os.path.join(directory, name), here(name)) for name in files]
    digest = hashlib.sha256()
    for path, rel in sorted(paths):  # the library is untrusted input: a regular file, never a fifo or symlink
        digest.update(f"\0{rel}\0".encode() + read_regular(path, FILE_LIMIT))
    return digest.hexdigest()


def _recall(directory: Path, path: Path, key: str, context: LaunchContext) -> list[Finding] | None:
    """The entry's findings when it is sealed by this user and every file it read is unchanged."""

    try:
        if not fsutil.inside(directory, path.parent):
            return None
        entry = fsutil.load_json_text(fsutil.read_regular(path, ENTRY_LIMIT))
        data = entry["entry"]
        if not seal.sealed(KIND, key, seal.canonical(data), entry.get("seal")):
            return None
        findings = [_finding(f) for f in data["findings"]]
        reads = data["reads"]
        if not isinstance(reads, dict) or any(sha256(context.read(p)) != sha for p, sha in reads.items()):
            return None
        if not context.still_read(data["seen"]):
            return None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
    ):  # damaged, planted, another format
        return None
    touch(path)
    return findings


def _finding(data: dict[str, Any]) -> Finding:
    finding = Finding(data["check"], data["ok"], data["message"], data["fix"], data["result"] != CANNOT_JUDGE)
    if not (
        isinstance(finding.check, str)
        and isinstance(finding.ok, bool)
        and isinstance(finding.message, str)
        and isinstance(finding.fix, (str, type(None)))
        and finding.result == data["result"]  # a result that contradicts ok is no finding patchkit kept
    ):
        raise ValueError("a kept finding is malformed")
    return finding


def _keep(
    directory: Path, path: Path, key: str, findings: list[Finding], reads: dict[str, str | None], seen: dict[str, str]
) -> None:

    data = {"findings": [f.to_json() for f in findings], "reads": reads, "seen": seen}
    entry = {"seal": seal.seal(KIND, key, seal.canonical(data)), "entry": data}
    with suppress(OSError):  # a cache that cannot be written only costs time
        directory.mkdir(parents=True, exist_ok=True)
        if fsutil.inside(directory, path.parent):
            fsutil.atomic_write(path, fsutil.json_text(entry, "a cache entry").encode())
        prune(directory)
