"""Which of the index's files is the wheel of a release: manylinux x86_64 first, unyanked first,
the primary index first."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from patchkit.base.errors import FetchError
from patchkit.fetch.cache import PROJECT
from patchkit.fetch.index import Pages, no_project_error, project_pages
from patchkit.fetch.net import Progress, redact

if TYPE_CHECKING:  # pragma: no cover
    from packaging.tags import Tag

    from patchkit.fetch.pipconfig import PipSettings


Rank = Callable[[str, str], "int | None"]  # (file name, version) -> sort key, lower is better; None: not a candidate


def find_wheel(
    ver: str, settings: PipSettings, session: Any, say: Progress, *, rank: Rank | None = None, wanted: str = ""
) -> dict[str, Any]:
    """The chosen wheel of vLLM `ver` as the cache's state records it: wheel, url, index, sha256.

    `rank` chooses among the files (default wheel_rank: manylinux x86_64 first); `wanted` says, in
    the error when none fits, what it asked for ("for manylinux_2_31_aarch64")."""
    rank = rank or wheel_rank
    pages, errors = project_pages(settings, session, say)
    if not pages:
        raise no_project_error(settings, errors)
    best = None
    for order, (index, page) in enumerate(pages):
        for pkg in page.packages:
            if not pkg.filename.endswith(".whl"):
                continue
            order_of_file = rank(pkg.filename, ver)
            if order_of_file is None:
                continue
            key = (order_of_file, bool(getattr(pkg, "is_yanked", False)), order, pkg.filename)
            if best is None or key < best[0]:
                best = (key, index, pkg)
    if best is None:
        raise _no_wheel_error(ver, pages, wanted)
    _key, index, pkg = best
    check_wheel_name(pkg.filename)
    return {
        "wheel": pkg.filename,
        "url": pkg.url,
        "index": redact(index),
        "sha256": (pkg.digests or {}).get("sha256"),
    }


def vllm_wheel_tags(filename: str, version: str) -> frozenset[Tag] | None:
    """The tags of `filename` when it is a vLLM wheel of exactly `version` (else None)."""

    try:
        name, ver, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, ValueError):
        return None
    # Exact (normalized) match: PEP 440 says 0.16 == 0.16.0, but the cache key and
    # the dist-info directory name must be the wheel's own version string.
    if canonicalize_name(name) != PROJECT or str(ver) != version:
        return None
    return tags


def wheel_rank(filename: str, version: str) -> int | None:
    """None if `filename` is not a vLLM wheel of `version`; else a sort key (lower is better)."""
    tags = vllm_wheel_tags(filename, version)
    if tags is None:
        return None
    manylinux_x86 = any(re.fullmatch(r"manylinux.*_x86_64", t.platform) for t in tags)
    return 0 if manylinux_x86 else 1


def check_wheel_name(name: str) -> None:
    """The wheel is kept in the cache under its own name: a plain file name, nothing else."""
    if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".whl"):
        raise FetchError(f"refusing odd wheel file name {name!r} from the index", hint="check the index")


def _no_wheel_error(ver: str, pages: Pages, wanted: str = "") -> FetchError:

    want = Version(ver)
    on_index = set()
    for _index, page in pages:
        for pkg in page.packages:
            with suppress(ValueError, TypeError):
                on_index.add((Version(pkg.version), pkg.filename.endswith(".whl")))
    hint = "check the version number; `pip index versions vllm` lists what the index has"
    close = sorted(
        {
            str(v)
            for v, wheel in on_index
            if wheel and str(v) != ver and (v == want or (want.local and v == Version(want.public)))
        }
    )
    if close:
        hint = f"the index has {', '.join(close)}: try that version"
    elif (want, True) in on_index:  # before the sdist: a release with wheels has an sdist too
        platforms = sorted(
            {
                t.platform
                for _index, page in pages
                for pkg in page.packages
                for t in vllm_wheel_tags(pkg.filename, ver) or ()
            }
        )
        hint = f"the index has wheels of this version for other platforms ({', '.join(platforms)}): pass --platform TAG"
    elif (want, False) in on_index:
        hint = "the index has only an sdist of this version; patchkit reads wheels"
    where = ", ".join(redact(index) for index, _page in pages)
    return FetchError(f"no {PROJECT} {ver} wheel{' ' + wanted if wanted else ''} on {where}", hint=hint)
