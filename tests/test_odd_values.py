"""Values a user may set or type oddly: the transaction's test hook (PATCHKIT_FAULT_AFTER) in a form
it does not take is ignored with a warning, never an internal error; a vLLM version typed in any
spelling PEP 440 holds equal to a release names that release."""

from __future__ import annotations

import pytest
from helpers import run_cli_read_only, run_cli_writing, snapshot
from packaging.version import Version

from patchkit._target.guard import find_problems
from patchkit.engine.guard import is_installed
from patchkit.fetch.cache import normalize_version
from patchkit.store.state import read_state


# "\uff11": a full-width digit, which int() takes and the hook does not
@pytest.mark.parametrize("planned", ["x", "1:bogus", "-1", "2,x", " , 1:raise:exit", "\uff11"])
def test_a_fault_plan_not_of_its_form_is_ignored_with_a_warning(tree, open_library, planned):
    stock = snapshot(tree)
    env = {"PATCHKIT_FAULT_AFTER": planned}
    applied = run_cli_writing("apply", "-q", "--target", tree, "--patches", open_library, env=env)
    assert applied.returncode == 0, applied.stderr
    assert f"PATCHKIT_FAULT_AFTER={planned!r} is ignored: a test hook" in applied.stderr
    assert "unset it" in applied.stderr and "internal error" not in applied.stderr
    assert snapshot(tree) != stock  # applied whole: no fault acted
    status = run_cli_read_only("status", "-q", "--target", tree, "--patches", open_library, env=env)
    assert status.returncode == 0, status.stderr
    assert "is ignored: a test hook" in status.stderr


def test_a_fault_mode_not_of_its_form_ignores_the_plan(tree, open_library):
    env = {"PATCHKIT_FAULT_AFTER": "1", "PATCHKIT_FAULT_MODE": "explode"}
    applied = run_cli_writing("apply", "-q", "--target", tree, "--patches", open_library, env=env)
    assert applied.returncode == 0, applied.stderr
    assert "PATCHKIT_FAULT_MODE='explode'" in applied.stderr


def test_a_fault_plan_of_its_form_still_acts(tree, open_library):
    stock = snapshot(tree)
    env = {"PATCHKIT_FAULT_AFTER": "1"}  # the first step of the commit fails (ENOSPC): rolled back
    applied = run_cli_writing("apply", "-q", "--target", tree, "--patches", open_library, env=env)
    assert applied.returncode not in (0, 70), applied.stderr
    assert "ignored" not in applied.stderr
    assert snapshot(tree) == stock


@pytest.mark.parametrize(
    ("typed", "release"),
    [("0.16.0.0", "0.16.0"), ("0.16.0.0.0", "0.16.0"), ("0.16.0.1.0", "0.16.0.1"), ("1!0.16.0.0", "1!0.16.0")],
)
def test_a_typed_version_with_trailing_zeros_is_the_release_of_three_numbers(typed, release):
    assert normalize_version(typed) == release
    assert Version(normalize_version(typed)) == Version(typed)


@pytest.mark.parametrize("typed", ["0.16", "0.16.0.0", "v0.16.0"])
def test_apply_with_a_version_equal_to_the_trees_records_the_trees_spelling_and_installs_the_guard(
    tree, open_library, typed
):
    applied = run_cli_writing("apply", "--target", tree, "--patches", open_library, "--vllm-version", typed)
    assert applied.returncode == 0, applied.stderr
    assert "no guard installed" not in applied.stderr
    assert [e.vllm_version for e in read_state(tree).entries] == ["0.16.0"]  # the dist-info's, as the guard reads
    assert is_installed(tree) and find_problems(str(tree)) == []
    status = run_cli_read_only("status", "--target", tree, "--patches", open_library, "--vllm-version", typed)
    assert status.returncode == 0, status.stderr
    assert "version  0.16.0  (from --vllm-version)" in status.stdout
