"""The Sentence Transformers file whose max_seq_length vLLM takes as the target's derived length
(ModelConfig._get_encoder_config, get_sentence_transformer_tokenizer_config): the tree's names tried
in its order in the model's directory, the first holding a non-empty JSON value taken, and kept only
where it holds the keys the tree asks for (0.11-0.30: max_seq_length and do_lower_case; 0.34:
max_seq_length)."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from patchkit.base.values import Value
from patchkit.launch import observed
from patchkit.launch.derived_length import VLLM_CONFIGS
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import fetched_by, hf_download, hf_hub_cache, offline
from patchkit.launch.weights import target_directory

TAKER = b"def get_sentence_transformer_tokenizer_config("
TAKEN_WHEN = {
    b'all(k in encoder_dict for k in ("max_seq_length", "do_lower_case"))': ("max_seq_length", "do_lower_case"),
    b'if "max_seq_length" in encoder_dict:': ("max_seq_length",),
}
NAMES = re.compile(rb'"(sentence_[\w.-]{1,40}_config\.json)"')
FILE_LIMIT = 1 << 20  # a file of a few keys
REFUSED = object()  # _json's value where vLLM's json.load raises


@dataclass(eq=False, repr=False)
class Encoder(Value):
    """What vLLM's encoder config makes of the derived length: `length` (None: nothing, or not sure),
    `file` (the file taken, or the one not read), `unsure` (why it is not told; None: it is)."""

    file: str | None = None
    length: int | float | None = None  # its max_seq_length, a number (vLLM compares it as it is)
    unsure: str | None = None
    fix: str | None = None  # what makes it told, where not the file's own length
    broken: str | None = None  # why vLLM's json.load of it raises, whatever the launch
    refused: str | None = None  # why vLLM's use of its max_seq_length raises (where it reads it)
    text: str | None = None  # a max_seq_length written as text: int() reads it, a comparison raises


def encoder_length(launch: LaunchContext) -> Encoder:
    """The Sentence Transformers file of the target's directory vLLM takes, and its max_seq_length."""
    directory, remote = _model_files(launch)
    source = launch.read(VLLM_CONFIGS) or b""
    start = source.find(TAKER)
    taker = source[start : source.find(b"\ndef ", start + 1)] if start >= 0 else b""
    names = [name.decode() for name in NAMES.findall(taker)]
    keys = next((wanted for line, wanted in TAKEN_WHEN.items() if line in taker), None)
    for name in names or ["sentence_bert_config.json"]:
        path = os.path.join(directory, name) if directory is not None else None
        if path is None or not observed.isfile(path):
            continue
        if not names or keys is None:
            return Encoder(name, unsure=f"the tree's reading of its {name} is not read here")
        value, unread = _json(path)
        if unread is not None and value is REFUSED:
            return Encoder(name, broken=f"vLLM reads its {name} at start, and its json.load raises ({unread})")
        if unread is not None:
            return Encoder(name, unsure=f"its {name} {unread}")
        if value:  # vLLM takes the first non-empty one
            return _taken(name, value, keys)
    return _listed(launch, directory) if remote else Encoder()


def _model_files(launch: LaunchContext) -> tuple[str | None, bool]:
    """(where vLLM finds the target's files without asking the hub, whether it then lists the hub
    repo's files): its directory; for a hub id, the cached snapshot its config.json came from."""
    command = launch.command
    found = target_directory(command)
    if found is not None:
        return os.path.join(command.working_directory(), found[1]), False
    snapshot = launch.target.path.parent
    cached = snapshot.parent.name == "snapshots" and not command.optional_text("hf-config-path")
    return (str(snapshot) if cached else None), not offline(command.environ)


def _listed(launch: LaunchContext, snapshot: str | None) -> Encoder:
    """An online hub model with no such file cached: vLLM lists the repo's files for one. A snapshot
    holding the weights was fetched whole, and the repo holds none; else that is not told here."""
    weights = ("*.safetensors", "*.bin")
    if snapshot is not None and any(observed.glob(os.path.join(snapshot, pattern)) for pattern in weights):
        return Encoder()
    name = str(launch.command.model)
    cache = str(Path(snapshot).parents[2]) if snapshot is not None else hf_hub_cache(launch.command.environ)
    download = hf_download(name, launch.command.optional_text("revision"), cache)
    return Encoder(
        unsure=f"vLLM lists the hub repo {name}'s files for a Sentence Transformers file, not read here",
        fix=f"fetch the model whole into the cache (then its files are read here): {fetched_by(download, 'weights too')}",
    )


def _taken(name: str, value: object, keys: tuple[str, ...]) -> Encoder:
    """What vLLM makes of the file `name` it took, holding `value`."""
    if not isinstance(value, dict):
        return Encoder(name, unsure=f"its {name} holds no JSON object")
    if not all(key in value for key in keys):
        return Encoder()  # vLLM takes no encoder config
    length = value["max_seq_length"]
    if isinstance(length, str):
        return Encoder(name, text=length)
    if not isinstance(length, int | float):  # bool is an int to vLLM too
        shown = repr(length)[:40]
        return Encoder(
            name, refused=f"vLLM takes its {name}, whose max_seq_length {shown} is no number: int() of it raises"
        )
    if not abs(length) <= sys.float_info.max:  # NaN, or past a float: not compared here
        return Encoder(name, unsure=f"its {name}'s max_seq_length is {'NaN' if length != length else 'past a float'}")
    return Encoder(name, length)


def _json(path: str) -> tuple[object, str | None]:
    """The JSON value of the file at `path`, read bounded (vLLM's open and json.load); (None, why) where not."""
    try:
        data = observed.read_regular(path, FILE_LIMIT, follow_symlinks=True)
    except OSError:
        return None, "is not read here (no regular file, or over 1 MiB)"
    try:
        return json.loads(data.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # a BOM too: json.loads refuses it, as json.load
        return REFUSED, f"{type(exc).__name__}: {str(exc)[:80]}"
