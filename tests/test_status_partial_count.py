"""The overall line of a tree whose only partial state is one set's own (a set with some of its
patches applied, the other sets not applied) said "partial: 0 of 3 set(s) applied": partial, with
nothing applied. The count names the set applied in part (issue 20 residuals, words30 item 6)."""

from __future__ import annotations

import json

from helpers import make_patch, pip_install, write_library

ONE, TWO, THREE = "vllm/one.py", "vllm/two.py", "vllm/three.py"


def test_a_set_applied_in_part_is_counted_so_not_zero_of_n(run, tmp_path, scratch):
    tree = tmp_path / "site"
    pip_install(tree, "0.16.0", {ONE: "A = 1\n", TWO: "B = 1\n", THREE: "C = 1\n"})
    library = scratch / "lib"
    halves = [make_patch(scratch, tree, {ONE: "A = 2\n"}), make_patch(scratch, tree, {TWO: "B = 2\n"})]
    write_library(library, {"0.16.0": halves}, name="halves")
    write_library(library, {"0.16.0": [make_patch(scratch, tree, {THREE: "C = 2\n"})]}, name="third")
    (tree / ONE).write_text("A = 2\n")  # the first of halves' two patches, by hand

    done = run("status", "--target", tree, "--patches", library)
    last = done.output.strip().splitlines()[-1]
    assert done.exit_code == 1, done.output
    assert last.startswith("status: FAILED: partial: 0 of 2 set(s) applied, 1 in part (halves)"), last
    document = json.loads(run("status", "--target", tree, "--patches", library, "--format", "json").stdout)
    assert document["state"] == "partial"
    assert [(s["set"], s["state"]) for s in document["sets"]] == [("halves", "partial"), ("third", "not-applied")]
