"""What may reach a terminal (control characters escaped), the styles of states, and plain writes to stdout."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import TextIO


def rich() -> SimpleNamespace:
    """The parts of rich the console draws with (box, console, table, text), loaded at the first
    output drawn on a terminal: a quiet or piped run never loads rich."""
    # lazy: rich loads only for output drawn on a terminal
    from rich import box, console, table, text

    return SimpleNamespace(box=box, console=console, table=table, text=text)


STATE_STYLES = {
    "applied": "green",
    "patched": "green",
    "upstream": "cyan",
    "not-applied": "yellow",
    "apply": "yellow",
    "partial": "red",
    "conflict": "red",
    "unsupported": "magenta",
    "drifted": "red",
    "ok": "green",
    "pass": "green",
    "fail": "red",
    "warning": "yellow",
    "check-failed": "red",
    "damaged": "red",
    "unrecorded": "yellow",
    "upstream-regression": "bold red",
    "skipped": "dim",
    "cannot judge": "yellow",
}


# What must not reach a terminal raw: C0 controls (ESC starts a sequence, \r overwrites the line),
# DEL, C1 controls, and the surrogates that stand for undecodable bytes (they cannot even be encoded).
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\udc80-\udcff]")
_UNSHOWABLE_IN_A_FIELD = re.compile("[\x00-\x1f\x7f-\x9f\udc80-\udcff]")  # tab and newline too


def visible(text: str, *, field: bool = False) -> str:
    """Text from a patch, a library or a tree, safe to show: each control character written as
    an escape (\\x1b), an undecodable byte as its value (\\xff). Tab and newline are kept, except
    in a `field`: a table cell or a tab-separated column. JSON shows the exact text instead."""
    pattern = _UNSHOWABLE_IN_A_FIELD if field else _UNSHOWABLE
    if pattern.search(text) is None:
        return text
    return pattern.sub(lambda m: f"\\x{ord(m.group()) & 0xFF:02x}", text)


def plain_stdout() -> bool:
    """What rich's Console.is_terminal says of stdout, false only where it surely would: not a
    tty, and none of the variables with which rich treats a pipe as a terminal."""
    if "FORCE_COLOR" in os.environ or os.environ.get("TTY_COMPATIBLE") == "1":
        return False
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def write_plainly(write: Callable[[TextIO], object]) -> None:
    """`write` to stdout, flushed (a reader that stopped early, `| head`, is the CLI's to handle:
    BrokenPipeError ends the run quietly with exit 141)."""
    write(sys.stdout)
    sys.stdout.flush()
