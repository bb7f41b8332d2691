"""Crash and interruption safety of a commit and its rollback, on a transaction that removes and
creates directories and installs or removes the launch guard (crash_trials.py's scenario): after a
SIGKILL, a SIGTERM, a double Ctrl-C or a full disk at any step, the next command restores a whole
tree and leaves no journal. The bounded subset runs here; `python tests/crash_trials.py` runs the
whole sweep (hundreds of trials), and the `slow` test below a smaller one of it."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import py_compile
import random
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import crash_trials as ct
import pytest
from helpers import (
    FAST_PROFILE,
    FAST_SHARE,
    double_ctrl_c_in_the_lock,
    mark_staged,
    record_rows,
    run_cli_judged,
    sweep_count,
    sweep_trials,
)
from hypothesis import settings

from patchkit.base import seal, signals


@pytest.fixture(scope="module")
def scenario():
    with tempfile.TemporaryDirectory(prefix="crash-", dir=ct.fast_scratch()) as base:
        yield ct.Scenario(Path(base))


@pytest.fixture
def work(scenario):
    return scenario.base / "work"


@pytest.fixture(scope="module")
def steps(scenario):
    """op -> how many steps its commit has: the last N at which a SIGKILL still stops it."""
    found = {}
    for op in ("apply", "revert"):
        low, high = 1, 256  # a kill at `low` lands, at `high` comes after the end
        while high - low > 1:
            middle = (low + high) // 2
            tree = scenario.fresh("stock" if op == "apply" else "patched", scenario.base / "work")
            code, _ = ct.run_cli([op, *scenario.args(tree, op)], f"{middle}:kill", served=True)
            low, high = (middle, high) if code == -signal.SIGKILL else (low, middle)
        found[op] = low
    return found


def _clean(tally: ct.Tally) -> None:
    assert not tally.failures, tally.report()


def test_a_shared_sweep_tries_a_share_of_the_trials_and_finds_the_steps_every_trial_finds():
    """make test tries every trial of a sweep; the fast profile every FAST_SHARE-th and the last, and
    bisects between two it tried to the same last step a kill stops (aimed_commit's count)."""
    profile = settings.get_current_profile_name()
    settings.load_profile("default")
    try:
        assert sweep_trials(range(1, 10)) == range(1, 10) and sweep_count(5) == 5
        settings.load_profile(FAST_PROFILE)
        assert list(sweep_trials(range(1, 10))) == [1, 1 + FAST_SHARE, 1 + 2 * FAST_SHARE]
        assert sweep_trials([*range(11), 20]) == [0, 4, 8, 20] and sweep_count(5) == 5 // FAST_SHARE
        asked: list[int] = []
        for last in (0, 1, 36, 37, 38, 40):
            tried = sweep_trials(range(1, 200))
            before, end = next((b, n) for b, n in zip([0, *tried], tried, strict=False) if n > last)
            assert ct.last_stopped(lambda n, last=last: asked.append(n) or n <= last, before, end) == last
        assert len(asked) <= 6 * FAST_SHARE.bit_length()
    finally:
        settings.load_profile(profile)


def test_a_hard_exit_at_every_step_of_a_revert_leaves_a_tree_the_next_command_restores(scenario, work):
    """A full revert removes the guard's dist-info directory and a created package first: a crash
    after that used to leave a journal recovery refused ("its directory is gone"), the tree mixed."""
    for n in sweep_trials(range(1, 200)):
        tree = scenario.fresh("patched", work)
        code, out = ct.run_cli(["revert", *scenario.args(tree)], str(n), mode="exit", served=True)
        if code == 0:
            break
        assert code == 70, out
        said = run_cli_judged("status", *scenario.args(tree), "--format", "json")
        assert not (tree / ".patchkit/journal.json").exists(), (n, said)
        assert scenario.whole(tree) == "patched", (n, said)
        assert json.loads(said.stdout)["state"] == "applied", n
    assert n > 20


@pytest.mark.slow
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_sigkill_and_sigterm_at_every_commit_step(scenario, work, steps, op):
    tally = ct.Tally()
    for mode in ("kill", "term"):
        assert ct.aimed_commit(scenario, work, op, mode, tally) == steps[op] > 20
    _clean(tally)


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_kill_a_second_ctrl_c_or_a_full_disk_at_every_step_of_a_rollback(scenario, work, steps, op):
    tally = ct.Tally()
    middle = steps[op] // 2
    lengths = ct.rollback_lengths(scenario, work, op, tally, [middle])  # every n: crash_trials.py
    assert min(lengths.values()) > 3
    ct.aimed_rollback(scenario, work, op, "int", "int", tally, {middle: lengths[middle]})
    ct.aimed_rollback(scenario, work, op, "raise", "raise", tally, {middle: lengths[middle]})
    _clean(tally)


def test_a_second_ctrl_c_waits_for_the_rollback_then_exits_130(scenario, work, steps):
    tree = scenario.fresh("stock", work)
    n = steps["apply"] - 4  # among the replaces: files changed, directories gone
    code, out = ct.run_cli(["apply", *scenario.args(tree, "apply")], f"{n}:int,{n + 3}:int")
    assert code == 130 and "rolled back; the target is as it was before" in out, out
    assert scenario.whole(tree) == "stock" and not (tree / ".patchkit/journal.json").exists()


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_second_ctrl_c_before_the_rollback_took_over_waits_for_it(scenario, work, steps, op, monkeypatch):
    """The second SIGINT lands between the first one's raise and the rollback's own deferral (the
    handler of the commit's failure): it cut the rollback, the journal was left, the tree mixed, and
    the message said "before any change" (a fresh CI's trials, 1 in 300). Sent here at that very
    moment, from the forked command itself."""
    from patchkit.engine import transaction

    real = transaction._roll_back_failed_commit

    def a_second_ctrl_c_first(*args):
        os.kill(os.getpid(), signal.SIGINT)
        real(*args)

    monkeypatch.setattr(transaction, "_roll_back_failed_commit", a_second_ctrl_c_first)  # the fork inherits it
    start = "stock" if op == "apply" else "patched"
    tree = scenario.fresh(start, work)
    code, out = ct.run_cli([op, *scenario.args(tree, op)], f"{steps[op] - 4}:int")  # files changed by then
    assert code == 130 and "rolled back; the target is as it was before" in out, out
    assert "before any change" not in out and out.count("interrupted") == 1, out
    assert scenario.whole(tree) == start and not (tree / ".patchkit/journal.json").exists()


def test_a_second_ctrl_c_before_the_first_one_before_a_command_was_said_waits(monkeypatch):
    """Before a command takes over the signals (click's parsing), a second SIGINT landing in the
    console script's except clause, before the first was said, escaped as a traceback (the crash
    trials' exit 99, 1 in 900). Both are sent here from the console script's own process."""
    from patchkit.cli import start

    said_by_patchkit = start.interrupted_before_a_command

    def a_second_ctrl_c_first() -> int:
        os.kill(os.getpid(), signal.SIGINT)
        return said_by_patchkit()

    def a_ctrl_c_while_parsing() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the first Ctrl-C was not raised")

    monkeypatch.setattr(start, "_run", a_ctrl_c_while_parsing)  # the fork inherits them
    monkeypatch.setattr(start, "interrupted_before_a_command", a_second_ctrl_c_first)
    code, out, _ = ct.console_run(["status"], [])
    assert code == 130 and out.count("error: interrupted before any change was made") == 1, (code, out)
    assert "Traceback" not in out, out


def test_sigterm_and_sighup_roll_back_and_exit_128_plus_the_signal(scenario, work, steps):
    for mode, code_wanted in (("term", 143), ("hup", 129)):
        tree = scenario.fresh("patched", work)
        code, out = ct.run_cli(["revert", *scenario.args(tree)], f"{steps['revert'] - 5}:{mode}")
        assert code == code_wanted and "rolled back; the target is as it was before" in out, out
        assert scenario.whole(tree) == "patched" and not (tree / ".patchkit/journal.json").exists()


def test_an_interrupt_at_the_commit_point_says_the_change_is_in_place(scenario, work, steps):
    """The signal arrives while the record is written: it waits for the commit point; the message
    says the change is in place, and it is."""
    tree = scenario.fresh("stock", work)
    code, out = ct.run_cli(
        ["apply", *scenario.args(tree, "apply")], f"{steps['apply']}:int"
    )  # the last step (the last a SIGKILL stops): the journal's removal
    assert code == 130 and "it is in place" in out and "error: interrupted" in out, out
    assert scenario.whole(tree) == "patched" and not (tree / ".patchkit/journal.json").exists()


def test_a_failed_rollback_is_exit_4_keeps_the_journal_and_recover_finishes_it(scenario, work, steps):
    tree = scenario.fresh("patched", work)
    last = steps["revert"]
    code, out = ct.run_cli(["revert", *scenario.args(tree)], f"{last - 3}:raise,{last - 1}:raise")
    assert code == 4 and "journal is kept" in out and "patchkit recover" in out, out
    assert (tree / ".patchkit/journal.json").exists()
    code, out = ct.run_cli(["recover", *scenario.args(tree, "recover")])
    assert code == 0 and "rolled back" in out, out
    assert scenario.whole(tree) == "patched" and not (tree / ".patchkit/journal.json").exists()


def test_a_rollback_writes_no_original_it_can_rename_back(scenario, work, steps, monkeypatch):
    """The rollback of a revert interrupted after its last replace writes no file's bytes: every
    original goes back by a rename (state.json too), so a full disk cannot stop it."""
    from patchkit.engine import transaction

    tree = scenario.fresh("patched", work)
    code, _ = ct.run_cli(["revert", *scenario.args(tree)], f"{steps['revert'] - 1}:kill")  # past the state write
    assert code == -signal.SIGKILL and (tree / ".patchkit/journal.json").exists()
    writes = []
    real = transaction._write_atomic

    def recorded(path, data, **kwargs):
        writes.append((path.name, data))
        real(path, data, **kwargs)

    monkeypatch.setattr(transaction, "_write_atomic", recorded)
    with transaction.target_lock(tree) as said:
        assert said and "restored" in said
    # Only an original the record returned to still names stays an object, and is copied: here
    # the empty __init__.py, which takes no data block.
    assert writes == [("__init__.py", b"")] and scenario.whole(tree) == "patched"


def _planted_journal(tree: Path, entry: dict) -> None:
    journal = {"id": "abc123", "previous_state": None, "files": [entry]}
    (tree / ".patchkit").mkdir(exist_ok=True)
    (tree / ".patchkit/journal.json").write_text(json.dumps(journal))


def _planted_object(tree: Path, data: bytes) -> str:
    from patchkit.base.hashing import sha256

    digest = sha256(data)
    (tree / ".patchkit/objects").mkdir(parents=True, exist_ok=True)
    (tree / ".patchkit/objects" / digest).write_bytes(data)
    return digest


@pytest.mark.parametrize(
    ("path", "removed", "why"),
    [
        ("vllm/gone/mod.py", [], "does not say that its own commit removed it"),
        ("evilpkg/mod.py", ["evilpkg"], "would make a new package"),
        ("vllm/a/b/mod.py", ["vllm/a/b"], "does not say"),  # vllm/a is gone too, and not named
        ("vllm/other/mod.py", ["vllm/elsewhere"], "does not hold it"),
    ],
)
def test_a_planted_journal_still_cannot_make_directories(tmp_path, path, removed, why):
    from patchkit.base.errors import BadInput
    from patchkit.engine import transaction

    tree = ct.write_tree(tmp_path / "site")
    digest = _planted_object(tree, b"import os\n")
    _planted_journal(tree, {"path": path, "before": digest, "after": None, "staged": None, "removed_dirs": removed})
    before = ct.fingerprint(tree)
    with pytest.raises(BadInput, match=why):
        transaction.recover(tree)
    assert ct.fingerprint(tree) == before


def test_a_journal_naming_the_directory_its_delete_removed_is_rolled_back(tmp_path):
    from patchkit.engine import transaction

    tree = ct.write_tree(tmp_path / "site")
    digest = _planted_object(tree, b"X = 1\n")
    _planted_journal(
        tree,
        {
            "path": "vllm/gone/sub/mod.py",
            "before": digest,
            "after": None,
            "staged": None,
            "removed_dirs": ["vllm/gone", "vllm/gone/sub"],
        },
    )
    mark_staged(tree, "abc123")
    assert "1 file(s) restored" in transaction.recover(tree)
    assert (tree / "vllm/gone/sub/mod.py").read_bytes() == b"X = 1\n"
    assert not (tree / ".patchkit/journal.json").exists()


def test_a_planted_journal_cannot_delete_files_it_did_not_write(tmp_path):
    """Rollback deletes a file the journal says its commit created only when the file is what that
    commit wrote (its `after`) and no installed vLLM's RECORD lists it; recover and status keep it."""
    from patchkit.base.hashing import sha256

    tree = ct.write_tree(tmp_path / "site", files={"vllm/engine/core.py": "CORE = 1\n", "vllm/extra.py": "E = 2\n"})
    listed = b"LISTED = 3\n"
    (tree / "vllm/listed.py").write_bytes(listed)
    (tree / "vllm-0.16.0.dist-info/RECORD").write_text("vllm/listed.py,sha256=x,11\n")
    written = b"NEW = 4\n"
    files = [
        {"path": "vllm/engine/core.py", "before": None, "after": "0" * 64, "staged": None, "created_dirs": []},
        {"path": "vllm/extra.py", "before": None, "after": "1" * 64, "staged": None, "created_dirs": []},
        {"path": "vllm/listed.py", "before": None, "after": sha256(listed), "staged": None, "created_dirs": []},
        {"path": "vllm/new.py", "before": None, "after": sha256(written), "staged": None, "created_dirs": []},
    ]
    (tree / ".patchkit").mkdir()
    (tree / ".patchkit/journal.json").write_text(json.dumps({"id": "abc123", "previous_state": None, "files": files}))
    kept = ct.fingerprint(tree)
    (tree / "vllm/new.py").write_bytes(written)  # after the journal, as its commit would
    mark_staged(tree, "abc123", "vllm/new.py")
    _code, out = ct.run_cli(["status", "--target", str(tree)])
    assert "1 file(s) it had created removed" in out, out
    assert "kept, not written by it or changed since:\n  vllm/engine/core.py\n  vllm/extra.py" in out, out
    assert "kept, an installed distribution's own file: vllm/listed.py" in out, out
    assert ct.fingerprint(tree) == kept and not (tree / ".patchkit/journal.json").exists()


@dataclass
class _ListedScenario(ct.Scenario):
    """The scenario's tree with a true RECORD for its vLLM: the package the patch deletes is vLLM's
    own (as in every release diff), so a revert puts back files the installed vLLM lists."""

    def lay_out_stock(self) -> bytes | None:
        diff = super().lay_out_stock()
        dist = "vllm-0.16.0.dist-info"
        (self.stock / dist / "RECORD").write_text(record_rows(self.stock, dist))
        return diff


@pytest.fixture
def listed_scenario():
    with tempfile.TemporaryDirectory(prefix="crash-listed-", dir=ct.fast_scratch()) as base:
        yield _ListedScenario(Path(base))


def test_a_crash_in_a_revert_that_puts_back_files_vllm_lists_is_rolled_back_whole(listed_scenario):
    """The revert recreates vllm/old/ (deleted by the patch, listed by vLLM's RECORD); killed
    before its commit point, recovery must remove them again (their bytes stay saved for the
    record it returns to): it kept them, and the tree was left half stock, half patched."""
    scn = listed_scenario
    work, tally = scn.base / "work", ct.Tally()
    last = ct.commit_steps(scn, work, "revert")
    for turn, n in enumerate(range(last - 6, last + 1)):  # every file in place, the commit point not reached
        ct.trial(scn, work, "revert", f"{n}:kill", "revert kill", tally, turn)
    _clean(tally)
    assert tally.outcomes["revert exit -9: stock, journal"] > 0, tally.report()


@pytest.mark.parametrize("saved", [True, False])
def test_a_planted_journal_removes_a_file_vllm_lists_only_when_its_bytes_stay_saved(tmp_path, saved):
    """A created file the installed vLLM lists goes only when the record the rollback returns to
    keeps its bytes, intact, as the original of a file its patches delete."""
    from patchkit.base.hashing import sha256

    tree = ct.write_tree(tmp_path / "site", files={"vllm/listed.py": "LISTED = 3\n"})
    (tree / "vllm-0.16.0.dist-info/RECORD").write_text(record_rows(tree, "vllm-0.16.0.dist-info"))
    digest = _planted_object(tree, b"LISTED = 3\n") if saved else sha256(b"LISTED = 3\n")
    record = {
        "format": 1,
        "entries": [
            {
                "set": "demo",
                "vllm_version": "0.16.0",
                "release": None,
                "applied_at": "2026-01-01T00:00:00+00:00",
                "patches": [{"name": "p.diff", "sha256": "3" * 64}],
                "files": {"vllm/listed.py": {"before": digest, "after": None}},
            }
        ],
    }
    (tree / ".patchkit").mkdir(exist_ok=True)
    journal = {
        "id": "abc123",
        "previous_state": json.dumps(record),
        "files": [{"path": "vllm/listed.py", "before": None, "after": digest, "staged": None, "created_dirs": []}],
    }
    (tree / ".patchkit/journal.json").write_text(json.dumps(journal))
    (tree / "vllm/listed.py").write_bytes(b"LISTED = 3\n")  # after the journal, as its commit would
    mark_staged(tree, "abc123", "vllm/listed.py")
    from patchkit.engine import transaction

    said = transaction.recover(tree)
    assert (tree / "vllm/listed.py").exists() is not saved, said
    assert ("kept, an installed distribution's own file: vllm/listed.py" in said) is not saved, said


def test_a_rollback_keeps_a_file_changed_since_the_commit(tmp_path):
    """An original goes back only over what the commit wrote: a file holding other bytes stays."""
    from patchkit.engine import transaction

    tree = ct.write_tree(tmp_path / "site", files={"vllm/mod.py": "OTHER = 1\n"})
    digest = _planted_object(tree, b"ORIGINAL = 1\n")
    _planted_journal(tree, {"path": "vllm/mod.py", "before": digest, "after": "2" * 64, "staged": None})
    said = transaction.recover(tree)
    assert "kept, not written by it or changed since: vllm/mod.py" in said, said
    assert (tree / "vllm/mod.py").read_bytes() == b"OTHER = 1\n"


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_kill_at_every_commit_step_leaves_a_tree_the_guard_refuses_until_recovered(scenario, work, op):
    """Review38 B6: an apply killed among its replaces left some files patched, a journal, no new
    record and the guard (written first), which found nothing to hold the files to and let vLLM
    launch. Now every tree a kill leaves with some files changed holds the guard (written first,
    removed last) and its journal, which the guard refuses; once the next command recovered, it
    passes (the checks are crash_trials.guard_says, run after each trial and each next command)."""
    tally = ct.Tally()
    ct.aimed_commit(scenario, work, op, "kill", tally)
    _clean(tally)
    assert tally.outcomes["guard after the trial: refuses"] > sweep_count(5), tally.report()  # the replaces, and more


@pytest.mark.release
def test_an_eagle3_apply_killed_with_the_models_patched_is_refused_at_launch():
    """Review38 B6 on real files: a kill inside the set's install phase left vllm/ mixed (then the
    whitelist, speculative.py, alone patched; since gate29 it is written last: the models patched,
    the whitelist stock), with the guard and the journal. The guard refuses, naming `patchkit
    recover`; recovered, the tree is stock and no guard is left. Then a kill at every step of the
    set's apply and revert, judged as above."""
    with tempfile.TemporaryDirectory(prefix="crash-eagle3-", dir=ct.fast_scratch()) as base:
        scn = ct.Eagle3Scenario(Path(base), only="eagle3")
        tree = scn.base / "work"
        model = "vllm/model_executor/models/deepseek_v2.py"
        for n in range(1, 200):
            code, _ = ct.run_cli(["apply", *scn.args(scn.fresh("stock", tree), "apply")], f"{n}:kill")
            assert code == -signal.SIGKILL, "no kill left the models patched and the whitelist stock"
            if (tree / model).read_bytes() != (scn.stock / model).read_bytes():
                break
        assert scn.whole_vllm(tree) is None  # the whitelist still stock
        whitelist = "vllm/config/speculative.py"
        assert (tree / whitelist).read_bytes() == (scn.stock / whitelist).read_bytes()
        guard = ct.installed_guard(tree)
        assert guard is not None
        said = guard.refusal(str(tree), guard.find_problems(str(tree)))
        assert f"Run `patchkit recover --target {tree}`" in said and "did not finish" in said, said
        code, out = ct.run_cli(["recover", *scn.args(tree, "recover")])
        assert code == 0 and "rolled back" in out and scn.whole(tree) == "stock", out
        assert ct.installed_guard(tree) is None
        tally = ct.Tally()
        for op in ("apply", "revert"):
            ct.aimed_commit(scn, scn.base / "work", op, "kill", tally)
    _clean(tally)


@pytest.fixture(scope="module")
def gated():
    with tempfile.TemporaryDirectory(prefix="crash-gated-", dir=ct.fast_scratch()) as base:
        yield ct.GatedScenario(Path(base))


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_with_no_guard_a_kill_at_every_commit_step_leaves_the_gate_stock_while_any_file_is(gated, op):
    """gate29: with --no-guard nothing refuses a tree a commit was killed in, and apply wrote vllm/
    files in path order: a set's gate (eagle3's whitelist, here vllm/config/spec.py) could be
    patched while a model file was stock, and vLLM admitted a launch that failed after the load.
    The gate is written last by apply and first by revert (a rollback reverses either): whatever
    step a SIGKILL (or the rollback's) cuts, the gate is stock whenever another file is."""
    tally = ct.Tally()
    steps = ct.aimed_commit(gated, gated.base / "work", op, "kill", tally)
    ct.aimed_rollback(gated, gated.base / "work", op, "raise", "kill", tally, {n: 12 for n in range(1, steps, 3)})
    _clean(tally)
    assert not any(key.startswith("guard") for key in tally.outcomes), tally.report()  # no guard to refuse it
    mixed = sum(count for key, count in tally.outcomes.items() if "stock, others mixed" in key)
    assert mixed >= 3, tally.report()  # the kills did leave the other files mixed


def test_with_no_guard_a_library_update_killed_anywhere_has_its_new_gate_only_with_every_new_file(gated):
    """gate29: an apply from a newer library (the set's series changed: here spec.py, the gate, and
    model.py) replaces the older one's files in one commit. Killed at any step, or in its rollback
    at any step, the gate holds the new bytes only once every other file does (it admits nothing
    the new files do not hold yet); recover then gives the older library's tree whole."""
    from helpers import MODEL_PY, SPEC_PY, make_patch, write_library

    newer = {
        **ct.EDITS,
        "vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"deepseek", "kimi"'),
        "vllm/models/model.py": MODEL_PY.replace("return x", "return x + 2"),
    }
    (gated.base / "scratch2").mkdir(exist_ok=True)
    library = write_library(gated.base / "lib2", {"0.16.0": [make_patch(gated.base / "scratch2", gated.stock, newer)]})
    manifest = library / "demo/set.toml"
    manifest.write_text(
        manifest.read_text().replace("\n[[releases]]", 'gates = ["vllm/config/spec.py"]\n\n[[releases]]', 1)
    )
    update = ["apply", "--patches", str(library), "--no-import", "--no-guard"]
    gate, model = "vllm/config/spec.py", "vllm/models/model.py"
    seen, plans = (
        set(),
        [f"{n}:kill" for n in range(1, 60)]
        + [f"{n}:raise,{n + m}:kill" for n in range(20, 40, 2) for m in range(1, 12)],
    )
    for plan in sweep_trials(plans):
        tree = gated.fresh("patched", gated.base / "work")
        code, out = ct.run_cli([*update, "--target", str(tree)], plan, served=True)
        if code in (0, 4):  # the faults came after its end (updated), or the rollback got through
            assert code == 0 or gated.whole(tree) == "patched", out
            continue
        assert code == -signal.SIGKILL, out
        new = {rel: (tree / rel).read_bytes() == newer[rel].encode() for rel in (gate, model)}
        seen.add((new[gate], new[model]))
        assert new[model] or not new[gate], f"{plan}: the new gate with the old {model}"
        code, out = ct.then(["recover", "--target", str(tree)])
        assert code == 0 and gated.whole(tree) == "patched", out
    assert (False, True) in seen, seen  # a kill did land between the model and the gate


def test_revert_writes_the_gates_its_record_marks_first_whatever_the_library_says_now(gated):
    """gate29: the record marks the set's gates ("gate": true), and revert goes by the record (as it
    restores what the tree records, whatever the library holds): with a library that declares no
    gates any more, the first file a revert writes is still the gate. A mark that is no boolean is
    a damaged record (exit 2), as any other field read back from the tree."""
    tree = gated.fresh("patched", gated.base / "work")
    files = json.loads((tree / ".patchkit/state.json").read_text())["entries"][0]["files"]
    assert {path for path, shas in files.items() if "gate" in shas} == {"vllm/config/spec.py"}, files
    assert files["vllm/config/spec.py"]["gate"] is True
    manifest = gated.library / "demo/set.toml"
    declared = manifest.read_text()
    manifest.write_text(declared.replace('gates = ["vllm/config/spec.py"]\n', ""))
    try:
        for n in range(1, 80):
            tree = gated.fresh("patched", gated.base / "work")
            code, out = ct.run_cli(["revert", *gated.args(tree, "revert")], f"{n}:kill", served=True)
            assert code == -signal.SIGKILL, f"no kill changed a file: {out[-300:]}"
            now = ct.fingerprint(tree)
            changed = [
                rel
                for rel in gated.prints["patched"]
                if rel.endswith(".py") and now.get(rel) != gated.prints["patched"][rel]
            ]
            if changed:
                break
        assert changed == ["vllm/config/spec.py"], changed
        tree = gated.fresh("patched", gated.base / "work")
        state = json.loads((tree / ".patchkit/state.json").read_text())
        state["entries"][0]["files"]["vllm/config/spec.py"]["gate"] = "yes"
        (tree / ".patchkit/state.json").write_text(json.dumps(state))
        code, out = ct.run_cli(["revert", *gated.args(tree, "revert")])
        assert code == 2 and "vllm/config/spec.py: 'gate' 'yes' is not true or false" in out, out
    finally:
        manifest.write_text(declared)


def _as_an_older_patchkit_recorded(tree: Path) -> None:
    """The tree's record as patchkit wrote it before gate29 (7fb7ec01: state.json's format 1 held no
    "gate" key; record_apply wrote none): every mark taken out, nothing else changed."""
    state_file = tree / ".patchkit/state.json"
    state = json.loads(state_file.read_text())
    for entry in state["entries"]:
        for shas in entry["files"].values():
            shas.pop("gate", None)
    state_file.write_text(json.dumps(state))


def _first_written(gated, op: str, start: str, extra=()) -> list[str]:
    """The .py files a kill at the first step that changes one left changed (op on a tree recorded
    as an older patchkit wrote it)."""
    for n in range(1, 80):
        tree = gated.fresh(start, gated.base / "work")
        _as_an_older_patchkit_recorded(tree)
        code, out = ct.run_cli([op, *gated.args(tree, op), *extra], f"{n}:kill")
        assert code == -signal.SIGKILL, f"no kill changed a file: {out[-300:]}"
        now = ct.fingerprint(tree)
        changed = [
            rel for rel in gated.prints[start] if rel.endswith(".py") and now.get(rel) != gated.prints[start][rel]
        ]
        if changed:
            return changed
    raise AssertionError("no step changed a file")


def test_a_record_an_older_patchkit_wrote_reverts_byte_for_byte_its_gate_first(gated):
    """A record written before gate marks existed (no "gate" in it): revert writes the gate its set
    declares in the library it was applied from first (before: path order, the gate in the middle), and
    gives the stock tree byte for byte; a kill anywhere, then recover, gives the applied tree back whole."""
    assert _first_written(gated, "revert", "patched") == ["vllm/config/spec.py"]
    tree = gated.fresh("patched", gated.base / "work")
    _as_an_older_patchkit_recorded(tree)
    code, out = ct.run_cli(["revert", *gated.args(tree, "revert")])
    assert code == 0 and gated.whole(tree) == "stock", out
    for n in sweep_trials(range(1, 300, 5)):
        tree = gated.fresh("patched", gated.base / "work")
        _as_an_older_patchkit_recorded(tree)
        record = (tree / ".patchkit/state.json").read_bytes()
        code, out = ct.run_cli(["revert", *gated.args(tree, "revert")], f"{n}:kill", served=True)
        if code == 0:
            break
        assert code == -signal.SIGKILL, out
        code, out = ct.then(["recover", *gated.args(tree, "recover")])
        assert code == 0 and gated.whole(tree) == "patched", out
        assert (tree / ".patchkit/state.json").read_bytes() == record  # the older record, as it was
    else:
        raise AssertionError("every kill came before the revert's end")


@pytest.mark.release
@pytest.mark.parametrize("only", ["eagle3", None])
def test_with_no_guard_an_eagle3_apply_or_revert_killed_anywhere_leaves_the_whitelist_stock_while_a_model_is(only):
    """gate29 on real 0.16.0 files, no guard: the eagle3 set's gate (speculative.py, its set.toml
    says) is written after its models by apply and before them by revert, so a kill at any step of
    either commit (the set alone; every set of the library: a commit each, eagle3's first) leaves
    it stock whenever a model file is. Before, apply wrote it first: the kill that left it alone
    patched let `vllm serve` admit EAGLE-3 and fail after the load."""
    with tempfile.TemporaryDirectory(prefix="crash-eagle3-", dir=ct.fast_scratch()) as base:
        scn = ct.unguarded_eagle3(Path(base), only)
        assert scn.gates == ("vllm/config/speculative.py",) and len(scn.set_files) == 5, scn
        tally = ct.Tally()
        for op in ("apply", "revert"):
            ct.aimed_commit(scn, scn.base / "work", op, "kill", tally)
    if only is None:  # a kill between two sets' commits leaves each set whole: no tree the harness calls whole
        tally.failures = [failure for failure in tally.failures if "the gate" in failure]
    _clean(tally)
    assert tally.outcomes["gate after the trial: stock, others mixed"] >= 4, tally.report()


def test_the_interrupt_report_is_per_command():
    signals.new_run()
    assert "before any change" in signals.interrupted_report()[0]
    signals.note(signals.COMMITTED)
    assert "in place" in signals.interrupted_report()[0]
    signals.note(signals.UNDONE)
    assert "undone again" in signals.interrupted_report()[0]
    signals.new_run()
    assert "before any change" in signals.interrupted_report()[0]


# apply's and revert's sweeps each a group of its own (tests/xdist_groups.py): make test's workers share them
SWEEPS = [pytest.param(op, marks=pytest.mark.xdist_group(f"crash-sweep-{op}")) for op in ("apply", "revert")]


@pytest.mark.slow
@pytest.mark.parametrize("op", SWEEPS)
def test_random_and_aimed_crash_sweep(scenario, work, op):
    """A smaller run of crash_trials.py's sweep: random SIGKILL, SIGTERM, SIGHUP, double SIGINT and
    SIGTERM-then-SIGKILL moments, and every commit step under each mode."""
    tally = ct.Tally()
    rng = random.Random(f"{os.environ.get('PATCHKIT_CRASH_SEED', '7')}-{op}")
    for mode in ("kill", "term", "hup", "int", "exit", "raise"):
        ct.aimed_commit(scenario, work, op, mode, tally)
    ct.random_trials(scenario, work, op, 40, rng, tally)
    _clean(tally)
    print(tally.report())


@pytest.mark.slow
def test_a_double_ctrl_c_at_random_moments_of_a_revert_always_exits_130_and_says_so(scenario, work):
    """Review 6 L7: a double Ctrl-C late in a revert sometimes ended exit 0 with nothing said (the
    signals came while the interpreter exited). 300 trials of the console script, to its exit."""
    rng = random.Random(int(os.environ.get("PATCHKIT_CRASH_SEED", "7")))
    tally = ct.Tally()
    ct.double_ctrl_c_trials(scenario, work, int(os.environ.get("PATCHKIT_DOUBLE_INT_TRIALS", "300")), rng, tally)
    _clean(tally)
    assert tally.trials["revert double int, reached"] >= 50, tally.report()


@pytest.fixture
def small_disk():
    """A 4 MiB tmpfs (root only): a disk that really fills up."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = Path(tempfile.mkdtemp(prefix="crash-disk-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True).returncode:
        mount.rmdir()
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)
    mount.rmdir()


def test_a_full_disk_at_every_amount_of_free_space_is_exit_0_or_4_never_a_mixed_tree(scenario, small_disk):
    """0 to 80 KB free, every 8 KB, and more: each apply and revert ends whole (exit 0) or rolled
    back (exit 4), never exit 70, never a journal left; a full disk used to fail the rollback too."""
    tally = ct.Tally()
    ct.full_disk_trials(scenario, small_disk, tally, sweep_trials([*range(0, 80 * 1024, 8192), 120_000, 200_000]))
    _clean(tally)
    assert any("exit 4" in key for key in tally.trials) and any("exit 0" in key for key in tally.trials)


def test_a_forced_revert_that_cannot_keep_the_edits_on_a_full_disk_is_exit_4(scenario, small_disk):
    tree = scenario.fresh("patched", small_disk / "tree")
    spec = tree / "vllm/config/spec.py"
    spec.write_bytes(spec.read_bytes() + b"# my edit\n")
    edited = ct.fingerprint(tree)
    ct.fill(small_disk, 0)
    code, out = ct.run_cli(["revert", "--force", *scenario.args(tree)])
    assert code == 4 and "cannot keep copies of your edits" in out, out
    assert ct.fingerprint(tree) == edited and not (tree / ".patchkit/journal.json").exists()
    # the hint says how much room the forced revert needs, and where (as apply's full disk does): that much is enough
    said = re.search(r"it needs about ([\d.]+) (KB|MB) free on the device holding (\S+): make room", out)
    assert said and said[3] == str(tree), out
    (small_disk / "filler").unlink()
    ct.fill(small_disk, int(float(said[1]) * (1000 if said[2] == "KB" else 1_000_000)))
    code, out = ct.run_cli(["revert", "--force", *scenario.args(tree)])
    assert code == 0 and "were saved under" in out, out


def test_a_stale_unchecked_hash_pyc_that_cannot_be_recompiled_on_a_full_disk_is_removed(scenario, small_disk):
    """Review 41b L5: apply at 0 KB free found the stale pyc, could not rebuild it (the new one is
    written beside it) and exited 1 with the stale code still what Python runs; removing it needs no room."""
    tree = scenario.fresh("patched", small_disk / "tree")
    pyc = tree / "vllm/config/__pycache__" / f"spec.{sys.implementation.cache_tag}.pyc"
    mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
    py_compile.compile(
        str(scenario.stock / "vllm/config/spec.py"), cfile=str(pyc), doraise=True, invalidation_mode=mode
    )
    ct.fill(small_disk, 0)
    code, out = ct.run_cli(["apply", "-v", *scenario.args(tree, "apply")])
    assert code == 0 and not pyc.exists(), out
    assert "spec.py" in out and "could not recompile it (No space left on device): removed" in out, out
    assert ct.fingerprint(tree) == scenario.prints["patched"]


def test_a_double_ctrl_c_inside_the_locks_take_ends_130_with_the_line(scenario, work, monkeypatch):
    """filelock raised the two interrupts as one BaseExceptionGroup, which no `except KeyboardInterrupt`
    caught: the double Ctrl-C trials' revert exit 99 (a traceback and exit 1 from the console script)."""
    double_ctrl_c_in_the_lock(monkeypatch)
    tree = scenario.fresh("patched", work)
    code, out = ct.run_cli(["revert", *scenario.args(tree, "revert")])  # forked: the patched filelock
    assert code == 130 and out.count("error: interrupted before any change") == 1, out
    assert "Traceback" not in out and "trial child" not in out, out
    assert scenario.whole(tree) == "patched" and not (tree / ".patchkit/journal.json").exists()


def test_a_signal_deferred_by_a_step_acts_once_it_ends_and_an_ignored_one_stays_ignored():
    before = {number: signal.getsignal(number) for number in signals.HANDLED}
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.handled():
            with pytest.raises(signals.Interrupted) as raised, signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGHUP)  # ignored before the step: ignored after it too
                done = True
            assert done and raised.value.exit_code == 143
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGHUP)
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert {number: signal.getsignal(number) for number in signals.HANDLED} == before  # put back


@pytest.mark.parametrize(("at", "signum"), [(1, signal.SIGTERM), (4, signal.SIGINT)])
def test_a_signal_while_a_deferred_step_swaps_the_handlers_leaves_none_on_the_steps_collector(at, signum):
    """A real signal sent just after deferred() set SIGINT's handler (SIGTERM's still the command's),
    or put SIGINT's back: signal.signal ran the command's handler before setting the next one, and it
    raised there, leaving a handler on the step's collector (later signals lost) or the step unrun.
    In a forked child, one thread as the console script has: a process's signal goes to any thread
    that does not block it, and an xdist worker's other threads do not."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if _swapped_under_a_signal(at, signum) else 3
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _swapped_under_a_signal(at: int, signum: int) -> bool:
    """Whether deferred() ran its step, raised `signum` after it, and left the command's handlers."""
    real = signal.signal
    calls: list[int] = []
    ran = False

    def set_then_signal(number, handler):
        previous = real(number, handler)
        calls.append(number)
        if len(calls) == at:
            os.kill(os.getpid(), signum)
        return previous

    with signals.handled():
        ours = {number: signal.getsignal(number) for number in signals.HANDLED}
        signal.signal = set_then_signal  # type: ignore[assignment]  # this child's own copy
        try:
            with signals.deferred():
                ran = True
        except signals.Interrupted as raised:
            signum_raised = raised.signum
        else:
            signum_raised = None
        finally:
            signal.signal = real
        left = {number: signal.getsignal(number) for number in signals.HANDLED}
    return ran and signum_raised == signum and left == ours and ours[signal.SIGTERM] is signals._raise


def test_a_second_signal_while_an_interrupt_is_reported_does_not_cut_the_report(monkeypatch, capsys):
    from patchkit.cli import main as cli
    from patchkit.cli.ui.run import begin_run

    real = cli._report

    def report(run, message, hint=None):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, as the first is being reported
        real(run, message, hint)

    def interrupted(_ctx):
        raise signals.Interrupted(signal.SIGTERM)

    monkeypatch.setattr(cli, "_report", report)
    signals.new_run()
    with signals.handled():
        code = cli._command_exit_code(interrupted, None, begin_run())
    assert code == 143 and "before any change" in capsys.readouterr().err


# The same trials on real release files (crash_trials.ReleaseScenario: vLLM 0.15.0 -> 0.16.0 deletes
# vllm/attention/ and adds vllm/kernels/helion/) and on the library's eagle3 set over 0.16.0. A
# handful run here; `python tests/crash_trials.py --release` (or PATCHKIT_CRASH_SWEEP=1 below) runs
# every commit and rollback step.


@pytest.fixture(scope="module")
def release_scenario():
    with tempfile.TemporaryDirectory(prefix="crash-release-", dir=ct.fast_scratch()) as base:
        yield ct.ReleaseScenario(Path(base))


@pytest.mark.release
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_release_diff_survives_a_kill_a_sigterm_a_double_ctrl_c_and_a_full_disk(release_scenario, op):
    """Commit steps early (the deleted package's files), in the middle and among the last (the
    guard's), each followed by the next command: a whole tree, no journal."""
    scn, work, tally = release_scenario, release_scenario.base / "work", ct.Tally()
    last = ct.commit_steps(scn, work, op)
    assert last > 40, last  # every file of the diff, the guard's and the record's steps
    for turn, (n, plan) in enumerate(
        [
            (last // 4, "{n}:kill"),
            (last // 2, "{n}:term"),
            (last // 2, "{n}:int,{m}:int"),
            (last - 2, "{n}:raise,{m}:raise"),
            (last - 1, "{n}:raise,{m}:kill"),
        ]
    ):
        ct.trial(scn, work, op, plan.format(n=n, m=n + 2), plan, tally, turn)
    _clean(tally)
    assert sum(tally.trials.values()) == 5


@pytest.mark.release
@pytest.mark.slow
def test_the_whole_release_diff_crash_sweep():
    if not os.environ.get("PATCHKIT_CRASH_SWEEP"):
        pytest.skip(
            "about 4,500 trials (45 min or more): PATCHKIT_CRASH_SWEEP=1, or `python tests/crash_trials.py --release`"
        )
    with tempfile.TemporaryDirectory(prefix="crash-release-", dir=ct.fast_scratch()) as base:
        tally = ct.release_sweep(Path(base), 150, int(os.environ.get("PATCHKIT_CRASH_SEED", "20")))
    print(tally.report())
    _clean(tally)


def _mount_small_ext4(size: str = "32M"):
    """A loop-mounted ext4 image (no blocks reserved for root), or the reason there is none here."""
    import shutil as sh
    import subprocess

    if os.geteuid() != 0:
        return None, None, "mounting an ext4 image needs root"
    if not sh.which("mkfs.ext4"):
        return None, None, "mkfs.ext4 is not installed"
    image = Path(tempfile.mkdtemp(prefix="crash-ext4-")) / "disk.img"
    subprocess.run(["truncate", "-s", size, str(image)], check=True)
    made = subprocess.run(["mkfs.ext4", "-q", "-m", "0", "-b", "4096", str(image)], capture_output=True, text=True)
    mount = image.parent / "mnt"
    mount.mkdir()
    done = made.returncode == 0 and subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True
    )
    if not done or done.returncode:
        sh.rmtree(image.parent)
        why = made.stderr if made.returncode else done.stderr if done else ""
        return None, None, f"cannot loop-mount an ext4 image here: {why.strip()[-200:]}"
    return image, mount, None


@pytest.fixture
def small_ext4():
    """A real 32 MiB ext4 (4 KiB blocks) file system, loop-mounted: a disk whose delayed allocation, journal and
    block size are a real one's."""
    import shutil as sh
    import subprocess

    image, mount, why = _mount_small_ext4()
    if why:
        pytest.skip(why)
    assert image and mount
    yield mount
    subprocess.run(["umount", str(mount)], check=True)
    sh.rmtree(image.parent)


# 0 to 200 KB free: none, one block, a few, and room for some files of the diff but not all
EXT4_FREE = [0, 4096, 16_384, 65_536, 131_072, 204_800]


@pytest.mark.release
@pytest.mark.parametrize("kind", ["release-diff", "eagle3"])
def test_a_real_full_ext4_disk_is_exit_0_or_4_and_a_whole_tree(kind, small_ext4):
    """apply and revert of real release files on a full ext4 file system, 0-200 KB free: exit 0 or
    4 (never 70), the tree byte-identical to stock or to the whole patched tree (the guard
    included), no journal; space freed, status finds it so."""
    make = ct.ReleaseScenario if kind == "release-diff" else ct.Eagle3Scenario
    with tempfile.TemporaryDirectory(prefix="crash-ext4-", dir=ct.fast_scratch()) as base:
        scn = make(Path(base))
        tally = ct.Tally()
        ct.full_disk_trials(scn, small_ext4, tally, EXT4_FREE)
    print(tally.report())
    _clean(tally)
    assert any("exit 4" in key for key in tally.trials), tally.report()  # the disk did run out
    assert any("exit 0" in key for key in tally.trials), tally.report()


def test_a_planted_journal_cannot_delete_another_packages_files(tmp_path):
    """A file another distribution's RECORD lists (torch's) is never one patchkit created: a
    planted journal naming it with its true bytes leaves it, and a file no RECORD lists still goes."""
    from patchkit.base.hashing import sha256

    tree = ct.write_tree(tmp_path / "site", files={"vllm/engine/core.py": "CORE = 1\n"})
    theirs, ours = b"print('torch')\n", b"OURS = 1\n"
    (tree / "torch").mkdir()
    (tree / "torch/__init__.py").write_bytes(theirs)
    (tree / "torch-2.9.0.dist-info").mkdir()
    (tree / "torch-2.9.0.dist-info/RECORD").write_text("torch/__init__.py,sha256=x,15\n")
    (tree / "mypkg").mkdir()
    (tree / "mypkg/new.py").write_bytes(ours)
    files = [
        {"path": path, "before": None, "after": sha256(data), "staged": None, "created_dirs": []}
        for path, data in (("torch/__init__.py", theirs), ("mypkg/new.py", ours))
    ]
    (tree / ".patchkit").mkdir()
    (tree / ".patchkit/journal.json").write_text(json.dumps({"id": "abc123", "previous_state": None, "files": files}))
    for path, data in (("torch/__init__.py", theirs), ("mypkg/new.py", ours)):
        (tree / path).write_bytes(data)  # after the journal: only the RECORD keeps torch's
    mark_staged(tree, "abc123", "torch/__init__.py", "mypkg/new.py")
    _code, out = ct.run_cli(["status", "--target", str(tree)])
    assert "kept, an installed distribution's own file: torch/__init__.py" in out, out
    assert (tree / "torch/__init__.py").read_bytes() == theirs and not (tree / "mypkg/new.py").exists()
    assert not (tree / ".patchkit/journal.json").exists()


@pytest.mark.parametrize("sealed_by", ["this user", "another key"])
def test_an_interrupted_apply_is_rolled_back_by_status_only_under_this_users_key(scenario, work, steps, sealed_by):
    """A kill past the apply's last replace: `status` rolls it back, no copy kept, when this user's
    key sealed the marker. Sealed by another key (another user's or machine's crash, or planted), it
    proves nothing: `status` refuses (exit 2), changing nothing, and names `recover --roll-back`,
    which rolls it back on the user's word, keeping each file it replaces in .patchkit/saved/."""
    tree = scenario.fresh("stock", work)
    code, _ = ct.run_cli(["apply", *scenario.args(tree, "apply")], f"{steps['apply'] - 1}:kill")
    assert code == -signal.SIGKILL and (tree / ".patchkit/staged.json").exists()
    if sealed_by == "this user":
        code, said = ct.run_cli(["status", *scenario.args(tree)])
        assert "rolled back" in said and not (tree / ".patchkit/journal.json").exists(), said
        assert scenario.whole(tree) == "stock" and not (tree / ".patchkit/saved").exists(), said
        assert "a copy is kept in" not in said, said
        return
    marker = json.loads((tree / ".patchkit/staged.json").read_text())
    del marker["seal"]
    payload = b"staged-marker\0" + str(tree.resolve()).encode() + b"\0" + seal.canonical(marker)
    marker["seal"] = hmac.new(os.urandom(32), payload, hashlib.sha256).hexdigest()
    (tree / ".patchkit/staged.json").write_text(json.dumps(marker))
    crashed = ct.fingerprint(tree)
    code, said = ct.run_cli(["status", *scenario.args(tree)])
    assert code == 2 and "is not sealed with this user's key" in said and "nothing was touched" in said, said
    assert ct.fingerprint(tree) == crashed and (tree / ".patchkit/journal.json").exists(), said
    said = " ".join(said.split())
    assert f"recover --target {tree} --roll-back" in said and f"recover --target {tree} --discard" in said, said
    code, said = ct.run_cli(["recover", "--roll-back", *scenario.args(tree, "recover")])
    assert code == 0 and "rolled back" in said and "a copy is kept in" in said, said
    assert scenario.whole(tree) == "stock" and not (tree / ".patchkit/journal.json").exists(), said


def test_a_crash_under_a_key_that_could_not_be_kept_is_refused_saying_why(scenario, work, steps, tmp_path):
    """The state directory cannot hold the key (here a file in its place): each run seals with a key
    of its own, so the next run cannot verify a genuine crash's marker. It refuses, changing nothing,
    names what to fix, and `recover --roll-back` rolls the crash back (copies kept)."""
    tree = scenario.fresh("stock", work)
    (tmp_path / "state").write_text("not a directory")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")}
    env |= {"XDG_STATE_HOME": str(tmp_path / "state"), "PATCHKIT_FAULT_MODE": "kill"}

    def patchkit(*args: str, plan: str = "") -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "patchkit", *args]
        return subprocess.run(command, env={**env, "PATCHKIT_FAULT_AFTER": plan}, capture_output=True, text=True)

    killed = patchkit("apply", *scenario.args(tree, "apply"), plan=str(steps["apply"] - 1))
    assert killed.returncode == -signal.SIGKILL and (tree / ".patchkit/staged.json").exists(), killed.stderr
    crashed = ct.fingerprint(tree)
    done = patchkit("status", *scenario.args(tree))
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "this run could not keep its key" in said, said
    assert f"cannot use {tmp_path / 'state'}" in said and f"make {tmp_path / 'state'}/patchkit a directory" in said
    assert ct.fingerprint(tree) == crashed, said
    done = patchkit("recover", "--roll-back", *scenario.args(tree, "recover"))
    assert done.returncode == 0 and "a copy is kept in" in done.stdout + done.stderr, done.stderr
    assert scenario.whole(tree) == "stock" and not (tree / ".patchkit/journal.json").exists()
