"""After a deliberate `revert --set S` (new-user 20, 3): a drift's fix from status and apply named a
plain `apply`, which applies S again; and status said "no apply chose S" of a set an apply chose and
the user then reverted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import EAGLE_MODEL, MODEL, SPEC, make_patch, patched_spec, write_library

from patchkit.store.state import read_state


@pytest.fixture
def library(tree, scratch) -> Path:
    """Two sets of 0.16.0, one file each: `model` (applied first: by name) and `spec`."""
    root = scratch / "lib"
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]}, name="spec")
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="model")
    return root


def said(result) -> str:
    return " ".join(result.output.split())


def test_a_drift_after_revert_set_is_fixed_without_applying_the_reverted_set_again(run, tree, library):
    chosen = ("--target", tree, "--patches", library)
    assert run("apply", *chosen).exit_code == 0
    assert run("revert", *chosen, "--set", "spec").exit_code == 0
    status = run("status", *chosen)
    assert status.exit_code == 0, status.output
    assert "spec reverted by `revert --set`" in said(status) and "no apply chose" not in status.output
    (tree / MODEL).write_text(EAGLE_MODEL + "# my edit\n")  # model's file: apply stops at it, the first set
    for command in ("status", "apply"):
        result = run(command, *chosen)
        assert result.exit_code == 1, result.output
        fix = re.search(r"`patchkit revert [^`]*--force`.*?then (`patchkit apply [^`]*`)", said(result))
        assert fix is not None and "--set model" in fix[1] and "spec" not in fix[1], result.output
    assert run("revert", *chosen, "--force").exit_code == 0
    assert run("apply", *chosen, "--set", "model").exit_code == 0  # the fix, pasted
    assert [e.set_name for e in read_state(tree).entries] == ["model"]
    assert run("status", *chosen).exit_code == 0


def test_a_set_never_chosen_is_still_said_so_and_apply_chooses_a_reverted_set_again(run, tree, library):
    chosen = ("--target", tree, "--patches", library)
    assert run("apply", *chosen, "--set", "spec").exit_code == 0
    assert "no apply chose model" in said(run("status", *chosen))
    assert run("apply", *chosen, "--set", "model").exit_code == 0
    assert run("revert", *chosen, "--set", "model").exit_code == 0
    assert read_state(tree).reverted == ("model",)
    assert run("apply", *chosen, "--set", "model").exit_code == 0
    assert read_state(tree).reverted == ()


def test_apply_writes_no_set_before_it_stops_at_a_later_sets_drift(run, tree, library):
    """conflict27: with `model` (first in order) reverted and `spec`'s file edited, a plain apply
    applied model again (its own transaction), then stopped at spec's drift: it wrote before it
    refused. Every set's drift is checked before any set is written."""
    chosen = ("--target", tree, "--patches", library)
    assert run("apply", *chosen).exit_code == 0
    assert run("revert", *chosen, "--set", "model").exit_code == 0
    stock_model = (tree / MODEL).read_text()
    (tree / SPEC).write_text(patched_spec() + "# my edit\n")
    for dry_run in (["--dry-run"], []):
        result = run("apply", *chosen, *dry_run)
        assert result.exit_code == 1, result.output
        assert f"files edited after patchkit patched them: {SPEC}" in said(result), result.output
        assert "not tried: model" in said(result), result.output
    assert (tree / MODEL).read_text() == stock_model
    assert [e.set_name for e in read_state(tree).entries] == ["spec"]
