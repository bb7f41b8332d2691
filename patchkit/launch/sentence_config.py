"""The Sentence Transformers file whose max_seq_length vLLM takes as the target's derived length
(ModelConfig._get_encoder_config, get_sentence_transformer_tokenizer_config): the tree's names tried
in its order in the model's directory, the first holding a non-empty JSON value taken, and kept only
where it holds the keys the tree asks for (0.11-0.30: max_seq_length and do_lower_case; 0.34:
max_seq_length)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from patchkit.base.values import Value
from patchkit.launch import observed
from patchkit.launch.derived_length import VLLM_CONFIGS, whole
from patchkit.launch.engine import LaunchContext
from patchkit.launch.weights import target_directory

TAKER = b"def get_sentence_transformer_tokenizer_config("
TAKEN_WHEN = {
    b'all(k in encoder_dict for k in ("max_seq_length", "do_lower_case"))': ("max_seq_length", "do_lower_case"),
    b'if "max_seq_length" in encoder_dict:': ("max_seq_length",),
}
NAMES = re.compile(rb'"(sentence_[\w.-]{1,40}_config\.json)"')
FILE_LIMIT = 1 << 20  # a file of a few keys


@dataclass(eq=False, repr=False)
class Encoder(Value):
    """What vLLM's encoder config makes of the derived length: `length` (None: nothing, or not sure),
    `file` (the file taken, or the one not read), `unsure` (why it is not told; None: it is)."""

    file: str | None = None
    length: int | None = None
    unsure: str | None = None


def encoder_length(launch: LaunchContext) -> Encoder:
    """The Sentence Transformers file of the target's directory vLLM takes, and its max_seq_length."""
    found = target_directory(launch.command)
    if found is None:
        return Encoder()  # a hub model vLLM downloads: its files are not read here
    directory = os.path.join(launch.command.working_directory(), found[1])
    source = launch.read(VLLM_CONFIGS) or b""
    start = source.find(TAKER)
    taker = source[start : source.find(b"\ndef ", start + 1)] if start >= 0 else b""
    names = [name.decode() for name in NAMES.findall(taker)]
    keys = next((wanted for line, wanted in TAKEN_WHEN.items() if line in taker), None)
    for name in names or ["sentence_bert_config.json"]:
        path = os.path.join(directory, name)
        if not observed.isfile(path):
            continue
        if not names or keys is None:
            return Encoder(name, unsure=f"the tree's reading of its {name} is not read here")
        value, unread = _json(path)
        if unread is not None:
            return Encoder(name, unsure=f"its {name} {unread}")
        if value:  # vLLM takes the first non-empty one
            return _taken(name, value, keys)
    return Encoder()


def _taken(name: str, value: object, keys: tuple[str, ...]) -> Encoder:
    """What vLLM makes of the file `name` it took, holding `value`."""
    if not isinstance(value, dict):
        return Encoder(name, unsure=f"its {name} holds no JSON object")
    if not all(key in value for key in keys):
        return Encoder()  # vLLM takes no encoder config
    length = value["max_seq_length"]
    if not whole(length) or length <= 0:
        shown = repr(length)[:40]
        return Encoder(name, unsure=f"its {name}'s max_seq_length {shown} is no length vLLM compares")
    return Encoder(name, length)


def _json(path: str) -> tuple[object, str | None]:
    """The JSON value of the file at `path`, read bounded (vLLM's open and json.load); (None, why) where not."""
    try:
        data = observed.read_regular(path, FILE_LIMIT, follow_symlinks=True)
    except OSError:
        return None, "is not read here (no regular file, or over 1 MiB)"
    try:
        return json.loads(data.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "is not JSON vLLM's json.load reads: it raises at start"
