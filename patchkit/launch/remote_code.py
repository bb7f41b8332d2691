"""A model whose config.json has an auto_map AutoConfig and a model_type that neither the tree's vLLM
(_CONFIG_REGISTRY, vllm/transformers_utils/config.py) nor the launch's transformers (CONFIG_MAPPING_NAMES)
knows (moonshotai/Kimi-K2's kimi_k2): without --trust-remote-code vLLM's HFConfigParser hands it to
transformers' AutoConfig, which refuses to run the model's own configuration file, and vLLM refuses the
launch at start (the same in 0.11-0.34). The draft model is read with the target's trust_remote_code.
With --trust-remote-code transformers runs the module that AutoConfig entry names, from the model's
directory: a local directory without it is refused at start too.
Both tables are read from the tree's files; where they are not, "cannot judge"."""

from __future__ import annotations

import ast
import os
from typing import Any

from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch import observed
from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.models import ModelConfig, redirected

CHECK = "models"
VLLM_CONFIGS = "vllm/transformers_utils/config.py"
TRANSFORMERS_AUTO = "transformers/models/auto/configuration_auto.py"  # beside vllm/ in the launch's site-packages
REGISTRY_FIRST = b"if model_type in _CONFIG_REGISTRY:"  # vLLM's own class first, else AutoConfig
REFUSED = b"requires you to execute the configuration file"  # transformers' refusal, which vLLM re-raises
FIX = "add --trust-remote-code (vLLM then runs the configuration file config.json's auto_map names)"


def remote_code_findings(
    command: LaunchCommand, models: tuple[ModelConfig, ModelConfig | None], read: Any
) -> list[Finding]:
    """A failed models finding for each model vLLM refuses to read without --trust-remote-code."""
    if (command.options.get("config-format") or "auto") not in ("auto", "hf"):
        return []
    judge = _code_absent if command.trust_remote_code else _finding
    found = []
    for role, model in zip(("target", "drafter"), models, strict=True):
        finding = judge(role, model, command, read) if model is not None else None
        found += [finding] if finding is not None else []
    return found


def _unjudged_fix(model_type: str) -> str:
    """What to check where patchkit cannot tell whether vLLM reads the config without remote code: the
    flag is needed only where neither vLLM nor the launch's transformers knows the model_type."""
    return f"if neither vLLM nor the launch's transformers knows {escaped(model_type)}, {FIX}"


def _finding(role: str, model: ModelConfig, command: LaunchCommand, read: Any) -> Finding | None:
    auto = model.get("auto_map")
    if not isinstance(auto, dict) or "AutoConfig" not in auto or model.path.name != "config.json":
        return None  # transformers reads it with its own classes, or refuses it for another reason
    model_type = model.get("model_type")
    if model_type is None and model.get("speculators_config") is not None:
        model_type = "speculators"  # as HFConfigParser names it
    head = f"the {role} {escaped(model.name)} (model_type {escaped(repr(model_type))}, auto_map AutoConfig)"
    if role == "target" and "model_type" in command.hf_overrides:
        why = f"{head}: --hf-overrides sets model_type, which patchkit does not follow"
        return cannot_judge(CHECK, why, _unjudged_fix("the model_type --hf-overrides sets"))
    source = read(VLLM_CONFIGS) or b""
    registry = _keywords(source, "LazyConfigDict") if REGISTRY_FIRST in source and REFUSED in source else None
    known = _first_strings(read(TRANSFORMERS_AUTO), "CONFIG_MAPPING_NAMES")
    if not registry or not known:
        why = f"{head}: whether vLLM reads it without --trust-remote-code is not read from {VLLM_CONFIGS}"
        return cannot_judge(CHECK, f"{why} and {TRANSFORMERS_AUTO}", _unjudged_fix(f"model_type {model_type!r}"))
    if model_type in registry or model_type in known:
        return None
    said = (
        f"{head}: neither vLLM's config registry ({VLLM_CONFIGS}) nor the launch's transformers knows the"
        " model_type, and without --trust-remote-code transformers refuses to run the model's own"
        " configuration file: vLLM refuses the launch at start"
    )
    return Finding(CHECK, False, said, FIX)


def _code_absent(role: str, model: ModelConfig, command: LaunchCommand, read: Any) -> Finding | None:
    """A local model directory without the module auto_map's AutoConfig names ("module.Class"; one
    of another repository, "repo--module.Class", is fetched: not judged), for a model_type vLLM
    does not read with its own class."""
    auto = model.get("auto_map")
    named = auto.get("AutoConfig") if isinstance(auto, dict) else None
    # vLLM reads the target's config (and so runs its module) from --hf-config-path when given
    config_path = command.optional_text("hf-config-path") if role == "target" else None
    where = redirected(config_path, command.environ, command.cwd) if config_path is not None else model.name
    holder = "--hf-config-path's directory" if config_path is not None else "the model's directory"
    directory = os.path.join(command.working_directory(), where)
    if not isinstance(named, str) or "--" in named or named.count(".") != 1 or not observed.isdir(directory):
        return None
    module = f"{named.split('.')[0]}.py"
    if observed.isfile(os.path.join(directory, module)) or model.path.name != "config.json":
        return None
    head = f"the {role} {escaped(model.name)}: with --trust-remote-code vLLM runs {escaped(module)}, which"
    said = f"{head} config.json's auto_map names, and {holder} holds none"
    source = read(VLLM_CONFIGS) or b""
    registry = _keywords(source, "LazyConfigDict") if REGISTRY_FIRST in source else None
    fix = f"put {module} into {escaped(where)} (it comes with the model's files on the hub)"
    if not registry:
        return cannot_judge(CHECK, f"{said}; whether vLLM reads it so is not read from {VLLM_CONFIGS}", fix)
    if model.get("model_type") in registry:
        return None  # vLLM reads it with its own class
    return Finding(CHECK, False, f"{said}: vLLM refuses the launch at start", fix)


def _keywords(source: bytes, call: str) -> set[str]:
    """The keyword names of the module's `call(...)` calls (vLLM's LazyConfigDict(kimi_k25=..., ...))."""
    tree = python_tree(source)
    return {
        k.arg
        for node in ast.walk(tree or ast.Module([], []))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == call
        for k in node.keywords
        if k.arg is not None
    }


def _first_strings(source: bytes | None, name: str) -> set[str]:
    """The first strings of the ("a", "b") pairs assigned to module-level `name` (transformers' mappings)."""
    tree = python_tree(source)
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return {
                e.elts[0].value
                for e in ast.walk(node.value)
                if isinstance(e, ast.Tuple) and len(e.elts) == 2 and isinstance(e.elts[0], ast.Constant)
                and isinstance(e.elts[0].value, str)
            }  # fmt: skip
    return set()
