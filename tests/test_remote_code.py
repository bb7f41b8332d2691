"""A model vLLM reads only with --trust-remote-code (patchkit/launch/remote_code.py): config.json's
auto_map names an AutoConfig and its model_type is in neither the tree's vLLM config registry nor the
launch's transformers (moonshotai/Kimi-K2's kimi_k2): without the flag vLLM refuses it at start; static
preflight fails it (tests/vllm_import/test_remote_code_real.py holds it to vLLM 0.16.0)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, KIMI_K25, write_eagle3_setup, write_model

VLLM_CONFIGS = "vllm/transformers_utils/config.py"
TRANSFORMERS_AUTO = "transformers/models/auto/configuration_auto.py"
REGISTRY = """
_CONFIG_REGISTRY = LazyConfigDict(kimi_k25="KimiK25Config", eagle="EAGLEConfig", speculators="SpeculatorsConfig")

class HFConfigParser:
    def parse(self, model_type, trust_remote_code):
        if model_type in _CONFIG_REGISTRY:
            return _CONFIG_REGISTRY[model_type]
        try:
            return AutoConfig.from_pretrained(model_type, trust_remote_code=trust_remote_code)
        except ValueError as e:
            if not trust_remote_code and "requires you to execute the configuration file" in str(e):
                raise RuntimeError("Failed to load the model config") from e
"""
MAPPING = """
CONFIG_MAPPING_NAMES = OrderedDict[str, str](
    [
        ("deepseek_v3", "DeepseekV3Config"),
        ("llama", "LlamaConfig"),
    ]
)
"""
AUTO_MAP = {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}
KIMI_K2 = {**DEEPSEEK_V3, "model_type": "kimi_k2", "auto_map": AUTO_MAP}


def _models(
    tmp_path: Path, target: dict, *flags: str, drafter: dict | None = None, files: bool = True, code: bool = False
) -> list[dict]:
    """The models findings about trust_remote_code of a launch of `target` (and `drafter`); `code`: the
    target's directory holds the module its auto_map names."""
    tree, library = write_eagle3_setup(tmp_path)
    for path, text in ((VLLM_CONFIGS, REGISTRY), (TRANSFORMERS_AUTO, MAPPING)) if files else ():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    served = write_model(tmp_path / "target", target)
    if code:
        (served / "configuration_deepseek.py").write_text("class DeepseekV3Config: ...\n")
    spec = []
    if drafter is not None:
        head = write_model(tmp_path / "head", drafter)
        spec = [
            "--speculative-config",
            json.dumps({"method": "eagle3", "model": str(head), "num_speculative_tokens": 3}),
        ]
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(served), *spec, *flags,
    )  # fmt: skip
    findings = json.loads(done.stdout)["findings"]
    return [f for f in findings if f["check"] == "models" and "auto_map" in f["message"]]


def test_a_kimi_k2_target_without_trust_remote_code_fails(tmp_path):
    [found] = _models(tmp_path, KIMI_K2)
    assert not found["ok"] and found["result"] != "cannot judge", found
    assert "the target" in found["message"] and "model_type 'kimi_k2', auto_map AutoConfig" in found["message"]
    assert "vLLM refuses the launch at start" in found["message"], found
    assert found["fix"].startswith("add --trust-remote-code"), found


def test_trust_remote_code_given_passes(tmp_path):
    assert _models(tmp_path, KIMI_K2, "--trust-remote-code", code=True) == []


def test_trust_remote_code_without_the_module_auto_map_names_fails(tmp_path):
    [found] = _models(tmp_path, KIMI_K2, "--trust-remote-code")
    assert not found["ok"] and found["result"] != "cannot judge", found
    assert "with --trust-remote-code vLLM runs configuration_deepseek.py" in found["message"], found
    assert "the model's directory holds none: vLLM refuses the launch at start" in found["message"], found
    assert found["fix"].startswith("put configuration_deepseek.py into "), found


def test_a_model_type_vllm_reads_with_its_own_class_needs_no_module(tmp_path):
    k25 = {**KIMI_K25, "auto_map": {"AutoConfig": "configuration_kimi.KimiK25Config"}}
    assert _models(tmp_path, k25, "--trust-remote-code") == []


def test_a_module_of_another_repository_is_not_judged(tmp_path):
    other = {**KIMI_K2, "auto_map": {"AutoConfig": "deepseek-ai/DeepSeek-V3--configuration_deepseek.DeepseekV3Config"}}
    assert _models(tmp_path, other, "--trust-remote-code") == []


def test_a_model_type_transformers_or_vllm_knows_passes_with_an_auto_map(tmp_path):
    assert _models(tmp_path, {**DEEPSEEK_V3, "auto_map": AUTO_MAP}) == []
    assert _models(tmp_path / "k25", {**KIMI_K25, "auto_map": {"AutoConfig": "configuration_kimi.KimiK25Config"}}) == []


def test_an_unknown_model_type_without_an_auto_map_is_not_this_rule(tmp_path):
    assert _models(tmp_path, {**KIMI_K2, "auto_map": {"AutoModel": "modeling_deepseek.X"}}) == []


def test_a_drafter_read_only_with_remote_code_fails(tmp_path):
    drafter = {**DRAFTER, "model_type": "my_eagle", "auto_map": {"AutoConfig": "configuration_my.MyConfig"}}
    [found] = _models(tmp_path, DEEPSEEK_V3, drafter=drafter)
    assert not found["ok"] and "the drafter" in found["message"] and "'my_eagle'" in found["message"], found


def test_a_tree_whose_tables_are_not_read_cannot_judge(tmp_path):
    [found] = _models(tmp_path, KIMI_K2, files=False)
    assert found["result"] == "cannot judge" and TRANSFORMERS_AUTO in found["message"], found
    assert found["fix"].startswith("if neither vLLM nor the launch's transformers knows model_type 'kimi_k2', add"), (
        found
    )


def test_hf_overrides_setting_the_model_type_cannot_be_judged(tmp_path):
    [found] = _models(tmp_path, KIMI_K2, "--hf-overrides", '{"model_type": "deepseek_v3"}')
    assert found["result"] == "cannot judge" and "--hf-overrides sets model_type" in found["message"], found
    assert found["fix"].startswith("if neither vLLM nor the launch's transformers knows the model_type"), found


def test_with_hf_config_path_the_module_is_looked_for_where_vllm_reads_the_config(tmp_path):
    """vLLM reads the config from --hf-config-path, and transformers runs its auto_map module there (review42a R16)."""
    config = write_model(tmp_path / "hcp", KIMI_K2)
    (config / "configuration_deepseek.py").write_text("class DeepseekV3Config: ...\n")
    flags = ("--trust-remote-code", "--hf-config-path", str(config))
    assert _models(tmp_path / "a", KIMI_K2, *flags) == []
    bare = write_model(tmp_path / "bare", KIMI_K2)
    [found] = _models(tmp_path / "b", KIMI_K2, "--trust-remote-code", "--hf-config-path", str(bare), code=True)
    assert not found["ok"] and "--hf-config-path's directory holds none" in found["message"], found
    assert found["fix"].startswith(f"put configuration_deepseek.py into {bare}"), found
