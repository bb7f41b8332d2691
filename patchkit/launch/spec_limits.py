"""SpeculativeConfig's start-up refusals of what the drafter's files and the launch's environment
decide: a "max_model_len" above the drafter's derived length or the target's
(_maybe_override_draft_max_model_len), and method "suffix" where the launch's Python finds no
arctic_inference (_validate_suffix_decoding). Each is read from the tree's speculative.py."""

from __future__ import annotations

import os
from typing import Any

from patchkit.launch import observed
from patchkit.launch.derived_length import MODEL_CONFIG as MODEL_CONFIG
from patchkit.launch.derived_length import derived_max_len, rope_rule, target_derived, whole
from patchkit.launch.engine import LaunchContext, import_path
from patchkit.launch.lax import lax_int

# _get_and_verify_max_len (0.14+): --max-model-len -1/auto starts from the derived length, which the engine
# lowers later only where the KV cache cannot hold it (0.11-0.13 refuse -1 at config time)
AUTO_FIT = b"max_model_len is None or max_model_len == -1"
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
        return given if whole(given) and given > 0 else None
    if launch.command.options.get("disable-sliding-window"):
        return None  # the sliding window then caps it
    return target_derived(launch, defaulted=True)[0]


def length_refused(spec: dict[str, Any], source: bytes | None, context: LaunchContext) -> tuple[str, str] | None:
    """(why, fix) where the speculative config's max_model_len is above the drafter's derived length or
    the target's max_model_len: vLLM raises at start; None where not, or not sure."""
    given = lax_int(spec.get("max_model_len"))  # "5000" and 5000.0 read as 5000
    if not whole(given) or given <= 0 or DRAFT_LONGER not in (source or b"") or spec.get("method") in NO_DRAFT_CONFIG:
        return None
    drafted = context.drafter.text_config if context.drafter is not None else None
    drafter = derived_max_len(drafted, rope_rule(context.read), defaulted=True) if drafted is not None else None
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
