"""Opt-in (`make test-vllm`): an EAGLE-3 head named "EAGLE-3-..." (patchkit/launch/eagle_one.py), held
to vLLM 0.16.0's own EngineArgs.create_engine_config(): it takes method eagle from the name, refuses
LlamaForCausalLMEagle3 (EagleLlamaForCausalLMEagle3, unregistered), builds Eagle3LlamaForCausalLM as
eagle; "method": "eagle3" keeps eagle3. preflight fails the first two and passes the third."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from launch_fixtures import write_model
from vllm_overlay import ENGINE_ARGS_ON_CPU, TINY_DRAFTER, TINY_LLAMA, ask_vllm, site_packages

from patchkit.launch.command import parse
from patchkit.launch.eagle_one import eagle1_findings
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

ASK = ENGINE_ARGS_ON_CPU + textwrap.dedent("""\
    said = {}
    for name, spec in json.loads(sys.argv[2]).items():
        try:
            config = EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, speculative_config=spec).create_engine_config()
            spec_config = config.speculative_config
            said[name] = [spec_config.method, spec_config.draft_model_config.hf_config.architectures]
        except Exception as exc:
            said[name] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps(said))
    """)


def test_an_eagle3_head_named_eagle_dash_is_eagle1_to_vllm(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    heads = {
        arch: write_model(tmp_path / arch / "EAGLE-3-head", {**TINY_DRAFTER, "architectures": [arch]})
        for arch in ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
    }
    specs = {
        f"{arch}-{method}": {"model": str(head), "num_speculative_tokens": 2, **({"method": method} if method else {})}
        for arch, head in heads.items()
        for method in (None, "eagle3")
    }
    said = ask_vllm(ASK, str(target), json.dumps(specs))
    assert "EagleLlamaForCausalLMEagle3" in said["LlamaForCausalLMEagle3-None"], said  # refused
    assert said["Eagle3LlamaForCausalLM-None"] == ["eagle", ["Eagle3LlamaForCausalLM"]], said
    assert said["LlamaForCausalLMEagle3-eagle3"][0] == "eagle3" and said["Eagle3LlamaForCausalLM-eagle3"][0] == "eagle3"
    site = site_packages(VLLM_PYTHON)
    for name, spec in specs.items():
        command = parse(["vllm", "serve", str(target), "--speculative-config", json.dumps(spec)])
        context = LaunchContext(
            command, resolve_model(str(target), {}), resolve_model(spec["model"], {}, role="drafter"), site, None, None
        )
        found = eagle1_findings(context)
        if "eagle3" in name:
            assert found == [], (name, found)
        else:
            assert [f.ok for f in found] == [False] and found[0].result != "cannot judge", (name, found)
