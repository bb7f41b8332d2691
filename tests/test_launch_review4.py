"""Review 4 of the launch (preflight / run): what a launch names read as vLLM 0.16.0 reads it. Each
test here failed on the code before its fix; the real-vLLM comparisons are in tests/vllm_import/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import assert_clean_failure, run_cli
from launch_fixtures import DEEPSEEK_V3, DRAFTER, write_eagle3_setup, write_model

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse
from patchkit.launch.preflight import _models

NARROW = {**DEEPSEEK_V3, "hidden_size": 4096}


@pytest.fixture
def models(tmp_path) -> dict[str, Path]:
    return {
        "target": write_model(tmp_path / "models" / "target", DEEPSEEK_V3),
        "drafter": write_model(tmp_path / "models" / "drafter", DRAFTER),
    }


def spec(drafter: object, **fields: object) -> str:
    return json.dumps({"method": "eagle3", "model": drafter, "num_speculative_tokens": 3, **fields})


# --- 1: a name no file can have (a NUL, a lone surrogate) is bad input, never exit 70 ----------------


def _nul_launches(tmp_path: Path, models: dict[str, Path]) -> list[list[str]]:
    target, drafter = str(models["target"]), str(models["drafter"])
    (tmp_path / "model.yaml").write_text('model: "m\\0odel"\n')
    (tmp_path / "config-path.yaml").write_text('hf-config-path: "c\\0fg"\n')
    (tmp_path / "revision.yaml").write_text('revision: "r\\0ev"\n')
    (tmp_path / "nul.json").write_text(json.dumps({target: "t\u0000o"}))
    (tmp_path / "surrogate.json").write_text(json.dumps({target: "\ud834"}))
    (tmp_path / "drafter-surrogate.json").write_text(json.dumps({drafter: "\udfff-drafter"}))
    redirect = "VLLM_MODEL_REDIRECT_PATH="
    return [
        ["vllm", "serve", target, "--speculative-config", spec("lab/dr\u0000after")],
        ["vllm", "serve", target, "--speculative-config", spec(drafter, revision="\u0000")],
        ["vllm", "serve", target, "--speculative-config.model", '"x\\u0000y"', "--speculative-config.method", "eagle3"],
        ["vllm", "serve", "--config", str(tmp_path / "model.yaml")],
        ["vllm", "serve", target, "--config", str(tmp_path / "config-path.yaml")],
        ["vllm", "serve", target, "--config", str(tmp_path / "revision.yaml")],
        ["env", f"{redirect}{tmp_path / 'nul.json'}", "vllm", "serve", target],
        ["env", f"{redirect}{tmp_path / 'surrogate.json'}", "vllm", "serve", target],
        ["env", f"{redirect}{tmp_path / 'drafter-surrogate.json'}", "vllm", "serve", target, "--speculative-config", spec(drafter)],
    ]


def test_a_name_no_file_can_hold_is_bad_input_wherever_the_launch_gives_it(tmp_path, models):
    for argv in _nul_launches(tmp_path, models):
        with pytest.raises(BadInput, match="no file name can hold it"):
            _models(parse(argv))


def test_a_nul_in_a_name_is_exit_2_for_preflight_and_run(tmp_path, models):
    tree, library = write_eagle3_setup(tmp_path)
    argv = _nul_launches(tmp_path, models)[3]
    for verb in (["preflight", "--no-import"], ["run"]):
        done = run_cli(*verb, "--target", tree, "--patches", library, "--", *argv)
        assert_clean_failure(done, 2)
        assert "no file name can hold it" in done.stderr
