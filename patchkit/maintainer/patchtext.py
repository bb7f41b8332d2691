"""A patch file's text: its DEP-3 header and its diff, and when a rewritten diff counts as changed."""

from __future__ import annotations

import datetime
import re

from patchkit.base.errors import BadInput
from patchkit.series.patchfile import encode, parse_patch

_DIFF_START = re.compile(r"^(?:diff |--- |Index: |---$)", re.MULTILINE)
_LAST_UPDATE = re.compile(r"^Last-Update:.*$", re.MULTILINE)


def split_header(text: str) -> tuple[str, str]:
    """(DEP-3 header, diff): the header is what precedes the first diff line or the '---' line."""
    match = _DIFF_START.search(text)
    if not match:
        return text, ""
    header, rest = text[: match.start()], text[match.start() :]
    if rest.startswith("---\n"):
        rest = rest[len("---\n") :]
    return header, rest


def join_header(header: str, body: str) -> str:
    return f"{header}---\n{body}" if header else body


def touch_header(header: str, today: str) -> str:
    """The header with Last-Update set to today (added when missing)."""
    if not header:
        return header
    if _LAST_UPDATE.search(header):
        return _LAST_UPDATE.sub(f"Last-Update: {today}", header, count=1)
    return header + f"Last-Update: {today}\n"


def keep_or_touch(header: str, old_body: str, new_body: str, today: str, roots: list[str]) -> tuple[str, str]:
    """An unchanged diff keeps its text and header byte for byte (even if another tool wrote it, with
    `index` lines); a changed one is written in patchkit's form with Last-Update set to today."""
    if new_body == old_body or _same_hunks(old_body, new_body, roots):
        return header, old_body
    return touch_header(header, today), new_body


def _same_hunks(a: str, b: str, roots: list[str]) -> bool:
    try:
        return (
            parse_patch(encode(a), "a", roots=tuple(roots)).files
            == parse_patch(encode(b), "b", roots=tuple(roots)).files
        )
    except BadInput:
        return False


def today_iso() -> str:
    return datetime.date.today().isoformat()
