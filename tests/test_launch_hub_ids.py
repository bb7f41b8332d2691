"""A name vLLM hands huggingface_hub as a repo id is one validate_repo_id takes (at most 96 characters
in its name part, `--`, `..` and a `.git` end refused, ...): any other, the download refuses at once and
vLLM reads the name as a path (review35). One rule, patchkit.launch.models.hub_repo_id, for every option;
held against the real validate_repo_id in tests/vllm_import/test_hub_cache_real.py."""

from __future__ import annotations

import sys

import pytest
from launch_fixtures import REPO_IDS

from patchkit.launch.command import parse
from patchkit.launch.late_files import late_file_findings
from patchkit.launch.models import hub_repo_id


@pytest.mark.parametrize(("name", "taken"), REPO_IDS)
def test_hub_repo_id_is_validate_repo_id_s_rule(name, taken):
    assert hub_repo_id(name) is taken


def findings(*options: str) -> list[str]:
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "m", "--enable-lora", *options]
    return [f.message for f in late_file_findings(parse(argv, "0.16.0"), "command", lambda: "utf-8")]


def test_a_name_over_96_characters_is_a_path_to_the_adapter_and_the_generation_config(tmp_path, monkeypatch):
    """The reproduction: 97 characters with no slash, online: vLLM's snapshot_download refuses the
    id (HFValidationError), vLLM reads it as a path, and finds nothing there once the model has loaded."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    long, fits = "a" * 97, "a" * 96
    [said] = findings("--lora-modules", f"x={long}")
    assert said.startswith(f"--lora-modules {long}: adapter_config.json there: no such file"), said
    [said] = findings("--generation-config", long)
    assert said.startswith(f"--generation-config {long}: no such directory, nor a hub repo id"), said
    assert findings("--lora-modules", f"x={fits}", "--generation-config", fits) == []  # vLLM downloads them
