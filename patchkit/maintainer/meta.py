"""The workspace's record (.patchkit-workspace.json): the set, the release, the series directory,
each patch's DEP-3 header, diff and files."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.maintainer.patchtext import split_header
from patchkit.patchfile import Patch, decode

META = ".patchkit-workspace.json"
SCHEMA = 1
STOCK_TAG = "stock"


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
    register: dict[str, str] | None = None  # a [[releases]] entry refresh appends to set.toml
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


def record_of(patch: Patch, *, parts: str | None = None, library_copy: bool = True) -> PatchRecord:
    """What a workspace remembers of a patch; `library_copy`: it is the library's file (its sha256)."""
    header, body = split_header(decode(patch.raw))
    return PatchRecord(
        patch.name, header, body, [f.path for f in patch.files], parts, patch.sha256 if library_copy else None
    )
