"""What vLLM's drafting proposer refuses when the model runner builds it (patchkit/launch/proposer_start.py),
each read from the tree's proposers and held to vLLM 0.16.0's own classes in
tests/vllm_import/test_proposer_start_real.py: parallel_drafting with a drafter whose config.json gives no
pard_token (nor ptd_token_id); method draft_model with a draft_tensor_parallel_size other than -tp (the
config takes 1); draft_model, or parallel drafting of several tokens, on a multimodal target. preflight
said ok to each; the speculative-config finding now fails them where the tree's proposer refuses."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process, run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, EAGLE, EAGLE_PATCHED, KIMI_K25, write_eagle3_setup, write_model

DRAFT_MODEL = "vllm/v1/spec_decode/draft_model.py"
# the 0.16 proposers (abridged): the base proposer's refusals and DraftModelProposer's -tp rule
BASE = """
        if self.needs_extra_input_slots:
            self._raise_if_padded_drafter_batch_disabled()
            self._raise_if_multimodal()
    def _init_parallel_drafting_params(self):
        raise ValueError("the draft model config must have `pard_token` or `ptd_token_id` specified")
"""
DRAFT_TP = "class DraftModelProposer:\n    def __init__(self):\n        self._raise_if_draft_tp_mismatch()\n"
# 0.15's DraftModelProposer refuses a multimodal target itself
DRAFT_015 = "class DraftModelProposer:\n    def __init__(self):\n        self._raise_if_multimodal()\n"


@pytest.fixture
def tree(tmp_path):
    tree, library = write_eagle3_setup(tmp_path / "setup", patched={EAGLE: EAGLE_PATCHED + BASE})
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / DRAFT_MODEL).write_text(DRAFT_TP)
    return tree, library


def spec_findings(tmp_path, tree, spec: dict, *options: str, target=DEEPSEEK_V3, drafter=DRAFTER) -> list[dict]:
    """The speculative-config findings of a preflight with `spec` (its model: a drafter of `drafter`)."""
    target_dir = write_model(tmp_path / "target", target)
    drafter_dir = write_model(tmp_path / "drafter", drafter)
    given = json.dumps({"model": str(drafter_dir), "num_speculative_tokens": 3, **spec})
    command = ["vllm", "serve", str(target_dir), "--trust-remote-code", "--speculative-config", given, *options]
    done = run_cli_in_process(
        "preflight", "--target", tree[0], "--patches", tree[1], "--format", "json", "--no-import", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    found = json.loads(done.stdout)["findings"]
    return [f for f in found if f["check"] == "speculative-config" and "no field" not in f["message"]]


def test_parallel_drafting_without_pard_token_fails(tmp_path, tree):
    [found] = spec_findings(tmp_path, tree, {"method": "eagle3", "parallel_drafting": True})
    assert found["result"] == "fail", found
    assert "gives neither pard_token nor ptd_token_id" in found["message"], found
    assert "when the model runner starts (before the load)" in found["message"], found


@pytest.mark.parametrize("key", ["pard_token", "ptd_token_id"])
def test_a_drafter_that_gives_the_token_passes(tmp_path, tree, key):
    assert (
        spec_findings(tmp_path, tree, {"method": "eagle3", "parallel_drafting": True}, drafter={**DRAFTER, key: 0})
        == []
    )


def test_draft_model_with_a_draft_tp_of_1_under_tp_8_fails(tmp_path, tree):
    spec = {"method": "draft_model", "draft_tensor_parallel_size": 1}
    [found] = spec_findings(tmp_path, tree, spec, "-tp", "8")
    assert found["result"] == "fail", found
    assert "draft_tensor_parallel_size 1 under -tp 8: vLLM's DraftModelProposer" in found["message"], found
    assert found["fix"] == 'give "draft_tensor_parallel_size" 8, or drop it', found
    assert spec_findings(tmp_path / "same", tree, {**spec, "draft_tensor_parallel_size": 8}, "-tp", "8") == []
    assert spec_findings(tmp_path / "eagle3", tree, {**spec, "method": "eagle3"}, "-tp", "8") == []


DRAFT_MODEL_FIX = "use a drafter method that takes a multimodal target (eagle3), or serve it text-only"
PARALLEL_FIX = 'drop "parallel_drafting", or give "num_speculative_tokens" 1, or serve it text-only'


@pytest.mark.parametrize(
    ("spec", "draft_model_file", "fix"),
    [
        ({"method": "draft_model"}, DRAFT_TP, DRAFT_MODEL_FIX),  # 0.16: the base proposer's extra slots
        ({"method": "eagle3", "parallel_drafting": True, "num_speculative_tokens": 3}, DRAFT_TP, PARALLEL_FIX),
        ({"method": "draft_model"}, DRAFT_015, DRAFT_MODEL_FIX),  # 0.15: DraftModelProposer's own refusal
    ],
)
def test_draft_model_on_a_multimodal_target_fails(tmp_path, tree, spec, draft_model_file, fix):
    (tree[0] / DRAFT_MODEL).write_text(draft_model_file)
    drafter = {**DRAFTER, "pard_token": 0}
    found = spec_findings(tmp_path, tree, spec, target=KIMI_K25, drafter=drafter)
    assert [f["result"] for f in found] == ["fail"], found
    assert "on the multimodal target KimiK25ForConditionalGeneration" in found[0]["message"], found
    assert found[0]["fix"].startswith(fix), found  # parallel drafting under eagle3: not "use eagle3"
    assert spec_findings(tmp_path / "text", tree, spec, drafter=drafter) == []  # DeepSeek-V3: text only


def test_a_target_made_text_only_cannot_be_judged_and_one_token_is_not_refused(tmp_path, tree):
    found = spec_findings(
        tmp_path, tree, {"method": "draft_model"}, "--limit-mm-per-prompt", '{"image": 0}', target=KIMI_K25
    )
    assert [f["result"] for f in found] == ["cannot judge"], found
    for tokens in (1, "1", " 1", 1.0):  # pydantic's lax int: vLLM reads each as 1
        one = {"method": "eagle3", "parallel_drafting": True, "num_speculative_tokens": tokens}
        drafter = {**DRAFTER, "pard_token": 0}
        assert spec_findings(tmp_path / f"one{tokens!r}", tree, one, target=KIMI_K25, drafter=drafter) == [], tokens


@pytest.mark.parametrize("given", ["1", " 1 ", 1.0, "1.00", True])
def test_a_draft_tp_pydantic_reads_as_1_is_refused_as_1(tmp_path, tree, given):
    """vLLM's field is an int read in pydantic's lax mode: "1" and 1.0 are 1, refused under -tp 8."""
    [found] = spec_findings(tmp_path, tree, {"method": "draft_model", "draft_tensor_parallel_size": given}, "-tp", "8")
    assert found["result"] == "fail", found
    assert "draft_tensor_parallel_size 1 under -tp 8" in found["message"], found


@pytest.mark.parametrize("asked", [True, "yes", "TRUE", 1, "on"])
@pytest.mark.parametrize("base", [False, True])  # 0.16's eagle.py, or 0.22's llm_base_proposer.py
def test_an_unpadded_drafter_batch_with_extra_slots_fails(tmp_path, tree, asked, base):
    if base:
        proposer = tree[0] / "vllm/v1/spec_decode/llm_base_proposer.py"
        proposer.write_text(BASE)
        (tree[0] / EAGLE).write_text(EAGLE_PATCHED)
    spec = {"method": "draft_model", "disable_padded_drafter_batch": asked}
    [found] = spec_findings(tmp_path, tree, spec)
    assert found["result"] == "fail", found
    assert "disable_padded_drafter_batch with method draft_model" in found["message"], found
    assert found["fix"] == 'drop "disable_padded_drafter_batch" from --speculative-config', found
    parallel = {"method": "eagle3", "parallel_drafting": True, "disable_padded_drafter_batch": asked}
    [found] = spec_findings(tmp_path / "parallel", tree, parallel, drafter={**DRAFTER, "pard_token": 0})
    assert "disable_padded_drafter_batch with parallel_drafting" in found["message"], found


@pytest.mark.parametrize(
    "spec",
    [
        {"method": "draft_model", "disable_padded_drafter_batch": False},
        {"method": "draft_model", "disable_padded_drafter_batch": " true"},  # pydantic refuses it: not True
        {"method": "eagle3", "disable_padded_drafter_batch": True},  # no extra slots: eagle3 takes it
        {"method": "eagle3", "parallel_drafting": True, "num_speculative_tokens": 1, "disable_padded_drafter_batch": 1},
    ],
)
def test_a_padded_batch_or_a_proposer_without_extra_slots_passes(tmp_path, tree, spec):
    assert spec_findings(tmp_path, tree, spec, drafter={**DRAFTER, "pard_token": 0}) == []


WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
# get_quant_config's read of hf_overrides as 0.12-0.17 write it (the draft config's is a function), and as
# 0.22 on guard it
UNGUARDED = "def get_quant_config(model_config, load_config):\n    return model_config.hf_overrides.get('f', None)\n"
GUARDED = (
    "def get_quant_config(model_config, load_config):\n    hf_overrides = model_config.hf_overrides\n"
    "    if not isinstance(hf_overrides, dict):\n        raise ValueError('x')\n    return hf_overrides.get('f')\n"
)


@pytest.mark.parametrize(
    ("utils", "change", "fails"),
    [
        (UNGUARDED, {}, True),
        (GUARDED, {}, False),
        (UNGUARDED, {"quantization_config": {"quant_method": "fp8"}}, False),  # its own: vLLM reads that
    ],
)
def test_draft_model_given_a_quantization_its_config_lacks_fails(tmp_path, tree, utils, change, fails):
    """DraftModelProposer builds the drafter's VllmConfig with the speculative "quantization"
    (create_vllm_config_for_draft_model): 0.12-0.17's get_quant_config calls .get on the draft
    config's hf_overrides, a function (review42a R5, checked on vLLM 0.16.0)."""
    (tree[0] / WEIGHT_UTILS).parent.mkdir(parents=True, exist_ok=True)
    (tree[0] / WEIGHT_UTILS).write_text(utils)
    found = spec_findings(
        tmp_path, tree, {"method": "draft_model", "quantization": "fp8"}, drafter={**DRAFTER, **change}
    )
    said = [f for f in found if "hf_overrides" in f["message"]]
    assert bool(said) is fails, found
    if fails:
        assert said[0]["result"] == "fail" and "after the target's load" in said[0]["message"], said
        assert said[0]["fix"].startswith('drop "quantization" from --speculative-config'), said
