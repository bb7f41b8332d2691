"""pip's index settings and the HTTP session they configure, which counts what it costs.

requests and urllib3 are imported only when a session is made (a cache miss).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from patchkit import __version__

if TYPE_CHECKING:  # pragma: no cover
    import requests
    from requests.sessions import _Cert, _Settings, _TextMapping, _Verify

    from patchkit.fetch.pipconfig import PipSettings

Progress = Callable[[str], None]


@dataclass
class FetchStats:
    """Network cost of one release_tree() call (all zero on a cache hit)."""

    requests: int = 0  # HTTP responses received (index pages, ranges, downloads)
    bytes: int = 0  # body bytes announced by those responses (Content-Length)
    range_requests: int = 0
    full_download: bool = False
    seconds: float = 0.0


def _pipconfig() -> ModuleType:
    """patchkit.fetch.pipconfig, loaded when pip's settings are first needed."""
    # lazy: pip's configuration loads only for a fetch
    import patchkit.fetch.pipconfig as pipconfig

    return pipconfig


def pip_settings() -> PipSettings:
    """pip's merged index configuration (importing pip costs ~0.5 s: only on a cache miss)."""
    settings: PipSettings = _pipconfig().pip_settings()
    return settings


def config_identity(files: Sequence[str]) -> dict[str, object]:
    """pipconfig.config_identity: pip's settings as their sources tell them, without asking pip."""
    identity: dict[str, object] = _pipconfig().config_identity(files)
    return identity


def redact(url: str) -> str:
    """Drop user:password@ from a URL for messages."""
    return re.sub(r"(?<=://)[^/@]*@", "***@", url)


def with_index_credentials(url: str, indexes: Iterable[str]) -> str:
    """A URL read back from the cache with the user:password@ of a configured index on the same
    scheme, host and port, as pip sends an index's credentials to the files it links there."""
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        return url
    for index in indexes:
        found = urllib.parse.urlsplit(index)
        same_place = (found.scheme.lower(), found.netloc.rpartition("@")[2].lower()) == (
            parts.scheme.lower(),
            parts.netloc.lower(),
        )
        if same_place and "@" in found.netloc:
            return urllib.parse.urlunsplit(parts._replace(netloc=found.netloc))
    return url


def is_http(url: str) -> bool:
    return url.lower().startswith(("http://", "https://"))


def make_session(settings: PipSettings, stats: FetchStats | None) -> requests.Session:
    """A session with pip's cert, client cert and proxy, a few retries, and `stats` counting its responses."""
    # lazy: the network stack loads only for a fetch (requests.adapters has urllib3's Retry, its stubs too)
    import requests.adapters

    session = _session_class(requests.Session, settings.cert)()
    session.headers["User-Agent"] = f"patchkit/{__version__} (+requests)"
    if settings.client_cert:
        session.cert = settings.client_cert
    if settings.proxy:
        session.proxies = {"http": settings.proxy, "https": settings.proxy}
    retry = requests.adapters.Retry(
        total=3,
        connect=3,
        read=2,
        status=2,
        backoff_factor=0.3,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
    )
    adapter = requests.adapters.HTTPAdapter(max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    if stats is not None:
        session.hooks["response"].append(_counter(stats))
    return session


def _session_class(base: type[requests.Session], pip_cert: str | None) -> type[requests.Session]:
    class _Session(base):  # type: ignore[misc,valid-type]
        # requests lets REQUESTS_CA_BUNDLE override session.verify; pip's --cert must win.
        def merge_environment_settings(
            self,
            url: str | bytes | None,
            proxies: _TextMapping | None,
            stream: bool | None,
            verify: _Verify | None,
            cert: _Cert | None,
        ) -> _Settings:
            if verify is None and pip_cert:
                verify = pip_cert
            # super(): `base`, typed as a Session but seen as Any through the ignore above
            settings: _Settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            return settings

    return _Session


def _counter(stats: FetchStats) -> Callable[..., None]:
    def count(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        stats.requests += 1
        stats.bytes += int(response.headers.get("Content-Length") or 0)
        if response.request.headers.get("Range", ""):
            stats.range_requests += 1

    return count
