"""What the plan, the target and its status look like in a JSON document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from patchkit.base.enums import TreeState
from patchkit.engine.inspection import local_edit_fix
from patchkit.engine.resolve import unrecorded_fix
from patchkit.store.state import is_adhoc

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.engine.inspection import TreeStatus
    from patchkit.engine.resolve import Chosen, Resolved
    from patchkit.series.library import Location
    from patchkit.series.plan import Plan
    from patchkit.tree.target import Target
    from patchkit.tree.version import DetectedVersion


def plan_json(plan: Plan) -> list[dict[str, Any]]:
    return [
        {
            "patch": step.patch.name,
            "state": plan.shown_state(step),
            "problem": step.mismatch.describe() if step.mismatch else None,
            "files": [
                {
                    "path": f.patch.path,
                    "kind": f.patch.kind,
                    "hunks": [{"line": p.line, "offset": p.offset} for p in f.placements],
                }
                for f in step.files
            ],
        }
        for step in plan.steps
    ]


def target_json(target: Target) -> dict[str, Any]:
    return {"target": str(target.root), "found_by": target.found_by}


def tree_version_json(chosen: list[Chosen]) -> dict[str, Any]:
    """The tree's vLLM version for a run of several sets: one tree, so one version, at the top of
    the document as a run of one set has it (scripts read it there)."""
    found = next((c.resolved for c in chosen if c.resolved is not None and c.resolved.version), None)
    return version_json(found.version if found is not None else None)


def version_json(detected: DetectedVersion | None) -> dict[str, Any]:
    """The version keys of a document (none when the version is unknown)."""
    if detected is None:
        return {}
    return {"vllm_version": str(detected.version), "version_source": detected.source}


def resolved_json(resolved: Resolved) -> dict[str, Any]:
    """The target, its version and the series chosen, as status reports them (and error documents)."""
    return {
        **target_json(resolved.target),
        "vllm_version": str(resolved.vllm_version) if resolved.version else None,
        "version_source": resolved.version.source if resolved.version else None,
        "set": resolved.selection.set_name,
        "series": resolved.selection.release.directory.name if resolved.selection.release else None,
        # --patch files: their names, as the text says them ("set" is the record's name, adhoc-<hex>)
        **({"patch_files": [p.name for p in resolved.selection.patches]} if _adhoc(resolved) else {}),
    }


def _adhoc(resolved: Resolved) -> bool:
    return resolved.selection.patch_set is None and is_adhoc(resolved.selection.set_name)


def status_json(resolved: Resolved, status: TreeStatus, where: Location | None = None) -> dict[str, Any]:
    return {
        "state": status.state,
        "library": where.to_json() if where else None,
        **resolved_json(resolved),
        "notes": resolved.notes,
        "patches": [
            {"name": p.name, "state": p.state, "files": p.files, "description": p.description, "problem": p.problem}
            for p in status.patches
        ],
        "drifted": status.drifted,
        "does_not_compile": {r.path: r.message for r in status.does_not_compile},
        "not_stock": {r.path: r.message for r in status.not_stock},  # apply refuses these on integrity
        "found_not_stock": status.found_edited,  # found applied, unrecorded, not stock beyond it: apply refuses
        "hanging": status.hanging,  # a fifo or device as a module: the launch's import hangs on it
        "unjudged_bytecode": status.unjudged_bytecode,  # .pyc not regular files, past those looked through
        "stale": status.stale,
        # applied from another library (or --patch files' earlier texts): what changed, and its fix
        **(
            {"other_library": {"changed": status.other_library, "fix": status.other_library_fix}}
            if status.other_library
            else {}
        ),
        "guard_notes": status.guard_notes,
        "store_notes": status.store_notes,
        "guard": {
            "installed": status.guard_installed,
            "refuses": status.guard,
            "fix": status.guard_fix if status.guard else None,
            # the fix is a hand repair (a symlink or a special file on the way): no apply makes it
            "by_hand": bool(status.guard and status.symlink_fix),
            # the recorded guard is gone: no refusal, and no launch checked either
            "missing": status.guard_missing,
            "missing_fix": status.guard_missing_fix if status.guard_missing else None,
        },
        **(
            {"upstream_regression": status.upstream_regression, "checks": [r.to_json() for r in status.checks]}
            if status.state in (TreeState.UPSTREAM, TreeState.UNRECORDED)
            else {}
        ),
        **({"hint": _unrecorded_fix(resolved)} if status.state == TreeState.UNRECORDED else {}),
        **({"hint": status.partial_fix} if status.partial_fix else {}),  # its one fix, as the text's
        **({"hint": _local_edit_fix(resolved, status)} if status.state == TreeState.CONFLICT else {}),
    }


def _unrecorded_fix(resolved: Resolved) -> str:
    """The change in the files with no apply recorded: what hands it to patchkit, as the note says."""
    return unrecorded_fix(resolved.target.root, resolved.vllm_version, resolved.selection.patches)


def _local_edit_fix(resolved: Resolved, status: TreeStatus) -> str:
    """A set in conflict's one fix, as the text's: the stock files back, then apply."""
    root, version = resolved.target.root, resolved.vllm_version
    return local_edit_fix(root, version, status.edited_in_hunks, resolved.set_name, status.in_the_way)
