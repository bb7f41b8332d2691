"""A revert that reverses the series with no record of it (the record lost, or a set it does not
name): a file the user edited after the patches still reverses when the edit is away from the
hunks, and the result is stock plus the edit. vLLM's RECORD tells it from stock, so it is treated as
a recorded edited file is: refused and kept, or with --force replaced by the release's stock file
and kept aside."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from patchkit import fetch
from patchkit.base.errors import BadInput, PatchkitError, drift_refused, escaped
from patchkit.base.fsutil import read_regular
from patchkit.distinfo import tree_record
from patchkit.distinfo.record import Record
from patchkit.series.patchfile import Patch, touched_paths
from patchkit.series.plan import View
from patchkit.tree.target import stock_files_command

_LIMIT = 64 << 20  # far over any vLLM source file: a larger one in the cache is no release's


def edited_unrecorded(
    root: Path, view: View, reversed_: list[Patch], installed: Version | None, *, force: bool, dry_run: bool
) -> list[str]:
    """The files the unrecorded series `reversed_` leaves unlike vLLM's RECORD (edited since it was
    applied). Without `force`: Drift, nothing written. With it: the release's own file goes in `view`
    in their place (not fetched in a dry run), and they are returned, to be kept aside."""
    paths = touched_paths(reversed_)
    record = tree_record(root, installed, paths)
    if record is None:  # no RECORD to tell stock by: the series reversed is all there is
        return []
    edited = [path for path in paths if _unlike(record, path, view)]
    if not edited:
        return []
    if not force:
        why = "no apply is recorded: the series reversed leaves {} unlike vLLM's RECORD"
        raise drift_refused(
            dict.fromkeys(edited, ""),
            lambda path, _: (
                f"{escaped(path)} was edited after patchkit patched it; keeping your version "
                f"({why.format('it')}); nothing was written"
            ),
            f"{len(edited)} files were edited after patchkit patched them ({why.format('them')}); "
            "nothing was written, keeping your versions",
            restores="the original",
        )
    if not dry_run:
        for path, data in _release_files(root, installed, edited, record).items():
            view.write(path, data)
    return edited


def unproven(root: Path, view: View, reversed_: list[Patch], installed: Version | None) -> list[str]:
    """The files reversing the unrecorded series `reversed_` changed in `view` whose result no vLLM
    RECORD vouches for (no RECORD: a source tree, a checkout; or one that does not list the file):
    the set's hunks are reversed there, which proves no byte of the rest stock (revert27)."""
    changed = set(view.changed_paths())
    paths = [path for path in touched_paths(reversed_) if path in changed]
    if not paths:
        return []
    record = tree_record(root, installed, paths)
    return [path for path in paths if record is None or not _as_listed(record, path, view.read(path))]


def unproven_found(root: Path, installed: Version | None, written: dict[str, bytes | None]) -> list[str]:
    """Of the files a recorded revert writes back (path -> bytes) whose original an apply found by
    reversing the set's hunks (recorded "found"), those no vLLM RECORD vouches for as stock."""
    if not written:
        return []
    record = tree_record(root, installed, sorted(written))
    return [path for path, data in sorted(written.items()) if record is None or not _as_listed(record, path, data)]


def _as_listed(record: Record, path: str, data: bytes | None) -> bool:
    """`data` is what RECORD lists at `path`: the file with its hash, or no file where it lists none."""
    if path in record.hashes:
        return data is not None and record.matches(path, data)
    return data is None and path not in record.untrusted


def _unlike(record: Record, path: str, view: View) -> bool:
    """The series reversed leaves `path` as a file RECORD lists with other bytes."""
    if path not in record.hashes or path not in view.changed_paths():
        return False
    data = view.read(path)
    return data is not None and not record.matches(path, data)


def _release_files(root: Path, installed: Version | None, paths: list[str], record: Record) -> dict[str, bytes]:
    """The release's own files (fetch cache, else the index), each held to the tree's RECORD."""
    back = f"put the stock files back ({stock_files_command(root, installed)}), then run the revert again"
    if installed is None:
        raise BadInput(f"no stock original of {escaped(paths[0])}: the tree's vLLM version cannot be told", hint=back)
    try:
        tree = fetch.release_tree(str(installed), paths)
    except PatchkitError as exc:  # its own kind (and exit code), said as what it stops
        exc.message = f"no stock original of {escaped(paths[0])}: {exc.message}"
        exc.hint = exc.hint or back
        raise
    out = {}
    for path in paths:
        data: bytes | None
        try:
            data = read_regular(tree / path, _LIMIT)
        except OSError:
            data = None
        if data is None or not record.matches(path, data):
            raise BadInput(
                f"no stock original of {escaped(path)}: vLLM {installed}'s own file is not the one the tree's RECORD lists",
                hint=back,
            )
        out[path] = data
    return out
