"""`patchkit wheel FILE` of a wheel that claims to be a release (a version without a local label):
every member, and the member list, held to the published wheel of that file name.

The wheel's own RECORD vouches for nothing (whoever wrote the wheel wrote it): a stock-named wheel
whose `vllm/__init__.py` puts another vllm first, listed truthfully in its own RECORD, would
otherwise build, and the patch never run. So the whole file is hashed once (vLLM's 0.5 GB: about a
second, on a thread beside the copies and the checks) and compared with the published sha256 (the
sha256 patchkit recorded for that file name, else the index's: a record wins over any index, and
two that disagree refuse; the cache's own wheel, unchanged since its seal, is not hashed again:
stock.py). Equal: every member is
the published one. Otherwise the published RECORD (the release cache's, else read from the index by
range requests) names what differs: a member missing or extra, a size, a hash the wheel's own
RECORD gives; if that names nothing (the published RECORD copied over other contents, or a re-zip),
every member is inflated and hashed (slow, only for a file that is not the published one byte for
byte). A labelled version (`0.16.0+cu129`) is another build: held to its own RECORD only (build.py
hashes each member against its row).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import BadInput, FetchError
from patchkit.base.fsutil import file_identity
from patchkit.distinfo.record import parse_record, record_algorithm
from patchkit.fetch.published import (
    Published,
    cached_published,
    indexed_published,
    other_file,
    pinned_sha256,
    read_record,
)
from patchkit.wheel import rawzip
from patchkit.wheel.stock import is_sealed_cached, known_sha256, remember_sha256

_CHUNK = 1 << 20
_SHOWN = 3  # members named in the refusal; the rest counted


@dataclass
class Held:
    """What the published wheel says of the file: the same file (`same`), or its RECORD to name what
    differs (`record`, None with `record_error` when it could not be read)."""

    version: str
    source: str
    same: bool
    record: bytes | None = None
    record_error: str | None = None


def claims_a_release(version: Version) -> bool:
    return version.local is None


def file_sha256(fd: int) -> str:
    """The sha256 of the open file, read with pread (the descriptor's offset is the copies')."""
    digest, offset = hashlib.sha256(), 0
    while chunk := os.pread(fd, _CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def held_to_release(version: str, wheel: str, fd: int, label: str, path: Path | None = None) -> Held:
    """The file open as `fd` (named `wheel`; at `path`, a FILE outside the cache whose hash is
    remembered) against the published wheel of that name (on a thread: it says nothing).
    FetchError, with what to do, when no published wheel can be read."""
    pin = pinned_sha256(version, wheel)  # what patchkit recorded for that name wins over any index
    if pin is not None and is_sealed_cached(version, wheel, pin.sha256, fd):
        return Held(version, pin.source, True)  # the cache's file that hashed to it, unchanged since
    sha256 = _sha256_of(fd, path)
    if pin is not None and pin.sha256 == sha256:
        return Held(version, pin.source, True)
    published = cached_published(version, wheel)
    if published is None:
        published = _from_the_index(version, wheel, label)
        if pin is not None and published.sha256 and published.sha256 != pin.sha256:
            raise other_file(pin, wheel, f"{published.source.removeprefix('on ')} serves", published.sha256)
    if published.sha256 == sha256:
        return Held(version, published.source, True)
    try:
        return Held(version, published.source, False, read_record(published, version))
    except FetchError as exc:
        return Held(version, published.source, False, record_error=exc.message)


def _sha256_of(fd: int, path: Path | None) -> str:
    """The open file's sha256: the one sealed for it while it is unchanged, else hashed (and sealed)."""
    known = known_sha256(path, fd) if path is not None else None
    if known is not None:
        return known
    before = file_identity(os.fstat(fd))
    sha256 = file_sha256(fd)
    if path is not None:
        remember_sha256(path, fd, sha256, before)
    return sha256


def _from_the_index(version: str, wheel: str, label: str) -> Published:
    try:
        return indexed_published(version, wheel)
    except FetchError as exc:
        raise FetchError(
            f"cannot hold {label} to vLLM {version}'s published wheel: {exc.message}",
            hint=(exc.hint + "; " if exc.hint else "")
            + f"or run {hints.command('fetch', version)} once where the index can be read",
        ) from None


def refuse_unpublished(
    held: Held,
    label: str,
    members: list[rawzip.Member],
    own_record: dict[str, tuple[str, str]],
    digest_of: Callable[[rawzip.Member, str], str],
    say: Callable[[str], None],
) -> None:
    """BadInput naming the members that are not the published wheel's, unless there are none (a
    re-zip of the same contents). `digest_of(member, algorithm)`: its contents' RECORD hash."""
    if held.same:
        return
    if held.record is None:
        raise _refusal(held, label, [f"its sha256 is not the published one ({held.record_error})"])
    try:
        published = parse_record(held.record)
    except FetchError as exc:
        raise _refusal(held, label, [f"the published RECORD cannot be read ({exc.message})"]) from None
    files = {m.name: m for m in members if not m.is_dir}
    problems = _listed_differences(files, published, own_record)
    if not problems:
        say(f"{label} is not the published file {held.source}: hashing every member against its RECORD")
        problems = _content_differences(files, published, digest_of)
    if problems:
        raise _refusal(held, label, problems)


def _listed_differences(
    files: dict[str, rawzip.Member], published: dict[str, tuple[str, str]], own: dict[str, tuple[str, str]]
) -> list[str]:
    """What the member list, the sizes and the wheel's own RECORD show without inflating anything."""
    problems = []
    for name in sorted(set(files) & set(published)):
        digest, size = published[name]
        own_digest = own.get(name, ("", ""))[0]
        if size.isdigit() and int(size) != files[name].info.file_size:
            problems.append(f"{rawzip.shown(name)} differs (size)")
        elif (
            digest and own_digest and record_algorithm(own_digest) == record_algorithm(digest) and own_digest != digest
        ):
            problems.append(f"{rawzip.shown(name)} differs")
    problems += [f"{rawzip.shown(name)} is not in it" for name in sorted(set(files) - set(published))]
    return problems + [f"{rawzip.shown(name)} is missing" for name in sorted(set(published) - set(files))]


def _content_differences(
    files: dict[str, rawzip.Member],
    published: dict[str, tuple[str, str]],
    digest_of: Callable[[rawzip.Member, str], str],
) -> list[str]:
    """Every member's contents hashed against the published RECORD (all of them inflated: slow)."""
    problems = []
    for name in sorted(set(files) & set(published)):
        digest = published[name][0]
        if digest and digest_of(files[name], record_algorithm(digest)) != digest:
            problems.append(f"{rawzip.shown(name)} differs")
    return problems


def _refusal(held: Held, label: str, problems: list[str]) -> BadInput:
    shown = "; ".join(problems[:_SHOWN]) + (f"; {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else "")
    return BadInput(
        f"{label} is not vLLM {held.version}'s published wheel of that name ({held.source}): {shown}; "
        "refusing the wheel",
        hint=f"{hints.command('wheel', held.version)} downloads the release's own wheel; a build of your own "
        f"needs a local version label ({held.version}+NAME)",
    )
