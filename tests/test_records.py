"""What the tree records, read back: one set per apply and revert undoing the right ones, records an
upgrade of vLLM made stale, saved originals gone missing, edits kept aside by `revert --force`, and
files replaced by something that is not a file."""

from __future__ import annotations

import importlib.machinery
import json
import os
from pathlib import Path
from xml.etree import ElementTree

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    fingerprint,
    make_patch,
    patched_spec,
    record_created,
    run_cli_judged,
    run_cli_writing,
    snapshot,
    write_library,
    write_tree,
)

from patchkit._target.guard import find_problems
from patchkit.distinfo.record import record_hash
from patchkit.store.state import read_state

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"


def eagle_model() -> str:
    return MODEL_PY.replace("SupportsPP):", "SupportsPP, SupportsEagle3):").replace(
        "import SupportsLoRA, SupportsPP\n", "import SupportsEagle3, SupportsLoRA, SupportsPP\n"
    )


def json_of(result) -> dict:
    return json.loads(result.stdout)


@pytest.fixture
def diffs(tree, scratch) -> dict[str, Path]:
    """Ad-hoc diffs: `spec` and `model` touch one file each; `spec_again` changes what `spec` wrote."""
    patched = write_tree(scratch / "patched", files={SPEC: patched_spec(), MODEL: MODEL_PY})
    texts = {
        "spec": make_patch(scratch, tree, {SPEC: patched_spec()}),
        "model": make_patch(scratch, tree, {MODEL: eagle_model()}),
        "spec_again": make_patch(scratch, patched, {SPEC: patched_spec().replace('"deepseek"', '"kimi_k2"')}),
    }
    for name, text in texts.items():
        (scratch / f"{name}.diff").write_bytes(text)
    return {name: scratch / f"{name}.diff" for name in texts}


# --- defect 6: every apply is its own set -------------------------------------------------------


def test_reverting_one_adhoc_set_leaves_the_other(run, tree, diffs):
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    names = [e.set_name for e in read_state(tree).entries]
    assert len(names) == 2 and all(n.startswith("adhoc-") for n in names) and names[0] != names[1]

    result = run("revert", "--target", tree, "--patch", diffs["model"])
    assert result.exit_code == 0, result.output
    assert (tree / MODEL).read_text() == MODEL_PY
    assert (tree / SPEC).read_text() == patched_spec()  # the other set stays applied
    assert [e.set_name for e in read_state(tree).entries] == names[:1]

    result = run("revert", "--target", tree)  # no --patch, no library series: what the tree records
    assert result.exit_code == 0, result.output
    assert snapshot(tree) == stock and read_state(tree).entries == []


def test_plain_revert_undoes_an_adhoc_apply_whatever_the_library_holds(run, tree, scratch, diffs):
    library = write_library(
        scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec().replace('"qwen"', '"mistral"')})]}
    )
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    result = run("revert", "--target", tree, "--patches", library)
    assert result.exit_code == 0, result.output
    assert snapshot(tree) == stock


def test_revert_set_undoes_the_library_set_only(run, tree, scratch, diffs):
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {MODEL: eagle_model()})]})
    assert run("apply", "--target", tree, "--patches", library).exit_code == 0
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    result = run("revert", "--target", tree, "--patches", library, "--set", "demo")
    assert result.exit_code == 0, result.output
    assert (tree / MODEL).read_text() == MODEL_PY and (tree / SPEC).read_text() == patched_spec()
    [left] = read_state(tree).entries
    assert left.set_name.startswith("adhoc-")


def test_a_set_changed_again_by_a_later_set_cannot_be_reverted_alone(run, tree, diffs):
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    assert run("apply", "--target", tree, "--patch", diffs["spec_again"]).exit_code == 0
    status = run("status", "--target", tree, "--patch", diffs["spec"], "--format", "json")
    assert json_of(status)["drifted"] == []  # the later set's write is not a hand edit
    before = snapshot(tree)

    result = run("revert", "--target", tree, "--patch", diffs["spec"])
    assert result.exit_code == 1
    assert SPEC in result.output and "revert" in result.output and "Traceback" not in result.output
    assert snapshot(tree) == before

    assert run("revert", "--target", tree, "--patch", diffs["spec_again"]).exit_code == 0
    assert (tree / SPEC).read_text() == patched_spec()
    assert run("revert", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    assert snapshot(tree) == stock


def test_plain_revert_undoes_stacked_sets_last_first(run, tree, diffs):
    stock = snapshot(tree)
    for name in ("spec", "model", "spec_again"):
        assert run("apply", "--target", tree, "--patch", diffs[name]).exit_code == 0
    result = run("revert", "--target", tree, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json_of(result)["files"] == [SPEC, MODEL]
    assert snapshot(tree) == stock and not read_state(tree).entries


# --- defect 7: vLLM upgraded under patchkit ---------------------------------------------------------

NEW_SPEC = SPEC_PY.replace('"""A stand-in for a config module."""', '"""The config module, 0.17.0."""')
NEW_MODEL = MODEL_PY + "\n\nVERSION = 17\n"


def upgrade(tree: Path, version: str, files: dict[str, str]) -> None:
    """What `pip install -U vllm` does: new stock files, the old dist-info replaced by the new one."""
    old = next(tree.glob("vllm-*.dist-info"))
    for path in old.iterdir():
        path.unlink()
    old.rmdir()
    write_tree(tree, version, files)
    rows = [f"{p},{record_hash((tree / p).read_bytes())},{(tree / p).stat().st_size}" for p in files]
    (tree / f"vllm-{version}.dist-info" / "RECORD").write_text("\n".join(rows) + "\n")


@pytest.fixture
def two_releases(tree, scratch) -> Path:
    new = write_tree(scratch / "new", "0.17.0", {SPEC: NEW_SPEC, MODEL: NEW_MODEL})
    return write_library(
        scratch / "lib",
        {
            "0.16.0": [make_patch(scratch, tree, {MODEL: eagle_model()})],
            "0.17.0": [make_patch(scratch, new, {MODEL: eagle_model() + "\n\nVERSION = 17\n"})],
        },
    )


def test_an_upgraded_vllm_makes_the_record_stale_and_apply_starts_afresh(run, tree, two_releases):
    args = ("--target", tree, "--patches", two_releases)
    assert run("apply", *args).exit_code == 0
    upgrade(tree, "0.17.0", {SPEC: NEW_SPEC, MODEL: NEW_MODEL})
    new_stock = snapshot(tree)

    result = run("status", *args, "--format", "json")
    assert result.exit_code == 1, result.output  # the guard apply installed refuses the launch
    status = json_of(result)
    assert status["state"] == "not-applied" and status["drifted"] == []
    assert status["stale"] == ["the record of demo: recorded 0.16.0, installed 0.17.0: the old record is stale"]
    assert f"`patchkit apply --target {tree} --patches {two_releases}`" in status["guard"]["fix"]
    assert "recorded 0.16.0, installed 0.17.0" in run("status", *args).output

    result = run("apply", *args)  # no --force needed
    assert result.exit_code == 0, result.output
    assert "the old record is stale" in result.output
    [entry] = read_state(tree).entries
    assert entry.vllm_version == "0.17.0"
    assert (tree / MODEL).read_text().endswith("VERSION = 17\n")

    assert run("revert", *args).exit_code == 0
    assert snapshot(tree) == new_stock


@pytest.mark.parametrize("flags", [(), ("--force",), ("--dry-run",)])
def test_revert_with_a_stale_record_writes_no_old_file(run, tree, two_releases, flags):
    assert run("apply", "--target", tree, "--patches", two_releases).exit_code == 0
    upgrade(tree, "0.17.0", {SPEC: NEW_SPEC, MODEL: NEW_MODEL})
    new_stock = snapshot(tree)
    result = run("revert", *flags, "--target", tree, "--patches", two_releases)
    assert result.exit_code == 0, result.output
    assert "recorded 0.16.0, installed 0.17.0: the old record is stale" in result.output
    assert snapshot(tree) == new_stock
    assert bool(read_state(tree).entries) == (flags == ("--dry-run",))  # dropped, unless a dry run


def test_revert_force_of_an_adhoc_set_never_writes_the_old_release_into_the_new(run, tree, diffs):
    assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    upgrade(tree, "0.17.0", {SPEC: NEW_SPEC, MODEL: NEW_MODEL})
    new_stock = snapshot(tree)
    result = run("revert", "--force", "--target", tree, "--patch", diffs["model"], "--format", "json")
    assert result.exit_code == 0, result.output
    assert json_of(result)["result"] == "not-applied" and "the old record is stale" in result.output
    assert snapshot(tree) == new_stock and not read_state(tree).entries


def test_a_version_change_without_the_new_stock_files_is_not_stale(run, tree, two_releases):
    assert run("apply", "--target", tree, "--patches", two_releases).exit_code == 0
    patched_model = (tree / MODEL).read_text()
    upgrade(tree, "0.17.0", {SPEC: NEW_SPEC, MODEL: patched_model})  # RECORD vouches for other bytes
    (tree / MODEL).write_text(patched_model + "# not the RECORD's\n")
    status = json_of(run("status", "--target", tree, "--patches", two_releases, "--format", "json"))
    assert status["stale"] == []


# --- defect 10: a saved original missing or corrupt ---------------------------------------------------


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_damaged_saved_original_falls_back_to_reverse_applying(run, tree, diffs, damage):
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    [obj] = (tree / ".patchkit" / "objects").iterdir()
    if damage == "missing":
        obj.unlink()
    else:
        obj.write_bytes(obj.read_bytes().replace(b"forward", b"backward"))
    result = run("revert", "--target", tree, "--patch", diffs["model"])
    assert result.exit_code == 0, result.output
    assert "reverse-applying" in result.output and MODEL in result.output
    assert snapshot(tree) == stock


def test_a_damaged_original_the_patches_cannot_rebuild_is_refused(run, tree, diffs, scratch):
    assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    for obj in (tree / ".patchkit" / "objects").iterdir():
        obj.unlink()
    (tree / MODEL).write_text(eagle_model())  # unchanged: but the record's diff is not at hand
    before = snapshot(tree)
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    result = run("revert", "--target", tree, "--patches", library)
    assert result.exit_code == 2 and "saved original" in result.output and MODEL in result.output
    assert "Traceback" not in result.output
    assert snapshot(tree) == before


# --- defect 5: revert --force never overwrites a saved copy -------------------------------------------


def test_forced_reverts_in_the_same_second_keep_every_edit(run, tree, diffs):
    kept = []
    for edit in ("# first edit\n", "# second edit\n"):
        assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
        (tree / SPEC).write_text(patched_spec() + edit)
        result = run("revert", "--force", "--target", tree, "--patch", diffs["spec"], "--format", "json")
        assert result.exit_code == 0, result.output
        kept.append(Path(json_of(result)["saved"]))
    assert kept[0] != kept[1]
    assert (kept[0] / SPEC).read_text().endswith("# first edit\n")
    assert (kept[1] / SPEC).read_text().endswith("# second edit\n")


def test_keep_copies_makes_a_new_directory_every_time(tree):
    from patchkit.store.saved import keep_copies

    (tree / ".patchkit").mkdir()  # the lock's directory: made before any revert
    (tree / SPEC).write_text("one\n")
    first = keep_copies(tree, [SPEC])
    (tree / SPEC).write_text("two\n")
    second = keep_copies(tree, [SPEC])
    assert first != second and first.parent == second.parent == tree / ".patchkit" / "saved"
    assert (first / SPEC).read_text() == "one\n" and (second / SPEC).read_text() == "two\n"


def test_a_symlinked_saved_directory_is_refused(run, tree, diffs, tmp_path):
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "keep.txt").write_text("mine\n")
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    (tree / ".patchkit" / "saved").symlink_to(sentinel)
    (tree / SPEC).write_text(patched_spec() + "# edit\n")
    before, outside = snapshot(tree), fingerprint(sentinel)
    result = run("revert", "--force", "--target", tree, "--patch", diffs["spec"])
    assert result.exit_code == 2 and "saved" in result.output and "Traceback" not in result.output
    assert snapshot(tree) == before and fingerprint(sentinel) == outside


# --- defects 11 and 12: not a file where a patched file should be -------------------------------------


def test_a_patched_file_replaced_by_a_directory_is_refused_naming_it(run, tree, diffs):
    assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    (tree / MODEL).unlink()
    (tree / MODEL).mkdir()
    for force in ((), ("--force",)):
        result = run("revert", *force, "--target", tree, "--patch", diffs["model"])
        assert result.exit_code == 2, result.output
        assert MODEL in result.output and "not a regular file" in result.output
    assert (tree / MODEL).is_dir() and read_state(tree).entries


def test_a_patched_file_deleted_is_drift_and_force_restores_it(run, tree, diffs):
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    (tree / MODEL).unlink()
    result = run("revert", "--target", tree, "--patch", diffs["model"])
    assert result.exit_code == 1 and f"{MODEL} was deleted" in result.output
    result = run("revert", "--force", "--target", tree, "--patch", diffs["model"], "--format", "json")
    assert result.exit_code == 0, result.output
    assert json_of(result)["saved"] is None  # nothing of yours to keep
    assert snapshot(tree) == stock


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_to_patch_is_exit_2_naming_it(run, tree, diffs, kind):
    (tree / SPEC).unlink()
    if kind == "fifo":
        os.mkfifo(tree / SPEC)
    else:
        (tree / SPEC).mkdir()
    for dry_run in ((), ("--dry-run",)):
        result = run("apply", *dry_run, "--target", tree, "--patch", diffs["spec"])
        assert result.exit_code == 2, result.output
        assert SPEC in result.output and "does not exist" not in result.output
    assert not (tree / ".patchkit" / "state.json").exists()


def test_the_dry_run_refuses_a_symlinked_file_as_apply_does(run, tree, diffs, tmp_path):
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text(SPEC_PY)
    (tree / SPEC).unlink()
    (tree / SPEC).symlink_to(elsewhere)
    outputs = []
    for dry_run in (("--dry-run",), ()):
        result = run("apply", *dry_run, "--target", tree, "--patch", diffs["spec"])
        assert result.exit_code == 2, result.output
        outputs.append(result.output.strip().splitlines()[-1])
    assert outputs[0] == outputs[1] and "symlink" in outputs[0] and SPEC in outputs[0]
    assert elsewhere.read_text() == SPEC_PY


# --- defect 8: verify on a drifted tree runs the checks on the files as they are ------------------------


CONTRACT = """\
[[requirement]]
file = "vllm/models/model.py"
kind = "methods"
class = "Model"
methods = ["load_draft", "aux_layers"]
"""
DRAFT_METHODS = """
    def load_draft(self, path):
        self.draft = path

    def aux_layers(self):
        return (2, 4)
"""


def test_verify_on_a_drifted_tree_names_what_the_hand_edit_broke(run, tree, scratch):
    patched = MODEL_PY + DRAFT_METHODS
    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {MODEL: patched})]})
    manifest = library / "demo" / "set.toml"
    manifest.write_text('contract = "contract.toml"\n' + manifest.read_text())
    (library / "demo" / "contract.toml").write_text(CONTRACT)
    args = ("--target", tree, "--patches", library)
    assert run("apply", *args).exit_code == 0
    (tree / MODEL).write_text(patched.replace("    def aux_layers(self):\n        return (2, 4)\n", ""))

    result = run("verify", *args, "--format", "json")
    assert result.exit_code == 1
    report = json_of(result)
    assert report["drifted"] == [MODEL] and report["checked"] == "as-is"
    failed = [c["message"] for c in report["checks"] if not c["ok"] and c["check"] == "contract"]
    assert len(failed) == 1 and "lacks method(s) aux_layers" in failed[0]
    assert "lacks method(s) aux_layers" in run("verify", *args).output

    junit = run("verify", *args, "--format", "junit")
    assert junit.exit_code == 1
    suite = ElementTree.fromstring(junit.stdout)
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    failures = {case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None}
    assert f"drift: {MODEL}" in failures and f"contract: {MODEL}" in failures
    assert int(suite.get("failures")) == len(failures) >= 2


@pytest.mark.parametrize("applied", [False, True])
def test_status_refuses_a_tree_apply_and_revert_refuse(run, tree, diffs, tmp_path, applied):
    """A series file behind a symlinked directory: the command that would change the tree (apply on a
    stock one, revert on an applied one) refuses to write through it, so status says so too (exit
    2, naming it) instead of reporting a state patchkit could not change. On an applied tree the
    guard refuses the file for the symlink (where it leads is never resolved: review36 N14-b), and
    status says that refusal with the same repair (exit 1), as for a symlink inside the tree."""
    if applied:
        assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    elsewhere = tmp_path / "models-elsewhere"
    (tree / "vllm" / "models").rename(elsewhere)
    (tree / "vllm" / "models").symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(tree)
    results = {
        command: run(*command.split(), "--target", tree, "--patch", diffs["model"])
        for command in ("status", "revert" if applied else "apply")
    }
    for command, result in results.items():
        if applied and command == "status":
            assert result.exit_code == 1, (command, result.output)
            assert f"{MODEL} is a symlink, or under one: not the file patchkit wrote" in result.output
        else:
            assert result.exit_code == 2, (command, result.output)
            assert f"{MODEL}: the path goes through a symlink" in result.output, command
        # review 13 M2: the hint names the action that lets the command run
        fix = (
            f"replace the symlink {tree / 'vllm' / 'models'} with a real directory holding a copy of what it points to"
        )
        assert fix in " ".join(result.output.split()), (command, result.output)
    assert snapshot(tree) == before
    plain = tmp_path / "plain"
    write_tree(plain)
    assert run("status", "--target", plain, "--patch", diffs["model"]).exit_code == 0


def test_verify_and_fleets_phase_one_refuse_a_tree_status_refuses(run, tree, diffs):
    """A series directory symlinked inside the tree (no bytecode check notices it, unlike a symlink
    out of the tree): verify passed it, on a stock tree and on an applied one, while status, apply
    and revert refuse it; and `fleet apply`'s phase 1 (verify --no-import) said `ready` to a node
    whose phase 2 would refuse."""
    from patchkit.cli.main import run_in_process
    from patchkit.fleet import node

    for applied in (False, True):
        if applied:
            assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
        config = tree / "vllm" / "config"
        config.rename(tree / "vllm" / "config_real")
        config.symlink_to("config_real", target_is_directory=True)
        before = snapshot(tree)
        for command in ("status", "verify", "verify --no-import", "revert" if applied else "apply"):
            result = run(*command.split(), "--target", tree, "--patch", diffs["spec"])
            if applied and command != "revert":  # a recorded file the guard refuses: the tree state's failure
                assert result.exit_code == 1, (applied, command, result.output)
                assert f"replace the symlink {config} with a" in " ".join(result.output.split()), (
                    command,
                    result.output,
                )
                continue
            assert result.exit_code == 2, (applied, command, result.output)
            assert f"{SPEC}: the path goes through a symlink" in result.output, (applied, command)
        prepare = node.run_step("prepare", {"target": str(tree), "adhoc": [str(diffs["spec"])]}, run_in_process)
        if applied:  # not `ready`: the apply of phase 2 refuses to write through the symlink
            assert not prepare["ok"] and "the launch guard refuses" in prepare["detail"], prepare
            assert prepare["hint"].startswith(f"replace the symlink {config} with a"), prepare
        else:
            assert not prepare["ok"] and prepare["state"] == "failed" and "goes through a symlink" in prepare["detail"]
        assert snapshot(tree) == before
        config.unlink()
        (tree / "vllm" / "config_real").rename(config)


def test_a_record_saying_patchkit_created_a_file_of_vllm_is_refused_and_the_file_kept(tmp_path, scratch):
    """Revert deletes a file recorded with no original: only one patchkit's patches added, never a
    file the installed vLLM's RECORD lists as its own."""
    import hashlib

    from helpers import pip_install

    site = tmp_path / "site"
    pip_install(site, "0.16.0", {"vllm/config/spec.py": SPEC_PY, "vllm/models/model.py": MODEL_PY})
    diff = tmp_path / "add.diff"
    diff.write_bytes(make_patch(scratch, site, {"vllm/models/extra.py": "EXTRA = 1\n"}))
    assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    state_file = site / ".patchkit/state.json"
    state = json.loads(state_file.read_text())
    victim = site / "vllm/config/spec.py"
    forged = {"before": None, "after": hashlib.sha256(victim.read_bytes()).hexdigest()}
    state["entries"][0]["files"]["vllm/config/spec.py"] = forged
    state_file.write_text(json.dumps(state))
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 2 and "vllm/config/spec.py" in done.stderr, done.stdout + done.stderr
    assert victim.read_text() == SPEC_PY and (site / "vllm/models/extra.py").exists()

    del state["entries"][0]["files"]["vllm/config/spec.py"]  # the record as apply wrote it
    state_file.write_text(json.dumps(state))
    assert run_cli_writing("revert", "--target", site, "--patch", diff).returncode == 0
    assert not (site / "vllm/models/extra.py").exists() and victim.read_text() == SPEC_PY


def test_a_record_saying_patchkit_created_another_packages_file_is_refused_and_the_file_kept(tmp_path, scratch):
    """The same for a file another distribution's RECORD lists (torch's): revert never deletes it."""
    import hashlib

    from helpers import pip_install

    site = tmp_path / "site"
    pip_install(site, "0.16.0", {"vllm/config/spec.py": SPEC_PY, "vllm/models/model.py": MODEL_PY})
    (site / "torch").mkdir()
    victim = site / "torch/__init__.py"
    victim.write_text("TORCH = 1\n")
    (site / "torch-2.9.0.dist-info").mkdir()
    (site / "torch-2.9.0.dist-info/RECORD").write_text("torch/__init__.py,sha256=x,10\n")
    diff = tmp_path / "add.diff"
    diff.write_bytes(make_patch(scratch, site, {"vllm/models/extra.py": "EXTRA = 1\n"}))
    assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    state_file = site / ".patchkit/state.json"
    state = json.loads(state_file.read_text())
    forged = {"before": None, "after": hashlib.sha256(victim.read_bytes()).hexdigest()}
    state["entries"][0]["files"]["torch/__init__.py"] = forged
    state_file.write_text(json.dumps(state))
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 2 and "torch/__init__.py" in done.stderr, done.stdout + done.stderr
    assert victim.read_text() == "TORCH = 1\n" and (site / "vllm/models/extra.py").exists()


def test_status_reads_the_record_once_though_the_guard_names_another_sets_file(run, tree, diffs, monkeypatch):
    """The stale records, the drifted files and the fix for another set's record the guard refuses
    are all answered from one reading of state.json."""
    from patchkit.engine import inspection

    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    assert run("apply", "--target", tree, "--patch", diffs["model"]).exit_code == 0
    (tree / SPEC).write_text(patched_spec() + "# edited\n")  # the guard refuses the spec set's file
    reads = []
    monkeypatch.setattr(inspection, "read_state", lambda root: reads.append(root) or read_state(root))
    result = run("status", "--target", tree, "--patch", diffs["model"])
    assert (
        result.exit_code == 1
        and f"--force` (it keeps a copy of edits), then `patchkit apply --target {tree} --patch" in result.output
    )
    assert reads == [tree]


# --- issue 20, H2: a re-applied set keeps its place among the stacked sets ---------------------------

TAIL = patched_spec().replace("return any(", "return bool(model_type) and any(")  # SPEC's last line
HEAD = patched_spec().replace("import os\n", "import os\nimport sys\n")  # SPEC's first import


@pytest.fixture
def stacked(run, tree, scratch) -> dict[str, Path]:
    """demo (SPEC's list) applied from a library, then an ad-hoc set on the same file (its last line):
    the libraries demo could come from next, and the ad-hoc diff."""
    patched = write_tree(scratch / "patched", files={SPEC: patched_spec(), MODEL: MODEL_PY})
    spec = make_patch(scratch, tree, {SPEC: patched_spec()})
    later = scratch / "tail.diff"
    later.write_bytes(make_patch(scratch, patched, {SPEC: TAIL}))
    found = {
        "v1": write_library(scratch / "v1", {"0.16.0": [spec]}),
        "model": write_library(scratch / "v2", {"0.16.0": [spec, make_patch(scratch, tree, {MODEL: eagle_model()})]}),
        "head": write_library(scratch / "v3", {"0.16.0": [spec, make_patch(scratch, patched, {SPEC: HEAD})]}),
        "later": later,
    }
    assert run("apply", "--target", tree, "--patches", found["v1"]).exit_code == 0
    assert run("apply", "--target", tree, "--patch", later).exit_code == 0
    return found


def test_a_set_reapplied_after_it_changed_keeps_its_place_and_revert_restores_stock(run, tree, stacked):
    stock = {**snapshot(tree), SPEC: SPEC_PY.encode()}
    # the library's set gains a patch of a file the later set never touched: demo is applied again
    result = run("apply", "--target", tree, "--patches", stacked["model"])
    assert result.exit_code == 0, result.output

    names = [e.set_name for e in read_state(tree).entries]
    assert names[0] == "demo" and names[1].startswith("adhoc-")  # demo is still under the ad-hoc set
    assert find_problems(str(tree)) == []  # the guard reads the record as the tree is
    result = run("revert", "--target", tree)
    assert result.exit_code == 0, result.output
    assert snapshot(tree) == stock and not read_state(tree).entries


def test_a_reapply_that_would_write_under_a_later_sets_record_is_refused_naming_the_order(run, tree, stacked):
    [_, later] = read_state(tree).entries
    before, record = snapshot(tree), read_state(tree)
    for dry_run in (["--dry-run"], []):
        result = run("apply", "--target", tree, "--patches", stacked["head"], *dry_run)
        assert result.exit_code == 1, result.output
        assert SPEC in result.output and later.set_name in result.output
        assert (
            f"`patchkit revert --target {tree} --patch {stacked['later']}`" in result.output
            and "Traceback" not in result.output
        )
        assert snapshot(tree) == before and read_state(tree) == record

    # the order the refusal names works: the later set off, demo again, the later set back on
    assert run("revert", "--target", tree, "--patch", stacked["later"]).exit_code == 0
    assert run("apply", "--target", tree, "--patches", stacked["head"]).exit_code == 0
    assert run("apply", "--target", tree, "--patch", stacked["later"]).exit_code == 0
    assert (tree / SPEC).read_text() == TAIL.replace("import os\n", "import os\nimport sys\n")
    assert run("revert", "--target", tree).exit_code == 0
    assert (tree / SPEC).read_text() == SPEC_PY


def test_two_stale_records_are_said_once_naming_both_sets(run, tree, two_releases, diffs):
    """Review 5 guard L5: two sets applied to 0.16.0, vLLM upgraded: status printed one note (and
    its fix) twice, identical. Records stale for the same reason are one note naming each set, and
    its fix is said once."""
    args = ("--target", tree, "--patches", two_releases)
    assert run("apply", *args).exit_code == 0
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    upgrade(tree, "0.17.0", {SPEC: NEW_SPEC, MODEL: NEW_MODEL})
    output = run("status", *args).output
    lines = [line for line in output.splitlines() if "stale warning:" in line]
    assert len(lines) == 1, output
    assert "demo" in lines[0] and "recorded 0.16.0, installed 0.17.0" in lines[0], output
    assert output.count("discards them") == 1, output
    # words27 b: the --patch apply by its file, as status lists it, never its record name adhoc-<hex>
    spec_diff = diffs["spec"].name
    said = " ".join(output.split())
    assert f"the records of demo, the --patch file {spec_diff}: recorded 0.16.0" in said and "adhoc-" not in said
    document = json.loads(run("status", *args, "--format", "json").output)
    assert "adhoc-" not in json.dumps(document), document
    applied = run("apply", *args)
    assert f"the --patch file {spec_diff}" in applied.output and "adhoc-" not in applied.output, applied.output


def test_a_later_revert_names_the_kept_copies_and_how_to_delete_them(run, tree, diffs):
    """Saved copies from an earlier `revert --force` outlive the record: a later apply + revert says
    they stay and how they go, never that nothing was recorded (the revert just undid a record)."""
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    (tree / SPEC).write_text(patched_spec() + "# my edit\n")
    assert run("revert", "--force", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    result = run("revert", "--target", tree, "--patch", diffs["spec"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "nothing is recorded" not in said
    assert [p.name for p in (tree / ".patchkit").iterdir()] == ["saved"]
    # whole, copyable; the copies alone, never .patchkit/ (a later apply's record would go with it)
    assert f"rm -r {tree / '.patchkit' / 'saved'}`" in said


def test_revert_clears_what_a_killed_command_left_on_a_stock_tree(run, tree, diffs):
    """Review 6 L3: a SIGKILL early in an apply left an empty .patchkit/, or late in a full revert
    .patchkit/objects/ with its objects and no state.json; revert (exit 0) left them there."""
    (tree / ".patchkit").mkdir()
    done = run("revert", "--target", tree, "--patch", diffs["spec"])
    assert done.exit_code == 0, done.output
    assert not (tree / ".patchkit").exists()

    assert run("apply", "--target", tree, "--patch", diffs["spec"], "--no-guard").exit_code == 0
    assert any((tree / ".patchkit" / "objects").iterdir())
    (tree / SPEC).write_text(SPEC_PY)  # the revert had put the stock bytes back, then died
    (tree / ".patchkit" / "state.json").unlink()
    done = run("revert", "--target", tree, "--patch", diffs["spec"])
    assert done.exit_code == 0, done.output
    assert not (tree / ".patchkit").exists()


def test_status_and_verify_refuse_a_record_revert_refuses(tmp_path, scratch):
    """review 12a L5: `"before": null` for a file the installed vLLM's RECORD lists: status said
    applied (exit 0) and verify passed, while revert refused the record. Each says what revert says."""

    from helpers import pip_install

    site = tmp_path / "site"
    pip_install(site, "0.16.0", {"vllm/config/spec.py": SPEC_PY, "vllm/models/model.py": MODEL_PY})
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {"vllm/models/model.py": MODEL_PY + "# patched\n"}))
    assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    state_file = site / ".patchkit/state.json"
    state = json.loads(state_file.read_text())
    entry = state["entries"][0]["files"]["vllm/models/model.py"]
    entry["before"] = None
    state_file.write_text(json.dumps(state))
    said = {}
    for command in ("revert", "status", "verify"):
        done = run_cli_judged(command, "--target", site, "--patch", diff)
        assert done.returncode == 2, (command, done.stdout + done.stderr)
        said[command] = done.stderr
    assert "says patchkit created vllm/models/model.py" in said["revert"]
    assert said["status"] == said["verify"] == said["revert"]
    assert (site / "vllm/models/model.py").read_text() == MODEL_PY + "# patched\n"


def test_a_created_file_whose_patch_file_is_gone_is_deleted_only_while_it_holds_what_patchkit_wrote(
    run, tree, scratch, tmp_path
):
    """Review 15 M1: a --patch that created a file, the patch file since moved away: revert and
    revert --force exited 2 with a hint naming CWD + the patch's basename, a file that did not exist."""
    stock = snapshot(tree)
    created = scratch / "adds.diff"
    created.write_bytes(make_patch(scratch, tree, {"vllm/made.py": "MADE = 2\n"}))
    assert run("apply", "--target", tree, "--patch", created, "--no-guard").exit_code == 0
    created.rename(tmp_path / "elsewhere.diff")
    (tree / "vllm/made.py").write_text("MADE = 3\n")  # changed since: nothing proves it is patchkit's
    for force in ((), ("--force",)):
        done = run("revert", "--target", tree, *force)
        said = " ".join(done.output.split())
        assert done.exit_code == 2 and "--patch /" not in said and "--patch adds" not in said, said
        assert f"{created} is gone" in said and "delete vllm/made.py yourself" in said, said
        assert (tree / "vllm/made.py").read_text() == "MADE = 3\n"

    (tree / "vllm/made.py").write_text("MADE = 2\n")  # the bytes patchkit wrote, as only the record says
    done = run("revert", "--target", tree)  # words30 item 2: on the record's word alone, --force
    assert done.exit_code == 1 and "--force" in done.output and (tree / "vllm/made.py").exists(), done.output
    done = run("revert", "--target", tree, "--force")
    assert done.exit_code == 0, done.output
    assert snapshot(tree) == stock


def test_a_library_record_claiming_a_created_file_names_no_patch_files(run, tree, scratch):
    """Review 15 M1, the hostile record: a library set's entry claiming it created a file named the
    set's own patches as --patch files in the working directory, which do not exist there."""
    import hashlib

    library = write_library(scratch / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})
    assert run("apply", "--target", tree, "--patches", library, "--no-guard").exit_code == 0
    mine = tree / "vllm/mine.py"
    mine.write_text("MINE = 1\n")
    state_file = tree / ".patchkit/state.json"
    state = json.loads(state_file.read_text())
    state["entries"][0]["files"]["vllm/mine.py"] = {"before": None, "after": hashlib.sha256(b"MINE = 1\n").hexdigest()}
    state_file.write_text(json.dumps(state))
    status = " ".join(run("status", "--target", tree, "--patches", library).output.split())
    assert "vllm/mine.py: the record says patchkit created it, but none of the set's patches does" in status, status
    assert "leaves it where it is" in status, status
    done = run("revert", "--target", tree, "--patches", library)
    said = " ".join(done.output.split())
    assert done.exit_code == 0 and "--patch " not in said, said
    assert "none of the set's patches creates them (not patchkit's to delete" in said and "vllm/mine.py" in said, said
    assert mine.read_text() == "MINE = 1\n"  # left where it is (review37 A9)
    assert run("status", "--target", tree, "--patches", library).exit_code == 0


def test_a_record_naming_created_files_no_patch_creates_is_reverted_in_one_run_leaving_them(run, tree, open_library):
    """review37 A9: a library set's record naming files it says patchkit created, which none of the set's
    patches creates, each there with other bytes: status said `revert --force`, which refused them one
    file a run (move it out, revert, put it back: up to 10,000 runs). The files are not patchkit's to
    delete: revert leaves them where they are, says so once (capped, with the count), and drops them
    from the record; status's fix then works as given, and the set's files are stock again."""
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    strays = [f"vllm/zz/b{i}.py" for i in range(20)]
    (tree / "vllm/zz").mkdir()
    for i, rel in enumerate(strays):
        (tree / rel).write_text(f"B = {i}\n")
    record_created(tree, strays)  # their record says other bytes
    status = run("status", "--target", tree, "--patches", open_library)
    said = " ".join(status.output.split())
    assert status.exit_code == 1 and "20 files drifted" in said, said
    revert_force = f"`patchkit revert --target {tree} --patches {open_library} --force`"
    assert f"fix: {revert_force} (keeps a copy of the edits), then `patchkit apply" in said, said
    done = run(*revert_force.strip("`").split()[1:])  # status's fix, as it says it
    said = " ".join(done.output.split())
    assert done.exit_code == 0, said
    assert said.count("none of the set's patches creates them") == 1 and "kept 20 file(s)" in said, said
    assert "vllm/zz/b0.py" in said and "+" in said.partition("kept 20 file(s)")[2], said  # capped, with the count
    assert {rel: (tree / rel).read_text() for rel in strays} == {rel: f"B = {i}\n" for i, rel in enumerate(strays)}
    assert {k: v for k, v in snapshot(tree).items() if not k.startswith("vllm/zz/")} == stock
    assert run("status", "--target", tree, "--patches", open_library).exit_code in (0, 3)
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0  # the fix's second step
    assert run("status", "--target", tree, "--patches", open_library).exit_code == 0
    assert find_problems(str(tree)) == []


@pytest.mark.parametrize(
    # this Python's own extension suffix: another Python's .so is never imported, nor refused (review30 L2)
    "planted",
    [f"vllm/config/spec{importlib.machinery.EXTENSION_SUFFIXES[0]}", "vllm/config/spec/__init__.py"],
)
def test_a_module_planted_after_apply_that_shadows_a_patched_file_fails_status_and_the_guard(run, tree, diffs, planted):
    """Review 15 L6: an extension module (or a package) put beside a patched file after the apply is
    what Python imports: status said "applied", exit 0, and the guard let vLLM launch; apply refuses
    the same tree. Now the guard refuses it, and status says so with the fix that works."""
    assert run("apply", "--target", tree, "--patch", diffs["spec"]).exit_code == 0
    (tree / planted).parent.mkdir(exist_ok=True)
    (tree / planted).write_bytes(b"")
    done = run("status", "--target", tree, "--patch", diffs["spec"])
    said = " ".join(done.output.split())
    assert done.exit_code == 1, done.output
    assert f"{planted} is imported instead of {SPEC}: the patch never runs" in said, said
    assert f"if {planted} is not vLLM's own, remove it" in said, said
    assert any(f"{planted} is imported instead of {SPEC}" in problem for problem in find_problems(str(tree)))
    (tree / planted).unlink()
    assert find_problems(str(tree)) == []
    assert run("status", "--target", tree, "--patch", diffs["spec"]).exit_code == 0


def test_a_planted_ad_hoc_record_naming_a_file_with_its_hash_never_loses_that_file(run, tree):
    """Review 16 H2: a record read back from the tree names a --patch file that is gone and a file
    patchkit never wrote, with that file's sha256 as what it wrote: revert deleted it, no copy kept.
    Only the record vouches for those bytes, so a copy is kept wherever it is deleted."""
    import hashlib

    notes = tree / "mypkg" / "notes.py"
    notes.parent.mkdir()
    notes.write_text("precious = 3\n")
    digest = hashlib.sha256(notes.read_bytes()).hexdigest()
    (tree / ".patchkit").mkdir()
    entry = {
        "set": "adhoc-0123456789ab",
        "vllm_version": "0.16.0",
        "files": {"mypkg/notes.py": {"before": None, "after": digest}},
        "patches": [{"name": "x.patch", "path": "/nonexistent/x.patch", "sha256": "0" * 64}],
    }
    (tree / ".patchkit/state.json").write_text(json.dumps({"format": 1, "entries": [entry]}))
    done = run("revert", "--target", tree)
    kept = [p for p in (tree / ".patchkit").rglob("notes.py*") if p.is_file()] if (tree / ".patchkit").exists() else []
    assert notes.exists() or [p.read_text() for p in kept] == ["precious = 3\n"], done.output
    if not notes.exists():
        assert str(kept[0].relative_to(tree)) in " ".join(done.output.split()) or ".patchkit/saved" in done.output


def test_a_file_deleted_on_the_records_word_alone_is_said_as_a_copy_kept_not_an_edit_or_stock(run, tree):
    """Review 17 L1: after the H2 deletion (a --patch file gone, the file holding what the record says
    patchkit wrote) revert said "your edits to X were saved" and counted X "restored to stock": X was
    not edited, and only the record says it was not there before."""
    import hashlib

    notes = tree / "vllm" / "notes.py"
    notes.write_text("precious = 3\n")
    (tree / ".patchkit").mkdir()
    entry = {
        "set": "adhoc-0123456789ab",
        "vllm_version": "0.16.0",
        "files": {"vllm/notes.py": {"before": None, "after": hashlib.sha256(b"precious = 3\n").hexdigest()}},
        "patches": [{"name": "x.patch", "path": "/nonexistent/x.patch", "sha256": "0" * 64}],
    }
    (tree / ".patchkit/state.json").write_text(json.dumps({"format": 1, "entries": [entry]}))
    done = run("revert", "--target", tree, "--force")  # on the record's word alone: --force (words30 item 2)
    said = " ".join(done.output.split())
    assert done.exit_code == 0 and not notes.exists(), said
    assert "your edits" not in said and "restored to stock" not in said, said
    assert "vllm/notes.py as it was before the revert was saved under" in said, said
    assert "(1 as only the record says: vllm/notes.py)" in said, said
