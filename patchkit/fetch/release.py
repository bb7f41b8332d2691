"""release_tree(): the stock files of a release from the cache, fetched first if the cache lacks them.

A call the cache answers takes no lock and does no network I/O. Otherwise, under the release's
lock: the index is asked for the wheel (once per release: the answer is kept in release.json), the
wheel's members are read by range requests, or out of the whole wheel when the server does not
serve ranges, and the tree and release.json are updated.
"""

from __future__ import annotations

import os
import shlex
import stat
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.base import notes
from patchkit.base.errors import BadInput, FetchError
from patchkit.fetch import net, origin  # net: called as net.*, so that a test can stub the network in one place
from patchkit.fetch.cache import (
    STATE_FILE,
    Damaged,
    State,
    cache_write_error,
    clean_request,
    clear_in_the_way,
    clear_non_directories,
    damaged_members,
    entry_lock,
    file_sha256,
    load_state,
    missing,
    new_state,
    normalize_version,
    release_root,
    remove_entry,
    save_state,
)
from patchkit.fetch.download import download_wheel
from patchkit.fetch.extract import extract
from patchkit.fetch.net import FetchStats, Progress
from patchkit.fetch.published import other_file, pinned_sha256
from patchkit.fetch.ranges import RangeUnavailable, RemoteWheel
from patchkit.fetch.wheel_choice import check_wheel_name, find_wheel
from patchkit.fetch.zipread import LocalWheel, WheelSource

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.fetch.pipconfig import PipSettings

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
    warn: Progress | None = None,
    recheck_index: bool = False,
) -> Path:
    """Return a site-packages-like directory holding stock files of vLLM ``version``.

    The directory always has ``vllm-<v>.dist-info/METADATA`` and ``RECORD``, plus
    each of ``paths`` (POSIX, relative to the root, e.g. ``vllm/config/speculative.py``)
    that the wheel has; with ``all_python`` every ``vllm/**/*.py`` too.  A path the
    wheel lacks is not an error: it is recorded as absent and simply not in the tree.

    Every call checks the cached files it answers with against the wheel's RECORD; a damaged
    entry is fetched again, and ``warn`` (stderr by default) says so. With ``recheck_index`` (a
    command whose answer is the release itself: fetch, verify against a release), a release cached
    from an index pip no longer names is fetched again from the one it names (origin.py).
    """
    global last_fetch_stats
    ver = normalize_version(version)
    wanted = {clean_request(p) for p in ([paths] if isinstance(paths, str) else paths)}
    say = progress or (lambda _msg: None)
    stats = FetchStats()
    last_fetch_stats = stats

    root = release_root(ver)
    tree = root / "tree"
    _clear_odd_directories(root, warn or _to_stderr)
    cached = _state_or_none(root, ver)  # read once: each check below looks at the same record
    # an unsealed record is never believed, whoever asks
    recheck = not _sealed_state(cached) or (recheck_index and _settings_changed(cached, ver, say))
    if _cache_answers(cached, tree, wanted, all_python) and not recheck:
        return tree  # fast path: no lock, no network

    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cache_write_error(root, e) from None
    started = time.monotonic()
    fetcher = _Fetcher(ver, root, stats, say, warn or _to_stderr)
    try:
        with _release_lock(root, ver, say):
            _fetch_locked(fetcher, wanted, all_python, recheck_index=recheck_index, warn=warn)
    finally:
        _forget_if_empty(root)
    stats.seconds = time.monotonic() - started
    _refuse_changed_meanwhile(root, ver)
    return tree


def _fetch_locked(
    fetcher: _Fetcher, wanted: set[str], all_python: bool, *, recheck_index: bool, warn: Progress | None
) -> None:
    """Under the release's lock: the record checked (an unsealed one made anew from the index, one
    from an index pip no longer names held to the configured one), then what is missing fetched; a
    failure leaves no file release.json does not list."""
    root, ver, say = fetcher.root, fetcher.ver, fetcher.say
    try:
        state = _checked_state(root, ver, wanted, all_python, fetcher.warn)
        if state is not None and not _sealed_state(state):
            state = _record_from_the_index(ver, say)
        elif recheck_index and state is not None and not _from_a_configured_index(root, ver, state, say, warn):
            state = _served_by_the_configured_index(root, ver, state, say)
        if state is None or missing(state, fetcher.tree, wanted, all_python):
            fetcher.run(state, wanted, all_python)
    except BaseException:
        _discard_partial(root, ver)
        raise


def _refuse_changed_meanwhile(root: Path, ver: str) -> None:
    """After the fetch, the cache as release.json records it, else the refusal: another process wrote it."""
    state = _state_or_none(root, ver)
    if state is None or damaged_members(state, root / "tree"):
        raise FetchError(
            f"the cached files of vLLM {ver} changed while patchkit fetched them",
            hint=f"is another process writing {root}? remove it and try again",
        )


def _settings_changed(state: State | None, ver: str, say: Progress) -> bool:
    """Whether pip's settings may differ from those the cached release was fetched with (then the
    lock is taken and pip asked); unchanged, where it came from is said (-v)."""
    if state is None or not origin.unchanged_since(state.get("pip_config")):
        return True
    say(f"the cached vLLM {ver} came from {state.get('index')}")
    return False


def _from_a_configured_index(root: Path, ver: str, state: State, say: Progress, warn: Progress | None) -> bool:
    def remember(settings: PipSettings) -> None:
        state["pip_config"] = origin.sealed_settings(settings)
        with suppress(FetchError):  # a cache that cannot be written: pip is asked again next time
            save_state(root, state)

    cached = f"the cached vLLM {ver}"
    came_from = str(state.get("index"))
    return origin.from_a_configured_index(
        cached, "the release", came_from, state.get("pip_config"), say, warn or _to_stderr, remember
    )


def _served_by_the_configured_index(root: Path, ver: str, state: State, say: Progress) -> State | None:
    """A release cached from an index pip no longer names, against the wheel the configured one
    serves: the same file (name and sha256) stays, its record naming that index; another file under
    the (sealed) record is refused (a mirror may serve anything: only removing the record makes way
    for it)."""
    settings = net.pip_settings()
    session = net.make_session(settings, None)
    try:
        chosen = find_wheel(ver, settings, session, say)
    finally:
        session.close()
    recorded = str(state.get("sha256") or "").lower()
    served = str(chosen["sha256"] or "").lower()
    if chosen["wheel"] != state["wheel"] or not served or served != recorded:
        raise _another_file(root, ver, state, chosen)
    state.update(index=chosen["index"], url=chosen["url"], pip_config=origin.sealed_settings(settings))
    save_state(root, state)
    return state


def _another_file(root: Path, ver: str, state: State, chosen: dict[str, Any]) -> BadInput:
    """The refusal of a configured index's wheel that is not the file the sealed record names: both
    files and sha256s, and the two ways on."""
    served = str(chosen["sha256"] or "").lower()
    gives = f"with sha256 {served[:16]}..." if served else "with no sha256 to tell it by"
    recorded = str(state.get("sha256") or "").lower()
    which = "for that name" if chosen["wheel"] == state["wheel"] else f"for {state['wheel']} of vLLM {ver}"
    return BadInput(
        f"{chosen['index']} serves {chosen['wheel']} {gives}, but the release cache (from {state.get('index')}) "
        f"recorded {recorded[:16]}... {which}: not the same file; refusing it",
        hint="two indexes serve different files of one release: point pip at the one you trust; to take the "
        f"release from {chosen['index']} instead, remove {shlex.quote(str(root / STATE_FILE))} and run the command again",
    )


def _held_to_what_is_recorded(ver: str, chosen: dict[str, Any]) -> dict[str, Any]:
    """The index's wheel, if it is the file patchkit recorded under its name (the wheel cache's sealed
    record of a download), or no file was recorded; else the refusal (an index with no sha256 for
    it cannot show it is the same file)."""
    pin = pinned_sha256(ver, chosen["wheel"])
    served = str(chosen["sha256"] or "").lower()
    if pin is None or served == pin.sha256:
        return chosen
    if served:
        raise other_file(pin, chosen["wheel"], f"{chosen['index']} serves", served)
    raise BadInput(
        f"{chosen['index']} gives no sha256 for {chosen['wheel']}, so it cannot be told from the file "
        f"{pin.source} recorded ({pin.sha256[:16]}...) under that name; refusing it",
        hint=f"point pip at an index you trust; to drop patchkit's record, remove {shlex.quote(str(pin.record))} "
        "and run the command again",
    )


def _sealed_state(state: State | None) -> bool:
    """Of a state load_state read: it keeps the seal only where the seal verified (no second check)."""
    return state is not None and state.get("seal") is not None


def _record_from_the_index(ver: str, say: Progress) -> State:
    """A new record for a release whose release.json is not sealed (an older patchkit's, another
    machine's, or edited). The index vouches for the wheel's sha256 alone, never the
    RECORD or files beside it, so nothing of the old record is kept: every file is fetched again and
    written over the old one by a rename (a reader that opened it finishes reading it; the tree is
    never removed under a reader). With no index to ask, it is refused."""
    settings = net.pip_settings()
    session = net.make_session(settings, None)
    try:
        return _new_record(ver, settings, session, say)
    except FetchError as e:
        raise _unsealed_offline(ver, e) from None
    finally:
        session.close()


def _new_record(ver: str, settings: PipSettings, session: Any, say: Progress) -> State:
    """release.json of a release the index is asked for afresh: its wheel, nothing in the tree yet."""
    state = new_state(ver)
    state.update(_held_to_what_is_recorded(ver, find_wheel(ver, settings, session, say)))
    state["pip_config"] = origin.sealed_settings(settings)
    state["members"] = None
    state["dist_info"] = None
    return state


def _unsealed_offline(ver: str, cause: FetchError) -> FetchError:
    return FetchError(
        f"the cached vLLM {ver} was not sealed by this user's patchkit (another machine's, an older "
        f"patchkit's, or edited), so it is not used; fetching it again failed: {cause.message}",
        hint=cause.hint or "run the command again where pip's index can be reached",
    )


def _clear_odd_directories(root: Path, warn: Progress) -> None:
    """releases/, releases/<v>/ and its tree/ are directories patchkit made, and the lock a file: a
    symlink (to anywhere) or anything else in their place goes, so that nothing is read or written
    outside the cache (the lock file is opened for writing: never through a symlink)."""
    if not clear_non_directories([root.parent, root, root / "tree"], warn):
        return
    lock = root / LOCK_FILE
    with suppress(OSError):
        if not stat.S_ISREG(lock.lstat().st_mode):
            warn(f"{lock} in the cache is not a regular file: removing it")
            remove_entry(lock)


def _cache_answers(state: State | None, tree: Path, wanted: set[str], all_python: bool) -> bool:
    """Whether the cache holds every needed file, each as RECORD gives it (release.json read without
    the lock)."""
    return state is not None and not missing(state, tree, wanted, all_python) and not damaged_members(state, tree)


def _state_or_none(root: Path, ver: str) -> State | None:
    try:
        return load_state(root, ver)
    except Damaged:
        return None


def _checked_state(root: Path, ver: str, wanted: set[str], all_python: bool, warn: Progress) -> State | None:
    """release.json under the lock, with what is damaged in the entry removed (and said): a damaged
    release.json goes (the entry is then fetched as new), as do the damaged files it lists."""
    tree = root / "tree"
    try:
        state = load_state(root, ver)
    except Damaged as e:
        warn(f"the cached vLLM {ver} is damaged ({e}): fetching it again")
        remove_entry(root / STATE_FILE)
        remove_entry(tree)  # nothing in it is vouched for any more
        return None
    if state is None or not _sealed_state(state):
        return state  # an unsealed one is not believed at all: replaced whole, not mended
    damaged = damaged_members(state, tree)
    if damaged:
        shown = "; ".join(list(damaged.values())[:3]) + (f"; {len(damaged) - 3} more" if len(damaged) > 3 else "")
        warn(f"cached files of vLLM {ver} are damaged ({shown}): fetching them again")
        for name in damaged:
            clear_in_the_way(tree, name)
            remove_entry(tree / name)  # nothing on the way is a symlink now: this removes the file itself
        state["present"] = sorted(set(state["present"]) - set(damaged))
        save_state(root, state)
    return state


def _discard_partial(root: Path, ver: str) -> None:
    """After a failed fetch: files the tree holds that release.json does not list are never used,
    so they go (a full disk leaves room again); an entry with no release.json goes whole."""
    tree = root / "tree"
    state = _state_or_none(root, ver)
    with suppress(OSError):
        if state is None:
            for entry in list(root.iterdir()):
                if entry.name != LOCK_FILE:
                    remove_entry(entry)
            return
        keep = set(state["present"])
        for directory, _dirs, files in os.walk(tree):  # never into a symlinked directory
            for name in files:
                path = Path(directory, name)
                if path.relative_to(tree).as_posix() not in keep:
                    remove_entry(path)


def _forget_if_empty(root: Path) -> None:
    """A release directory that holds only its lock (a version the index does not have) goes."""
    with suppress(OSError):
        if [entry.name for entry in root.iterdir()] == [LOCK_FILE]:
            (root / LOCK_FILE).unlink()
            root.rmdir()


def _to_stderr(message: str) -> None:
    notes.say(f"patchkit: warning: {message}")


def _release_lock(root: Path, ver: str, say: Progress) -> AbstractContextManager[None]:
    return entry_lock(
        root / LOCK_FILE, LOCK_TIMEOUT, f"waiting for another patchkit process fetching vLLM {ver}...", say
    )


class _Fetcher:
    """One fetch under the release's lock. pip's settings and the session are made only when the
    index or the wheel has to be asked."""

    def __init__(self, ver: str, root: Path, stats: FetchStats, say: Progress, warn: Progress):
        self.ver, self.root, self.tree, self.stats, self.say = ver, root, root / "tree", stats, say
        self.warn = warn
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
            state = _new_record(self.ver, self.settings, self.session, self.say)
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
        if self._kept_wheel_intact(local, state):
            return LocalWheel(local)
        self.say(f"reading {state['wheel']} from {state.get('index') or 'the index'} with range requests")
        try:
            return RemoteWheel(self._url(state), self.session, self.settings.timeout)
        except RangeUnavailable as e:
            self.say(f"the server does not serve byte ranges ({e}); downloading the whole wheel")
            return LocalWheel(self._download(state))

    def _kept_wheel_intact(self, local: Path, state: State) -> bool:
        """Whether a wheel kept by an earlier download is there and is still the index's (sha256)."""
        if not local.exists() and not local.is_symlink():
            return False
        expected = (state.get("sha256") or "").lower()
        try:
            digest = file_sha256(local)
            intact = not expected or digest == expected
        except Damaged:
            intact = False
        if not intact:
            self.warn(f"the kept wheel {local} is damaged: downloading it again")
            remove_entry(local)
        return intact

    def _local_wheel_path(self, state: State) -> Path:
        wheel: str = state["wheel"]  # a wheel's file name: _shape_problem checked it, and so does check_wheel_name
        check_wheel_name(wheel)
        return self.root / wheel

    def _download(self, state: State) -> Path:
        self.stats.full_download = True
        dest = self._local_wheel_path(state)
        return download_wheel(
            self.session, self._url(state), state.get("sha256"), dest, timeout=self.settings.timeout, say=self.say
        )

    def _url(self, state: State) -> str:
        """The wheel's URL with the credentials of its index (the cache keeps it without them)."""
        return net.with_index_credentials(state["url"], self.settings.index_urls)
