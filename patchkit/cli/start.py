"""The console script's entry point: a Ctrl-C while patchkit starts exits 130 with its one line.

Python raises KeyboardInterrupt from the first line it runs; until a command sets up its own
handling (patchkit.base.signals, cli.main), a Ctrl-C while the modules load (click, the command's
imports) would print a traceback. Once a command runs, cli.main reports an interrupt itself; the
process then ends through cli.main.exit_held, which says a signal that came in its last moments.
"""

import gc

# cli.main.GC_THRESHOLD (a test holds them equal), set before anything else is imported: with
# Python's default (a collection every 700 allocations) importing signal's enum, dataclasses, typing
# and click collected 14 times (~2.8 ms of every start-up, `--help` included).
GC_THRESHOLD = (200_000, 30, 30)
gc.set_threshold(*GC_THRESHOLD)

import signal  # noqa: E402
import sys  # noqa: E402

INTERRUPTED = 130  # base.errors.INTERRUPTED, not imported from there: importing is the start-up guarded here
# base.signals' report of an interrupt before any command ran (a test holds them equal)
BEFORE_ANY_CHANGE = "error: interrupted before any change was made to the target\n"


HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # base.signals.HANDLED (not imported: start-up)


def _interrupt(_signum: int, _frame: object) -> None:
    """Python's Ctrl-C before a command takes over the signals, but the ones after it wait (blocked)
    until the exit: a second one in the except clause, before the first was said, escaped as a
    traceback (the crash trials' exit 99). The mask is this thread's: with a second thread alive,
    a second one goes there and its handler runs here all the same; it does nothing then."""
    if _interrupted:
        return
    _interrupted.append(_signum)
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    raise KeyboardInterrupt


_interrupted: list[int] = []  # the Ctrl-C that raised: the process ends on it


def _interrupted_while_loading() -> None:
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second Ctrl-C cannot cut the line
        signal.signal(number, signal.SIG_IGN)
    try:
        sys.stderr.write(BEFORE_ANY_CHANGE)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr: the exit code alone says it
        pass
    sys.exit(INTERRUPTED)


try:  # at the top, inside the guard: most of start-up is this import
    from patchkit.cli.main import exit_held, interrupted_before_a_command
    from patchkit.cli.main import main as _run
except KeyboardInterrupt:
    while True:  # a second Ctrl-C, raised where _interrupted_while_loading starts, is caught here too
        try:
            _interrupted_while_loading()  # exits: SystemExit is not caught
        except KeyboardInterrupt:
            continue


def main() -> None:
    _interrupted.clear()  # a process forked from one that ran the console script starts its own
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # one ignored (nohup) stays so
            signal.signal(signal.SIGINT, _interrupt)
        _run()
    except KeyboardInterrupt:  # before a command took over the signals (click's own parsing)
        exit_held(interrupted_before_a_command())
    except SystemExit as ended:  # main()'s one way out: the exit, with a last look for a signal
        exit_held(ended.code)
