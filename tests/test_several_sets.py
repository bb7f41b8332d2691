"""Several sets in one library (issue 23): `apply` without --set applies every set that covers the
tree's version, in the library's order, each recorded as its own entry; --set (repeatable) narrows."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_server import run_patchkit
from helpers import (
    EAGLE_MODEL,
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    FakeIndex,
    make_patch,
    patched_spec,
    pip_install,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    snapshot,
    sweep_count,
    sweep_trials,
    write_library,
    write_tree,
)

from patchkit.series import library as library_mod
from patchkit.store.state import read_state
from patchkit.tree import modules as modules_mod
from patchkit.tree import version as version_mod


def json_of(result) -> dict:
    return json.loads(result.stdout)


@pytest.fixture
def library(tree, scratch) -> Path:
    """Three sets: `spec` and `model` patch 0.16.0 (one file each), `old` is upstream from 0.16.0;
    library.toml lists `model` first."""
    root = scratch / "lib"
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]}, name="spec")
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="model")
    write_library(root, {"0.15.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="old", upstream=">=0.16.0")
    (root / "library.toml").write_text('order = ["model", "spec"]\n')
    return root


def test_apply_without_set_applies_every_covering_set_in_the_declared_order(run, tree, library):
    stock = snapshot(tree)
    result = run("apply", "--target", tree, "--patches", library)
    assert result.exit_code == 0, result.output
    assert (tree / SPEC).read_text() == patched_spec() and (tree / MODEL).read_text() == EAGLE_MODEL
    assert [e.set_name for e in read_state(tree).entries] == ["model", "spec"]  # declared first, then by name
    assert "2 set(s) applied (model, spec); old upstream" in result.output
    assert "nothing to patch in vLLM 0.16.0: the set old declares" in result.output  # reported, not an error

    again = run("apply", "--target", tree, "--patches", library)
    assert again.exit_code == 0 and "already applied" in again.output

    assert run("revert", "--target", tree).exit_code == 0
    assert snapshot(tree) == stock and not read_state(tree).entries


def test_set_is_repeatable_and_narrows(run, tree, library):
    result = run("apply", "--target", tree, "--patches", library, "--set", "spec", "--set", "old")
    assert result.exit_code == 0, result.output
    assert [e.set_name for e in read_state(tree).entries] == ["spec"]
    assert (tree / MODEL).read_text() == MODEL_PY

    one = run("apply", "--target", tree, "--patches", library, "--set", "model", "--format", "json")
    assert one.exit_code == 0 and json_of(one)["set"] == "model"  # one --set: the single-set apply, as before
    assert [e.set_name for e in read_state(tree).entries] == ["spec", "model"]

    unknown = run("apply", "--target", tree, "--patches", library, "--set", "spec", "--set", "nope")
    assert unknown.exit_code == 2 and "no patch set 'nope'" in unknown.output


def test_the_dry_run_shows_every_set_and_writes_nothing(run, tree, library):
    stock = snapshot(tree)
    result = run("apply", "--target", tree, "--patches", library, "--dry-run", "--format", "json")
    assert result.exit_code == 0, result.output
    document = json_of(result)
    assert document["result"] == "dry-run"
    assert [(s["set"], s["result"]) for s in document["sets"]] == [
        ("model", "dry-run"),
        ("spec", "dry-run"),
        ("old", "upstream"),
    ]
    assert [s["plan"][0]["files"][0]["path"] for s in document["sets"][:2]] == [MODEL, SPEC]
    assert snapshot(tree) == stock and not (tree / ".patchkit").exists()

    text = run("apply", "--target", tree, "--patches", library, "--dry-run")
    assert "set      model" in text.output and "set      spec" in text.output and "set      old" in text.output
    assert "2 set(s) would apply (model, spec); old upstream" in text.output


def test_a_failing_second_set_keeps_the_first_and_tries_none_after(run, tree, library, scratch):
    # `spec`'s series no longer applies (its context is gone from the stock file)
    (tree / SPEC).write_text(SPEC_PY.replace('    "qwen",\n', '    "mistral",\n'))
    result = run("apply", "--target", tree, "--patches", library, "--no-guard")
    assert result.exit_code == 1, result.output
    assert "set spec:" in result.output and "model stays applied" in result.output
    assert [e.set_name for e in read_state(tree).entries] == ["model"]
    assert (tree / MODEL).read_text() == EAGLE_MODEL


def test_a_set_that_fails_with_no_failed_check_is_not_said_check_failed(run, tree, library, scratch):
    """Review 12a L1: a set refused for a symlink (exit 2) or a full disk (exit 4) was said
    `check-failed` (its result and the document's), and `fleet apply` showed it so: no check failed."""
    outside = scratch / "outside.py"
    outside.write_text((tree / SPEC).read_text())
    (tree / SPEC).unlink()
    (tree / SPEC).symlink_to(outside)
    result = run("apply", "--target", tree, "--patches", library, "--no-guard", "--format", "json")
    assert result.exit_code == 2, result.output
    document = json_of(result)
    assert {s["set"]: s["result"] for s in document["sets"]}["spec"] == "failed"
    assert document["result"] == "failed" and "symlink" in document["error"]


def test_unsupported_and_upstream_sets_are_reported_not_errors_a_gap_is_refused(run, tree, library, scratch):
    """A set outside its range (future) or upstream (old) is a note; one in its range with no series
    for the version (gap) refuses the apply before it writes, until --set leaves it out."""
    write_library(library, {"0.17.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="gap", upstream=None)
    write_library(library, {"0.17.0": [b""]}, name="future", supported=">=0.17.0", upstream=None)
    refused = run("apply", "--target", tree, "--patches", library, "--format", "json")
    assert refused.exit_code == 1 and "no series of gap for vLLM 0.16.0" in refused.output, refused.output
    assert not (tree / ".patchkit").exists()
    chosen = [word for name in ("model", "spec", "future", "old") for word in ("--set", name)]
    result = run("apply", "--target", tree, "--patches", library, *chosen, "--format", "json")
    assert result.exit_code == 0, result.output
    states = {s["set"]: s["result"] for s in json_of(result)["sets"]}
    assert states == {"model": "applied", "spec": "applied", "future": "unsupported", "old": "upstream"}


def test_a_library_covering_nothing_is_exit_3_naming_every_set(run, tree, library):
    result = run(
        "apply", "--target", tree, "--patches", library, "--set", "old", "--set", "spec", "--vllm-version", "0.10.0"
    )
    assert result.exit_code == 3, result.output
    assert "no set of the library covers this vLLM" in result.output and "(spec, old: >=0.11.0)" in result.output


def test_a_single_set_library_applies_as_before(run, tree, scratch):
    library = write_library(scratch / "one", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    result = run("apply", "--target", tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json_of(result)["set"] == "demo" and "sets" not in json_of(result)


def test_a_single_set_librarys_dry_run_loads_the_library_once(run, tree, scratch, monkeypatch):
    """Issue 21: whether the library holds several sets and which set applies come from one load
    (a second one cost the quiet dry run ~1.4 ms of start-up)."""
    loads = []
    load_library = library_mod.load_library
    monkeypatch.setattr(library_mod, "load_library", lambda root: loads.append(root) or load_library(root))
    library = write_library(scratch / "one", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    result = run("apply", "--dry-run", "-q", "--target", tree, "--patches", library)
    assert result.exit_code == 0, result.output
    assert loads == [library]


def test_a_dry_run_of_several_sets_reads_the_trees_version_once(run, tree, library, monkeypatch):
    """Issue 21: the version is the tree's, the same for every set: told once a run, not once a
    set (each time METADATA read, its path resolved twice)."""
    detected = []
    detect = version_mod.detect
    monkeypatch.setattr(version_mod, "detect", lambda *args: detected.append(args) or detect(*args))
    result = run("apply", "--dry-run", "-q", "--target", tree, "--patches", library)
    assert result.exit_code == 0, result.output
    assert len(detected) == 1


@pytest.mark.parametrize("command", [("status",), ("verify", "--no-import")])
def test_a_command_judging_several_sets_scans_the_trees_bytecode_once(run, tree, library, monkeypatch, command):
    """Issue 21: the scan for bytecode that hangs the import is the tree's, the same for every set:
    done once a command (~3-7 ms each), not once a set (status) or twice a set (verify)."""
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    scans = []  # one _scan a tree walk: the guard's own __pycache__, then vllm's
    scanning = modules_mod._scan
    monkeypatch.setattr(modules_mod, "_scan", lambda *a: scans.append(a) or scanning(*a))
    result = run(*command, "--target", tree, "--patches", library)
    assert result.exit_code == 0, result.output
    assert len(scans) == 1, len(scans)
    run(*command, "--target", tree, "--patches", library)
    assert len(scans) == 2  # the next command scans again: nothing outlives one


def test_library_toml_naming_an_unknown_set_is_refused(run, tree, library):
    (library / "library.toml").write_text('order = ["model", "ghost"]\n')
    result = run("list", "--patches", library)
    assert result.exit_code == 2 and "ghost" in result.output


# --- step 2: status, verify and revert of several sets --------------------------------------------------


def test_status_shows_each_set_and_one_overall_state(run, tree, library):
    result = run("status", "--target", tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    document = json_of(result)
    assert document["state"] == "not-applied"
    assert [(s["set"], s["state"]) for s in document["sets"]] == [
        ("model", "not-applied"),
        ("spec", "not-applied"),
        ("old", "upstream"),
    ]
    # an upstream set is counted as such, not as one missing (newuser17 5c: "0 of 3"); and a stock
    # tree's status says what applies the rest (newuser18 5d)
    stock = run("status", "--target", tree, "--patches", library)
    assert "status: not-applied: 0 of 2 set(s) applied; 1 upstream (old)" in stock.output, stock.output
    said = " ".join(stock.output.split())
    assert f"note: none is applied: `patchkit apply --target {tree} --patches {library}` applies them" in said

    assert run("apply", "--target", tree, "--patches", library, "--set", "spec").exit_code == 0
    text = run("status", "--target", tree, "--patches", library)
    # spec applied, model left out on purpose (`apply --set spec`): the tree is what was chosen, exit 0,
    # and model is a note with the command that applies it (new-user 14 item 4)
    assert text.exit_code == 0, text.output
    assert "status: applied: 1 of 2 set(s) applied (spec); 1 upstream (old); not chosen: model" in text.output
    said = " ".join(text.output.split())
    assert (
        f"note: no apply chose model; to apply it: `patchkit apply --target {tree} --patches {library} --set model`"
        in said
    )
    assert json_of(run("status", "--target", tree, "--patches", library, "--format", "json"))["not_chosen"] == ["model"]
    assert "set      model" in text.output and "set      old" in text.output

    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    assert json_of(run("status", "--target", tree, "--patches", library, "--format", "json"))["state"] == "applied"


def test_status_fails_a_set_an_apply_chose_and_stopped_before(run, tree, library):
    """A multi-set apply that stopped half-way (spec's patch did not apply) leaves model applied and
    spec not: spec was chosen, so the tree is partial (exit 1, a CI gate must not pass it)."""
    (tree / SPEC).write_text("x = 1\n")  # the spec patch does not apply
    assert run("apply", "--target", tree, "--patches", library).exit_code == 1
    (tree / SPEC).write_text(SPEC_PY)  # stock again: spec is simply not applied
    assert read_state(tree).chosen == ("model", "spec", "old")
    text = run("status", "--target", tree, "--patches", library)
    assert text.exit_code == 1, text.output
    assert "status: FAILED: 1 of 2 set(s) applied (model), not spec; 1 upstream (old)" in text.output
    assert "not chosen" not in text.output
    used = f"if your launches use only model: `patchkit status --target {tree} --patches {library} --set model`"
    assert used in " ".join(text.output.split())
    assert run("status", "-q", "--target", tree, "--patches", library).exit_code == 1
    assert run("status", "--target", tree, "--patches", library, "--set", "model").exit_code == 0

    # a revert of the set the run wrote forgets the run's choice with it: nothing of it is left
    assert run("revert", "--target", tree, "--patches", library, "--set", "model").exit_code == 0
    assert not (tree / ".patchkit").exists()
    assert run("status", "--target", tree, "--patches", library).exit_code == 0


@pytest.mark.parametrize("fmt", ["text", "json", "junit"])
def test_verify_of_sets_an_apply_chose_and_stopped_before_fails_as_status_does(run, tree, library, fmt):
    """checkout29 F5, several sets: model applied, spec chosen and not: status said partial, exit 1;
    verify said `ok if applied`, exit 0 (a CI gate passed a half-patched tree). Now both fail it."""
    (tree / SPEC).write_text("x = 1\n")  # the spec patch does not apply: the apply stops after model
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 1
    (tree / SPEC).write_text(SPEC_PY)
    on_tree = ("--target", tree, "--patches", library, "--no-import")
    assert run("status", "--target", tree, "--patches", library).exit_code == 1
    done = run("verify", *on_tree, "--format", fmt)
    assert done.exit_code == 1, done.output
    if fmt == "json":
        document = json_of(done)
        assert (document["ok"], document["state"]) == (False, "partial"), document
    elif fmt == "junit":
        root = ET.fromstring(done.stdout)
        failing = {
            s.get("name"): [c.get("name") for c in s.iter("testcase") if c.find("failure") is not None]
            for s in root.findall("testsuite")
        }
        assert failing == {"patchkit.model": [], "patchkit.spec": ["partial"], "patchkit.old": []}, failing
    else:
        assert done.output.splitlines()[-2:] == [
            f"note: chosen, not applied: spec: `patchkit apply --target {tree} --patches {library}` applies them",
            "verify: FAILED: partial: spec not applied; ok if applied: all 3 sets pass",
        ], done.output
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    assert run("verify", *on_tree, "--format", fmt).exit_code == 0


def test_status_exit_code_is_the_worst_sets(run, tree, library):
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    (tree / MODEL).write_text(EAGLE_MODEL + "# edited\n")  # drift in one set's file
    result = run("status", "--target", tree, "--patches", library, "--format", "json")
    assert result.exit_code == 1, result.output
    assert [s["drifted"] for s in json_of(result)["sets"]] == [[MODEL], [], []]
    text = run("status", "--target", tree, "--patches", library)
    assert text.exit_code == 1, text.output
    assert (
        "status: FAILED: applied: 2 of 2 set(s) applied (model, spec); 1 upstream (old)" in text.output
    )  # FAILED leads (review 6 L2)


def test_verify_judges_every_covering_set(run, tree, library):
    result = run("verify", "--target", tree, "--patches", library, "--format", "json", "--no-import")
    assert result.exit_code == 0, result.output
    document = json_of(result)
    assert [(s["set"], s["checked"]) for s in document["sets"]] == [
        ("model", "as-planned"),
        ("spec", "as-planned"),
        ("old", "as-is"),
    ]
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0  # else it fails all
    (tree / SPEC).write_text(patched_spec() + "def broken(:\n")
    failed = run("verify", "--target", tree, "--patches", library, "--no-import")
    assert failed.exit_code == 1, failed.output
    assert "verify: FAILED: spec (the other 2 set(s) pass)" in failed.output


@pytest.mark.parametrize("sets", [("spec",), ()])
def test_verify_junit_on_a_target_is_one_document_with_a_suite_per_set(run, tree, library, sets):
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    (tree / SPEC).write_text(patched_spec() + "def broken(:\n")
    chosen = [arg for name in sets for arg in ("--set", name)]
    result = run("verify", "--target", tree, "--patches", library, *chosen, "--no-import", "--format", "junit")
    assert result.exit_code == 1, result.output
    root = ET.fromstring(result.stdout)  # one root element: a second document is "junk after" it
    suites = root.findall("testsuite")
    names = [s.get("name") for s in suites]
    assert names == (["patchkit.spec"] if sets else ["patchkit.model", "patchkit.spec", "patchkit.old"])
    for total in ("tests", "failures"):
        assert int(root.get(total)) == sum(int(s.get(total)) for s in suites), total
    failing = {
        s.get("name"): [c.get("name") for c in s.iter("testcase") if c.find("failure") is not None] for s in suites
    }
    assert f"syntax: {SPEC}" in failing["patchkit.spec"] and not failing.get("patchkit.model")


def test_verify_of_a_tree_not_applied_says_so_last_with_the_command_that_applies(run, tree, library, scratch):
    """newuser15 7: a stock tree ended "verify: ok: all 3 sets pass", read as a pass of the tree."""
    two = write_library(scratch / "two", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]}, name="a")
    write_library(two, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="b")
    none = run("verify", "--target", tree, "--patches", two, "--no-import")
    assert none.exit_code == 0, none.output  # the series would apply and pass: docs/using.md
    assert none.output.splitlines()[-2:] == [
        f"note: none is applied: `patchkit apply --target {tree} --patches {two}` applies them",
        "verify: ok if applied: all 2 sets would pass; none is applied",
    ], none.output
    one = run("verify", "--target", tree, "--patches", library, "--set", "spec", "--no-import")
    assert one.exit_code == 0, one.output
    assert one.output.splitlines()[-1].startswith("verify: ok if applied: 3 checks passed"), one.output

    assert run("apply", "--target", tree, "--patches", library, "--set", "model", "--no-guard").exit_code == 0
    some = run("verify", "--target", tree, "--patches", library, "--no-import")
    assert some.exit_code == 0, some.output
    assert some.output.splitlines()[-2:] == [
        f"note: not applied: spec: `patchkit apply --target {tree} --patches {library}` applies them",
        "verify: ok if applied: all 3 sets pass, 1 of them once applied",
    ], some.output


def test_apply_over_an_edited_file_names_the_commands_and_the_sets_applied_already(run, tree, library):
    """newuser15 11d: the hint named no command, and called sets applied already "not tried"."""
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    (tree / MODEL).write_text(EAGLE_MODEL + "# an edit\n")
    again = run("apply", "--target", tree, "--patches", library, "--no-guard")
    assert again.exit_code == 1, again.output
    said = " ".join(again.output.split())
    command = f"patchkit --target {tree} --patches {library}"
    revert, apply = command.replace("patchkit", "patchkit revert"), command.replace("patchkit", "patchkit apply")
    assert f"`{revert} --force` (keeps a copy of the edits), then `{apply}`" in said, said
    assert "not tried: spec, old (spec is already applied and stays applied)" in said, said  # newuser16 6c


def test_apply_over_an_edited_file_names_the_later_sets_once_when_all_are_applied(run, tree, scratch):
    """newuser16 6c: "(deepseek-tool-calls, kimi-k2-tool-calls applied already, and stay(s) so)"."""
    root = scratch / "two"
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="model")
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]}, name="spec")
    (root / "library.toml").write_text('order = ["model", "spec"]\n')
    assert run("apply", "--target", tree, "--patches", root, "--no-guard").exit_code == 0
    (tree / MODEL).write_text(EAGLE_MODEL + "# an edit\n")
    again = run("apply", "--target", tree, "--patches", root, "--no-guard")
    assert again.exit_code == 1, again.output
    said = " ".join(again.output.split())
    assert "hint: not tried: spec (already applied; it stays applied);" in said, said


def test_verify_where_every_set_fails_says_none_passes(run, tree, library):
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    for path in (SPEC, MODEL):  # each set's file (old is judged on the stock MODEL: upstream)
        (tree / path).write_text((tree / path).read_text() + "def broken(:\n")
    failed = run("verify", "--target", tree, "--patches", library, "--no-import")
    assert failed.exit_code == 1, failed.output
    assert failed.output.splitlines()[-1] == "verify: FAILED: model, spec, old (no set passes)", failed.output


def test_verify_says_the_guards_refusal_once_for_every_set(run, tree, library):
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    guard = tree / "patchkit_guard.py"
    guard.write_text(guard.read_text() + "# edited\n")  # not this patchkit's guard: what it does cannot be told
    failed = run("verify", "--target", tree, "--patches", library, "--no-import")
    assert failed.exit_code == 1, failed.output
    lines = failed.output.splitlines()
    assert [line for line in lines if line.startswith("guard: ")] == [
        f"guard: the installed launch guard is not this patchkit's: {guard} is not this patchkit's launch guard "
        "(edited, or another patchkit's)"
    ], failed.output
    verdicts = [line for line in lines if line.startswith("verify: FAILED: ")]
    # review 13 M5: an edited guard is not said to refuse the tree
    assert verdicts[1].endswith("; the installed launch guard is not this patchkit's (above)"), verdicts
    assert verdicts[-1] == "verify: FAILED: model, spec, old (no set passes)", verdicts


def test_revert_without_set_reverts_all_and_with_set_that_one(run, tree, library):
    stock = snapshot(tree)
    nothing = run("revert", "--target", tree, "--patches", library)
    assert nothing.exit_code == 0 and "nothing to revert" in nothing.output, nothing.output
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0

    one = run("revert", "--target", tree, "--patches", library, "--set", "model")
    assert one.exit_code == 0, one.output
    assert (tree / MODEL).read_text() == MODEL_PY and (tree / SPEC).read_text() == patched_spec()
    assert [e.set_name for e in read_state(tree).entries] == ["spec"]

    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    every = run("revert", "--target", tree, "--patches", library, "--format", "json")
    assert every.exit_code == 0, every.output
    assert sorted(json_of(every)["files"]) == sorted([SPEC, MODEL])
    assert snapshot(tree) == stock and not (tree / ".patchkit").exists()


def test_revert_of_a_set_not_applied_says_so_and_not_that_the_tree_is_stock(run, tree, library):
    assert run("apply", "--target", tree, "--patches", library, "--set", "spec").exit_code == 0
    patched = snapshot(tree)
    other = run("revert", "--target", tree, "--patches", library, "--set", "model")
    assert other.exit_code == 0, other.output
    assert "nothing to revert: model is not applied (the tree records spec)" in other.output, other.output
    assert "the tree is stock" not in other.output
    assert snapshot(tree) == patched and [e.set_name for e in read_state(tree).entries] == ["spec"]


@pytest.mark.parametrize("command", ["revert", "status", "verify", "diff"])
def test_a_command_of_one_set_refuses_several_rather_than_act_on_the_last(run, tree, library, command):
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    patched = snapshot(tree)
    given = run(command, "--target", tree, "--patches", library, "--set", "model", "--set", "spec")
    assert given.exit_code == 2, given.output
    assert f"{command} takes one --set: run it once per set, or without --set for all" in given.output
    assert snapshot(tree) == patched and [e.set_name for e in read_state(tree).entries] == ["model", "spec"]
    same = run(command, "--target", tree, "--patches", library, "--set", "spec", "--set", "spec")
    assert same.exit_code != 2, same.output  # one set, named twice


@pytest.fixture
def stacked_library(tree, scratch, library) -> Path:
    """`spec` and `more`, which changes the line `spec` adds: library.toml says spec first."""
    patched = write_tree(scratch / "patched", files={SPEC: patched_spec(), MODEL: MODEL_PY})
    more = patched_spec().replace('"deepseek"', '"deepseek", "kimi_k2"')
    write_library(library, {"0.16.0": [make_patch(scratch, patched, {SPEC: more})]}, name="more")
    (library / "library.toml").write_text('order = ["model", "spec", "more"]\n')
    return library


def test_revert_of_a_set_a_later_set_changed_again_is_refused_naming_the_order(run, tree, stacked_library):
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", stacked_library).exit_code == 0
    assert [e.set_name for e in read_state(tree).entries] == ["model", "spec", "more"]
    before = snapshot(tree)
    refused = run("revert", "--target", tree, "--patches", stacked_library, "--set", "spec")
    assert refused.exit_code == 1, refused.output
    assert SPEC in refused.output and "more" in refused.output and "--set more" in refused.output
    assert snapshot(tree) == before

    assert run("revert", "--target", tree, "--patches", stacked_library, "--set", "more").exit_code == 0
    assert run("revert", "--target", tree, "--patches", stacked_library, "--set", "spec").exit_code == 0
    assert [e.set_name for e in read_state(tree).entries] == ["model"]
    assert run("revert", "--target", tree, "--patches", stacked_library).exit_code == 0
    assert snapshot(tree) == stock


# --- step 4: two sets that change the same file need a declared order ----------------------------------


def test_sets_changing_the_same_file_without_a_declared_order_are_refused_naming_both(run, tree, stacked_library):
    (stacked_library / "library.toml").write_text('order = ["model", "spec"]\n')  # `more` not named
    stock = snapshot(tree)
    for command in (["apply", "--target", tree], ["apply", "--target", tree, "--dry-run"], ["list"]):
        result = run(*command, "--patches", stacked_library)
        assert result.exit_code == 2, result.output
        assert f"the sets spec and more both change {SPEC}" in result.output
        assert 'order = ["spec", "more"]' in result.output
    assert snapshot(tree) == stock and not (tree / ".patchkit").exists()

    # sets on different files need no order; one --set is a single apply, as ever
    assert (
        run("apply", "--target", tree, "--patches", stacked_library, "--set", "model", "--set", "spec").exit_code == 0
    )
    assert run("apply", "--target", tree, "--patches", stacked_library, "--set", "more").exit_code == 0


# --- step 5: verify of releases covers every set ----------------------------------------------------------


@pytest.fixture
def index_of_two(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    index = FakeIndex(tmp_path / "index", monkeypatch)
    stock = index.add("0.16.0")
    index.add("0.17.0")
    root = tmp_path / "twolib"
    write_library(
        root, {"0.16.0": [make_patch(tmp_path, stock, {SPEC: patched_spec()})]}, name="first", upstream=">=0.17.0"
    )
    kimi = SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "kimi_k2",\n')
    write_library(
        root,
        {"0.16.0": [make_patch(tmp_path, stock, {SPEC: kimi})]},
        name="second",
        versions={"0.16.0": ">=0.16.0"},
        upstream=None,
    )
    (root / "library.toml").write_text('order = ["first", "second"]\n')
    return index, root


def test_verify_all_covers_every_set(run, index_of_two):
    _index, library = index_of_two
    result = run("verify", "--patches", library, "--all", "--format", "json")
    assert result.exit_code == 0, result.output
    outcomes = {
        s["set"]: {r["vllm_version"]: r["outcome"] for r in s["releases"]} for s in json.loads(result.stdout)["sets"]
    }
    assert outcomes == {
        "first": {"0.16.0": "patched", "0.17.0": "upstream"},
        "second": {"0.16.0": "patched", "0.17.0": "patched"},
    }

    markdown = run("verify", "--patches", library, "--all", "--format", "markdown")
    assert markdown.exit_code == 0 and "first" in markdown.output and "second" in markdown.output
    junit = run("verify", "--patches", library, "--all", "--format", "junit")
    assert 'name="first: vllm 0.16.0"' in junit.output and 'name="second: vllm 0.17.0"' in junit.output
    text = run("verify", "--patches", library, "--latest")
    assert text.exit_code == 0 and "set      first" in text.output and "set      second" in text.output
    # new-user 21, 7a: the last line is every set's verdict, not the last set's
    assert text.output.splitlines()[-1] == "verify: ok: all 2 sets pass on vLLM 0.17.0", text.output

    one = run("verify", "--patches", library, "--all", "--set", "second", "--format", "json")
    assert one.exit_code == 0 and json.loads(one.stdout)["set"] == "second"  # one set, as before


def test_verify_all_fails_when_one_sets_release_fails(run, index_of_two):
    index, library = index_of_two
    index.add("0.17.0", SPEC_PY.replace('"qwen"', '"mistral"'))  # the second set's context is gone
    result = run("verify", "--patches", library, "--all", "--format", "json")
    assert result.exit_code == 1, result.output
    second = next(s for s in json.loads(result.stdout)["sets"] if s["set"] == "second")
    assert {r["vllm_version"]: r["outcome"] for r in second["releases"]}["0.17.0"] == "conflict"
    text = run("verify", "--patches", library, "--all")
    assert text.exit_code == 1
    assert text.output.splitlines()[-1] == "verify: FAILED: 1 of 2 sets fail on 2 releases (second)", text.output


def test_fetch_without_set_reads_the_files_of_every_set(library):
    from patchkit.releases.files import files_for, not_covered

    assert files_for("0.16.0", str(library)) == [SPEC, MODEL]  # sorted: both sets' series (old: upstream)
    assert files_for("0.16.0", str(library), "spec") == [SPEC]
    assert not_covered("0.16.0", str(library)) is None
    refused = not_covered("0.10.0", str(library))
    assert refused is not None and "(model, spec, old: >=0.11.0)" in refused.message, refused


def test_diff_shows_every_covering_sets_series_in_apply_order(run, tree, library):
    result = run("diff", "--target", tree, "--patches", library)
    assert result.exit_code == 0, result.output
    assert result.output.index(f"+++ b/{MODEL}") < result.output.index(f"+++ b/{SPEC}")  # model, then spec
    one = run("diff", "--target", tree, "--patches", library, "--set", "spec")
    assert one.exit_code == 0 and f"+++ b/{MODEL}" not in one.output and f"+++ b/{SPEC}" in one.output
    upstream = run("diff", "--target", tree, "--patches", library, "--vllm-version", "0.18.0")
    assert upstream.exit_code == 0 and "every set is upstream; there is no diff" in upstream.output, upstream.output


# --- step 5: preflight and run's preflight judge every covering set ------------------------------------


@pytest.fixture
def eagle3_and_another(tmp_path):
    """The launch tests' eagle3 setup (stock 0.16.0 tree, its library) plus a set `tools` that
    patches a tool parser the tree also holds; library.toml puts eagle3 first."""
    from launch_fixtures import write_eagle3_setup

    tree, lib = write_eagle3_setup(tmp_path)
    parser = "vllm/tool_parsers/demo_tool_parser.py"
    (tree / parser).parent.mkdir(parents=True, exist_ok=True)
    (tree / parser).write_text("def parse(text):\n    return text\n")
    patch = make_patch(tmp_path, tree, {parser: "def parse(text):\n    return text.strip()\n"})
    write_library(lib, {"0.16.0": [patch]}, name="tools", upstream=None)
    (lib / "library.toml").write_text('order = ["eagle3", "tools"]\n')
    return tree, lib


def test_preflight_holds_the_launch_against_every_covering_set(eagle3_and_another, tmp_path):
    from helpers import run_cli
    from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_model

    tree, lib = eagle3_and_another
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    launch = ["--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *serve(target, drafter)]

    stock = run_cli_read_only("preflight", *launch)
    assert stock.returncode == 1, stock.stdout + stock.stderr
    trees = [f["message"] for f in json.loads(stock.stdout)["findings"] if f["check"] == "tree-state"]
    assert trees == [
        "the eagle3 series is not applied to vLLM 0.16.0",
        "the tools series is not applied to vLLM 0.16.0",
    ]

    assert (
        run_cli_writing("apply", "--target", tree, "--patches", lib, "--set", "eagle3", "--no-import").returncode == 0
    )
    no_vllm = {**os.environ, "PATH": str(tmp_path / "empty")}
    refused = run_cli("run", "--target", tree, "--patches", lib, "--", *serve(target, drafter), env=no_vllm)
    assert refused.returncode == 1 and "not launched: the preflight failed" in refused.stderr, refused.stderr
    half = run_cli_read_only("preflight", *launch)
    assert half.returncode == 1 and json.loads(half.stdout)["tree_state"] == "partial"
    failed = [f["message"] for f in json.loads(half.stdout)["findings"] if not f["ok"]]
    assert failed == ["the tools series is not applied to vLLM 0.16.0"]  # eagle3's launch checks pass now

    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0
    done = run_cli_read_only("preflight", *launch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["tree_state"] == "applied"
    # run: the same preflight, then exec of the launch (no `vllm` here: exit 4 naming it, so it got that far)
    ran = run_cli("run", "--target", tree, "--patches", lib, "--", *serve(target, drafter), env=no_vllm)
    assert ran.returncode == 4 and "cannot run vllm" in ran.stderr, ran.stdout + ran.stderr


def test_stale_records_after_an_upgrade_are_each_said_once_with_their_set(run, tree, scratch):
    """Review 6 L1: two sets applied, then vLLM upgraded under them: status said every record's
    stale note in each set's section, and apply said "the old record is stale: discarded" once per
    record without naming its set."""
    library = scratch / "lib"
    for name, path, content in (("spec", SPEC, patched_spec()), ("model", MODEL, EAGLE_MODEL)):
        patch = make_patch(scratch, tree, {path: content})
        write_library(library, {"0.16.0": [patch]}, versions={"0.16.0": ">=0.16.0"}, upstream=None, name=name)
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    pip_install(tree, "0.17.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})  # the same stock files, a new release
    status = run("status", "--target", tree, "--patches", library)
    notes = [line for line in status.output.splitlines() if "installed 0.17.0: the old record" in line]
    # one line naming both sets (new-user 14 item 17: the same note once per set)
    assert notes == [
        "stale warning: the records of model, spec: recorded 0.16.0, installed 0.17.0: the old records are stale"
    ], status.output
    applied = run("apply", "--target", tree, "--patches", library, "--no-import")
    assert applied.exit_code == 0, applied.output
    discarded = [line for line in applied.output.splitlines() if "discarded" in line]
    # one line naming both sets, as status says it (new-user 16 item 6b: three warnings, one per set)
    assert discarded == [
        "warning: the records of model, spec: recorded 0.16.0, installed 0.17.0: the old records are stale: discarded"
    ], applied.output


def test_status_of_a_library_covering_nothing_says_unsupported(run, tree, library):
    """As status of one set says it: the state `unsupported` in the JSON document, exit 3."""
    result = run("status", "--target", tree, "--patches", library, "--vllm-version", "0.10.0", "--format", "json")
    assert result.exit_code == 3, result.output
    assert json_of(result)["state"] == "unsupported" and "no set of the library covers" in json_of(result)["error"]


def test_verify_with_the_guard_blames_only_the_set_whose_file_drifted(run, tree, library):
    """new-user s12 item 8: the guard refuses the whole tree for one drifted file; the sets whose
    own files are as written are judged ok, and the last line names only the set that drifted."""
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0  # with the guard
    (tree / SPEC).write_text(patched_spec() + "# edited\n")
    failed = run("verify", "--target", tree, "--patches", library, "--no-import")
    assert failed.exit_code == 1, failed.output
    assert "verify: FAILED: spec (the other 2 set(s) pass)" in failed.output
    verdicts = [line for line in failed.output.splitlines() if line.startswith("verify: ")]
    assert len(verdicts) == 4, failed.output
    assert verdicts[0].startswith("verify: ok"), failed.output  # model, untouched
    assert verdicts[1].startswith("verify: FAILED"), failed.output  # spec, drifted
    assert verdicts[2].startswith("verify: ok"), failed.output  # old, upstream


def test_apply_again_counts_no_set_as_applied(run, tree, library):
    """new-user s12 item 2: sets already applied were counted "2 set(s) applied" by a run that wrote nothing."""
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    again = run("apply", "--target", tree, "--patches", library)
    assert again.exit_code == 0, again.output
    assert "set(s) applied (" not in again.output, again.output
    assert "0 set(s) applied; model already" in again.output, again.output


def test_the_documents_of_several_sets_carry_the_trees_version_at_the_top(run, tree, library):
    """One tree, one version: status, apply and verify of several sets keep the top-level
    `vllm_version` the one-set documents always had (scripts read it there)."""
    for command in (["status"], ["apply", "--dry-run"], ["verify", "--no-import"]):
        result = run(*command, "--target", tree, "--patches", library, "--format", "json")
        document = json_of(result)
        assert (document["vllm_version"], document["version_source"]) == ("0.16.0", "vllm-0.16.0.dist-info/METADATA"), (
            command
        )


def test_revert_of_several_sets_carries_the_trees_version_at_the_top(run, tree, library):
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    result = run("revert", "--target", tree, "--patches", library, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json_of(result)["vllm_version"] == "0.16.0"


# --- M3: an interrupt in the second set of several says what stays ----------------------------------


def _apply_with_fault(tree: Path, library: Path, plan: str, *command: str) -> subprocess.CompletedProcess:
    """`patchkit apply` (or `command`) as its own process (forked by cli_server), a SIGTERM sent by the
    transaction's own fault plan (PATCHKIT_FAULT_AFTER: the Nth filesystem step of a commit or a rollback)."""
    env = {**os.environ, "PATCHKIT_FAULT_AFTER": plan}
    args = command or ("apply", "--target", str(tree), "--patches", str(library), "--no-import")
    return run_patchkit(list(args), env, None, 120)


def test_an_interrupt_in_the_second_sets_transaction_says_the_first_stays(tree, library, tmp_path):
    """Review 8 M3: the apply of several sets is one transaction a set; a SIGTERM in spec's (after
    model's committed) rolls spec back and keeps model: the message says so, not "as it was before"."""
    stock = tree

    def trial(step: int) -> tuple[subprocess.CompletedProcess, list[str]]:
        tried = tmp_path / f"t{step}"
        shutil.rmtree(tried, ignore_errors=True)
        shutil.copytree(stock, tried)
        return _apply_with_fault(tried, library, f"{step}:term"), [e.set_name for e in read_state(tried).entries]

    low, high = 0, 256  # model is recorded after a signal at `high`, not at `low`: its commit ends between
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if "model" in trial(middle)[1] else (middle, high)
    for step in range(high, high + 40):  # the first step of spec's transaction after model's
        done, recorded = trial(step)
        if done.returncode == 143 and recorded == ["model"] and "spec rolled back" in done.stderr:
            break
    else:
        raise AssertionError("no step of spec's transaction was reached")
    tree = tmp_path / f"t{step}"
    assert "error: interrupted: model applied and kept; spec rolled back" in done.stderr, done.stderr
    assert "as it was before" not in done.stderr
    assert "revert" in done.stderr  # the hint: what undoes what stays
    assert (tree / MODEL).read_text() == EAGLE_MODEL and (tree / SPEC).read_text() == (stock / SPEC).read_text()
    # the first set's own interrupt, with nothing before it, is said as before
    first = tmp_path / "first"
    shutil.copytree(stock, first)
    done = _apply_with_fault(first, library, "1:term")
    assert done.returncode == 143 and "model rolled back; not tried: spec" in done.stderr, done.stderr


def test_an_interrupt_that_rolled_the_first_set_back_says_nothing_was_applied(tree, library, tmp_path):
    """Review 12b L8: a SIGTERM in the first set's transaction rolls it back and tries no other, yet
    the hint said "`patchkit apply` applies the rest": nothing was applied, so "the rest" is all."""
    fresh = tmp_path / "fresh"
    shutil.copytree(tree, fresh)
    done = _apply_with_fault(fresh, library, "2:term")
    assert done.returncode == 143 and "model rolled back; not tried: spec" in done.stderr, done.stderr
    assert "the rest" not in done.stderr
    assert re.search(r"hint: nothing was applied: run `patchkit apply [^`]*` again", done.stderr), done.stderr
    assert read_state(fresh).entries == [] and (fresh / MODEL).read_text() == (tree / MODEL).read_text()


def test_a_warning_about_the_whole_tree_is_said_once_for_every_set(tree, library):
    """Review 8 L2: the guard's warning (no vLLM dist-info here: no guard) is the tree's, not a set's."""
    for info in tree.glob("vllm-*.dist-info"):
        shutil.rmtree(info)
    args = ["apply", "--target", str(tree), "--patches", str(library), "--guard", "--vllm-version", "0.16.0"]
    done = subprocess.run([sys.executable, "-m", "patchkit", *args, "--no-import"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "no guard installed" in line]
    assert len(said) == 1, done.stderr
    assert [e.set_name for e in read_state(tree).entries] == ["model", "spec"]


def test_the_notes_commands_of_the_sets_applied_each_run(run, tree, scratch):
    """newuser15 2: the note said `status --set a --set b`, which status refuses (exit 2): one per set."""
    (tree / "vllm" / "extra.py").write_text("X = 1\n")
    library = scratch / "three"
    for name, path, content in (
        ("a", SPEC, patched_spec()),
        ("b", MODEL, EAGLE_MODEL),
        ("c", "vllm/extra.py", "X = 2\n"),
    ):
        write_library(library, {"0.16.0": [make_patch(scratch, tree, {path: content})]}, name=name)
    (tree / "vllm" / "extra.py").write_text("Y = 1\n")  # c's patch does not apply: the run stops there
    assert run("apply", "--target", tree, "--patches", library).exit_code == 1
    (tree / "vllm" / "extra.py").write_text("X = 1\n")
    text = run("status", "--target", tree, "--patches", library)
    assert text.exit_code == 1 and "2 of 3 set(s) applied (a, b), not c" in text.output, text.output
    said = " ".join(text.output.split())
    commands = re.findall(r"`(patchkit status [^`]*)`", said)
    assert [c.split()[-2:] for c in commands] == [["--set", "a"], ["--set", "b"]], said
    for command in commands:
        assert run(*shlex.split(command)[1:]).exit_code == 0, command


def test_revert_first_after_a_crashed_apply_rolls_it_back_and_says_nothing_is_recorded(tree, library, tmp_path):
    """Review 10b M1: after an apply of several sets died, `revert` as the next command said
    "nothing to revert" and left the journal (killed while staging), or rolled back and then exited 3
    "no patch series ... and no record" (killed at the commit point). At every step: exit 0, stock."""
    stock, keep = snapshot(tree), tmp_path / "stock-copy"
    shutil.copytree(tree, keep, symlinks=True)
    crashed = 0
    for n in sweep_trials(range(1, 200)):
        shutil.rmtree(tree)
        shutil.copytree(keep, tree, symlinks=True)
        died = _patchkit_crashing("apply", "--target", tree, "--patches", library, "--no-import", fault=n)
        if died.returncode == 0:
            break
        if not (tree / ".patchkit/journal.json").exists():
            continue
        crashed += 1
        done = _patchkit_crashing("revert", "--target", tree, "--patches", library)
        assert done.returncode == 0, (n, done.stdout, done.stderr)
        assert "rolled back an interrupted patchkit transaction" in done.stderr, (n, done.stderr)
        assert snapshot(tree) == stock and not (tree / ".patchkit/journal.json").exists(), n
    assert crashed > sweep_count(5)


def _patchkit_crashing(*args: object, fault: int = 0, mode: str = "exit") -> subprocess.CompletedProcess:
    """`python -m patchkit ARGS` in a process of its own, which ends (`mode`: exit, term...) at its
    `fault`th filesystem step."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")}
    if not fault and len(env) == len(os.environ):  # nothing to end it: judged by its output and files alone
        return run_cli_judged(*args)
    if fault:
        env |= {"PATCHKIT_FAULT_AFTER": str(fault), "PATCHKIT_FAULT_MODE": mode}
    return run_patchkit([str(a) for a in args], env, None, 120)


def test_a_revert_cut_short_after_its_commit_says_so_and_the_next_revert_clears_its_store(tree, library):
    """Review 10b M2: a revert killed (or sent SIGTERM) after its commit point left .patchkit/ (the
    lock, saved originals, an empty state.json), which every later `revert` left as it was ("nothing
    to revert"); and the hint after SIGTERM said `revert` undoes it. (A SIGTERM at the commit point's
    last step acts once the journal is gone: an exit there would be before it.)"""
    stock = snapshot(tree)
    late = 0
    for n in sweep_trials(range(1, 200)):
        assert _patchkit_crashing("apply", "--target", tree, "--patches", library).returncode == 0
        died = _patchkit_crashing("revert", "--target", tree, "--patches", library, fault=n, mode="term")
        if died.returncode == 0:
            break
        if (tree / ".patchkit/journal.json").exists() or snapshot(tree) != stock:
            assert _patchkit_crashing("recover", "--target", tree).returncode == 0
            continue  # before the commit point: rolled back, or the next command rolls it back
        late += 1
        said = " ".join(died.stderr.split())
        assert died.returncode == 143 and "after the revert was written" in said, said
        assert "apply --target" in said.partition("hint:")[2] and "revert --target" not in said, said
        done = _patchkit_crashing("revert", "--target", tree, "--patches", library)
        assert done.returncode == 0 and "nothing to revert" in done.stdout, (n, done.stdout, done.stderr)
        assert not (tree / ".patchkit").exists(), (n, sorted(p.name for p in (tree / ".patchkit").iterdir()))
    assert late > 0


def test_a_vllm_version_naming_another_release_is_said_once_not_per_set(run, library, tmp_path):
    """New-user trial 16, 6d: verify --vllm-version 0.16.0 on a 0.17.0 tree printed the mismatch and
    its fix under each set it failed; it is the tree's, said once, each later set pointing to it."""
    other = write_tree(tmp_path / "v0.17.0", "0.17.0", {SPEC: "NAMES = []\n", MODEL: "class Model:\n    pass\n"})
    done = run("verify", "--target", other, "--patches", library, "--vllm-version", "0.16.0")
    assert done.exit_code == 1, done.output
    lines = done.output.splitlines()
    said = [line for line in lines if line.startswith("version: --vllm-version says 0.16.0")]
    fixes = [line for line in lines if line.startswith("  fix: ") and "(the tree's own release)" in line]
    assert len(said) == 1 and len(fixes) == 1, done.output
    assert done.output.count("--vllm-version says") == 1, done.output  # newuser17 5f: not in the verdict too
    assert "verify: FAILED: --vllm-version names another release than the tree's (above)" in lines, done.output
    assert lines[-1] == "verify: FAILED: model, spec (the other 1 set(s) pass)", done.output


def test_a_patch_apply_is_named_by_its_files_listed_in_status_and_its_revert_said_plainly(run, tree, library, scratch):
    """newuser18 5c, newuser19 3a: a --patch apply showed as `adhoc-<hex>` (status's fix), status
    listed the library's sets alone, and a plain revert refused with a hint that did not say why."""
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    created = scratch / "create.diff"
    created.write_bytes(make_patch(scratch, tree, {"vllm/extra.py": "X = 1\n"}))
    assert run("apply", "--target", tree, "--patch", created).exit_code == 0
    status = run("status", "--target", tree, "--patches", library)
    said = " ".join(status.output.split())
    assert status.exit_code == 0 and "adhoc-" not in said, status.output
    by_it = f"--target {tree} --patch {created}"
    assert f"patch --patch file create.diff recorded (1 file(s)): `patchkit status {by_it}` judges it" in said, said

    (tree / "vllm/extra.py").unlink()  # the guard refuses it: its fix names the file, not adhoc-<hex>
    status = run("status", "--target", tree, "--patches", library)
    said = " ".join(status.output.split())
    assert status.exit_code == 1 and "adhoc-" not in said, status.output
    assert "the refused files belong to the --patch file create.diff: run `patchkit apply" in said, said
    assert run("apply", "--target", tree, "--patch", created).exit_code == 0

    plain = run("revert", "--target", tree, "--patches", library)
    said = " ".join(plain.output.split())
    assert plain.exit_code == 2 and "adhoc-" not in said, plain.output
    assert "a revert deletes a created file only when you name the patch that created it" in said, said


def test_apply_of_several_sets_through_a_symlinked_directory_names_the_fix(run, tree, library, tmp_path):
    """Review 13 L3: apply of several sets on a tree whose series directory is a symlink refused
    (exit 2) with a hint that said only which sets were not tried: it names the repair as well."""
    models = tree / "vllm" / "models"
    models.rename(tmp_path / "models-elsewhere")
    models.symlink_to(tmp_path / "models-elsewhere", target_is_directory=True)
    done = run("apply", "--target", tree, "--patches", library)
    said = " ".join(done.output.split())
    assert done.exit_code == 2, said
    assert f"replace the symlink {models} with a real directory holding a copy of what it points to" in said, said


def test_preflight_calls_an_upstream_set_beside_an_applied_one_applied_as_status_does(tmp_path):
    """A set upstream fixed in this release has nothing to apply: beside an applied set the tree is
    applied, not partial, for preflight as for status."""
    from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model

    tree, lib = write_eagle3_setup(tmp_path)
    parser = "vllm/tool_parsers/fixed_tool_parser.py"
    (tree / parser).parent.mkdir(parents=True, exist_ok=True)
    (tree / parser).write_text("def parse(text):\n    return text.strip()\n")
    patch = make_patch(tmp_path, tree, {parser: "def parse(text):\n    return text.strip() or None\n"})
    write_library(lib, {"0.15.0": [patch]}, name="fixed", upstream=">=0.16.0")
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    assert run_cli_writing("apply", "--target", tree, "--patches", lib, "--no-import").returncode == 0

    status = run_cli_read_only("status", "--target", tree, "--patches", lib, "--format", "json")
    assert json_of(status)["state"] == "applied", status.stdout
    launch = ["--target", tree, "--patches", lib, "--no-import", "--format", "json", "--", *serve(target, drafter)]
    done = run_cli_read_only("preflight", *launch)
    assert json_of(done)["tree_state"] == "applied", done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
