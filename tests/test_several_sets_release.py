"""Several sets on a real release (issue 23, step 3): a vLLM 0.16.0 tree patched with eagle3 by an
older patchkit (session 10's first commit, run from its own sources: its state.json as it wrote it)
gets the tool-call sets from `apply` without a revert; status, the guard and revert agree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LIBRARY, lay_out_release, run_cli, snapshot
from launch_fixtures import DEEPSEEK_V3, DRAFTER, REGISTRY, serve, write_model

from patchkit._target.guard import find_problems
from patchkit.releases.files import files_for
from patchkit.store.state import read_state

pytestmark = pytest.mark.release

REPO = Path(__file__).resolve().parent.parent
OLD_PATCHKIT = "ee6974a"  # main at the start of session 10: wrote the record format it had then
SETS = ("eagle3", "deepseek-tool-calls", "kimi-k2-tool-calls")
VERSION = "0.16.0"


def library_of_three(dest: Path) -> Path:
    """eagle3 and the two tool-call sets, eagle3 first (library.toml)."""
    shutil.copytree(REPO / "patches" / "eagle3", dest / "eagle3")
    for name in SETS[1:]:
        shutil.copytree(LIBRARY / name, dest / name)
    (dest / "library.toml").write_text(f"order = {json.dumps(list(SETS))}\n")
    return dest


def old_patchkit(dest: Path) -> Path:
    """The older patchkit's sources (and its library, eagle3 alone), from git."""
    found = subprocess.run(["git", "-C", REPO, "cat-file", "-e", f"{OLD_PATCHKIT}^{{commit}}"], capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"commit {OLD_PATCHKIT} is not in this clone (shallow?)")
    dest.mkdir()
    archive = subprocess.run(
        ["git", "-C", REPO, "archive", OLD_PATCHKIT, "patchkit", "patches"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    return dest


def run_old(sources: Path, *args: object) -> subprocess.CompletedProcess[str]:
    code = "import sys; from patchkit.cli.main import cli; sys.argv[0] = 'patchkit'; cli()"
    env = {**os.environ, "PYTHONPATH": str(sources)}
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def test_a_tree_patched_with_eagle3_by_an_older_patchkit_gets_the_new_sets_without_a_revert(tmp_path, run):
    library = library_of_three(tmp_path / "lib")
    paths = sorted({p for name in SETS for p in files_for(VERSION, str(library), name)})
    tree = lay_out_release(VERSION, paths, tmp_path / "site")
    stock = snapshot(tree)

    sources = old_patchkit(tmp_path / "old")
    older = run_old(sources, "apply", "--target", tree, "--no-import", "--patches", sources / "patches")
    assert older.returncode == 0, older.stdout + older.stderr
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3"]

    applied = run("apply", "--target", tree, "--patches", library, "--no-import", "--format", "json")
    assert applied.exit_code == 0, applied.output[-3000:]
    results = [(s["set"], s["result"]) for s in json.loads(applied.stdout)["sets"]]
    assert results == [
        ("eagle3", "already-applied"),
        ("deepseek-tool-calls", "applied"),
        ("kimi-k2-tool-calls", "applied"),
    ]
    assert [e.set_name for e in read_state(tree).entries] == list(SETS)

    status = run("status", "--target", tree, "--patches", library, "--format", "json")
    assert status.exit_code == 0, status.output[-3000:]
    assert json.loads(status.stdout)["state"] == "applied"
    assert find_problems(str(tree)) == []  # the guard lets the tree launch

    reverted = run("revert", "--target", tree, "--patches", library)
    assert reverted.exit_code == 0, reverted.output[-3000:]
    assert snapshot(tree) == stock and not (tree / ".patchkit").exists()


def test_run_apply_applies_every_covering_set_then_launches(tmp_path):
    """`run --apply` on real stock 0.16.0 files with the three sets: each applied as `apply` does (its
    own record entry), the launch's preflight passes on them, the command is exec'd; revert restores stock."""
    library = library_of_three(tmp_path / "lib")
    paths = sorted({REGISTRY, *(p for name in SETS for p in files_for(VERSION, str(library), name))})
    tree = lay_out_release(VERSION, paths, tmp_path / "site")
    stock = snapshot(tree)
    marker = tmp_path / "launched"
    program = tmp_path / "bin" / "vllm"
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\ntouch {marker}\nexit 7\n")
    program.chmod(0o755)
    env = {**os.environ, "PATH": f"{program.parent}{os.pathsep}{os.environ['PATH']}"}
    launch = serve(write_model(tmp_path / "deepseek", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))

    done = run_cli("run", "--apply", "--target", tree, "--patches", library, "--", *launch, env=env)
    assert done.returncode == 7, done.stdout[-3000:] + done.stderr[-3000:]
    assert marker.exists() and "3 set(s) applied (eagle3, deepseek-tool-calls, kimi-k2-tool-calls)" in done.stdout
    assert [e.set_name for e in read_state(tree).entries] == list(SETS)
    assert find_problems(str(tree)) == []

    assert run_cli("revert", "--target", tree, "--patches", library).returncode == 0
    assert snapshot(tree) == stock and not (tree / ".patchkit").exists()
