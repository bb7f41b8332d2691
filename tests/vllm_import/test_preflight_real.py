"""Opt-in (`make test-vllm`): `patchkit preflight` through vLLM's own create_engine_config() and
supports_eagle3() in the venv with the real vLLM wheel. On stock files vLLM's own whitelist refuses
a DeepSeek-V3 target with method eagle3 ("Eagle3 is only supported for [...] models"), given key by
key, and supports_eagle3() is False; after apply both pass; the test reverts at the end. Not collected by `make test` (pyproject norecursedirs)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from launch_fixtures import EMPTY_SAFETENSORS, write_model, write_weights
from vllm_overlay import (
    DRAFTER_BUILT,
    ENGINE_ARGS_ON_CPU,
    ON_CPU,
    TINY_DRAFTER,
    TINY_LLAMA,
    TINY_WEIGHTS,
    WIDE_DEEPSEEK_V3,
    ask_vllm,
    overlay_venv,
)

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

TARGET = {**WIDE_DEEPSEEK_V3, "num_hidden_layers": 4, "vocab_size": 32000, "kv_lora_rank": 64, "q_lora_rank": 128}
TARGET |= {"qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
DEEPSEEK_V3_CLASS = "vllm.model_executor.models.deepseek_v2.DeepseekV3ForCausalLM"
DRAFTER = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_hidden_layers": 1,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "max_position_embeddings": 4096,
    "vocab_size": 32000,
    "draft_vocab_size": 32000,
    "torch_dtype": "bfloat16",
    # 3 distinct layers of the 4-layer target, as EAGLE-3's fc takes (the default, (2, 2, 1), gives 2);
    # not layer 0, where the forward adds a residual that is still None (drafter-aux-layers fails it)
    "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
}


def patchkit(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True, timeout=900
    )


def finding(done, check: str) -> dict:
    return next(f for f in json.loads(done.stdout)["findings"] if f["check"] == check)


def pasted(fix: str) -> list[str]:
    """The arguments of the patchkit command a "run `patchkit ...`" hint names, as a shell reads it."""
    command = re.fullmatch(r"run `patchkit ([^`]+)`", fix)
    assert command, fix
    return shlex.split(command.group(1))


@pytest.fixture
def python(tmp_path: Path) -> Path:
    """The interpreter of an overlay of the real venv: apply and revert write there only."""
    return overlay_venv(VLLM_PYTHON, tmp_path / "venv")


def assert_drafter_verdicts(cases: list, refused: dict, words: str) -> None:
    """Each (target, drafter, --max-model-len or None) case's drafter-architecture finding agrees with what
    vLLM said of it (`refused`: None where it built the drafter); a failure says `words`."""
    for case in cases:
        target, drafter, length = case
        spec = json.dumps({"method": "eagle3", "model": drafter, "num_speculative_tokens": 2})
        given = ("--max-model-len", str(length)) if length else ()
        done = patchkit(
            "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
            "vllm", "serve", target, "--speculative-config", spec, *given,
        )  # fmt: skip
        found = finding(done, "drafter-architecture")
        said = refused[json.dumps(list(case))]
        assert found["ok"] is (said is None), (case, said, found)
        assert found["ok"] or words in found["message"], found


def test_vllms_own_validation_fails_on_stock_and_passes_after_apply(tmp_path: Path, python: Path):
    for name, config in (("target", TARGET), ("drafter", DRAFTER)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        (tmp_path / name / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)  # a weight file for vLLM's loader
    serve = ["vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init"]
    spec = json.dumps({"method": "eagle3", "model": str(tmp_path / "drafter"), "num_speculative_tokens": 2})
    # key by key on stock: vLLM's own parser must build the object (its engine parser alone ignores it)
    dotted = [*serve, "--speculative-config.method", "eagle3", "--speculative_config.model", str(tmp_path / "drafter")]
    preflight = ["preflight", "--python", python, "--format", "json", "--"]

    assert patchkit("status", "--python", python, "--format", "json").returncode == 0
    done = patchkit(*preflight, *dotted, "--speculative-config.num_speculative_tokens", "2")
    assert done.returncode == 1, done.stderr
    assert "Eagle3 is only supported for" in finding(done, "vllm-validation")["message"]
    supports = finding(done, "supports-eagle3")
    # the hint names the venv the user chose (a bare `patchkit apply` would patch the vLLM of
    # whatever python is first on PATH, or none) and the set this launch needs (set.toml's [needed_by])
    fix = shlex.join(["patchkit", "apply", "--python", str(python), "--set", "eagle3"])
    assert not supports["ok"] and supports["fix"] == f"run `{fix}`"
    assert f"vLLM's supports_eagle3() is False for {DEEPSEEK_V3_CLASS}" in supports["message"]

    applied = patchkit(*pasted(supports["fix"]))
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    try:
        done = patchkit(*preflight, *serve, "--speculative-config", spec)
        assert finding(done, "vllm-validation")["ok"], finding(done, "vllm-validation")["message"]
        assert (
            f"vLLM's supports_eagle3() is True for {DEEPSEEK_V3_CLASS}" in finding(done, "supports-eagle3")["message"]
        )
        assert done.returncode == 0, done.stdout
    finally:
        assert patchkit("revert", "--python", python).returncode == 0


def test_a_reasoning_parser_in_structured_outputs_config_is_judged_by_the_names_vllm_registers(tmp_path: Path):
    """Review 11 M2a with import: vLLM's validate_api_server_args reads --structured-outputs-config's
    reasoning_parser at start; patchkit's finding names what vLLM's own registry lists."""
    assert VLLM_PYTHON
    listed = subprocess.run(
        [VLLM_PYTHON, "-c", "from vllm.reasoning import ReasoningParserManager as M; print(*M.list_registered())"],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout.split()  # fmt: skip
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET))
    (tmp_path / "target" / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)  # a weight file for vLLM's loader
    serve = ["vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init"]
    for name, ok in (("deepseek_r2", False), (listed[0], True)):
        inner = json.dumps({"reasoning_parser": name})
        done = patchkit("preflight", "--python", VLLM_PYTHON, "--format", "json", "--", *serve,
                        "--structured-outputs-config", inner)  # fmt: skip
        found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]
        assert [f["ok"] for f in found] == ([] if ok else [False]), done.stdout
        if not ok:
            assert "it refuses the launch at start" in found[0]["message"]


# review37 A8: --model-impl transformers with EAGLE-3. vLLM then builds the target as its Transformers
# modeling backend's class, whose EAGLE-3 needs a transformers the venv may not have.
RESOLVED = """
import json, sys
from vllm.config import ModelConfig
config = ModelConfig(model=sys.argv[1], model_impl="transformers", skip_tokenizer_init=True)
import transformers
print(json.dumps([config._architecture, transformers.__version__]))
"""
REFUSED = """
import json, sys
from vllm.model_executor.models.transformers.base import Base
try:
    Base.check_version(sys.argv[1], "Eagle3 support")
    print(json.dumps(None))
except ImportError as exc:
    print(json.dumps(str(exc)))
"""


def supports(done: subprocess.CompletedProcess) -> dict:
    return next(f for f in json.loads(done.stdout)["findings"] if f["check"] == "supports-eagle3")


def test_model_impl_transformers_fails_eagle3_on_the_backend_vllm_builds(tmp_path: Path):
    for name, config in (("target", TARGET), ("drafter", DRAFTER)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        (tmp_path / name / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    spec = json.dumps({"method": "eagle3", "model": str(tmp_path / "drafter"), "num_speculative_tokens": 2})
    serve = ["vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init", "--speculative-config", spec]
    built, installed = ask_vllm(RESOLVED, str(tmp_path / "target"))  # what vLLM itself builds, and its transformers

    # the real venv, read only (the overlay reaches its packages through a .pth's code, which patchkit does not run)
    done = patchkit(
        "preflight", "--python", VLLM_PYTHON, "--format", "json", "--", *serve, "--model-impl", "transformers"
    )
    found = supports(done)
    assert done.returncode == 1 and not found["ok"], found
    said = re.search(
        r"backend's (\w+), which needs transformers>=(\S+) .*the launch's Python has (\S+):", found["message"]
    )
    assert said and said[1] == built and said[3] == installed, found["message"]
    refusal = ask_vllm(REFUSED, said[2])  # vLLM's own check refuses this venv at the version named
    assert refusal and f"requires transformers>={said[2]} for Eagle3 support, but got {installed}" in refusal
    assert found["fix"] == "drop --model-impl transformers: vLLM then builds its own DeepseekV3ForCausalLM"

    python = overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")  # the fix, followed, where the set is applied
    applied = patchkit("apply", "--python", python, "--set", "eagle3")
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    try:
        followed = patchkit("preflight", "--python", python, "--format", "json", "--", *serve)
        assert supports(followed)["ok"], supports(followed)
        assert f"vLLM's supports_eagle3() is True for {DEEPSEEK_V3_CLASS}" in supports(followed)["message"]
    finally:
        assert patchkit("revert", "--python", python).returncode == 0


# review37 L-j: a VLLM_PP_LAYER_PARTITION vLLM's get_pp_indices refuses, in its own words.
PP_INDICES = """
import json, os, sys
from vllm.distributed.utils import get_pp_indices
said = {}
for partition in sys.argv[3:]:
    os.environ["VLLM_PP_LAYER_PARTITION"] = partition
    try:
        said[partition] = repr(get_pp_indices(int(sys.argv[1]), 0, int(sys.argv[2])))
    except ValueError as exc:
        said[partition] = str(exc)
print(json.dumps(said))
"""


def test_a_layer_partition_vllm_refuses_fails_drafter_aux_layers_with_vllms_words(tmp_path: Path):
    layers = 61
    target = {**TARGET, "num_hidden_layers": layers}
    drafter = {**DRAFTER, "eagle_aux_hidden_state_layer_ids": [40, 50, 60]}
    for name, config in (("target", target), ("drafter", drafter)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        (tmp_path / name / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    spec = json.dumps({"method": "eagle3", "model": str(tmp_path / "drafter"), "num_speculative_tokens": 2})
    partitions = ["abc", "", "30,30", "61"]
    refused = ask_vllm(PP_INDICES, str(layers), "2", *partitions)
    for partition in partitions:
        launch = ["env", f"VLLM_PP_LAYER_PARTITION={partition}", "vllm", "serve", str(tmp_path / "target")]
        done = patchkit(
            "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
            *launch, "-pp", "2", "--speculative-config", spec,
        )  # fmt: skip
        found = finding(done, "drafter-aux-layers")
        assert not found["ok"] and f"({refused[partition]})" in found["message"], (refused, found)


# review38 B5: vLLM builds the drafter's LlamaMLP (llama.py) only after the target's load; asked here on CPU
LLAMA_MLP = """
import json, os, sys, tempfile
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()
from vllm.distributed import init_distributed_environment, initialize_model_parallel
init_distributed_environment(1, 0, f"file://{tempfile.mktemp()}", 0, "gloo")
initialize_model_parallel(1, 1)
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.models.llama import LlamaMLP
said = {}
for act in sys.argv[1:]:
    try:
        with set_current_vllm_config(VllmConfig()):
            LlamaMLP(hidden_size=64, intermediate_size=128, hidden_act=act)
        said[act] = None
    except Exception as exc:
        said[act] = str(exc)
print(json.dumps(said))
"""


def test_a_drafter_activation_fails_drafter_architecture_exactly_where_vllms_llama_mlp_refuses_it(tmp_path: Path):
    activations = ["silu", "gelu", "relu", "gelu_pytorch_tanh"]
    refused = ask_vllm(LLAMA_MLP, *activations)
    assert refused["silu"] is None and refused["gelu"], refused
    write_model(tmp_path / "target", TARGET)
    for act in activations:
        drafter = write_model(tmp_path / act, {**DRAFTER, "hidden_act": act})
        spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})
        done = patchkit(
            "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
            "vllm", "serve", str(tmp_path / "target"), "--speculative-config", spec,
        )  # fmt: skip
        found = finding(done, "drafter-architecture")
        assert found["ok"] is (refused[act] is None), (act, refused[act], found)
        assert found["ok"] or f"hidden_act '{act}' is not silu" in found["message"], found


# the speculative config's quantization is the drafter's own, read only building it (after the target's
# load): vLLM's get_draft_quant_config on the engine config vLLM makes of the launch, asked here on CPU
DRAFT_QUANT = (
    ENGINE_ARGS_ON_CPU
    + """\
from vllm.model_executor.models.utils import get_draft_quant_config
said = {}
target, cases = sys.argv[1], json.loads(sys.argv[2])
for directory, method in cases:
    spec = {"method": "eagle3", "model": directory, "num_speculative_tokens": 2, "quantization": method}
    try:
        config = EngineArgs(model=target, skip_tokenizer_init=True, speculative_config=spec).create_engine_config()
        get_draft_quant_config(config)
        said[f"{directory} {method}"] = None
    except Exception as exc:
        said[f"{directory} {method}"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(said))
"""
)
AWQ = {"bits": 4, "group_size": 128, "zero_point": True}


def test_a_speculative_quantization_fails_drafter_architecture_exactly_where_vllm_finds_no_config(tmp_path: Path):
    write_model(tmp_path / "target", TARGET)
    plain = write_model(tmp_path / "plain", DRAFTER)
    awq = write_model(tmp_path / "awq", {**DRAFTER, "torch_dtype": "float16"})  # AWQ takes float16 only
    (awq / "quant_config.json").write_text(json.dumps(AWQ))
    fp8 = write_model(
        tmp_path / "fp8", {**DRAFTER, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    )
    cases = [(str(plain), "awq"), (str(plain), "gptq"), (str(plain), "fp8"), (str(awq), "awq"), (str(fp8), "fp8")]
    llama = write_model(tmp_path / "llama", TINY_LLAMA)  # a target stock vLLM takes EAGLE-3 for: the drafter is asked
    refused = ask_vllm(DRAFT_QUANT, str(llama), json.dumps(cases))
    # 0.16.0: a drafter whose config.json holds no quantization_config fails on the draft config's hf_overrides
    failing = [said for case, said in refused.items() if case != f"{fp8} fp8"]
    assert refused[f"{fp8} fp8"] is None and all("AttributeError" in said for said in failing), refused
    for directory, method in cases:
        spec = {"method": "eagle3", "model": directory, "num_speculative_tokens": 2, "quantization": method}
        done = patchkit(
            "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
            "vllm", "serve", str(tmp_path / "target"), "--speculative-config", json.dumps(spec),
        )  # fmt: skip
        found = finding(done, "drafter-architecture")
        said = refused[f"{directory} {method}"]
        assert found["ok"] is (said is None), (directory, method, said, found)
        assert found["ok"] or "quantization" in found["message"], found


def drafter_finding(target: Path, drafter: Path) -> dict:
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})
    done = patchkit(
        "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
        "vllm", "serve", str(target), "--speculative-config", spec,
    )  # fmt: skip
    return finding(done, "drafter-architecture")


def test_a_drafter_layer_types_fails_drafter_architecture_exactly_where_vllm_fails_building_it(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    cases = {
        "short": {"num_hidden_layers": 2, "layer_types": ["full_attention"]},
        "whole": {"num_hidden_layers": 2, "layer_types": ["full_attention"] * 2},
        "empty": {"num_hidden_layers": 2, "layer_types": []},
        "number": {"layer_types": 5},
        "object": {"layer_types": {"a": "full_attention"}},
        "string": {"num_hidden_layers": 2, "layer_types": "full_attention"},
        "short-string": {"num_hidden_layers": 3, "layer_types": "ab"},
    }
    drafters = {name: write_model(tmp_path / name, {**TINY_DRAFTER, **change}) for name, change in cases.items()}
    refused = ask_vllm(DRAFTER_BUILT, str(target), *map(str, drafters.values()))
    assert refused[str(drafters["whole"])] is None and "AssertionError" in refused[str(drafters["short"])], refused
    for name, drafter in drafters.items():
        found = drafter_finding(target, drafter)
        said = refused[str(drafter)]
        assert found["ok"] is (said is None), (name, said, found)
        assert found["ok"] or "layer_types" in found["message"], found


WEIGHT_CASES = {
    "whole": ({}, {}),
    "fc-of-another-target": ({"fc.weight": [256, 384]}, {}),
    "fc-out": ({"fc.weight": [128, 768]}, {}),
    "lm-head-full-vocab": ({"lm_head.weight": [1000, 256]}, {}),
    "lm-head-narrow": ({"lm_head.weight": [500, 128]}, {}),
    "d2t-full-vocab": ({"d2t": [1000]}, {}),
    "t2d-odd": ({"t2d": [7]}, {}),
    "q-head-dim-32": ({"midlayer.self_attn.q_proj.weight": [128, 512]}, {}),
    "q-larger": ({"midlayer.self_attn.q_proj.weight": [512, 512]}, {}),
    "q-one-hidden": ({"midlayer.self_attn.q_proj.weight": [256, 256]}, {}),
    "q-flat": ({"midlayer.self_attn.q_proj.weight": [256]}, {}),
    "k-fewer-heads": ({"midlayer.self_attn.k_proj.weight": [64, 512]}, {}),
    "v-more-heads": ({"midlayer.self_attn.v_proj.weight": [256, 512]}, {}),
    "o-narrow": ({"midlayer.self_attn.o_proj.weight": [256, 128]}, {}),
    "o-tall": ({"midlayer.self_attn.o_proj.weight": [512, 256]}, {}),
    "gate-narrow": ({"midlayer.mlp.gate_proj.weight": [512, 128]}, {}),
    "up-short": ({"midlayer.mlp.up_proj.weight": [256, 256]}, {}),
    "down-wide": ({"midlayer.mlp.down_proj.weight": [256, 1024]}, {}),
    "down-narrow": ({"midlayer.mlp.down_proj.weight": [256, 256]}, {}),
    "norm": ({"norm.weight": [128]}, {}),
    "hidden-norm": ({"midlayer.hidden_norm.weight": [128]}, {}),
    "embed": ({"embed_tokens.weight": [1000, 256]}, {}),
    "embed-short": ({"embed_tokens.weight": [500, 256]}, {}),
    "second-layer": ({"layers.1.mlp.up_proj.weight": [512, 256]}, {}),
    "two-layers": ({"layers.1.mlp.up_proj.weight": [512, 256]}, {"num_hidden_layers": 2}),
    "head-dim-32": (
        {"midlayer.self_attn.q_proj.weight": [128, 512], "midlayer.self_attn.k_proj.weight": [64, 512]},
        {"head_dim": 32},
    ),
    "no-aux": ({"fc.weight": [256, 256]}, {"eagle_config": {"use_aux_hidden_state": False}}),
}


def test_drafter_weights_fail_drafter_architecture_exactly_where_vllms_loader_refuses_them(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {}
    for name, (change, config) in WEIGHT_CASES.items():
        drafters[name] = write_model(tmp_path / name, {**TINY_DRAFTER, **config})
        write_weights(drafters[name], {**TINY_WEIGHTS, **change})
    refused = ask_vllm(DRAFTER_BUILT, str(target), *map(str, drafters.values()))
    assert refused[str(drafters["whole"])] is None and refused[str(drafters["fc-of-another-target"])], refused
    for name, drafter in drafters.items():
        found = drafter_finding(target, drafter)
        said = refused[str(drafter)]
        assert found["ok"] is (said is None), (name, said, found)
        assert found["ok"] or "its weights" in found["message"], found


# review39 C9: tensor names the built drafter has no parameter for, as llama_eagle3.py renames them
QKV_BIASES = {"midlayer.self_attn.q_proj.bias": [256], "midlayer.self_attn.k_proj.bias": [128]}
NAME_CASES = {
    "whole": (TINY_WEIGHTS, {}),
    "qk-bias": ({**TINY_WEIGHTS, **QKV_BIASES}, {}),
    "qk-bias-built": ({**TINY_WEIGHTS, **QKV_BIASES}, {"attention_bias": True}),
    "qk-bias-of-bias": ({**TINY_WEIGHTS, **QKV_BIASES}, {"bias": True}),
    "o-bias": ({**TINY_WEIGHTS, "midlayer.self_attn.o_proj.bias": [256]}, {}),
    "o-bias-of-bias": ({**TINY_WEIGHTS, "midlayer.self_attn.o_proj.bias": [256]}, {"bias": True}),
    "mlp-bias": ({**TINY_WEIGHTS, "midlayer.mlp.gate_proj.bias": [512]}, {}),
    "mlp-bias-built": ({**TINY_WEIGHTS, "midlayer.mlp.down_proj.bias": [256]}, {"mlp_bias": True}),
    "lm-head-bias": ({**TINY_WEIGHTS, "lm_head.bias": [500]}, {}),
    "extra-head": ({**TINY_WEIGHTS, "extra_head.weight": [256, 256]}, {}),
    "q-norm": ({**TINY_WEIGHTS, "midlayer.self_attn.q_norm.weight": [64]}, {}),
    "inv-freq": ({**TINY_WEIGHTS, "midlayer.self_attn.rotary_emb.inv_freq": [32]}, {}),
    "mask-hidden": ({**TINY_WEIGHTS, "mask_hidden": [768]}, {}),
    "model-prefix": ({k if k.startswith("lm_head") else f"model.{k}": v for k, v in TINY_WEIGHTS.items()}, {}),
    "layers-0": ({k.replace("midlayer.", "layers.0."): v for k, v in TINY_WEIGHTS.items()}, {}),
    "model-embed": ({**TINY_WEIGHTS, "model.embed_tokens.weight": [1000, 256]}, {}),
    "model-lm-head": ({**TINY_WEIGHTS, "model.lm_head.weight": [500, 256]}, {}),
    "mapping-unnamed": ({**TINY_WEIGHTS, "draft_id_to_target_id": [500], "d2t": None}, {}),
    "fc-unbuilt": (TINY_WEIGHTS, {"eagle_config": {"use_aux_hidden_state": False}}),
}


def test_drafter_weight_names_fail_drafter_architecture_exactly_where_vllms_loader_has_no_parameter(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {}
    for name, (weights, config) in NAME_CASES.items():
        drafters[name] = write_model(tmp_path / name, {**TINY_DRAFTER, **config})
        write_weights(drafters[name], {k: v for k, v in weights.items() if v is not None})
    refused = ask_vllm(DRAFTER_BUILT, str(target), *map(str, drafters.values()))
    assert refused[str(drafters["whole"])] is None and "KeyError" in refused[str(drafters["qk-bias"])], refused
    for name, drafter in drafters.items():
        found = drafter_finding(target, drafter)
        said = refused[str(drafter)]
        assert found["ok"] is (said is None), (name, said, found)
        assert found["ok"] or "no parameter for" in found["message"], found


# review38 A8 (Low): the backend class vLLM itself picks for each config (its config class's defaults count)
PICKED = (
    ON_CPU
    + """\
from vllm.config import ModelConfig
said = {}
for model in sys.argv[1:]:
    said[model] = ModelConfig(model=model, model_impl="transformers", skip_tokenizer_init=True)._architecture
print(json.dumps(said))
"""
)
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
}


def test_the_backend_class_named_is_the_one_vllm_picks(tmp_path: Path):
    dense_v3 = {k: v for k, v in TARGET.items() if k != "n_routed_experts"}  # DeepseekV3Config's default: 256
    targets = {
        "v3": TARGET,
        "v3-default-experts": dense_v3,
        "v3-first-key-zero": {**TARGET, "num_experts": 0},
        "qwen3-moe-default-experts": QWEN3_MOE,
        "llama": TINY_LLAMA,
    }
    models = {name: write_model(tmp_path / name, config) for name, config in targets.items()}
    picked = ask_vllm(PICKED, *map(str, models.values()))
    assert picked[str(models["v3-default-experts"])] == "TransformersMoEForCausalLM", picked
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})
    for name, model in models.items():
        done = patchkit(
            "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
            "vllm", "serve", str(model), "--model-impl", "transformers", "--speculative-config", spec,
        )  # fmt: skip
        found = supports(done)
        assert f"Transformers backend's {picked[str(model)]}, which" in found["message"], (name, picked, found)


# review39 C4: one named attention backend serves the drafter's layers too; vLLM's CUDA platform raises for a
# backend whose validate_configuration refuses the layer (cuda.py's get_attn_backend_cls), asked here per member
NON_MLA_LAYER = """
import json
import torch
from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backends.registry import AttentionBackendEnum
said = {}
for member in AttentionBackendEnum:
    try:
        cls = member.get_class()
    except Exception:
        continue  # not importable on this machine: not compared
    reasons = cls.validate_configuration(
        head_size=128, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=None, use_mla=False, has_sink=False,
        use_sparse=False, use_mm_prefix=False, attn_type="decoder", device_capability=DeviceCapability(9, 0),
    )
    said[member.name] = bool(reasons)  # what cuda.py raises for
print(json.dumps(said))
"""


def test_an_attention_backend_fails_drafter_architecture_exactly_where_vllm_refuses_it_for_a_non_mla_layer(
    tmp_path: Path,
):
    refused = ask_vllm(NON_MLA_LAYER)
    assert refused.get("TRITON_MLA") is True and refused.get("FLASH_ATTN") is False, refused
    refused = {name: refuses for name, refuses in refused.items() if "SPARSE" not in name}  # a DeepSeek-V3.2 kind
    target = write_model(tmp_path / "target", TARGET)  # MLA: a kv_lora_rank
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})
    for name, refuses in refused.items():
        done = patchkit(
            "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
            "vllm", "serve", str(target), "--speculative-config", spec, "--attention-backend", name.lower(),
        )  # fmt: skip
        found = finding(done, "drafter-architecture")
        assert found["ok"] is not refuses, (name, found)
        assert found["ok"] or f"--attention-backend {name.lower()} is an MLA backend" in found["message"], found


# review39 C6: vLLM builds the EAGLE-3 drafter (on CPU here) and gathers its rotary table at the last position
# the target's max_model_len admits, as its propose step does for a request that long
DRAFTER_POSITIONS = """
import json, sys, tempfile
import torch
from patchkit._target.engine_config import _force_cpu_platform_when_none
import vllm
_force_cpu_platform_when_none()
from vllm.config import set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.engine.arg_utils import EngineArgs
init_distributed_environment(1, 0, f"file://{tempfile.mktemp()}", 0, "gloo")
initialize_model_parallel(1, 1)
from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
said = {}
for case in json.loads(sys.argv[1]):
    target, drafter, length = case
    spec = {"method": "eagle3", "model": drafter, "num_speculative_tokens": 2}
    args = EngineArgs(model=target, skip_tokenizer_init=True, speculative_config=spec, max_model_len=length)
    config = args.create_engine_config()
    with set_current_vllm_config(config):
        built = Eagle3LlamaForCausalLM(vllm_config=config)
    table = built.model.layers[0].self_attn.rotary_emb.cos_sin_cache
    last = config.model_config.max_model_len - 1
    try:
        table.index_select(0, torch.tensor([last]))
        said[json.dumps(case)] = None
    except (IndexError, RuntimeError) as exc:
        said[json.dumps(case)] = f"{len(table)} rows, position {last}: {exc}"
print(json.dumps(said))
"""


def test_a_drafter_rotary_table_shorter_than_max_model_len_fails_exactly_where_vllm_indexes_past_it(tmp_path: Path):
    targets = {
        "plain": write_model(tmp_path / "plain", TINY_LLAMA),  # max_position_embeddings 1024
        "linear": write_model(tmp_path / "linear", {**TINY_LLAMA, "rope_scaling": {"type": "linear", "factor": 4.0}}),
        "yarn": write_model(
            tmp_path / "yarn",
            {
                **TINY_LLAMA,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
            },
        ),
    }
    (targets["plain"] / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 256}))  # not read
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    drafters = {
        name: write_model(tmp_path / f"d{name}", {**TINY_DRAFTER, **change})
        for name, change in {
            "512": {"max_position_embeddings": 512},
            "1024": {"max_position_embeddings": 1024},
            "2048": {"max_position_embeddings": 2048},
            "llama3-512": {
                "max_position_embeddings": 512,
                "rope_scaling": {**llama3, "original_max_position_embeddings": 256},
            },
        }.items()
    }
    cases = [
        (str(targets[t]), str(drafters[d]), length)
        for t, d, length in [
            ("plain", "512", None),
            ("plain", "512", 512),
            ("plain", "512", 768),
            ("plain", "1024", None),
            ("plain", "llama3-512", None),
            ("linear", "2048", None),
            ("linear", "2048", 2048),
            ("yarn", "1024", None),
            ("yarn", "2048", None),
        ]
    ]
    refused = ask_vllm(DRAFTER_POSITIONS, json.dumps(cases))
    assert refused[json.dumps(cases[0])] and refused[json.dumps(cases[1])] is None, refused
    assert_drafter_verdicts(cases, refused, "its rotary table holds")


# review39 C11: with no lm_head tensor vLLM hands the drafter the target's lm_head (_maybe_share_lm_head);
# the drafter's LogitsProcessor keeps the first draft_vocab_size columns, so a smaller draft vocabulary
# drafts (no shape error); one larger than the target's head does not (drafter-vocabulary fails it)
SHARED_HEAD = DRAFTER_BUILT.replace(
    "said[drafter] = None",
    """import torch
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
        target = config.model_config.hf_config
        with set_current_vllm_config(config):
            head = ParallelLMHead(target.vocab_size, target.hidden_size)
        rows = torch.randn(head.weight.shape[0], target.hidden_size)
        # CPU's lm_head method needs a post-load step; the product is what it computes
        head.quant_method = type("Plain", (), {"apply": staticmethod(lambda layer, x, bias=None: x @ rows.T)})()
        built.lm_head = head
        said[drafter] = None if built.compute_logits(torch.randn(2, target.hidden_size)).shape[1] else "empty\"""",
)


def test_a_drafter_without_lm_head_fails_exactly_where_vllms_drafted_logits_do_with_the_targets_head(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {}
    for draft in (500, 1000, 2000):
        drafters[draft] = write_model(tmp_path / f"draft-{draft}", {**TINY_DRAFTER, "draft_vocab_size": draft})
        weights = {name: shape for name, shape in TINY_WEIGHTS.items() if name != "lm_head.weight"}
        write_weights(drafters[draft], {**weights, "d2t": [draft]})
    said = ask_vllm(SHARED_HEAD, str(target), *map(str, drafters.values()))
    assert said[str(drafters[500])] is None and "shape mismatch" in said[str(drafters[2000])], said
    for drafter in drafters.values():
        spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})
        done = patchkit(
            "preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--",
            "vllm", "serve", str(target), "--speculative-config", spec,
        )  # fmt: skip
        found = [finding(done, check) for check in ("drafter-architecture", "drafter-vocabulary")]
        assert all(each["ok"] for each in found) is (said[str(drafter)] is None), (drafter, said, found)


# review39 C6's rest: the drafter's rotary table sized by its config class's default (LlamaConfig's 2048) or
# by its RoPE scaling (linear, dynamic: x factor; ntk: max_position_embeddings; yarn: its original x factor)
def test_a_drafter_table_by_its_default_or_its_scaling_fails_exactly_where_vllm_indexes_past_it(tmp_path: Path):
    targets = {
        "1k": write_model(tmp_path / "t1k", TINY_LLAMA),
        "4k": write_model(tmp_path / "t4k", {**TINY_LLAMA, "max_position_embeddings": 4096}),
    }
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}
    configs = {
        "default": {k: v for k, v in TINY_DRAFTER.items() if k != "max_position_embeddings"},
        "linear": {**TINY_DRAFTER, "max_position_embeddings": 512, "rope_scaling": {"type": "linear", "factor": 4.0}},
        "linear-half": {**TINY_DRAFTER, "rope_scaling": {"rope_type": "linear", "factor": 0.5}},  # 4096 x 0.5
        "dynamic": {**TINY_DRAFTER, "max_position_embeddings": 512, "rope_scaling": {"type": "dynamic", "factor": 4}},
        "ntk": {**TINY_DRAFTER, "max_position_embeddings": 512, "rope_scaling": {"rope_type": "ntk", "factor": 4.0}},
        "yarn": {**TINY_DRAFTER, "rope_scaling": yarn},  # 256 x 4, whatever max_position_embeddings (4096) says
    }
    drafters = {name: write_model(tmp_path / f"d-{name}", config) for name, config in configs.items()}
    cases = [(str(targets[t]), str(drafters[d]), None) for t in targets for d in drafters]
    cases += [(str(targets["4k"]), str(drafters[d]), length) for d, length in [("default", 2048), ("yarn", 1024)]]
    refused = ask_vllm(DRAFTER_POSITIONS, json.dumps(cases))
    assert refused[json.dumps(cases[6])] and refused[json.dumps(cases[0])] is None, refused  # default: 4k, 1k
    assert_drafter_verdicts(cases, refused, "its rotary table holds")


# llama.py reads config.sliding_window for a sliding_attention layer as it builds the drafter; vLLM's KV cache
# spec (get_kv_cache_spec, after the loads) asserts that an MLA model has no sliding layer
SLIDING_BUILT = DRAFTER_BUILT.replace(
    "        said[drafter] = None",
    "        for layer in built.model.layers:\n"
    "            layer.self_attn.attn.get_kv_cache_spec(config)\n"
    "        said[drafter] = None",
)


def test_a_drafter_sliding_layer_fails_exactly_where_vllm_fails_building_or_caching_it(tmp_path: Path):
    sliding = {"layer_types": ["sliding_attention"]}
    cases = {
        "none": sliding,
        "text": {**sliding, "sliding_window": "128"},
        "list": {**sliding, "sliding_window": [128]},
        "null": {**sliding, "sliding_window": None},
        "128": {**sliding, "sliding_window": 128},
        "full": {"layer_types": ["full_attention"], "sliding_window": 128},
    }
    llama = write_model(tmp_path / "llama", TINY_LLAMA)
    drafters = {name: write_model(tmp_path / name, {**TINY_DRAFTER, **change}) for name, change in cases.items()}
    refused = ask_vllm(SLIDING_BUILT, str(llama), *map(str, drafters.values()))
    assert "AttributeError" in refused[str(drafters["none"])] and refused[str(drafters["128"])] is None, refused
    for name, drafter in drafters.items():
        found = drafter_finding(llama, drafter)
        assert found["ok"] is (refused[str(drafter)] is None), (name, refused, found)
        assert found["ok"] or "sliding" in found["message"], found
    # an MLA target (DeepSeek-V3, where the set is applied): the KV cache spec's assert
    python = overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")
    applied = subprocess.run(
        [sys.executable, "-m", "patchkit", "apply", "--python", str(python), "--set", "eagle3"], capture_output=True
    )
    assert applied.returncode == 0, applied.stdout[-3000:]
    target = write_model(tmp_path / "deepseek", TARGET)
    mla = {name: write_model(tmp_path / f"mla-{name}", {**DRAFTER, **cases[name]}) for name in ("128", "full")}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    asked = subprocess.run(
        [str(python), "-B", "-c", SLIDING_BUILT, str(target), *map(str, mla.values())],
        capture_output=True, text=True, timeout=1200, env=env, check=True,
    )  # fmt: skip
    refused = json.loads(asked.stdout.strip().splitlines()[-1])
    assert "MLA is not supported for sliding" in refused[str(mla["128"])] and refused[str(mla["full"])] is None
    for name, drafter in mla.items():
        spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 2})
        done = patchkit(
            "preflight", "--python", python, "--no-import", "--format", "json", "--",
            "vllm", "serve", str(target), "--speculative-config", spec,
        )  # fmt: skip
        found = finding(done, "drafter-architecture")
        assert found["ok"] is (refused[str(drafter)] is None), (name, refused, found)
        assert found["ok"] or "under an MLA target" in found["message"], found


# longrope's table is two (the original length's, then max_position_embeddings'), and vLLM's get_rope memo is
# keyed without the max_model_len it reads: the rotary forward itself is run, the memo emptied a case
LONGROPE_POSITIONS = (
    DRAFTER_POSITIONS.replace(
        "    target, drafter, length = case\n",
        "    target, drafter, length = case\n"
        "    from vllm.model_executor.layers import rotary_embedding\n"
        "    rotary_embedding._ROPE_DICT.clear()\n",
    )
    .replace(
        "    table = built.model.layers[0].self_attn.rotary_emb.cos_sin_cache\n",
        "    attention = built.model.layers[0].self_attn\n"
        "    query = torch.randn(1, attention.num_heads * attention.head_dim)\n"
        "    key = torch.randn(1, attention.num_kv_heads * attention.head_dim)\n",
    )
    .replace(
        "        table.index_select(0, torch.tensor([last]))\n",
        "        attention.rotary_emb(torch.tensor([last]), query, key)\n",
    )
    .replace('f"{len(table)} rows, position {last}: {exc}"', 'f"position {last}: {exc}"')
)


def test_a_longrope_drafter_fails_exactly_where_vllms_rotary_forward_indexes_past_its_tables(tmp_path: Path):
    targets = {
        "1k": write_model(tmp_path / "t1k", TINY_LLAMA),
        "4k": write_model(tmp_path / "t4k", {**TINY_LLAMA, "max_position_embeddings": 4096}),
    }
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32}
    drafters = {
        original: write_model(
            tmp_path / f"d-{original}",
            {
                **TINY_DRAFTER,
                "max_position_embeddings": 512,
                "rope_scaling": {**longrope, "original_max_position_embeddings": original},
            },
        )
        for original in (256, 2048)
    }
    cases = [(str(targets[t]), str(drafters[d]), None) for t in targets for d in drafters]
    cases += [(str(targets["4k"]), str(drafters[d]), length) for d, length in [(256, 512), (2048, 2048), (2048, 2049)]]
    refused = ask_vllm(LONGROPE_POSITIONS, json.dumps(cases))
    assert refused[json.dumps(list(cases[0]))] and refused[json.dumps(list(cases[1]))] is None, refused
    assert_drafter_verdicts(cases, refused, "(its longrope RoPE scaling)")


def test_a_drafter_partial_rotary_factor_fails_exactly_where_vllms_get_rope_refuses_it(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    cases = {
        "over": {"partial_rotary_factor": 1.5},
        "zero": {"partial_rotary_factor": 0},
        "half": {"partial_rotary_factor": 0.5},
        "whole": {"partial_rotary_factor": 1},
        "text": {"partial_rotary_factor": "half"},
        "pct": {"rotary_pct": 2.0},
        "shadowed": {"partial_rotary_factor": None, "rotary_pct": 2.0},
        "in-rope": {"rope_scaling": {"rope_type": "default", "partial_rotary_factor": 2.0}},
    }
    drafters = {name: write_model(tmp_path / name, {**TINY_DRAFTER, **change}) for name, change in cases.items()}
    refused = ask_vllm(DRAFTER_BUILT, str(target), *map(str, drafters.values()))
    assert "must be between 0.0 and 1.0" in refused[str(drafters["over"])], refused
    assert refused[str(drafters["half"])] is None, refused
    for name, drafter in drafters.items():
        found = drafter_finding(target, drafter)
        assert found["ok"] is (refused[str(drafter)] is None), (name, refused, found)
        assert found["ok"] or "is not above 0 and at most 1" in found["message"], found


LOGGING_SETTINGS = ["VLLM_LOGGING_LEVEL=verbose", "VLLM_LOGGING_CONFIG_PATH=/nonexistent/logging.json"]


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (LOGGING_SETTINGS[0], "Unable to configure handler 'vllm'"),
        (LOGGING_SETTINGS[1], "Could not load logging config"),
    ],
)
def test_a_launch_setting_vllms_import_raises_with_fails_vllm_validation_naming_it(tmp_path: Path, setting, said):
    """vLLM's logger reads these at import (vllm/logger.py): the launch dies at import every time, while
    the same interpreter imports vLLM without them; the finding names the variable, not another --python."""
    assert VLLM_PYTHON
    name = setting.split("=")[0]
    imported = [VLLM_PYTHON, "-c", "import vllm"]
    assert subprocess.run(["env", setting, *imported], capture_output=True, timeout=600).returncode != 0
    assert subprocess.run(imported, capture_output=True, timeout=600).returncode == 0
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET))
    (tmp_path / "target" / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    serve = ["env", setting, "vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init"]
    done = patchkit("preflight", "--python", VLLM_PYTHON, "--format", "json", "--", *serve)
    found = finding(done, "vllm-validation")
    assert done.returncode == 1 and not found["ok"], found
    assert f"for its {name} (it imports without)" in found["message"] and said in found["message"], found
    assert found["fix"] == f"correct or unset {name}", found


@pytest.mark.parametrize(
    ("settings", "inherited", "said"),
    [
        (["TORCH_LOGS=bogus", "NCCL_DEBUG=INFO"], {}, "Invalid log settings: bogus"),
        (["NCCL_DEBUG=INFO"], {"HF_HUB_ETAG_TIMEOUT": "abc"}, "invalid literal for int()"),
    ],
)
def test_a_non_vllm_setting_vllms_import_raises_with_fails_naming_it(tmp_path: Path, settings, inherited, said):
    """torch reads TORCH_LOGS and huggingface_hub HF_HUB_ETAG_TIMEOUT as they import (checked; the second
    as vLLM imports its engine arguments, not at `import vllm`): every
    start of the launch dies there, while the same interpreter imports vLLM without them; the finding
    names the setting (the launch's own, or one it inherits), not another --python."""
    assert VLLM_PYTHON
    [name] = [s.split("=")[0] for s in settings if s.startswith(("TORCH_", "HF_"))] or list(inherited)
    imported = [VLLM_PYTHON, "-c", "import vllm.engine.arg_utils"]
    bad = {**os.environ, **inherited, **dict(s.split("=", 1) for s in settings)}
    assert subprocess.run(imported, capture_output=True, timeout=600, env=bad).returncode != 0
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET))
    (tmp_path / "target" / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    serve = ["env", *settings, "vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init"]
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "preflight", "--python", VLLM_PYTHON, "--format", "json", "--", *serve],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **inherited},
    )
    found = finding(done, "vllm-validation")
    assert done.returncode == 1 and not found["ok"], found
    assert f"for its {name} (it imports without)" in found["message"] and said in found["message"], found
    assert found["fix"].startswith(f"correct or unset {name}"), found


@pytest.mark.parametrize(
    ("name", "content", "imports", "result"),
    [
        ("bom.json", b'\xef\xbb\xbf{"version": 1}', False, "fail"),
        ("utf16.json", '{"version": 1}'.encode("utf-16"), False, "fail"),
        ("big.json", b'{"version": 1, "pad": "' + b"x" * (2 << 20) + b'"}', True, "cannot judge"),
        ("stream", b"", False, "cannot judge"),
        ("empty.json", b"", False, "fail"),  # json.loads("") raises: it was "cannot judge" (read as "gone since")
        ("digits.json", b'{"version": ' + b"1" * 5000 + b"}", False, "fail"),  # past int()'s digit limit
    ],
)
def test_a_logging_config_or_stream_is_judged_statically_as_vllms_import_takes_it(
    tmp_path: Path, name, content, imports, result
):
    """review43a S4/S5: vLLM reads the config as UTF-8 text (a BOM or UTF-16 fails its import), takes one
    over patchkit's 1 MiB bound, and dictConfig resolves an ext:// stream: never passed when vLLM fails."""
    assert VLLM_PYTHON
    config = tmp_path / name
    config.write_bytes(content)
    setting = "VLLM_LOGGING_STREAM=ext://sys.bogus" if name == "stream" else f"VLLM_LOGGING_CONFIG_PATH={config}"
    imported = subprocess.run(["env", setting, VLLM_PYTHON, "-c", "import vllm"], capture_output=True, timeout=600)
    assert (imported.returncode == 0) is imports, imported.stderr[-2000:]
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET))
    serve = ["env", setting, "vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init"]
    done = patchkit("preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--", *serve)
    found = finding(done, "vllm-environment")
    assert found["result"] == result, done.stdout[-2000:]


@pytest.mark.parametrize("setting", LOGGING_SETTINGS)
def test_a_launch_setting_vllms_import_raises_with_fails_without_importing_it_too(tmp_path: Path, setting):
    """The same settings, judged statically (`run`'s way, --no-import) from the installed logger.py and
    envs.py: vLLM dies importing itself with each (checked), and the static finding fails it."""
    assert VLLM_PYTHON
    assert subprocess.run(
        ["env", setting, VLLM_PYTHON, "-c", "import vllm"], capture_output=True, timeout=600
    ).returncode
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET))
    serve = ["env", setting, "vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init"]
    done = patchkit("preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--", *serve)
    found = finding(done, "vllm-environment")
    assert done.returncode == 1 and found["result"] == "fail", done.stdout[-2000:]
    assert setting.split("=")[0] in found["message"] and "every vLLM command fails at start" in found["message"]


@pytest.mark.parametrize(
    "setting", ["HF_HUB_ETAG_TIMEOUT=abc", "HF_HUB_LOCAL_DIR_AUTO_SYMLINK_THRESHOLD=", "HF_HUB_DOWNLOAD_TIMEOUT=30"]
)
def test_a_hub_setting_is_judged_statically_as_vllms_start_takes_it(tmp_path: Path, setting):
    """`run`'s way (--no-import): the installed huggingface_hub's constants.py int()s these as vLLM imports
    its engine arguments; the static finding fails exactly where that import raises."""
    assert VLLM_PYTHON
    imported = subprocess.run(
        ["env", setting, VLLM_PYTHON, "-c", "import vllm.engine.arg_utils"], capture_output=True, timeout=600
    )
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET))
    serve = ["env", setting, "vllm", "serve", str(tmp_path / "target"), "--skip-tokenizer-init"]
    done = patchkit("preflight", "--python", VLLM_PYTHON, "--no-import", "--format", "json", "--", *serve)
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "vllm-environment"]
    assert bool(found) is (imported.returncode != 0), (done.stdout[-2000:], imported.stderr[-1000:])
    assert all(f["result"] == "fail" and setting.split("=")[0] in f["message"] for f in found), found
