"""An EAGLE-3 head that vLLM runs under method eagle, EAGLE-1 (patchkit/launch/eagle_one.py): "eagle-"
in the drafter's name, which SpeculativeConfig tests before "eagle3", or the method given so. The
tree's EAGLEConfig names the class Eagle<architecture>: an unregistered name fails; a registered
EAGLE-3 class is fed what the EAGLE-1 proposer gives, where the tree shows it (tests/
test_preflight_release.py holds the rule to the real files)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, write_eagle3_setup, write_model

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
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(target), "--speculative-config", json.dumps(spec),
    )  # fmt: skip
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-architecture"]


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
    assert _architecture(tmp_path, "EAGLE-llama", None, EAGLE1) == []


def test_a_registered_eagle3_class_whose_feeding_is_not_read_cannot_be_judged(tmp_path):
    """Eagle3LlamaForCausalLM keeps its name and is registered: what the tree's proposer feeds it is
    read from its eagle.py, which this tree's does not show."""
    config = {**DRAFTER, "architectures": ["Eagle3LlamaForCausalLM"]}
    [found] = _architecture(tmp_path, "EAGLE-3-head", None, config)
    assert found["result"] == "cannot judge" and "vllm/v1/spec_decode/eagle.py is not read" in found["message"]


def test_a_tree_whose_eagle_config_is_not_read_cannot_judge(tmp_path):
    [found] = _architecture(tmp_path, "EAGLE-3-head", None, renames=False)
    assert found["result"] == "cannot judge" and f"{EAGLE_CONFIG} is not read" in found["message"], found
