"""An apply of several sets is one transaction a set, in the library's order (engine/several.py). A
SIGKILL at each step of such an apply, the guard on and off: the next command (status, recover,
apply, revert in turn) leaves no journal and each set whole or stock, the earlier sets applied
before the later ones (never a later set without an earlier one). Killed between two sets'
transactions, the tree holds the first set whole and the second not, and every command says so:
status fails (the apply chose both: a CI gate must not pass it) with apply as its fix, the guard
passes what the record says (the first set is whole: a launch of it does not fail after the load),
apply again applies the second, revert gives the stock files, recover has nothing to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import crash_trials as ct
import pytest
from helpers import EAGLE_MODEL, MODEL, SPEC, make_patch, patched_spec, sweep_trials, write_library


@pytest.fixture
def two_sets(tree: Path, scratch: Path) -> Path:
    """`model` then `spec` (library.toml's order), one file each."""
    root = scratch / "lib"
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]}, name="model")
    write_library(root, {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]}, name="spec")
    (root / "library.toml").write_text('order = ["model", "spec"]\n')
    return root


def left(tree: Path, stock: Path) -> str:
    """Which sets' files the tree holds: `stock`, `model`, `model+spec`, or what else it is."""
    held = [
        name
        for name, path in (("model", MODEL), ("spec", SPEC))
        if (tree / path).read_bytes() != (stock / path).read_bytes()
    ]
    return "+".join(held) or "stock"


@pytest.mark.parametrize("guard", ["--guard", "--no-guard"])
def test_a_kill_at_each_step_of_a_two_set_apply_leaves_the_first_set_or_both(tree, two_sets, tmp_path, guard):
    stock = tmp_path / "stock"
    shutil.copytree(tree, stock)
    work = tmp_path / "work"
    lib = ["--patches", str(two_sets)]
    between = 0
    for n in sweep_trials(range(1, 300)):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(stock, work)
        code, out = ct.run_cli(["apply", "--target", str(work), *lib, "--no-import", guard], f"{n}:kill", served=True)
        journal = (work / ".patchkit/journal.json").exists()
        if code == 0:
            assert left(work, stock) == "model+spec" and not journal, out
            break
        assert code == -9, out
        if not journal and left(work, stock) == "model":  # killed between the two sets' transactions
            between += 1
            said_between(work, stock, lib, guard)
            continue
        following = ct.NEXT[n % len(ct.NEXT)]
        again, said = ct.then([following, "--target", str(work), *([] if following == "recover" else lib)])
        assert not (work / ".patchkit/journal.json").exists(), (n, following, said)
        wanted = {"apply": {"model+spec"}, "revert": {"stock"}}.get(following, {"stock", "model", "model+spec"})
        assert left(work, stock) in wanted, (n, following, again, said)
        assert following == "status" or again == 0, (n, following, said)
    else:
        raise AssertionError("the apply never got through")
    assert between > 0, "no kill fell between the two sets' transactions"


def said_between(work: Path, stock: Path, lib: list[str], guard: str) -> None:
    """The state a kill between the sets leaves: each command's answer, then apply and revert work."""
    code, said = ct.run_cli(["status", "--target", str(work), *lib])
    assert code == 1, said  # the apply chose both
    assert "status: FAILED: 1 of 2 set(s) applied (model), not spec" in said, said
    assert f"`patchkit apply --target {work} --patches {lib[1]}` applies the rest" in " ".join(said.split()), said
    installed = ct.installed_guard(work)
    if guard == "--guard":  # what the record says is what the tree holds: a launch runs model's change whole
        assert installed is not None and installed.find_problems(str(work)) == [], said
    else:
        assert installed is None
    assert ct.run_cli(["recover", "--target", str(work)])[0] == 0
    assert left(work, stock) == "model"
    copy = work.with_name("reverted")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(work, copy)
    assert ct.run_cli(["revert", "--target", str(copy), *lib])[0] == 0
    assert ct.fingerprint(copy) == ct.fingerprint(stock)
    code, said = ct.run_cli(["apply", "--target", str(work), *lib, "--no-import"])
    assert code == 0 and "1 set(s) applied (spec); model already-applied" in said, said
    assert left(work, stock) == "model+spec"
    assert ct.run_cli(["status", "--target", str(work), *lib])[0] == 0


@pytest.mark.parametrize("following", ["status", "apply", "recover"])
def test_files_an_apply_cut_short_wrote_are_never_judged_upstream(tree, scratch, tmp_path, following):
    """A SIGKILL after an apply wrote every file of a set and before its record, on a tree no RECORD
    proves stock (a checkout): the files hold the change with no apply recorded. The next command
    rolls the transaction back under its lock; it judged those files before that as upstream's or
    a hand's ("nothing to patch", exit 0, the journal kept; status "unrecorded" of a stock tree)."""
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]})
    stock = tmp_path / "stock"
    shutil.copytree(tree, stock)
    work = tmp_path / "work"
    lib = ["--patches", str(library)]
    for n in range(1, 300):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(stock, work)
        code, out = ct.run_cli(["apply", "--target", str(work), *lib, "--no-import"], f"{n}:kill", served=True)
        assert code == -9, (n, out)  # the apply ends after the file is written: a kill there is found first
        if left(work, stock) == "model" and (work / ".patchkit/journal.json").exists():
            break
    rest = [] if following == "recover" else [*lib, *(["--no-import"] * (following == "apply"))]
    code, said = ct.run_cli([following, "--target", str(work), *rest])
    assert "rolled back an interrupted patchkit transaction" in said, said
    assert not (work / ".patchkit/journal.json").exists(), said
    assert "no apply recorded" not in said and "upstream" not in said, said
    if following == "recover":  # what is left to do, and where to see the tree
        assert code == 0 and left(work, stock) == "stock", said
        assert "note: run the apply or revert it cut short again; " in said, said
        assert f"`patchkit status --target {work}` shows where the tree stands" in " ".join(said.split()), said
    elif following == "status":
        assert code == 0 and said.splitlines()[-1] == "status: not-applied: 0 of 1 patch applied", said
        assert left(work, stock) == "stock"
    else:
        assert code == 0 and "applied 1 patch(es): 1 file(s) changed" in said, said
        assert left(work, stock) == "model" and ct.run_cli(["status", "--target", str(work), *lib])[0] == 0


def test_status_after_a_killed_first_apply_names_nothing_its_rollback_removes(tree, scratch, tmp_path):
    """A SIGKILL in a first apply after it saved the originals: status rolls the transaction back,
    and with nothing recorded the store goes at its end. It said ".patchkit/objects/ holds 1 file(s)
    no record names: `patchkit revert` removes them" of files gone by the time it ended (revert then
    found nothing to do)."""
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]})
    stock = tmp_path / "stock"
    shutil.copytree(tree, stock)
    work = tmp_path / "work"
    lib = ["--patches", str(library)]
    held = 0
    for n in sweep_trials(range(1, 300)):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(stock, work)
        if ct.run_cli(["apply", "--target", str(work), *lib, "--no-import"], f"{n}:kill", served=True)[0] == 0:
            break
        objects = work / ".patchkit/objects"
        held += objects.is_dir() and any(objects.iterdir())
        code, said = ct.then(["status", "--target", str(work), *lib])
        if not (work / ".patchkit").exists():  # rolled back whole: nothing of patchkit's is left to name
            assert ".patchkit" not in said and "revert" not in said, (n, said)
            assert code == 0 and left(work, stock) == "stock", (n, said)
    assert held, "no kill fell after the originals were saved"
