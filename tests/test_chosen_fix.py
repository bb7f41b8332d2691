"""The fix of a tree the guard refuses with nothing drifted (recorded files stock again, a patched
file only its owner can read, a guard of another patchkit) applies the sets the record chose, never
every covering set: a plain apply widened the choice, and where a set never chosen could not apply
(the user's own edit in its file) it failed after applying another (review45b H-1, M-A)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from helpers import (
    EAGLE_MODEL,
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    make_patch,
    patched_spec,
    write_library,
)

from patchkit.store.state import read_state

OTHER = "vllm/models/other.py"
OTHER_PY = "class Other:\n    pass\n"


@pytest.fixture
def library(tree, scratch) -> Path:
    """Three sets of 0.16.0: `spec`, `model`, and `other`, whose file the user edits."""
    (tree / OTHER).write_text(OTHER_PY)
    root = scratch / "lib"
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="model")
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]}, name="spec")
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {OTHER: OTHER_PY + "# fixed\n"})]}, name="other")
    (root / "library.toml").write_text('order = ["model", "spec", "other"]\n')
    return root


def _guard_fix(said: str) -> list[list[str]]:
    """The commands the fix of status's guard line names, as the user copies them."""
    lines = said.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("guard: "))
    fix = " ".join(lines[at + 1 : at + 3]).partition("fix: ")[2].partition(" set ")[0]
    return [shlex.split(line)[1:] for line in re.findall(r"`(patchkit [^`]+)`", fix)]


def _follow(run, said: str):
    commands = _guard_fix(said)
    assert commands, said
    for words in commands:
        done = run(*words)
    return done


def test_the_fix_for_files_stock_again_applies_the_chosen_set_not_one_that_cannot(run, tree, library):
    """H-1: where a set never chosen cannot apply (the user's edit in its file), the plain apply the
    guard's fix named applied another unasked set, widened the choice and failed with the guard still
    refusing. The fix applies the chosen set alone, and works."""
    on = ("--target", tree, "--patches", library)
    assert run("apply", *on, "--set", "spec").exit_code == 0
    (tree / OTHER).write_text(OTHER_PY.replace("pass", "x = 1"))  # the user's own edit: other cannot apply
    (tree / SPEC).write_text(SPEC_PY)  # pip put the chosen set's file back
    status = run("status", *on)
    assert "the files are stock again" in status.output, status.output
    assert _guard_fix(status.output) == [["apply", *map(str, on), "--set", "spec"]], status.output
    done = _follow(run, status.output)
    assert done.exit_code == 0, done.output
    assert read_state(tree).wanted() == ("spec",)
    assert (tree / MODEL).read_text() == MODEL_PY  # never chosen: left stock
    assert (tree / SPEC).read_text() == patched_spec()
    after = run("status", *on)
    assert "the launch guard refuses" not in after.output, after.output


def _stock_again(tree: Path) -> None:
    (tree / SPEC).write_text(SPEC_PY)


def _owner_only(tree: Path) -> None:
    (tree / SPEC).chmod(0o600)


def _guard_of_another(tree: Path) -> None:
    module = tree / "patchkit_guard.py"
    module.write_text(re.sub(r"\nGUARD_FORMAT = [0-9]+\n", "\nGUARD_FORMAT = 999\n", module.read_text()))


@pytest.mark.parametrize("spoil", [_stock_again, _owner_only, _guard_of_another])
def test_the_guards_fix_keeps_the_recorded_choice(run, tree, library, spoil):
    """M-A: the fix for files stock again, a patched file only its owner can read, or a guard not
    this patchkit's applied every covering set and recorded all as chosen."""
    on = ("--target", tree, "--patches", library)
    assert run("apply", *on, "--set", "spec").exit_code == 0
    spoil(tree)
    status = run("status", *on)
    assert status.exit_code == 1, status.output
    assert all("--set" in words for words in _guard_fix(status.output)), status.output
    done = _follow(run, status.output)
    assert done.exit_code == 0, done.output
    assert read_state(tree).wanted() == ("spec",)
    assert (tree / MODEL).read_text() == MODEL_PY
    assert (tree / OTHER).read_text() == OTHER_PY
    assert run("status", *on).exit_code == 0


def test_a_set_not_tried_is_said_applied_only_when_its_files_are(run, tree, library):
    """H-1: after a failed set, apply called a later set "already applied; it stays applied" from
    its record alone, though pip had put its file back to stock."""
    on = ("--target", tree, "--patches", library, "--no-guard")
    assert run("apply", *on).exit_code == 0
    (tree / MODEL).write_text(EAGLE_MODEL + "# an edit\n")  # model drifts: the apply stops there
    (tree / SPEC).write_text(SPEC_PY)  # spec's file is stock again
    again = run("apply", *on)
    assert again.exit_code == 1, again.output
    said = " ".join(again.output.split())
    assert "not tried: spec, other (other is already applied and stays applied)" in said, said
