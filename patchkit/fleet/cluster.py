"""Ray: the one module of patchkit that imports it. Connects to the cluster, lists its alive
nodes, and runs a step on each one at once, under a time limit, by the node's patchkit agent
(node.Agent: a detached actor pinned to the node by a hard node-affinity strategy, with num_cpus=0
so that a node whose CPUs are all taken by vLLM still runs it; it stays a few minutes for the next
command, then ends itself)."""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from patchkit.base import signals
from patchkit.base.errors import BadInput
from patchkit.fleet.node import (
    ABORT,
    AGENT_THREADS,
    COMMIT,
    CONTROL_THREADS,
    Agent,
    Heartbeat,
    PatchkitRun,
    beat_key,
    decision_key,
    recorded_revert,
    rolled_back_key,
)
from patchkit.fleet.protocol import Batch, ClusterError, Node, NodeReport
from patchkit.fleet.states import NodeState, RayFailure

if TYPE_CHECKING:  # pragma: no cover
    from ray import ObjectRef

_Method = TypeVar("_Method", bound=Callable[..., Any])

# not `pip install 'patchkit[ray]'`: the `patchkit` on PyPI is another project
INSTALL = "install Ray beside patchkit: `pip install ray` (pipx: `pipx inject vllm-patchkit ray`)"
NAMESPACE = "patchkit"  # the Ray namespace of the nodes' agents
POLL = 0.2  # seconds between looks at the tasks: a SIGTERM is acted on this soon
CONNECT_SECONDS = 60.0  # ray.init's time to join the cluster


def import_ray() -> ModuleType:
    try:
        # lazy: optional: the `ray` extra (the package and the node affinity the runner asks for)
        import ray.util.scheduling_strategies
    except ImportError:
        raise BadInput(
            "patchkit fleet needs Ray, which is not installed here",
            hint=f"{INSTALL} (the same Ray version as the cluster's)",
        ) from None
    return ray


@contextmanager
def connected(address: str | None, *, keep_alive: float, patchkit: PatchkitRun) -> Iterator[RayRunner]:
    """A runner on the Ray cluster at `address`, else $RAY_ADDRESS, else "auto" (a cluster this
    machine belongs to); never a new cluster of its own. While connected, SIGTERM, SIGINT and SIGHUP
    only set a flag the runner acts on (ray.init's own SIGTERM handler would exit at once, with nodes
    half written; a KeyboardInterrupt could land between two submissions), until Ray is shut down
    (the caller shows its result inside: a SIGTERM as it disconnects, its work done, exited 143
    with no document). The nodes' agents are released at the end, to stay `keep_alive` seconds
    for the next command. `patchkit` is what a node's agent runs each step with
    (cli.run_in_process, by reference)."""
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
    stop = Stop()
    previous = {number: signal.signal(number, stop.caught) for number in signals.HANDLED}
    runner = RayRunner(ray, stop, patchkit)
    try:
        yield runner
    finally:
        try:
            runner.release(keep_alive)
            ray.shutdown()  # a few hundred ms: a signal then would end a run whose work is done, silently
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


class Stop(threading.Event):
    """Set by a SIGTERM, SIGINT or SIGHUP while connected; `signum`: the first of them (the exit code
    is 128 + it, as for patchkit's other commands)."""

    signum: int | None = None

    def caught(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self.set()


def _init_within(ray: ModuleType, address: str, seconds: float) -> None:
    """ray.init, given `seconds`: a port that accepts connections but is no Ray cluster (the
    dashboard's 8265, say) makes it retry for ever. It runs on a daemon thread, so a run that gives
    up on it can still exit."""
    finished = threading.Event()
    failure: list[BaseException] = []

    def connect() -> None:
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level="ERROR",
                configure_logging=True,
            )
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


def agent_class(ray: ModuleType) -> Any:
    """node.Agent as a Ray actor class: its claims, releases and give-ups on threads of their own
    (a concurrency group), so that no number of waiting steps can hold them up. Any: Ray makes the
    actor's `.remote` methods at run time."""

    # ray.method(...)'s decorator only marks a method's concurrency group and returns it: typed so
    control: Callable[[_Method], _Method] = ray.method(concurrency_group="control")

    class RayAgent(Agent):
        def __init__(self, hold: float, patchkit: PatchkitRun) -> None:
            super().__init__(hold, patchkit, RayLedger(ray), ray.get_runtime_context().get_node_id())

        @control
        def claim(self, run: str, hold: float) -> dict[str, Any]:
            return super().claim(run, hold)

        @control
        def retire(self) -> None:
            super().retire()

        @control
        def give_up(self, ticket: str) -> dict[str, bool]:
            return super().give_up(ticket)

        @control
        def release(self, run: str, keep_alive: float) -> None:
            super().release(run, keep_alive)

        def end(self) -> None:
            """Ended as Ray ends an actor on purpose (os._exit would be logged as a crash on the node)."""
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    # Ray names an actor's class by its __qualname__ (agent_class.<locals>.RayAgent), and `ray list
    # actors --filter class_name=RayAgent` matches the whole name: the one docs/fleets.md shows.
    RayAgent.__qualname__ = "RayAgent"
    return ray.remote(concurrency_groups={"control": CONTROL_THREADS})(RayAgent)


def keeper_class(ray: ModuleType) -> Any:
    """node.Heartbeat as a Ray actor owned by the driver (not detached: Ray ends it when the
    driver's process ends), with num_cpus=0 so that a cluster whose CPUs are all taken runs it."""

    class HeartbeatKeeper:
        def __init__(self, run: str, seconds: float) -> None:
            self.heartbeat = Heartbeat(RayLedger(ray), run, "keeper", seconds)

        def stop(self) -> None:
            self.heartbeat.stop()

    HeartbeatKeeper.__qualname__ = "HeartbeatKeeper"
    return ray.remote(num_cpus=0, max_restarts=0)(HeartbeatKeeper)


class RayLedger:
    """node.Ledger in Ray's GCS key-value store (the agents' namespace): it outlives every driver and agent."""

    def __init__(self, ray: ModuleType) -> None:
        self.kv = ray.experimental.internal_kv  # imported by `import ray` (its worker keeps the GCS client there)

    def get(self, key: str) -> str | None:
        value = self.kv._internal_kv_get(key, namespace=NAMESPACE)
        return None if value is None else bytes(value).decode()

    def put(self, key: str, value: str) -> None:
        self.kv._internal_kv_put(key, value, overwrite=True, namespace=NAMESPACE)

    def put_new(self, key: str, value: str) -> str:
        if not self.kv._internal_kv_put(key, value, overwrite=False, namespace=NAMESPACE):  # True: it was there
            return value
        return self.get(key) or value

    def delete(self, key: str) -> None:
        self.kv._internal_kv_del(key, namespace=NAMESPACE)


class RayRunner:
    """protocol.Runner on a real cluster: each step on every node at once, by that node's agent
    (node.Agent: a detached actor named agent-<node id>, with num_cpus=0 and a hard affinity to
    the node, kept between commands). `stop` set (a signal): a step that writes (apply, revert)
    still waits for every node's answer, since what was written must be known to be undone; any
    other step stops waiting; no step but a revert starts."""

    WRITES = ("apply", "revert")

    def __init__(self, ray: ModuleType, stop: Stop, patchkit: PatchkitRun) -> None:
        self.ray = ray
        self.stop = stop
        self.patchkit = patchkit
        self.affinity = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        self.agent_class = agent_class(ray)
        self.run_id = uuid.uuid4().hex
        self.agents: dict[Node, Any] = {}  # the agent each node's steps go to
        self.held: list[Any] = []  # every agent this run claimed (released at the end)
        self.own: list[Any] = []  # the agents made for this run alone (released with no keep-alive)
        self.ledger = RayLedger(ray)
        self.beating: Heartbeat | None = None  # this process's heartbeat, once phase 2 begins
        self.keeper: Any = None  # the actor that beats beside it

    def alive_nodes(self) -> list[Node]:
        nodes = [Node(n["NodeID"], n.get("NodeManagerAddress", "?")) for n in self.ray.nodes() if n.get("Alive")]
        if not nodes:
            raise ClusterError("the Ray cluster has no alive node")
        return nodes

    def run(self, step: str, nodes: list[Node], request: dict[str, Any]) -> Batch:
        if self.stop.is_set() and step != "revert":  # a rollback still runs
            return Batch(
                [NodeReport(node, NodeState.NOT_RUN, False, "interrupted before this step") for node in nodes],
                self.stop.signum,
            )
        if step == "apply":  # the nodes' writes stay undecided until decide(): they hear from this run meanwhile
            self._beat(self._hold_seconds(request))
            request = {**request, "decides": True, "driver": f"{socket.gethostname()} pid {os.getpid()}"}
        # The step's time limit, and a little for scheduling (an agent starting on a busy node).
        deadline = time.monotonic() + float(request["timeout"]) + 10
        answers = self._hold_agents([n for n in nodes if n not in self.agents], request, deadline)
        hold = self._hold_seconds(request)
        tickets = {node: uuid.uuid4().hex for node in nodes if node in self.agents}
        pending = {
            self.agents[node].step.remote(self.run_id, hold, ticket, step, request): node
            for node, ticket in tickets.items()
        }
        while pending and time.monotonic() < deadline and (step in self.WRITES or not self.stop.is_set()):
            self._collect(pending, answers, deadline)
        for node in pending.values():
            answers[node] = self._unanswered(node, step, request)
            self._give_up(node, tickets[node], timed_out=answers[node].state == NodeState.TIMED_OUT)
        if step == "revert" and self.beating is not None:  # a rollback: a node may have rolled back on its own
            answers.update(
                {n: self._reverted_by_its_node(n, request) or answers[n] for n in nodes if not answers[n].ok}
            )
        return Batch([answers[node] for node in nodes], self.stop.signum)

    def _reverted_by_its_node(self, node: Node, request: dict[str, Any]) -> NodeReport | None:
        """This run's revert where the node rolled the run back itself (its nodes gave up on this
        driver, stopped past the lease) and its agent has ended since: the node's own revert, as
        its agent recorded it in the cluster's store (never "the revert failed" for a node reverted)."""
        try:
            recorded = self.ledger.get(rolled_back_key(self.run_id, node.node_id))
        except Exception:  # the GCS unreachable: the step's own answer stands
            return None
        answer = recorded_revert(recorded, request.get("set_name"))
        return None if answer is None else NodeReport.from_node(node, answer)

    def decide(self, commit: bool) -> bool:
        """This run's decision on its apply, written once for every node: whether `commit` stands
        (False: its nodes, silent past their lease, gave up on it first)."""
        wanted = COMMIT if commit else ABORT
        try:
            return self.ledger.put_new(decision_key(self.run_id), wanted) == wanted
        except Exception as exc:  # the GCS unreachable (Ray raises RpcError, ConnectionError...): the cluster's
            raise ClusterError(f"phase 2: cannot record this run's {wanted} in the Ray cluster: {_gist(exc)}") from None

    def _beat(self, seconds: float) -> None:
        """This run's heartbeat until it ends, the first before any node writes: from this process,
        and from a keeper beside it for at most `seconds` (it beats while this process is stopped,
        and dies with it: Ray ends the actors a driver owns once its process is gone)."""
        if self.beating is not None:
            return
        with suppress(Exception):  # none written: the nodes abort what they write, and the commit says so
            self.ledger.put(beat_key(self.run_id), "0")
        self.beating = Heartbeat(self.ledger, self.run_id, "driver")
        with suppress(Exception):  # none started: this process's own beats still hold the run while it runs
            self.keeper = keeper_class(self.ray).remote(self.run_id, seconds)

    def release(self, keep_alive: float) -> None:
        """Each agent this run held may end once `keep_alive` seconds have passed (0: now); the
        heartbeat ends (an apply left undecided is rolled back by its nodes)."""
        if self.keeper is not None:  # stopped first: none of its beats comes after the key is gone
            with suppress(Exception):  # not started yet, or gone: ended below all the same
                self.ray.wait([self.keeper.stop.remote()], timeout=KEEPER_STOP_SECONDS)
            self._end(self.keeper)
        if self.beating is not None:
            self.beating.stop()
            with suppress(Exception):  # the GCS unreachable: the nodes find the heartbeat stopped
                self.ledger.delete(beat_key(self.run_id))
        own = {id(agent) for agent in self.own}
        refs = [agent.release.remote(self.run_id, 0 if id(agent) in own else keep_alive) for agent in self.held]
        with suppress(Exception):  # an agent gone meanwhile has nothing to release
            self.ray.wait(refs, num_returns=len(refs), timeout=5)

    def _give_up(self, node: Node, ticket: str, *, timed_out: bool) -> None:
        """No more waiting for this node's step: if it has not started, it never will (a write
        reported as timed out must not land later). Our own step running past its time limit is
        stopped by ending the agent, as a subprocess past its time limit was killed, unless other
        commands' steps wait behind it (ending it would fail them): then it runs on. An agent that
        does not answer the give-up (frozen: SIGSTOP, a paused VM, a hung NFS call) is ended: once it
        resumed it would run our step, a write after its driver reported the run rolled back."""
        agent = self.agents.pop(node)
        try:
            seen = self.ray.get(agent.give_up.remote(ticket), timeout=GIVE_UP_SECONDS)
        except Exception:  # no answer: gone (the kill is harmless), or frozen (in any step, timed out or not)
            self._end(agent)
            return
        if timed_out and seen.get("running") and not seen.get("others_waiting"):
            self._end(agent)

    def _end(self, agent: Any) -> None:
        """End an agent given up on: one frozen (SIGSTOP) answers nothing, and left alive it would
        stand for its node in every later command (a claim unanswered, or ActorUnavailableError)."""
        if agent is not None:
            with suppress(Exception):  # gone already, or its node unreachable: nothing more to do here
                self.ray.kill(agent, no_restart=True)

    def _hold_agents(self, nodes: list[Node], request: dict[str, Any], deadline: float) -> dict[Node, NodeReport]:
        """Each node's agent, held for this run: its named agent (started where none runs); where
        that one runs replaced code, it is retired and this run gets one of its own. Returns the
        reports of the nodes that have none."""
        failed: dict[Node, NodeReport] = {}
        for attempt in range(AGENT_ATTEMPTS):
            claims = {self._claim(node, request): node for node in nodes}
            answers: dict[Node, NodeReport] = {}
            while claims and time.monotonic() < deadline and not self.stop.is_set():
                self._collect_claims(claims, answers, deadline, request)
            for node in claims.values():  # frozen, or never started: ended, so the next command starts another
                self._end(self.agents.pop(node, None))
                failed[node] = self._unanswered(node, "start", request, what="its patchkit agent")
            retry = [n for n, report in answers.items() if report.state == NodeState.ENDING]
            failed.update(
                {n: report for n, report in answers.items() if report.state != NodeState.ENDING and not report.ok}
            )
            nodes = retry
            if not nodes:
                break
            time.sleep(0.2 * (attempt + 1))  # an agent ending leaves its name to the next one
        for node in nodes:
            failed[node] = NodeReport(
                node, NodeState.ERROR, False, "its patchkit agent kept ending as it was asked to start"
            )
        return failed

    def _claim(self, node: Node, request: dict[str, Any], *, own: bool = False) -> ObjectRef[Any]:
        """Claim `node`'s named agent (made if none runs), or with `own` one for this run only (it
        ends once this run releases it). Each is detached: an apply it wrote stays undecided beyond
        a driver killed in phase 2, and only a living agent rolls it back (one sharing its
        driver's fate died with it, leaving its node applied beside nodes rolled back)."""
        hold = self._hold_seconds(request)
        named = {"name": f"agent-{node.node_id}", "namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True}
        if own:
            named = {"name": f"agent-{node.node_id}-{self.run_id[:12]}", "namespace": NAMESPACE, "lifetime": "detached"}
        agent = self.agent_class.options(
            **named,
            num_cpus=0,
            max_restarts=0,
            max_concurrency=AGENT_THREADS,
            scheduling_strategy=self.affinity(node_id=node.node_id, soft=False),
        ).remote(hold, self.patchkit)
        self.agents[node] = agent
        if own:
            self.own.append(agent)
        claimed: ObjectRef[Any] = agent.claim.remote(self.run_id, hold)  # an actor method's remote(): its ObjectRef
        return claimed

    def _collect_claims(
        self,
        claims: dict[ObjectRef[Any], Node],
        answers: dict[Node, NodeReport],
        deadline: float,
        request: dict[str, Any],
    ) -> None:
        timeout = max(0.0, min(POLL, deadline - time.monotonic()))
        ready, _ = self.ray.wait(list(claims), num_returns=len(claims), timeout=timeout)
        for ref in ready:
            node = claims.pop(ref)
            try:
                held = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:  # ended as asked (idle): the name is soon free
                answers[node] = self._failure(exc, node, self.agents.pop(node, None), claiming=True)
                continue
            if not isinstance(held, dict):
                answers[node] = NodeReport(
                    node, NodeState.ERROR, False, "its patchkit agent answered a claim with no object"
                )
            elif held.get("held") is True:
                self.held.append(self.agents[node])
                answers[node] = NodeReport(node, NodeState.HELD, True)
            elif held.get("current") is False:  # replaced code, or retired: retire it, take one of our own
                self.agents[node].retire.remote()
                claims[self._claim(node, request, own=True)] = node
            else:
                answers[node] = NodeReport(node, NodeState.ENDING, False)

    @staticmethod
    def _hold_seconds(request: dict[str, Any]) -> float:
        """How long an agent stays held without word from this run: a step's time limit and more."""
        return float(request["timeout"]) + 60

    def _unanswered(self, node: Node, step: str, request: dict[str, Any], what: str = "") -> NodeReport:
        if self.stop.is_set() and step not in self.WRITES:
            return NodeReport(node, NodeState.INTERRUPTED, False, "interrupted before its answer came")
        return NodeReport(
            node,
            NodeState.TIMED_OUT,
            False,
            f"no answer{' from ' + what if what else ''} within {request['timeout']:g} s",
        )

    def _collect(self, pending: dict[ObjectRef[Any], Node], answers: dict[Node, NodeReport], deadline: float) -> None:
        timeout = max(0.0, min(POLL, deadline - time.monotonic()))
        ready, _ = self.ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
        for ref in ready:
            node = pending.pop(ref)
            answers[node] = self._answer(ref, node)

    def _answer(self, ref: ObjectRef[Any], node: Node) -> NodeReport:
        try:
            return NodeReport.from_node(node, self.ray.get(ref))
        except self.ray.exceptions.RayError as exc:
            return self._failure(exc, node, self.agents.pop(node, None))

    def _failure(self, exc: BaseException, node: Node, agent: Any = None, *, claiming: bool = False) -> NodeReport:
        failure = ray_failure(exc, self.ray.exceptions.RayTaskError)
        if failure == RayFailure.NODE_LOST:  # died (the kill is harmless), or unreachable: frozen, say
            self._end(agent)
        if failure == RayFailure.AGENT_ENDED and claiming:  # ended as asked (idle): the name is soon free
            return NodeReport(node, NodeState.ENDING, False)
        if failure == RayFailure.PATCHKIT_FAILED:  # patchkit missing there?
            detail = f"patchkit failed on the node: {_gist(getattr(exc, 'cause', None) or exc)} (is patchkit installed in the Ray worker's environment?)"
            return NodeReport(node, NodeState.ERROR, False, detail)
        return NodeReport(
            node, NodeState.LOST, False, _gist(exc)
        )  # the node died, its agent crashed, it cannot be scheduled


AGENT_ATTEMPTS = 5
KEEPER_STOP_SECONDS = 2.0  # a heartbeat keeper stops at once (its creation may still be on its way)
GIVE_UP_SECONDS = 5.0  # an agent answers a give-up at once (on its control threads)


def ray_failure(exc: BaseException, task_error: type[BaseException]) -> RayFailure:
    """What a Ray error means for a node's step. Ray says two of them only in its text: an actor
    ended by ray.kill (the agent's idle end), and an actor whose creation task failed."""
    text = str(exc)
    if "ray.kill" in text:
        return RayFailure.AGENT_ENDED
    if isinstance(exc, task_error) or "creation task" in text:
        return RayFailure.PATCHKIT_FAILED
    return RayFailure.NODE_LOST


def _gist(exc: BaseException) -> str:
    """An exception in one line: its type and the first sentence of its text's last line (Ray's
    hold tracebacks, and its ActorDiedError ends in a paragraph of possible causes: OOM killer,
    `ray stop --force`, resource isolation...)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    said = SENTENCE_END.split(lines[-1], maxsplit=1)[0]
    said = said if len(said) <= GIST_CHARACTERS else said[: GIST_CHARACTERS - 1] + "…"
    return f"{type(exc).__name__}: {said}"


SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
GIST_CHARACTERS = 160  # a Ray error's one line in a node's row
