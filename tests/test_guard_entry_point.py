"""The guard's entry point must name the guard's check: vLLM calls what it names, so one renamed to
another attribute of patchkit_guard (none at all, or another function) launches vLLM unchecked."""

from __future__ import annotations

import pytest
from helpers import (
    MODEL_PY,
    load_plugins_like_vllm,
    make_patch,
    run_cli,
    run_cli_read_only,
    run_cli_writing,
    write_tree,
)

from patchkit.engine.guard import dist_info

MODEL = "vllm/models/model.py"
ENTRY_POINTS = f"{dist_info()}/entry_points.txt"


@pytest.mark.parametrize("attribute", ["nothing", "imported_sites"])
def test_an_entry_point_naming_another_attribute_is_no_guard_and_apply_guard_repairs_it(tmp_path, scratch, attribute):
    site = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    patched = MODEL_PY.replace("return x", "return x * 2")
    diff.write_bytes(make_patch(scratch, site, {MODEL: patched}))
    own = ("--target", site, "--patch", diff)
    assert run_cli_writing("apply", *own).returncode == 0
    declared = (site / ENTRY_POINTS).read_text()
    assert "patchkit_guard:check" in declared
    (site / ENTRY_POINTS).write_text(declared.replace("patchkit_guard:check", f"patchkit_guard:{attribute}"))
    for verb in ("status", "verify"):
        done = run_cli(verb, *own)
        said = done.stdout + done.stderr
        assert "no longer loads" in said and "entry_points.txt" in said and "unchecked" in said, said
        assert "--guard" in said, said  # the fix: apply --guard writes the guard's entry point again
    (site / MODEL).write_text(MODEL_PY)  # stock again: the guard would refuse it, and vLLM does not ask it
    assert load_plugins_like_vllm(site).returncode == 0
    (site / MODEL).write_text(patched)
    repaired = run_cli_writing("apply", "--guard", *own)
    assert repaired.returncode == 0 and "patchkit_guard:check" in (site / ENTRY_POINTS).read_text()
    status = run_cli_read_only("status", *own)
    assert status.returncode == 0 and "no longer loads" not in status.stdout + status.stderr
    (site / MODEL).write_text(MODEL_PY)
    assert load_plugins_like_vllm(site).returncode != 0  # the guard runs again, and refuses
