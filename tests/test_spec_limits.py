"""SpeculativeConfig's start-up refusals that the drafter's config and the launch's environment decide
(patchkit/launch/spec_limits.py, review42a R7): a "max_model_len" above the drafter's derived length or
the target's (_maybe_override_draft_max_model_len), and method "suffix" where the launch's Python finds
no arctic_inference (_validate_suffix_decoding). vLLM 0.16.0 raises both in create_engine_config."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_judged
from launch_fixtures import DEEPSEEK_V3, DRAFTER, SPEC, findings, write_eagle3_setup, write_model

from patchkit.launch.derived_length import RopeRule, derived_max_len

# the lines of speculative.py each rule reads the tree's refusal from, as 0.12-0.34 write them
LENGTH_RULE = '\nraise ValueError(f"{speculative_max_model_len=} cannot be larger than {draft_max_model_len=}")\n'
SUFFIX_RULE = "\ndef _validate_suffix_decoding(self):\n    if not has_arctic_inference():\n        raise ImportError\n"


def _speculative(
    tmp_path, spec: dict, *, drafter_len: int, target_len: int, rules: str = "", module=False, fields: str = "",
    tree_files: dict[str, str] | None = None, target: dict | None = None, launch: tuple[str, ...] = (),
):  # fmt: skip
    tree, library = write_eagle3_setup(tmp_path)
    for name, text in (tree_files or {}).items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    stock = (tree / SPEC).read_text(encoding="utf-8")
    field = "    quantization: str | None = None\n"
    (tree / SPEC).write_text(stock.replace(field, f"{field}    max_model_len: int | None = None\n{fields}") + rules)
    if module:
        (tree / "arctic_inference").mkdir()
        (tree / "arctic_inference" / "__init__.py").write_text("")
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "max_position_embeddings": target_len, **(target or {})})
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "max_position_embeddings": drafter_len})
    spec = {**spec, "model": str(drafter)} if spec.get("method") != "suffix" else spec
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model), "--speculative-config", json.dumps(spec), *launch,
    )  # fmt: skip
    return findings(done).get("speculative-config")


@pytest.mark.parametrize(
    ("given", "drafter_len", "target_len", "says"),
    [
        (100000, 4096, 163840, "its max_model_len 100000 is above the drafter's 4096"),
        (100000, 200000, 8192, "its max_model_len 100000 is above the target's 8192"),
        (4096, 4096, 163840, None),
    ],
)
def test_a_speculative_max_model_len_above_the_drafters_or_targets_fails(
    tmp_path, given, drafter_len, target_len, says
):
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "max_model_len": given}
    found = _speculative(tmp_path, spec, drafter_len=drafter_len, target_len=target_len, rules=LENGTH_RULE)
    if says is None:
        assert found is None or found["ok"], found
        return
    assert found is not None and not found["ok"] and says in found["message"], found
    assert 'lower "max_model_len" in --speculative-config' in found["fix"], found


LONGROPE = {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}
# a 0.12-0.30 tree under transformers 4: dict overrides set after patch_rope_parameters aliased rope_scaling
SPLIT_TREE = {
    "vllm/config/model.py": (
        "def _get_and_verify_max_len():\n"
        '    rope_parameters = getattr(hf_config, "rope_parameters", None)\n'
        '    if rope_type not in ("su", "longrope", "llama3"):\n'
        '        if rope_type == "yarn":\n            derived_max_model_len = rp["original_max_position_embeddings"]\n'
        "def __post_init__():\n    dict_overrides[key] = value\n    self._apply_dict_overrides(hf_config, dict_overrides)\n"
    ),
    "vllm/transformers_utils/config.py": "config.rope_parameters = rope_scaling\n",
    "transformers-4.57.6.dist-info/METADATA": "Version: 4.57.6\n",
}


@pytest.mark.parametrize("overrides", [{"factor": 2.0}, {"factor": 8.0}])
def test_the_targets_length_a_speculative_max_model_len_is_held_to_takes_hf_overrides_as_the_tree_does(
    tmp_path, overrides
):
    """review44a T1: an overridden rope_scaling never moves the target's derived length on 0.12+ (here
    16384, yarn factor 4 over 4096), so neither halves nor doubles what the drafter's max_model_len may be."""
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "max_model_len": 16384}
    yarn = {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}}
    found = _speculative(
        tmp_path, spec, drafter_len=163840, target_len=4096, rules=LENGTH_RULE, tree_files=SPLIT_TREE, target=yarn,
        launch=("--hf-overrides", json.dumps({"rope_scaling": overrides})),
    )  # fmt: skip
    assert found is None or found["ok"], found
    spec["max_model_len"] = 16385
    found = _speculative(
        tmp_path / "over", spec, drafter_len=163840, target_len=4096, rules=LENGTH_RULE, tree_files=SPLIT_TREE,
        target=yarn, launch=("--hf-overrides", json.dumps({"rope_scaling": overrides})),
    )  # fmt: skip
    assert found is not None and "above the target's 16384" in found["message"], found


@pytest.mark.parametrize("given", ["100000", 100000.0, " 100000 "])
def test_a_speculative_max_model_len_written_as_text_or_a_whole_float_is_read_as_vllm_reads_it(tmp_path, given):
    """review43a S1: pydantic's lax int reads "100000" and 100000.0 as 100000, and vLLM refuses it at start."""
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "max_model_len": given}
    found = _speculative(tmp_path, spec, drafter_len=4096, target_len=163840, rules=LENGTH_RULE)
    assert found is not None and not found["ok"], found
    assert "its max_model_len 100000 is above the drafter's 4096" in found["message"], found


def test_a_tree_without_the_length_rule_is_not_held_to_it(tmp_path):
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "max_model_len": 100000}
    found = _speculative(tmp_path, spec, drafter_len=4096, target_len=163840)
    assert found is None or found["ok"], found


@pytest.mark.parametrize("module", [False, True])
def test_suffix_without_arctic_inference_fails(tmp_path, module):
    spec = {"method": "suffix", "num_speculative_tokens": 3}
    found = _speculative(tmp_path, spec, drafter_len=4096, target_len=4096, rules=SUFFIX_RULE, module=module)
    if module:
        assert found is None or found["ok"], found
        return
    assert found is not None and not found["ok"] and "arctic_inference" in found["message"], found
    assert "install arctic-inference" in found["fix"], found


@pytest.mark.parametrize(
    "config",
    [
        {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": float("inf")}},
        {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": float("nan")}},
        {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 1e308}},
        {"max_position_embeddings": 10**310, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
        {"max_position_embeddings": 10**4299, "rope_scaling": {"rope_type": "dynamic", "factor": 10}},
        {"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 10**4299}},
        {"max_position_embeddings": 10**4299},
    ],
)
def test_a_length_or_factor_past_a_float_is_not_judged_never_a_crash(config):
    """review44a T6: int(inf) and a 310-digit length times a float raised (exit 70 from preflight and run);
    review45a A5: a 4,300-digit length, then formatted in a finding, too."""
    rule = RopeRule(("su", "longrope", "llama3"), True)
    assert derived_max_len(config, rule) is None and derived_max_len(config, rule, defaulted=True) is None


def test_longrope_s_default_length_past_a_float_is_not_judged():
    """review45a A5: longrope's default (no --max-model-len) is its original_max_position_embeddings."""
    config = {"max_position_embeddings": 4096, "original_max_position_embeddings": 10**4299, "rope_scaling": LONGROPE}
    rule = RopeRule(("su", "longrope", "llama3"), True)
    assert derived_max_len(config, rule) == 4096 and derived_max_len(config, rule, defaulted=True) is None


BOOL_FIELDS = "    parallel_drafting: bool = False\n    enforce_eager: bool | None = None\n"


@pytest.mark.parametrize(
    ("value", "refused"), [(" true ", True), ("maybe", True), (2, True), ("yes", False), (1, False)]
)
def test_a_field_declared_a_bool_refuses_what_pydantic_reads_as_no_bool(tmp_path, value, refused):
    """review44a T5: a bool field's value was never read: " true " and "maybe" passed (and `run` launched);
    vLLM's SpeculativeConfig refuses them at start ("Input should be a valid boolean")."""
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "enforce_eager": value}
    found = _speculative(tmp_path, spec, drafter_len=4096, target_len=4096, fields=BOOL_FIELDS)
    if not refused:
        assert found is None or found["ok"], found
        return
    assert found is not None and not found["ok"] and f"enforce_eager {value!r} is no boolean" in found["message"]
    assert 'give "enforce_eager" true or false' in found["fix"], found
