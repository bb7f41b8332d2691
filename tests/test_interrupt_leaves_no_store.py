"""An interrupt while a command takes a fresh tree's lock (.patchkit/ made, the lock file being
taken) changed nothing, so it leaves no .patchkit/ behind (new-user 22, H2: an apply interrupted
"before it changed anything" left an empty .patchkit/)."""

from __future__ import annotations

import pytest
from helpers import double_ctrl_c_in_the_lock

from patchkit.base import locks, signals
from patchkit.engine.transaction import locked_record
from patchkit.store.state import meta_dir


def interrupt_once_taken(monkeypatch) -> None:
    """A Ctrl-C that lands once .patchkit/ and its lock are made and the lock is held."""
    taken = locks.acquire

    def interrupted(path, timeout, **kwargs):
        taken(path, timeout, **kwargs).release()
        raise signals.Interrupted

    monkeypatch.setattr(locks, "acquire", interrupted)


def test_an_interrupt_while_the_lock_is_taken_leaves_no_store(tree, monkeypatch):
    interrupt_once_taken(monkeypatch)
    with pytest.raises(KeyboardInterrupt), locked_record(tree):
        pass
    assert not meta_dir(tree).exists(), sorted(p.name for p in meta_dir(tree).iterdir())


def test_an_interrupt_on_a_tree_with_a_record_keeps_its_store(tree, monkeypatch):
    meta_dir(tree).mkdir()
    (meta_dir(tree) / "state.json").write_text('{"format": 1, "entries": []}')
    interrupt_once_taken(monkeypatch)
    with pytest.raises(KeyboardInterrupt), locked_record(tree):
        pass
    assert (meta_dir(tree) / "state.json").exists()


def test_a_double_ctrl_c_inside_the_locks_take_is_an_interrupt_and_leaves_no_store(tree, monkeypatch):
    """The group escaped every `except KeyboardInterrupt`: the crash trials' revert exit 99, 1 in 300
    (a traceback and exit 1 from the console script), and a fresh tree kept the .patchkit/ made for the lock."""
    sent = double_ctrl_c_in_the_lock(monkeypatch)
    with signals.handled(), pytest.raises(signals.Interrupted), locked_record(tree):
        pass
    if sent != [1, 2]:
        pytest.skip("this filelock does not roll back an interrupted take")
    assert not meta_dir(tree).exists(), sorted(p.name for p in meta_dir(tree).iterdir())
