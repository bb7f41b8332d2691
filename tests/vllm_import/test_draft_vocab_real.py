"""Opt-in (`make test-vllm`): vLLM 0.16.0's own EngineArgs.create_engine_config() on CPU refuses a
draft_model drafter whose vocab_size is not the target's and takes one of the same vocabulary; static
preflight's speculative-config finding (patchkit/launch/speculative.py) fails exactly the refused one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from launch_fixtures import write_model
from vllm_overlay import TINY_LLAMA, ask_vllm, drafted, engine_configs, speculative_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

ASK = engine_configs("draft_model", "None", 400)


def spec_findings(target: Path, drafter: Path) -> list[dict]:
    return speculative_findings(target, drafted(drafter, "draft_model"), "speculative-config")


def test_a_draft_model_of_another_vocabulary_is_refused_exactly_where_vllm_refuses_it(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {
        vocab: write_model(tmp_path / f"dm{vocab}", {**TINY_LLAMA, "vocab_size": vocab}) for vocab in (500, 1000)
    }
    said = ask_vllm(ASK, str(target), *map(str, drafters.values()))
    assert "should have the same vocabulary size" in (said[str(drafters[500])] or ""), said
    assert said[str(drafters[1000])] is None, said
    [found] = spec_findings(target, drafters[500])
    assert "the drafter's vocab_size 500 is not the target's 1000" in found["message"], found
    assert spec_findings(target, drafters[1000]) == []
