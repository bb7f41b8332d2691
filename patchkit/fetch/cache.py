"""The cache of one release (``cache_dir()/releases/<version>/``): where things go, release.json
(what the wheel holds and what the tree has), which requested files are still missing, and the
re-check of everything read back from it.

The cache is untrusted input: release.json is checked for its shape, and every cached file is read
without following a symlink (a regular file or nothing) and checked against the wheel's RECORD,
whose own sha256 release.json keeps from the fetch that took it out of the wheel."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import stat
import urllib.parse
from collections.abc import Callable, Collection, Iterable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any, BinaryIO

from packaging.version import Version

from patchkit.base import seal
from patchkit.base.errors import BadInput, FetchError
from patchkit.base.fsutil import NO_SPACE, all_safe, atomic_write, json_text, load_json_text, unsafe_reason
from patchkit.base.hashing import stream_sha256
from patchkit.base.locks import directory_in_the_way, held
from patchkit.base.usercache import cache_dir
from patchkit.distinfo.record import parse_record, record_hash

STATE_FILE = "release.json"
STATE_SCHEMA = 2  # 2: release.json binds the cached RECORD by its sha256 (record_sha256)
CACHE_HINT = "set PATCHKIT_CACHE_DIR to a writable directory"
FILE_MODE = 0o644  # cached files are readable by all, whatever the umask
MAX_STATE_BYTES = 16 << 20  # a vLLM wheel's member list is ~0.3 MB; anything this big is not ours
STATE_SEAL_KIND = "release-state"

State = dict[str, Any]  # release.json: wheel, url, index, sha256, members, dist_info, present, absent, record_sha256


PROJECT = "vllm"
_RELEASE_NUMBERS = 3  # vLLM's releases: major.minor.patch


def without_userinfo(url: str) -> str:
    """`url` without its user:password@: what the cache keeps (CI saves and shares the cache);
    here, not in `net`, so that reading the cache loads no network module."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


LONGEST_VERSION = 100


def normalize_version(version: str) -> str:
    """The release number in PEP 440's normal form (the cache key), with three numbers as vLLM's
    releases have, where PEP 440 holds it the same version (0.16 and 0.16.0.0 are 0.16.0, as pip
    finds them; 0.16.0.1 stays); BadInput for anything else."""

    text = str(version).strip()
    if len(text) > LONGEST_VERSION:  # it names the cache's directories: a file name holds 255 bytes
        said = f"not a vLLM version patchkit can fetch: {len(text):,} characters (at most {LONGEST_VERSION})"
        raise BadInput(said, hint="use a release number such as 0.16.0")
    try:
        parsed = Version(text)
    except ValueError:  # InvalidVersion, or a number of more digits than int() converts
        raise BadInput(f"not a valid vLLM version: {version!r}", hint="use a release number such as 0.16.0") from None
    release = list(parsed.release)
    while len(release) > _RELEASE_NUMBERS and release[-1] == 0:  # trailing zeros: equal under PEP 440
        release.pop()
    if len(release) == len(parsed.release) >= _RELEASE_NUMBERS:
        return str(parsed)
    padded = ".".join(map(str, (*release, *[0] * (_RELEASE_NUMBERS - len(release)))))
    epoch = f"{parsed.epoch}!" if parsed.epoch else ""
    suffix = str(parsed)[len(parsed.base_version) :]  # pre, post, dev and local parts, as normalized
    return str(Version(epoch + padded + suffix))


class Damaged(Exception):
    """A cache entry that is not what patchkit wrote: its text says why."""


def release_root(ver: str) -> Path:
    return cache_dir() / "releases" / ver


def new_state(ver: str) -> State:
    return {"schema": STATE_SCHEMA, "project": PROJECT, "version": ver, "present": [], "absent": []}


def load_state(root: Path, ver: str) -> State | None:
    """release.json, checked: None when there is none (or an older schema's); Damaged for anything
    patchkit did not write (a symlink, not a file, too big, not JSON, the wrong shape)."""
    try:
        raw = read_regular(root, STATE_FILE, limit=MAX_STATE_BYTES)
    except FileNotFoundError:
        return None
    return _checked_state(raw, ver)


def _checked_state(raw: bytes, ver: str) -> State | None:
    known = (hashlib.sha256(raw).digest(), ver, seal.key_id())
    sealed = _SOUND_STATES.get(known)
    if sealed is not None:  # these very bytes passed every check below in this process
        data = json.loads(raw)
    else:
        try:
            data = load_json_text(raw)
        except (ValueError, RecursionError) as e:
            raise Damaged(f"{STATE_FILE} is not JSON ({e})") from None
        if isinstance(data, dict) and isinstance(data.get("schema"), int) and data["schema"] < STATE_SCHEMA:
            return None  # written by an older patchkit: fetched again, not damage
        problem = _shape_problem(data, ver)
        if problem:
            raise Damaged(f"{STATE_FILE} {problem}")
        sealed = state_sealed(data)
        _remember_sound(known, sealed)
    if not sealed:
        data["seal"] = None  # saved again, it stays unsealed: a save never vouches for what it read
    checked: State = data  # _shape_problem passed (these very bytes, or now)
    return checked


# release.json's bytes (sha256), version and seal key -> sealed, for bytes that passed _checked_state:
# every fetch of a release checks its ~0.3 MB member list (thousands of paths) and its seal again,
# once per set in a `verify --all` (most of a warm run's CPU time when each load did it all).
_SOUND_STATES: dict[tuple[bytes, str, bytes], bool] = {}
_SOUND_STATES_KEPT = 256


def _remember_sound(known: tuple[bytes, str, bytes], sealed: bool) -> None:
    if len(_SOUND_STATES) >= _SOUND_STATES_KEPT:
        _SOUND_STATES.clear()
    _SOUND_STATES[known] = sealed


def cached_record(version: str) -> bytes | None:
    """The published wheel's RECORD of `version` if the cache holds it intact (the one the fetch
    took out of the wheel) under a sealed release.json, else None; no lock, no network, nothing
    written. An unsealed record is no evidence."""
    root = release_root(normalize_version(version))
    try:
        found = _record_of(read_regular(root, STATE_FILE, limit=MAX_STATE_BYTES), root.name, seal.key_id())
    except (Damaged, FileNotFoundError):
        return None
    if found is None:
        return None
    dist_info, record_sha256 = found
    try:
        data = read_regular(root / "tree", f"{dist_info}/RECORD")
    except (Damaged, FileNotFoundError):
        return None
    # The one the fetch took out of the wheel (trusted_record's test, without parsing it here).
    return data if hashlib.sha256(data).hexdigest() == record_sha256 else None


@functools.lru_cache(maxsize=4)
def _record_of(raw: bytes, ver: str, _key_id: bytes) -> tuple[str, str | None] | None:
    """(dist_info, record_sha256) of release.json's bytes `raw` if sealed under the key `_key_id`
    names, or None; kept by those: each set's integrity check asks it of the same release (~2 ms to
    parse and check each time)."""
    try:
        state = _checked_state(raw, ver)
    except Damaged:
        return None
    if state is None or not state.get("dist_info") or state.get("seal") is None:
        return None
    return state["dist_info"], state.get("record_sha256")


def _shape_problem(data: Any, ver: str) -> str | None:
    if not isinstance(data, dict):
        return "is not an object"
    expected = {"schema": STATE_SCHEMA, "project": PROJECT, "version": ver}
    for key, value in expected.items():
        if data.get(key) != value:
            return f"has {key} {data.get(key)!r}, not {value!r}"
    for key in ("wheel", "url"):
        if not isinstance(data.get(key), str):
            return f"has no {key}"
    for key in ("index", "sha256", "dist_info", "record_sha256"):
        if not isinstance(data.get(key), (str, type(None))):
            return f"has a {key} that is not a string"
    for key in ("present", "absent", "members"):
        names = data.get(key)
        if names is None and key == "members":
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or not all_safe(names):
            return f"has a {key} list that is not a list of member paths"
    dist_info = data.get("dist_info")
    if dist_info is not None and (
        "/" in dist_info or unsafe_reason(dist_info) or data.get("members") is None or not data.get("record_sha256")
    ):
        return f"has an inconsistent dist_info {dist_info!r}"
    return None


def state_sealed(state: State) -> bool:
    """Whether release.json was sealed by this user's patchkit: only then are its sha256 and RECORD
    evidence of what the index published (one written by an older patchkit, or by whoever can write
    the cache, still names the tree's files, each checked against its RECORD, but vouches for no
    wheel)."""
    unsealed = {k: v for k, v in state.items() if k != "seal"}
    return seal.sealed(STATE_SEAL_KIND, str(state.get("version")), seal.canonical(unsealed), state.get("seal"))


def save_state(root: Path, state: State) -> None:
    """Write release.json, sealed unless it was read back unsealed (load_state marks it)."""
    vouched = state.get("seal", "new") is not None
    state = {k: v for k, v in state.items() if k != "seal"}
    state["present"] = sorted(set(state.get("present", ())))
    state["absent"] = sorted(set(state.get("absent", ())))
    state["url"] = without_userinfo(state["url"])  # a later fetch takes the credentials from pip's settings
    if vouched:
        state["seal"] = seal.seal(STATE_SEAL_KIND, str(state.get("version")), seal.canonical(state))
    write_cached(root / STATE_FILE, (json_text(state, "the cache state", indent=1, sort_keys=True) + "\n").encode())


def write_cached(dest: Path, data: bytes) -> None:
    try:
        atomic_write(dest, data, mode=FILE_MODE)
    except OSError as e:
        raise cache_write_error(dest, e) from None


def cache_write_error(path: Path, e: OSError) -> FetchError:
    """The error for a cache write that failed: a full disk says so (more room is the fix there)."""
    if e.errno in NO_SPACE:
        return FetchError(
            f"no space left on the device holding {path} ({e.strerror})",
            hint="free some space there, or set PATCHKIT_CACHE_DIR to a directory on another device",
        )
    return FetchError(f"cannot write {path}: {e}", hint=CACHE_HINT)


def read_regular(base: Path, rel: str, *, limit: int | None = None) -> bytes:
    """The bytes of `base`/`rel`, a regular file reached without following any symlink (`base`
    itself included). FileNotFoundError when it is not there; Damaged for a symlink, a directory,
    a fifo or anything else in the way, or a file over `limit` bytes."""
    reason = unsafe_reason(rel)
    if reason:
        raise Damaged(f"{rel!r}: the path {reason}")
    parts = rel.split("/")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        directory = os.open(base, flags | os.O_DIRECTORY)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise Damaged(f"{base} is not a plain directory ({e.strerror})") from None
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=directory)
            except FileNotFoundError:
                raise
            except OSError as e:
                raise Damaged(f"{'/'.join(parts[: i + 1])} is not a plain directory ({e.strerror})") from None
            # the outer one closed only once `directory` names the inner: an interrupt between the two
            # must not leave the finally below closing a descriptor already closed (EBADF over the interrupt)
            directory, outer = inner, directory
            os.close(outer)
        try:
            fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=directory)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise Damaged(f"{rel} is not a regular file ({e.strerror})") from None
    finally:
        os.close(directory)
    with _regular(fd, rel) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise Damaged(f"{rel} is larger than {limit} bytes")
    return data


def _regular(fd: int, name: str) -> BinaryIO:
    """An open descriptor as a file object, if it is a regular file (closed and Damaged if not)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Damaged(f"{name} is not a regular file")
    return os.fdopen(fd, "rb")


def file_sha256(path: Path) -> str:
    """The sha256 of a regular file (a whole wheel: read in chunks); Damaged for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise Damaged(f"{path} is not a regular file ({e.strerror})") from None
    with _regular(fd, str(path)) as fh:
        return stream_sha256(fh)


def python_members(names: Iterable[str]) -> list[str]:
    return [n for n in names if n.startswith(PROJECT + "/") and n.endswith(".py")]


def record_member(state: State) -> str | None:
    return f"{state['dist_info']}/RECORD" if state.get("dist_info") else None


def needed(state: State | None, wanted: set[str], all_python: bool) -> set[str]:
    """The members a call asks for: `wanted`, the dist-info's METADATA and RECORD, every .py with `all_python`."""
    need = set(wanted)
    if state is not None and state.get("dist_info"):
        need |= {f"{state['dist_info']}/METADATA", f"{state['dist_info']}/RECORD"}
    if all_python and state is not None and state.get("members") is not None:
        need |= set(python_members(state["members"]))
    return need


def missing(state: State, tree: Path, wanted: set[str], all_python: bool) -> set[str]:
    """Needed members that are neither in the tree nor known to be absent."""
    if not state.get("dist_info") or state.get("members") is None:
        return {"<central directory>"}
    present, absent = set(state.get("present", ())), set(state.get("absent", ()))
    members = set(state["members"])
    out = set()
    for name in needed(state, wanted, all_python):
        if name in absent:
            continue
        if name in present and name in members and is_regular(tree / name):
            continue
        out.add(name)  # a name not in `members` is decided offline (recorded absent under the lock)
    return out


def is_regular(path: Path) -> bool:
    """Whether `path` is a regular file itself (not a symlink to one)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def damaged_members(state: State, tree: Path) -> dict[str, str]:
    """The members release.json calls present whose cached file is not the wheel's (member -> why):
    the RECORD if release.json does not give its sha256, any other if RECORD does not give its hash.
    A damaged RECORD makes every present member unverifiable: all of them are named. Every present
    member is checked, not only the ones a call needs: whatever the tree holds may be laid out."""
    present = set(state.get("present", ()))
    record_name = record_member(state)
    if not present or record_name is None:
        return {}
    try:
        record = trusted_record(state, tree, present)
    except (Damaged, FileNotFoundError) as e:
        return dict.fromkeys(present, f"the RECORD cannot be trusted ({e})")
    out = {}
    for name in sorted(present - {record_name}):
        try:
            problem = mismatch(name, read_regular(tree, name), record)
        except FileNotFoundError:
            continue  # not there: missing() fetches it
        except Damaged as e:
            problem = str(e)
        if problem:
            out[name] = problem
    return out


def trusted_record(state: State, tree: Path, only: Collection[str] | None = None) -> dict[str, tuple[str, str]]:
    """The cached RECORD, if it is the one the fetch took out of the wheel (its sha256 in release.json);
    `only`: just the rows of those members (parse_record)."""
    record_name = record_member(state)
    if record_name is None:
        raise Damaged("release.json names no dist-info")
    data = read_regular(tree, record_name)
    if hashlib.sha256(data).hexdigest() != state.get("record_sha256"):
        raise Damaged(f"{record_name} is not the RECORD fetched from the wheel")
    try:
        return parse_record(data, only)
    except FetchError as e:
        raise Damaged(e.message) from None


def mismatch(name: str, data: bytes, record: dict[str, tuple[str, str]]) -> str | None:
    """Why `data` is not member `name` as RECORD lists it, or None when it is."""
    entry = record.get(name)
    if entry is None or not entry[0]:
        return f"{name} is not listed with a hash in the wheel's RECORD"
    expected, size = entry
    algo = expected.partition("=")[0]
    try:
        if record_hash(data, algo) != expected:
            return f"{name} does not match its RECORD hash"
    except ValueError:
        return f"RECORD lists {name} with an unsupported hash {expected!r}"
    if size.isdigit() and int(size) != len(data):
        return f"{name} has {len(data)} bytes, RECORD says {size}"
    return None


def clear_in_the_way(tree: Path, name: str) -> None:
    """Remove whatever stands where member `name` goes and is not what patchkit writes there: a
    symlink (the link itself, never its target), a file where a directory belongs, a directory or
    special file where the member's file belongs."""
    here = tree
    parts = name.split("/")
    for i, part in enumerate(parts):
        here = here / part
        try:
            mode = here.lstat().st_mode
        except FileNotFoundError:
            return
        last = i == len(parts) - 1
        if stat.S_ISDIR(mode) and not last:
            continue
        if stat.S_ISREG(mode) and last:
            return
        remove_entry(here)
        return


def clear_non_directories(paths: list[Path], warn: Callable[[str], None]) -> bool:
    """`paths`, outermost first, are directories patchkit made in the cache: the first that is a
    symlink (to anywhere) or anything else is removed, the link itself, so that nothing is read or
    written outside the cache. A missing one ends the walk (nothing below it exists). True: the
    walk went through every one (none missing, none removed)."""
    for path in paths:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return False
        except OSError:
            continue  # unreadable: the cache's own errors say so later
        if not stat.S_ISDIR(mode):
            warn(f"{path} in the cache is not a directory: removing it")
            remove_entry(path)
            return False
    return True


def remove_entry(path: Path) -> None:
    """Remove `path` without following a symlink: a real directory with everything in it."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)  # rmtree never follows symlinks inside
    else:
        with suppress(FileNotFoundError):
            path.unlink()


def clean_request(path: str) -> str:
    """A requested path as the wheel names it (a leading ./ dropped); BadInput if it is unsafe."""
    p = str(path).strip()
    if p.startswith("./"):
        p = p[2:]
    reason = unsafe_reason(p)
    if reason:
        raise BadInput(
            f"refusing to fetch {path!r}: the path {reason}",
            hint="paths are POSIX paths relative to site-packages, e.g. vllm/config/speculative.py",
        )
    return p


def safe_dest(tree: Path, name: str, real_tree: Path | None = None) -> Path:
    """Where member `name` goes; FetchError for anything that would land outside `tree`.

    `real_tree` is `tree` resolved, given by a caller placing many members."""
    reason = unsafe_reason(name)
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


def _lock_unusable(lock_file: Path, exc: OSError) -> FetchError:
    """A cache entry's lock that cannot be taken: a directory in its place says what removes it."""
    in_the_way = directory_in_the_way(lock_file)
    if in_the_way is not None:
        what, _, remove = in_the_way.partition(": ")
        return FetchError(f"cannot lock the cache entry: {what}", hint=remove)
    return FetchError(f"cannot lock {lock_file}: {exc}", hint=CACHE_HINT)


def entry_lock(
    lock_file: Path, timeout: float, waiting: str, say: Callable[[str], None]
) -> AbstractContextManager[None]:
    """The lock of one cache entry (a release's files, a stock wheel): one process fills it at a
    time; `waiting` is said while another process holds it."""

    return held(
        lock_file,
        timeout,
        busy=lambda _waited: FetchError(
            f"timed out waiting for the lock {lock_file}",
            hint="is another patchkit process stuck? remove the lock file if not",
        ),
        unusable=lambda e: _lock_unusable(lock_file, e),
        on_wait=lambda: say(waiting),
    )
