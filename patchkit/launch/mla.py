"""Whether vLLM runs a model config's attention as MLA, by the tree's own rule: its is_deepseek_mla
(config/model.py 0.11-0.15, transformers_utils/model_arch_config_convertor.py 0.16 on) counts only
the model types it lists (kv_lora_rank not None; DeepSeek-V4's compress_ratios: head_dim not None),
and an EAGLE config (model_type eagle) by its inner model's type. A tree whose rule patchkit cannot
read: any config with a kv_lora_rank (what every listed type has)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from patchkit.checks.parsed import python_tree

RULES = ("vllm/transformers_utils/model_arch_config_convertor.py", "vllm/config/model.py")
FUNCTION = "is_deepseek_mla"
SPECULATIVE = "vllm/config/speculative.py"
WRAPS = b'model_type="eagle"'  # SpeculativeConfig's EAGLEConfig(draft hf_config, ..., model_type="eagle")
ABSENT = "absent"  # a listed type's kv_lora_rank config.json leaves out
Reader = Callable[[str], "bytes | None"]


def deepseek_mla(config: dict[str, Any], read: Reader | None, *, eagle: bool = False) -> bool:
    """vLLM's is_deepseek_mla for a (text) config, by the tree's rule where `read` shows it. `eagle`: a
    drafter under method eagle or eagle3, which the tree's SpeculativeConfig wraps in an EAGLEConfig
    (model_type eagle, the drafter's own config its inner model) where it does so."""
    rule = _rule(read) if read is not None else None
    if rule is None:
        return config.get("kv_lora_rank") is not None
    types, eagle_types, compressed = rule
    kind = config.get("model_type")
    if eagle and kind != "eagle" and read is not None and WRAPS in (read(SPECULATIVE) or b""):
        config = {**config, "model_type": "eagle", "model": config}
        kind = "eagle"
    if kind == "eagle":
        inner = config.get("model")
        inner_kind = inner.get("model_type") if isinstance(inner, dict) else None
        rank = config.get("kv_lora_rank", inner.get("kv_lora_rank") if isinstance(inner, dict) else None)
        return inner_kind in eagle_types and rank is not None
    if kind not in types:
        return False
    if compressed and config.get("compress_ratios"):
        return config.get("head_dim") is not None
    # absent from config.json: the config class's default (DeepseekV2/V3Config's 512), or an AttributeError at start
    return config.get("kv_lora_rank", ABSENT) is not None


def _rule(read: Reader) -> tuple[frozenset[str], frozenset[str], bool] | None:
    """(the model types it lists, those an EAGLE config's inner model may have, whether it reads
    compress_ratios) from the first of RULES that defines is_deepseek_mla with those tuples."""
    for path in RULES:
        tree = python_tree(read(path))
        function = (
            next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == FUNCTION), None)
            if tree is not None
            else None
        )
        if function is None:
            continue
        tuples = [_types(node) for node in ast.walk(function) if isinstance(node, ast.Compare)]
        found = [t for t in tuples if t]
        if not found:
            return None
        compressed = any(isinstance(n, ast.Constant) and n.value == "compress_ratios" for n in ast.walk(function))
        compressed = compressed or any(
            isinstance(n, ast.Name) and n.id == "get_compress_ratios" for n in ast.walk(function)
        )
        return found[0], found[1] if len(found) > 1 else frozenset(), compressed
    return None


def _types(node: ast.Compare) -> frozenset[str]:
    """The strings of `X.model_type in (...)` (the tuple a model type is looked up in), else empty."""
    if not (len(node.ops) == 1 and isinstance(node.ops[0], ast.In)):
        return frozenset()
    left, right = node.left, node.comparators[0]
    if not (isinstance(left, ast.Attribute) and left.attr == "model_type" and isinstance(right, (ast.Tuple, ast.List))):
        return frozenset()
    return frozenset(e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
