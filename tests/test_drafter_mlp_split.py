"""review39 C7: the EAGLE-3 drafter's LlamaMLP (llama.py) splits intermediate_size over the -tp group:
its MergedColumnParallelLinear asserts that -tp divides it (checked with vLLM 0.16.0's own LlamaMLP in
tests/vllm_import/test_drafter_mlp_split_real.py), after the target's load. preflight said ok; now
drafter-architecture fails it, where the tree's LlamaMLP shows the split."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied, serve, write_eagle3_setup, write_model

# llama.py's LlamaMLP as 0.16.0 builds it (the split), and one that builds no tensor-parallel linear
LLAMA_MLP_SPLIT = """
class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act, quant_config=None, disable_tp=False):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            input_size=hidden_size, output_sizes=[intermediate_size] * 2, disable_tp=disable_tp
        )
        self.down_proj = RowParallelLinear(input_size=intermediate_size, output_size=hidden_size)
        if hidden_act != "silu":
            raise ValueError(f"Unsupported activation: {hidden_act}. Only silu is supported for now.")
"""
LLAMA_MLP_WHOLE = """
class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size)
"""


def drafter_architecture(tmp_path, llama: str | None, size: int | None, tp: int) -> dict:
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    if llama is not None:
        (tree / "vllm" / "model_executor" / "models" / "llama.py").write_text(llama)
    config = {**DRAFTER, "num_attention_heads": 64, "num_key_value_heads": 16}
    drafter = write_model(tmp_path / "dr", {**config, "intermediate_size": size} if size else config)
    command = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), drafter, "-tp", str(tp))
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-architecture"]
    return found


@pytest.mark.parametrize(("size", "tp"), [(18436, 8), (11000, 16), (7, 2)])
def test_a_drafter_intermediate_size_the_tp_does_not_divide_fails(tmp_path, size, tp):
    found = drafter_architecture(tmp_path, LLAMA_MLP_SPLIT, size, tp)
    assert not found["ok"], found
    assert f"its intermediate_size {size} does not divide by -tp {tp}" in found["message"], found
    assert "after the target's load" in found["message"], found
    assert f"-tp that divides the drafter's intermediate_size {size}" in found["fix"], found


@pytest.mark.parametrize(
    ("llama", "size", "tp"),
    [
        (LLAMA_MLP_SPLIT, 18432, 8),  # divides
        (LLAMA_MLP_SPLIT, 18436, 1),  # no split
        (LLAMA_MLP_SPLIT, None, 8),  # absent: LlamaConfig's default 11008, which 8 divides
        (LLAMA_MLP_WHOLE, 18436, 8),  # the tree's LlamaMLP splits nothing
        (None, 18436, 8),  # no llama.py in the tree: not judged
    ],
)
def test_a_drafter_mlp_that_splits_or_is_not_split_passes(tmp_path, llama, size, tp):
    found = drafter_architecture(tmp_path, llama, size, tp)
    assert found["ok"], found
