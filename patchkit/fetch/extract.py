"""Members of a wheel into the cached tree: chosen, read, each checked against the wheel's RECORD,
and only then written (nothing is written if any member fails its check)."""

from __future__ import annotations

import hashlib
import re
from contextlib import suppress
from pathlib import Path

from patchkit.base.errors import FetchError
from patchkit.distinfo.record import parse_record
from patchkit.fetch.cache import (
    PROJECT,
    Damaged,
    State,
    clear_in_the_way,
    is_regular,
    mismatch,
    needed,
    safe_dest,
    trusted_record,
    write_cached,
)
from patchkit.fetch.net import Progress
from patchkit.fetch.zipread import WheelSource


def extract(
    src: WheelSource, state: State, tree: Path, ver: str, wanted: set[str], all_python: bool, say: Progress
) -> int:
    """Write the needed members `tree` lacks, and record in `state` the wheel's member list, its
    dist-info, what the tree holds and what the wheel lacks. Returns how many files were written."""
    infos = {info.filename: info for info in src.infolist() if not info.is_dir()}
    names = sorted(infos)
    record_name = find_record_name(names, ver, state["wheel"])
    state["dist_info"] = record_name.rsplit("/", 1)[0]
    state["members"] = names

    need = needed(state, wanted, all_python)
    present = set(state.get("present", ()))
    absent = {n for n in need if n not in infos}
    fetch = sorted(n for n in need - absent if not (n in present and is_regular(tree / n)))
    for name in fetch:
        safe_dest(tree, name)  # refuse unsafe names before any I/O

    record = None
    if record_name not in fetch:
        try:
            record = trusted_record(state, tree)
        except (Damaged, FileNotFoundError):
            fetch.append(record_name)

    blobs = src.read([infos[n] for n in fetch], say) if fetch else {}
    if record is None:
        record = parse_record(blobs[record_name])
        state["record_sha256"] = hashlib.sha256(blobs[record_name]).hexdigest()
    for name in fetch:  # verify everything before writing anything
        _verify(name, blobs[name], record, record_name)
    _write_all(tree, {name: blobs[name] for name in fetch})
    state["present"] = sorted(present | set(fetch))
    state["absent"] = sorted(set(state.get("absent", ())) | absent)
    return len(fetch)


def find_record_name(names: list[str], ver: str, wheel: str) -> str:
    """The wheel's dist-info RECORD; the one whose version matches if there are several."""
    dist_infos = [n for n in names if re.fullmatch(rf"{PROJECT}-[^/]+\.dist-info/RECORD", n)]
    if not dist_infos:
        raise FetchError(f"{wheel} has no {PROJECT}-*.dist-info/RECORD", hint="the wheel looks malformed")
    dist_infos.sort(key=lambda n: n.split("/")[0] != f"{PROJECT}-{ver}.dist-info")
    return dist_infos[0]


def _write_all(tree: Path, blobs: dict[str, bytes]) -> None:
    """Write the members; if one fails (a full disk), none of this call's files stay behind."""
    written: list[Path] = []
    try:
        real_tree = tree.resolve()
        for name, data in blobs.items():
            clear_in_the_way(tree, name)
            dest = safe_dest(tree, name, real_tree)
            write_cached(dest, data)
            written.append(dest)
    except BaseException:
        for dest in written:
            with suppress(OSError):
                dest.unlink()
        raise


def _verify(name: str, data: bytes, record: dict[str, tuple[str, str]], record_name: str) -> None:
    if name == record_name:
        return  # RECORD cannot list its own hash; zip CRC covers it
    problem = mismatch(name, data, record)
    if problem:
        raise FetchError(
            f"{problem} (the wheel's RECORD)",
            hint="the download was corrupted or tampered with; nothing was written for it",
        )
