"""`--help` wrapped at spaces only. click wraps at a hyphen too (`site-` / `packages`, `--no-` /
`import`) and cuts a word longer than its line; here a word is never broken, and an option whose
description holds a word wider than its column has the description on lines of its own under it."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

import click

BELOW = 4  # the indent, under its option, of a description that has no room beside it


def wrapped(text: str, width: int, indent: str = "") -> list[str]:
    """`text` as click's help shows it (its paragraphs apart, a paragraph led by a \\b line kept
    as written), each line at most `width` columns unless one word is wider: broken at spaces only."""
    lines: list[str] = []
    for paragraph in text.expandtabs().split("\n\n"):
        rows = paragraph.splitlines()
        if not rows:
            continue
        if lines:
            lines.append("")
        if rows[0].strip() == "\b":
            lines += [indent + row for row in rows[1:]]
            continue
        lead = indent + " " * (len(rows[0]) - len(rows[0].lstrip()))
        lines += textwrap.wrap(
            " ".join(row.strip() for row in rows),
            width,
            initial_indent=lead,
            subsequent_indent=lead,
            break_long_words=False,
            break_on_hyphens=False,
        ) or [lead]
    return lines


class HelpFormatter(click.HelpFormatter):
    """click's help layout, its text wrapped by `wrapped`."""

    def write_text(self, text: str) -> None:
        lines = wrapped(text, self.width, " " * self.current_indent)
        self.write("\n".join(lines) + "\n")

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((len(term) for term, _ in rows), default=0), col_max) + col_spacing
        for term, text in rows:
            self.write(" " * self.current_indent + term)
            if not text:
                self.write("\n")
                continue
            hang = first_col + self.current_indent
            room = self.width - hang
            if max(map(len, text.split()), default=0) > room:  # no room beside the term for its widest word
                hang = self.current_indent + BELOW
                room = self.width - hang
                self.write("\n" + " " * hang)
            elif len(term) > first_col - col_spacing:
                self.write("\n" + " " * hang)
            else:
                self.write(" " * (first_col - len(term)))
            lines = wrapped(text, room)
            self.write(lines[0].rstrip() + "\n")
            self.write("".join((" " * hang + line).rstrip() + "\n" for line in lines[1:]))


class HelpContext(click.Context):
    formatter_class = HelpFormatter
