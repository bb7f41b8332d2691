"""Opt-in (`make test-vllm`): a --max-model-len above the target's derived length (review43a S10) is
refused by patchkit's static reading (patchkit/launch/target_length.py) exactly where the real vLLM's
create_engine_config() refuses it (ModelConfig's _get_and_verify_max_len), CPU platform forced: over
plain, RoPE-scaled and model_max_length configs, with and without VLLM_ALLOW_LONG_MAX_MODEL_LEN."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from vllm_overlay import TINY_LLAMA, ask_vllm, site_packages

from patchkit.launch.command import parse
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model, with_overrides
from patchkit.launch.target_length import length_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

LLAMA = {**TINY_LLAMA, "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 2048}
LLAMA |= {"torch_dtype": "float32"}
TARGETS = {
    "plain": LLAMA,
    "linear": {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "own_length": {**LLAMA, "model_max_length": 8192},
    "yarn_own": {
        **LLAMA,
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024},
        "model_max_length": 4096,
    },
}
# (target, --max-model-len, VLLM_ALLOW_LONG_MAX_MODEL_LEN or None)
LINES = [
    ("plain", 2048, None),
    ("plain", 2049, None),
    ("plain", 8192, "1"),
    ("plain", 8192, " TRUE "),
    ("plain", 8192, "yes"),
    ("plain", 8192, "0"),
    ("linear", 4096, None),
    ("linear", 4097, None),
    ("own_length", 8192, None),
    ("own_length", 8193, None),
    ("yarn_own", 3000, None),
    ("yarn_own", 4097, None),
]
ASK_VLLM = textwrap.dedent("""\
    import json, os, sys
    from patchkit._target import engine_config
    refused = []
    for target, length, allow, *more in json.loads(sys.argv[1]):
        os.environ.pop("VLLM_ALLOW_LONG_MAX_MODEL_LEN", None)
        if allow is not None:
            os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = allow
        line = [target, *(["--max-model-len", str(length)] if length is not None else []), *more]
        answer = engine_config.work({"arguments": line, "serve": True, "args": line})
        refused.append(None if answer["status"] == "ok" else answer.get("error", answer["status"])[-300:])
    print(json.dumps(refused))
    """)


def _wrong(lines: list[tuple], vllm_refused: list, why: str = "ALLOW_LONG_MAX_MODEL_LEN") -> list[tuple]:
    """The lines where patchkit's verdict (a failure, judged) is not vLLM's (a refusal saying `why`)."""
    site = site_packages(str(VLLM_PYTHON))
    wrong = []
    for (target, length, allow, *more), refused in zip(lines, vllm_refused, strict=True):
        env = ["env", f"VLLM_ALLOW_LONG_MAX_MODEL_LEN={allow}"] if allow is not None else []
        length_given = ["--max-model-len", str(length)] if length is not None else []
        command = parse([*env, "vllm", "serve", target, *length_given, *more], "0.16.0")
        context = LaunchContext(
            command, with_overrides(resolve_model(target, {}), command.hf_overrides), None, site, None, None
        )
        found = length_findings("command", context)
        if not all(f.judged for f in found) or bool(found) != (refused is not None and why in refused):
            wrong.append((target, length, allow, more, [f.message for f in found], refused))
    return wrong


def test_a_max_model_len_above_the_derived_length_is_refused_where_vllm_refuses_it(tmp_path: Path):
    for name, config in TARGETS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    lines = [(str(tmp_path / name), length, allow) for name, length, allow in LINES]
    vllm_refused = ask_vllm(ASK_VLLM, json.dumps(lines))
    assert sum(r is not None for r in vllm_refused) >= 5, vllm_refused  # vLLM's refusals were asked
    wrong = _wrong(lines, vllm_refused)
    assert not wrong, json.dumps(wrong, indent=1)


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
BOTH = {"max_seq_length": 512, "do_lower_case": False}
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16}  # head_dim 32
LLAVA = {  # a composite: the length reads text_config's RoPE (derived 4096)
    "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "image_token_index": 999,
    "text_config": {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "vision_config": {
        "model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 2, "image_size": 32, "patch_size": 16,
    },
}  # fmt: skip
BERT = {
    "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 64, "num_attention_heads": 2,
    "num_hidden_layers": 1, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
}  # fmt: skip
GEMMA3 = {
    **LLAMA, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 32,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window": 512,
}  # fmt: skip
LONGER = {**LLAMA, "max_position_embeddings": 8192}
# name -> (config.json, the model directory's other JSON files)
OVERRIDDEN = {
    "yarn": ({**LLAMA, "rope_scaling": YARN}, {}),  # derived 8192
    "kt2": (LONGER, {"sentence_roberta_config.json": BOTH}),
    "kt3": (LONGER, {"sentence_bert_config.json": {"max_seq_length": 512}}),
    "kt4": (LONGER, {"sentence_bert_config.json": {}, "sentence_distilbert_config.json": BOTH}),
    "kt5": (LONGER, {"sentence_bert_config.json": {"max_seq_length": 9}, "sentence_roberta_config.json": BOTH}),
    "longrope": ({**LLAMA, "rope_scaling": LONGROPE, "original_max_position_embeddings": 1024}, {}),
    "gemma3": (GEMMA3, {}),
    "llava": (LLAVA, {}),
    "bert": (BERT, {"tokenizer_config.json": {"model_max_length": 128}}),
    "bertcls": (
        {**BERT, "architectures": ["BertForSequenceClassification"]},
        {"tokenizer_config.json": {"model_max_length": 128}},
    ),
    "st_empty": (LONGER, {"sentence_bert_config.json": "", "sentence_xlnet_config.json": BOTH}),
    "st_bom": (LONGER, {"sentence_bert_config.json": "\ufeff" + json.dumps(BOTH)}),
    "st_null": (LONGER, {"sentence_bert_config.json": {**BOTH, "max_seq_length": None}}),
    "st_text": (LONGER, {"sentence_bert_config.json": {**BOTH, "max_seq_length": "512"}}),
}
HALF = json.dumps({"rope_scaling": {"factor": 2.0}})
# (target, --max-model-len, VLLM_ALLOW_LONG_MAX_MODEL_LEN or None, more options ...)
OVERRIDDEN_LINES: list[tuple] = [
    ("yarn", 8192, None, "--hf-overrides", HALF),
    ("yarn", 8193, None, "--hf-overrides", HALF),
    ("yarn", 8192, None, "--hf-overrides", json.dumps({"rope_scaling": {**YARN, "factor": 2.0}})),
    ("yarn", 8192, None, "--hf-overrides.rope_scaling.factor", "2.0"),
    ("plain", 8192, None, "--hf-overrides", json.dumps({"rope_scaling": YARN})),
    ("plain", 8192, None, "--hf-overrides", json.dumps({"rope_parameters": YARN})),
    ("plain", 8193, None, "--hf-overrides", json.dumps({"rope_parameters": YARN})),
    ("kt2", 2048, None),
    ("kt2", 512, None),
    ("kt3", 2048, None),
    ("kt4", 2048, None),
    ("kt5", 2048, None),
    ("longrope", 2048, None),
    ("longrope", 2049, None),
    ("gemma3", 2048, None),
    ("gemma3", 2049, None),
    ("llava", 8192, None, "--hf-overrides", json.dumps({"text_config": {"rope_scaling": {"factor": 4.0}}})),
    ("llava", 8193, None, "--hf-overrides", json.dumps({"text_config": {"rope_scaling": {"factor": 4.0}}})),
    ("llava", 4096, None, "--hf-overrides", json.dumps({"rope_scaling": {"rope_type": "linear", "factor": 4.0}})),
    ("llava", 4097, None, "--hf-overrides", json.dumps({"rope_scaling": {"rope_type": "linear", "factor": 4.0}})),
    ("bert", 256, None, "--runner", "pooling"),
    ("bert", 128, None, "--runner", "pooling"),
    ("bertcls", 256, None),
    ("bertcls", 128, None),
]
# whatever --max-model-len says (here none but one): review45a A1, A2
UNREAD_LINES: list[tuple] = [
    ("st_empty", None, None),
    ("st_bom", None, None),
    ("st_null", None, None),
    ("st_text", None, None),
    ("st_text", 1024, None),
    ("plain", None, None, "--hf-overrides", json.dumps({"text_config": {"max_position_embeddings": 4096}})),
]


def test_hf_overrides_and_sentence_transformers_files_reach_the_length_as_vllm_takes_them(tmp_path: Path):
    """review44a T1: an --hf-overrides rope_scaling never moves 0.16.0's derived length (rope_parameters
    does); T7: the first non-empty Sentence Transformers file, kept only with both keys, replaces it;
    longrope and gemma3 configs are not scaled by their factor; a composite's text_config RoPE override is
    merged into what the length reads, a top-level one is not. review45a A1, A2: an unreadable Sentence
    Transformers file, and a text_config given to a config without one, are refused whatever the length."""
    for name, (config, files) in {"plain": (LLAMA, {}), **OVERRIDDEN}.items():
        (tmp_path / name).mkdir()
        for file, value in {"config.json": config, **files}.items():
            (tmp_path / name / file).write_text(value if isinstance(value, str) else json.dumps(value))
    lines = [(str(tmp_path / name), *rest) for name, *rest in OVERRIDDEN_LINES]
    unread = [(str(tmp_path / name), *rest) for name, *rest in UNREAD_LINES]
    vllm_refused = ask_vllm(ASK_VLLM, json.dumps(lines + unread))
    assert sum(r is not None for r in vllm_refused[len(lines) :]) == 5, vllm_refused  # all but st_text alone
    wrong = _wrong(unread, vllm_refused[len(lines) :], why="")  # any refusal at start
    vllm_refused = vllm_refused[: len(lines)]
    assert sum(r is not None for r in vllm_refused) >= 10, vllm_refused  # vLLM's refusals were asked
    wrong += _wrong(lines, vllm_refused)
    assert not wrong, json.dumps(wrong, indent=1)
