"""A Llama-layer EAGLE-3 drafter's config.json sizes given as another JSON kind than a whole number
(patchkit/launch/drafter_types.py): a string, or a float where vLLM does not take one, fails
drafter-architecture with the number to write; a boolean vLLM takes as 1 without failing is not judged
(tests/vllm_import/test_drafter_types_real.py holds each to vLLM 0.16.0's own build)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model


def _architecture(tmp_path: Path, changes: dict) -> dict:
    tree, library = write_eagle3_setup(tmp_path)
    launch = serve(
        write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", {**DRAFTER, **changes})
    )
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *launch
    )
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-architecture"]
    return found


@pytest.mark.parametrize(
    ("changes", "said", "fix"),
    [
        ({"intermediate_size": "14336"}, 'intermediate_size as "14336" (a string)', "(14336)"),
        ({"num_attention_heads": 32.0}, "num_attention_heads as 32.0 (a float)", "(32)"),
        ({"max_position_embeddings": "4096"}, 'max_position_embeddings as "4096" (a string)', "(4096)"),
        ({"draft_vocab_size": True}, "draft_vocab_size as true (a boolean)", "number"),
    ],
)
def test_a_size_of_another_json_kind_fails_with_the_number_to_write(tmp_path, changes, said, fix):
    found = _architecture(tmp_path, changes)
    assert not found["ok"] and said in found["message"] and "it fails" in found["message"], found
    key = next(iter(changes))
    assert (
        found["fix"].startswith(f"give {key} in the drafter's config.json as a JSON whole number")
        and fix in found["fix"]
    )


def test_a_float_the_rotary_table_takes_is_not_failed(tmp_path):
    assert _architecture(tmp_path, {"max_position_embeddings": 4096.0})["ok"]


def test_a_boolean_vllm_takes_as_1_is_not_judged(tmp_path):
    found = _architecture(tmp_path, {"num_key_value_heads": True})
    assert (
        found["result"] == "cannot judge" and "num_key_value_heads as true, which vLLM takes as 1" in found["message"]
    )
