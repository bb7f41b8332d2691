"""What vLLM's llama.py refuses of an EAGLE-3 drafter built of its layers (llama_eagle3.py's
Eagle3LlamaForCausalLM), read from the drafter's config.json: LlamaMLP's split of intermediate_size over
-tp and its one activation, LlamaAttention's RoPE (the tree's get_rope) and its layer_types, one entry a
draft layer. Each rule gives (what fails, fix), or None where the tree does not show its rule."""

from __future__ import annotations

import ast
from typing import Any

from patchkit.base.errors import escaped
from patchkit.checks.parsed import names, python_tree
from patchkit.launch.drafter_sizes import whole
from patchkit.launch.engine import LaunchContext
from patchkit.launch.model_files import EAGLE3_DRAFTER, LLAMA
from patchkit.launch.target_heads import tp_refused

ROPE = "vllm/model_executor/layers/rotary_embedding/__init__.py"  # get_rope: a branch per RoPE type
LAYER_TYPES_RULE = b"effective_layer_idx < len(layer_types)"  # LlamaAttention's assert (0.11-0.34)
DRAFT_LAYERS = b"target_layer_count"  # llama_eagle3.py: layer_types indexed by draft layer, from 0


def mlp_unsplit(launch: LaunchContext) -> tuple[str, str] | None:
    """llama.py's LlamaMLP splits intermediate_size over the -tp group (its column- and row-parallel
    linears divide it, asserting): (what fails, fix) when -tp does not divide the drafter's, where the
    tree's LlamaMLP shows that split; else None (and where the target's heads refuse that -tp: vLLM
    refuses the launch at start, patchkit/launch/target_heads.py)."""
    tp, size = launch.command.tensor_parallel_size, _drafter(launch).get("intermediate_size")
    if tp <= 1 or not whole(size) or size <= 0 or not size % tp or not _mlp_split(launch.read(LLAMA)):
        return None
    if tp_refused(launch.target, tp):
        return None
    fix = f"give a -tp that divides the drafter's intermediate_size {size} and its heads, or another drafter"
    return f"its intermediate_size {size} does not divide by -tp {tp} (llama.py's LlamaMLP splits it)", fix


def _mlp_split(source: bytes | None) -> bool:
    """Whether llama.py's LlamaMLP builds a tensor-parallel linear (a *ParallelLinear) of intermediate_size."""
    tree = python_tree(source)
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)] if tree else []
    calls = [n for cls in classes if cls.name == "LlamaMLP" for n in ast.walk(cls) if isinstance(n, ast.Call)]
    return any(
        isinstance(call.func, ast.Name)
        and call.func.id.endswith("ParallelLinear")
        and "intermediate_size"
        in {n.id for a in (*call.args, *call.keywords) for n in ast.walk(a) if isinstance(n, ast.Name)}
        for call in calls
    )


def rope_unknown(launch: LaunchContext) -> tuple[str, str] | None:
    """llama.py's LlamaAttention builds its rotary embedding with the tree's get_rope, which raises for a
    RoPE type it has no branch for: (what fails, fix) when the drafter's config.json gives one (vLLM reads
    rope_scaling, else rope_parameters; "type" for "rope_type", su and mrope renamed); None where the tree's
    get_rope shows no branches or the type is not one string (absent: default; per layer type: not judged)."""
    config = _drafter(launch)
    given = config.get("rope_scaling") or config.get("rope_parameters")
    kind = given.get("rope_type", given.get("type")) if isinstance(given, dict) else None
    kind = {"su": "longrope", "mrope": "default"}.get(kind, kind) if isinstance(kind, str) else None
    known = _rope_types(launch.read(ROPE))
    if kind is None or not known or kind in known:
        return None
    fix = f"use a drafter whose config.json gives a RoPE type this vLLM's get_rope builds ({', '.join(known)})"
    return f"its RoPE type '{escaped(kind)}' is none the tree's get_rope builds", fix


def _rope_types(source: bytes | None) -> list[str]:
    """The RoPE types get_rope has a branch for (`scaling_type == "yarn"`, `scaling_type in [...]`), in order."""
    tree = python_tree(source)
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)] if tree else []
    tests = [n for f in functions if f.name == "get_rope" for n in ast.walk(f) if isinstance(n, ast.Compare)]
    found = [
        node.value
        for test in tests
        if names(test.left) == {"scaling_type"} and isinstance(test.ops[0], ast.Eq | ast.In)
        for node in ast.walk(test.comparators[0])
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    return list(dict.fromkeys(found))


def activation_refused(launch: LaunchContext) -> tuple[str, str] | None:
    """The EAGLE-3 drafter's layers are llama.py's, whose LlamaMLP raises for any hidden_act but the one
    it names (silu in 0.16.0): (what fails, fix) when the drafter's config.json gives another, else None."""
    act = _drafter(launch).get("hidden_act")
    if act is None:
        return None  # absent: the config class's default (silu for Llama); null: null_refused's
    taken = _mlp_activation(launch.read(LLAMA))
    if taken is None or act == taken:
        return None
    act = act if isinstance(act, str) else repr(act)  # LlamaMLP compares any value to the name
    fix = f"use an EAGLE-3 drafter trained with hidden_act {taken}, the only one this vLLM's drafter layer takes"
    return f"its hidden_act '{escaped(act)}' is not {taken}, the only activation llama.py's LlamaMLP takes", fix


def layer_types_refused(launch: LaunchContext) -> tuple[str, str] | None:
    """llama.py's LlamaAttention indexes a non-empty layer_types by the draft layer (llama_eagle3.py's
    target_layer_count makes it count from 0) and asserts the index is in it: (what fails, fix) when the
    drafter's config.json gives fewer entries than its layers, or no list; None where vLLM reads none (an
    empty or absent one) or the tree does not show that rule."""
    config = _drafter(launch)
    given, layers = config.get("layer_types"), config.get("num_hidden_layers")
    if not given or not whole(layers) or layers <= 0 or (isinstance(given, list | str) and len(given) >= layers):
        return None  # a string is indexed by character: long enough, it builds
    shown = LAYER_TYPES_RULE in (launch.read(LLAMA) or b"") and DRAFT_LAYERS in (launch.read(EAGLE3_DRAFTER) or b"")
    if not shown:
        return None
    fix = f"give the drafter's config.json layer_types one entry a layer ({layers}), or drop layer_types"
    if not isinstance(given, list):
        return "its layer_types is no list (llama.py's LlamaAttention reads one entry a layer)", fix
    entries = f"{len(given)} entr{'y' if len(given) == 1 else 'ies'}"
    return f"its layer_types gives {entries} for its {layers} layers (llama.py asserts one a layer)", fix


def _mlp_activation(source: bytes | None) -> str | None:
    """The one activation llama.py's LlamaMLP accepts (`if hidden_act != "silu": raise ...`); None when the
    file is absent or unreadable, or its LlamaMLP has no such rule (a vLLM that takes more)."""
    tree = python_tree(source)
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)] if tree else []
    for node in (n for cls in classes if cls.name == "LlamaMLP" for n in ast.walk(cls)):
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(node, ast.If)
            and isinstance(test, ast.Compare)
            and names(test.left) == {"hidden_act"}
            and isinstance(test.ops[0], ast.NotEq)
            and isinstance(test.comparators[0], ast.Constant)
            and isinstance(test.comparators[0].value, str)
            and any(isinstance(statement, ast.Raise) for statement in node.body)
        ):
            return test.comparators[0].value
    return None


def _drafter(launch: LaunchContext) -> dict[str, Any]:
    """The drafter's config.json ({} without a drafter: no rule here judges then)."""
    return launch.drafter.config if launch.drafter is not None else {}
