"""The source distribution of a vLLM release, whole, from the index pip is configured with: vLLM's
own tests ship in it and not in the wheel (`make test-vllm` runs a release's tool-parser tests).

    <cache>/sdists/<version>/vllm-<version>.tar.gz        checked against the index's sha256
    <cache>/sdists/<version>/vllm-<version>.tar.gz.json   that sha256 and where it came from, sealed
    <cache>/sdists/<version>/.lock                        one download at a time

The cache is untrusted input: on every reuse the .json must carry this user's seal and the file,
opened without following a symlink, must hash to the sha256 it records (about 30 MB: a tenth of a
second); anything else is removed and downloaded again. A cached sdist needs no network.
"""

from __future__ import annotations

import re
from contextlib import suppress
from pathlib import Path
from typing import Any

from packaging.version import Version

from patchkit.base import seal
from patchkit.base.errors import FetchError
from patchkit.base.fsutil import json_text, load_json_text
from patchkit.base.usercache import cache_dir
from patchkit.fetch import net  # called as net.*, so that a test can stub the network in one place
from patchkit.fetch.cache import (
    PROJECT,
    Damaged,
    cache_write_error,
    clear_non_directories,
    entry_lock,
    file_sha256,
    normalize_version,
    read_regular,
    remove_entry,
    without_userinfo,
    write_cached,
)
from patchkit.fetch.download import download_wheel
from patchkit.fetch.index import no_project_error, project_pages
from patchkit.fetch.net import Progress, redact

SCHEMA = 1
SEAL_KIND = "sdist-sidecar"
LOCK_TIMEOUT = 1800.0  # another process may be downloading it
MAX_SIDECAR_BYTES = 64 << 10
_SHA256 = re.compile(r"[0-9a-f]{64}")


def release_sdist(version: str, *, say: Progress | None = None, warn: Progress | None = None) -> Path:
    """The path of vLLM `version`'s sdist in the cache, downloaded first if the cache has no intact one."""
    ver = normalize_version(version)
    say = say or (lambda _message: None)
    warn = warn or say
    root = cache_dir() / "sdists" / ver
    name = f"{PROJECT}-{ver}.tar.gz"
    clear_non_directories([root.parent, root], warn)
    if _intact(root, ver, name, warn):
        return root / name
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cache_write_error(root, e) from None
    waiting = f"waiting for another patchkit process downloading {name}..."
    with entry_lock(root / ".lock", LOCK_TIMEOUT, waiting, say):
        if not _intact(root, ver, name, warn):  # another process may have fetched it meanwhile
            _download(root, ver, name, say)
    return root / name


def _intact(root: Path, ver: str, name: str, warn: Progress) -> bool:
    """Whether the cached sdist hashes to the sha256 its sealed .json records; a damaged pair is removed."""
    try:
        record = load_json_text(read_regular(root, f"{name}.json", limit=MAX_SIDECAR_BYTES))
    except FileNotFoundError:
        return False
    except (Damaged, OSError, ValueError, RecursionError) as e:
        warn(f"{root / name}.json cannot be read ({e}): downloading the sdist again")
        return _forget(root, name)
    unsealed = {k: v for k, v in record.items() if k != "seal"} if isinstance(record, dict) else None
    if unsealed is None or not seal.sealed(SEAL_KIND, f"{ver}/{name}", seal.canonical(unsealed), record.get("seal")):
        warn(f"{root / name}.json was not written by this user's patchkit: downloading the sdist again")
        return _forget(root, name)
    try:
        same = file_sha256(root / name) == record.get("sha256")
    except (Damaged, FileNotFoundError) as e:
        same, problem = False, str(e)
    else:
        problem = "its sha256 is not the one the download was checked against"
    if not same:
        warn(f"the cached sdist {root / name} is damaged ({problem}): downloading it again")
        return _forget(root, name)
    return True


def _forget(root: Path, name: str) -> bool:
    for entry in (name, f"{name}.json"):
        with suppress(FileNotFoundError):
            remove_entry(root / entry)  # a symlink: the link itself
    return False


def _forget_record(root: Path, name: str) -> None:
    """The sdist's .json, just before a checked download replaces the file it named."""
    with suppress(FileNotFoundError):
        remove_entry(root / f"{name}.json")


def _download(root: Path, ver: str, name: str, say: Progress) -> None:
    settings = net.pip_settings()
    session = net.make_session(settings, None)
    try:
        chosen = _find(ver, name, settings, session, say)
        # what the cache holds (an sdist no record names) stays until the new one passed its checks
        download_wheel(
            session,
            chosen["url"],
            chosen["sha256"],
            root / name,
            timeout=settings.timeout,
            say=say,
            accept=lambda _digest: _forget_record(root, name),
        )
    finally:
        session.close()
    sidecar = {"schema": SCHEMA, "project": PROJECT, "version": ver, **chosen, "url": without_userinfo(chosen["url"])}
    sidecar["seal"] = seal.seal(SEAL_KIND, f"{ver}/{name}", seal.canonical(sidecar))
    write_cached(root / f"{name}.json", (json_text(sidecar, "a cache entry", indent=1, sort_keys=True) + "\n").encode())


def _find(ver: str, name: str, settings: Any, session: Any, say: Progress) -> dict[str, str]:
    """The index's file `name` (the release's sdist): url, index, sha256; the primary index and an
    unyanked file first. Without a sha256 from the index it is refused: nothing else can check it."""
    pages, errors = project_pages(settings, session, say)
    if not pages:
        raise no_project_error(settings, errors)
    found = [
        (bool(getattr(pkg, "is_yanked", False)), order, index, pkg)
        for order, (index, page) in enumerate(pages)
        for pkg in page.packages
        if pkg.filename == name and _is_version(pkg.version, ver)
    ]
    if not found:
        where = ", ".join(redact(index) for index, _page in pages)
        raise FetchError(f"no {name} on {where}", hint="`pip download --no-binary :all: vllm==VERSION` says more")
    _yanked, _order, index, pkg = min(found, key=lambda row: row[:2])
    sha256 = (pkg.digests or {}).get("sha256", "").lower()
    if not _SHA256.fullmatch(sha256):
        raise FetchError(
            f"the index gives no sha256 for {name}", hint="use an index that lists file hashes (PyPI does)"
        )
    return {"sdist": name, "url": pkg.url, "index": redact(index), "sha256": sha256}


def _is_version(listed: str | None, ver: str) -> bool:
    try:
        return listed is not None and Version(listed) == Version(ver)
    except ValueError:
        return False
