"""Opt-in (`make test-vllm`): a Llama-layer EAGLE-3 drafter's config.json sizes given as a string, a
float or true (patchkit/launch/drafter_types.py), held to vLLM 0.16.0's own engine config, build and
load of the drafter on CPU: patchkit fails only what vLLM raises for, and says "cannot judge" of every
other it raises for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from launch_fixtures import write_model, write_weights
from vllm_overlay import DRAFTER_BUILT, TINY_DRAFTER, TINY_LLAMA, TINY_WEIGHTS, ask_vllm

from patchkit.launch.drafter_types import SIZES, boolean_unjudged, mistyped

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

BASE = {**TINY_DRAFTER, "target_hidden_size": 256, "head_dim": 64}
# each drafter's engine config made inside the try: a size vLLM's config reading refuses is its answer too
BUILT = (
    DRAFTER_BUILT.replace("    spec = {", "    try:\n        spec = {")
    .replace("    config = EngineArgs(", "        config = EngineArgs(")
    .replace("    try:\n        with", "        with")
)


def test_mistyped_sizes_fail_only_where_vllm_raises(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    configs = {}
    for key in SIZES:
        for kind, value in (("str", str(BASE[key])), ("float", float(BASE[key])), ("true", True)):
            configs[f"{key}-{kind}"] = {**BASE, key: value}
    drafters = {name: write_model(tmp_path / name, config) for name, config in configs.items()}
    for drafter in drafters.values():
        write_weights(drafter, TINY_WEIGHTS)
    refused = ask_vllm(BUILT, str(target), *map(str, drafters.values()))
    for name, config in configs.items():
        raised = refused[str(drafters[name])]
        if mistyped(config) is not None:
            assert raised is not None, (name, "failed, but vLLM builds and loads it")
        elif raised is not None:
            assert boolean_unjudged(config) is not None, (name, raised)
    assert sum(mistyped(c) is not None for c in configs.values()) >= 20  # the strings and floats, at least
