"""The node side of `patchkit fleet` without Ray: patchkit's CLI run in the agent's process, and
the agent's life (it stays while held or busy, ends once released, refuses claims once ending or
once patchkit's files changed under it)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    make_patch,
    patched_spec,
    record_rows,
    run_cli,
    snapshot,
    write_library,
    write_tree,
)

from patchkit.base.errors import CHECK_FAILED
from patchkit.cli.main import run_in_process
from patchkit.fleet import node
from patchkit.fleet.cluster import RayRunner
from patchkit.fleet.protocol import Batch, Node, NodeReport, fleet_apply

MODEL = "vllm/models/model.py"

# CI of session 32: an agent a test left alive rolled its run back on its own, minutes later, in another test.
pytestmark = pytest.mark.usefixtures("no_thread_left")


class Watched(node.Agent):
    """An agent whose end is recorded instead of ending the test's process."""

    def __init__(self, hold: float) -> None:
        self.ended = threading.Event()
        super().__init__(hold, run_in_process)

    def end(self) -> None:
        self.ended.set()


class MemoryLedger:
    """node.Ledger in a dict: what Ray's GCS key-value store is to the agents (put_new: first writer wins)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.lock = threading.Lock()

    def get(self, key):
        return self.values.get(key)

    def put(self, key, value):
        self.values[key] = value

    def put_new(self, key, value):
        with self.lock:
            return self.values.setdefault(key, value)

    def delete(self, key):
        self.values.pop(key, None)


class Decided(node.Agent):
    """An agent with a ledger (its end recorded, as Watched's)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ended = threading.Event()
        super().__init__(600, run_in_process, ledger)

    def end(self) -> None:
        self.ended.set()


class Agents:
    """The agents a test makes, and its drivers' heartbeats: each ends with its test (its threads stopped),
    whatever the test left it doing."""

    def __init__(self) -> None:
        self.made: list[node.Agent] = []
        self.beats: list[threading.Event] = []

    def watched(self, hold: float) -> Watched:
        return self._kept(Watched(hold))

    def decided(self, ledger: MemoryLedger) -> Decided:
        return self._kept(Decided(ledger))

    def _kept(self, agent):
        self.made.append(agent)
        return agent

    def beating(self, ledger: MemoryLedger, run: str) -> None:
        """`run`'s driver alive and undecided: its heartbeat every 0.1 s until the test ends."""
        stopped = threading.Event()
        self.beats.append(stopped)

        def beat(count: int = 0) -> None:
            while not stopped.wait(0.1):
                count += 1
                ledger.put(node.beat_key(run), str(count))

        ledger.put(node.beat_key(run), "0")
        threading.Thread(target=beat, name=f"heartbeat-{run}", daemon=True).start()

    def end(self) -> None:
        for beat in self.beats:
            beat.set()
        for agent in self.made:
            agent.stopped.set()
        for agent in self.made:
            for thread in agent.threads:
                thread.join(30)


@pytest.fixture
def agents():
    made = Agents()
    yield made
    made.end()


@pytest.fixture(autouse=True)
def quick_ticks(monkeypatch):
    monkeypatch.setattr(node, "AGENT_TICK", 0.02)


class BlockingSteps:
    """node.run_step replaced: each step records its request's name, says it started, and runs
    until `finish` is set."""

    def __init__(self) -> None:
        self.started, self.finish, self.ran = threading.Event(), threading.Event(), []

    def __call__(self, step, request, patchkit):
        self.ran.append(request.get("name"))
        self.started.set()
        self.finish.wait(10)
        return {"state": "ok", "ok": True}


@pytest.fixture
def blocking(monkeypatch):
    steps = BlockingSteps()
    monkeypatch.setattr(node, "run_step", steps)
    yield steps
    steps.finish.set()


def test_an_agent_stays_while_held_and_for_the_keep_alive_then_ends(agents):
    agent = agents.watched(60)
    assert agent.claim("run-1", 60)["current"] is True
    assert not agent.ended.wait(0.2)
    agent.release("run-1", keep_alive=0.3)
    assert not agent.ended.wait(0.15)  # the keep-alive
    assert agent.ended.wait(2)
    ending = agent.claim("run-2", 60)
    assert ending["held"] is False and ending["current"] is True  # the driver asks the name again


def test_another_runs_hold_keeps_it_after_one_release_with_no_keep_alive(agents):
    agent = agents.watched(60)
    agent.claim("run-1", 60)
    agent.claim("run-2", 60)
    agent.release("run-1", keep_alive=0)
    assert not agent.ended.wait(0.3)
    agent.release("run-2", keep_alive=0)
    assert agent.ended.wait(2)


def test_a_busy_agent_does_not_end_though_nothing_holds_it(blocking, agents):
    started, finish = blocking.started, blocking.finish
    agent = agents.watched(60)  # its creator holds it until the step runs: no race with its end
    worker = threading.Thread(target=agent.step, args=("run-1", 0, "ticket-1", "status", {}))
    agent.claim("run-1", 0)
    worker.start()
    assert started.wait(30)
    agent.release("creator", keep_alive=0)  # now nothing holds it: only the running step
    assert not agent.ended.wait(0.3)
    finish.set()
    worker.join(30)
    assert agent.ended.wait(30)


def test_a_step_its_driver_gave_up_on_never_starts_and_one_running_is_named(blocking, agents):
    """Two commands' steps on one agent: one at a time. The second's driver gives up while it
    waits (its time limit): it must not run later (a write reported timed out would land)."""
    started, finish, ran = blocking.started, blocking.finish, blocking.ran
    agent = agents.watched(60)
    answers = {}

    def call(ticket: str) -> None:
        answers[ticket] = agent.step("run-" + ticket, 60, ticket, "apply", {"name": ticket})

    first = threading.Thread(target=call, args=("a",))
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=call, args=("b",))
    second.start()
    time.sleep(0.2)  # b waits for a
    assert agent.give_up("b") == {"running": False, "others_waiting": False}  # not running: it never will
    assert agent.give_up("a") == {"running": True, "others_waiting": False}  # b was given up: no one else waits
    finish.set()
    first.join(5)
    second.join(5)
    assert ran == ["a"] and answers["a"]["state"] == "ok"
    assert answers["b"]["state"] == "not-run" and answers["b"]["ok"] is False


def test_a_running_step_given_up_on_says_whether_another_commands_step_waits(blocking, agents):
    started, finish = blocking.started, blocking.finish
    agent = agents.watched(60)
    threads = [threading.Thread(target=agent.step, args=(f"run-{t}", 60, t, "status", {})) for t in "ab"]
    threads[0].start()
    assert started.wait(5)
    threads[1].start()
    time.sleep(0.2)
    assert agent.give_up("a") == {"running": True, "others_waiting": True}  # ending the agent would fail b
    finish.set()
    for thread in threads:
        thread.join(5)


def test_a_retired_agent_takes_no_claim_and_ends_once_the_runs_holding_it_release_it(agents):
    """A run that holds it may have a step on its way (sent, not yet running here): a retired agent
    ending under it would lose that node from the run; once released, no keep-alive keeps it."""
    agent = agents.watched(60)
    assert agent.claim("run-1", 600)["held"] is True
    agent.retire()
    assert agent.claim("run-2", 600) == {"held": False, "current": False, "pid": agent.claim("x", 1)["pid"]}
    assert not agent.ended.wait(0.3)  # idle, but run-1 holds it
    agent.release("run-1", keep_alive=600)
    assert agent.ended.wait(2)


def test_a_step_given_up_on_holds_nothing_after_it(monkeypatch, agents):
    monkeypatch.setattr(node, "run_step", lambda step, request, patchkit: {"state": "ok", "ok": True})
    agent = agents.watched(0)
    agent.give_up("t")
    assert agent.step("run-1", 600, "t", "status", {})["state"] == "not-run"
    agent.release("creator", keep_alive=0)
    assert agent.ended.wait(2)  # the given-up step's run holds it no longer


def test_the_fingerprint_changes_with_any_source_file(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "b.py").write_text("B = 2\n")
    before = node.code_fingerprint(package)
    assert node.code_fingerprint(package) == before
    (package / "sub" / "b.py").write_text("B = 22\n")  # an upgrade rewrote it
    assert node.code_fingerprint(package) != before
    rewritten = node.code_fingerprint(package)
    (package / "c.py").write_text("")  # a module the new version adds
    assert node.code_fingerprint(package) != rewritten


def test_an_agent_whose_patchkit_changed_says_it_is_not_current(monkeypatch, agents):
    agent = agents.watched(60)
    monkeypatch.setattr(node, "code_fingerprint", lambda: {"cli.py": (1, 2, 3)})
    assert agent.claim("run-1", 60) == {"held": False, "current": False, "pid": os.getpid()}
    assert "run-1" not in agent.holds


@pytest.mark.parametrize("where", ["stock", "missing"])
def test_patchkit_run_in_process_answers_as_the_console_script_does(tmp_path, where):
    tree = tmp_path / "site"
    if where == "stock":
        write_tree(tree, "0.16.0")
    args = ["status", "--format", "json", "--target", str(tree)]
    code, stdout, stderr = run_in_process(args)
    alone = run_cli(*args)
    assert (code, json.loads(stdout)) == (alone.returncode, json.loads(alone.stdout))
    assert stderr == alone.stderr and "Traceback" not in stderr


def test_patchkit_run_in_process_on_two_threads_gives_each_its_own_output(tmp_path):
    """CI of session 32: an agent left by an earlier test rolled its run back on its own thread while
    another agent's rollback ran: both swapped the process's sys.stdout, so one step's document went to
    the terminal and the other read a stranger's. Steps run in one process one at a time."""
    trees = [write_tree(tmp_path / name, "0.16.0") for name in ("a", "b")]
    seen: list[tuple[str, object]] = []

    def statuses(tree: Path) -> None:
        for _ in range(15):
            _code, stdout, _stderr = run_in_process(["status", "--format", "json", "--target", str(tree)])
            try:
                seen.append((str(tree), json.loads(stdout)["target"]))
            except (ValueError, KeyError) as exc:
                seen.append((str(tree), repr(exc)))

    threads = [threading.Thread(target=statuses, args=(tree,)) for tree in trees]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 30 and all(asked == answered for asked, answered in seen), seen


def test_patchkit_run_in_process_reports_a_usage_error_as_exit_2():
    code, _stdout, stderr = run_in_process(["status", "--no-such-option"])
    assert code == 2 and "status has no --no-such-option option" in stderr and "Traceback" not in stderr


def test_every_steps_row_names_the_nodes_target_and_vllm_version(tmp_path):
    """A node's row takes the target and version from its patchkit's JSON document: apply's and
    revert's said only their result, so `fleet revert`'s rows had empty target and vLLM columns."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY})
    diff = tmp_path / "spec.diff"
    diff.write_bytes(make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()}))
    request = {"target": str(tree), "adhoc": [str(diff)]}
    for step, state in (("prepare", "ready"), ("apply", "applied"), ("status", "applied"), ("revert", "reverted")):
        extra = ["--no-import"] if step == "apply" else []
        row = node.run_step(step, {**request, "extra": extra}, run_in_process)
        assert (row["state"], row["ok"]) == (state, True), (step, row)
        assert (row["target"], row["vllm_version"]) == (str(tree), "0.16.0"), step


def test_a_row_of_several_sets_names_the_trees_version_from_the_documents_top(tmp_path):
    """Several sets: each part names the version, and the document says it once at its top; the row
    reads it there."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY, MODEL: MODEL_PY})
    library = tmp_path / "lib"
    write_library(
        library, {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}, name="spec"
    )
    eagle = MODEL_PY.replace("SupportsPP):", "SupportsPP):  # eagle\n")
    write_library(library, {"0.16.0": [make_patch(tmp_path, tree, {MODEL: eagle})]}, name="model")
    request = {"target": str(tree), "library": str(library)}
    for step, state in (("prepare", "ready"), ("apply", "applied"), ("status", "applied"), ("revert", "reverted")):
        extra = ["--no-import"] if step == "apply" else []
        row = node.run_step(step, {**request, "extra": extra}, run_in_process)
        assert (row["state"], row["ok"], row["vllm_version"]) == (state, True, "0.16.0"), (step, row)
        if step != "revert":  # revert's document has no part per set
            assert sorted(part["set"] for part in row["sets"]) == ["model", "spec"], (step, row)


def test_a_second_step_in_the_same_process_sees_the_tree_as_it_is_now(tmp_path):
    """The agent's process outlives a step: nothing the first step read is taken for the second."""
    tree = tmp_path / "site"
    write_tree(tree, "0.16.0")
    run_in_process(["status", "--format", "json", "--target", str(tree)])
    for path in tree.glob("vllm-*.dist-info"):
        (path / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.17.0\n")
    _code, stdout, _ = run_in_process(["status", "--format", "json", "--target", str(tree)])
    assert json.loads(stdout)["vllm_version"] == "0.17.0"


def test_phase_one_refuses_a_file_the_workers_user_cannot_write(tmp_path, monkeypatch):
    """Root writes everything here, so os.access is what says no (as it does for another user)."""
    tree = write_tree(tmp_path / "site")
    document = {"target": str(tree), "patches": [{"name": "a", "files": ["vllm/config/spec.py", "vllm/new.py"]}]}
    assert node._unwritable(document) is None
    for locked in (tree / "vllm" / "config" / "spec.py", tree / "vllm"):  # a file; a new file's directory
        monkeypatch.setattr(node.os, "access", lambda path, mode, locked=locked: Path(path) != locked)
        refusal = node._unwritable(document)
        assert refusal is not None and refusal["state"] == "unwritable" and not refusal["ok"]
        assert f"{locked} is not writable by the Ray worker's user" == refusal["detail"]


def test_phase_one_refuses_the_directory_of_a_file_the_workers_user_cannot_write(tmp_path, monkeypatch):
    """apply replaces a file by renaming a new one over it, so its directory must be writable too
    (transaction.preflight refuses it): phase 1 said ready to a node whose file was writable in a
    directory that was not, and phase 2 failed there after writing the other nodes. A new file in a
    directory apply creates needs the deepest one that exists."""
    tree = write_tree(tmp_path / "site")
    for files, locked in (
        (["vllm/config/spec.py"], tree / "vllm" / "config"),
        (["vllm/new/deeper/module.py"], tree / "vllm"),
    ):
        document = {"target": str(tree), "patches": [{"name": "a", "files": files}]}
        monkeypatch.setattr(node.os, "access", lambda path, mode, locked=locked: Path(path) != locked)
        refusal = node._unwritable(document)
        assert refusal is not None and refusal["state"] == "unwritable", files
        assert f"{locked} is not writable by the Ray worker's user" == refusal["detail"]


@pytest.mark.parametrize(
    "document",
    [
        {"target": 7, "patches": []},
        {"target": "/t", "patches": "vllm/x.py"},
        {"target": "/t", "patches": ["vllm/x.py"]},
        {"target": "/t", "patches": [{"files": "vllm/x.py"}]},
        {"target": "/t", "patches": [{"files": [3]}]},
    ],
)
def test_a_verify_document_of_another_shape_is_a_refusal_not_a_crash(document):
    refusal = node._unwritable(document)
    assert refusal is not None and refusal["state"] == "error" and "which files" in refusal["detail"]


def test_a_step_far_past_its_time_limit_ends_the_agent(monkeypatch, blocking, agents):
    """A step that hangs (its driver stopped waiting, or died) would keep the agent busy for ever,
    and every later command's step on the node would wait behind it: past its time limit and a
    grace, the agent ends itself. A step within its limit is left to run."""
    monkeypatch.setattr(node, "OVERDUE_GRACE", 0.2)
    started, finish = blocking.started, blocking.finish
    patient = agents.watched(60)
    patient.claim("run-1", 60)
    threading.Thread(target=patient.step, args=("run-1", 60, "t-1", "apply", {"timeout": 30}), daemon=True).start()
    assert started.wait(5)
    assert not patient.ended.wait(0.6)  # 30 s allowed: it runs on, held or not

    started.clear()
    hung = agents.watched(60)
    hung.claim("run-2", 60)
    threading.Thread(target=hung.step, args=("run-2", 60, "t-2", "apply", {"timeout": 0.1}), daemon=True).start()
    assert started.wait(5)
    assert hung.ended.wait(3)  # 0.1 s + 0.2 s of grace, though run-2 still holds it
    assert hung.claim("run-3", 60)["held"] is False
    finish.set()


@pytest.mark.parametrize("timeout", [None, "soon", float("nan"), float("inf"), -1, 10**400])
def test_a_time_limit_that_is_no_number_is_the_default(timeout):
    request = {} if timeout is None else {"timeout": timeout}
    assert node._time_limit(request) == node.DEFAULT_TIME_LIMIT


def test_a_step_queued_behind_an_overdue_one_never_starts_once_the_agent_is_ending(monkeypatch, agents):
    """The hung step returns just after the agent chose to end (its end, ray.kill, is on its way):
    the step queued behind it must not start, to be cut midway by that end (an apply half written)."""
    monkeypatch.setattr(node, "OVERDUE_GRACE", 0.1)
    ran, started, finish = [], threading.Event(), threading.Event()

    def first_hangs(step, request, patchkit):
        ran.append(request["name"])
        started.set()
        finish.wait(10)
        return {"state": "ok", "ok": True}

    monkeypatch.setattr(node, "run_step", first_hangs)
    agent = agents.watched(60)
    answers = {}

    def call(ticket: str, timeout: float) -> None:
        answers[ticket] = agent.step("run-" + ticket, 60, ticket, "apply", {"name": ticket, "timeout": timeout})

    first = threading.Thread(target=call, args=("a", 0.1))
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=call, args=("b", 600))
    second.start()
    assert agent.ended.wait(5)  # a is overdue; b waits behind it
    finish.set()  # a returns before the end lands
    first.join(5)
    second.join(5)
    assert ran == ["a"]
    assert answers["b"]["state"] == "not-run" and "ending" in answers["b"]["detail"]


def upgraded_under_its_record(tmp_path: Path) -> tuple[Path, Path]:
    """A tree applied on 0.16.0, then its vLLM replaced by a stock 0.17.0 (as pip upgrades it: the
    record and the guard stay); a library covering both releases."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY})
    patch = make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})
    library = write_library(tmp_path / "lib", {"0.16.0": [patch], "0.17.0": [patch]})
    code, _, stderr = run_in_process(["apply", "-q", "--no-import", "--target", str(tree), "--patches", str(library)])
    assert code == 0, stderr
    for old in (tree / "vllm", tree / "vllm-0.16.0.dist-info"):
        shutil.rmtree(old)
    write_tree(tree, "0.17.0", files={"vllm/config/spec.py": SPEC_PY})
    return tree, library


def test_a_tree_upgraded_under_its_record_is_said_as_status_says_it_and_phase_one_lets_apply_repair_it(tmp_path):
    """Review 12a H1: the guard refuses the upgraded tree; the node's row said only "not-applied"
    (no guard, no fix), and phase 1 (verify) refused it for ever, though `patchkit apply` repairs it."""
    tree, library = upgraded_under_its_record(tmp_path)
    request = {"target": str(tree), "library": str(library)}
    alone = json.loads(
        run_in_process(["status", "--format", "json", "--target", str(tree), "--patches", str(library)])[1]
    )
    assert alone["guard"]["refuses"] and "patchkit apply" in alone["guard"]["fix"]

    status = node.run_step("status", request, run_in_process)
    assert (status["state"], status["ok"]) == ("not-applied", False)
    assert "the launch guard refuses this tree: vLLM 0.17.0 is installed" in status["detail"]
    assert status["hint"] == alone["guard"]["fix"]

    prepared = node.run_step("prepare", request, run_in_process)
    assert (prepared["state"], prepared["ok"], prepared["hint"]) == ("ready", True, None), prepared
    assert "the launch guard refuses this tree" in prepared["detail"] and "the apply repairs it" in prepared["detail"]
    applied = node.run_step("apply", {**request, "extra": ["--no-import"]}, run_in_process)
    assert (applied["state"], applied["ok"]) == ("applied", True), applied
    assert node.run_step("status", request, run_in_process)["ok"]


def test_phase_one_names_a_refusal_as_apply_would_end_and_keeps_the_nodes_fix(tmp_path):
    """Review 12a L1: an edited stock file (RECORD) refused phase 1 as "not-applied", which docs/fleets.md
    calls a tree's state; apply's result there is check-failed, and its fix (--force) was dropped."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY})
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )
    spec = tree / "vllm" / "config" / "spec.py"
    record = f"vllm/config/spec.py,sha256={_urlsafe_sha256(spec.read_bytes())},{spec.stat().st_size}\n"
    (tree / "vllm-0.16.0.dist-info" / "RECORD").write_text(record)
    spec.write_text(SPEC_PY + "# tuned by hand\n")
    row = node.run_step("prepare", {"target": str(tree), "library": str(library)}, run_in_process)
    assert (row["state"], row["ok"]) == ("check-failed", False), row
    assert "integrity" in row["detail"]
    _, stdout, _ = run_in_process(["apply", "--format", "json", "--target", str(tree), "--patches", str(library)])
    assert row["hint"] and row["hint"] == json.loads(stdout)["hint"]


def test_a_nodes_own_error_is_failed_not_error_and_its_hint_is_kept():
    """`error` is for no JSON from the node (docs/fleets.md): a revert that answered with its error
    (a full disk) was shown as `error`, its hint dropped."""
    document = {"ok": False, "error": "writing the tree failed: No space left on device", "hint": "free space"}
    row = node.summarize("revert", document, 4)
    assert (row["state"], row["ok"], row["hint"]) == ("failed", False, "free space")
    assert node.summarize("revert", None, 1, "boom")["state"] == "error"


def _urlsafe_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_a_node_whose_guard_was_uninstalled_says_so_with_the_fix_as_status_does(tmp_path):
    """`pip uninstall patchkit-guard` under an applied tree: status passes with a warning and its fix
    (vLLM launches the tree unchecked); the node's row said nothing."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY})
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )
    request = {"target": str(tree), "library": str(library)}
    assert node.run_step("apply", {**request, "extra": ["--no-import"]}, run_in_process)["ok"]
    for path in tree.glob("patchkit_guard*"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    alone = json.loads(
        run_in_process(["status", "--format", "json", *node.target_arguments(request)[0], "--patches", str(library)])[1]
    )
    row = node.run_step("status", request, run_in_process)
    assert (row["state"], row["ok"]) == ("applied", True)
    assert row["detail"] == f"warning: {alone['guard']['missing']}" and "no longer loads" in row["detail"]
    assert row["hint"] == alone["guard"]["missing_fix"] and "`patchkit apply --target" in row["hint"]


def _two_sets(tmp_path: Path) -> tuple[Path, Path]:
    """A stock tree and a library of two sets (model, then spec), each changing one file."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY, MODEL: MODEL_PY})
    library = tmp_path / "lib"
    write_library(library, {"0.16.0": [make_patch(tmp_path, tree, {MODEL: MODEL_PY + "X = 1\n"})]}, name="model")
    write_library(
        library, {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}, name="spec"
    )
    (library / "library.toml").write_text('order = ["model", "spec"]\n')
    return tree, library


def test_an_edited_patched_file_is_drifted_in_status_and_phase_one_with_one_fix(tmp_path):
    """Review 12b L7: a node whose patched file was edited said `applied` (fleet status and fleet
    apply), while `patchkit status` there says FAILED and the guard refuses; its hint chained two
    fixes (every set's revert --force and apply, then the edited set's)."""
    tree, library = _two_sets(tmp_path)
    request = {"target": str(tree), "library": str(library)}
    assert node.run_step("apply", {**request, "extra": ["--no-import"]}, run_in_process)["ok"]
    (tree / "vllm" / "config" / "spec.py").write_text(patched_spec() + "# tuned by hand\n")
    status, prepared = (node.run_step(step, request, run_in_process) for step in ("status", "prepare"))
    assert (status["state"], status["ok"]) == ("drifted", False), status
    assert (prepared["state"], prepared["ok"]) == ("drifted", False), prepared
    for row in (status, prepared):
        assert row["hint"].count("`patchkit revert") == 1 and row["hint"].count("`patchkit apply") == 1, row["hint"]


def test_a_symlinked_patched_file_is_failed_in_status_and_phase_one(tmp_path):
    """Review 12b L7: the same refusal (a patched file that is a symlink) was `failed` in fleet
    status and `error` in fleet apply, which docs/fleets.md keeps for a node that gave no JSON."""
    tree, library = _two_sets(tmp_path)
    spec = tree / "vllm" / "config" / "spec.py"
    (tmp_path / "elsewhere.py").write_text(spec.read_text())
    spec.unlink()
    spec.symlink_to(tmp_path / "elsewhere.py")
    request = {"target": str(tree), "library": str(library)}
    status, prepared = (node.run_step(step, request, run_in_process) for step in ("status", "prepare"))
    assert (status["state"], prepared["state"]) == ("failed", "failed"), (status, prepared)
    assert "symlink" in status["hint"] and status["hint"] == prepared["hint"]


def test_a_partial_tree_names_one_fix_in_status_and_its_fleet_row(tmp_path):
    """fleet26: a partial node's row had no fix, as single-target status had none (text or JSON),
    though it exits 1. Both name apply, and that apply makes status pass. One set with two patches
    of which one was put back to stock (its record lost); then two sets, one applied."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY, MODEL: MODEL_PY})
    # vLLM's RECORD: a file found patched is not stock (without it, upstream's or a hand's: test_upstream_reached)
    (tree / "vllm-0.16.0.dist-info" / "RECORD").write_text(record_rows(tree, "vllm-0.16.0.dist-info"))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    patches = [make_patch(tmp_path / "a", tree, {MODEL: MODEL_PY + "X = 1\n"})]
    patches.append(make_patch(tmp_path / "b", tree, {"vllm/config/spec.py": patched_spec()}))
    one = write_library(tmp_path / "one", {"0.16.0": patches})
    both = tmp_path / "both"
    for name, patch in zip(("model", "spec"), patches, strict=True):
        write_library(both, {"0.16.0": [patch]}, name=name)
    (both / "library.toml").write_text('order = ["model", "spec"]\n')
    for library, apply in ((one, []), (both, ["--set", "model"])):
        site = tmp_path / f"site-{library.name}"
        shutil.copytree(tree, site)
        request = {"target": str(site), "library": str(library)}
        assert node.run_step("apply", {**request, "extra": ["--no-import", *apply]}, run_in_process)["ok"]
        (site / "vllm" / "config" / "spec.py").write_text(SPEC_PY)  # one set: its second patch undone by hand
        shutil.rmtree(site / ".patchkit")
        row = node.run_step("status", request, run_in_process)
        code, stdout, _ = run_in_process(
            ["status", "--format", "json", "--target", str(site), "--patches", str(library)]
        )
        assert (row["state"], row["ok"], code) == ("partial", False, 1), row
        assert row["hint"] == json.loads(stdout)["hint"] and row["hint"].count("`patchkit") == 1, row["hint"]
        assert f"`patchkit apply --target {site} --patches {library}`" in row["hint"]
        # verify fails a partial set as status does (audit23 F5). Phase 1 was ready (its apply completes
        # it), but a failure on another node then reverted the set to stock (review43b G3): now refused,
        # naming the node's own apply, after which phase 1 is ready
        prepared = node.run_step("prepare", request, run_in_process)
        assert (prepared["state"], prepared["ok"]) == ("partial", False), prepared
        assert "rollback would revert its set to stock" in prepared["detail"], prepared
        assert f"`patchkit apply --target {site} --patches {library}`" in prepared["hint"], prepared
        assert node.run_step("apply", {**request, "extra": ["--no-import"]}, run_in_process)["ok"]
        assert node.run_step("status", request, run_in_process)["ok"]
        assert node.run_step("prepare", request, run_in_process)["ok"]


def test_an_apply_that_leaves_the_guard_refusing_says_so_in_its_row_with_the_fix(tmp_path):
    """fleet26: `apply --set model` on a tree whose other set's file was edited ends "already
    applied; the launch guard still refuses the tree" (exit 1, as status: every launch is refused, and
    its fix): the row said `already-applied` and nothing else, as apply's JSON carried neither."""
    tree, library = _two_sets(tmp_path)
    request = {"target": str(tree), "library": str(library)}
    assert node.run_step("apply", {**request, "extra": ["--no-import"]}, run_in_process)["ok"]
    (tree / "vllm" / "config" / "spec.py").write_text(patched_spec() + "# tuned by hand\n")
    row = node.run_step("apply", {**request, "set_name": "model", "extra": ["--no-import"]}, run_in_process)
    assert (row["state"], row["ok"]) == ("already-applied", False), row
    assert row["detail"].startswith("the launch guard refuses this tree: vllm/config/spec.py"), row
    alone = ["apply", "--format", "json", "--target", str(tree), "--patches", str(library), "--set", "model"]
    code, stdout, _ = run_in_process([*alone, "--no-import"])
    assert code == 1 and row["hint"] == json.loads(stdout)["guard"]["fix"], row
    assert "`patchkit revert" in row["hint"] and "--set spec --force`" in row["hint"], row["hint"]


@pytest.fixture
def short_lease(monkeypatch):
    monkeypatch.setattr(node, "LEASE", 1.0)


def written_tree(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A stock tree and a library whose apply changes it; the apply request a deciding driver sends."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY})
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )
    request = {"target": str(tree), "library": str(library), "extra": ["--no-import"], "timeout": 60, "decides": True}
    return tree, library, request


def spec_of(tree: Path) -> str:
    return (tree / "vllm" / "config" / "spec.py").read_text()


def wait_until(condition, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_an_apply_whose_driver_goes_silent_before_its_commit_is_rolled_back_by_the_node(tmp_path, short_lease, agents):
    """Review 37 L-g: a driver SIGKILLed in phase 2 left each node to finish its write alone: some
    nodes applied, some not. Its heartbeat stops: the node decides abort (none had committed) and
    reverts its own write, as the driver's rollback would."""
    tree, _, request = written_tree(tmp_path)
    ledger = MemoryLedger()
    agent = agents.decided(ledger)
    agent.release("creator", keep_alive=60)  # the keep-alive a command before left it
    ledger.put(node.beat_key("run-1"), "0")
    applied = agent.step("run-1", 60, "t1", "apply", request)
    assert (applied["state"], applied["ok"]) == ("applied", True), applied
    assert spec_of(tree) == patched_spec() and "run-1" in agent.undecided
    for beat in range(1, 4):  # its driver lives (a beat every 0.2 s): nothing is undone
        time.sleep(0.2)
        ledger.put(node.beat_key("run-1"), str(beat))
    assert spec_of(tree) == patched_spec()
    assert wait_until(lambda: "run-1" not in agent.undecided)  # no beat for the lease: undone
    assert spec_of(tree) == SPEC_PY and ledger.get(node.decision_key("run-1")) == node.ABORT
    assert "run-1" not in agent.holds  # a driver gone holds it no longer (not for --timeout + 60 s)
    # the driver, resumed, reverts as its rollback does (the set its node applied): told what the node did
    reverted = agent.step("run-1", 60, "t2", "revert", {**request, "set_name": applied["set"], "extra": []})
    assert (reverted["state"], reverted["ok"]) == ("reverted", True) and "rolled back by its node" in reverted["detail"]
    # and its apply step that had not started never writes now
    late = agent.step("run-1", 60, "t3", "apply", request)
    assert late["state"] == "not-run" and spec_of(tree) == SPEC_PY


def test_a_committed_apply_stays_though_its_driver_then_goes_silent(tmp_path, short_lease, agents):
    tree, _, request = written_tree(tmp_path)
    ledger = MemoryLedger()
    agent = agents.decided(ledger)
    ledger.put(node.beat_key("run-1"), "0")
    assert agent.step("run-1", 60, "t1", "apply", request)["ok"]
    assert ledger.put_new(node.decision_key("run-1"), node.COMMIT) == node.COMMIT
    ledger.delete(node.beat_key("run-1"))  # the driver ended, or was killed after its commit
    assert wait_until(lambda: "run-1" not in agent.undecided)
    time.sleep(1)
    assert spec_of(tree) == patched_spec() and ledger.get(node.decision_key("run-1")) == node.COMMIT


def test_another_commands_step_waits_for_the_decision_and_sees_the_tree_as_decided(tmp_path, short_lease, agents):
    """A `fleet status` (or a second apply) while an apply here is undecided: it waits, so that it
    never reports, or builds on, a write that is then rolled back."""
    tree, _, request = written_tree(tmp_path)
    ledger = MemoryLedger()
    agent = agents.decided(ledger)
    ledger.put(node.beat_key("run-1"), "0")
    assert agent.step("run-1", 60, "t1", "apply", request)["ok"]
    started = time.monotonic()
    status = agent.step("run-2", 60, "t2", "status", {**request, "extra": []})
    assert time.monotonic() - started >= 0.9  # it waited for the lease to end run-1
    assert status["state"] == "not-applied" and spec_of(tree) == SPEC_PY, status


def test_an_apply_of_a_driver_that_does_not_decide_is_final(tmp_path, short_lease, agents):
    """An older patchkit's driver commits nothing: its nodes' writes must not be undone for it."""
    tree, _, request = written_tree(tmp_path)
    agent = agents.decided(MemoryLedger())
    assert agent.step("run-1", 60, "t1", "apply", {**request, "decides": False})["ok"]
    time.sleep(1.5)
    assert agent.undecided == {} and spec_of(tree) == patched_spec()


def test_an_aborted_run_that_wrote_nothing_here_holds_the_agent_no_longer(short_lease, agents):
    """A driver killed in phase 2 whose apply failed on this node (nothing written) held the agent
    --timeout + 60 s; once its other nodes aborted it and its heartbeat stopped, it holds nothing."""
    ledger = MemoryLedger()
    agent = agents.decided(ledger)
    agent.release("creator", keep_alive=0)
    agent.claim("run-1", 600)
    ledger.put(node.beat_key("run-1"), "7")
    assert not agent.ended.wait(0.5)  # held, its driver alive: no decision yet
    ledger.put_new(node.decision_key("run-1"), node.ABORT)  # another node gave up on it
    assert agent.ended.wait(10) and "run-1" not in agent.holds


def undecided_apply(tmp_path: Path, agents: Agents) -> tuple[Path, dict, Decided]:
    """(tree, request, agent): run-1's apply written by an agent with a ledger, its driver (host-a pid 11)
    alive and undecided."""
    tree, _, request = written_tree(tmp_path)
    ledger = MemoryLedger()
    agent = agents.decided(ledger)
    agents.beating(ledger, "run-1")
    assert agent.step("run-1", 60, "t1", "apply", {**request, "driver": "host-a pid 11"})["ok"]
    return tree, request, agent


def test_an_apply_of_a_second_fleet_run_where_the_first_is_undecided_refuses_at_once(tmp_path, short_lease, agents):
    """fleet29: two `fleet apply`s at once, each undecided on a node where the other then stepped,
    waited for each other's decision up to --timeout (600 s), then ran on the other's write. The
    second run's apply never waits there (a wait may be a cycle): it refuses, writing nothing, and
    names the other run's driver; the first run's write stays undecided, its own."""
    tree, request, agent = undecided_apply(tmp_path, agents)
    started = time.monotonic()
    second = agent.step("run-2", 60, "t2", "apply", {**request, "timeout": 8, "driver": "host-b pid 22"})
    assert time.monotonic() - started < 2, second
    assert (second["state"], second["ok"]) == ("busy", False), second
    assert "host-a pid 11" in second["detail"], second
    assert list(agent.undecided) == ["run-1"] and spec_of(tree) == patched_spec()


def test_an_apply_queued_behind_another_runs_apply_never_builds_on_its_undecided_write(tmp_path, short_lease, agents):
    """The second run's apply came while the first's was running (its write not yet undecided):
    it waited its turn and then applied on that write ("already applied", so its driver would
    commit a node the first run's rollback then reverts). It refuses, as one that came after."""
    tree, _, request = written_tree(tmp_path)
    ledger = MemoryLedger()
    started, go = threading.Event(), threading.Event()

    def slow_first(args):
        if args[0] == "apply" and not started.is_set():
            started.set()
            go.wait(10)
        return run_in_process(args)

    agent = agents.decided(ledger)
    agent.patchkit = slow_first
    agents.beating(ledger, "run-1")
    answers: dict[str, dict] = {}
    try:
        first = threading.Thread(target=lambda: answers.update(a=agent.step("run-1", 60, "t1", "apply", request)))
        first.start()
        assert started.wait(10)
        second = threading.Thread(target=lambda: answers.update(b=agent.step("run-2", 60, "t2", "apply", request)))
        second.start()
        time.sleep(0.5)  # the second waits for the first's turn
        go.set()
        first.join(30)
        second.join(30)
        assert answers["a"]["state"] == "applied" and answers["b"]["state"] == "busy", answers
        assert list(agent.undecided) == ["run-1"] and spec_of(tree) == patched_spec()
    finally:
        go.set()


@pytest.mark.parametrize(("step", "runs"), [("status", True), ("revert", False), ("prepare", False)])
def test_another_commands_step_waits_a_bounded_time_for_a_live_runs_decision(tmp_path, short_lease, step, runs, agents):
    """A driver alive and undecided (slow, or stopped and still held by its heartbeat): another
    command's step waited up to --timeout for it. It waits the lease and a few seconds: then a
    status runs and says the write is undecided; a write (revert, phase 1 of an apply) refuses."""
    tree, request, agent = undecided_apply(tmp_path, agents)
    started = time.monotonic()
    answer = agent.step("run-2", 60, "t2", step, {**request, "timeout": 30, "extra": []})
    waited = time.monotonic() - started
    assert node.LEASE <= waited < node.LEASE + 10, waited
    if runs:
        assert answer["state"] == "applied" and "undecided" in answer["detail"], answer
    else:
        assert (answer["state"], answer["ok"]) == ("busy", False) and "host-a pid 11" in answer["detail"], answer
    assert list(agent.undecided) == ["run-1"] and spec_of(tree) == patched_spec()


class SlowRecordLedger(MemoryLedger):
    """A store whose rollback record takes a while to write, and which notes whether the agent had
    ended before it was written."""

    def __init__(self) -> None:
        super().__init__()
        self.agent: node.Agent | None = None
        self.ended_before_record: list[bool] = []

    def put(self, key, value):
        if "/rolled-back/" in key and self.agent is not None:
            time.sleep(0.3)  # many of the agent's ticks: an idle thread that may end it looks meanwhile
            self.ended_before_record.append(self.agent.ended.is_set())
        super().put(key, value)


def test_a_nodes_rollback_is_recorded_before_its_agent_may_end(tmp_path, short_lease, agents):
    """tests33: the agent dropped the run from its undecided ones before it wrote the rollback record,
    and its idle thread could end it in that gap: the driver back later found no record."""
    tree, _, request = written_tree(tmp_path)
    ledger = SlowRecordLedger()
    agent = agents.decided(ledger)
    agent.where, ledger.agent = "node-1", agent
    ledger.put(node.beat_key("run-1"), "0")
    assert agent.step("run-1", 60, "t1", "apply", request)["ok"]
    assert wait_until(agent.ended.is_set)
    assert ledger.ended_before_record == [False] and spec_of(tree) == SPEC_PY


def test_a_driver_back_after_its_node_rolled_back_and_its_agent_ended_is_told_the_nodes_revert(
    tmp_path, short_lease, agents
):
    """fleet29: a driver stopped past what its nodes wait (they rolled back on their own), then
    resumed: its rollback's revert went to an agent that had ended meanwhile (its run's hold
    dropped), and the row said "the revert failed (ActorDiedError...)", with a revert to run on a
    node already stock. The agent records its own rollback in the cluster's store; the driver
    reads it there for a node whose revert did not pass."""
    tree, _, request = written_tree(tmp_path)
    ledger = MemoryLedger()
    agent = agents.decided(ledger)
    agent.where = "node-1"
    ledger.put(node.beat_key("run-1"), "0")
    applied = agent.step("run-1", 60, "t1", "apply", request)
    assert applied["ok"], applied
    assert wait_until(agent.ended.is_set)  # rolled back (no beat for the lease), then nothing held it
    assert spec_of(tree) == SPEC_PY
    driver = object.__new__(RayRunner)
    driver.ledger, driver.run_id = ledger, "run-1"
    report = driver._reverted_by_its_node(Node("node-1", "10.0.0.1"), {**request, "set_name": applied["set"]})
    assert (report.state, report.ok) == ("reverted", True) and "rolled back by its node" in report.detail
    assert report.document is None  # the record keeps the row, not the node's whole document
    assert driver._reverted_by_its_node(Node("node-2", "10.0.0.2"), {**request, "set_name": applied["set"]}) is None
    assert driver._reverted_by_its_node(Node("node-1", "10.0.0.1"), {**request, "set_name": "other"}) is None


def test_phase_one_names_why_a_set_applied_from_another_library_is_refused_and_its_apply(tmp_path):
    """Review 43b G3: a node whose set was applied from an earlier library is refused by phase 1 (a
    rollback would revert it to stock, not to the earlier series), but its row said nothing: state
    applied, no detail, no hint. It says why, and names the node's own apply that updates it."""
    tree = write_tree(tmp_path / "site", "0.16.0", files={"vllm/config/spec.py": SPEC_PY, MODEL: MODEL_PY})
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first = make_patch(tmp_path / "a", tree, {MODEL: MODEL_PY + "X = 1\n"})
    old = write_library(
        tmp_path / "old", {"0.16.0": [first, make_patch(tmp_path / "b", tree, {"vllm/config/spec.py": patched_spec()})]}
    )
    (tmp_path / "c").mkdir()
    newer = (
        patched_spec().replace("deepseek", "deepseek_v2") if "deepseek" in patched_spec() else patched_spec() + "# 2\n"
    )
    new = write_library(
        tmp_path / "new", {"0.16.0": [first, make_patch(tmp_path / "c", tree, {"vllm/config/spec.py": newer})]}
    )
    assert node.run_step("apply", {"target": str(tree), "library": str(old), "extra": ["--no-import"]}, run_in_process)[
        "ok"
    ]
    request = {"target": str(tree), "library": str(new)}
    prepared = node.run_step("prepare", request, run_in_process)
    assert not prepared["ok"] and "applied from another library (0002 changed)" in prepared["detail"], prepared
    assert f"`patchkit apply --target {tree} --patches {new}`" in (prepared["hint"] or ""), prepared
    assert node.run_step("apply", {**request, "extra": ["--no-import"]}, run_in_process)["ok"]
    assert node.run_step("prepare", request, run_in_process)["ok"]


class TreesRunner:
    """protocol.Runner over real trees, a tree a node: each step is the node agent's (node.run_step,
    patchkit in this process) with that node's --target; `between`: run once phase 1 has ended."""

    def __init__(self, trees: dict[Node, Path], between=lambda: None) -> None:
        self.trees, self.between = trees, between

    def run(self, step, nodes, request):
        if step == "apply":
            self.between()
        rows = [node.run_step(step, {**request, "target": str(self.trees[n])}, run_in_process) for n in nodes]
        return Batch([NodeReport.from_node(n, row) for n, row in zip(nodes, rows, strict=True)])

    def decide(self, commit):
        return True


def test_a_fleet_apply_whose_node_leaves_the_guard_refusing_rolls_back_the_nodes_it_wrote(tmp_path):
    """lows33 F3 made the apply row of a node whose set is applied but whose guard still refuses the
    tree (another set's file edited by hand, here after phase 1) a failed node (exit 1, not ok); the
    driver's rollback after that row was never run. It reverts the set on the node this run wrote,
    and leaves the refusing node as it was (this run wrote nothing there): its edit, its sets."""
    trees: dict[Node, Path] = {}
    for index, sets in enumerate((["spec"], ["spec", "model"])):
        tree, library = _two_sets(tmp_path / f"n{index}")
        for name in sets:
            request = {"target": str(tree), "library": str(library), "set_name": name, "extra": ["--no-import"]}
            assert node.run_step("apply", request, run_in_process)["ok"]
        trees[Node(f"{index:056x}", f"10.0.0.{index}")] = tree
    nodes = list(trees)
    before = {n: snapshot(tree) for n, tree in trees.items()}
    spec = trees[nodes[1]] / "vllm/config/spec.py"
    edited = patched_spec() + "# tuned by hand\n"
    runner = TreesRunner(trees, between=lambda: spec.write_text(edited))
    request = {"target": None, "python": None, "library": str(library), "set_name": "model", "timeout": 60}
    result = fleet_apply(runner, nodes, request, apply_flags=["--no-import"])
    wrote, refusing = result.reports
    assert result.error is not None and result.error.exit_code == CHECK_FAILED, result.error
    said = result.error.message
    assert "the launch guard refuses this tree: vllm/config/spec.py" in said and "was reverted" in said, said
    assert (wrote.state, refusing.state, refusing.ok) == ("rolled-back", "already-applied", False), result.reports
    assert snapshot(trees[nodes[0]]) == before[nodes[0]]  # the model set this run wrote: reverted
    assert snapshot(trees[nodes[1]]) == {**before[nodes[1]], "vllm/config/spec.py": edited.encode()}
    assert "`patchkit revert" in (refusing.hint or ""), refusing.hint
