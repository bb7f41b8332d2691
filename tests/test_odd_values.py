"""Values a user may set or type oddly: the transaction's test hook (PATCHKIT_FAULT_AFTER) in a form
it does not take is ignored with a warning, never an internal error; a vLLM version typed in any
spelling PEP 440 holds equal to a release names that release."""

from __future__ import annotations

import pytest
from helpers import run_cli, snapshot


# "\uff11": a full-width digit, which int() takes and the hook does not
@pytest.mark.parametrize("planned", ["x", "1:bogus", "-1", "2,x", " , 1:raise:exit", "\uff11"])
def test_a_fault_plan_not_of_its_form_is_ignored_with_a_warning(tree, open_library, planned):
    stock = snapshot(tree)
    env = {"PATCHKIT_FAULT_AFTER": planned}
    applied = run_cli("apply", "-q", "--target", tree, "--patches", open_library, env=env)
    assert applied.returncode == 0, applied.stderr
    assert f"PATCHKIT_FAULT_AFTER={planned!r} is ignored: a test hook" in applied.stderr
    assert "unset it" in applied.stderr and "internal error" not in applied.stderr
    assert snapshot(tree) != stock  # applied whole: no fault acted
    status = run_cli("status", "-q", "--target", tree, "--patches", open_library, env=env)
    assert status.returncode == 0, status.stderr
    assert "is ignored: a test hook" in status.stderr


def test_a_fault_mode_not_of_its_form_ignores_the_plan(tree, open_library):
    env = {"PATCHKIT_FAULT_AFTER": "1", "PATCHKIT_FAULT_MODE": "explode"}
    applied = run_cli("apply", "-q", "--target", tree, "--patches", open_library, env=env)
    assert applied.returncode == 0, applied.stderr
    assert "PATCHKIT_FAULT_MODE='explode'" in applied.stderr


def test_a_fault_plan_of_its_form_still_acts(tree, open_library):
    stock = snapshot(tree)
    env = {"PATCHKIT_FAULT_AFTER": "1"}  # the first step of the commit fails (ENOSPC): rolled back
    applied = run_cli("apply", "-q", "--target", tree, "--patches", open_library, env=env)
    assert applied.returncode not in (0, 70), applied.stderr
    assert "ignored" not in applied.stderr
    assert snapshot(tree) == stock
