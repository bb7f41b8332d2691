"""ModelConfig's start-up refusal of a --max-model-len above the target's derived length
(_get_and_verify_max_len): above the least of its config's length keys, scaled by its RoPE factor,
and above its config's model_max_length, vLLM raises unless the launch's VLLM_ALLOW_LONG_MAX_MODEL_LEN
is "1" or "true" (stripped, any case). The rule and the variable's reading are read from the tree
(0.11-0.34 write both so), and so are how --hf-overrides reach the length (derived_length.py) and which
Sentence Transformers file replaces it (sentence_config.py); where the derived length is not sure,
"cannot judge"."""

from __future__ import annotations

from patchkit.launch.derived_length import MAX_LEN_KEYS, MODEL_CONFIG, added_text_config, target_derived, whole
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.launch.sentence_config import Encoder, encoder_length
from patchkit.launch.vllm_env import ENVS

LONGER_REFUSED = (b"elif max_model_len > derived_max_model_len:", b"if envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN:")
ALLOW = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
ALLOW_READ = b'os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower()'  # then `in ("1", "true")`
# _get_and_verify_max_len: the Sentence Transformers file's max_seq_length replaces the derived length
ENCODER_TAKEN = b'if encoder_config and "max_seq_length" in encoder_config:'


def length_findings(check: str, launch: LaunchContext) -> list[Finding]:
    """A failing finding where --max-model-len is above the target's derived length (and its
    model_max_length) and the launch does not allow it; cannot judge where that length is not sure.
    Whatever the launch, a Sentence Transformers file vLLM takes and cannot read fails."""
    option = launch.command.options.get("max-model-len")
    encoder = encoder_length(launch)  # vLLM's ModelConfig reads it for every launch
    rule = launch.read(MODEL_CONFIG) or b""
    read_as: int | None = 0  # 0: --max-model-len below -1 or 0: its own rules, before the file's length is read
    if option is None or option == -1:
        read_as = None
    elif whole(option) and option > 0:
        read_as = option
    refused = _unreadable(launch, encoder, read_as, rule)
    if refused is not None:
        return [Finding(check, False, f"vLLM refuses the launch at start: {refused}", _repair(encoder))]
    added = added_text_config(launch)
    if added is not None:
        fix = "drop text_config from --hf-overrides, and give its keys at the top level"
        return [Finding(check, False, f"vLLM refuses the launch at start: {added}", fix)]
    if not whole(option) or option <= 0:
        return []  # -1 (auto), 0 and below: bounds.py's, and vLLM's own rules
    given = option
    if not all(line in rule for line in LONGER_REFUSED) or ALLOW_READ not in (launch.read(ENVS) or b""):
        return []
    if launch.command.environ.get(ALLOW, "0").strip().lower() in ("1", "true"):
        return []  # vLLM warns, and starts
    derived: int | float | None
    derived, unsure = target_derived(launch)
    source = "from its config.json"
    if derived is not None and (encoder.unsure or (encoder.file is not None and ENCODER_TAKEN not in rule)):
        why = encoder.unsure or f"the tree's use of its {encoder.file} is not read here"
        fix = encoder.fix or f"give --max-model-len at most the max_seq_length of its {encoder.file}, if vLLM takes it"
        return [cannot_judge(check, f"whether vLLM takes --max-model-len {given}: {why}", fix)]
    if derived is not None and encoder.length is not None:
        derived, source = encoder.length, f"the max_seq_length of its {encoder.file}, which vLLM takes"
    own = launch.target.text_config.get("model_max_length")
    fix = f"give --max-model-len {derived} or less" if derived else "check the model's length by hand"
    if derived is not None and given > derived and not (isinstance(own, int | float) and given <= own):
        why = (
            f"vLLM refuses --max-model-len {given} at start: it is above the target's derived max_model_len {derived} "
            f"({source}), and the launch's {ALLOW} is not 1 or true"
        )
        return [Finding(check, False, why, f"{fix}, or set {ALLOW}=1 in the launch's environment (at your risk)")]
    unsure = unsure or _window(launch, given)
    if unsure is None:
        return []
    return [cannot_judge(check, f"whether vLLM takes --max-model-len {given}: {unsure}", fix)]


def _unreadable(launch: LaunchContext, encoder: Encoder, given: int | None, rule: bytes) -> str | None:
    """Why vLLM raises at start on the Sentence Transformers file it takes (`given`: --max-model-len,
    compared with its length; None: int() takes it; 0: neither reads it); None where it does not."""
    if encoder.broken is not None:
        return encoder.broken
    lengths = any(launch.target.text_config.get(key) is not None for key in MAX_LEN_KEYS)
    if ENCODER_TAKEN not in rule or not lengths:  # no length key: a given one is taken before the file's is read
        return None
    if encoder.refused is not None:
        return encoder.refused
    if encoder.text is None or given == 0:
        return None
    shown = repr(encoder.text)[:40]
    if isinstance(given, int) and given > 0:
        return (
            f"it compares --max-model-len {given} with its {encoder.file}'s max_seq_length {shown}, text: that raises"
        )
    try:
        int(encoder.text)
    except ValueError:
        return f"int() of its {encoder.file}'s max_seq_length {shown} raises"
    return None


def _repair(encoder: Encoder) -> str:
    return f"repair its {encoder.file} (JSON in UTF-8 without a BOM, max_seq_length a whole number) or remove it"


def _window(launch: LaunchContext, given: int) -> str | None:
    """Why --disable-sliding-window leaves the derived length not sure for `given` (None: it does not)."""
    window = launch.target.text_config.get("sliding_window")
    if launch.command.options.get("disable-sliding-window") and isinstance(window, int) and given > window:
        return f"--disable-sliding-window lowers it to the sliding window {window}, scaled as vLLM scales it"
    return None
