"""The target's derived max_model_len as the tree's ModelConfig derives it (_get_and_verify_max_len):
the least of its config's length keys, scaled by the RoPE the tree reads, where --hf-overrides are
applied as the tree applies them. 0.12+ sets a dict-valued override after get_config, whose
patch_rope_parameters (transformers 4) already made rope_parameters the config.json's rope_scaling:
an overridden rope_scaling then never reaches the length. 0.11 updates the config before its
patch_rope_scaling, and the length reads rope_scaling: the override counts."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any, NamedTuple, TypeGuard

from patchkit.launch import observed
from patchkit.launch.engine import LaunchContext, Reader
from patchkit.launch.models import nested_update
from patchkit.launch.weights import target_directory

MODEL_CONFIG = "vllm/config/model.py"
VLLM_CONFIGS = "vllm/transformers_utils/config.py"
# the config keys vLLM derives max_model_len from (the least it finds), as 0.11-0.34 list them
MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)  # fmt: skip
ROPE_KEYS = ("rope_scaling", "rope_parameters")
# 0.12-0.34 ModelConfig.__post_init__: dict-valued overrides kept apart, set after get_config
DICT_AFTER = (b"dict_overrides[key] = value", b"self._apply_dict_overrides(hf_config, dict_overrides)")
READS_PARAMETERS = b'rope_parameters = getattr(hf_config, "rope_parameters", None)'  # 0.12-0.30
# patch_rope_parameters' transformers 4 branch: the config.json's rope_scaling dict becomes rope_parameters
ALIASED = b"config.rope_parameters = rope_scaling"
# 0.11: every override set by config.update before patch_rope_scaling; the length reads rope_scaling
UPDATED_FIRST = (b"config.update(hf_overrides_kw)", b"patch_rope_scaling(config)")
READS_SCALING = b'rope_scaling = getattr(hf_config, "rope_scaling", None)'
# _get_and_verify_max_len's RoPE types whose factor does not scale the length, and yarn's start
UNSCALED = re.compile(rb"if rope_type not in \(([^)]{0,400})\):")
YARN_ORIGINAL = b'if rope_type == "yarn":'
TEXT_HEADS = b'hasattr(text_config, "num_attention_heads")'  # get_hf_text_config, 0.11-0.34
FLOAT_MAX = sys.float_info.max  # vLLM holds the derived length as a float: a longer one fails its own reading
# get_and_verify_max_len: the tokenizer's model_max_length counts for a pooling model with absolute positions
TOKENIZER_CAP = b'"position_embedding_type", "") == "absolute"'
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_LIMIT = 16 << 20  # a tokenizer_config.json may carry a chat template or an added-tokens table
# the config classes whose position_embedding_type defaults to absolute (transformers 4.57), by model_type
ABSOLUTE_BY_DEFAULT = {
    name: "absolute" for name in ("bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "electra", "ernie")
}
# architecture names vLLM's --runner auto takes for pooling (config/model.py's _SUFFIX_TO_DEFAULTS; not bare ...Model)
POOLING_SUFFIXES = (
    "ForTextEncoding", "EmbeddingModel", "ForSequenceClassification", "ForTokenClassification",
    "ClassificationModel", "ForRewardModeling", "RewardModel",
)  # fmt: skip
NOT_READ = "the target's config.json gives no length vLLM's derivation is sure of (no key, or a RoPE scaling not read)"


class RopeRule(NamedTuple):
    unscaled: tuple[str, ...]  # longrope, llama3 ... (0.30+: yarn too)
    yarn_original: bool  # yarn's length is its original_max_position_embeddings, scaled


def target_derived(launch: LaunchContext, *, defaulted: bool = False) -> tuple[int | None, str | None]:
    """(the target's derived length, None), or (None, why it is not sure); `defaulted`: the length
    vLLM takes where --max-model-len is not given."""
    view, why = _length_view(launch)
    if view is None:
        return None, why
    cap, why = _tokenizer_cap(launch)
    rule = rope_rule(launch.read)
    derived = derived_max_len(view, rule, defaulted=defaulted, cap=cap)
    if why is not None and (cap is None or derived != derived_max_len(view, rule, defaulted=defaulted)):
        return None, why  # the tokenizer's length may lower it, and whether it counts is not told
    return (derived, None) if derived is not None else (None, NOT_READ)


def _tokenizer_cap(launch: LaunchContext) -> tuple[int | None, str | None]:
    """The tokenizer_config.json model_max_length that lowers the derived length (get_and_verify_max_len:
    a pooling runner and absolute position embeddings), and why it may not count (None: it does);
    (None, why) where it is not read."""
    config = launch.target.config
    kind = config.get("position_embedding_type", ABSOLUTE_BY_DEFAULT.get(str(config.get("model_type"))))
    runner = launch.command.optional_text("runner") or "auto"
    if kind != "absolute" or runner == "generate" or TOKENIZER_CAP not in (launch.read(MODEL_CONFIG) or b""):
        return None, None
    archs = launch.target.architectures
    pooling = runner == "pooling" or bool(archs and archs[0].endswith(POOLING_SUFFIXES))
    unsure = (
        None if pooling else "whether vLLM runs it as a pooling model (its tokenizer's model_max_length then lowers it)"
    )
    found = target_directory(launch.command)
    where = launch.command.tokenizer or (found[1] if found is not None else None)
    path = os.path.join(launch.command.working_directory(), where, TOKENIZER_CONFIG) if where else None
    if path is None or not observed.isdir(os.path.dirname(path)):
        return None, f"the tokenizer's {TOKENIZER_CONFIG} (its model_max_length lowers it) is not read here"
    if not observed.isfile(path):
        return None, None
    try:
        held = json.loads(observed.read_regular(path, TOKENIZER_LIMIT, follow_symlinks=True).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None, f"the tokenizer's {TOKENIZER_CONFIG} (its model_max_length lowers it) is not read here"
    cap = held.get("model_max_length") if isinstance(held, dict) else None
    if cap is None:
        return None, None
    if not (isinstance(cap, int | float) and 0 < cap <= FLOAT_MAX):
        return None, f"the tokenizer's {TOKENIZER_CONFIG} model_max_length {repr(cap)[:40]} is no length compared here"
    return int(cap), unsure


def _length_view(launch: LaunchContext) -> tuple[dict[str, Any] | None, str | None]:
    """The text config as the tree's length derivation reads it; (None, why) where that is not told."""
    target = launch.target
    overrides = target.overrides
    if added_text_config(launch, judged=False) is not None:
        return None, "--hf-overrides sets a text_config on a config that has none, as a plain dict"
    inner = overrides["text_config"] if isinstance(overrides.get("text_config"), dict) else {}
    named = [key for key in ROPE_KEYS if isinstance(overrides.get(key), dict)]
    nested = [key for key in ROPE_KEYS if isinstance(inner.get(key), dict)]
    if not named and not nested:
        return target.text_config, None
    given = f"--hf-overrides' {(named or ['text_config'])[0]}"
    composite = isinstance(target.own.get("text_config"), dict)
    model, configs = launch.read(MODEL_CONFIG) or b"", launch.read(VLLM_CONFIGS) or b""
    if all(line in configs for line in UPDATED_FIRST) and READS_SCALING in model and DICT_AFTER[0] not in model:
        if composite or nested:  # a text_config override replaces it whole with a dict
            return None, f"{given}: how this tree reads a nested config it replaced is not read"
        return target.text_config, None  # replaced whole, then read: as merged
    if not (all(line in model for line in DICT_AFTER) and READS_PARAMETERS in model and ALIASED in configs):
        return None, f"{given}: how this tree applies it to the derived length is not read"
    if transformers_major(launch) != 4:
        return None, f"{given}: the launch's transformers is not 4.x, whose rope_parameters the tree reads"
    if composite and "rope_parameters" not in named:
        return _nested_aliased(target.own["text_config"], inner, target.text_config)
    if composite or nested:  # a composite's class may hand its rope_parameters on to text_config; a new text_config
        return None, f"{given}: whether the config's class hands it on to its text_config is not read"
    return _aliased(target.own, overrides)


def _aliased(own: dict[str, Any], overrides: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The config the length reads on a 0.12+ tree under transformers 4: flat overrides applied first,
    rope_parameters the loaded rope_scaling (else rope_parameters), unless an override sets rope_parameters."""
    loaded = {**own, **{key: value for key, value in overrides.items() if not isinstance(value, dict)}}
    rope = overrides.get("rope_parameters")
    if isinstance(rope, dict) and "rope_type" not in rope:
        return (
            None,
            "--hf-overrides' rope_parameters has no rope_type, which vLLM's length reads (set after its patching)",
        )
    if not isinstance(rope, dict):
        rope = _patched(loaded)
    merged = {**loaded, **{key: value for key, value in overrides.items() if isinstance(value, dict)}}
    return {**merged, "rope_parameters": rope, "rope_scaling": None}, None


def _nested_aliased(
    own: dict[str, Any], inner: dict[str, Any], merged: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """A composite's text config as the length reads it on a 0.12+ tree under transformers 4:
    _update_nested merges a text_config override's RoPE dicts into the loaded ones in place, and
    rope_parameters is the loaded rope_scaling itself; a top-level rope_scaling never reaches it."""
    rope = _patched(own)
    for key in (key for key in inner if key in ROPE_KEYS and isinstance(inner[key], dict)):
        if key == "rope_parameters" or own.get("rope_scaling") is not None:  # else set apart, unread
            rope = nested_update(rope, inner[key]) if isinstance(rope, dict) else inner[key]
    return {**merged, "rope_parameters": rope, "rope_scaling": None}, None


def _patched(loaded: dict[str, Any]) -> object:
    """The rope_parameters transformers 4's patch_rope_parameters leaves: the rope_scaling (else the
    rope_parameters) of the loaded config, its legacy "type" copied to "rope_type"."""
    rope = loaded.get("rope_scaling") if loaded.get("rope_scaling") is not None else loaded.get("rope_parameters")
    if isinstance(rope, dict) and "rope_type" not in rope and "type" in rope:
        return {**rope, "rope_type": rope["type"]}
    return rope


def added_text_config(launch: LaunchContext, *, judged: bool = True) -> str | None:
    """Why vLLM refuses a launch whose --hf-overrides give a text_config to a config that has none: it is
    set as a plain dict (no nested config to update), which get_hf_text_config then takes as the text
    config and refuses, having no num_attention_heads (transformers 4: get_text_config returns it).
    `judged`: only where that is told (the tree's check, transformers 4); else wherever it is given."""
    target = launch.target
    if not isinstance(target.overrides.get("text_config"), dict) or isinstance(target.own.get("text_config"), dict):
        return None
    if judged and (TEXT_HEADS not in (launch.read(VLLM_CONFIGS) or b"") or transformers_major(launch) != 4):
        return None
    return (
        "--hf-overrides sets text_config on a config that has none, as a plain dict, and the tree's "
        "get_hf_text_config refuses a text config without num_attention_heads"
    )


def transformers_major(launch: LaunchContext) -> int | None:
    """The major version of the transformers the launch's Python finds; None when not told."""
    headers = launch.distribution("transformers") or []
    version = next((value for key, value in headers if key == "Version"), "")
    major = version.split(".")[0]
    return int(major) if major.isdigit() and len(major) < 4 else None


def rope_rule(read: Reader) -> RopeRule | None:
    """How the tree's _get_and_verify_max_len scales the derived length by RoPE: the types it does not
    scale by their factor, and whether yarn starts from its original_max_position_embeddings (0.11-0.26;
    0.30+ takes yarn's max_position_embeddings as scaled already); None where its lines are not found."""
    source = read(MODEL_CONFIG) or b""
    start = source.find(b"def _get_and_verify_max_len(")
    body = source[start : source.find(b"\ndef ", start + 1)] if start >= 0 else b""
    found = UNSCALED.search(body)
    if found is None:
        return None
    unscaled = tuple(name.decode() for name in re.findall(rb'"([\w-]+)"', found.group(1)))
    return RopeRule(unscaled, YARN_ORIGINAL in body and b'"original_max_position_embeddings"]' in body)


def derived_max_len(
    text: dict[str, Any], rule: RopeRule | None, *, defaulted: bool = False, cap: int | None = None
) -> int | None:
    """The max_model_len vLLM derives from a config: the least of its length keys, scaled by its rope
    factor as the tree's `rule` says (`defaulted`: where none is given, longrope's own default counts);
    None where it is not sure (no key: a config class's default counts; a RoPE not read)."""
    lengths = [text[key] for key in MAX_LEN_KEYS if text.get(key) is not None]
    if not lengths or not all(whole(n) and 0 < n <= FLOAT_MAX for n in lengths):
        return None  # none, or one past a float: vLLM's number fields refuse it (not judged here)
    derived = text["model_max_length"] if text.get("model_max_length") else min(lengths)
    derived = min(derived, cap) if cap is not None else derived  # the pooling tokenizer's, before any scaling
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if rope is None or "gemma3" in str(text.get("model_type")):
        return int(derived)  # gemma3's length is scaled already (0.11-0.34 skip it)
    kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    kind = "longrope" if kind == "su" else kind
    factor = rope.get("factor", 1.0) if isinstance(rope, dict) else None
    if rule is None or not isinstance(kind, str):
        return None  # the tree's scaling not read, or nested per layer type: not judged
    if kind == "longrope" and defaulted:
        derived = text.get("original_max_position_embeddings", derived)
    if kind in rule.unscaled:
        return int(derived) if whole(derived) and derived <= FLOAT_MAX else None
    if not isinstance(factor, int | float) or not 1 <= factor < math.inf:
        return None  # no finite factor: not judged
    if kind == "yarn" and rule.yarn_original:
        derived = rope.get("original_max_position_embeddings")
    try:
        scaled = int(derived * factor) if whole(derived) else None
    except OverflowError:  # a length past what a float holds: not judged
        return None
    return scaled if scaled is not None and scaled <= FLOAT_MAX else None


def whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
