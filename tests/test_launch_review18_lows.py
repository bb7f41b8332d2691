"""review18's launch LOWs: where patchkit refuses a launch vLLM would run, it says what vLLM would do.
L1 no model at all: vLLM serves its default model. L2 a --config over 1 MiB: patchkit's limit, not
vLLM's. L3 `--config=FILE`: vLLM ignores the file in that form; the fix is `--config FILE`."""

from __future__ import annotations

import pytest

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse


def refusal(argv: list[str]) -> BadInput:
    with pytest.raises(BadInput) as raised:
        parse(argv, "0.16.0")
    return raised.value


def test_no_model_says_vllm_would_serve_its_default():
    said = refusal(["vllm", "serve", "--port", "8001"])
    assert "names no model" in said.message and "vLLM would serve its default model" in said.message, said.message
    assert said.hint == "give MODEL first: vllm serve MODEL"


def test_a_config_file_over_the_limit_is_said_to_be_patchkits_limit(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 120_000 + "port: 8001\n")
    said = refusal(["vllm", "serve", "m", "--config", str(big)])
    assert said.message == f"--config {big}: larger than 1048576 bytes, patchkit's limit (not vLLM's)", said.message
    assert "--no-preflight" in (said.hint or "")


@pytest.mark.parametrize("model", [["m"], []])
def test_config_with_equals_is_said_to_be_ignored_by_vllm_with_the_spelling_it_reads(tmp_path, model):
    """With a model given, vLLM starts (without the file's options): read, and the `command` check
    fails on it (tests/test_odd_inputs_said.py); with none, the file was to name it: refused."""
    config = tmp_path / "cfg.yaml"
    config.write_text("model: m\ntool-call-parser: hermes\n")
    if model:
        read = parse(["vllm", "serve", *model, f"--config={config}"], "0.16.0")
        assert read.config_ignored == f"--config={config}" and "tool-call-parser" not in read.options
    else:
        said = refusal(["vllm", "serve", *model, f"--config={config}"])
        assert said.message.startswith(f"vLLM ignores --config={config}: it reads a config file only as"), said.message
        assert said.hint == f"write --config {config}"
    assert parse(["vllm", "serve", *model, "--config", str(config)], "0.16.0").model == "m"
