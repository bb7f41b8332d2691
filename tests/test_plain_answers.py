"""Answers a person reads (issue 22, words28): each says what the command it names will do, quotes
what the user typed, and ends with a total."""

from __future__ import annotations

import json
import re
import shlex
import shutil

import pytest
from helpers import MODEL_PY, make_patch, patched_spec, run_cli_judged, snapshot, write_library
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
    applied = run(*fix.group(1).split())
    assert applied.exit_code == 0, applied.output
    # and it says what it did: one patch written, not "applied 2 patch(es): 1 file(s) changed"
    assert "applied 1 patch(es) (1 already there): 1 file(s) changed" in applied.output, applied.output
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
    done = run_cli_judged(*args, *launch, one_word, "--enable-auto-tool-choice")
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"unrecognized arguments: {shlex.quote(one_word)}" in said, said
    assert f"hint: {option} and its value reached vLLM as one word (quoted together): give them as two words" in said
    assert run_cli_judged(*args, *launch, option, value).returncode != 2  # as the hint says


@pytest.mark.parametrize("files_say", [None, "0.16.0", "0.17.1"])
def test_two_dist_infos_are_answered_with_the_one_the_files_or_the_record_name(run, tmp_path, tree, scratch, files_say):
    # new-user 21, 6: "remove the stale dist-info directories or pass --vllm-version" said neither
    # which one the record names nor which one the files are
    library = _two_file_library(tmp_path, tree, scratch)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    if files_say is not None:
        (tree / "vllm" / "_version.py").write_text(f"__version__ = version = {files_say!r}\n")
    stale = tree / "vllm-0.17.1.dist-info"
    stale.mkdir()
    (stale / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.17.1\n")
    status = run("status", "--target", tree, "--patches", library)
    assert status.exit_code == 4, status.output
    said = " ".join(status.output.split())
    kept, gone = ("0.17.1", "0.16.0") if files_say == "0.17.1" else ("0.16.0", "0.17.1")
    witness = "vllm/_version.py says" if files_say else "the tree's record says the patches were applied to"
    assert f"hint: {witness} vLLM {kept} (vllm-{kept}.dist-info" in said, said
    assert f"remove vllm-{gone}.dist-info (pip left it)" in said, said
    shutil.rmtree(tree / f"vllm-{gone}.dist-info")
    assert run("status", "--target", tree, "--patches", library).exit_code == (0 if kept == "0.16.0" else 3)


def test_status_of_a_patch_file_names_it_by_its_file_not_its_record_name(run, tmp_path, tree, scratch):
    # words27 b: `status --patch fix.diff` said `set      adhoc-3e835678ab34`
    diff = tmp_path / "fix.diff"
    diff.write_bytes(make_patch(scratch, tree, {SPEC: patched_spec()}))
    assert run("apply", "--target", tree, "--patch", diff).exit_code == 0
    status = run("status", "--target", tree, "--patch", diff)
    assert status.exit_code == 0 and "adhoc-" not in status.output, status.output
    assert "patch    --patch file fix.diff" in status.output.splitlines(), status.output
    document = json.loads(run("status", "--target", tree, "--patch", diff, "--format", "json").output)
    assert document["patch_files"] == ["fix.diff"] and document["state"] == "applied", document


def test_a_check_failing_on_a_local_edit_names_its_fix_first_when_the_stock_files_are_not_cached(tmp_path):
    # conflict27: with no fetch-cache copy of the stock files, preflight could not judge what the local
    # edit's fix leaves, and the whitelist's fix was its own ("serve it without --speculative-config")
    tree, library = write_eagle3_setup(tmp_path)
    spec = "vllm/config/speculative.py"
    patch = (library / "eagle3" / "0.16.0" / "0001-eagle3.patch").read_text().split(f"diff --git a/{spec}", 1)[1]
    hunk = patch.split("\n@@", 1)[1].split("\ndiff --git", 1)[0].splitlines()[1:]
    context = next(line[1:] for line in hunk if line.startswith((" ", "-")) and line[1:].strip())
    (tree / spec).write_text((tree / spec).read_text().replace(context, context + "  # a local edit", 1))
    launch = serve(write_model(tmp_path / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    args = ("preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *launch)
    done = run_cli_judged(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(done.stdout)
    failed = {f["check"]: f for f in found["findings"] if not f["ok"] and f["result"] == "fail"}
    assert found["tree_state"] == "conflict" and "whitelist" in failed, failed
    local_edit = failed["tree-state"]["fix"]
    assert local_edit.startswith("keep your edit as .mine, put the stock file back, apply: `cp -p"), local_edit
    for check, finding in failed.items():
        assert finding["fix"].startswith(local_edit), (check, finding)
    assert failed["whitelist"]["fix"].startswith(f"{local_edit}; if it still fails: "), failed["whitelist"]
