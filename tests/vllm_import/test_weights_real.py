"""Opt-in (`make test-vllm`): patchkit's weight-file rule (patchkit/launch/weights.py, review34 F8) against
the real vLLM's DefaultModelLoader._prepare_weights on the layouts of tests/test_launch_weights.py: a
layout patchkit passes, vLLM's loader takes whole (every file there, every shard its index names); a
layout patchkit fails, vLLM refuses, or takes only part of it (a shard missing, a link to nothing:
its load then fails, or the strict check finds weights not loaded). Each file the loader takes is then
opened as its iterator opens it (safetensors.safe_open, or torch.load(weights_only=True)): review35 N6's
Git LFS pointers, empty, cut-short and misnamed files fail there, before any tensor is read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from launch_fixtures import INDEX, LAYOUTS, write_layout
from vllm_overlay import ask_vllm

from patchkit.launch.weights import weights_problem

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

PREPARE = """
import json, sys
from vllm.config import LoadConfig
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
said = {}
for directory, load_format in json.loads(sys.argv[1]):
    try:
        _, files, use_safetensors = DefaultModelLoader(LoadConfig(load_format=load_format))._prepare_weights(
            directory, None, True, None
        )
        said[directory] = sorted(files)
        if load_format == "npcache":  # it reads the .bin files only while no numpy dump is there
            from vllm.model_executor.model_loader.weight_utils import np_cache_weights_iterator
            list(np_cache_weights_iterator(directory, None, directory, files, False))
            files = []
        for name in files:  # as safetensors_weights_iterator and pt_weights_iterator open each file
            if use_safetensors:
                from safetensors import safe_open
                with safe_open(name, framework="pt") as f:
                    list(f.keys())
            else:
                import torch
                torch.load(name, map_location="cpu", weights_only=True)
    except Exception as exc:
        said[directory] = f"{type(exc).__name__}: {exc}"
print(json.dumps(said))
"""


def taken_whole(directory: Path, files: list[str]) -> bool:
    """Whether the loader's files are all there and, safetensors files, cover every shard the index names."""
    if not files or not all(os.path.exists(f) for f in files):
        return False
    index = directory / INDEX
    if not index.is_file() or not all(f.endswith(".safetensors") for f in files):
        return True
    try:
        named = {str(directory / shard) for shard in json.loads(index.read_text())["weight_map"].values()}
    except (ValueError, KeyError):
        return False
    return named <= set(files)


def test_patchkits_weight_rule_agrees_with_vllms_loader(tmp_path):
    asked = []
    for name, (files, load_format, _) in LAYOUTS.items():
        asked.append((str(write_layout(tmp_path / name, files)), load_format))
    said = ask_vllm(PREPARE, json.dumps(asked))
    assert isinstance(said, dict)
    disagree = []
    for directory, load_format in asked:
        vllm_loads = isinstance(said[directory], list) and taken_whole(Path(directory), said[directory])
        ours = weights_problem(directory, load_format)
        if (ours is None) is not vllm_loads:
            disagree.append(f"{Path(directory).name}: vLLM {said[directory]!r}, patchkit {ours!r}")
    assert not disagree, "\n".join(disagree)
