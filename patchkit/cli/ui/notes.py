"""What the modules below the CLI say (on the "patchkit" logger): written to stderr as said."""

from __future__ import annotations

import contextlib
import logging
import sys


class _Stderr(logging.Handler):
    """Each message on its own line on the stderr of the moment (a test's or the fleet agent's swap included)."""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr loses the note, never the run
            sys.stderr.write(record.getMessage() + "\n")


_HANDLER = _Stderr()


def show_notes() -> None:
    """Route the "patchkit" logger's messages to stderr, and only there (once per process)."""
    logger = logging.getLogger("patchkit")
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
        logger.propagate = False
