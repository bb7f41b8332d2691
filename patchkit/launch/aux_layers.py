"""The drafter-aux-layers rule: the target's hidden states an EAGLE-3 drafter is fed. vLLM's model
runner takes the layers the drafter's config.json names (a non-empty top-level
eagle_aux_hidden_state_layer_ids) or the target's default (2, n//2, n-3); the target hands one hidden
state per distinct layer id (on the last pipeline stage alone), and the drafter's fc takes exactly
three of them where the release builds it so (through 0.18.x). Read from the tree: the target's
forward (a residual added before layer 0, the last layer's output), get_pp_indices, the drafter's fc."""

from __future__ import annotations

import ast
from typing import Any

from packaging.version import Version

from patchkit.base.errors import escaped
from patchkit.checks.parsed import names, python_tree
from patchkit.launch.drafter_sizes import DRAFTER_FIX, whole
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.model_files import EAGLE3_DRAFTER, MODELS_DIR
from patchkit.launch.parallel_drafting import uses_aux_hidden_states
from patchkit.launch.target_class import model_class, target_architecture

AUX_FIX = "give the layers the drafter was trained on as a top-level eagle_aux_hidden_state_layer_ids list"
LAYERS_FIX = "give the config.json whole-number layer ids and num_hidden_layers: the check cannot judge without them"
# The drafter's fc takes 3 aux hidden states (3 x hidden size) in every release up to 0.18.x; 0.22.0
# sizes it from the drafter's config instead, so the count is judged only where the tree shows the 3.
FC_HIDDEN_STATES = 3
# the model file whose forward (as this set patches it) counts layer ids from the model's first layer on
# every pipeline stage (stock Llama-family forwards count from the stage's own first layer); judged by the
# module the tree's registry maps an architecture to, as vLLM builds it, not by config.json's spelling
ABSOLUTE_LAYER_IDS = "deepseek_v2"
FC_OF_THREE = b"hidden_size * 3"
SIZED_BY_CONFIG = b"num_aux_hidden_states"
LAST_FC_OF_THREE = Version("0.18.999")
NESTED_IDS = "eagle_config.eagle_aux_hidden_state_layer_ids"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"  # 0.22-0.30's reads NESTED_IDS where the top level is empty
NESTED_READ = b'eagle_config.get("eagle_aux_hidden_state_layer_ids")'
PARTITION = "VLLM_PP_LAYER_PARTITION"
PP_INDICES = "vllm/distributed/utils.py"  # get_pp_indices, where vLLM reads PARTITION


def aux_layers(launch: LaunchContext, config: dict[str, Any]) -> Finding:
    """The layers vLLM's model runner takes: the drafter config's top-level
    eagle_aux_hidden_state_layer_ids when a non-empty list, else the target's default (2, n//2, n-3)."""
    if not uses_aux_hidden_states(config):  # vLLM then feeds it the last layer's state alone
        return Finding("drafter-aux-layers", True, "the drafter takes no aux hidden states (use_aux_hidden_state off)")
    layers = config.get("eagle_aux_hidden_state_layer_ids")
    count = launch.target.text_config.get("num_hidden_layers")
    if not (layers and isinstance(layers, list)):
        return _default_aux_layers(launch, config, count)
    if not whole(count) or not all(whole(n) for n in layers):
        message = f"cannot judge: layers {layers}, target layers {count} (each must be a whole number)"
        return Finding("drafter-aux-layers", False, message, LAYERS_FIX)
    final = _final_output_taken(launch)  # the id num_hidden_layers: the last layer's output, where the tree takes it
    top = count if final else count - 1
    beyond = [n for n in layers if not 0 <= n <= top]
    last = f" ({count}: the last layer's output, as this vLLM's {final} hands it)" if final else ""
    if beyond:
        where = f"above the target's {count} layers{last}" if final else f"not below the target's {count} layers"
        message = f"drafter's eagle_aux_hidden_state_layer_ids {beyond} {where}"
        return Finding("drafter-aux-layers", False, message, DRAFTER_FIX)
    held = (
        f"within the target's {count} layers{last}"
        if final and count in layers
        else f"below the target's {count} layers"
    )
    return _aux_count(launch, f"aux layers {layers}", layers, count, top, f"aux layers {layers} are {held}")


def _aux_count(launch: LaunchContext, named: str, layers: list[int], count: int, top: int, passed: str) -> Finding:
    """The target returns one hidden state per distinct layer id up to `top` (its last layer; one more
    where its forward hands the last layer's output), and the drafter's fc takes exactly FC_HIDDEN_STATES of
    them: another number loads and serves until the first request's proposal, which fails on the fc's shape."""
    refused = _partition_refused(launch, count)
    if refused is not None:
        return refused
    first = _last_stage_start(launch, count)
    taken = sorted({n for n in layers if first <= n <= top})
    unguarded = _residual_added_unguarded(launch) if 0 in taken else None
    if unguarded is not None:
        message = (
            f"{named} include layer 0, where this vLLM's {unguarded} forward adds a residual that is "
            "still None: vLLM fails in its start-up run, after the loads"
        )
        return Finding("drafter-aux-layers", False, message, "use a drafter trained on layers from 1 up")
    if fc_hidden_states(launch) is None or len(taken) == FC_HIDDEN_STATES:
        return Finding("drafter-aux-layers", True, passed)
    held = f"the target's {count} layers" if first == 0 else f"the last pipeline stage's layers {first}-{count - 1}"
    message = (
        f"{named} give {len(taken)} hidden state(s) of {held}; this vLLM's EAGLE-3 drafter "
        f"takes {FC_HIDDEN_STATES}: vLLM fails at the first request"
    )
    fix = f"give the drafter's eagle_aux_hidden_state_layer_ids 3 distinct layers below {count}, as it was trained"
    if first > 0 and len({n for n in layers if 0 <= n <= top}) == FC_HIDDEN_STATES:  # its layers are right
        fix = "serve without -pp (give its GPUs to -tp): this vLLM hands the drafter the last stage's states alone"
    return Finding("drafter-aux-layers", False, message, fix)


# the targets whose aux hidden states come from another module's forward (Kimi-K2.5's language model
# is vLLM's DeepseekV2Model)
FORWARD_MODULE = {"KimiK25ForConditionalGeneration": "deepseek_v2"}


def _forward_module(launch: LaunchContext) -> str | None:
    """The module (e.g. deepseek_v2) whose forward hands the drafter the target's hidden states; None when
    the architecture is not registered."""
    arch = target_architecture(launch)
    where = model_class(launch.registry(), arch) if arch else None
    return FORWARD_MODULE.get(arch or "") or (where[0] if where else None)


def _forward_file(launch: LaunchContext) -> tuple[str, ast.Module] | None:
    """(file name, parsed) of the target's model file whose forward hands the drafter its hidden states;
    None when the architecture is not registered or the file is unreadable."""
    module = _forward_module(launch)
    tree = python_tree(launch.read(f"{MODELS_DIR}/{module}.py") if module else None)
    return (f"{module}.py", tree) if tree is not None else None


def _residual_added_unguarded(launch: LaunchContext) -> str | None:
    """The target's model file (e.g. deepseek_v2.py) when its forward hands the drafter hidden_states +
    residual with no `residual is None` test: before the first layer the residual is None, so layer 0
    raises TypeError. None when the file guards it, lacks such a loop, or cannot be read."""
    found = _forward_file(launch)
    loops = [node for node in ast.walk(found[1]) if isinstance(node, ast.For)] if found else []
    return found[0] if found and any(_adds_residual_unguarded(loop) for loop in loops) else None


def _final_output_taken(launch: LaunchContext) -> str | None:
    """The target's model file when its forward also hands the drafter the last layer's output for the id
    num_hidden_layers (`if self.end_layer in self.aux_hidden_state_layers:` after its loop, 0.26+'s
    deepseek_v2.py); None where it hands states of layers below its count alone."""
    found = _forward_file(launch)
    for node in ast.walk(found[1]) if found else ():
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Attribute)
            and test.left.attr == "end_layer"
            and isinstance(test.ops[0], ast.In)
            and isinstance(test.comparators[0], ast.Attribute)
            and test.comparators[0].attr == "aux_hidden_state_layers"
        ):
            return found[0] if found else None
    return None


def _adds_residual_unguarded(loop: ast.For) -> bool:
    """`for idx, layer in ...: if idx in self.aux_hidden_state_layers: ... hidden_states + residual` with
    no `residual is None` / `is not None` test in that branch."""
    indices = {node.id for node in ast.walk(loop.target) if isinstance(node, ast.Name)}
    for branch in (node for node in ast.walk(loop) if isinstance(node, ast.If)):
        test = branch.test
        if not (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id in indices
            and isinstance(test.ops[0], ast.In)
            and isinstance(test.comparators[0], ast.Attribute)
            and test.comparators[0].attr == "aux_hidden_state_layers"
        ):
            continue
        inside = [node for statement in branch.body for node in ast.walk(statement)]
        adds = any(
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and "residual" in names(node.left, node.right)
            for node in inside
        )
        tested = any(
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.Is | ast.IsNot)
            and "residual" in names(node.left)
            for node in inside
        )
        if adds and not tested:
            return True
    return False


def _last_stage_start(launch: LaunchContext, count: int) -> int:
    """The first layer of the last pipeline stage, which alone holds the drafter and hands it hidden states:
    the earlier stages pass on only hidden_states and residual (0: one stage, or a partition vLLM refuses)."""
    stages = _whole_option(launch.command.options.get("pipeline-parallel-size", 1))
    if stages is None or stages <= 1 or _forward_module(launch) != ABSOLUTE_LAYER_IDS:
        return 0
    given = launch.command.environ.get(PARTITION)
    if given is not None:  # vLLM's get_pp_indices: one count a stage, summing to the layers (else refused)
        parts = _partition(given)
        return count - parts[-1] if parts and len(parts) == stages and sum(parts) == count else 0
    last = count // stages  # the remainder goes to the stages before the last
    return count - last


def _partition(given: str) -> list[int] | None:
    """VLLM_PP_LAYER_PARTITION's layer counts as get_pp_indices reads them (int() of each
    comma-separated part); None where it raises "Invalid partition string"."""
    try:
        return [int(part) for part in given.split(",")]
    except ValueError:
        return None


def _partition_refused(launch: LaunchContext, count: int) -> Finding | None:
    """A VLLM_PP_LAYER_PARTITION the tree's get_pp_indices refuses, as it builds the target's layers
    (on every stage, -pp 1 too: it is read whenever set): vLLM's words, or cannot judge where the tree
    does not show the rule. None: not given, or accepted."""
    given = launch.command.environ.get(PARTITION)
    if given is None:
        return None
    stages = _whole_option(launch.command.options.get("pipeline-parallel-size", 1))
    parts = _partition(given)
    if parts is None:
        why = f"Invalid partition string: {given}"
    elif stages is not None and len(parts) != stages:
        why = f"len(partitions)={len(parts)} does not match pp_size={stages}."
    elif sum(parts) != count:
        why = f"sum(partitions)={sum(parts)} does not match num_hidden_layers={count}."
    else:
        return None
    shown = f"{PARTITION}={escaped(given)!r}"
    fix = f"give {PARTITION} {stages or 'one'} whole layer count(s), one a pipeline stage, summing to {count}, or unset it"
    rule = launch.read(PP_INDICES) or b""
    if PARTITION.encode() not in rule or b"def get_pp_indices" not in rule:
        return cannot_judge(
            "drafter-aux-layers", f"{shown}: the tree's {PP_INDICES} does not show how vLLM reads it", fix
        )
    message = f"{shown}: vLLM's get_pp_indices refuses it as it builds the target ({escaped(why)})"
    return Finding("drafter-aux-layers", False, message, fix)


def _whole_option(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def fc_hidden_states(launch: LaunchContext) -> int | None:
    """FC_HIDDEN_STATES where this vLLM's drafter builds its fc of 3 hidden states; None where it sizes it
    from the drafter's config, or cannot be told (no drafter file in a tree of a later release)."""
    data = launch.read(EAGLE3_DRAFTER)
    if data is None:
        known = launch.version is not None and launch.version <= LAST_FC_OF_THREE
        return FC_HIDDEN_STATES if known else None
    return FC_HIDDEN_STATES if FC_OF_THREE in data and SIZED_BY_CONFIG not in data else None


def _default_aux_layers(launch: LaunchContext, config: dict[str, Any], count: object) -> Finding:
    """No layers vLLM reads: it takes the target's default, which a drafter naming layers elsewhere
    (eagle_config, an empty list, a number) was not trained on."""
    default = (
        f"(2, {count // 2}, {count - 3})"
        if isinstance(count, int) and whole(count)
        else "(2, n//2, n-3 of the target's layers)"
    )
    ignored = _ignored_aux_layers(config)
    if ignored is None:
        message = f"drafter names no eagle_aux_hidden_state_layer_ids: vLLM uses the target's default layers {default}"
        if not whole(count):
            return Finding("drafter-aux-layers", True, message)
        return _aux_count(
            launch, f"the target's default layers {default}", [2, count // 2, count - 3], count, count - 1, message
        )
    if ignored[0] == NESTED_IDS and NESTED_READ in (launch.read(V1_RUNNER) or b""):
        # 0.22-0.30: the V1 model runner reads them there, the V2 one does not; vLLM picks the runner by the
        # model, its features and VLLM_USE_V2_MODEL_RUNNER: a top-level list is what both read
        reason = (
            f"this vLLM's V1 model runner reads the drafter's {NESTED_IDS} {ignored[1]!r}, its V2 runner "
            f"uses the target's default layers {default}: which runs depends on the model and its features"
        )
        return cannot_judge("drafter-aux-layers", reason, AUX_FIX)
    if ignored[0] == NESTED_IDS:  # vLLM serves it, on other states than the drafter was trained on
        return _nested_aux_layers(launch, ignored[1], count, default)
    message = (
        f"vLLM never reads the drafter's {ignored[0]} {ignored[1]!r} (only a non-empty top-level list): "
        f"it uses the target's default layers {default}"
    )
    return Finding("drafter-aux-layers", False, message, AUX_FIX)


def _nested_aux_layers(launch: LaunchContext, ids: object, count: object, default: str) -> Finding:
    """Layer ids only under eagle_config: vLLM ignores them and serves the launch on the target's default
    layers (drafts fewer accepted, answers the target's), so a pass said as a note; the default layers
    still held to what the drafter's fc takes."""
    message = (
        f"vLLM ignores the drafter's {NESTED_IDS} {ids!r} and uses the target's layers {default}; to have it "
        "use the drafter's, put that list at the top level of its config.json as eagle_aux_hidden_state_layer_ids"
    )
    if not isinstance(count, int) or not whole(count):
        return Finding("drafter-aux-layers", True, message, note=True)
    layers = [2, count // 2, count - 3]
    found = _aux_count(launch, f"the target's default layers {default}", layers, count, count - 1, message)
    return Finding(found.check, True, message, note=True) if found.ok else found


def _ignored_aux_layers(config: dict[str, Any]) -> tuple[str, object] | None:
    """(where, value) of layer ids the drafter's config gives where vLLM does not take them: eagle_config's
    where the top level gives none or an empty list."""
    key = "eagle_aux_hidden_state_layer_ids"
    top, nested = config.get(key), config.get("eagle_config")
    inner = nested.get(key) if isinstance(nested, dict) else None
    if top is not None and not (top == [] and inner is not None):
        return key, top
    return (NESTED_IDS, inner) if inner is not None else None
