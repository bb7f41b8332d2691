"""Answers a person reads (issue 22, words28): each says what the command it names will do, quotes
what the user typed, and ends with a total."""

from __future__ import annotations

import re

from helpers import MODEL_PY, make_patch, patched_spec, snapshot, write_library

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"


def _two_file_library(tmp_path, tree, scratch):
    patches = [
        make_patch(scratch, tree, {SPEC: patched_spec()}, "Description: accept deepseek\n"),
        make_patch(scratch, tree, {MODEL: MODEL_PY + "# eagle3\n"}, "Description: eagle3 interface\n"),
    ]
    return write_library(tmp_path / "lib", {"0.16.0": patches})


def test_the_guards_fix_for_a_file_stock_again_says_apply_patches_it_again(run, tmp_path, tree, scratch):
    # new-user 20 4d / 21 4: one patched file put back to stock, and the fix said apply "records the
    # tree as it is, or drops what no longer applies", where it patches that file again
    library = _two_file_library(tmp_path, tree, scratch)
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    (tree / MODEL).write_bytes(stock[MODEL])
    status = run("status", "--target", tree, "--patches", library)
    assert status.exit_code == 1, status.output
    said = " ".join(status.output.split())
    assert f"{MODEL} holds its stock bytes again" in said, said
    fix = re.search(r"fix: run `patchkit ([^`]*)` \(([^)]*)\)", said)
    assert fix and fix.group(2) == "it patches that file again", said
    assert "records the tree as it is" not in said and "no longer applies" not in said, said
    assert run(*fix.group(1).split()).exit_code == 0
    assert run("status", "--target", tree, "--patches", library).exit_code == 0
    assert (tree / MODEL).read_text() == MODEL_PY + "# eagle3\n" and (tree / SPEC).read_text() == patched_spec()
