"""A wheel on the index read by HTTP range requests: remotezip reads the central directory from
the wheel's tail, then nearby members are fetched together in a few coalesced ranges.

remotezip is imported only when a wheel is opened.
"""

from __future__ import annotations

import itertools
import struct
import zipfile
from collections.abc import Iterable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar

from patchkit.fetch.net import Progress, network_errors, redact
from patchkit.fetch.zipread import Blobs, member_from_run

if TYPE_CHECKING:  # pragma: no cover
    import zipfile

# Members closer together than this are fetched in one range request: a
# request costs a round trip (~50-150 ms), which is worth a few hundred KB.
MERGE_GAP = 1 << 20
# ...but no single request (held in memory) grows beyond this.
MAX_RUN = 64 << 20
# RemoteZip's first (suffix) request.  A wheel's tail holds the central
# directory and the dist-info files (RECORD, METADATA), so one request of this
# size usually yields all three for a vLLM wheel (CD ~200 KB, RECORD ~80 KB).
TAIL_BYTES = 512 << 10

Item = TypeVar("Item")


class RangeUnavailable(Exception):
    """The server cannot serve this wheel by ranges; download it whole instead."""


_REMOTE_ERRORS: tuple[type[BaseException], ...] = ()


def _remotezip() -> Any:
    """remotezip, loaded at the first range request: a fetch the cache answers never needs it."""
    # lazy: the network stack loads only for a fetch
    import remotezip  # type: ignore[import-untyped]

    return remotezip


def _remote_errors() -> tuple[type[BaseException], ...]:
    global _REMOTE_ERRORS
    if not _REMOTE_ERRORS:
        _REMOTE_ERRORS = (
            _remotezip().RemoteZipError,
            *network_errors(_remotezip().requests),
            zipfile.BadZipFile,
            OSError,
            EOFError,
            ValueError,
            struct.error,
            KeyError,
        )
    return _REMOTE_ERRORS


def _unavailable(e: BaseException) -> RangeUnavailable:
    return RangeUnavailable(f"{type(e).__name__}: {redact(str(e))}")


class RemoteWheel:
    """A wheel read with range requests: RemoteZip for the central directory, coalesced ranges for members."""

    def __init__(self, url: str, session: Any, timeout: float):
        options: dict[str, Any] = {"headers": {"Accept-Encoding": "identity"}, "timeout": timeout}
        self.zf = _open_remote_zip(url, session, options)
        self.size: int = self.zf.size()
        self.fetcher = _remotezip().RemoteFetcher(url, session, **options)
        self.start_dir: int = self.zf.start_dir
        offsets = sorted({i.header_offset for i in self.zf.infolist()})
        offsets.append(self.start_dir)
        self._next = dict(itertools.pairwise(offsets))
        # RemoteZip keeps its first (tail) buffer; members lying wholly inside it cost no request.
        self.tail_start = max(0, self.size - TAIL_BYTES) if self.start_dir >= self.size - TAIL_BYTES else self.size

    def infolist(self) -> list[zipfile.ZipInfo]:
        infos: list[zipfile.ZipInfo] = self.zf.infolist()  # remotezip's ZipFile, untyped
        return infos

    def _span(self, info: zipfile.ZipInfo) -> tuple[int, int]:
        return info.header_offset, self._next.get(info.header_offset, self.start_dir)

    def read(self, infos: Iterable[zipfile.ZipInfo], say: Progress) -> Blobs:
        out: Blobs = {}
        rest = []
        for info in infos:
            start, _end = self._span(info)
            if start >= self.tail_start:
                try:
                    out[info.filename] = self.zf.read(info)
                except _remote_errors() as e:
                    raise _unavailable(e) from None
            else:
                rest.append(info)
        runs = coalesce([(*self._span(i), i) for i in rest])
        if runs:
            total = sum(b - a for a, b, _ in runs)
            say(f"reading {len(rest)} files in {len(runs)} range request(s), {total / 1e6:.1f} MB")
        for start, end, members in runs:
            data = self._fetch(start, end)
            for info in members:
                out[info.filename] = member_from_run(data, start, info)
        return out

    def _fetch(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the wheel in one range request."""
        try:
            buf = self.fetcher.fetch((start, end - 1), stream=False)
            try:
                if buf.tell() != start or len(buf) != end - start:
                    raise RangeUnavailable(f"server answered range {start}-{end - 1} with {buf!r}")
                data: bytes = buf.read(len(buf))
            finally:
                buf.close()
        except _remote_errors() as e:
            raise _unavailable(e) from None
        if len(data) != end - start:
            raise RangeUnavailable(f"short read: {len(data)} of {end - start} bytes")
        return data

    def close(self) -> None:
        with suppress(Exception):
            self.zf.close()


def _open_remote_zip(url: str, session: Any, options: dict[str, Any]) -> Any:
    """RemoteZip over `url`; some servers do not support suffix ranges ("bytes=-N"), so on failure
    it is tried again with HEAD and an explicit range."""
    last: BaseException | None = None
    for suffix in (True, False):
        try:
            return _remotezip().RemoteZip(
                url, initial_buffer_size=TAIL_BYTES, session=session, support_suffix_range=suffix, **options
            )
        except _remote_errors() as e:
            last = e
    assert last is not None
    raise _unavailable(last)


def coalesce(
    spans: Iterable[tuple[int, int, Item]], gap: int = MERGE_GAP, max_run: int = MAX_RUN
) -> list[tuple[int, int, list[Item]]]:
    """Merge ``(start, end, item)`` byte spans into ``(start, end, [items])`` runs.

    Spans are sorted by start; a span joins the current run when the hole before
    it is smaller than ``gap`` and the run stays within ``max_run`` bytes.
    """
    runs: list[tuple[int, int, list[Item]]] = []
    for start, end, item in sorted(spans, key=lambda s: (s[0], s[1])):
        if runs:
            r_start, r_end, items = runs[-1]
            if start - r_end < gap and max(end, r_end) - r_start <= max_run:
                items.append(item)
                runs[-1] = (r_start, max(end, r_end), items)
                continue
        runs.append((start, end, [item]))
    return runs
