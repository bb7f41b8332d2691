"""A Llama-layer EAGLE-3 drafter's config.json sizes given as JSON of another kind than a whole number
("14336", 14336.0, true). transformers' LlamaConfig keeps each as given, and vLLM's llama.py and
llama_eagle3.py compute with it: held to vLLM 0.16.0 building and loading the drafter on CPU
(tests/vllm_import/test_drafter_types_real.py), a string fails for every size, a fraction-free float
for every size but max_position_embeddings (its rotary table takes one); true is 1 to Python, which
fails hidden_size, draft_vocab_size and target_hidden_size there and may run elsewhere: not judged."""

from __future__ import annotations

from typing import Any

from patchkit.base.errors import escaped

SIZES = (
    "hidden_size",
    "target_hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_hidden_layers",
    "vocab_size",
    "draft_vocab_size",
    "max_position_embeddings",
)
FLOAT_TAKEN = ("max_position_embeddings",)
TRUE_REFUSED = ("hidden_size", "draft_vocab_size", "target_hidden_size")


def mistyped(config: dict[str, Any]) -> tuple[str, str] | None:
    """(what fails, fix) for the first size of SIZES the drafter's config gives as a string, a float
    vLLM does not take, or true where 1 fails; None when none."""
    for key in SIZES:
        value = config.get(key)
        if isinstance(value, str) or (isinstance(value, float) and key not in FLOAT_TAKEN):
            return _said(key, value), _fix(key, value)
        if value is True and key in TRUE_REFUSED:
            return _said(key, value), _fix(key, value)
    return None


def boolean_unjudged(config: dict[str, Any]) -> tuple[str, str] | None:
    """(why, fix) for a size given as a JSON boolean that vLLM takes as 0 or 1 without failing at
    once (its drafter then differs from the one trained): not judged."""
    for key in SIZES:
        value = config.get(key)
        if isinstance(value, bool) and not (value is True and key in TRUE_REFUSED):
            return (
                f"its config.json gives {escaped(key)} as {_shown(value)}, which vLLM takes as {int(value)}",
                _fix(key, value),
            )
    return None


def _said(key: str, value: object) -> str:
    kind = "a string" if isinstance(value, str) else "a float" if isinstance(value, float) else "a boolean"
    return f"its config.json gives {escaped(key)} as {escaped(_shown(value))[:40]} ({kind}), which vLLM computes with as given: it fails"


def _shown(value: object) -> str:
    """The value as config.json spells it (true, "14336", 14336.0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _fix(key: str, value: object) -> str:
    whole = _whole(value)
    example = f" ({whole})" if whole is not None else ""
    return f"give {key} in the drafter's config.json as a JSON whole number{example}"


def _whole(value: object) -> int | None:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
