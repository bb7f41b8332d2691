"""`patchkit wheel` of a library of several sets (issue 23): one wheel with every covering set
applied (or each --set), its label naming every set, its patchkit.json each set and its patches;
status, verify and the launch guard on an install of it agree with each set's state."""

from __future__ import annotations

import json
import zipfile

import pytest
from helpers import MODEL_PY, SPEC_PY, TAGS, make_patch, patched_spec, write_library, write_tree, write_wheel
from packaging.version import Version
from test_wheel import install

from patchkit._target.guard import find_problems
from patchkit.distinfo.provenance import read_provenance
from patchkit.wheel.label import LABEL_LIMIT, default_label

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
MODEL_FIXED = MODEL_PY.replace("SupportsPP):", "SupportsPP):  # fixed\n")
LABEL = "patchkit.spec.model.fix"  # packaging spells model-fix's `-` as `.`


@pytest.fixture
def library(tmp_path):
    """`spec` and `model-fix` patch 0.16.0 (a file each, in that order), `old` is upstream from 0.16.0."""
    tree = write_tree(tmp_path / "stock")
    root = tmp_path / "lib"
    write_library(root, {"0.16.0": [make_patch(tmp_path, tree, {SPEC: patched_spec()})]}, name="spec")
    write_library(root, {"0.16.0": [make_patch(tmp_path, tree, {MODEL: MODEL_FIXED})]}, name="model-fix")
    write_library(root, {"0.15.0": [make_patch(tmp_path, tree, {MODEL: MODEL_FIXED})]}, name="old", upstream=">=0.16.0")
    (root / "library.toml").write_text('order = ["spec", "model-fix"]\n')
    return root


def built(run, tmp_path, library, *args):
    done = run("wheel", write_wheel(tmp_path / "in"), "--out", tmp_path / "out", "--patches", library, *args)
    assert done.exit_code == 0, done.output
    return done


def test_one_wheel_holds_every_covering_set_and_its_label_names_each(run, tmp_path, library):
    done = built(run, tmp_path, library, "--format", "json")
    document = json.loads(done.stdout)
    assert document["label"] == LABEL and document["version"] == f"0.16.0+{LABEL}"
    assert document["set"] is None and document["sets"] == ["spec", "model-fix"]
    assert str(Version(document["version"])) == document["version"]  # PEP 440, as packaging spells it
    wheel = tmp_path / "out" / f"vllm-0.16.0+{LABEL}-{TAGS}.whl"
    assert document["wheel"] == str(wheel)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    dist = f"vllm-0.16.0+{LABEL}.dist-info"
    assert (
        f"{dist}/patchkit/spec/0001-change.patch" in names and f"{dist}/patchkit/model-fix/0001-change.patch" in names
    )

    site = install(wheel, tmp_path / "prefix")
    assert (site / SPEC).read_text() == patched_spec() and (site / MODEL).read_text() == MODEL_FIXED
    provenance = read_provenance(site / dist)
    assert [s.name for s in provenance.sets] == ["spec", "model-fix"]  # every set, exactly, in the order applied
    assert (
        provenance.patch_text("0001-change.patch", "model-fix")
        == (library / "model-fix/0.16.0/0001-change.patch").read_bytes()
    )
    assert sorted(provenance.files) == [SPEC, MODEL]


def test_status_verify_and_the_guard_agree_with_each_set_on_an_install(run, tmp_path, library):
    built(run, tmp_path, library)
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")

    status = run("status", "--target", site, "--patches", library, "--format", "json")
    assert status.exit_code == 0, status.output
    document = json.loads(status.stdout)
    assert document["state"] == "applied"
    assert {s["set"]: s["state"] for s in document["sets"]} == {
        "spec": "applied",
        "model-fix": "applied",
        "old": "upstream",
    }
    assert run("verify", "--target", site, "--patches", library, "--no-import").exit_code == 0
    assert find_problems(str(site)) == []

    (site / MODEL).write_text(MODEL_PY + "# edited\n")  # one set's file changed after the install
    status = run("status", "--target", site, "--patches", library, "--format", "json")
    states = {s["set"]: s["state"] for s in json.loads(status.stdout)["sets"]}
    assert status.exit_code == 1 and states["spec"] == "applied" and states["model-fix"] != "applied"
    assert find_problems(str(site)) != []

    one = run("revert", "--target", site, "--patches", library, "--set", "spec")
    assert one.exit_code == 2 and "its sets are reverted together" in one.output


def test_set_narrows_the_wheel_to_the_sets_named(run, tmp_path, library):
    document = json.loads(built(run, tmp_path, library, "--set", "model-fix", "--format", "json").stdout)
    assert (document["label"], document["set"], "sets" in document) == ("patchkit.model.fix", "model-fix", False)
    (tmp_path / "out" / f"vllm-0.16.0+patchkit.model.fix-{TAGS}.whl").unlink()
    document = json.loads(
        built(run, tmp_path, library, "--set", "model-fix", "--set", "spec", "--format", "json").stdout
    )
    assert document["sets"] == ["spec", "model-fix"]  # the library's order


def test_sets_changing_one_file_are_refused_in_one_wheel(run, tmp_path, library):
    tree = write_tree(tmp_path / "stock2")
    write_library(library, {"0.16.0": [make_patch(tmp_path, tree, {SPEC: SPEC_PY + "# more\n"})]}, name="more")
    (library / "library.toml").write_text('order = ["spec", "model-fix", "more"]\n')
    done = run("wheel", write_wheel(tmp_path / "in"), "--out", tmp_path / "out", "--patches", library)
    assert done.exit_code == 2 and "the sets spec and more both change vllm/config/spec.py" in done.output
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.whl"))


def test_a_label_too_long_is_a_stable_short_form():
    names = [f"set-number-{i}-with-a-long-name" for i in range(6)]
    short = default_label(names)
    assert len(".".join(["patchkit", *names])) > LABEL_LIMIT
    assert (
        short == default_label(names)
        and short.startswith("patchkit.6sets.")
        and len(short) == len("patchkit.6sets.") + 8
    )
    assert default_label(["eagle3", "deepseek-tool-calls"]) == "patchkit.eagle3.deepseek-tool-calls"
