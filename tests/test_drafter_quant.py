"""The quantization the tree builds an EAGLE-3 drafter's layers with (patchkit/launch/drafter_quant.py):
vLLM 0.11.0's llama_eagle3.py takes the target's (vllm_config.quant_config), so an unquantized drafter
under a target quantized by its checkpoint fails; 0.11.1 on builds it with its own. The trees here
hold the line each release's files have (tests/test_preflight_release.py: the real files)."""

from __future__ import annotations

from pathlib import Path

from launch_fixtures import DEEPSEEK_V3, DRAFTER, speculative_launch, write_eagle3_setup, write_model

MODELS = "vllm/model_executor/models"
TAKES_TARGETS = """
class LlamaDecoderLayer(LlamaDecoderLayer):
    def __init__(self, vllm_config, prefix="", config=None):
        super().__init__(vllm_config, prefix=prefix, config=config)
        quant_config = vllm_config.quant_config
"""
TAKES_OWN = """
from .utils import get_draft_quant_config

class LlamaDecoderLayer(LlamaDecoderLayer):
    def get_quant_config(self, vllm_config):
        return get_draft_quant_config(vllm_config)
"""
FP8 = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}


def _architecture(tmp_path: Path, drafter_file: str, target: dict, drafter: dict = DRAFTER, *extra: str):
    tree, library = write_eagle3_setup(tmp_path)
    for name, text in {f"{MODELS}/llama_eagle3.py": drafter_file, f"{MODELS}/llama.py": TAKES_TARGETS}.items():
        (tree / name).write_text(text)
    spec = {"method": "eagle3", "model": str(write_model(tmp_path / "drafter", drafter)), "num_speculative_tokens": 3}
    served = write_model(tmp_path / "target", target)
    judged = speculative_launch(tree, library, served, spec, *extra)
    return [f for f in judged["findings"] if "the target's quantization" in f["message"]]


def test_an_unquantized_drafter_under_a_checkpoint_quantized_target_fails_where_the_tree_takes_the_targets(tmp_path):
    [found] = _architecture(tmp_path, TAKES_TARGETS, {**DEEPSEEK_V3, **FP8})
    assert found["check"] == "drafter-architecture" and not found["ok"], found
    assert "builds the drafter's layers with the target's quantization (fp8, from its checkpoint)" in found["message"]
    assert "vLLM 0.11.1 or later" in found["fix"], found


def test_a_tree_that_builds_the_drafter_with_its_own_quantization_passes_it(tmp_path):
    assert _architecture(tmp_path, TAKES_OWN, {**DEEPSEEK_V3, **FP8}) == []


def test_a_target_quantized_by_the_option_alone_cannot_be_judged(tmp_path):
    [found] = _architecture(tmp_path, TAKES_TARGETS, DEEPSEEK_V3, DRAFTER, "--quantization", "fp8")
    assert found["result"] == "cannot judge" and "(--quantization fp8)" in found["message"], found


def test_a_quantized_drafter_or_an_unquantized_target_is_not_held_to_it(tmp_path):
    assert _architecture(tmp_path / "drafter", TAKES_TARGETS, {**DEEPSEEK_V3, **FP8}, {**DRAFTER, **FP8}) == []
    assert _architecture(tmp_path / "target", TAKES_TARGETS, DEEPSEEK_V3) == []
