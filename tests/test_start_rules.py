"""Start-up refusals of vLLM with a static rule of their own (review43a S10), and the `env -C DIR`
refusal's hint (S9). vLLM 0.16.0's own answers: tests/vllm_import/test_target_length_real.py."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path

import pytest
from helpers import lay_out_release, run_cli_judged, run_cli_read_only
from launch_fixtures import DEEPSEEK_V3, DRAFTER, KIMI_K25, SPEC, write_eagle3_setup, write_model

from patchkit.launch.command import parse
from patchkit.launch.engine import LaunchContext
from patchkit.launch.findings import Finding
from patchkit.launch.models import ModelConfig, resolve_model, with_overrides
from patchkit.launch.quant_match import decided_by_vllm, quantization_findings
from patchkit.launch.validation import CHECK as VALIDATION
from patchkit.launch.validation import CPU

# the lines of model.py (_get_and_verify_max_len) and envs.py the rule is read from, as 0.11-0.34 write them
MODEL_RULE = """
def _get_and_verify_max_len(max_model_len, derived_max_model_len):
    for rp in rope_parameters.values():
        rope_type = rp["rope_type"]
        if rope_type not in ("su", "longrope", "llama3"):
            scaling_factor = rp.get("factor", scaling_factor)
            if rope_type == "yarn":
                derived_max_model_len = rp["original_max_position_embeddings"]
    if max_model_len is None or max_model_len == -1:
        pass
    elif max_model_len > derived_max_model_len:
        if envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN:
            pass
"""
ENVS = """
environment_variables = {
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": lambda: (
        os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower()
        in ("1", "true")
    ),
}
"""


def _static(tree, library, *words: str):
    """preflight --no-import --format json of the launch `words` against the tree and library."""
    return run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *words
    )


def _command_findings(
    tmp_path, config: dict, *launch: str, tree_files: dict[str, str] | None = None, files: dict | None = None
) -> list[dict]:
    tree, library = write_eagle3_setup(tmp_path)
    (tree / "vllm" / "config" / "model.py").write_text(MODEL_RULE)
    (tree / "vllm" / "envs.py").write_text(ENVS)
    for name, text in (tree_files or {}).items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    model = write_model(tmp_path / "target", config)
    for name, value in (files or {}).items():
        (model / name).write_text(value if isinstance(value, str) else json.dumps(value))
    words = [str(model) if word == "MODEL" else word for word in launch]
    done = _static(tree, library, *words)
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]


LONG = {**DEEPSEEK_V3, "max_position_embeddings": 4096}


@pytest.mark.parametrize(
    ("config", "prefix", "length", "says"),
    [
        (
            LONG,
            [],
            "8192",
            "vLLM refuses --max-model-len 8192 at start: it is above the target's derived max_model_len 4096",
        ),
        (LONG, [], "4096", None),
        (LONG, ["env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN= True "], "8192", None),
        (
            LONG,
            ["env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=yes"],
            "8192",
            "is above the target's derived max_model_len 4096",
        ),
        ({**LONG, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, [], "8192", None),
        ({**LONG, "model_max_length": 16384}, [], "16385", "derived max_model_len 16384"),
        (DEEPSEEK_V3, [], "8192", "cannot judge: whether vLLM takes --max-model-len 8192"),
    ],
)
def test_a_max_model_len_above_the_targets_derived_length_fails_unless_the_launch_allows_it(
    tmp_path, config, prefix, length, says
):
    """review43a S10: vLLM's ModelConfig refuses it at start unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is 1 or true."""
    found = _command_findings(tmp_path, config, *prefix, "vllm", "serve", "MODEL", "--max-model-len", length)
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and says in found[0]["message"], found
    if not says.startswith("cannot judge"):
        assert not found[0]["ok"] and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in found[0]["fix"], found


# 0.30+: yarn (and its DeepSeek kinds) leave max_position_embeddings scaled already
RULE_030 = MODEL_RULE.replace(
    """not in ("su", "longrope", "llama3"):""", """not in ("su", "longrope", "llama3", "yarn", "deepseek_yarn"):"""
).replace(
    """            if rope_type == "yarn":\n                derived_max_model_len = rp["original_max_position_embeddings"]\n""",
    "",
)
NO_ROPE_RULE = MODEL_RULE.replace("rope_type not in", "rope_kind in")
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}


@pytest.mark.parametrize(
    ("config", "rule", "length", "says"),
    [
        ({**LONG, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}, MODEL_RULE, "8193", "derived max_model_len 8192"),
        ({**LONG, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}, RULE_030, "4097", "derived max_model_len 4096"),
        ({**LONG, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}, RULE_030, "4096", None),
        ({**LONG, "rope_scaling": {"type": "linear", "factor": 2.0}}, NO_ROPE_RULE, "8192", "cannot judge: whether"),
        ({**LONG, "model_type": "gemma3_text", "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, MODEL_RULE, "4097", "derived max_model_len 4096"),
        ({**LONG, "rope_scaling": LONGROPE, "original_max_position_embeddings": 1024}, MODEL_RULE, "4097", "derived max_model_len 4096"),
        ({**LONG, "rope_scaling": {**LONGROPE, "type": "su"}}, MODEL_RULE, "4096", None),
    ],
)  # fmt: skip
def test_the_derived_length_scales_by_rope_as_the_tree_reads_it(tmp_path, config, rule, length, says):
    """startrules33's left: yarn as the tree reads it (0.11-0.26 from its original length times the
    factor, 0.30+ max_position_embeddings as it is), gemma3 never scaled, longrope unscaled."""
    found = _command_findings(
        tmp_path, config, "vllm", "serve", "MODEL", "--max-model-len", length, tree_files={"vllm/config/model.py": rule}
    )
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and says in found[0]["message"], found
    assert found[0]["ok"] is says.startswith("cannot judge"), found


@pytest.mark.parametrize(
    ("config", "files"),
    [
        ({**LONG, "max_position_embeddings": 10**4299, "rope_scaling": {"rope_type": "dynamic", "factor": 10}}, {}),
        ({**LONG, "rope_scaling": {"rope_type": "dynamic", "factor": 10**4299}}, {}),
        (LONG, {"sentence_bert_config.json": {"max_seq_length": 10**4299, "do_lower_case": False}}),
    ],
)
def test_a_length_of_4300_digits_is_not_judged_never_a_crash(tmp_path, config, files):
    """review45a A5: the derived length was formatted into the fix before it was compared: past Python's
    int-to-text limit that raised (exit 70)."""
    tree = {"vllm/config/model.py": ENCODER_RULE, SENTENCE: TAKER}
    found = _command_findings(
        tmp_path, config, "vllm", "serve", "MODEL", "--max-model-len", "8192", tree_files=tree, files=files
    )
    assert len(found) == 1 and found[0]["message"].startswith("cannot judge: whether vLLM takes"), found


BERT = {"architectures": ["BertModel"], "model_type": "bert", "max_position_embeddings": 512}
POOLING_RULE = (
    MODEL_RULE
    + """
def get_and_verify_max_len(self, max_model_len):
    if self.runner_type == "pooling" and getattr(self.hf_config, "position_embedding_type", "") == "absolute":
        tokenizer_config = try_get_tokenizer_config(self.tokenizer)
"""
)


@pytest.mark.parametrize(
    ("config", "launch", "says"),
    [
        (BERT, ["--runner", "pooling", "--max-model-len", "256"], "derived max_model_len 128"),
        (BERT, ["--runner", "pooling", "--max-model-len", "128"], None),
        (BERT, ["--max-model-len", "256"], "cannot judge: whether vLLM takes --max-model-len 256: whether vLLM runs it as a pooling"),
        ({**BERT, "architectures": ["BertForSequenceClassification"]}, ["--max-model-len", "256"], "derived max_model_len 128"),
        ({**BERT, "position_embedding_type": "relative_key"}, ["--runner", "pooling", "--max-model-len", "256"], None),
        ({**BERT, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}, ["--max-model-len", "256"], None),
    ],
)  # fmt: skip
def test_a_pooling_models_tokenizer_length_lowers_the_derived_length(tmp_path, config, launch, says):
    """review45a A3: get_and_verify_max_len takes the least of the derived length and the tokenizer's
    model_max_length for a pooling runner over absolute position embeddings (BertConfig's default)."""
    files = {"tokenizer_config.json": {"model_max_length": 128}}
    tree = {"vllm/config/model.py": POOLING_RULE}
    found = _command_findings(tmp_path, config, "vllm", "serve", "MODEL", *launch, tree_files=tree, files=files)
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and says in found[0]["message"], found
    assert found[0]["ok"] is says.startswith("cannot judge"), found


def test_a_tree_without_the_length_rule_is_not_held_to_it(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    model = write_model(tmp_path / "target", LONG)
    done = run_cli_judged(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model), "--max-model-len", "8192",
    )  # fmt: skip
    assert not [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"], done.stdout


# how the tree applies --hf-overrides and reads RoPE for the length: 0.12-0.30 (transformers 4) and 0.11
SPLIT_RULE = (
    MODEL_RULE
    + """
def __post_init__(self):
    for key, value in self.hf_overrides.items():
        if isinstance(value, dict):
            dict_overrides[key] = value
    self._apply_dict_overrides(hf_config, dict_overrides)
    rope_parameters = getattr(hf_config, "rope_parameters", None)
"""
)
ALIASING = """
def get_hf_text_config(config):
    text_config = config.get_text_config()
    if text_config is not config and not hasattr(text_config, "num_attention_heads"):
        raise ValueError

def patch_rope_parameters(config):
    if Version(version("transformers")) < Version("5.0.0"):
        if (rope_scaling := getattr(config, "rope_scaling", None)) is not None:
            config.rope_parameters = rope_scaling
"""
UPDATE_RULE = MODEL_RULE + '    rope_scaling = getattr(hf_config, "rope_scaling", None)\n'
UPDATING = "def get_config():\n    config.update(hf_overrides_kw)\n    patch_rope_scaling(config)\n"
CONFIGS = "vllm/transformers_utils/config.py"
TRANSFORMERS = "transformers-{}.dist-info/METADATA"
YARN = {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}}
TL_YARN = {**LONG, **YARN}  # derived 16384
V4 = {"vllm/config/model.py": SPLIT_RULE, CONFIGS: ALIASING, TRANSFORMERS.format("4.57.6"): "Version: 4.57.6\n"}
V11 = {"vllm/config/model.py": UPDATE_RULE, CONFIGS: UPDATING}
COMPOSITE = {**LONG, "text_config": {**LONG, "rope_scaling": {"type": "linear", "factor": 2.0}}}  # derived 8192


@pytest.mark.parametrize(
    ("config", "tree", "length", "overrides", "says"),
    [
        (TL_YARN, V4, "16384", {"rope_scaling": {"factor": 2.0}}, None),
        (TL_YARN, V4, "16385", {"rope_scaling": {"factor": 2.0}}, "derived max_model_len 16384"),
        (TL_YARN, V4, "12000", {"rope_scaling": {**YARN["rope_scaling"], "factor": 2.0}}, None),
        (LONG, V4, "16384", YARN, "derived max_model_len 4096"),
        (LONG, V4, "16384", {"rope_parameters": {**YARN["rope_scaling"], "rope_type": "yarn"}}, None),
        (LONG, V4, "8192", {"rope_parameters": {"factor": 4.0}}, "cannot judge: whether vLLM takes"),
        (LONG, V11, "16384", YARN, None),
        (LONG, V11, "16385", YARN, "derived max_model_len 16384"),
        (LONG, {**V4, TRANSFORMERS.format("4.57.6"): "Version: 5.1.0\n"}, "16384", YARN, "cannot judge: whether"),
        (
            LONG,
            {},
            "16384",
            YARN,
            "cannot judge: whether vLLM takes --max-model-len 16384: --hf-overrides' rope_scaling",
        ),
        ({**LONG, "text_config": {**LONG, **YARN}}, V4, "16384", {"rope_scaling": {"factor": 2.0}}, None),
        (
            {**LONG, "text_config": {**LONG, **YARN}},
            V4,
            "16385",
            {"rope_scaling": {"factor": 2.0}},
            "derived max_model_len 16384",
        ),
        (COMPOSITE, V4, "16384", {"text_config": {"rope_scaling": {"factor": 4.0}}}, None),
        (COMPOSITE, V4, "16385", {"text_config": {"rope_scaling": {"factor": 4.0}}}, "derived max_model_len 16384"),
        (COMPOSITE, V4, "8193", {"text_config": {"rope_scaling": {"type": "yarn"}}}, "derived max_model_len 8192"),
        (COMPOSITE, V4, "8192", {"rope_parameters": {"rope_type": "linear", "factor": 4.0}}, "cannot judge: whether"),
        (COMPOSITE, V11, "8192", {"text_config": {"rope_scaling": {"factor": 4.0}}}, "cannot judge: whether"),
        (LONG, V4, "16384", {"text_config": YARN}, "vLLM refuses the launch at start: --hf-overrides sets text_config"),
        (LONG, V4, "16384", {"max_position_embeddings": 16384}, None),
    ],
)
def test_hf_overrides_reach_the_derived_length_as_the_tree_applies_them(
    tmp_path, config, tree, length, overrides, says
):
    """review44a T1: 0.12+ sets a dict override after patch_rope_parameters aliased the config.json's
    rope_scaling as rope_parameters, which the length reads: an overridden rope_scaling never moves it;
    a text_config's RoPE override is merged into that same dict (_update_nested), and does."""
    launch = ["vllm", "serve", "MODEL", "--max-model-len", length, "--hf-overrides", json.dumps(overrides)]
    found = _command_findings(tmp_path, config, *launch, tree_files=tree)
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and says in found[0]["message"], found
    assert found[0]["ok"] is says.startswith("cannot judge"), found


@pytest.mark.parametrize(
    ("config", "tree", "launch", "says"),
    [
        (LONG, V4, [], "vLLM refuses the launch at start: --hf-overrides sets text_config on a config that has none"),
        (LONG, V4, ["--max-model-len", "8192"], "vLLM refuses the launch at start: --hf-overrides sets text_config"),
        (LONG, V11, ["--max-model-len", "8192"], "cannot judge: whether vLLM takes --max-model-len 8192: --hf-overrides sets"),
        (LONG, V11, [], None),  # the tree's check not read: nothing said without a length
        ({**LONG, "text_config": LONG}, V4, ["--max-model-len", "8192"], None),  # a nested config: updated key by key
    ],
)  # fmt: skip
def test_a_text_config_override_of_a_config_without_one_is_set_as_a_dict_vllm_refuses(
    tmp_path, config, tree, launch, says
):
    """review45a A2: _apply_dict_overrides finds no nested config to update and sets the dict; transformers
    4's get_text_config returns it, and get_hf_text_config refuses it (no num_attention_heads)."""
    overrides = json.dumps({"text_config": {"max_position_embeddings": 8192}})
    found = _command_findings(
        tmp_path, config, "vllm", "serve", "MODEL", *launch, "--hf-overrides", overrides, tree_files=tree
    )
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and says in found[0]["message"], found
    assert found[0]["ok"] is says.startswith("cannot judge"), found


SENTENCE = "vllm/transformers_utils/config.py"
TAKER = """
def get_sentence_transformer_tokenizer_config(model, revision):
    sentence_transformer_config_files = [
        "sentence_bert_config.json",
        "sentence_roberta_config.json",
        "sentence_distilbert_config.json",
    ]
    if all(k in encoder_dict for k in ("max_seq_length", "do_lower_case")):
        return encoder_dict
"""
TAKER_034 = TAKER.replace(
    'all(k in encoder_dict for k in ("max_seq_length", "do_lower_case"))', '"max_seq_length" in encoder_dict'
)
ENCODER_RULE = MODEL_RULE + '    if encoder_config and "max_seq_length" in encoder_config:\n'
BOTH = {"max_seq_length": 512, "do_lower_case": False}
KT = {**LONG, "max_position_embeddings": 16384}


@pytest.mark.parametrize(
    ("taker", "files", "says"),
    [
        (
            TAKER,
            {"sentence_roberta_config.json": BOTH},
            "derived max_model_len 512 (the max_seq_length of its sentence_roberta",
        ),
        (TAKER, {"sentence_bert_config.json": {"max_seq_length": 512}}, None),  # no do_lower_case: none taken
        (
            TAKER,
            {"sentence_bert_config.json": {}, "sentence_distilbert_config.json": BOTH},
            "derived max_model_len 512",
        ),
        (TAKER, {"sentence_bert_config.json": {"max_seq_length": 9}, "sentence_roberta_config.json": BOTH}, None),
        (TAKER_034, {"sentence_bert_config.json": {"max_seq_length": 512}}, "derived max_model_len 512"),
        (TAKER, {"sentence_roberta_config.json": {**BOTH, "max_seq_length": "512"}}, "max_seq_length '512', text"),
        (
            TAKER,
            {"sentence_bert_config.json": "{not json"},
            "vLLM refuses the launch at start: vLLM reads its sentence_bert",
        ),
        ("", {"sentence_bert_config.json": BOTH}, "cannot judge: whether"),
        (TAKER, {"sentence_xlnet_config.json": BOTH}, None),  # not among this tree's names
        (TAKER, {"sentence_roberta_config.json": {**BOTH, "max_seq_length": 4096}}, None),
    ],
)
def test_the_sentence_transformers_file_vllm_takes_replaces_the_derived_length(tmp_path, taker, files, says):
    """review44a T7, L2: the tree's names in its order, the first non-empty one taken, kept where it
    holds the keys the tree asks for; its max_seq_length is then the derived length."""
    tree = {"vllm/config/model.py": ENCODER_RULE, SENTENCE: taker}
    found = _command_findings(
        tmp_path, KT, "vllm", "serve", "MODEL", "--max-model-len", "2048", tree_files=tree, files=files
    )
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and says in found[0]["message"], found
    assert found[0]["ok"] is says.startswith("cannot judge"), found
    name = next(iter(files)) if says.startswith("cannot judge") else None
    assert name is None or name in found[0]["fix"] or name in found[0]["message"], found


@pytest.mark.parametrize(
    ("files", "launch", "says"),
    [
        ({"sentence_bert_config.json": ""}, [], "its sentence_bert_config.json at start, and its json.load raises"),
        ({"sentence_bert_config.json": "\ufeff" + json.dumps(BOTH)}, [], "json.load raises (JSONDecodeError: Unexpected UTF-8 BOM"),
        ({"sentence_bert_config.json": "", "sentence_xlnet_config.json": BOTH}, ["--max-model-len", "-1"], "json.load raises"),
        ({"sentence_bert_config.json": {**BOTH, "max_seq_length": None}}, [], "max_seq_length None is no number"),
        ({"sentence_bert_config.json": {**BOTH, "max_seq_length": "512"}}, [], None),  # int() reads it
        ({"sentence_bert_config.json": {**BOTH, "max_seq_length": "x"}}, [], "int() of its sentence_bert_config.json"),
        ({"sentence_bert_config.json": {"max_seq_length": None}}, [], None),  # no do_lower_case: not taken
        ({"sentence_bert_config.json": BOTH}, [], None),
    ],
)  # fmt: skip
def test_a_sentence_transformers_file_vllm_cannot_read_fails_every_launch(tmp_path, files, launch, says):
    """review45a A1: vLLM's ModelConfig json.loads the file it takes, and int()s its max_seq_length, for every
    launch: an empty or BOM file, or a max_seq_length null, fails it whatever --max-model-len says."""
    tree = {"vllm/config/model.py": ENCODER_RULE, SENTENCE: TAKER}
    found = _command_findings(tmp_path, KT, "vllm", "serve", "MODEL", *launch, tree_files=tree, files=files)
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and not found[0]["ok"] and says in found[0]["message"], found
    assert found[0]["fix"].startswith(f"repair its {next(iter(files))} (JSON in UTF-8 without a BOM"), found


@pytest.mark.parametrize(
    ("files", "whole", "offline", "says"),
    [
        ({"sentence_roberta_config.json": BOTH}, False, False, "derived max_model_len 512"),
        ({}, False, False, "cannot judge: whether vLLM takes --max-model-len 2048: vLLM lists the hub repo org/kt's"),
        ({}, True, False, None),  # fetched whole: the repo holds no such file
        ({}, False, True, None),  # offline: vLLM lists nothing
    ],
)
def test_a_hub_models_sentence_transformers_file_is_read_from_its_snapshot(tmp_path, files, whole, offline, says):
    """review44a T7: vLLM takes a cached file first (try_to_load_from_cache), else lists the hub repo's files."""
    snapshot = write_model(tmp_path / "hub" / "models--org--kt" / "snapshots" / "c0ffee", KT)
    (tmp_path / "hub" / "models--org--kt" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--kt" / "refs" / "main").write_text("c0ffee")
    for name, value in files.items():
        (snapshot / name).write_text(json.dumps(value))
    if not whole:
        (snapshot / "model.safetensors").unlink()
    env = ["env", f"HF_HUB_CACHE={tmp_path / 'hub'}", *(["HF_HUB_OFFLINE=1"] if offline else [])]
    launch = [*env, "vllm", "serve", "org/kt", "--max-model-len", "2048"]
    tree = {"vllm/config/model.py": ENCODER_RULE, SENTENCE: TAKER}
    found = _command_findings(tmp_path, KT, *launch, tree_files=tree)
    if says is None:
        assert not found, found
        return
    assert len(found) == 1 and says in found[0]["message"], found
    assert found[0]["ok"] is says.startswith("cannot judge"), found
    if found[0]["ok"]:  # cannot judge: the fix fetches the snapshot whole, into the cache vLLM reads
        assert f"hf download org/kt --cache-dir {tmp_path / 'hub'}`" in found[0]["fix"], found


def test_a_dict_override_replaces_the_configs_value_whole_and_a_nested_config_is_merged():
    """review44a T1: vLLM sets quantization_config / rope_scaling overrides whole (0.12+ setattr after
    get_config, 0.11 config.update); only a nested config (text_config) is updated key by key."""
    model = ModelConfig("m", Path("m/config.json"), {**KIMI_K25, "quantization_config": {"quant_method": "fp8"}})
    merged = with_overrides(
        model,
        {
            "quantization_config": {"activation_scheme": "static"},
            "text_config": {"hidden_size": 64, "rope_scaling": {"factor": 2.0}},
        },
    )
    assert merged.get("quantization_config") == {"activation_scheme": "static"}
    assert merged.text_config == {**KIMI_K25["text_config"], "hidden_size": 64, "rope_scaling": {"factor": 2.0}}
    assert merged.own == model.config and merged.overrides["text_config"]["hidden_size"] == 64


def test_the_env_chdir_hint_keeps_the_users_options_and_runs_as_written(tmp_path):
    """review43a S9: the hint named `patchkit preflight -- env -C DIR ...`, --no-import and the launch dropped."""
    tree, library = write_eagle3_setup(tmp_path)
    assert tree == tmp_path / "site"
    write_model(tmp_path / "sub" / "target", LONG)
    own = ["--target", "site", "--patches", library.name, "--no-import", "--format", "json"]
    launch = ["env", "-C", "sub", "vllm", "serve", "target"]
    refused = run_cli_read_only("preflight", *own, "--", *launch, cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    hint = json.loads(refused.stdout)["hint"] if refused.stdout.strip() else refused.stderr
    directory, command = hint.split("cd ", 1)[1].split(" && ", 1)
    words = shlex.split(command.strip().rstrip("`"))
    assert words[:2] == ["patchkit", "preflight"] and "--no-import" in words, words
    assert words[-7:] == ["--", "env", "-C", str(tmp_path / "sub"), "vllm", "serve", "target"], words
    done = run_cli_read_only(*words[1:], cwd=shlex.split(directory)[0])
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}  # --format json kept
    assert done.returncode == 1 and found["models"]["ok"], done.stdout  # read from there: the tree is not applied
    assert "vllm-validation" not in found, done.stdout  # --no-import kept: vLLM not asked


# the tree's _verify_quantization raise, and an override module as 0.16.0's quantization/__init__.py imports it
MISMATCH_RULE = (
    'raise ValueError("Quantization method specified in the model config does not match the quantization")\n'
    'quant_method = quant_cfg.get("quant_method", "").lower()\n'
)
QUANT_INIT = "def get_quantization_config(name):\n    from .gptq_marlin import GPTQMarlinConfig\n"
GPTQ_MARLIN = """
class GPTQMarlinConfig:
    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant):
        if cls.is_gptq_marlin_compatible(hf_quant_cfg) and user_quant in (None, "gptq_marlin"):
            return "gptq_marlin"
        return None

    @classmethod
    def is_gptq_marlin_compatible(cls, quant_config):
        quant_method = quant_config.get("quant_method", "").lower()
        return quant_method == "gptq"
"""
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
GPTQ = {"quant_method": "gptq", "bits": 4}
QUANT_DRAFTER = {**DRAFTER, "quantization_config": FP8}
# get_quant_config's stand-in (patchkit/launch/quant_file.py reads it): fp8 needs no file of its own
WEIGHT_UTILS = """
def get_quant_config(model_config, load_config):
    if model_config.quantization == "fp8":
        return quant_cls()
    raise ValueError(f"Cannot find the config file for {model_config.quantization}")
    raise ValueError(f"Found multiple config files for {model_config.quantization}")
"""


def _quant_tree(tmp_path, modules: dict[str, str] | None = None):
    tree, library = write_eagle3_setup(tmp_path)
    (tree / "vllm" / "config" / "model.py").write_text(MISMATCH_RULE)
    (tree / "vllm" / "model_executor" / "model_loader").mkdir(parents=True, exist_ok=True)
    (tree / "vllm" / "model_executor" / "model_loader" / "weight_utils.py").write_text(WEIGHT_UTILS)
    quantization = tree / "vllm" / "model_executor" / "layers" / "quantization"
    quantization.mkdir(parents=True)
    modules = modules or {"__init__.py": QUANT_INIT}
    for name, text in {"gptq_marlin.py": GPTQ_MARLIN, **modules}.items():
        (quantization / name).parent.mkdir(parents=True, exist_ok=True)
        (quantization / name).write_text(text)
    return tree, library


def _quantized(
    tmp_path, config: dict, *launch: str, drafter: dict = QUANT_DRAFTER, modules: dict[str, str] | None = None
) -> list[dict]:
    tree, library = _quant_tree(tmp_path, modules)
    stock = (tree / SPEC).read_text(encoding="utf-8")
    field = "    quantization: str | None = None\n"
    assert field in stock
    (tree / SPEC).write_text(stock.replace(field, "    quantization: me_quant.QuantizationMethods | None = None\n"))
    model = write_model(tmp_path / "target", config)
    draft = write_model(tmp_path / "drafter", drafter)
    words = [str(model) if w == "MODEL" else w.replace("DRAFTER", str(draft)) for w in launch]
    done = _static(tree, library, *words)
    return json.loads(done.stdout)["findings"]


LOWERING = (
    "    def validate_quantization_before(cls, value: Any) -> Any:\n"
    "        if isinstance(value, str):\n"
    "            return value.lower()\n"
)


@pytest.mark.parametrize(
    ("lowers", "given", "says"),
    [(True, "FP8", None), (True, "AWQ", "--quantization awq at start"), (False, "FP8", "--quantization FP8 at start")],
)
def test_a_quantization_is_held_to_the_checkpoint_as_the_trees_model_config_takes_it(tmp_path, lowers, given, says):
    """review45a A4: ModelConfig's validator lower-cases a --quantization (0.11-0.34): -q FP8 is the fp8
    checkpoint's own method; a tree without that validator takes it as written."""
    tree, library = _quant_tree(tmp_path)
    (tree / "vllm" / "config" / "model.py").write_text(MISMATCH_RULE + (LOWERING if lowers else ""))
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "quantization_config": FP8})
    done = _static(tree, library, "vllm", "serve", str(model), "-q", given)
    command = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]
    if says is None:
        assert not command, command
    else:
        assert len(command) == 1 and not command[0]["ok"] and says in command[0]["message"], command


def _spec(**fields: object) -> str:
    return json.dumps({"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, **fields})


@pytest.mark.parametrize(
    ("config", "options", "says"),
    [
        ({**DEEPSEEK_V3, "quantization_config": FP8}, ["-q", "awq"], "vLLM refuses --quantization awq at start"),
        ({**DEEPSEEK_V3, "quantization_config": FP8}, ["-q", "fp8"], None),
        (DEEPSEEK_V3, ["-q", "fp8"], None),  # an unquantized checkpoint: quantized at load
        ({**DEEPSEEK_V3, "quantization_config": GPTQ}, ["-q", "gptq_marlin"], "cannot judge: whether vLLM takes"),
        (
            DEEPSEEK_V3,
            ["--speculative-config", _spec(quantization="awq")],
            'vLLM refuses --speculative-config\'s "quantization" awq',
        ),
        (DEEPSEEK_V3, ["--speculative-config", _spec(quantization="fp8")], None),
        (DEEPSEEK_V3, ["--speculative-config", _spec(quantization="")], "is not one of vLLM's quantization methods"),
        # review44a T2: mtp without "model": the draft ModelConfig reads the target's own checkpoint
        (
            {**DEEPSEEK_V3, "quantization_config": FP8},
            ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1, "quantization": "awq"})],
            "vLLM refuses --speculative-config's \"quantization\" awq at start: the drafter (the target's own checkpoint)",
        ),
        (
            {**DEEPSEEK_V3, "quantization_config": FP8},
            ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1, "quantization": "fp8"})],
            None,
        ),
        # review44a L1: no quant_method (vLLM: None, which no --quantization matches); a null quantization_config
        # (vLLM 0.16.0's transformers raises reading it, whatever compression_config holds): not judged
        (
            {**DEEPSEEK_V3, "quantization_config": {"bits": 4}},
            ["-q", "fp8"],
            "a quantization_config without quant_method",
        ),
        ({**DEEPSEEK_V3, "quantization_config": {"quant_method": ""}}, ["-q", "fp8"], "without quant_method"),
        (
            {**DEEPSEEK_V3, "quantization_config": None, "compression_config": {"quant_method": "compressed-tensors"}},
            ["-q", "fp8"],
            'cannot judge: whether vLLM reads the target\'s config.json: it has "quantization_config": null',
        ),
        ({**DEEPSEEK_V3, "quantization_config": None}, [], "cannot judge: whether vLLM reads the target's config.json"),
        # a quant_method that is no text: vLLM's own .lower() on it raises, --quantization or not
        (
            {**DEEPSEEK_V3, "quantization_config": {"quant_method": None}},
            ["-q", "fp8"],
            "vLLM fails at start reading the target's config.json: its quantization has a quant_method that is no text",
        ),
        ({**DEEPSEEK_V3, "compression_config": {"quant_method": 4}}, [], "a quant_method that is no text (4)"),
        # a producer other than ModelOpt leaves quant_method as written; ModelOpt's is set from its quant_algo
        (
            {**DEEPSEEK_V3, "quantization_config": {"quant_method": "fp8", "producer": {"name": "llmcompressor"}}},
            ["-q", "awq"],
            "vLLM refuses --quantization awq at start",
        ),
        (
            {
                **DEEPSEEK_V3,
                "quantization_config": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}},
            },
            ["-q", "awq"],
            None,
        ),
        # the override tests the user's method, but only for a checkpoint it converts (gptq): no other is taken
        ({**DEEPSEEK_V3, "quantization_config": FP8}, ["-q", "gptq_marlin"], "vLLM refuses --quantization gptq_marlin"),
    ],
)
def test_a_quantization_not_the_checkpoints_own_fails_at_start(tmp_path, config, options, says):
    """review43a S6: ModelConfig._verify_quantization refuses it unless an override of the tree takes the checkpoint."""
    found = _quantized(tmp_path, config, "vllm", "serve", "MODEL", *options)
    command = [f for f in found if f["check"] == "command"]
    assert not any("AttributeError" in f["message"] for f in found), found
    if says is None:
        assert not command, command
        return
    assert len(command) == 1 and says in command[0]["message"], found
    assert command[0]["ok"] is says.startswith("cannot judge"), command


# override shapes of 0.22-0.34 (review44a T8): one keyed on the user's method alone (humming.py, 0.22's gguf.py),
# a method tested by a call (modelopt.py's .lower().startswith("modelopt")), an override in a package (inc/)
HUMMING = """
class HummingConfig:
    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None):
        if user_quant == "humming" and hf_config is not None:
            quant_method = hf_quant_cfg.get("quant_method", None)
            if hf_config.model_type == "gpt_oss" and quant_method == "mxfp4":
                raise ValueError("use --moe-backend humming")
        return "humming" if user_quant == "humming" else None
"""
MODELOPT = """
class ModelOptFp8Config:
    @staticmethod
    def _extract_modelopt_quant_algo(hf_quant_cfg):
        if not hf_quant_cfg.get("quant_method", "").lower().startswith("modelopt"):
            return None
        return str(hf_quant_cfg.get("quant_algo", "")).upper()

    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None):
        algo = cls._extract_modelopt_quant_algo(hf_quant_cfg)
        if algo is not None and algo == "FP8":
            return "modelopt"
        return None
"""
INC = """
class INCConfig:
    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None):
        if hf_quant_cfg.get("quant_method", None) == "auto-round":
            return cls.get_name()
        return None
"""
PETIT = """
class PetitNvFp4Config:
    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant):
        if not current_platform.is_rocm():
            return None
        qc = hf_quant_cfg.get("quantization", hf_quant_cfg)
        algo = (qc.get("quant_algo") or qc.get("quant_method") or "").upper()
        if algo in ("NVFP4", "MODELOPT_FP4", "MODELOPT"):
            return cls.get_name()
        return None
"""
SHAPES = {
    "__init__.py": QUANT_INIT + "    from .humming import HummingConfig\n    from .modelopt import ModelOptFp8Config\n"
    "    from .inc import INCConfig\n    from .petit import PetitNvFp4Config\n",
    "petit.py": PETIT,
    "humming.py": HUMMING,
    "modelopt.py": MODELOPT,
    "inc/__init__.py": "from .inc import INCConfig\n",
    "inc/inc.py": INC,
}
CT = {"quant_method": "compressed-tensors", "format": "float-quantized"}


@pytest.mark.parametrize(
    ("config", "options", "says"),
    [
        ({**DEEPSEEK_V3, "quantization_config": CT}, ["-q", "humming"], None),
        (
            {**DEEPSEEK_V3, "quantization_config": CT},
            [
                "--speculative-config",
                json.dumps({"method": "mtp", "num_speculative_tokens": 1, "quantization": "humming"}),
            ],
            None,
        ),
        (
            {**DEEPSEEK_V3, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}},
            ["-q", "fp8"],
            "cannot judge: whether vLLM takes --quantization fp8 for the target's modelopt checkpoint",
        ),
        (
            {**DEEPSEEK_V3, "quantization_config": {"quant_method": "modelopt_fp4", "quant_algo": "NVFP4"}},
            ["-q", "fp8"],
            "cannot judge",
        ),
        ({**DEEPSEEK_V3, "quantization_config": {"quant_method": "auto-round"}}, ["-q", "fp8"], "cannot judge"),
        # petit (0.11-0.18, ROCm): the checkpoint's quant_algo, whatever its method
        ({**DEEPSEEK_V3, "quantization_config": {**CT, "quant_algo": "NVFP4"}}, ["-q", "fp8"], "cannot judge"),
        ({**DEEPSEEK_V3, "quantization_config": CT}, ["-q", "fp8"], "vLLM refuses --quantization fp8 at start"),
        ({**DEEPSEEK_V3, "quantization_config": CT}, ["-q", "modelopt"], "vLLM refuses --quantization modelopt"),
    ],
)
def test_an_override_keyed_on_the_users_method_or_tested_by_a_call_is_read(tmp_path, config, options, says):
    """review44a T8: _verify_quantization takes a checkpoint any override returns a method for."""
    found = _quantized(tmp_path, config, "vllm", "serve", "MODEL", *options, modules=SHAPES)
    command = [f for f in found if f["check"] == "command"]
    if says is None:
        assert not command, command
        return
    assert len(command) == 1 and says in command[0]["message"], found
    assert command[0]["ok"] is says.startswith("cannot judge"), command


def test_where_vllm_is_asked_its_validation_decides_the_quantization_left_unjudged(tmp_path):
    """review44a T11: on the import path the cannot-judge fix named the very command just run. vLLM's own
    validation ran its _verify_quantization: accepted on an accelerator, the finding goes; judged on the
    CPU platform (whose overrides answer otherwise: 0.16.0's takes -q marlin for gptq there), the fix says so."""
    tree, _ = _quant_tree(tmp_path)
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "quantization_config": GPTQ})
    argv = ["vllm", "serve", str(model), "-q", "marlin"]
    asked = LaunchContext(parse(argv, "0.16.0"), resolve_model(str(model), {}), None, tree, None, None)
    asked.python = sys.executable
    [static] = quantization_findings("command", asked)
    assert not static.judged and "patchkit" not in (static.fix or "") and "vllm-validation" in (static.fix or "")
    accepted = Finding(VALIDATION, True, "vLLM's create_engine_config() accepts the command")
    assert decided_by_vllm([static, accepted], argv) == [accepted]
    on_cpu = Finding(VALIDATION, True, f"{accepted.message} ({CPU})")
    [kept, _] = decided_by_vllm([static, on_cpu], argv)
    assert not kept.judged and "ran on the CPU platform" in (kept.fix or "") and "on the node" in (kept.fix or "")
    refused = Finding(VALIDATION, False, "vLLM refuses the command: ...")
    assert decided_by_vllm([static, refused], argv) == [static, refused]
    not_asked = dataclasses.replace(asked, python=None)
    [unasked] = quantization_findings("command", not_asked)
    assert "`patchkit preflight" in (unasked.fix or ""), unasked  # --no-import: a preflight that asks vLLM judges it


def _keyed(body: str) -> dict[str, str]:
    """A tree whose one more override is keyed on the user's method (`u`) as `body` says."""
    override = "class KeyedConfig:\n    @classmethod\n    def override_quantization_method(cls, hf_quant_cfg, u):\n"
    return {"__init__.py": QUANT_INIT + "    from .keyed import KeyedConfig\n", "keyed.py": override + body}


@pytest.mark.parametrize(
    ("body", "given", "says"),
    [
        (
            '        if u != "x":\n            return None\n        return "x"\n',
            "x",
            None,
        ),  # taken whatever the checkpoint
        (
            '        if u != "x":\n            return None\n        return "x"\n',
            "awq",
            "vLLM refuses --quantization awq",
        ),
        (
            '        if u == "x":\n            return None\n        return "y"\n',
            "awq",
            "cannot judge",
        ),  # all but x: not told
        ("        return cls.get_name() if u is not None else None\n", "awq", None),  # every -q given
        (
            '        if u is None:\n            return "y"\n        return None\n',
            "awq",
            "vLLM refuses --quantization awq",
        ),
        # a hostile tree: tests nested past Python's stack are not followed (cannot judge, never exit 70)
        ("        return " + "'a' if u == 'b' else " * 2000 + "None\n", "awq", "cannot judge"),
    ],
)
def test_an_override_keyed_on_the_users_method_alone_is_read_by_its_tests(tmp_path, body, given, says):
    """review44a T8: which -q values such an override returns a method for, whatever the checkpoint."""
    found = _quantized(
        tmp_path,
        {**DEEPSEEK_V3, "quantization_config": FP8},
        "vllm",
        "serve",
        "MODEL",
        "-q",
        given,
        modules=_keyed(body),
    )
    command = [f for f in found if f["check"] == "command"]
    if says is None:
        assert not command, command
        return
    assert len(command) == 1 and says in command[0]["message"], found
    assert command[0]["ok"] is says.startswith("cannot judge"), command


QUANT_DIR = "vllm/model_executor/layers/quantization"
OVERRIDES_034 = [
    "vllm/config/model.py",
    *(f"{QUANT_DIR}/{name}.py" for name in ("__init__", "auto_awq", "auto_gptq", "humming", "modelopt", "moe_wna16")),
    *(f"{QUANT_DIR}/{name}.py" for name in ("mxfp4", "inc/__init__", "inc/inc", "base_config")),
    *(
        f"vllm/models/{name}/{file}.py"
        for name in ("deepseek_v4", "deepseek_v41")
        for file in ("__init__", "quant_config")
    ),
]


@pytest.mark.release
@pytest.mark.parametrize(
    ("quantization_config", "given", "result"),
    [
        (CT, "humming", None),  # HummingConfig: `"humming" if user_quant == "humming" else None`, probed first
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8", "cannot judge"),  # ModelOptFp8Config takes it
        ({"quant_method": "auto-round"}, "fp8", "cannot judge"),  # inc/inc.py's INCConfig
        (CT, "fp8", "fail"),  # no override of 0.34.0 takes a compressed-tensors checkpoint for -q fp8
    ],
)
def test_0_34_0s_overrides_are_read_from_its_own_files(tmp_path, quantization_config, given, result):
    """review44a T8 on 0.34.0's stock files (fetched): its override chain as _verify_quantization runs it."""
    site = lay_out_release("0.34.0", OVERRIDES_034, tmp_path / "site")
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "quantization_config": quantization_config})
    command = parse(["vllm", "serve", str(model), "-q", given], "0.34.0")
    found = quantization_findings(
        "command", LaunchContext(command, resolve_model(str(model), {}), None, site, None, None)
    )
    if result is None:
        assert found == [], [f.message for f in found]
        return
    [finding] = found
    assert finding.result == result, finding.message


def test_a_quantization_config_override_replaces_the_checkpoints_whole_before_quantization_is_held_to_it(tmp_path):
    """review44a T1: vLLM 0.16.0 sets --hf-overrides' quantization_config whole (no quant_method left), then
    refuses -q fp8: "Quantization method specified in the model config (None) does not match ... (fp8)"."""
    overrides = json.dumps({"quantization_config": {"activation_scheme": "static"}})
    config = {**DEEPSEEK_V3, "quantization_config": FP8}
    found = _quantized(tmp_path, config, "vllm", "serve", "MODEL", "-q", "fp8", "--hf-overrides", overrides)
    command = [f for f in found if f["check"] == "command"]
    assert len(command) == 1 and not command[0]["ok"], command
    assert "--quantization fp8" in command[0]["message"], command


@pytest.mark.parametrize(
    "spec",
    [
        {"model": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
        {"model": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
        {"method": "ngram", "model": "no/such-drafter", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
    ],
)
def test_an_ngram_launchs_model_names_no_drafter_to_look_for(tmp_path, spec):
    """review45a A8: SpeculativeConfig reads "model" "[ngram]" (or "ngram") as the n-gram method, and an n-gram
    method drafts from the prompt: no drafter is loaded, so none is looked for (it was exit 4, "no config.json")."""
    tree, library = write_eagle3_setup(tmp_path)
    model = write_model(tmp_path / "target", DEEPSEEK_V3)
    done = _static(tree, library, "vllm", "serve", str(model), "--speculative-config", json.dumps(spec))
    assert done.returncode in (0, 1) and "config.json" not in done.stderr, (done.stdout, done.stderr)
    assert not any("drafter" in f["check"] and not f["ok"] for f in json.loads(done.stdout)["findings"]), done.stdout
