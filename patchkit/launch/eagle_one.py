"""An EAGLE-3 head that vLLM runs under method "eagle" (EAGLE-1): the method given so, or the one its
SpeculativeConfig takes from "eagle-" in the drafter's name, which it tests before "eagle3"
("EAGLE-3-head" is EAGLE-1 to it). Its EAGLEConfig then names the drafter's class Eagle<architecture>
(kept when it starts with Eagle): an EAGLE-3 head's LlamaForCausalLMEagle3 becomes
EagleLlamaForCausalLMEagle3, which no registry holds; an Eagle3LlamaForCausalLM is built, but the
EAGLE-1 proposer feeds it the target's last hidden state, not the aux hidden states it was trained
on. Both are read from the tree's files; where they differ, "cannot judge"."""

from __future__ import annotations

from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.findings import Finding, cannot_judge

EAGLE_CONFIG = "vllm/transformers_utils/configs/eagle.py"
EAGLE1_NAMED = b'f"Eagle{arch}" if not arch.startswith("Eagle")'  # EAGLEConfig's rename under eagle (0.11-0.17)
PROPOSER = "vllm/v1/spec_decode/eagle.py"
AUX_ONLY_UNDER_EAGLE3 = b'if self.method == "eagle3":'  # the proposer combines aux hidden states only then
CHECK = "drafter-architecture"
FIX = 'write "method": "eagle3" in --speculative-config'


def eagle1_findings(launch: Any) -> list[Finding]:
    """A failed drafter-architecture finding for an EAGLE-3 head (an architecture named Eagle3) that
    vLLM runs under method eagle; none for other drafters or methods."""
    drafter = launch.drafter
    if drafter is None or launch.command.speculative_method != "eagle":
        return []
    archs = [a for a in drafter.architectures if isinstance(a, str)]
    if not any(a.startswith("Eagle3") or a.endswith("Eagle3") for a in archs):
        return []  # an EAGLE-1 drafter, or one whose kind its config does not say
    head = f"drafter '{escaped(drafter.name)}' is an EAGLE-3 head, but vLLM runs it as EAGLE-1 ({_why(launch)})"
    if drafter.config.get("model_type") == "eagle":
        built = archs  # a config of vLLM's own EAGLEConfig is not renamed
    elif EAGLE1_NAMED in (launch.read(EAGLE_CONFIG) or b""):
        built = [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    else:
        return [cannot_judge(CHECK, f"{head}: the tree's {EAGLE_CONFIG} is not read", FIX)]
    tables = launch.registry().values()
    registered = [name for name in built if any(name in table for table in tables)]
    if not registered:
        said = f"{head}: it names the class {', '.join(built)}, which it does not register, and fails"
        return [Finding(CHECK, False, said, FIX)]
    if AUX_ONLY_UNDER_EAGLE3 not in (launch.read(PROPOSER) or b""):
        return [cannot_judge(CHECK, f"{head}: the tree's {PROPOSER} is not read", FIX)]
    said = f"{head}: it builds {registered[0]} and feeds it the target's last hidden state, not the aux hidden states it was trained on"
    return [Finding(CHECK, False, said, FIX)]


def _why(launch: Any) -> str:
    given = (launch.command.speculative_config or {}).get("method")
    if given == "eagle":
        return 'method "eagle" given'
    return f'"eagle-" in its name {escaped(launch.command.draft_model_name(str((launch.command.speculative_config or {}).get("model"))))}'
