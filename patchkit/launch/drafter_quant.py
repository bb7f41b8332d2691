"""The quantization the tree builds an EAGLE-3 drafter's decoder layer with. vLLM 0.11.0's
llama_eagle3.py (and llama.py's LlamaDecoderLayer under it) take vllm_config.quant_config, the
target's: under a target quantized by its checkpoint (fp8, ...) an unquantized drafter's layers are
built for that checkpoint format, and its weights are loaded into them without the scales the format
holds (0.11.1 on builds the drafter with its own: get_draft_quant_config). Under --quantization
alone the drafter's layers are quantized at load as the target's: not judged. Read from the tree."""

from __future__ import annotations

import os
from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.drafter_weights import drafter_quantization, quantization
from patchkit.launch.model_files import EAGLE3_DRAFTER, LLAMA
from patchkit.launch.weights import target_directory

TARGETS_TAKEN = b"quant_config = vllm_config.quant_config"  # the decoder layer's, in both files (0.11.0)
OWN_TAKEN = b"get_draft_quant_config"  # 0.11.1 on: the drafter's own quantization
OWN_FIX = "use vLLM 0.11.1 or later (it builds the drafter with its own quantization), or a drafter quantized as the target is"


def target_quantization(launch: Any) -> tuple[bool, str, str | None] | None:
    """(fails, why, fix) where the tree builds the unquantized drafter's layers with the target's
    quantization: fails for a target quantized by its checkpoint; not judged (False) for one quantized
    by --quantization alone; None where the tree builds it with its own, or the drafter is quantized."""
    drafter = launch.read(EAGLE3_DRAFTER) or b""
    if TARGETS_TAKEN not in drafter or OWN_TAKEN in drafter or TARGETS_TAKEN not in (launch.read(LLAMA) or b""):
        return None
    command = launch.command
    if drafter_quantization(command, launch.drafter.config) is not None:
        return None
    found = target_directory(command)
    directory = os.path.join(command.working_directory(), found[1]) if found else None
    method = quantization(launch.target.config, directory)
    taken = f"the tree's {EAGLE3_DRAFTER} builds the drafter's layers with the target's quantization"
    if method is not None:
        said = f"{taken} ({escaped(method)}, from its checkpoint), and the drafter's unquantized weights are loaded into them without their scales"
        return True, said, OWN_FIX
    option = command.optional_text("quantization")
    if option is not None:
        return (
            False,
            f"{taken} (--quantization {escaped(option)}): the drafter's layers quantized so are not judged",
            None,
        )
    return None
