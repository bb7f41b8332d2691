"""Which index a cached download came from, and whether pip still names it: the wheel cache
(wheels/) and the release cache (releases/) record pip's settings when they fetched, sealed (no
credential in clear), so an unchanged setup is told without asking pip (~0.5 s)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from patchkit.base import seal
from patchkit.fetch import net  # called as net.*, so that a test can stub the network in one place
from patchkit.fetch.cache import without_userinfo
from patchkit.fetch.net import Progress, is_http, redact

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.fetch.pipconfig import PipSettings

PIP_CONFIG_KIND = "pip-config"  # pip's settings when a download was chosen


def sealed_settings(settings: PipSettings) -> dict[str, Any] | None:
    """pip's settings, sealed as config_identity tells them (None: pip's files are not known, so
    every reuse asks pip)."""
    if settings.config_files is None:
        return None
    files = list(settings.config_files)
    return {"files": files, "seal": seal.seal(PIP_CONFIG_KIND, "", seal.canonical(net.config_identity(files)))}


def unchanged_since(recorded: object) -> bool:
    """Whether pip's settings are those `recorded` (sealed_settings) when the download was chosen."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("files"), list):
        return False
    files = recorded["files"]
    if not all(isinstance(path, str) for path in files):
        return False
    return seal.sealed(PIP_CONFIG_KIND, "", seal.canonical(net.config_identity(files)), recorded.get("seal"))


def same_index(recorded: str, configured: str) -> bool:
    """One index, whatever credentials each names (the cache keeps them redacted; tokens rotate), and
    however it is spelled where pip reads it as one: with or without its trailing slash, the
    scheme and host in any case, the scheme's default port named or not."""
    return _index_key(recorded) == _index_key(redact(configured))


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _index_key(url: str) -> tuple[str, str, str, str]:
    parts = urllib.parse.urlsplit(without_userinfo(url))
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:  # not a port: compared as written
        return scheme, parts.netloc.lower(), parts.path.rstrip("/"), parts.query
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address, as netloc writes it
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return scheme, netloc, parts.path.rstrip("/"), parts.query


def from_a_configured_index(
    cached: str,
    noun: str,
    came_from: str,
    recorded: object,
    say: Progress,
    warn: Progress,
    remember: Callable[[PipSettings], None],
) -> bool:
    """Whether `cached` ("the cached wheel W", `noun` "the wheel") came from an index pip is configured with now: pip's
    settings are those `recorded` (no need to ask pip), or its index is among those pip names
    (`remember` records the settings for next time). An index switched since is said, and False;
    none that patchkit can ask (no-index, file://) is said, and True."""
    if unchanged_since(recorded):
        say(f"{cached} came from {came_from}")
        return True
    settings = net.pip_settings()
    if any(same_index(came_from, url) for url in settings.index_urls):
        say(f"{cached} came from {came_from}, an index pip is configured with")
        remember(settings)
        return True
    if not any(is_http(url) for url in settings.index_urls):
        warn(f"pip is configured with no index patchkit reads: using {noun} cached from {came_from}")
        return True
    configured = [redact(url) for url in settings.index_urls]
    warn(f"{cached} came from {came_from}; pip is configured with {', '.join(configured)} now: asking it for {noun}")
    return False
