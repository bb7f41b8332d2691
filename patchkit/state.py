"""What patchkit did to a target, recorded inside the target tree.

    <root>/.patchkit/state.json        one small JSON: cheap for a launch guard to read
    <root>/.patchkit/objects/<sha256>  the original bytes of every file patchkit changed
    <root>/.patchkit/journal.json      exists only while a transaction is unfinished
    <root>/.patchkit/saved/            user edits kept aside by `revert --force`

state.json:
    {"format": 1, "entries": [{"set", "vllm_version", "release", "applied_at",
      "patches": [{"name", "sha256"}], "files": {path: {"before": sha|null, "after": sha|null}}}]}
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import BadInput

FORMAT = 1
META_DIR = ".patchkit"


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def meta_dir(root: Path) -> Path:
    return root / META_DIR


def state_path(root: Path) -> Path:
    return meta_dir(root) / "state.json"


def object_path(root: Path, digest: str) -> Path:
    return meta_dir(root) / "objects" / digest


@dataclass
class Entry:
    set_name: str
    vllm_version: str | None
    release: str | None
    applied_at: str
    patches: list[dict]
    files: dict[str, dict]  # path -> {"before": sha|None, "after": sha|None}

    def to_json(self) -> dict:
        return {
            "set": self.set_name,
            "vllm_version": self.vllm_version,
            "release": self.release,
            "applied_at": self.applied_at,
            "patches": self.patches,
            "files": self.files,
        }

    @classmethod
    def from_json(cls, data: dict) -> Entry:
        return cls(
            data["set"],
            data.get("vllm_version"),
            data.get("release"),
            data.get("applied_at", ""),
            data.get("patches", []),
            data["files"],
        )


@dataclass
class State:
    entries: list[Entry]

    def entry(self, set_name: str) -> Entry | None:
        return next((e for e in self.entries if e.set_name == set_name), None)

    def without(self, set_name: str) -> State:
        return State([e for e in self.entries if e.set_name != set_name])

    def with_entry(self, entry: Entry) -> State:
        return State([*self.without(entry.set_name).entries, entry])

    def to_bytes(self) -> bytes:
        data = {"format": FORMAT, "entries": [e.to_json() for e in self.entries]}
        return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()

    def later(self, entry: Entry) -> list[Entry]:
        """The entries applied after `entry` (entries are kept in the order they were applied)."""
        return self.entries[self.entries.index(entry) + 1 :]

    def overlapping(self, entry: Entry) -> dict[str, str]:
        """path -> the name of a set applied after `entry` that changed the same file again: its
        record's "before" is this entry's "after", so this entry alone cannot be undone."""
        return {path: e.set_name for e in self.later(entry) for path in e.files if path in entry.files}

    def accepted(self, entry: Entry, path: str) -> set[str | None]:
        """The contents (sha256) a file `entry` recorded may have without being edited by hand:
        its original, what this entry wrote, and what any set applied after it wrote there."""
        shas = entry.files[path]
        return {shas["before"], shas["after"]} | {e.files[path]["after"] for e in self.later(entry) if path in e.files}

    def referenced_objects(self) -> set[str]:
        return {f["before"] for e in self.entries for f in e.files.values() if f.get("before")}


def record_apply(
    previous: Entry | None,
    *,
    set_name: str,
    vllm_version: str | None,
    release: str | None,
    patches,
    changes: dict[str, tuple[bytes | None, bytes | None]],
) -> Entry:
    """The entry an apply records: each file's original hash (kept from an earlier apply of the
    same set) and the hash written now."""
    from datetime import datetime, timezone

    files = dict(previous.files) if previous else {}
    for path, (before, after) in changes.items():
        earlier = files.get(path)
        files[path] = {"before": earlier["before"] if earlier else sha256(before), "after": sha256(after)}
    return Entry(
        set_name=set_name,
        vllm_version=vllm_version,
        release=release,
        applied_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        patches=[{"name": p.name, "sha256": p.sha256} for p in patches],
        files=files,
    )


def read_state(root: Path) -> State:
    path = state_path(root)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return State([])
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from exc
    return parse_state(raw, path)


def parse_state(raw: bytes, origin: Path) -> State:
    try:
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            raise BadInput(f"{origin}: unknown state format {data.get('format')!r}")
        return State([Entry.from_json(e) for e in data.get("entries", [])])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"{origin} is damaged ({exc}); move it away to start afresh") from exc


def read_object(root: Path, digest: str) -> bytes:
    """A saved original, checked against its name."""
    path = object_path(root, digest)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"the saved original {path} is missing: {exc.strerror}") from exc
    if sha256(data) != digest:
        raise BadInput(f"the saved original {path} is corrupt (sha256 mismatch)")
    return data


def read_file(path: Path | str) -> bytes | None:
    """A regular file's bytes; None when there is none (a fifo or device is never read: it could block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a fifo must not wait
    except OSError as exc:
        if exc.errno in _NO_FILE:
            return None
        raise
    try:
        size = os.fstat(fd)
        if not stat.S_ISREG(size.st_mode):
            return None
        data = os.read(fd, size.st_size)
        while more := os.read(fd, 1 << 20):  # the file grew since fstat
            data += more
        return data
    finally:
        os.close(fd)


_NO_FILE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO}


def file_sha(root: Path, path: str) -> str | None:
    full = root / path
    try:
        return sha256(full.read_bytes())
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return "<directory>"


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
