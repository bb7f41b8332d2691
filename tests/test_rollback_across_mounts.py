"""A directory of the tree on another file system than .patchkit/ (a bind or volume mount inside
site-packages, a tmpfs): the rollback puts each saved original back, and a rename of the saved
object there fails with EXDEV. Review38 B3: the rollback stopped half-way and every later command
failed the same way (exit 4), the tree mixed. Now the original is written as a copy on that mount."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from crash_trials import fingerprint
from helpers import MODEL_PY, make_patch, run_cli, sweep_trials, write_tree

MODELS = "vllm/models"
pytestmark = pytest.mark.slow  # ~60 commands a test: make test runs it, as it does the crash trials


@pytest.fixture
def mounted(tmp_path):
    """A tree whose vllm/models/ is a tmpfs of its own (root only), and a patch of a file on each side."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    tree = write_tree(tmp_path / "tree")
    kept = {path.name: path.read_bytes() for path in (tree / MODELS).iterdir() if path.is_file()}
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(tree / MODELS)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        for name, data in kept.items():
            (tree / MODELS / name).write_bytes(data)
        scratch = Path(tempfile.mkdtemp(dir=tmp_path))
        edits = {
            f"{MODELS}/model.py": MODEL_PY.replace("return x", "return x * 3"),
            "vllm/config/spec.py": "# edited\n",
        }
        diff = tmp_path / "p.diff"
        diff.write_bytes(make_patch(scratch, tree, edits))
        yield tree, diff
    finally:
        subprocess.run(["umount", str(tree / MODELS)], check=True)


@pytest.mark.parametrize("op", ["apply", "revert"])
@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_rollback_across_a_mount_inside_the_tree_finishes_at_every_step(mounted, mode, op):
    """A fault (an error: the rollback runs in the command; a SIGKILL: the next command's recovery
    runs it) at each step of the commit; each time the tree is back as it was, no journal left."""
    tree, diff = mounted
    args = ["--target", tree, "--patch", diff]
    prints = {"stock": fingerprint(tree)}
    assert run_cli("apply", *args, "--no-import").returncode == 0
    prints["patched"] = fingerprint(tree)
    before, goal = ("stock", "patched") if op == "apply" else ("patched", "stock")
    if op == "apply":
        assert run_cli("revert", *args).returncode == 0
    for step in sweep_trials(range(1, 200)):
        fault = {"PATCHKIT_FAULT_MODE": mode, "PATCHKIT_FAULT_AFTER": str(step)}
        cut = run_cli(op, *args, env=fault)
        if cut.returncode == 0:  # past the commit's last step
            assert fingerprint(tree) == prints[goal]
            break
        after = run_cli("status", *args)  # recovers what a kill left
        assert not (tree / ".patchkit/journal.json").exists(), (step, cut.stderr, after.stderr)
        assert fingerprint(tree) == prints[before], (step, cut.returncode, cut.stderr, after.stderr)
    else:
        pytest.fail(f"the {op} never ran to its end")
    assert step > 5, step
