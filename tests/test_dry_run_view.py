"""A dry run reads the tree without the target's lock (it writes nothing, not even the lock file),
yet never reports a tree half-way through another patchkit's transaction."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import SPEC_PY, make_patch, snapshot, write_library

import patchkit.engine.operations
from patchkit.base.enums import Outcome
from patchkit.base.errors import LockBusy
from patchkit.base.options import Options
from patchkit.engine.operations import apply_series
from patchkit.engine.resolve import resolve

SPEC = "vllm/config/spec.py"
PATCHED_SPEC = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "mistral_large",\n')


@pytest.fixture
def resolved(tmp_path, tree, scratch):
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: PATCHED_SPEC})]})
    return resolve(Options(target_dir=str(tree), library=str(library)))


def test_a_dry_run_on_a_stock_tree_creates_nothing_there(tree, resolved):
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    assert apply_series(resolved, dry_run=True).outcome == Outcome.DRY_RUN
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before
    assert not (tree / ".patchkit").exists()


def test_a_dry_run_does_not_wait_for_a_lock_held_before_any_transaction(tree, resolved):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom patchkit.engine.transaction import target_lock\n"
         "with target_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n", str(tree)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.environ["PATCHKIT_LOCK_TIMEOUT"] = "0"
        try:
            assert apply_series(resolved, dry_run=True).outcome == Outcome.DRY_RUN
            with pytest.raises(LockBusy):  # a write still takes the lock, and finds it held
                apply_series(resolved)
        finally:
            del os.environ["PATCHKIT_LOCK_TIMEOUT"]
    finally:
        holder.kill()
        holder.wait()


def test_a_transaction_committed_during_the_dry_run_is_refused_not_reported(tree, resolved, monkeypatch):
    real_plan = patchkit.engine.operations.plan_apply

    def plan_then_another_patchkit_commits(root, patches):
        plan = real_plan(root, patches)
        meta = root / ".patchkit"
        meta.mkdir(exist_ok=True)
        (meta / "state.json").write_text('{"entries": []}')  # what a commit writes last
        return plan

    monkeypatch.setattr(patchkit.engine.operations, "plan_apply", plan_then_another_patchkit_commits)
    with pytest.raises(LockBusy, match=r"changed .* while this dry run read it"):
        apply_series(resolved, dry_run=True)


def test_a_dry_run_that_finds_an_unfinished_transaction_takes_the_lock_and_rolls_it_back(tmp_path, tree, resolved):
    stock = snapshot(tree)
    env = {**os.environ, "PATCHKIT_FAULT_AFTER": "4", "PATCHKIT_FAULT_MODE": "exit"}
    library = str(tmp_path / "lib")  # the fixture's
    died = subprocess.run(
        [sys.executable, "-m", "patchkit", "apply", "--target", str(tree), "--patches", library],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert died.returncode == 70 and (tree / ".patchkit/journal.json").exists(), died.stderr
    result = apply_series(resolved, dry_run=True)
    assert result.outcome == Outcome.DRY_RUN
    assert any("rolled back an interrupted patchkit transaction" in w for w in result.warnings)
    assert not (tree / ".patchkit/journal.json").exists() and snapshot(tree) == stock


def test_a_record_swapped_back_to_the_same_bytes_during_the_dry_run_is_still_seen(tree, resolved, monkeypatch):
    assert apply_series(resolved).outcome == Outcome.APPLIED
    state = tree / ".patchkit" / "state.json"
    real_plan = patchkit.engine.operations.plan_apply

    def plan_while_two_commits_land(root, patches):
        plan = real_plan(root, patches)
        same = state.read_bytes()
        state.unlink()  # a revert, then an apply again: the same bytes, another file
        state.write_bytes(same)
        return plan

    monkeypatch.setattr(patchkit.engine.operations, "plan_apply", plan_while_two_commits_land)
    with pytest.raises(LockBusy):
        apply_series(resolved, dry_run=True)
