"""The sizes an EAGLE-3 drafter's config.json gives, read as vLLM reads them, and the drafter-vocabulary
rule: vLLM's drafter (Eagle3LlamaForCausalLM, llama_eagle3.py) embeds the target's token ids in a table
of its own vocab_size and scatters its draft_vocab_size logits (by d2t) into a row of vocab_size ids."""

from __future__ import annotations

from typing import Any, TypeGuard

from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding

DRAFTER_FIX = "use an EAGLE-3 drafter trained for this target model"
SIZE_FIX = "give the config.json a positive whole-number size: the check cannot judge without one"


def size(config: dict[str, Any], *keys: str) -> int | None:
    """The first of `keys` the config gives (vLLM's order), when it is a positive whole number; else
    None: a size that is absent or of another kind cannot be compared, so no check passes on it."""
    value = next((config[key] for key in keys if config.get(key) is not None), None)
    return value if whole(value) and value > 0 else None


def whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def shown(found: int | None) -> str:
    return "none (absent or not a positive whole number)" if found is None else str(found)


def vocabulary(launch: LaunchContext, drafter: dict[str, Any]) -> Finding:
    """vocab_size must be the target's (a DeepSeek drafter's 129280 is not Kimi-K2.5's 163840), and
    draft_vocab_size (default vocab_size) no larger. `drafter`: the drafter's config.json."""
    own = size(drafter, "vocab_size")
    draft = size(drafter, "draft_vocab_size", "vocab_size")
    target = size(launch.target.text_config, "vocab_size")
    if own is None or draft is None or target is None:
        message = (
            f"cannot judge: drafter vocab_size {shown(own)}, draft_vocab_size {shown(draft)}, "
            f"target vocab_size {shown(target)}"
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
