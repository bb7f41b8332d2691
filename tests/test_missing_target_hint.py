"""A --target that does not exist gets a next step, not a bare refusal (new-user 22, H5)."""

from __future__ import annotations

from helpers import run_cli_read_only


def test_a_missing_target_says_what_lays_one_out(tmp_path):
    missing = tmp_path / "vful"
    done = run_cli_read_only("status", "--target", missing)
    said = " ".join(done.stderr.split())
    assert done.returncode == 4 and f"error: target directory {missing} does not exist" in said, said
    assert f"hint: check the path; `patchkit fetch VERSION --dest {missing}` lays out a vLLM release" in said, said
