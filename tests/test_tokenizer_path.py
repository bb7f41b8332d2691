"""review37 L-e: a tokenizer path that holds no tokenizer fails `models`, with a fix that works.

vLLM loads the tokenizer at start (get_tokenizer: AutoTokenizer.from_pretrained) from --tokenizer,
else the model's directory; a directory holding no tokenizer file, a fifo or a file other than a GGUF
file raise there (checked with vLLM 0.16.0: "Either model_file or model_proto must be specified" for
a model directory without one, HFValidationError for a plain file). preflight said ok. Judged without
reading a fifo and without reading a large file whole; a hub id, --skip-tokenizer-init and another
tokenizer mode are not judged.
"""

from __future__ import annotations

import json
import os

import pytest
from helpers import run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, TOKENIZER, applied, serve, write_eagle3_setup, write_model

from patchkit.launch import weights


@pytest.fixture
def launch(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    return tree, library, write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER)


def models(launch, *options: str, target=None) -> list[dict]:
    tree, library, model, drafter = launch
    command = serve(target or model, drafter, *options)
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "models" and not f["ok"]]


def given(tmp_path, kind: str):
    path = tmp_path / f"tok-{kind}"
    if kind == "empty":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:  # 200 MB, sparse: never read whole
        with open(path, "wb") as f:
            f.truncate(200 << 20)
    return path


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("empty", "the directory holds no tokenizer file"),
        ("fifo", "it is a fifo, not a directory"),
        ("large", "it is a file, not a directory (nor a GGUF file)"),
    ],
)
def test_a_tokenizer_option_naming_no_tokenizer_fails(launch, tmp_path, kind, why):
    path = given(tmp_path, kind)
    failed = models(launch, "--tokenizer", str(path))
    assert len(failed) == 1, failed
    assert failed[0]["message"].startswith(f"--tokenizer {path}: {why}"), failed
    assert failed[0]["message"].endswith(": vLLM fails loading it at start")
    assert failed[0]["fix"].startswith("give --tokenizer the directory (or hub id) that holds the tokenizer's files")
    # the fix followed: a directory holding a tokenizer file
    assert models(launch, "--tokenizer", str(write_model(tmp_path / "tok", {}))) == []


def test_a_model_directory_without_tokenizer_files_fails_unless_a_tokenizer_is_given(launch, tmp_path):
    target = write_model(tmp_path / "bare", DEEPSEEK_V3)
    (target / TOKENIZER).unlink()
    failed = models(launch, target=target)
    assert [f["message"] for f in failed] == [
        f"model '{target}' (vLLM loads the tokenizer from it: no --tokenizer): the directory holds no tokenizer "
        "file (tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.json, ...): vLLM fails loading it at start"
    ]
    assert (
        failed[0]["fix"].startswith("put the tokenizer's files (tokenizer.json, ") and str(target) in failed[0]["fix"]
    )
    assert models(launch, "--tokenizer", str(launch[2]), target=target) == []  # its other way out
    (target / "tokenizer.model").write_bytes(b"\0")  # its first way out: a sentencepiece model
    assert models(launch, target=target) == []


@pytest.mark.parametrize(
    "options",
    [("--skip-tokenizer-init",), ("--tokenizer-mode", "mistral"), ("--tokenizer", "org/some-tokenizer")],
)
def test_what_is_not_judged(launch, tmp_path, options):
    target = write_model(tmp_path / "bare", DEEPSEEK_V3)
    (target / TOKENIZER).unlink()
    assert models(launch, *options, target=target) == []


def test_a_gguf_file_is_a_tokenizer_vllm_reads(launch, tmp_path):
    gguf = tmp_path / "model-q4"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)  # by its magic, as vLLM's check_gguf_file tells one
    assert models(launch, "--tokenizer", str(gguf)) == []


def test_a_tokenizer_directory_past_the_listing_bound_is_said_not_passed(launch, tmp_path, monkeypatch):
    """review39 C10's class: past WALK_LIMIT entries with no tokenizer file among those read, the check
    said nothing (as if one were there); now "cannot judge". The bound made small (the run is in-process)."""
    monkeypatch.setattr(weights, "WALK_LIMIT", 1000)
    path = tmp_path / "tok-many"
    path.mkdir()
    for i in range(1010):
        os.mknod(path / f"a{i:04d}.arrow")
    command = serve(launch[2], launch[3], "--tokenizer", str(path))
    done = run_cli_in_process(
        "preflight", "--target", launch[0], "--patches", launch[1], "--no-import", "--format", "json", "--", *command
    )
    [said] = [
        f for f in json.loads(done.stdout)["findings"] if f["check"] == "models" and "--tokenizer" in f["message"]
    ]
    assert said["result"] == "cannot judge" and said["ok"], said
    assert "more than 1,000 entries in it, none of the first a tokenizer file" in said["message"], said
    assert str(path) in said["fix"], said
    for name in os.listdir(path)[:20]:  # under the bound: judged (no tokenizer file: fails)
        (path / name).unlink()
    assert [f["message"] for f in models(launch, "--tokenizer", str(path))] == [
        f"--tokenizer {path}: the directory holds no tokenizer file ({weights.SOME_TOKENIZER_FILES}): "
        "vLLM fails loading it at start"
    ]
