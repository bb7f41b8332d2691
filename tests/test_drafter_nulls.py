"""review40a D12 (the class "JSON null is not absent"): a drafter config.json key given as null is kept
as None by transformers and vLLM's EAGLEConfig, not replaced by the class's default; llama.py and
llama_eagle3.py then compute with it and fail building or first running the drafter, after the
target's load. drafter-architecture now fails each null where the tree's files show that read, and
still passes the same key absent."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied, serve, write_eagle3_setup, write_model

# the reads of 0.16.0's llama.py and llama_eagle3.py (abridged) that take each key on
LLAMA = """
class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act):
        if hidden_act != "silu":
            raise ValueError(f"Unsupported activation: {hidden_act}. Only silu is supported for now.")

class LlamaAttention(nn.Module):
    def _init_rotary_emb(self):
        self.rotary_emb = get_rope(self.head_dim, max_position=self.max_position_embeddings)

class LlamaDecoderLayer(nn.Module):
    def __init__(self, config):
        max_position_embeddings = getattr(config, "max_position_embeddings", 8192)
        self.mlp = LlamaMLP(
            intermediate_size=config.intermediate_size,
            hidden_act=config.hidden_act,
        )
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
"""
EAGLE3 = """
class Eagle3LlamaForCausalLM(LlamaForCausalLM):
    def __init__(self, vllm_config):
        if hasattr(self.config, "target_hidden_size"):
            fc_input_size = self.config.target_hidden_size * 3
"""
KEYS = ("target_hidden_size", "max_position_embeddings", "intermediate_size", "rms_norm_eps", "hidden_act")
FIXED = {**DRAFTER, "num_attention_heads": 56, "num_key_value_heads": 8}


def drafter_architecture(tmp_path, config: dict, files: bool = True) -> dict:
    """The drafter-architecture finding that judged the drafter's build (not its weights')."""
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    models = tree / "vllm" / "model_executor" / "models"
    if files:
        (models / "llama.py").write_text(LLAMA)
        (models / "llama_eagle3.py").write_text(EAGLE3)
    command = serve(write_model(tmp_path / "ds", DEEPSEEK_V3), write_model(tmp_path / "dr", config))
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-architecture"]
    [built] = [f for f in found if "drafter architecture" in f["message"]]
    return built


@pytest.mark.parametrize("key", KEYS)
def test_a_drafter_key_given_as_null_fails(tmp_path, key):
    found = drafter_architecture(tmp_path, {**FIXED, key: None})
    assert not found["ok"], found
    assert f"its config.json gives {key} as null, which vLLM keeps as None" in found["message"], found
    assert "after the target's load" in found["message"], found
    assert f"set {key} in the drafter's config.json" in found["fix"], found


@pytest.mark.parametrize("key", KEYS)
def test_the_same_key_absent_is_not_failed_for_it(tmp_path, key):
    found = drafter_architecture(tmp_path, {k: v for k, v in FIXED.items() if k != key})
    assert "as null" not in found["message"], found


def test_a_null_the_tree_does_not_read_is_not_failed_for_it(tmp_path):
    found = drafter_architecture(tmp_path, {**FIXED, "rms_norm_eps": None}, files=False)
    assert "as null" not in found["message"], found


def test_a_hidden_act_of_another_kind_fails(tmp_path):
    found = drafter_architecture(tmp_path, {**FIXED, "hidden_act": 2})
    assert not found["ok"], found
    assert "its hidden_act '2' is not silu" in found["message"], found
