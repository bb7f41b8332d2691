"""The state of a target for a patch series: per patch, per recorded file, and overall."""

from __future__ import annotations

from dataclasses import dataclass, field

from patchkit.checks import CheckContext
from patchkit.library import PATCH, UNSUPPORTED, UPSTREAM
from patchkit.plan import ALREADY, CONFLICT, WILL_CHANGE, Plan, plan_apply
from patchkit.resolve import Resolved
from patchkit.state import file_sha, read_state

APPLIED = "applied"
NOT_APPLIED = "not-applied"
PARTIAL = "partial"

_PATCH_STATE = {ALREADY: APPLIED, WILL_CHANGE: NOT_APPLIED, CONFLICT: CONFLICT}


@dataclass
class PatchReport:
    name: str
    description: str
    state: str  # applied, not-applied or conflict
    files: list[str]
    problem: str | None = None


@dataclass
class TreeStatus:
    state: str  # applied, not-applied, partial, upstream or unsupported
    patches: list[PatchReport] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)
    plan: Plan | None = None

    @property
    def healthy(self) -> bool:
        return self.state not in (PARTIAL,) and not self.drifted


def inspect(resolved: Resolved) -> TreeStatus:
    kind = resolved.selection.kind
    if kind == UPSTREAM:
        return TreeStatus(UPSTREAM)
    if kind == UNSUPPORTED:
        return TreeStatus(UNSUPPORTED)
    assert kind == PATCH
    plan = plan_apply(resolved.target.root, resolved.patches)
    reports = [PatchReport(step.patch.name, step.patch.description, _PATCH_STATE[step.state],
                           [f.path for f in step.patch.files],
                           step.mismatch.describe() if step.mismatch else None)
               for step in plan.steps]
    states = {r.state for r in reports}
    overall = APPLIED if states == {APPLIED} else NOT_APPLIED if states == {NOT_APPLIED} else PARTIAL
    return TreeStatus(overall, reports, drifted_files(resolved), plan)


def drifted_files(resolved: Resolved) -> list[str]:
    """Recorded files whose content is neither what patchkit wrote nor the original."""
    entry = read_state(resolved.target.root).entry(resolved.set_name)
    if entry is None:
        return []
    return sorted(path for path, shas in entry.files.items()
                  if file_sha(resolved.target.root, path) not in (shas["before"], shas["after"]))


def check_context(resolved: Resolved, plan: Plan, *, on_disk: bool = False) -> CheckContext:
    """What the checks see: the planned contents (or the files as on disk), and the stock ones."""
    root = resolved.target.root

    def disk(path: str) -> bytes | None:
        full = root / path
        return full.read_bytes() if full.is_file() else None

    return CheckContext(paths=plan.touched_paths, read=disk if on_disk else plan.content,
                        python=resolved.target.python, read_stock=plan.stock_content, root=root,
                        patch_set=resolved.selection.patch_set,
                        version=resolved.version.version if resolved.version else None, on_disk=on_disk)
