"""The weight files vLLM's DefaultModelLoader would load for a model given as a local directory (or,
in an offline launch, a hub id's cached snapshot), found as vLLM 0.16.0's _prepare_weights finds them:
the patterns its load format globs in turn, the safetensors index that filters them, the files it
leaves out. A directory with none fails the launch only once the load begins (a drafter: after the
target's whole load), so preflight judges it first; no weight file is opened, only the index.
Online, a hub id's weights are vLLM's to download: not judged."""

from __future__ import annotations

import fnmatch
import glob
import json
import os
from pathlib import Path

from patchkit.base.errors import BadInput, TargetError
from patchkit.launch.command import LaunchCommand
from patchkit.launch.models import (
    WALK_LIMIT,
    ModelConfig,
    fetched_by,
    hf_hub_cache,
    offline,
    offline_model_path,
    offline_snapshot,
    redirected,
)
from patchkit.launch.values import read_named_file

# DefaultModelLoader's load formats, each with the patterns it globs in turn (the first that matches
# wins); vLLM adds *.pt for most model classes (fall_back_to_pt): a few turn it off, and taking it
# always is never a refusal where vLLM loads
PATTERNS = {
    "hf": ("*.safetensors", "*.bin", "*.pt"),
    "safetensors": ("*.safetensors", "*.pt"),
    "fastsafetensors": ("*.safetensors", "*.pt"),
    "mistral": ("consolidated*.safetensors", "*.pt"),
    "pt": ("*.pt",),
    "npcache": ("*.bin", "*.pt"),
}
_SAFETENSORS = ("safetensors", "fastsafetensors", "mistral")  # filtered by the index whatever matched
_INDEX = "model.safetensors.index.json"
_MISTRAL_INDEX = "consolidated.safetensors.index.json"
_NOT_WEIGHTS = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
INDEX_LIMIT = 64 << 20  # a shard index: a weight name per tensor, a few MB for the largest models


def weights_problem(directory: str, load_format: str, *, local: bool = True) -> str | None:
    """Why vLLM finds no weights to load in `directory` (a model's directory as vLLM names it, or a
    cached snapshot), or why its index makes the load fail; None when it finds some, or when the
    load format is not DefaultModelLoader's. `local`: vLLM names the directory itself (its `auto`
    then looks for Mistral's consolidated*.safetensors at any depth; not in a snapshot it finds offline)."""
    if load_format == "auto":
        mistral = _consolidated(directory) if local else False
        if mistral is None:  # too large a tree to tell which format vLLM picks
            return None
        load_format = "mistral" if mistral else "hf"
    patterns = PATTERNS.get(load_format)
    if patterns is None:
        return None
    found: list[str] = []
    use_safetensors = load_format in _SAFETENSORS
    for pattern in patterns:  # as vLLM globs: the directory joined unescaped, hidden files left out
        found = glob.glob(os.path.join(directory, pattern))
        if found:
            use_safetensors = use_safetensors or pattern == "*.safetensors"
            break
    if use_safetensors:
        index = os.path.join(directory, _MISTRAL_INDEX if load_format == "mistral" else _INDEX)
        named = _index_files(index, directory) if os.path.isfile(index) else None
        if isinstance(named, str):
            return named
        if named is not None:
            absent = sorted(name for name, path in named.items() if path not in found)
            if absent:
                more = f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""
                return f"{os.path.basename(index)} names {absent[0]}{more}, not there"
            found = [path for path in found if path in named.values()]
    else:
        found = [path for path in found if not path.endswith(_NOT_WEIGHTS)]
    dangling = [path for path in found if not os.path.exists(path)]
    if dangling:
        return f"{os.path.basename(dangling[0])} is a link to nothing (its file is gone)"
    return None if found else f"no weight file vLLM loads ({', '.join(patterns)})"


def _consolidated(directory: str) -> bool | None:
    """Whether a consolidated*.safetensors file is under `directory` at any depth (vLLM's `auto` then
    loads Mistral's format); None when the tree is too large to walk."""
    seen = 0
    for _, _, files in os.walk(directory):
        seen += len(files) + 1
        if any(fnmatch.fnmatch(f, "consolidated*.safetensors") for f in files):
            return True
        if seen > WALK_LIMIT:
            return None
    return False


def _index_files(index: str, directory: str) -> dict[str, str] | str:
    """The shard files a safetensors index names, each with the path vLLM compares to its globs;
    else why vLLM cannot read it (json.load, then ["weight_map"]): the load fails on it."""
    try:
        data = json.loads(read_named_file(index, INDEX_LIMIT, "weights index").decode("utf-8"))
        names = {str(name) for name in data["weight_map"].values()}
    except (BadInput, FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
        return f"{os.path.basename(index)} is no JSON object with a weight_map, as vLLM reads it"
    return {name: os.path.join(directory, name) for name in names}


def weight_findings(command: LaunchCommand, target: ModelConfig) -> list[tuple[str, str]]:
    """(message, fix) for the target and the drafter when vLLM would find no weights to load in the
    directory it loads them from."""
    load_format = command.optional_text("load-format") or "auto"
    quantization = target.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    if "bitsandbytes" in (command.options.get("quantization"), method) or load_format not in (*PATTERNS, "auto"):
        return []  # another loader (BitsAndBytesModelLoader's own files, a dummy, a plugin's): not judged
    found = []
    model = target_directory(command)
    if model is not None:
        found += _problem(command, "model", *model, load_format, "the load fails at its start")
    drafter = _drafter_directory(command)
    if drafter is not None:
        found += _problem(command, "drafter", *drafter, load_format, "the launch fails once the target has loaded")
    return found


def _problem(
    command: LaunchCommand, role: str, name: str, directory: str, local: bool, load_format: str, when: str
) -> list[tuple[str, str]]:
    """The finding for `name`, whose weights vLLM loads from `directory` (`name` itself, or its
    cached snapshot: the fix then fetches the model whole)."""
    why = weights_problem(os.path.join(command.working_directory(), directory), load_format, local=local)
    if why is None:
        return []
    if directory == name:
        fix = f"put the {role}'s weights into {name} (or give the directory that holds them)"
    else:
        fix = f"fetch it whole: {fetched_by(f'hf download {name}', 'weights too, as an offline launch needs')}"
    place = "" if directory == name else f" (its cached snapshot {directory})"
    return [(f"{role} '{name}'{place}: {why}: {when}", fix)]


def target_directory(command: LaunchCommand) -> tuple[str, str, bool] | None:
    """(name, directory, named by the launch) vLLM loads the target's weights from; None when it
    would download them (online, a hub id)."""
    name = path = str(command.model)
    revision = command.optional_text("revision")
    if offline(command.environ):  # EngineArgs takes the cached snapshot first, then redirects
        try:
            path = offline_model_path(name, revision, command.environ)
        except (TargetError, BadInput):  # the models finding says it
            return None
    path = redirected(path, command.environ, command.cwd)
    shown = name if path != name and not os.path.isdir(os.path.join(command.working_directory(), name)) else path
    return (shown, path, True) if os.path.isdir(os.path.join(command.working_directory(), path)) else None


def _drafter_directory(command: LaunchCommand) -> tuple[str, str, bool] | None:
    """(name, directory, named by the launch) of the drafter's weights: its directory, or offline
    the snapshot snapshot_download(local_files_only) finds under --download-dir or the hub cache."""
    spec = command.speculative_config or {}
    drafter = spec.get("model")
    if not isinstance(drafter, str) or not drafter or drafter in ("ngram", "[ngram]"):
        return None
    name = redirected(drafter, command.environ, command.cwd)
    if os.path.isdir(os.path.join(command.working_directory(), name)):
        return name, name, True
    if not offline(command.environ) or name.count("/") != 1:
        return None
    cache = command.optional_text("download-dir") or str(hf_hub_cache(command.environ))
    revision = spec.get("revision")
    try:
        snapshot = offline_snapshot(name, revision if isinstance(revision, str) else None, Path(cache))
    except (TargetError, BadInput):
        return None
    return (name, str(snapshot), False) if snapshot is not None else None
