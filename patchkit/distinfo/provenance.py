"""What a patched wheel says it is: `<dist-info>/patchkit.json`, and the patches themselves under
`<dist-info>/patchkit/<patch name>`, so that the series is known from the wheel (or its install) alone.

    {"schema_version": 1, "patchkit": "0.1.0", "vllm_version": "0.16.0", "label": "patchkit.eagle3",
     "set": "eagle3", "patches": [{"name": "0001-....patch", "sha256": "..."}],
     "files": {"vllm/...py": {"stock_sha256": "...", "patched_sha256": "..."}}}

`vllm_version` is the stock wheel's version (without the label patchkit added); `set` is null for
`--patch` files; a file the series creates has a null `stock_sha256`, one it deletes a null
`patched_sha256`. Read back from an installed tree, it is untrusted input like a diff: read without
following a symlink, bounded, every field checked (read_provenance).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from patchkit.base import fsutil
from patchkit.base.errors import BadInput
from patchkit.distinfo.record import PROVENANCE
from patchkit.series.patchfile import Patch, parse_patch

SCHEMA_VERSION = 1
PATCH_DIR = "patchkit"
LIMIT = 16 << 20  # far beyond the record of any series
_SHA256 = re.compile(r"[0-9a-f]{64}")
_KEYS = {"schema_version", "patchkit", "vllm_version", "label", "set", "patches", "files"}


@dataclass(frozen=True)
class PatchRecord:
    name: str
    sha256: str


@dataclass(frozen=True)
class FileRecord:
    stock_sha256: str | None  # None: the series creates the file
    patched_sha256: str | None  # None: the series deletes it


@dataclass(frozen=True)
class Provenance:
    patchkit: str
    vllm_version: str
    label: str
    set_name: str | None
    patches: tuple[PatchRecord, ...]
    files: dict[str, FileRecord]
    dist_info: Path | None = None  # where it was read from

    def to_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "patchkit": self.patchkit,
            "vllm_version": self.vllm_version,
            "label": self.label,
            "set": self.set_name,
            "patches": [{"name": p.name, "sha256": p.sha256} for p in self.patches],
            "files": {
                path: {"stock_sha256": f.stock_sha256, "patched_sha256": f.patched_sha256}
                for path, f in sorted(self.files.items())
            },
        }

    def patch_text(self, name: str) -> bytes:
        """The bytes of patch `name` as the wheel carries them, checked against its recorded sha256."""
        if self.dist_info is None:
            raise ValueError("a provenance record that was not read from a dist-info has no patch files")
        record = next((p for p in self.patches if p.name == name), None)
        if record is None:
            raise BadInput(f"{self.dist_info / PROVENANCE} records no patch {name!r}")
        directory = self.dist_info / PATCH_DIR
        path = directory / name
        if not fsutil.plain_directory(self.dist_info, directory):
            raise BadInput(f"{directory} is not a plain directory (a symlink?); refusing to read it")
        try:
            data = fsutil.read_regular(path, LIMIT)
        except OSError as exc:
            raise BadInput(f"cannot read {path}: {exc.strerror}", hint="reinstall the patched wheel") from None
        if hashlib.sha256(data).hexdigest() != record.sha256:
            raise BadInput(f"{path} is not the patch {PROVENANCE} records (sha256 differs)", hint="reinstall the wheel")
        return data

    def read_patches(self) -> list[Patch]:
        """The series, in order, parsed as any patch is."""

        return [parse_patch(self.patch_text(p.name), p.name) for p in self.patches]


def provenance_files(record: Provenance, patches: list[Patch]) -> dict[str, bytes]:
    """The members the wheel carries under its dist-info: relative path -> bytes."""
    files = {PROVENANCE: json.dumps(record.to_json(), indent=2, sort_keys=False).encode() + b"\n"}
    for patch in patches:
        files[f"{PATCH_DIR}/{patch.name}"] = patch.raw
    return files


def read_provenance(dist_info: Path) -> Provenance:
    """The record a patched wheel's install carries in `dist_info`; FileNotFoundError when it has
    none (a stock install); BadInput, naming the file, when it is not one patchkit could have written
    (a symlink, a fifo, too large, not JSON, a field missing or of the wrong shape, an unsafe path)."""
    path = dist_info / PROVENANCE
    try:
        if not stat.S_ISDIR(os.lstat(dist_info).st_mode):
            raise fsutil.NotRegularFile(errno.ENOTDIR, "not a directory (a symlink?)", str(dist_info))
        raw = fsutil.read_regular(path, LIMIT)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}", hint="inspect or remove it") from None
    try:
        return _validated(fsutil.load_json_text(raw), dist_info)
    except RecursionError:  # JSON nested deeper than the parser goes: not a record patchkit wrote
        raise BadInput(f"{path} is damaged: nested too deeply", hint="inspect or reinstall the patched wheel") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise BadInput(f"{path} is damaged: {exc}", hint="inspect or reinstall the patched wheel") from None


def _validated(data: object, dist_info: Path) -> Provenance:
    if not isinstance(data, dict) or set(data) != _KEYS:
        raise ValueError(f"not a patchkit provenance record (keys {sorted(_KEYS)} expected)")
    version = data["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        raise ValueError(f"schema_version {version!r} is not {SCHEMA_VERSION}")
    strings = {key: _text(data, key) for key in ("patchkit", "vllm_version", "label")}
    set_name = data["set"]
    if set_name is not None and (not isinstance(set_name, str) or not set_name):
        raise ValueError("set is neither a name nor null")
    return Provenance(
        patchkit=strings["patchkit"],
        vllm_version=strings["vllm_version"],
        label=strings["label"],
        set_name=set_name,
        patches=_patches(data["patches"]),
        files=_files(data["files"]),
        dist_info=dist_info,
    )


def _text(data: dict, key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ValueError(f"{key} is not a short string")
    return value


def _patches(value: object) -> tuple[PatchRecord, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("patches is not a non-empty list")
    out = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "sha256"}:
            raise ValueError("a patch entry is not {name, sha256}")
        name, digest = item["name"], item["sha256"]
        if not isinstance(name, str) or fsutil.plain_name_problem(name):
            raise ValueError(f"patch name {name!r} is not a plain file name")
        out.append(PatchRecord(name, _digest(digest, name)))
    if len({p.name for p in out}) != len(out):
        raise ValueError("a patch name appears twice")
    return tuple(out)


def _files(value: object) -> dict[str, FileRecord]:
    if not isinstance(value, dict) or not value:
        raise ValueError("files is not a non-empty object")
    out = {}
    for path, item in value.items():
        reason = fsutil.unsafe_reason(path)
        if reason:
            raise ValueError(f"file path {path!r} {reason}")
        if not isinstance(item, dict) or set(item) != {"stock_sha256", "patched_sha256"}:
            raise ValueError(f"the entry of {path} is not {{stock_sha256, patched_sha256}}")
        stock, patched = item["stock_sha256"], item["patched_sha256"]
        if stock is None and patched is None:
            raise ValueError(f"the entry of {path} records neither a stock nor a patched file")
        out[path] = FileRecord(
            None if stock is None else _digest(stock, path), None if patched is None else _digest(patched, path)
        )
    return out


def _digest(value: object, what: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError(f"the sha256 of {what} is not 64 lowercase hex digits")
    return value
