"""The drafter vLLM builds for --speculative-config's mtp method from the target's own config and
checkpoint, once the target has loaded (patchkit/launch/mtp.py): an unquantized checkpoint without
its MTP layers' weights, a config without num_nextn_predict_layers, or with 0 (Kimi-K2's), and a
num_speculative_tokens its MTP layers do not divide are failed; DeepSeek-V3's own layout passes.
The tree's rules are files in vLLM's shape, written here (tests/vllm_import/test_mtp_real.py holds
the reading to the real vLLM's own functions)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli_judged
from launch_fixtures import DEEPSEEK_V3, SPEC, write_eagle3_setup, write_model, write_weights

RULES = """
class SpeculativeConfig:
    @staticmethod
    def hf_config_override(hf_config):
        initial_architecture = hf_config.architectures[0]
        if hf_config.model_type in ("deepseek_v3", "deepseek_v32"):
            hf_config.model_type = "deepseek_mtp"
        if hf_config.model_type == "deepseek_mtp":
            n_predict = getattr(hf_config, "num_nextn_predict_layers", None)
            hf_config.update({"n_predict": n_predict, "architectures": ["DeepSeekMTPModel"]})
        if hf_config.model_type == "qwen3_next":
            hf_config.model_type = "qwen3_next_mtp"
            n_predict = getattr(hf_config, "num_nextn_predict_layers", None)
            hf_config.update({"n_predict": n_predict, "architectures": ["Qwen3NextMTP"]})
        return hf_config
"""
FILES = {
    "vllm/model_executor/models/deepseek_mtp.py": """
from .deepseek_v2 import DeepseekV2DecoderLayer, get_spec_layer_idx_from_weight_name

class DeepSeekMultiTokenPredictor:
    def __init__(self, config):
        self.mtp_start_layer_idx = config.num_hidden_layers
        self.num_mtp_layers = config.num_nextn_predict_layers
""",
    "vllm/model_executor/models/deepseek_v2.py": """
def get_spec_layer_idx_from_weight_name(config, weight_name):
    if hasattr(config, "num_nextn_predict_layers") and config.num_nextn_predict_layers > 0:
        layer_idx = config.num_hidden_layers
        for i in range(config.num_nextn_predict_layers):
            if weight_name.startswith(f"model.layers.{layer_idx + i}."):
                return layer_idx + i
    return None
""",
    "vllm/model_executor/model_loader/default_loader.py": """
def load_weights(model, model_config, loaded_weights, weights_to_load):
    if model_config.quantization is None and loaded_weights is not None:
        if weights_to_load - loaded_weights:
            raise ValueError("Following weights were not initialized from checkpoint")
""",
}
V3 = {**DEEPSEEK_V3, "num_nextn_predict_layers": 1}  # DeepSeek-V3's own: one MTP layer, model.layers.61.*
TARGET_WEIGHTS = {"model.embed_tokens.weight": [8, 2], "model.layers.60.mlp.gate.weight": [2, 2]}
MTP_WEIGHTS = {"model.layers.61.eh_proj.weight": [2, 4], "model.layers.61.enorm.weight": [2]}


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    tree, library = write_eagle3_setup(tmp_path)
    with (tree / SPEC).open("a") as spec:
        spec.write(RULES)
    for name, text in FILES.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree, library


def _mtp(tmp_path: Path, config: dict, weights: dict, spec: dict | None = None, *extra: str) -> list[dict]:
    """The models and speculative-config findings of a `vllm serve` of a model with `config` and
    `weights`, its own MTP layers drafting (`spec`: the --speculative-config)."""
    tree, library = _tree(tmp_path)
    model = write_model(tmp_path / "model", config)
    write_weights(model, weights)
    spec = spec or {"method": "mtp", "num_speculative_tokens": 1}
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model), "--speculative-config", json.dumps(spec), *extra,
    )  # fmt: skip
    found = json.loads(done.stdout)["findings"]
    return [f for f in found if any(word in f["message"] for word in ("MTP layer", "mtp drafter", "multiple of"))]


def test_an_unquantized_checkpoint_without_its_mtp_layers_weights_fails(tmp_path):
    found = _mtp(tmp_path, V3, TARGET_WEIGHTS)
    assert [f["ok"] for f in found] == [False], found
    assert "holds no weights of its MTP layer (model.layers.61.*)" in found[0]["message"], found
    assert "fetch the whole checkpoint" in found[0]["fix"], found


def test_deepseek_v3s_own_layout_passes(tmp_path):
    found = _mtp(
        tmp_path, V3, {**TARGET_WEIGHTS, **MTP_WEIGHTS}, {"method": "deepseek_mtp", "num_speculative_tokens": 3}
    )
    assert [f["ok"] for f in found] == [True], found
    assert "model.layers.61.*" in found[0]["message"], found


def test_a_quantized_checkpoint_is_loaded_without_the_strict_check(tmp_path):
    quantized = {**V3, "quantization_config": {"quant_method": "fp8"}}
    assert _mtp(tmp_path / "config", quantized, TARGET_WEIGHTS) == []
    assert _mtp(tmp_path / "option", V3, TARGET_WEIGHTS, None, "--quantization", "fp8") == []


def test_a_checkpoint_quantized_as_vllm_reads_it_is_loaded_without_the_strict_check(tmp_path):
    """vLLM's ModelConfig takes a compression_config (compressed-tensors' older key), a text_config's
    quantization_config, or ModelOpt's hf_quant_config.json as the model's quantization too."""
    compressed = {**V3, "compression_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}}
    assert _mtp(tmp_path / "compression", compressed, TARGET_WEIGHTS) == []
    text = {**V3, "text_config": {"quantization_config": {"quant_method": "fp8"}}}
    assert _mtp(tmp_path / "text", text, TARGET_WEIGHTS) == []


def test_the_weights_of_two_mtp_layers_are_looked_for_from_the_last_layer_on(tmp_path):
    two = {**V3, "num_nextn_predict_layers": 2}
    found = _mtp(tmp_path / "second", two, {**TARGET_WEIGHTS, "model.layers.62.enorm.weight": [2]})
    assert [f["ok"] for f in found] == [True], found
    found = _mtp(tmp_path / "past", two, {**TARGET_WEIGHTS, "model.layers.63.enorm.weight": [2]})
    assert [f["ok"] for f in found] == [False], found
    assert "(model.layers.61.* to model.layers.62.*)" in found[0]["message"], found


def test_a_config_without_num_nextn_predict_layers_fails(tmp_path):
    config = dict(DEEPSEEK_V3)
    found = _mtp(tmp_path, config, {**TARGET_WEIGHTS, **MTP_WEIGHTS})
    assert [f["ok"] for f in found] == [False], found
    assert "config has no num_nextn_predict_layers" in found[0]["message"], found
    assert "add num_nextn_predict_layers to its config.json" in found[0]["fix"], found


def test_a_model_whose_config_says_it_has_no_mtp_layers_fails(tmp_path):
    kimi_k2 = {**DEEPSEEK_V3, "model_type": "kimi_k2", "num_nextn_predict_layers": 0}  # Kimi-K2's own config
    found = _mtp(tmp_path, kimi_k2, TARGET_WEIGHTS, {"method": "mtp", "num_speculative_tokens": 3})
    assert [(f["check"], f["ok"]) for f in found] == [("speculative-config", False)], found
    assert "has no MTP layers (num_nextn_predict_layers is 0)" in found[0]["message"], found


def test_the_checkpoint_named_as_the_drafter_is_held_the_same(tmp_path):
    spec = {"method": "mtp", "model": str(tmp_path / "model"), "num_speculative_tokens": 1}
    found = _mtp(tmp_path, V3, TARGET_WEIGHTS, spec)
    assert [f["ok"] for f in found] == [False], found
    assert "holds no weights of its MTP layer (model.layers.61.*)" in found[0]["message"], found


def test_hf_overrides_do_not_reach_the_drafters_config(tmp_path):
    """vLLM's draft ModelConfig reads config.json with hf_config_override alone: --hf-overrides
    give the target a num_nextn_predict_layers, never the drafter."""
    overrides = json.dumps({"num_nextn_predict_layers": 1})
    found = _mtp(tmp_path, dict(DEEPSEEK_V3), {**TARGET_WEIGHTS, **MTP_WEIGHTS}, None, "--hf-overrides", overrides)
    assert [f["ok"] for f in found] == [False], found
    assert "config has no num_nextn_predict_layers" in found[0]["message"], found


def test_a_config_class_of_the_models_own_code_cannot_be_judged(tmp_path):
    config = {**DEEPSEEK_V3, "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}}
    found = _mtp(tmp_path, config, TARGET_WEIGHTS, None, "--trust-remote-code")
    assert [f["result"] for f in found] == ["cannot judge"], found
    assert "its own config class may give one" in found[0]["message"], found


def test_a_tree_without_the_rules_cannot_judge_and_never_fails(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)  # its speculative.py has no hf_config_override
    model = write_model(tmp_path / "model", V3)
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 1})
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model), "--speculative-config", spec,
    )  # fmt: skip
    found = [f for f in json.loads(done.stdout)["findings"] if "mtp drafter" in f["message"]]
    assert [f["result"] for f in found] == ["cannot judge"], found
    assert "hf_config_override" in found[0]["message"], found


def test_another_models_mtp_layers_are_left_to_vllms_own_validation(tmp_path):
    qwen3_next = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 48}
    assert _mtp(tmp_path, {**qwen3_next, "num_nextn_predict_layers": 1}, TARGET_WEIGHTS) == []


def test_a_token_count_the_mtp_layers_do_not_divide_is_refused_statically(tmp_path):
    """vLLM's SpeculativeConfig refuses it at start ("num_speculative_tokens:3 must be divisible by
    n_predict=2"): said without --python, with the counts it takes."""
    two = {**V3, "num_nextn_predict_layers": 2}
    weights = {**TARGET_WEIGHTS, **MTP_WEIGHTS, "model.layers.62.enorm.weight": [2]}
    found = _mtp(tmp_path / "three", two, weights, {"method": "mtp", "num_speculative_tokens": 3})
    refused = [f for f in found if f["check"] == "speculative-config"]
    assert [f["ok"] for f in refused] == [False], found
    assert refused[0]["message"] == "vLLM refuses num_speculative_tokens 3: not a multiple of the model's 2 MTP layers"
    assert refused[0]["fix"] == 'give "num_speculative_tokens" 2 or 4', refused
    for tokens in (1, 2, 4):
        spec = {"method": "mtp", "num_speculative_tokens": tokens}
        assert [f["ok"] for f in _mtp(tmp_path / str(tokens), two, weights, spec)] == [True], tokens


def test_the_token_count_rule_holds_for_every_mtp_model_the_tree_names(tmp_path):
    qwen3_next = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_nextn_predict_layers": 2}
    found = _mtp(tmp_path, qwen3_next, TARGET_WEIGHTS, {"method": "qwen3_next_mtp", "num_speculative_tokens": 5})
    assert [(f["check"], f["ok"]) for f in found] == [("speculative-config", False)], found
    assert found[0]["fix"] == 'give "num_speculative_tokens" 4 or 6', found


def test_a_text_config_that_says_it_has_no_mtp_layers_fails(tmp_path):
    kimi_k25 = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": {**DEEPSEEK_V3, "model_type": "kimi_k2", "num_nextn_predict_layers": 0},  # Kimi-K2.5's own
    }
    found = _mtp(tmp_path, kimi_k25, TARGET_WEIGHTS, {"method": "mtp", "num_speculative_tokens": 1})
    assert [(f["check"], f["ok"]) for f in found] == [("speculative-config", False)], found
