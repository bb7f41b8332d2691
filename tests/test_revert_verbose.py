"""revert's count line says "(-v shows each)": the hint works as printed (new-user trial s12, item 1)."""

from __future__ import annotations

from helpers import SPEC_PY, fingerprint, make_patch, run_cli_writing, write_tree

SPEC = "vllm/config/spec.py"


def _applied(tmp_path, scratch):
    tree = write_tree(tmp_path / "site")
    stock = fingerprint(tree)
    diff = tmp_path / "one.diff"
    diff.write_bytes(make_patch(scratch, tree, {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"')}))
    assert run_cli_writing("apply", "--target", tree, "--patch", diff).returncode == 0
    return tree, diff, stock


def test_revert_hint_minus_v_is_accepted_and_shows_each_check(tmp_path, scratch):
    tree, diff, stock = _applied(tmp_path, scratch)
    plain = run_cli_writing("revert", "--target", tree, "--patch", diff, "--dry-run")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    verbose = run_cli_writing("revert", "--target", tree, "--patch", diff, "-v")
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    assert "(-v shows each)" not in verbose.stdout
    assert "check" in verbose.stdout and "result" in verbose.stdout  # the table's header
    assert fingerprint(tree) == stock


def test_revert_without_v_says_the_hint_only_because_v_exists(tmp_path, scratch):
    tree, diff, stock = _applied(tmp_path, scratch)
    done = run_cli_writing("revert", "--target", tree, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    if "(-v shows each)" in done.stdout:
        helped = run_cli_writing("revert", "--help").stdout
        assert "-v, --verbose" in helped
    assert fingerprint(tree) == stock
