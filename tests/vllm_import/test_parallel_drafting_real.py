"""Opt-in (`make test-vllm`): an EAGLE-3 drafter under parallel_drafting, held to vLLM 0.16.0's own drafter
built and loaded on CPU (vllm_overlay's DRAFTER_BUILT with the speculative config's parallel_drafting):
preflight fails drafter-architecture exactly where vLLM's load_weights raises (no mask_hidden, or one of
another size), and passes the drafter whose mask_hidden it takes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from launch_fixtures import weighted_model, write_model
from vllm_overlay import DRAFTER_BUILT, TINY_DRAFTER, TINY_LLAMA, TINY_WEIGHTS, ask_vllm, drafted, speculative_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

PARALLEL_BUILT = DRAFTER_BUILT.replace(
    '"num_speculative_tokens": 2}', '"num_speculative_tokens": 2, "parallel_drafting": True}'
)
CASES = {
    "no-mask": TINY_WEIGHTS,
    "mask": {**TINY_WEIGHTS, "mask_hidden": [1, 3 * 256]},
    "short-mask": {**TINY_WEIGHTS, "mask_hidden": [1, 256]},
}


def drafter_findings(target: Path, drafter: Path) -> list[dict]:
    return speculative_findings(target, drafted(drafter, parallel_drafting=True), "drafter-architecture")


def test_parallel_drafting_fails_exactly_where_vllms_drafter_load_raises(tmp_path: Path):
    assert PARALLEL_BUILT != DRAFTER_BUILT
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {name: weighted_model(tmp_path / name, TINY_DRAFTER, weights) for name, weights in CASES.items()}
    refused = ask_vllm(PARALLEL_BUILT, str(target), *map(str, drafters.values()))
    assert "mask_hidden not found in weights" in refused[str(drafters["no-mask"])], refused
    assert refused[str(drafters["mask"])] is None and refused[str(drafters["short-mask"])], refused
    for name, drafter in drafters.items():
        found = drafter_findings(target, drafter)
        said = refused[str(drafter)]
        assert [f["result"] for f in found] == (["pass"] if said is None else ["fail"]), (name, said, found)
