"""A review found that .patchkit/ records could drive writes a diff never could: a journal entry whose
mode carries a setuid bit, or a recorded path beside the packages (a dist-info file, a `.pth`). Recorded
paths follow a diff's rule (inside a package directory), and no written file keeps setuid, setgid or
sticky bits."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from helpers import SPEC_PY, fingerprint, make_patch, mark_staged, patched_spec

from patchkit.base import seal
from patchkit.store import journal as store_journal

SPEC = "vllm/config/spec.py"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plant_object(tree: Path, data: bytes) -> str:
    digest = sha(data)
    (tree / ".patchkit" / "objects" / digest).write_bytes(data)
    return digest


def plant_journal(tree: Path, entry: dict) -> None:
    (tree / ".patchkit" / "journal.json").write_text(
        json.dumps({"id": "c0ffee", "previous_state": None, "files": [entry]})
    )


def test_a_journal_entry_with_a_setgid_mode_is_refused_and_nothing_is_written(run, diff_applied):
    tree, patch = diff_applied
    payload = plant_object(tree, b"#!/bin/sh\necho owned\n")
    plant_journal(tree, {"path": "vllm/tool.sh", "before": payload, "after": None, "staged": None, "mode": 0o2755})
    before = fingerprint(tree)
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code == 2, result.output
    assert "permission mode" in result.output and "inspect or remove" in result.output  # the journal's hint
    assert fingerprint(tree) == before and not (tree / "vllm" / "tool.sh").exists()


@pytest.mark.parametrize(
    "path", ["vllm-0.16.0.dist-info/METADATA", "zz-evil.pth", "vllm/__pycache__/spec.cpython-311.pyc"]
)
def test_a_journal_may_not_touch_anything_beside_the_packages(run, diff_applied, path):
    tree, patch = diff_applied
    (tree / "zz-evil.pth").write_text("import os\n")
    plant_journal(tree, {"path": path, "before": None, "after": sha(b"x"), "staged": None})
    before = fingerprint(tree)
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code == 2, result.output
    assert fingerprint(tree) == before


def test_a_state_entry_beside_the_packages_is_refused_before_revert_writes(run, diff_applied):
    tree, _ = diff_applied
    payload = plant_object(tree, b"import os; os.system('id')\n")
    state_file = tree / ".patchkit" / "state.json"
    state = json.loads(state_file.read_text())
    entry = state["entries"][0]
    files = entry["files"]
    files["usercustomize.py"] = {"before": payload, "after": sha(b"")}
    (tree / "usercustomize.py").write_bytes(b"")
    state_file.write_text(json.dumps(state))
    before = fingerprint(tree)
    result = run("revert", "--target", tree)
    assert result.exit_code == 2, result.output
    assert "usercustomize.py" in result.output
    assert fingerprint(tree) == before


def test_apply_and_revert_never_leave_a_setuid_bit(run, tree, tmp_path):
    spec = tree / SPEC
    os.chmod(spec, 0o4755)  # as the tree's owner could have left it
    patch = tmp_path / "deepseek.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {SPEC: patched_spec()}))
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    assert stat.S_IMODE(spec.stat().st_mode) == 0o755
    os.chmod(spec, 0o6755)
    assert run("revert", "--target", tree).exit_code == 0
    assert spec.read_text() == SPEC_PY and stat.S_IMODE(spec.stat().st_mode) & 0o7000 == 0


def test_a_forced_revert_keeps_the_edits_readable_by_their_owner_only(run, diff_applied):
    tree, _ = diff_applied
    spec = tree / SPEC
    spec.write_text(patched_spec() + "# an edit\n")
    os.chmod(spec, 0o4755)
    result = run("revert", "--target", tree, "--force")
    assert result.exit_code == 0, result.output
    (kept,) = (tree / ".patchkit" / "saved").rglob("spec.py")
    assert kept.read_text().endswith("# an edit\n") and stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_a_journal_may_not_choose_what_the_launch_guard_becomes(run, diff_applied):
    """The guard's files are the one exception beside the packages, and a rollback brings back only
    the bytes this patchkit writes there (else it removes the file): the guard runs in every vLLM
    process."""
    tree, patch = diff_applied
    planted = b"def check():\n    __import__('os').system('id')\n"
    payload = plant_object(tree, planted)
    plant_journal(tree, {"path": "patchkit_guard.py", "before": payload, "after": None, "staged": None})
    result = run("status", "--target", tree, "--patch", patch)
    assert "Traceback" not in result.output and result.exit_code in (0, 1), result.output
    guard = tree / "patchkit_guard.py"
    assert not guard.exists() or b"__import__('os').system" not in guard.read_bytes()  # (the guard says "file system")


def test_a_journal_edited_under_a_sealed_marker_may_not_choose_what_the_launch_guard_becomes(run, diff_applied):
    """This user's sealed marker vouches for the journal it was sealed with (a commit's own originals, an
    older patchkit's guard among them, come back); a journal edited after the seal is anyone's again."""
    tree, patch = diff_applied
    planted = b"def check():\n    __import__('os').system('id')\n"
    entry = {"path": "patchkit_guard.py", "before": plant_object(tree, planted), "after": None, "staged": None}
    sealed = {"id": "c0ffee", "previous_state": None, "files": [{**entry, "before": plant_object(tree, b"x = 1\n")}]}
    store_journal.mark_staged(tree, sealed, {}, tick=lambda: None)
    plant_journal(tree, entry)
    result = run("status", "--target", tree, "--patch", patch)
    assert "Traceback" not in result.output and result.exit_code in (0, 1), result.output
    guard = tree / "patchkit_guard.py"
    assert not guard.exists() or b"__import__('os').system" not in guard.read_bytes()


@pytest.mark.parametrize("path", ["sitecustomize/__init__.py", "_distutils_hack/__init__.py"])
def test_a_journal_may_not_restore_code_python_runs_at_start(run, diff_applied, path):
    tree, patch = diff_applied
    (tree / "_distutils_hack").mkdir()
    (tree / "_distutils_hack" / "__init__.py").write_text("# setuptools' shim\n")
    payload = plant_object(tree, b"import os; os.system('id')\n")
    plant_journal(tree, {"path": path, "before": payload, "after": None, "staged": None})
    before = fingerprint(tree)
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code == 2, result.output
    assert fingerprint(tree) == before and not (tree / "sitecustomize").exists()


def test_a_restored_original_never_makes_a_directory(run, diff_applied):
    tree, patch = diff_applied
    payload = plant_object(tree, b"x = 1\n")
    plant_journal(tree, {"path": "vllm/brand_new/mod.py", "before": payload, "after": None, "staged": None})
    before = fingerprint(tree)
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code == 2, result.output
    assert "directory is gone" in result.output and fingerprint(tree) == before


def test_a_journal_mode_that_lets_every_user_write_is_refused(run, diff_applied):
    tree, patch = diff_applied
    payload = plant_object(tree, b"x = 2\n")
    plant_journal(tree, {"path": SPEC, "before": payload, "after": None, "staged": None, "mode": 0o646})
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code == 2 and "permission mode" in result.output, result.output


def test_an_older_guards_original_comes_back_only_under_this_users_seal(run, diff_applied):
    """A crash once an older guard was replaced: with no marker this user sealed over the journal, recovery
    removes the guard file the commit wrote rather than refuse the journal (a journal must not choose the
    older bytes). A file that is not what the journal says was written is kept. Sealed, the journal is
    this user's own commit's: the older guard comes back, as any original."""
    import hashlib

    tree, patch = diff_applied
    old_guard = plant_object(tree, b"def check():\n    pass  # an older guard\n")
    written = hashlib.sha256((tree / "patchkit_guard.py").read_bytes()).hexdigest()
    plant_journal(tree, {"path": "patchkit_guard.py", "before": old_guard, "after": "0" * 64, "staged": None})
    result = run("status", "--target", tree, "--patch", patch)
    assert (
        result.exit_code in (0, 1) and "kept, not written by it or changed since: patchkit_guard.py" in result.output
    ), result.output
    assert (tree / "patchkit_guard.py").exists()
    plant_journal(tree, {"path": "patchkit_guard.py", "before": old_guard, "after": written, "staged": None})
    guard = tree / "patchkit_guard.py"
    guard.write_bytes(guard.read_bytes())  # after the journal, as the commit writes it
    staged = guard.read_bytes()
    journal = (tree / ".patchkit" / "journal.json").read_text()
    mark_staged(tree, "c0ffee", "patchkit_guard.py")
    marker = json.loads((tree / ".patchkit" / "staged.json").read_text())
    del marker["journal"], marker["seal"]  # sealed over the id alone, as an older patchkit sealed it
    marker["seal"] = seal.seal(store_journal.SEAL_KIND, str(tree.resolve()), seal.canonical(marker))
    (tree / ".patchkit" / "staged.json").write_text(json.dumps(marker))
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code in (0, 1), result.output
    assert not (tree / "patchkit_guard.py").exists()
    (tree / ".patchkit" / "objects").mkdir(parents=True, exist_ok=True)  # the same crash again,
    assert plant_object(tree, b"def check():\n    pass  # an older guard\n") == old_guard
    (tree / ".patchkit" / "journal.json").write_text(journal)  # sealed over its journal this time
    guard.write_bytes(staged)
    mark_staged(tree, "c0ffee", "patchkit_guard.py")
    result = run("status", "--target", tree, "--patch", patch)
    assert result.exit_code in (0, 1), result.output
    assert guard.read_bytes() == b"def check():\n    pass  # an older guard\n" != staged


def test_each_sentence_recovery_says_of_a_guard_it_may_not_restore_is_true(run, diff_applied):
    """review39 C3's words. Recovery may not take an older guard back from a journal no seal of this user's
    covers, so it removes the guard file the commit wrote: it says it removed the launch guard's file it
    replaced, not "a file it had created" (there was one before); status then says the file is gone, not
    "pip uninstall patchkit-guard?" (no one ran it). And a guard file the journal names as there before,
    untouched (a kill before the commit replaced it), is no file it kept "changed since": it is not listed."""
    tree, patch = diff_applied
    older = b"def check():\n    pass  # an older guard\n"
    old_guard = plant_object(tree, older)
    guard = tree / "patchkit_guard.py"
    guard.write_bytes(older)  # the older guard in place, never replaced: a kill before the marker
    plant_journal(tree, {"path": "patchkit_guard.py", "before": old_guard, "after": "0" * 64, "staged": None})
    result = run("status", "--target", tree, "--patch", patch)
    assert "rolled back an interrupted patchkit transaction: no file had changed yet" in result.output, result.output
    assert "kept" not in result.output and guard.read_bytes() == older, result.output
    written = guard.read_bytes().replace(b"an older", b"this")
    guard.write_bytes(written)  # what the commit wrote, after the journal
    plant_object(tree, older)
    entry = {"path": "patchkit_guard.py", "before": old_guard, "after": sha(written), "staged": None}
    record = (tree / ".patchkit" / "state.json").read_text()  # the commit's record to return to: the guard in it
    journal = {"id": "c0ffee", "previous_state": record, "files": [entry]}
    (tree / ".patchkit" / "journal.json").write_text(json.dumps(journal))
    mark_staged(tree, "c0ffee", "patchkit_guard.py")
    marker = json.loads((tree / ".patchkit" / "staged.json").read_text())
    del marker["journal"], marker["seal"]  # sealed over the id alone, as an older patchkit sealed it
    marker["seal"] = seal.seal(store_journal.SEAL_KIND, str(tree.resolve()), seal.canonical(marker))
    (tree / ".patchkit" / "staged.json").write_text(json.dumps(marker))
    result = run("status", "--target", tree, "--patch", patch)
    said = " ".join(result.output.split())
    assert not guard.exists(), said
    assert "it had created removed" not in said, said
    assert "the launch guard's 1 file(s) it replaced removed, not restored" in said, said
    assert f"`patchkit apply --target {tree} --patch {patch}` installs this patchkit's guard" in said, said
    again = " ".join(run("status", "--target", tree, "--patch", patch).output.split())
    assert "pip uninstall" not in again and "no longer loads (patchkit_guard.py is gone)" in again, again
