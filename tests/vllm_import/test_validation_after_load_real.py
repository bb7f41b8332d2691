"""Opt-in (`make test-vllm`): vLLM's own validation, run by preflight in the real vLLM venv (read only),
refuses what the real server refuses once the model has loaded (review34 F5, F6): a --middleware
build_app cannot import or take, a --generation-config its get_diff_sampling_param cannot read; takes a
middleware class on the launch's PYTHONPATH; and, where no accelerator is found (the CPU platform
forced), says so in each verdict and does not fail a launch for the CPU platform's own refusal (F16)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from launch_fixtures import EMPTY_SAFETENSORS
from vllm_overlay import TINY_LLAMA, preflight_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

TARGET = TINY_LLAMA
CPU = "(judged on the CPU platform: no accelerator found)"


def validation(tmp_path: Path, *options: str) -> dict:
    """The vllm-validation finding of a preflight of a small Llama launch with `options`."""
    model = tmp_path / "llama"
    if not model.is_dir():
        model.mkdir()
        (model / "config.json").write_text(json.dumps(TARGET))
        (model / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
        (tmp_path / "pp" / "corp_mw").mkdir(parents=True)
        (tmp_path / "pp" / "corp_mw" / "__init__.py").write_text("")
        (tmp_path / "pp" / "corp_mw" / "mw.py").write_text(
            "class Good:\n    pass\n\ndef plain(request, call_next):\n    pass\n"
        )
    vllm = str(Path(str(VLLM_PYTHON)).with_name("vllm"))
    launch = ["env", f"PYTHONPATH={tmp_path / 'pp'}", vllm, "serve", str(model), "--skip-tokenizer-init", *options]
    [found] = [f for f in preflight_findings(*launch, static=False) if f["check"] == "vllm-validation"]
    return found


def test_vllms_validation_refuses_what_the_server_refuses_after_the_load(tmp_path: Path):
    good = validation(tmp_path, "--middleware", "corp_mw.mw.Good")
    assert good["result"] == "pass", good
    forced = good["message"].endswith(CPU)
    plain = validation(tmp_path, "--middleware", "corp_mw.mw.Good", "--middleware", "corp_mw.mw.plain")
    assert plain["result"] == "fail", plain
    assert plain["message"].startswith("--middleware corp_mw.mw.plain: neither a class nor an async function"), plain
    missing = validation(tmp_path, "--middleware", "corp_mw.gone.Good")
    assert missing["result"] == "fail" and "corp_mw.gone does not import in the launch" in missing["message"], missing
    generation = validation(tmp_path, "--generation-config", str(tmp_path / "no-such-dir"))
    assert generation["result"] == "fail", generation
    assert generation["message"].startswith(f"--generation-config {tmp_path / 'no-such-dir'}: vLLM cannot read it"), (
        generation
    )
    assert all(f["message"].endswith(CPU) is forced for f in (plain, missing, generation))


@pytest.mark.parametrize(
    ("option", "said"), [("--kv-cache-dtype=fp8", "FP8 KV cache"), ("--enable-sleep-mode", "Sleep mode")]
)
def test_a_refusal_of_the_forced_cpu_platform_is_no_verdict_on_the_launch(tmp_path: Path, option, said):
    """One raised in vllm/platforms/cpu.py, and one in the configuration whose words blame the platform."""
    found = validation(tmp_path, option)
    if not found["message"].startswith("cannot judge here"):
        assert found["result"] == "pass" and not found["message"].endswith(CPU), found  # an accelerator here
        return
    assert found["result"] == "cannot judge", found
    assert found["message"].startswith("cannot judge here: judged on the CPU platform (no accelerator found)"), found
    assert said in found["message"], found


def test_the_models_own_generation_config_is_read_under_vllm_too(tmp_path: Path):
    """review36 W3: `--generation-config vllm` still has the front end read the model's own
    (InputProcessor's try_get_generation_config): one vLLM cannot read fails there too."""
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TARGET))
    (model / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    (model / "generation_config.json").write_text("[1]")
    found = validation(tmp_path, "--generation-config", "vllm")
    assert found["result"] == "fail", found
    assert found["message"].startswith("vLLM cannot read the model's generation config (TypeError"), found
