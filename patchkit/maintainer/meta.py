"""The workspace's record (.patchkit-workspace.json): the set, the release, the series directory,
each patch's DEP-3 header, diff and files."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from packaging.version import Version

from patchkit.base import fsutil, seal
from patchkit.base.errors import BadInput
from patchkit.base.fsutil import atomic_write, unsafe_reason
from patchkit.maintainer.patchtext import split_header
from patchkit.series.library import load_set
from patchkit.series.patchfile import Patch, decode
from patchkit.store.state import WORKSPACE_RECORD

T = TypeVar("T")

META = WORKSPACE_RECORD
SCHEMA = 1
STOCK_TAG = "stock"
SEAL_KIND = "workspace"
PATCH_NAME = re.compile(r"\d{4}-[A-Za-z0-9][A-Za-z0-9._-]*\.patch")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass
class PatchRecord:
    """One patch of a workspace as refresh writes it back: header, body, files."""

    name: str
    header: str  # the DEP-3 header, the text before the "---" line ("" if none)
    body: str  # the diff refresh compares with: unchanged body, unchanged Last-Update
    files: list[str]
    parts: str | None = None  # a diff whose per-file parts split a file several patches change
    sha256: str | None = None  # of the library's file when the workspace was made

    def validate(self, roots: list[str]) -> None:
        """A plain NNNN-name.patch file name; files under the set's roots; text where text belongs."""
        if not isinstance(self.name, str) or not PATCH_NAME.fullmatch(self.name):
            raise ValueError(f"patch name {self.name!r} is not a file name of the form NNNN-name.patch")
        if not all(isinstance(t, str) for t in (self.header, self.body)) or not isinstance(
            self.parts, (str, type(None))
        ):
            raise ValueError(f"{self.name}: header, body and parts must be text")
        if self.sha256 is not None and not (isinstance(self.sha256, str) and _SHA256.fullmatch(self.sha256)):
            raise ValueError(f"{self.name}: sha256 {self.sha256!r} is not a sha256")
        if not isinstance(self.files, list):
            raise ValueError(f"{self.name}: files is not a list")
        for file in self.files:
            why = unsafe_reason(file) if isinstance(file, str) else "is not text"
            if why or file.split("/", 1)[0] not in roots:
                raise ValueError(f"{self.name}: file {file!r} {why or 'is outside the set roots'}")


@dataclass
class WorkspaceMeta:
    """What a workspace records of where it came from: the set, the release, the commits."""

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
        data = asdict(self)
        data["seal"] = seal.seal(SEAL_KIND, _sealed_name(directory), _sealed_content(data))
        atomic_write(
            directory / META, (fsutil.json_text(data, META, indent=2) + "\n").encode()
        )  # never through a symlink

    @classmethod
    def load(cls, directory: Path) -> WorkspaceMeta:
        """The record, validated: it is read back from a directory anyone may have handed over."""
        path = directory / META
        try:
            data = fsutil.load_json_text(_read_regular(path))
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            mark = data.pop("seal", None)
            data["patches"] = [PatchRecord(**p) for p in _typed(data, "patches", list)]
            meta = cls(**data)
            meta._validate_types()
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
            raise BadInput(f"unreadable workspace record {path}: {exc}") from None
        sealed = seal.sealed(SEAL_KIND, _sealed_name(directory), _sealed_content(asdict(meta)), mark)
        meta._validate_places(path, sealed=sealed)
        return meta

    def _validate_types(self) -> None:
        for name in ("set_name", "set_dir", "version", "series_dir", "stock_commit"):
            _typed(asdict(self), name, str)
        Version(self.version)  # InvalidVersion is a ValueError
        if not _COMMIT.fullmatch(self.stock_commit):
            raise ValueError(f"stock_commit {self.stock_commit!r} is not a commit id")
        if not isinstance(self.roots, list) or not self.roots or not all(_plain_name(r) for r in self.roots):
            raise ValueError(f"roots {self.roots!r} are not top-level directory names")
        for record in self.patches:
            record.validate(self.roots)
        if not isinstance(self.all_python, bool) or not isinstance(self.ported_from, (str, type(None))):
            raise ValueError("all_python must be true or false, ported_from a version or null")
        if self.register is not None and self.register != registered_entry(self.version):
            raise ValueError(f"register {self.register!r} is not a [[releases]] entry")

    def _validate_places(self, path: Path, *, sealed: bool) -> None:
        """The set is the one named, and refresh writes only into its series directory: inside the
        set's directory (symlinks resolved), or where patchkit itself put it (port --out: sealed)."""

        set_dir, series_dir = Path(self.set_dir), Path(self.series_dir)
        if not (set_dir.is_absolute() and series_dir.is_absolute()):
            raise BadInput(f"{path}: set_dir and series_dir must be absolute paths")
        found = load_set(set_dir)
        if found.name != self.set_name:
            raise BadInput(f"{path}: {set_dir} holds the set {found.name!r}, not {self.set_name!r}")
        if not sealed and not fsutil.inside(set_dir, series_dir):
            raise BadInput(
                f"{path}: the series directory {series_dir} is not inside the set's directory {set_dir}",
                hint="refresh writes only into its set's series; make the workspace again with `patchkit workspace`",
            )


def registered_entry(version: str) -> dict[str, str]:
    """The only [[releases]] entry a workspace asks refresh to add (port's): its own release."""
    return {"versions": f"=={version}", "dir": version}


def _read_regular(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        return handle.read(1 << 24)


def _typed(data: dict[str, Any], name: str, kind: type[T]) -> T:
    value = data[name]
    if not isinstance(value, kind):
        raise TypeError(f"{name} is not a {kind.__name__}")
    return value


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and unsafe_reason(name) is None and "/" not in name


def _sealed_name(directory: Path) -> str:
    return str(directory.resolve())


def _sealed_content(data: dict[str, Any]) -> bytes:
    return seal.canonical({k: v for k, v in data.items() if k != "seal"})


def record_of(patch: Patch, *, parts: str | None = None, library_copy: bool = True) -> PatchRecord:
    """What a workspace remembers of a patch; `library_copy`: it is the library's file (its sha256)."""
    header, body = split_header(decode(patch.raw))
    return PatchRecord(
        patch.name, header, body, [f.path for f in patch.files], parts, patch.sha256 if library_copy else None
    )
