"""An EAGLE-3 head that vLLM runs under method eagle, EAGLE-1 (patchkit/launch/eagle_one.py): "eagle-"
in the drafter's name, which SpeculativeConfig tests before "eagle3", or the method given so. The
tree's EAGLEConfig names the class Eagle<architecture>: an unregistered name fails; a registered
EAGLE-3 class is fed what the EAGLE-1 proposer gives, where the tree shows it (tests/
test_preflight_release.py holds the rule to the real files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_fixtures import (
    DEEPSEEK_EAGLE1,
    DEEPSEEK_V3,
    DRAFTER,
    EAGLE,
    EAGLE1_FEEDS,
    SPEC,
    speculative_launch,
    write_eagle3_setup,
    write_model,
)

EAGLE_CONFIG = "vllm/transformers_utils/configs/eagle.py"
RENAMES = """
class EAGLEConfig:
    def __init__(self, model=None, method="eagle", **kwargs):
        if method == "eagle":
            kwargs["architectures"] = [
                f"Eagle{arch}" if not arch.startswith("Eagle") else arch for arch in self.model.architectures
            ]
"""
EAGLE1 = {**DRAFTER, "architectures": ["LlamaForCausalLM"]}


def _architecture(tmp_path: Path, name: str, method: str | None, config: dict = DRAFTER, renames: bool = True):
    """The drafter-architecture findings of a launch whose drafter, named `name`, has `config`."""
    tree, library = write_eagle3_setup(tmp_path)
    if renames:
        (tree / EAGLE_CONFIG).parent.mkdir(parents=True)
        (tree / EAGLE_CONFIG).write_text(RENAMES)
    drafter = write_model(tmp_path / name, config)
    spec = {"model": str(drafter), "num_speculative_tokens": 3, **({"method": method} if method else {})}
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    judged = speculative_launch(tree, library, target, spec)
    return [f for f in judged["findings"] if f["check"] == "drafter-architecture"]


# the EAGLE-1 head's cannot-judge findings of its class (a tree whose renaming is not read) and weights
NOT_KNOWN = ("Eagle<architecture>) is not known", "not held to its config.json statically")


def _judged(found: list[dict]) -> list[dict]:
    return [f for f in found if not any(words in f["message"] for words in NOT_KNOWN)]


def test_an_eagle3_head_named_eagle_dash_is_run_as_eagle1_and_fails(tmp_path):
    [found] = _architecture(tmp_path, "EAGLE-3-head", None)
    assert not found["ok"], found
    assert 'is an EAGLE-3 head, but vLLM runs it as EAGLE-1 ("eagle-" in its name' in found["message"], found
    assert "EagleLlamaForCausalLMEagle3, which it does not register" in found["message"], found
    assert found["fix"] == 'write "method": "eagle3" in --speculative-config', found


def test_an_eagle3_head_given_method_eagle_fails(tmp_path):
    [found] = _architecture(tmp_path, "head-eagle3", "eagle")
    assert not found["ok"] and 'runs it as EAGLE-1 (method "eagle" given)' in found["message"], found


def test_method_eagle3_given_keeps_the_head_eagle3(tmp_path):
    found = _architecture(tmp_path, "EAGLE-3-head", "eagle3")
    assert all("EAGLE-1" not in f["message"] for f in found), found


def test_an_eagle1_drafter_is_not_held_to_the_rule(tmp_path):
    assert _judged(_architecture(tmp_path, "EAGLE-llama", None, EAGLE1)) == []


def test_a_registered_eagle3_class_whose_feeding_is_not_read_cannot_be_judged(tmp_path):
    """Eagle3LlamaForCausalLM keeps its name and is registered: what the tree's proposer feeds it is
    read from its eagle.py, which this tree's does not show."""
    config = {**DRAFTER, "architectures": ["Eagle3LlamaForCausalLM"]}
    [found] = _architecture(tmp_path, "EAGLE-3-head", None, config)
    assert found["result"] == "cannot judge" and "vllm/v1/spec_decode/eagle.py is not read" in found["message"]


def test_a_tree_whose_eagle_config_is_not_read_cannot_judge(tmp_path):
    [found] = _architecture(tmp_path, "EAGLE-3-head", None, renames=False)
    assert found["result"] == "cannot judge" and f"{EAGLE_CONFIG} is not read" in found["message"], found


LLAMA_EAGLE1 = {**EAGLE1, "hidden_size": 128, "target_hidden_size": 7168}


def _width(tmp_path: Path, config: dict, method: str, feeds: str | None = EAGLE1_FEEDS) -> list[dict]:
    """The drafter-hidden-size findings of a DeepSeek-V3 launch (hidden_size 7168) whose drafter has
    `config`, under `method`, on a tree whose proposer file holds `feeds`."""
    tree, library = write_eagle3_setup(tmp_path)
    if feeds is not None:
        (tree / EAGLE).parent.mkdir(parents=True, exist_ok=True)
        (tree / EAGLE).write_text(feeds)
    drafter = write_model(tmp_path / "head", config)
    spec = {"method": method, "model": str(drafter), "num_speculative_tokens": 3}
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    judged = speculative_launch(tree, library, target, spec)
    return [f for f in judged["findings"] if f["check"] == "drafter-hidden-size"]


def test_a_deepseek_eagle1_head_of_another_hidden_size_fails(tmp_path):
    [found] = _width(tmp_path, DEEPSEEK_EAGLE1, "eagle")
    assert not found["ok"] and found["result"] != "cannot judge", found
    assert "(method eagle) has hidden_size 128, the target 7168" in found["message"], found
    assert "copies the target's 7168-wide hidden states into the drafter's 128-wide buffer" in found["message"]
    assert found["fix"] == "use a drafter made for this target (hidden_size 7168)", found


def test_a_llama_eagle1_head_is_held_to_its_own_hidden_size_not_target_hidden_size(tmp_path):
    """EAGLE-1's classes and proposer read hidden_size only: a target_hidden_size does not widen them."""
    [found] = _width(tmp_path, LLAMA_EAGLE1, "eagle")
    assert not found["ok"] and "has hidden_size 128, the target 7168" in found["message"], found


def test_a_separate_mtp_checkpoint_of_another_hidden_size_fails(tmp_path):
    [found] = _width(tmp_path, DEEPSEEK_EAGLE1, "mtp")
    assert not found["ok"] and "(method mtp) has hidden_size 128" in found["message"], found


def test_an_eagle1_head_of_the_targets_hidden_size_passes(tmp_path):
    assert _width(tmp_path, {**DEEPSEEK_EAGLE1, "hidden_size": 7168}, "eagle") == []


def test_an_eagle_config_drafter_takes_its_inner_models_hidden_size(tmp_path):
    config = {"model_type": "eagle", "architectures": ["EagleLlamaForCausalLM"], "model": {**EAGLE1, "hidden_size": 64}}
    [found] = _width(tmp_path, config, "eagle")
    assert not found["ok"] and "has hidden_size 64, the target 7168" in found["message"], found


def test_a_tree_whose_proposer_is_not_read_cannot_judge_the_width(tmp_path):
    [found] = _width(tmp_path, DEEPSEEK_EAGLE1, "eagle", feeds=None)
    assert found["result"] == "cannot judge" and "proposer feeds it is not read" in found["message"], found


def test_a_drafter_without_a_hidden_size_cannot_be_judged(tmp_path):
    config = {k: v for k, v in DEEPSEEK_EAGLE1.items() if k != "hidden_size"}
    [found] = _width(tmp_path, config, "eagle")
    assert found["result"] == "cannot judge" and "its hidden_size (none)" in found["message"], found


def test_an_eagle1_head_whose_eagle_class_vllm_does_not_register_fails(tmp_path):
    """EAGLEConfig names a DeepseekV3ForCausalLM head EagleDeepseekV3ForCausalLM, which no registry holds."""
    config = {**EAGLE1, "architectures": ["DeepseekV3ForCausalLM"]}
    [found] = _architecture(tmp_path, "head", "eagle", config)
    assert not found["ok"] and found["result"] != "cannot judge", found
    assert "vLLM names its class EagleDeepseekV3ForCausalLM, which its registry does not hold" in found["message"]
    assert found["fix"].startswith("use a drafter made for method eagle"), found


def test_an_eagle1_head_vllm_registers_passes_the_class_rule(tmp_path):
    assert _judged(_architecture(tmp_path, "head", "eagle", EAGLE1)) == []


@pytest.mark.parametrize(
    ("inner", "method", "said"),
    [
        (["DeepseekV3ForCausalLM"], None, "EagleDeepseekV3ForCausalLM"),
        (["DeepseekV3ForCausalLM"], "eagle", "EagleDeepseekV3ForCausalLM"),
        (["LlamaForCausalLM"], None, None),
        (None, None, "gives no architectures"),
        (["LlamaForCausalLM"], "medusa", "its method 'medusa' is not one patchkit reads"),
    ],
)
def test_an_eagle_config_heads_class_is_named_from_its_inner_model(tmp_path, inner, method, said):
    """drafter32's left item: a config.json of vLLM's own EAGLEConfig (model_type eagle) had no class
    rule. EAGLEConfig names the class from the inner model's architectures by its own method (the
    top-level architectures ignored): an unregistered one is refused at start, as for other heads."""
    model = {**EAGLE1, **({"architectures": inner} if inner else {})}
    model = model if inner else {k: v for k, v in model.items() if k != "architectures"}
    config = {"model_type": "eagle", "architectures": ["EagleLlamaForCausalLM"], "model": model}
    found = _judged(_architecture(tmp_path, "head", "eagle", {**config, **({"method": method} if method else {})}))
    if said is None:
        assert found == [], found
    elif said.startswith("Eagle"):
        [failed] = found
        assert not failed["ok"] and failed["result"] != "cannot judge", failed
        assert f"vLLM names its class {said}, which its registry does not hold" in failed["message"], failed
    else:
        [unjudged] = found
        assert unjudged["result"] == "cannot judge" and said in unjudged["message"], unjudged
        assert "which class vLLM's EAGLEConfig names for it is not known" in unjudged["message"], unjudged


def _heads(
    tmp_path: Path, config: dict, tp: str, method: str = "eagle", verified: bool = False, extra: dict | None = None
) -> list[dict]:
    """The drafter-architecture findings of a DeepSeek-V3 launch under -tp `tp` whose drafter has `config`
    (`verified`: the tree's SpeculativeConfig verifies the draft config with -tp at start, as 0.11-0.34's do)."""
    tree, library = write_eagle3_setup(tmp_path)
    (tree / EAGLE).parent.mkdir(parents=True, exist_ok=True)
    (tree / EAGLE).write_text(EAGLE1_FEEDS)
    if verified:
        with (tree / SPEC).open("a") as spec_file:
            spec_file.write(VERIFIED)
    drafter = write_model(tmp_path / "head", config)
    spec = {"method": method, "model": str(drafter), "num_speculative_tokens": 3, **(extra or {})}
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    judged = speculative_launch(tree, library, target, spec, "-tp", tp)
    return _judged([f for f in judged["findings"] if f["check"] == "drafter-architecture"])


VERIFIED = "\n# self.draft_model_config.verify_with_parallel_config(self.draft_parallel_config)\n"
SIX_HEADS = {**DEEPSEEK_EAGLE1, "hidden_size": 7168, "num_attention_heads": 6, "num_key_value_heads": 6}


def test_an_eagle1_head_whose_heads_tp_does_not_divide_fails(tmp_path):
    [found] = _heads(tmp_path, SIX_HEADS, "4")
    assert not found["ok"], found
    assert "runs as EAGLE-1" in found["message"] and "its 6 attention heads do not divide by -tp 4" in found["message"]
    assert "after the target's load" in found["message"], found
    assert found["fix"].startswith("give a -tp that divides the drafter's heads"), found


def test_an_eagle1_llama_head_whose_kv_heads_tp_does_not_split_fails(tmp_path):
    config = {**EAGLE1, "hidden_size": 7168, "num_attention_heads": 8, "num_key_value_heads": 3}
    [found] = _heads(tmp_path, config, "4")
    assert not found["ok"] and "its 3 KV heads do not split over -tp 4" in found["message"], found


def test_an_mla_eagle1_head_is_held_to_its_heads_only(tmp_path):
    """DeepseekV2MLAAttention asserts on num_heads alone: its num_key_value_heads is not split."""
    config = {**SIX_HEADS, "num_attention_heads": 8, "num_key_value_heads": 3, "kv_lora_rank": 512}
    assert _heads(tmp_path, config, "4") == []


def test_an_eagle_config_head_is_held_to_its_inner_models_heads(tmp_path):
    inner = {**EAGLE1, "num_attention_heads": 6, "num_key_value_heads": 6}
    config = {"model_type": "eagle", "architectures": ["EagleLlamaForCausalLM"], "model": inner}
    [found] = _heads(tmp_path, config, "4")
    assert not found["ok"] and "its 6 attention heads do not divide by -tp 4" in found["message"], found


def test_an_eagle1_head_whose_heads_tp_divides_passes(tmp_path):
    assert _heads(tmp_path, SIX_HEADS, "2") == []


def test_an_eagle1_head_of_another_vocabulary_cannot_be_judged(tmp_path):
    """EAGLE-1's proposer may share the target's embedding and lm_head (decided at load from the weights)."""
    tree, library = write_eagle3_setup(tmp_path)
    drafter = write_model(tmp_path / "head", {**DEEPSEEK_EAGLE1, "hidden_size": 7168, "vocab_size": 32000})
    spec = {"method": "eagle", "model": str(drafter), "num_speculative_tokens": 3}
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    judged = speculative_launch(tree, library, target, spec)
    [found] = [f for f in judged["findings"] if f["check"] == "drafter-vocabulary"]
    assert "cannot judge" in json.dumps(found), found
    assert "its vocab_size 32000, the target's 129280" in found["message"], found


def test_an_eagle1_heads_weights_are_said_not_judged_never_passed(tmp_path):
    """No static rule holds an EAGLE-1 head's tensors to its config.json (vLLM's EAGLE-1 classes load them
    each their own way): "cannot judge", naming the import path's drafter-build; none for a refused class."""
    found = _architecture(tmp_path / "registered", "head", "eagle", EAGLE1)
    [unjudged] = [f for f in found if NOT_KNOWN[1] in f["message"]]
    assert unjudged["result"] == "cannot judge" and "runs as EAGLE-1" in unjudged["message"], found
    assert "without --no-import" in unjudged["fix"] and "drafter-build" in unjudged["fix"], unjudged
    refused = _architecture(tmp_path / "refused", "head", "eagle", {**EAGLE1, "architectures": ["Qwen2ForCausalLM"]})
    assert [f["result"] for f in refused] == ["fail"], refused


def test_an_eagle1_heads_class_is_not_known_where_the_renaming_or_its_auto_map_is_not_read(tmp_path):
    """Not silent: vLLM refuses an Eagle<architecture> its registry lacks, which a tree without EAGLEConfig's
    renaming, or a config whose auto_map may give the class, does not show."""
    for where, config, renames, why in (
        ("unread", EAGLE1, False, "its renaming) or registry is not read"),
        ("auto_map", {**EAGLE1, "auto_map": {"AutoConfig": "configuration_x.XConfig"}}, True, "auto_map may give it"),
    ):
        found = [
            f for f in _architecture(tmp_path / where, "head", "eagle", config, renames) if NOT_KNOWN[0] in f["message"]
        ]
        assert [f["result"] for f in found] == ["cannot judge"] and why in found[0]["message"], (where, found)
        assert found[0]["fix"] == "check that vLLM's registry holds EagleLlamaForCausalLM", found


def test_a_separate_mtp_checkpoint_whose_heads_tp_does_not_divide_fails(tmp_path):
    """Under method mtp a checkpoint of its own is built in the target's tensor-parallel group as an
    EAGLE-1 head is: -tp 4 does not divide its 6 heads (MLA: its KV heads are not split); -tp 2 does."""
    [found] = _heads(tmp_path / "four", SIX_HEADS, "4", "mtp")
    assert not found["ok"] and "(method mtp, a checkpoint of its own)" in found["message"], found
    assert "its 6 attention heads do not divide by -tp 4" in found["message"], found
    assert found["fix"].startswith("give a -tp that divides the drafter's heads"), found
    assert _heads(tmp_path / "two", SIX_HEADS, "2", "mtp") == []


@pytest.mark.parametrize("alone", [1, "1", 1.0, " 01 "])
def test_a_separate_mtp_checkpoint_under_draft_tp_1_is_still_split_over_the_targets_tp_after_the_load(tmp_path, alone):
    """review43a S2: the mtp proposer builds the checkpoint in the target's group whatever
    draft_tensor_parallel_size says; with 1 (pydantic reads "1" and 1.0 as 1) vLLM 0.16.0 starts, and
    the split fails after the target's load, not at start."""
    spec = {"draft_tensor_parallel_size": alone}
    [found] = _heads(tmp_path, SIX_HEADS, "4", "mtp", verified=True, extra=spec)
    assert not found["ok"] and "its 6 attention heads do not divide by -tp 4" in found["message"], found
    assert "vLLM fails building it, after the target's load" in found["message"], found


def test_heads_tp_does_not_divide_are_refused_at_start_where_the_tree_verifies_the_draft_config(tmp_path):
    """SpeculativeConfig verifies the draft ModelConfig with -tp before any load (vLLM 0.16.0: "Total number
    of attention heads (6) must be divisible by tensor parallel size (4)"): said so, for EAGLE-1, mtp, EAGLE-3;
    KV heads are an attention's assert, building it."""
    eagle3 = {**DRAFTER, "num_attention_heads": 6, "num_key_value_heads": 6}
    for method, config in (("eagle", SIX_HEADS), ("mtp", SIX_HEADS), ("eagle3", eagle3)):
        found = [f for f in _heads(tmp_path / method, config, "4", method, verified=True) if not f["ok"]]
        assert "vLLM refuses the launch at start" in found[0]["message"], (method, found)
    kv = {**EAGLE1, "hidden_size": 7168, "num_attention_heads": 8, "num_key_value_heads": 3}
    [found] = _heads(tmp_path / "kv", kv, "4", verified=True)
    assert (
        "its 3 KV heads do not split over -tp 4" in found["message"] and "after the target's load" in found["message"]
    )


UNGUARDED = "def get_quant_config(model_config, load_config):\n    return model_config.hf_overrides.get('f', None)\n"


def test_an_eagle1_head_given_a_quantization_it_has_no_config_for_fails(tmp_path):
    """llama_eagle.py builds the head with get_draft_quant_config; 0.12-0.17 read hf_overrides unguarded (review42a R5)."""
    tree, library = write_eagle3_setup(tmp_path)
    (tree / EAGLE_CONFIG).parent.mkdir(parents=True)
    (tree / EAGLE_CONFIG).write_text(RENAMES)
    (tree / "vllm/model_executor/model_loader").mkdir(parents=True, exist_ok=True)
    (tree / "vllm/model_executor/model_loader/weight_utils.py").write_text(UNGUARDED)
    drafter = write_model(tmp_path / "head", EAGLE1)
    spec = {"method": "eagle", "model": str(drafter), "num_speculative_tokens": 3, "quantization": "fp8"}
    judged = speculative_launch(tree, library, write_model(tmp_path / "target", DEEPSEEK_V3), spec)
    [found] = _judged([f for f in judged["findings"] if f["check"] == "drafter-architecture"])
    assert not found["ok"] and "hf_overrides" in found["message"], found
    assert 'drop "quantization" from --speculative-config' in found["fix"], found
