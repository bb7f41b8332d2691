"""Rules vLLM's EAGLE-3 drafter layers (llama.py's) enforce only when built, after the target's load
(each held to vLLM 0.16.0 in tests/vllm_import/test_drafter_layer_rules_real.py); preflight said ok.
review39 C7: LlamaMLP splits intermediate_size over the -tp group (its column-parallel linear asserts
that -tp divides it). review39 C5: LlamaAttention's get_rope raises for a RoPE type it has no branch for.
drafter-architecture now fails each, where the tree shows the rule."""

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


# get_rope as 0.16.0 has it (abridged): a branch per RoPE type, the rest raise
GET_ROPE = """
def get_rope(head_size, max_position, is_neox_style=True, rope_parameters=None, dtype=None):
    rope_parameters = rope_parameters or {}
    scaling_type = rope_parameters.get("rope_type", "default")
    if scaling_type == "default":
        pass
    elif scaling_type == "yarn":
        pass
    elif scaling_type in ["deepseek_yarn", "deepseek_llama_scaling"]:
        pass
    elif scaling_type == "longrope":
        pass
    else:
        raise ValueError(f"Unknown RoPE scaling type {scaling_type}")
"""


def rope_verdict(tmp_path, get_rope: str | None, change: dict) -> dict:
    """drafter-architecture for a drafter with `change` in its config.json, on a tree with `get_rope`."""
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    if get_rope is not None:
        rope = tree / "vllm" / "model_executor" / "layers" / "rotary_embedding" / "__init__.py"
        rope.parent.mkdir(parents=True, exist_ok=True)
        rope.write_text(get_rope)
    drafter = write_model(tmp_path / "dr", {**DRAFTER, **change})
    command = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), drafter)
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-architecture"]
    return found


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        ({"rope_scaling": {"rope_type": "longrope_v2", "factor": 2.0}}, "longrope_v2"),
        ({"rope_scaling": {"type": "ntk\u202e", "factor": 2.0}}, "ntk\\u202e"),  # the legacy key; shown escaped
        ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, "llama3"),  # not in this tree's get_rope
    ],
)
def test_a_drafter_rope_type_the_trees_get_rope_lacks_fails(tmp_path, change, shown):
    """review39 C5: vLLM's get_rope raises "Unknown RoPE scaling type" building the drafter's attention."""
    found = rope_verdict(tmp_path, GET_ROPE, change)
    assert not found["ok"], found
    assert f"its RoPE type '{shown}' is none the tree's get_rope builds" in found["message"], found
    assert "after the target's load" in found["message"], found
    assert found["fix"].endswith("(default, yarn, deepseek_yarn, deepseek_llama_scaling, longrope)"), found


@pytest.mark.parametrize(
    ("get_rope", "change"),
    [
        (GET_ROPE, {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
        (GET_ROPE, {"rope_scaling": {"type": "su", "short_factor": [1.0]}}),  # vLLM renames it longrope
        (GET_ROPE, {"rope_scaling": {"rope_type": "deepseek_llama_scaling"}}),
        (GET_ROPE, {}),  # none: default
        (GET_ROPE, {"rope_parameters": {"full_attention": {"rope_type": "x"}}}),  # per layer type: not judged
        ("def get_rope(*args):\n    return None\n", {"rope_scaling": {"rope_type": "longrope_v2"}}),  # no branches
        (None, {"rope_scaling": {"rope_type": "longrope_v2"}}),  # no get_rope in the tree: not judged
    ],
)
def test_a_drafter_rope_type_the_trees_get_rope_builds_passes(tmp_path, get_rope, change):
    assert rope_verdict(tmp_path, get_rope, change)["ok"]
