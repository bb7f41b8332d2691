"""--generation-config DIR, judged as vLLM reads it once the model has loaded: the serving classes of
init_app_state call ModelConfig.get_diff_sampling_param, whose try_get_generation_config reads
GenerationConfig.from_pretrained(DIR) (DIR/generation_config.json, or the hub cache's), and on an
OSError get_config(DIR) (config.json or params.json there), which raises ValueError when neither is
found. With `auto` (the default) it reads the model's own directory the same way. vLLM's front end
reads it as it starts (InputProcessor, before the model loads), its serving classes again after the
load. `vllm` too reads the model's own as the front end starts (ModelConfig.try_get_generation_config,
0.11.0-0.34.0), though its serving classes then use none.
A headless node (`vllm serve --headless`) builds neither: only a model class that reads it itself
(Llama4's, Gemma4's) does, as the model is built."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from patchkit.base.errors import PatchkitError
from patchkit.base.fsutil import read_regular
from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import Finding
from patchkit.launch.models import (
    fetched_by,
    hf_download,
    hf_hub_cache,
    hub_repo_id,
    offline,
    offline_model_path,
    redirected,
)
from patchkit.launch.weights import target_directory

AT_START = "vLLM refuses the launch as it starts"
GENERATION = "generation_config.json"
CONFIGS = ("config.json", "params.json")  # what get_config's `auto` format finds a model by
_LIMIT = 16 << 20
# gguf_utils.is_remote_gguf's `repo:QUANT` form
_REMOTE_GGUF = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*:[A-Za-z0-9_+-]+")
_FIX = "give a directory holding generation_config.json (or a model's config.json), or auto / vllm"
# the model classes that read the generation config themselves, in the engine (a headless node too)
ENGINE_READERS = ("Llama4", "EagleLlama4", "Gemma4", "DiffusionGemma")


def read_on_node(command: LaunchCommand, architectures: Sequence[str]) -> bool:
    """Whether this node of the launch reads the generation config: one that runs the API server,
    or a headless one whose model class reads it (`architectures`: the target's)."""
    return not command.headless or any(a.startswith(ENGINE_READERS) for a in architectures)


def generation_config_findings(command: LaunchCommand, check: str, architectures: Sequence[str] = ()) -> list[Finding]:
    """A failed `check` finding (in a list) when vLLM would find no generation config at the value,
    or the model's own (`auto`) is one it cannot read."""
    value = command.options.get("generation-config")
    if not read_on_node(command, architectures) or (command.optional_text("config-format") or "auto") != "auto":
        return []  # not read here; or another parser reads it: not judged
    if value is None or value in ("auto", "vllm"):
        return _model_own(command, check)
    if not isinstance(value, str) or value == "" or _REMOTE_GGUF.fullmatch(value):
        return []  # "": from_pretrained reads the launch's own directory: not judged
    why = _why_not_found(command, value)
    fix = why.fix if isinstance(why, NotCached) else _FIX
    return [] if why is None else [Finding(check, False, f"--generation-config {value}: {why}: {AT_START}", fix)]


def _model_own(command: LaunchCommand, check: str) -> list[Finding]:
    """`auto` or `vllm`: the generation_config.json of --hf-config-path's directory, else of the model's (a
    local one, or offline its cached snapshot, as weights.target_directory finds it); one vLLM cannot
    read, or online a hub id's, is no refusal (it reads config.json instead, or downloads it)."""
    config_path = command.optional_text("hf-config-path")
    if config_path is not None:
        directory: str | None = redirected(config_path, command.environ, command.cwd)
    else:
        found = target_directory(command)
        directory = found[1] if found is not None else None
    if directory is None:
        return []
    path = os.path.join(command.working_directory(), directory, GENERATION)
    value = _json(path) if os.path.isfile(path) else _UNREAD
    refused = generation_refusal(value) if isinstance(value, dict) else None
    if value is _UNREAD or (isinstance(value, dict) and refused is None):
        return []
    why = _REFUSES + refused if refused is not None else _NOT_AN_OBJECT if value is not _TOO_DEEP else _DEEP
    message = f"the model's {GENERATION} ({path}) {why}: {AT_START}"
    fix = "fix the model's generation_config.json, or give --generation-config DIR holding a good one"
    return [Finding(check, False, message, fix)]


def _why_not_found(command: LaunchCommand, value: str) -> str | None:
    local = os.path.join(command.working_directory(), value)
    if os.path.isdir(local):
        return _in_directory(local)
    if os.path.exists(local):  # a file: vLLM takes a GGUF file's own header instead
        return None if _gguf(local) else "a file, not a directory"
    if os.path.isabs(value) or not hub_repo_id(value):
        return "no such directory" if os.path.isabs(value) else "no such directory, nor a hub repo id"
    if not offline(command.environ) or command.environ.get("VLLM_USE_MODELSCOPE", "").lower() == "true":
        return None  # a hub id vLLM downloads: not judged
    try:
        snapshot = offline_model_path(value, None, command.environ, role="--generation-config")
    except PatchkitError:
        return NotCached(value, hf_hub_cache(command.environ))
    return _in_directory(snapshot)


class NotCached(str):
    """An offline launch's --generation-config hub id with no snapshot in the launch's hub cache; `fix`
    fetches the two files vLLM reads of it there (generation_config.json, else config.json)."""

    fix = _FIX

    def __new__(cls, name: str, cache: Path) -> NotCached:
        said = super().__new__(cls, f"HF_HUB_OFFLINE is set, and {cache} holds no snapshot of it (revision main)")
        download = hf_download(name, None, cache, files=(GENERATION, CONFIGS[0]))
        said.fix = f"fetch it into that cache: {fetched_by(download)}, or {_FIX}"
        return said


def _in_directory(directory: str) -> str | None:
    """Why vLLM finds no generation config in `directory`; None when it does."""
    generation = os.path.join(directory, GENERATION)
    value = _json(generation) if os.path.isfile(generation) else _UNREAD
    if isinstance(value, dict):
        refused = generation_refusal(value)
        return None if refused is None else f"its {GENERATION} {_REFUSES}{refused}"
    if value is not _UNREAD:
        return f"its {GENERATION} {_NOT_AN_OBJECT if value is not _TOO_DEEP else _DEEP}"
    if any(os.path.isfile(os.path.join(directory, name)) for name in CONFIGS):
        return None
    return f"a directory with neither a readable {GENERATION} nor {' or '.join(CONFIGS)}"


_UNREAD = object()
# JSON nested past the reader's recursion limit: from_pretrained lets the RecursionError through (it
# sends only a decode error on to config.json), and vLLM's launch ends with it
_TOO_DEEP = object()
_NOT_AN_OBJECT = "is JSON but not an object"
_DEEP = "nests deeper than Python's JSON reader goes (RecursionError)"
_REFUSES = "is one transformers' GenerationConfig refuses: "


def _json(path: str) -> object:
    """from_pretrained's read of it: any OSError, bad UTF-8 or bad JSON (_UNREAD) sends vLLM on to
    config.json; JSON that is not an object fails its item assignment (a TypeError, no fallback)."""
    try:
        return json.loads(read_regular(path, _LIMIT, follow_symlinks=True).decode("utf-8"))
    except (OSError, ValueError):
        return _UNREAD
    except RecursionError:
        return _TOO_DEEP


def _gguf(path: str) -> bool:
    """gguf_utils.check_gguf_file: a .gguf suffix, or a file that starts with b"GGUF"."""
    if path.endswith(".gguf"):
        return True
    try:
        return read_regular(path, 4, follow_symlinks=True, head=True) == b"GGUF"
    except (OSError, ValueError):
        return False


# transformers' GenerationConfig (4.57) refuses these as from_pretrained builds it (its __init__, then
# validate()), whatever the model: a ValueError or TypeError vLLM lets through, and the launch ends
_GENERATE_ARGUMENTS = (
    "logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "synced_gpus", "assistant_model",
    "streamer", "negative_prompt_ids", "negative_prompt_attention_mask", "use_model_defaults",
)  # fmt: skip
_CACHES = (
    "static", "offloaded_static", "sliding_window", "hybrid", "hybrid_chunked", "offloaded_hybrid",
    "offloaded_hybrid_chunked", "dynamic", "dynamic_full", "offloaded", "quantized",
)  # fmt: skip


def _number(value: object) -> bool:
    return isinstance(value, (int, float))  # a JSON true/false is one too, as Python compares it


def generation_refusal(config: dict[str, object]) -> str | None:
    """What transformers' GenerationConfig refuses of a generation_config.json read as `config`,
    in its words; None where nothing certain from the file alone is refused."""
    watermarking = config.get("watermarking_config")
    if watermarking is not None and not isinstance(watermarking, dict):
        return f"its watermarking_config is {json.dumps(watermarking)[:40]}, not an object"
    early = config.get("early_stopping", False)
    if not (early == "never" or (_number(early) and early in (0, 1))):
        return f"`early_stopping` must be a boolean or 'never', but is {json.dumps(early)[:40]}"
    most = config.get("max_new_tokens")
    if most is not None and (not _number(most) or most <= 0):  # type: ignore[operator]
        return f"`max_new_tokens` must be greater than 0, but is {json.dumps(most)[:40]}"
    pad = config.get("pad_token_id")
    if pad is not None and not _number(pad):
        return f"its pad_token_id is {json.dumps(pad)[:40]}, not a number"
    cache = config.get("cache_implementation")
    if cache is not None and cache not in _CACHES:
        return f"invalid `cache_implementation` ({json.dumps(cache)[:40]}): none of {', '.join(_CACHES)}"
    if config.get("compile_config") is not None:
        return "its compile_config must be a CompileConfig, which no JSON value is"
    return _combination_refusal(config)


def _combination_refusal(config: dict[str, object]) -> str | None:
    returned, beams = config.get("num_return_sequences", 1), config.get("num_beams", 1)
    if _number(returned) and _number(beams) and returned != 1:
        if beams == 1 and config.get("do_sample", False) is False:
            return f"`num_return_sequences` {returned} without beam search and sampling (greedy: 1 only)"
        if beams != 1 and returned > beams:  # type: ignore[operator]
            return f"`num_return_sequences` ({returned}) has to be smaller or equal to `num_beams` ({beams})"
    if not config.get("_from_model_config"):  # else its other keys are never set
        given = [name for name in _GENERATE_ARGUMENTS if name in config]
        if given:
            return f"argument `{given[0]}` is not a valid argument of `GenerationConfig`; it is generate()'s"
    return None
