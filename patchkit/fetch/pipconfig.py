"""Read the package-index settings that pip itself would use.

pip merges several configuration files (site-wide, user, virtualenv,
``PIP_CONFIG_FILE``) and ``PIP_*`` environment variables, with the
environment winning over files and a command's own section (``[install]``)
winning over ``[global]``.  Rather than re-implementing that, ask pip: its ``Configuration`` class
in-process, else ``pip config debug`` in a subprocess, which prints each file pip reads and its
``section.key: value`` lines, grouped by kind (``pip config list`` on pips before 20).

If pip cannot be run, fall back to the ``PIP_*`` environment variables alone,
then to https://pypi.org/simple/.

This costs ~0.5 s (importing pip), so callers only use it on a cache miss.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from patchkit.base.fsutil import read_regular

DEFAULT_INDEX_URL = "https://pypi.org/simple/"
DEFAULT_TIMEOUT = 30.0

# Highest precedence first: PIP_* variables, then the [install] section, then [global].
_SECTIONS = (":env:", "install", "global")
_TRUE = {"1", "true", "yes", "on", "y", "t"}


@dataclass(frozen=True)
class PipSettings:
    """The subset of pip's configuration that fetching a release needs."""

    index_url: str = DEFAULT_INDEX_URL
    extra_index_urls: tuple[str, ...] = ()
    no_index: bool = False
    find_links: tuple[str, ...] = ()  # directories or pages of files pip also takes packages from
    cert: str | None = None  # CA bundle (pip's --cert); None: requests' default
    client_cert: str | None = None
    proxy: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    source: str = "defaults"  # where the settings came from, for messages
    config_files: tuple[str, ...] | None = None  # every file pip reads them from, there or not (None: unknown)

    @property
    def index_urls(self) -> list[str]:
        """Every configured index in pip's order (primary first), without duplicates."""
        if self.no_index:
            return []
        out: list[str] = []
        for url in (self.index_url, *self.extra_index_urls):
            if url and url not in out:
                out.append(url)
        return out


def parse_config_list(text: str) -> dict[str, str]:
    """Parse ``pip config list`` output into ``{"section.key": value}``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or "." not in key:
            continue
        raw = raw.strip()
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = str(value)
    return out


# `pip config debug`'s variants, lowest precedence first (pip's OVERRIDE_ORDER; PIP_* variables are read from
# os.environ instead). `pip config list` cannot be used: pip >= 25 prints each file's values sorted by the
# file's name, so the last of a key it prints is the file whose path sorts last, not the one pip uses.
_VARIANTS = ("global", "user", "site", "env")


def parse_config_debug(text: str) -> dict[str, str]:
    """Merge ``pip config debug`` output into ``{"section.key": value}``, later variants and files winning.

    The output is ``variant:`` at column 0, ``  FILE, exists: BOOL`` under it, ``    section.key: value``
    under a file; a multi-line value goes on at the same indent without a ``key: ``."""
    found: dict[str, list[tuple[str, str]]] = {}
    pairs: list[tuple[str, str]] | None = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            pairs = found.setdefault(line.rstrip().rstrip(":"), [])
        elif pairs is not None and line.startswith("    "):
            key, sep, value = line[4:].partition(": ")
            if sep and "." in key and " " not in key:
                pairs.append((key, value.strip()))
            elif pairs:  # a value's next line
                pairs[-1] = (pairs[-1][0], f"{pairs[-1][1]}\n{line.strip()}".strip())
    out: dict[str, str] = {}
    for variant in _VARIANTS:
        out.update(found.get(variant, []))
    return out


def settings_from_items(
    items: dict[str, str], *, source: str = "pip config", config_files: Sequence[str] | None = None
) -> PipSettings:
    """Resolve merged ``section.key`` items the way pip would for ``pip install``."""

    def get(*names: str) -> str | None:
        for section in _SECTIONS:
            for name in names:
                key = f"{section}.{name}"
                if key in items:
                    return items[key]
        return None

    index_url = get("index-url")
    extra = get("extra-index-url")
    no_index = get("no-index")
    timeout_s = get("timeout", "default-timeout")
    try:
        timeout = float(timeout_s) if timeout_s else DEFAULT_TIMEOUT
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    return PipSettings(
        index_url=(index_url or "").strip() or DEFAULT_INDEX_URL,
        extra_index_urls=tuple((extra or "").split()),
        no_index=(no_index or "").strip().lower() in _TRUE,
        find_links=tuple((get("find-links") or "").split()),
        cert=(get("cert") or "").strip() or None,
        client_cert=(get("client-cert") or "").strip() or None,
        proxy=(get("proxy") or "").strip() or None,
        timeout=timeout if timeout > 0 else DEFAULT_TIMEOUT,
        source=source,
        config_files=None if config_files is None else tuple(config_files),
    )


def _environ_items() -> dict[str, str]:
    """What pip would put in its ``:env:`` section: PIP_FOO_BAR -> ``:env:.foo-bar``."""
    out = {}
    for key, value in os.environ.items():
        if key.startswith("PIP_") and len(key) > 4:
            out[":env:." + key[4:].lower().replace("_", "-")] = value
    return out


def _pip_commands() -> list[list[str]]:
    cmds = [[sys.executable, "-m", "pip"]]
    for name in ("pip3", "pip"):
        exe = shutil.which(name)
        if exe:
            cmds.append([exe])
    return cmds


_CACHE: dict[tuple[str, tuple[tuple[str, str], ...]], PipSettings] = {}
_WATCHED = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV", "APPDATA")  # where pip looks for its files
MAX_CONFIG_BYTES = 1 << 20


def _watched_environ() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_") or k in _WATCHED))


def _cache_key() -> tuple[str, tuple[tuple[str, str], ...]]:
    return (sys.executable, _watched_environ())


def config_identity(files: Sequence[str]) -> dict[str, object]:
    """What pip's settings are made of, to tell that they did not change without asking pip (~0.5 s):
    the PIP_* variables and those that say where its files are, the prefix, and the sha256 of each of
    `files` (PipSettings.config_files: which files pip reads depends on the rest)."""
    return {
        "environ": [list(item) for item in _watched_environ()],
        "prefix": sys.prefix,
        "files": {path: _file_digest(path) for path in files},
    }


def _file_digest(path: str) -> str | None:
    """The sha256 of a configuration file, None when there is none, else why it could not be read."""
    try:
        return hashlib.sha256(read_regular(path, MAX_CONFIG_BYTES, follow_symlinks=True)).hexdigest()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def forget_settings() -> None:
    """A process that outlives one command (fleet's node agent) asks pip again for the next one:
    pip.conf may have changed meanwhile."""
    _CACHE.clear()


def pip_settings() -> PipSettings:
    """Ask pip for its merged configuration (memoized per process and PIP_*/HOME environment)."""
    key = _cache_key()
    if key not in _CACHE:
        _CACHE[key] = _query_pip()
    return _CACHE[key]


def _pip_items_in_process() -> tuple[dict[str, str], list[str]] | None:
    """pip's merged configuration via its (internal, long-stable) Configuration class.

    ~0.5 s instead of ~1.2 s for a ``pip config list`` subprocess; any failure
    (no pip, a pip that moved the class) falls back to the subprocess.
    """
    try:
        # lazy: pip's configuration loads only for a fetch
        from pip._internal.configuration import Configuration

        conf = Configuration(isolated=os.environ.get("PIP_ISOLATED", "").strip().lower() in _TRUE)
        conf.load()
        files = [str(path) for _kind, paths in conf.iter_config_files() for path in paths]
        items: dict[str, str] = {}
        for key, value in conf.items():
            if isinstance(value, dict):  # pip >= 25: one {key: value} per file, in load order
                items.update({str(k): str(v) for k, v in value.items()})
            else:
                items[str(key)] = str(value)
        return items, files
    except Exception:
        return None


def _query_pip() -> PipSettings:
    asked = _pip_items_in_process()
    if asked is not None:
        return settings_from_items(asked[0], source="pip configuration", config_files=asked[1])
    env = dict(os.environ)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.setdefault("PYTHONIOENCODING", "utf-8")
    for cmd in _pip_commands():
        for listing, parse in (("debug", parse_config_debug), ("list", parse_config_list)):
            out = _pip_config(cmd, listing, env)
            if out is None:
                continue
            items = parse(out)
            # pip hides an env var that it does not know as an option only in
            # very old versions; make sure PIP_* always wins as documented.
            for key, value in _environ_items().items():
                items.setdefault(key, value)
            return settings_from_items(items, source=f"pip config {listing}")
    return settings_from_items(_environ_items(), source="PIP_* environment variables")


def _pip_config(cmd: list[str], listing: str, env: dict[str, str]) -> str | None:
    """What `pip config LISTING` prints (`debug` from pip 20; `list` before), None where it fails."""
    try:
        proc = subprocess.run(
            [*cmd, "config", listing],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None
