"""Opt-in (`make test-vllm`): a quantization the launch names that is not the checkpoint's own
(review43a S6), for the target (--quantization) and the drafter (--speculative-config's
"quantization"), is failed by patchkit's static reading (patchkit/launch/quant_match.py) only where
the real vLLM's create_engine_config() refuses it ("does not match"), CPU platform forced; and a
refusal vLLM makes is never passed silently (failed, or "cannot judge" where an override may take it)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from vllm_overlay import TINY_LLAMA, ask_vllm, preflight_findings, site_packages

from patchkit.launch.command import parse
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model
from patchkit.launch.quant_match import quantization_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

LLAMA = {**TINY_LLAMA, "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 2048}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
# DeepSeek-V3's own config.json with one MTP layer (create_engine_config builds no model)
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
    "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16", "hidden_act": "silu", "rope_theta": 10000,
    "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "num_nextn_predict_layers": 1,
}  # fmt: skip
CT = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {}}
MODELS = {
    "plain": LLAMA,
    "dsv3_fp8": {**DEEPSEEK_V3, "quantization_config": FP8},
    "no_method": {**LLAMA, "quantization_config": {"bits": 4}},
    "null_beside_ct": {**LLAMA, "quantization_config": None, "compression_config": CT},
    "method_null": {**LLAMA, "quantization_config": {"quant_method": None}},
    "fp8": {**LLAMA, "quantization_config": FP8},
    "gptq": {**LLAMA, "quantization_config": GPTQ},
    "awq_file": LLAMA,  # no quantization_config; quant_config.json beside it (FILES)
    "drafter_fp8": {
        **LLAMA,
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_hidden_layers": 1,
        "quantization_config": FP8,
    },
}
AWQ_FILE = {"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True, "version": "gemm"}
FILES = {"awq_file": {"quant_config.json": AWQ_FILE}}
SPEC = {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3}
LINES = [
    ("fp8", ["-q", "awq"]),
    ("fp8", ["-q", "gptq"]),
    ("fp8", ["-q", "compressed-tensors"]),
    ("fp8", ["-q", "fp8"]),
    ("fp8", ["-q", "FP8"]),  # ModelConfig lower-cases it: the checkpoint's own
    ("fp8", ["-q", "AWQ"]),
    ("gptq", ["-q", "gptq_marlin"]),
    ("gptq", ["-q", "fp8"]),
    ("plain", ["--speculative-config", json.dumps({**SPEC, "quantization": "awq"})]),
    ("plain", ["--speculative-config", json.dumps({**SPEC, "quantization": "fp8"})]),
    ("plain", ["--speculative-config", json.dumps({**SPEC, "quantization": ""})]),
    # review44a T2: mtp without "model": the draft ModelConfig is the target's own checkpoint
    (
        "dsv3_fp8",
        ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1, "quantization": "awq"})],
    ),
    (
        "dsv3_fp8",
        ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1, "quantization": "fp8"})],
    ),
    # review44a L1: no quant_method (vLLM's None matches no -q); a null quantization_config beside compression_config
    ("no_method", ["-q", "fp8"]),
    ("null_beside_ct", ["-q", "fp8"]),
    ("null_beside_ct", []),
    # a quant_method that is no text: vLLM's own .lower() raises, --quantization or not
    ("method_null", []),
    ("method_null", ["-q", "fp8"]),
    # diff34 D1: no quantization_config: get_quant_config looks for the method's own file, or builds its class bare
    ("plain", ["-q", "awq"]),
    ("plain", ["-q", "gptq"]),
    ("plain", ["-q", "compressed-tensors"]),
    ("plain", ["-q", "fp8"]),
    ("awq_file", ["-q", "awq", "--dtype", "float16"]),  # its from_config takes the file: it starts
]
ASK_VLLM = textwrap.dedent("""\
    import json, sys
    from patchkit._target import engine_config
    refused = []
    for line in json.loads(sys.argv[1]):
        answer = engine_config.work({"arguments": line, "serve": True, "args": line})
        refused.append(None if answer["status"] == "ok" else answer.get("error", answer["status"])[-600:])
    print(json.dumps(refused))
    """)


def _refused_at_start(refused: str | None) -> bool:
    said = (
        "does not match the quantization",
        "literal_error",
        "object has no attribute 'lower'",
        "'NoneType' object has no attribute 'to_dict'",  # transformers' to_dict on "quantization_config": null
        "Cannot find the config file for",
        "Config.__init__() missing",  # CompressedTensorsConfig() built bare: TypeError
    )
    return refused is not None and any(words in refused for words in said)


def test_a_quantization_not_the_checkpoints_own_is_failed_only_where_vllm_refuses_it(tmp_path: Path):
    for name, config in MODELS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        for file, content in FILES.get(name, {}).items():
            (tmp_path / name / file).write_text(json.dumps(content))
    drafter = str(tmp_path / "drafter_fp8")
    lines = [[str(tmp_path / name), *(w.replace("DRAFTER", drafter) for w in words)] for name, words in LINES]
    vllm_refused = ask_vllm(ASK_VLLM, json.dumps(lines))
    site = site_packages(str(VLLM_PYTHON))
    wrong, failed = [], 0
    for line, refused in zip(lines, vllm_refused, strict=True):
        command = parse(["vllm", "serve", *line], "0.16.0")
        spec = command.speculative_config or {}
        own = resolve_model(drafter, {}) if spec.get("model") else None
        context = LaunchContext(command, resolve_model(line[0], {}), own, site, None, None)
        found = quantization_findings("command", context)
        fails = any(not f.ok for f in found)
        failed += fails
        if (fails and not _refused_at_start(refused)) or (not found and _refused_at_start(refused)):
            wrong.append((line[1:], [f.message for f in found], refused))
    assert failed >= 14, vllm_refused  # the refusals patchkit is sure of were made
    assert not wrong, json.dumps(wrong, indent=1)


def test_on_the_import_path_vllms_validation_on_the_cpu_platform_is_said_to_leave_it_to_the_node(tmp_path: Path):
    """review44a T11: vLLM's validation ran (here on the CPU platform, which takes -q marlin for a gptq
    checkpoint): the static cannot-judge stays, its fix no longer the command just run but the node."""
    (tmp_path / "gptq").mkdir()
    (tmp_path / "gptq" / "config.json").write_text(json.dumps(MODELS["gptq"]))
    argv = ["vllm", "serve", str(tmp_path / "gptq"), "-q", "marlin"]
    found = {
        f["check"]: f for f in preflight_findings(*argv, static=False) if f["check"] in ("command", "vllm-validation")
    }
    assert found["vllm-validation"]["ok"] and "CPU platform" in found["vllm-validation"]["message"], found
    assert found["command"]["result"] == "cannot judge", found
    assert "ran on the CPU platform" in found["command"]["fix"] and "on the node" in found["command"]["fix"], found
