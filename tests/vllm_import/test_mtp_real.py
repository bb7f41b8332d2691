"""Opt-in (`make test-vllm`): the mtp drafter's reading (patchkit/launch/mtp.py, static, of the
installed tree) is the real vLLM's: what SpeculativeConfig.hf_config_override makes of a config
(its model_type and n_predict, on the config class transformers gives it), and which weight names
DeepSeek's get_spec_layer_idx_from_weight_name takes as the MTP layers'."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from vllm_overlay import REFUSED, ask_vllm, preflight_findings, site_packages

from patchkit.launch.command import parse
from patchkit.launch.engine import tree_reader
from patchkit.launch.models import resolve_model
from patchkit.launch.mtp import SPEC_FILE, Absent, mtp_drafter, mtp_findings, spec_layer_prefixes, spec_layer_rule

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61}
CONFIGS = {
    "deepseek-v3": {**V3, "num_nextn_predict_layers": 1},
    "two-layers": {**V3, "num_nextn_predict_layers": 2},
    "no-key": V3,
    "kimi-k2": {**V3, "model_type": "kimi_k2", "num_nextn_predict_layers": 0},
    "v32": {**V3, "model_type": "deepseek_v32", "num_nextn_predict_layers": 1},
    "qwen3-next": {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "num_nextn_predict_layers": 1,
    },
    "glm4-moe": {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "num_nextn_predict_layers": 1},
    "mimo": {"architectures": ["MiMoForCausalLM"], "model_type": "mimo", "num_nextn_predict_layers": 1},
    "longcat": {"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash"},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
}
NAMES = ["model.layers.61.eh_proj.weight", "model.layers.60.mlp.gate.weight", "model.layers.62.enorm.weight",
         "layers.61.enorm.weight", "model.layers.610.x", "model.embed_tokens.weight", "model.layers.6.x"]  # fmt: skip

ASK = textwrap.dedent("""\
    import json, sys
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from vllm.config.speculative import SpeculativeConfig
    from vllm.model_executor.models.deepseek_mtp import get_spec_layer_idx_from_weight_name
    configs, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    out = {}
    for key, config in configs.items():
        kind = config["model_type"]
        if kind in CONFIG_MAPPING:
            made = AutoConfig.for_model(kind, **{k: v for k, v in config.items() if k != "model_type"})
        else:
            made = PretrainedConfig(**config)
            made.model_type = kind
        made = SpeculativeConfig.hf_config_override(made)
        n = getattr(made, "n_predict", "NOT SET")
        taken = [get_spec_layer_idx_from_weight_name(made, name) for name in names] if kind != "llama" else []
        out[key] = [made.model_type, n, taken]
    print(json.dumps(out))
""")


def test_the_reading_of_hf_config_override_and_the_mtp_weight_names_is_vllms():
    tree = site_packages(str(VLLM_PYTHON))
    read = tree_reader(tree)
    asked = ask_vllm(ASK, json.dumps(CONFIGS), json.dumps(NAMES))
    assert isinstance(asked, dict)
    prefixes = spec_layer_prefixes(read)
    assert prefixes is not None
    for key, config in CONFIGS.items():
        built = mtp_drafter(read(SPEC_FILE), config)
        assert built is not None, key
        # transformers' own classes give no num_nextn_predict_layers: getattr's default is vLLM's n_predict
        n_predict = built.n_predict.default if isinstance(built.n_predict, Absent) else built.n_predict
        model_type, vllm_n, taken = asked[key]
        assert (built.model_type, n_predict) == (model_type, None if vllm_n == "NOT SET" else vllm_n), key
        if built.model_type == "deepseek_mtp" and isinstance(n_predict, int):
            first = config["num_hidden_layers"]
            wanted = tuple(f"{p}{first + i}." for i in range(n_predict) for p in prefixes)
            assert [name.startswith(wanted) for name in NAMES] == [t is not None for t in taken], key


# DeepSeek-V3's own config.json, its MTP layer count varied (create_engine_config builds no model)
DEEPSEEK_V3 = {
    **V3, "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "hidden_act": "silu", "rope_theta": 10000,
    "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
}  # fmt: skip


def test_the_mtp_token_count_is_refused_where_vllm_refuses_it_at_start(tmp_path):
    """vLLM's SpeculativeConfig: num_speculative_tokens above n_predict must be a multiple of it,
    and n_predict 0 raises (ZeroDivisionError); the static finding says the same, no more."""
    site = site_packages(str(VLLM_PYTHON))
    cases = {}
    for layers in (0, 1, 2, 3):
        model = tmp_path / f"mtp{layers}"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({**DEEPSEEK_V3, "num_nextn_predict_layers": layers}))
        for tokens in (1, 2, 3, 4, 6):
            cases[f"{layers}-{tokens}"] = (str(model), {"method": "mtp", "num_speculative_tokens": tokens})
    refused = ask_vllm(REFUSED, json.dumps(cases))
    assert isinstance(refused, dict)
    for name, (model, spec) in cases.items():
        command = parse(["vllm", "serve", model, "--speculative-config", json.dumps(spec)])
        ours = mtp_findings(command, resolve_model(model, {}), None, tree_reader(site), "mtp")
        failed = [f for f in ours if f.check == "speculative-config" and not f.ok]
        assert bool(failed) == (refused[name] is not None), (name, refused[name], ours)


# every MTP drafter module of the installed vLLM whose weights' rule is read, held to its own function
RULE_ASK = textwrap.dedent("""\
    import importlib, json, sys, types
    modules, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    out = {}
    for module in modules:
        rule = importlib.import_module(f"vllm.model_executor.models.{module}").get_spec_layer_idx_from_weight_name
        for n in (1, 2):
            config = types.SimpleNamespace(num_hidden_layers=61, num_nextn_predict_layers=n)
            out[f"{module}/{n}"] = [rule(config, name) is not None for name in names]
    print(json.dumps(out))
""")
RULE_NAMES = [*NAMES, "model.language_model.layers.61.x", "mtp.layers.61.x", "layers.62.x", "model.layers.63.x"]


def test_each_mtp_drafters_weight_rule_read_is_vllms():
    read = tree_reader(site_packages(str(VLLM_PYTHON)))
    models = site_packages(str(VLLM_PYTHON)) / "vllm" / "model_executor" / "models"
    rules = {p.stem: spec_layer_rule(read, f"vllm/model_executor/models/{p.name}") for p in models.glob("*_mtp.py")}
    read_ones = sorted(module for module, rule in rules.items() if rule is not None)
    assert {"deepseek_mtp", "glm4_moe_mtp"} <= set(read_ones), rules
    asked = ask_vllm(RULE_ASK, json.dumps(read_ones), json.dumps(RULE_NAMES))
    assert isinstance(asked, dict)
    for module in read_ones:
        prefixes, anywhere = rules[module]  # type: ignore[misc]
        for n in (1, 2):
            wanted = tuple(f"{p}{61 + i}." for i in range(n) for p in prefixes)
            ours = [name.startswith(wanted) or (anywhere and any(w in name for w in wanted)) for name in RULE_NAMES]
            assert ours == asked[f"{module}/{n}"], (module, n, ours)


def test_a_separate_mtp_checkpoint_whose_heads_tp_does_not_divide_is_refused_as_vllm_refuses_it(tmp_path):
    """vLLM verifies the draft ModelConfig with the draft tensor-parallel size (-tp) at start: a DeepSeek-V3
    checkpoint of its own with 6 heads under -tp 4 is refused, one with 8 is taken; the static finding agrees."""
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    cases = {}
    for heads in (6, 8):
        model = tmp_path / f"heads{heads}"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({**DEEPSEEK_V3, "num_attention_heads": heads}))
        cases[str(heads)] = (
            str(tmp_path / "target"),
            {"method": "mtp", "model": str(model), "num_speculative_tokens": 1},
        )
    on_four = REFUSED.replace("skip_tokenizer_init=True", "skip_tokenizer_init=True, tensor_parallel_size=4")
    refused = ask_vllm(on_four, json.dumps(cases))
    assert isinstance(refused, dict) and refused["8"] is None, refused
    assert "Total number of attention heads (6) must be divisible by tensor parallel size (4)" in str(refused["6"])
    for name, (target, spec) in cases.items():
        found = preflight_findings("vllm", "serve", target, "-tp", "4", "--speculative-config", json.dumps(spec))
        said = [f for f in found if f["check"] == "drafter-architecture" and not f["ok"]]
        assert bool(said) == (refused[name] is not None), (name, said)
        assert all("refuses the launch at start" in f["message"] for f in said), said
