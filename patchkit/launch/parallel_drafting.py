"""Parallel drafting (the speculative config's parallel_drafting, 0.16 on): vLLM drafts every token at
once, filling the slots not yet drafted with a learned mask. An EAGLE-3 drafter of llama_eagle3.py takes
that mask from its weights' mask_hidden tensor, which its load_weights requires (a ValueError after the
target's load; a tensor of another size fails its copy there too). Each rule is judged only where the
tree's files show vLLM reading it so."""

from __future__ import annotations

import math
from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.lax import lax_true
from patchkit.launch.model_files import EAGLE3_DRAFTER

MASK = "mask_hidden"
MASK_REQUIRED = b"mask_hidden not found in weights"  # llama_eagle3.py's load_weights raises so (0.16-0.17)
# the buffer it copies the tensor into: 1 x (3 if it takes aux hidden states, else 1) x hidden_size
MASK_SIZED = b"(3 if self.model.use_aux_hidden_state else 1)"
MASK_FIX = "drop parallel_drafting from --speculative-config, or use a drafter trained for parallel drafting"


def parallel_drafting(command: Any) -> bool:
    """Whether the speculative config asks for parallel drafting (pydantic's lax bool of its value)."""
    return lax_true((command.speculative_config or {}).get("parallel_drafting"))


def mask_hidden_missing(launch: Any, tensors: dict[str, Any] | str | None) -> tuple[str, str] | None:
    """(what fails, fix) when a launch with parallel drafting loads an EAGLE-3 drafter whose weights
    (`tensors`: name -> (file, shape), as drafter_tensors reads them) hold no mask_hidden, or one whose
    size is not the buffer's, where the tree's llama_eagle3.py requires it; None else (weights not
    read: weights_unjudged says so)."""
    if not isinstance(tensors, dict) or not parallel_drafting(launch.command):
        return None
    source = launch.read(EAGLE3_DRAFTER) or b""
    if MASK_REQUIRED not in source:
        return None
    # its load_weights skips t2d and renames d2t before it looks for the mask
    masks = sorted(n for n in tensors if MASK in n and "t2d" not in n and "d2t" not in n)
    if not masks:
        why = f"parallel_drafting needs a {MASK} tensor in its weights, which they do not hold (llama_eagle3.py)"
        return why, MASK_FIX
    hidden = launch.drafter.config.get("hidden_size")
    if MASK_SIZED not in source or type(hidden) is not int or hidden <= 0:
        return None
    wanted = (3 if uses_aux_hidden_states(launch.drafter.config) else 1) * hidden
    for name in masks:
        file, shape = tensors[name]
        if math.prod(shape) != wanted:
            why = f"its weights' {escaped(name)} is {shape} ({escaped(file)}), where parallel_drafting takes {wanted}"
            return why + " values (llama_eagle3.py)", "give the drafter the config.json saved with its weights"
    return None


def uses_aux_hidden_states(config: dict[str, Any]) -> bool:
    """llama_eagle3.py's use_aux_hidden_state (vLLM's EagleProposer reads the same): eagle_config's (default
    on) when eagle_config is a dict; its fc then makes the hidden states hidden_size wide."""
    nested = config.get("eagle_config")
    return bool(nested.get("use_aux_hidden_state", True)) if isinstance(nested, dict) else True
