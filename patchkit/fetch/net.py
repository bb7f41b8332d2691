"""pip's index settings and the HTTP session they configure, which counts what it costs.

requests and urllib3 are imported only when a session is made (a cache miss).
"""

from __future__ import annotations

import http.client
import re
import time
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

    session = _session_class(requests.Session, settings.cert, requests.RequestException, network_errors(requests))()
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


def network_errors(requests: Any) -> tuple[type[BaseException], ...]:
    """What a cut or broken connection raises past requests' own wrapping: a raw body read (urllib3's
    ProtocolError, ReadTimeoutError, ...) and http.client's IncompleteRead; sockets and TLS raise OSError."""
    return (requests.RequestException, requests.exceptions.BaseHTTPError, http.client.HTTPException, OSError)


def _session_class(
    base: type[requests.Session],
    pip_cert: str | None,
    failure: type[requests.RequestException],
    broken: tuple[type[BaseException], ...],
) -> type[requests.Session]:
    class _Session(base):  # type: ignore[misc,valid-type]
        def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
            """requests reads a body it is not asked to stream (an index page, a range of a wheel) whole,
            its timeout per socket read: a server sending a byte every few seconds, or gigabytes, held a
            fetch for ever or filled memory. Read here instead, bounded in size and in slowness."""
            if kwargs.get("stream"):
                return super().send(request, **kwargs)  # type: ignore[no-any-return]
            response: requests.Response = super().send(request, **{**kwargs, "stream": True})
            if response.is_redirect:  # not followed (allow_redirects=False): get_redirect_target dropped its body
                return response
            with response:
                try:
                    body = _bounded_body(response, kwargs.get("timeout"), failure)
                except failure:
                    raise
                except broken as e:  # a body cut mid-way: requests wraps this only in iter_content
                    raise failure(f"{redact(response.url)} broke off: {redact(str(e))}", response=response) from e
            response._content = body  # what .content, .text and .json() read: the body is consumed
            return response

        def get_redirect_target(self, response: requests.Response) -> str | None:
            """requests reads a redirect's body whole before it follows it (to free the connection),
            bounded by neither size nor time: the body is dropped unread, the connection closed."""
            target: str | None = super().get_redirect_target(response)
            if target is not None and not getattr(response, "_content_consumed", True):
                response._content = b""  # what requests' own read leaves there: nobody reads a 3xx's body
                response.close()
            return target

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


BODY_LIMIT = 256 << 20  # a body read whole: a simple-index page is well under 1 MB, a wheel's ranges tens of MB
SLOWEST = 4096  # bytes a second on average, once a body has had its grace (the per-read timeout, 10 s at least)


def _bounded_body(response: requests.Response, timeout: object, failure: type[requests.RequestException]) -> bytes:
    """The response's body, read as it comes (read1: whatever arrived, never waiting for a full chunk)."""
    per_read = timeout[1] if isinstance(timeout, tuple) else timeout
    grace = max(per_read if isinstance(per_read, int | float) else 0.0, 10.0)
    started, size, chunks = time.monotonic(), 0, []
    while chunk := response.raw.read1(1 << 16, decode_content=True):
        size += len(chunk)
        if size > BODY_LIMIT:
            raise failure(f"{redact(response.url)} sent more than {BODY_LIMIT >> 20} MiB", response=response)
        elapsed = time.monotonic() - started
        if elapsed > grace and size < SLOWEST * elapsed:
            raise failure(
                f"{redact(response.url)} sent {size} bytes in {elapsed:.0f} s (under {SLOWEST >> 10} KiB/s)",
                response=response,
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _counter(stats: FetchStats) -> Callable[..., None]:
    def count(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        stats.requests += 1
        stats.bytes += int(response.headers.get("Content-Length") or 0)
        if response.request.headers.get("Range", ""):
            stats.range_requests += 1

    return count
