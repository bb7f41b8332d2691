"""Opt-in (`make test-vllm`): a target whose config.json has an auto_map AutoConfig, held to vLLM 0.16.0's
own EngineArgs.create_engine_config() on CPU without --trust-remote-code: a model_type neither its config
registry nor its transformers knows (Kimi-K2's kimi_k2) is refused; one transformers knows is read;
with --trust-remote-code, a directory without the module auto_map names is refused. Static preflight (patchkit/launch/remote_code.py) fails exactly the refused one."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from launch_fixtures import write_model
from vllm_overlay import ENGINE_ARGS_ON_CPU, TINY_LLAMA, ask_vllm, preflight_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

ASK = ENGINE_ARGS_ON_CPU + textwrap.dedent("""\
    said = {}
    trust = sys.argv[1] == "trust"
    for model in sys.argv[2:]:
        try:
            EngineArgs(model=model, skip_tokenizer_init=True, trust_remote_code=trust).create_engine_config()
            said[model] = None
        except Exception as exc:
            said[model] = f"{type(exc).__name__}: {exc}"[:400]
    print(json.dumps(said))
    """)
AUTO_MAP = {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}
TARGETS = {
    "kimi_k2": {**TINY_LLAMA, "model_type": "kimi_k2", "auto_map": AUTO_MAP},
    "llama": {**TINY_LLAMA, "auto_map": {"AutoConfig": "configuration_llama.LlamaConfig"}},
}


def models_findings(target: Path, *flags: str) -> list[dict]:
    found = preflight_findings("vllm", "serve", str(target), *flags)
    return [f for f in found if f["check"] == "models" and "auto_map" in f["message"]]


def test_a_config_only_remote_code_reads_is_refused_exactly_where_vllm_refuses_it(tmp_path: Path):
    targets = {name: write_model(tmp_path / name, config) for name, config in TARGETS.items()}
    said = ask_vllm(ASK, "no", *map(str, targets.values()))
    refused = said[str(targets["kimi_k2"])]
    assert refused is not None and "contains custom code which must be executed" in refused, said
    assert said[str(targets["llama"])] is None, said
    [found] = models_findings(targets["kimi_k2"])
    assert found["result"] == "fail" and found["fix"].startswith("add --trust-remote-code"), found
    assert models_findings(targets["llama"]) == []


def test_trust_remote_code_without_the_module_auto_map_names_is_refused_as_vllm_refuses_it(tmp_path: Path):
    """With --trust-remote-code transformers runs the module auto_map names, from the model's directory."""
    target = write_model(tmp_path / "kimi_k2", TARGETS["kimi_k2"])
    said = ask_vllm(ASK, "trust", str(target))
    assert "configuration_deepseek.py" in (said[str(target)] or ""), said
    [found] = models_findings(target, "--trust-remote-code")
    assert found["result"] == "fail" and found["fix"].startswith("put configuration_deepseek.py into"), found


ASK_CONFIG_PATH = ENGINE_ARGS_ON_CPU + textwrap.dedent("""\
    try:
        EngineArgs(
            model=sys.argv[1], hf_config_path=sys.argv[2], skip_tokenizer_init=True, trust_remote_code=True
        ).create_engine_config()
        print(json.dumps({"said": None}))
    except Exception as exc:
        print(json.dumps({"said": f"{type(exc).__name__}: {exc}"[:400]}))
    """)
RE_EXPORT = "from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config\n"


def test_with_hf_config_path_the_module_is_run_from_its_directory_as_vllm_runs_it(tmp_path: Path):
    """vLLM reads the config, and transformers runs auto_map's module, from --hf-config-path (review42a R16)."""
    target = write_model(tmp_path / "kimi_k2", TARGETS["kimi_k2"])
    config = write_model(tmp_path / "hcp", TARGETS["kimi_k2"])
    (config / "configuration_deepseek.py").write_text(RE_EXPORT)
    assert ask_vllm(ASK_CONFIG_PATH, str(target), str(config)) == {"said": None}
    assert models_findings(target, "--trust-remote-code", "--hf-config-path", str(config)) == []
    (target / "configuration_deepseek.py").write_text(RE_EXPORT)
    (config / "configuration_deepseek.py").unlink()
    said = ask_vllm(ASK_CONFIG_PATH, str(target), str(config))["said"]
    assert "configuration_deepseek.py" in (said or ""), said
    [found] = models_findings(target, "--trust-remote-code", "--hf-config-path", str(config))
    assert found["result"] == "fail" and f"into {config}" in found["fix"], found
