"""SIGINT, SIGTERM and SIGHUP end a command the same way: an Interrupted raised where it runs (so a
transaction rolls back), exit 128 + the signal's number. A rollback or a commit point defers them:
a signal that arrives then is raised once that step is whole (a second Ctrl-C cannot cut it).

The handlers themselves defer (a step under way: the signal is noted, and acted on as it ends), not
the signal mask alone: a mask is the calling thread's, and a process's signal goes to any thread
that does not block it, whose C handler flags it for the main thread's Python handler to run at its
next line. With a second thread alive (a pool, an actor's threads, an embedding), a mask set in
the main thread only sends the signal elsewhere."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from patchkit.base import hints

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A handled signal arrived; `exit_code` is what a shell reports for it (128 + its number)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


def interrupt_within(exc: BaseException) -> Interrupted | None:
    """The Interrupted an exception carries as its cause or context (Python 3.11 wraps one raised in a class
    body's __set_name__, as a lazy import runs, in a RuntimeError) or in its group, else None."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, Interrupted):
            return found
        grouped = grouped_interrupt(found)
        if grouped is not None:
            return grouped
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def grouped_interrupt(exc: BaseException) -> Interrupted | None:
    """The first Interrupted in an exception group, else None. filelock raises a Ctrl-C that cut its
    take of a lock and a second one that cut the take's rollback together, as one BaseExceptionGroup:
    no `except KeyboardInterrupt` catches it."""
    members = getattr(exc, "exceptions", None)
    if not isinstance(members, tuple):
        return None
    for member in members:
        found = member if isinstance(member, Interrupted) else grouped_interrupt(member)
        if found is not None:
            return found
    return None


def _raise(signum: int, _frame: object) -> None:
    global _cut
    if _depth or _cut:  # a step that must end whole runs: the signal waits for its end (_act)
        _waiting.append(signum)
        return
    if _blocks_on_raise:  # before the raise: nothing between it and the rollback can be cut (uncut_rollback)
        _cut = True
        _block()
    _raised.append(signum)  # Python drops what a handler raises inside a finalizer: said at the exit
    raise Interrupted(signum)


def _collect(signum: int, _frame: object) -> None:
    """A host's handler (Python's own, a caller's) while a step runs (deferred): called as it ends."""
    _waiting.append(signum)


_raised: list[int] = []
_blocks_on_raise = False  # inside uncut_rollback(): the signal that raises makes the next ones wait
_cut = False  # inside uncut_rollback(), a signal has raised: the others wait until the block ends
_depth = 0  # deferred() steps under way in the main thread (and handled() putting its handlers back)
_waiting: list[int] = []  # the signals that came meanwhile, in order
_mask_before: list[set[int | signal.Signals]] = []  # the mask the first block replaced, while blocked


def _block() -> None:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    if not _mask_before:  # a second signal's handler, nested in the first's, finds them blocked already
        _mask_before.append(before)


@contextmanager
def uncut_rollback() -> Iterator[None]:
    """A transaction whose failure rolls back: once a signal has interrupted it, the others wait
    until the block ends (their handler notes them; this thread blocks them too), so that a second
    Ctrl-C cannot land between the raise and the rollback taking over (the rollback skipped, the
    tree left mixed, and "before any change" said: the crash trials, 1 in 300; with a second thread
    alive, every time it came then). The one that waited is raised as the block ends, after the
    rollback."""
    global _blocks_on_raise, _cut
    if threading.current_thread() is not threading.main_thread() or _blocks_on_raise:
        yield
        return
    _blocks_on_raise = True
    try:
        yield
    finally:
        _blocks_on_raise = False
        cut, _cut = _cut, False
        waiting = _taken() if cut and not _depth else []  # inside a step still under way: at its end
        if _mask_before:  # one this thread held acts here; one another thread took, below
            signal.pthread_sigmask(signal.SIG_SETMASK, _mask_before.pop())
        _act(waiting)


@contextmanager
def handled() -> Iterator[None]:
    """While a command runs, the three signals raise Interrupted (a signal that was ignored, as
    under `nohup`, stays ignored); the handlers before are back after it. Only the main thread can
    set handlers: elsewhere this changes nothing."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _waiting.clear()  # nothing that came before this command waits for it
    previous = {number: signal.getsignal(number) for number in HANDLED}
    _set_all({number: _raise for number, handler in previous.items() if handler is not signal.SIG_IGN}, True)
    hook = sys.unraisablehook
    sys.unraisablehook = partial(_unraisable, hook)
    try:
        yield
    finally:
        _depth += 1  # a signal meanwhile waits, then acts by the handler put back: none lands half-way
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
            late = {n: _note_late for n, h in previous.items() if _held and h not in (signal.SIG_IGN, None)}
            _set_all({n: h for n, h in previous.items() if h is not None} | late)
            sys.unraisablehook = hook
        finally:
            _depth -= 1
            waiting = _taken()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)  # one this thread held acts here
        _act(waiting)


def _unraisable(hook: Callable[[Any], object], unraisable: Any) -> None:
    """Python drops what a handler raises inside a finalizer or weakref callback (importlib's module
    lock's, as an import ends) and prints its traceback: ours is noted (_raise) and said at the exit
    instead, in the usual one line. Anything else goes to the hook before."""
    if not isinstance(unraisable.exc_value, Interrupted):
        hook(unraisable)


_held = False  # the process ends with this command (the console script): see hold_until_exit
_late: list[int] = []


def hold_until_exit() -> None:
    """The process ends when its command does: a signal after the command's own handling (its
    result shown) is noted for late_signal, never fatal. Python's default handlers would raise
    where nothing reports it, or, once the interpreter finalizes, kill it with no word."""
    global _held
    _held = True
    _late.clear()  # what a process forked from one that ran commands inherited is not this command's
    _raised.clear()


def _note_late(signum: int, _frame: object) -> None:
    _late.append(signum)


def late_signal() -> int | None:
    """Signals are held (blocked) from here to the exit, never lost: the console script's last
    step (exit_held) looks for one once more right before the process ends. The first that arrived
    after the command, if any."""
    if threading.current_thread() is threading.main_thread() and _held:
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    # pending() first: a signal that came just before the block has its handler run as that call
    # starts, so _late holds it by the time it is read
    waiting = pending()
    first = _late or _raised  # one raised and lost (in a finalizer): the command never saw it
    return first[0] if first else waiting


def pending() -> int | None:
    """A handled signal that arrived while they were held (late_signal), not yet reported."""
    if not _held or threading.current_thread() is not threading.main_thread():
        return None
    waiting = signal.sigpending() & set(HANDLED)
    return min(waiting) if waiting else None


def ignore_more() -> None:
    """The command is ending on a signal: another one (a second Ctrl-C) must not cut its report,
    whether a command's handler (handled() puts it back) or Python's own (before any command ran)."""
    if threading.current_thread() is threading.main_thread():
        for number in HANDLED:
            if signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, lambda *_: None)


@contextmanager
def deferred() -> Iterator[None]:
    """Run a step that must not stop half-way: a handled signal arriving meanwhile is raised (as
    Interrupted) when it ends, whichever thread took it. Outside the main thread no handler can be
    set: it runs as it is (a signal's handler runs in the main thread and cannot raise in this one)."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1  # ours waits from here; every handler is swapped for _collect (a host's would act at once)
    try:
        swapped = {number: _collect for number in HANDLED if signal.getsignal(number) not in _NOT_SWAPPED}
        previous = _set_all(swapped, undo_on_error=True)  # one that raised here acted before the step
        try:
            yield
        finally:
            _set_all(previous)
    finally:
        _depth -= 1
        # the last step under way: what waited acts now, unless the step failed (its error is what
        # the command says) or a rollback's signal raised (they wait for its end: uncut_rollback)
        waiting = _taken() if not _depth and not _cut else []
    _act(waiting)


_NOT_SWAPPED = (signal.SIG_IGN, None)  # one ignored stays so; None: a handler set outside Python


def _taken() -> list[int]:
    """The signals that waited, no longer waiting."""
    waiting = list(_waiting)
    _waiting.clear()
    return waiting


def _act(waiting: list[int]) -> None:
    """The signals that waited for a step, acted on as the last step under way ends, each by the
    handler it has now: ours raises; a host's (Python's own for SIGINT) does its part; the default
    action is an Interrupted, so that the command reports it; one ignored stays ignored."""
    for signum in waiting:
        handler = signal.getsignal(signum)
        if callable(handler):
            handler(signum, None)
        elif handler is not signal.SIG_IGN:
            raise Interrupted(signum)


def _set_all(handlers: dict[Any, Any], undo_on_error: bool = False) -> dict[Any, Any]:
    """Set each handler and return those it replaced. signal.signal first runs the handler of a
    signal another thread took, and does not set its own when that raises (a host's may; ours
    waits): that one is set again, and the first error raised once all are set, or, `undo_on_error`,
    once those set are put back."""
    replaced: dict[Any, Any] = {}
    error: BaseException | None = None
    for number, handler in handlers.items():
        while number not in replaced:
            try:
                replaced[number] = signal.signal(number, handler)
            except BaseException as exc:  # a handler that ran before this one was set
                error = error or exc
    if error is not None:
        if undo_on_error:
            _set_all(replaced)
        raise error
    return replaced


_run = threading.local()  # per thread: fleet's agent runs commands in-process

# What this command last did to the target, for the message after an interrupt.
COMMITTED, UNDONE, ROLLED_BACK = "committed", "undone", "rolled back"
REVERTED = "reverted"  # a revert's commit: its change is the stock files back, so apply is the way on

_REPORTS = {
    None: ("interrupted before any change was made to the target", None),
    ROLLED_BACK: ("interrupted: the change under way was rolled back; the target is as it was before", None),
    UNDONE: ("interrupted after the change was written and undone again: the target is as it was before", None),
    COMMITTED: (
        "interrupted after the change was written: it is in place; the steps after writing (its checks) did not run",
        None,  # the commands of the user's selection: see note()
    ),
    REVERTED: (
        "interrupted after the revert was written: it is in place, the files restored; the steps after "
        "writing (its checks) did not run",
        None,
    ),
}


def new_run() -> None:
    """A command starts: it has changed nothing yet."""
    _run.written = None
    _run.report = None
    _run.hint = None
    _run.sets = None
    _run.chosen = None
    _run.reverting = False


def reverting() -> None:
    """This command is a revert: what its commit leaves in place is the stock files (see note())."""
    _run.reverting = True


def new_set(kept: list[str], current: str, untried: list[str]) -> None:
    """A command of several sets starts set `current` (its own transaction): `kept`, the sets this
    command applied before it, stay whatever happens to it; `untried` come after it. What an
    interrupt leaves is then said set by set."""
    _run.written = None
    _run.hint = None
    _run.sets = (kept, current, untried)
    _run.chosen = hints.from_anywhere()  # the report is read after the command ended: its selection now


def note_report(message: str, hint: str | None = None) -> None:
    """What an interrupt now leaves, for a command whose output is no target (`wheel`: a file in --out)."""
    _run.report = (message, hint)


def note(what: str) -> None:
    """This command's transaction passed its commit point (COMMITTED, or UNDONE for a commit that
    undid its own earlier one), or was rolled back (ROLLED_BACK). The hint is spelled now, while the
    command's selection is known (the report is read after the command has ended)."""
    _run.written = what
    chosen = hints.from_anywhere()  # followed as printed from any directory
    committed = (
        f"{hints.command('verify', chosen=chosen)} checks it; {hints.command('revert', chosen=chosen)} undoes it"
    )
    _run.hint = committed if what == COMMITTED else None
    if what == COMMITTED and getattr(_run, "reverting", False):
        _run.written = REVERTED
        _run.hint = f"{hints.command('apply', chosen=chosen)} applies it again"


def interrupted_report() -> tuple[str, str | None]:
    """What an interrupt left, and the hint: truthful about whether this run's change is in place."""
    report: tuple[str, str | None] | None = getattr(_run, "report", None)  # note_report's
    if report:
        return report
    sets = getattr(_run, "sets", None)
    if sets is not None and (sets[0] or sets[2]):
        return _sets_report(*sets)
    message, hint = _REPORTS[getattr(_run, "written", None)]
    return message, hint or getattr(_run, "hint", None)


# what an interrupt left of the set under way, by what its transaction last did
_SET_STATES = {
    None: "not applied (interrupted before it changed anything)",
    ROLLED_BACK: "rolled back",
    UNDONE: "written and undone again",
    COMMITTED: "applied (its checks after writing did not run)",
}


def _sets_report(kept: list[str], current: str, untried: list[str]) -> tuple[str, str | None]:
    """An interrupt in one set of several: the sets this command applied stay, the one under way is
    as its transaction left it, the rest were not tried."""
    written = getattr(_run, "written", None)
    parts = [f"{', '.join(kept)} applied and kept"] if kept else []
    parts.append(f"{current} {_SET_STATES[written]}")
    parts += [f"not tried: {', '.join(untried)}"] if untried else []
    applied = kept + ([current] if written == COMMITTED else [])
    chosen = getattr(_run, "chosen", None)
    if not applied:  # every set as it was: "the rest" would be all of them
        return "interrupted: " + "; ".join(
            parts
        ), f"nothing was applied: run {hints.command('apply', chosen=chosen)} again"
    hint = f"{hints.command('apply', chosen=chosen)} applies the rest" if untried or written != COMMITTED else None
    if applied:
        undo = f"{hints.command('revert', chosen=chosen)} undoes every set"
        hint = f"{hint}; {undo}" if hint else f"{hints.command('verify', chosen=chosen)} checks it; {undo}"
    return "interrupted: " + "; ".join(parts), hint
