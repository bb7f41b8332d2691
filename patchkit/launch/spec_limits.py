"""SpeculativeConfig's start-up refusals of what the drafter's files and the launch's environment
decide: a "max_model_len" above the drafter's derived length or the target's
(_maybe_override_draft_max_model_len), and method "suffix" where the launch's Python finds no
arctic_inference (_validate_suffix_decoding). Each is read from the tree's speculative.py."""

from __future__ import annotations

import math
import os
from typing import Any, TypeGuard

from patchkit.launch import observed
from patchkit.launch.engine import LaunchContext, import_path
from patchkit.launch.lax import lax_int

MODEL_CONFIG = "vllm/config/model.py"
# _get_and_verify_max_len (0.14+): --max-model-len -1/auto starts from the derived length, which the engine
# lowers later only where the KV cache cannot hold it (0.11-0.13 refuse -1 at config time)
AUTO_FIT = b"max_model_len is None or max_model_len == -1"
# the config keys vLLM derives max_model_len from (the least it finds), as 0.11-0.34 list them
MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)  # fmt: skip
DRAFT_LONGER = b"larger than {draft_max_model_len=}"  # _maybe_override_draft_max_model_len, 0.11-0.34
SUFFIX_NEEDS = b"if not has_arctic_inference():"  # _validate_suffix_decoding, 0.12 on
SUFFIX_MODULE = "arctic_inference"
NO_DRAFT_CONFIG = ("ngram", "[ngram]", "suffix")


def max_model_len(launch: LaunchContext) -> int | None:
    """The launch's max_model_len as vLLM's _get_and_verify_max_len sets it: --max-model-len, else the
    target's derived one (the least of its length keys, scaled by its rope factor; the tokenizer's
    model_max_length counts for pooling models only), -1 (auto) as the derived one where the tree fits it
    from there; None where it is not sure."""
    given = launch.command.options.get("max-model-len")
    if given == -1 and AUTO_FIT in (launch.read(MODEL_CONFIG) or b""):
        given = None
    if given is not None:
        return given if _whole(given) and given > 0 else None
    if launch.command.options.get("disable-sliding-window"):
        return None  # the sliding window then caps it
    return derived_max_len(launch.target.text_config)


def derived_max_len(text: dict[str, Any]) -> int | None:
    """The max_model_len vLLM derives from a config with none given: the least of its length keys,
    scaled by its rope factor; None where it is not sure (no key: a config class's default counts)."""
    lengths = [text[key] for key in MAX_LEN_KEYS if text.get(key) is not None]
    if not lengths or not all(_whole(n) and n > 0 for n in lengths) or "gemma3" in str(text.get("model_type")):
        return None
    derived = text["model_max_length"] if text.get("model_max_length") else min(lengths)
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if rope is None:
        return int(derived)
    kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    factor = rope.get("factor", 1.0) if isinstance(rope, dict) else None
    if kind in (None, "longrope", "su") or not isinstance(factor, int | float) or not 1 <= factor < math.inf:
        return None  # nested per layer type, longrope's own default, or no finite factor: not judged
    if kind == "yarn":
        derived = rope.get("original_max_position_embeddings")
    try:
        return int(derived * (1 if kind == "llama3" else factor)) if _whole(derived) else None
    except OverflowError:  # a length past what a float holds: not judged
        return None


def length_refused(spec: dict[str, Any], source: bytes | None, context: LaunchContext) -> tuple[str, str] | None:
    """(why, fix) where the speculative config's max_model_len is above the drafter's derived length or
    the target's max_model_len: vLLM raises at start; None where not, or not sure."""
    given = lax_int(spec.get("max_model_len"))  # "5000" and 5000.0 read as 5000
    if not _whole(given) or given <= 0 or DRAFT_LONGER not in (source or b"") or spec.get("method") in NO_DRAFT_CONFIG:
        return None
    drafter = derived_max_len(context.drafter.text_config) if context.drafter is not None else None
    target = max_model_len(context)
    fix = 'lower "max_model_len" in --speculative-config, or drop it (vLLM then takes the lesser of the two)'
    if drafter is not None and given > drafter:
        return f"its max_model_len {given} is above the drafter's {drafter} (derived from its config.json)", fix
    if target is not None and given > target:
        return f"its max_model_len {given} is above the target's {target}", fix
    return None


def suffix_refused(spec: dict[str, Any], source: bytes | None, context: LaunchContext) -> tuple[str, str] | None:
    """(why, fix) for method "suffix" where the launch's Python finds no arctic_inference (neither its
    distribution nor its module on the launch's sys.path): vLLM raises ImportError at start."""
    if spec.get("method") != "suffix" or SUFFIX_NEEDS not in (source or b""):
        return None
    if context.distribution("arctic-inference") is not None:
        return None
    places = import_path(context.command, context.root)
    names = (SUFFIX_MODULE, f"{SUFFIX_MODULE}.py")
    if any(observed.exists(os.path.join(place, name)) for place in places for name in names):
        return None
    why = "method suffix needs arctic_inference, which the launch's Python does not find"
    return why, "install arctic-inference into the launch's environment, or use another method"


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
