"""--python with a relative PYTHONPATH (review 6 L8): that interpreter, started in this directory,
imports vllm from the entry as it resolves here, so patchkit asks it here too (not from /)."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import run_cli_read_only, write_tree


@pytest.mark.parametrize(("entry", "where"), [("site", "."), (".", "site"), ("./site", ".")])
def test_status_with_python_finds_vllm_through_a_relative_pythonpath(tmp_path, entry, where):
    site = write_tree(tmp_path / "site")
    cwd = tmp_path / where if where != "." else tmp_path
    done = run_cli_read_only(
        "status", "--python", sys.executable, "--format", "json", env={"PYTHONPATH": entry}, cwd=cwd
    )
    assert "vLLM is not installed" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["target"] == str(site.resolve()), done.stdout + done.stderr
