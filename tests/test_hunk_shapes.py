"""Every hunk shape is judged applied after apply and not-applied after revert, by status, verify
and the launch guard alike (issue 23 follow-up: a hunk appending at end of file read as not-applied)."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import pytest
from helpers import cli_runner, examples, make_patch, snapshot, write_library, write_tree
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from patchkit.base.enums import StepState
from patchkit.engine.guard import launch_refusal
from patchkit.series import dry_run
from patchkit.series.patchfile import parse_patch, read_patch
from patchkit.series.plan import View, plan_apply
from patchkit.store.state import read_state

FILE = "vllm/shape.py"
BODY = "".join(f"line_{i} = {i}\n" for i in range(12))

# name -> (stock content, patched content): each a shape the judgement must get right
SHAPES = {
    "append-at-end": (BODY, BODY + "extra_a = 1\nextra_b = 2\n"),
    "insert-at-start": (BODY, "header_a = 1\nheader_b = 2\n" + BODY),
    "no-trailing-newline": (BODY + "last = 1", BODY + "last = 1\nextra = 2"),
    "append-without-newline": (BODY + "last = 1", BODY + "last = 1\nextra = 2\n"),
    "pure-deletion": (BODY, BODY.replace("line_5 = 5\nline_6 = 6\n", "")),
    "delete-at-end": (BODY, BODY.replace("line_10 = 10\nline_11 = 11\n", "")),
    "added-file": (None, "new_a = 1\nnew_b = 2\n"),
    "append-repeats-context": (BODY, BODY + "line_9 = 9\nline_10 = 10\nline_11 = 11\n"),
    "insert-repeats-context": (BODY, BODY.replace("line_6 = 6\n", "line_6 = 6\nline_4 = 4\nline_5 = 5\nline_6 = 6\n")),
}


def _tree_and_library(tmp_path: Path, stock: str | None, patched: str) -> tuple[Path, Path]:
    files = {"vllm/other.py": "x = 1\n"} if stock is None else {FILE: stock}
    tree = write_tree(tmp_path / "site", files=files)
    patch = make_patch(tmp_path, tree, {FILE: patched})
    return tree, write_library(tmp_path / "lib", {"0.16.0": [patch]}, upstream=None)


def _state(run, command: str, tree: Path, library: Path) -> tuple[str, int]:
    result = run(command, "--target", tree, "--patches", library, "--format", "json")
    return json.loads(result.stdout)["state"], result.exit_code


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_hunk_shape_reads_applied_after_apply_and_not_applied_after_revert(tmp_path, shape):
    stock, patched = SHAPES[shape]
    tree, library = _tree_and_library(tmp_path, stock, patched)
    before = snapshot(tree)
    run = cli_runner()
    assert _state(run, "status", tree, library) == ("not-applied", 0)

    applied = run("apply", "--target", tree, "--patches", library)
    assert applied.exit_code == 0, applied.output
    assert (tree / FILE).read_text() == patched
    assert _state(run, "status", tree, library) == ("applied", 0)
    assert _state(run, "verify", tree, library) == ("applied", 0)
    assert launch_refusal(tree, read_state(tree)) == []
    again = run("apply", "--target", tree, "--patches", library)
    assert again.exit_code == 0, again.output
    assert (tree / FILE).read_text() == patched  # nothing applied twice

    reverted = run("revert", "--target", tree, "--patches", library)
    assert reverted.exit_code == 0, reverted.output
    assert snapshot(tree) == before
    assert _state(run, "status", tree, library) == ("not-applied", 0)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_plan_alone_judges_each_shape_without_a_record(tmp_path, shape):
    """A tree patched by hand (or by a wheel: no record) is judged from its files alone."""
    stock, patched = SHAPES[shape]
    tree, library = _tree_and_library(tmp_path, stock, patched)
    patch = read_patch(library / "demo" / "0.16.0" / "0001-change.patch")
    assert dry_run(tree, [patch]).steps[0].state == StepState.WILL_CHANGE
    (tree / FILE).write_text(patched)
    assert dry_run(tree, [patch]).steps[0].state == StepState.ALREADY_APPLIED


def _diff(stock: list[str], patched: list[str]) -> bytes:
    """A unified diff (3 lines of context, as git writes) of FILE from `stock` to `patched`."""
    lines = difflib.unified_diff(stock, patched, f"a/{FILE}", f"b/{FILE}", lineterm="\n")
    return "".join(lines).encode()


@st.composite
def _edits(draw) -> tuple[list[str], list[str]]:
    """A stock file of distinct lines and one edit of it: lines added, removed or replaced anywhere
    (at the start, at the end), the added lines new or repeating lines the file has."""
    stock = [f"line_{i} = {i}\n" for i in range(draw(st.integers(1, 14)))]
    start = draw(st.integers(0, len(stock)))
    end = draw(st.integers(start, min(len(stock), start + 4)))
    new_line = st.integers(0, 99).map(lambda i: f"new_{i} = {i}\n")
    added = draw(st.lists(new_line | st.sampled_from(stock), max_size=4, unique=True))
    assume(stock[start:end] != added and len(stock) - (end - start) + len(added) > 0)
    return stock, stock[:start] + added + stock[end:]


def _also_a_diff_of(lines: list[str], diff: bytes) -> bool:
    """Whether the one-hunk `diff` is, line numbers and file ends included, a diff made from `lines`
    too: its old lines stand where its header says, and where it has under 3 lines of context on
    a side (difflib's -U3) that side is the file's start or end."""
    header = re.search(rb"^@@ -(\d+)(?:,\d+)? ", diff, re.M)
    assert header is not None and diff.count(b"\n@@ ") == 1, diff
    body = diff[header.end() :].split(b"\n", 1)[1].decode().splitlines(keepends=True)
    source = [line[1:] for line in body if line[:1] in " -"]
    kinds = "".join(line[:1] for line in body)
    lead, trail = len(kinds) - len(kinds.lstrip(" ")), len(kinds) - len(kinds.rstrip(" "))
    start = int(header.group(1)) - 1
    return (
        lines[start : start + len(source)] == source
        and (lead >= 3 or start == 0)
        and (trail >= 3 or start + len(source) == len(lines))
    )


# lines added at the top that repeat the context after them: the patched file is also a stock the same
# patch applies to at its own lines (hypothesis found it; it is one of the ambiguous edits below)
AT_TOP = [f"line_{i} = {i}\n" for i in range(4)]


@settings(max_examples=examples(150), deadline=None)
@given(_edits())
@example((AT_TOP, AT_TOP[:3] + AT_TOP))
def test_any_edit_reads_will_change_on_stock_and_applied_once_made(edit):
    stock, patched = edit
    diff = _diff(stock, patched)
    patch = parse_patch(diff, "shape.patch")
    root = Path("/nonexistent")  # the view holds every file the patch names
    fresh = plan_apply(root, [patch], View.holding(root, {FILE: "".join(stock).encode()}))
    assert fresh.steps[0].state == StepState.WILL_CHANGE
    assert fresh.content(FILE) == "".join(patched).encode()
    made = plan_apply(root, [patch], View.holding(root, {FILE: "".join(patched).encode()}))
    if _also_a_diff_of(patched, diff):
        # the same patch made on a stock that reads as `patched` adds its lines again, and the file and
        # patch are the same either way: read as git apply and patch read it (it applies at its own
        # lines); patchkit's record of its own apply is what tells them apart
        assert made.steps[0].state == StepState.WILL_CHANGE, (stock, patched)
    else:
        assert made.steps[0].state == StepState.ALREADY_APPLIED, (stock, patched)
