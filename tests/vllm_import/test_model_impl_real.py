"""Opt-in (`make test-vllm`): `--model-impl transformers` with EAGLE-3 (review37 A8). vLLM then builds
the target as its Transformers modeling backend's class, not the native one, and that class's EAGLE-3
needs a transformers the venv may not have: preflight names the class vLLM itself resolves
(ModelConfig._architecture), the venv's own transformers version, and a version vLLM's own
check_version() refuses; its fix (drop the option) then passes, with vLLM's supports_eagle3() asked.
An overlay is applied for the fix (the native class implements SupportsEagle3 only then), reverted at the end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from launch_fixtures import EMPTY_SAFETENSORS
from test_preflight_real import DEEPSEEK_V3_CLASS, DRAFTER, TARGET
from vllm_overlay import ask_vllm, overlay_venv

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

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


def patchkit(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True, timeout=900
    )


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
