"""The journal, <root>/.patchkit/journal.json: what an unfinished transaction changes, so that it can be rolled back.

It exists only while a transaction is under way: written before any file changes, removed at the
commit point. It names each file (its before/after sha256, its staged temp name, its mode, the
directories its commit creates or removes) and holds the previous state.json, which the commit
also keeps under a second name so that a rollback renames it back and needs no new space.

Beside it, <root>/.patchkit/staged.json, the reached-order marker: written once every original is
saved and every new content staged, before the first file is replaced, with the journal's id, the
sha256 of its content and each staged file's identity (inode, size, mtime: a rename keeps them),
sealed with this user's key (patchkit.base.seal). A journal without it replaced nothing, whatever the tree holds; with
it, the files before the first one still staged were replaced, and a file with its staged
identity is the very file the commit put there. Only a marker whose seal verifies says so (an
identity alone is anyone's `stat`): recovery refuses a journal whose marker does not verify.

Like everything under .patchkit/ it is read back from the tree, so it is untrusted input: every
path by the one path rule, staged files only by their own temp name beside their file, hashes as
digests, modes as permission bits; a journal that fails is refused whole (exit 2).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from contextlib import suppress
from pathlib import Path
from typing import Any

from patchkit.base import seal
from patchkit.base.errors import BadInput, TreeRefused, escaped, quoted
from patchkit.base.fsutil import fsync_dir, json_text, load_json_text, read_file, unplain_prefixes
from patchkit.store.objects import objects_dir
from patchkit.store.state import (
    PERMISSIONS,
    State,
    Tick,
    check_meta_dir,
    checked_digest,
    checked_path,
    durable_write,
    meta_dir,
    parse_state,
    read_meta_file,
    state_path,
    write_state,
)

UNSETTLED = object()
# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_TXID = r"[0-9A-Za-z]{1,64}"
Identity = tuple[int, int, int]  # a staged file's inode, size and mtime (ns)
# journal.json (id, files, previous_state) and one of its files (path, before, after, staged, mode,
# created_dirs, removed_dirs): JSON read back from the tree, every field checked by read_journal
Journal = dict[str, Any]
JournalEntry = dict[str, Any]


def journal_path(root: Path) -> Path:
    return meta_dir(root) / "journal.json"


def settled_record(root: Path) -> object:
    """state.json's bytes (None: no record) when no transaction is under way, else UNSETTLED (a
    journal: a transaction is running, or a crash left one to roll back). A reader that takes no
    lock holds what it read to be consistent when this is the same before and after: a transaction
    writes its journal first and a new state.json last."""
    check_meta_dir(root)
    if os.path.lexists(journal_path(root)):
        return UNSETTLED
    return read_meta_file(state_path(root))


# --------------------------------------------------------------------------- writing


def new_id() -> str:
    """A transaction's id: in its staged files' names and in the previous state's second name."""
    return os.urandom(8).hex()


def staged_name(path: str, txid: str) -> str:
    """The temp name beside `path` its new content is staged under until the commit replaces it."""
    parent, _, name = path.rpartition("/")
    return f"{parent}/.{name}.patchkit-{txid}.tmp" if parent else f".{name}.patchkit-{txid}.tmp"


def staged_path(root: Path) -> Path:
    return meta_dir(root) / "staged.json"


def mark_staged(root: Path, journal: Journal, staged: dict[str, Identity], *, tick: Tick) -> None:
    """The reached-order marker (see the module docstring), on disk before the first file is replaced.
    Its seal also covers the journal's content, so a sealed marker vouches for every original it names."""
    staged_files = {path: list(identity) for path, identity in staged.items()}
    marker = {"id": journal["id"], "staged": staged_files, "journal": _journal_digest(journal)}
    marker["seal"] = seal.seal(SEAL_KIND, _sealed_name(root), seal.canonical(marker))
    durable_write(staged_path(root), json_text(marker, "the journal").encode(), tick=tick)
    fsync_dir(meta_dir(root))


SEAL_KIND = "staged-marker"


def _sealed_name(root: Path) -> str:
    """The tree a marker is sealed for: one moved or copied elsewhere is not the tree the commit wrote."""
    return str(root.resolve())


def marker_sealed(root: Path, journal: Journal) -> bool:
    """Whether the marker was written by this user's patchkit for this tree (sealed with the key
    in the user's state directory): its identities are anyone's `stat`, its seal is not."""
    raw = read_meta_file(staged_path(root))
    try:
        marker = load_json_text(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return False
    if not isinstance(marker, dict) or marker.get("id") != journal["id"]:
        return False
    mark = marker.pop("seal", None)
    return seal.sealed(SEAL_KIND, _sealed_name(root), seal.canonical(marker), mark)


def journal_sealed(root: Path, journal: Journal) -> bool:
    """Whether this user's patchkit sealed this very journal (its marker's seal covers the journal's
    content; an older patchkit's marker covers only its id, and vouches for no original)."""
    raw = read_meta_file(staged_path(root))
    try:
        marker = load_json_text(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return False
    covered = marker.get("journal") if isinstance(marker, dict) else None
    return covered == _journal_digest(journal) and marker_sealed(root, journal)


def _journal_digest(journal: Journal) -> str:
    return hashlib.sha256(seal.canonical(journal)).hexdigest()


def file_identity(info: os.stat_result) -> Identity:
    """What staged.json keeps of a staged file: a rename into place keeps all three."""
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def begin(root: Path, journal: Journal, *, tick: Tick) -> None:
    """Write the journal (and make objects/): both on disk before anything they describe."""
    tick()
    objects_dir(root).mkdir(parents=True, exist_ok=True)
    durable_write(journal_path(root), json_text(journal, "the journal").encode(), tick=tick)
    fsync_dir(meta_dir(root))


def commit_point(root: Path, txid: str, state: State, *, previous: bool, tick: Tick) -> None:
    """The new state.json, then the journal removed: the transaction is done. The `previous`
    state.json keeps a second name until drop_previous_state, so a rollback renames it back."""
    if previous:
        tick()
        os.link(state_path(root), _previous_state_link(root, txid), follow_symlinks=False)
    write_state(root, state, tick=tick)
    tick()
    journal_path(root).unlink()
    staged_path(root).unlink(missing_ok=True)  # after the journal: a journal never outlives its marker
    fsync_dir(meta_dir(root))


def drop_previous_state(root: Path, txid: str) -> None:
    with suppress(OSError):
        _previous_state_link(root, txid).unlink(missing_ok=True)


def _previous_state_link(root: Path, txid: str) -> Path:
    """A second name of the state.json a commit replaces, in the temp name recovery removes."""
    return meta_dir(root) / f".state.json.patchkit-{txid}.tmp"


# --------------------------------------------------------------------------- rolling back


def restore_state(root: Path, journal: Journal, *, sealed: bool, tick: Tick) -> None:
    """state.json as it was before the commit, changed only when the marker is sealed (this user's
    patchkit wrote the journal for this tree: a planted one with no previous record would erase the
    real one) and on evidence that the commit changed it: the second name the commit gave the
    previous one, renamed back (no new space needed), or, with no previous record, the marker (a
    commit writes its record after it). Else the record stays as it is."""
    previous = journal.get("previous_state")
    path = state_path(root)
    kept = _previous_state_link(root, journal["id"])
    tick()
    if sealed and previous is None:  # unsealed: the record stays, nothing shows the journal is ours
        path.unlink(missing_ok=True)
    elif sealed and previous is not None:
        current, before = read_file(path, follow_symlinks=False), read_file(kept, follow_symlinks=False)
        if current != previous.encode() == before:
            os.replace(kept, path)
    kept.unlink(missing_ok=True)


def end(root: Path, *, tick: Tick) -> None:
    """The journal removed once its rollback is done, then its marker."""
    tick()
    journal_path(root).unlink(missing_ok=True)
    staged_path(root).unlink(missing_ok=True)
    fsync_dir(meta_dir(root))


def _meta_json(root: Path, path: Path, said: str) -> object:
    """The JSON value of a `.patchkit/` file (None: no such file); not JSON: refused (journal_refusal),
    `said` naming the file before "not JSON"."""
    raw = read_meta_file(path)
    if raw is None:
        return None
    try:
        return load_json_text(raw)
    except (ValueError, RecursionError) as exc:
        raise journal_refusal(root, f"{said}not JSON: {exc}") from exc


def staged_identities(root: Path, journal: Journal) -> dict[str, Identity] | None:
    """The marker's identities of the journal's staged files (None: no marker of this journal, so
    its commit replaced nothing). Untrusted, as the journal: a damaged one is refused whole."""
    marker = _meta_json(root, staged_path(root), f"{staged_path(root).name} is ")
    if marker is None:
        return None
    if not isinstance(marker, dict) or marker.get("id") != journal["id"]:
        return None  # another transaction's, left by a crash after its journal went
    staged = marker.get("staged")
    if not isinstance(staged, dict) or not all(
        isinstance(v, list) and len(v) == 3 and all(type(n) is int for n in v) for v in staged.values()
    ):
        raise journal_refusal(root, f"{staged_path(root).name} holds no staged files' identities")
    return {path: (v[0], v[1], v[2]) for path, v in staged.items()}


def remove_stale_marker(root: Path) -> None:
    """A marker with no journal: left by a crash between the two removals."""
    if not os.path.lexists(journal_path(root)):
        with suppress(OSError):
            staged_path(root).unlink()


def previous_state(root: Path, journal: Journal) -> State:
    """The record the journal's transaction started from (checked by read_journal)."""
    previous = journal.get("previous_state")
    return State([]) if previous is None else parse_state(previous.encode(), journal_path(root))


# --------------------------------------------------------------------------- reading


def journal_refusal(root: Path, what: str) -> TreeRefused:
    path = journal_path(root)
    return TreeRefused(
        f"{path} is damaged or was not written by patchkit ({what}); nothing was touched",
        hint=f"inspect or remove {path} (restore the files it names by hand, or reinstall vLLM)",
    )


def read_journal(root: Path) -> Journal | None:
    """The journal (None: no transaction is unfinished), every field checked before recovery acts
    on any; a damaged one is refused (journal_refusal)."""
    journal = _meta_json(root, journal_path(root), "")
    if journal is None:
        return None
    if not isinstance(journal, dict) or not isinstance(journal.get("files"), list):
        raise journal_refusal(root, "not an object with a list of 'files'")
    txid = journal.get("id")
    if not isinstance(txid, str) or not re.compile(_TXID).fullmatch(txid):
        raise journal_refusal(root, f"the transaction id {quoted(repr(txid))} is not alphanumeric")
    try:
        _check_previous_state(journal.get("previous_state"), journal_path(root))
    except BadInput as exc:  # the field, not the journal file, is what is damaged
        what = exc.message.removeprefix(f"{journal_path(root)} is damaged (").removesuffix(")")
        raise journal_refusal(root, f"its 'previous_state' is no record patchkit wrote: {what}") from exc
    for entry in journal["files"]:
        try:
            _check_entry(entry, txid, journal_path(root))
        except BadInput as exc:
            raise journal_refusal(root, exc.message) from exc
    return journal


def _check_previous_state(previous: object, origin: Path) -> None:
    if previous is None:
        return
    if not isinstance(previous, str):
        raise BadInput("'previous_state' is not text")
    parse_state(previous.encode(), origin)


def _check_entry(entry: object, txid: str, origin: Path) -> None:
    if not isinstance(entry, dict):
        raise BadInput("an entry is not an object")
    path = checked_path(entry.get("path"), origin)
    checked_digest(entry.get("before"), origin)
    checked_digest(entry.get("after"), origin)
    if entry.get("before") is not None and entry.get("created_dirs"):
        raise BadInput(f"{escaped(path)}: an original that existed needed no directory created for it")
    staged = entry.get("staged")
    if staged is not None and staged != staged_name(path, txid):
        raise BadInput(f"{escaped(path)}: the staged file {quoted(repr(staged))} is not patchkit's temp name beside it")
    mode = entry.get("mode")
    if mode is not None and (type(mode) is not int or mode < 0 or mode & ~PERMISSIONS):
        raise BadInput(
            f"{escaped(path)}: the mode {quoted(repr(mode))} is not a permission mode (setuid, setgid, sticky and world-write are never kept)"
        )
    _check_directories(_listed(entry, "created_dirs", path), "created", path, origin)
    removed = _listed(entry, "removed_dirs", path)
    if removed and (entry.get("before") is None or entry.get("after") is not None):
        raise BadInput(f"{escaped(path)}: only a file the commit deletes can empty a directory")
    _check_directories(removed, "removed", path, origin)


def _listed(entry: JournalEntry, key: str, path: str) -> list[object]:
    directories = entry.get(key, [])
    if not isinstance(directories, list):
        raise BadInput(f"{escaped(path)}: '{key}' is not a list")
    return directories


def _check_directories(directories: list[object], what: str, path: str, origin: Path) -> None:
    """The directories an entry says its commit created (or removed) hold its file."""
    for directory in directories:
        if not path.startswith(checked_path(directory, origin, directory=True) + "/"):
            raise BadInput(f"{escaped(path)}: the {what} directory {quoted(repr(directory))} does not hold it")


# --------------------------------------------------------------------------- what a crash leaves


def remove_leftovers(root: Path, managed: set[str]) -> None:
    """Remove patchkit's own temporary files (atomic_write's `.<name>.patchkit-<hex>.tmp`) that a
    killed process left beside a file it manages: the recorded files, the state, the journal and
    the objects. Only those names; a directory on the way that is a symlink is not entered."""
    meta = meta_dir(root)
    _remove_temp_files(meta, {"state.json", "journal.json", "staged.json"})
    _remove_temp_files(meta / "objects", None)
    by_parent: dict[str, set[str]] = {}
    for path in managed:
        parent, _, name = path.rpartition("/")
        by_parent.setdefault(parent, set()).add(name)
    plain: set[str] = set()  # the directories the managed files share: each looked at once
    unplain: set[str] = set()  # and the symlinks (or other files) found in their place
    for parent, names in by_parent.items():
        if not _symlink_on_the_way(root, parent, plain, unplain):
            _remove_temp_files(root / parent if parent else root, names)


_TEMP_NAME = r"\.(?P<name>.+)\.patchkit-[0-9A-Za-z]+\.tmp"


def _remove_temp_files(directory: Path, names: set[str] | None) -> None:
    """Temp files of `names` in `directory` (None: of any digest-named object)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for item in entries:
        match = re.compile(_TEMP_NAME).fullmatch(item.name)
        if not match or item.is_dir(follow_symlinks=False):
            continue
        owner = match["name"]
        if names is None:
            try:
                checked_digest(owner, directory, optional=False)
            except BadInput:
                continue
        elif owner not in names:
            continue
        with suppress(OSError):
            os.unlink(item.path)  # a symlink is removed itself, never followed


def _symlink_on_the_way(root: Path, rel: str, plain: set[str], unplain: set[str]) -> bool:
    """Whether a directory on the way to root/rel (rel included) is a symlink or no directory.
    `plain`: those found real directories, `unplain`: those found not, kept across calls (one lstat
    each, not one a path below)."""
    parts = rel.split("/") if rel else []
    if any("/".join(parts[:depth]) in unplain for depth in range(1, len(parts) + 1)):
        return True
    for _, sub, mode in unplain_prefixes(root, parts, plain):
        if mode is None or not stat.S_ISDIR(mode):
            unplain.add(sub)
            return True
    return False
