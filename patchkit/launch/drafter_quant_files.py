"""The drafter's own quantization named by --speculative-config's "quantization" (vLLM's
get_draft_quant_config, read only when it builds the drafter, after the target's load): with no
quantization_config in the drafter's config.json, vLLM's get_quant_config looks in its directory for
exactly one *.json ending in a name the method's class gives (get_config_filenames), read from the tree."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch import observed
from patchkit.launch.drafter_weights import quantization
from patchkit.launch.engine import LaunchContext, Reader
from patchkit.launch.findings import UNREAD_FIX, Finding
from patchkit.launch.method import settled_method
from patchkit.launch.weights import drafter_directory

QUANTIZATION = "vllm/model_executor/layers/quantization"  # where vLLM maps methods to config classes
WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"  # get_quant_config
OVERRIDES_READ = "hf_overrides.get("  # the draft config's hf_overrides is a function: AttributeError unguarded
OVERRIDES_GUARDS = ("isinstance(hf_overrides", "callable(hf_overrides")  # 0.22 on
DRAFT_MODEL_CHECK = "speculative-config"  # no drafter-architecture finding for a draft_model drafter


def quant_config_unfound(launch: LaunchContext) -> tuple[str, str] | None:
    """The speculative config's "quantization" is the drafter's own (get_draft_quant_config, read only when
    vLLM builds the drafter): with no quantization_config in its config.json, vLLM's get_quant_config looks
    for exactly one *.json in its directory ending in a name the method's class gives, else raises."""
    method = (launch.command.speculative_config or {}).get("quantization")
    if launch.drafter is None:
        return None
    config = launch.drafter.config
    text = config.get("text_config")
    held = [config, text if isinstance(text, dict) else {}]
    if not isinstance(method, str) or not method or any(c.get("quantization_config") is not None for c in held):
        return None  # "": quant_match's (pydantic refuses it at start where the field takes only methods)
    local = Path(launch.drafter.name)
    if method != "gguf" and config.get("compression_config") is None and overrides_unguarded(launch.read):
        where = drafter_directory(launch.command)
        directory = os.path.join(launch.command.working_directory(), where[1]) if where else None
        if quantization(config, directory) is None:
            why = (
                f"--speculative-config names quantization '{escaped(method)}' and the drafter's config.json has no "
                "quantization_config: the tree's get_quant_config then reads the draft config's hf_overrides, "
                "a function (AttributeError)"
            )
            return why, UNREAD_FIX
    names = _quant_config_names(launch, method) if config.get("compression_config") is None else None
    if not names or not observed.isdir(local):
        return None  # a method needing no file, one not judged here, or a hub drafter (vLLM downloads its *.json)
    found = [f for f in observed.glob(os.path.join(local, "*.json")) if any(f.endswith(name) for name in names)]
    if len(found) == 1:
        return None
    if found:
        why = f"its directory holds {len(found)} quantization files for {escaped(method)} (vLLM takes exactly one)"
        return why, f"keep one of {', '.join(escaped(Path(f).name) for f in found)} in the drafter's directory"
    why = (
        f"--speculative-config names quantization '{escaped(method)}' and the drafter has no config for it "
        f"(no quantization_config in its config.json, no {' or '.join(names)})"
    )
    return why, 'drop "quantization" from --speculative-config: the drafter is not quantized'


def draft_model_unread(context: LaunchContext) -> list[Finding]:
    """Method draft_model: DraftModelProposer.load_model builds the drafter's VllmConfig with its own
    quantization (create_vllm_config_for_draft_model, after the target's load), as get_quant_config
    reads it: what quant_config_unfound finds fails there too."""
    if settled_method(context.command, context.drafter, context.read) != "draft_model":
        return []
    found = quant_config_unfound(context)
    if found is None or context.drafter is None:
        return []
    said = f"the draft_model drafter {escaped(context.drafter.name)}: {found[0]}: vLLM fails building it, after the target's load"
    return [Finding(DRAFT_MODEL_CHECK, False, said, found[1])]


def overrides_unguarded(read: Reader) -> bool:
    """Whether the tree's get_quant_config reads hf_overrides.get( with no guard for a non-dict (0.12-0.17):
    the draft ModelConfig's hf_overrides is SpeculativeConfig.hf_config_override, a function."""
    source = python_tree(read(WEIGHT_UTILS))
    found = next(
        (
            node
            for node in ast.walk(source or ast.Module([], []))
            if isinstance(node, ast.FunctionDef) and node.name == "get_quant_config"
        ),
        None,
    )
    text = ast.unparse(found) if found is not None else ""
    return OVERRIDES_READ in text and not any(guard in text for guard in OVERRIDES_GUARDS)


def _quant_config_names(launch: LaunchContext, method: str) -> list[str] | None:
    """The file names `method`'s class gives in get_config_filenames (quantization/__init__.py maps the
    method to the class, imported from its module); None when the tree does not say them plainly."""
    source = python_tree(launch.read(f"{QUANTIZATION}/__init__.py"))
    cls = next(
        (
            value.id
            for node in ast.walk(source or ast.Module([], []))
            if isinstance(node, ast.Dict)
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and key.value == method and isinstance(value, ast.Name)
        ),
        None,
    )
    imports = [node for node in ast.walk(source or ast.Module([], [])) if isinstance(node, ast.ImportFrom)]
    module = next((node for node in imports if any(alias.name == cls for alias in node.names)), None)
    if cls is None or module is None or not module.module:
        return None
    where = module.module.replace(".", "/")
    defining = python_tree(launch.read(f"{QUANTIZATION}/{where}.py" if module.level else f"{where}.py"))
    for node in ast.walk(defining or ast.Module([], [])):
        if isinstance(node, ast.FunctionDef) and node.name == "get_config_filenames":
            returned = [n.value for n in ast.walk(node) if isinstance(n, ast.Return)]
            names = returned[0] if len(returned) == 1 else None
            said = [n.value for n in names.elts if isinstance(n, ast.Constant)] if isinstance(names, ast.List) else []
            if isinstance(names, ast.List) and len(said) == len(names.elts):
                return [str(value) for value in said]
    return None
