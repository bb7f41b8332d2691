"""A wheel's RECORD (path, hash, size per file) and where patchkit caches fetched releases.

Kept apart from `fetch` so that the checks can read a RECORD without loading the fetcher.
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import os
from collections.abc import Collection
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.base import fsutil
from patchkit.base.errors import FetchError, escaped, quoted
from patchkit.base.hashing import sha256
from patchkit.base.values import FrozenValue, frozen
from patchkit.tree.target import vllm_metadata_dirs

if TYPE_CHECKING:  # pragma: no cover
    from packaging.version import Version

# The hashes a wheel's RECORD may use: "sha256 or better" (the binary distribution format spec;
# md5 and sha1 are not permitted). An entry with any other algorithm is not evidence of anything.
# The hash entry parse_record gives a path an installed RECORD lists with two different hashes.
TWICE = "twice"
HASHES = frozenset({"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s"})


def parse_record(data: bytes, only: Collection[str] | None = None, *, once: bool = False) -> dict[str, tuple[str, str]]:
    """RECORD rows as ``{path: (hash, size)}``; with `only`, just the rows of those paths (a check
    of a few files need not build vLLM's ~5,000 rows: csv reads them all in C, the rest is Python).
    `once`: a path listed twice is malformed (a wheel's RECORD: which row would an installer
    believe?). An installed RECORD may list one twice (pip adds a row without a hash for a .pyc the
    wheel had): a row without a hash never replaces one with a hash, and two different hashes are
    no evidence of either (its entry is then TWICE)."""
    out: dict[str, tuple[str, str]] = {}
    conflicting: set[str] = set()
    try:
        text = data.decode("utf-8")
        for row in csv.reader(io.StringIO(text)):
            if not row or (only is not None and row[0] not in only):
                continue
            path, digest, size = row[0], row[1] if len(row) > 1 else "", row[2] if len(row) > 2 else ""
            earlier = out.get(path)
            if earlier is not None:
                if once:
                    raise FetchError(f"the RECORD lists {escaped(path)} twice", hint="the wheel looks malformed")
                if earlier[0] and digest != earlier[0]:
                    if digest:
                        conflicting.add(path)
                    continue
            out[path] = (digest, size)
        for path in conflicting:
            out[path] = (TWICE, "")
    except (UnicodeDecodeError, csv.Error) as e:
        raise FetchError(f"cannot parse the wheel's RECORD: {e}", hint="the wheel looks malformed") from None
    return out


def record_hash(data: bytes, algo: str = "sha256") -> str:
    """``algo=<urlsafe-b64 digest without padding>``, as written in RECORD; ValueError for an
    algorithm wheels do not allow (not in HASHES)."""
    if algo not in HASHES:
        raise ValueError(f"{quoted(repr(algo))} is not a hash a wheel's RECORD may use ({allowed_hashes()})")
    return record_digest(hashlib.new(algo, data).digest(), algo)


def record_algorithm(entry: str) -> str:
    """The algorithm a RECORD hash entry names ("sha256=..." -> "sha256")."""
    return entry.partition("=")[0]


def allowed_hashes() -> str:
    return "sha256 or stronger: " + ", ".join(sorted(HASHES))


def record_digest(digest: bytes, algo: str) -> str:
    """A digest as RECORD writes it."""
    return f"{algo}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# In a dist-info: the provenance of a wheel patchkit built (patchkit.distinfo.provenance writes and reads it).
PROVENANCE = "patchkit.json"


def has_provenance(tree: Path) -> bool:
    """Whether a vllm-*.dist-info in the tree holds a provenance file (a symlink counts): the cheap
    test made before patchkit.distinfo.installed_wheel is loaded, for most trees are stock installs."""
    return any(os.path.lexists(d / PROVENANCE) for d in vllm_metadata_dirs(tree))


def is_dist_info_of(directory: Path, version: Version | str) -> bool:
    """Whether `directory` is vllm-<version>.dist-info in any letter case (importlib's reading)."""
    return directory.name.lower() == f"vllm-{version}.dist-info".lower()


def find_record(tree: Path, version: Version | str | None = None) -> Path | None:
    """The vllm-*.dist-info/RECORD of a tree; of several, the one of `version` if it is there."""
    candidates = [d / "RECORD" for d in vllm_metadata_dirs(tree) if (d / "RECORD").exists()]
    exact = [c for c in candidates if version is not None and is_dist_info_of(c.parent, version)]
    return next(iter(exact or candidates), None)


RECORD_LIMIT = 64 << 20  # vLLM's RECORD is ~300 kB


def read_record_file(tree: Path, path: Path) -> bytes:
    """A RECORD's bytes (find_record's answer): a regular file of at most RECORD_LIMIT bytes, in a
    real dist-info directory of `tree`; fsutil.NotRegularFile for a symlink, a fifo, a device, a
    symlinked dist-info or a file too large (the tree is untrusted input: never hang, never follow)."""

    if not fsutil.plain_directory(tree, path.parent):
        raise fsutil.NotRegularFile(errno.ELOOP, f"{path.parent.name} is not a plain directory (a symlink?)", str(path))
    return fsutil.read_regular(path, RECORD_LIMIT)


@frozen
class Listings(FrozenValue):
    """Which of some paths each installed distribution's RECORD lists, from one walk of the tree's
    *.dist-info/RECORD files. A RECORD that cannot be read plainly lists nothing (the tree is
    untrusted input: bounded, no symlink followed)."""

    rows: dict[str, dict[str, str] | None]  # dist-info directory -> {path: its hash entry}; None: unreadable

    def by_others(self) -> set[str]:
        """Those outside vllm/ that another distribution than vLLM or the guard lists (torch's, a
        user's package's): files of theirs, never patchkit's to delete."""
        return {
            path
            for name, rows in self.rows.items()
            if rows and not name.startswith(("vllm-", "patchkit_guard-"))
            for path in rows
            if path.split("/", 1)[0] != "vllm"
        }

    def by_vllm(self, version: object = None) -> set[str]:
        """Those a vLLM's RECORD lists with a hash wheels allow: `version`'s RECORD as find_record
        chooses it, or (None) every installed vLLM's."""
        names = sorted(name for name in self.rows if name.startswith("vllm-"))
        if version is not None:
            exact = f"vllm-{version}.dist-info"
            names = [exact] if exact in names else names[:1]
        return {path for name in names for path, entry in (self.rows[name] or {}).items() if _trusted(entry)}


def _trusted(entry: str) -> bool:
    return "=" in entry and record_algorithm(entry) in HASHES


def listings(tree: Path, paths: Collection[str]) -> Listings:
    """Which of `paths` each installed distribution's RECORD lists (see Listings). Only a RECORD
    that can answer is read: vLLM's, another's when a path lies outside vllm/, never the guard's."""
    wanted = set(paths)
    outside = any(p.split("/", 1)[0] != "vllm" for p in wanted)
    rows: dict[str, dict[str, str] | None] = {}
    for record in sorted(tree.glob("*.dist-info/RECORD")) if wanted else []:
        name = record.parent.name
        if name.startswith("patchkit_guard-") or not (outside or name.startswith("vllm-")):
            continue
        try:
            parsed = parse_record(read_record_file(tree, record), only=wanted)
        except (OSError, FetchError):
            rows[name] = None
            continue
        rows[name] = {path: entry for path, (entry, _size) in parsed.items()}
    return Listings(rows)


@frozen
class Record(FrozenValue):
    """One RECORD file: path -> 'algo=urlsafe-b64-digest', for the entries whose algorithm wheels
    allow (record.HASHES); the others are kept apart, not trusted."""

    label: str  # how results name it
    hashes: dict[str, str]
    untrusted: dict[str, str] = field(default_factory=dict)  # path -> the algorithm wheels do not allow
    # a build patchkit labelled (vllm-0.16.0+patchkit.eagle3.dist-info): it lists the patched files,
    # so a file that matches it is no evidence of stock, with or without the wheel's provenance
    patched_wheel: bool = False

    def matches(self, path: str, data: bytes) -> bool:
        entry, algorithm = self.hashes[path], record_algorithm(self.hashes[path])
        if algorithm == "sha256":  # the digest the plan's record already took of these bytes (state.sha256)
            return record_digest(bytes.fromhex(str(sha256(data))), algorithm) == entry
        return record_hash(data, algorithm) == entry

    def why_unlisted(self, path: str) -> str:
        """Why this RECORD cannot vouch for a path it has no trusted entry for."""
        if self.untrusted.get(path) == TWICE:
            return f"{self.label} lists it twice, with different hashes: neither is evidence"
        if self.untrusted.get(path) == "":  # a row `path,,` (RECORD's own row has one): listed, never checked
            return f"{self.label} lists it without a hash: no evidence of its bytes"
        if path in self.untrusted:
            return (
                f"{self.label} gives it a {self.untrusted[path]} hash, which a wheel's RECORD may not use "
                f"({allowed_hashes()}): not trusted"
            )
        return f"not listed in {self.label}"


def parsed_record(data: bytes, label: str, only: Collection[str] | None = None) -> Record | None:
    rows = _rows(data)
    if rows is None:
        return None
    # (path -> hash entry, for the algorithms wheels allow; path -> any other algorithm)
    trusted, untrusted = {}, {}
    for name in rows if only is None else sorted(set(only) & rows.keys()):
        digest = rows[name][0]
        algorithm, equals, _ = digest.partition("=")
        if equals or digest in (TWICE, ""):
            if algorithm in HASHES:
                trusted[name] = digest
            else:
                untrusted[name] = algorithm
    return Record(label, hashes=trusted, untrusted=untrusted)


def parse_record_once(data: bytes) -> dict[str, tuple[str, str]]:
    """parse_record(data, once=True), kept for the run's checks of the same bytes (a wheel build
    parses its stock RECORD, then the integrity check reads it): without a path listed twice, the
    rows are the same either way."""
    rows = parse_record(data, once=True)
    _kept[data] = rows
    return rows


def _rows(data: bytes) -> dict[str, tuple[str, str]] | None:
    """A RECORD's rows (parse_record), or None for a RECORD csv cannot read. Kept for the run: the
    target's RECORD and the fetch cache's are often the same bytes (a tree laid out from the
    cache), and each set's checks ask for their own files of it: parsed once."""
    if data not in _kept:
        try:
            _kept[data] = parse_record(data)
        except FetchError:
            _kept[data] = None
    while len(_kept) > 4:  # the oldest first: a run reads a few RECORDs
        del _kept[next(iter(_kept))]
    return _kept.get(data)


_kept: dict[bytes, dict[str, tuple[str, str]] | None] = {}


def local_label(dist_info: str) -> str:
    """The local label of a vLLM dist-info's version (`vllm-0.16.0+corp1.dist-info`: corp1), or ""."""
    return dist_info.removesuffix(".dist-info").partition("+")[2]


def labelled_by_patchkit(dist_info: str) -> bool:
    """Whether a vLLM dist-info's name carries the local label `patchkit wheel` gives (`+patchkit.…`)."""
    label = dist_info.lower().removesuffix(".dist-info").partition("+")[2]
    return "patchkit" in label.replace("_", ".").split(".")
