"""What the modules below the CLI say (base.notes): written to stderr as said."""

from __future__ import annotations

import contextlib
import sys

from patchkit.base import notes
from patchkit.base.errors import escaped


def _to_stderr(message: str) -> None:
    """Each note on its own line on the stderr of the moment (a test's or the fleet agent's swap included)."""
    with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr loses the note, never the run
        sys.stderr.write(escaped(message, "\t\n") + "\n")  # as ui.text.visible shows every line


def show_notes() -> None:
    """Route the notes of the modules below the CLI to stderr, and only there."""
    notes.listen(_to_stderr)
