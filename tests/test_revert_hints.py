"""Every hint a refused `revert` prints works when copied as printed, from any directory, and
following them never loops (review 5 guard M3 and L3): stacked sets, an ad-hoc one that creates
a file under a library set (or another ad-hoc set) that changes the same file again."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    fingerprint,
    make_patch,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    write_library,
    write_tree,
)

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
CREATED = "vllm/extras/added.py"


def _setup(tmp_path: Path, scratch: Path, top: str) -> tuple[Path, list[str], Path]:
    """A tree with an ad-hoc set (a changed SPEC, a created module) and on top of it `top`: the
    library's set or another ad-hoc patch, changing SPEC again. The tree, the selection the user
    gives, and a directory unrelated to both (where the hints are run)."""
    tree = write_tree(tmp_path / "site")
    stock = fingerprint(tree)
    first_spec = SPEC_PY.replace('"qwen"', '"deepseek"')
    patches = tmp_path / "my patches"
    patches.mkdir()
    adhoc = patches / "first.diff"
    adhoc.write_bytes(make_patch(scratch, tree, {SPEC: first_spec, CREATED: "ADDED = 1\n"}))
    assert run_cli_writing("apply", "--target", tree, "--patch", adhoc).returncode == 0
    second = {SPEC: first_spec + "# second\n", MODEL: MODEL_PY.replace("return x", "return x * 3")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if top == "library":
        library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, second)]})
        selection = ["--patches", str(library)]
    else:
        other = patches / "second.diff"
        other.write_bytes(make_patch(scratch, tree, second))
        selection = ["--patch", str(other)]
    applied = run_cli_writing("apply", "--target", tree, *selection)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert fingerprint(tree) != stock
    return tree, selection if top == "library" else [], elsewhere


def _commands(said: str) -> list[list[str]]:
    """The patchkit commands a message names, in order (`patchkit ...` in backticks)."""
    return [shlex.split(c)[1:] for c in re.findall(r"`(patchkit [^`]*)`", said)]


@pytest.mark.parametrize("top", ["library", "adhoc"])
@pytest.mark.parametrize("start", ["all", "first"])
def test_following_reverts_hints_as_printed_reverts_every_set_without_a_loop(tmp_path, scratch, top, start):
    tree, selection, elsewhere = _setup(tmp_path, scratch, top)
    first = ["--patch", str(tmp_path / "my patches" / "first.diff")]
    todo = [["revert", "--target", str(tree), *selection, *(first if start == "first" else [])]]
    ran: list[list[str]] = []
    seen: list[tuple[list[str], object]] = []  # a command run again on the same tree: a loop
    while todo:
        command = todo.pop(0)
        assert (command, fingerprint(tree)) not in seen, f"the hints loop: {command} again after {ran}"
        seen.append((command, fingerprint(tree)))
        ran.append(command)
        done = run_cli_judged(*command, cwd=elsewhere)
        if done.returncode != 0:
            named = _commands(done.stdout + done.stderr)
            assert named, done.stdout + done.stderr
            todo = named  # what it says to do, in the order it says
    assert not (tree / CREATED).exists() and not (tree / ".patchkit").exists(), ran
    assert (tree / SPEC).read_text() == SPEC_PY and (tree / MODEL).read_text() == MODEL_PY, ran
    assert len(ran) <= 4, ran


def test_the_patch_hint_names_the_file_applied_wherever_it_is_run(tmp_path, scratch):
    """L3: the record's basename named no file from another directory; the path applied from does,
    while that file is still the patch the record names."""
    tree, _selection, elsewhere = _setup(tmp_path, scratch, "adhoc")
    done = run_cli_writing("revert", "--target", tree, cwd=elsewhere)
    assert done.returncode != 0
    assert shlex.quote(str(tmp_path / "my patches" / "first.diff")) in done.stdout + done.stderr, done.stderr
    (tmp_path / "my patches" / "first.diff").write_text("--- moved on\n")
    done = run_cli_writing("revert", "--target", tree, cwd=elsewhere)
    # the patch is no longer at hand: only the record vouches for the originals (words30: --force)
    assert done.returncode == 1 and f"`patchkit revert --target {tree} --force`" in done.stderr, done.stderr
    done = run_cli_writing("revert", "--target", tree, "--force", cwd=elsewhere)
    # the file it created still holds what patchkit wrote: revert removes it and says which recorded
    # patch created it, never a basename made absolute from here
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tree / CREATED).exists()
    # only the record vouches for its bytes: a copy is kept (review 16 H2)
    assert [p.read_text() for p in (tree / ".patchkit/saved").rglob("added.py*")] == ["ADDED = 1\n"]
    assert str(tmp_path / "my patches" / "first.diff") in done.stderr
    assert str(Path(elsewhere) / "first.diff") not in done.stdout + done.stderr


def test_a_fix_for_a_set_the_library_at_hand_lacks_names_the_library_it_came_from(tmp_path, scratch):
    """Review 6 M1: two sets applied from one library, a user's edit to the second's file; status
    with another library at hand (as the guard's `patchkit status` has the installed one) named
    `apply --set two`, which that library cannot do (exit 2). The record keeps the library path."""
    tree = write_tree(tmp_path / "site")
    library = tmp_path / "lib"
    write_library(library, {"0.16.0": [make_patch(scratch, tree, {SPEC: SPEC_PY + "# one\n"})]}, name="one")
    write_library(library, {"0.16.0": [make_patch(scratch, tree, {MODEL: MODEL_PY + "# two\n"})]}, name="two")
    (library / "library.toml").write_text('order = ["one", "two"]\n')
    at_hand = write_library(tmp_path / "other", {"0.16.0": [make_patch(scratch, tree, {SPEC: SPEC_PY + "# one\n"})]})
    applied = run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    (tree / MODEL).write_text(MODEL_PY + "# two\n# the user's edit\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = run_cli_read_only("status", "--target", tree, "--patches", at_hand, cwd=elsewhere)
    assert status.returncode == 1, status.stdout + status.stderr
    fixes = [c for c in _commands(status.stdout + status.stderr) if "two" in c]
    assert fixes, status.stdout + status.stderr
    for command in fixes:  # the revert (keeping the edit), then the apply: each works as printed
        assert str(library) in command, command
        done = run_cli_judged(*command, cwd=elsewhere)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
    assert (tree / MODEL).read_text() == MODEL_PY + "# two\n"
    assert run_cli_read_only("status", "--target", tree, "--patches", library).returncode == 0
