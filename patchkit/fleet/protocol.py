"""The fleet's steps and its two-phase apply, over any Runner (Ray's in cluster.py; the tests'
fake nodes for a hundred). Nothing here knows Ray.

fleet apply, all or nothing:
  phase 1 (`prepare`): on every node, in parallel, the plan and the checks, no writes. Any refusal
    or a node lost: nothing is written anywhere.
  phase 2 (`apply`): on every node, in parallel. A node that fails (its own apply rolls itself
    back), is lost, or an interrupt (SIGTERM, Ctrl-C): every node this run wrote is reverted; one
    that cannot be is named with the command to run there."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

from patchkit.base import hints
from patchkit.base.enums import Outcome, TreeState
from patchkit.base.errors import INTERRUPTED, CheckFailed, PatchkitError, TargetError
from patchkit.base.options import Options
from patchkit.fleet import LEASE, ROLLED_BACK_BY_ITS_NODE
from patchkit.fleet.states import FleetPhase, NodeState

UNREACHABLE = (NodeState.LOST, NodeState.TIMED_OUT)  # the driver has no answer from the node: a cluster problem


class ClusterError(TargetError):
    """The cluster, not a tree: cannot connect, no node, a node lost or silent past the time limit (exit 4)."""


class Interrupted(PatchkitError):
    """SIGTERM, Ctrl-C or SIGHUP during a fleet run, after what had to be undone was undone: exit 128 +
    the signal's number, as patchkit's other commands."""

    exit_code = INTERRUPTED  # the class's (SIGINT's): never 1, which says a check failed

    def __init__(self, message: str, *, signum: int, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.exit_code = 128 + signum


@dataclass(frozen=True)
class Node:
    """One alive node of the Ray cluster."""

    node_id: str
    node_ip: str


@dataclass
class NodeReport:
    """One node's answer to one step (or the driver's note that none came)."""

    node: Node
    state: str
    ok: bool
    detail: str = ""
    target: str | None = None
    vllm_version: str | None = None
    set_name: str | None = None
    series: str | None = None
    exit_code: int | None = None
    found_by: str | None = None
    document: dict[str, Any] | None = None
    # fleet apply: this run wrote the node (and so reverts it on failure); None: not known (no answer came)
    written: bool | None = False
    hint: str | None = None  # the node's own fix, as its patchkit named it
    sets: list[dict[str, str]] = field(default_factory=list)  # several sets: each {"set", "state"}, in order

    def sets_in(self, state: str) -> list[str]:
        return [s["set"] for s in self.sets if s["state"] == state]

    @property
    def unreachable(self) -> bool:
        return self.state in UNREACHABLE

    @classmethod
    def from_node(cls, node: Node, summary: dict[str, Any]) -> NodeReport:
        odd = _wrongly_typed(summary)
        if odd:  # another patchkit's answer, or a damaged one: never let it decide anything
            detail = f"the node's patchkit answered with {odd} of the wrong type (another patchkit version?)"
            return cls(node, state=NodeState.ERROR, ok=False, detail=detail)
        return cls(
            node,
            state=str(summary.get("state")),
            ok=bool(summary.get("ok")),
            detail=str(summary.get("detail") or ""),
            target=summary.get("target"),
            vllm_version=summary.get("vllm_version"),
            set_name=summary.get("set"),
            series=summary.get("series"),
            exit_code=summary.get("exit_code"),
            found_by=summary.get("found_by"),
            document=summary.get("document"),
            sets=list(summary.get("sets") or []),
            hint=summary.get("hint"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node.node_id,
            "node_ip": self.node.node_ip,
            "state": self.state,
            "ok": self.ok,
            "detail": self.detail,
            "hint": self.hint,
            "target": self.target,
            "found_by": self.found_by,
            "vllm_version": self.vllm_version,
            "set": self.set_name,
            "sets": self.sets,
            "series": self.series,
            "exit_code": self.exit_code,
            "written": self.written,
            "document": self.document,
        }

    def named(self) -> str:
        return f"node {self.node.node_id[:12]} ({self.node.node_ip})"


@dataclass
class Batch:
    """A step's reports, one per node asked, in the order asked; `signum`: the signal (SIGTERM,
    Ctrl-C, SIGHUP) that came while it ran, if one did (the runner still waited for the nodes' answers)."""

    reports: list[NodeReport]
    signum: int | None = None


class Runner(Protocol):
    def run(self, step: str, nodes: list[Node], request: dict[str, Any]) -> Batch:
        """`step` on every node at once (node.run_step's summary each), under the request's time limit."""
        ...

    def decide(self, commit: bool) -> bool:
        """The decision on this run's apply, once, for every node (an apply stays undecided on its
        node until then: rolled back there if its driver goes silent first): whether `commit` stands."""
        ...


@dataclass
class FleetResult:
    """What the command shows: a row per node, and the error that decides the exit code."""

    action: str
    reports: list[NodeReport]
    error: PatchkitError | None = None
    phase: FleetPhase | None = None  # fleet apply only
    notes: list[str] = field(default_factory=list)

    outcome: Outcome = Outcome.OK  # the exit code is the error's (cli)

    @property
    def state(self) -> str:
        """The nodes' common state, or "mixed"."""
        states = {r.state for r in self.reports}
        return states.pop() if len(states) == 1 else NodeState.MIXED

    @property
    def versions(self) -> list[str]:
        return sorted({r.vllm_version for r in self.reports if r.vllm_version})


def run_each(runner: Runner, action: str, nodes: list[Node], request: dict[str, Any]) -> FleetResult:
    """status, verify or revert on every node: exit 4 for a node lost, 1 for a node that failed."""
    batch = runner.run(action, nodes, request)
    if action == "revert":
        _reverts_written(batch.reports, request)
    notes = _differing(batch.reports, request) if action == "status" else []
    return FleetResult(action, batch.reports, error=_verdict(action, batch, request), notes=notes)


def _differing(reports: list[NodeReport], request: dict[str, Any]) -> list[str]:
    """Nodes applied beside nodes not (a node added since, or a fleet apply whose driver and a
    node's agent were both killed before its commit): the fix, for the whole fleet."""
    states = {r.state for r in reports}
    if TreeState.APPLIED not in states or not states & {TreeState.NOT_APPLIED, TreeState.PARTIAL}:
        return []
    return [
        f"the nodes differ: {_fleet_command('apply', request)} applies the rest, "
        f"{_fleet_command('revert', request)} reverts every node"
    ]


def _reverts_written(reports: list[NodeReport], request: dict[str, Any]) -> None:
    """fleet revert's `written`: true where the node reverted; null where no answer came (its revert
    may have landed, or been cut short mid-commit: a frozen agent is ended), with the commands that
    find out and finish it (the node's patchkit recovers a cut-short revert from its journal first)."""
    for report in reports:
        report.written = None if report.unreachable else report.ok and report.state == Outcome.REVERTED
        if report.unreachable:
            report.hint = (
                f"its revert may have landed, in part or whole: {_fleet_command('status', request)} shows "
                f"where it stands; {_fleet_command('revert', request)} finishes it"
            )


def _fleet_command(verb: str, request: dict[str, Any]) -> str:
    """`patchkit fleet VERB` with this run's cluster address and the user's selection."""
    address = request.get("address")
    return hints.command(f"fleet {verb}", *(["--address", str(address)] if address else []))


def _verdict(action: str, batch: Batch, request: dict[str, Any]) -> PatchkitError | None:
    if batch.signum is not None:
        lost = [r for r in batch.reports if r.unreachable]
        return Interrupted(f"fleet {action} interrupted", signum=batch.signum, hint=_nodes_hint(lost))
    lost = [r for r in batch.reports if r.unreachable]
    if lost:
        return ClusterError(f"no answer from {_names(lost)}", hint=_nodes_hint(lost) or _lost_hint())
    busy = _busy(batch.reports, request)
    if busy:
        return busy
    failed = [r for r in batch.reports if not r.ok]
    if failed:
        return CheckFailed(
            f"fleet {action} failed on " + "; ".join(f"{r.named()}: {r.detail or r.state}" for r in failed),
            hint=_nodes_hint(failed),
        )
    return None


def fleet_apply(
    runner: Runner,
    nodes: list[Node],
    request: dict[str, Any],
    *,
    apply_flags: Iterable[str] = (),
    require_same_version: bool = False,
) -> FleetResult:
    """Phase 1 everywhere, then phase 2 everywhere, rolled back on any failure (see the module's doc)."""
    prepared = runner.run("prepare", nodes, request)
    refusal = _phase_one_refusal(prepared, request, require_same_version)
    if refusal is not None:
        for report in prepared.reports:
            if report.ok:
                report.detail = _not_written(report, refused_by_version=refusal.message.startswith(_MIXED))
        return FleetResult("apply", prepared.reports, error=refusal, phase=FleetPhase.PREPARE)
    written = runner.run("apply", nodes, {**request, "extra": list(apply_flags)})
    _carry_over(prepared.reports, written.reports)
    for report in written.reports:  # several sets: a node that failed at one keeps those before it applied
        report.written = report.state == Outcome.APPLIED or bool(report.sets_in(Outcome.APPLIED))
        report.written = None if report.unreachable else report.written  # its apply may have landed
    problem = _phase_two_problem(written, request) or _commit(runner)
    if problem is None:
        return FleetResult("apply", written.reports, phase=FleetPhase.APPLY)
    with suppress(ClusterError):  # unrecorded: each node aborts on its own once this run has ended
        runner.decide(commit=False)
    reverted = _roll_back(runner, written.reports, request, _undone_because(problem, written.reports))
    unknown = [r for r in written.reports if r.written is None]
    error = _rolled_back(problem, reverted, unknown, wrote=any(r.written for r in written.reports))
    return FleetResult("apply", written.reports, error=error, phase=FleetPhase.ROLLED_BACK)


def _commit(runner: Runner) -> PatchkitError | None:
    """The commit, once every node applied: None when it stands, else why not (the run rolls back)."""
    try:
        if runner.decide(commit=True):
            return None
    except ClusterError as error:  # not recorded: rolled back, so that no node keeps a write it may abort
        return error
    return ClusterError(  # this driver was stopped (SIGSTOP, a paused VM) past the nodes' lease
        f"phase 2: the nodes heard nothing from this run for {LEASE:g} s and gave up on it",
        hint="run it again, and let the driver run until it ends (its nodes give up on one stopped past --timeout + 60 s)",
    )


def _phase_one_refusal(prepared: Batch, request: dict[str, Any], require_same_version: bool) -> PatchkitError | None:
    if prepared.signum is not None:
        return Interrupted(
            "fleet apply interrupted in phase 1: nothing was written on any node", signum=prepared.signum
        )
    lost = [r for r in prepared.reports if r.unreachable]
    if lost:
        return ClusterError(
            f"phase 1: no answer from {_names(lost)}; nothing was written on any node", hint=_lost_hint()
        )
    busy = _busy(prepared.reports, request, "phase 1: ")
    if busy:
        busy.message += "; nothing was written on any node"
        return busy
    refused = [r for r in prepared.reports if not r.ok]
    if refused:
        reasons = "; ".join(f"{r.named()}: {r.detail or r.state}" for r in refused)
        return CheckFailed(f"phase 1 refused, nothing was written on any node: {reasons}", hint=_nodes_hint(refused))
    versions = {r.vllm_version for r in prepared.reports}
    if require_same_version and len(versions) > 1:
        which = ", ".join(f"{r.named()}: vLLM {r.vllm_version}" for r in prepared.reports)
        return CheckFailed(
            f"{_MIXED} ({which}); nothing was written (--require-same-version)",
            hint="bring every node to one vLLM release, or drop --require-same-version (each node then gets its own release's series)",
        )
    return None


_MIXED = "the nodes run different vLLM versions"


def _not_written(report: NodeReport, *, refused_by_version: bool) -> str:
    """A ready node's row when phase 1 refused: why nothing was written there (and what phase 2
    would have repaired, said before)."""
    why = f"{_MIXED} (--require-same-version)" if refused_by_version else "phase 1 refused on another node"
    return f"nothing written: {why}" + (f"; {report.detail}" if report.detail else "")


def _carry_over(prepared: list[NodeReport], written: list[NodeReport]) -> None:
    """apply's document does not repeat the target, version and set phase 1 found."""
    for before, after in zip(prepared, written, strict=True):
        after.target = after.target or before.target
        after.vllm_version = after.vllm_version or before.vllm_version
        after.set_name = after.set_name or before.set_name
        after.series = after.series or before.series
        after.found_by = after.found_by or before.found_by


_TEXT_FIELDS = ("target", "vllm_version", "set", "series", "found_by", "state", "detail", "hint")


def _wrongly_typed(summary: object) -> str:
    """The fields of a node's summary that are not of the type run_step writes ('' when none)."""
    if not isinstance(summary, dict):
        return "a summary that is not an object"
    odd = [k for k in _TEXT_FIELDS if summary.get(k) is not None and not isinstance(summary[k], str)]
    if summary.get("exit_code") is not None and type(summary["exit_code"]) is not int:
        odd.append("exit_code")
    if summary.get("document") is not None and not isinstance(summary["document"], dict):
        odd.append("document")
    sets = summary.get("sets")
    if sets is not None and not (
        isinstance(sets, list)
        and all(isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("set", "state")) for s in sets)
    ):
        odd.append("sets")
    return ", ".join(odd)


def _phase_two_problem(written: Batch, request: dict[str, Any]) -> PatchkitError | None:
    lost = [r for r in written.reports if r.unreachable]
    for report in lost:  # interrupted or not: whoever runs this must know what to check there
        report.detail = (
            f"{report.detail}; its apply may or may not have landed: on {report.node.node_ip} run "
            f"{_command('status', report)}, then {_command('revert', report)}"
        )
        report.hint = f"on {report.node.node_ip} run {_command('status', report)}, then {_command('revert', report)}"
    if written.signum is not None:
        return Interrupted("fleet apply interrupted in phase 2", signum=written.signum, hint=_nodes_hint(lost))
    if lost:
        return ClusterError(f"phase 2: no answer from {_names(lost)}", hint=_nodes_hint(lost))
    busy = _busy(written.reports, request, "phase 2: ")
    if busy:
        return busy
    failed = [r for r in written.reports if not r.ok]
    if failed:
        return CheckFailed(
            "phase 2 failed on " + "; ".join(f"{r.named()}: {r.detail or r.state}" for r in failed),
            hint=_nodes_hint(failed),
        )
    return None


def _undone_because(problem: PatchkitError, written: list[NodeReport]) -> str:
    """Why a node that applied was reverted, in its row."""
    if isinstance(problem, Interrupted):
        return "interrupted"
    if any(r.state == NodeState.BUSY for r in written):
        return "another fleet apply is under way on a node"
    if any(r.unreachable for r in written):
        return "a node did not answer"
    if any(not r.ok for r in written):
        return "another node failed"
    return "this run's commit did not stand"


def _roll_back(runner: Runner, written: list[NodeReport], request: dict[str, Any], why: str) -> list[NodeReport]:
    """Revert every node this run wrote (the set it wrote only); each report says how it ended.
    Returns the nodes that could not be reverted."""
    to_undo = [r for r in written if r.written]
    if not to_undo:
        return []
    reverts: dict[Node, list[tuple[str | None, NodeReport]]] = {}  # each node's set reverts, in order
    for request_for_set, nodes in _revert_requests(request, to_undo):
        for answer in runner.run("revert", nodes, request_for_set).reports:
            reverts.setdefault(answer.node, []).append((request_for_set.get("set_name"), answer))
    stuck = []
    for report in to_undo:
        answers = reverts.get(report.node)
        if not answers:  # no set name known: a plain revert would undo every set there
            report.state = NodeState.ROLLBACK_FAILED
            report.detail = (
                f"applied, its set unknown, so not reverted: on {report.node.node_ip} run {_command('status', report)}"
            )
            stuck.append(report)
        elif any(not _reverted(answer) for _, answer in answers):
            report.state, report.detail = NodeState.ROLLBACK_FAILED, _revert_failed(report, answers)
            stuck.append(report)
        elif report.ok:
            by_node = any(ROLLED_BACK_BY_ITS_NODE in answer.detail for _, answer in answers)
            report.state = NodeState.ROLLED_BACK
            report.detail = (
                f"applied, then {ROLLED_BACK_BY_ITS_NODE}: no word from this run for {LEASE:g} s"
                if by_node
                else f"applied, then reverted: {why}"
            )
        elif _ROLLED_BACK_BEFORE not in report.detail:  # it failed at a later set: its failure stays its state
            report.detail += _ROLLED_BACK_BEFORE
        report.sets = _sets_after(report.sets, answers or [])
    return stuck


def _sets_after(sets: list[dict[str, str]], answers: list[tuple[str | None, NodeReport]]) -> list[dict[str, str]]:
    """A node's sets once the rollback ran: each this run applied and reverted is rolled-back (its
    files stock again), never still said applied."""
    done = {name for name, answer in answers if _reverted(answer)}
    return [
        {**s, "state": str(NodeState.ROLLED_BACK)}
        if s["state"] == Outcome.APPLIED and (s["set"] in done or None in done)
        else s
        for s in sets
    ]


def _reverted(answer: NodeReport) -> bool:
    return answer.ok and answer.state == Outcome.REVERTED


def _revert_failed(report: NodeReport, answers: list[tuple[str | None, NodeReport]]) -> str:
    """What a node whose revert failed holds, and the revert of each set that failed there (never a
    plain revert: it would undo the sets the node had before this run too)."""
    failed = [(name or report.set_name, answer) for name, answer in answers if not _reverted(answer)]
    why = "; ".join(f"{name or 'its set'}: {answer.detail or answer.state}" for name, answer in failed)
    fixes = ", then ".join(_command("revert", report, name) for name, _ in failed)
    detail = f"applied, and the revert failed ({why}): on {report.node.node_ip} run {fixes}"
    done = [name for name, answer in answers if name and _reverted(answer)]
    if done:
        detail += f"; {', '.join(done)} reverted"
    kept = [f"{s['set']} ({s['state']})" for s in report.sets if s["state"] != Outcome.APPLIED]
    if kept:
        detail += f"; not applied by this run, left as it was: {', '.join(kept)}"
    return detail


_ROLLED_BACK_BEFORE = "; the sets it applied before were reverted"


def _revert_requests(request: dict[str, Any], written: list[NodeReport]) -> list[tuple[dict[str, Any], list[Node]]]:
    """Only the sets this run applied, on each node (a set the nodes had before stays): one revert
    request per set name the nodes reported (several sets: each the node applied, the last
    applied first), never a plain revert of every set."""
    if request.get("set_name") or request.get("adhoc"):
        return [({**request, "extra": []}, [r.node for r in written])]
    by_set: dict[str, list[Node]] = {}
    for report in written:
        for name in report.sets_in(Outcome.APPLIED) if report.sets else [report.set_name] if report.set_name else []:
            by_set.setdefault(name, []).append(report.node)
    # every node applied its sets in the library's order: reverted in the reverse of it
    return [({**request, "set_name": name, "extra": []}, nodes) for name, nodes in reversed(by_set.items())]


def _rolled_back(
    problem: PatchkitError, stuck: list[NodeReport], unknown: list[NodeReport], *, wrote: bool
) -> PatchkitError:
    """The error, and what became of the nodes written: reverted, NOT reverted, or not known to be
    (no answer came: its apply may land, or have landed); or none written."""
    if not stuck and not unknown and not wrote:
        problem.message += "; this run wrote on no node"
        return problem
    if not stuck and not unknown:
        problem.message += "; every node this run wrote was reverted"
        return problem
    if stuck:
        problem.message += f"; NOT reverted: {_names(stuck)} (each row says what to run there)"
        problem.hint = "; ".join(h for h in (_nodes_hint(stuck), problem.hint) if h)
    if unknown:
        which = ", ".join(r.named() for r in unknown)
        problem.message += f"; not known to be reverted: {which} (each row says what to run there)"
    return problem


def _command(action: str, report: NodeReport, set_name: str | None = None) -> str:
    """What to run on that node: its tree and the set this run applied there (`set_name`: that one)."""
    chosen = Options(target_dir=str(report.target) if report.target else None, set_name=set_name or report.set_name)
    return hints.command(action, chosen=chosen)


def _names(reports: list[NodeReport]) -> str:
    return ", ".join(f"{r.named()} ({r.state})" for r in reports)


def _nodes_hint(reports: list[NodeReport]) -> str | None:
    """Each failed node's own fix, named by its node (one said once when every node's is the same)."""
    hinted = [r for r in reports if r.hint]
    if len({r.hint for r in hinted}) == 1 and len(hinted) == len(reports) > 1:
        return f"on each node: {hinted[0].hint}"
    return "; ".join(f"{r.named()}: {r.hint}" for r in hinted) or None


def _busy(reports: list[NodeReport], request: dict[str, Any], where: str = "") -> ClusterError | None:
    """Nodes where another fleet apply's write is undecided (each row names its driver): a cluster
    in use, not a failed check; the fix is to let that run end."""
    busy = [r for r in reports if r.state == NodeState.BUSY]
    if not busy:
        return None
    return ClusterError(
        f"{where}another fleet apply is under way on {_names(busy)}",
        hint=f"let the other fleet apply end ({_fleet_command('status', request)} then shows the nodes settled), "
        "then run this again",
    )


def _lost_hint() -> str:
    return (
        "`ray status` shows whether each node is alive; once it is, run the same command again "
        "(a patchkit agent that died or stopped answering was ended: the next command starts a new one)"
    )
