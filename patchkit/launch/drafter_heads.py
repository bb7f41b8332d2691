"""A drafter's attention heads against the launch's -tp: vLLM builds the drafter in the target's
tensor-parallel group, and its attention (llama.py's LlamaAttention, deepseek_v2.py's) asserts that
-tp divides its heads, and its KV heads (or is divided by them when fewer); MLA attention asserts on
the heads alone. The assert fires building the drafter, after the target's load."""

from __future__ import annotations

from typing import Any

HEADS_FIX = "give a -tp that divides the drafter's heads and the target's, or a drafter whose heads it divides"


def heads_unsplit(config: dict[str, Any], tp: int, mla: bool = False) -> tuple[str, str] | None:
    """(what fails, fix) when -tp `tp` does not split the heads of the drafter `config`, else None."""
    heads = _positive(config.get("num_attention_heads"))
    if tp <= 1 or heads is None:
        return None  # absent or odd: the drafter's own load names it
    given = config.get("num_key_value_heads")
    kv = heads if given is None else _positive(given)
    if heads % tp:
        return f"its {heads} attention heads do not divide by -tp {tp}", HEADS_FIX
    if not mla and kv is not None and (kv % tp if kv >= tp else tp % kv):
        return f"its {kv} KV heads do not split over -tp {tp}", HEADS_FIX
    return None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
