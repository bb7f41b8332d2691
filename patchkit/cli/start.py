"""The console script's entry point: a Ctrl-C while patchkit starts exits 130, quietly.

Python raises KeyboardInterrupt from the first line it runs; until a command sets up its own
handling (patchkit.base.signals, cli.main), a Ctrl-C while the modules load (click, the command's
imports) would print a traceback. Once a command runs, cli.main reports an interrupt itself.
"""

import sys

INTERRUPTED = 130  # base.errors.INTERRUPTED, not imported from there: importing is the start-up guarded here

try:  # at the top, inside the guard: most of start-up is this import
    from patchkit.cli.main import main as _run
except KeyboardInterrupt:
    sys.exit(INTERRUPTED)


def main() -> None:
    try:
        _run()
    except KeyboardInterrupt:  # before a command took over the signals (click's own parsing)
        sys.exit(INTERRUPTED)
