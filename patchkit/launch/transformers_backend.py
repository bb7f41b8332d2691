"""The class vLLM builds for the target under its Transformers modeling backend (ModelRegistry's
resolve_model_cls and ModelConfig._get_transformers_backend_cls), and what that choice reads: whether the
target has experts (vLLM's get_num_experts, with its transformers config class's defaults, read from
transformers beside vllm/ in the launch's site-packages)."""

from __future__ import annotations

import ast

from patchkit.checks.parsed import names, python_tree
from patchkit.launch.drafter_sizes import whole
from patchkit.launch.engine import LaunchContext
from patchkit.launch.target_class import model_class

BACKEND_MODULE = "transformers"
BACKEND_TABLE = "_TRANSFORMERS_BACKEND_MODELS"
FALLBACK = "vLLM registers no class of its own for"
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")  # vLLM's get_num_experts
TRANSFORMERS_AUTO = "transformers/models/auto/configuration_auto.py"  # model_type -> config class (beside vllm/)
VLLM_CONFIGS = "vllm/transformers_utils/config.py"  # _CONFIG_REGISTRY: the model types vLLM reads with its own class


def backend_class(launch: LaunchContext, arch: str) -> tuple[str, str] | None:
    """(class, why) when vLLM builds the target as its Transformers modeling backend's class
    (ModelRegistry.resolve_model_cls): --model-impl transformers; auto (the default) when it registers
    none of config.json's architectures; an architecture it registers as the backend (SmolLM3).
    None: vLLM builds a class of its own."""
    tables = launch.registry()
    where = model_class(tables, arch)
    impl = launch.command.options.get("model-impl", "auto")
    if where is not None and where[0] == BACKEND_MODULE and impl != "terratorch":
        return where[1], f"vLLM registers {arch} as its Transformers backend's {where[1]}"
    if impl == "transformers":
        return backend_name(launch), "--model-impl transformers"
    if impl == "auto" and where is None and BACKEND_TABLE in tables:  # a vLLM with a backend to fall back to
        return backend_name(launch), f"{FALLBACK} {arch}"
    return None


def backend_name(launch: LaunchContext, moe: bool | None = None) -> str:
    """The backend class vLLM picks for a generating model (ModelConfig._get_transformers_backend_cls):
    MultiModal for a nested text config, MoE for a model with experts (`moe`: else as has_experts tells;
    untold, the plain class), of those the tree registers."""
    text = launch.target.text_config
    multimodal = "MultiModal" if text is not launch.target.config else ""
    moe = has_experts(launch) if moe is None else moe
    table = launch.registry().get(BACKEND_TABLE, {})
    named = [f"Transformers{multimodal}{'MoE' if moe else ''}ForCausalLM"]
    named.append("TransformersForMultimodalLM" if multimodal else "")
    return next((name for name in named if name in table), "TransformersForCausalLM")


def has_experts(launch: LaunchContext) -> bool | None:
    """vLLM's get_num_experts() > 0 on the target's text config: the first of EXPERT_KEYS the config has
    (a list: its first), from config.json or else its config class's defaults (a DeepSeek-V3 config.json
    without n_routed_experts has DeepseekV3Config's 256); none or 0, the MoE blocks of block_configs.
    None: the config class's defaults are not readable here (no transformers beside vllm/)."""
    text = launch.target.text_config
    defaults = {} if any(key in text for key in EXPERT_KEYS) else config_defaults(launch, text.get("model_type"))
    if defaults is None:
        return None
    given = {**defaults, **text}
    value = next((given[key] for key in EXPERT_KEYS if key in given), 0)
    value = value[0] if isinstance(value, list) and value else value
    if whole(value) and value > 0:
        return True
    blocks = text.get("block_configs")
    experts = [b.get("n_routed_experts") for b in blocks or [] if isinstance(b, dict) and b.get("block_type") == "moe"]
    return any(whole(n) and n > 0 for n in experts)


def config_defaults(launch: LaunchContext, model_type: object) -> dict[str, object] | None:
    """The __init__ defaults of the transformers config class vLLM reads `model_type` with (transformers'
    CONFIG_MAPPING_NAMES, read from the launch's site-packages beside vllm/), {} for a model_type it does
    not map; None where not readable, or where vLLM registers a config class of its own for it."""
    auto = python_tree(launch.read(TRANSFORMERS_AUTO))
    own = python_tree(launch.read(VLLM_CONFIGS))
    if auto is None or own is None or not isinstance(model_type, str):
        return None
    registered = {
        k.arg for n in ast.walk(own) if isinstance(n, ast.Call) and called(n.func, "LazyConfigDict") for k in n.keywords
    }
    if model_type in registered:
        return None
    pairs = dict(_string_pairs(auto, "CONFIG_MAPPING_NAMES"))
    if model_type not in pairs:
        return {}
    module = dict(_string_pairs(auto, "SPECIAL_MODEL_TYPE_TO_MODULE_NAME")).get(
        model_type, model_type.replace("-", "_")
    )
    source = python_tree(launch.read(f"transformers/models/{module}/configuration_{module}.py"))
    init = next(
        (
            m
            for c in ast.walk(source or ast.Module([], []))
            if isinstance(c, ast.ClassDef) and c.name == pairs[model_type]
            for m in c.body
            if isinstance(m, ast.FunctionDef) and m.name == "__init__"
        ),
        None,
    )
    if init is None:
        return None
    args = init.args.args[len(init.args.args) - len(init.args.defaults) :] + init.args.kwonlyargs
    values = [*init.args.defaults, *init.args.kw_defaults]
    return {arg.arg: value.value for arg, value in zip(args, values, strict=False) if isinstance(value, ast.Constant)}


def _string_pairs(tree: ast.Module, name: str) -> list[tuple[str, str]]:
    """The ("a", "b") pairs of the module-level `name = OrderedDict([...])` (transformers' auto mappings)."""
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        if name in names(*(node.targets if isinstance(node, ast.Assign) else [node.target])):
            pairs = [e.elts for e in ast.walk(node.value) if isinstance(e, ast.Tuple) and len(e.elts) == 2]
            return [
                (first.value, second.value)
                for first, second in pairs
                if isinstance(first, ast.Constant)
                and isinstance(second, ast.Constant)
                and isinstance(first.value, str)
                and isinstance(second.value, str)
            ]
    return []


def called(func: ast.expr, name: str) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == name) or (isinstance(func, ast.Name) and func.id == name)
