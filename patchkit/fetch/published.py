"""A release's published wheel of one file name (`vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl`):
its sha256 and RECORD as the index publishes them, what `patchkit wheel FILE` holds a wheel that
claims to be that release to.

From the release cache first (no network, no lock): when it took that very wheel, it holds the
index's sha256 of the file and the RECORD it read out of it. Otherwise the index pip is
configured with: its page gives the file's sha256; the RECORD is read from the wheel's tail by
range requests (one request for vLLM's wheels), and only when asked for (a file whose sha256 is
the index's needs no RECORD).

And what patchkit recorded for a file name (pinned_sha256): the sha256 the wheel cache's sealed
.json and the release cache's sealed release.json give it. A recorded sha256 wins over any index:
another file under that name is refused by every fetch and build (other_file).
"""

from __future__ import annotations

import re
import shlex
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.base import hints, seal
from patchkit.base.errors import BadInput, FetchError
from patchkit.base.fsutil import load_json_text
from patchkit.base.usercache import cache_dir
from patchkit.fetch import net  # called as net.*, so that a test can stub the network in one place
from patchkit.fetch.cache import (
    PROJECT,
    Damaged,
    cached_record,
    load_state,
    normalize_version,
    read_regular,
    release_root,
    state_sealed,
)
from patchkit.fetch.extract import find_record_name
from patchkit.fetch.index import read_project_pages
from patchkit.fetch.net import redact
from patchkit.fetch.ranges import RangeUnavailable, RemoteWheel

# The wheel cache's record of a downloaded wheel (<cache>/wheels/<version>/<wheel>.json, patchkit.wheel.stock):
# read here too, as the release cache's fetch holds a file name to what it records.
WHEEL_RECORD_SCHEMA = 1
MAX_SIDECAR_BYTES = 64 << 10
SIDECAR_SEAL_KIND = "stock-wheel-sidecar"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass
class Published:
    """The published wheel of a file name: where it was learnt, its sha256 (None: the index gives
    none), its RECORD when already read, and its URL (to read the RECORD from)."""

    wheel: str
    source: str  # where it was learnt, as the refusal says it: "cached from INDEX", "on INDEX"
    sha256: str | None
    record: bytes | None = None
    url: str | None = None


def cached_published(version: str, wheel: str) -> Published | None:
    """The release cache's answer when it took `wheel` itself (its RECORD intact, its release.json
    sealed by this user's patchkit), else None."""
    ver = normalize_version(version)
    try:
        state = load_state(release_root(ver), ver)
    except Damaged:
        return None
    if state is None or state.get("wheel") != wheel or not state_sealed(state):
        return None
    record = cached_record(ver)
    if record is None:
        return None
    sha256 = state.get("sha256")
    return Published(wheel, f"cached from {state.get('index')}", sha256.lower() if sha256 else None, record)


def recorded_release_sha256(version: str, wheel: str) -> tuple[str, str] | None:
    """The sha256 the release cache recorded for `wheel` when this user's patchkit sealed its
    release.json, with the index it came from; else None."""
    ver = normalize_version(version)
    try:
        state = load_state(release_root(ver), ver)
    except Damaged:
        return None
    if state is None or state.get("wheel") != wheel or not state.get("sha256") or not state_sealed(state):
        return None
    return str(state["sha256"]).lower(), str(state.get("index"))


def indexed_published(version: str, wheel: str) -> Published:
    """The index's file named `wheel`: its sha256 and URL. FetchError when no index pip names can be
    read (IndexNotRead for only file:// indexes and find-links), or none has that file."""
    ver = normalize_version(version)
    settings, pages = read_project_pages()
    for index, page in pages:
        for pkg in page.packages:
            if pkg.filename == wheel:
                sha256 = (pkg.digests or {}).get("sha256")
                url = net.with_index_credentials(pkg.url, settings.index_urls)
                return Published(wheel, f"on {redact(index)}", sha256.lower() if sha256 else None, url=url)
    where = ", ".join(redact(index) for index, _page in pages)
    raise FetchError(
        f"{where} has no file {wheel}: it is not a published wheel of vLLM {ver}",
        hint="give its own build a local version label (0.16.0+site), or build from the release's wheel",
    )


def read_record(published: Published, version: str) -> bytes:
    """The published wheel's RECORD, read from the index by range requests when not known already."""
    if published.record is not None:
        return published.record
    if published.url is None:
        raise FetchError(f"no URL of {published.wheel} to read its RECORD from")
    settings = net.pip_settings()
    session = net.make_session(settings, None)
    try:
        remote = RemoteWheel(published.url, session, settings.timeout)
        try:
            names = [info.filename for info in remote.infolist() if not info.is_dir()]
            wanted = find_record_name(names, normalize_version(version), published.wheel)
            infos = [info for info in remote.infolist() if info.filename == wanted]
            published.record = remote.read(infos, _quiet)[wanted]
        finally:
            remote.close()
    except RangeUnavailable as exc:
        raise FetchError(
            f"cannot read the RECORD of {published.wheel} {published.source} by range requests ({exc})",
            hint=f"build from the release's wheel: {hints.command('wheel', version)} downloads it",
        ) from None
    finally:
        session.close()
    return published.record


def _quiet(_message: str) -> None:
    pass


# --------------------------------------------------------------------------- what patchkit recorded for a name


class Unbelieved(str):
    """Why a wheel's .json is not believed (not patchkit's, not sealed, not a regular file): the
    index's sha256 then decides whether the wheel, which may well be intact, is kept."""


def wheel_record(root: Path, ver: str, wheel: str) -> dict[str, Any] | Unbelieved:
    """The wheel's sealed .json, with the sha256 the download was checked against (whoever writes the
    cache could pair any wheel with its sha256: only a record this user's patchkit sealed is
    believed), else why not."""
    record = load_json_text(read_regular(root, f"{wheel}.json", limit=MAX_SIDECAR_BYTES))
    expected = {"schema": WHEEL_RECORD_SCHEMA, "project": PROJECT, "version": ver, "wheel": wheel}
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in expected.items()):
        return Unbelieved("is not what patchkit wrote for it")
    if not isinstance(record.get("sha256"), str) or not _SHA256.fullmatch(record["sha256"]):
        return Unbelieved("has no sha256")
    unsealed = {k: v for k, v in record.items() if k != "seal"}
    if not seal.sealed(SIDECAR_SEAL_KIND, f"{ver}/{wheel}", seal.canonical(unsealed), record.get("seal")):
        return Unbelieved("was not sealed by this user's patchkit")
    return record


@dataclass(frozen=True)
class Pin:
    """A sha256 this user's patchkit recorded (sealed) for a wheel's file name: where (as a refusal
    names it) and the file to remove to forget it."""

    sha256: str
    source: str
    record: Path


def recorded_sha256s(version: str, wheel: str) -> list[Pin]:
    """Every sha256 patchkit recorded for the file name `wheel`: the wheel cache's .json (the index's
    answer when it downloaded that file) and the release cache's release.json, each only if sealed
    (whoever can write the cache could plant any other)."""
    ver = normalize_version(version)
    pins = []
    with suppress(OSError, Damaged, ValueError, RecursionError):
        record = wheel_record(cache_dir() / "wheels" / ver, ver, wheel)
        if not isinstance(record, Unbelieved):
            where = f"the wheel cache (from {record.get('index')})"
            pins.append(Pin(str(record["sha256"]), where, cache_dir() / "wheels" / ver / f"{wheel}.json"))
    released = recorded_release_sha256(ver, wheel)
    if released is not None:
        sha256, index = released
        pins.append(Pin(sha256, f"the release cache (from {index})", release_root(ver) / "release.json"))
    return pins


def pinned_sha256(version: str, wheel: str) -> Pin | None:
    """The sha256 patchkit recorded for `wheel`, None when it recorded none; BadInput when two
    records disagree: two indexes served different files under one name."""
    pins = recorded_sha256s(version, wheel)
    for other in pins[1:]:
        if other.sha256 != pins[0].sha256:
            raise other_file(pins[0], wheel, f"{other.source} records", other.sha256, remove=other.record)
    return pins[0] if pins else None


def other_file(pin: Pin, wheel: str, holder: str, sha256: str, *, remove: Path | None = None) -> BadInput:
    """The refusal of a file that is not the one `pin` recorded under its name: both sources named,
    and what to do (forget the record of the one not trusted)."""
    forget = f"{shlex.quote(str(pin.record))}" + (f" or {shlex.quote(str(remove))}" if remove else "")
    return BadInput(
        f"{holder} {wheel} with sha256 {sha256[:16]}..., but {pin.source} recorded {pin.sha256[:16]}... "
        "for that name: not the same file; refusing it",
        hint="two indexes serve different files under one name: point pip at the one you trust; "
        f"to drop patchkit's record of the other, remove {forget} and run the command again",
    )
