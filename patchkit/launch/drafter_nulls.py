"""A Llama-layer drafter's config.json keys given as JSON null. transformers and vLLM's EAGLEConfig keep
an explicit null as None, not the config class's default, and llama.py / llama_eagle3.py then compute
with it (None * 3, RMSNorm(eps=None), get_rope(max_position=None)): the drafter fails when vLLM builds
or first runs it, after the target's load. Each key is judged only where the tree's files show vLLM
reading it that way."""

from __future__ import annotations

import re
from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.model_files import EAGLE3_DRAFTER, LLAMA

# key -> (the file vLLM reads it in, the read that takes a None on to a failure)
READS = {
    "target_hidden_size": (EAGLE3_DRAFTER, rb"target_hidden_size \*"),
    "max_position_embeddings": (LLAMA, rb"max_position=self\.max_position_embeddings"),
    "intermediate_size": (LLAMA, rb"intermediate_size=config\.intermediate_size"),
    "rms_norm_eps": (LLAMA, rb"eps=config\.rms_norm_eps"),
    "hidden_act": (LLAMA, rb"hidden_act=config\.hidden_act"),
}


def null_refused(launch: Any) -> tuple[str, str] | None:
    """(what fails, fix) for the first key of READS the drafter's config.json gives as null where the
    tree shows vLLM computing with it; else None (absent keys take the class's default)."""
    config = launch.drafter.config
    for key, (path, read) in READS.items():
        if key not in config or config[key] is not None:
            continue
        if re.search(read, launch.read(path) or b"") is None:
            continue
        fix = f"set {key} in the drafter's config.json to the value it was trained with"
        if key == "target_hidden_size":
            fix = "set target_hidden_size in the drafter's config.json to the target's hidden_size"
        return f"its config.json gives {escaped(key)} as null, which vLLM keeps as None", fix
    return None
