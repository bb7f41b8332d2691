"""Opt-in (`make test-vllm`): the drafter-architecture rule on intermediate_size (review39 C7) holds a
drafter exactly where the real vLLM's LlamaMLP (the EAGLE-3 drafter's MLP) refuses it: built on CPU with
the tensor-parallel size given to vLLM's linear layers, it asserts at the split, or gets past it."""

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
