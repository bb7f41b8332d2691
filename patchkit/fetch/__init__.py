"""Obtain stock source files of a vLLM release from the package index.

Only the needed members are read out of the remote wheel, with HTTP range
requests (``remotezip`` reads the central directory; nearby members are then
fetched together in a few coalesced range requests).  Every extracted file is
checked against the wheel's RECORD.  If the server does not honour ranges the
whole wheel is downloaded once, checked against the index's sha256, kept in the
cache and extracted locally.

Cache layout (``cache_dir()/releases/<version>/``)::

    tree/                      site-packages-like: vllm/..., vllm-<v>.dist-info/{METADATA,RECORD}
    release.json               wheel name, url, sha256, central-directory member list,
                               members present in tree/ and requested members absent from the wheel,
                               the sha256 of the RECORD the fetch took out of the wheel
    .lock                      filelock, one per release
    <wheel>.whl                only after a fallback full download

A second call for the same release and files does no network I/O at all: not
even the index is asked. Every call checks what the cache holds (release.json's shape; each file a
regular file whose hash RECORD gives; RECORD the one fetched) and fetches damaged files again.  Heavy libraries (requests, remotezip, pypi_simple) are
imported lazily so importing this package stays cheap.

The modules, one job each:

    release       release_tree(): the cache's answer, or a fetch under the release's lock
    cache         the cache's layout and key (the release number), release.json, what is missing, where a member may go
    index         vLLM's pages on the configured indexes, the releases they list
    wheel_choice  which file on the index is the release's wheel
    net           pip's settings, the HTTP session, what it cost (FetchStats)
    ranges        a remote wheel read by coalesced range requests
    zipread       members out of a wheel's bytes, and a whole wheel on disk
    download      the whole wheel, when the server does not serve ranges
    extract       members checked against RECORD, then written to the tree
    sdist         a release's whole sdist (vLLM's own tests), checked against the index's sha256
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.base.usercache import cache_dir
    from patchkit.fetch.cache import cached_record, normalize_version
    from patchkit.fetch.index import available_versions, reuse_index_pages
    from patchkit.fetch.net import FetchStats
    from patchkit.fetch.release import release_tree
    from patchkit.fetch.sdist import release_sdist

# Each name is loaded from its module when first used: the integrity check only reads the cache
# (fetch.cache), and a fetch's modules (the network, the zip reader) are not loaded for it.
_WHERE = {
    "FetchStats": "patchkit.fetch.net",
    "available_versions": "patchkit.fetch.index",
    "cache_dir": "patchkit.base.usercache",
    "cached_record": "patchkit.fetch.cache",
    "last_fetch_stats": "patchkit.fetch.release",
    "normalize_version": "patchkit.fetch.cache",
    "release_sdist": "patchkit.fetch.sdist",
    "release_tree": "patchkit.fetch.release",
    "reuse_index_pages": "patchkit.fetch.index",
}

__all__ = [
    "FetchStats",
    "available_versions",
    "cache_dir",
    "cached_record",
    "last_fetch_stats",
    "normalize_version",
    "release_sdist",
    "release_tree",
    "reuse_index_pages",
]


_SUBMODULES = {"release", "cache", "index", "wheel_choice", "net", "ranges", "zipread", "download", "extract", "sdist"}


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:  # `patchkit.fetch.release` as an attribute, as when the package imported them all
        return import_module(f"{__name__}.{name}")
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    if name != "last_fetch_stats":  # rebound by every release_tree() call: read where it lives
        globals()[name] = value
    return value
