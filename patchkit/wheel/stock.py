"""The stock wheel of a vLLM release, whole, from the index pip is configured with: the input of
`patchkit wheel VERSION`.

The file is the one pip would install on this machine (the first of `packaging.tags.sys_tags()` a
wheel of the release carries), or on `--platform TAG` (that platform tag exactly, as pip's own
--platform, and pure-Python wheels). It is downloaded once into the cache:

    <cache>/wheels/<version>/<wheel file>        the wheel, checked against the index's sha256
    <cache>/wheels/<version>/<wheel file>.json   where it came from: url, index, that sha256
    <cache>/wheels/<version>/.lock               one download at a time

    <cache>/wheels/<version>/<wheel file>.seal   the file's identity when it last hashed true, sealed

The cache is untrusted input: on every reuse the .json is checked for its shape and the wheel,
opened without following a symlink, must still hash to the sha256 it records; anything else is
removed (never a symlink's target) and downloaded again. Hashing 500 MB on every use is most of a
`patchkit wheel VERSION`, so a wheel that hashed true gets a .seal: its identity (device, inode,
size, mtime and ctime in ns), sealed with this user's key (patchkit.base.seal) together with the sha256.
While the open file still has that identity it is the file that was hashed: any write, a rename
over it, a chmod or utime changes its ctime, which no one can set back. A seal is only written for
a file whose ctime is older than a timestamp tick can hide (SEAL_AFTER_NS), and a forged, stale or
foreign seal only costs a hash. The index's page and the network are used only when the cache
holds no fitting wheel.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

from packaging import tags

from patchkit.base import seal
from patchkit.base.errors import BadInput, FetchError
from patchkit.base.fsutil import Identity, file_identity, json_text, load_json_text
from patchkit.base.hashing import stream_sha256
from patchkit.base.usercache import cache_dir
from patchkit.fetch import (
    net,  # called as net.*, so that a test can stub the network in one place
    origin,
)
from patchkit.fetch.cache import (
    PROJECT,
    Damaged,
    cache_write_error,
    clear_non_directories,
    entry_lock,
    normalize_version,
    read_regular,
    remove_entry,
    without_userinfo,
    write_cached,
)
from patchkit.fetch.download import Transferred, download_wheel
from patchkit.fetch.net import Progress
from patchkit.fetch.pipconfig import PipSettings
from patchkit.fetch.published import (
    SIDECAR_SEAL_KIND,
    WHEEL_RECORD_SCHEMA,
    Pin,
    Unbelieved,
    other_file,
    pinned_sha256,
    wheel_record,
)
from patchkit.fetch.wheel_choice import check_wheel_name, find_wheel, vllm_wheel_tags

LOCK_FILE = ".lock"
LOCK_TIMEOUT = 3600.0  # another process may be downloading ~500 MB
MAX_SEAL_BYTES = 4 << 10
SEAL_KIND = "stock-wheel"
SEAL_AFTER_NS = 2_000_000_000  # a change within one timestamp tick of the last could keep the ctime
_SHA256 = re.compile(r"[0-9a-f]{64}")


def stock_wheel(
    version: str,
    *,
    platform: str | None = None,
    say: Progress | None = None,
    warn: Progress | None = None,
    on_bytes: Transferred | None = None,
) -> Path:
    """The path of the stock wheel of vLLM `version` in the cache, downloaded first if the cache has
    no intact one that fits this machine (or `platform`). `say` gets progress lines, `warn` what
    was wrong with the cache, `on_bytes` the download's bytes (a progress bar)."""
    return checked_stock_wheel(version, platform=platform, say=say, warn=warn, on_bytes=on_bytes)[0]


def checked_stock_wheel(
    version: str,
    *,
    platform: str | None = None,
    say: Progress | None = None,
    warn: Progress | None = None,
    on_bytes: Transferred | None = None,
) -> tuple[Path, Identity]:
    """stock_wheel's path, and the identity of the file that was checked: whoever opens the path
    next holds the file it opened to it (a file replaced in between is not the one checked)."""
    ver = normalize_version(version)
    say = say or (lambda _message: None)
    warn = _once(warn or say)  # the cache is read twice (before the lock and under it): one warning each
    priority = tag_priority(platform)
    root = wheels_root(ver, warn)
    cached = _best_cached(root, ver, priority, say, warn)
    if cached is not None:
        return cached
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cache_write_error(root, e) from None
    with _lock(root, ver, say):
        cached = _best_cached(root, ver, priority, say, warn)  # another process may have fetched it meanwhile
        return cached if cached is not None else _download(root, ver, priority, platform, say, on_bytes)


def _once(warn: Progress) -> Progress:
    """`warn`, saying each message once."""
    said: set[str] = set()

    def once(message: str) -> None:
        if message not in said:
            said.add(message)
            warn(message)

    return once


# --------------------------------------------------------------------------- which wheel


def tag_priority(platform: str | None) -> dict[Any, int]:
    """Each tag this machine installs (or `platform` with this interpreter), to its rank in pip's
    order: lower is preferred."""

    if platform is None:
        ordered = list(tags.sys_tags())
    else:
        ordered = [*tags.cpython_tags(platforms=[platform]), *tags.compatible_tags(platforms=[platform])]
    priority: dict[Any, int] = {}
    for i, tag in enumerate(ordered):
        priority.setdefault(tag, i)
    return priority


def wheel_priority(filename: str, version: str, priority: dict[Any, int]) -> int | None:
    """The rank of a wheel file of vLLM `version` among the tags (None: not that release's wheel,
    or not installable there)."""
    file_tags = vllm_wheel_tags(filename, version)
    if file_tags is None:
        return None
    ranks = [priority[t] for t in file_tags if t in priority]
    return min(ranks) if ranks else None


def _describe(platform: str | None) -> str:
    return f"for {platform}" if platform else "installable on this machine"


# --------------------------------------------------------------------------- the cache


def wheels_root(ver: str, warn: Progress) -> Path:
    """<cache>/wheels/<ver>/: a symlink or any other file in place of either directory is removed
    (the link itself), so nothing is read or written outside the cache."""
    root = cache_dir() / "wheels" / ver
    clear_non_directories([root.parent, root], warn)
    return root


def _best_cached(
    root: Path, ver: str, priority: dict[Any, int], say: Progress, warn: Progress
) -> tuple[Path, Identity] | None:
    """The cached wheel that fits best and is intact (its recorded sha256), with its identity, or
    None. Entries that are damaged are removed, with a warning."""
    try:
        names = sorted(p.name for p in root.iterdir() if p.name.endswith(".whl.json"))
    except OSError:
        return None
    ranked = []
    for sidecar in names:
        wheel = sidecar.removesuffix(".json")
        rank = wheel_priority(wheel, ver, priority)
        if rank is not None:
            ranked.append((rank, wheel))
    for _rank, wheel in sorted(ranked):
        checked = _check_cached(root, ver, wheel)
        if isinstance(checked, Unbelieved):
            warn(f"{root / wheel}.json {checked}: checking the wheel against the index")
            continue  # _download keeps the wheel if it has the index's sha256
        if isinstance(checked, tuple):
            ident, record = checked
            pinned_sha256(ver, wheel)  # the wheel cache's record against the release cache's: one file
            if _from_a_configured_index(root, ver, wheel, record, say, warn):
                return root / wheel, ident
            continue  # _download keeps the wheel if the index pip names now has the same file
        warn(f"the cached wheel {root / wheel} is damaged ({checked}): downloading it again")
        for name in (wheel, f"{wheel}.json", f"{wheel}.seal"):
            remove_entry(root / name)
    return None


def _check_cached(root: Path, ver: str, wheel: str) -> tuple[Identity, dict[str, Any]] | str:
    """The identity of a cached wheel that is intact and its .json, else why it cannot be used: its
    .json (Unbelieved), the file, its sha256."""
    try:
        record = wheel_record(root, ver, wheel)
    except FileNotFoundError:
        return Unbelieved("is missing")
    except (Damaged, ValueError, RecursionError) as e:  # Damaged names the file: the warning does already
        return Unbelieved(str(e).removeprefix(f"{wheel}.json "))
    if isinstance(record, Unbelieved):
        return record
    try:
        checked = _intact(root, f"{ver}/{wheel}", wheel, record["sha256"])
    except FileNotFoundError:
        return f"{wheel} is missing"
    return checked if isinstance(checked, str) else (checked, record)


def vouched_cached_wheel(version: str, platform: str | None) -> Path | None:
    """A wheel of `version` in the wheel cache that fits this machine (or `platform`) and hashes to
    the sha256 patchkit recorded for its name (sealed, and no record saying otherwise): `patchkit
    wheel FILE` holds it to that sha256, so it builds with no index to ask. Else None."""
    ver = normalize_version(version)
    priority = tag_priority(platform)
    root = cache_dir() / "wheels" / ver
    try:
        names = os.listdir(root)
    except OSError:
        return None
    ranked = sorted((rank, name) for name in names if (rank := wheel_priority(name, ver, priority)) is not None)
    for _rank, name in ranked:
        with suppress(OSError, BadInput, Damaged):
            pin = pinned_sha256(ver, name)
            if pin is not None and not isinstance(_intact(root, f"{ver}/{name}", name, pin.sha256), str):
                return root / name
    return None


def is_sealed_cached(version: str, wheel: str, sha256: str, fd: int) -> bool:
    """Whether the open file is the cache's own wheel of that name, still the file that hashed to
    `sha256` (its .seal names the open file's identity): `wheel FILE` of it need not hash it again."""
    ver = normalize_version(version)
    root = cache_dir() / "wheels" / ver
    return _sealed_identity(root, f"{ver}/{wheel}", wheel, sha256) == file_identity(os.fstat(fd))


WHEEL_FILES = "wheel-files"  # the sha256 of each wheel FILE outside the cache, keyed by its path
FILE_SEAL_KIND = "wheel-file-sha256"
# A labelled wheel FILE each of whose members hashed true to its RECORD row, keyed by its path
MEMBERS_SEAL_KIND = "wheel-file-members-1"
MEMBERS_SUFFIX = ".members.json"


def known_sha256(path: Path, fd: int) -> str | None:
    """The sha256 this user's patchkit sealed for the wheel FILE at `path`, when the open file is
    still the one it hashed (its identity: device, inode, size, mtime and ctime, which no one sets
    back): `wheel FILE` of an unchanged file need not hash it again. The entry is untrusted: read
    bounded, never through a symlink, believed only when its seal verifies with this user's key."""
    entry = _file_entry(path, ".json", FILE_SEAL_KIND, "sha256", file_identity(os.fstat(fd)))
    return entry if entry is not None and _SHA256.fullmatch(entry) else None


def remember_sha256(path: Path, fd: int, sha256: str, before: Identity) -> None:
    """Seal `sha256` for the wheel FILE at `path` when the open file was not changed while it was
    hashed, nor within a timestamp tick (a write then could leave its ctime as it was)."""
    _write_file_entry(path, fd, ".json", FILE_SEAL_KIND, "sha256", sha256, before)


def members_vouched(path: Path, fd: int, ident: Identity, fingerprint: str) -> bool:
    """Whether this user's patchkit sealed, for the wheel FILE at `path`, that each of its members
    hashed true to its RECORD row while the file had the identity `ident` (the open file's now too)
    and this central directory and RECORD (`fingerprint`): then they need not be inflated again.
    Any write, a replacement or a touch changes the identity; the entry is read as known_sha256's."""
    if not fingerprint or file_identity(os.fstat(fd)) != ident:
        return False
    return _file_entry(path, MEMBERS_SUFFIX, MEMBERS_SEAL_KIND, "fingerprint", ident) == fingerprint


def remember_members(path: Path, fd: int, fingerprint: str, before: Identity) -> None:
    """Seal that every member of the wheel FILE at `path` hashed true to its RECORD, when the open
    file is still `before` (the identity it had when it was opened) and older than a timestamp tick."""
    if fingerprint:
        _write_file_entry(path, fd, MEMBERS_SUFFIX, MEMBERS_SEAL_KIND, "fingerprint", fingerprint, before)


def _file_entry(path: Path, suffix: str, kind: str, key: str, ident: Identity) -> str | None:
    """The sealed `key` of the wheel-files entry of `path`, when its identity is `ident`."""
    name = _file_key(path, suffix)
    try:
        entry = load_json_text(read_regular(cache_dir() / WHEEL_FILES, name, limit=MAX_SEAL_BYTES))
        value, sealed_ident = entry[key], tuple(entry["identity"])
        if not isinstance(value, str) or len(sealed_ident) != 5:
            return None
        if not all(type(n) is int for n in sealed_ident) or sealed_ident != ident:
            return None
        if seal.sealed(kind, f"{path}\0{name}", _file_payload(key, value, sealed_ident), entry.get("seal")):
            return value
    except (OSError, Damaged, ValueError, RecursionError, TypeError, KeyError):
        pass
    return None


def _write_file_entry(path: Path, fd: int, suffix: str, kind: str, key: str, value: str, before: Identity) -> None:
    if file_identity(os.fstat(fd)) != before or time.time_ns() - before[4] <= SEAL_AFTER_NS:
        return
    name = _file_key(path, suffix)
    mark = seal.seal(kind, f"{path}\0{name}", _file_payload(key, value, before))
    root = cache_dir() / WHEEL_FILES
    with suppress(FetchError, OSError):  # a cache that cannot be written: the file is hashed again next time
        root.mkdir(parents=True, exist_ok=True)
        if root.is_symlink() or not root.is_dir():
            return  # never written through a link
        entry = root / name
        if entry.is_symlink() or (entry.exists() and not entry.is_file()):
            remove_entry(entry)
        write_cached(
            entry, (json_text({key: value, "identity": list(before), "seal": mark}, "a cache entry") + "\n").encode()
        )


def _file_payload(key: str, value: str, ident: Identity) -> bytes:
    return seal.canonical({key: value, "identity": list(ident)})


def _file_key(path: Path, suffix: str = ".json") -> str:
    """The entry's name for a wheel FILE: its absolute path's sha256 (any path, one safe name)."""
    return hashlib.sha256(os.fsencode(path)).hexdigest() + suffix


def _from_a_configured_index(
    root: Path, ver: str, wheel: str, record: dict[str, Any], say: Progress, warn: Progress
) -> bool:
    """Whether the cached wheel came from an index pip is configured with now (origin.py); its
    record learns pip's settings when pip names its index."""

    def remember(settings: PipSettings) -> None:
        with suppress(FetchError):  # a cache that cannot be written: pip is asked again next time
            _write_sidecar(root, ver, wheel, {**record, "pip_config": origin.sealed_settings(settings)})

    cached = f"the cached wheel {wheel}"
    return origin.from_a_configured_index(
        cached, "the wheel", str(record.get("index")), record.get("pip_config"), say, warn, remember
    )


def _intact(root: Path, sealed_name: str, wheel: str, sha256: str) -> Identity | str:
    """The wheel's identity when it is the file its seal names or hashes to `sha256` (then sealed
    for next time), else why not."""
    try:
        fd = os.open(root / wheel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        return f"{wheel} is not a regular file ({e.strerror})"
    with os.fdopen(fd, "rb") as handle:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return f"{wheel} is not a regular file"
        if _sealed_identity(root, sealed_name, wheel, sha256) == file_identity(before):
            return file_identity(before)
        if stream_sha256(handle) != sha256:
            return "its sha256 is not the one the download was checked against"
        if file_identity(os.fstat(fd)) == file_identity(before) and time.time_ns() - before.st_ctime_ns > SEAL_AFTER_NS:
            _write_seal(root, sealed_name, wheel, sha256, file_identity(before))
    return file_identity(before)


def _seal_payload(sha256: str, ident: Identity) -> bytes:
    return seal.canonical({"sha256": sha256, "identity": list(ident)})


def _sealed_identity(root: Path, sealed_name: str, wheel: str, sha256: str) -> Identity | None:
    """The identity the wheel's .seal records for `sha256`, if this user's patchkit sealed it."""
    try:
        entry = load_json_text(read_regular(root, f"{wheel}.seal", limit=MAX_SEAL_BYTES))
        ident = tuple(entry["identity"])
        if not all(type(n) is int for n in ident) or len(ident) != 5:
            return None
        if seal.sealed(SEAL_KIND, sealed_name, _seal_payload(sha256, ident), entry.get("seal")):
            return ident
    except (OSError, Damaged, ValueError, RecursionError, TypeError, KeyError):
        pass
    return None


def _write_seal(root: Path, sealed_name: str, wheel: str, sha256: str, ident: Identity) -> None:
    entry = {"identity": list(ident), "seal": seal.seal(SEAL_KIND, sealed_name, _seal_payload(sha256, ident))}
    path = root / f"{wheel}.seal"
    with suppress(FetchError, OSError):  # a cache that cannot be written: the wheel is hashed again next time
        if path.is_symlink() or (path.exists() and not path.is_file()):
            remove_entry(path)  # a directory in its place would stay, and every run hash the wheel
        write_cached(path, (json_text(entry, "a cache entry") + "\n").encode())


def _lock(root: Path, ver: str, say: Progress) -> AbstractContextManager[None]:
    lock_file = root / LOCK_FILE
    try:
        if lock_file.is_symlink() or (lock_file.exists() and not lock_file.is_file()):
            remove_entry(lock_file)  # never opened for writing through a link
    except OSError as e:
        raise cache_write_error(lock_file, e) from None
    return entry_lock(
        root / LOCK_FILE, LOCK_TIMEOUT, f"waiting for another patchkit process downloading vLLM {ver}...", say
    )


# --------------------------------------------------------------------------- the download


def _download(
    root: Path,
    ver: str,
    priority: dict[Any, int],
    platform: str | None,
    say: Progress,
    on_bytes: Transferred | None,
) -> tuple[Path, Identity]:
    settings = net.pip_settings()
    session = net.make_session(settings, None)
    try:
        chosen = find_wheel(ver, settings, session, say, rank=_ranker(priority), wanted=_describe(platform))
        check_wheel_name(chosen["wheel"])
        pin = pinned_sha256(ver, chosen["wheel"])
        if pin is not None and chosen["sha256"] and chosen["sha256"].lower() != pin.sha256:
            raise other_file(pin, chosen["wheel"], f"{chosen['index']} serves", chosen["sha256"].lower())
        dest = root / chosen["wheel"]
        ident = _index_checked(root, ver, dest.name, chosen["sha256"])
        got: list[str] = []
        if ident is None:
            # The cached file and its records stay until the download passed every check.
            download_wheel(
                session,
                chosen["url"],
                chosen["sha256"],
                dest,
                timeout=settings.timeout,
                say=say,
                on_bytes=on_bytes,
                accept=lambda digest: got.append(_held_to(pin, chosen, digest)),
            )
            remove_entry(root / f"{dest.name}.seal")  # the replaced file's
        remove_entry(root / f"{dest.name}.json")  # whatever is in its place (a fifo, a directory)
    finally:
        session.close()
    # What the index gave (or, without one, what was downloaded: damage is still caught on reuse).
    digest = (chosen["sha256"] or "").lower() or got[0]
    if ident is None:  # the identity of the bytes that hash to it, not of whatever the path holds later
        ident = _checked_identity(root, ver, dest, digest)
    sidecar = {
        "schema": WHEEL_RECORD_SCHEMA,
        "project": PROJECT,
        "version": ver,
        **chosen,
        "sha256": digest,
        "url": without_userinfo(chosen["url"]),
        "pip_config": origin.sealed_settings(settings),
    }
    _write_sidecar(root, ver, dest.name, sidecar)
    return dest, ident


def _held_to(pin: Pin | None, chosen: dict[str, Any], digest: str) -> str:
    """`digest`, a download's sha256, if it is the one patchkit recorded for its name (an index that
    gives no sha256 is held to it here), else the refusal."""
    if pin is not None and digest != pin.sha256:
        raise other_file(pin, chosen["wheel"], f"{chosen['index']} served", digest)
    return digest


def _write_sidecar(root: Path, ver: str, wheel: str, record: dict[str, Any]) -> None:
    sidecar = {k: v for k, v in record.items() if k != "seal"}
    sidecar["seal"] = seal.seal(SIDECAR_SEAL_KIND, f"{ver}/{wheel}", seal.canonical(sidecar))
    write_cached(
        root / f"{wheel}.json", (json_text(sidecar, "a cache entry", indent=1, sort_keys=True) + "\n").encode()
    )


def _checked_identity(root: Path, ver: str, dest: Path, digest: str) -> Identity:
    try:
        checked = _intact(root, f"{ver}/{dest.name}", dest.name, digest)
    except OSError as e:
        raise cache_write_error(dest, e) from None
    if isinstance(checked, str):
        raise FetchError(
            f"the downloaded wheel {dest} changed after it was checked ({checked})",
            hint="something else writes into patchkit's cache: stop it, then run the command again",
        )
    return checked


def _index_checked(root: Path, ver: str, wheel: str, sha256: str | None) -> Identity | None:
    """The identity of the cached `wheel` (its record unsealed) when it is the file the index names
    (no download then), else None."""
    if not sha256 or not _SHA256.fullmatch(sha256.lower()):
        return None
    try:
        checked = _intact(root, f"{ver}/{wheel}", wheel, sha256.lower())
    except (OSError, Damaged):
        return None
    return None if isinstance(checked, str) else checked


def _ranker(priority: dict[Any, int]) -> Callable[[str, str], int | None]:
    return lambda filename, version: wheel_priority(filename, version, priority)
