"""A release's published wheel of one file name (`vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl`):
its sha256 and RECORD as the index publishes them, what `patchkit wheel FILE` holds a wheel that
claims to be that release to.

From the release cache first (no network, no lock): when it took that very wheel, it holds the
index's sha256 of the file and the RECORD it read out of it. Otherwise the index pip is
configured with: its page gives the file's sha256; the RECORD is read from the wheel's tail by
range requests (one request for vLLM's wheels), and only when asked for (a file whose sha256 is
the index's needs no RECORD).
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.base import hints
from patchkit.base.errors import FetchError
from patchkit.fetch import net  # called as net.*, so that a test can stub the network in one place
from patchkit.fetch.cache import Damaged, cached_record, load_state, release_root, state_sealed
from patchkit.fetch.extract import find_record_name
from patchkit.fetch.index import normalize_version, read_project_pages
from patchkit.fetch.net import redact
from patchkit.fetch.ranges import RangeUnavailable, RemoteWheel


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
