"""Opt-in (`make test-vllm`): the method patchkit's rules read (patchkit/launch/method.py, from the
installed vllm/config/speculative.py and the drafter's config) is the one vLLM's SpeculativeConfig
settles on, for each drafter kind and each method written or omitted."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from vllm_overlay import ENGINE_ARGS_ON_CPU, TINY_LLAMA, ask_vllm, site_packages

from patchkit.launch.command import parse
from patchkit.launch.engine import tree_reader
from patchkit.launch.method import settled_method
from patchkit.launch.models import resolve_model

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

# DeepSeek-V3's own config.json (create_engine_config builds no model), one MTP layer
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
    "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "hidden_act": "silu", "rope_theta": 10000,
    "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "num_nextn_predict_layers": 1,
}  # fmt: skip
HEAD = {**TINY_LLAMA, "hidden_size": 7168, "num_hidden_layers": 1, "vocab_size": 129280}
DRAFTERS = {  # directory name: config
    "dm": DEEPSEEK_V3,  # a DeepSeek-V3-type checkpoint: hf_config_override makes it deepseek_mtp
    "EAGLE-head": HEAD,
    "head-eagle3": {**HEAD, "architectures": ["LlamaForCausalLMEagle3"]},
    "draft": HEAD,
}
# a DeepSeek-V3 target; a Llama one, for which stock vLLM 0.16.0 takes EAGLE-3 heads
TARGETS = {"deepseek": DEEPSEEK_V3, "llama": {**HEAD, "num_hidden_layers": 2}}
WRITTEN = (None, "mtp", "deepseek_mtp", "draft_model", "eagle", "eagle3")
ASK = ENGINE_ARGS_ON_CPU + textwrap.dedent("""\
    settled = {}
    for name, (target, spec) in json.loads(sys.argv[1]).items():
        try:
            config = EngineArgs(model=target, speculative_config=spec, skip_tokenizer_init=True).create_engine_config()
            settled[name] = config.speculative_config.method
        except Exception as exc:
            settled[name] = "refused: " + f"{type(exc).__name__}: {exc}"[:200]
    print(json.dumps(settled))
    """)


def test_the_method_the_rules_read_is_the_one_vllm_settles_on(tmp_path: Path):
    for name, config in {**TARGETS, **DRAFTERS}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    cases = {}
    for target in TARGETS:
        for name in DRAFTERS:
            for method in WRITTEN:
                spec = {"model": str(tmp_path / name), "num_speculative_tokens": 1}
                given = {"method": method} if method else {}
                cases[f"{target}-{name}-{method}"] = (str(tmp_path / target), {**spec, **given})
    settled = ask_vllm(ASK, json.dumps(cases))
    assert isinstance(settled, dict)
    read = tree_reader(site_packages(str(VLLM_PYTHON)))
    judged = 0
    for case, (model, spec) in cases.items():
        if str(settled[case]).startswith("refused: "):
            continue  # refused at start: the speculative-config finding's (test_speculative_real)
        command = parse(["vllm", "serve", model, "--speculative-config", json.dumps(spec)])
        ours = settled_method(command, resolve_model(spec["model"], {}, role="drafter"), read)
        assert ours == settled[case], (case, settled[case], ours)
        judged += 1
    assert settled["deepseek-dm-None"] == settled["llama-dm-None"] == "mtp", settled
    assert settled["llama-head-eagle3-None"] == "eagle3" and judged >= len(cases) // 2, settled


# a drafter of its own config class (auto_map; --trust-remote-code) of a model_type named like an MTP type:
# 0.17's "qwen3_5_mtp", which 0.16.0's MTPModelTypes does not list, and "ernie_mtp", which it does
OWN_CONFIG = 'from transformers import LlamaConfig\n\n\nclass OwnConfig(LlamaConfig):\n    model_type = "{}"\n'


def test_only_the_model_types_the_release_lists_are_mtp(tmp_path: Path):
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(TARGETS["llama"]))
    cases = {}
    for model_type in ("qwen3_5_mtp", "ernie_mtp"):
        drafter = tmp_path / model_type
        drafter.mkdir()
        auto = {"auto_map": {"AutoConfig": "configuration_own.OwnConfig"}, "num_nextn_predict_layers": 1}
        (drafter / "config.json").write_text(json.dumps({**HEAD, **auto, "model_type": model_type}))
        (drafter / "configuration_own.py").write_text(OWN_CONFIG.format(model_type))
        for method in (None, "draft_model", "mtp"):
            spec = {"model": str(drafter), "num_speculative_tokens": 1, **({"method": method} if method else {})}
            cases[f"{model_type}-{method}"] = (str(tmp_path / "llama"), spec)
    settled = ask_vllm(
        ASK.replace("skip_tokenizer_init=True", "skip_tokenizer_init=True, trust_remote_code=True"), json.dumps(cases)
    )
    assert isinstance(settled, dict)
    assert settled["qwen3_5_mtp-draft_model"] == "draft_model" and settled["ernie_mtp-draft_model"] == "mtp", settled
    read = tree_reader(site_packages(str(VLLM_PYTHON)))
    for case, (model, spec) in cases.items():
        if str(settled[case]).startswith("refused: "):
            continue
        command = parse(["vllm", "serve", model, "--trust-remote-code", "--speculative-config", json.dumps(spec)])
        assert settled_method(command, resolve_model(spec["model"], {}, role="drafter"), read) == settled[case], case
