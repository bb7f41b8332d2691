"""`patchkit fleet` on a real local Ray cluster: a head and two added nodes started on this machine,
each with its own PATCHKIT_TARGET (a small stock tree the tests write), node 2's an interpreter
(PATCHKIT_PYTHON, a venv whose site-packages is its tree: the import probe runs there, and only
there). No mocks: the CLI runs in a subprocess as a user runs it, and the nodes run patchkit.

The cluster starts once for the module (seconds); each test writes the trees it needs first."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import venv
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    assert_clean_failure,
    make_patch,
    patched_spec,
    purelib,
    run_cli,
    snapshot,
    write_library,
    write_tree,
)

import patchkit
from patchkit.fleet import LEASE

# `make test` runs them; the fast tier does not. Ray is imported where the cluster starts, not at collection:
# every xdist worker collects this module, deselected or not, and importing Ray cost each ~0.3 s of CPU.
pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="could not import 'ray'"),
    pytest.mark.usefixtures("no_thread_left"),
]

SPEC = "vllm/config/spec.py"


class Fleet:
    """The cluster, the node trees (in the order head, node 1, node 2) and where the tests write."""

    def __init__(self, base: Path):
        self.base = base
        self.trees = [base / "head" / "site", base / "node1" / "site"]
        self.python = base / "node2" / "env" / "bin" / "python"
        venv.create(base / "node2" / "env", with_pip=False)
        self.trees.append(purelib(self.python))
        self.cache = base / "cache"  # the nodes' fetch cache: never the real releases' RECORDs
        self.cluster = None

    def node_env(self, **target: str) -> dict[str, str]:
        return {
            **target,
            "PATCHKIT_CACHE_DIR": str(self.cache),
            "XDG_STATE_HOME": str(self.base / "state"),
            "PATCHKIT_PROBE_TIMEOUT": "60",
        }

    def start(self) -> None:
        import ray.cluster_utils

        head = {"num_cpus": 1, "env_vars": self.node_env(PATCHKIT_TARGET=str(self.trees[0]))}
        self.cluster = ray.cluster_utils.Cluster(initialize_head=True, head_node_args=head)
        self.cluster.add_node(num_cpus=1, env_vars=self.node_env(PATCHKIT_TARGET=str(self.trees[1])))
        self.cluster.add_node(num_cpus=1, env_vars=self.node_env(PATCHKIT_PYTHON=str(self.python)))
        self.cluster.wait_for_nodes()

    def stock(self, *versions: str, files: dict[str, str] | None = None) -> None:
        """Every node's tree written anew as a stock release (one version each, else 0.16.0)."""
        for tree, version in zip(self.trees, versions or ("0.16.0",) * 3, strict=True):
            shutil.rmtree(tree, ignore_errors=True)
            write_tree(tree, version, files)

    def library(self, name: str, edits: dict[str, str], releases: tuple[str, ...] = ("0.16.0",)) -> Path:
        scratch = self.base / "scratch"
        scratch.mkdir(exist_ok=True)
        patch = make_patch(scratch, self.trees[0], edits)
        root = self.base / "libraries" / name
        shutil.rmtree(root, ignore_errors=True)
        return write_library(root, {release: [patch] for release in releases})

    def slow_apply_started(self, name: str, *options: str, fails: bool = False) -> tuple[subprocess.Popen, Path]:
        """`fleet apply` (JSON on its stdout) of a set whose patched module, imported by the
        interpreter node's probe in phase 2, marks the moment and then takes 4 s (then fails the
        probe, with `fails`): returned at that moment, with the set's library."""
        marker = self.base / f"{name}.mark"
        marker.unlink(missing_ok=True)
        slow = patched_spec() + textwrap.dedent(f"""
            import pathlib, time
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(4)
            """)
        slow += "raise RuntimeError('this node fails the import probe')\n" if fails else ""
        lib = self.library(name, {SPEC: slow})
        argv = [sys.executable, "-m", "patchkit", "fleet", "apply", "--address", self.cluster.address]
        argv += [*options, "--patches", str(lib), "--format", "json"]
        driver = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            _wait_for(marker, driver, seconds=120)
        except BaseException:
            driver.kill()
            raise
        return driver, lib

    def run(self, action: str, *args: object):
        done = run_cli("fleet", action, "--address", self.cluster.address, "--format", "json", *args)
        return done, json.loads(done.stdout)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    fleet = Fleet(tmp_path_factory.mktemp("fleet"))
    fleet.stock()
    try:
        fleet.start()
        yield fleet
    finally:  # a start that failed midway leaves its head and nodes running too
        if fleet.cluster is not None:
            fleet.cluster.shutdown()


def write_record(tree: Path) -> None:
    """The tree's dist-info RECORD, as a wheel has it: each file's sha256 (urlsafe base64) and size."""
    lines = []
    for path in sorted((tree / "vllm").rglob("*.py")):
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path.relative_to(tree).as_posix()},sha256={digest},{len(data)}")
    (next(tree.glob("vllm-*.dist-info")) / "RECORD").write_text("\n".join(lines) + "\n")


def by_target(document: dict) -> dict[str, dict]:
    return {node["target"]: node for node in document["nodes"]}


def test_status_apply_status_verify_revert_on_every_node(fleet):
    fleet.stock()
    lib = fleet.library("plain", {SPEC: patched_spec().replace('"deepseek"', '"kimi"')})
    before = [snapshot(tree) for tree in fleet.trees]

    done, status = fleet.run("status", "--patches", lib)
    assert done.returncode == 0, done.stderr
    assert status["state"] == "not-applied" and len(status["nodes"]) == 3
    assert set(by_target(status)) == {str(tree) for tree in fleet.trees}
    interpreter_node = by_target(status)[str(fleet.trees[2])]
    assert interpreter_node["found_by"] == "$PATCHKIT_PYTHON on the node"
    assert {n["vllm_version"] for n in status["nodes"]} == {"0.16.0"}
    assert all(n["node_id"] and n["node_ip"] and n["ok"] for n in status["nodes"])

    done, applied = fleet.run("apply", "--patches", lib)
    assert done.returncode == 0, done.stderr
    assert applied["state"] == "applied" and applied["phase"] == "apply"
    assert all('"kimi"' in (tree / SPEC).read_text() for tree in fleet.trees)
    probes = [c for c in by_target(applied)[str(fleet.trees[2])]["document"]["checks"] if c["check"] == "probe"]
    assert probes and all(c["ok"] for c in probes), probes  # the interpreter node imported what it wrote

    done, status = fleet.run("status", "--patches", lib)
    assert (done.returncode, status["state"]) == (0, "applied")
    done, verified = fleet.run("verify", "--patches", lib)
    assert (done.returncode, verified["state"]) == (0, "applied"), done.stderr
    probed = by_target(verified)[str(fleet.trees[2])]["document"]["checks"]
    assert any(c["check"] == "probe" and c["path"] == SPEC and c["ok"] for c in probed), probed  # in its interpreter

    done, reverted = fleet.run("revert", "--patches", lib)
    assert (done.returncode, reverted["state"]) == (0, "reverted"), done.stderr
    assert [snapshot(tree) for tree in fleet.trees] == before


def test_text_output_is_a_row_per_node_and_a_summary(fleet):
    fleet.stock()
    lib = fleet.library("plain", {SPEC: patched_spec()})
    done = run_cli("fleet", "status", "--address", fleet.cluster.address, "--patches", lib)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["node", "ip", "target", "vLLM", "state", "detail"]
    assert sum("not-applied" in line for line in lines[2:5]) == 3
    assert lines[-1] == "fleet status: 3 node(s): 3 not-applied; vLLM 0.16.0"


def test_an_edited_stock_file_on_one_node_refuses_phase_one_and_nothing_is_written(fleet):
    """The edit is outside the hunks' context (the diff still applies): the RECORD refuses it."""
    fleet.stock()
    lib = fleet.library("plain", {SPEC: patched_spec()})
    for tree in fleet.trees:
        write_record(tree)
    edited = fleet.trees[1] / SPEC
    edited.write_text(edited.read_text() + "# tuned by hand on this node\n")
    before = [snapshot(tree) for tree in fleet.trees]

    done, document = fleet.run("apply", "--patches", lib)
    assert_clean_failure(done, 1)
    assert document["phase"] == "prepare"
    refused = by_target(document)[str(fleet.trees[1])]
    assert not refused["ok"] and "integrity" in refused["detail"] and SPEC in refused["detail"], refused
    assert refused["node_id"][:12] in document["error"] and "nothing was written on any node" in document["error"]
    others = [by_target(document)[str(t)] for t in (fleet.trees[0], fleet.trees[2])]
    assert all(n["state"] == "ready" and "phase 1 refused on another node" in n["detail"] for n in others)
    assert [snapshot(tree) for tree in fleet.trees] == before
    assert not any((tree / ".patchkit" / "state.json").exists() for tree in fleet.trees)  # no record either


def test_a_failure_in_phase_two_rolls_the_other_nodes_back(fleet):
    """The import probe runs only once files are written, and only on the interpreter node: a
    patched module that raises on import passes phase 1 everywhere and fails phase 2 there."""
    fleet.stock()
    raising = patched_spec() + '\nraise RuntimeError("this build of spec.py cannot load")\n'
    lib = fleet.library("raising", {SPEC: raising})
    before = [snapshot(tree) for tree in fleet.trees]

    done, document = fleet.run("apply", "--patches", lib)
    assert_clean_failure(done, 1)
    assert document["phase"] == "rolled-back"
    nodes = by_target(document)
    failed = nodes[str(fleet.trees[2])]
    assert failed["state"] == "check-failed" and "cannot load" in failed["detail"]
    assert failed["node_id"][:12] in document["error"]
    for tree in fleet.trees[:2]:
        assert nodes[str(tree)]["state"] == "rolled-back" and nodes[str(tree)]["written"]
    assert "every node this run wrote was reverted" in document["error"]
    assert [snapshot(tree) for tree in fleet.trees] == before


def test_nodes_on_two_releases_each_get_their_own_series(fleet):
    fleet.stock("0.16.0", "0.17.0", "0.17.0")
    lib = fleet.library("two", {SPEC: patched_spec()}, releases=("0.16.0", "0.17.0"))
    before = [snapshot(tree) for tree in fleet.trees]

    done, document = fleet.run("apply", "--patches", lib, "--require-same-version")
    assert_clean_failure(done, 1)
    assert "different vLLM versions" in document["error"] and document["versions"] == ["0.16.0", "0.17.0"]
    assert [snapshot(tree) for tree in fleet.trees] == before

    done, document = fleet.run("apply", "--patches", lib)
    assert (done.returncode, document["state"]) == (0, "applied"), done.stderr
    assert {n["target"]: n["series"] for n in document["nodes"]} == {
        str(fleet.trees[0]): "0.16.0",
        str(fleet.trees[1]): "0.17.0",
        str(fleet.trees[2]): "0.17.0",
    }
    assert all(SPEC in n["document"]["plan"][0]["files"][0]["path"] for n in document["nodes"])
    done, _ = fleet.run("revert", "--patches", lib)
    assert done.returncode == 0, done.stderr
    assert [snapshot(tree) for tree in fleet.trees] == before


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_phase_two_still_rolls_every_node_back_and_exits_with_its_code(fleet, signum):
    """The interpreter node's probe imports a module that marks the moment and then takes a few
    seconds: the signal to `fleet apply` then. It waits for the nodes' answers and reverts them all,
    and exits as patchkit's other commands do for that signal: 128 + its number (143 for SIGTERM,
    not 130; a SIGHUP, a closed terminal, raised mid-run and left the nodes applied, saying nothing changed)."""
    fleet.stock()
    before = [snapshot(tree) for tree in fleet.trees]
    driver, _ = fleet.slow_apply_started(f"slow-{signum.name}")
    try:
        driver.send_signal(signum)
        stdout, _ = driver.communicate(timeout=120)
    finally:
        driver.kill()
    document = json.loads(stdout)
    assert driver.returncode == 128 + signum, stdout
    assert document["exit_code"] == 128 + signum
    assert "interrupted in phase 2" in document["error"]
    assert {n["state"] for n in document["nodes"]} == {"rolled-back"}
    assert [snapshot(tree) for tree in fleet.trees] == before


@pytest.mark.parametrize(
    ("fails", "upgraded"),
    [(True, False), (False, False), (True, True)],
    ids=["a-node-fails", "every-node-applies", "on-agents-of-its-own"],
)
def test_a_driver_killed_in_phase_two_leaves_every_node_stock_and_status_says_so(fleet, fails, upgraded):
    """Review 37 L-g: SIGKILL (an OOM kill, a CI timeout) to `fleet apply` while the interpreter node
    runs its probe: the other nodes had applied, and were left so (nothing reverted them) while that
    node failed and rolled itself back (or, with its probe passing, all stayed applied without a
    commit). Each node's write is undecided until the driver commits: with its heartbeat gone,
    the nodes decide abort and revert themselves; `fleet status` agrees. `upgraded`: patchkit
    changed on the nodes, so the run works on agents of its own, which died with their driver."""
    fleet.stock()
    before = [snapshot(tree) for tree in fleet.trees]
    source = Path(patchkit.__file__).parent / "base" / "enums.py"
    stamp = source.stat()
    if upgraded:
        assert fleet.run("status")[0].returncode in (0, 1)  # the named agents, started (or kept)
        os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000_000))
    try:
        driver, lib = fleet.slow_apply_started(f"killed-{fails}-{upgraded}", fails=fails)
        try:
            written = time.monotonic() + 3  # the two directory nodes apply; the interpreter node is in its 4 s probe
            while time.monotonic() < written and any(
                snapshot(t) == b for t, b in zip(fleet.trees, before, strict=True)
            ):
                time.sleep(0.1)
            assert [snapshot(tree) == stock for tree, stock in zip(fleet.trees, before, strict=True)] == [False] * 3
            driver.send_signal(signal.SIGKILL)
            driver.communicate(timeout=30)
        finally:
            driver.kill()
        deadline = time.monotonic() + LEASE + 30
        while time.monotonic() < deadline and [snapshot(tree) for tree in fleet.trees] != before:
            time.sleep(0.5)
        assert [snapshot(tree) for tree in fleet.trees] == before
    finally:
        os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    # after patchkit is as it was: named agents started under the replaced code would be retired by the
    # tests after this one, whose commands then ran on agents of their own (none named left to find)
    done, status = fleet.run("status", "--patches", lib)
    assert done.returncode == 0 and {n["state"] for n in status["nodes"]} == {"not-applied"}, done.stdout


def written_by(fleet, driver: subprocess.Popen, before: list) -> None:
    """Every node's tree written (the directory nodes applied, the interpreter node in its probe)."""
    written = time.monotonic() + 3
    while time.monotonic() < written and any(snapshot(t) == b for t, b in zip(fleet.trees, before, strict=True)):
        time.sleep(0.1)
    assert [snapshot(tree) == stock for tree, stock in zip(fleet.trees, before, strict=True)] == [False] * 3


def test_a_driver_stopped_in_phase_two_past_the_lease_still_commits(fleet):
    """fleet29: a driver stopped (SIGSTOP: Ctrl-Z, a swap storm, a starved machine) for longer
    than the lease lost its commit: its heartbeat thread stopped with it, the nodes gave up and
    rolled back (exit 4, safe, and spurious). A keeper Ray ends with the driver's process beats
    for it while it is stopped: resumed, it commits. (A driver killed still leaves every node
    stock: test_a_driver_killed_in_phase_two_leaves_every_node_stock_and_status_says_so.)"""
    fleet.stock()
    before = [snapshot(tree) for tree in fleet.trees]
    driver, lib = fleet.slow_apply_started("stopped")
    try:
        written_by(fleet, driver, before)
        driver.send_signal(signal.SIGSTOP)
        time.sleep(LEASE + 8)
        driver.send_signal(signal.SIGCONT)
        stdout, _ = driver.communicate(timeout=120)
    finally:
        driver.send_signal(signal.SIGCONT)
        driver.kill()
    assert driver.returncode == 0, stdout
    assert {n["state"] for n in json.loads(stdout)["nodes"]} == {"applied"}
    assert [snapshot(tree) != stock for tree, stock in zip(fleet.trees, before, strict=True)] == [True] * 3
    done, after = fleet.run("revert", "--patches", lib)
    assert done.returncode == 0 and after["state"] == "reverted"
    assert [snapshot(tree) for tree in fleet.trees] == before


def test_a_second_fleet_apply_beside_an_undecided_one_refuses_in_bounded_time_and_the_first_commits(fleet):
    """fleet29: a second `fleet apply` while the first's writes are undecided (its driver stopped,
    and held by its keeper): the second's steps waited for the first's decision up to --timeout
    (600 s), or, where the first's driver was given up on, ran on the nodes it rolled back. It
    refuses within the lease and a few seconds, exit 4, writing nothing and naming the first's
    driver; the first, resumed, commits on every node."""
    fleet.stock()
    before = [snapshot(tree) for tree in fleet.trees]
    first, lib = fleet.slow_apply_started("first-of-two")
    try:
        written_by(fleet, first, before)
        first.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        second, document = fleet.run("apply", "--patches", lib)
        took = time.monotonic() - started
        first.send_signal(signal.SIGCONT)
        stdout, _ = first.communicate(timeout=120)
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
    assert second.returncode == 4 and "another fleet apply is under way" in document["error"], second.stdout
    assert took < LEASE + 45, took
    assert document["phase"] == "prepare" and f"pid {first.pid}" in second.stdout
    assert "let the other fleet apply end" in document["hint"]
    assert first.returncode == 0 and {n["state"] for n in json.loads(stdout)["nodes"]} == {"applied"}, stdout
    done, after = fleet.run("revert", "--patches", lib)
    assert done.returncode == 0 and after["state"] == "reverted"
    assert [snapshot(tree) for tree in fleet.trees] == before


def test_sigterm_as_the_driver_disconnects_is_absorbed_and_the_document_printed(fleet):
    """The nodes all applied, the driver disconnecting from Ray (ray.shutdown, a few hundred ms; made
    slow here): a SIGTERM then ended it at once, exit 143 and no document, though every node was
    applied. The handlers stay until Ray is shut down and the result is shown."""
    fleet.stock()
    lib = fleet.library("disconnect", {SPEC: patched_spec()})
    before = [snapshot(tree) for tree in fleet.trees]
    marker = fleet.base / "shutdown.mark"
    marker.unlink(missing_ok=True)
    slow_shutdown = textwrap.dedent(f"""
        import pathlib, sys, time, ray
        real = ray.shutdown
        def shutdown(*args, **kwargs):
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(3)
            return real(*args, **kwargs)
        ray.shutdown = shutdown
        from patchkit.cli.main import main
        sys.argv = ["patchkit", *sys.argv[1:]]
        main()
        """)
    argv = [sys.executable, "-c", slow_shutdown, "fleet", "apply", "--address", fleet.cluster.address]
    driver = subprocess.Popen([*argv, "--patches", str(lib), "--format", "json"], stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(marker, driver, seconds=120)
        driver.send_signal(signal.SIGTERM)
        stdout, _ = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 0, stdout
    assert {n["state"] for n in json.loads(stdout)["nodes"]} == {"applied"}
    done, after = fleet.run("revert", "--patches", lib)
    assert done.returncode == 0 and after["state"] == "reverted"
    assert [snapshot(tree) for tree in fleet.trees] == before


def test_a_second_command_while_an_apply_runs_waits_for_it_and_stops_nothing(fleet):
    """`fleet status` while a `fleet apply` is in its slow import probe: the status's steps wait
    behind the apply's on that node's agent (one step at a time); neither is lost or cut short."""
    fleet.stock()
    apply, lib = fleet.slow_apply_started("slow-again")
    try:
        status, during = fleet.run("status", "--patches", lib)
        applied, _ = apply.communicate(timeout=120)
    finally:
        apply.kill()
    assert apply.returncode == 0, applied
    assert {n["state"] for n in json.loads(applied)["nodes"]} == {"applied"}
    assert status.returncode in (0, 1) and not {"lost", "timed-out", "error"} & {n["state"] for n in during["nodes"]}
    assert by_target(during)[str(fleet.trees[2])]["state"] == "applied"  # it waited for the apply there
    done, after = fleet.run("revert", "--patches", lib)
    assert done.returncode == 0 and after["state"] == "reverted"


def test_a_node_removed_mid_run_is_reported_lost(fleet):
    """A fourth node whose interpreter takes its time to answer: removed while its task runs."""
    fleet.stock()
    lib = fleet.library("plain", {SPEC: patched_spec()})
    started = fleet.base / "slow-python.started"
    started.unlink(missing_ok=True)
    slow_python = fleet.base / "slow-python"
    slow_python.write_text(f'#!/bin/sh\ntouch "{started}"\nsleep 15\nexec "{fleet.python}" "$@"\n')
    slow_python.chmod(0o755)
    node = fleet.cluster.add_node(num_cpus=1, env_vars=fleet.node_env(PATCHKIT_PYTHON=str(slow_python)))
    fleet.cluster.wait_for_nodes()
    argv = [sys.executable, "-m", "patchkit", "fleet", "status", "--address", fleet.cluster.address]
    driver = subprocess.Popen(
        [*argv, "--patches", str(lib), "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(started, driver, seconds=120)
        fleet.cluster.remove_node(node)
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 4, stderr
    assert "Traceback" not in stderr
    document = json.loads(stdout)
    lost = [n for n in document["nodes"] if n["state"] == "lost"]
    assert len(lost) == 1 and lost[0]["node_id"] == node.node_id, document["nodes"]
    assert lost[0]["node_id"][:12] in document["error"]
    assert document["state"] == "mixed"


def agent_pids(fleet) -> dict[str, int | None]:
    """Each node's patchkit agent: its pid, None where none runs (asked from a driver of our own)."""
    code = textwrap.dedent("""
        import json, sys, ray
        ray.init(address=sys.argv[1], namespace="patchkit", log_to_driver=False, logging_level="ERROR")
        found = {}
        for n in ray.nodes():
            if not n["Alive"]:
                continue
            try:
                agent = ray.get_actor("agent-" + n["NodeID"])
                found[n["NodeID"]] = ray.get(agent.claim.remote("test", 0), timeout=30)["pid"]
            except ValueError:
                found[n["NodeID"]] = None
            except ray.exceptions.RayActorError:  # ending as the test looks
                found[n["NodeID"]] = None
        print(json.dumps(found))
        """)
    done = subprocess.run(
        [sys.executable, "-c", code, fleet.cluster.address], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_agents_stay_for_the_next_command_and_keep_alive_0_ends_them(fleet):
    fleet.stock()
    lib = fleet.library("plain", {SPEC: patched_spec()})
    assert fleet.run("status", "--patches", lib)[0].returncode == 0
    first = agent_pids(fleet)
    assert None not in first.values() and len(set(first.values())) == 3
    assert fleet.run("status", "--patches", lib, "--keep-alive", "0")[0].returncode == 0
    deadline = time.monotonic() + 30
    while any(agent_pids(fleet).values()):
        assert time.monotonic() < deadline, "the agents did not end"
        time.sleep(0.5)
    done, document = fleet.run("status", "--patches", lib)  # cold again: new agents, same answer
    assert done.returncode == 0 and document["state"] == "not-applied"
    again = agent_pids(fleet)
    assert None not in again.values() and not set(again.values()) & set(first.values())


class SlowNode:
    """A fourth node whose target interpreter first sleeps as many seconds as `delay` says."""

    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self.delay_file = fleet.base / "slow-node-delay"
        self.started = fleet.base / "slow-node-started"
        self.delay(0)
        python = fleet.base / "slow-node-python"
        python.write_text(
            f'#!/bin/sh\nd="$(cat {self.delay_file})"\ntouch {self.started}\nsleep "$d"\nexec "{fleet.python}" "$@"\n'
        )
        python.chmod(0o755)
        self.node = fleet.cluster.add_node(num_cpus=1, env_vars=fleet.node_env(PATCHKIT_PYTHON=str(python)))
        fleet.cluster.wait_for_nodes()
        self.node_id = self.node.node_id

    def delay(self, seconds: float) -> None:
        """The next step here sleeps `seconds` first (and marks when it starts to)."""
        self.started.unlink(missing_ok=True)
        self.delay_file.write_text(f"{seconds}\n")

    def slow_step_started(self, command: subprocess.Popen) -> None:
        """Returns once `command`'s step on this node is in its sleep; later steps sleep no more."""
        _wait_for(self.started, command, seconds=120)
        self.delay(0)

    def row(self, document: dict) -> dict:
        return next(n for n in document["nodes"] if n["node_id"] == self.node_id)

    def others(self, document: dict) -> set[str]:
        return {n["state"] for n in document["nodes"] if n["node_id"] != self.node_id}


@pytest.fixture
def slow_node(fleet):
    fleet.stock()
    node = SlowNode(fleet)
    yield node
    fleet.cluster.remove_node(node.node)


def fleet_status_started(fleet, *args: object) -> subprocess.Popen:
    argv = [sys.executable, "-m", "patchkit", "fleet", "status", "--address", fleet.cluster.address]
    return subprocess.Popen([*argv, "--format", "json", *map(str, args)], stdout=subprocess.PIPE, text=True)


def test_a_node_past_the_time_limit_is_timed_out_and_its_agent_ended(fleet, slow_node):
    """--timeout 3 on the node that takes 60 s: reported, and its agent (running only that step) ended."""
    lib = fleet.library("plain", {SPEC: patched_spec()})
    slow_node.delay(60)
    started = time.monotonic()
    done, document = fleet.run("status", "--patches", lib, "--timeout", "3")
    assert time.monotonic() - started < 45
    assert_clean_failure(done, 4)
    row = slow_node.row(document)
    assert row["state"] == "timed-out" and "no answer within 3 s" in row["detail"]
    assert slow_node.others(document) == {"not-applied"}
    assert agent_pids(fleet)[slow_node.node_id] is None


def test_a_step_past_its_time_limit_is_not_ended_while_another_commands_step_waits(fleet, slow_node):
    """Command 1's step on the slow node outlives its --timeout 3 (+10 s) while command 2's step waits
    behind it: ending the agent would fail command 2's, so it runs on, and command 2 is answered."""
    lib = fleet.library("plain", {SPEC: patched_spec()})
    slow_node.delay(20)  # past the 3 s and the driver's 10 s for scheduling
    first = fleet_status_started(fleet, "--patches", lib, "--timeout", "3")
    try:
        slow_node.slow_step_started(first)
        done, second = fleet.run("status", "--patches", lib, "--timeout", "120")
        stdout, _ = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 4 and slow_node.row(json.loads(stdout))["state"] == "timed-out"
    assert done.returncode == 0, second
    assert slow_node.row(second)["state"] == "not-applied" and slow_node.others(second) == {"not-applied"}


def test_an_agent_running_replaced_code_is_retired_not_killed_under_a_running_step(fleet, slow_node):
    """patchkit changes on the nodes (a source file's mtime, as an upgrade would) while command 1's
    step runs: command 2 gets agents of its own; command 1's step is not cut short."""
    lib = fleet.library("plain", {SPEC: patched_spec()})
    assert fleet.run("status", "--patches", lib)[0].returncode == 0  # the named agents, started
    before = agent_pids(fleet)
    source = Path(patchkit.__file__).parent / "base" / "enums.py"
    stamp = source.stat()
    slow_node.delay(8)
    first = fleet_status_started(fleet, "--patches", lib)
    try:
        slow_node.slow_step_started(first)
        os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000_000))
        done, second = fleet.run("status", "--patches", lib)
        stdout, _ = first.communicate(timeout=120)
    finally:
        os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        first.kill()
    assert done.returncode == 0 and second["state"] == "not-applied", second
    assert first.returncode == 0 and json.loads(stdout)["state"] == "not-applied", stdout
    deadline = time.monotonic() + 30
    while any(pid in before.values() for pid in agent_pids(fleet).values() if pid):  # retired ones end once idle
        assert time.monotonic() < deadline, "a retired agent did not end"
        time.sleep(0.5)


def test_no_cluster_to_connect_to_is_exit_4():
    done = run_cli("fleet", "status", "--address", "127.0.0.1:9")
    assert_clean_failure(done, 4)
    assert "cannot connect to the Ray cluster at 127.0.0.1:9" in done.stderr


def test_the_agents_class_name_is_the_one_ray_list_actors_filters_on():
    """docs/fleets.md: `ray list actors --filter "class_name=RayAgent"` shows the agents. Ray's filter
    matches the whole name, and it named the class by its __qualname__, agent_class.<locals>.RayAgent."""
    import ray

    from patchkit.fleet.cluster import agent_class

    assert agent_class(ray).__ray_metadata__.class_name == "RayAgent"


def _wait_for(path: Path, process: subprocess.Popen, *, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, f"fleet ended first: {process.returncode}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.release
def test_real_0_16_0_and_0_17_0_files_on_three_nodes(fleet):
    """The eagle3 library on stock files of two real releases (patchkit fetch): each node its release's series."""
    for tree, version in zip(fleet.trees, ("0.16.0", "0.17.0", "0.17.0"), strict=True):
        shutil.rmtree(tree, ignore_errors=True)
        done = run_cli("fetch", version, "--dest", tree)
        assert done.returncode == 0, done.stderr
    before = [snapshot(tree) for tree in fleet.trees]
    done, applied = fleet.run("apply", "--no-import")
    assert done.returncode == 0, done.stderr
    assert {n["target"]: n["vllm_version"] for n in applied["nodes"]} == {
        str(fleet.trees[0]): "0.16.0",
        str(fleet.trees[1]): "0.17.0",
        str(fleet.trees[2]): "0.17.0",
    }
    done, verified = fleet.run("verify", "--no-import")
    assert (done.returncode, verified["state"]) == (0, "applied"), done.stderr
    done, _ = fleet.run("revert")
    assert done.returncode == 0, done.stderr
    assert [snapshot(tree) for tree in fleet.trees] == before


# --- several sets (issue 23) ----------------------------------------------------------------------

MODEL = "vllm/tool_parsers/demo_tool_parser.py"  # the `model` set's file: imports on its own
PARSER = "def parse(text):\n    return text\n"


def two_sets(fleet, model_text: str) -> Path:
    """Every node's tree stock, with a file of `model`'s own; a library of `spec` (spec.py) and
    `model` (that file), in that order."""
    fleet.stock(files={SPEC: SPEC_PY, "vllm/models/model.py": MODEL_PY, MODEL: PARSER})
    scratch = fleet.base / "scratch"
    scratch.mkdir(exist_ok=True)
    root = fleet.base / "libraries" / "several"
    shutil.rmtree(root, ignore_errors=True)
    write_library(root, {"0.16.0": [make_patch(scratch, fleet.trees[0], {SPEC: patched_spec()})]}, name="spec")
    write_library(root, {"0.16.0": [make_patch(scratch, fleet.trees[0], {MODEL: model_text})]}, name="model")
    (root / "library.toml").write_text('order = ["spec", "model"]\n')
    return root


def set_states(document: dict, state: str) -> bool:
    return all(
        n["sets"] == [{"set": "spec", "state": state}, {"set": "model", "state": state}] for n in document["nodes"]
    )


def test_several_sets_each_node_applies_reports_and_reverts_every_set(fleet):
    lib = two_sets(fleet, PARSER.replace("text\n", "text.strip()\n"))
    before = [snapshot(tree) for tree in fleet.trees]

    done, status = fleet.run("status", "--patches", lib)
    assert done.returncode == 0, done.stderr
    assert status["state"] == "not-applied" and set_states(status, "not-applied")
    assert {n["vllm_version"] for n in status["nodes"]} == {"0.16.0"}

    done, applied = fleet.run("apply", "--patches", lib)
    assert (done.returncode, applied["state"], applied["phase"]) == (0, "applied", "apply"), done.stderr
    assert set_states(applied, "applied")
    assert all(
        (t / SPEC).read_text() == patched_spec() and (t / MODEL).read_text().endswith("strip()\n") for t in fleet.trees
    )

    done, status = fleet.run("status", "--patches", lib)
    assert (done.returncode, status["state"]) == (0, "applied"), [(n["sets"], n["detail"]) for n in status["nodes"]]
    assert set_states(status, "applied")
    done, verified = fleet.run("verify", "--patches", lib)
    assert (done.returncode, verified["state"]) == (0, "applied"), done.stderr
    text = run_cli("fleet", "status", "--address", fleet.cluster.address, "--patches", lib)
    assert text.stdout.splitlines()[1].split() == ["node", "ip", "target", "vLLM", "state", "sets", "detail"]
    assert sum("spec applied, model applied" in line for line in text.stdout.splitlines()) == 3

    done, reverted = fleet.run("revert", "--patches", lib)
    assert (done.returncode, reverted["state"]) == (0, "reverted"), done.stderr
    assert [snapshot(tree) for tree in fleet.trees] == before


def test_several_sets_a_node_failing_at_its_second_set_rolls_every_set_back(fleet):
    """The interpreter node's probe imports model.py, which raises: phase 2 fails there after its
    `spec` set was applied; every node's sets, and that node's `spec`, are reverted."""
    lib = two_sets(fleet, PARSER.replace("def parse", 'raise RuntimeError("this build cannot load")\ndef parse'))
    before = [snapshot(tree) for tree in fleet.trees]

    done, document = fleet.run("apply", "--patches", lib)
    assert_clean_failure(done, 1)
    assert document["phase"] == "rolled-back", document
    nodes = by_target(document)
    failed = nodes[str(fleet.trees[2])]
    assert failed["state"] == "check-failed" and "this build cannot load" in failed["detail"], failed
    assert "the sets it applied before were reverted" in failed["detail"]
    assert all(nodes[str(tree)]["state"] == "rolled-back" for tree in fleet.trees[:2])
    assert [snapshot(tree) for tree in fleet.trees] == before


# --- review 12a -------------------------------------------------------------------------------------


def test_a_node_upgraded_under_its_record_is_said_with_the_guard_and_fleet_apply_repairs_it(fleet):
    """Review 12a H1: one node's vLLM replaced by another release (as pip upgrades it) under an
    applied record: its guard refuses every launch. `fleet status` said only "not-applied" (no guard,
    no fix), and `fleet apply` refused it in phase 1 for ever, though `patchkit apply` repairs it."""
    fleet.stock()
    lib = fleet.library("upgrade", {SPEC: patched_spec()}, releases=("0.16.0", "0.17.0"))
    done, _ = fleet.run("apply", "--patches", lib, "--no-import")
    assert done.returncode == 0, done.stderr
    upgraded = fleet.trees[1]
    shutil.rmtree(upgraded / "vllm")
    shutil.rmtree(upgraded / "vllm-0.16.0.dist-info")
    write_tree(upgraded, "0.17.0")
    alone = run_cli("status", "--target", upgraded, "--patches", lib, "--format", "json")
    assert alone.returncode == 1 and json.loads(alone.stdout)["guard"]["refuses"]

    done, status = fleet.run("status", "--patches", lib)
    assert_clean_failure(done, 1)
    row = by_target(status)[str(upgraded)]
    assert "the launch guard refuses this tree: vLLM 0.17.0 is installed" in row["detail"], row
    assert f"`patchkit apply --target {upgraded}" in row["hint"] and row["hint"] in status["hint"]
    assert row["hint"] == json.loads(alone.stdout)["guard"]["fix"]

    done, applied = fleet.run("apply", "--patches", lib, "--no-import")
    assert (done.returncode, applied["phase"]) == (0, "apply"), (done.stderr, applied["nodes"])
    assert by_target(applied)[str(upgraded)]["state"] == "applied"
    done, status = fleet.run("status", "--patches", lib)
    assert (done.returncode, status["state"]) == (0, "applied"), status["nodes"]
    assert run_cli("status", "--target", upgraded, "--patches", lib).returncode == 0  # the guard lets it launch
    done, _ = fleet.run("revert", "--patches", lib)
    assert done.returncode == 0, done.stderr


def test_an_agent_frozen_in_phase_two_is_ended_and_its_node_never_said_reverted(fleet):
    """Review 12a M1: the interpreter node's agent stopped (SIGSTOP: a paused VM, a swap storm) in
    phase 2 answered no give-up, so it was left, to finish its step once resumed, after the driver
    had said "every node this run wrote was reverted". It is ended, and its node named as not known
    to be reverted, with what to run there."""
    fleet.stock()
    _, status = fleet.run("status")  # the named agents, started
    frozen = by_target(status)[str(fleet.trees[2])]["node_id"]
    pid = agent_pids(fleet)[frozen]
    driver, _ = fleet.slow_apply_started("frozen", "--timeout", "3")
    try:
        os.kill(pid, signal.SIGSTOP)
        stdout, _ = driver.communicate(timeout=120)
        deadline = time.monotonic() + 30
        while _alive(pid):
            assert time.monotonic() < deadline, "the frozen agent was not ended"
            time.sleep(0.2)
    finally:
        driver.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    document = json.loads(stdout)
    assert driver.returncode == 4, stdout
    assert "every node this run wrote was reverted" not in document["error"]
    assert "not known to be reverted" in document["error"] and frozen[:12] in document["error"]
    row = by_target(document)[str(fleet.trees[2])]
    assert row["state"] == "timed-out" and row["written"] is None
    assert f"`patchkit status --target {fleet.trees[2]} --set demo`" in row["hint"] and row["hint"] in document["hint"]
    assert {by_target(document)[str(t)]["state"] for t in fleet.trees[:2]} == {"rolled-back"}


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_an_agent_frozen_before_a_status_is_ended_and_the_next_command_answers(fleet):
    """Review 12b L1: an agent frozen (SIGSTOP) outside apply's phase 2 answered no claim and was
    left: every later command said its node `lost` (ActorUnavailableError) with "rerun once it is",
    which never helped. Given up on, it is ended, and the rerun the hint names does answer."""
    fleet.stock()
    _, status = fleet.run("status")  # the named agents, started
    frozen = by_target(status)[str(fleet.trees[1])]["node_id"]
    pid = agent_pids(fleet)[frozen]
    os.kill(pid, signal.SIGSTOP)
    try:
        done, document = fleet.run("status", "--timeout", "3")
        deadline = time.monotonic() + 30
        while _alive(pid):
            assert time.monotonic() < deadline, "the frozen agent was not ended"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert done.returncode == 4, done.stdout
    row = next(n for n in document["nodes"] if n["node_id"] == frozen)
    assert row["state"] in ("timed-out", "lost") and "run the same command again" in document["hint"]
    lib = fleet.library("plain", {SPEC: patched_spec()})
    again, document = fleet.run("status", "--patches", lib)
    assert again.returncode == 0, document
    assert {n["state"] for n in document["nodes"]} == {"not-applied"}
