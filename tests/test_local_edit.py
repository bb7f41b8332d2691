"""A tree never applied, with a local edit inside a patch's hunk (new-user 20, 1): every command says
the series does not apply because the file differs from stock, with a fix that works; none says
"partly applied"; revert finds nothing to revert and writes nothing."""

from __future__ import annotations

import json
import re

import pytest
from helpers import MODEL_PY, SPEC_PY, make_patch, patched_spec, snapshot, write_library

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
EDITED = SPEC_PY.replace('    "qwen",\n', '    "qwen", "mymodel",\n')  # a model added by hand, inside the hunk


@pytest.fixture
def library(tmp_path, tree, scratch):
    patches = [
        make_patch(scratch, tree, {SPEC: patched_spec()}, "Description: accept deepseek\n"),
        make_patch(scratch, tree, {MODEL: MODEL_PY + "# eagle3\n"}, "Description: eagle3 interface\n"),
    ]
    return write_library(tmp_path / "lib", {"0.16.0": patches})


@pytest.fixture
def edited(tree, library):  # the library first: its patches are made from the stock tree
    assert EDITED != SPEC_PY
    (tree / SPEC).write_text(EDITED)
    return tree


def args(tree, library, *extra):
    return [*extra, "--target", tree, "--patches", library]


def test_status_says_the_file_differs_from_stock_not_partly_applied(run, edited, library):
    data = json.loads(run("status", *args(edited, library), "--format", "json").stdout)
    assert data["state"] == "conflict"
    assert [p["state"] for p in data["patches"]] == ["conflict", "not-applied"]
    result = run("status", *args(edited, library))
    assert result.exit_code == 1
    assert "partial" not in result.output and "partly" not in result.output, result.output
    assert f"{SPEC} differs from stock vLLM 0.16.0" in result.output
    fix = rf"fix: copy your edit .* `patchkit fetch [^`]*0\.16\.0 --dest {edited} --force` .*, then `patchkit apply"
    assert re.search(fix, " ".join(result.output.split())), result.output


def test_verify_offers_no_force_that_cannot_apply_a_conflict(run, edited, library):
    result = run("verify", *args(edited, library))
    assert result.exit_code == 1
    assert "partial" not in result.output and "--force" in result.output
    assert "apply --target" not in result.output.split("--force")[0].rsplit("fix:", 1)[-1]
    assert "--force` patches it" not in " ".join(result.output.split())


def test_apply_names_the_edited_file_and_the_fix(run, edited, library):
    before = snapshot(edited)
    result = run("apply", *args(edited, library))
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert f"hint: {SPEC} differs from stock vLLM 0.16.0" in said, said
    assert re.search(rf"`patchkit fetch [^`]*0\.16\.0 --dest {edited} --force`.*then `patchkit apply", said), said
    assert snapshot(edited) == before


def test_revert_of_a_tree_never_applied_has_nothing_to_revert_and_writes_nothing(run, edited, library):
    before = snapshot(edited)
    result = run("revert", *args(edited, library))
    assert result.exit_code == 0, result.output
    assert "nothing to revert" in result.output and "lost" not in result.output
    assert not (edited / ".patchkit").exists()
    assert snapshot(edited) == before


def test_a_partly_applied_series_is_still_partial(run, tree, library):
    """The other side: one patch applied and the other's file edited is partly applied."""
    (tree / SPEC).write_text(patched_spec())
    (tree / MODEL).write_text(MODEL_PY.replace("class Model", "class Model  # edited", 1))
    data = json.loads(run("status", *args(tree, library), "--format", "json").stdout)
    assert data["state"] == "partial", data
