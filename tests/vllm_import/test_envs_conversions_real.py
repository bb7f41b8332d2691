"""Opt-in (`make test-vllm`): patchkit's reading of envs.py's conversions (patchkit/launch/vllm_env.py)
refuses exactly the values the installed vLLM's environment_variables entries raise on, for every entry:
what enable_envs_cache() reads right after the model's load."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from patchkit.launch.vllm_env import conversions, refusal

VLLM_PYTHON = os.environ.get("VLLM_PYTHON", "")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

VALUES = ["true", "yes", "", "1", "0", " 2 ", "1.5", "tcp://10.0.0.1:8000", "Debug", "release", "{}", "auto"]

ASKED = """
import json, os, sys
values = json.loads(sys.argv[1])
import vllm.envs as envs
said = {"file": envs.__file__, "raised": {}}
for name, read in envs.environment_variables.items():
    row = []
    for value in values:
        os.environ[name] = value
        try:
            read()
            row.append(False)
        except ValueError:
            row.append(True)
        except Exception as exc:
            row.append(type(exc).__name__)
        del os.environ[name]
    said["raised"][name] = row
print(json.dumps(said))
"""


def test_refusals_agree_with_vllms_envs_on_every_entry(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("VLLM_PORT", "VERBOSE", "LOCAL_RANK")}
    done = subprocess.run(
        [VLLM_PYTHON, "-c", ASKED, json.dumps(VALUES)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path,
        env=clean,
    )
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    read = conversions(Path(theirs["file"]).read_bytes())
    assert {"VERBOSE", "CMAKE_BUILD_TYPE", "LOCAL_RANK", "VLLM_PORT", "VLLM_USE_DEEP_GEMM"} <= set(read)
    ours = {
        name: [name in read and refusal(name, value, read[name]) is not None for value in VALUES]
        for name in theirs["raised"]
    }
    differ = {n: (ours[n], theirs["raised"][n]) for n in ours if ours[n] != theirs["raised"][n]}
    assert not differ, differ
    assert sum(any(row) for row in ours.values()) > 80  # the review counted 83 int() entries alone
