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
        ("eagle3", "applied"),  # the older patchkit's 0003 predates the layer-0 fix: apply updates it
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


def test_run_apply_applies_the_sets_the_launch_needs_then_launches(tmp_path):
    """`run --apply` on real stock 0.16.0 files with the three sets: the sets the launch needs (set.toml's
    [needed_by]: eagle3 for an eagle3 launch, a tool-call set for its --tool-call-parser), each applied as
    `apply` does (its own record entry); the launch's preflight passes on them, the command is exec'd; a
    launch naming the set not applied is refused naming it; revert restores stock."""
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
    assert marker.exists() and "1 set(s) applied (eagle3)" in done.stdout, done.stdout
    assert "not used by this launch: deepseek-tool-calls (not applied), kimi-k2-tool-calls (not applied)" in done.stderr
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3"]
    assert find_problems(str(tree)) == []

    marker.unlink()
    tools = [*launch, "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v31"]
    done = run_cli("run", "--apply", "--target", tree, "--patches", library, "--", *tools, env=env)
    assert done.returncode == 7 and marker.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3", "deepseek-tool-calls"]

    kimi = [*launch, "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2"]
    refused = run_cli("preflight", "--no-import", "--target", tree, "--patches", library, "--", *kimi, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "the kimi-k2-tool-calls series is not applied to vLLM 0.16.0" in refused.stdout, refused.stdout
    assert f"patchkit apply --target {tree} --patches {library} --set kimi-k2-tool-calls`" in refused.stdout

    assert run_cli("revert", "--target", tree, "--patches", library).returncode == 0
    assert snapshot(tree) == stock and not (tree / ".patchkit").exists()


def test_an_eagle3_launch_on_a_fetched_tree_with_only_eagle3_applied_passes(tmp_path):
    """New-user trial 12, item 3, on a tree from `patchkit fetch --all`: after `apply --set eagle3` the
    README's DeepSeek-V3 launch (no tool-call parser) passes; a tool-parser launch fails naming its set."""
    library = library_of_three(tmp_path / "lib")
    tree = tmp_path / "vllm-0.16.0"
    assert run_cli("fetch", VERSION, "--all", "--dest", tree).returncode == 0
    assert run_cli("apply", "--set", "eagle3", "--target", tree, "--patches", library).returncode == 0
    launch = serve(write_model(tmp_path / "deepseek", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    passed = run_cli("preflight", "--no-import", "--target", tree, "--patches", library, "--", *launch)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    tools = [*launch, "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3"]
    refused = run_cli("preflight", "--no-import", "--target", tree, "--patches", library, "--", *tools)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "the deepseek-tool-calls series is not applied" in refused.stdout
    assert "--set deepseek-tool-calls`" in refused.stdout and "kimi-k2-tool-calls series" not in refused.stdout
