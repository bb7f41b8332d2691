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
                               members present in tree/ and requested members absent from the wheel
    .lock                      filelock, one per release
    <wheel>.whl                only after a fallback full download

A second call for the same release and files does no network I/O at all: not
even the index is asked.  Heavy libraries (requests, remotezip, pypi_simple) are
imported lazily so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import struct
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.errors import BadInput, FetchError
from patchkit.record import HASHES as _HASHES
from patchkit.record import cache_dir, parse_record, record_hash

if TYPE_CHECKING:  # pragma: no cover
    import zipfile

    import requests
    from packaging.version import Version

    from patchkit.pipconfig import PipSettings

__all__ = [
    "FetchStats",
    "available_versions",
    "cache_dir",
    "last_fetch_stats",
    "release_tree",
]

PROJECT = "vllm"
STATE_FILE = "release.json"
STATE_SCHEMA = 1

# Members closer together than this are fetched in one range request: a
# request costs a round trip (~50-150 ms), which is worth a few hundred KB.
MERGE_GAP = 1 << 20
# ...but no single request (held in memory) grows beyond this.
MAX_RUN = 64 << 20
# RemoteZip's first (suffix) request.  A wheel's tail holds the central
# directory and the dist-info files (RECORD, METADATA), so one request of this
# size usually yields all three for a vLLM wheel (CD ~200 KB, RECORD ~80 KB).
TAIL_BYTES = 512 << 10

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # 30 bytes
_LOCAL_SIG = b"PK\x03\x04"

Progress = Callable[[str], None]


@dataclass
class FetchStats:
    """Network cost of one release_tree() call (all zero on a cache hit)."""

    requests: int = 0  # HTTP responses received (index pages, ranges, downloads)
    bytes: int = 0  # body bytes announced by those responses (Content-Length)
    range_requests: int = 0
    full_download: bool = False
    seconds: float = 0.0


#: Stats of the most recent release_tree() call in this process (for reports, benchmarks).
last_fetch_stats: FetchStats | None = None


# --------------------------------------------------------------------------- public API


def release_tree(
    version: str,
    paths: Iterable[str] = (),
    *,
    all_python: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Return a site-packages-like directory holding stock files of vLLM ``version``.

    The directory always has ``vllm-<v>.dist-info/METADATA`` and ``RECORD``, plus
    each of ``paths`` (POSIX, relative to the root, e.g. ``vllm/config/speculative.py``)
    that the wheel has; with ``all_python`` every ``vllm/**/*.py`` too.  A path the
    wheel lacks is not an error: it is recorded as absent and simply not in the tree.
    """
    global last_fetch_stats
    ver = _normalize_version(version)
    if isinstance(paths, str):
        paths = [paths]
    wanted = {_clean_request(p) for p in paths}
    say = progress or (lambda _msg: None)
    stats = FetchStats()
    last_fetch_stats = stats

    root = cache_dir() / "releases" / ver
    tree = root / "tree"
    state = _load_state(root)
    if state is not None and not _missing(state, tree, wanted, all_python):
        return tree  # fast path: no lock, no network

    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create the cache directory {root}: {e}", hint=_CACHE_HINT) from None
    t0 = time.monotonic()
    with _release_lock(root, ver, say):
        state = _load_state(root)  # another process may have fetched meanwhile
        if state is None or _missing(state, tree, wanted, all_python):
            _Fetcher(ver, root, tree, state, stats, say).run(wanted, all_python)
    stats.seconds = time.monotonic() - t0
    return tree


def available_versions() -> list[Version]:
    """Every final vLLM release on the configured indexes, oldest first (no pre-releases)."""
    from packaging.version import InvalidVersion, Version

    settings = _pip_settings()
    session = _make_session(settings, None)
    try:
        pages, errors = _project_pages(settings, session, None)
    finally:
        session.close()
    if not pages:
        raise _no_project_error(settings, errors)
    found: set[Version] = set()
    for _index, page in pages:
        for pkg in page.packages:
            if not pkg.version:
                continue
            try:
                v = Version(pkg.version)
            except InvalidVersion:
                continue
            if not v.is_prerelease and not v.is_devrelease:
                found.add(v)
    return sorted(found)


# --------------------------------------------------------------------------- paths & versions

_CACHE_HINT = "set PATCHKIT_CACHE_DIR to a writable directory"


def _normalize_version(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(str(version).strip()))
    except InvalidVersion:
        raise BadInput(f"not a valid vLLM version: {version!r}", hint="use a release number such as 0.16.0") from None


def _unsafe_reason(name: str) -> str | None:
    """Why ``name`` (a zip member or requested path) may not be written under the tree, or None."""
    if not name:
        return "empty path"
    if "\\" in name:
        return "contains a backslash"
    if "\x00" in name:
        return "contains a NUL byte"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "is absolute"
    parts = name.split("/")
    if any(p == ".." for p in parts):
        return "contains '..'"
    if any(p in ("", ".") for p in parts):
        return "is not a normalized relative path"
    return None


def _clean_request(path: str) -> str:
    p = str(path).strip()
    if p.startswith("./"):
        p = p[2:]
    reason = _unsafe_reason(p)
    if reason:
        raise BadInput(
            f"refusing to fetch {path!r}: the path {reason}",
            hint="paths are POSIX paths relative to site-packages, e.g. vllm/config/speculative.py",
        )
    return p


def _safe_dest(tree: Path, name: str, real_tree: Path | None = None) -> Path:
    """Where member ``name`` goes; FetchError for anything that would land outside ``tree``."""
    reason = _unsafe_reason(name)
    if reason:
        raise FetchError(
            f"refusing unsafe member {name!r} in the wheel: the path {reason}",
            hint="the wheel looks malformed or malicious; it was not extracted",
        )
    dest = tree / name
    try:
        dest.resolve().relative_to(real_tree or tree.resolve())
    except ValueError:
        raise FetchError(
            f"refusing member {name!r}: it resolves outside {tree}", hint=f"remove {tree} and try again"
        ) from None
    return dest


def _python_members(names: Iterable[str]) -> list[str]:
    return [n for n in names if n.startswith(PROJECT + "/") and n.endswith(".py")]


# --------------------------------------------------------------------------- state


def _load_state(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        return None
    return data


def _save_state(root: Path, state: dict[str, Any]) -> None:
    state = dict(state)
    state["present"] = sorted(set(state.get("present", ())))
    state["absent"] = sorted(set(state.get("absent", ())))
    try:
        _atomic_write(root / STATE_FILE, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode())
    except OSError as e:
        raise FetchError(f"cannot write {root / STATE_FILE}: {e}", hint=_CACHE_HINT) from None


def _atomic_write(dest: Path, data: bytes, mode: int = 0o644) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def _needed(state: dict[str, Any] | None, wanted: set[str], all_python: bool) -> set[str]:
    need = set(wanted)
    if state is not None and state.get("dist_info"):
        need |= {f"{state['dist_info']}/METADATA", f"{state['dist_info']}/RECORD"}
    if all_python and state is not None and state.get("members") is not None:
        need |= set(_python_members(state["members"]))
    return need


def _missing(state: dict[str, Any], tree: Path, wanted: set[str], all_python: bool) -> set[str]:
    """Needed members that are neither in the tree nor known to be absent."""
    if not state.get("dist_info") or state.get("members") is None:
        return {"<central directory>"}
    present, absent = set(state.get("present", ())), set(state.get("absent", ()))
    members = set(state["members"])
    out = set()
    for name in _needed(state, wanted, all_python):
        if name in absent:
            continue
        if name in present and name in members and (tree / name).is_file():
            continue
        out.add(name)  # a name not in `members` is decided offline (recorded absent under the lock)
    return out


class _release_lock:
    def __init__(self, root: Path, ver: str, say: Progress):
        from filelock import FileLock

        self._lock = FileLock(str(root / ".lock"))
        self._ver, self._say = ver, say

    def __enter__(self):
        from filelock import Timeout

        try:
            self._lock.acquire(timeout=0.2)
        except Timeout:
            self._say(f"waiting for another patchkit process fetching vLLM {self._ver}...")
            try:
                self._lock.acquire(timeout=1800)
            except Timeout:
                raise FetchError(
                    f"timed out waiting for the lock {self._lock.lock_file}",
                    hint="is another patchkit process stuck? remove the lock file if not",
                ) from None
        except OSError as e:
            raise FetchError(f"cannot lock {self._lock.lock_file}: {e}", hint=_CACHE_HINT) from None
        return self

    def __exit__(self, *exc):
        self._lock.release()


# --------------------------------------------------------------------------- index


def _pip_settings() -> PipSettings:
    from patchkit.pipconfig import pip_settings

    return pip_settings()


def _redact(url: str) -> str:
    """Drop user:password@ from a URL for messages."""
    return re.sub(r"(?<=://)[^/@]*@", "***@", url)


def _make_session(settings: PipSettings, stats: FetchStats | None) -> requests.Session:
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    from patchkit import __version__

    pip_cert = settings.cert

    class _Session(requests.Session):
        # requests lets REQUESTS_CA_BUNDLE override session.verify; pip's --cert must win.
        def merge_environment_settings(self, url, proxies, stream, verify, cert):
            if verify is None and pip_cert:
                verify = pip_cert
            return super().merge_environment_settings(url, proxies, stream, verify, cert)

    s = _Session()
    s.headers["User-Agent"] = f"patchkit/{__version__} (+requests)"
    if settings.client_cert:
        s.cert = settings.client_cert
    if settings.proxy:
        s.proxies = {"http": settings.proxy, "https": settings.proxy}
    retry = Retry(
        total=3,
        connect=3,
        read=2,
        status=2,
        backoff_factor=0.3,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
    )
    adapter = HTTPAdapter(max_retries=retry)
    s.mount("https://", adapter)
    s.mount("http://", adapter)
    if stats is not None:

        def count(resp, *args, **kwargs):
            n = int(resp.headers.get("Content-Length") or 0)
            rng = resp.request.headers.get("Range", "")
            stats.requests += 1
            stats.bytes += n
            if rng:
                stats.range_requests += 1

        s.hooks["response"].append(count)
    return s


def _is_http(url: str) -> bool:
    return url.lower().startswith(("http://", "https://"))


_reused_pages: dict[tuple[str, ...], tuple[list, list]] | None = None  # see reuse_index_pages()
_reused_pages_lock = threading.Lock()


@contextmanager
def reuse_index_pages():
    """Within it, each index's vLLM page is fetched once: `verify --all` asks it for the list of
    releases and then for each release's wheel. A page that none of the indexes served is asked
    for again."""
    global _reused_pages
    _reused_pages = {}
    try:
        yield
    finally:
        _reused_pages = None


def _project_pages(settings: PipSettings, session, say: Progress | None):
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


def _fetch_project_pages(settings: PipSettings, session, say: Progress | None):
    from pypi_simple import NoSuchProjectError, PyPISimple

    pages, errors = [], []
    for index in settings.index_urls:
        if not _is_http(index):
            errors.append(f"{_redact(index)}: skipped (not http/https)")
            continue
        if say:
            say(f"looking up {PROJECT} on {_redact(index)}")
        try:
            client = PyPISimple(endpoint=index, session=session)
            page = client.get_project_page(PROJECT, timeout=settings.timeout)
        except NoSuchProjectError:
            errors.append(f"{_redact(index)}: no project {PROJECT!r}")
            continue
        except Exception as e:  # any index failure: try the next one, report all at the end
            errors.append(f"{_redact(index)}: {type(e).__name__}: {_redact(str(e))}")
            continue
        pages.append((index, page))
    return pages, errors


def _no_project_error(settings: PipSettings, errors: list[str]) -> FetchError:
    if settings.no_index:
        return FetchError(
            "pip is configured with no-index, so there is no package index to fetch vLLM from",
            hint="unset PIP_NO_INDEX / no-index in pip.conf",
        )
    detail = "; ".join(errors) or "no index configured"
    return FetchError(
        f"no package index had {PROJECT} ({detail})",
        hint=f"check pip's index settings ({settings.source}): PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, pip.conf",
    )


def _wheel_rank(filename: str, version: str):
    """None if ``filename`` is not a vLLM wheel of ``version``; else a sort key (lower is better)."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        name, ver, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, ValueError):
        return None
    # Exact (normalized) match: PEP 440 says 0.16 == 0.16.0, but the cache key and
    # the dist-info directory name must be the wheel's own version string.
    if canonicalize_name(name) != PROJECT or str(ver) != version:
        return None
    manylinux_x86 = any(re.fullmatch(r"manylinux.*_x86_64", t.platform) for t in tags)
    return 0 if manylinux_x86 else 1


def _no_wheel_error(ver: str, pages) -> FetchError:
    from packaging.version import InvalidVersion, Version

    want = Version(ver)
    on_index = set()
    for _i, page in pages:
        for pkg in page.packages:
            with suppress(InvalidVersion, TypeError):
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
    elif (want, False) in on_index:
        hint = "the index has only an sdist of this version; patchkit reads wheels"
    where = ", ".join(_redact(i) for i, _ in pages)
    return FetchError(f"no {PROJECT} {ver} wheel on {where}", hint=hint)


def _find_wheel(ver: str, settings: PipSettings, session, say: Progress) -> dict[str, Any]:
    pages, errors = _project_pages(settings, session, say)
    if not pages:
        raise _no_project_error(settings, errors)
    best = None
    for order, (index, page) in enumerate(pages):
        for pkg in page.packages:
            if not pkg.filename.endswith(".whl"):
                continue
            rank = _wheel_rank(pkg.filename, ver)
            if rank is None:
                continue
            key = (rank, bool(getattr(pkg, "is_yanked", False)), order, pkg.filename)
            if best is None or key < best[0]:
                best = (key, index, pkg)
    if best is None:
        raise _no_wheel_error(ver, pages)
    _key, index, pkg = best
    _safe_wheel_name(pkg.filename)
    return {
        "wheel": pkg.filename,
        "url": pkg.url,
        "index": _redact(index),
        "sha256": (pkg.digests or {}).get("sha256"),
    }


# --------------------------------------------------------------------------- wheel sources


class _RangeUnavailable(Exception):
    """The server cannot serve this wheel by ranges; download it whole instead."""


_Blob = dict  # name -> bytes


def _inflate(info: zipfile.ZipInfo, comp: bytes) -> bytes:
    import zipfile

    if info.flag_bits & 0x1:
        raise FetchError(f"member {info.filename} of the wheel is encrypted", hint="the wheel looks malformed")
    if info.compress_type == zipfile.ZIP_STORED:
        raw = comp
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        d = zlib.decompressobj(-15)
        try:
            raw = d.decompress(comp) + d.flush()
        except zlib.error as e:
            raise FetchError(
                f"cannot inflate {info.filename} from the wheel: {e}", hint="the download was corrupted; try again"
            ) from None
    else:
        raise FetchError(
            f"member {info.filename} uses unsupported compression {info.compress_type}",
            hint="the wheel looks malformed",
        )
    if len(raw) != info.file_size or zlib.crc32(raw) != info.CRC:
        raise FetchError(
            f"CRC/size check failed for {info.filename} from the wheel", hint="the download was corrupted; try again"
        )
    return raw


class _LocalWheel:
    def __init__(self, path: Path):
        import zipfile

        self.path = path
        try:
            self.zf = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as e:
            raise FetchError(
                f"cannot open the downloaded wheel {path}: {e}", hint=f"delete {path} and try again"
            ) from None

    def infolist(self):
        return self.zf.infolist()

    def read(self, infos, say: Progress) -> _Blob:
        import zipfile

        out = {}
        for info in infos:
            try:
                out[info.filename] = self.zf.read(info)
            except (OSError, zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
                raise FetchError(
                    f"cannot read {info.filename} from {self.path}: {e}", hint=f"delete {self.path} and try again"
                ) from None
        return out

    def close(self):
        self.zf.close()


_REMOTE_ERRORS: tuple = ()


def _remote_errors() -> tuple:
    global _REMOTE_ERRORS
    if not _REMOTE_ERRORS:
        import zipfile

        from remotezip import RemoteZipError

        _REMOTE_ERRORS = (RemoteZipError, zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error, KeyError)
    return _REMOTE_ERRORS


class _RemoteWheel:
    """A wheel read with range requests: RemoteZip for the central directory, coalesced ranges for members."""

    def __init__(self, url: str, session, timeout: float):
        from remotezip import RemoteFetcher, RemoteZip

        kwargs = {"headers": {"Accept-Encoding": "identity"}, "timeout": timeout}
        last: Exception | None = None
        self.zf = None
        # Some servers do not support suffix ranges ("bytes=-N"); retry with HEAD + explicit range.
        for suffix in (True, False):
            try:
                self.zf = RemoteZip(
                    url, initial_buffer_size=TAIL_BYTES, session=session, support_suffix_range=suffix, **kwargs
                )
                break
            except _remote_errors() as e:
                last = e
        if self.zf is None:
            raise _RangeUnavailable(f"{type(last).__name__}: {_redact(str(last))}")
        self.size = self.zf.size()
        self.fetcher = RemoteFetcher(url, session, **kwargs)
        offsets = sorted({i.header_offset for i in self.zf.infolist()})
        offsets.append(self.zf.start_dir)
        self._next = {a: b for a, b in itertools.pairwise(offsets)}
        # RemoteZip keeps its first (tail) buffer; members lying wholly inside it cost no request.
        self.tail_start = max(0, self.size - TAIL_BYTES) if self.zf.start_dir >= self.size - TAIL_BYTES else self.size

    def infolist(self):
        return self.zf.infolist()

    def _span(self, info) -> tuple[int, int]:
        return info.header_offset, self._next.get(info.header_offset, self.zf.start_dir)

    def read(self, infos, say: Progress) -> _Blob:
        out: _Blob = {}
        rest = []
        for info in infos:
            start, _end = self._span(info)
            if start >= self.tail_start:
                try:
                    out[info.filename] = self.zf.read(info)
                except _remote_errors() as e:
                    raise _RangeUnavailable(f"{type(e).__name__}: {_redact(str(e))}") from None
            else:
                rest.append(info)
        runs = coalesce([(*self._span(i), i) for i in rest])
        if runs:
            total = sum(b - a for a, b, _ in runs)
            say(f"reading {len(rest)} files in {len(runs)} range request(s), {total / 1e6:.1f} MB")
        for start, end, members in runs:
            data = self._fetch(start, end)
            for info in members:
                out[info.filename] = _member_from_run(data, start, info)
        return out

    def _fetch(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the wheel in one range request."""
        try:
            buf = self.fetcher.fetch((start, end - 1), stream=False)
            try:
                if buf.tell() != start or len(buf) != end - start:
                    raise _RangeUnavailable(f"server answered range {start}-{end - 1} with {buf!r}")
                data = buf.read(len(buf))
            finally:
                buf.close()
        except _remote_errors() as e:
            raise _RangeUnavailable(f"{type(e).__name__}: {_redact(str(e))}") from None
        if len(data) != end - start:
            raise _RangeUnavailable(f"short read: {len(data)} of {end - start} bytes")
        return data

    def close(self):
        with suppress(Exception):
            self.zf.close()


def coalesce(spans, gap: int = MERGE_GAP, max_run: int = MAX_RUN):
    """Merge ``(start, end, item)`` byte spans into ``(start, end, [items])`` runs.

    Spans are sorted by start; a span joins the current run when the hole before
    it is smaller than ``gap`` and the run stays within ``max_run`` bytes.
    """
    runs: list[tuple[int, int, list]] = []
    for start, end, item in sorted(spans, key=lambda s: (s[0], s[1])):
        if runs:
            r_start, r_end, items = runs[-1]
            if start - r_end < gap and max(end, r_end) - r_start <= max_run:
                items.append(item)
                runs[-1] = (r_start, max(end, r_end), items)
                continue
        runs.append((start, end, [item]))
    return runs


def _member_from_run(data: bytes, run_start: int, info) -> bytes:
    off = info.header_offset - run_start
    try:
        sig, _ver, _flags, _method, _t, _d, _crc, _cs, _us, n, m = _LOCAL_HEADER.unpack_from(data, off)
    except struct.error:
        raise FetchError(
            f"truncated local header for {info.filename} in the wheel", hint="the download was corrupted; try again"
        ) from None
    name = data[off + 30 : off + 30 + n]
    if sig != _LOCAL_SIG or (
        name.decode("utf-8", "replace") != info.filename and name.decode("cp437", "replace") != info.filename
    ):
        raise FetchError(f"bad local header for {info.filename} in the wheel", hint="the wheel looks malformed")
    begin = off + 30 + n + m
    comp = data[begin : begin + info.compress_size]
    if len(comp) != info.compress_size:
        raise FetchError(
            f"truncated data for {info.filename} in the wheel", hint="the download was corrupted; try again"
        )
    return _inflate(info, comp)


# --------------------------------------------------------------------------- RECORD


def _verify(name: str, data: bytes, record: dict[str, tuple[str, str]], record_name: str) -> None:
    if name == record_name:
        return  # RECORD cannot list its own hash; zip CRC covers it
    entry = record.get(name)
    if entry is None or not entry[0]:
        raise FetchError(f"{name} is not listed with a hash in the wheel's RECORD", hint="the wheel looks malformed")
    expected, size = entry
    algo, sep, _b64 = expected.partition("=")
    if not sep or algo not in _HASHES:
        raise FetchError(f"RECORD lists {name} with an unsupported hash {expected!r}", hint="the wheel looks malformed")
    if record_hash(data, algo) != expected or (size.isdigit() and int(size) != len(data)):
        raise FetchError(
            f"{name} does not match the hash in the wheel's RECORD",
            hint="the download was corrupted or tampered with; nothing was written for it",
        )


# --------------------------------------------------------------------------- the fetch itself


class _Fetcher:
    def __init__(
        self, ver: str, root: Path, tree: Path, state: dict[str, Any] | None, stats: FetchStats, say: Progress
    ):
        self.ver, self.root, self.tree, self.stats, self.say = ver, root, tree, stats, say
        self.state = state
        self._settings: PipSettings | None = None
        self._session = None

    # lazily: only a real cache miss pays for pip's config and a session
    @property
    def settings(self) -> PipSettings:
        if self._settings is None:
            self._settings = _pip_settings()
        return self._settings

    @property
    def session(self):
        if self._session is None:
            self._session = _make_session(self.settings, self.stats)
        return self._session

    def run(self, wanted: set[str], all_python: bool) -> None:
        try:
            self._run(wanted, all_python)
        finally:
            if self._session is not None:
                self._session.close()

    def _run(self, wanted: set[str], all_python: bool) -> None:
        state = self.state
        if state is None:
            state = {"schema": STATE_SCHEMA, "project": PROJECT, "version": self.ver, "present": [], "absent": []}
            state.update(_find_wheel(self.ver, self.settings, self.session, self.say))
            state["members"] = None
            state["dist_info"] = None
            self.state = state

        # Decide offline whatever the member list already answers.
        if state.get("members") is not None and state.get("dist_info"):
            todo = _missing(state, self.tree, wanted, all_python)
            names = set(state["members"])
            new_absent = {n for n in todo if n not in names}
            if new_absent:
                state["absent"] = sorted(set(state["absent"]) | new_absent)
            if not todo - new_absent:
                _save_state(self.root, state)
                return

        src = self._open_source()
        try:
            self._extract(src, wanted, all_python)
        except _RangeUnavailable as e:
            src.close()
            self.say(f"range requests failed mid-way ({e}); downloading the whole wheel instead")
            src = _LocalWheel(self._download())
            self._extract(src, wanted, all_python)
        finally:
            src.close()

    def _local_wheel_path(self) -> Path:
        _safe_wheel_name(self.state["wheel"])
        return self.root / self.state["wheel"]

    def _open_source(self):
        local = self._local_wheel_path()
        if local.is_file():
            return _LocalWheel(local)
        self.say(f"reading {self.state['wheel']} from {self.state.get('index') or 'the index'} with range requests")
        try:
            return _RemoteWheel(self.state["url"], self.session, self.settings.timeout)
        except _RangeUnavailable as e:
            self.say(f"the server does not serve byte ranges ({e}); downloading the whole wheel")
            return _LocalWheel(self._download())

    def _download(self) -> Path:
        import requests

        dest = self._local_wheel_path()
        part = dest.with_name(dest.name + ".part")
        url, expected = self.state["url"], (self.state.get("sha256") or "").lower()
        self.stats.full_download = True
        h = hashlib.sha256()
        try:
            with self.session.get(
                url, stream=True, timeout=self.settings.timeout, headers={"Accept-Encoding": "identity"}
            ) as r:
                r.raise_for_status()
                total = int(r.headers.get("Content-Length") or 0)
                self.say(f"downloading {self.state['wheel']}" + (f" ({total / 1e6:.0f} MB)" if total else ""))
                done, next_report = 0, 0.1
                with open(part, "wb") as f:
                    for chunk in r.iter_content(1 << 20):
                        f.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if total and done / total >= next_report:
                            self.say(
                                f"downloading {self.state['wheel']}: {done * 100 // total}% ({done / 1e6:.0f}/{total / 1e6:.0f} MB)"
                            )
                            next_report = (done * 10 // total + 1) / 10
        except (requests.RequestException, OSError) as e:
            _unlink(part)
            raise FetchError(
                f"cannot download {self.state['wheel']}: {_redact(str(e))}",
                hint="check the network and pip's index settings (PIP_INDEX_URL, pip.conf, cert)",
            ) from None
        except BaseException:
            _unlink(part)
            raise
        if expected:
            if h.hexdigest() != expected:
                _unlink(part)
                raise FetchError(
                    f"{self.state['wheel']} does not match the sha256 the index gives ({expected[:12]}...)",
                    hint="the download was corrupted or tampered with; try again",
                )
        else:
            self.say("the index gave no sha256 for the wheel; relying on RECORD checks only")
        os.replace(part, dest)
        return dest

    def _extract(self, src, wanted: set[str], all_python: bool) -> None:
        state, tree = self.state, self.tree
        infos = {}
        for info in src.infolist():
            if not info.is_dir():
                infos[info.filename] = info
        names = sorted(infos)
        dist_infos = [n for n in names if re.fullmatch(rf"{PROJECT}-[^/]+\.dist-info/RECORD", n)]
        if not dist_infos:
            raise FetchError(f"{state['wheel']} has no {PROJECT}-*.dist-info/RECORD", hint="the wheel looks malformed")
        # Prefer the dist-info whose version matches; there is normally exactly one.
        dist_infos.sort(key=lambda n: n.split("/")[0] != f"{PROJECT}-{self.ver}.dist-info")
        record_name = dist_infos[0]
        state["dist_info"] = record_name.rsplit("/", 1)[0]
        state["members"] = names

        need = _needed(state, wanted, all_python)
        present = set(state.get("present", ()))
        absent = {n for n in need if n not in infos}
        fetch = sorted(n for n in need - absent if not (n in present and (tree / n).is_file()))
        real_tree = tree.resolve()
        dests = {n: _safe_dest(tree, n, real_tree) for n in fetch}  # refuse unsafe names before any I/O

        record = None
        if record_name not in fetch:
            try:
                record = parse_record((tree / record_name).read_bytes())
            except OSError:
                fetch.append(record_name)
                dests[record_name] = _safe_dest(tree, record_name)

        blobs = src.read([infos[n] for n in fetch], self.say) if fetch else {}
        if record is None:
            record = parse_record(blobs[record_name])
        for name in fetch:  # verify everything before writing anything
            _verify(name, blobs[name], record, record_name)
        for name in fetch:
            try:
                _atomic_write(dests[name], blobs[name])
            except OSError as e:
                raise FetchError(f"cannot write {dests[name]}: {e}", hint=_CACHE_HINT) from None
        state["present"] = sorted(present | set(fetch))
        state["absent"] = sorted(set(state.get("absent", ())) | absent)
        _save_state(self.root, state)
        if self.stats.requests:
            self.say(
                f"vLLM {self.ver}: {len(fetch)} file(s) verified against RECORD; "
                f"{self.stats.requests} request(s), {self.stats.bytes / 1e6:.2f} MB"
            )


def _safe_wheel_name(name: str) -> None:
    if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".whl"):
        raise FetchError(f"refusing odd wheel file name {name!r} from the index", hint="check the index")


def _unlink(path: Path) -> None:
    with suppress(OSError):
        path.unlink()
