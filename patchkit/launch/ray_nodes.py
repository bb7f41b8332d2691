"""A launch whose workers Ray places (--distributed-executor-backend ray, --data-parallel-backend ray):
each node's workers import that node's own vLLM tree, which a preflight here never reads. Said as a
note with the command that does judge every node's tree (patchkit fleet, docs/fleets.md)."""

from __future__ import annotations

from patchkit.launch.command import LaunchCommand

# the options whose value "ray" has vLLM start its workers (or data-parallel engines) as Ray actors
RAY_OPTIONS = ("distributed-executor-backend", "data-parallel-backend")


def ray_note(command: LaunchCommand) -> str | None:
    """The note for a Ray launch (None: not one): the other nodes' trees are not judged here."""
    given = [f"--{option} ray" for option in RAY_OPTIONS if str(command.options.get(option)) == "ray"]
    if not given:
        return None
    return (
        f"{' and '.join(given)}: the workers Ray starts on other nodes import those nodes' own vLLM trees, "
        "which this preflight does not judge: `patchkit fleet verify` judges every node's tree "
        "(`patchkit fleet status` shows each node's sets)"
    )
