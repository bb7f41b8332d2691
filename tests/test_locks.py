"""The one lock helper, and what its two failures mean to the target's lock and to a release's lock."""

from __future__ import annotations

import threading

import pytest
from filelock import FileLock, Timeout
from helpers import assert_clean_failure, make_patch, patched_spec, run_cli, snapshot, write_tree

from patchkit.base import locks
from patchkit.base.errors import BadInput, FetchError, LockBusy, TargetError
from patchkit.checks.probe import probe_timeout
from patchkit.engine import transaction
from patchkit.fetch import release as fetch_release
from patchkit.fetch import release_tree


class Busy(Exception):
    pass


class Unusable(Exception):
    pass


def _acquire(path, timeout=0.05, on_wait=None):
    return locks.acquire(path, timeout, busy=Busy, unusable=Unusable, on_wait=on_wait)


def test_a_free_lock_is_taken_and_released(tmp_path):
    lock = _acquire(tmp_path / "lock")
    assert lock.is_locked
    with pytest.raises(Timeout):
        FileLock(str(tmp_path / "lock")).acquire(timeout=0.01)
    lock.release()
    FileLock(str(tmp_path / "lock")).acquire(timeout=0.01)


def test_a_held_lock_raises_the_callers_busy_error_with_the_wait(tmp_path):
    with FileLock(str(tmp_path / "lock")), pytest.raises(Busy) as caught:
        _acquire(tmp_path / "lock", timeout=0.05)
    assert caught.value.args == (0.05,)


def test_a_lock_file_that_cannot_be_opened_raises_the_callers_unusable_error(tmp_path):
    (tmp_path / "lock").mkdir()
    with pytest.raises(Unusable) as caught:
        _acquire(tmp_path / "lock")
    assert isinstance(caught.value.args[0], OSError)


def test_on_wait_is_called_once_when_the_lock_is_not_free_at_once(tmp_path):
    taken = threading.Event()

    def hold_briefly():
        with FileLock(str(tmp_path / "lock")):
            taken.set()
            threading.Event().wait(0.5)

    holder = threading.Thread(target=hold_briefly)
    holder.start()
    taken.wait()
    notices: list[str] = []
    lock = _acquire(tmp_path / "lock", timeout=5, on_wait=lambda: notices.append("waiting"))
    lock.release()
    holder.join()
    assert notices == ["waiting"]


def test_on_wait_is_not_called_for_a_free_lock(tmp_path):
    notices: list[str] = []
    _acquire(tmp_path / "lock", on_wait=lambda: notices.append("waiting")).release()
    assert notices == []


def test_target_lock_busy_is_lock_busy(tree):
    (tree / ".patchkit").mkdir()
    with FileLock(str(tree / ".patchkit" / "lock")), pytest.raises(LockBusy, match="another patchkit is working on"):
        transaction._acquire(tree, 0.05)


def test_target_lock_unusable_is_target_error(tree):
    (tree / ".patchkit" / "lock").mkdir(parents=True)
    with pytest.raises(TargetError, match="is a directory where patchkit keeps its lock file") as raised:
        transaction._acquire(tree, 0.05)
    assert "rmdir -- " in (raised.value.hint or "") and "writable" not in (raised.value.hint or "")


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize("command", ["apply", "revert"])
def test_a_lock_that_is_a_directory_is_named_with_the_command_that_removes_it(tmp_path, scratch, command, inside):
    """Not "it must be writable": no permission makes a directory a lock file; removing it does."""
    root = write_tree(tmp_path / "site")
    patch = tmp_path / "x.patch"
    patch.write_bytes(make_patch(scratch, root, {"vllm/config/spec.py": patched_spec()}))
    if command == "revert":
        assert run_cli("apply", "--target", root, "--patch", patch).returncode == 0
        (root / ".patchkit" / "lock").unlink()
    lock = root / ".patchkit" / "lock"
    lock.mkdir(parents=True)
    if inside:
        (lock / "left").write_text("x")
    done = run_cli(command, "--target", root, "--patch", patch)
    assert_clean_failure(done, 4)
    said = " ".join(done.stderr.split())
    assert f"{lock} is a directory where patchkit keeps its lock file" in said, said
    assert ("rm -r -- " if inside else "rmdir -- ") in said and "must be writable" not in said, said
    (lock / "left").unlink(missing_ok=True)
    lock.rmdir()  # the fix said
    assert run_cli(command, "--target", root, "--patch", patch).returncode == 0


def test_a_cache_lock_that_is_a_directory_is_named_with_the_command_that_removes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path))
    (tmp_path / "releases" / "0.1.0" / ".lock").mkdir(parents=True)
    with pytest.raises(FetchError, match="is a directory where patchkit keeps its lock file") as raised:
        release_tree("0.1.0", ["vllm/__init__.py"])
    assert "rmdir -- " in (raised.value.hint or "") and "PATCHKIT_CACHE_DIR" not in (raised.value.hint or "")


def test_release_lock_busy_is_fetch_error_after_the_waiting_notice(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(fetch_release, "LOCK_TIMEOUT", 0.05)
    root = tmp_path / "releases" / "0.1.0"
    root.mkdir(parents=True)
    notices: list[str] = []
    with FileLock(str(root / ".lock")), pytest.raises(FetchError, match="timed out waiting for the lock"):
        release_tree("0.1.0", ["vllm/__init__.py"], progress=notices.append)
    assert notices == ["waiting for another patchkit process fetching vLLM 0.1.0..."]


def test_release_lock_unusable_is_fetch_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path))
    (tmp_path / "releases" / "0.1.0" / ".lock").mkdir(parents=True)
    with pytest.raises(FetchError, match="cannot lock"):
        release_tree("0.1.0", ["vllm/__init__.py"])


@pytest.mark.parametrize("value", ["sixty", "-0.5", "inf", "-inf", "nan", "1e12", "0x10"])
@pytest.mark.parametrize("command", ["apply", "revert", "status"])
def test_a_bad_lock_timeout_is_bad_input_before_anything_is_written(tmp_path, scratch, value, command):
    root = write_tree(tmp_path / "site")
    patch = tmp_path / "x.patch"
    patch.write_bytes(make_patch(scratch, root, {"vllm/config/spec.py": patched_spec()}))
    before = snapshot(root)
    done = run_cli(command, "--target", root, "--patch", patch, env={"PATCHKIT_LOCK_TIMEOUT": value})
    assert_clean_failure(done, 2)
    assert f"PATCHKIT_LOCK_TIMEOUT={value!r}" in done.stderr
    assert snapshot(root) == before and not (root / ".patchkit").exists()


@pytest.mark.parametrize(("value", "seconds"), [("", 60.0), (" 2.5 ", 2.5), ("0", 0.0), ("86400", 86400.0)])
def test_a_lock_timeout_from_zero_to_a_day_is_taken(monkeypatch, value, seconds):
    monkeypatch.setenv("PATCHKIT_LOCK_TIMEOUT", value)
    assert locks.seconds_from_env("PATCHKIT_LOCK_TIMEOUT", 60.0, zero_ok=True) == seconds


def test_zero_is_no_wait_for_a_lock_but_no_probe_timeout(tree, monkeypatch):
    monkeypatch.setenv("PATCHKIT_LOCK_TIMEOUT", "0")
    (tree / ".patchkit").mkdir()
    with FileLock(str(tree / ".patchkit" / "lock")), pytest.raises(LockBusy, match=r"waited 0 s"):
        transaction._acquire(tree, None)
    monkeypatch.setenv("PATCHKIT_PROBE_TIMEOUT", "0")
    with pytest.raises(BadInput, match="PATCHKIT_PROBE_TIMEOUT='0'"):
        probe_timeout()
