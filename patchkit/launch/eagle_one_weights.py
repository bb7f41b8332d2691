"""An EAGLE-1 head's weights against its config.json, which no static rule holds: vLLM's EAGLE-1 classes
(llama_eagle.py, deepseek_eagle.py, ...) map and shard the checkpoint's tensors each its own way, and
load them after the target's load. Said "cannot judge", never a silent pass; where preflight imports
vLLM, its drafter-build builds the head and loads meta tensors of its checkpoint (the verdict)."""

from __future__ import annotations

from typing import Any

from patchkit.base.errors import escaped
from patchkit.launch.findings import Finding, cannot_judge

CHECK = "drafter-architecture"
GIVES = (
    "preflight without --no-import, where vLLM imports, builds and loads the drafter (drafter-build);"
    " or check by hand that the drafter's config.json is the one saved with its weights"
)


def weights_unjudged(launch: Any) -> Finding:
    """The cannot-judge finding for the EAGLE-1 head of `launch`."""
    said = (
        f"drafter '{escaped(launch.drafter.name)}' runs as EAGLE-1: its weights' names and shapes are"
        " not held to its config.json statically (vLLM loads them after the target's load)"
    )
    return cannot_judge(CHECK, said, GIVES)
