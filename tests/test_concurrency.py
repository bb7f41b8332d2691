"""One writer at a time, locks that die with their process, and a tree patchkit may not write."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest
from helpers import SPEC_PY, make_patch, snapshot, write_tree

SPEC = "vllm/config/spec.py"
PATCHKIT = [sys.executable, "-m", "patchkit"]


def without_capabilities(*args: str) -> subprocess.CompletedProcess:
    """patchkit run as root with no capabilities (setpriv): the mode bits hold for it."""
    setpriv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    return subprocess.run([*setpriv, *PATCHKIT, *args], capture_output=True, text=True)


@pytest.fixture
def tree_and_patch(tmp_path, scratch):
    tree = write_tree(tmp_path / "site")
    patch = tmp_path / "p.diff"
    patch.write_bytes(
        make_patch(scratch, tree, {SPEC: SPEC_PY.replace('"qwen"', '"deepseek"'), "vllm/new.py": "NEW = 1\n"})
    )
    return tree, patch


def _patchkit(*argv, env=None, **kw):
    return subprocess.Popen(
        [*PATCHKIT, *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **kw,
    )


def test_two_processes_applying_at_once_end_in_one_consistent_patched_tree(tree_and_patch):
    tree, patch = tree_and_patch
    procs = [_patchkit("apply", "--target", tree, "--patch", patch, "--format", "json") for _ in range(2)]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outcomes.append(json.loads(out)["result"])
    assert sorted(outcomes) == ["already-applied", "applied"]
    assert '"deepseek"' in (tree / SPEC).read_text() and (tree / "vllm/new.py").read_text() == "NEW = 1\n"
    state = json.loads((tree / ".patchkit/state.json").read_text())
    assert len(state["entries"]) == 1


def test_a_held_lock_makes_the_second_writer_wait_then_fail_clearly(tree_and_patch):
    from filelock import FileLock

    tree, patch = tree_and_patch
    (tree / ".patchkit").mkdir()
    stock = snapshot(tree)
    with FileLock(str(tree / ".patchkit" / "lock")):
        started = time.monotonic()
        proc = _patchkit("apply", "--target", tree, "--patch", patch, env={"PATCHKIT_LOCK_TIMEOUT": "1"})
        _out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - started
    assert proc.returncode == 4 and "another patchkit is working" in err
    assert waited >= 1
    assert snapshot(tree) == stock


def test_a_lock_left_by_a_killed_process_never_blocks(tree_and_patch):
    tree, patch = tree_and_patch
    (tree / ".patchkit").mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from filelock import FileLock; "
                f"FileLock({str(tree / '.patchkit' / 'lock')!r}).acquire(); print('held', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    proc = _patchkit("apply", "--target", tree, "--patch", patch, env={"PATCHKIT_LOCK_TIMEOUT": "5"})
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def test_status_waits_for_a_writer_instead_of_reading_half_a_transaction(tree_and_patch):
    from filelock import FileLock

    tree, patch = tree_and_patch
    (tree / ".patchkit").mkdir()
    lock = FileLock(str(tree / ".patchkit" / "lock"))
    lock.acquire()
    try:
        proc = _patchkit("status", "--target", tree, "--patch", patch, env={"PATCHKIT_LOCK_TIMEOUT": "1"})
        _out, err = proc.communicate(timeout=60)
    finally:
        lock.release()
    assert proc.returncode == 4 and "another patchkit is working" in err


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_read_only_tree_is_exit_4_naming_the_file_with_nothing_changed(tmp_path, tree_and_patch):
    """Root ignores mode bits, so run patchkit as root without capabilities (setpriv)."""
    tree, patch = tree_and_patch
    stock = snapshot(tree)
    target_file = tree / SPEC
    target_file.chmod(0o444)
    try:
        done = without_capabilities("apply", "--target", str(tree), "--patch", str(patch))
    finally:
        target_file.chmod(0o644)
    assert done.returncode == 4, done.stderr
    assert SPEC in done.stderr and "not writable" in done.stderr
    assert snapshot(tree) == stock
    for directory in [tree, *tree.rglob("*")]:
        if directory.is_dir():
            directory.chmod(directory.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        done = without_capabilities("apply", "--target", str(tree), "--patch", str(patch))
        status = without_capabilities("status", "--target", str(tree), "--patch", str(patch), "--format", "json")
    finally:
        for directory in [tree, *tree.rglob("*")]:
            if directory.is_dir():
                directory.chmod(0o755)
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "not-applied"
    assert snapshot(tree) == stock


def test_a_wait_for_the_lock_is_said_at_once_naming_the_holder(tree_and_patch):
    """review30 L2: status and preflight waited for a held lock up to PATCHKIT_LOCK_TIMEOUT (60 s)
    with no word, and the timeout's message did not name the other writer, as guarantees.md says."""
    tree, patch = tree_and_patch
    (tree / ".patchkit").mkdir()
    code = (
        "import time; from filelock import FileLock; "
        f"lock = FileLock({str(tree / '.patchkit' / 'lock')!r}); lock.acquire(); print('held', flush=True); "
        "time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, "holder-mark"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = _patchkit("status", "--target", tree, "--patch", patch, env={"PATCHKIT_LOCK_TIMEOUT": "2"})
        _out, err = proc.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    said = " ".join(err.split())
    assert proc.returncode == 4 and f"note: another patchkit is working on {tree}" in said, said
    assert "waiting up to 2 s for it (PATCHKIT_LOCK_TIMEOUT sets the wait)" in said, said
    assert f"(waited 2 s; held by pid {holder.pid}: {sys.executable} -c " in said, said
