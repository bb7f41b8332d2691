"""All-or-nothing writes: an injected failure or a hard exit at every filesystem operation of an
apply and a revert leaves the tree exactly as before or exactly as after."""

from __future__ import annotations

import json
import os
import re

import pytest
from helpers import MODEL_PY, SPEC_PY, make_patch, run_cli_judged, run_patchkit, snapshot, sweep_trials, write_tree

from patchkit.engine import transaction

SPEC = "vllm/config/spec.py"


@pytest.fixture
def big_change(tmp_path, scratch):
    """A patch that modifies two files, adds one in a new directory and deletes one."""
    tree = write_tree(tmp_path / "site")
    raw = make_patch(
        scratch,
        tree,
        {
            SPEC: SPEC_PY.replace('"qwen"', '"deepseek"'),
            "vllm/models/model.py": MODEL_PY.replace("return x", "return x + 1"),
            "vllm/brand/new/mod.py": "NEW = True\n",
            "vllm/__init__.py": None,
        },
    )
    (tmp_path / "p.diff").write_bytes(raw)
    return tree, tmp_path / "p.diff"


def _with_fault(monkeypatch, after: int, mode: str = "raise"):
    monkeypatch.setenv("PATCHKIT_FAULT_AFTER", str(after))
    monkeypatch.setenv("PATCHKIT_FAULT_MODE", mode)
    monkeypatch.setattr(transaction, "_faults", transaction._Faults())


def _fail_at_each_operation_until_done(monkeypatch, run, argv, expected):
    """Fail the 1st, 2nd, ... filesystem operation until the command gets through whole."""
    for n in range(1, 200):
        _with_fault(monkeypatch, n)
        result = run(*argv)
        if result.exit_code == 0:
            return n
        assert result.exit_code == 4 and "rolled back" in result.output, (n, result.output)
        assert snapshot(argv[2]) == expected, n
        assert not (argv[2] / ".patchkit/journal.json").exists()
        linked = [p for p in (argv[2] / "vllm").rglob("*") if p.is_file() and p.stat().st_nlink > 1]
        assert linked == [], (n, linked)  # no saved original left hard-linked to a tree file
    raise AssertionError("the command never got through")


def test_injected_failure_at_every_operation_of_apply_rolls_back(monkeypatch, run, big_change):
    tree, patch = big_change
    stock = snapshot(tree)
    operations = _fail_at_each_operation_until_done(
        monkeypatch, run, ["apply", "--target", tree, "--patch", patch], stock
    )
    assert operations > 8
    assert snapshot(tree) != stock and (tree / "vllm/brand/new/mod.py").exists()


def test_injected_failure_at_every_operation_of_revert_keeps_it_patched(monkeypatch, run, big_change):
    tree, patch = big_change
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    patched = snapshot(tree)
    operations = _fail_at_each_operation_until_done(
        monkeypatch, run, ["revert", "--target", tree, "--patch", patch], patched
    )
    assert operations > 8
    assert snapshot(tree) == stock
    assert not (tree / "vllm/brand").exists()


def test_hard_exit_at_every_operation_then_next_command_recovers(tmp_path, big_change):
    tree, patch = big_change
    stock = snapshot(tree)
    target = ["--target", str(tree), "--patch", str(patch)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")}
    after = None
    # each command a process of its own (forked by cli_server), which the fault ends
    for n in sweep_trials(range(1, 40)):
        fault = {**env, "PATCHKIT_FAULT_AFTER": str(n), "PATCHKIT_FAULT_MODE": "exit"}
        died = run_patchkit(["apply", *target], fault, None, 300)
        if died.returncode == 0:  # n is past the last operation: the apply completed
            after = snapshot(tree)
            break
        assert died.returncode == 70, died.stderr
        pending = (tree / ".patchkit/journal.json").exists()
        status = (  # no fault to end it: judged by its output and files alone, in this process where it may
            run_cli_judged("status", *target, "--format", "json")
            if len(env) == len(os.environ)
            else run_patchkit(["status", *target, "--format", "json"], env, None, 300)
        )
        assert json.loads(status.stdout)["state"] == "not-applied", n
        assert ("rolled back an interrupted patchkit transaction" in status.stderr) == pending
        assert snapshot(tree) == stock, n
        state = tree / ".patchkit/state.json"
        assert not state.exists() or json.loads(state.read_text())["entries"] == []
        assert not (tree / ".patchkit/journal.json").exists()
    assert after is not None and after != stock
    assert n > 8  # the apply died at each of its operations first


def test_preflight_refuses_unwritable_file_before_writing(monkeypatch, run, big_change):
    tree, patch = big_change
    stock = snapshot(tree)
    real_access = os.access
    monkeypatch.setattr(
        transaction.os,
        "access",
        lambda path, mode: False if str(path).endswith("model.py") else real_access(path, mode),
    )
    result = run("apply", "--target", tree, "--patch", patch)
    assert result.exit_code == 4 and "model.py" in result.output and "not writable" in result.output
    assert snapshot(tree) == stock


def test_symlinked_directory_on_the_way_is_refused(tmp_path, run, scratch):
    tree = write_tree(tmp_path / "site")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text("A = 1\n")
    (tree / "vllm" / "link").symlink_to(outside, target_is_directory=True)
    raw = b"--- a/vllm/link/evil.py\n+++ b/vllm/link/evil.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n"
    (tmp_path / "p.diff").write_bytes(raw)
    result = run("apply", "--target", tree, "--patch", tmp_path / "p.diff")
    assert result.exit_code == 2 and "symlink" in result.output
    assert (outside / "evil.py").read_text() == "A = 1\n"


def test_a_full_disk_on_revert_says_how_much_to_free_then_the_same_command(monkeypatch, run, big_change):
    """review 12a L3: revert on a full disk said only "No space left on device; every file was
    rolled back", not how much room it needs nor what to run once there is room."""
    tree, patch = big_change
    stock = snapshot(tree)
    assert run("apply", "--target", tree, "--patch", patch).exit_code == 0
    patched = snapshot(tree)
    _with_fault(monkeypatch, 3)
    result = run("revert", "--target", tree, "--patch", patch)
    assert result.exit_code == 4 and "No space left on device" in result.output, result.output
    text = " ".join(result.output.split())
    said = re.search(
        r"it needs about ([\d.]+) (KB|MB) free on the device holding (\S+): make room, then run the same command again",
        text,
    )
    assert said, result.output
    restored = sum(len(content) for rel, content in stock.items() if patched.get(rel) != content)
    assert float(said[1]) * {"KB": 1e3, "MB": 1e6}[said[2]] >= restored and str(tree) in said[3]
    assert snapshot(tree) == patched
    monkeypatch.delenv("PATCHKIT_FAULT_AFTER")  # room again: the same command reverts
    monkeypatch.setattr(transaction, "_faults", transaction._Faults())
    assert run("revert", "--target", tree, "--patch", patch).exit_code == 0
    assert snapshot(tree) == stock


def _out_of_inodes_until_done(run, argv, tree, remount, expected):
    """Run argv with 0, 1, 2, ... inodes to spare until it gets through: each run short of inodes is
    exit 4, the tree as before, no journal, and the hint says inodes (not bytes) with the count."""
    for more in range(60):
        remount(more)
        result = run(*argv)
        if result.exit_code == 0:
            return more
        text = " ".join(result.output.split())
        assert result.exit_code == 4 and snapshot(tree) == expected, (more, text)
        assert not (tree / ".patchkit/journal.json").exists(), more
        said = re.search(
            r"is out of inodes \(one per file\), not space \([\d.]+ MB free\): it needs about (\d+) free", text
        )
        assert said and "MB free on the device" not in text and "df -i" in text, (more, text)
        remount(4096)  # room for the next run's tree to be judged
    raise AssertionError("the command never got through")


def test_a_device_out_of_inodes_is_said_as_such_by_apply_and_revert(run, scratch, inode_tmpfs):
    """review32 L1: a tmpfs whose nr_inodes was just above the tree's: apply and revert rolled back
    (exit 4) but said "it needs about 0.6 MB free on the device ...: make room" with 59 MB free."""
    mount, remount = inode_tmpfs
    tree = write_tree(mount / "site")
    patch = scratch / "p.diff"
    patch.write_bytes(
        make_patch(scratch, tree, {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"'), "vllm/n/m.py": "N = 1\n"})
    )
    stock = snapshot(tree)
    needed = _out_of_inodes_until_done(run, ["apply", "--target", tree, "--patch", patch], tree, remount, stock)
    patched = snapshot(tree)
    assert needed > 2 and patched != stock
    assert _out_of_inodes_until_done(run, ["revert", "--target", tree, "--patch", patch], tree, remount, patched) > 2
    assert snapshot(tree) == stock


def test_out_of_inodes_said_without_a_mount(monkeypatch, run, big_change):
    """The same words where statvfs says no inode is free (f_favail 0) and bytes are: the commit's
    ENOSPC (injected) is said as inodes, with the count; with inodes free, as bytes."""
    tree, patch = big_change
    stock = snapshot(tree)
    real = os.statvfs
    for favail, said in ((0, "is out of inodes (one per file), not space"), (10**6, "MB free on the device")):
        fake = os.statvfs_result((4096, 4096, 10**6, 10**6, 10**6, 10**6, favail, favail, 0, 255))
        monkeypatch.setattr(os, "statvfs", lambda path, fake=fake: fake if str(path) == str(tree) else real(path))
        _with_fault(monkeypatch, 3)
        result = run("apply", "--target", tree, "--patch", patch)
        assert result.exit_code == 4 and said in " ".join(result.output.split()), result.output
        assert snapshot(tree) == stock


def test_a_rollback_that_cannot_remove_a_directory_it_created_says_which_and_how(monkeypatch, run, big_change):
    """Review 41b L2: a commit that fails (ENOSPC) after it created vllm/brand/new/ is rolled back,
    but the rmdir of that directory fails (EIO here; a file written there meanwhile in life): it was
    left, empty, and the error said "every file was rolled back" (an empty directory imports as a
    namespace package). It is said, with the command that removes it, which then does."""
    tree, patch = big_change
    stock = snapshot(tree)
    real_rmdir, failing = os.rmdir, [True]

    def rmdir(path, *args, **kwargs):
        if failing[0] and "brand" in str(path) and os.path.isdir(path):
            raise OSError(5, os.strerror(5), str(path))
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir)
    for n in range(1, 200):
        _with_fault(monkeypatch, n)
        result = run("apply", "--target", tree, "--patch", patch)
        assert result.exit_code == 4, (n, result.output)
        if (tree / "vllm/brand/new").exists():
            break
        if (tree / "vllm/brand").exists():  # cut short before it made new/: left, said, removed for the next run
            real_rmdir(tree / "vllm/brand")
    said = " ".join(result.output.split())
    assert "every file was rolled back, but could not remove 2 directories the transaction had created" in said, said
    assert "vllm/brand/new (Input/output error), vllm/brand (Input/output error)" in said, said
    failing[0] = False
    [command] = [c for c in re.findall(r"`([^`]+)`", said) if c.startswith("rmdir")]
    assert command == f"rmdir -- {tree}/vllm/brand/new {tree}/vllm/brand", said
    for directory in command.split()[2:]:  # as the shell runs it: one after another
        os.rmdir(directory)
    assert snapshot(tree) == stock and not (tree / "vllm/brand").exists()


def test_a_recovery_that_cannot_remove_a_directory_the_crash_left_says_which(monkeypatch, run, big_change):
    """The same directory after a crash (the apply killed once it made vllm/brand/new/): the next
    command's recovery rolls back every file; a directory it cannot remove is said with its fix."""
    tree, patch = big_change
    stock = snapshot(tree)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")}
    for n in range(1, 40):
        fault = {**env, "PATCHKIT_FAULT_AFTER": str(n), "PATCHKIT_FAULT_MODE": "exit"}
        died = run_patchkit(["apply", "--target", str(tree), "--patch", str(patch)], fault, None, 300)
        assert died.returncode == 70, died.stderr
        if (tree / "vllm/brand/new").exists():
            break
        assert run("status", "--target", tree, "--patch", patch).exit_code == 0  # recovered: again one step on
    real_rmdir = os.rmdir

    def rmdir(path):
        if "brand" in str(path):
            raise OSError(5, os.strerror(5), str(path))
        real_rmdir(path)

    monkeypatch.setattr(os, "rmdir", rmdir)
    result = run("status", "--target", tree, "--patch", patch)
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "rolled back an interrupted patchkit transaction" in said, said
    assert "could not remove 2 directories the transaction had created: vllm/brand/new (Input/output error)" in said
    assert f"`rmdir -- {tree}/vllm/brand/new {tree}/vllm/brand` removes them once empty" in said, said
    monkeypatch.setattr(os, "rmdir", real_rmdir)
    real_rmdir(tree / "vllm/brand/new")
    real_rmdir(tree / "vllm/brand")
    assert snapshot(tree) == stock
