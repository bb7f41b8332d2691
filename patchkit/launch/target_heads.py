"""The target's attention heads against the launch's -tp: vLLM's ModelConfig.verify_with_parallel_config
(every release 0.11-0.34) raises ValueError at start, before any load, when -tp does not divide the
text config's num_attention_heads. A drafter's heads rule says nothing then: vLLM never gets to it."""

from __future__ import annotations

from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import Finding
from patchkit.launch.models import ModelConfig

CHECK = "command"


def target_heads(target: ModelConfig) -> int | None:
    """The target's attention heads as vLLM reads them (hf_text_config's num_attention_heads); None
    where config.json does not say (its config class's default, not read) or says something odd."""
    heads = target.text_config.get("num_attention_heads")
    return heads if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 else None


def tp_refused(target: ModelConfig | None, tp: int) -> bool:
    """Whether vLLM refuses the target at start for -tp `tp` (its heads known and not divided)."""
    heads = target_heads(target) if target is not None else None
    return heads is not None and tp > 1 and heads % tp != 0


def target_heads_findings(command: LaunchCommand, target: ModelConfig) -> list[Finding]:
    """A failed `command` finding (in a list; else none) for a -tp the target's heads refuse."""
    tp = command.tensor_parallel_size
    if not tp_refused(target, tp):
        return []
    heads = target_heads(target)
    said = (
        f"-tp {tp} does not divide the target's {heads} attention heads: vLLM refuses the launch at start"
        " (ModelConfig.verify_with_parallel_config), before any load"
    )
    return [Finding(CHECK, False, said, f"give a -tp that divides {heads}")]
