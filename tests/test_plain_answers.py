"""Answers a person reads (issue 22, words28): each says what the command it names will do, quotes
what the user typed, and ends with a total."""

from __future__ import annotations

import re
import shlex

from helpers import MODEL_PY, make_patch, patched_spec, run_cli, snapshot, write_library
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model

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


def test_a_parser_refusal_quotes_the_word_typed_and_how_to_split_it(tmp_path):
    # new-user 20 4c / 21 5: `"--speculative-config {…}"` as one word was refused as
    # `--speculative-config {"method":"eagle3","model":" {"/deepseek-v3…` (cut at a dot, the next word
    # taken in): the rewritten words, not the word typed
    tree, library = write_eagle3_setup(tmp_path)
    model = write_model(tmp_path / "dsv3", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "deepseek-v3.1-eagle3", DRAFTER)
    *launch, option, value = serve(model, drafter)
    one_word = f"{option} {value}"
    args = ("preflight", "--target", tree, "--patches", library, "--no-import", "--")
    done = run_cli(*args, *launch, one_word, "--enable-auto-tool-choice")
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"unrecognized arguments: {shlex.quote(one_word)}" in said, said
    fix = re.search(r"quote the value alone, `([^`]*)`", said)
    assert fix and shlex.split(fix.group(1)) == [option, value], said
    assert run_cli(*args, *launch, *shlex.split(fix.group(1))).returncode != 2
