"""What revert does with the launch guard no record names, or that replaced a user's own file
(review 6 guard L4, second half, and L6)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import (
    MODEL_PY,
    fingerprint,
    load_plugins_like_vllm,
    make_patch,
    run_cli,
    run_cli_read_only,
    run_cli_writing,
    write_tree,
)

from patchkit.engine.guard import dist_info

MODEL = "vllm/models/model.py"
INFO = dist_info()
GUARD_SOURCE = Path(__file__).parents[1] / "patchkit" / "_target" / "guard.py"
USERS_OWN = b"# my own plugin, not patchkit's\ndef check():\n    return None\n"


def _applied(tmp_path: Path, scratch: Path) -> tuple[Path, Path, dict]:
    site = write_tree(tmp_path / "site")
    before = fingerprint(site)
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    done = run_cli_writing("apply", "--target", site, "--patch", diff)
    assert done.returncode == 0 and (site / "patchkit_guard.py").exists(), done.stdout + done.stderr
    return site, diff, before


def test_a_revert_that_removes_the_guard_says_so(tmp_path, scratch):
    """New-user trial 14, item 23c: apply said "launch guard installed"; revert removed it and said
    only "reverted: N file(s) restored to stock"."""
    site, diff, before = _applied(tmp_path, scratch)
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "reverted: 1 file(s) restored to stock; launch guard removed", done.stdout
    assert fingerprint(site) == before


def test_revert_after_the_record_was_removed_by_hand_removes_patchkits_own_guard_and_says_so(tmp_path, scratch):
    """state.json's own hint says "inspect or remove": after that, revert gave stock files back but
    left the guard installed, which no record named any more."""
    site, diff, before = _applied(tmp_path, scratch)
    (site / ".patchkit/state.json").unlink()
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith("; launch guard removed (no record named it)"), done.stdout
    assert not (site / "patchkit_guard.py").exists() and not (site / INFO).exists()
    # no vLLM RECORD proves the reversed file stock: a copy of it as it was stays under .patchkit/saved
    assert {path: kind for path, kind in fingerprint(site).items() if not path.startswith(".patchkit")} == before
    assert f"{MODEL} as it was before the revert was saved under" in " ".join(done.stderr.split()), done.stderr


def test_revert_keeps_an_unrecorded_guard_file_that_is_not_patchkits_bytes(tmp_path, scratch):
    """Only a file with the very bytes this patchkit writes goes: one edited since is kept."""
    site, diff, _ = _applied(tmp_path, scratch)
    shutil_rm_record(site)
    module = site / "patchkit_guard.py"
    module.write_bytes(module.read_bytes() + b"# mine\n")
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    assert module.read_bytes() == GUARD_SOURCE.read_bytes() + b"# mine\n"
    assert not (site / INFO).exists()  # its dist-info files had patchkit's bytes


def shutil_rm_record(site: Path) -> None:
    (site / ".patchkit/state.json").unlink()


def test_revert_puts_back_a_users_own_guard_module_that_apply_guard_replaced(tmp_path, scratch):
    """`apply --guard` replaces a user's own patchkit_guard.py (a copy kept in saved/); the revert
    that removes the guard puts the user's file back, and says so."""
    site = write_tree(tmp_path / "site")
    (site / "patchkit_guard.py").write_bytes(USERS_OWN)
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    kept = run_cli_writing("apply", "--target", site, "--patch", diff)
    assert kept.returncode == 0 and (site / "patchkit_guard.py").read_bytes() == USERS_OWN, kept.stderr
    assert run_cli_writing("revert", "--target", site, "--patch", diff).returncode == 0
    replaced = run_cli_writing("apply", "--guard", "--target", site, "--patch", diff)
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    assert (site / "patchkit_guard.py").read_bytes() == GUARD_SOURCE.read_bytes()
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "patchkit_guard.py").read_bytes() == USERS_OWN
    assert "patchkit_guard.py: your own file that `apply --guard` replaced is put back" in done.stderr, done.stderr
    assert not (site / INFO).exists() and (site / MODEL).read_text() == MODEL_PY


def test_a_replaced_users_file_is_not_put_back_over_a_guard_changed_since(tmp_path, scratch):
    """Only while the bytes at that path are still patchkit's guard: an edit since is kept."""
    site = write_tree(tmp_path / "site")
    (site / "patchkit_guard.py").write_bytes(USERS_OWN)
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    assert run_cli_writing("apply", "--guard", "--target", site, "--patch", diff).returncode == 0
    module = site / "patchkit_guard.py"
    module.write_bytes(b"# edited since\n")
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    assert module.read_bytes() == b"# edited since\n"


def test_a_guard_replaced_record_naming_a_file_the_guard_record_does_not_is_refused(tmp_path, scratch):
    site, diff, _ = _applied(tmp_path, scratch)
    path = site / ".patchkit/state.json"
    state = json.loads(path.read_text())
    state["guard_replaced"] = {f"{INFO}/NOTES": "0" * 64}
    path.write_text(json.dumps(state))
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 2 and "guard record" in done.stderr, done.stderr
    state["guard_replaced"] = {"patchkit_guard-9.9.dist-info/METADATA": "0" * 64}
    path.write_text(json.dumps(state))
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 2 and "'guard_replaced' names a file" in done.stderr, done.stderr


def _status(site: Path, diff: Path) -> dict:
    done = run_cli_read_only("status", "--target", site, "--patch", diff, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr  # the guard passes: status does too
    return json.loads(done.stdout)


def test_status_notes_a_guard_no_record_names_and_the_revert_that_removes_it(tmp_path, scratch):
    """Review 6 L4: after the record was removed by hand, status said nothing of the guard left."""
    site, diff, _ = _applied(tmp_path, scratch)
    (site / ".patchkit/state.json").unlink()
    assert load_plugins_like_vllm(site).returncode == 0  # no record: the guard checks nothing
    notes = _status(site, diff)["guard_notes"]
    apply, revert = (f"`patchkit {verb} --target {site} --patch {diff}`" for verb in ("apply", "revert"))
    assert notes == [
        f"the launch guard is installed, but no record names it, so it checks nothing: "
        f"{apply} records the tree as it is ({revert} removes the guard and any patches applied)"
    ]
    for verb in ("apply", "revert"):  # either clears it (new-user 17, 1: apply first, it keeps the guard at work)
        assert run_cli(verb, "--target", site, "--patch", diff).returncode == 0
        assert _status(site, diff)["guard_notes"] == []


def test_status_notes_what_a_killed_command_left_and_revert_clears_it(tmp_path, scratch):
    """Review 6 L3, status side: a kill late in a full revert leaves objects/ on a stock tree (early
    in an apply, an empty .patchkit/); status said nothing, the guard passes."""
    site = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    objects = site / ".patchkit/objects"
    objects.mkdir(parents=True)
    (objects / ("0" * 64)).write_bytes(b"an original\n")
    revert = f"`patchkit revert --target {site} --patch {diff}`"
    status = _status(site, diff)
    assert status["store_notes"] == [f".patchkit/objects/ holds 1 file(s) no record names: {revert} removes them"]
    assert status["state"] == "not-applied"
    assert run_cli_writing("revert", "--target", site, "--patch", diff).returncode == 0
    assert not (site / ".patchkit").exists() and _status(site, diff)["store_notes"] == []
    (site / ".patchkit").mkdir()
    assert _status(site, diff)["store_notes"] == [f".patchkit/ is empty: {revert} removes it"]
    assert run_cli_writing("revert", "--target", site, "--patch", diff).returncode == 0
    assert not (site / ".patchkit").exists() and _status(site, diff)["store_notes"] == []


def test_a_replaced_users_file_is_put_back_where_pip_removed_the_guard(tmp_path, scratch):
    """Review 8 L5: `pip uninstall patchkit-guard` removes the guard's files by its RECORD before the
    revert: the place is free, so the user's own patchkit_guard.py goes back there all the same."""
    site = write_tree(tmp_path / "site")
    (site / "patchkit_guard.py").write_bytes(USERS_OWN)
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    assert run_cli_writing("apply", "--guard", "--target", site, "--patch", diff).returncode == 0
    record = (site / INFO / "RECORD").read_text().splitlines()
    for row in record:  # as pip uninstalls a distribution: each file its RECORD names
        (site / row.split(",")[0]).unlink(missing_ok=True)
    (site / INFO).rmdir()
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "patchkit_guard.py").read_bytes() == USERS_OWN
    assert "patchkit_guard.py: your own file that `apply --guard` replaced is put back" in done.stderr, done.stderr
    assert (site / MODEL).read_text() == MODEL_PY
