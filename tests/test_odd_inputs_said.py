"""Odd inputs said in the words of what is wrong: a cache root that is no directory
(PATCHKIT_CACHE_DIR=/dev/null) is one note naming it, not one per cache directory guessing "a
symlink?"; a recorded library path too long is said to be too long, not "not an absolute path"
(by status and by the launch guard); `--config=FILE`, which vLLM ignores while it starts, fails the
`command` check (exit 1) rather than being refused as unreadable input (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli_judged
from launch_fixtures import write_eagle3_setup, write_model

import patchkit._target.guard as target_guard

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "vocab_size": 32000}


def test_a_cache_root_that_is_no_directory_is_one_note_saying_so(tree, open_library, tmp_path):
    for root in ("/dev/null", str(tmp_path / "a-file")):
        Path(tmp_path / "a-file").write_text("")
        done = run_cli_judged(
            "apply", "--dry-run", "--target", tree, "--patches", open_library, env={"PATCHKIT_CACHE_DIR": root}
        )
        assert done.returncode == 0, done.stderr
        notes = [line for line in done.stderr.splitlines() if root in line]
        assert notes == [f"note: PATCHKIT_CACHE_DIR={root} is not a directory: the cache is not used for this run"], (
            done.stderr
        )


def test_a_recorded_library_path_too_long_is_said_to_be_too_long(run, tree, open_library):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    path = tree / ".patchkit" / "state.json"
    data = json.loads(path.read_text())
    data["entries"][0]["library"] = "/" + "x" * 4_999
    path.write_text(json.dumps(data))
    done = run_cli_judged("status", "--target", tree, "--patches", open_library)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and "5,000 characters long, more than a path may be (4,096)" in said, said
    assert "not an absolute path" not in said, said
    refused = " ".join(target_guard.find_problems(str(tree)))
    assert "5,000 characters long, more than a path may be (4,096)" in refused, refused


def test_config_with_equals_fails_the_command_check_where_vllm_starts(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    config = tmp_path / "cfg.yaml"
    config.write_text("tool-call-parser: hermes\n")
    model = write_model(tmp_path / "llama", LLAMA)
    launch = ["vllm", "serve", str(model), f"--config={config}"]
    done = run_cli_judged(
        "preflight", "--no-import", "--target", tree, "--patches", library, "--format", "json", "--", *launch
    )
    assert done.returncode == 1, done.stdout + done.stderr
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]
    assert found["message"].startswith(f"vLLM ignores --config={config}: it reads a config file only as"), found
    assert found["fix"] == f"write --config {config}", found
