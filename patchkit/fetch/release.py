"""release_tree(): the stock files of a release from the cache, fetched first if the cache lacks them.

A call the cache answers takes no lock and does no network I/O. Otherwise, under the release's
lock: the index is asked for the wheel (once per release: the answer is kept in release.json), the
wheel's members are read by range requests, or out of the whole wheel when the server does not
serve ranges, and the tree and release.json are updated.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.errors import FetchError
from patchkit.fetch import net  # called as net.*, so that a test can stub the network in one place
from patchkit.fetch.cache import (
    CACHE_HINT,
    State,
    clean_request,
    load_state,
    missing,
    new_state,
    release_root,
    save_state,
)
from patchkit.fetch.download import download_wheel
from patchkit.fetch.extract import extract
from patchkit.fetch.index import normalize_version
from patchkit.fetch.net import FetchStats, Progress
from patchkit.fetch.ranges import RangeUnavailable, RemoteWheel
from patchkit.fetch.wheel_choice import check_wheel_name, find_wheel
from patchkit.fetch.zipread import LocalWheel, WheelSource
from patchkit.locks import held

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.pipconfig import PipSettings

LOCK_FILE = ".lock"
LOCK_TIMEOUT = 1800.0  # a cold fetch of every .py of a release takes minutes on a slow line

#: Stats of the most recent release_tree() call in this process (for reports, benchmarks).
last_fetch_stats: FetchStats | None = None


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
    ver = normalize_version(version)
    if isinstance(paths, str):
        paths = [paths]
    wanted = {clean_request(p) for p in paths}
    say = progress or (lambda _msg: None)
    stats = FetchStats()
    last_fetch_stats = stats

    root = release_root(ver)
    tree = root / "tree"
    state = load_state(root)
    if state is not None and not missing(state, tree, wanted, all_python):
        return tree  # fast path: no lock, no network

    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create the cache directory {root}: {e}", hint=CACHE_HINT) from None
    started = time.monotonic()
    with _release_lock(root, ver, say):
        state = load_state(root)  # another process may have fetched meanwhile
        if state is None or missing(state, tree, wanted, all_python):
            _Fetcher(ver, root, stats, say).run(state, wanted, all_python)
    stats.seconds = time.monotonic() - started
    return tree


def _release_lock(root: Path, ver: str, say: Progress) -> AbstractContextManager[None]:
    lock_file = root / LOCK_FILE
    return held(
        lock_file,
        LOCK_TIMEOUT,
        busy=lambda _waited: FetchError(
            f"timed out waiting for the lock {lock_file}",
            hint="is another patchkit process stuck? remove the lock file if not",
        ),
        unusable=lambda e: FetchError(f"cannot lock {lock_file}: {e}", hint=CACHE_HINT),
        on_wait=lambda: say(f"waiting for another patchkit process fetching vLLM {ver}..."),
    )


class _Fetcher:
    """One fetch under the release's lock. pip's settings and the session are made only when the
    index or the wheel has to be asked."""

    def __init__(self, ver: str, root: Path, stats: FetchStats, say: Progress):
        self.ver, self.root, self.tree, self.stats, self.say = ver, root, root / "tree", stats, say
        self._settings: PipSettings | None = None
        self._session: Any = None

    @property
    def settings(self) -> PipSettings:
        if self._settings is None:
            self._settings = net.pip_settings()
        return self._settings

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = net.make_session(self.settings, self.stats)
        return self._session

    def run(self, state: State | None, wanted: set[str], all_python: bool) -> None:
        try:
            self._run(state, wanted, all_python)
        finally:
            if self._session is not None:
                self._session.close()

    def _run(self, state: State | None, wanted: set[str], all_python: bool) -> None:
        if state is None:
            state = new_state(self.ver)
            state.update(find_wheel(self.ver, self.settings, self.session, self.say))
            state["members"] = None
            state["dist_info"] = None
        if self._decided_offline(state, wanted, all_python):
            save_state(self.root, state)
            return
        written = self._extract(state, wanted, all_python)
        save_state(self.root, state)
        if self.stats.requests:
            self.say(
                f"vLLM {self.ver}: {written} file(s) verified against RECORD; "
                f"{self.stats.requests} request(s), {self.stats.bytes / 1e6:.2f} MB"
            )

    def _decided_offline(self, state: State, wanted: set[str], all_python: bool) -> bool:
        """Record as absent what the member list already says the wheel lacks; True if nothing is left."""
        if state.get("members") is None or not state.get("dist_info"):
            return False
        todo = missing(state, self.tree, wanted, all_python)
        new_absent = todo - set(state["members"])
        if new_absent:
            state["absent"] = sorted(set(state["absent"]) | new_absent)
        return not todo - new_absent

    def _extract(self, state: State, wanted: set[str], all_python: bool) -> int:
        src = self._open_source(state)
        try:
            return extract(src, state, self.tree, self.ver, wanted, all_python, self.say)
        except RangeUnavailable as e:
            src.close()
            self.say(f"range requests failed mid-way ({e}); downloading the whole wheel instead")
            src = LocalWheel(self._download(state))
            return extract(src, state, self.tree, self.ver, wanted, all_python, self.say)
        finally:
            src.close()

    def _open_source(self, state: State) -> WheelSource:
        local = self._local_wheel_path(state)
        if local.is_file():
            return LocalWheel(local)
        self.say(f"reading {state['wheel']} from {state.get('index') or 'the index'} with range requests")
        try:
            return RemoteWheel(state["url"], self.session, self.settings.timeout)
        except RangeUnavailable as e:
            self.say(f"the server does not serve byte ranges ({e}); downloading the whole wheel")
            return LocalWheel(self._download(state))

    def _local_wheel_path(self, state: State) -> Path:
        check_wheel_name(state["wheel"])
        return self.root / state["wheel"]

    def _download(self, state: State) -> Path:
        self.stats.full_download = True
        dest = self._local_wheel_path(state)
        return download_wheel(
            self.session, state["url"], state.get("sha256"), dest, timeout=self.settings.timeout, say=self.say
        )
