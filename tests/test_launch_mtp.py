"""The drafter vLLM builds for --speculative-config's mtp method from the target's own config and
checkpoint, once the target has loaded (patchkit/launch/mtp.py): an unquantized checkpoint without
its MTP layers' weights, a config without num_nextn_predict_layers, or with 0 (Kimi-K2's), and a
num_speculative_tokens its MTP layers do not divide are failed; DeepSeek-V3's own layout passes.
The tree's rules are files in vLLM's shape, written here (tests/vllm_import/test_mtp_real.py holds
the reading to the real vLLM's own functions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_fixtures import (
    DEEPSEEK_EAGLE1,
    DEEPSEEK_V3,
    DRAFTER,
    EAGLE,
    EAGLE1_FEEDS,
    KIMI_K25,
    SPEC,
    speculative_launch,
    write_eagle3_setup,
    write_model,
    write_weights,
)

from patchkit.series.library import default_root

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
        if hf_config.architectures[0] == "Glm4MoeForCausalLM":
            hf_config.model_type = "glm4_moe_mtp"
            n_predict = getattr(hf_config, "num_nextn_predict_layers", None)
            hf_config.update({"n_predict": n_predict, "architectures": ["Glm4MoeMTPModel"]})
        if hf_config.architectures[0] == "Glm4MoeLiteForCausalLM":
            hf_config.model_type = "glm4_moe_lite_mtp"
            n_predict = getattr(hf_config, "num_nextn_predict_layers", None)
            hf_config.update({"num_hidden_layers": 0, "n_predict": n_predict, "architectures": ["Glm4MoeLiteMTPModel"]})
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

class DeepSeekMTP:
    def load_weights(self, weights):
        loaded_params = set()
        for name, loaded_weight in weights:
            spec_layer = get_spec_layer_idx_from_weight_name(self.config, name)
            if spec_layer is None:
                continue
            loaded_params.add(name)
        return loaded_params
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
# the model types the tree serves as mtp (a method given as one is renamed mtp), of those RULES names
MTP_TYPES = """
MTPModelTypes = Literal["deepseek_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "qwen3_next_mtp", "mtp"]
"""
# the MTP drafter classes as vLLM 0.16.0's registry maps them to their modules
MTP_REGISTERED = """_SPECULATIVE_DECODING_MODELS = {
    "DeepSeekMTPModel": ("deepseek_mtp", "DeepSeekMTP"),
    "Glm4MoeMTPModel": ("glm4_moe_mtp", "Glm4MoeMTP"),
    "Glm4MoeLiteMTPModel": ("glm4_moe_lite_mtp", "Glm4MoeLiteMTP"),
    "Qwen3NextMTP": ("qwen3_next_mtp", "Qwen3NextMTP"),"""
V3 = {**DEEPSEEK_V3, "num_nextn_predict_layers": 1}  # DeepSeek-V3's own: one MTP layer, model.layers.61.*
TARGET_WEIGHTS = {"model.embed_tokens.weight": [8, 2], "model.layers.60.mlp.gate.weight": [2, 2]}
MTP_WEIGHTS = {"model.layers.61.eh_proj.weight": [2, 4], "model.layers.61.enorm.weight": [2]}


def _tree(tmp_path: Path, files: dict[str, str] | None = None) -> tuple[Path, Path]:
    tree, library = write_eagle3_setup(tmp_path)
    with (tree / SPEC).open("a") as spec:
        spec.write(RULES + MTP_TYPES)
    registry = tree / "vllm" / "model_executor" / "models" / "registry.py"
    registry.write_text(registry.read_text().replace("_SPECULATIVE_DECODING_MODELS = {", MTP_REGISTERED))
    for name, text in {**FILES, **(files or {})}.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree, library


def _mtp(
    tmp_path: Path, config: dict, weights: dict, spec: dict | None = None, *extra: str, files: dict | None = None
) -> list[dict]:
    """The models and speculative-config findings of a `vllm serve` of a model with `config` and
    `weights`, its own MTP layers drafting (`spec`: the --speculative-config; `files`: the tree's, changed)."""
    tree, library = _tree(tmp_path, files)
    model = write_model(tmp_path / "model", config)
    write_weights(model, weights)
    spec = spec or {"method": "mtp", "num_speculative_tokens": 1}
    found = speculative_launch(tree, library, model, spec, *extra)["findings"]
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


def test_the_checkpoint_named_as_the_drafter_without_a_method_is_held_the_same(tmp_path):
    """vLLM tells mtp from the drafter's model_type once hf_config_override has made DeepSeek-V3's
    deepseek_mtp: with no method, or another one its name does not replace, the MTP rules hold."""
    for method in (None, "draft_model"):
        spec = {"model": str(tmp_path / str(method) / "model"), "num_speculative_tokens": 1}
        found = _mtp(tmp_path / str(method), V3, TARGET_WEIGHTS, {**spec, **({"method": method} if method else {})})
        assert [f["ok"] for f in found] == [False], (method, found)
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
    spec = {"method": "mtp", "num_speculative_tokens": 1}
    judged = speculative_launch(tree, library, model, spec)
    found = [f for f in judged["findings"] if "mtp drafter" in f["message"]]
    assert [f["result"] for f in found] == ["cannot judge"], found
    assert "hf_config_override" in found[0]["message"], found


def test_another_models_mtp_layers_whose_rule_is_not_read_cannot_be_judged(tmp_path):
    """Qwen3-Next's drafter takes its MTP layer's weights by their mtp. prefix, a rule not read: said, not passed."""
    qwen3_next = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 48}
    found = _mtp(tmp_path, {**qwen3_next, "num_nextn_predict_layers": 1}, TARGET_WEIGHTS)
    assert [(f["check"], f["result"]) for f in found] == [("models", "cannot judge")], found
    assert "qwen3_next_mtp.py" in found[0]["message"] and "MTP layers" in found[0]["message"], found


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


@pytest.mark.parametrize("tokens", ["3", 3.0, " 3"])
def test_a_token_count_written_as_text_or_a_whole_float_is_read_as_vllm_reads_it(tmp_path, tokens):
    """review43a S3: pydantic reads "3" and 3.0 as 3, which SpeculativeConfig refuses at start under 2 MTP layers."""
    two = {**V3, "num_nextn_predict_layers": 2}
    weights = {**TARGET_WEIGHTS, **MTP_WEIGHTS, "model.layers.62.enorm.weight": [2]}
    found = _mtp(tmp_path, two, weights, {"method": "mtp", "num_speculative_tokens": tokens})
    refused = [f for f in found if f["check"] == "speculative-config" and not f["ok"]]
    assert [f["message"] for f in refused] == [
        "vLLM refuses num_speculative_tokens 3: not a multiple of the model's 2 MTP layers"
    ], found


def test_the_token_count_rule_holds_for_every_mtp_model_the_tree_names(tmp_path):
    qwen3_next = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_nextn_predict_layers": 2}
    found = _mtp(tmp_path, qwen3_next, TARGET_WEIGHTS, {"method": "qwen3_next_mtp", "num_speculative_tokens": 5})
    found = [f for f in found if f["result"] != "cannot judge"]  # Qwen3-Next's weight rule is not read
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


# GLM-4.5's MTP drafter (glm4_moe_mtp.py, 0.16.0): its layer's weights are any name holding layers.{L}.
GLM_FILES = {
    f"vllm/model_executor/models/{module}_mtp.py": f"""
from .{module} import Glm4MoeDecoderLayer, get_spec_layer_idx_from_weight_name

class Glm4MoeMTP:
    def load_weights(self, weights):
        loaded_params = set()
        for name, loaded_weight in weights:
            spec_layer = get_spec_layer_idx_from_weight_name(self.config, name)
            if spec_layer is None:
                continue
            loaded_params.add(name)
        return loaded_params
"""
    for module in ("glm4_moe", "glm4_moe_lite")
} | {
    f"vllm/model_executor/models/{module}.py": """
def get_spec_layer_idx_from_weight_name(config, weight_name):
    if hasattr(config, "num_nextn_predict_layers") and (config.num_nextn_predict_layers > 0):
        layer_idx = config.num_hidden_layers
        for i in range(config.num_nextn_predict_layers):
            if f"layers.{layer_idx + i}." in weight_name:
                return layer_idx + i
    return None
"""
    for module in ("glm4_moe", "glm4_moe_lite")
}
GLM = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "num_hidden_layers": 46}
GLM |= {"num_nextn_predict_layers": 1}


def test_glm_45s_checkpoint_without_its_mtp_layers_weights_fails(tmp_path):
    """GLM-4.5(-Air) re-uploads that drop the MTP layer: vLLM's strict check fails the mtp drafter's load."""
    found = _mtp(tmp_path / "without", GLM, TARGET_WEIGHTS, files=GLM_FILES)
    assert [f["ok"] for f in found] == [False], found
    assert "holds no weights of its MTP layer (layers.46.*)" in found[0]["message"], found
    weights = {**TARGET_WEIGHTS, "model.layers.46.eh_proj.weight": [2, 4]}  # matched anywhere in the name
    assert [f["ok"] for f in _mtp(tmp_path / "with", GLM, weights, files=GLM_FILES)] == [True]


def test_a_drafter_config_whose_layer_count_the_override_changes_cannot_be_judged(tmp_path):
    """hf_config_override sets GLM-4.7-Flash's (glm4_moe_lite) num_hidden_layers to 0: not judged."""
    lite = {**GLM, "architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite"}
    found = _mtp(tmp_path, lite, TARGET_WEIGHTS, files=GLM_FILES)
    assert [f["result"] for f in found] == ["cannot judge"], found


# 0.26's layout: deepseek_mtp.py takes the rule from utils.py, which binds its counts by :=
UTILS_RULE = """
def get_spec_layer_idx_from_weight_name(config, weight_name):
    if not (n := getattr(config, "num_nextn_predict_layers", 0)):
        return None
    base = config.num_hidden_layers
    for i in range(n):
        if weight_name.startswith((f"model.layers.{base + i}.", f"layers.{base + i}.")):
            return base + i
    return None
"""


def test_the_rule_read_from_utils_as_0_26_lays_it_out(tmp_path):
    """0.26's deepseek_mtp.py imports the rule from utils.py, which names its counts otherwise (n, base)."""
    mtp = FILES["vllm/model_executor/models/deepseek_mtp.py"].replace("from .deepseek_v2 import", "from .utils import")
    files = {"vllm/model_executor/models/deepseek_mtp.py": mtp, "vllm/model_executor/models/utils.py": UTILS_RULE}
    found = _mtp(tmp_path / "without", V3, TARGET_WEIGHTS, files=files)
    assert [f["ok"] for f in found] == [False] and "(model.layers.61.*)" in found[0]["message"], found
    weights = {**TARGET_WEIGHTS, "layers.61.enorm.weight": [2]}
    assert [f["ok"] for f in _mtp(tmp_path / "with", V3, weights, files=files)] == [True]


def test_a_drafter_class_outside_the_models_directory_cannot_be_judged(tmp_path):
    """0.30's DeepSeek-V3.2 MTP drafter (DeepseekV32MTPModel) is built from vllm/models/deepseek_v32: not read."""
    tree, library = _tree(tmp_path)
    (tree / SPEC).write_text((tree / SPEC).read_text().replace('["DeepSeekMTPModel"]', '["DeepseekV32MTPModel"]'))
    registry = tree / "vllm" / "model_executor" / "models" / "registry.py"
    entry = '"DeepseekV32MTPModel": ("vllm.models.deepseek_v32", "DeepseekV32MTP"),\n'
    registry.write_text(
        registry.read_text().replace("_SPECULATIVE_DECODING_MODELS = {", "_SPECULATIVE_DECODING_MODELS = {" + entry)
    )
    model = write_model(tmp_path / "model", V3)
    write_weights(model, TARGET_WEIGHTS)
    spec = {"method": "mtp", "num_speculative_tokens": 1}
    judged = speculative_launch(tree, library, model, spec)
    found = [f for f in judged["findings"] if "MTP layer" in f["message"]]
    assert [f["result"] for f in found] == ["cannot judge"] and "DeepseekV32MTPModel" in found[0]["message"], found


# 0.34's hf_config_override: a branch whose condition intersects a set with the config's architectures comes
# first; 0.22's NemotronH branch returns its text_config, which the rest then changes
RULES_034 = RULES.replace(
    "        initial_architecture = hf_config.architectures[0]\n",
    """        initial_architecture = hf_config.architectures[0]
        if hf_config.model_type in ("step5",) or {"Step5ForCausalLM"}.intersection(
            getattr(hf_config, "architectures", None) or []
        ):
            hf_config.model_type = "step5_mtp"
        if hf_config.architectures[0] == "NemotronH_Super_Omni_Reasoning_V3":
            hf_config = hf_config.text_config
            n_predict = getattr(hf_config, "num_nextn_predict_layers", 1)
            hf_config.update({"n_predict": n_predict})
            return hf_config
""",
)


def test_the_reading_follows_0_34s_set_condition_and_a_returned_text_config(tmp_path):
    tree, library = _tree(tmp_path / "tree")
    (tree / SPEC).write_text((tree / SPEC).read_text().replace(RULES, RULES_034))
    found = _mtp_in(tree, library, tmp_path / "v3", V3, TARGET_WEIGHTS, {"method": "mtp", "num_speculative_tokens": 1})
    assert [f["ok"] for f in found] == [False] and "model.layers.61.*" in found[0]["message"], found
    omni = {"architectures": ["NemotronH_Super_Omni_Reasoning_V3"], "model_type": "nemotron_h_omni"}
    omni |= {"text_config": {"model_type": "nemotron_h", "num_nextn_predict_layers": 2}}
    found = _mtp_in(
        tree, library, tmp_path / "omni", omni, TARGET_WEIGHTS, {"method": "mtp", "num_speculative_tokens": 3}
    )
    assert [(f["check"], f["ok"]) for f in found if f["result"] != "cannot judge"] == [("speculative-config", False)], (
        found
    )
    assert "the model's 2 MTP layers" in found[0]["message"], found


def _mtp_in(tree: Path, library: Path, where: Path, config: dict, weights: dict, spec: dict, *extra: str) -> list[dict]:
    model = write_model(where, config)
    write_weights(model, weights)
    found = speculative_launch(tree, library, model, spec, *extra)["findings"]
    return [f for f in found if any(word in f["message"] for word in ("MTP layer", "mtp drafter", "multiple of"))]


def test_0_34s_transformers_backend_overrides_cannot_be_judged(tmp_path):
    """0.34 hands hf_config_override the Transformers backend's own overrides for --model-impl transformers."""
    tree, library = _tree(tmp_path / "tree")
    rules = RULES.replace(
        "def hf_config_override(hf_config):", "def hf_config_override(hf_config, transformers_mtp_overrides=None):"
    )
    (tree / SPEC).write_text((tree / SPEC).read_text().replace(RULES, rules))
    spec = {"method": "mtp", "num_speculative_tokens": 1}
    found = _mtp_in(tree, library, tmp_path / "impl", V3, TARGET_WEIGHTS, spec, "--model-impl", "transformers")
    assert [f["result"] for f in found] == ["cannot judge"] and "--model-impl transformers" in found[0]["message"], (
        found
    )
    assert [f["ok"] for f in _mtp_in(tree, library, tmp_path / "vllm", V3, TARGET_WEIGHTS, spec)] == [False]


def _speculative(tmp_path: Path, spec: dict) -> list[dict]:
    """The speculative-config findings of a `vllm serve` of DeepSeek-V3 (its MTP layers' weights
    held) with --speculative-config `spec`."""
    tree, library = _tree(tmp_path)
    model = write_model(tmp_path / "model", V3)
    write_weights(model, {**TARGET_WEIGHTS, **MTP_WEIGHTS})
    judged = speculative_launch(tree, library, model, spec)
    return [f for f in judged["findings"] if f["check"] == "speculative-config"]


def test_the_mtp_method_given_with_an_eagle3_head_is_refused(tmp_path):
    """With a "model", vLLM replaces a method other than eagle/eagle3 by the one the drafter names:
    an EAGLE-3 head named "head" (model_type llama) names none, and vLLM raises ("Unsupported
    speculative method: 'mtp'") before the target loads; named ...eagle3... it runs as eagle3."""
    head = write_model(tmp_path / "head", DRAFTER)
    found = _speculative(tmp_path / "plain", {"method": "mtp", "model": str(head), "num_speculative_tokens": 3})
    assert [f["ok"] for f in found] == [False], found
    assert f"method mtp is replaced by the one the drafter {head} names" in found[0]["message"], found
    assert '"eagle3" for an EAGLE-3 head' in found[0]["fix"] and 'drop "model"' in found[0]["fix"], found
    named = write_model(tmp_path / "head-eagle3", DRAFTER)
    assert _speculative(tmp_path / "named", {"method": "mtp", "model": str(named), "num_speculative_tokens": 3}) == []


def test_a_checkpoint_whose_mtp_type_the_override_makes_names_its_method(tmp_path):
    """hf_config_override turns DeepSeek-V3's model_type into deepseek_mtp before vLLM reads the
    method from it: given as the drafter, with or without a method, it is not refused."""
    model = str(tmp_path / "none" / "model")
    assert _speculative(tmp_path / "none", {"model": model, "num_speculative_tokens": 1}) == []
    model = str(tmp_path / "mtp" / "model")
    assert _speculative(tmp_path / "mtp", {"method": "mtp", "model": model, "num_speculative_tokens": 1}) == []


NARROW_V3 = {**V3, "hidden_size": 128}  # a DeepSeek-V3-type checkpoint of another width: vLLM infers mtp
# each drafter kind (its directory's name, its config) and the method vLLM 0.16.0's SpeculativeConfig infers for it
INFERRED = {
    "mtp": ("dm2", NARROW_V3),
    "eagle": ("EAGLE-head", DEEPSEEK_EAGLE1),
    "eagle3": ("head-eagle3", {**DRAFTER, "hidden_size": 128}),
}


def _judged(tmp_path: Path, name: str, config: dict, method: str | None) -> list[tuple[str, str, str]]:
    """Every finding (check, result, message) of a DeepSeek-V3 launch whose drafter, named `name`, has
    `config`, with `method` given (None: omitted)."""
    tree, library = tmp_path / "tree" / "site", tmp_path / "tree" / "library"
    if not tree.exists():
        assert _tree(tmp_path / "tree", {EAGLE: EAGLE1_FEEDS}) == (tree, library)
        write_weights(write_model(tmp_path / "target", V3), {**TARGET_WEIGHTS, **MTP_WEIGHTS})
        write_weights(write_model(tmp_path / name, config), TARGET_WEIGHTS)
    spec = {"model": str(tmp_path / name), "num_speculative_tokens": 1, **({"method": method} if method else {})}
    judged = speculative_launch(tree, library, tmp_path / "target", spec)
    return [(f["check"], f["result"], f["message"]) for f in judged["findings"]]


def test_each_rule_reads_the_method_vllm_infers_not_the_one_written(tmp_path):
    """For each drafter kind, the launch with no method is judged as the one with the method vLLM
    infers for it given: a DeepSeek-V3-type checkpoint of another width, without its MTP layer's
    weights, fails the same findings whether "method": "mtp" is written or not."""
    for method, (name, config) in INFERRED.items():
        given = _judged(tmp_path / method, name, config, method)
        assert _judged(tmp_path / method, name, config, None) == given, method
    failed = {check for check, result, message in _judged(tmp_path / "mtp", "dm2", NARROW_V3, None) if result == "fail"}
    assert {"models", "drafter-hidden-size"} <= failed, failed


def test_the_sets_a_launch_needs_follow_the_method_vllm_infers(tmp_path):
    """The eagle3 set's rule (its real [needed_by]: mtp under a Kimi-K2.5 target needs it) reads the
    method vLLM infers from a DeepSeek-V3-type drafter checkpoint, as it reads "method": "mtp" written."""
    tree, library = write_eagle3_setup(tmp_path)  # the eagle3 series not applied: a failure only where needed
    with (tree / SPEC).open("a") as spec_file:
        spec_file.write(RULES)
    rule = (default_root() / "eagle3" / "set.toml").read_text()
    with (library / "eagle3" / "set.toml").open("a") as toml:
        toml.write("\n" + rule[rule.index("[needed_by]") : rule.index("[[releases]]")])
    target, drafter = write_model(tmp_path / "target", KIMI_K25), write_model(tmp_path / "dm2", V3)
    documents = []
    for method in ("mtp", None):
        spec = {"model": str(drafter), "num_speculative_tokens": 1, **({"method": method} if method else {})}
        documents.append(speculative_launch(tree, library, target, spec))
    given, omitted = documents
    failed = {f["check"] for f in given["findings"] if f["result"] == "fail"}
    assert {"tree-state", "image-token"} <= failed, given  # needed: not applied fails, its launch checks run
    assert omitted.get("unused_sets") == given.get("unused_sets"), omitted
    assert omitted["findings"] == given["findings"], omitted


METHODS = """
MTPModelTypes = Literal["deepseek_mtp", "mtp"]
EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
SpeculativeMethod = Literal["ngram", "medusa", "mlp_speculator", "draft_model", "suffix", EagleModelTypes]
"""


def test_a_checkpoint_vllm_serves_as_mtp_under_draft_model_written_is_not_held_to_draft_models_rule(tmp_path):
    """ "method": "draft_model" with a DeepSeek-V3-type checkpoint is mtp to vLLM (its model_type is told
    before draft_model is kept): the draft_model vocab rule does not apply, as with "mtp" written."""
    other_vocab = {**V3, "vocab_size": 1000}
    tree, library = _tree(tmp_path / "tree")
    with (tree / SPEC).open("a") as spec_file:  # its methods and the rule's call, as 0.16.0 holds them
        spec_file.write(METHODS + "\n# self.verify_equal_vocab_size_if_draft_model()\n")
    write_weights(write_model(tmp_path / "target", V3), {**TARGET_WEIGHTS, **MTP_WEIGHTS})
    write_weights(write_model(tmp_path / "dm", other_vocab), {**TARGET_WEIGHTS, **MTP_WEIGHTS})
    found = {}
    for method in ("mtp", "draft_model"):
        spec = {"method": method, "model": str(tmp_path / "dm"), "num_speculative_tokens": 1}
        judged = speculative_launch(tree, library, tmp_path / "target", spec)
        found[method] = judged["findings"]
    assert all("vocab_size" not in f["message"] for f in found["draft_model"]), found
    small = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 7168, "vocab_size": 1000}
    control = {**spec, "model": str(write_model(tmp_path / "small", small))}  # a draft model proper: held to it
    judged = speculative_launch(tree, library, tmp_path / "target", control)
    said = [f["message"] for f in judged["findings"] if f["check"] == "speculative-config"]
    assert any("drafter's vocab_size 1000 is not the target's 129280" in m for m in said), said
    assert found["draft_model"] == found["mtp"], found


def test_a_drafter_type_named_like_mtp_that_the_tree_does_not_list_stays_a_draft_model(tmp_path):
    """vLLM serves a drafter as mtp only where its model_type is one of the tree's MTPModelTypes: a
    "qwen3_5_mtp" drafter (0.17's type) under "method": "draft_model" on a tree that does not list it is
    a draft model, held to draft_model's vocab rule; as a method written, a type the tree lists is mtp."""
    tree, library = _tree(tmp_path / "tree")
    with (tree / SPEC).open("a") as spec_file:
        spec_file.write(METHODS + "\n# self.verify_equal_vocab_size_if_draft_model()\n")
    write_weights(write_model(tmp_path / "target", V3), {**TARGET_WEIGHTS, **MTP_WEIGHTS})
    small = {"architectures": ["LlamaForCausalLM"], "model_type": "qwen3_5_mtp", "hidden_size": 7168}
    drafter = write_model(tmp_path / "q", {**small, "vocab_size": 1000})
    said = {}
    for method in ("draft_model", "deepseek_mtp"):
        spec = {"method": method, "model": str(drafter), "num_speculative_tokens": 1}
        judged = speculative_launch(tree, library, tmp_path / "target", spec)
        said[method] = [f["message"] for f in judged["findings"] if f["result"] == "fail"]
    assert any("drafter's vocab_size 1000 is not the target's 129280" in m for m in said["draft_model"]), said
    assert all("vocab_size 1000" not in m for m in said["deepseek_mtp"]), said  # mtp: not draft_model's rule


# 0.11-0.30's SpeculativeConfig, in its shape: the target is made mtp's drafter only when a count is given,
# and _verify_args refuses a config left without one
COUNT_RULES = """
    def __post_init__(self):
        if self.model is None and self.num_speculative_tokens is not None:
            self.model = self.target_model_config.model

    def _verify_args(self):
        if self.num_speculative_tokens is None:
            raise ValueError("num_speculative_tokens must be provided with speculative model")
"""
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "vocab_size": 128}


def _own_drafter(tmp_path: Path, config: dict, spec: dict, *extra: str, counted: bool = True) -> list[dict]:
    """The speculative-config findings of `vllm serve` of a model with `config` and --speculative-config
    `spec` (and `extra`), on a tree with COUNT_RULES (counted) or without them."""
    tree, library = _tree(tmp_path)
    if counted:
        rules = (tree / SPEC).read_text()
        (tree / SPEC).write_text(
            rules.replace("        return hf_config\n", "        return hf_config\n" + COUNT_RULES)
        )
    model = write_model(tmp_path / "model", config)
    judged = speculative_launch(tree, library, model, spec, *extra)
    return [f for f in judged["findings"] if f["check"] == "speculative-config"]


def test_the_mtp_method_without_a_model_on_a_target_with_no_mtp_type_is_refused(tmp_path):
    """Without "model" vLLM makes the target mtp's drafter and tells the method again from its config: a
    Llama names none ("Unsupported speculative method: 'mtp'", at start); DeepSeek-V3 becomes deepseek_mtp."""
    found = _own_drafter(tmp_path / "llama", LLAMA, {"method": "mtp", "num_speculative_tokens": 1})
    assert [f["ok"] for f in found] == [False], found
    assert (
        "method mtp without \"model\" makes the target its drafter, and its model_type 'llama'" in found[0]["message"]
    )
    assert "drop the mtp method" in found[0]["fix"], found
    assert _own_drafter(tmp_path / "v3", V3, {"method": "mtp", "num_speculative_tokens": 1}) == []
    # --hf-overrides do not reach the draft ModelConfig: its config.json is read as it is
    over = ("--hf-overrides", json.dumps({"max_position_embeddings": 8192}))
    found = _own_drafter(tmp_path / "over", LLAMA, {"method": "mtp", "num_speculative_tokens": 1}, *over)
    assert [f["ok"] for f in found] == [False], found
    assert _own_drafter(tmp_path / "v3over", V3, {"method": "mtp", "num_speculative_tokens": 1}, *over) == []


@pytest.mark.parametrize("spec", [{"method": "mtp"}, {"method": "ngram"}, {"model": "ngram"}, {"model": "[ngram]"}])
def test_mtp_or_ngram_without_a_count_is_refused_where_the_tree_fills_the_drafter_only_with_one(tmp_path, spec):
    found = _own_drafter(tmp_path / "counted", V3, spec)
    assert [f["ok"] for f in found] == [False], found
    assert "with no num_speculative_tokens" in found[0]["message"], found
    assert found[0]["fix"] == 'give "num_speculative_tokens"', found
    assert _own_drafter(tmp_path / "with", V3, {**spec, "num_speculative_tokens": 2}) == []
    assert _own_drafter(tmp_path / "other", V3, spec, counted=False) == []  # another layout: vLLM judges
