"""An EAGLE-3 drafter whose own hidden_size is not the target's, given the target's embedding: vLLM's
EagleProposer (0.13-0.17) shares the target's embed_tokens with a drafter whose weights hold none (its
load_weights marks has_own_embed_tokens only for a tensor named so; a dummy load reads none), on a single
pipeline stage; llama_eagle3.py's forward then asserts the embedding's width is the drafter's hidden
states' (its fc's output, hidden_size wide) at the drafter's first run, after the target's load. With
-pp above 1 vLLM loads the drafter's embedding apart: not judged. Read where the tree shows both rules."""

from __future__ import annotations

from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch import drafter_load
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.method import settled_method
from patchkit.launch.model_files import EAGLE3_DRAFTER, EAGLE_PROPOSER
from patchkit.launch.parallel_drafting import uses_aux_hidden_states

CHECK = "drafter-hidden-size"
WIDTHS_ASSERTED = b"assert hidden_states.shape[-1] == input_embeds.shape[-1]"
SHARED_UNLESS_OWN = b"has_own_embed_tokens"  # the proposer's rule: share unless the weights held embed_tokens
OWN = "embed_tokens"
FIX = "use a drafter whose weights hold its own embed_tokens, or one of the target's hidden size"


def embedding_shared(launch: Any, target_hidden: int, tensors: dict[str, Any] | str | None) -> Finding | None:
    """The drafter-hidden-size finding when the drafter's own hidden_size is not `target_hidden` (its
    target_hidden_size is: the fc takes the target's states) and vLLM may give it the target's embedding;
    None when the sizes agree, or the drafter takes no aux hidden states. `tensors`: its weights as
    drafter_tensors reads them (or why not)."""
    config = launch.drafter.config
    hidden = config.get("hidden_size")
    if type(hidden) is not int or hidden <= 0 or hidden == target_hidden or not uses_aux_hidden_states(config):
        return None
    said = f"the drafter's own hidden_size {hidden} is not the target's {target_hidden}"
    rules = (launch.read(EAGLE3_DRAFTER) or b"", launch.read(EAGLE_PROPOSER) or b"")
    if WIDTHS_ASSERTED not in rules[0] or SHARED_UNLESS_OWN not in rules[1]:
        why = f"{said}, and whether vLLM gives it the target's embedding is not read from this tree"
        return cannot_judge(CHECK, why, FIX)
    stages = launch.command.options.get("pipeline-parallel-size", 1)
    if str(stages).strip() != "1":
        why = f"{said}; with -pp {escaped(str(stages))} vLLM loads its embedding apart from the target's"
        return cannot_judge(CHECK, f"{why}, which patchkit does not judge", FIX)
    method = settled_method(launch.command, launch.drafter, launch.read)
    load_format = drafter_load.drafter_load_format(launch.command, launch.read, method)
    if load_format == "dummy":
        held = f"{drafter_load.said(launch.command, launch.read, method)} loads none of its weights"
    elif not isinstance(tensors, dict):
        why = f"{said}, and whether its weights hold {OWN} is not read: {tensors or 'vLLM downloads them'}"
        return cannot_judge(CHECK, why, FIX)
    elif any(OWN in name and "t2d" not in name for name in tensors):
        return None
    else:
        held = f"its weights hold no {OWN}"
    message = (
        f"{said} and {held}: vLLM gives it the target's embedding ({target_hidden} wide), and llama_eagle3.py"
        f" asserts that width is its hidden states' ({hidden}) at its first run, after the target's load"
    )
    return Finding(CHECK, False, message, FIX)
