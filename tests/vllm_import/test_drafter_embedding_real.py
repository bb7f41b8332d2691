"""Opt-in (`make test-vllm`): an EAGLE-3 drafter narrower than its target, held to vLLM 0.16.0's own classes
on CPU: its Eagle3LlamaForCausalLM built and loaded (vllm_overlay's DRAFTER_BUILT), the target's embedding
shared by vLLM's own EagleProposer._maybe_share_embeddings (one pipeline stage), then the drafter's own
forward run: it asserts the widths agree exactly where preflight fails drafter-hidden-size (no
embed_tokens in the weights), and gets past that assert where preflight passes it (its own embed_tokens)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from launch_fixtures import eagle3_tensors, weighted_model, write_model
from vllm_overlay import DRAFTER_BUILT, TINY_DRAFTER, TINY_LLAMA, ask_vllm, drafted, speculative_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

LOADED = "        said[drafter] = None\n"
# after vLLM's own load: its proposer's sharing rule, then the drafter's forward (the assert comes first)
SHARED_RUN = DRAFTER_BUILT.replace(
    LOADED,
    """        import torch
        from types import SimpleNamespace
        from vllm.v1.spec_decode.eagle import EagleProposer
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
        with set_current_vllm_config(config):
            target = SimpleNamespace(model=SimpleNamespace(embed_tokens=VocabParallelEmbedding(1000, 256)))
        EagleProposer._maybe_share_embeddings(SimpleNamespace(model=built), target)
        try:
            built.model.forward(torch.tensor([1]), torch.tensor([0]), torch.zeros(1, built.config.hidden_size))
        except AssertionError:
            raise
        except Exception:
            pass  # past the widths' assert: the layers need a forward context, not built here (forward: uncompiled)
        said[drafter] = None
""",
)
NARROW = {**TINY_DRAFTER, "hidden_size": 128, "target_hidden_size": 256}
WEIGHTS = eagle3_tensors(128, 64, 512, 500, 256, 1000)
CASES = {"no-embedding": WEIGHTS, "own-embedding": {**WEIGHTS, "embed_tokens.weight": [1000, 128]}}


def hidden_size_finding(target: Path, drafter: Path) -> dict:
    [found] = speculative_findings(target, drafted(drafter), "drafter-hidden-size")
    return found


def test_a_narrow_drafter_fails_exactly_where_vllms_shared_embedding_asserts(tmp_path: Path):
    assert SHARED_RUN != DRAFTER_BUILT
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {name: weighted_model(tmp_path / name, NARROW, weights) for name, weights in CASES.items()}
    refused = ask_vllm(SHARED_RUN, str(target), *map(str, drafters.values()))
    assert refused[str(drafters["no-embedding"])].startswith("AssertionError"), refused
    assert refused[str(drafters["own-embedding"])] is None, refused
    for name, drafter in drafters.items():
        found = hidden_size_finding(target, drafter)
        assert found["result"] == ("pass" if refused[str(drafter)] is None else "fail"), (name, found)
