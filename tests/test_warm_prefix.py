"""helpers.warm_pycache_prefix: the tests' fresh commands under a pycache prefix of their own read
bytecode there instead of compiling every module from source (0.6 s of CPU a command where
PYTHONDONTWRITEBYTECODE is set, 0.15 s warm)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from helpers import warm_pycache_prefix


def compiled_from_source(prefix, *argv: str) -> list[str]:
    """The modules a fresh `python ARGV` under `prefix` compiles from source (python -v)."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-v", *argv], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-800:]
    return [line for line in done.stderr.splitlines() if line.startswith("# code object from ") and "'" not in line]


def changed_since_warmed(prefix: Path, compiled: list[str]) -> list[str]:
    """The compiled sources whose mtime is not the one their warm bytecode records: another test changed
    them meanwhile (test_fleet moves base/enums.py's mtime, as an upgrade of patchkit on a node would)."""
    changed = []
    for line in compiled:
        source = Path(line.removeprefix("# code object from ").strip())
        pyc = prefix / source.parent.relative_to("/") / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
        with contextlib.suppress(OSError):
            if int.from_bytes(pyc.read_bytes()[8:12], "little") != int(source.stat().st_mtime) & 0xFFFFFFFF:
                changed.append(line)
    return changed


def test_a_fresh_command_under_a_warm_prefix_compiles_nothing_from_source(tmp_path):
    assert compiled_from_source(tmp_path / "cold", "-m", "patchkit", "--version")  # what it saves
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    compiled = compiled_from_source(prefix, "-m", "patchkit", "status", "--help")
    assert [line for line in compiled if line not in changed_since_warmed(prefix, compiled)] == []
    assert not any(prefix.glob(str(tmp_path).lstrip("/") + "/**/*.pyc"))  # none of the tests' own files there
