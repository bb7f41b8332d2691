"""An EAGLE-3 drafter's weights preflight does not hold to llama_eagle3.py's names and shapes are a
"cannot judge" with why, never a silent pass nor a false fail (patchkit/launch/drafter_weights.py):
quantized the way vLLM reads it (quantization_config, compression_config, ModelOpt's
hf_quant_config.json, a text_config's, the speculative config's own), torch files, another drafter
class, a llama_eagle3.py of another layout. An unquantized drafter's weight scales are looked up as any
name (vLLM raises for them), the attention's q/k/v scales are not. Small vLLM-shaped trees written here;
tests/vllm_import/test_drafter_weights_real.py holds the same cases to vLLM 0.16.0's own loader."""

from __future__ import annotations

import io
import json
import struct
import zipfile

import pytest
from helpers import run_cli_in_process, run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, eagle3_tensors, serve, write_eagle3_setup, write_model, write_weights

MODELS = "vllm/model_executor/models"
# llama_eagle3.py's layout (0.16.0) and llama.py's bias rules, as tests/test_preflight.py writes them
EAGLE3_NAMES = """
qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size
fc_input_size = self.config.hidden_size * 3
name = name.replace("midlayer.", "layers.0.")
if "d2t" in name:
qkv_bias = getattr(config, "attention_bias", False)
if "t2d" in name:
elif "lm_head" not in name:
    name = "model." + name
"""
LLAMA_BIASES = 'bias_o_proj = attention_bias\nbias=getattr(config, "mlp_bias", False)\n'
SMALL_DRAFTER = {**DRAFTER, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
SMALL_DRAFTER |= {"intermediate_size": 128, "draft_vocab_size": 512}
SMALL_WEIGHTS = eagle3_tensors(64, 32, 128, 512, 7168, 129280)
# compressed-tensors' pack-quantized layout (W4A16): each projection's weight packed 8 to an int32, scales by group
PACKED = {name: shape for name, shape in SMALL_WEIGHTS.items() if "proj.weight" not in name}
for _name, (_rows, _cols) in ((n, s) for n, s in SMALL_WEIGHTS.items() if "proj.weight" in n):
    _base = _name.removesuffix("weight")
    PACKED |= {
        f"{_base}weight_packed": [_rows, _cols // 8],
        f"{_base}weight_scale": [_rows, 1],
        f"{_base}weight_shape": [2],
    }
# ModelOpt's NVFP4: two 4-bit values a byte, so a projection's input dimension is halved
NVFP4 = {n: [s[0], s[1] // 2] if "proj.weight" in n else s for n, s in SMALL_WEIGHTS.items()}
CT = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}}


@pytest.fixture
def tree(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / MODELS / "llama_eagle3.py").write_text(EAGLE3_NAMES)
    (tree / MODELS / "llama.py").write_text(LLAMA_BIASES)
    return tree, library


def drafter_findings(tmp_path, tree, config: dict, weights: dict | None, *, files=None, spec=None):
    """(exit code, the drafter-architecture findings) of a preflight of a DeepSeek-V3 target with a drafter of
    `config` and `weights` (None: torch files), `files` beside them, `spec` added to the speculative config."""
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", {**SMALL_DRAFTER, **config})
    if weights is None:
        (drafter / "model.safetensors").unlink()
        (drafter / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    elif isinstance(weights, tuple):  # torch files: pytorch_model.bin's tensors
        (drafter / "model.safetensors").unlink()
        (drafter / "pytorch_model.bin").write_bytes(torch_file(weights[0]))
    else:
        write_weights(drafter, weights)
    for name, text in (files or {}).items():
        (drafter / name).write_text(text)
    command = serve(target, drafter)
    if spec:
        given = json.loads(command[command.index("--speculative-config") + 1])
        command[command.index("--speculative-config") + 1] = json.dumps({**given, **spec})
    done = run_cli_in_process(
        "preflight", "--target", tree[0], "--patches", tree[1], "--format", "json", "--no-import", "--", *command
    )
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-architecture"]
    return done.returncode, found


@pytest.mark.parametrize(
    ("name", "fails"),
    [
        ("midlayer.self_attn.q_proj.weight_scale", True),  # KeyError: layers.0.self_attn.qkv_proj.weight_scale
        ("midlayer.mlp.down_proj.input_scale", True),
        ("fc.weight_scale", True),
        ("midlayer.self_attn.o_proj.weight_zero_point", True),
        ("midlayer.self_attn.o_proj.scales", True),  # AWQ/GPTQ's, without their config
        ("midlayer.self_attn.k_proj.k_scale", False),  # the attention's: vLLM maps it, or skips it
        ("midlayer.self_attn.attn.v_scale", False),
        ("midlayer.self_attn.kv_scale", False),
    ],
)
def test_an_unquantized_drafters_scales_fail_where_vllm_looks_them_up(tmp_path, tree, name, fails):
    """vLLM's loader of an unquantized drafter looks a weight scale up among its parameters (a KeyError,
    after the target's load); the attention's q/k/v scales it maps or skips (maybe_remap_kv_scale_name)."""
    code, found = drafter_findings(tmp_path, tree, {}, {**SMALL_WEIGHTS, name: [1]})
    assert [f["result"] for f in found] == (["fail"] if fails else ["pass"]), found
    assert code == (1 if fails else 0), found
    if fails:
        assert f"its weights hold {name} (model.safetensors)" in found[0]["message"], found
        assert "no parameter for" in found[0]["message"] and "config.json saved with its weights" in found[0]["fix"]


@pytest.mark.parametrize(
    ("config", "weights", "files", "spec", "says"),
    [
        ({"compression_config": CT}, PACKED, {}, None, "quantized (compressed-tensors)"),
        ({}, NVFP4, {"hf_quant_config.json": '{"quantization": {"quant_algo": "NVFP4"}}'}, None, "hf_quant_config"),
        ({"quantization_config": {"quant_method": "fp8"}}, SMALL_WEIGHTS, {}, None, "quantized (fp8)"),
        ({"text_config": {"quantization_config": {"quant_method": "awq"}}}, PACKED, {}, None, "quantized (awq)"),
        ({}, PACKED, {"quantize_config.json": "{}"}, {"quantization": "gptq"}, "quantized (gptq)"),
    ],
)
def test_a_quantized_drafter_cannot_be_judged_and_never_fails(tmp_path, tree, config, weights, files, spec, says):
    """vLLM builds a quantized drafter's layers with its packed parameters and scales (a compression_config,
    a ModelOpt hf_quant_config.json count as its quantization_config does): not judged, and said."""
    code, found = drafter_findings(tmp_path, tree, config, weights, files=files, spec=spec)
    assert code == 0 and sorted(f["result"] for f in found) == ["cannot judge", "pass"], found
    unjudged = next(f for f in found if f["result"] == "cannot judge")
    assert says in unjudged["message"] and "their names and shapes are not judged" in unjudged["message"]


def test_torch_weights_cannot_be_judged(tmp_path, tree):
    code, found = drafter_findings(tmp_path, tree, {}, None)
    assert code == 0 and sorted(f["result"] for f in found) == ["cannot judge", "pass"], found
    unjudged = next(f for f in found if f["result"] == "cannot judge")
    assert "torch files (pytorch_model.bin)" in unjudged["message"], unjudged


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("fc-of-config", "sizes its fc from the drafter's config"),  # 0.22's llama_eagle3.py
        ("renames", "maps their names otherwise (patchkit reads 0.12-0.18's)"),  # 0.26's orig_to_new_substr
        (
            "class",
            "vLLM builds it from deepseek_eagle3.py, whose rules patchkit does not read",
        ),  # 0.18's Eagle3DeepseekV2ForCausalLM
    ],
)
def test_a_drafter_of_another_layout_or_class_cannot_be_judged(tmp_path, tree, where, says):
    """A drafter whose weights no rule here reads passes drafter-architecture only with what is not judged."""
    drafter_file = tree[0] / MODELS / "llama_eagle3.py"
    if where == "fc-of-config":
        drafter_file.write_text(EAGLE3_NAMES + "self.num_aux_hidden_states = 3\n")
    if where == "renames":
        drafter_file.write_text(EAGLE3_NAMES.replace('name.replace("midlayer.", "layers.0.")', "orig_to_new_substr"))
    config = {}
    if where == "class":
        registry = tree[0] / MODELS / "registry.py"
        entry = '"Eagle3DeepseekV3ForCausalLM": ("deepseek_eagle3", "Eagle3DeepseekV2ForCausalLM"),\n'
        registry.write_text(
            registry.read_text().replace("_SPECULATIVE_DECODING_MODELS = {", "_SPECULATIVE_DECODING_MODELS = {" + entry)
        )
        config = {"architectures": ["Eagle3DeepseekV3ForCausalLM"]}
    code, found = drafter_findings(tmp_path, tree, config, {**SMALL_WEIGHTS, "extra_head.weight": [64, 64]})
    assert code == 0 and sorted(f["result"] for f in found) == ["cannot judge", "pass"], found
    assert says in next(f for f in found if f["result"] == "cannot judge")["message"], found


def test_a_drafter_judged_whole_says_nothing_more(tmp_path, tree):
    code, found = drafter_findings(tmp_path, tree, {}, SMALL_WEIGHTS)
    assert code == 0 and [f["result"] for f in found] == ["pass"], found


def _text(value: str) -> bytes:
    return b"X" + struct.pack("<I", len(value.encode())) + value.encode()  # BINUNICODE


def _ints(values: list[int]) -> bytes:
    return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"  # MARK, BININT..., TUPLE


def torch_file(shapes: dict[str, list[int]]) -> bytes:
    """What torch.save(state_dict) writes (its zip, its data.pkl as torch 2 pickles it), storages left empty."""
    pickled = b"\x80\x02}("  # PROTO 2, EMPTY_DICT, MARK
    for index, (name, shape) in enumerate(shapes.items()):
        storage = (
            b"("
            + _text("storage")
            + b"ctorch\nBFloat16Storage\n"
            + _text(str(index))
            + _text("cpu")
            + b"J\x01\x00\x00\x00tQ"
        )
        strides = [1] * len(shape)
        hooks = b"ccollections\nOrderedDict\n)R"
        arguments = b"(" + storage + b"J\x00\x00\x00\x00" + _ints(shape) + _ints(strides) + b"\x89" + hooks + b"t"
        pickled += _text(name) + b"ctorch._utils\n_rebuild_tensor_v2\n" + arguments + b"R"
    pickled += b"u."  # SETITEMS, STOP
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({}, None),
        ({"extra_head.weight": [64, 64]}, "its weights hold extra_head.weight (pytorch_model.bin)"),
        ({"fc.weight": [64, 3 * 4096]}, "fc.weight is [64, 12288] (pytorch_model.bin)"),
        ({"midlayer.self_attn.q_proj.weight_scale": [1]}, "q_proj.weight_scale (pytorch_model.bin)"),
    ],
)
def test_torch_weights_are_judged_as_vllm_loads_their_state_dict(tmp_path, tree, change, says):
    """yuhuili's EAGLE-3 drafters ship pytorch_model.bin: vLLM's pt iterator hands the drafter its state dict."""
    code, found = drafter_findings(tmp_path, tree, {}, ({**SMALL_WEIGHTS, **change},))
    assert [f["result"] for f in found] == (["pass"] if says is None else ["fail"]), found
    assert code == (0 if says is None else 1) and (says is None or says in found[0]["message"]), found
