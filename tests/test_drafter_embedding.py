"""An EAGLE-3 drafter whose own hidden_size is not the target's (its target_hidden_size is) and whose
weights hold no embed_tokens: vLLM's EagleProposer gives it the target's embedding (one pipeline stage),
and llama_eagle3.py's forward asserts the embedding's width is its hidden states' at the drafter's first
run, after the target's load (0.13-0.17; held to vLLM 0.16.0's own classes in
tests/vllm_import/test_drafter_embedding_real.py). preflight passed drafter-hidden-size (it compared
target_hidden_size only); it now fails it, and says "cannot judge" under -pp above 1, where vLLM loads
the drafter's embedding apart, and where the tree does not show the rules."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process, run_cli_judged
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    EAGLE,
    EAGLE_PATCHED,
    serve,
    write_eagle3_setup,
    write_model,
    write_weights,
)

DRAFTER_FILE = "vllm/model_executor/models/llama_eagle3.py"
# llama_eagle3.py's forward (0.13-0.17, abridged) and the proposer's sharing rule, as the tree holds them
ASSERTED = "assert hidden_states.shape[-1] == input_embeds.shape[-1]\n"
SHARING = "\n# if not self.model.has_own_embed_tokens: share the target's\n"
NARROW = {**DRAFTER, "hidden_size": 4096, "target_hidden_size": 7168}  # DeepSeek-V3's 7168
LAYER = {"midlayer.input_layernorm.weight": [4096], "fc.weight": [4096, 3 * 7168], "d2t": [32000]}


@pytest.fixture
def tree(tmp_path):
    tree, library = write_eagle3_setup(tmp_path / "setup", patched={EAGLE: EAGLE_PATCHED + SHARING})
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / DRAFTER_FILE).write_text(ASSERTED)
    return tree, library


def hidden_size_finding(tmp_path, tree, config: dict, weights: dict, *options: str, spec=None) -> dict:
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", config)
    write_weights(drafter, weights)
    command = serve(target, drafter, *options)
    if spec:
        given = json.loads(command[command.index("--speculative-config") + 1])
        command[command.index("--speculative-config") + 1] = json.dumps({**given, **spec})
    done = run_cli_in_process(
        "preflight", "--target", tree[0], "--patches", tree[1], "--format", "json", "--no-import", "--", *command
    )
    found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-hidden-size"]
    assert len(found) == 1, done.stdout + done.stderr
    return found[0]


def test_a_narrower_drafter_without_its_embedding_fails(tmp_path, tree):
    found = hidden_size_finding(tmp_path, tree, NARROW, LAYER)
    assert found["result"] == "fail", found
    assert (
        "the drafter's own hidden_size 4096 is not the target's 7168 and its weights hold no embed_tokens"
        in (found["message"])
    ), found
    assert (
        "asserts that width is its hidden states' (4096) at its first run, after the target's load"
        in (found["message"])
    ), found
    assert found["fix"] == "use a drafter whose weights hold its own embed_tokens, or one of the target's hidden size"


@pytest.mark.parametrize(
    ("config", "weights"),
    [
        (NARROW, {**LAYER, "embed_tokens.weight": [129280, 4096]}),  # its own: vLLM keeps it
        ({**NARROW, "hidden_size": 7168}, LAYER),  # as wide as the target: sharing fits
    ],
)
def test_a_drafter_with_its_embedding_or_the_targets_width_passes(tmp_path, tree, config, weights):
    assert hidden_size_finding(tmp_path, tree, config, weights)["result"] == "pass"


def test_a_drafter_without_aux_states_is_held_to_its_own_width_not_the_embeddings(tmp_path, tree):
    """No fc (use_aux_hidden_state off): the target's states go in as they come, so the drafter's own
    hidden_size must be the target's; the embedding rule is not the one that fails it."""
    config = {**NARROW, "eagle_config": {"use_aux_hidden_state": False}}
    found = hidden_size_finding(tmp_path, tree, config, LAYER)
    assert found["result"] == "fail" and "use_aux_hidden_state is off" in found["message"], found
    assert "no embed_tokens" not in found["message"], found
    wide = {**config, "hidden_size": 7168}
    assert hidden_size_finding(tmp_path / "wide", tree, wide, LAYER)["result"] == "pass"


def test_under_pipeline_stages_it_cannot_be_judged(tmp_path, tree):
    found = hidden_size_finding(tmp_path, tree, NARROW, LAYER, "-pp", "2")
    assert found["result"] == "cannot judge", found
    assert "with -pp 2 vLLM loads its embedding apart from the target's" in found["message"], found


def test_a_dummy_load_shares_the_embedding_even_when_the_weights_hold_one(tmp_path, tree):
    weights = {**LAYER, "embed_tokens.weight": [129280, 4096]}
    found = hidden_size_finding(tmp_path, tree, NARROW, weights, "--load-format", "dummy")
    assert found["result"] == "fail" and "--load-format dummy loads none of its weights" in found["message"], found


def test_a_tree_without_the_rules_cannot_judge(tmp_path, tree):
    (tree[0] / DRAFTER_FILE).write_text("# another layout\n")
    found = hidden_size_finding(tmp_path, tree, NARROW, LAYER)
    assert found["result"] == "cannot judge" and "is not read from this tree" in found["message"], found


def test_a_drafter_of_another_class_is_not_held_to_llama_eagle3s_assert(tmp_path, tree):
    registry = tree[0] / "vllm/model_executor/models/registry.py"
    registry.write_text(
        registry.read_text().replace(
            '"LlamaForCausalLMEagle3": ("llama_eagle3"', '"LlamaForCausalLMEagle3": ("other_eagle3"'
        )
    )
    assert hidden_size_finding(tmp_path, tree, NARROW, LAYER)["result"] == "pass"
