"""helpers.warm_pycache_prefix: the tests' fresh commands under a pycache prefix of their own read
bytecode there instead of compiling every module from source (0.6 s of CPU a command where
PYTHONDONTWRITEBYTECODE is set, 0.15 s warm)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import warm_pycache_prefix


def compiled_from_source(prefix, *argv: str) -> list[str]:
    """The modules a fresh `python ARGV` under `prefix` compiles from source (python -v)."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-v", *argv], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-800:]
    return [line for line in done.stderr.splitlines() if line.startswith("# code object from ") and "'" not in line]


def test_a_fresh_command_under_a_warm_prefix_compiles_nothing_from_source(tmp_path):
    assert compiled_from_source(tmp_path / "cold", "-m", "patchkit", "--version")  # what it saves
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    assert compiled_from_source(prefix, "-m", "patchkit", "status", "--help") == []
    assert not any(prefix.glob(str(tmp_path).lstrip("/") + "/**/*.pyc"))  # none of the tests' own files there
