"""Opt-in (`make test-vllm`): offline (HF_HUB_OFFLINE), patchkit takes a launch's model as vLLM's
EngineArgs does: the switch as huggingface_hub reads it, and the model as repo_utils.get_model_path
makes it (an existing path, else the snapshot huggingface_hub finds in its cache, else a refusal);
and a model path as vLLM reads it (no ~ expansion, a file refused)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchkit.base.errors import TargetError
from patchkit.launch.models import offline, offline_model_path

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

SWITCHES = [
    {},
    {"HF_HUB_OFFLINE": "1"},
    {"HF_HUB_OFFLINE": "true"},
    {"HF_HUB_OFFLINE": "On"},
    {"HF_HUB_OFFLINE": "yes"},
    {"HF_HUB_OFFLINE": "2"},
    {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"},
    {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "1"},
    {"TRANSFORMERS_OFFLINE": "YES"},
]
COMMIT = "d" * 40
# (model, revision): cached, cached at a commit, a ref with no snapshot, not cached, not a repo id, a ~ path
NAMES = [
    ("lab/cached", None),
    ("lab/cached", COMMIT),
    ("lab/cached", "v2"),
    ("lab/cached", "e" * 40),
    ("lab/absent", None),
    ("lab--x/y", None),
    ("~/models/m", None),
    ("a/b/c", None),
    ("local-file", None),
    ("cached", None),
]


def in_vllm(code: str, environ: dict[str, str], cwd: Path, *args: str) -> str:
    """The last line `code` prints, run by the real vLLM's interpreter with `args`."""
    done = subprocess.run(
        [str(VLLM_PYTHON), "-B", "-c", code, *args],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("switches", SWITCHES)
def test_offline_is_read_as_huggingface_hub_reads_it(tmp_path: Path, switches):
    environ = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **switches}
    said = in_vllm("import huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE)", environ, tmp_path)
    assert offline(environ) is (said == "True")


def test_the_offline_model_is_the_path_vllms_get_model_path_gives(tmp_path: Path):
    hub = tmp_path / "hub"
    for repo in ("models--lab--cached", "models--cached"):
        (hub / repo / "snapshots" / COMMIT).mkdir(parents=True)
        (hub / repo / "refs").mkdir()
        (hub / repo / "refs" / "main").write_text(COMMIT)
        (hub / repo / "refs" / "v2").write_text("f" * 40)
    (tmp_path / "local-file").write_text("not a model")
    environ = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    code = (
        "import json, sys\n"
        "from vllm.transformers_utils.repo_utils import get_model_path\n"
        "out = []\n"
        "for model, revision in json.loads(sys.argv[1]):\n"
        "    try: out.append(str(get_model_path(model, revision)))\n"
        "    except Exception as exc: out.append(None)\n"
        "print(json.dumps(out))\n"
    )
    theirs = _vllm_answers(code, NAMES, environ, tmp_path)
    ours = _our_answers(lambda name: offline_model_path(*name, environ), NAMES, tmp_path)
    assert ours == theirs


def test_vllm_reads_no_config_where_patchkit_refuses_a_model_path(tmp_path: Path):
    """A `~` path (never expanded) and a file at the model's path: vLLM's get_config fails on both,
    as patchkit refuses both; the directory itself it reads."""
    from launch_fixtures import DEEPSEEK_V3, write_model

    from patchkit.launch.models import resolve_model

    home = tmp_path / "home"
    write_model(home / "models" / "m", DEEPSEEK_V3)
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "file").write_text("not a model\n")
    names = ["~/models/m", "lab/file", str(home / "models" / "m")]
    environ = {"HOME": str(home), "PATH": "/usr/bin:/bin", "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    code = (
        "import json, sys\n"
        "from vllm.transformers_utils.config import get_config\n"
        "out = []\n"
        "for model in json.loads(sys.argv[1]):\n"
        "    try: out.append(get_config(model, trust_remote_code=False).hidden_size)\n"
        "    except Exception: out.append(None)\n"
        "print(json.dumps(out))\n"
    )
    theirs = _vllm_answers(code, names, environ, tmp_path)
    ours = _our_answers(lambda name: resolve_model(name, environ).get("hidden_size"), names, tmp_path)
    assert ours == theirs == [None, None, 7168]


def _vllm_answers(code: str, items: list, environ: dict[str, str], cwd: Path) -> list:
    """What `code` prints last (a JSON list) when run by the real vLLM's interpreter on `items`."""
    return json.loads(in_vllm(code, environ, cwd, json.dumps(items)))


def _our_answers(answer: Callable[[Any], Any], items: list, cwd: Path) -> list:
    """patchkit's `answer` to each of `items`, asked from `cwd` (None where it refuses)."""
    ours = []
    here = os.getcwd()
    os.chdir(cwd)
    try:
        for item in items:
            try:
                ours.append(answer(item))
            except TargetError:
                ours.append(None)
    finally:
        os.chdir(here)
    return ours
