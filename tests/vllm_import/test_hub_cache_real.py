"""Opt-in (`make test-vllm`): the cache patchkit reads a hub model's config.json from is the one the
transformers and huggingface_hub of the vLLM venv read it from (transformers' TRANSFORMERS_CACHE
constant, the cache_dir default of PretrainedConfig.get_config_dict), for the same environment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from launch_fixtures import REPO_IDS

from patchkit.launch.models import hub_cache, hub_repo_id

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

ENVIRONMENTS = [
    {},
    {"XDG_CACHE_HOME": "/x/xdg"},
    {"HF_HOME": "~/hf", "XDG_CACHE_HOME": "/x/xdg"},
    {"HUGGINGFACE_HUB_CACHE": "/x/legacy", "HF_HOME": "/x/home"},
    {"HF_HUB_CACHE": "$ROOT/hub", "ROOT": "/x/root", "HUGGINGFACE_HUB_CACHE": "/x/legacy"},
    {"PYTORCH_PRETRAINED_BERT_CACHE": "/x/bert", "HF_HUB_CACHE": "/x/hub"},
    {"PYTORCH_TRANSFORMERS_CACHE": "/x/pt", "PYTORCH_PRETRAINED_BERT_CACHE": "/x/bert"},
    {"TRANSFORMERS_CACHE": "~/tc", "PYTORCH_TRANSFORMERS_CACHE": "/x/pt", "HF_HUB_CACHE": "/x/hub"},
    {"TRANSFORMERS_CACHE": "", "HF_HUB_CACHE": "/x/hub"},
]


@pytest.mark.parametrize("variables", ENVIRONMENTS)
def test_patchkits_hub_cache_is_the_one_transformers_reads_config_json_from(tmp_path: Path, variables):
    environ = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **variables}
    asked = "import transformers.utils.hub as hub; print(hub.TRANSFORMERS_CACHE)"
    done = subprocess.run(
        [str(VLLM_PYTHON), "-B", "-c", asked], env=environ, capture_output=True, text=True, timeout=300, check=True
    )
    assert hub_cache(environ) == Path(done.stdout.rstrip("\n"))


VALIDATE = """
import json, sys
from huggingface_hub.utils import HFValidationError, validate_repo_id
taken = {}
for name in json.loads(sys.argv[1]):
    try:
        validate_repo_id(name)
        taken[name] = True
    except HFValidationError:
        taken[name] = False
print(json.dumps(taken))
"""


def test_patchkits_hub_repo_id_is_the_venv_s_validate_repo_id():
    """review35: the names --lora-modules, --generation-config (and an offline model) take as hub ids."""
    names = [name for name, _ in REPO_IDS] + ["a\n", "a/", "/a", "", ".", "a" * 95 + ".", "ab/cd.git", "é" * 96]
    done = subprocess.run(
        [str(VLLM_PYTHON), "-B", "-c", VALIDATE, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    taken = json.loads(done.stdout.strip().splitlines()[-1])
    assert {name: hub_repo_id(name) for name in names} == taken
