"""ModelConfig's start-up refusal of a quantization that is not the checkpoint's own
(_verify_quantization): the target's --quantization, or --speculative-config's "quantization" (the
draft ModelConfig takes it), against the quant_method of the model's quantization_config. vLLM first
lets its override chain (override_quantization_method: gptq -> gptq_marlin, awq -> awq_marlin, ...)
take the checkpoint; a checkpoint method any override's module compares with is "cannot judge".
Also the speculative "quantization": "" where the tree's field takes only QuantizationMethods."""

from __future__ import annotations

import ast
import re
from typing import Any

from patchkit.base import hints
from patchkit.base.errors import escaped
from patchkit.checks.parsed import python_tree
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.spec_limits import MODEL_CONFIG

QUANTIZATION = "vllm/model_executor/layers/quantization"
SPEC_FILE = "vllm/config/speculative.py"
MISMATCH = b"does not match the quantization"  # the raise, 0.11-0.34
OVERRIDE = b"def override_quantization_method("
# SpeculativeConfig's field where it takes no other text (0.11-0.17; 0.22 on adds `| str`)
METHODS_ONLY = re.compile(rb"\n    quantization: (Optional\[)?me_quant\.QuantizationMethods( \| None)?\]? = None\n")
CHECKED = re.compile(r"method|algo", re.IGNORECASE)  # the names an override compares a checkpoint's method by


def quantization_findings(check: str, launch: LaunchContext) -> list[Finding]:
    """A failing finding for each quantization the launch names that vLLM refuses at start as not the
    checkpoint's own; cannot judge where the tree's override chain may take it."""
    found = []
    spec = launch.command.speculative_config or {}
    named = spec.get("quantization")
    if named == "" and METHODS_ONLY.search(launch.read(SPEC_FILE) or b""):
        why = '--speculative-config\'s "quantization" "" is not one of vLLM\'s quantization methods: it refuses it at start'
        found.append(Finding(check, False, why, 'drop "quantization" from --speculative-config, or name a method'))
    if MISMATCH not in (launch.read(MODEL_CONFIG) or b""):
        return found
    given = launch.command.optional_text("quantization")
    if given is not None:
        said, drop = f"--quantization {given}", "drop --quantization, or give --quantization {}"
        found += _held(check, launch, "the target", launch.target.config, given, (said, drop))
    if isinstance(named, str) and named and launch.drafter is not None:
        said = f'--speculative-config\'s "quantization" {named}'
        drop = 'drop "quantization" from --speculative-config, or write "quantization": "{}"'
        found += _held(check, launch, "the drafter", launch.drafter.config, named, (said, drop))
    return found


def _held(
    check: str, launch: LaunchContext, whose: str, config: dict[str, Any], given: str, words: tuple[str, str]
) -> list[Finding]:
    """`words`: the quantization as the launch says it, and the fix's text (a "{}" for the checkpoint's)."""
    said, drop = words
    own = checkpoint_method(config)
    if own is None or own == given:
        return []
    taken = _overridden(launch)
    if own in taken or "*" in taken or launch.general_plugins():
        why = f"whether vLLM takes {escaped(said)} for {whose}'s {escaped(own)} checkpoint: an override of the tree (override_quantization_method) may take it"
        fix = f"vLLM's own validation judges it: {hints.command('preflight', '--', *launch.command.argv)}"
        return [cannot_judge(check, why, fix)]
    why = (
        f"vLLM refuses {escaped(said)} at start: {whose}'s config.json says quant_method {escaped(own)}, "
        "and no override of the tree takes that checkpoint"
    )
    return [Finding(check, False, why, drop.format(escaped(own)))]


def checkpoint_method(config: dict[str, Any]) -> str | None:
    """The quant_method vLLM reads from a config's quantization_config (else compression_config), of the
    config, else its text_config, lowercased as vLLM does; None: none, or one it rewrites (ModelOpt's)."""
    text = config.get("text_config")
    for held in (config, text if isinstance(text, dict) else {}):
        quant = held.get("quantization_config", held.get("compression_config"))
        if quant is None:
            continue
        producer = quant.get("producer") if isinstance(quant, dict) else None
        method = quant.get("quant_method") if isinstance(quant, dict) else None
        if not isinstance(method, str) or not method or isinstance(producer, dict):
            return None
        return method.lower().replace("compressed_tensors", "compressed-tensors")
    return None


def _overridden(launch: LaunchContext) -> set[str]:
    """Every text (lowercased) a module defining override_quantization_method compares with a name of a
    method or an algorithm: the checkpoint methods its override chain may take. An override module that
    compares none: every method ("*", never a checkpoint's)."""
    source = python_tree(launch.read(f"{QUANTIZATION}/__init__.py"))
    taken: set[str] = set()
    for node in ast.walk(source or ast.Module([], [])):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        where = node.module.replace(".", "/")
        data = launch.read(f"{QUANTIZATION}/{where}.py" if node.level else f"{where}.py") or b""
        overrides = _overrides(python_tree(data)) if OVERRIDE in data else []
        for override in overrides:
            taken |= _compared(override) or {"*"}
    return taken


def _overrides(tree: ast.Module | None) -> list[list[ast.FunctionDef]]:
    """Each override_quantization_method of a module that may return a method (base_config's returns
    None only), with the module's functions it calls (is_gptq_marlin_compatible, ...)."""
    functions = [n for n in ast.walk(tree or ast.Module([], [])) if isinstance(n, ast.FunctionDef)]
    found = []
    for function in (f for f in functions if f.name == "override_quantization_method"):
        returned = [n.value for n in ast.walk(function) if isinstance(n, ast.Return)]
        if all(value is None or (isinstance(value, ast.Constant) and value.value is None) for value in returned):
            continue
        called = {
            n.func.attr for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
        called |= {n.func.id for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        found.append([function, *(f for f in functions if f.name in called)])
    return found


def _compared(functions: list[ast.FunctionDef]) -> set[str]:
    texts: set[str] = set()
    for node in (n for function in functions for n in ast.walk(function)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(_names_method(side) for side in sides):
            continue
        for side in sides:
            items = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
            texts |= {i.value.lower() for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return texts


def _names_method(node: ast.AST) -> bool:
    """A plain name of a method or algorithm (quant_method, algo), or a .get("quant_method") of a config."""
    if isinstance(node, ast.Name):
        return bool(CHECKED.search(node.id))
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        return isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args[0].value == "quant_method"
    return False
