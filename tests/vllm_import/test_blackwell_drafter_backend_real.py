"""Opt-in (`make test-vllm`), review40a D11: on Blackwell (device capability 10.x) vLLM 0.16.0's
CudaPlatform.check_and_update_config sets FLASHINFER_MLA for the whole engine of an MLA target
(DeepSeek-V3, Kimi-K2), and the selector handed it to every layer: the EAGLE-3 drafter's non-MLA
attention raised in EagleProposer.load_model, after the target's load. The eagle3 set's 0006 leaves
such a layer to the platform's own priorities. Shown with vLLM's own code in an overlay of the real
venv (no GPU here: the device capability is a stub): its check_and_update_config, then its
get_attn_backend for the target's MLA layers and the drafter's layers, before and after `patchkit apply`."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from vllm_overlay import TINY_LLAMA, VLLM_PYTHON, WIDE_DEEPSEEK_V3, overlay_venv, patchkit

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

# DeepSeek-V3's attention shape (kv_lora_rank 512, qk_nope_head_dim 128: the Blackwell default's
# condition), two small layers
TARGET = {**WIDE_DEEPSEEK_V3, "num_hidden_layers": 2, "vocab_size": 1000, "kv_lora_rank": 512, "q_lora_rank": 256}
TARGET |= {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_group": 1, "topk_group": 1}
DRAFTER = {
    **TINY_LLAMA,
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 1024,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "num_hidden_layers": 1,
    "max_position_embeddings": 4096,
}
# vLLM's engine config for the target (CPU, as patchkit builds it), then per device capability the real
# CudaPlatform's check_and_update_config and get_attn_backend for each layer kind (vLLM's own head sizes
# and use_mla; the drafter's from the speculative config when one is given)
ASK = textwrap.dedent("""\
    import json, sys, types
    from patchkit._target.engine_config import _force_cpu_platform_when_none
    import torch
    import vllm
    _force_cpu_platform_when_none()
    from vllm.engine.arg_utils import EngineArgs
    model, spec, named = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    config = EngineArgs(model=model, speculative_config=spec, skip_tokenizer_init=True).create_engine_config()
    draft = config.speculative_config.draft_model_config if spec else None
    layers = {"target": (config.model_config.get_head_size(), config.model_config.use_mla)}
    layers["drafter"] = (draft.get_head_size(), draft.use_mla) if draft else (128, False)
    for name in ("zeros", "empty", "ones", "tensor", "arange", "full"):  # CUDA tensors some imports make
        def on_cpu(*a, _made=getattr(torch, name), **k):
            k.pop("device", None)
            return _made(*a, **k)
        setattr(torch, name, on_cpu)
    sys.modules.setdefault("vllm._C", types.ModuleType("vllm._C"))  # needs libcuda; not called here
    # CUTLASS_MLA's module sizes a workspace by the device's SM count when imported
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(multi_processor_count=148)
    import vllm.platforms
    from vllm.config import set_current_vllm_config
    from vllm.platforms.cuda import CudaPlatform
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    vllm.platforms._current_platform = CudaPlatform()
    found = {"layers": layers}
    for cap in ((9, 0), (10, 0)):
        config.attention_config.backend = AttentionBackendEnum[named] if named else None
        config.cache_config.block_size = None
        CudaPlatform.get_device_capability = classmethod(lambda cls, device_id=0, cap=cap: DeviceCapability(*cap))
        torch.cuda.get_device_capability = lambda device=None, cap=cap: cap
        CudaPlatform.check_and_update_config(config)
        selector._cached_get_attn_backend.cache_clear()
        chosen = {"engine": getattr(config.attention_config.backend, "name", None)}
        classes = []
        with set_current_vllm_config(config):
            for layer, (head, mla) in layers.items():
                try:
                    classes.append(selector.get_attn_backend(head, torch.bfloat16, "auto", None, use_mla=mla))
                    chosen[layer] = classes[-1].get_name()
                except ValueError as exc:
                    chosen[layer] = f"refused: {exc}"
            # the target's and the drafter's layers share one KV cache group: the model runner's own
            # choice of one kernel block size for its backends, from the engine's block size
            block = config.cache_config.block_size
            groups = [types.SimpleNamespace(backend=backend) for backend in classes]
            try:
                kernel = GPUModelRunner.select_common_block_size(block, groups) if len(groups) == 2 else None
            except ValueError as exc:
                kernel = f"refused: {exc}"
        chosen["blocks"] = [block, kernel]
        found[f"{cap[0]}.{cap[1]}"] = chosen
    print(json.dumps(found))
""")
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3}


def write_model(directory: Path, config: dict) -> str:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def chosen(python: Path, model: str, spec: dict | None = None, named: str = "") -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [str(python), "-B", "-c", ASK, model, json.dumps(spec), named],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=Path(model).parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_on_blackwell_the_drafter_gets_a_backend_of_its_own_once_applied(tmp_path):
    python = overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")
    target, drafter = write_model(tmp_path / "target", TARGET), write_model(tmp_path / "drafter", DRAFTER)
    stock = chosen(python, target)
    # vLLM 0.16.0's own: FLASHINFER_MLA for the whole engine on 10.0, which the drafter's layers refuse
    assert stock["layers"] == {"target": [576, True], "drafter": [128, False]}, stock
    blackwell, hopper = stock["10.0"], stock["9.0"]
    assert blackwell["engine"] == blackwell["target"] == "FLASHINFER_MLA", stock
    assert (
        blackwell["drafter"].startswith("refused: Selected backend") and "non-MLA not supported" in blackwell["drafter"]
    )
    assert hopper["engine"] is None and not hopper["drafter"].startswith("refused"), stock

    assert patchkit(python, "apply").returncode == 0
    applied = chosen(python, target, {**EAGLE3, "model": drafter})
    # the drafter's layers as vLLM builds them from the speculative config (the set admits the target)
    assert applied["layers"] == stock["layers"], applied
    assert applied["10.0"]["engine"] == applied["10.0"]["target"] == "FLASHINFER_MLA", applied
    assert applied["10.0"]["drafter"] == "FLASHINFER", applied  # the platform's first non-MLA choice on 10.x
    assert applied["9.0"] == hopper, applied


def test_once_applied_a_named_mla_backend_binds_only_an_mla_models_mla_layers(tmp_path):
    """C4's launch (--attention-backend TRITON_MLA) builds the drafter too; a non-MLA target under it
    still fails as in stock (its own layers, before any load)."""
    python = overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")
    target, drafter = write_model(tmp_path / "target", TARGET), write_model(tmp_path / "drafter", DRAFTER)
    llama = write_model(tmp_path / "llama", TINY_LLAMA)
    stock = chosen(python, target, named="TRITON_MLA")
    assert all(stock[cap]["target"] == "TRITON_MLA" for cap in ("9.0", "10.0")), stock
    assert all(stock[cap]["drafter"].startswith("refused: Selected backend") for cap in ("9.0", "10.0")), stock
    assert chosen(python, llama, named="TRITON_MLA")["9.0"]["target"].startswith("refused: Selected backend")

    assert patchkit(python, "apply").returncode == 0
    named = chosen(python, target, {**EAGLE3, "model": drafter}, named="TRITON_MLA")
    assert all(named[cap]["engine"] == named[cap]["target"] == "TRITON_MLA" for cap in ("9.0", "10.0")), named
    assert named["9.0"]["drafter"] == "FLASH_ATTN", named  # the platform's first non-MLA choice on 9.0
    assert named["10.0"]["drafter"] == "FLASHINFER", named
    assert chosen(python, llama, named="TRITON_MLA")["9.0"]["target"].startswith("refused: Selected backend")


def test_once_applied_a_named_cutlass_mla_gives_the_drafter_a_backend_sharing_its_kv_cache_blocks(tmp_path):
    """CUTLASS_MLA (named; 0.13/0.14's Blackwell default) makes check_and_update_config force the
    engine's block size to 128, and takes kernel blocks of 128 only: the platform's first non-MLA
    choice on 10.x, FlashInfer (16, 32, 64), shares none with it, and the model runner's
    select_common_block_size raised "No common block size for 128" after the target's load. Applied,
    the drafter gets the first valid backend that shares one; on 9.0 (no CUTLASS_MLA) nothing changes."""
    python = overlay_venv(str(VLLM_PYTHON), tmp_path / "venv")
    target, drafter = write_model(tmp_path / "target", TARGET), write_model(tmp_path / "drafter", DRAFTER)
    stock = chosen(python, target, named="CUTLASS_MLA")
    blackwell, hopper = stock["10.0"], stock["9.0"]
    assert blackwell["engine"] == blackwell["target"] == "CUTLASS_MLA" and blackwell["blocks"][0] == 128, stock
    assert blackwell["drafter"].startswith("refused: Selected backend"), stock
    assert hopper["target"].startswith("refused: Selected backend"), stock  # CUTLASS_MLA is 10.x only

    assert patchkit(python, "apply").returncode == 0
    named = chosen(python, target, {**EAGLE3, "model": drafter}, named="CUTLASS_MLA")
    blackwell = named["10.0"]
    assert blackwell["engine"] == blackwell["target"] == "CUTLASS_MLA", named
    # FlashInfer (the platform's first) cannot split 128 as CUTLASS_MLA does; FlashAttention (next) can
    assert blackwell["drafter"] == "FLASH_ATTN", named
    assert blackwell["blocks"] == [128, 128], named  # vLLM's own select_common_block_size accepts them
    assert named["9.0"]["target"] == hopper["target"], named  # the target's own layers still refuse it
    # the Blackwell default from 0.15 (FLASHINFER_MLA, block 64) keeps the drafter on FlashInfer
    default = chosen(python, target, {**EAGLE3, "model": drafter})["10.0"]
    assert default["target"] == "FLASHINFER_MLA" and default["drafter"] == "FLASHINFER", default
    assert default["blocks"] == [64, 64], default
