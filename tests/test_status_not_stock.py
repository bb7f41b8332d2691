"""A tree never applied with a local edit outside every hunk of a file the set patches (new-user 22,
W3): status names the integrity finding apply refuses on, with its fix, and fails as apply does;
never `not-applied` with `apply` as the next step."""

from __future__ import annotations

import json

from helpers import MODEL_PY, SPEC_PY, make_patch, patched_spec, record_rows, write_library

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_status_names_a_file_apply_refuses_as_not_stock(run, tmp_path, tree, scratch):
    patches = [
        make_patch(scratch, tree, {SPEC: patched_spec()}, "Description: accept deepseek\n"),
        make_patch(scratch, tree, {MODEL: MODEL_PY + "# eagle3\n"}, "Description: eagle3 interface\n"),
    ]
    library = write_library(tmp_path / "lib", {"0.16.0": patches})
    dist = "vllm-0.16.0.dist-info"
    (tree / dist / "RECORD").write_text(record_rows(tree, dist))  # the stock files, as pip lists them
    (tree / SPEC).write_text("# local\n" + SPEC_PY)  # line 1: outside the hunk, which still applies
    selection = ["--target", tree, "--patches", library]
    applied = run("apply", *selection)
    assert applied.exit_code == 1 and "integrity" in applied.output, applied.output  # what status must foretell
    result = run("status", *selection)
    said = one_line(result.output)
    assert result.exit_code == 1, said
    assert f"{SPEC}: integrity: differs from the stock file in" in said and "apply refuses it" in said, said
    assert "fix: likely causes: " in said and f"--dest {tree} --force`), or pass --force" in said, said
    assert "status: FAILED: not-applied: 0 of 2 patches applied; 1 file(s) not stock" in said, said
    assert "none is applied" not in said, said
    assert SPEC in json.loads(run("status", *selection, "--format", "json").stdout)["not_stock"]


def test_revert_of_an_apply_forced_over_an_edit_says_which_file_is_not_stock(run, tmp_path, tree, scratch):
    patches = [
        make_patch(scratch, tree, {SPEC: patched_spec()}),
        make_patch(scratch, tree, {MODEL: MODEL_PY + "# x\n"}),
    ]
    library = write_library(tmp_path / "lib", {"0.16.0": patches})
    dist = "vllm-0.16.0.dist-info"
    (tree / dist / "RECORD").write_text(record_rows(tree, dist))
    (tree / SPEC).write_text("# local\n" + SPEC_PY)
    selection = ["--target", tree, "--patches", library]
    assert run("apply", *selection, "--force").exit_code == 0
    result = run("revert", *selection)
    said = one_line(result.output)
    assert result.exit_code == 0 and (tree / SPEC).read_text() == "# local\n" + SPEC_PY, said
    assert f"reverted: 2 file(s) restored as before apply (1 not stock: {SPEC})" in said, said
    assert "restored to stock" not in said, said
