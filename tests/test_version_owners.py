"""newuser26: vllm-patchkit installed over the pre-rename `patchkit` (without uninstalling it) left
both distributions owning `patchkit/`, and nothing said so: `pip uninstall patchkit` then deleted
the new install. `patchkit --version` warns, with the repair."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import patchkit

PACKAGE = Path(patchkit.__file__).parent


def installed_over_the_old_name(site: Path, *, old: bool) -> None:
    """A site-packages holding this patchkit as vllm-patchkit, and (`old`) the pre-rename dist's record."""
    shutil.copytree(PACKAGE, site / "patchkit", ignore=shutil.ignore_patterns("__pycache__", "_library", "_docs"))
    for dist, shown in (("vllm_patchkit-0.1.0", True), ("patchkit-0.1.0", old)):
        if shown:
            (site / f"{dist}.dist-info").mkdir()
            (site / f"{dist}.dist-info" / "RECORD").write_text(f"patchkit/__init__.py,,\n{dist}.dist-info/RECORD,,\n")


def version(site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "patchkit", "--version"], capture_output=True, text=True, env=env, cwd=site
    )


def test_version_warns_while_the_pre_rename_distribution_also_owns_the_package(tmp_path):
    installed_over_the_old_name(tmp_path / "site", old=True)
    done = version(tmp_path / "site")
    assert done.returncode == 0 and done.stdout == "patchkit, version 0.1.0\n", done
    said = " ".join(done.stderr.split())
    assert "warning: patchkit-0.1.0 (the pre-rename name) owns patchkit/ too" in said, said
    assert "pip install --force-reinstall --no-deps vllm_patchkit-*.whl" in said, said
    assert "`pipx uninstall patchkit && pipx reinstall vllm-patchkit`" in said, said


def test_version_alone_says_nothing_more(tmp_path):
    installed_over_the_old_name(tmp_path / "site", old=False)
    done = version(tmp_path / "site")
    assert (done.returncode, done.stdout, done.stderr) == (0, "patchkit, version 0.1.0\n", ""), done
