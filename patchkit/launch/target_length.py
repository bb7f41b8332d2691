"""ModelConfig's start-up refusal of a --max-model-len above the target's derived length
(_get_and_verify_max_len): above the least of its config's length keys, scaled by its RoPE factor,
and above its config's model_max_length, vLLM raises unless the launch's VLLM_ALLOW_LONG_MAX_MODEL_LEN
is "1" or "true" (stripped, any case). The rule and the variable's reading are read from the tree
(0.11-0.34 write both so); where the derived length is not sure, "cannot judge"."""

from __future__ import annotations

import os

from patchkit.launch import observed
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.spec_limits import MODEL_CONFIG, derived_max_len
from patchkit.launch.vllm_env import ENVS
from patchkit.launch.weights import target_directory

LONGER_REFUSED = (b"elif max_model_len > derived_max_model_len:", b"if envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN:")
ALLOW = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
ALLOW_READ = b'os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower()'  # then `in ("1", "true")`
# Sentence Transformers' file, whose max_seq_length vLLM takes as the derived length instead
ENCODER_CONFIG = "sentence_bert_config.json"


def length_findings(check: str, launch: LaunchContext) -> list[Finding]:
    """A failing finding where --max-model-len is above the target's derived length (and its
    model_max_length) and the launch does not allow it; cannot judge where that length is not sure."""
    given = launch.command.options.get("max-model-len")
    if not isinstance(given, int) or isinstance(given, bool) or given <= 0:
        return []  # -1 (auto), 0 and below: bounds.py's, and vLLM's own rules
    rule = launch.read(MODEL_CONFIG) or b""
    if not all(line in rule for line in LONGER_REFUSED) or ALLOW_READ not in (launch.read(ENVS) or b""):
        return []
    if launch.command.environ.get(ALLOW, "0").strip().lower() in ("1", "true"):
        return []  # vLLM warns, and starts
    text = launch.target.text_config
    derived = derived_max_len(text)
    own = text.get("model_max_length")
    fix = f"give --max-model-len {derived} or less" if derived else "check the model's length by hand"
    if derived is not None and given > derived and not (isinstance(own, int | float) and given <= own):
        why = (
            f"vLLM refuses --max-model-len {given} at start: it is above the target's derived max_model_len {derived} "
            f"(from its config.json), and the launch's {ALLOW} is not 1 or true"
        )
        return [Finding(check, False, why, f"{fix}, or set {ALLOW}=1 in the launch's environment (at your risk)")]
    unsure = _unsure(launch, given, derived)
    if unsure is None:
        return []
    return [cannot_judge(check, f"whether vLLM takes --max-model-len {given}: {unsure}", fix)]


def _unsure(launch: LaunchContext, given: int, derived: int | None) -> str | None:
    """Why the derived length a `given` at or below it is held to is not sure (None: it is)."""
    if derived is None:
        return (
            "the target's config.json gives no length vLLM's derivation is sure of (no key, or a RoPE scaling not read)"
        )
    found = target_directory(launch.command)
    directory = os.path.join(launch.command.working_directory(), found[1]) if found else None
    if directory is not None and observed.isfile(os.path.join(directory, ENCODER_CONFIG)):
        return f"vLLM takes the max_seq_length of its {ENCODER_CONFIG} instead"
    window = launch.target.text_config.get("sliding_window")
    if launch.command.options.get("disable-sliding-window") and isinstance(window, int) and given > window:
        return f"--disable-sliding-window lowers it to the sliding window {window}, scaled as vLLM scales it"
    return None
