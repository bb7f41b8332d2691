"""Issue 10, defects 1, 2, 4 (.patchkit/), 11 (record shapes) and 12 (leftover temp files): what
patchkit reads back from .patchkit/ is validated before any read or write it drives."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    fingerprint,
    make_patch,
    mark_staged,
    patched_spec,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    run_patchkit,
    snapshot,
    write_tree,
)

from patchkit.store.journal import staged_name

SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory beside the tree that nothing may touch."""
    where = tmp_path / "elsewhere"
    where.mkdir()
    (where / "secret.py").write_text("TOKEN = 'not for the tree'\n")
    (where / "hollow").mkdir()
    return where


# -- defect 1: recovery trusts the journal ------------------------------------------------------------


def _plant_journal(tree: Path, files: list[dict], txid: str = "9f8e7d") -> Path:
    journal = tree / ".patchkit" / "journal.json"
    journal.write_text(json.dumps({"id": txid, "previous_state": None, "files": files}))
    return journal


@pytest.mark.parametrize("command", ["status", "verify", "apply", "revert", "recover"])
def test_a_journal_with_a_dotdot_path_is_refused_by_every_command_with_nothing_touched(
    run, diff_applied, outside, command
):
    tree, patch = diff_applied
    # Rolled back, this entry would "restore" a file two levels above vllm/ (created by the apply: unlink it).
    entry = {"path": "vllm/config/../../../elsewhere/secret.py", "before": None, "after": sha("x"), "staged": None}
    journal = _plant_journal(tree, [entry])
    tree_before, outside_before = fingerprint(tree), fingerprint(outside)
    extra = [] if command == "recover" else ["--patch", patch]
    result = run(command, "--target", tree, *extra)
    assert result.exit_code == 2, result.output
    assert "journal.json" in result.output and "inspect or remove" in result.output and "'..'" in result.output
    assert fingerprint(tree) == tree_before and fingerprint(outside) == outside_before and journal.exists()


def test_a_journal_whose_staged_file_is_elsewhere_is_refused(run, diff_applied, outside):
    tree, _ = diff_applied
    _plant_journal(
        tree, [{"path": SPEC, "before": sha(SPEC_PY), "after": sha(patched_spec()), "staged": "vllm/config/spec.py"}]
    )
    before = fingerprint(tree)
    result = run("status", "--target", tree)
    assert result.exit_code == 2 and "not patchkit's temp name" in result.output
    assert fingerprint(tree) == before


def test_a_journal_needing_a_missing_original_is_refused_before_any_file_is_restored(run, diff_applied):
    tree, _ = diff_applied
    # Two files "changed": the one rolled back first (the last) has its original, the other not. Neither may be restored.
    _plant_journal(
        tree,
        [
            {"path": MODEL, "before": sha("# never saved\n"), "after": sha("# changed\n"), "staged": None},
            {"path": SPEC, "before": sha(SPEC_PY), "after": sha(patched_spec()), "staged": None},
        ],
    )
    (tree / MODEL).write_text("# changed\n")  # both written by the commit, which reached them
    (tree / SPEC).write_text(patched_spec())
    mark_staged(tree, "9f8e7d", MODEL, SPEC)
    before = fingerprint(tree)
    result = run("recover", "--target", tree)
    assert result.exit_code == 2 and "missing" in result.output
    assert fingerprint(tree) == before


def test_a_valid_journal_still_rolls_back_with_its_staged_file(run, diff_applied):
    """SPEC replaced by the commit, MODEL's new content still staged (half written) when it died."""
    tree, patch = diff_applied
    staged = tree / "vllm" / "models" / ".model.py.patchkit-ab12.tmp"
    staged.write_text("half written\n")
    files = [
        {"path": SPEC, "before": sha(SPEC_PY), "after": sha(patched_spec()), "staged": ".x", "mode": 0o644},
        {"path": MODEL, "before": sha(MODEL_PY), "after": sha("half written\n"), "staged": ".x", "mode": 0o644},
    ]
    for entry in files:
        entry["staged"] = staged_name(entry["path"], "ab12")
    _plant_journal(tree, files, txid="ab12")
    (tree / SPEC).write_text(patched_spec())  # the commit's write, before MODEL's
    mark_staged(tree, "ab12", SPEC)
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code == 0 and "1 file(s) restored" in result.output, result.output
    assert (tree / SPEC).read_text() == SPEC_PY and (tree / MODEL).read_text() == MODEL_PY and not staged.exists()


# -- defect 2: state entries with unsafe paths --------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["vllm/../../elsewhere/secret.py", "vllm\\..\\..\\elsewhere\\secret.py", "/etc/hostname", "vllm//x.py"]
)
@pytest.mark.parametrize("command", [("status",), ("revert", "--force")])
def test_state_with_an_unsafe_path_is_refused_before_any_read_or_write(run, diff_applied, outside, path, command):
    tree, patch = diff_applied
    state_file = tree / ".patchkit" / "state.json"
    state = json.loads(state_file.read_text())
    state["entries"][0]["files"][path] = {"before": sha("TOKEN = 'x'\n"), "after": sha("TOKEN = 'not for the tree'\n")}
    state_file.write_text(json.dumps(state))
    tree_before, outside_before = fingerprint(tree), fingerprint(outside)
    result = run(*command, "--target", tree, "--patch", patch)
    assert result.exit_code == 2, result.output
    assert "state.json is damaged" in result.output and repr(path) in result.output
    assert fingerprint(tree) == tree_before and fingerprint(outside) == outside_before
    assert not (tree / ".patchkit" / "saved").exists() and not (tree.parent / "saved").exists()


# -- defect 4: a symlinked .patchkit/ or a symlink inside it -------------------------------------------


def test_a_symlinked_patchkit_dir_is_refused_before_writing_anything(run, tree, tmp_path, outside):
    patch = tmp_path / "deepseek.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {SPEC: patched_spec()}))
    (tree / ".patchkit").symlink_to(outside / "hollow")
    stock, outside_before = snapshot(tree), fingerprint(outside)
    result = run("apply", "--target", tree, "--patch", patch)
    assert result.exit_code == 2 and ".patchkit is a symlink" in result.output
    assert snapshot(tree) == stock and fingerprint(outside) == outside_before


@pytest.mark.parametrize("name", ["lock", "state.json", "journal.json", "objects", "saved"])
def test_a_symlink_inside_patchkit_dir_is_refused(run, diff_applied, outside, name):
    tree, patch = diff_applied
    planted = tree / ".patchkit" / name
    if planted.is_dir():
        for child in planted.iterdir():
            child.unlink()
        planted.rmdir()
    planted.unlink(missing_ok=True)
    planted.symlink_to(outside / ("hollow" if name in ("objects", "saved") else "secret.py"))
    outside_before = fingerprint(outside)
    result = run("revert", "--target", tree, "--patch", patch)
    assert result.exit_code == 2 and f"{name} is a symlink" in result.output
    assert fingerprint(outside) == outside_before


# -- defect 11: records of the wrong shape --------------------------------------------------------------

_GOOD_FILE = {"before": sha(SPEC_PY), "after": sha(patched_spec())}
_BAD_STATES = {
    "files a string": {"format": 1, "entries": [{"set": "adhoc", "files": "vllm/config/spec.py"}]},
    "entries an object": {"format": 1, "entries": {"set": "adhoc"}},
    "a list": [{"format": 1}],
    "a number": 1,
    "no before": {"format": 1, "entries": [{"set": "adhoc", "files": {SPEC: {"after": _GOOD_FILE["after"]}}}]},
    "after a number": {"format": 1, "entries": [{"set": "adhoc", "files": {SPEC: {"before": None, "after": 5}}}]},
    "set missing": {"format": 1, "entries": [{"files": {SPEC: _GOOD_FILE}}]},
    "patches a string": {"format": 1, "entries": [{"set": "a", "patches": "p", "files": {}}]},
    "format a string": {"format": "1", "entries": []},
    "library relative": {"format": 1, "entries": [{"set": "a", "library": "lib", "files": {}}]},
    "library a number": {"format": 1, "entries": [{"set": "a", "library": 3, "files": {}}]},
    "library with a newline": {"format": 1, "entries": [{"set": "a", "library": "/lib\nfix: rm", "files": {}}]},
    "chosen a string": {"format": 1, "entries": [], "chosen": "eagle3"},
    "chosen with a newline": {"format": 1, "entries": [], "chosen": ["eagle3\nfix: rm -rf"]},
    "chosen a number": {"format": 1, "entries": [], "chosen": [3]},
}


@pytest.mark.parametrize("data", list(_BAD_STATES.values()), ids=list(_BAD_STATES))
def test_state_of_the_wrong_shape_is_a_clean_exit_2(run, diff_applied, data):
    tree, patch = diff_applied
    (tree / ".patchkit" / "state.json").write_text(json.dumps(data))
    for command in (("status",), ("revert", "--force"), ("apply",)):
        result = run(*command, "--target", tree, "--patch", patch)
        assert result.exit_code == 2 and "state.json is damaged" in result.output, (command, result.output)


_BAD_JOURNALS = {
    "a list": [{"path": SPEC}],
    "files a string": {"id": "a1", "files": SPEC},
    "an entry a string": {"id": "a1", "files": [SPEC]},
    "id a number": {"id": 7, "files": []},
    "id with a slash": {"id": "../x", "files": []},
    "path a number": {"id": "a1", "files": [{"path": 3, "before": None, "after": None}]},
    "mode negative": {"id": "a1", "files": [{"path": SPEC, "before": None, "after": None, "mode": -1}]},
    "created_dirs a string": {
        "id": "a1",
        "files": [{"path": SPEC, "before": None, "after": None, "created_dirs": "v"}],
    },
    "previous state damaged": {"id": "a1", "previous_state": "{", "files": []},
}


@pytest.mark.parametrize("data", list(_BAD_JOURNALS.values()), ids=list(_BAD_JOURNALS))
def test_journal_of_the_wrong_shape_is_a_clean_exit_2(run, diff_applied, data):
    tree, _ = diff_applied
    (tree / ".patchkit" / "journal.json").write_text(json.dumps(data))
    before = fingerprint(tree)
    result = run("status", "--target", tree)
    assert result.exit_code == 2 and "journal.json is damaged" in result.output, result.output
    assert fingerprint(tree) == before


@pytest.mark.parametrize("name", ["state.json", "journal.json"])
def test_a_huge_record_is_refused_without_being_parsed(run, diff_applied, name):
    from patchkit.store.state import MAX_RECORD_BYTES

    tree, _ = diff_applied
    (tree / ".patchkit" / name).write_bytes(b"[" + b"0," * (MAX_RECORD_BYTES // 2) + b"0]")
    result = run("status", "--target", tree)
    assert result.exit_code == 2 and f"larger than {MAX_RECORD_BYTES} bytes" in result.output


# -- defect 12: temporary files a killed patchkit left behind ---------------------------------------------


def test_recovery_removes_patchkit_temp_files_of_managed_files_only(run, diff_applied, outside):
    tree, patch = diff_applied
    meta = tree / ".patchkit"
    leftovers = [
        tree / "vllm" / "config" / ".spec.py.patchkit-0a1b2c3d.tmp",
        meta / ".state.json.patchkit-ffee0011.tmp",
        meta / ".journal.json.patchkit-12345678.tmp",
        meta / "objects" / f".{sha(SPEC_PY)}.patchkit-9abc.tmp",
    ]
    kept = [
        tree / "vllm" / "models" / ".model.py.patchkit-0a1b2c3d.tmp",  # not a file patchkit manages
        tree / "vllm" / "config" / ".spec.py.patchkit-0a1b2c3d.tmp.bak",  # not patchkit's name
        tree / "vllm" / "config" / "spec.py.patchkit-0a1b2c3d.tmp",
    ]
    for path in leftovers + kept:
        path.write_text("left over\n")
    link = tree / "vllm" / "config" / ".spec.py.patchkit-5e5e.tmp"
    link.symlink_to(outside / "secret.py")  # removed as a link; its target is not followed
    outside_before = fingerprint(outside)
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code == 0, result.output
    assert not any(os.path.lexists(p) for p in [*leftovers, link])
    assert all(p.exists() for p in kept) and fingerprint(outside) == outside_before


@pytest.mark.slow
def test_no_temp_file_survives_a_kill_at_any_step_once_a_command_has_run(tmp_path):
    tree = write_tree(tmp_path / "site")
    patch = tmp_path / "change.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {SPEC: patched_spec(), MODEL: "# replaced\n"}))
    target = ["--target", str(tree), "--patch", str(patch)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")}
    killed_with_leftovers = 0
    for n in range(1, 40):  # each command a process of its own (forked by cli_server), which the fault ends
        died = run_patchkit(
            ["apply", *target], {**env, "PATCHKIT_FAULT_AFTER": str(n), "PATCHKIT_FAULT_MODE": "exit"}, None, 300
        )
        if died.returncode == 0:
            break
        killed_with_leftovers += bool(list(tree.rglob("*.patchkit-*.tmp")))
        status = run_patchkit(["status", *target], env, None, 300)
        assert status.returncode == 0, status.stderr
        assert not list(tree.rglob("*.patchkit-*.tmp")), n
    assert killed_with_leftovers  # the kills did leave some: the test saw recovery remove them


# -- a record's set name: untrusted input ------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../x", "-rf", "..", "a\\b"])
def test_a_record_naming_no_set_name_is_refused_in_short_words_with_a_fix(tmp_path, name):
    """A set name in state.json that no library set can have (`../../x`, a leading '-') made status's
    note one 330-character line naming `--set ../../x`. The record is untrusted: it is damaged, and
    the guard says so too."""
    from helpers import write_library

    from patchkit._target.guard import state_damage

    clean = write_tree(tmp_path / "clean")
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, clean, {SPEC: patched_spec()})]})
    tree = write_tree(tmp_path / "site")
    target = ["--target", tree, "--patches", library]
    assert run_cli_writing("apply", *target).returncode == 0
    record = tree / ".patchkit" / "state.json"
    data = json.loads(record.read_text())
    data["entries"][0]["set"] = name
    record.write_text(json.dumps(data))
    before = fingerprint(tree)
    for command in ("status", "apply", "revert"):
        done = run_cli_judged(command, *target)
        assert done.returncode == 2, done.stdout + done.stderr
        error = next(line for line in done.stderr.splitlines() if line.startswith("error: "))
        assert f"its set {name!r} is no set name" in error and "--set" not in done.stdout + done.stderr
        assert len(error.replace(str(record), "state.json")) <= 110  # the path aside: short words (330 before)
        assert "move it aside" in done.stderr and fingerprint(tree) == before
    assert "no set name" in str(state_damage(data))
    os.rename(record, f"{record}.damaged")  # the hint's fix: the commands go on
    assert run_cli_read_only("status", *target).returncode == 0


def test_a_library_set_named_as_no_set_name_is_refused_before_anything_is_written(tmp_path):
    """The rule holds at the source too: a set.toml `name` that a record could not keep is refused."""
    from helpers import write_library

    clean = write_tree(tmp_path / "clean")
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, clean, {SPEC: patched_spec()})]}, name="up"
    )
    manifest = library / "up" / "set.toml"
    manifest.write_text(manifest.read_text().replace('name = "up"', 'name = "../up"'))
    tree = write_tree(tmp_path / "site")
    before = fingerprint(tree)
    done = run_cli_writing("apply", "--target", tree, "--patches", library)
    assert done.returncode == 2 and "`name` '../up' contains a '/'" in done.stderr, done.stderr
    assert fingerprint(tree) == before
