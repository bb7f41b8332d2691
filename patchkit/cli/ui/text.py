"""What may reach a terminal (control characters escaped), the styles of states, and plain writes to stdout."""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TextIO, cast

from patchkit.base.errors import escaped
from patchkit.base.values import Value


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


def visible(text: str, *, field: bool = False) -> str:
    """Text from a patch, a library or a tree, safe to show, as errors.escaped shows it (the one
    escaping of all output): each character that is not printable written as an escape (\\x1b,
    \\u202e), an undecodable byte as its value (\\xff). Tab and newline are kept, except in a
    `field`: a table cell or a tab-separated column. JSON shows the exact text instead."""
    return escaped(text, "" if field else "\t\n")


def plain_stdout(stream: TextIO | None = None) -> bool:
    """What rich's Console.is_terminal says of stdout (or `stream`), false only where it surely
    would: not a tty, and none of the variables with which rich treats a pipe as a terminal."""
    if "FORCE_COLOR" in os.environ or os.environ.get("TTY_COMPATIBLE") == "1":
        return False
    try:
        return not (stream or sys.stdout).isatty()
    except (AttributeError, ValueError):
        return False


CHUNK = 1 << 14  # characters per write of plain output


class _Chunked:
    """stdout written a chunk at a time, each flushed: a reader that stopped early (`| head`) is an
    EPIPE on the next chunk. One large write is not: the pipe takes a part, and the short write's
    error is lost (exit 0 where a shell says 141)."""

    def write(self, text: str) -> int:
        for start in range(0, len(text), CHUNK):
            sys.stdout.write(text[start : start + CHUNK])
            sys.stdout.flush()
        return len(text)


def write_plainly(write: Callable[[TextIO], object]) -> None:
    """`write` to stdout in flushed chunks (a reader that stopped early, `| head`, is the CLI's to
    handle: BrokenPipeError ends the run quietly with exit 141, in its one exit path)."""
    write(cast("TextIO", _Chunked()))
    sys.stdout.flush()


def fitted(text: str, width: int | None, *, first: int = 0, indent: int = 2, shorten: bool = False) -> list[str]:
    """`text` as lines of at most `width` columns, wrapped at spaces (the first line indented by
    `first`, the others by `indent`), a short aside never inside its parentheses. A word longer
    than a line is kept whole on a line of its own, or (`shorten`) a name broken after a / _ or -
    (broken); a `command` in backquotes is kept on one line (it is copied from there) unless no
    line holds it: then broken between its words with shell continuations (` \\`), so it pastes
    as the one command; a quoted text that a line holds is never wrapped inside its quotes.
    Without a width (piped): one line, never wrapped."""
    if width is None:
        return [" " * first + text]
    room = max(width - max(first, indent), 10)
    # a `command` is one word, never shortened: it is pasted from there (too wide: continued lines)
    words = re.compile(_COMMAND).sub(lambda m: m.group().replace(" ", _KEPT_SPACE), text)
    # a short aside "(-v shows each)" is read as one: never wrapped inside its parentheses
    words = re.compile(_ASIDE).sub(lambda m: _kept_whole(m.group(), min(ASIDE_ROOM, room)), words)
    # a quoted text ('    "x",' as found in a file) is never wrapped inside: its spaces are what it says
    words = re.compile(_QUOTED).sub(lambda m: _kept_whole(m.group(), room), words)
    lines = _wrapped(words, width, first, indent, shorten=shorten)
    return [line.replace(_KEPT_SPACE, " ") for line in lines] or [""]


def _wrapped(words: str, width: int, first: int, indent: int, *, shorten: bool) -> list[str]:
    """`words` wrapped at spaces; a line wider than `width` broken (_broken_line). The text after a
    name broken after a / goes on after its last piece when it all fits there, or all of it up to
    the next such name (`…/snapshots/` / `config.json absent; vLLM would…`: never `absent;` alone)."""
    lines = textwrap.wrap(
        words,
        width,
        initial_indent=" " * first,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    done: list[str] = []
    for number, line in enumerate(lines):
        parts = _broken_line(line, width, shorten=shorten)
        rest = lines[number + 1 :]
        if len(parts) == 1 or not rest or "`" in line:  # a `command`'s shell lines end where they end
            done += parts
            continue
        last = parts[-1]
        wide = next((i for i, more in enumerate(rest) if len(more) > width), None)
        run = " ".join(more.strip() for more in rest[:wide])
        if wide is not None and len(last) + 1 + len(run) > width:  # it would strand a word before that name
            done += parts
            continue
        after = " ".join([last.strip(), *(more.strip() for more in rest)])
        return done + parts[:-1] + _wrapped(after, width, len(last) - len(last.lstrip()), indent, shorten=shorten)
    return done


def _broken_line(line: str, width: int, *, shorten: bool) -> list[str]:
    """A line wider than `width` holds one word: one that fits a line whole starts further left (the
    other lines keep their indent); a `command` wider than any line broken between its words,
    each line continued (` \\`: pasted, one command); a name (`shorten`) broken after a / _ or -
    (see broken); each piece at the line's indent."""
    lead = len(line) - len(line.lstrip())
    word = line.strip()
    if len(line) <= width or " " in word:
        return [line]
    if len(word) <= width:  # a word kept whole that its indent would push past the width: that line starts further left
        return [" " * (width - len(word)) + word]
    if "`" in word:
        parts = _continued(word.replace(_KEPT_SPACE, " "), max(width - lead, NAME_ROOM), width)
        # a wide one further left; a line that goes on with a word broken on the one above is not
        # indented (its spaces would split that word)
        return [
            part if number and _glued(parts[number - 1]) else " " * max(min(lead, width - len(part)), 0) + part
            for number, part in enumerate(parts)
        ]
    if not shorten:
        return [line]
    return [" " * lead + piece for piece in broken(word, max(width - lead, NAME_ROOM))]


def _continued(command: str, room: int, width: int) -> list[str]:
    """A `command` wider than `room` as shell lines: broken only at a space between its arguments
    (an option and its value kept together where a line holds both; never inside quotes), each
    line but the last ending in ` \\`, so that pasted it is still the one command. A word wider
    than the terminal (`width`), unquoted, is broken after a / (else a - + . or _) by a `\\` that
    ends the line with no space: the shell joins the pieces again (not folded mid-word)."""
    lines: list[str] = []
    for argument in _arguments(_shell_words(command)):
        # an option and its value too wide together: a line each (the value may still be broken)
        for word in [argument] if len(argument) + 2 <= room else argument.split(" ", 1):
            if lines and not _glued(lines[-1]) and len(lines[-1]) + 1 + len(word) + 2 <= room:
                lines[-1] += " " + word
            elif len(word) > width and not re.search(r"""['"\\]""", word):
                lines += _pieces(word, width)
            else:
                lines.append(word)
    return [line if _glued(line) else line + " \\" for line in lines[:-1]] + lines[-1:]


def _glued(line: str) -> bool:
    """A shell line that ends inside a word: `\\` right after it, no space (see _pieces)."""
    return line.endswith("\\") and not line.endswith(" \\")


def _pieces(word: str, width: int) -> list[str]:
    """A word wider than `width` as pieces that each end in `\\` (the shell removes a backslash and
    the newline after it, joining the word again), broken after a / (else a - + . or _)."""
    cuts = [
        piece
        for part in re.compile(_SLASH).split(word)
        for piece in (re.compile(r"(?<=[-+._])").split(part) if len(part) >= width else [part])
    ]
    lines = [""]
    for piece in cuts:
        if lines[-1] and len(lines[-1]) + len(piece) + 1 > width:
            lines.append("")
        lines[-1] += piece
    return [line + "\\" for line in lines[:-1]] + lines[-1:]


def _arguments(words: list[str]) -> list[str]:
    """The words, an option (`--set`, `-tp`) joined to the value after it: a line never ends
    between them (`--set \\` / `eagle3` reads as two arguments)."""
    joined: list[str] = []
    for word in words:
        option = joined[-1] if joined else ""
        if option.startswith("-") and option != "--" and " " not in option and not word.startswith("-"):
            joined[-1] += " " + word
        else:
            joined.append(word)
    return joined


def _shell_words(command: str) -> list[str]:
    """`command`'s words as written (quotes kept), split at the spaces outside quotes."""
    words, word, quote = [], "", ""
    for char in command:
        if char == " " and not quote:
            words += [word] if word else []
            word = ""
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        word += char
    return words + ([word] if word else [])


_COMMAND = r"`[^`]*`"
_ASIDE = r"\([^()]*\)[,;:.]?"
_QUOTED = r"""(?<![\w'"])(?:'[^'\n]*'|"[^"\n]*")(?![\w'"])[,;:.]?"""
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
NAME_ROOM = 16  # the fewest columns a name or a path is wrapped to
TEXT_ROOM = 30  # the fewest columns text is wrapped to; a last column narrower goes on lines of its own
BELOW = 4  # the indent of a row's text on lines of its own


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


_SLASH = r"(?<=/)"  # after each / of a path
_JOINER = r"(?<=[_\-])"  # after each _ or - of a name (an extension stays with its word)


def broken(name: str, width: int) -> list[str]:
    """A name (a path, a patch name, an identifier) in lines of at most `width` columns, broken
    after a `/` (else after a `_` or `-`); a piece longer than a line is shortened with … at its
    end."""
    pieces = [
        piece
        for part in re.compile(_SLASH).split(name)
        for piece in (re.compile(_JOINER).split(part) if len(part) > width else [part])
    ]
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return [line if len(line) <= width else line[: max(width - 1, 1)] + "\u2026" for line in lines]


def cell_lines(text: str, width: int, *, first: int = 0, indent: int = 0) -> list[str]:
    """Text in a table: wrapped at spaces; a `command` wider than a line wrapped at its own spaces,
    a word wider than a line (an identifier, a path) broken at its boundaries (broken): never
    cut mid-word."""
    lines = []
    for line in fitted(text, width, first=first, indent=indent):
        lead = len(line) - len(line.lstrip())
        room = max(width - lead, 1)
        packed = [""]
        for word in line.split():
            if len(word) > room:
                packed += [*broken(word, room), ""]
            elif packed[-1] and len(packed[-1]) + 1 + len(word) > room:
                packed.append(word)
            else:
                packed[-1] += (" " if packed[-1] else "") + word
        lines += [" " * lead + part for part in packed if part]
    return lines or [""]


def _text_floor(cells: list[str], header: str, width: int) -> int:
    """The fewest columns text is wrapped to: TEXT_ROOM, or its longest word (an identifier read
    whole), within what a line of its own gives it."""
    longest = max((len(word) for cell in cells for word in cell.split()), default=0)
    return min(max(TEXT_ROOM, longest, len(header)), max(width - BELOW, TEXT_ROOM))


def _name_floor(cells: list[str], header: str) -> int:
    """The fewest columns a column of names is wrapped to: its cells within NAME_ROOM (a short one
    whole), its header broken after a _ or - (a set's name over its matrix column), never cut."""
    longest = max(map(len, cells), default=0)
    header_piece = max(map(len, re.compile(_JOINER).split(header)), default=0)
    return min(max(longest, len(header)), max(min(NAME_ROOM, longest), header_piece))


@dataclass(eq=False, repr=False)
class FittedTable(Value):
    """A table fitted to a width: the columns kept on the row's line (`widths`), each row (the
    header first) as its cells' lines, and the lines under it of the columns put there (`below`)."""

    widths: list[int]
    rows: list[list[list[str]]]
    below: list[list[str]]


def fit_table(columns: list[str], rows: list[list[str]], width: int) -> FittedTable:
    """The columns fitted into `width`. The last columns that are text (a space in a cell) go on
    lines of their own under each row when the row cannot give them TEXT_ROOM (or their longest
    word), and the last columns of any kind when the row cannot keep the name in its first
    column (a patch, a check) whole beside them; then text is wrapped at spaces (never below
    that floor) and names (paths, patch names) wrapped after a / _ - or . (never below NAME_ROOM), the widest first."""
    natural = [max(map(len, cells)) for cells in zip(columns, *rows, strict=True)]
    is_text = [any(" " in row[i] for row in rows) for i in range(len(columns))]
    floors = [
        min(w, _text_floor([row[i] for row in rows], columns[i], width)) if is_text[i] else w
        for i, w in enumerate(natural)
    ]
    kept = len(columns)
    while kept > 1 and is_text[kept - 1] and sum(floors[:kept]) + GAP * (kept - 1) > width:
        kept -= 1
    least = [floors[i] if is_text[i] else _name_floor([row[i] for row in rows], columns[i]) for i in range(kept)]
    if not is_text[0] and not any("/" in row[0] for row in rows):
        # the row's own name (a patch, a check; not a path, read broken after a /) is kept whole
        least[0] = min(natural[0], width)
        while kept > 1 and sum(least[:kept]) + GAP * (kept - 1) > width:
            kept -= 1
    widths = natural[:kept]
    least = least[:kept]
    excess = sum(widths) + GAP * (kept - 1) - width
    for floor in (floors[:kept], least):
        excess = _narrow(widths, floor, excess)
    fitted_rows = [
        [
            cell_lines(cell, w) if is_text[i] else broken(cell, w)
            for i, (cell, w) in enumerate(zip(row[:kept], widths, strict=True))
        ]
        for row in [columns, *rows]
    ]
    moved = columns[kept:]
    labelled = len(moved) > 1 or any(is_text[:kept])  # unlabelled only where it is the row's one text
    below = [[] if not moved or labelled else [" " * BELOW + moved[0]]]
    for row in rows:
        said = [f"{name}: {cell}" if labelled else cell for name, cell in zip(moved, row[kept:], strict=True) if cell]
        hanging = BELOW + 2 if labelled else BELOW  # a label's text continues under its text
        below.append([line for text in said for line in cell_lines(text, width, first=BELOW, indent=hanging)])
    return FittedTable(widths, fitted_rows, below)
