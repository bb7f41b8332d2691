"""Ray: the one module of patchkit that imports it. Connects to the cluster, lists its alive
nodes, and runs a step on each one at once (node.run_step, pinned to the node by a hard
node-affinity strategy with num_cpus=0, so that a node whose CPUs are all taken by vLLM still
runs it), under a time limit."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from patchkit.errors import BadInput
from patchkit.fleet.node import run_step
from patchkit.fleet.protocol import LOST, TIMED_OUT, Batch, ClusterError, Node, NodeReport

INSTALL = "pip install 'patchkit[ray]'"
POLL = 0.2  # seconds between looks at the tasks: a SIGTERM is acted on this soon
CONNECT_SECONDS = 60.0  # ray.init's time to join the cluster


def import_ray():
    try:
        import ray
    except ImportError:
        raise BadInput(
            "patchkit fleet needs Ray, which is not installed here",
            hint=f"{INSTALL} (the same Ray version as the cluster's)",
        ) from None
    return ray


@contextmanager
def connected(address: str | None) -> Iterator[RayRunner]:
    """A runner on the Ray cluster at `address`, else $RAY_ADDRESS, else "auto" (a cluster this
    machine belongs to); never a new cluster of its own. While connected, SIGTERM and SIGINT only
    set a flag the runner acts on (ray.init's own SIGTERM handler would exit at once, with nodes
    half written; a KeyboardInterrupt could land between two submissions)."""
    ray = import_ray()
    chosen = address or os.environ.get("RAY_ADDRESS") or "auto"
    try:
        _answers(chosen)
        _init_within(ray, chosen, CONNECT_SECONDS)
    except Exception as exc:  # Ray raises ConnectionError, ValueError, RuntimeError... for one cause
        raise ClusterError(
            f"cannot connect to the Ray cluster at {chosen}: {_gist(exc)}",
            hint="pass --address HOST:PORT (or set RAY_ADDRESS), or run on a node of the cluster",
        ) from None
    stop = threading.Event()
    previous = {number: signal.signal(number, lambda *_: stop.set()) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield RayRunner(ray, stop)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        ray.shutdown()


def _init_within(ray, address: str, seconds: float) -> None:
    """ray.init, given `seconds`: a port that accepts connections but is no Ray cluster (the
    dashboard's 8265, say) makes it retry for ever. It runs on a daemon thread, so a run that gives
    up on it can still exit."""
    finished = threading.Event()
    failure: list[BaseException] = []

    def connect() -> None:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=True)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            finished.set()

    threading.Thread(target=connect, name="patchkit-ray-init", daemon=True).start()
    if not finished.wait(seconds):
        raise TimeoutError(f"no Ray cluster answered there within {seconds:g} s (is it the GCS port, 6379 by default?)")
    if failure:
        raise failure[0]


def _answers(address: str, seconds: float = 10) -> None:
    """A HOST:PORT that nothing answers on fails here at once: ray.init would retry it for ever."""
    host, colon, port = address.rpartition(":")
    if not colon or "://" in address or not port.isdigit():
        return  # "auto", or a form Ray reads itself (ray://...)
    with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds):
        pass


class RayRunner:
    """protocol.Runner on a real cluster: one task per node, all at once. `stop` set (a signal):
    a step that writes (apply, revert) still waits for every node's answer, since what was
    written must be known to be undone; any other step stops waiting; no step but a revert starts."""

    WRITES = ("apply", "revert")

    def __init__(self, ray, stop: threading.Event) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray = ray
        self.stop = stop
        self.affinity = NodeAffinitySchedulingStrategy
        self.task = ray.remote(run_step)

    def alive_nodes(self) -> list[Node]:
        nodes = [Node(n["NodeID"], n.get("NodeManagerAddress", "?")) for n in self.ray.nodes() if n.get("Alive")]
        if not nodes:
            raise ClusterError("the Ray cluster has no alive node")
        return nodes

    def run(self, step: str, nodes: list[Node], request: dict[str, Any]) -> Batch:
        if self.stop.is_set() and step != "revert":  # a rollback still runs
            return Batch([NodeReport(node, "not-run", False, "interrupted before this step") for node in nodes], True)
        pending = {self._submit(step, node, request): node for node in nodes}
        # The node's own time limit is the request's; the driver allows for scheduling on top.
        deadline = time.monotonic() + float(request["timeout"]) + 10
        answers: dict[Node, NodeReport] = {}
        while pending and time.monotonic() < deadline and (step in self.WRITES or not self.stop.is_set()):
            self._collect(pending, answers, deadline)
        for node in pending.values():
            answers[node] = self._unanswered(node, step, request)
        return Batch([answers[node] for node in nodes], self.stop.is_set())

    def _unanswered(self, node: Node, step: str, request: dict[str, Any]) -> NodeReport:
        if self.stop.is_set() and step not in self.WRITES:
            return NodeReport(node, "interrupted", False, "interrupted before its answer came")
        return NodeReport(node, TIMED_OUT, False, f"no answer within {request['timeout']:g} s")

    def _submit(self, step: str, node: Node, request: dict[str, Any]):
        strategy = self.affinity(node_id=node.node_id, soft=False)
        return self.task.options(num_cpus=0, max_retries=0, scheduling_strategy=strategy).remote(step, request)

    def _collect(self, pending: dict, answers: dict[Node, NodeReport], deadline: float) -> None:
        timeout = max(0.0, min(POLL, deadline - time.monotonic()))
        ready, _ = self.ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
        for ref in ready:
            node = pending.pop(ref)
            answers[node] = self._answer(ref, node)

    def _answer(self, ref, node: Node) -> NodeReport:
        exceptions = self.ray.exceptions
        try:
            return NodeReport.from_node(node, self.ray.get(ref))
        except exceptions.RayTaskError as exc:  # the task itself raised: patchkit missing there?
            detail = f"the task failed on the node: {_gist(exc.cause or exc)} (is patchkit installed in the Ray worker's environment?)"
            return NodeReport(node, "error", False, detail)
        except exceptions.RayError as exc:  # the node died, its worker crashed, it cannot be scheduled
            return NodeReport(node, LOST, False, _gist(exc))


def _gist(exc: BaseException) -> str:
    """An exception in one line: its type and the last line of its text (Ray's hold tracebacks)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__
