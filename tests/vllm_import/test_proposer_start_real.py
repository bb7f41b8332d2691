"""Opt-in (`make test-vllm`): what vLLM 0.16.0's proposer refuses at the model runner's start, held to its
own code on CPU: SpecDecodeBaseProposer._init_parallel_drafting_params on the draft config vLLM builds
(a drafter config.json with and without pard_token), and SpeculativeConfig._verify_and_get_draft_tp
(which takes draft_tensor_parallel_size 1 under -tp 8) against DraftModelProposer._raise_if_draft_tp_mismatch
(which refuses it). preflight (on the real 0.16.0 tree) fails speculative-config exactly where vLLM raises."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from launch_fixtures import write_model
from vllm_overlay import TINY_DRAFTER, TINY_LLAMA, ask_vllm, drafted, speculative_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

ASKED = """
import json, sys, tempfile
from types import SimpleNamespace as S
from patchkit._target.engine_config import _force_cpu_platform_when_none
import vllm
_force_cpu_platform_when_none()
from vllm.config import SpeculativeConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm.v1.spec_decode.eagle import EagleProposer
said = {}
for drafter in sys.argv[2:]:
    spec = {"method": "eagle3", "model": drafter, "num_speculative_tokens": 2, "parallel_drafting": True}
    config = EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, speculative_config=spec).create_engine_config()
    try:
        proposer = S(draft_model_config=config.speculative_config.draft_model_config, pass_hidden_states_to_model=False)
        EagleProposer._init_parallel_drafting_params(proposer)
        said[drafter] = None
    except Exception as exc:
        said[drafter] = f"{type(exc).__name__}: {exc}"
taken = SpeculativeConfig._verify_and_get_draft_tp(S(tensor_parallel_size=8), 1, S(model_type="llama"))
parallel = S(target_parallel_config=S(tensor_parallel_size=8), draft_parallel_config=S(tensor_parallel_size=taken))
try:
    DraftModelProposer._raise_if_draft_tp_mismatch(S(speculative_config=parallel))
    said["tp"] = None
except ValueError as exc:
    said["tp"] = f"ValueError: {exc}"
print(json.dumps(said))
"""


def spec_findings(target: Path, spec: dict, *options: str) -> list[dict]:
    return speculative_findings(target, spec, "speculative-config", *options)


def test_the_proposers_start_refusals_are_failed_exactly_where_vllm_raises(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {name: write_model(tmp_path / name, config) for name, config in (
        ("no-token", TINY_DRAFTER), ("token", {**TINY_DRAFTER, "pard_token": 0}))}  # fmt: skip
    said = ask_vllm(ASKED, str(target), *map(str, drafters.values()))
    assert "pard_token" in said[str(drafters["no-token"])] and said[str(drafters["token"])] is None, said
    assert said["tp"] is not None and said["tp"].startswith("ValueError"), said
    for name, drafter in drafters.items():
        found = [f["result"] for f in spec_findings(target, drafted(drafter, parallel_drafting=True))]
        assert found == ([] if said[str(drafter)] is None else ["fail"]), (name, found)
    spec = {"method": "draft_model", "model": str(target), "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}
    assert [f["result"] for f in spec_findings(target, spec, "-tp", "8")] == ["fail"]
    assert spec_findings(target, {**spec, "draft_tensor_parallel_size": 8}, "-tp", "8") == []


# DraftModelProposer.load_model's first step (after the target's load), for each drafter given "quantization"
DRAFT_CONFIG_BUILT = """
import json, sys
from patchkit._target.engine_config import _force_cpu_platform_when_none
import vllm
_force_cpu_platform_when_none()
from vllm.engine.arg_utils import EngineArgs
from vllm.v1.spec_decode.utils import create_vllm_config_for_draft_model
said = {}
for drafter in sys.argv[2:]:
    spec = {"method": "draft_model", "model": drafter, "num_speculative_tokens": 2, "quantization": "fp8"}
    config = EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, speculative_config=spec).create_engine_config()
    try:
        create_vllm_config_for_draft_model(config)
        said[drafter] = None
    except Exception as exc:
        said[drafter] = f"{type(exc).__name__}: {exc}"
print(json.dumps(said))
"""


def test_a_draft_model_quantization_its_config_lacks_fails_exactly_where_vllm_raises(tmp_path: Path):
    """review42a R5 for draft_model: 0.16.0's get_quant_config calls .get on the draft config's hf_overrides
    (a function) when the drafter's config.json holds no quantization_config; one that holds it builds."""
    target = write_model(tmp_path / "target", TINY_LLAMA)
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    drafters = {name: write_model(tmp_path / name, config) for name, config in (
        ("plain", TINY_LLAMA), ("own", {**TINY_LLAMA, "quantization_config": fp8}))}  # fmt: skip
    said = ask_vllm(DRAFT_CONFIG_BUILT, str(target), *map(str, drafters.values()))
    assert "'function' object has no attribute 'get'" in said[str(drafters["plain"])], said
    assert said[str(drafters["own"])] is None, said
    for name, drafter in drafters.items():
        spec = {"method": "draft_model", "model": str(drafter), "num_speculative_tokens": 2, "quantization": "fp8"}
        found = [f for f in spec_findings(target, spec) if "hf_overrides" in f["message"]]
        assert [f["result"] for f in found] == ([] if said[str(drafter)] is None else ["fail"]), (name, found)
