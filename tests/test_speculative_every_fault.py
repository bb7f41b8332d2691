"""newuser26: "every fault in one run" — a --speculative-config with a misspelt method AND an
unknown field reported the field only; the method showed after fixing it. Both are said now,
each with its near spelling."""

from __future__ import annotations

import json

from helpers import run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, findings, write_eagle3_setup, write_model


def test_a_misspelt_method_and_an_unknown_field_are_both_reported_with_their_spellings(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    model, drafter = write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER)
    spec = {"method": "eagle-3", "model": str(drafter), "num_spec_tokens": 3}
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model), "--speculative-config", json.dumps(spec),
    )  # fmt: skip
    found = findings(done)["speculative-config"]
    assert not found["ok"] and "it has no field num_spec_tokens" in found["message"], found
    assert "method 'eagle-3' is none of its methods" in found["message"], found
    assert 'write "num_speculative_tokens" for "num_spec_tokens"' in found["fix"], found
    assert 'write "method": "eagle3"' in found["fix"], found


def test_a_field_no_spelling_is_near_keeps_the_plain_fix(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    model, drafter = write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER)
    spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3, "colour": "blue"}
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model), "--speculative-config", json.dumps(spec),
    )  # fmt: skip
    found = findings(done)["speculative-config"]
    assert found["message"] == "vLLM refuses --speculative-config: it has no field colour", found
    assert found["fix"] == "drop it, or spell it as vLLM's SpeculativeConfig does", found
