"""A release whose stock files (each as its dist-info RECORD lists it) already hold a set's change
(upstream merged a fix that matches the patch): the set is upstream on that tree. status never calls
it applied, verify never calls the RECORD-matching files a local edit, and apply and revert leave
them alone (audit23 W1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import (
    BEHAVIOUR_JUDGE,
    EAGLE_MODEL,
    FAILING_JUDGE,
    MODEL,
    MODEL_PY,
    PARSER,
    PARSER_FIXED,
    SPEC,
    Releases,
    judged_library,
    patched_spec,
    pip_install,
    spec_and_model,
    verify,
)

from patchkit.store.state import read_state


@pytest.fixture
def fixed(tmp_path) -> Path:
    """vLLM "0.17.0" as pip installs it: both changes are in its own files, its RECORD true."""
    site = tmp_path / "fixed"
    pip_install(site, "0.17.0", {SPEC: patched_spec(), MODEL: EAGLE_MODEL})
    return site


def test_status_and_verify_say_upstream_on_stock_files_that_hold_the_change(run, fixed, open_library):
    status = run("status", "--target", fixed, "--patches", open_library, "--format", "json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["state"] == "upstream"

    verify = run("verify", "--target", fixed, "--patches", open_library)
    assert verify.exit_code == 0, verify.output
    assert "a local edit" not in verify.output
    assert "the stock files of vLLM 0.17.0 already hold this set's change" in verify.output
    assert "upstream may have fixed this in 0.17.0: close the set's range" in verify.output


def test_apply_and_revert_leave_the_stock_files_alone(run, fixed, open_library):
    stock = spec_and_model(fixed)
    applied = run("apply", "--target", fixed, "--patches", open_library)
    assert applied.exit_code == 0, applied.output
    assert "already hold this set's change" in applied.output
    assert "no record of it" not in applied.output and "launch guard installed" not in applied.output
    assert spec_and_model(fixed) == stock and not read_state(fixed).entries

    reverted = run("revert", "--target", fixed, "--patches", open_library)
    assert reverted.exit_code == 0, reverted.output
    assert spec_and_model(fixed) == stock  # RECORD's files: never reverse-applied


def test_revert_without_a_record_reverses_only_what_is_not_stock(run, tmp_path, open_library):
    """0001 is in the release's own files, 0002 was applied by hand: only 0002 is undone."""
    site = tmp_path / "half"
    pip_install(site, "0.17.0", {SPEC: patched_spec(), MODEL: MODEL_PY})
    (site / MODEL).write_text(EAGLE_MODEL)  # by hand, after the install: no longer RECORD's

    verify = run("verify", "--target", site, "--patches", open_library, "-v")
    assert "a local edit" not in verify.output  # the spec file is RECORD's own

    reverted = run("revert", "--target", site, "--patches", open_library)
    assert reverted.exit_code == 0, reverted.output
    assert (site / MODEL).read_text() == MODEL_PY
    assert (site / SPEC).read_text() == patched_spec()  # as RECORD lists it


@pytest.mark.parametrize(("judge", "verdict"), [(BEHAVIOUR_JUDGE, "passes"), (FAILING_JUDGE, "fails")])
def test_verify_of_a_release_holding_the_change_runs_the_behaviour_test_on_its_stock_files(
    tmp_path, scratch, monkeypatch, judge, verdict
):
    library = judged_library(scratch, judge)
    Releases(tmp_path / "index", monkeypatch).add("0.99.0", {PARSER: PARSER_FIXED})
    done = verify(library, "0.99.0")
    assert done.exit_code == 1, done.output
    [release] = json.loads(done.stdout)["releases"]
    assert (release["outcome"], release["stock_behaviour"]) == ("check-failed", verdict)
    assert release["detail"].startswith("the stock files of 0.99.0 already hold this set's change (0001-change.patch)")
    if verdict == "passes":
        assert release["hint"] == "upstream may have fixed this in 0.99.0: close the set's range"
    else:
        assert "fail the set's behaviour test" in release["detail"]


def test_a_local_label_build_whose_record_holds_the_change_is_not_called_the_stock_files(run, tmp_path, open_library):
    """Review 15 L3: a wheel built with `patchkit wheel --local-label corp1`, its patchkit.json
    stripped, installed: its RECORD lists the patched files, and status called them "the stock files
    of vLLM 0.16.0". A build with a local label of its own proves no release's stock files."""
    site = tmp_path / "corp"
    pip_install(site, "0.16.0+corp1", {SPEC: patched_spec(), MODEL: EAGLE_MODEL})
    for command in ("status", "apply"):
        done = run(command, "--target", site, "--patches", open_library)
        said = " ".join(done.output.split())
        assert done.exit_code == 0, done.output
        assert "the stock files of" not in said, said
        assert "this build of vLLM 0.16.0 (local label +corp1) already hold this set's change" in said, said
        assert "patched before it was built (`patchkit wheel --local-label`?), or upstream's" in said, said
