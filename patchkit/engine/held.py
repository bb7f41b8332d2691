"""held: a write that is no library set's own (an ad-hoc --patch apply or revert, a wheel of one)
held to the contract of each library set whose files it touches.

A set with `gates` (eagle3's whitelist) is safe while its gate refuses at start or every file holds
the change; a write that leaves the gate admitting and another file of the set without its part
makes the one state vLLM accepts at config time and fails on after the model load: refused. A set
without gates is held to what its recorded apply made hold: a write may not undo it.

An older patchkit's --patch record (no "held" mark: the guard refuses it) is judged the same way from
its file list, the tree as this apply leaves it and the originals it saved (unheld_breaks); an installed
`wheel --patch` build (no set: the guard refuses it unless the record names its patchkit.json held)
from the files its provenance lists (wheel_breaks)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from packaging.version import Version

from patchkit.base import fsutil, hints
from patchkit.base.errors import BreaksSet, PatchkitError
from patchkit.base.hashing import sha256
from patchkit.checks import CheckResult
from patchkit.checks.contract import judged
from patchkit.distinfo import installed_wheel_reader
from patchkit.distinfo.record import PROVENANCE, has_provenance
from patchkit.series.library import PatchSetDef
from patchkit.series.requirements import Requirement
from patchkit.store.objects import read_object
from patchkit.store.state import Entry, State, is_adhoc

Read = Callable[[str], bytes | None]
_PROVENANCE_BYTES = 16 << 20  # patchkit.distinfo.provenance.LIMIT (that module is loaded only for a wheel)


def refuse_breaking(
    sets: Iterable[PatchSetDef],
    version: Version | None,
    touched: Iterable[str],
    read: tuple[Read, Read],
    recorded: Mapping[str, Collection[str]],
) -> None:
    """Refuse (nothing written) a write of the files `touched` that breaks a set as the module says.
    `read`: the contents before and after the write; `recorded`: each recorded set's files."""
    paths = set(touched)
    for patch_set in sets:
        broken = _broken(patch_set, version, paths, read, recorded.get(patch_set.name))
        if broken is not None:
            raise _refusal(patch_set, broken, recorded=patch_set.name in recorded)


def unheld_breaks(
    root: Path, state: State, sets: Collection[PatchSetDef], version: Version | None, read: Read
) -> dict[str, str | None]:
    """Each older patchkit's --patch record in `state` (no "held" mark): the set its writes break, judged
    as refuse_breaking judges a new diff's (None: none, it may be marked held). `read`: the tree as it
    is (or as the apply at hand leaves it); before a write, the original the record saved. "" where it
    cannot be judged (no library, an original missing or damaged): the mark is not given."""
    recorded = {entry.set_name: list(entry.files) for entry in state.entries}
    found: dict[str, str | None] = {}
    for entry in state.entries:
        if is_adhoc(entry.set_name) and not entry.held:
            found[entry.set_name] = _breaks(root, entry, sets, version, read, recorded)
    return found


def _breaks(
    root: Path,
    entry: Entry,
    sets: Collection[PatchSetDef],
    version: Version | None,
    read: Read,
    recorded: Mapping[str, Collection[str]],
) -> str | None:
    """unheld_breaks of one record."""
    if not sets or version is None:
        return ""
    reads = (_before(root, entry, read), read)
    try:
        broken = [
            s.name for s in sets if _broken(s, version, set(entry.files), reads, recorded.get(s.name)) is not None
        ]
    except (PatchkitError, OSError):  # an original the record names is missing or damaged, a file unreadable
        return ""
    return broken[0] if broken else None


def wheel_breaks(
    root: Path, sets: Collection[PatchSetDef], version: Version | None, read: Read
) -> tuple[str, str | None] | None:
    """The installed `wheel --patch` build's (its provenance names no set): the sha256 of its
    patchkit.json, and the set its files break, judged as unheld_breaks judges a record on the tree
    as `read` gives it (None: none, it may be recorded held; "": it cannot be judged). Only a set with
    gates is at stake: a recorded set's apply came after the wheel, it cannot undo that. None: no such
    wheel (or one the commands refuse on their own)."""
    if not has_provenance(root):
        return None
    try:
        found = installed_wheel_reader().find(root)
        if found is None or found.set_names:
            return None
        digest = str(sha256(fsutil.read_regular(root / found.dist_info / PROVENANCE, _PROVENANCE_BYTES)))
    except (PatchkitError, OSError):
        return None
    if not sets or version is None:
        return digest, ""
    paths = set(found.files)
    try:
        broken = [s.name for s in sets if s.gates and _broken(s, version, paths, (read, read), None) is not None]
    except (PatchkitError, OSError):  # a file unreadable
        return digest, ""
    return digest, broken[0] if broken else None


def marked_held(state: State, breaks: Mapping[str, str | None]) -> State:
    """`state` with each --patch record that breaks no set (unheld_breaks: None) marked held."""
    for name, broken in breaks.items():
        entry = state.entry(name)
        if broken is None and entry is not None:
            state = state.with_entry(replace(entry, held=True))
    return state


def _before(root: Path, entry: Entry, read: Read) -> Read:
    """The contents before the record's writes: its saved originals (None: a file it created)."""

    def before(path: str) -> bytes | None:
        shas = entry.files.get(path)
        if shas is None:
            return read(path)
        digest = shas.get("before")
        return None if digest is None else read_object(root, digest)

    return before


def _broken(
    patch_set: PatchSetDef,
    version: Version | None,
    paths: set[str],
    read: tuple[Read, Read],
    files: Collection[str] | None,
) -> CheckResult | None:
    """The first requirement of the set the write breaks; None when it breaks none."""
    if version is None:
        return None
    reqs = [req for req in patch_set.contract if req.applies_to(version)]
    if not paths & ({req.file for req in reqs} | set(files or ())):
        return None
    after = judged(reqs, read[1], version)
    gated = [verdict for req, verdict in zip(reqs, after, strict=True) if req.file in patch_set.gates]
    if gated and not all(verdict.ok for verdict in gated):
        return None  # the gate refuses at vLLM's start: no load is lost
    failing: list[tuple[Requirement, CheckResult]] = [
        (req, verdict)
        for req, verdict in zip(reqs, after, strict=True)
        if verdict.failed and req.file not in patch_set.gates
    ]
    if not gated:  # no gate: held to what its recorded apply made hold
        if files is None:
            return None
        before = dict(zip(map(id, reqs), judged(reqs, read[0], version), strict=True))
        failing = [(req, verdict) for req, verdict in failing if before[id(req)].ok]
    if not failing:
        return None
    req, verdict = failing[0]  # said without its reason: the refusal says what fails and why
    return replace(verdict, message=verdict.message.removesuffix(f" (needed because: {req.reason})"))


def _refusal(patch_set: PatchSetDef, broken: CheckResult, *, recorded: bool) -> BreaksSet:
    name = patch_set.name
    chosen = replace(hints.current(), adhoc=(), set_name=name)
    if patch_set.gates:
        gate = patch_set.gates[0]
        what = (
            f"with this diff {gate}, set {name}'s gate, admits what {name} enables while {broken.path} "
            f"lacks its part ({broken.message}): vLLM would fail after the model load"
        )
    else:
        what = f"this diff undoes set {name}'s change in {broken.path} ({broken.message})"
    if recorded:
        fix = f"to drop {name}, revert it whole: {hints.command('revert', chosen=chosen)}"
    else:
        fix = f"apply the whole set, not its patches one by one: {hints.command('apply', chosen=chosen)}"
    return BreaksSet(f"{what}; nothing was written", hint=fix, set_name=name)
