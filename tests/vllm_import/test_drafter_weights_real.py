"""Opt-in (`make test-vllm`): an EAGLE-3 drafter's scales and quantized weights, held to vLLM 0.16.0's own
drafter built and loaded on CPU (test_preflight_real.py's DRAFTER_BUILT): preflight fails drafter-architecture
exactly where vLLM's load raises, and a quantized drafter (a quantization_config, a compression_config,
ModelOpt's hf_quant_config.json), which vLLM loads, is "cannot judge", never failed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from launch_fixtures import weighted_model, write_model
from vllm_overlay import DRAFTER_BUILT, TINY_DRAFTER, TINY_LLAMA, TINY_WEIGHTS, ask_vllm, drafted, speculative_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

SCALED = {name.replace(".weight", ".weight_scale"): [1] for name in TINY_WEIGHTS if "proj.weight" in name}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
W4A16 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True, "dynamic": False}
PACK = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head", "model.fc"]}
PACK |= {"config_groups": {"group_0": {"targets": ["Linear"], "weights": W4A16}}}
PACKED = {name: shape for name, shape in TINY_WEIGHTS.items() if "proj.weight" not in name}
for _name, (_rows, _cols) in ((n, s) for n, s in TINY_WEIGHTS.items() if "proj.weight" in n):
    _base = _name.removesuffix("weight")
    PACKED |= {f"{_base}weight_packed": [_rows, _cols // 8], f"{_base}weight_scale": [_rows, _cols // 128]}
    PACKED |= {f"{_base}weight_shape": [2]}
MODELOPT = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}
# name -> (weights, config changes, hf_quant_config.json, whether patchkit cannot judge them)
CASES = {
    "whole": (TINY_WEIGHTS, {}, None, False),
    "weight-scale": ({**TINY_WEIGHTS, "midlayer.self_attn.q_proj.weight_scale": [1]}, {}, None, False),
    "input-scale": ({**TINY_WEIGHTS, "midlayer.mlp.down_proj.input_scale": [1]}, {}, None, False),
    "fc-scale": ({**TINY_WEIGHTS, "fc.weight_scale": [1]}, {}, None, False),
    "zero-point": ({**TINY_WEIGHTS, "midlayer.self_attn.o_proj.weight_zero_point": [1]}, {}, None, False),
    "awq-scales": ({**TINY_WEIGHTS, "midlayer.self_attn.o_proj.scales": [2, 256]}, {}, None, False),
    "k-scale": ({**TINY_WEIGHTS, "midlayer.self_attn.k_proj.k_scale": [1]}, {}, None, False),
    "attn-k-scale": ({**TINY_WEIGHTS, "midlayer.self_attn.attn.k_scale": [1]}, {}, None, False),
    "kv-scale": ({**TINY_WEIGHTS, "midlayer.self_attn.kv_scale": [1]}, {}, None, False),
    "packed-unquantized": (PACKED, {}, None, False),
    "fp8": ({**TINY_WEIGHTS, **SCALED}, {"quantization_config": FP8}, None, True),
    "compression-config": (PACKED, {"compression_config": PACK}, None, True),
    "packed-quantization-config": (PACKED, {"quantization_config": PACK}, None, True),
    "modelopt-file": ({**TINY_WEIGHTS, **SCALED}, {}, MODELOPT, True),
}


def drafter_findings(target: Path, drafter: Path) -> list[dict]:
    return speculative_findings(target, drafted(drafter), "drafter-architecture")


def test_drafter_scales_and_quantized_weights_fail_exactly_where_vllms_loader_raises(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {}
    for name, (weights, config, modelopt, _) in CASES.items():
        drafters[name] = weighted_model(tmp_path / name, {**TINY_DRAFTER, **config}, weights)
        if modelopt is not None:
            (drafters[name] / "hf_quant_config.json").write_text(json.dumps(modelopt))
    refused = ask_vllm(DRAFTER_BUILT, str(target), *map(str, drafters.values()))
    assert refused[str(drafters["whole"])] is None and refused[str(drafters["compression-config"])] is None, refused
    assert "KeyError" in refused[str(drafters["weight-scale"])], refused
    for name, drafter in drafters.items():
        found = drafter_findings(target, drafter)
        said, unjudged = refused[str(drafter)], CASES[name][3]
        assert all(f["ok"] for f in found) is (said is None), (name, said, found)
        assert any(f["result"] == "cannot judge" for f in found) is unjudged, (name, found)


# vLLM's own drafter loading torch files (pytorch_model.bin, as yuhuili's EAGLE-3 drafters ship), written by torch.save
SAVED = """
import json, sys, torch
for path, shapes in json.loads(sys.argv[1]).items():
    torch.save({name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in shapes.items()}, path)
print("{}")
"""
BIN_BUILT = DRAFTER_BUILT.replace("safetensors_weights_iterator", "pt_weights_iterator").replace(
    '"*.safetensors"', '"*.bin"'
)
BIN_CASES = {
    "bin-whole": TINY_WEIGHTS,
    "bin-extra-head": {**TINY_WEIGHTS, "extra_head.weight": [256, 256]},
    "bin-weight-scale": {**TINY_WEIGHTS, "midlayer.self_attn.q_proj.weight_scale": [1]},
    "bin-fc-of-another-target": {**TINY_WEIGHTS, "fc.weight": [256, 384]},
}


def test_a_torch_file_drafter_fails_exactly_where_vllms_loader_raises(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {name: write_model(tmp_path / name, TINY_DRAFTER) for name in BIN_CASES}
    for drafter in drafters.values():
        (drafter / "model.safetensors").unlink()
    ask_vllm(SAVED, json.dumps({str(d / "pytorch_model.bin"): BIN_CASES[n] for n, d in drafters.items()}))
    refused = ask_vllm(BIN_BUILT, str(target), *map(str, drafters.values()))
    assert refused[str(drafters["bin-whole"])] is None and refused[str(drafters["bin-extra-head"])], refused
    for name, drafter in drafters.items():
        found = drafter_findings(target, drafter)
        said = refused[str(drafter)]
        assert [f["result"] for f in found] == (["pass"] if said is None else ["fail"]), (name, said, found)
