"""A separate mtp checkpoint ("model" given under method mtp) against the target's tensor-parallel
size: vLLM's proposer builds it in the target's tensor-parallel group whatever draft_tensor_parallel_size
says (only draft_model's proposer has a group of its own). SpeculativeConfig verifies the draft
ModelConfig with the draft size at start (verify_with_parallel_config, 0.11-0.34: it must divide its
attention heads): under -tp it refuses there; under draft_tensor_parallel_size 1 the split fails
building it, after the target's load, as its KV heads' assert does (not for MLA)."""

from __future__ import annotations

from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.drafter_heads import heads_unsplit, when_refused
from patchkit.launch.findings import Finding
from patchkit.launch.target_heads import tp_refused

CHECK = "drafter-architecture"


def mtp_heads_findings(launch: Any) -> list[Finding]:
    """A failed finding (in a list) for a separate mtp checkpoint whose heads the draft tensor-parallel
    size does not split; none where it does, or the target's heads already refuse -tp at start."""
    command, drafter = launch.command, launch.drafter
    tp = command.tensor_parallel_size
    if drafter is None or tp_refused(launch.target, tp):
        return []
    config = drafter.text_config
    found = heads_unsplit(config, tp, command.uses_mla(config))
    if found is None:
        return []
    when = when_refused(found, command.speculative_config or {}, launch.read)
    said = f"drafter '{escaped(drafter.name)}' (method mtp, a checkpoint of its own): {found[0]}: {when}"
    return [Finding(CHECK, False, said, found[1])]
