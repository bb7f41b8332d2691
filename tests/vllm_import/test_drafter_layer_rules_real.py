"""Opt-in (`make test-vllm`): drafter-architecture's rules on the drafter's layers hold a drafter exactly
where the real vLLM refuses it. intermediate_size (review39 C7): vLLM's LlamaMLP built on CPU with the
tensor-parallel size given to its linear layers asserts at the split, or gets past it. RoPE type (C5):
the types read from the tree's get_rope are the ones it builds, and no other."""

from __future__ import annotations

import json
import os

import pytest
from vllm_overlay import ask_vllm, site_packages

from patchkit.launch.engine import _load_script
from patchkit.series.library import default_root

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

# vLLM's LlamaMLP built with each (intermediate_size, tp): "split" when its linears took the split (the
# next step wants the process group, which a CPU test has none of), "refused" at the split's assert
BUILD = """
import json, sys, traceback
from unittest import mock
import vllm.model_executor.layers.linear as linear
from vllm.model_executor.models.llama import LlamaMLP
said = []
for size, tp in json.loads(sys.argv[1]):
    with mock.patch.object(linear, "get_tensor_model_parallel_world_size", return_value=tp), \\
            mock.patch.object(linear, "get_tensor_model_parallel_rank", return_value=0):
        try:
            LlamaMLP(64, size, "silu")
            said.append("built")
        except AssertionError as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            said.append("refused" if "tp_size" in where.line or "divisible" in str(exc) else "split")
print(json.dumps(said))
"""
CASES = [(18436, 8), (18432, 8), (11000, 16), (11008, 16), (7, 2), (18436, 1)]


def test_the_rule_refuses_exactly_the_sizes_vllms_llama_mlp_refuses():
    checks = _load_script(default_root() / "eagle3" / "launch.py")
    llama = (site_packages(VLLM_PYTHON) / checks.LLAMA).read_bytes()
    assert checks._mlp_split(llama)  # the tree's LlamaMLP shows the split the rule reads
    said = ask_vllm(BUILD, json.dumps(CASES))
    assert isinstance(said, list) and "built" not in said[:-1], said
    assert [s == "refused" for s in said] == [tp > 1 and size % tp != 0 for size, tp in CASES], said


# vLLM's get_rope asked with each RoPE type: whether it raises for the type itself ("Unknown RoPE scaling
# type"); a known type missing its own parameters raises otherwise, which is not the rule's to judge
GET_ROPE = """
import json, sys, torch
from vllm.model_executor.layers.rotary_embedding import get_rope
said = []
for kind in json.loads(sys.argv[1]):
    try:
        get_rope(128, 4096, True, {"rope_type": kind, "factor": 2.0}, torch.float32)
        said.append(True)
    except Exception as exc:
        said.append(not str(exc).startswith("Unknown RoPE scaling type"))
print(json.dumps(said))
"""


def test_the_rope_types_read_are_the_ones_vllms_get_rope_builds():
    checks = _load_script(default_root() / "eagle3" / "launch.py")
    known = checks._rope_types((site_packages(VLLM_PYTHON) / checks.ROPE).read_bytes())
    others = ["longrope_v2", "su", "mrope", "dynamic_ntk", "Yarn", ""]
    assert ask_vllm(GET_ROPE, json.dumps(known + others)) == [True] * len(known) + [False] * len(others)
