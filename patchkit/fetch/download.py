"""The whole wheel, downloaded once when the server does not serve byte ranges, checked against the
index's sha256 and kept in the cache."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO

from patchkit.base.errors import FetchError
from patchkit.base.fsutil import NO_SPACE
from patchkit.fetch.cache import cache_write_error, remove_entry
from patchkit.fetch.net import SLOWEST, Progress, network_errors, redact

Transferred = Callable[[int, int], None]  # (bytes so far, total or 0): a progress bar's feed
DOWNLOAD_LIMIT = 4 << 30  # a whole wheel or sdist: vLLM 0.16.0's wheel is 0.5 GB
_HINT = "check the network and pip's index settings (PIP_INDEX_URL, pip.conf, cert)"


def download_wheel(
    session: Any,
    url: str,
    sha256: str | None,
    dest: Path,
    *,
    timeout: float,
    say: Progress,
    on_bytes: Transferred | None = None,
    accept: Callable[[str], None] | None = None,
) -> Path:
    """Download `url` to `dest` (through `dest`.part, so a half download is never taken for a wheel).
    `accept` is given the download's sha256 before it replaces whatever `dest` holds: what it raises
    leaves `dest` as it was (a cached file is only ever replaced by one that passed every check)."""
    # lazy: the network stack loads only for a fetch
    import requests

    part = dest.with_name(dest.name + ".part")
    expected = (sha256 or "").lower()
    try:
        with session.get(url, stream=True, timeout=timeout, headers={"Accept-Encoding": "identity"}) as response:
            response.raise_for_status()
            total = int(response.headers.get("Content-Length") or 0)
            say(f"downloading {dest.name}" + (f" ({total / 1e6:.0f} MB)" if total else ""))
            with _fresh(part) as out:
                got = _copy(_bounded(response, timeout, dest.name), out, dest.name, total, say, on_bytes)
    except network_errors(requests) as e:
        _discard(part)
        if isinstance(e, OSError) and e.errno in NO_SPACE:  # the disk, not the network
            raise cache_write_error(part, e) from None
        raise FetchError(
            f"cannot download {dest.name}: {redact(str(e))}",
            hint=_HINT,
        ) from None
    except BaseException:
        _discard(part)
        raise
    if not expected:
        say("the index gave no sha256 for the wheel; relying on RECORD checks only")
    elif got != expected:
        _discard(part)
        raise FetchError(
            f"{dest.name} does not match the sha256 the index gives ({expected[:12]}...)",
            hint="the download was corrupted or tampered with; try again",
        )
    try:
        if accept is not None:
            accept(got)
        if dest.is_dir() and not dest.is_symlink():
            remove_entry(dest)  # a directory in its place, which a rename cannot replace
        os.replace(part, dest)
    except OSError as e:
        _discard(part)
        raise cache_write_error(dest, e) from None
    except BaseException:
        _discard(part)
        raise
    return dest


def _bounded(response: Any, timeout: float, name: str) -> Iterator[bytes]:
    """The body as it comes (read1: whatever arrived; iter_content waits for a whole MiB, the timeout
    being per socket read): a server sending a byte every few seconds, or without end, is cut off."""
    started, size, grace = time.monotonic(), 0, max(timeout, 10.0)
    while chunk := response.raw.read1(1 << 20, decode_content=True):
        size += len(chunk)
        elapsed = time.monotonic() - started
        too_slow = elapsed > grace and size < SLOWEST * elapsed
        if size > DOWNLOAD_LIMIT or too_slow:
            said = (
                f"{size} bytes in {elapsed:.0f} s (under {SLOWEST >> 10} KiB/s)"
                if too_slow
                else f"more than {DOWNLOAD_LIMIT >> 20:,} MiB"
            )
            raise FetchError(f"cannot download {name}: {redact(response.url)} sent {said}", hint=_HINT)
        yield chunk


def _copy(
    chunks: Iterable[bytes], out: BinaryIO, name: str, total: int, say: Progress, on_bytes: Transferred | None = None
) -> str:
    """Write the chunks, reporting progress every tenth of `total` (and every chunk to `on_bytes`);
    returns their sha256."""
    digest = hashlib.sha256()
    done, next_report = 0, 0.1
    for chunk in chunks:
        out.write(chunk)
        digest.update(chunk)
        done += len(chunk)
        if on_bytes is not None:
            on_bytes(done, total)
        if total and done / total >= next_report:
            say(f"downloading {name}: {done * 100 // total}% ({done / 1e6:.0f}/{total / 1e6:.0f} MB)")
            next_report = (done * 10 // total + 1) / 10
    return digest.hexdigest()


def _fresh(part: Path) -> BinaryIO:
    """`part` opened for writing as a new file: whatever was there (a killed run's part, a planted
    symlink: the link itself, a directory: with what it holds, the name being the cache's own)
    goes first, and nothing is written through a symlink."""
    with suppress(FileNotFoundError):
        remove_entry(part)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "wb")


def _discard(part: Path) -> None:
    with suppress(OSError):
        part.unlink()
