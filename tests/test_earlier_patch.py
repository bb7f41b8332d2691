"""A --patch file applied, then edited or moved (new-user 22, W1 and W5): the record's apply of it
is named as such, never "a local edit", and every command a hint gives works."""

from __future__ import annotations

import re

from helpers import MODEL_PY, make_patch

MODEL = "vllm/models/model.py"
FIRST, SECOND = MODEL_PY + "# my tweak\n", MODEL_PY + "# my tweak, v2\n"


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_an_edited_patch_file_names_its_earlier_apply_and_revert_undoes_it(run, tree, scratch, tmp_path):
    mine = tmp_path / "my.patch"
    first, second = make_patch(scratch, tree, {MODEL: FIRST}), make_patch(scratch, tree, {MODEL: SECOND})
    mine.write_bytes(first)
    assert run("apply", "--target", tree, "--patch", mine).exit_code == 0
    mine.write_bytes(second)  # the patch edited after its apply: a diff of the stock file still
    # no vLLM RECORD vouches for the original, and the patch changed: only the record does (--force)
    revert = f"`patchkit revert --target {tree} --patch {mine} --force` undoes it"
    for verb in ("status", "apply"):
        result = run(verb, "--target", tree, "--patch", mine)
        said = one_line(result.output)
        assert result.exit_code == 1, said
        assert "an earlier my.patch (applied " in said and revert in said, said
        assert "local edit" not in said and "fetch" not in said, said
    undone = run("revert", "--target", tree, "--patch", mine, "--force")
    assert undone.exit_code == 0, undone.output
    assert "records no apply" not in undone.output and (tree / MODEL).read_text() == MODEL_PY
    assert run("apply", "--target", tree, "--patch", mine).exit_code == 0
    assert (tree / MODEL).read_text() == SECOND


def test_a_moved_patch_file_is_undone_by_a_revert_that_names_no_file(run, tree, scratch, tmp_path):
    mine = tmp_path / "w5.patch"
    mine.write_bytes(make_patch(scratch, tree, {MODEL: FIRST}))
    assert run("apply", "--target", tree, "--patch", mine).exit_code == 0
    mine.rename(tmp_path / "moved.patch")
    said = one_line(run("status", "--target", tree).output)
    fix = re.search(r"w5\.patch moved since: `patchkit revert --target (\S+) --force` undoes it", said)
    assert fix is not None and fix.group(1) == str(tree), said
    assert "--patch" not in said.split("w5.patch moved since")[1], said
    assert run("revert", "--target", tree, "--force").exit_code == 0
    assert (tree / MODEL).read_text() == MODEL_PY


def test_another_patch_file_over_an_earlier_apply_names_it_not_a_local_edit(run, tree, scratch, tmp_path):
    mine, other = tmp_path / "my.patch", tmp_path / "other.patch"
    mine.write_bytes(make_patch(scratch, tree, {MODEL: MODEL_PY.replace("return x", "return x  # mine")}))
    other.write_bytes(make_patch(scratch, tree, {MODEL: MODEL_PY.replace("return x", "return -x")}))
    assert run("apply", "--target", tree, "--patch", mine).exit_code == 0
    result = run("status", "--target", tree, "--patch", other)
    said = one_line(result.output)
    assert result.exit_code == 1, said
    assert f"{MODEL} differs from stock vLLM 0.16.0: an earlier my.patch (applied " in said, said
    fix = f"`patchkit revert --target {tree} --patch {mine}` undoes it, then `patchkit apply --target {tree} --patch {other}`"
    assert fix in said and "local edit" not in said, said
