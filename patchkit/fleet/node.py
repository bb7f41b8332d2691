"""What one node runs: patchkit's own CLI (`patchkit COMMAND --format json`), in the Ray worker's
process, against that node's vLLM; its JSON document summed up in a small dict the driver reads.
In the worker, not a subprocess: a fleet run's steps on a node share one interpreter that has
imported patchkit once (a subprocess per step cost a Python start and patchkit's imports, twice in
an apply). The driver enforces the time limit (past it, it ends the agent of a step of its own
unless another command's step waits there); an agent whose step runs far past it ends itself.
No Ray here: cluster.py makes Agent a Ray actor by reference, so patchkit must be installed in the
Ray worker's environment on every node.

The node's target: its own PATCHKIT_TARGET (a directory with vllm/) or PATCHKIT_PYTHON (an
interpreter), else the command line's --target/--python, else the interpreter running the Ray
worker (in a vLLM cluster, vLLM's environment)."""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from patchkit.base.enums import Outcome, TreeState
from patchkit.base.errors import few
from patchkit.base.fsutil import json_text, load_json_text
from patchkit.fetch.pipconfig import forget_settings
from patchkit.fleet import DEFAULT_TIME_LIMIT, HEARTBEAT, LEASE, ROLLED_BACK_BY_ITS_NODE
from patchkit.fleet.states import NodeState

# patchkit's command line run in this process: its arguments -> (exit code, stdout, stderr).
# The driver's command layer hands it over (cli.run_in_process): fleet sits below the CLI.
PatchkitRun = Callable[[list[str]], tuple[int, str, str]]

# The patchkit command line each step runs on a node. `prepare` is phase 1 of `fleet apply`: the
# plan and the checks on the contents apply would write (verify on an unpatched tree), no writes.
STEPS: dict[str, list[str]] = {
    "status": ["status"],
    "verify": ["verify"],
    "prepare": ["verify", "--no-import"],
    "apply": ["apply"],
    "revert": ["revert"],
    "dry-run": ["apply", "--dry-run"],  # a refusal's fix, in the words `patchkit apply` there says it
}


def target_arguments(request: dict[str, Any]) -> tuple[list[str], str]:
    """The target options for this node's patchkit, and what chose them."""
    for variable, option in (("PATCHKIT_TARGET", "--target"), ("PATCHKIT_PYTHON", "--python")):
        if os.environ.get(variable):
            return [option, os.environ[variable]], f"${variable} on the node"
    if request.get("target"):
        return ["--target", request["target"]], "--target"
    if request.get("python"):
        return ["--python", request["python"]], "--python"
    return ["--python", sys.executable], "the Ray worker's interpreter"


def command_line(step: str, request: dict[str, Any]) -> tuple[list[str], str]:
    """patchkit's arguments for this step on this node, and what chose the target."""
    target, found_by = target_arguments(request)
    return [*STEPS[step], "--format", "json", *target, *_options(request), *request.get("extra", [])], found_by


def _options(request: dict[str, Any]) -> list[str]:
    """The command line's version, library and set options, as the node's patchkit takes them."""
    options = []
    for key, option in (("vllm_version", "--vllm-version"), ("library", "--patches"), ("set_name", "--set")):
        if request.get(key):
            options += [option, str(request[key])]
    for path in request.get("adhoc") or []:
        options += ["--patch", str(path)]
    return options


def run_step(step: str, request: dict[str, Any], patchkit: PatchkitRun) -> dict[str, Any]:
    """One step on this node, by `patchkit` (cli.run_in_process): its summary (state, ok, detail,
    target, vllm_version...)."""
    args, found_by = command_line(step, request)
    code, stdout, stderr = patchkit(args)
    summary = summarize(step, _document(stdout), code, stderr)
    if step == "prepare" and summary["ok"]:
        summary.update(_unwritable(summary["document"]) or {})
    elif step == "prepare" and summary["detail"] == _PARTIAL_REFUSED:
        target = target_arguments(request)[0]
        summary["hint"] = "`" + shlex.join(["patchkit", "apply", *target, *_options(request)]) + "`"
    elif step == "prepare" and not summary["hint"] and summary["document"] is not None:
        # verify names a check's fix in its text only: the node's fix is what its apply would say
        summary["hint"] = (_document(patchkit(command_line("dry-run", request)[0])[1]) or {}).get("hint")
    return {**summary, "found_by": found_by}


def _document(stdout: str) -> dict[str, Any] | None:
    try:
        document = load_json_text(stdout)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def summarize(step: str, document: dict[str, Any] | None, code: int, stderr: str = "") -> dict[str, Any]:
    """A node's patchkit document as one row: its state (the tree's state for status and verify,
    the result for apply and revert), whether it passed, and why not."""
    if document is None:
        last = stderr.strip().splitlines()[-1:] or [f"exit code {code}"]
        return {"state": NodeState.ERROR, "ok": False, "detail": f"no JSON from patchkit: {last[0]}", "exit_code": code}
    state = document.get("result") or document.get("state") or (NodeState.ERROR if code else Outcome.OK)
    ok, detail = code == 0, _why(document) if code else ""
    if step == "prepare":
        state, ok, detail = _prepared(document, code, str(state), detail)
    if not ok and document.get("error") and state == NodeState.ERROR:
        state = NodeState.FAILED  # the node's patchkit answered with its error: `error` is for no answer
    elif not ok and state == TreeState.APPLIED and _drifted(document):
        state = NodeState.DRIFTED  # `patchkit status` there says FAILED, and the guard refuses: never `applied`
    parts = _set_parts(document)
    # status passes an uninstalled guard with a warning and its fix: so does the row (an apply that
    # leaves the guard refusing fails, exit 1: its row says why)
    unguarded = _guard_missing(document)
    return {
        "state": str(state),
        "ok": ok,
        "detail": detail or (unguarded[0] if unguarded else ""),
        "hint": (None if ok else _hint(document)) or (unguarded[1] if unguarded else None),
        "exit_code": code,
        "target": document.get("target"),
        "vllm_version": document.get("vllm_version"),
        "set": document.get("set"),
        "series": document.get("series"),
        "sets": [{"set": str(p.get("set")), "state": str(p.get("result") or p.get("state"))} for p in parts],
        "document": document,
    }


def _prepared(document: dict[str, Any], code: int, state: str, detail: str) -> tuple[str, bool, str]:
    """Phase 1's row: ready when verify passed, or when its only fault is one the apply of phase 2
    repairs (a record an upgrade made stale, the guard's refusal of it), as `patchkit apply` does
    on that tree; else refused, named as apply would end (conflict, check-failed, or the tree's
    state: partial, unsupported...). A partial set is refused though apply completes it: the
    rollback (revert --set) would leave it stock, not partial."""
    if code == 0:
        return NodeState.READY, True, ""
    if _apply_repairs(document):
        return NodeState.READY, True, f"{_guard_said(document)}: the apply repairs it"
    if _apply_completes(document):  # ready, a failure elsewhere would revert it to stock: not what it had
        return TreeState.PARTIAL, False, _PARTIAL_REFUSED
    parts = _set_parts(document) or [document]
    if any(p.get("state") == TreeState.NOT_APPLIED and _failed_checks(p) for p in parts):
        return Outcome.CHECK_FAILED, False, detail
    if any(_conflicting(p) for p in parts):
        return Outcome.CONFLICT, False, detail
    return state, False, detail


_PARTIAL_REFUSED = (
    "partial: a fleet apply's rollback would revert its set to stock, not back to what it holds; "
    "complete it with the apply on this node first (the hint)"
)


def _apply_repairs(document: dict[str, Any]) -> bool:
    """Whether verify failed only for what apply repairs: the guard refuses the tree, or a record is
    stale, while every set's patches are all applied or all not (no conflict, no partial tree), no
    patched file was edited, every check passed and the guard's fix is not a hand repair."""
    parts = _set_parts(document) or [document]
    if document.get("error") or not any(_guard_refuses(p) or p.get("stale") for p in parts):
        return False
    if any(isinstance(p.get("guard"), dict) and p["guard"].get("by_hand") for p in parts):
        return False  # a symlink or special file on the way: apply refuses to write through it
    return all(
        p.get("state") in (TreeState.APPLIED, TreeState.NOT_APPLIED, TreeState.UPSTREAM, TreeState.UNRECORDED)
        and not p.get("drifted")
        and not p.get("does_not_compile")
        and not p.get("error")
        and not _failed_checks(p)
        for p in parts
    )


def _apply_completes(document: dict[str, Any]) -> bool:
    """Whether verify failed only because a set is partial (status's verdict, exit 1) while every
    check passes as the apply of phase 2 would leave it: that apply completes the series."""
    parts = _set_parts(document) or [document]
    return (
        not document.get("error")
        # a partial set, or (several sets) chosen sets applied and not applied side by side
        and (document.get("state") == TreeState.PARTIAL or any(p.get("state") == TreeState.PARTIAL for p in parts))
        and all(p.get("ok") is not False or p.get("state") == TreeState.PARTIAL for p in parts)
        and all(
            not p.get("drifted") and not _guard_refuses(p) and not _failed_checks(p) and not _conflicting(p)
            for p in parts
        )
    )


def _conflicting(part: dict[str, Any]) -> bool:
    return any(isinstance(patch, dict) and patch.get("state") == Outcome.CONFLICT for patch in _patches(part))


def _guard_refuses(part: dict[str, Any]) -> list[str]:
    guard = part.get("guard")
    refuses = guard.get("refuses") if isinstance(guard, dict) else None
    return [str(r) for r in refuses] if isinstance(refuses, list) else []


def _guard_said(document: dict[str, Any]) -> str:
    """What the node's guard refuses (each set's, once), as status says it; else the stale records."""
    parts = _set_parts(document) or [document]
    refused = list(dict.fromkeys(r for p in parts for r in _guard_refuses(p)))
    if refused:
        return "the launch guard refuses this tree: " + few(refused)
    stale = [str(s) for p in parts for s in _listed(p.get("stale"))]
    return "stale record: " + "; ".join(dict.fromkeys(stale))


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _guard_missing(document: dict[str, Any]) -> tuple[str, str | None] | None:
    """The warning status gives when the guard an apply installed no longer loads, and its fix."""
    for part in _set_parts(document) or [document]:
        guard = part.get("guard")
        if isinstance(guard, dict) and isinstance(guard.get("missing"), str) and guard["missing"]:
            fix = guard.get("missing_fix")
            return f"warning: {guard['missing']}", fix if isinstance(fix, str) and fix else None
    return None


def _hint(document: dict[str, Any]) -> str | None:
    """The node's own fix: its document's hint, else the fix status names for what the guard refuses:
    one fix, that of the set whose own files the guard refuses (the other sets' guard fixes name
    that set's again, in other words), else each set's, once."""
    if isinstance(document.get("hint"), str) and document["hint"]:
        return str(document["hint"])
    parts = _set_parts(document) or [document]
    refusing = [p for p in parts if _guard_refuses(p)]
    own = [p for p in refusing if p.get("drifted") or p.get("stale")] or refusing
    fixes = [p["guard"].get("fix") for p in own]
    fixes += [p.get("hint") for p in parts]
    fixes += [p["other_library"].get("fix") for p in parts if isinstance(p.get("other_library"), dict)]
    return "; ".join(dict.fromkeys(str(f) for f in fixes if isinstance(f, str) and f)) or None


def _drifted(document: dict[str, Any]) -> bool:
    """Whether a patched file was edited after patchkit patched it (any set's)."""
    return any(_listed(p.get("drifted")) for p in _set_parts(document) or [document])


def _patches(part: dict[str, Any]) -> list[Any]:
    return _listed(part.get("patches"))


def _failed_checks(part: dict[str, Any]) -> list[dict[str, Any]]:
    checks = part.get("checks")
    checks = checks if isinstance(checks, list) else []
    return [c for c in checks if isinstance(c, dict) and not c.get("ok") and c.get("level") == "error"]


def _set_parts(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The part per set of a document of several sets (status, verify, apply without --set), in
    the order the node's patchkit took them; [] for one set."""
    parts = document.get("sets")
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _why(document: dict[str, Any]) -> str:
    """A failed run's reason: its error, else its failed checks, else what drifted (several sets:
    each failing set's, named)."""
    if document.get("error"):
        hint = document.get("hint")
        return f"{document['error']} ({hint})" if hint else str(document["error"])
    parts = _set_parts(document)
    if parts:
        return "; ".join(f"{p.get('set')}: {why}" for p in parts if (why := _why(p)))
    failed = _failed_checks(document)
    if failed:
        return "; ".join(f"{c.get('check')}: {c.get('path') or ''}: {c.get('message')}" for c in failed)
    if document.get("drifted"):
        return "edited after patchkit patched it: " + ", ".join(map(str, document["drifted"]))
    if _guard_refuses(document):
        return _guard_said(document)
    other = document.get("other_library")
    if isinstance(other, dict) and other.get("changed"):  # its apply updates it (the hint), and is refused here
        return f"applied from another library ({', '.join(map(str, _listed(other['changed'])))} changed)"
    return ""


def _unwritable(document: dict[str, Any]) -> dict[str, Any] | None:
    """Phase 1 refuses what phase 2 could not write: the files of the series, the directories they
    are replaced in (apply writes a file beside it and renames it over: transaction.preflight asks
    both) and the record's directory must be writable by the user the Ray worker runs as (the dry
    run does not ask)."""
    places = _places_written(document)
    if places is None:
        return {
            "state": NodeState.ERROR,
            "ok": False,
            "detail": "the node's patchkit did not say which files it would write",
        }
    root, files = places[0], places[1:]
    wheres = [root, *(where for place in files for where in (_existing_directory(place, root), place))]
    for where in dict.fromkeys(wheres):
        if where.exists() and not os.access(where, os.W_OK):
            return {
                "state": NodeState.UNWRITABLE,
                "ok": False,
                "detail": f"{where} is not writable by the Ray worker's user",
            }
    return None


def _existing_directory(place: Path, root: Path) -> Path:
    """The deepest directory on the way to `place` that exists (where apply creates what is missing)."""
    where = place.parent
    while where != root and not where.exists() and where.parent != where:
        where = where.parent
    return where


def _places_written(document: dict[str, Any]) -> list[Path] | None:
    """The target and each file of the series (of every set), from verify's document (None: not
    as verify writes it)."""
    target, patches = document.get("target"), document.get("patches")
    parts = _set_parts(document)
    if parts and patches is None:
        patches = [patch for part in parts for patch in part.get("patches") or []]
        target = target or parts[0].get("target")
    if not isinstance(target, str) or not isinstance(patches, list):
        return None
    if not all(isinstance(patch, dict) and isinstance(patch.get("files"), list) for patch in patches):
        return None
    root = Path(target)
    files = [path for patch in patches for path in patch["files"]]
    if not all(isinstance(path, str) for path in files):
        return None
    return [root, *(root / path for path in files)]


class Ledger(Protocol):
    """What a fleet run's driver and every node share: the run's decision and its driver's heartbeat
    (cluster.RayLedger: Ray's GCS key-value store, which outlives any driver and agent)."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, value: str) -> None: ...

    def put_new(self, key: str, value: str) -> str:
        """`value` under `key` unless a value is there already: the value that stands."""
        ...

    def delete(self, key: str) -> None: ...


COMMIT, ABORT = "commit", "abort"  # a fleet apply's decision: whoever writes it first decides


def decision_key(run: str) -> str:
    return f"fleet/{run}/decision"


def beat_key(run: str) -> str:
    return f"fleet/{run}/beat"


def rolled_back_key(run: str, where: str) -> str:
    """Where a node's agent records its own rollback of a run (`where`: its node's id)."""
    return f"fleet/{run}/rolled-back/{where}"


def recorded_revert(recorded: str | None, set_name: str | None) -> dict[str, Any] | None:
    """The driver's revert of `set_name`, answered by the node's own rollback as its agent recorded
    it (None: none recorded for that set): a driver back after its agent ended is told the truth."""
    try:
        pairs = load_json_text(recorded) if recorded is not None else []
    except (ValueError, RecursionError):
        return None
    for pair in pairs if isinstance(pairs, list) else []:
        if isinstance(pair, list) and len(pair) == 2 and pair[0] == set_name and isinstance(pair[1], dict):
            return by_its_node(pair[1])
    return None


def by_its_node(answer: dict[str, Any]) -> dict[str, Any]:
    """A revert this node ran for a run whose driver was silent past the lease, as its driver's own."""
    detail = f"{ROLLED_BACK_BY_ITS_NODE}: no word from this run for {LEASE:g} s"
    return {**answer, "detail": "; ".join(d for d in (answer.get("detail"), detail) if d)}


class Heartbeat:
    """A fleet apply's heartbeat: `run`'s beat key written anew every HEARTBEAT s (`mark` and a
    count: each beat differs from the last, whoever wrote it) until stopped or `seconds` have
    passed. The driver beats on a thread of its own; a keeper beside it (cluster.py: a Ray actor
    the driver owns, so Ray ends it with the driver's process) beats too, for at most the run's
    time limit and a minute: a driver stopped (SIGSTOP, Ctrl-Z, starved of CPU) keeps its run
    that long, while a driver killed is given up by its nodes once the lease has passed."""

    def __init__(self, ledger: Ledger, run: str, mark: str, seconds: float | None = None) -> None:
        self.stopped = threading.Event()
        until = None if seconds is None else time.monotonic() + seconds
        self.thread = threading.Thread(
            target=self._beat, args=(ledger, beat_key(run), mark, until), name="patchkit-heartbeat", daemon=True
        )
        self.thread.start()

    def _beat(self, ledger: Ledger, key: str, mark: str, until: float | None, count: int = 0) -> None:
        while not self.stopped.wait(HEARTBEAT) and (until is None or time.monotonic() < until):
            count += 1
            with suppress(Exception):  # the GCS unreachable for a moment: the next beat tries again
                ledger.put(key, f"{mark}-{count}")

    def stop(self) -> None:
        """No beat after this returns (one being written finishes first)."""
        self.stopped.set()
        self.thread.join(HEARTBEAT * 5)


@dataclass
class Undecided:
    """An apply this agent wrote for a fleet run whose decision has not come: the reverts that
    undo it (by set name: the driver's rollback reverts set by set), and its driver's last heartbeat."""

    reverts: dict[str | None, dict[str, Any]]
    driver: str  # the run's driver, as a person finds it: its host and pid
    beat: str | None = None
    beat_seen: float = field(default_factory=time.monotonic)


def undo_requests(request: dict[str, Any], summary: dict[str, Any]) -> dict[str | None, dict[str, Any]] | None:
    """The reverts that undo what this apply wrote, as the driver's rollback asks them
    (protocol._revert_requests): the request's own set, else each set it applied, the last first;
    None: it wrote nothing. {} : written, but no set named (a plain revert would undo every set)."""
    applied = [s["set"] for s in summary.get("sets") or [] if s.get("state") == Outcome.APPLIED]
    if not (summary.get("state") == Outcome.APPLIED or applied):
        return None
    if request.get("set_name") or request.get("adhoc"):
        return {request.get("set_name"): {**request, "extra": []}}
    names = applied or ([summary["set"]] if isinstance(summary.get("set"), str) else [])
    return {name: {**request, "set_name": name, "extra": []} for name in reversed(names)}


class Agent:
    """patchkit on one node for fleet commands: cluster.py makes it a detached Ray actor, pinned to
    the node. It runs each step in its own warm interpreter, so that a command's steps, and the
    commands that follow within the keep-alive (status, apply, verify in a row), pay for no new Ray
    worker and no Python start. It ends itself once no driver holds it and the keep-alive has
    passed, or, retired (patchkit's files on the node changed since it started), once it is idle.

    One step runs at a time (patchkit's CLI writes to the process's sys.stdout): a second
    command's step waits for the first's. Claims, releases and give-ups are answered at once, on
    threads of their own (cluster.py's concurrency group), however many steps wait.

    With a `ledger`, an apply it writes for a fleet run is undecided until that run's decision:
    kept on the driver's commit, rolled back by the agent itself when the driver goes silent (no
    heartbeat for LEASE s: SIGKILL, OOM, a CI timeout) before committing, so that a driver killed in
    phase 2 leaves every node applied or none. Steps of other commands wait for the decision."""

    def __init__(
        self, hold: float, patchkit: PatchkitRun, ledger: Ledger | None = None, where: str | None = None
    ) -> None:
        self.patchkit = patchkit
        self.ledger = ledger
        self.where = where  # its node's id: its own rollbacks are recorded in the ledger under it
        self.undecided: dict[str, Undecided] = {}  # run id -> its apply written here, awaiting its decision
        self.rolled_back: dict[str, dict[str | None, dict[str, Any]]] = {}  # run id -> this agent's reverts
        self.beats: dict[str, tuple[str | None, float]] = {}  # an aborted run's last heartbeat seen, and when
        self.loaded = code_fingerprint()
        self.guard = threading.Lock()
        self.one_step = threading.Lock()
        self.holds: dict[str, float] = {"creator": time.monotonic() + hold}  # run id -> held until
        self.linger_until = 0.0  # the keep-alive the last command asked for
        self.running: str | None = None  # the ticket of the step running
        self.overdue_at = 0.0  # when the running step is past its time limit and OVERDUE_GRACE
        self.waiting: set[str] = set()  # the tickets of the steps called and not yet running
        self.given_up: set[str] = set()  # tickets whose driver stopped waiting: never started
        self.retired = False  # takes no claim; ends once idle
        self.ending = False  # decided under the guard: no claim is taken after it
        # Set as it ends: its threads stop with it, where its end() leaves the process running (a test's agent).
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._end_when_unused, name="patchkit-agent-idle", daemon=True)]
        if ledger is not None:
            self.threads.append(
                threading.Thread(target=self._settle_when_due, name="patchkit-agent-settle", daemon=True)
            )
        for thread in self.threads:
            thread.start()

    def claim(self, run: str, hold: float) -> dict[str, Any]:
        """A fleet run's hold on this agent for `hold` seconds (renewed by each step). Refused
        (`held` False) when it is ending (the driver asks again: the name is soon free) or
        retired, or when patchkit's files here changed since it started (`current` False: the
        driver retires it and starts another)."""
        with self.guard:
            if self.ending or self.retired:
                return {"held": False, "current": not self.retired, "pid": os.getpid()}
            current = code_fingerprint() == self.loaded
            if current:
                self.holds[run] = time.monotonic() + hold
        return {"held": current, "current": current, "pid": os.getpid()}

    def retire(self) -> None:
        """No more claims; the runs that hold it finish their steps, then it ends."""
        with self.guard:
            self.retired = True

    def step(self, run: str, hold: float, ticket: str, step: str, request: dict[str, Any]) -> dict[str, Any]:
        """`step` for `run` (node.run_step's summary); `ticket` names this call for give_up."""
        with self.guard:
            self.waiting.add(ticket)
        try:
            unsettled = self._turn(run, ticket, step, request)  # one_step is held from here
            try:
                with self.guard:
                    refusal = self._refusal(ticket) or _busy(step, unsettled)
                    if refusal is not None:
                        return refusal
                    self.waiting.discard(ticket)
                    self.running = ticket
                    self.overdue_at = time.monotonic() + _time_limit(request) + OVERDUE_GRACE
                if step == "apply" and self._decision(run) == ABORT:  # its driver's run is over: never write for it
                    return {"state": NodeState.NOT_RUN, "ok": False, "detail": "its fleet run was rolled back before"}
                answered = self._rolled_back_already(run, step, request)
                if answered is not None:
                    return answered
                forget_settings()  # each step reads pip's configuration as a new patchkit process would
                summary = run_step(step, request, self.patchkit)
                self._reverted_by_driver(run, step, request)
                self._undecided_now(run, step, request, summary)
                return _with_note(summary, unsettled)
            finally:
                self.one_step.release()
        finally:
            with self.guard:
                self.running = None if self.running == ticket else self.running
                self.waiting.discard(ticket)
                if ticket not in self.given_up:  # a driver that gave up holds nothing by it
                    self.holds[run] = time.monotonic() + hold

    def _turn(self, run: str, ticket: str, step: str, request: dict[str, Any]) -> list[Undecided]:
        """This step's turn (one_step acquired), once no other fleet run's apply here is undecided
        or the wait for it is over: the other runs' applies still undecided. Looked at again once
        the turn is ours: an apply that ran before it, while it queued, may have written meanwhile."""
        deadline = time.monotonic() + _decision_wait(step, request)
        while True:
            self._await_decisions(run, ticket, deadline)
            self.one_step.acquire()
            with self.guard:
                others = [pending for other, pending in self.undecided.items() if other != run]
                if not others or ticket in self.given_up or time.monotonic() >= deadline:
                    return others
            self.one_step.release()  # never wait holding it: the other run's rollback needs it

    def _refusal(self, ticket: str) -> dict[str, Any] | None:
        """Why a step must not start now (under the guard), if it must not."""
        if ticket in self.given_up:  # its driver has reported it timed out: it must not write now
            return {"state": NodeState.NOT_RUN, "ok": False, "detail": "its driver stopped waiting before it started"}
        # Its agent's end is on its way (the step before it overdue): a step started now would be
        # cut midway (an apply half written), its driver told the node was lost.
        if self.ending:
            return {
                "state": NodeState.NOT_RUN,
                "ok": False,
                "detail": "its node's patchkit agent was ending before it started (a step before it hung)",
            }
        return None

    def _await_decisions(self, run: str, ticket: str, deadline: float) -> None:
        """Wait (until `deadline`) until no other fleet run's apply here is undecided: a command run
        meanwhile would see, or build on, a write that may yet be rolled back."""
        while True:
            with self.guard:
                if ticket in self.given_up or time.monotonic() >= deadline:
                    return
                if not any(other != run for other in self.undecided):
                    return
            time.sleep(min(AGENT_TICK, 0.2))

    def _decision(self, run: str) -> str | None:
        if self.ledger is None:
            return None
        try:
            return self.ledger.get(decision_key(run))
        except Exception:  # the GCS unreachable: undecided, as far as this agent knows
            return None

    def _undecided_now(self, run: str, step: str, request: dict[str, Any], summary: dict[str, Any]) -> None:
        """An apply of a fleet run that wrote here: undecided until the run's decision (a driver
        that decides says so: an older one's writes are final, as it commits nothing)."""
        if self.ledger is None or step != "apply" or not request.get("decides"):
            return
        reverts = undo_requests(request, summary)
        if reverts is not None:
            with self.guard:
                self.undecided[run] = Undecided(reverts, str(request.get("driver") or "a driver of another patchkit"))

    def _reverted_by_driver(self, run: str, step: str, request: dict[str, Any]) -> None:
        """The driver's own revert of its run's apply (its rollback): that set is no longer this agent's to undo."""
        if step != "revert":
            return
        with self.guard:
            pending = self.undecided.get(run)
            if pending is not None:
                pending.reverts.pop(request.get("set_name"), None)
                if not pending.reverts:
                    del self.undecided[run]

    def _rolled_back_already(self, run: str, step: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """The driver's revert of a set this agent already rolled back for that run (its driver was
        silent past the lease, then resumed): the agent's own revert's answer."""
        if step != "revert":
            return None
        with self.guard:
            answer = self.rolled_back.get(run, {}).pop(request.get("set_name"), None)
        return None if answer is None else by_its_node(answer)

    def _settle_when_due(self) -> None:
        """Each undecided apply, settled once its run's decision is known: kept on commit; rolled
        back here once its driver is silent past the lease (and did not commit first)."""
        while not self.stopped.wait(AGENT_TICK):
            with self.guard:
                runs = list(self.undecided)
                held = [r for r in self.holds if r != "creator" and r not in self.undecided]
            for run in runs:
                with suppress(Exception):  # the GCS unreachable: asked again at the next tick
                    self._settle(run)
            for run in held:
                with suppress(Exception):
                    self._unhold_if_aborted(run)

    def _unhold_if_aborted(self, run: str) -> None:
        """A fleet apply aborted by its nodes (its driver silent past the lease) holds this agent no
        longer, though nothing was written here (this node's apply failed, say): not --timeout + 60 s."""
        assert self.ledger is not None
        if self.ledger.get(decision_key(run)) != ABORT:
            return
        beat, now = self.ledger.get(beat_key(run)), time.monotonic()
        with self.guard:
            seen, since = self.beats.get(run, (None, now))
            if beat is not None and beat != seen:
                self.beats[run] = (beat, now)
            elif beat is None or now - since >= LEASE:
                self.holds.pop(run, None)
                self.beats.pop(run, None)

    def _settle(self, run: str) -> None:
        assert self.ledger is not None  # only an agent with a ledger has undecided applies
        decision = self.ledger.get(decision_key(run))
        beat = self.ledger.get(beat_key(run))
        now = time.monotonic()
        with self.guard:
            pending = self.undecided.get(run)
            if pending is None:
                return
            if decision == COMMIT:
                del self.undecided[run]
                return
            if beat is not None and beat != pending.beat:
                pending.beat, pending.beat_seen = beat, now
            if beat is not None and now - pending.beat_seen < LEASE:
                return  # its driver lives: it commits, or reverts (a failure elsewhere)
        # No heartbeat for the lease (or its driver ended): abort, unless it committed first.
        if self.ledger.put_new(decision_key(run), ABORT) == COMMIT:
            with self.guard:
                self.undecided.pop(run, None)
            return
        # its driver is gone: its hold (and a creator's: an agent it made) ends now, not in --timeout + 60 s
        with self.guard:
            self.holds.pop(run, None)
            self.holds.pop("creator", None)
        self._roll_back(run)

    def _roll_back(self, run: str) -> None:
        """Undo the run's apply here, as its driver's rollback would have (one step at a time)."""
        with self.one_step:
            with self.guard:
                pending = self.undecided.get(run)
            if pending is None:  # the driver's own revert came first
                return
            forget_settings()
            answers = {name: run_step("revert", request, self.patchkit) for name, request in pending.reverts.items()}
            # recorded while the run still counts as undecided: the idle thread cannot end this agent first
            self._record_rollback(run, answers)
            with self.guard:
                self.undecided.pop(run, None)
                self.rolled_back[run] = answers

    def _record_rollback(self, run: str, answers: dict[str | None, dict[str, Any]]) -> None:
        """The node's own rollback in the cluster's store, for a driver back once this agent has ended."""
        if self.ledger is not None and self.where is not None:
            record = [[name, {k: v for k, v in answer.items() if k != "document"}] for name, answer in answers.items()]
            with suppress(Exception):  # unrecorded: that driver says its revert failed there, and what to run
                self.ledger.put(rolled_back_key(run, self.where), json_text(record, "a rollback record"))

    def give_up(self, ticket: str) -> dict[str, bool]:
        """The driver stopped waiting for the step `ticket`: if it has not started, it never will.
        `running`: it is the step running now; `others_waiting`: other commands' steps wait behind
        it (the driver ends the agent to stop its own step only when that stops no one else's)."""
        with self.guard:
            self.given_up.add(ticket)
            running = self.running == ticket
            others = any(waiting not in self.given_up for waiting in self.waiting - {ticket})
            return {"running": running, "others_waiting": running and others}

    def release(self, run: str, keep_alive: float) -> None:
        with self.guard:
            self.holds.pop(run, None)
            self.holds.pop("creator", None)
            self.linger_until = time.monotonic() + keep_alive  # the last command's word (another's hold still counts)

    def _end_when_unused(self) -> None:
        while not self.stopped.wait(AGENT_TICK):
            with self.guard:
                now = time.monotonic()
                held = any(t >= now for t in self.holds.values())
                unwanted = now > self.linger_until and not held
                busy = self.running is not None or bool(self.waiting) or bool(self.undecided)
                # A step this far past its time limit hangs (its driver stopped waiting long ago, or
                # died): ending the agent stops it, else every later command here would wait behind it.
                overdue = self.running is not None and now > self.overdue_at
                # retired: no keep-alive, but a run that holds it may still send a step (one in flight
                # is neither running nor waiting here yet)
                self.ending = overdue or (not busy and (unwanted or (self.retired and not held)))
            if self.ending:
                self.stopped.set()
                self.end()

    def end(self) -> None:
        """This process ends (cluster.py's agent asks Ray to end it as an actor)."""
        os._exit(0)


AGENT_THREADS = 32  # steps an agent takes at once (one runs, the others wait for it)
CONTROL_THREADS = 4  # for claims, releases and give-ups: never behind the steps
PACKAGE = Path(__file__).resolve().parent.parent  # patchkit's own directory
AGENT_TICK = 0.5  # seconds between an agent's looks at whether it is still wanted
OVERDUE_GRACE = 120.0  # seconds past a step's time limit after which the agent ends itself


def _with_note(summary: dict[str, Any], unsettled: list[Undecided]) -> dict[str, Any]:
    """A status or verify run while another fleet run's apply here was still undecided: said in its row."""
    if not unsettled:
        return summary
    note = "an apply by another fleet run is undecided here: it is rolled back unless that run commits"
    return {**summary, "detail": "; ".join(d for d in (summary.get("detail"), note) if d)}


def _busy(step: str, unsettled: list[Undecided]) -> dict[str, Any] | None:
    """A write (or phase 1 of one) where another fleet run's apply is undecided: refused, not run
    on a write that may yet be rolled back (nor on one its own rollback would then undo)."""
    if not unsettled or step not in REFUSED_WHEN_BUSY:
        return None
    drivers = ", ".join(dict.fromkeys(pending.driver for pending in unsettled))
    detail = f"another fleet apply (driver: {drivers}) has written here and not yet committed"
    return {"state": NodeState.BUSY, "ok": False, "detail": detail}


REFUSED_WHEN_BUSY = ("apply", "prepare", "revert")


def _decision_wait(step: str, request: dict[str, Any]) -> float:
    """How long a step waits for another fleet run's undecided apply here to be decided: a fleet
    apply's own apply not at all (its run holds undecided writes elsewhere, where the other run may
    wait for it: a cycle); any other step the lease and a little (a driver gone is given up by
    then), never as long as its time limit (a driver stopped, yet held by its heartbeat)."""
    if step == "apply" and request.get("decides"):
        return 0.0
    return min(LEASE + DECISION_GRACE, _time_limit(request))


DECISION_GRACE = 5.0  # seconds past the lease: a node's rollback of a driver given up on, in a step's wait


def _time_limit(request: dict[str, Any]) -> float:
    """The step's time limit (the driver's --timeout), read defensively: an agent outlives drivers."""
    try:
        limit = float(request.get("timeout", DEFAULT_TIME_LIMIT))
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int too large for a float
        return DEFAULT_TIME_LIMIT
    return limit if 0 <= limit < float("inf") else DEFAULT_TIME_LIMIT


def code_fingerprint(package: Path = PACKAGE) -> dict[str, tuple[int, int, int]]:
    """Each of patchkit's source files, as (inode, size, mtime): an upgrade changes them."""
    seen = {}
    for path in sorted(package.rglob("*.py")):
        try:
            info = path.stat()
        except OSError:
            continue
        seen[str(path.relative_to(package))] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return seen
