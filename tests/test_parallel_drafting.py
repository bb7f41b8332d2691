"""An EAGLE-3 launch with parallel_drafting (0.16 on): vLLM's llama_eagle3.py load_weights raises
ValueError ("mask_hidden not found in weights") for a drafter whose weights hold no mask_hidden, after
the target's load; one of another size fails its copy there. preflight said ok; the drafter-architecture
finding now fails it where the tree's llama_eagle3.py requires the tensor (held to vLLM 0.16.0's own
drafter in tests/vllm_import/test_parallel_drafting_real.py)."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process, run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model, write_weights

MODELS = "vllm/model_executor/models"
# llama_eagle3.py's layout (0.16.0, abridged): its renames, and load_weights' rule for mask_hidden
EAGLE3 = """
qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size
fc_input_size = self.config.hidden_size * 3
name = name.replace("midlayer.", "layers.0.")
if "d2t" in name:
if "t2d" in name:
elif "lm_head" not in name:
    name = "model." + name
torch.zeros(1, (3 if self.model.use_aux_hidden_state else 1) * self.config.hidden_size)
raise ValueError("mask_hidden not found in weights but model is configured for parallel drafting.")
"""
SMALL = {**DRAFTER, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
SMALL |= {"intermediate_size": 128, "draft_vocab_size": 512}
WEIGHTS = {
    "d2t": [512],
    "lm_head.weight": [512, 64],
    "fc.weight": [64, 3 * 7168],
    "norm.weight": [64],
    "midlayer.self_attn.q_proj.weight": [64, 128],
    "midlayer.self_attn.k_proj.weight": [32, 128],
    "midlayer.self_attn.v_proj.weight": [32, 128],
    "midlayer.self_attn.o_proj.weight": [64, 64],
    "midlayer.mlp.gate_proj.weight": [128, 64],
    "midlayer.mlp.up_proj.weight": [128, 64],
    "midlayer.mlp.down_proj.weight": [64, 128],
    "midlayer.input_layernorm.weight": [64],
    "midlayer.post_attention_layernorm.weight": [64],
    "midlayer.hidden_norm.weight": [64],
}


@pytest.fixture
def tree(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / MODELS / "llama_eagle3.py").write_text(EAGLE3)
    return tree, library


def drafter_finding(tmp_path, tree, weights: dict, spec: dict, *extra: str, config=None) -> dict:
    """The drafter-architecture finding of a preflight of a DeepSeek-V3 target with a small EAGLE-3
    drafter of `weights`, `spec` added to the speculative config."""
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", {**SMALL, **(config or {})})
    write_weights(drafter, weights)
    command = serve(target, drafter, *extra)
    given = json.loads(command[command.index("--speculative-config") + 1])
    command[command.index("--speculative-config") + 1] = json.dumps({**given, **spec})
    done = run_cli_in_process(
        "preflight", "--target", tree[0], "--patches", tree[1], "--format", "json", "--no-import", "--", *command
    )
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-architecture"]
    assert found and done.returncode in (0, 1), done.stdout + done.stderr
    return found[0]


@pytest.mark.parametrize("asked", [True, "true", 1, "on"])
def test_parallel_drafting_without_mask_hidden_fails(tmp_path, tree, asked):
    found = drafter_finding(tmp_path, tree, WEIGHTS, {"parallel_drafting": asked})
    assert found["result"] == "fail", found
    assert "parallel_drafting needs a mask_hidden tensor in its weights" in found["message"], found
    assert "after the target's load" in found["message"], found
    assert found["fix"].startswith("drop parallel_drafting from --speculative-config"), found


@pytest.mark.parametrize(
    ("weights", "spec", "config"),
    [
        ({**WEIGHTS, "mask_hidden": [1, 3 * 64]}, {"parallel_drafting": True}, None),
        (
            {**WEIGHTS, "mask_hidden": [64]},
            {"parallel_drafting": True},
            {"eagle_config": {"use_aux_hidden_state": False}},
        ),
        (WEIGHTS, {"parallel_drafting": False}, None),
        (WEIGHTS, {}, None),
    ],
)
def test_a_mask_hidden_of_the_buffers_size_or_no_parallel_drafting_passes(tmp_path, tree, weights, spec, config):
    assert drafter_finding(tmp_path, tree, weights, spec, config=config)["result"] == "pass"


def test_a_mask_hidden_of_another_size_fails(tmp_path, tree):
    found = drafter_finding(tmp_path, tree, {**WEIGHTS, "mask_hidden": [1, 64]}, {"parallel_drafting": True})
    assert found["result"] == "fail", found
    assert (
        "its weights' mask_hidden is [1, 64] (model.safetensors), where parallel_drafting takes 192" in found["message"]
    ), found


def test_a_tree_whose_drafter_does_not_require_the_mask_is_not_held_to_it(tmp_path, tree):
    (tree[0] / MODELS / "llama_eagle3.py").write_text(EAGLE3.replace("mask_hidden not found", "no mask"))
    assert drafter_finding(tmp_path, tree, WEIGHTS, {"parallel_drafting": True})["result"] == "pass"
