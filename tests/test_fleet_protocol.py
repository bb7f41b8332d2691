"""`patchkit fleet` without a cluster: Ray stays optional, and the two-phase apply's protocol on a
hundred simulated nodes (fake node runners, each a thread that answers as a node's patchkit would),
the failure cases docs/fleets.md's "at a hundred nodes" describes."""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import assert_clean_failure

import patchkit
from patchkit.base import hints
from patchkit.base.errors import CHECK_FAILED, INTERRUPTED, TARGET_PROBLEM
from patchkit.base.options import Options
from patchkit.fleet.cluster import RayRunner, ray_failure
from patchkit.fleet.node import command_line, target_arguments
from patchkit.fleet.protocol import Batch, ClusterError, Node, NodeReport, fleet_apply, run_each

PACKAGE = Path(patchkit.__file__).parent
NODES = [Node(f"{i:056x}", f"10.0.{i // 256}.{i % 256}") for i in range(100)]
pytestmark = pytest.mark.usefixtures("no_thread_left")  # each simulated node's thread ends with its test


def run_without_ray(*args: str) -> subprocess.CompletedProcess:
    """patchkit with `import ray` failing as it does where Ray is not installed."""
    code = "import sys; sys.modules['ray'] = None; from patchkit.cli.main import main; sys.argv[0] = 'patchkit'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_without_ray_fleet_says_how_to_install_it():
    done = run_without_ray("fleet", "apply", "--format", "json", "--address", "10.1.2.3:6379")
    assert_clean_failure(done, 2)
    document = json.loads(done.stdout)
    assert (
        "needs Ray" in document["error"]
        and "`pip install ray`" in document["hint"]
        and "patchkit[ray]" not in document["hint"]
    )
    assert "pipx inject vllm-patchkit ray" in done.stderr


def test_nothing_but_fleet_loads_ray():
    code = (
        "import sys, patchkit.cli.main, patchkit.cli.commands.fleet, patchkit.fleet.protocol, patchkit.fleet.node\n"
        "from click.testing import CliRunner\n"
        "assert CliRunner().invoke(patchkit.cli.main.cli, ['fleet', '--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_only_the_cluster_module_imports_ray():
    importers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_bytes())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name == "ray" or name.startswith("ray.") for name in names):
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert sorted(set(importers)) == ["fleet/cluster.py"]


def test_a_node_target_is_its_own_environment_first(monkeypatch):
    request = {"target": "/cli/site", "python": None}
    monkeypatch.setenv("PATCHKIT_PYTHON", "/node/env/bin/python")
    assert target_arguments(request)[0] == ["--python", "/node/env/bin/python"]
    monkeypatch.setenv("PATCHKIT_TARGET", "/node/site")
    assert target_arguments(request) == (["--target", "/node/site"], "$PATCHKIT_TARGET on the node")
    monkeypatch.delenv("PATCHKIT_TARGET")
    monkeypatch.delenv("PATCHKIT_PYTHON")
    assert target_arguments(request) == (["--target", "/cli/site"], "--target")
    assert target_arguments({"python": "/cli/python"})[0] == ["--python", "/cli/python"]
    assert target_arguments({}) == (["--python", sys.executable], "the Ray worker's interpreter")


class SimulatedFleet:
    """protocol.Runner over fake nodes: each step of each node runs in its own thread, taking
    `seconds`, and answers as that node's patchkit would. `faults`: (node index, step) -> the answer
    instead; `lost`: (node index, step) whose node dies during the step."""

    def __init__(self, seconds: float = 0.02, versions: dict[int, str] | None = None):
        self.seconds = seconds
        self.versions = versions or {}
        self.applied: set[int] = set()
        self.calls: list[tuple[str, int, dict]] = []
        self.faults: dict[tuple[int, str], dict] = {}
        self.lost: set[tuple[int, str]] = set()
        self.interrupt_during: str | None = None
        self.lock = threading.Lock()
        self.batches: list[tuple[str, int]] = []  # each run: its step and how many nodes it asked at once
        self.decisions: list[bool] = []  # each decide()'s commit, in order
        self.gave_up = False  # the nodes decided abort first (the driver silent past their lease)
        self.store_down = False  # the cluster's key-value store does not answer

    def run(self, step, nodes, request):
        self.batches.append((step, len(nodes)))
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            reports = list(pool.map(lambda node: self.answer(step, node, request), nodes))
        return Batch(reports, signal.SIGINT if step == self.interrupt_during else None)

    def decide(self, commit: bool) -> bool:
        self.decisions.append(commit)
        if self.store_down:
            raise ClusterError("phase 2: cannot record this run's commit in the Ray cluster: RpcError: unavailable")
        return not (commit and self.gave_up)

    def answer(self, step: str, node: Node, request: dict) -> NodeReport:
        index = NODES.index(node)
        with self.lock:
            self.calls.append((step, index, request))
        time.sleep(self.seconds)
        if (index, step) in self.lost:
            return NodeReport(node, "lost", False, "NodeDiedError: the node died")
        target = f"/nodes/{index}/site"
        common = {"target": target, "vllm_version": self.versions.get(index, "0.16.0"), "set": "demo"}
        summary = self.faults.get((index, step)) or self.normal(step, index)
        return NodeReport.from_node(node, {**common, **summary})

    def normal(self, step: str, index: int) -> dict:
        with self.lock:
            if step == "apply":
                state = "already-applied" if index in self.applied else "applied"
                self.applied.add(index)
            elif step == "revert":
                self.applied.discard(index)
                state = "reverted"
            else:
                state = "ready" if step == "prepare" else "not-applied"
        return {"state": state, "ok": True, "exit_code": 0}

    def steps(self, step: str) -> list[int]:
        return sorted(index for name, index, _ in self.calls if name == step)


REQUEST = {"target": None, "python": None, "library": "/lib", "timeout": 60}
REFUSED = {"state": "not-applied", "ok": False, "exit_code": 1, "detail": "integrity: vllm/config/spec.py: edited"}


def states(result) -> dict[str, int]:
    counts: dict[str, int] = {}
    for report in result.reports:
        counts[report.state] = counts.get(report.state, 0) + 1
    return counts


def test_a_hundred_nodes_apply_in_parallel():
    fleet = SimulatedFleet(seconds=0.05)
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error is None and result.state == "applied" and len(fleet.applied) == 100
    assert fleet.steps("prepare") == fleet.steps("apply") == list(range(100))
    # two rounds, each asking every node at once, not 200 node-steps one after another
    assert fleet.batches == [("prepare", 100), ("apply", 100)], fleet.batches


def test_a_refusal_in_phase_one_writes_nothing_on_any_of_a_hundred_nodes():
    fleet = SimulatedFleet()
    fleet.faults[(42, "prepare")] = REFUSED
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error is not None and result.error.exit_code == CHECK_FAILED
    assert NODES[42].node_id[:12] in result.error.message and "integrity" in result.error.message
    assert fleet.steps("apply") == [] and fleet.applied == set()
    assert states(result) == {"ready": 99, "not-applied": 1} and result.state == "mixed"


def test_a_failure_in_phase_two_reverts_the_ninety_nine_written():
    fleet = SimulatedFleet()
    fleet.applied = {7}  # applied before this run: not this run's to undo
    fleet.faults[(57, "apply")] = {"state": "check-failed", "ok": False, "exit_code": 1, "detail": "probe: boom"}
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.exit_code == CHECK_FAILED and result.phase == "rolled-back"
    assert "probe: boom" in result.error.message and "every node this run wrote was reverted" in result.error.message
    assert fleet.steps("revert") == [i for i in range(100) if i not in (7, 57)]
    assert fleet.applied == {7}
    assert states(result) == {"rolled-back": 98, "already-applied": 1, "check-failed": 1}
    revert_request = next(request for name, _, request in fleet.calls if name == "revert")
    assert command_line("revert", revert_request)[0] == [  # the set this run wrote, only
        "revert",
        "--format",
        "json",
        "--python",
        sys.executable,
        "--patches",
        "/lib",
        "--set",
        "demo",
    ]


def test_a_node_lost_in_phase_two_and_a_revert_that_fails_are_named_with_what_to_run():
    fleet = SimulatedFleet()
    fleet.lost.add((13, "apply"))
    fleet.faults[(14, "revert")] = {"state": "conflict", "ok": False, "exit_code": 1, "detail": "edited"}
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.exit_code == TARGET_PROBLEM
    lost, stuck = result.reports[13], result.reports[14]
    assert lost.state == "lost" and "patchkit status --target /nodes/13/site --set demo" in lost.detail
    assert stuck.state == "rollback-failed" and "patchkit revert --target /nodes/14/site --set demo" in stuck.detail
    assert NODES[14].node_id[:12] in result.error.message and "NOT reverted" in result.error.message
    assert states(result) == {"rolled-back": 98, "lost": 1, "rollback-failed": 1}


def test_an_interrupt_in_phase_two_reverts_what_was_written():
    fleet = SimulatedFleet()
    fleet.interrupt_during = "apply"
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.exit_code == INTERRUPTED
    assert fleet.applied == set() and states(result) == {"rolled-back": 100}


def test_an_apply_commits_once_every_node_applied_and_aborts_before_a_rollback():
    fleet = SimulatedFleet()
    assert fleet_apply(fleet, NODES, REQUEST).error is None and fleet.decisions == [True]
    failing = SimulatedFleet()
    failing.faults[(7, "apply")] = {"state": "conflict", "ok": False, "exit_code": 1, "detail": "edited"}
    assert fleet_apply(failing, NODES, REQUEST).error.exit_code == CHECK_FAILED and failing.decisions == [False]


def test_a_commit_the_nodes_gave_up_on_first_is_rolled_back_and_said():
    """The driver was stopped (SIGSTOP, a paused VM) past the nodes' lease: they decided abort and
    reverted themselves; its commit fails, and it must not say the fleet is applied."""
    fleet = SimulatedFleet()
    fleet.gave_up = True
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.exit_code == TARGET_PROBLEM and "gave up on it" in result.error.message
    assert fleet.applied == set() and states(result) == {"rolled-back": 100}


def test_status_of_nodes_applied_beside_nodes_not_names_the_fix_for_the_fleet():
    """A node whose agent died with the driver before its commit keeps its apply (the others roll
    back): status must say the nodes differ and what makes them one, not only list them."""
    fleet = SimulatedFleet()
    for index in (4, 60):
        fleet.faults[(index, "status")] = {"state": "applied", "ok": True, "exit_code": 0}
    result = run_each(fleet, "status", NODES, {**REQUEST, "address": "head:6379"})
    assert result.error is None and result.state == "mixed"
    assert result.notes == [
        "the nodes differ: `patchkit fleet apply --address head:6379` applies the rest, "
        "`patchkit fleet revert --address head:6379` reverts every node"
    ]
    assert run_each(SimulatedFleet(), "status", NODES, REQUEST).notes == []


def test_a_decision_the_cluster_cannot_record_is_exit_4_every_node_rolled_back_never_a_crash():
    """The GCS unreachable as the driver commits: its error (Ray's RpcError) reached the command's
    top level as "internal error ... a patchkit bug", exit 70, the nodes left undecided."""
    fleet = SimulatedFleet()
    fleet.store_down = True
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.exit_code == TARGET_PROBLEM and "cannot record this run's commit" in result.error.message
    assert "every node this run wrote was reverted" in result.error.message
    assert fleet.applied == set() and states(result) == {"rolled-back": 100} and fleet.decisions == [True, False]


def test_the_ray_runners_decision_in_an_unreachable_store_is_a_cluster_error():
    class DownLedger:
        def put_new(self, key, value):
            raise ConnectionError("failed to connect to all addresses")

    cluster = object.__new__(RayRunner)
    cluster.ledger, cluster.run_id = DownLedger(), "r" * 32
    with pytest.raises(ClusterError, match="cannot record this run's commit in the Ray cluster: ConnectionError"):
        cluster.decide(commit=True)


def test_mixed_versions_each_their_own_series_unless_refused():
    versions = {i: "0.17.0" for i in range(50, 100)}
    refused = fleet_apply(SimulatedFleet(versions=versions), NODES, REQUEST, require_same_version=True)
    assert refused.error.exit_code == CHECK_FAILED and "different vLLM versions" in refused.error.message
    assert refused.versions == ["0.16.0", "0.17.0"]
    fleet = SimulatedFleet(versions=versions)
    assert fleet_apply(fleet, NODES, REQUEST).error is None and len(fleet.applied) == 100


@pytest.mark.parametrize(
    ("fault", "code"),
    [({"state": "partial", "ok": False, "exit_code": 1}, CHECK_FAILED), (None, TARGET_PROBLEM)],
)
def test_status_exit_code_one_for_a_failed_node_four_for_a_lost_one(fault, code):
    fleet = SimulatedFleet()
    if fault is None:
        fleet.lost.add((3, "status"))
    else:
        fleet.faults[(3, "status")] = fault
    result = run_each(fleet, "status", NODES, REQUEST)
    assert result.error.exit_code == code and NODES[3].node_id[:12] in result.error.message
    assert result.state == "mixed"


def test_a_node_answer_of_the_wrong_shape_is_that_node_failing_never_a_crash():
    fleet = SimulatedFleet()
    fleet.faults[(5, "prepare")] = {"state": "ready", "ok": True, "exit_code": 0, "vllm_version": 16}
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.exit_code == CHECK_FAILED and fleet.steps("apply") == []
    assert result.reports[5].state == "error" and "vllm_version" in result.reports[5].detail

    fleet = SimulatedFleet()
    fleet.faults[(6, "apply")] = {"state": "applied", "ok": True, "exit_code": 0, "set": ["demo"]}
    result = fleet_apply(fleet, NODES, REQUEST)  # written, but its answer cannot be believed: rolled back
    assert result.error.exit_code == CHECK_FAILED and result.reports[6].state == "error"
    assert fleet.steps("revert") == [i for i in range(100) if i != 6]


def test_the_rollback_reverts_on_each_node_the_set_that_node_applied_and_nothing_else():
    fleet = SimulatedFleet()
    for index in range(0, 100, 3):
        fleet.faults[(index, "apply")] = {"state": "applied", "ok": True, "exit_code": 0, "set": "other-default"}
    for step, state in (("prepare", "ready"), ("apply", "applied")):  # a node that never named its set
        fleet.faults[(1, step)] = {"state": state, "ok": True, "exit_code": 0, "set": None}
    fleet.faults[(98, "apply")] = {"state": "conflict", "ok": False, "exit_code": 1, "detail": "edited"}
    result = fleet_apply(fleet, NODES, REQUEST)
    reverts = [(index, request.get("set_name")) for name, index, request in fleet.calls if name == "revert"]
    assert all(name for _, name in reverts)  # never a plain revert of every set
    assert {i for i, name in reverts if name == "other-default"} == set(range(0, 100, 3))
    assert {i for i, name in reverts if name == "demo"} == set(range(100)) - set(range(0, 100, 3)) - {1, 98}
    assert result.reports[1].state == "rollback-failed" and "patchkit status" in result.reports[1].detail


def test_an_interrupt_still_says_what_to_run_on_a_node_lost_in_phase_two():
    fleet = SimulatedFleet()
    fleet.interrupt_during = "apply"
    fleet.lost.add((13, "apply"))
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.exit_code == INTERRUPTED
    assert "patchkit status --target /nodes/13/site --set demo" in result.reports[13].detail


def test_an_address_that_accepts_connections_but_is_no_ray_cluster_is_exit_4_in_bounded_time():
    pytest.importorskip("ray")
    import socket

    listener = socket.create_server(("127.0.0.1", 0))  # accepts, never speaks: a dashboard port, say
    port = listener.getsockname()[1]
    code = (
        "import sys, patchkit.fleet.cluster as cluster; cluster.CONNECT_SECONDS = 3\n"
        "from patchkit.cli.main import main; sys.argv[0] = 'patchkit'; main()"
    )
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", code, "fleet", "status", "--format", "json", "--address", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        listener.close()
    assert_clean_failure(done, TARGET_PROBLEM)
    assert "no Ray cluster answered there within 3 s" in json.loads(done.stdout)["error"]
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("option", ["--timeout", "--keep-alive"])
def test_a_time_that_is_not_a_number_is_a_usage_error(option):
    """nan passes every range comparison: as a time limit it timed out every node at once."""
    done = run_without_ray("fleet", "status", option, "nan", "--address", "10.1.2.3:6379")
    assert_clean_failure(done, 2)
    assert "'nan' is not a number of seconds" in done.stderr


class TaskError(Exception):
    """Stands in for ray.exceptions.RayTaskError: the task ran on the node and raised."""


@pytest.mark.parametrize(
    ("error", "meaning"),
    [
        (RuntimeError("The actor died because of an error raised in its creation task, ..."), "patchkit-failed"),
        (TaskError("ModuleNotFoundError: No module named 'patchkit'"), "patchkit-failed"),
        (RuntimeError("The actor was killed by `ray.kill` ..."), "agent-ended"),
        (TaskError("... killed by `ray.kill` ..."), "agent-ended"),
        (RuntimeError("The node with node id abc has been marked dead"), "node-lost"),
        (OSError(""), "node-lost"),
    ],
)
def test_a_ray_error_is_read_in_one_place(error, meaning):
    assert ray_failure(error, TaskError) == meaning


def test_an_agent_ended_while_claimed_is_asked_again_and_while_answering_is_lost():
    class FakeRay:
        class exceptions:
            RayTaskError = TaskError

    cluster = object.__new__(RayRunner)
    cluster.ray = FakeRay
    node = Node("n1", "10.0.0.1")
    ended = RuntimeError("The actor was killed by `ray.kill`")
    assert cluster._failure(ended, node, claiming=True).state == "ending"
    assert cluster._failure(ended, node).state == "lost"
    assert cluster._failure(TaskError("boom"), node).state == "error"


def test_several_sets_the_rollback_reverts_each_set_a_node_applied_last_first():
    """Issue 23: a node's apply of several sets reports each; a node that failed at its second set
    keeps its first applied: the rollback reverts, on each node, the sets it applied, last first."""
    fleet = SimulatedFleet()
    both = [{"set": "eagle3", "state": "applied"}, {"set": "tools", "state": "applied"}]
    first_only = [{"set": "eagle3", "state": "applied"}, {"set": "tools", "state": "check-failed"}]
    for index in range(100):
        fleet.faults[(index, "apply")] = {"state": "applied", "ok": True, "exit_code": 0, "set": None, "sets": both}
    failed = {"state": "check-failed", "ok": False, "exit_code": 1, "detail": "tools: probe", "set": None}
    fleet.faults[(7, "apply")] = {**failed, "sets": first_only}
    result = fleet_apply(fleet, NODES, REQUEST)
    reverts = [(index, request.get("set_name")) for name, index, request in fleet.calls if name == "revert"]
    assert sorted(i for i, name in reverts if name == "tools") == [i for i in range(100) if i != 7]
    assert sorted(i for i, name in reverts if name == "eagle3") == list(range(100))
    order = [name for _, name in reverts]
    assert order.index("eagle3") > max(i for i, name in enumerate(order) if name == "tools")  # tools first
    assert states(result) == {"rolled-back": 99, "check-failed": 1}
    assert result.reports[7].detail == "tools: probe; the sets it applied before were reverted"
    rolled_back = [{"set": "eagle3", "state": "rolled-back"}, {"set": "tools", "state": "rolled-back"}]
    assert result.reports[0].to_json()["sets"] == rolled_back  # review 12a M2: never still "applied"
    assert result.reports[7].to_json()["sets"] == [rolled_back[0], first_only[1]]


def test_several_sets_a_node_whose_revert_of_one_set_failed_is_told_to_revert_that_set_only():
    """A plain `revert` there would undo every set, the ones the node had before this run too: the
    hint names the set whose revert failed, and says what became of the others."""
    both = [{"set": "eagle3", "state": "applied"}, {"set": "tools", "state": "applied"}]
    already = [{"set": "eagle3", "state": "already-applied"}, {"set": "tools", "state": "applied"}]

    class ToolsStuckOnNodeThree(SimulatedFleet):
        def answer(self, step: str, node: Node, request: dict) -> NodeReport:
            if step == "revert" and NODES.index(node) == 3 and request.get("set_name") == "tools":
                stuck = {"state": "conflict", "ok": False, "exit_code": 1, "detail": "edited", "set": "tools"}
                return NodeReport.from_node(node, {"target": "/nodes/3/site", "vllm_version": "0.16.0", **stuck})
            return super().answer(step, node, request)

    fleet = ToolsStuckOnNodeThree()
    for index in range(100):
        fleet.faults[(index, "apply")] = {"state": "applied", "ok": True, "exit_code": 0, "set": None, "sets": both}
    fleet.faults[(4, "apply")] = {"state": "applied", "ok": True, "exit_code": 0, "set": None, "sets": already}
    failed = {"state": "check-failed", "ok": False, "exit_code": 1, "detail": "tools: probe", "set": None}
    fleet.faults[(7, "apply")] = {**failed, "sets": [both[0], {"set": "tools", "state": "check-failed"}]}
    result = fleet_apply(fleet, NODES, REQUEST)
    stuck = result.reports[3]
    assert stuck.state == "rollback-failed"
    assert "`patchkit revert --target /nodes/3/site --set tools`" in stuck.detail
    assert "`patchkit revert --target /nodes/3/site`" not in stuck.detail
    assert "tools: edited" in stuck.detail and "; eagle3 reverted" in stuck.detail
    assert states(result) == {"rolled-back": 98, "check-failed": 1, "rollback-failed": 1}
    reverted_on_four = [
        request.get("set_name") for name, index, request in fleet.calls if (name, index) == ("revert", 4)
    ]
    assert reverted_on_four == ["tools"]  # the set it had before stays


def test_a_node_silent_in_phase_two_is_never_said_reverted():
    """Review 12a M1: a node that did not answer (its apply may land later) was summed up as "every
    node this run wrote was reverted", its row `"written": false`, the hint "rerun once every node
    is alive" (it is alive: frozen)."""
    fleet = SimulatedFleet()
    fleet.faults[(21, "apply")] = {"state": "timed-out", "ok": False, "detail": "no answer within 3 s"}
    result = fleet_apply(fleet, NODES, REQUEST)
    silent = result.reports[21]
    assert result.error.exit_code == TARGET_PROBLEM
    assert "every node this run wrote was reverted" not in result.error.message
    assert f"not known to be reverted: {silent.named()} (each row" in result.error.message
    assert silent.to_json()["written"] is None and 21 not in fleet.steps("revert")
    fix = "on 10.0.0.21 run `patchkit status --target /nodes/21/site --set demo`, then `patchkit revert"
    assert silent.hint.startswith(fix) and fix in result.error.hint
    assert states(result) == {"rolled-back": 99, "timed-out": 1}


def test_each_refusing_nodes_fix_reaches_its_row_and_the_hint():
    """Review 12a H1, L1: the node's own hint was dropped (JSON "hint": null, the row's too)."""
    fleet = SimulatedFleet()
    fleet.faults[(42, "prepare")] = {**REFUSED, "state": "check-failed", "hint": "put the stock file back"}
    fleet.faults[(43, "prepare")] = {**REFUSED, "state": "check-failed", "hint": "run `patchkit apply --force`"}
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.reports[42].to_json()["hint"] == "put the stock file back"
    assert result.error.hint == (
        f"node {NODES[42].node_id[:12]} (10.0.0.42): put the stock file back; "
        f"node {NODES[43].node_id[:12]} (10.0.0.43): run `patchkit apply --force`"
    )
    fleet.faults = {(i, "status"): {"state": "partial", "ok": False, "exit_code": 1, "hint": "h"} for i in (1, 2)}
    status = run_each(fleet, "status", NODES, REQUEST)
    assert status.error.hint == "on each node: h"


def test_a_version_rule_refusal_is_not_said_as_another_nodes():
    """Review 12a L1: with --require-same-version on a mixed cluster every row said "phase 1 refused
    on another node"; none did: the rule did."""
    versions = {i: "0.17.0" for i in range(50, 100)}
    refused = fleet_apply(SimulatedFleet(versions=versions), NODES, REQUEST, require_same_version=True)
    assert {r.detail for r in refused.reports} == {
        "nothing written: the nodes run different vLLM versions (--require-same-version)"
    }
    assert "drop --require-same-version" in refused.error.hint


ACTOR_DIED = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: RayAgent\n\tactor_id: 5c1f\n"
    "\tpid: 8704\n\tname: agent-2e3f\n\tnamespace: patchkit\n\tip: 192.0.2.2\n"
    "The actor is dead because its worker process has died. Worker exit type: UNEXPECTED_SYSTEM_EXIT Worker exit "
    "detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
    "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is "
    "called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors."
)


def test_a_node_whose_agent_died_is_said_in_one_line():
    """Review 12a L2: the lost row carried Ray's whole paragraph of possible causes (~600 characters)."""

    class ActorDiedError(Exception):
        pass

    class FakeRay:
        class exceptions:
            RayTaskError = TaskError

    cluster = object.__new__(RayRunner)
    cluster.ray = FakeRay
    report = cluster._failure(ActorDiedError(ACTOR_DIED), Node("n1", "10.0.0.1"))
    assert report.state == "lost"
    assert report.detail == "ActorDiedError: The actor is dead because its worker process has died."
    long = cluster._failure(ActorDiedError("x" * 400), Node("n1", "10.0.0.1")).detail
    assert len(long) < 200 and long.endswith("…") and "\n" not in long


def test_a_node_silent_in_a_fleet_revert_is_not_said_unwritten_and_is_told_what_finds_out():
    """Review 12b L2: a fleet revert whose node's agent froze mid-commit said `"written": false`,
    `"hint": null`, while 9 files there were half reverted. Unknown is null, with the commands that
    find out and finish it, as phase 2 of fleet apply says of its own silent node."""
    fleet = SimulatedFleet()
    fleet.faults[(7, "revert")] = {"state": "timed-out", "ok": False, "detail": "no answer within 3 s"}
    with hints.selected(Options(library="/lib", set_name="demo")):  # the user's, as the CLI sets it
        result = run_each(fleet, "revert", NODES, {**REQUEST, "address": "10.0.0.1:6379", "set_name": "demo"})
    silent = result.reports[7].to_json()
    assert silent["written"] is None and result.reports[8].to_json()["written"] is True
    assert result.error.exit_code == TARGET_PROBLEM
    assert "`patchkit fleet status --patches /lib --set demo --address 10.0.0.1:6379`" in silent["hint"]
    assert "`patchkit fleet revert --patches /lib --set demo --address 10.0.0.1:6379`" in silent["hint"]
    assert silent["hint"] in result.error.hint


BUSY = {
    "state": "busy",
    "ok": False,
    "exit_code": None,
    "detail": "another fleet apply (driver: host-a pid 11) has written here and not yet committed",
}


@pytest.mark.parametrize("phase", ["prepare", "apply"])
def test_a_node_busy_with_another_fleet_apply_is_exit_4_every_node_left_as_it_was(phase):
    """fleet29: a node where another fleet apply's write is undecided refuses this run's step
    (phase 1: nothing written anywhere; phase 2: every node this run wrote is reverted): a cluster
    in use (exit 4), never a failed check, and the fix is to let the other run end."""
    fleet = SimulatedFleet()
    fleet.faults[(3, phase)] = BUSY
    result = fleet_apply(fleet, NODES, {**REQUEST, "address": "10.0.0.1:6379"})
    assert result.error.exit_code == TARGET_PROBLEM, result.error.message
    assert f"another fleet apply is under way on {result.reports[3].named()} (busy)" in result.error.message
    assert "let the other fleet apply end" in result.error.hint
    assert "`patchkit fleet status --address 10.0.0.1:6379`" in result.error.hint
    assert fleet.applied == set() and result.reports[3].detail == BUSY["detail"]
    if phase == "prepare":
        assert "nothing was written on any node" in result.error.message and fleet.steps("apply") == []
    else:
        assert "every node this run wrote was reverted" in result.error.message and fleet.decisions == [False]


def test_a_fleet_revert_on_a_node_busy_with_another_fleet_apply_is_exit_4():
    fleet = SimulatedFleet()
    fleet.faults[(5, "revert")] = BUSY
    result = run_each(fleet, "revert", NODES, REQUEST)
    assert result.error.exit_code == TARGET_PROBLEM and "another fleet apply is under way" in result.error.message


def test_each_rolled_back_row_says_why_it_was_reverted():
    """A rolled-back row said "applied, then reverted: another node failed" whatever undid it: an
    interrupt, a commit the nodes gave up on, a node's own rollback (none had failed)."""
    interrupted = SimulatedFleet()
    interrupted.interrupt_during = "apply"
    assert {r.detail for r in fleet_apply(interrupted, NODES, REQUEST).reports} == {
        "applied, then reverted: interrupted"
    }
    failing = SimulatedFleet()
    failing.faults[(7, "apply")] = {"state": "conflict", "ok": False, "exit_code": 1, "detail": "edited"}
    result = fleet_apply(failing, NODES, REQUEST)
    assert result.reports[0].detail == "applied, then reverted: another node failed"
    given_up = SimulatedFleet()
    given_up.gave_up = True
    own = "rolled back by its node: no word from this run for 10 s"
    given_up.faults[(3, "revert")] = {"state": "reverted", "ok": True, "exit_code": 0, "detail": own}
    result = fleet_apply(given_up, NODES, REQUEST)
    assert result.reports[0].detail == "applied, then reverted: this run's commit did not stand"
    assert result.reports[3].detail == "applied, then " + own


def test_a_phase_two_that_wrote_on_no_node_says_so_not_that_it_reverted_them():
    """Every node refused this run's apply (another fleet apply's writes there, say): the error
    said "every node this run wrote was reverted", of a run that wrote nothing."""
    fleet = SimulatedFleet()
    for index in range(100):
        fleet.faults[(index, "apply")] = BUSY
    result = fleet_apply(fleet, NODES, REQUEST)
    assert result.error.message.endswith("; this run wrote on no node"), result.error.message
    assert fleet.steps("revert") == [] and fleet.applied == set()
