"""The launch guard `apply` installs beside vllm/: a distribution pip can see and remove, loaded the
way vLLM loads its general plugins, refusing a tree that changed since apply."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    LOAD_LIKE_VLLM,
    MODEL_PY,
    assert_clean_failure,
    fingerprint,
    load_plugins_like_vllm,
    make_patch,
    make_venv,
    purelib,
    run_cli,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    warm_pycache_prefix,
    write_tree,
)
from launch_fixtures import write_model

from patchkit._target import guard as target_guard
from patchkit.engine import guard, transaction
from patchkit.engine.guard import GUARD_VERSION, dist_info

MODEL = "vllm/models/model.py"
INFO = dist_info()
GUARD_SOURCE = Path(__file__).parents[1] / "patchkit" / "_target" / "guard.py"


@pytest.fixture
def patched(tmp_path, scratch):
    """A site-packages whose model.py carries a patch, applied with the guard; and its state before."""
    site = write_tree(tmp_path / "site")
    before = _outside_meta(site)
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    done = run_cli_writing("apply", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    return site, diff, before


def _outside_meta(site: Path) -> dict[str, tuple]:
    return {name: kind for name, kind in fingerprint(site).items() if not name.startswith(".patchkit")}


def _load(site: Path, **env: str) -> subprocess.CompletedProcess:
    return load_plugins_like_vllm(site, **env)


def _state(site: Path) -> dict:
    """The record; none (a revert that leaves nothing recorded removes .patchkit/) is an empty one."""
    path = site / ".patchkit/state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _write_state(site: Path, data: object) -> None:
    (site / ".patchkit/state.json").write_text(json.dumps(data))


# --------------------------------------------------------------------------- what apply installs


def test_apply_installs_a_distribution_whose_record_is_true(patched):
    site, _, _ = patched
    assert (site / "patchkit_guard.py").read_bytes() == GUARD_SOURCE.read_bytes()
    info = site / INFO
    assert (info / "INSTALLER").read_text() == "patchkit\n"
    assert (info / "entry_points.txt").read_text() == "[vllm.general_plugins]\npatchkit_guard = patchkit_guard:check\n"
    assert "Name: patchkit-guard\n" in (info / "METADATA").read_text()
    rows = list(csv.reader((info / "RECORD").read_text().splitlines()))
    listed = {row[0] for row in rows}
    assert listed == {"patchkit_guard.py", f"{INFO}/METADATA", f"{INFO}/INSTALLER", f"{INFO}/entry_points.txt"} | {
        f"{INFO}/RECORD"
    }
    for path, digest, size in rows:
        if path == f"{INFO}/RECORD":
            assert (digest, size) == ("", "")
            continue
        data = (site / path).read_bytes()
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={expected}", len(data)), path
    assert set(_state(site)["guard"]) == listed


def test_no_guard_installs_nothing_beside_vllm(tmp_path, scratch):
    site = write_tree(tmp_path / "site")
    before = _outside_meta(site)
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("x", "y")}))
    done = run_cli_writing("apply", "--target", site, "--patch", diff, "--no-guard")
    assert done.returncode == 0, done.stderr
    after = _outside_meta(site)
    assert {name for name in after if not name.startswith("vllm/")} == {
        name for name in before if not name.startswith("vllm/")
    }
    assert "guard" not in _state(site)


def test_a_source_checkout_gets_no_guard_and_is_told_so(tmp_path, scratch):
    checkout = write_tree(tmp_path / "checkout")
    for item in (checkout / "vllm-0.16.0.dist-info").iterdir():
        item.unlink()
    (checkout / "vllm-0.16.0.dist-info").rmdir()
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, checkout, {MODEL: MODEL_PY + "# patched\n"}))
    done = run_cli_writing("apply", "--target", checkout, "--patch", diff, "--vllm-version", "0.16.0")
    assert done.returncode == 0, done.stderr
    assert "no guard installed" in done.stderr
    assert not (checkout / "patchkit_guard.py").exists() and not list(checkout.glob("patchkit_guard-*"))


def test_revert_leaves_site_packages_as_before_apply_guard_and_its_bytecode_included(patched):
    site, diff, before = patched
    assert _load(site).returncode == 0  # the guard ran: Python wrote __pycache__/patchkit_guard.*.pyc
    assert list((site / "__pycache__").glob("patchkit_guard.*.pyc"))
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stderr
    assert _outside_meta(site) == before
    assert "guard" not in _state(site)


def test_reverting_one_set_keeps_the_guard_while_another_is_recorded(patched, scratch, tmp_path):
    site, diff, _ = patched
    other = tmp_path / "spec.diff"
    spec = (site / "vllm/config/spec.py").read_text()
    other.write_bytes(make_patch(scratch, site, {"vllm/config/spec.py": spec.replace('"llama"', '"mistral"')}))
    assert run_cli_writing("apply", "--target", site, "--patch", other).returncode == 0
    assert _load(site).returncode == 0, _load(site).stderr  # two records, each healthy
    assert run_cli_writing("revert", "--target", site, "--patch", diff).returncode == 0
    assert (site / "patchkit_guard.py").exists() and _load(site).returncode == 0
    assert run_cli_writing("revert", "--target", site).returncode == 0
    assert not (site / "patchkit_guard.py").exists() and not (site / INFO).exists()


def test_pip_uninstall_removes_the_guard(tmp_path, scratch):
    venv = tmp_path / "venv"
    make_venv(venv)
    site = write_tree(purelib(venv / "bin/python"))  # a vLLM "installed" in the venv
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return -x")}))
    assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(venv / "bin/python"),
        "--no-input",
        "--disable-pip-version-check",
    ]
    listed = subprocess.run([*pip, "list", "--format", "json"], capture_output=True, text=True, check=True)
    assert {"name": "patchkit-guard", "version": GUARD_VERSION} in json.loads(listed.stdout)
    gone = subprocess.run([*pip, "uninstall", "-y", "patchkit-guard"], capture_output=True, text=True)
    assert gone.returncode == 0 and "Successfully uninstalled" in gone.stdout, gone.stdout + gone.stderr
    assert not (site / "patchkit_guard.py").exists() and not (site / INFO).exists()
    assert (site / MODEL).read_text().endswith("return -x\n")  # vLLM itself untouched


def test_a_fault_after_the_patch_is_written_rolls_back_the_guard_too(tmp_path, scratch, monkeypatch):
    from helpers import cli_runner

    site = write_tree(tmp_path / "site")
    before = _outside_meta(site)
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("forward", "forward_once")}))
    run = cli_runner()
    for n in range(1, 200):
        monkeypatch.setenv("PATCHKIT_FAULT_AFTER", str(n))
        monkeypatch.setattr(transaction, "_faults", transaction._Faults())
        result = run("apply", "--target", site, "--patch", diff)
        if result.exit_code == 0:
            break
        assert result.exit_code == 4 and "rolled back" in result.output, (n, result.output)
        assert _outside_meta(site) == before, n
    else:
        raise AssertionError("the apply never got through")
    assert n > 10  # the guard's five files were among the operations that failed
    assert (site / "patchkit_guard.py").exists()


def test_a_recorded_guard_path_outside_the_tree_is_refused(patched):
    site, _, _ = patched
    state = _state(site)
    state["guard"]["../../evil.py"] = "0" * 64
    _write_state(site, state)
    done = run_cli_writing("revert", "--target", site)
    assert_clean_failure(done, 2)
    assert "evil.py" in done.stderr and (site / "patchkit_guard.py").exists()


# --------------------------------------------------------------------------- the guard at launch


def test_healthy_tree_is_silent(patched):
    site, _, _ = patched
    done = _load(site)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "patchkit_guard" in done.stdout


def test_a_file_edited_after_apply_stops_the_launch_naming_it(patched):
    site, _, _ = patched
    with open(site / MODEL, "a") as fh:
        fh.write("# tuned by hand\n")
    done = _load(site)
    assert done.returncode != 0
    assert "TreeChanged" in done.stderr and MODEL in done.stderr and "patchkit status" in done.stderr


def test_a_recorded_file_grown_huge_is_refused_unread(patched):
    """The guard reads a recorded file bounded: a sparse 2 GiB file is refused by its size, not hashed."""
    site, _, _ = patched
    os.truncate(site / MODEL, 2 << 30)
    done = _load(site)
    assert done.returncode != 0
    assert "TreeChanged" in done.stderr and "larger than" in done.stderr


def test_a_removed_file_stops_the_launch(patched):
    site, _, _ = patched
    (site / MODEL).unlink()
    done = _load(site)
    assert done.returncode != 0 and f"{MODEL} is missing" in done.stderr


def test_another_vllm_version_stops_the_launch_naming_both(patched):
    site, _, _ = patched
    info = site / "vllm-0.16.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.1\n\nVersion: 0.16.0\n")
    info.rename(site / "vllm-0.16.1.dist-info")
    done = _load(site)
    assert done.returncode != 0
    assert "vLLM 0.16.1 is installed" in done.stderr and "applied to vLLM 0.16.0" in done.stderr


def test_warn_logs_and_launches(patched):
    site, _, _ = patched
    (site / MODEL).write_text("")
    done = _load(site, PATCHKIT_GUARD="warn")
    assert done.returncode == 0, done.stderr
    assert MODEL in done.stderr and "patchkit status" in done.stderr and "Traceback" not in done.stderr


def test_off_skips_the_check(patched):
    site, _, _ = patched
    (site / MODEL).write_text("")
    done = _load(site, PATCHKIT_GUARD="off")
    assert done.returncode == 0 and done.stderr == ""


def test_a_record_of_nothing_does_nothing(patched):
    site, _, _ = patched
    _write_state(site, {"format": 1, "entries": []})
    (site / MODEL).write_text("")
    assert _load(site).returncode == 0
    (site / ".patchkit/state.json").unlink()
    assert _load(site).returncode == 0


@pytest.mark.parametrize(
    "state, says",
    [
        (b"{not json", "is not JSON"),
        (b'{"format": 1, "entries": [], "at": NaN}', "is not JSON"),  # json takes NaN; JSON has none
        (b'{"format": 1, "entries": {"a": 1}}', "is damaged ('entries' is not a list)"),
        (
            b'{"format": 1, "entries": [{"set": "s", "files": {"vllm/a.py": {"before": null, "after": 7}}}]}',
            "7 is not a sha256",
        ),
        (b'{"format": 1, "chosen": "demo"}', "is damaged ('chosen' is not a list of set names)"),
        (b" " * (16 * 1024 * 1024 + 1), "larger than"),
    ],
)
def test_a_malformed_record_stops_the_launch_naming_it(patched, state, says):
    site, _, _ = patched
    (site / ".patchkit/state.json").write_bytes(state)
    done = _load(site)
    assert done.returncode != 0
    assert "state.json" in done.stderr and says in done.stderr


def test_a_recorded_path_out_of_the_tree_is_never_read(patched, tmp_path):
    site, _, _ = patched
    secret = tmp_path / "secret.py"
    secret.write_text("outside\n")
    (site / "vllm/link.py").symlink_to(secret)
    digest = hashlib.sha256(b"outside\n").hexdigest()
    # review30 L2: the file there is a symlink, not the record's path out of the tree (a plain one);
    # where the symlink leads is never resolved (review36 N14-b)
    leads = "vllm/link.py is a symlink, or under one: not the file patchkit wrote"
    for path, says in [("vllm/link.py", leads), ("../secret.py", "'../secret.py' is no relative path")]:
        _write_state(site, {"format": 1, "entries": [{"set": "s", "files": {path: {"before": None, "after": digest}}}]})
        done = _load(site)
        assert done.returncode != 0
        assert says in " ".join(done.stderr.split()), done.stderr[-600:]


def test_a_symlinked_state_is_refused(patched, tmp_path):
    site, _, _ = patched
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"format": 1, "entries": []}))
    (site / ".patchkit/state.json").unlink()
    (site / ".patchkit/state.json").symlink_to(elsewhere)
    done = _load(site)
    assert done.returncode != 0 and "state.json is not what patchkit keeps there (a symlink" in done.stderr


def test_a_version_the_dist_info_does_not_say_gets_no_guard(tmp_path, scratch):
    """--vllm-version 0.16.0 on a dist-info that says 0.16.1.dev3: a guard would stop every launch."""
    site = write_tree(tmp_path / "site", version="0.16.1.dev3")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("Model", "Net")}))
    done = run_cli_writing("apply", "--target", site, "--patch", diff, "--vllm-version", "0.16.0")
    assert done.returncode == 0, done.stderr
    assert "no guard installed (it would stop every launch)" in done.stderr
    assert not (site / "patchkit_guard.py").exists()


def test_a_file_two_sets_changed_is_held_to_the_later_one(patched, scratch, tmp_path):
    site, _, _ = patched
    again = tmp_path / "again.diff"
    model = (site / MODEL).read_text()
    again.write_bytes(make_patch(scratch, site, {MODEL: model.replace("x * 2", "x * 3")}))
    assert run_cli_writing("apply", "--target", site, "--patch", again).returncode == 0
    assert len(_state(site)["entries"]) == 2
    done = _load(site)
    assert done.returncode == 0, done.stderr


def test_apply_says_it_installed_the_guard_and_only_then(tmp_path, scratch):
    site = write_tree(tmp_path / "site")
    first, second = tmp_path / "first.diff", tmp_path / "second.diff"
    first.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("x", "z")}))
    second.write_bytes(make_patch(scratch, site, {"vllm/__init__.py": "# second\n"}))
    done = run_cli_writing("apply", "--target", site, "--patch", first)
    assert done.stdout.rstrip().endswith("1 file(s) changed; launch guard installed"), done.stdout
    done = run_cli_writing("apply", "--target", site, "--patch", second)  # the guard is there already
    assert done.stdout.rstrip().endswith("1 file(s) changed"), done.stdout


# --------------------------------------------------------------------------- the guard's record


@pytest.mark.parametrize("named", ["helperlib/tables.py", "vllm/config/spec.py", f"{INFO}/extra.txt", "patchkit_guard"])
@pytest.mark.parametrize("command", ["revert", "apply", "status"])
def test_a_guard_record_naming_another_file_is_refused_and_the_file_kept(tmp_path, scratch, named, command):
    """The guard record is a list of files revert deletes: it may name the guard's own files only."""
    site = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x + 1")}))
    if command != "apply":
        assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    else:
        (site / ".patchkit").mkdir()
        _write_state(site, {"format": 1, "entries": []})
    victim = site / named
    victim.parent.mkdir(parents=True, exist_ok=True)
    if not victim.exists():
        victim.write_text("# not patchkit's\n")
    content = victim.read_bytes()
    state = _state(site)
    state.setdefault("guard", {})[named] = hashlib.sha256(content).hexdigest()
    _write_state(site, state)
    done = run_cli_judged(command, "--target", site, "--patch", diff)
    assert_clean_failure(done, 2)
    assert repr(named) in done.stderr and "launch guard" in done.stderr
    assert victim.read_bytes() == content


def test_revert_keeps_a_guard_file_changed_after_apply_and_says_so(patched):
    site, diff, _ = patched
    entry_points = site / INFO / "entry_points.txt"
    entry_points.write_text("[vllm.general_plugins]\nmine = mine:hook\n")
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stderr
    assert f"{INFO}/entry_points.txt was changed after patchkit wrote it: kept" in done.stderr
    assert entry_points.read_text() == "[vllm.general_plugins]\nmine = mine:hook\n"
    assert not (site / "patchkit_guard.py").exists() and not (site / INFO / "METADATA").exists()
    assert "guard" not in _state(site)


def test_apply_leaves_a_recorded_guard_file_changed_since_alone(patched, scratch, tmp_path):
    site, _, _ = patched
    module = site / "patchkit_guard.py"
    module.write_text("def check():\n    pass\n")
    other = tmp_path / "spec.diff"
    spec = (site / "vllm/config/spec.py").read_text()
    other.write_bytes(make_patch(scratch, site, {"vllm/config/spec.py": spec.replace('"llama"', '"qwen"')}))
    done = run_cli_writing("apply", "--target", site, "--patch", other)
    assert done.returncode == 1, done.stderr  # applied; the guard it leaves is not this patchkit's: as status
    again = f"`patchkit apply --target {site} --patch {other} --guard`"  # the user's tree and patch (hints.py)
    assert f"patchkit_guard.py was changed after patchkit wrote it: kept; {again} replaces" in done.stderr
    assert module.read_text() == "def check():\n    pass\n"
    replaced = run_cli_writing("apply", "--guard", "--target", site, "--patch", other)
    assert replaced.returncode == 0, replaced.stderr
    assert module.read_bytes() == GUARD_SOURCE.read_bytes()
    copies = list((site / ".patchkit/saved").glob("*/patchkit_guard.py"))
    assert [c.read_text() for c in copies] == ["def check():\n    pass\n"]


def test_apply_puts_back_a_guard_pip_uninstalled_unless_told_no_guard(patched):
    site, diff, _ = patched
    (site / "patchkit_guard.py").unlink()
    for item in (site / INFO).iterdir():
        item.unlink()
    (site / INFO).rmdir()
    done = run_cli_writing("apply", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("already applied; launch guard installed"), done.stdout
    assert (site / "patchkit_guard.py").read_bytes() == GUARD_SOURCE.read_bytes() and _load(site).returncode == 0
    assert run_cli_writing("apply", "--target", site, "--patch", diff, "--no-guard").returncode == 0
    done = run_cli_writing("apply", "--target", site, "--patch", diff)
    assert done.returncode == 0 and not (site / "patchkit_guard.py").exists(), done.stdout


def test_no_guard_on_a_guarded_tree_removes_the_guard_it_records(patched):
    """--no-guard skips the guard: one an earlier apply installed goes too (it kept refusing launches)."""
    site, diff, before = patched
    (site / "__pycache__").mkdir()
    (site / "__pycache__" / "patchkit_guard.cpython-312.pyc").write_bytes(b"bytecode")
    done = run_cli_writing("apply", "--target", site, "--patch", diff, "--no-guard")
    assert done.returncode == 0 and "launch guard removed" in done.stdout, done.stdout + done.stderr
    left = {name for name in _outside_meta(site) if name != MODEL}
    assert left == set(before) - {MODEL}  # the module, its dist-info and bytecode gone; nothing else
    assert _state(site)["no_guard"] is True and not _state(site).get("guard")
    assert _load(site).returncode == 0


def test_run_apply_installs_the_guard_as_apply_does(tmp_path, scratch):
    site = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    write_model(tmp_path / "model", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    vllm = tmp_path / "vllm"
    vllm.write_text("#!/bin/sh\nexit 0\n")
    vllm.chmod(0o755)
    done = run_cli("run", "--apply", "--target", site, "--patch", diff, "--", vllm, "serve", tmp_path / "model")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "patchkit_guard.py").read_bytes() == GUARD_SOURCE.read_bytes()
    assert "launch guard installed" in done.stdout and _load(site).returncode == 0


@pytest.mark.parametrize("named", ["patchkit_guard.py", f"{INFO}/entry_points.txt"])
def test_a_series_record_naming_a_guard_file_is_refused(patched, named):
    """No patch changes the guard: a set's record naming one of its files is no record patchkit wrote."""
    site, diff, _ = patched
    state = _state(site)
    current = hashlib.sha256((site / named).read_bytes()).hexdigest()
    state["entries"][0]["files"][named] = {"before": None, "after": current}
    _write_state(site, state)
    for command in ("revert", "status"):
        done = run_cli_judged(command, "--target", site, "--patch", diff)
        assert_clean_failure(done, 2)
        assert repr(named) in done.stderr
    assert (site / named).exists()


def test_status_reads_the_guards_files_without_blocking(patched):
    """The guard's files are read without blocking: a fifo as its entry_points.txt is never waited on,
    and since vLLM's plugin loader would wait on it at every launch, status fails naming it."""
    site, diff, _ = patched
    entry_points = site / INFO / "entry_points.txt"
    entry_points.unlink()
    os.mkfifo(entry_points)
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "status", "--target", str(site), "--patch", str(diff)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "entry_points.txt" in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_dry_run_says_the_guard_would_be_installed_and_writes_nothing(patched):
    site, diff, _ = patched
    (site / "patchkit_guard.py").unlink()
    before = fingerprint(site)
    done = run_cli_writing("apply", "--target", site, "--patch", diff, "--dry-run")
    assert done.returncode == 0 and "already applied; launch guard would be installed" in done.stdout, done.stdout
    assert fingerprint(site) == before


def test_a_symlinked_guard_dist_info_does_not_block_revert(patched, tmp_path):
    """The guard's dist-info a symlink (a symlinked layout, or planted): revert restores the files and
    keeps the guard whole (never written through; loadable, it passes with nothing recorded), saying
    how to remove it. It refused the whole revert (exit 2, no hint)."""
    site, diff, _ = patched
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(site / INFO, elsewhere)
    shutil.rmtree(site / INFO)
    (site / INFO).symlink_to(elsewhere)
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / MODEL).read_text() == MODEL_PY
    assert f"{INFO} is a symlink: the launch guard is kept; to remove it: rm -r {site / INFO}" in done.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["INSTALLER", "METADATA", "RECORD", "entry_points.txt"]
    assert _load(site).returncode == 0


def test_apply_keeps_its_guard_where_several_vllm_dist_infos_would_stop_every_launch(patched):
    """A second vllm-*.dist-info laid beside the first: the guard can read no one version. apply
    --vllm-version removed the guard, and status then called the unguarded tree applied (review 12b
    L4): apply refuses, nothing written, and status names the fix; --no-guard removes it, as asked."""
    site, diff, _ = patched
    (site / "vllm-0.17.0.dist-info").mkdir()
    (site / "vllm-0.17.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.17.0\n")
    assert _load(site).returncode != 0
    done = run_cli_writing("apply", "--target", site, "--patch", diff, "--vllm-version", "0.17.0")
    assert done.returncode == 4 and "nothing was written" in done.stderr, done.stdout + done.stderr
    assert "remove the stale vllm-*.dist-info directories" in done.stderr and (site / "patchkit_guard.py").exists()
    status = run_cli_read_only("status", "--target", site, "--patch", diff, "--vllm-version", "0.17.0")
    assert status.returncode == 1 and "remove the stale vllm-*.dist-info directories" in status.stdout, status.stdout
    done = run_cli_writing("apply", "--target", site, "--patch", diff, "--vllm-version", "0.17.0", "--no-guard")
    assert done.returncode == 0 and not (site / "patchkit_guard.py").exists(), done.stdout + done.stderr
    assert _load(site).returncode == 0
    assert run_cli_read_only("status", "--target", site, "--patch", diff, "--vllm-version", "0.17.0").returncode == 0


@pytest.mark.parametrize("change", ["edit", "remove"])
def test_a_refusal_over_another_sets_record_names_that_sets_fix(patched, scratch, tmp_path, change):
    """The guard refuses a file a second (ad-hoc) set recorded: status, checked for the first set,
    names the second's revert and apply, and following that lets the launch pass; `apply` of the
    first set alone would say "nothing to do" for ever."""
    site, diff, _ = patched
    addon = tmp_path / "addon.diff"
    addon.write_bytes(make_patch(scratch, site, {"vllm/addon.py": "ADDON = 1\n"}))
    assert run_cli_writing("apply", "--target", site, "--patch", addon).returncode == 0
    if change == "edit":
        (site / "vllm/addon.py").write_text("ADDON = 2\n")
    else:
        (site / "vllm/addon.py").unlink()
    assert _load(site).returncode != 0
    done = run_cli_read_only("status", "--target", site, "--patch", diff)
    assert done.returncode == 1, done.stdout + done.stderr
    hint = " ".join((done.stdout + done.stderr).split())
    on_site = f"--target {site} --patch {addon}"  # the user's tree, the other set's patch where it was applied from
    if change == "remove":  # the file it created is gone: as stock, no edit to keep, and apply makes it again
        assert "vllm/addon.py is gone, as before patchkit created it" in hint, hint
        assert f"run `patchkit apply {on_site}`" in hint and "revert" not in hint.split("fix:")[1], hint
        assert run_cli_writing("apply", "--target", site, "--patch", addon).returncode == 0
        assert (
            _load(site).returncode == 0
            and run_cli_read_only("status", "--target", site, "--patch", diff).returncode == 0
        )
        return
    assert f"`patchkit revert {on_site} --force`" in hint and f"`patchkit apply {on_site}`" in hint
    assert run_cli_writing("revert", "--target", site, "--patch", addon, "--force").returncode == 0
    assert _load(site).returncode == 0, _load(site).stderr
    assert run_cli_writing("apply", "--target", site, "--patch", addon).returncode == 0
    assert (
        _load(site).returncode == 0 and run_cli_read_only("status", "--target", site, "--patch", diff).returncode == 0
    )


# --------------------------------------------------------------------------- the vllm the process imported

# vLLM's start-up as far as the guard sees it: its own package imported (from wherever sys.path finds
# it first), then vllm.plugins.load_general_plugins() calling each general plugin.
LOAD_WITH_ANOTHER_VLLM_FIRST = """
import sys
guard_site, vllm_site = sys.argv[1], sys.argv[2]
sys.path[:0] = [vllm_site, guard_site]  # PYTHONPATH, a user site or a second venv before the guard's
import vllm
from importlib.metadata import entry_points
for ep in entry_points(group="vllm.general_plugins"):
    ep.load()()
print("launched", vllm.__file__)
"""


def _launch(guard_site: Path, vllm_site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONPATH")}
    return subprocess.run(
        [sys.executable, "-c", LOAD_WITH_ANOTHER_VLLM_FIRST, str(guard_site), str(vllm_site)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_guard_is_silent_on_an_imported_vllm_with_no_record_though_its_own_tree_changed(patched, tmp_path):
    site, _, _ = patched
    (site / MODEL).write_text("# edited after apply\n")
    assert _load(site).returncode != 0  # the guard's own tree alone: refused
    other = write_tree(tmp_path / "other-venv")  # a stock vLLM, never patched: nothing to judge
    done = _launch(site, other)
    assert done.returncode == 0, done.stderr
    assert str(other / "vllm") in done.stdout


def test_the_guard_judges_the_imported_vllm_by_its_own_record(patched, tmp_path, scratch):
    site, _, _ = patched
    other = write_tree(tmp_path / "other-venv")
    diff = tmp_path / "other.diff"
    diff.write_bytes(make_patch(scratch, other, {MODEL: MODEL_PY.replace("return x", "return x - 1")}))
    assert run_cli_writing("apply", "--target", other, "--patch", diff, "--no-guard").returncode == 0
    assert _launch(site, other).returncode == 0  # both healthy
    (other / MODEL).write_text("# edited after apply\n")
    done = _launch(site, other)
    assert done.returncode != 0 and "launched" not in done.stdout
    assert f"left in {other}: {MODEL} was changed after patchkit patched it" in done.stderr, done.stderr


def test_the_guard_judges_an_imported_vllm_without_an_init_file(patched):
    """A tree cut to a few files (as `fetch` lays one out) has no vllm/__init__.py: vllm is then a
    namespace package, with no __file__, and its directory still names the tree to judge."""
    site, _, _ = patched
    (site / "vllm/__init__.py").unlink()
    assert _load(site).returncode == 0
    (site / MODEL).write_text("# edited after apply\n")
    done = _load(site)
    assert done.returncode != 0 and f"{MODEL} was changed after patchkit patched it" in done.stderr


def _metadata_a_fifo(info: Path) -> None:
    (info / "METADATA").unlink()
    os.mkfifo(info / "METADATA")


def _metadata_a_directory(info: Path) -> None:
    (info / "METADATA").unlink()
    (info / "METADATA").mkdir()


def _metadata_huge(info: Path) -> None:
    with open(info / "METADATA", "a") as fh:
        fh.write("X-Padding: " + "x" * (2 << 20) + "\n")


UNJUDGEABLE_METADATA = [_metadata_a_fifo, _metadata_a_directory, _metadata_huge]


@pytest.mark.parametrize("spoil", UNJUDGEABLE_METADATA, ids=lambda spoil: spoil.__name__)
def test_a_guard_that_cannot_judge_refuses_with_its_message_and_warn_only_logs(patched, spoil):
    """Every way the guard can fail goes through its refusal: the command that names the fix, and
    PATCHKIT_GUARD=warn honoured (review 5 guard M1: a bare TreeChanged, raised even under warn)."""
    site, _, _ = patched
    spoil(site / "vllm-0.16.0.dist-info")
    refused = _load(site)
    assert refused.returncode != 0 and "patchkit status" in refused.stderr, refused.stderr[-800:]
    warned = _load(site, PATCHKIT_GUARD="warn")
    assert warned.returncode == 0, warned.stderr[-800:]
    assert "METADATA" in warned.stderr and "patchkit status" in warned.stderr and "Traceback" not in warned.stderr


@pytest.mark.parametrize("spoil", UNJUDGEABLE_METADATA, ids=lambda spoil: spoil.__name__)
def test_apply_on_a_metadata_the_guard_cannot_read_is_a_tree_problem_not_a_bug(patched, spoil):
    site, diff, _ = patched
    spoil(site / "vllm-0.16.0.dist-info")
    for command in ("apply", "status"):
        done = run_cli_judged(command, "--target", site, "--patch", diff)
        assert done.returncode in (1, 2, 4), (command, done.stdout + done.stderr)
        assert "internal error" not in done.stderr and "METADATA" in done.stdout + done.stderr, done.stderr


def test_a_metadata_symlinked_to_its_copy_is_read_as_vllm_reads_it(patched):
    """importlib.metadata (vLLM's reading of its version, and patchkit's) follows the symlink: the
    guard does too, and passes where status passes and apply works."""
    site, diff, _ = patched
    info = site / "vllm-0.16.0.dist-info"
    (info / "METADATA").rename(info / "METADATA.real")
    (info / "METADATA").symlink_to("METADATA.real")
    assert _load(site).returncode == 0, _load(site).stderr[-800:]
    for command in ("status", "apply"):
        done = run_cli_judged(command, "--target", site, "--patch", diff)
        assert done.returncode == 0, (command, done.stdout + done.stderr)


DECLARED = """
import json, sys
from pathlib import Path
from patchkit.engine import guard
print(json.dumps([guard.is_installed(Path(sys.argv[1])), "importlib.metadata" in sys.modules]))
"""


def test_the_guard_patchkit_wrote_is_found_without_importlib_metadata(patched):
    """Its entry_points.txt as patchkit wrote it, and another distribution's that never names the
    guard's module (vLLM's console script), are judged without importlib.metadata (and email): the
    start-up of `run`'s fast path and of status."""
    site = patched[0]
    vllm_info = next(site.glob("vllm-*.dist-info"))
    (vllm_info / "entry_points.txt").write_text("[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n")
    done = subprocess.run([sys.executable, "-c", DECLARED, str(site)], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [True, False]


@pytest.mark.parametrize(
    ("text", "declared"),
    [
        ("[vllm.general_plugins]\npatchkit_guard = patchkit_guard:check\n", True),
        ("[vllm.general_plugins]\n  patchkit_guard=patchkit_guard:check  \n", True),  # not patchkit's text: parsed
        ("[vllm.general_plugins]\nother = patchkit_guard:check\n", True),
        ("[console_scripts]\npatchkit_guard = patchkit_guard:check\n", False),  # another group
        ("[vllm.general_plugins]\npatchkit_guard = patchkit_guard_x:check\n", False),  # another module
        ("[vllm.general_plugins]\nvllm_foo = foo:register\n", False),
    ],
)
def test_the_guard_is_declared_as_importlib_reads_the_entry_points(patched, text, declared):
    site = patched[0]
    (site / INFO / "entry_points.txt").write_text(text)
    done = subprocess.run([sys.executable, "-c", DECLARED, str(site)], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)[0] is declared


@pytest.mark.parametrize("name", ["METADATA", "INSTALLER", "entry_points.txt", "RECORD"])
@pytest.mark.parametrize("command", ["revert", "apply"])
def test_a_guard_record_naming_a_users_file_in_a_guard_dist_info_keeps_it(patched, name, command):
    """Review 5 guard L1: a record naming a file inside a guard's own dist-info (another version's),
    with that file's true hash, deleted it: the hash proves only that the record's writer read it.
    Removal also needs the bytes to be what patchkit writes there."""
    site, diff, _ = patched
    info = site / "patchkit_guard-0.0.1.dist-info"
    info.mkdir()
    victim = info / name
    victim.write_text("user data: not a guard's\n")
    state = _state(site)
    state["guard"] = {f"{info.name}/{name}": hashlib.sha256(victim.read_bytes()).hexdigest()}
    _write_state(site, state)
    done = run_cli_judged(command, "--target", site, *(["--patch", diff, "--guard"] if command == "apply" else []))
    assert done.returncode == 0, done.stdout + done.stderr
    assert victim.read_text() == "user data: not a guard's\n"
    if command == "revert":  # (apply replacing an older guard keeps what is not one without a word)
        assert f"{info.name}/{name} is not a file of patchkit's launch guard" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "guard",
    [
        {"patchkit_guard-...dist-info/METADATA": "0" * 64},
        {"patchkit_guard-0.0.1.dist-info/METADATA": "0" * 64, f"{INFO}/METADATA": "1" * 64},
    ],
    ids=["no version", "two distributions"],
)
def test_a_guard_record_naming_no_guard_patchkit_writes_is_refused(patched, guard):
    site, _diff, _ = patched
    state = _state(site)
    state["guard"] = guard
    _write_state(site, state)
    done = run_cli_writing("revert", "--target", site)
    assert_clean_failure(done, 2)
    assert "guard" in done.stderr


def test_revert_still_removes_an_older_patchkits_guard_it_recorded(patched):
    """The other side: a true guard of another version, as that patchkit recorded it, goes."""
    site, _, _ = patched
    state = _state(site)
    older = {}
    for path in list(state["guard"]):
        data = (site / path).read_bytes()
        if "/" in path:
            new = site / path.replace(GUARD_VERSION, "0.0.1")
            new.parent.mkdir(exist_ok=True)
            data = data.replace(GUARD_VERSION.encode(), b"0.0.1")
            new.write_bytes(data)
            (site / path).unlink()
            path = path.replace(GUARD_VERSION, "0.0.1")
        older[path] = hashlib.sha256(data).hexdigest()
    (site / INFO).rmdir()
    state["guard"] = older
    _write_state(site, state)
    done = run_cli_writing("revert", "--target", site)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (site / "patchkit_guard-0.0.1.dist-info").exists() and not (site / "patchkit_guard.py").exists()


def test_revert_with_no_record_says_it_kept_a_users_own_guard_module(patched):
    """Review 13 L6: the record gone and patchkit_guard.py a user's own file, revert removed only the
    guard's dist-info but said it removed "patchkit_guard.py and its dist-info": it says what it did."""
    site, diff, _ = patched
    shutil.rmtree(site / ".patchkit")
    (site / "patchkit_guard.py").write_text("# my own module, not patchkit's\n")
    done = run_cli_writing("revert", "--target", site, "--patch", diff)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, said
    assert (site / "patchkit_guard.py").read_text() == "# my own module, not patchkit's\n"
    assert not (site / INFO).exists()
    assert f"removed this patchkit's launch guard's dist-info ({INFO})" in said, said
    assert "kept patchkit_guard.py: not this patchkit's guard module" in said and "patchkit_guard.py and" not in said


# --------------------------------------------------------------------------- bytecode beside a recorded file


def _unchecked_pyc_of(cache: Path, source: bytes, name: str) -> Path:
    """An unchecked-hash .pyc (PEP 552) of `source`, named `name` in `cache`."""
    import py_compile  # only these tests compile

    scratch = cache.parent / "model-source.py"
    scratch.write_bytes(source)
    cache.mkdir(exist_ok=True)
    mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
    return Path(py_compile.compile(str(scratch), cfile=str(cache / name), invalidation_mode=mode, doraise=True))


def test_stale_unchecked_bytecode_of_a_recorded_file_stops_the_launch_naming_it(patched):
    """Review 13 L1: Python imports an unchecked-hash .pyc without reading the source, so one of the
    stock file beside the patched one runs the stock code; one of the patched bytes passes."""
    site, _, _ = patched
    tag = sys.implementation.cache_tag
    pyc = _unchecked_pyc_of(site / "vllm/models/__pycache__", MODEL_PY.encode(), f"model.{tag}.opt-2.pyc")
    done = _load(site)
    assert done.returncode != 0
    assert f"vllm/models/__pycache__/{pyc.name} is unchecked-hash bytecode compiled from other bytes than {MODEL}" in (
        done.stderr
    )
    _unchecked_pyc_of(pyc.parent, (site / MODEL).read_bytes(), pyc.name)
    assert _load(site).returncode == 0, _load(site).stderr[-600:]


def test_stale_checked_bytecode_stops_a_launch_that_never_checks_hashes(patched):
    """A checked-hash .pyc of the stock file (an image compiled with SOURCE_DATE_EPOCH set) is
    re-validated by default, and runs unchecked under --check-hash-based-pycs never: the guard
    of a launch run so refuses it, and passes one of the patched bytes."""
    import py_compile  # only these tests compile

    site, diff, _ = patched
    cache, tag = site / "vllm/models/__pycache__", sys.implementation.cache_tag
    scratch = site.parent / "stock-model.py"
    scratch.write_text(MODEL_PY)
    pyc = cache / f"model.{tag}.pyc"
    py_compile.compile(str(scratch), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}

    def load(*options: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, *options, "-c", LOAD_LIKE_VLLM, str(site)]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)

    assert load().returncode == 0, load().stderr[-600:]  # Python compares the hash: the patched source runs
    done = load("--check-hash-based-pycs", "never")
    assert done.returncode != 0
    said = f"vllm/models/__pycache__/{pyc.name} is checked-hash bytecode compiled from other bytes than {MODEL}"
    assert said + ": Python run with --check-hash-based-pycs never loads it" in " ".join(done.stderr.split())
    assert run_cli_read_only("status", "--target", site, "--patch", diff).returncode == 0  # status: the default mode
    scratch.write_bytes((site / MODEL).read_bytes())
    py_compile.compile(str(scratch), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    done = load("--check-hash-based-pycs", "never")
    assert done.returncode == 0, done.stderr[-600:]


def pycache_unlistable(monkeypatch) -> None:
    """Every __pycache__ unlistable to the guard's os.scandir (PermissionError), as a directory of root's."""
    real_scandir = os.scandir

    def unlistable(path):
        # tmp_path's teardown scans by file descriptor through the same os module
        if not isinstance(path, int) and os.fspath(path).endswith("__pycache__"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(target_guard.os, "scandir", unlistable)


def test_an_unlistable_pycache_is_judged_by_the_names_this_python_opens(tmp_path, monkeypatch):
    """Review 16 H1: a __pycache__ the launching user cannot list (root's, made under umask 027) stopped
    every launch, while Python just reads the source. Judged as Python loads: only this interpreter's
    own names, opened directly; another interpreter's .pyc there is never loaded."""
    site = tmp_path / "site"
    (site / "vllm/models").mkdir(parents=True)
    (site / MODEL).write_text(MODEL_PY + "# patched\n")
    cache = site / "vllm/models/__pycache__"
    _unchecked_pyc_of(cache, MODEL_PY.encode(), "model.cpython-310.pyc")
    pycache_unlistable(monkeypatch)
    assert target_guard.stale_bytecode(str(site), [MODEL]) == []
    mine = _unchecked_pyc_of(cache, MODEL_PY.encode(), f"model.{sys.implementation.cache_tag}.pyc")
    (problem,) = target_guard.stale_bytecode(str(site), [MODEL])
    assert problem.startswith(f"vllm/models/__pycache__/{mine.name} {target_guard.STALE_BYTECODE} {MODEL}")


def test_status_on_another_python_than_vllms_judges_an_unlistable_pycache_as_vllms_launch_does(
    patched, run, monkeypatch
):
    """Review 17 M1: status from a patchkit on another Python (pipx on 3.12, vLLM on 3.11) looked in an
    unlistable __pycache__ for its own names only, missed vLLM's stale .pyc and said "applied" while
    the launch refused. Status opens every CPython 3's names there, as it judges a listable one."""
    site, _, _ = patched
    cache = site / "vllm/models/__pycache__"
    other = "cpython-311" if sys.implementation.cache_tag == "cpython-310" else "cpython-310"  # not patchkit's
    vllms = _unchecked_pyc_of(cache, MODEL_PY.encode(), f"model.{other}.pyc")  # of the stock bytes: stale
    pycache_unlistable(monkeypatch)
    done = run("status", "--target", site)
    assert done.exit_code == 1, done.output
    assert f"__pycache__/{vllms.name}" in " ".join(done.output.split()), done.output


def test_bytecode_that_is_no_regular_file_is_never_read_and_a_symlink_is_refused_unfollowed(patched):
    """__pycache__ is untrusted: a fifo (a read would hang) named as the module's bytecode is not
    read. A symlink to a stale .pyc elsewhere, or a symlinked __pycache__, Python's import would
    follow; Python never writes either, so the guard refuses the link without following it (gate29:
    a deep chain behind one per recorded file cost ~10 ms a file), whatever it leads to."""
    site, _, _ = patched
    tag = sys.implementation.cache_tag
    cache = site / "vllm/models/__pycache__"
    cache.mkdir()
    os.mkfifo(cache / f"model.{tag}.pyc")
    elsewhere = _unchecked_pyc_of(site.parent / "elsewhere", MODEL_PY.encode(), f"model.{tag}.opt-1.pyc")
    (cache / elsewhere.name).symlink_to(elsewhere)

    def problems() -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import patchkit_guard, sys; print(patchkit_guard.find_problems(sys.argv[1]))",
                site,
            ],
            cwd=site,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    found = problems()
    assert f"vllm/models/__pycache__/{elsewhere.name} is a symlink, which Python never writes there" in found, found
    assert "unchecked-hash" not in found, found  # never followed to what it points to
    (cache / elsewhere.name).unlink()
    (cache / elsewhere.name).symlink_to(site / "vllm/models/model.py")  # a harmless target: refused all the same
    assert "is a symlink, which Python never writes there" in problems()
    (cache / elsewhere.name).unlink()
    # the fifo is never read, but it is refused: the import opens it before the source and waits on it
    fifo = f"vllm/models/__pycache__/model.{tag}.pyc is a fifo or a device, not bytecode: importing {MODEL} opens it"
    assert fifo in problems() and "unchecked-hash" not in problems()
    (cache / f"model.{tag}.pyc").unlink()
    assert problems() == "[]\n"
    shutil.rmtree(cache)
    cache.symlink_to(elsewhere.parent)
    assert "vllm/models/__pycache__ is a symlink, which Python never writes there" in problems()


def test_stale_bytecode_under_the_pycache_prefix_stops_the_launch_and_status_names_its_removal(patched, tmp_path):
    """Issue 20 (review 18 H1): under PYTHONPYCACHEPREFIX Python reads a module's bytecode from
    PREFIX/<the source's absolute directory>/, never __pycache__: an unchecked-hash .pyc of the stock
    file there runs the stock code. The guard judges its own process's prefix; status judges the
    prefix of its own environment, and names the exact removal (apply looks in __pycache__ only)."""
    site, diff, _ = patched
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    mirror = prefix / str(site.resolve()).lstrip("/") / "vllm/models"
    mirror.parent.mkdir(parents=True)
    pyc = _unchecked_pyc_of(mirror, MODEL_PY.encode(), f"model.{sys.implementation.cache_tag}.pyc")
    assert _load(site).returncode == 0  # no prefix: that .pyc is never read
    done = _load(site, PYTHONPYCACHEPREFIX=str(prefix))
    assert done.returncode != 0
    said = f"{pyc} (under the pycache prefix) is unchecked-hash bytecode compiled from other bytes than {MODEL}"
    assert said in done.stderr, done.stderr[-800:]
    assert (
        run_cli_read_only("status", "--target", site, "--patch", diff).returncode == 0
    )  # not in its environment: nothing new
    status = run_cli_read_only("status", "--target", site, "--patch", diff, env={"PYTHONPYCACHEPREFIX": str(prefix)})
    assert status.returncode != 0 and said in " ".join(status.stdout.split()), status.stdout
    fix = " ".join(status.stdout.split()).partition("run `rm -f -- ")[2].partition("`")[0]
    assert fix == str(pyc), status.stdout
    subprocess.run(["rm", "-f", "--", fix], check=True)
    assert _load(site, PYTHONPYCACHEPREFIX=str(prefix)).returncode == 0
    assert (
        run_cli_read_only(
            "status", "--target", site, "--patch", diff, env={"PYTHONPYCACHEPREFIX": str(prefix)}
        ).returncode
        == 0
    )


def test_under_a_pycache_prefix_stale_bytecode_in_pycache_is_never_read_and_never_refused(patched, tmp_path):
    """launch30 item 1c: under a pycache prefix Python reads a module's bytecode from the prefix's
    mirror alone (importlib's cache_from_source), never __pycache__: the guard refused a stale
    unchecked-hash .pyc there all the same, stopping a launch that would have run the patched file."""
    site, diff, _ = patched
    pyc = _unchecked_pyc_of(
        site / "vllm/models/__pycache__", MODEL_PY.encode(), f"model.{sys.implementation.cache_tag}.pyc"
    )
    assert _load(site).returncode != 0  # no prefix: Python reads it, and runs the stock code
    prefix = {"PYTHONPYCACHEPREFIX": str(warm_pycache_prefix(tmp_path / "pfx"))}
    assert _load(site, **prefix).returncode == 0, _load(site, **prefix).stderr[-600:]
    assert target_guard.stale_bytecode(str(site), [MODEL], prefix=str(tmp_path / "pfx")) == []
    assert run_cli_read_only("status", "--target", site, "--patch", diff, env=prefix).returncode == 0
    assert pyc.exists()


def test_apply_in_a_pycache_prefixs_environment_removes_the_bytecode_its_write_makes_stale(tmp_path, scratch):
    """launch30 item 1b: an image compiled the stock tree under its prefix (unchecked-hash), then
    `apply` ran in that environment: apply fixed __pycache__ alone, so every launch from there was
    refused (and would have run the stock code). It removes those too, and says so."""
    site = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    mirror = prefix / str(site.resolve()).lstrip("/") / "vllm/models"
    mirror.parent.mkdir(parents=True)
    pyc = _unchecked_pyc_of(mirror, MODEL_PY.encode(), f"model.{sys.implementation.cache_tag}.pyc")
    env = {"PYTHONPYCACHEPREFIX": str(prefix)}
    done = run_cli_writing("apply", "--target", site, "--patch", diff, "-v", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not pyc.exists() and f"{pyc} (under the pycache prefix): stale: removed" in " ".join(done.stdout.split())
    assert _load(site, **env).returncode == 0
    assert run_cli_read_only("status", "--target", site, "--patch", diff, env=env).returncode == 0


def test_bytecode_under_the_pycache_prefix_that_is_no_regular_file_is_never_read(patched, tmp_path):
    """The prefix's mirror is untrusted as __pycache__ is: a fifo named as the module's bytecode is
    not read (a read would hang) but refused (the import would open it); an unchecked-hash .pyc of the
    patched bytes passes."""
    site, _, _ = patched
    prefix = tmp_path / "pfx"
    mirror = prefix / str(site.resolve()).lstrip("/") / "vllm/models"
    mirror.mkdir(parents=True)
    os.mkfifo(mirror / f"model.{sys.implementation.cache_tag}.pyc")
    _unchecked_pyc_of(mirror, (site / MODEL).read_bytes(), f"model.{sys.implementation.cache_tag}.opt-1.pyc")
    (fifo,) = target_guard.stale_bytecode(str(site), [MODEL], prefix=str(prefix))
    assert fifo.startswith(f"{mirror}/model.{sys.implementation.cache_tag}.pyc (under the pycache prefix) is a fifo")
    (mirror / f"model.{sys.implementation.cache_tag}.pyc").unlink()
    assert target_guard.stale_bytecode(str(site), [MODEL], prefix=str(prefix)) == []
    _unchecked_pyc_of(mirror, MODEL_PY.encode(), f"model.{sys.implementation.cache_tag}.opt-2.pyc")
    (problem,) = target_guard.stale_bytecode(str(site), [MODEL], prefix=str(prefix))
    assert problem.startswith(f"{mirror}/model.{sys.implementation.cache_tag}.opt-2.pyc (under the pycache prefix)")


def test_bytecode_under_the_pycache_prefix_is_judged_by_the_path_vllm_is_imported_from(patched, tmp_path):
    """Python keys bytecode under a prefix by the source's path as the import path names it, symlinks
    kept: a site-packages reached through a symlinked directory has its .pyc under that path."""
    site, _, _ = patched
    link = tmp_path / "venv-link"
    link.symlink_to(site, target_is_directory=True)
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    mirror = prefix / str(link).lstrip("/") / "vllm/models"
    mirror.parent.mkdir(parents=True)
    pyc = _unchecked_pyc_of(mirror, MODEL_PY.encode(), f"model.{sys.implementation.cache_tag}.pyc")
    done = _load(link, PYTHONPYCACHEPREFIX=str(prefix))
    assert done.returncode != 0 and f"{pyc} (under the pycache prefix) is unchecked-hash" in done.stderr, done.stderr
    pyc.unlink()
    assert _load(link, PYTHONPYCACHEPREFIX=str(prefix)).returncode == 0


def test_the_extension_modules_in_the_guards_place_are_looked_for_without_a_path_a_suffix(tmp_path, monkeypatch):
    """Every command's launch verdict looks for an extension module named as the guard under each suffix the
    launch's Python may load (~100 where the site names no Python): a Path built for each was ~40% of it."""
    site = write_tree(tmp_path / "site")
    suffixes = guard.launch_extensions(site)
    (site / f"patchkit_guard{suffixes[-1]}").write_text("")
    joined = []
    join = Path.__truediv__
    monkeypatch.setattr(Path, "__truediv__", lambda path, part: joined.append(part) or join(path, part))
    [said] = guard._shadowing_module(site)
    assert said.startswith(f"{site / ('patchkit_guard' + suffixes[-1])} is imported instead of patchkit_guard.py")
    assert len(suffixes) > 50 and len(joined) < 5, joined


@pytest.mark.parametrize("shadowing", ["patchkit_guard/__init__.py", "patchkit_guard.abi3.so"])
def test_a_module_imported_in_the_guards_place_fails_status_whatever_it_does(patched, shadowing):
    """A package or extension module named as the guard, beside it, is what vLLM's entry point imports
    (FileFinder's order): the guard never runs, so status neither passes the tree nor says the guard
    refuses it; it names that file, and removing it (the fix said) brings the guard back."""
    site, diff, _ = patched
    planted = site / shadowing
    planted.parent.mkdir(exist_ok=True)
    planted.write_text("def check():\n    pass\n")
    if shadowing.endswith("__init__.py"):  # vLLM would run it: the launch goes, whatever the tree holds
        assert _load(site).returncode == 0
    for edited in (False, True):
        if edited:
            with open(site / MODEL, "a") as fh:
                fh.write("# tuned by hand\n")
        done = run_cli_read_only("status", "--target", site, "--patch", diff)
        said = " ".join(done.stdout.split())
        assert done.returncode == 1, said + done.stderr
        assert f"vLLM never runs the launch guard: {planted} is imported instead of patchkit_guard.py" in said, said
        assert "the launch guard refuses" not in said, said
        assert f"if {planted} is not vLLM's own, remove it" in said or edited, said
    planted.unlink()
    (site / MODEL).write_text((site / MODEL).read_text().replace("# tuned by hand\n", ""))
    assert run_cli_read_only("status", "--target", site, "--patch", diff).returncode == 0


def test_only_an_extension_module_the_sites_python_loads_stands_in_for_the_guard(tmp_path, scratch):
    """A site-packages of Python 3.11 imports .cpython-311-…so, .abi3.so and .so, never another version's."""
    site = write_tree(tmp_path / "lib" / "python3.11" / "site-packages")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    assert run_cli_writing("apply", "--target", site, "--patch", diff).returncode == 0
    (site / "patchkit_guard.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    done = run_cli_read_only("status", "--target", site, "--patch", diff)
    assert done.returncode == 0, done.stdout + done.stderr
    (site / "patchkit_guard.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    done = run_cli_read_only("status", "--target", site, "--patch", diff)
    assert done.returncode == 1 and "vLLM never runs the launch guard" in done.stdout, done.stdout + done.stderr
