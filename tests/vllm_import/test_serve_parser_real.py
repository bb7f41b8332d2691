"""Opt-in (`make test-vllm`), property (issue 20 item 3): on generated `vllm serve` command lines patchkit
reads what vLLM 0.16.0's (or VLLM_VERSION's) own parser reads (patchkit/_target/serve_reading.py in the vLLM venv: the
`vllm` CLI's parser, one vLLM import per batch of lines), and refuses what it refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from serve_lines import ACCEPTED_VALUES, REFUSED_VALUES, agree, patchkit_reading, serve_arguments

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")
VERSION = os.environ.get("VLLM_VERSION", "0.16.0")
READER = Path(__file__).resolve().parents[2] / "patchkit" / "_target" / "serve_reading.py"

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

EDGES = [
    ["--model", "org/m", "--model", "org/other"],
    ["org/m", "--speculative", '{"method": "eagle3", "model": "org/d"}'],
    ["--enable-prefix-caching", "org/m"],
    ["--no-enable-prefix-caching", "org/m"],
    ["org/m", "--max", "5"],
    ["org/m", "-tp=2", "--trust_remote_code"],
    ["-q", "-0.5", "org/m"],
    ["org/m", "--speculative-config", '{"method": "ngram"}', "--speculative-config.method", "eagle3"],
    ["--", "org/m"],
    ["org/m", "--help"],
    # values: review 5 M1's lines, and tests/test_launch_review5.py's
    *[["org/m", option, value] for option, value in [("--dtype", "foo"), ("--max-model-len", "abc")]],
    *[["org/m", option, value] for option, value in [("--max-model-len", "1.5"), ("--kv-cache-dtype", "bad")]],
    ["org/m", "--uvicorn-log-level", "loud", "--chat-template-content-format", "bad"],
    *[["org/m", option, "3"] for option in ("--compilation-config", "--kv-transfer-config")],
    ["org/m", "--compilation-config.bad_key", "1"],
    ["org/m", "--lora-modules", "{bad"],
    ["org/m", "--lora-modules", "a=/l=1"],  # a second '=': refused before 0.30.0, part of the path after
    *[["org/m", *words] for words, _ in REFUSED_VALUES],
    *[["org/m", *words] for words in ACCEPTED_VALUES],
]


def vllm_readings(lines: list[list[str]], tmp_path: Path) -> list[dict]:
    answer = tmp_path / "answer.json"
    request = json.dumps({"lines": [{"arguments": line, "serve": True} for line in lines]})
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [VLLM_PYTHON, "-B", str(READER), str(answer)], input=request, text=True, env=env, check=True, timeout=900
    )
    data = json.loads(answer.read_text())
    assert data["status"] == "ok", data
    return data["readings"]


def _check(lines: list[list[str]], tmp_path: Path) -> None:
    for line, theirs in zip(lines, vllm_readings(lines, tmp_path), strict=True):
        agree(line, patchkit_reading(line, VERSION), theirs)


def test_the_issues_command_lines_are_read_as_vllm_reads_them(tmp_path):
    _check(EDGES, tmp_path)


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(st.lists(serve_arguments, min_size=200, max_size=200))
def test_generated_command_lines_are_read_as_vllm_reads_them(tmp_path, lines):
    _check(lines, tmp_path)


OPTIONAL = ("revision", "hf-config-path", "tokenizer-revision")  # vLLM's optional_type: "" and "None" are None


def test_an_optional_options_none_or_nothing_is_read_as_vllm_reads_it(tmp_path):
    from patchkit.launch.command import parse

    (tmp_path / "empty.yaml").write_text("revision:\nhf-config-path:\ntokenizer-revision:\n")
    (tmp_path / "given.yaml").write_text("revision: v2\nhf-config-path: None\n")
    lines = [
        ["org/m", *[word for option in OPTIONAL for word in (f"--{option}", value)]]
        for value in ("None", "", "none", "v1")
    ]
    lines += [["org/m", "--config", str(tmp_path / name)] for name in ("empty.yaml", "given.yaml")]
    for line, theirs in zip(lines, vllm_readings(lines, tmp_path), strict=True):
        command = parse(["vllm", "serve", *line], VERSION)
        ours = {option.replace("-", "_"): command.optional_text(option) for option in OPTIONAL}
        assert ours == {name: theirs[name] for name in ours}, line


def test_config_yaml_timestamps_are_read_as_vllms_serve_parser_reads_them(tmp_path):
    """review41a F3: with `vllm serve`'s parser imported, lm-format-enforcer has made SafeLoader build
    timestamps as strings: a date in a --config YAML is its text, in vLLM and in patchkit alike."""
    config = tmp_path / "dates.yaml"
    config.write_text(
        "speculative-config:\n  model: /m/d\n  revision: 2024-01-01\n  when: 2001-12-14t21:59:43.10-05:00\n"
        "max-model-len: 4096\nrevision: 2024-01-02\n"
    )
    line = ["org/m", "--config", str(config)]
    [theirs] = vllm_readings([line], tmp_path)
    assert theirs["speculative_config"]["revision"] == "2024-01-01", theirs
    assert theirs["revision"] == "2024-01-02", theirs
    agree(line, patchkit_reading(line, VERSION), theirs)
