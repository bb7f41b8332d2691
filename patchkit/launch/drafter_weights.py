"""What of a drafter's (or an MTP checkpoint's) weights preflight cannot judge, and why: vLLM's own
reading of whether a model is quantized (its quantized tensors are packed, with scales: other names
and shapes than the modules an unquantized config builds), and the drafters whose weights' names and
shapes are held to no rule (torch files, another drafter class, a tree whose drafter layout is not the
one read). Each is a "cannot judge" with its reason, never a silent pass."""

from __future__ import annotations

import os
from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch import observed
from patchkit.launch.command import LaunchCommand
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.model_files import LLAMA_DRAFTER
from patchkit.launch.weights import drafter_directory

QUANT_FILE = "hf_quant_config.json"  # ModelOpt 0.29 and before: vLLM's get_config reads it as quantization_config
QUANT_KEYS = ("quantization_config", "compression_config")  # the second: compressed-tensors' older key
CHECK = "drafter-architecture"
CHECK_BY_HAND = "check by hand that the drafter's config.json is the one saved with its weights"


def quantization(config: dict[str, Any], directory: str | None) -> str | None:
    """The quantization vLLM's ModelConfig finds for a model (its quant_method, else the key that
    says it), as 0.12-0.34 read it: quantization_config, else compression_config, of the config, else
    of its text_config; else ModelOpt's hf_quant_config.json beside config.json. None: unquantized."""
    text = config.get("text_config")
    for held in (config, text if isinstance(text, dict) else {}):
        for key in QUANT_KEYS:
            given = held.get(key)
            if given is not None:
                method = given.get("quant_method") if isinstance(given, dict) else None
                return method if isinstance(method, str) and method else key
    if directory is not None and observed.isfile(os.path.join(directory, QUANT_FILE)):  # kept findings: recorded
        return f"ModelOpt's {QUANT_FILE}"
    return None


def drafter_quantization(command: LaunchCommand, config: dict[str, Any]) -> str | None:
    """The drafter's quantization as vLLM's draft ModelConfig takes it: the speculative config's own
    "quantization", else what its files say (quantization)."""
    given = (command.speculative_config or {}).get("quantization")
    if isinstance(given, str) and given:
        return given
    found = drafter_directory(command)
    return quantization(config, os.path.join(command.working_directory(), found[1]) if found else None)


def weights_unjudged(
    launch: LaunchContext, module: str, layout: str | None, tensors: dict[str, Any] | str | None
) -> Finding | None:
    """The cannot-judge finding for an EAGLE-3 drafter whose weights' names and shapes no rule holds:
    `module` is the drafter class's module in the tree's registry, `layout` why the tree's
    llama_eagle3.py is not read (None: read), `tensors` its weights read (or why not: drafter_tensors');
    None when they are judged, or there is nothing to read."""
    drafter = launch.drafter
    if drafter is None:
        return None
    name = escaped(drafter.name)
    if module != LLAMA_DRAFTER:
        why = f"vLLM builds it from {escaped(module)}.py, whose rules patchkit does not read (weights, RoPE, -tp)"
        return cannot_judge(CHECK, f"drafter '{name}': {why}", CHECK_BY_HAND)
    quantized = drafter_quantization(launch.command, drafter.config) if layout is None else None
    if quantized is not None:
        said = f"its weights are quantized ({escaped(quantized)}): their names and shapes are not judged"
        return cannot_judge(CHECK, f"drafter '{name}': {said}", CHECK_BY_HAND)
    unread = layout if layout is not None else tensors if isinstance(tensors, str) else None
    if unread is None:
        return None
    return cannot_judge(CHECK, f"drafter '{name}': its weights are not judged: {unread}", CHECK_BY_HAND)
