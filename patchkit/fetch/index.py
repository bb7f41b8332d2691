"""vLLM's pages on the configured package indexes (Simple API), and the releases they list.

pypi_simple and packaging are imported only when an index is asked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from patchkit.base.errors import FetchError, IndexNotRead, NoIndex
from patchkit.fetch import net  # called as net.*, so that a test can stub the network in one place
from patchkit.fetch.cache import PROJECT
from patchkit.fetch.net import Progress, is_http, redact

if TYPE_CHECKING:  # pragma: no cover
    from packaging.version import Version

    from patchkit.fetch.pipconfig import PipSettings

Pages = list[tuple[str, Any]]  # (index url, pypi_simple.ProjectPage)

_reused_pages: dict[tuple[str, ...], tuple[Pages, list[str]]] | None = None  # see reuse_index_pages()
_reused_pages_lock = threading.Lock()
_reused_versions: list[Version] | None = None  # available_versions' answer within reuse_index_pages()


def available_versions() -> list[Version]:
    """Every final vLLM release on the configured indexes, oldest first (no pre-releases); within
    reuse_index_pages, read once (`verify --all` asks once per set)."""
    global _reused_versions
    if _reused_pages is not None and _reused_versions is not None:
        return list(_reused_versions)
    found = _available_versions()
    if _reused_pages is not None:
        _reused_versions = found
    return list(found)


def read_project_pages() -> tuple[PipSettings, Pages]:
    """pip's settings and vLLM's page on each index they name that answered, read quietly in a
    session of their own; no_project_error when none did."""
    settings = net.pip_settings()
    session = net.make_session(settings, None)
    try:
        pages, errors = project_pages(settings, session, None)
    finally:
        session.close()
    if not pages:
        raise no_project_error(settings, errors)
    return settings, pages


def _available_versions() -> list[Version]:
    _settings, pages = read_project_pages()
    found: set[Version] = set()
    for _index, page in pages:
        for pkg in page.packages:
            if not pkg.version:
                continue
            try:
                version = Version(pkg.version)
            except ValueError:
                continue
            if not version.is_prerelease and not version.is_devrelease:
                found.add(version)
    return sorted(found)


@contextmanager
def reuse_index_pages() -> Iterator[None]:
    """Within it, each index's vLLM page is fetched once: `verify --all` asks it for the list of
    releases and then for each release's wheel. A page that none of the indexes served is asked
    for again."""
    global _reused_pages, _reused_versions
    _reused_pages, _reused_versions = {}, None
    try:
        yield
    finally:
        _reused_pages, _reused_versions = None, None


def project_pages(settings: PipSettings, session: Any, say: Progress | None) -> tuple[Pages, list[str]]:
    """Fetch vLLM's Simple-API page from each usable index: ([(index, page)], [errors])."""
    reused = _reused_pages
    if reused is None:
        return _fetch_project_pages(settings, session, say)
    key = tuple(settings.index_urls)
    with _reused_pages_lock:
        if key not in reused:
            pages, errors = _fetch_project_pages(settings, session, say)
            if not pages:
                return pages, errors
            reused[key] = pages, errors
        return reused[key]


def _fetch_project_pages(settings: PipSettings, session: Any, say: Progress | None) -> tuple[Pages, list[str]]:
    # lazy: the network stack loads only for a fetch
    from pypi_simple import NoSuchProjectError, PyPISimple

    pages: Pages = []
    errors: list[str] = []
    for index in settings.index_urls:
        if not is_http(index):
            errors.append(f"{redact(index)}: skipped (not http/https)")
            continue
        if say:
            say(f"looking up {PROJECT} on {redact(index)}")
        try:
            client = PyPISimple(endpoint=index, session=session)
            page = client.get_project_page(PROJECT, timeout=settings.timeout)
        except NoSuchProjectError:
            errors.append(f"{redact(index)}: no project {PROJECT!r}")
            continue
        except Exception as e:  # any index failure: try the next one, report all at the end
            errors.append(f"{redact(index)}: {type(e).__name__}: {redact(str(e))}")
            continue
        pages.append((index, page))
    return pages, errors


def unread_sources(settings: PipSettings) -> list[str]:
    """Where pip would look for vLLM and patchkit does not: indexes that are no http(s) URL (file://,
    a path), and find-links."""
    local = [redact(url) for url in settings.index_urls if not is_http(url)]
    unread = [f"the {'indexes' if len(local) > 1 else 'index'} {', '.join(local)}"] if local else []
    if settings.find_links:
        unread.append(f"find-links {', '.join(redact(link) for link in settings.find_links)}")
    return unread


def no_project_error(settings: PipSettings, errors: list[str]) -> FetchError:
    unread = unread_sources(settings)
    answers = [e for e in errors if "skipped (not http/https)" not in e]
    if unread and not answers:  # only sources patchkit does not read: naming an http(s) index helps
        return IndexNotRead(
            f"pip is configured with {'; '.join(unread)}, which patchkit does not read (it asks http(s) indexes only)",
            hint="name an http(s) index in PIP_INDEX_URL for this command"
            + (", with PIP_NO_INDEX= (empty)" if settings.no_index else ""),
        )
    if unread:  # an http(s) index was asked and failed: that index is what to look at, not the others
        return NoIndex(
            f"no package index had {PROJECT} ({'; '.join(answers)}); pip is also configured with "
            f"{'; '.join(unread)}, which patchkit does not read",
            hint=f"check that index and the network (pip's settings: {settings.source})",
        )
    if settings.no_index:
        return NoIndex(
            "pip is configured with no-index, so there is no package index to fetch vLLM from",
            hint="unset PIP_NO_INDEX / no-index in pip.conf",
        )
    detail = "; ".join(errors) or "no index configured"
    return NoIndex(
        f"no package index had {PROJECT} ({detail})",
        hint=f"check pip's index settings ({settings.source}): PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, pip.conf",
    )
