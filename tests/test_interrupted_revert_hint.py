"""A revert interrupted after its commit: the stock files are back, the steps after it did not run.
The user asked for stock, so the hint leads with the revert that finishes it (new-user 22, H1: it
named only apply, which undoes what the user asked for)."""

from __future__ import annotations

from patchkit.base import hints, signals
from patchkit.base.options import Options


def test_a_revert_cut_after_its_commit_is_finished_by_revert_again(tmp_path):
    signals.new_run()
    signals.reverting()
    with hints.selected(Options(target_dir=str(tmp_path))):
        signals.note(signals.COMMITTED)
    message, hint = signals.interrupted_report()
    assert "interrupted after the revert was written" in message
    assert hint is not None and hint.startswith(f"`patchkit revert --target {tmp_path}` again finishes it;"), hint
    assert f"`patchkit apply --target {tmp_path}` applies the sets again" in hint, hint
    signals.new_run()
