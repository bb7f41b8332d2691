"""`patchkit wheel` of a library of several sets (issue 23): one wheel with every covering set
applied (or each --set), its label naming every set, its patchkit.json each set and its patches;
status, verify and the launch guard on an install of it agree with each set's state."""

from __future__ import annotations

import json
import re
import shlex
import zipfile

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    STOCK_FILES,
    TAGS,
    install,
    make_patch,
    on_a_terminal,
    patched_spec,
    stock_files_fetched,
    write_library,
    write_tree,
    write_wheel,
)
from packaging.version import Version

from patchkit._target.guard import find_problems
from patchkit.distinfo.provenance import read_provenance
from patchkit.engine.guard import is_installed
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
    # the hint builds the other set from the same stock wheel into the same place
    (step,) = re.findall(r"build a wheel of one of them: `([^`]+)`", " ".join(done.output.split()))
    again = run(*shlex.split(step)[1:])
    assert again.exit_code == 0, again.output
    assert [w.name for w in (tmp_path / "out").glob("*.whl")] == [f"vllm-0.16.0+patchkit.more-{TAGS}.whl"]


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


def _commands(text: str) -> list[list[str]]:
    """The patchkit commands a message prints in backquotes, as argument lists."""
    joined = " ".join(text.split())
    return [shlex.split(c)[1:] for c in re.findall(r"`(patchkit [^`]*)`", joined)]


def test_one_set_s_drift_is_its_own_and_each_printed_fix_runs(run, tmp_path, library):
    """review 8 M2: on an install of a wheel of several sets, one set's edited file was said of every
    set, and the fix printed with --set was a `revert --set` that patchkit refuses."""
    built(run, tmp_path, library)
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    assert run("apply", "--target", site, "--patches", library).exit_code == 0  # the launch guard
    (site / MODEL).write_text(MODEL_PY + "# edited\n")  # model-fix's file only
    stock_files_fetched(STOCK_FILES)  # what revert puts back, as a fetch leaves them

    status = run("status", "--target", site, "--patches", library, "--format", "json")
    drifted = {s["set"]: s.get("drifted") for s in json.loads(status.stdout)["sets"]}
    assert drifted["model-fix"] == [MODEL] and not drifted["spec"], drifted

    for one in ("spec", "model-fix"):  # the guard refuses the launch: each fails, with a fix that runs
        said = run("status", "--target", site, "--patches", library, "--set", one)
        fixes = _commands(said.output)
        assert said.exit_code == 1 and fixes and all("--set" not in fix for fix in fixes), said.output
    for fix in fixes:  # as printed, in order
        done = run(*fix)
        assert done.exit_code == 0, (fix, done.output)
    after = run("status", "--target", site, "--patches", library, "--set", "model-fix")
    assert after.exit_code == 0, after.output


def test_a_wheel_of_one_set_given_every_set_is_refused_for_what_it_is(run, tmp_path, library):
    """review 8 M3: "already holds the series: there is nothing to patch" for a wheel that holds one
    set of two: it is a wheel patchkit built, and the other set needs the stock wheel."""
    built(run, tmp_path, library, "--set", "spec")
    (patched,) = (tmp_path / "out").iterdir()
    for sets in ((), ("--set", "spec"), ("--set", "model-fix")):
        done = run("wheel", patched, "--out", tmp_path / "again", "--patches", library, *sets)
        said = " ".join(done.output.split())
        assert done.exit_code == 2 and "nothing to patch" not in said, said
        assert "already holds vllm-0.16.0+patchkit.spec.dist-info/patchkit.json" in said, said
        assert "start from the release's stock wheel" in said, said


def test_a_set_left_out_for_being_upstream_is_said_as_the_set_declares_it(run, tmp_path, library):
    """review 8 L3: "the set old is left out: old: no series" for a set that declares vLLM ships its change."""
    said = " ".join(built(run, tmp_path, library).output.split())
    assert "the set old is left out: it declares that vLLM >=0.16.0 ships its change itself" in said, said
    assert "no series" not in said, said


def test_a_note_every_set_s_header_has_is_said_once(run, tmp_path, library):
    """review 8 L2: "installed from a wheel patchkit ... built" once per set, on status and apply."""
    built(run, tmp_path, library)
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    for command in ("status", "apply"):
        said = run(command, "--target", site, "--patches", library).output
        assert said.count("installed from a wheel patchkit") == 1, said


def test_reverting_another_set_keeps_the_guard_that_holds_the_wheel_s_own_set(run, tmp_path, library):
    """review 8 L1: a wheel of one set installed, another set applied (the guard installed, holding
    both), that set reverted: the guard went, and the wheel's set ran unguarded."""
    built(run, tmp_path, library, "--set", "spec")
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    stock_files_fetched(STOCK_FILES)
    assert run("apply", "--target", site, "--patches", library, "--set", "model-fix").exit_code == 0
    assert is_installed(site)
    done = run("revert", "--target", site, "--patches", library, "--set", "model-fix")
    assert done.exit_code == 0, done.output
    assert (site / MODEL).read_text() == MODEL_PY and is_installed(site) and find_problems(str(site)) == []
    assert run("status", "--target", site, "--patches", library, "--set", "spec").exit_code == 0
    (site / SPEC).write_text(SPEC_PY + "# edited\n")  # the wheel's own set: the guard still holds it
    assert any(SPEC in problem for problem in find_problems(str(site)))


def test_status_of_a_wheel_with_a_long_label_cuts_no_word_at_80_columns(run, tmp_path, library):
    """New-user trial 23, N2: `status` of an installed patched wheel at 80 columns cut the long
    +patchkit… version's dist-info name mid-word (`vllm-` / `0.16.0+patchkit…dist-` / `info/METADATA)`,
    and `…dist-info/p` / `atchkit.json;`): the name is said as "its dist-info's", not repeated."""
    label = "patchkit.eagle3.deepseek.tool.calls.kimi.k2.tool.calls"
    built(run, tmp_path, library, "--local-label", label)
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    code, drawn = on_a_terminal(["status", "--target", site, "--patches", library], width=80)
    lines = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\r", "", drawn.decode()).splitlines()
    assert code == 0, lines
    assert [line for line in lines if len(line) > 80 or line.rstrip().endswith(("vllm-", "dist-"))] == [], lines
    said = " ".join(" ".join(lines).split())
    assert f"version 0.16.0+{label} (from its dist-info's METADATA)" in said, said
    assert f"built (+{label}), as its dist-info's patchkit.json says" in said, said


def test_status_after_reverting_an_installed_wheel_says_its_files_are_stock_again(run, tmp_path, library):
    """New-user trial 23, N3: after `revert` of a vLLM a patched wheel installed, status still told
    the user to install the launch guard, as if the wheel's patches ran: its files are stock again,
    and only its dist-info still names the label."""
    built(run, tmp_path, library)
    site = install(next((tmp_path / "out").iterdir()), tmp_path / "prefix")
    assert run("apply", "--target", site, "--patches", library).exit_code == 0
    assert run("revert", "--target", site, "--patches", library).exit_code == 0
    said = " ".join(run("status", "--target", site, "--patches", library).output.split())
    assert "installs no launch guard" not in said, said
    assert f"the files the patched wheel (+{LABEL}) changed hold their stock bytes again (reverted)" in said, said
    assert "reinstalling the stock vLLM wheel makes it agree" in said, said


def test_a_local_label_note_of_the_one_wheel_is_said_once_not_once_per_set(run, tmp_path, library):
    """review30 L2: `wheel vllm-0.16.0+cu129-...whl` said "local version label +cu129 ignored" per set."""
    wheel = write_wheel(tmp_path / "in", "0.16.0+cu129", published=False)
    done = run("wheel", wheel, "--out", tmp_path / "out", "--patches", library)
    assert done.exit_code == 0, done.output
    assert done.output.count("local version label +cu129 (a build of 0.16.0)") == 1, done.output


def test_a_local_label_the_wheel_keeps_is_never_said_to_be_ignored(run, tmp_path, library):
    """review32 L1: `wheel` of a `+site` wheel warned "local version label +site ignored: treated as
    0.16.0" and wrote vllm-0.16.0+site.patchkit...whl. The label chooses no series, and the wheel
    keeps it (a site's own build stays its own): the words say so."""
    wheel = write_wheel(tmp_path / "in", "0.16.0+site", published=False)
    done = run("wheel", wheel, "--out", tmp_path / "out", "--patches", library, "--set", "spec")
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "ignored" not in text and "local version label +site (a build of 0.16.0): matched as 0.16.0" in text, text
    assert [p.name.split("-")[1] for p in (tmp_path / "out").iterdir()] == ["0.16.0+site.patchkit.spec"]


def test_a_set_in_its_range_without_a_series_for_the_release_refuses_the_wheel(run, tmp_path):
    """A wheel of the other sets would install a tree that a launch needing the set finds unsafe,
    as apply would leave one: refused before anything is written, the others named with --set."""
    tree = write_tree(tmp_path / "stock")
    root = tmp_path / "lib"
    write_library(root, {"0.16.0": [make_patch(tmp_path, tree, {SPEC: patched_spec()})]}, name="spec")
    fix = [make_patch(tmp_path, tree, {MODEL: MODEL_FIXED})]
    write_library(root, {"0.16.0": fix}, name="model-fix", versions={"0.16.0": ">=0.16.0,<0.17.0"})
    (root / "library.toml").write_text('order = ["spec", "model-fix"]\n')
    stock = write_wheel(tmp_path / "in", version="0.16.1")
    done = run("wheel", stock, "--out", tmp_path / "out", "--patches", root, "--local-label", "corp")
    said = " ".join(done.output.split())
    assert done.exit_code == 1, said
    assert "no series of spec for vLLM 0.16.1 (nearest with one: 0.16.0)" in said, said
    assert "no wheel written" in said, said
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    (step,) = re.findall(r"build a wheel of the others alone \(`([^`]+)`\)", said)
    assert "--set model-fix" in step and "--set spec" not in step, step
    again = run(*shlex.split(step)[1:])  # from the same stock wheel, into the same --out, with the same label
    assert again.exit_code == 0, again.output
    (built_wheel,) = (tmp_path / "out").iterdir()
    assert built_wheel.name == f"vllm-0.16.1+corp-{TAGS}.whl", built_wheel.name
