"""held: a write that is no library set's own (an ad-hoc --patch apply or revert, a wheel of one)
held to the contract of each library set whose files it touches.

A set with `gates` (eagle3's whitelist) is safe while its gate refuses at start or every file holds
the change; a write that leaves the gate admitting and another file of the set without its part
makes the one state vLLM accepts at config time and fails on after the model load: refused. A set
without gates is held to what its recorded apply made hold: a write may not undo it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace

from packaging.version import Version

from patchkit.base import hints
from patchkit.base.errors import BreaksSet
from patchkit.checks import CheckResult
from patchkit.checks.contract import judged
from patchkit.series.library import PatchSetDef
from patchkit.series.requirements import Requirement

Read = Callable[[str], bytes | None]


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
