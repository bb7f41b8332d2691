"""What the modules below the CLI have to say on stderr (a note, a warning), without printing it:
said here, handed to the one sink the ui installs (cli/ui/notes), held until it does."""

from __future__ import annotations

from collections.abc import Callable

_held: list[str] = []  # said before the ui listened (a library call outside the CLI): drained when it does
_sinks: list[Callable[[str], None]] = []  # at most one: the ui's


def say(message: str) -> None:
    """One line for stderr, through the ui's sink (held until there is one)."""
    if _sinks:
        _sinks[0](message)
    else:
        _held.append(message)


def listen(sink: Callable[[str], None]) -> None:
    """Make `sink` the one that hears every note from now on, and hand it those held so far."""
    _sinks[:] = [sink]
    while _held:
        sink(_held.pop(0))
