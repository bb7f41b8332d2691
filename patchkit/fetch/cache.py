"""The cache of one release (``cache_dir()/releases/<version>/``): where things go, release.json
(what the wheel holds and what the tree has), and which requested files are still missing."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from patchkit.errors import BadInput, FetchError
from patchkit.fetch.index import PROJECT
from patchkit.fsutil import atomic_write, unsafe_reason
from patchkit.record import cache_dir

STATE_FILE = "release.json"
STATE_SCHEMA = 1
CACHE_HINT = "set PATCHKIT_CACHE_DIR to a writable directory"
FILE_MODE = 0o644  # cached files are readable by all, whatever the umask

State = dict[str, Any]  # release.json: wheel, url, index, sha256, members, dist_info, present, absent


def release_root(ver: str) -> Path:
    return cache_dir() / "releases" / ver


def new_state(ver: str) -> State:
    return {"schema": STATE_SCHEMA, "project": PROJECT, "version": ver, "present": [], "absent": []}


def load_state(root: Path) -> State | None:
    try:
        data = json.loads((root / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        return None
    return data


def save_state(root: Path, state: State) -> None:
    state = dict(state)
    state["present"] = sorted(set(state.get("present", ())))
    state["absent"] = sorted(set(state.get("absent", ())))
    write_cached(root / STATE_FILE, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode())


def write_cached(dest: Path, data: bytes) -> None:
    try:
        atomic_write(dest, data, mode=FILE_MODE)
    except OSError as e:
        raise FetchError(f"cannot write {dest}: {e}", hint=CACHE_HINT) from None


def python_members(names: Iterable[str]) -> list[str]:
    return [n for n in names if n.startswith(PROJECT + "/") and n.endswith(".py")]


def needed(state: State | None, wanted: set[str], all_python: bool) -> set[str]:
    """The members a call asks for: `wanted`, the dist-info's METADATA and RECORD, every .py with `all_python`."""
    need = set(wanted)
    if state is not None and state.get("dist_info"):
        need |= {f"{state['dist_info']}/METADATA", f"{state['dist_info']}/RECORD"}
    if all_python and state is not None and state.get("members") is not None:
        need |= set(python_members(state["members"]))
    return need


def missing(state: State, tree: Path, wanted: set[str], all_python: bool) -> set[str]:
    """Needed members that are neither in the tree nor known to be absent."""
    if not state.get("dist_info") or state.get("members") is None:
        return {"<central directory>"}
    present, absent = set(state.get("present", ())), set(state.get("absent", ()))
    members = set(state["members"])
    out = set()
    for name in needed(state, wanted, all_python):
        if name in absent:
            continue
        if name in present and name in members and (tree / name).is_file():
            continue
        out.add(name)  # a name not in `members` is decided offline (recorded absent under the lock)
    return out


def clean_request(path: str) -> str:
    """A requested path as the wheel names it (a leading ./ dropped); BadInput if it is unsafe."""
    p = str(path).strip()
    if p.startswith("./"):
        p = p[2:]
    reason = unsafe_reason(p)
    if reason:
        raise BadInput(
            f"refusing to fetch {path!r}: the path {reason}",
            hint="paths are POSIX paths relative to site-packages, e.g. vllm/config/speculative.py",
        )
    return p


def safe_dest(tree: Path, name: str, real_tree: Path | None = None) -> Path:
    """Where member `name` goes; FetchError for anything that would land outside `tree`.

    `real_tree` is `tree` resolved, given by a caller placing many members."""
    reason = unsafe_reason(name)
    if reason:
        raise FetchError(
            f"refusing unsafe member {name!r} in the wheel: the path {reason}",
            hint="the wheel looks malformed or malicious; it was not extracted",
        )
    dest = tree / name
    try:
        dest.resolve().relative_to(real_tree or tree.resolve())
    except ValueError:
        raise FetchError(
            f"refusing member {name!r}: it resolves outside {tree}", hint=f"remove {tree} and try again"
        ) from None
    return dest
