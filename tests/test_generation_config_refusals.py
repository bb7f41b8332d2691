"""A generation_config.json that is a JSON object transformers' GenerationConfig refuses as
from_pretrained builds it (review36 W4: `max_new_tokens` -1, an unknown `cache_implementation`, a
`watermarking_config` that is no object...): vLLM's front end reads it as it starts (the model's own
under `auto` and `vllm`, or --generation-config DIR's) and the launch ends there. Judged from the
file alone, in transformers' words; which ones it refuses is held against the real transformers of the
0.16.0 venv in tests/vllm_import/test_after_load_real.py (launch_fixtures.GENERATION_CASES)."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process
from launch_fixtures import GENERATION_CASES, stock_files, write_model, write_tree

from patchkit.launch.command import parse
from patchkit.launch.genconfig import generation_config_findings

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


@pytest.mark.parametrize("name", sorted(GENERATION_CASES))
def test_the_models_own_generation_config_is_refused_where_generation_config_refuses_it(tmp_path, name):
    text, taken = GENERATION_CASES[name]
    model = write_model(tmp_path / "m", LLAMA)
    (model / "generation_config.json").write_text(text)
    for mode in ("auto", "vllm"):
        found = generation_config_findings(parse(["vllm", "serve", str(model), "--generation-config", mode]), "c")
        assert (found == []) is taken, found
    other = write_model(tmp_path / "other", LLAMA)
    found = generation_config_findings(parse(["vllm", "serve", str(other), "--generation-config", str(model)]), "c")
    assert (found == []) is taken, found
    if not taken:
        assert "is one transformers' GenerationConfig refuses: " in found[0].message, found


def test_the_refusal_says_transformers_words_and_a_fix_that_works(tmp_path):
    model = write_model(tmp_path / "m", LLAMA)
    (model / "generation_config.json").write_text('{"max_new_tokens": -1, "temperature": 0.6}')
    tree = write_tree(tmp_path / "site", "0.16.0", stock_files("0.16.0"))
    judged = ["preflight", "--target", tree, "--no-import", "--format", "json", "--", "vllm", "serve", model]
    done = run_cli_in_process(*judged)
    failed = [f for f in json.loads(done.stdout)["findings"] if not f["ok"]]
    assert [f["message"] for f in failed if f["check"] == "command"] == [
        f"the model's generation_config.json ({model / 'generation_config.json'}) is one transformers' "
        "GenerationConfig refuses: `max_new_tokens` must be greater than 0, but is -1: vLLM refuses the launch "
        "as it starts"
    ], failed
    good = write_model(tmp_path / "good", LLAMA)
    (good / "generation_config.json").write_text('{"max_new_tokens": 256}')
    fixed = run_cli_in_process(*judged, "--generation-config", good)  # the fix's other way: a DIR holding a good one
    assert not [f for f in json.loads(fixed.stdout)["findings"] if not f["ok"] and f["check"] == "command"]
