"""An EAGLE-3 launch stock vLLM accepts (a llama target: its own whitelist takes llama, and
LlamaForCausalLM implements SupportsEagle3) was refused on a stock tree: "the eagle3 series is not
applied". preflight does not refuse what stock vLLM accepts; a target the stock files refuse still
fails (issue 20 residuals, words30 item 3, review L4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli, run_cli_read_only
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_model

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 5120,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
    "intermediate_size": 13824,
    "vocab_size": 64000,
}
LLAMA_DRAFTER = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 5120,
    "num_hidden_layers": 1,
    "num_attention_heads": 40,
    "intermediate_size": 13824,
    "vocab_size": 64000,
    "draft_vocab_size": 16000,
}


@pytest.fixture(scope="module")
def stock(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("stock-accepts")
    done = run_cli("fetch", "0.16.0", "--all", "--dest", base / "tree")
    assert done.returncode == 0, done.stderr
    return base


@pytest.mark.release
def test_a_llama_eagle3_launch_stock_vllm_accepts_passes_on_a_stock_tree(stock, tmp_path):
    launch = serve(write_model(tmp_path / "llama", LLAMA), write_model(tmp_path / "drafter", LLAMA_DRAFTER))
    done = run_cli_read_only("preflight", "--target", stock / "tree", "--no-import", "--format", "json", "--", *launch)
    found = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    [tree] = [f for f in found["findings"] if f["check"] == "tree-state"]
    assert tree["ok"] and "needs nothing it changes" in tree["message"], tree
    assert found["tree_state"] == "not-applied"
    assert all(f["ok"] for f in found["findings"]), found["findings"]


@pytest.mark.release
def test_a_deepseek_eagle3_launch_the_stock_files_refuse_still_fails(stock, tmp_path):
    launch = serve(write_model(tmp_path / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli_read_only("preflight", "--target", stock / "tree", "--no-import", "--format", "json", "--", *launch)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = {f["check"] for f in json.loads(done.stdout)["findings"] if not f["ok"]}
    assert {"tree-state", "whitelist", "supports-eagle3"} <= failed, failed


@pytest.mark.release
@pytest.mark.parametrize(("layers", "fails"), [([0, 20, 37], True), ([1, 20, 37], False)])
def test_a_llama_drafter_trained_on_layer_0_fails_where_stock_llama_adds_a_residual_that_is_none(
    stock, tmp_path, layers, fails
):
    """Review38 B1's class: 0.16.0's LlamaModel.forward collects hidden_states + residual, and the residual is
    None before the first layer: layer 0 raises in vLLM's start-up profile run, after the loads."""
    drafter = write_model(tmp_path / "drafter", {**LLAMA_DRAFTER, "eagle_aux_hidden_state_layer_ids": layers})
    launch = serve(write_model(tmp_path / "llama", LLAMA), drafter)
    done = run_cli_read_only("preflight", "--target", stock / "tree", "--no-import", "--format", "json", "--", *launch)
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert (not found["drafter-aux-layers"]["ok"]) is fails, found["drafter-aux-layers"]
    assert done.returncode == (1 if fails else 0), done.stdout + done.stderr
    if fails:
        assert "include layer 0" in found["drafter-aux-layers"]["message"]
        assert "llama.py" in found["drafter-aux-layers"]["message"]


@pytest.mark.release
@pytest.mark.parametrize(("version", "accepted"), [("0.26.0", True), ("0.16.0", False)])
def test_an_aux_layer_id_of_the_last_layers_output_passes_where_the_releases_forward_hands_it(
    tmp_path, version, accepted
):
    """0.26.0's deepseek_v2.py forward hands the drafter the last layer's output for the id num_hidden_layers
    (`if self.end_layer in self.aux_hidden_state_layers`); 0.16.0's hands none for it (review38 B5's class)."""
    done = run_cli("fetch", version, "--all", "--dest", tmp_path / "tree")
    assert done.returncode == 0, done.stderr
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "eagle_aux_hidden_state_layer_ids": [1, 29, 61]})
    launch = serve(write_model(tmp_path / "dsv3", DEEPSEEK_V3), drafter)
    done = run_cli_read_only(
        "preflight", "--target", tmp_path / "tree", "--no-import", "--format", "json", "--", *launch
    )
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-aux-layers"]
    assert found["ok"] is accepted, found
    said = "(61: the last layer's output, as this vLLM's deepseek_v2.py hands it)" if accepted else "not below"
    assert said in found["message"], found


@pytest.mark.release
@pytest.mark.parametrize(("version", "result"), [("0.26.0", "cannot judge"), ("0.16.0", "pass")])
def test_nested_aux_layer_ids_are_judged_by_the_releases_runners(tmp_path, version, result):
    """0.26.0's V1 model runner reads eagle_config's eagle_aux_hidden_state_layer_ids (its V2 runner does not);
    0.16.0's runner never reads them and serves the launch on the target's default layers: a pass said as a note."""
    done = run_cli("fetch", version, "--all", "--dest", tmp_path / "tree")
    assert done.returncode == 0, done.stderr
    nested = {k: v for k, v in DRAFTER.items() if k != "eagle_aux_hidden_state_layer_ids"}
    nested["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}
    launch = serve(write_model(tmp_path / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", nested))
    done = run_cli_read_only(
        "preflight", "--target", tmp_path / "tree", "--no-import", "--format", "json", "--", *launch
    )
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-aux-layers"]
    assert found["result"] == result, found
    if result == "pass":
        assert (
            "vLLM ignores the drafter's eagle_config.eagle_aux_hidden_state_layer_ids [1, 29, 57]" in found["message"]
        )
