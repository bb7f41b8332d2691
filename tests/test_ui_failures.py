"""Output a person reads (issue 22): failures first (file:line, a syntax error's source line and
caret, the command that fixes it, what only follows from it folded into one line), then one
verdict line; the passing checks are one count line unless -v."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import (
    assert_clean_failure,
    make_patch,
    patched_spec,
    run_cli,
    run_cli_read_only,
    write_library,
    write_tree,
)
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model

SPEC = "vllm/config/spec.py"
BROKEN_LINE = '    "deepseek",,\n'  # line 7 of the patched spec: a syntax error at column 16


@pytest.fixture
def library(tmp_path, tree, scratch) -> Path:
    return write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})


@pytest.fixture
def applied(tree, library) -> Path:
    assert_clean_failure(run_cli("apply", "--target", tree, "--patches", library), 0)
    return tree


def break_spec(tree: Path) -> None:
    """The user's edit after apply: a stray comma on line 7."""
    lines = (tree / SPEC).read_text().splitlines(keepends=True)
    assert lines[6] == '    "deepseek",\n'
    lines[6] = BROKEN_LINE
    (tree / SPEC).write_text("".join(lines))


def test_a_passing_verify_is_its_header_and_one_count_line(applied, library):
    done = run_cli_read_only("verify", "--target", applied, "--patches", library)
    assert_clean_failure(done, 0)
    lines = done.stdout.splitlines()
    verdict = r"verify: ok: \d+ checks passed, 1 warning, 1 skipped \(-v shows each\)"
    assert re.fullmatch(verdict, lines[-1]), lines
    # vLLM, version, set, state, the one warning (the test tree has no RECORD), the verdict
    assert len(lines) == 6 and lines[4].startswith(f"{SPEC}: integrity warning: "), lines
    assert not any(" pass " in line or "compiles" in line for line in lines)

    shown = run_cli_read_only("verify", "-v", "--target", applied, "--patches", library)
    assert_clean_failure(shown, 0)
    assert "compiles" in shown.stdout and "-v shows each" not in shown.stdout
    assert shown.stdout.splitlines()[-1].startswith("verify: ok: ")


def test_a_syntax_error_comes_first_with_its_line_its_caret_and_its_fix(applied, library):
    break_spec(applied)
    done = run_cli_read_only("verify", "--target", applied, "--patches", library)
    assert_clean_failure(done, 1)
    lines = done.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"{SPEC}:7: syntax: "))
    assert lines[first + 1] == "    " + BROKEN_LINE.rstrip()
    caret = lines[first + 2]
    assert caret.strip() == "^" and caret.index("^") == 4 + BROKEN_LINE.index(",,") + 1, lines
    also = lines[first + 3]
    # the drift, the integrity check, the names check and the guard all follow from the edit: one line
    assert also.startswith("  also: drifted") and "integrity" in also and "names" in also, lines
    assert "the launch guard refuses this tree" in also
    fix = lines[first + 4]
    assert fix.startswith(f"  fix: `patchkit revert --target {applied} ") and "--force`" in fix, lines
    assert sum(line.startswith("  fix: ") for line in lines) == 1, lines  # one fix, not one per finding
    assert re.fullmatch(r"verify: FAILED: 1 of \d+ checks failed, \d+ passed.*", lines[-1]), lines


def test_quiet_still_says_what_failed_on_stderr(applied, library):
    break_spec(applied)
    done = run_cli_read_only("verify", "-q", "--target", applied, "--patches", library)
    assert_clean_failure(done, 1)
    assert done.stdout == ""
    assert f"{SPEC}:7: syntax: " in done.stderr and "verify: FAILED" in done.stderr


def test_status_names_the_drifted_file_with_its_fix_then_its_verdict(applied, library):
    (applied / SPEC).write_text((applied / SPEC).read_text() + "# an edit\n")
    done = run_cli_read_only("status", "--target", applied, "--patches", library)
    assert_clean_failure(done, 1)
    lines = done.stdout.splitlines()
    drifted = lines.index(f"{SPEC}: drifted: edited after patchkit patched it")
    assert lines[drifted + 1] == "  also: the launch guard refuses this tree"  # it refuses because of the edit
    fix = lines[drifted + 2]
    assert fix.startswith(f"  fix: `patchkit revert --target {applied} ") and "--force`" in fix, lines
    assert (
        lines[-1] == "status: FAILED: applied: 1 of 1 patch applied; 1 file drifted; the launch guard refuses the tree"
    )
    assert "refuses" not in done.stderr  # said once, on stdout


def test_status_of_a_healthy_tree_is_a_line_per_patch_and_a_verdict(applied, library):
    done = run_cli_read_only("status", "--target", applied, "--patches", library)
    assert_clean_failure(done, 0)
    lines = done.stdout.splitlines()
    assert lines[-2].split() == ["applied", "0001-change.patch"], lines
    assert lines[-1] == "status: applied: 1 of 1 patch applied"


def test_apply_refusing_a_patch_that_breaks_the_syntax_shows_where(tree, tmp_path, scratch):
    broken = patched_spec().replace('    "deepseek",\n', BROKEN_LINE)
    library = write_library(tmp_path / "bad", {"0.16.0": [make_patch(scratch, tree, {SPEC: broken})]})
    done = run_cli("apply", "--target", tree, "--patches", library)
    assert_clean_failure(done, 1)
    lines = done.stdout.splitlines()
    first = lines.index(f"{SPEC}:7: syntax: invalid syntax")
    assert lines[first + 1] == "    " + BROKEN_LINE.rstrip() and lines[first + 2].strip() == "^"
    # pyflakes cannot read it either: folded, not a row of its own, and said as a check
    assert lines[first + 3] == "  also: the names check fails on it too"
    assert lines[first + 4] == (
        f"  fix: nothing is written (apply refuses this); `patchkit diff --target {tree} --patches {library}` "
        "shows the change that breaks it: report the library's series"
    )
    assert lines[first + 5].startswith(f"{SPEC}: integrity warning: not verifiable"), lines  # its own cause
    assert re.fullmatch(r"checks   1 of \d+ checks failed, \d+ passed.*", lines[first + 6]), lines


def test_an_adhoc_patch_that_breaks_the_syntax_is_the_patch_to_fix(tree, tmp_path, scratch):
    diff = tmp_path / "mine.patch"
    diff.write_bytes(make_patch(scratch, tree, {SPEC: patched_spec().replace('    "deepseek",\n', BROKEN_LINE)}))
    done = run_cli("apply", "--dry-run", "--target", tree, "--patch", diff)
    assert_clean_failure(done, 1)
    assert f"  fix: nothing is written (apply refuses this): fix the patch ({diff})" in done.stdout.splitlines()


def test_preflight_shows_its_failures_then_its_verdict(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    model, drafter = write_model(tmp_path / "m", DEEPSEEK_V3), write_model(tmp_path / "d", DRAFTER)
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--", *serve(model, drafter)
    )
    assert_clean_failure(done, 1)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("tree-state: the eagle3 series is not applied"), lines
    fixes = [line for line in lines if line.startswith("  fix")]  # the failures apply settles: its fix once
    assert len(fixes) == 1 and fixes[0].startswith("  fix (all 3 above): run `patchkit apply"), lines
    assert re.fullmatch(r"preflight: FAILED: (\d+) of (\d+) checks failed, \d+ passed \(-v shows each\)", lines[-1])
    assert not any(" pass " in line for line in lines)


def test_status_of_an_upstream_regression_says_it_once_with_its_own_fix(tmp_path, library):
    broken = write_tree(tmp_path / "up", "0.19.0", {SPEC: patched_spec().replace('    "deepseek",\n', BROKEN_LINE)})
    done = run_cli_read_only("status", "--target", broken, "--patches", library)
    assert_clean_failure(done, 1)
    lines = done.stdout.splitlines()
    first = lines.index(f"{SPEC}:7: syntax: invalid syntax")
    assert lines[first + 3] == "  also: the names check fails on it too"
    assert (
        lines[first + 4] == "  fix: nothing to apply: vLLM changed what the set checks; report the upstream regression"
    )
    assert lines[-1].startswith("status: FAILED: upstream") and lines[-1].endswith("upstream regression")
    assert "apply refuses" not in done.stdout and "error:" not in done.stderr  # not a dry run's fix; said once
