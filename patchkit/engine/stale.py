"""Records an upgrade of vLLM made stale: pip replaced the files they describe with the installed
release's own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.base.errors import PatchkitError
from patchkit.distinfo import installed_record, installed_wheel_reader, patched_build
from patchkit.distinfo.record import (
    find_record,
    has_provenance,
    is_dist_info_of,
    parse_record,
    read_record_file,
    record_digest,
)
from patchkit.store.state import recorded_file
from patchkit.tree.target import is_checkout, vllm_metadata_dirs

if TYPE_CHECKING:
    from pathlib import Path

    from packaging.version import Version

    from patchkit.store.state import Entry, State


# a recorded file pip wrote again (the guard's words, patchkit/_target/guard.py PIP_WROTE)
PIP_WROTE = " was written by pip when vLLM was reinstalled (its RECORD lists these bytes)"
PIP_WROTE_ALL = "as pip installed them (vLLM reinstalled: its RECORD lists their bytes)"  # every recorded file


def pip_wrote(root: Path, state: State, entry: Entry, installed: Version | str | None) -> list[str]:
    """The files `entry` records that pip wrote since the apply (vLLM reinstalled, another build of
    the same version maybe: a vendor's): neither the original nor what patchkit or a later set wrote,
    but the very bytes the installed vLLM's RECORD lists (sha256 and size). No edit of the user's:
    apply records them afresh, revert leaves them. The guard tells them as this does (guard._pip_wrote)."""
    if installed is None or entry.vllm_version != str(installed):  # an upgrade: stale_note's
        return []
    paths = sorted(path for path, shas in entry.files.items() if shas["before"] is not None)
    rows = _vllm_rows(root, paths) if paths else {}
    found = []
    for path in paths:
        digest, size = rows.get(path, ("", ""))
        read = recorded_file(root, path) if digest.startswith("sha256=") else None  # hard links: read once
        if not isinstance(read, tuple) or size != str(len(read[1])) or read[0] in state.accepted(entry, path):
            continue
        if record_digest(bytes.fromhex(read[0]), "sha256") == digest:
            found.append(path)
    return found


def _vllm_rows(root: Path, paths: list[str]) -> dict[str, tuple[str, str]]:
    """{path: (hash entry, size)} of the installed vLLM's RECORD, when one vLLM is installed and not
    from a patched wheel (its RECORD lists the patched files); else none."""
    infos = vllm_metadata_dirs(root)
    if len(infos) != 1:
        return {}
    try:
        if patched_build(root, infos[0]):
            return {}
        return parse_record(read_record_file(root, infos[0] / "RECORD"), only=paths)
    except (OSError, PatchkitError):  # a provenance status refuses, an unreadable RECORD: no evidence
        return {}


def stale_entries(root: Path, state: State, installed: Version | str | None) -> dict[str, str]:
    """set name -> why its record is stale, for each entry vLLM's upgrade made stale."""
    found = {}
    for entry in state.entries:
        note = stale_note(root, entry, installed)
        if note:
            found[entry.set_name] = note
    return found


def stale_note(root: Path, entry: Entry, installed: Version | str | None) -> str | None:
    """Why an entry's record is stale, or None: it names another vLLM version than the installed
    one, whose own dist-info is there, and pip's install of that release accounts for every file it
    saved an original of: stock by the installed RECORD (or the patched wheel's), or gone and
    unlisted there (a file that release does not ship). The record describes files pip replaced.
    Files it only created say nothing either way (pip never lists them): a record of only those is
    stale on the version alone."""
    if installed is None or not entry.vllm_version or entry.vllm_version == str(installed):
        return None
    if is_checkout(root):
        return _moved_checkout(root, entry, installed)
    own = find_record(root, installed)  # the installed release's own RECORD, not another's left behind
    if own is None or not is_dist_info_of(own.parent, installed):
        return None
    replaced = [path for path, shas in entry.files.items() if shas["before"] is not None]
    record, _why = installed_record(root, installed, set(replaced))
    if record is None:
        return None
    patched = _patched_by_the_wheel(root)
    for path in replaced:
        read = recorded_file(root, path)  # a symlink on the way: not pip's file, and never followed
        if read is None and path not in record.hashes:
            continue  # the installed release does not ship it: pip removed the old one
        if not isinstance(read, tuple) or path not in record.hashes:
            return None
        if not record.matches(path, read[1]) and read[0] != patched.get(path):
            return None
    return f"recorded {entry.vllm_version}, installed {installed}: the old record is stale"


def _moved_checkout(root: Path, entry: Entry, installed: Version | str) -> str | None:
    """A source checkout (no dist-info, so no RECORD) now of another version than the record's
    (`git checkout -f` to another release, `.patchkit/` kept): stale when not one file it saved an
    original of is there as patchkit left it or as it found it. Those files are the other release's;
    the originals it saved would mix the two, so the record is dropped, never restored."""
    replaced = [(path, shas) for path, shas in entry.files.items() if shas["before"] is not None]
    for path, shas in replaced:
        read = recorded_file(root, path)
        if not isinstance(read, tuple) or read[0] in (shas["before"], shas["after"]):
            return None
    if not replaced:
        return None
    return f"recorded {entry.vllm_version}, the checkout is {installed} now: the old record is stale"


def _patched_by_the_wheel(root: Path) -> dict[str, str]:
    """path -> sha256 of each file as a patched wheel installed it (its provenance), when the
    installed vLLM came from one: those bytes are the installed release's own files too."""
    if not has_provenance(root):
        return {}
    found = installed_wheel_reader().find(root)
    if found is None:
        return {}
    return {path: shas.patched_sha256 for path, shas in found.files.items() if shas.patched_sha256}
