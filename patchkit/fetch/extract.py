"""Members of a wheel into the cached tree: chosen, read, each checked against the wheel's RECORD,
and only then written (nothing is written if any member fails its check)."""

from __future__ import annotations

import re
from pathlib import Path

from patchkit.errors import FetchError
from patchkit.fetch.cache import State, needed, safe_dest, write_cached
from patchkit.fetch.index import PROJECT
from patchkit.fetch.net import Progress
from patchkit.fetch.zipread import WheelSource
from patchkit.record import HASHES, parse_record, record_hash


def extract(
    src: WheelSource, state: State, tree: Path, ver: str, wanted: set[str], all_python: bool, say: Progress
) -> int:
    """Write the needed members `tree` lacks, and record in `state` the wheel's member list, its
    dist-info, what the tree holds and what the wheel lacks. Returns how many files were written."""
    infos = {info.filename: info for info in src.infolist() if not info.is_dir()}
    names = sorted(infos)
    record_name = _record_name(names, ver, state["wheel"])
    state["dist_info"] = record_name.rsplit("/", 1)[0]
    state["members"] = names

    need = needed(state, wanted, all_python)
    present = set(state.get("present", ()))
    absent = {n for n in need if n not in infos}
    fetch = sorted(n for n in need - absent if not (n in present and (tree / n).is_file()))
    real_tree = tree.resolve()
    dests = {n: safe_dest(tree, n, real_tree) for n in fetch}  # refuse unsafe names before any I/O

    record = None
    if record_name not in fetch:
        try:
            record = parse_record((tree / record_name).read_bytes())
        except OSError:
            fetch.append(record_name)
            dests[record_name] = safe_dest(tree, record_name)

    blobs = src.read([infos[n] for n in fetch], say) if fetch else {}
    if record is None:
        record = parse_record(blobs[record_name])
    for name in fetch:  # verify everything before writing anything
        _verify(name, blobs[name], record, record_name)
    for name in fetch:
        write_cached(dests[name], blobs[name])
    state["present"] = sorted(present | set(fetch))
    state["absent"] = sorted(set(state.get("absent", ())) | absent)
    return len(fetch)


def _record_name(names: list[str], ver: str, wheel: str) -> str:
    """The wheel's dist-info RECORD; the one whose version matches if there are several."""
    dist_infos = [n for n in names if re.fullmatch(rf"{PROJECT}-[^/]+\.dist-info/RECORD", n)]
    if not dist_infos:
        raise FetchError(f"{wheel} has no {PROJECT}-*.dist-info/RECORD", hint="the wheel looks malformed")
    dist_infos.sort(key=lambda n: n.split("/")[0] != f"{PROJECT}-{ver}.dist-info")
    return dist_infos[0]


def _verify(name: str, data: bytes, record: dict[str, tuple[str, str]], record_name: str) -> None:
    if name == record_name:
        return  # RECORD cannot list its own hash; zip CRC covers it
    entry = record.get(name)
    if entry is None or not entry[0]:
        raise FetchError(f"{name} is not listed with a hash in the wheel's RECORD", hint="the wheel looks malformed")
    expected, size = entry
    algo, sep, _b64 = expected.partition("=")
    if not sep or algo not in HASHES:
        raise FetchError(f"RECORD lists {name} with an unsupported hash {expected!r}", hint="the wheel looks malformed")
    if record_hash(data, algo) != expected or (size.isdigit() and int(size) != len(data)):
        raise FetchError(
            f"{name} does not match the hash in the wheel's RECORD",
            hint="the download was corrupted or tampered with; nothing was written for it",
        )
