"""The eagle3 set's launch checks (`patchkit preflight`): a `--speculative-config` with method
eagle3, held against the installed vLLM, statically. Engine and API: patchkit/launch/engine.py.

Each fault the engineer this set comes from met one model load at a time is a finding here: the
whitelist, the proposer's image_token_index read, SupportsEagle3, and the drafter's shape.
SupportsEagle3 is also asked of vLLM itself (its supports_eagle3() on the class its ModelRegistry
resolves) when the preflight may import vLLM; that answer is then the verdict.
"""

from __future__ import annotations

import ast
import dataclasses

from packaging.version import Version

from patchkit.base import hints
from patchkit.launch.engine import few_named
from patchkit.launch.findings import Finding
from patchkit.series.requirements import Target

SUPPORTS = "SupportsEagle3"
SPECULATIVE_TABLE = "_SPECULATIVE_DECODING_MODELS"
MODELS_DIR = "vllm/model_executor/models"
REGISTRY = f"{MODELS_DIR}/registry.py"  # where vLLM registers architectures (read statically)
DRAFTER_FIX = "use an EAGLE-3 drafter trained for this target model"
AUX_FIX = "give the layers the drafter was trained on as a top-level eagle_aux_hidden_state_layer_ids list"
LAYERS_FIX = "give the config.json whole-number layer ids and num_hidden_layers: the check cannot judge without them"
NOTE_ROOM = 60  # columns for the names of the general plugins not judged
SIZE_FIX = "give the config.json a positive whole-number size: the check cannot judge without one"
EAGLE3_DRAFTER = f"{MODELS_DIR}/llama_eagle3.py"
# The drafter's fc takes 3 aux hidden states (3 x hidden size) in every release up to 0.18.x; 0.22.0
# sizes it from the drafter's config instead, so the count is judged only where the tree shows the 3.
FC_HIDDEN_STATES = 3
# the targets whose forward (as this set patches it) counts layer ids from the model's first layer on every
# pipeline stage (stock Llama-family forwards count from the stage's own first layer)
ABSOLUTE_LAYER_IDS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration")
FC_OF_THREE = b"hidden_size * 3"
SIZED_BY_CONFIG = b"num_aux_hidden_states"
LAST_FC_OF_THREE = Version("0.18.999")


# The other methods whose drafter vLLM loads through the proposer's load_model (EagleProposer: eagle,
# mtp; DraftModelProposer from 0.15.1): for them only patch 0002, the image token read, matters.
PROPOSER_METHODS = ("eagle", "mtp", "draft_model")


def checks(launch) -> list[Finding]:
    if launch.command.speculative_method in PROPOSER_METHODS:
        return image_token(launch)
    if launch.command.speculative_method != "eagle3":
        return []
    found = [whitelist(launch), supports_eagle3(launch)]
    found += image_token(launch)
    if launch.drafter is not None:
        found += [drafter_architecture(launch), hidden_size(launch), aux_layers(launch), vocabulary(launch)]
    return found


# --- the target ----------------------------------------------------------------------------------


def whitelist(launch) -> Finding:
    model_type = launch.target.text_config.get("model_type")
    entries = launch.requirements("model-types")
    if not entries:
        return Finding("whitelist", True, "this vLLM has no EAGLE-3 target whitelist")
    if not isinstance(model_type, str):
        return Finding("whitelist", False, f"{launch.target.path} names no text model_type")

    def judgement(read):
        verdicts = [launch.evaluate(_with(r, model_types=[model_type]), read) for r in entries]
        failed = [message for ok, message in verdicts if not ok]
        if failed:
            return False, f"target model_type '{model_type}': " + "; ".join(failed)
        return True, f"target model_type '{model_type}' is accepted"

    return launch.judge("whitelist", judgement, _whitelist_fix(launch, model_type))


def _whitelist_fix(launch, model_type: str) -> str:
    """What to do about a target EAGLE-3 does not accept: the override that made its model_type, else
    the launch without EAGLE-3 (every failure has its fix; an --hf-overrides one had none)."""
    overrides = launch.command.hf_overrides or {}
    text = overrides.get("text_config") if isinstance(overrides.get("text_config"), dict) else {}
    if model_type in (overrides.get("model_type"), text.get("model_type")):
        return (
            f"--hf-overrides sets model_type '{model_type}': drop that override, or serve without --speculative-config"
        )
    return f"EAGLE-3 here serves no '{model_type}' target: serve it without --speculative-config"


def supports_eagle3(launch) -> Finding:
    arch = target_architecture(launch)
    if arch is None:
        return Finding("supports-eagle3", False, f"{launch.target.path} names no architecture")

    def judgement(read):
        where = _model_class(launch.registry(read), arch)
        if where is None:
            return False, f"the installed vLLM does not register the target architecture {arch}"
        module, cls = where
        requirement = launch.requirement(file=f"{MODELS_DIR}/{module}.py", kind="base", **{"class": cls}, base=SUPPORTS)
        return launch.evaluate(requirement, read)

    static = launch.lacks("supports-eagle3", REGISTRY) or launch.judge("supports-eagle3", judgement)
    verdict = launch.model_interface(launch.target.architectures, "supports_eagle3")
    plugins = launch.general_plugins() if verdict.result is None else []
    if plugins:  # they run before vLLM builds the model, and may register another class for it
        named = few_named(plugins, NOTE_ROOM)  # a few, then how many more: one finding stays short
        note = f"; not judged: the class the general plugins {named} may register for {arch}"
        verdict = dataclasses.replace(verdict, message=verdict.message + note)
    return _held_to_vllm(static, verdict)


def target_architecture(launch) -> str | None:
    """The target's architecture vLLM builds: of config.json's, in order, the first the installed
    registry holds (ModelRegistry.resolve_model_cls); none registered, the first (for the message)."""
    archs = launch.target.architectures
    tables = launch.registry()
    registered = [arch for arch in archs if _model_class(tables, arch) is not None]
    return (registered or archs or [None])[0]


def _held_to_vllm(static: Finding, verdict) -> Finding:
    """The static finding, then vLLM's own answer when it gave one: vLLM's answer is the verdict."""
    if verdict.result is None:
        return dataclasses.replace(static, message=f"{static.message}; {verdict.message}")
    message = f"statically: {static.message}; {verdict.message}"
    fix = (
        None
        if verdict.result
        else verdict.fix
        or static.fix
        or f"the installed model class does not implement {SUPPORTS}: run {hints.command('status')}"
    )
    return Finding(static.check, verdict.result, message, fix)


def image_token(launch) -> list[Finding]:
    """A multimodal target whose config lacks image_token_index must not reach the proposer's read."""
    config = launch.target.config
    if "text_config" not in config and "vision_config" not in config:
        return []
    if "image_token_index" in config or "image_token_id" in config:
        return [Finding("image-token", True, "the target config has an image token index")]
    arch = target_architecture(launch) or "?"
    entries = launch.requirements("guarded-read")
    if not entries:
        return []

    def judgement(read):
        verdicts = [launch.evaluate(_guarded_for(launch, r, arch), read) for r in entries]
        failed = [message for ok, message in verdicts if not ok]
        if failed:
            return False, f"{arch} config lacks image_token_index: " + "; ".join(failed)
        return True, f"the proposer does not read image_token_index for {arch}"

    return [launch.judge("image-token", judgement)]


def _guarded_for(launch, requirement, arch: str):
    declared = requirement["target"]
    config = launch.target.config
    has = tuple(name for name in declared.has if name in config)
    lacks = tuple(name for name in (*declared.lacks, requirement["attribute"]) if name not in config)
    return _with(requirement, target=Target(arch, has, lacks))


# --- the drafter ---------------------------------------------------------------------------------


def drafter_architecture(launch) -> Finding:
    lacking = launch.lacks("drafter-architecture", REGISTRY)
    if lacking is not None:
        return lacking
    arch = launch.drafter.architecture
    tables = launch.registry()
    table = tables.get(SPECULATIVE_TABLE, {})
    built = next((name for name in _built_names(launch.drafter) if any(name in t for t in tables.values())), None)
    if built is not None:
        registered = f"drafter architecture {built} is registered for EAGLE-3"
        split = _heads_unsplit(launch)
        if split is None:
            return Finding("drafter-architecture", True, registered)
        message = f"{registered}, but {split}: vLLM fails building it, after the target's load"
        fix = "give a -tp that divides the drafter's heads and the target's, or a drafter whose heads it divides"
        return Finding("drafter-architecture", False, message, fix)
    known = ", ".join(sorted(n for n, (module, _) in table.items() if "eagle3" in module.lower())) or "none"
    names = _built_names(launch.drafter)
    renamed = f" (built as {', '.join(names)} under eagle3)" if names and names != launch.drafter.architectures else ""
    return Finding(
        "drafter-architecture",
        False,
        f"drafter architecture {arch}{renamed} is not registered for EAGLE-3 in the installed vLLM (registered: {known})",
        DRAFTER_FIX,
    )


def _built_names(drafter) -> list[str]:
    """The names vLLM looks the drafter up by, in order: for eagle3 its EAGLEConfig renames each of
    config.json's architectures to Eagle3<name> unless it starts or ends with Eagle3 (an EAGLE-1
    EagleLlamaForCausalLM becomes Eagle3EagleLlamaForCausalLM, which no registry holds). A config of
    model_type eagle is vLLM's already and is not renamed there: either spelling is looked up."""
    archs = drafter.architectures
    if drafter.config.get("model_type") == "eagle":
        return [name for arch in archs for name in (arch, f"Eagle3{arch}")]
    return [arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}" for arch in archs]


def _heads_unsplit(launch) -> str | None:
    """vLLM builds the drafter in the target's tensor-parallel group, whose attention asserts that -tp
    divides its heads, and its KV heads (or is divided by them when fewer): what fails, else None."""
    tp = launch.command.tensor_parallel_size
    heads = launch.drafter.config.get("num_attention_heads")
    if tp <= 1 or not _whole(heads) or heads <= 0:
        return None  # absent or odd: the drafter's own load names it
    kv = launch.drafter.config.get("num_key_value_heads")
    kv = heads if kv is None else kv
    if heads % tp:
        return f"its {heads} attention heads do not divide by -tp {tp}"
    if _whole(kv) and kv > 0 and (kv % tp if kv >= tp else tp % kv):
        return f"its {kv} KV heads do not split over -tp {tp}"
    return None


def hidden_size(launch) -> Finding:
    wanted = _size(launch.drafter.config, "target_hidden_size", "hidden_size")
    actual = _size(launch.target.text_config, "hidden_size")
    if wanted is None or actual is None:
        message = f"cannot judge: the drafter expects hidden size {_shown(wanted)}, the target has {_shown(actual)}"
        return Finding("drafter-hidden-size", False, message, SIZE_FIX)
    message = f"drafter expects hidden size {wanted}, target has {actual}"
    return Finding("drafter-hidden-size", wanted == actual, message, None if wanted == actual else DRAFTER_FIX)


def aux_layers(launch) -> Finding:
    """The layers vLLM's model runner takes: the drafter config's top-level
    eagle_aux_hidden_state_layer_ids when a non-empty list, else the target's default (2, n//2, n-3)."""
    config = launch.drafter.config
    if not _uses_aux_hidden_states(config):  # vLLM then feeds it the last layer's state alone
        return Finding("drafter-aux-layers", True, "the drafter takes no aux hidden states (use_aux_hidden_state off)")
    layers = config.get("eagle_aux_hidden_state_layer_ids")
    count = launch.target.text_config.get("num_hidden_layers")
    if not (layers and isinstance(layers, list)):
        return _default_aux_layers(launch, config, count)
    if not _whole(count) or not all(_whole(n) for n in layers):
        message = f"cannot judge: layers {layers}, target layers {count} (each must be a whole number)"
        return Finding("drafter-aux-layers", False, message, LAYERS_FIX)
    beyond = [n for n in layers if not 0 <= n < count]
    if beyond:
        message = f"drafter's eagle_aux_hidden_state_layer_ids {beyond} not below the target's {count} layers"
        return Finding("drafter-aux-layers", False, message, DRAFTER_FIX)
    passed = f"aux layers {layers} are below the target's {count} layers"
    return _aux_count(launch, f"aux layers {layers}", layers, count, passed)


def _aux_count(launch, named: str, layers: list[int], count: int, passed: str) -> Finding:
    """The target returns one hidden state per distinct layer id below its layer count (none past the
    last layer), and the drafter's fc takes exactly FC_HIDDEN_STATES of them: another number loads and
    serves until the first request's proposal, which fails on the fc's shape."""
    first = _last_stage_start(launch, count)
    taken = sorted({n for n in layers if first <= n < count})
    unguarded = _residual_added_unguarded(launch) if 0 in taken else None
    if unguarded is not None:
        message = (
            f"{named} include layer 0, where this vLLM's {unguarded} forward adds a residual that is "
            "still None: vLLM fails in its start-up run, after the loads"
        )
        return Finding("drafter-aux-layers", False, message, "use a drafter trained on layers from 1 up")
    if _fc_hidden_states(launch) is None or len(taken) == FC_HIDDEN_STATES:
        return Finding("drafter-aux-layers", True, passed)
    held = f"the target's {count} layers" if first == 0 else f"the last pipeline stage's layers {first}-{count - 1}"
    message = (
        f"{named} give {len(taken)} hidden state(s) of {held}; this vLLM's EAGLE-3 drafter "
        f"takes {FC_HIDDEN_STATES}: vLLM fails at the first request"
    )
    fix = f"give the drafter's eagle_aux_hidden_state_layer_ids 3 distinct layers below {count}, as it was trained"
    if first > 0 and len({n for n in layers if 0 <= n < count}) == FC_HIDDEN_STATES:  # its layers are right
        fix = "serve without -pp (give its GPUs to -tp): this vLLM hands the drafter the last stage's states alone"
    return Finding("drafter-aux-layers", False, message, fix)


# the targets whose aux hidden states come from another module's forward (Kimi-K2.5's language model
# is vLLM's DeepseekV2Model)
FORWARD_MODULE = {"KimiK25ForConditionalGeneration": "deepseek_v2"}


def _residual_added_unguarded(launch) -> str | None:
    """The target's model file (e.g. deepseek_v2.py) when its forward hands the drafter hidden_states +
    residual with no `residual is None` test: before the first layer the residual is None, so layer 0
    raises TypeError. None when the file guards it, lacks such a loop, or cannot be read."""
    arch = target_architecture(launch)
    where = _model_class(launch.registry(), arch) if arch else None
    module = FORWARD_MODULE.get(arch or "") or (where[0] if where else None)
    data = launch.read(f"{MODELS_DIR}/{module}.py") if module else None
    try:
        tree = ast.parse(data) if data else None
    except (SyntaxError, ValueError):
        return None
    loops = [node for node in ast.walk(tree) if isinstance(node, ast.For)] if tree else []
    return f"{module}.py" if any(_adds_residual_unguarded(loop) for loop in loops) else None


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
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and "residual" in _names(node.left, node.right)
            for node in inside
        )
        tested = any(
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.Is | ast.IsNot)
            and "residual" in _names(node.left)
            for node in inside
        )
        if adds and not tested:
            return True
    return False


def _names(*nodes: ast.AST) -> set[str]:
    return {node.id for node in nodes if isinstance(node, ast.Name)}


def _last_stage_start(launch, count: int) -> int:
    """The first layer of the last pipeline stage, which alone holds the drafter and hands it hidden states:
    the earlier stages pass on only hidden_states and residual (0: one stage, or a partition vLLM refuses)."""
    stages = _whole_option(launch.command.options.get("pipeline-parallel-size", 1))
    if stages is None or stages <= 1 or target_architecture(launch) not in ABSOLUTE_LAYER_IDS:
        return 0
    given = launch.command.environ.get("VLLM_PP_LAYER_PARTITION")
    if given is not None:  # vLLM's get_pp_indices: one count a stage, summing to the layers
        parts = [_whole_option(part) for part in given.split(",")]
        whole = [part for part in parts if part is not None]
        return count - whole[-1] if len(whole) == len(parts) == stages and sum(whole) == count else 0
    last = count // stages  # the remainder goes to the stages before the last
    return count - last


def _whole_option(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _uses_aux_hidden_states(config: dict) -> bool:
    """vLLM's EagleProposer: eagle_config's use_aux_hidden_state (default on) when eagle_config is a dict."""
    nested = config.get("eagle_config")
    return bool(nested.get("use_aux_hidden_state", True)) if isinstance(nested, dict) else True


def _fc_hidden_states(launch) -> int | None:
    """FC_HIDDEN_STATES where this vLLM's drafter builds its fc of 3 hidden states; None where it sizes it
    from the drafter's config, or cannot be told (no drafter file in a tree of a later release)."""
    data = launch.read(EAGLE3_DRAFTER)
    if data is None:
        known = launch.version is not None and launch.version <= LAST_FC_OF_THREE
        return FC_HIDDEN_STATES if known else None
    return FC_HIDDEN_STATES if FC_OF_THREE in data and SIZED_BY_CONFIG not in data else None


def _default_aux_layers(launch, config: dict, count: object) -> Finding:
    """No layers vLLM reads: it takes the target's default, which a drafter naming layers elsewhere
    (eagle_config, an empty list, a number) was not trained on."""
    default = (
        f"(2, {count // 2}, {count - 3})"
        if isinstance(count, int) and _whole(count)
        else "(2, n//2, n-3 of the target's layers)"
    )
    ignored = _ignored_aux_layers(config)
    if ignored is None:
        message = f"drafter names no eagle_aux_hidden_state_layer_ids: vLLM uses the target's default layers {default}"
        if not _whole(count):
            return Finding("drafter-aux-layers", True, message)
        return _aux_count(launch, f"the target's default layers {default}", [2, count // 2, count - 3], count, message)
    message = (
        f"vLLM never reads the drafter's {ignored[0]} {ignored[1]!r} (only a non-empty top-level list): "
        f"it uses the target's default layers {default}"
    )
    return Finding("drafter-aux-layers", False, message, AUX_FIX)


def _ignored_aux_layers(config: dict) -> tuple[str, object] | None:
    """(where, value) of layer ids the drafter's config gives where vLLM does not take them."""
    if config.get("eagle_aux_hidden_state_layer_ids") is not None:
        return "eagle_aux_hidden_state_layer_ids", config["eagle_aux_hidden_state_layer_ids"]
    nested = config.get("eagle_config")
    if isinstance(nested, dict) and nested.get("eagle_aux_hidden_state_layer_ids") is not None:
        return "eagle_config.eagle_aux_hidden_state_layer_ids", nested["eagle_aux_hidden_state_layer_ids"]
    return None


def vocabulary(launch) -> Finding:
    """vLLM's EAGLE-3 drafter (Eagle3LlamaForCausalLM, llama_eagle3.py) embeds the target's token ids
    in a table of its own vocab_size, and scatters its draft_vocab_size logits (by d2t) into a row of
    vocab_size ids the target then verifies: vocab_size must be the target's, draft_vocab_size (default
    vocab_size) no larger (newuser16 3: a DeepSeek drafter, 129280, passed for Kimi-K2.5, 163840)."""
    own = _size(launch.drafter.config, "vocab_size")
    draft = _size(launch.drafter.config, "draft_vocab_size", "vocab_size")
    target = _size(launch.target.text_config, "vocab_size")
    if own is None or draft is None or target is None:
        message = (
            f"cannot judge: drafter vocab_size {_shown(own)}, draft_vocab_size {_shown(draft)}, "
            f"target vocab_size {_shown(target)}"
        )
        return Finding("drafter-vocabulary", False, message, SIZE_FIX)
    message = f"drafter vocab_size {own} (draft_vocab_size {draft}), target vocab_size {target}"
    if own != target:
        why = (
            "the drafter's must be the target's: it embeds the target's token ids and drafts ids of its own vocabulary"
        )
        return Finding("drafter-vocabulary", False, f"{message}: {why}", DRAFTER_FIX)
    if draft > own:
        why = "draft_vocab_size is larger than vocab_size, into which d2t maps each draft id"
        return Finding("drafter-vocabulary", False, f"{message}: {why}", DRAFTER_FIX)
    return Finding("drafter-vocabulary", True, message)


# --- helpers -------------------------------------------------------------------------------------


def _size(config: dict, *keys: str) -> int | None:
    """The first of `keys` the config gives (vLLM's order), when it is a positive whole number; else
    None: a size that is absent or of another kind cannot be compared, so no check passes on it."""
    value = next((config[key] for key in keys if config.get(key) is not None), None)
    return value if _whole(value) and value > 0 else None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(size: int | None) -> str:
    return "none (absent or not a positive whole number)" if size is None else str(size)


def _model_class(tables: dict, arch: str) -> tuple[str, str] | None:
    for name, table in tables.items():
        if name != SPECULATIVE_TABLE and arch in table:
            return table[arch]
    return None


def _with(requirement, **changes):
    """A copy of a contract requirement with some fields replaced (its reason dropped: the finding says why)."""
    return dataclasses.replace(requirement, fields={**requirement.fields, **changes}, reason="")
