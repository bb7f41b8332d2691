"""A launch whose workers Ray places (--distributed-executor-backend ray, --data-parallel-backend ray,
or no backend given where the tree's vLLM picks Ray by itself): each node's workers import that node's
own vLLM tree, which a preflight here never reads. Said as a note with the command that does judge
every node's tree (patchkit fleet, docs/fleets.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from patchkit.checks.parsed import python_tree
from patchkit.distinfo.entry_points import distribution_headers
from patchkit.launch.command import LaunchCommand
from patchkit.launch.engine import import_path, tree_reader

# the options whose value "ray" has vLLM start its workers (or data-parallel engines) as Ray actors
RAY_OPTIONS = ("distributed-executor-backend", "data-parallel-backend")
PARALLEL = "vllm/config/parallel.py"  # ParallelConfig.__post_init__ picks the backend when none is given
_WHOLE_TREES = "the workers Ray starts on other nodes import those nodes' own vLLM trees, which this preflight"
_FLEET = "`patchkit fleet verify` judges every node's tree (`patchkit fleet status` shows each node's sets)"


def ray_note(command: LaunchCommand, root: Path) -> str | None:
    """The note for a Ray launch (None: not one) on the tree at `root`: the other nodes' trees are not
    judged here."""
    given = [f"--{option} ray" for option in RAY_OPTIONS if str(command.options.get(option)) == "ray"]
    if given:
        return f"{' and '.join(given)}: {_WHOLE_TREES} does not judge: {_FLEET}"
    world = _world_size(command)
    if command.options.get(RAY_OPTIONS[0]) is not None or world is None or world < 2:
        return None
    if not picks_ray_itself(tree_reader(root)(PARALLEL)):
        return None
    if distribution_headers(import_path(command, root), "ray") is None:  # vLLM refuses the launch then
        return None
    return (
        f"no --distributed-executor-backend: this vLLM starts the {world} workers (tensor x pipeline parallel) as "
        f"Ray actors by itself on a node with fewer than {world} GPUs, and then {_WHOLE_TREES} does not judge: "
        f"{_FLEET}; give --distributed-executor-backend mp to keep them on this node"
    )


def _world_size(command: LaunchCommand) -> int | None:
    """ParallelConfig.world_size, tensor x pipeline parallel; None where an option is no whole number
    (its own finding says so)."""
    sizes = [command.options.get(f"{kind}-parallel-size", 1) for kind in ("tensor", "pipeline")]
    try:
        tensor, pipeline = (int(str(size).strip()) for size in sizes)
    except ValueError:
        return None
    return tensor * pipeline


def picks_ray_itself(source: bytes | None) -> bool:
    """Whether the tree's ParallelConfig takes Ray where the node has fewer GPUs than the world size
    (0.11.0: `backend = "ray"`); 0.11.1 on refuse that launch at start instead (a ValueError).
    False where the file is not read."""
    tree = python_tree(source)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _fewer_gpus_than_world(node.test):
            return any(
                isinstance(step, ast.Assign) and isinstance(step.value, ast.Constant) and step.value.value == "ray"
                for step in node.body
            )
    return False


def _fewer_gpus_than_world(test: ast.expr) -> bool:
    """`...device_count...() < self.world_size`, alone or in an `and`."""
    tests = test.values if isinstance(test, ast.BoolOp) else [test]
    return any(
        isinstance(part, ast.Compare)
        and isinstance(part.ops[0], ast.Lt)
        and isinstance(part.left, ast.Call)
        and "device_count" in ast.unparse(part.left.func)
        and isinstance(part.comparators[0], ast.Attribute)
        and part.comparators[0].attr == "world_size"
        for part in tests
    )
