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
from vllm_overlay import TINY_LLAMA, ask_vllm, site_packages

from patchkit.launch.command import parse
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model
from patchkit.launch.quant_match import quantization_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

LLAMA = {**TINY_LLAMA, "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 2048}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
MODELS = {
    "plain": LLAMA,
    "fp8": {**LLAMA, "quantization_config": FP8},
    "gptq": {**LLAMA, "quantization_config": GPTQ},
    "drafter_fp8": {
        **LLAMA,
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_hidden_layers": 1,
        "quantization_config": FP8,
    },
}
SPEC = {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3}
LINES = [
    ("fp8", ["-q", "awq"]),
    ("fp8", ["-q", "gptq"]),
    ("fp8", ["-q", "compressed-tensors"]),
    ("fp8", ["-q", "fp8"]),
    ("gptq", ["-q", "gptq_marlin"]),
    ("gptq", ["-q", "fp8"]),
    ("plain", ["--speculative-config", json.dumps({**SPEC, "quantization": "awq"})]),
    ("plain", ["--speculative-config", json.dumps({**SPEC, "quantization": "fp8"})]),
    ("plain", ["--speculative-config", json.dumps({**SPEC, "quantization": ""})]),
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
    return refused is not None and ("does not match the quantization" in refused or "literal_error" in refused)


def test_a_quantization_not_the_checkpoints_own_is_failed_only_where_vllm_refuses_it(tmp_path: Path):
    for name, config in MODELS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    drafter = str(tmp_path / "drafter_fp8")
    lines = [[str(tmp_path / name), *(w.replace("DRAFTER", drafter) for w in words)] for name, words in LINES]
    vllm_refused = ask_vllm(ASK_VLLM, json.dumps(lines))
    site = site_packages(str(VLLM_PYTHON))
    wrong, failed = [], 0
    for line, refused in zip(lines, vllm_refused, strict=True):
        command = parse(["vllm", "serve", *line], "0.16.0")
        spec = command.speculative_config or {}
        own = resolve_model(drafter, {}) if spec else None
        context = LaunchContext(command, resolve_model(line[0], {}), own, site, None, None)
        found = quantization_findings("command", context)
        fails = any(not f.ok for f in found)
        failed += fails
        if (fails and not _refused_at_start(refused)) or (not found and _refused_at_start(refused)):
            wrong.append((line[1:], [f.message for f in found], refused))
    assert failed >= 4, vllm_refused  # the refusals patchkit is sure of were made
    assert not wrong, json.dumps(wrong, indent=1)
