"""What a patched wheel says it is: `<dist-info>/patchkit.json`, and the patches themselves under
`<dist-info>/patchkit/<patch name>`, so that the series is known from the wheel (or its install) alone.

    {"schema_version": 1, "patchkit": "0.1.0", "vllm_version": "0.16.0", "label": "patchkit.eagle3",
     "set": "eagle3", "patches": [{"name": "0001-....patch", "sha256": "..."}],
     "files": {"vllm/...py": {"stock_sha256": "...", "patched_sha256": "..."}}}

`vllm_version` is the stock wheel's version (without the label patchkit added); `set` is null for
`--patch` files. A wheel of several sets (schema_version 2) names each with its own patches, in
the order they were applied, instead of `set` and `patches` (the label may be a short form: this
names every set), and keeps each set's patches under `<dist-info>/patchkit/<set>/<patch name>`:

    {"schema_version": 2, ..., "label": "patchkit.eagle3.deepseek.tool.calls",
     "sets": [{"set": "eagle3", "patches": [...]}, {"set": "deepseek-tool-calls", "patches": [...]}],
     "files": {...}}

 a file the series creates has a null `stock_sha256`, one it deletes a null
`patched_sha256`. Read back from an installed tree, it is untrusted input like a diff: read without
following a symlink, bounded, every field checked (read_provenance).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from patchkit.base import fsutil
from patchkit.base.errors import BadInput, escaped, quoted
from patchkit.distinfo.record import PROVENANCE
from patchkit.series.patchfile import Patch, parse_patch

SCHEMA_VERSION = 1
SEVERAL_SETS_SCHEMA = 2  # a wheel of several sets
PATCH_DIR = "patchkit"
LIMIT = 16 << 20  # far beyond the record of any series
_SHA256 = re.compile(r"[0-9a-f]{64}")
_KEYS = {"schema_version", "patchkit", "vllm_version", "label", "set", "patches", "files"}
_SEVERAL_KEYS = {"schema_version", "patchkit", "vllm_version", "label", "sets", "files"}


@dataclass(frozen=True)
class PatchRecord:
    """A patch a patched wheel carries: its name, its sha256, its set's folder."""

    name: str
    sha256: str
    folder: str = ""  # a wheel of several sets: its set's name (the patch is under patchkit/<set>/)


@dataclass(frozen=True)
class SetRecord:
    """One set of a wheel of several sets, and its patches in order."""

    name: str
    patches: tuple[PatchRecord, ...]


@dataclass(frozen=True)
class FileRecord:
    """A file a patched wheel changed: its stock and patched sha256."""

    stock_sha256: str | None  # None: the series creates the file
    patched_sha256: str | None  # None: the series deletes it


@dataclass(frozen=True)
class Provenance:
    """What a patched wheel's patchkit.json says it was built from."""

    patchkit: str
    vllm_version: str
    label: str
    set_name: str | None
    patches: tuple[PatchRecord, ...]
    files: dict[str, FileRecord]
    dist_info: Path | None = None  # where it was read from
    sets: tuple[SetRecord, ...] = ()  # a wheel of several sets (set_name None; patches: all of theirs, in order)

    @staticmethod
    def of_sets(
        patchkit: str, vllm_version: str, label: str, sets: tuple[SetRecord, ...], files: dict[str, FileRecord]
    ) -> Provenance:
        """The record of a wheel of several sets: every set's patches, each in its set's folder."""
        placed = tuple(SetRecord(s.name, tuple(replace(p, folder=s.name) for p in s.patches)) for s in sets)
        patches = tuple(p for s in placed for p in s.patches)
        return Provenance(patchkit, vllm_version, label, None, patches, files, sets=placed)

    def to_json(self) -> dict[str, Any]:
        if self.sets:
            return {
                "schema_version": SEVERAL_SETS_SCHEMA,
                "patchkit": self.patchkit,
                "vllm_version": self.vllm_version,
                "label": self.label,
                "sets": [{"set": s.name, "patches": _patches_json(s.patches)} for s in self.sets],
                "files": self._files_json(),
            }
        return {
            "schema_version": SCHEMA_VERSION,
            "patchkit": self.patchkit,
            "vllm_version": self.vllm_version,
            "label": self.label,
            "set": self.set_name,
            "patches": _patches_json(self.patches),
            "files": self._files_json(),
        }

    def _files_json(self) -> dict[str, dict[str, str | None]]:
        return {
            path: {"stock_sha256": f.stock_sha256, "patched_sha256": f.patched_sha256}
            for path, f in sorted(self.files.items())
        }

    def patch_text(self, name: str, folder: str = "") -> bytes:
        """The bytes of patch `name` (of the set `folder`, in a wheel of several sets) as the wheel
        carries them, checked against its recorded sha256."""
        if self.dist_info is None:
            raise ValueError("a provenance record that was not read from a dist-info has no patch files")
        record = next((p for p in self.patches if (p.name, p.folder) == (name, folder)), None)
        if record is None:
            raise BadInput(f"{self.dist_info / PROVENANCE} records no patch {quoted(repr(name))}")
        directory = self.dist_info / PATCH_DIR / folder if folder else self.dist_info / PATCH_DIR
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

        return [parse_patch(self.patch_text(p.name, p.folder), p.name) for p in self.patches]


def _patches_json(patches: tuple[PatchRecord, ...]) -> list[dict[str, str]]:
    return [{"name": p.name, "sha256": p.sha256} for p in patches]


def provenance_files(record: Provenance, patches: list[Patch]) -> dict[str, bytes]:
    """The members the wheel carries under its dist-info: relative path -> bytes. `patches`: the
    record's, in its order (a wheel of several sets: each in its set's folder)."""
    files = {PROVENANCE: fsutil.json_text(record.to_json(), PROVENANCE, indent=2, sort_keys=False).encode() + b"\n"}
    for patch, recorded in zip(patches, record.patches, strict=True):
        folder = f"{recorded.folder}/" if recorded.folder else ""
        files[f"{PATCH_DIR}/{folder}{patch.name}"] = patch.raw
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
    if isinstance(data, dict) and data.get("schema_version") == SEVERAL_SETS_SCHEMA:
        return _validated_sets(data, dist_info)
    if not isinstance(data, dict) or set(data) != _KEYS:
        raise ValueError(f"not a patchkit provenance record (keys {sorted(_KEYS)} expected)")
    version = data["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        raise ValueError(f"schema_version {quoted(repr(version))} is not {SCHEMA_VERSION}")
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


def _validated_sets(data: dict[str, Any], dist_info: Path) -> Provenance:
    """A wheel of several sets' record (schema_version 2): each set a name and its patches."""
    if set(data) != _SEVERAL_KEYS or type(data["schema_version"]) is not int:
        raise ValueError(f"not a patchkit provenance record of several sets (keys {sorted(_SEVERAL_KEYS)} expected)")
    strings = {key: _text(data, key) for key in ("patchkit", "vllm_version", "label")}
    value = data["sets"]
    if not isinstance(value, list) or not 2 <= len(value) <= 64:
        raise ValueError("sets is not a list of 2 to 64 sets")
    sets = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"set", "patches"}:
            raise ValueError("a set entry is not {set, patches}")
        name = item["set"]
        if not isinstance(name, str) or fsutil.plain_name_problem(name):
            raise ValueError(f"set name {quoted(repr(name))} is not a plain name")
        sets.append(SetRecord(name, _patches(item["patches"])))
    if len({s.name for s in sets}) != len(sets):
        raise ValueError("a set appears twice")
    found = Provenance.of_sets(
        strings["patchkit"], strings["vllm_version"], strings["label"], tuple(sets), _files(data["files"])
    )
    return replace(found, dist_info=dist_info)


def _text(data: dict[str, Any], key: str) -> str:
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
            raise ValueError(f"patch name {quoted(repr(name))} is not a plain file name")
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
            raise ValueError(f"file path {quoted(repr(path))} {reason}")
        if not isinstance(item, dict) or set(item) != {"stock_sha256", "patched_sha256"}:
            raise ValueError(f"the entry of {escaped(path)} is not {{stock_sha256, patched_sha256}}")
        stock, patched = item["stock_sha256"], item["patched_sha256"]
        if stock is None and patched is None:
            raise ValueError(f"the entry of {escaped(path)} records neither a stock nor a patched file")
        out[path] = FileRecord(
            None if stock is None else _digest(stock, path), None if patched is None else _digest(patched, path)
        )
    return out


def _digest(value: object, what: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError(f"the sha256 of {what} is not 64 lowercase hex digits")
    return value
