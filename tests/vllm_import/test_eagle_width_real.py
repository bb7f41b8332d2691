"""Opt-in (`make test-vllm`): the width of vLLM 0.16.0's EAGLE-1 proposer buffer (eagle.py: the draft
ModelConfig's get_hidden_size(), into which the target's hidden states are copied as they come), held
to its own EngineArgs.create_engine_config() on CPU for Llama EAGLE-1 heads: the head's hidden_size (a
target_hidden_size does not widen it; a model_type eagle config takes its inner model's). patchkit's
drafter-hidden-size finding fails exactly the heads whose width is not the target's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from launch_fixtures import write_model
from vllm_overlay import TINY_DRAFTER, TINY_LLAMA, ask_vllm, engine_configs, site_packages

from patchkit.launch.command import parse
from patchkit.launch.eagle_one import eagle1_findings
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

DRAFT = "config.speculative_config.draft_model_config"
ASK = engine_configs(
    "eagle", f"[{DRAFT}.architectures, {DRAFT}.get_hidden_size(), config.model_config.get_hidden_size()]", 300
)
HEAD = {**TINY_DRAFTER, "architectures": ["LlamaForCausalLM"]}
HEADS = {
    "narrow": {**HEAD, "hidden_size": 128, "target_hidden_size": 256},
    "inner": {"model_type": "eagle", "architectures": ["EagleLlamaForCausalLM"], "model": {**HEAD, "hidden_size": 128}},
    "same": HEAD,
}


def test_the_eagle1_buffer_is_as_wide_as_the_heads_hidden_size(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    heads = {name: write_model(tmp_path / name, config) for name, config in HEADS.items()}
    said = ask_vllm(ASK, str(target), *map(str, heads.values()))
    widths = {name: said[str(head)] for name, head in heads.items()}
    assert widths["same"] == [["EagleLlamaForCausalLM"], 256, 256], widths
    assert widths["narrow"] == [["EagleLlamaForCausalLM"], 128, 256], widths
    assert widths["inner"][1:] == [128, 256], widths
    site = site_packages(VLLM_PYTHON)
    for name, head in heads.items():
        spec = json.dumps({"method": "eagle", "model": str(head), "num_speculative_tokens": 2})
        command = parse(["vllm", "serve", str(target), "--speculative-config", spec])
        drafter = resolve_model(str(head), {}, role="drafter")
        context = LaunchContext(command, resolve_model(str(target), {}), drafter, site, None, None)
        found = [f for f in eagle1_findings(context) if f.judged]  # its weights: cannot judge statically
        narrower = widths[name][1] != widths[name][2]
        assert [f.result for f in found] == (["fail"] if narrower else []), (name, found)
        assert (
            not narrower or "copies the target's 256-wide hidden states into the drafter's 128-wide" in found[0].message
        )


def test_an_eagle1_head_whose_eagle_class_is_unregistered_is_refused_as_vllm_refuses_it(tmp_path: Path):
    """EAGLEConfig names a MistralForCausalLM head EagleMistralForCausalLM, which vLLM 0.16.0 refuses."""
    target = write_model(tmp_path / "target", TINY_LLAMA)
    head = write_model(tmp_path / "mistral", {**HEAD, "architectures": ["MistralForCausalLM"]})
    said = ask_vllm(ASK, str(target), str(head))
    assert "EagleMistralForCausalLM" in said[str(head)] and "not supported" in said[str(head)], said
    spec = json.dumps({"method": "eagle", "model": str(head), "num_speculative_tokens": 2})
    command = parse(["vllm", "serve", str(target), "--speculative-config", spec])
    drafter = resolve_model(str(head), {}, role="drafter")
    context = LaunchContext(command, resolve_model(str(target), {}), drafter, site_packages(VLLM_PYTHON), None, None)
    found = [f for f in eagle1_findings(context) if f.check == "drafter-architecture"]
    assert [f.result for f in found] == ["fail"] and "EagleMistralForCausalLM" in found[0].message, found
