"""A drafter's attention heads against the launch's -tp: vLLM builds the drafter in the target's
tensor-parallel group, and its attention (llama.py's LlamaAttention, deepseek_v2.py's) asserts that
-tp divides its heads, and its KV heads (or is divided by them when fewer), and that the KV heads
divide the heads (at any -tp); MLA attention asserts on the heads alone. The assert fires building the drafter, after the target's load."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from patchkit.launch.lax import lax_int

SPEC_FILE = "vllm/config/speculative.py"
VERIFIED = b"self.draft_model_config.verify_with_parallel_config("  # at start, every release read (0.11-0.34)
KV_FIX = "check the drafter's config.json: num_key_value_heads must divide num_attention_heads (as its weights do)"
HEADS_FIX = "give a -tp that divides the drafter's heads and the target's, or a drafter whose heads it divides"


def heads_unsplit(config: dict[str, Any], tp: int, mla: bool = False) -> tuple[str, str] | None:
    """(what fails, fix) when -tp `tp` does not split the heads of the drafter `config`, else None."""
    heads = _positive(config.get("num_attention_heads"))
    if heads is None:
        return None  # absent or odd: the drafter's own load names it
    given = config.get("num_key_value_heads")
    kv = heads if given is None else _positive(given)
    if tp > 1 and heads % tp:
        return f"its {heads} attention heads do not divide by -tp {tp}", HEADS_FIX
    if tp > 1 and not mla and kv is not None and (kv % tp if kv >= tp else tp % kv):
        return f"its {kv} KV heads do not split over -tp {tp}", HEADS_FIX
    if not mla and kv is not None and heads % kv:  # where -tp splits both, the same on each rank
        return f"its {kv} KV heads do not divide its {heads} heads (at any -tp)", KV_FIX
    return None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def when_refused(found: tuple[str, str], spec: dict[str, Any], read: Callable[[str], bytes | None]) -> str:
    """When vLLM refuses the drafter `found` says -tp does not split: at start where -tp does not divide
    its attention heads and the tree's SpeculativeConfig verifies the draft config with -tp (its
    draft_tensor_parallel_size not 1); else building it, after the target's load (an attention's assert)."""
    verified = VERIFIED in (read(SPEC_FILE) or b"") and lax_int(spec.get("draft_tensor_parallel_size")) != 1
    if "attention heads" in found[0] and verified:
        return "vLLM refuses the launch at start (its draft ModelConfig's verify_with_parallel_config)"
    return "vLLM fails building it, after the target's load"
