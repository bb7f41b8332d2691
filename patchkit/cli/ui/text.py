"""What may reach a terminal (control characters escaped), the styles of states, and plain writes to stdout."""

from __future__ import annotations

import os
import re
import sys
import textwrap
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


def shortened(word: str, width: int) -> str:
    """`word` in at most `width` columns: its start and its end (where a path names its file)
    around an ellipsis."""
    if len(word) <= width:
        return word
    tail = (width - 1) * 2 // 3
    return word[: width - 1 - tail] + "\u2026" + word[len(word) - tail :]


def fitted(
    text: str, width: int | None, *, first: int = 0, indent: int = 2, shorten: bool = False, paths: bool = False
) -> list[str]:
    """`text` as lines of at most `width` columns, wrapped at spaces (the first line indented by
    `first`, the others by `indent`). A word longer than a line is shortened with an ellipsis
    (`shorten`), else kept whole on a line of its own; a `command` in backquotes is never cut or
    shortened, nor a path in a sentence that a line can hold (they are copied from there; `paths`: a
    table's cell, shortened as any word). Without a width (piped): one line, never wrapped."""
    if width is None:
        return [" " * first + text]
    room = max(width - max(first, indent), 10)
    # a `command` is one word, never shortened: it is pasted from there (wrapped, as several lines)
    words = _COMMAND.sub(lambda m: m.group().replace(" ", _KEPT_SPACE), text)
    # a short aside "(-v shows each)" is read as one: never wrapped inside its parentheses
    words = _ASIDE.sub(lambda m: _kept_whole(m.group(), min(ASIDE_ROOM, room)), words)
    if shorten:
        words = " ".join(_fitting(word, width, room, paths=paths) for word in words.split(" "))
    # a word kept whole that a hanging indent would push past the width starts further left
    longest = max(map(len, words.split(" ")))
    indent = min(indent, width - longest) if longest <= width else indent
    lines = textwrap.wrap(
        words,
        width,
        initial_indent=" " * first,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace(_KEPT_SPACE, " ") for line in lines] or [""]


def _fitting(word: str, width: int, room: int, *, paths: bool) -> str:
    """A word as `fitted` shows it: a `command` whole; a path in a sentence whole unless even a
    line of its own cannot hold it (`paths`: a table's cell, shortened as any word); else within `room`."""
    if "`" in word or ("/" in word and not paths and len(word) <= width):
        return word
    return shortened(word, room)


_COMMAND = re.compile(r"`[^`]*`")
_ASIDE = re.compile(r"\([^()]*\)[,;:.]?")
ASIDE_ROOM = 40  # the widest aside kept on one line; a longer one wraps at its spaces
_KEPT_SPACE = "\ue000"  # not whitespace to textwrap (a no-break space is)


def _kept_whole(aside: str, room: int) -> str:
    """An aside as one word when a line holds it, else as it is (wrapped at its spaces)."""
    return aside.replace(" ", _KEPT_SPACE) if len(aside) <= room else aside


def plain_table(columns: list[str], rows: list[list[str]], title: str | None = None) -> str:
    """A table for a pipe: the title, then the header and each row in columns two spaces apart,
    nothing after a row's last cell (no padding, no box)."""
    widths = [max(map(len, cells)) for cells in zip(columns, *rows, strict=True)]
    lines = [title] if title else []
    for row in [columns, *rows]:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


GAP = 2  # spaces between two columns
LABEL_WIDTH = 9  # "version  ": the labels of a report's lines
NAME_ROOM = 16  # the fewest columns a name or a path is shortened to
TEXT_ROOM = 20  # the fewest columns text is wrapped to


def _narrow(widths: list[int], floors: list[int], excess: int) -> int:
    """Narrow the widest column above its floor, a column at a time, until `excess` is gone or
    every column is at its floor: what is left over."""
    while excess > 0:
        narrowable = [(widths[i], i) for i in range(len(widths)) if widths[i] > floors[i]]
        if not narrowable:
            break
        widths[max(narrowable)[1]] -= 1
        excess -= 1
    return excess


def fit_table(columns: list[str], rows: list[list[str]], width: int) -> tuple[list[int], list[list[list[str]]]]:
    """Each row (the header first) as the lines of its cells, the columns fitted into `width`: text
    (a column with a space in it) is wrapped at spaces first, down to a third of the width; then
    the widest column is narrowed, names (paths, patch names) shortened with an ellipsis, each no
    further than it stays readable (then the line is wider). Returns the columns' widths and the
    rows."""
    widths = [max(map(len, cells)) for cells in zip(columns, *rows, strict=True)]
    is_text = [any(" " in row[i] for row in rows) for i in range(len(columns))]
    least = [
        min(w, max(len(name), TEXT_ROOM if text else NAME_ROOM))
        for w, name, text in zip(widths, columns, is_text, strict=True)
    ]
    wrapped_first = [
        max(floor, width // 3) if text else w for w, floor, text in zip(widths, least, is_text, strict=True)
    ]
    excess = sum(widths) + GAP * (len(widths) - 1) - width
    for floors in (wrapped_first, least):
        excess = _narrow(widths, floors, excess)
    return widths, [
        [
            fitted(cell, w, indent=0, shorten=True, paths=True) if text else [shortened(cell, w)]
            for cell, w, text in zip(row, widths, is_text, strict=True)
        ]
        for row in [columns, *rows]
    ]
