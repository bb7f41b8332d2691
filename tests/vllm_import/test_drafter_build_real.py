"""Opt-in (`make test-vllm`): preflight's drafter-build on vLLM 0.16.0 itself. Once create_engine_config()
accepts the launch, patchkit/_target/drafter_build.py builds the EAGLE-3 drafter with the class vLLM's
registry picks, on the meta device, and runs the launch's loader over meta tensors made from the
safetensors headers: a drafter vLLM builds and loads passes; one vLLM cannot build or load fails with
vLLM's own error (the class the static rules chased one key at a time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_fixtures import eagle3_tensors, write_model, write_weights
from vllm_overlay import (
    TINY_DEEPSEEK_V3,
    TINY_DRAFTER,
    TINY_LLAMA,
    TINY_WEIGHTS,
    VLLM_PYTHON,
    ask_vllm,
    overlay_venv,
    patchkit,
)

from patchkit.launch.validation import BUILD, drafter_finding

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

# engine_config.work() as preflight runs it (`vllm serve TARGET --speculative-config ...`), for each drafter
ASK = """
import json, sys
from patchkit._target import engine_config
said = {}
for drafter in sys.argv[2:]:
    spec = json.dumps({"method": "eagle3", "model": drafter, "num_speculative_tokens": 2})
    args = [sys.argv[1], "--speculative-config", spec, "--max-model-len", "512"]
    said[drafter] = engine_config.work({"arguments": args, "serve": True, "args": args, "cwd": "/", "build_within": 300})
print(json.dumps(said))
"""
DRAFTER = {**TINY_DRAFTER, "eagle_aux_hidden_state_layer_ids": [1, 1, 1]}
# the drafters, each as vLLM takes or refuses it, and the words of vLLM's own error
CASES: dict[str, tuple[dict[str, object], dict[str, list[int]], str | None]] = {
    "good": (DRAFTER, TINY_WEIGHTS, None),
    "with_embed": (DRAFTER, {**TINY_WEIGHTS, "embed_tokens.weight": [1000, 256]}, None),
    "null_size": ({**DRAFTER, "intermediate_size": None}, TINY_WEIGHTS, "vLLM cannot build the eagle3 drafter"),
    "wrong_shape": (
        DRAFTER,
        {**TINY_WEIGHTS, "fc.weight": [256, 512]},
        "Tried to load weights of size torch.Size([256, 512])to a parameter of size torch.Size([256, 768])",
    ),
    "no_parameter": (
        DRAFTER,
        {**TINY_WEIGHTS, "midlayer.nonesuch.weight": [4]},
        "KeyError: 'layers.0.nonesuch.weight'",
    ),
}


def drafters(root: Path) -> dict[str, str]:
    made = {}
    for name, (config, weights, _) in CASES.items():
        write_weights(write_model(root / name, config), weights)
        made[name] = str(root / name)
    return made


def test_vllm_builds_and_loads_the_drafters_it_takes_and_fails_the_ones_it_refuses(tmp_path: Path):
    target = str(write_model(tmp_path / "target", TINY_LLAMA))
    made = drafters(tmp_path)
    said = ask_vllm(ASK, target, *made.values())
    assert isinstance(said, dict)
    for name, (_, _, refused) in CASES.items():
        answer = said[made[name]]
        assert answer["status"] == "ok", (name, answer)
        found = drafter_finding(answer)
        assert found is not None and found.check == BUILD and found.judged, (name, answer)
        if refused is None:
            assert found.ok and "Eagle3LlamaForCausalLM" in found.message, (name, found)
        else:
            assert not found.ok and refused in found.message, (name, found)
    assert "TypeError" in said[made["null_size"]]["drafter"]["error"]


def run_patchkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchkit", *args], capture_output=True, text=True, timeout=900)


def finding(done, check: str) -> dict[str, object] | None:
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == check]
    return found[0] if found else None


def test_preflight_fails_a_drafter_vllm_cannot_load_and_without_import_builds_nothing(tmp_path: Path):
    target = str(write_model(tmp_path / "target", TINY_LLAMA))
    made = drafters(tmp_path)
    spec = json.dumps({"method": "eagle3", "model": made["no_parameter"], "num_speculative_tokens": 2})
    serve = ["vllm", "serve", target, "--speculative-config", spec, "--max-model-len", "512"]
    done = run_patchkit("preflight", "--python", str(VLLM_PYTHON), "--format", "json", "--", *serve)
    built = finding(done, BUILD)
    assert done.returncode == 1 and built is not None and not built["ok"], done.stdout[-3000:] + done.stderr[-3000:]
    assert "KeyError: 'layers.0.nonesuch.weight'" in str(built["message"]), built
    skipped = run_patchkit("preflight", "--python", str(VLLM_PYTHON), "--no-import", "--format", "json", "--", *serve)
    assert finding(skipped, BUILD) is None, skipped.stdout


# vLLM builds an EAGLE-3 drafter for it once the eagle3 set is applied
DEEPSEEK_V3_TINY = {**TINY_DEEPSEEK_V3, "torch_dtype": "bfloat16"}


def ask(python: Path, script: str, *args: str) -> dict[str, object]:
    """ask_vllm's answer from another interpreter (an overlay's)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    asked = subprocess.run(
        [str(python), "-B", "-c", script, *args], capture_output=True, text=True, timeout=1200, env=env, check=True
    )
    said = json.loads(asked.stdout.strip().splitlines()[-1])
    assert isinstance(said, dict)
    return said


def test_an_eagle3_drafter_of_an_mla_target_builds_once_the_set_is_applied(tmp_path: Path):
    python = overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")
    done = patchkit(python, "apply", "--set", "eagle3")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    target = str(write_model(tmp_path / "target", DEEPSEEK_V3_TINY))
    made = drafters(tmp_path)
    said = ask(python, ASK, target, made["good"], made["wrong_shape"])
    good, wrong = (drafter_finding(said[made[name]]) for name in ("good", "wrong_shape"))  # type: ignore[arg-type]
    assert good is not None and good.ok and good.judged, said
    assert wrong is not None and not wrong.ok and "Tried to load weights of size" in wrong.message, said


# transformers' checkpoint names of a model (its layer 1, DeepSeek-V3's first MoE layer, is the MTP
# block's shape), built on the meta device
HF_NAMES = """
import json, sys, torch, transformers
config = transformers.AutoConfig.from_pretrained(sys.argv[1])
with torch.device("meta"):
    hf = transformers.AutoModelForCausalLM.from_config(config)
print(json.dumps({name: list(tensor.shape) for name, tensor in hf.state_dict().items()}))
"""
ASK_MTP = ASK.replace(
    '"method": "eagle3", "model": drafter, "num_speculative_tokens": 2', '"method": "mtp", "num_speculative_tokens": 1'
)


def mtp_checkpoint(directory: Path, drop: str | None = None, shape: tuple[str, list[int]] | None = None) -> str:
    """DeepSeek-V3 tiny with one MTP layer (layer 2): the target's tensors, the MTP block's as layer 1's,
    and the MTP layer's own; `drop` leaves one out, `shape` gives one another shape."""
    write_model(directory, {**DEEPSEEK_V3_TINY, "num_nextn_predict_layers": 1})
    names = ask_vllm(HF_NAMES, str(directory))
    assert isinstance(names, dict)
    hidden, vocab = DEEPSEEK_V3_TINY["hidden_size"], DEEPSEEK_V3_TINY["vocab_size"]
    weights = {**names, **{n.replace(".layers.1.", ".layers.2."): s for n, s in names.items() if ".layers.1." in n}}
    mtp = {"enorm.weight": [hidden], "hnorm.weight": [hidden], "eh_proj.weight": [hidden, 2 * hidden]}
    mtp |= {"shared_head.norm.weight": [hidden], "shared_head.head.weight": [vocab, hidden]}
    mtp |= {"embed_tokens.weight": [vocab, hidden]}  # as DeepSeek-V3's own checkpoint holds it for layer 61
    weights |= {f"model.layers.2.{name}": size for name, size in mtp.items()}
    weights.pop(drop, None)
    weights |= dict([shape]) if shape else {}
    write_weights(directory, weights)
    return str(directory)


def test_an_mtp_drafter_of_an_mla_target_is_built_and_its_checkpoint_loaded(tmp_path: Path):
    """The forced CPU platform builds no MLA layer: the MTP block is built with a GPU MLA backend's
    class (meta, never run); a checkpoint without an MTP tensor fails with vLLM's own strict check."""
    assert ASK_MTP != ASK
    good = mtp_checkpoint(tmp_path / "good")
    short = mtp_checkpoint(tmp_path / "short", drop="model.layers.2.eh_proj.weight")
    wrong = mtp_checkpoint(tmp_path / "wrong", shape=("model.layers.2.eh_proj.weight", [256, 256]))
    said = {model: ask_vllm(ASK_MTP, model, "-")["-"] for model in (good, short, wrong)}  # type: ignore[index]
    found = {model: drafter_finding(answer) for model, answer in said.items()}
    assert found[good] is not None and found[good].ok and found[good].judged, said[good]
    assert "DeepSeekMTP" in found[good].message, found[good]
    assert found[short] is not None and not found[short].ok, said[short]
    assert "Following weights were not initialized from checkpoint" in found[short].message, found[short]
    assert found[wrong] is not None and not found[wrong].ok, said[wrong]
    assert (
        "Attempted to load weight (torch.Size([256, 256])) into parameter (torch.Size([256, 512]))"
        in found[wrong].message
    )


def llama_weights(hidden: int = 256, layers: int = 2) -> dict[str, list[int]]:
    """TINY_LLAMA's checkpoint tensors (4 heads, 4 key-value heads, intermediate 512)."""
    weights = {
        "model.embed_tokens.weight": [1000, hidden],
        "model.norm.weight": [hidden],
        "lm_head.weight": [1000, hidden],
    }
    for layer in range(layers):
        named = {f"self_attn.{p}_proj.weight": [hidden, hidden] for p in "qkvo"}
        named |= {"mlp.gate_proj.weight": [512, hidden], "mlp.up_proj.weight": [512, hidden]}
        named |= {"mlp.down_proj.weight": [hidden, 512], "input_layernorm.weight": [hidden]}
        named |= {"post_attention_layernorm.weight": [hidden]}
        weights |= {f"model.layers.{layer}.{name}": size for name, size in named.items()}
    return weights


def test_a_draft_model_is_built_with_its_own_config_and_its_checkpoint_loaded(tmp_path: Path):
    target = str(write_model(tmp_path / "target", TINY_LLAMA))
    good, bad = (write_model(tmp_path / name, TINY_LLAMA) for name in ("good", "bad"))
    write_weights(good, llama_weights())
    write_weights(bad, {**llama_weights(), "model.norm.weight": [257]})
    script = ASK.replace('"method": "eagle3"', '"method": "draft_model"')
    assert script != ASK
    said = ask_vllm(script, target, str(good), str(bad))
    assert isinstance(said, dict)
    passed, failed = drafter_finding(said[str(good)]), drafter_finding(said[str(bad)])
    assert passed is not None and passed.ok and passed.judged and "LlamaForCausalLM" in passed.message, said
    assert failed is not None and not failed.ok, said
    assert "Attempted to load weight (torch.Size([257])) into parameter (torch.Size([256]))" in failed.message, said


# an EAGLE-1 head for TINY_LLAMA (llama_eagle.py's EagleLlamaForCausalLM: fc takes embeds and states, 2 x 256;
# layer 0 has no input_layernorm), its tensors as EAGLE-1 checkpoints name them
EAGLE1 = {**TINY_DRAFTER, "architectures": ["LlamaForCausalLM"]}
EAGLE1.pop("draft_vocab_size")
EAGLE1.pop("eagle_aux_hidden_state_layer_ids")
EAGLE1_WEIGHTS = {
    "fc.weight": [256, 512],
    "layers.0.self_attn.q_proj.weight": [256, 256],
    "layers.0.self_attn.k_proj.weight": [128, 256],
    "layers.0.self_attn.v_proj.weight": [128, 256],
    "layers.0.self_attn.o_proj.weight": [256, 256],
    "layers.0.mlp.gate_proj.weight": [512, 256],
    "layers.0.mlp.up_proj.weight": [512, 256],
    "layers.0.mlp.down_proj.weight": [256, 512],
    "layers.0.post_attention_layernorm.weight": [256],
}


def test_vllm_builds_and_loads_an_eagle1_head_and_fails_one_whose_weights_its_config_does_not_build(tmp_path: Path):
    """The EAGLE-1 drafter is built and loaded as the EAGLE-3 one is (the static path says cannot judge)."""
    target = str(write_model(tmp_path / "target", TINY_LLAMA))
    cases = {
        "good": (EAGLE1_WEIGHTS, None),
        "fc_wide": ({**EAGLE1_WEIGHTS, "fc.weight": [256, 768]}, "to a parameter of size torch.Size([256, 512])"),
        "second_layer": ({**EAGLE1_WEIGHTS, "layers.1.mlp.up_proj.weight": [512, 256]}, "KeyError"),
    }
    made = {}
    for name, (weights, _) in cases.items():
        write_weights(write_model(tmp_path / name, EAGLE1), weights)
        made[name] = str(tmp_path / name)
    said = ask_vllm(ASK.replace('"method": "eagle3"', '"method": "eagle"'), target, *made.values())
    assert isinstance(said, dict)
    for name, (_, refused) in cases.items():
        found = drafter_finding(said[made[name]])
        assert found is not None and found.check == BUILD and found.judged, (name, said[made[name]])
        if refused is None:
            assert found.ok and "EagleLlamaForCausalLM" in found.message, (name, found)
        else:
            assert not found.ok and refused in found.message, (name, found)


def test_under_tp_the_drafter_is_built_again_as_rank_0_and_a_size_tp_does_not_split_fails(tmp_path: Path):
    """-tp 4: vLLM builds the drafter in the target's tensor-parallel group, each rank a shard; the build
    whole passes an intermediate_size of 510, which 4 ranks do not split (MergedColumnParallelLinear
    asserts it, building): built again as rank 0 of 4, it fails; 512 passes."""
    target = str(write_model(tmp_path / "target", TINY_LLAMA))
    made = {}
    for size in (512, 510):
        config = {**DRAFTER, "intermediate_size": size}
        write_weights(write_model(tmp_path / str(size), config), eagle3_tensors(256, 128, size, 500, 256, 1000))
        made[size] = str(tmp_path / str(size))
    four = ASK.replace('"--max-model-len", "512"]', '"--max-model-len", "512", "-tp", "4"]')
    said = ask_vllm(four, target, *made.values())
    assert isinstance(said, dict)
    good, split = (drafter_finding(said[made[size]]) for size in (512, 510))
    assert good is not None and good.ok and good.judged and "as rank 0 of -tp 4" in good.message, said[made[512]]
    assert split is not None and not split.ok and "output_size % self.tp_size == 0" in split.message, said[made[510]]
    assert "with -tp 4" in split.message, split


def test_an_fp8_drafter_with_one_element_kv_scales_is_built_and_loaded(tmp_path: Path):
    """vLLM's default_weight_loader calls .item() on a one-element weight (an FP8 drafter's k_scale and
    v_scale): the build gives such entries real zeros, so the drafter is judged (review42a R4)."""
    target = str(write_model(tmp_path / "target", TINY_LLAMA))
    fp8 = {**DRAFTER, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    scales = {name.replace(".weight", ".weight_scale"): [] for name in TINY_WEIGHTS if name.endswith("proj.weight")}
    kv = {"midlayer.self_attn.k_scale": [], "midlayer.self_attn.v_scale": []}
    drafter = write_model(tmp_path / "fp8", fp8)
    write_weights(drafter, {**TINY_WEIGHTS, **scales, **kv})
    answer = ask_vllm(ASK, target, str(drafter))[str(drafter)]
    found = drafter_finding(answer)
    assert found is not None and found.ok and found.judged and "loads its weights" in found.message, answer
