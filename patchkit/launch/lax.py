"""A --speculative-config value as pydantic's lax mode reads it for the field vLLM declares (an int,
a bool): vLLM's SpeculativeConfig takes "2", 2.0 and "yes" as they read, and refuses what they refuse."""

from __future__ import annotations

import re

_LAX_INT = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0+)?")  # a string pydantic reads as an int
_I64 = 2**63  # pydantic reads a float as an int only within a 64-bit int
_TRUE, _FALSE = ("1", "on", "t", "true", "y", "yes"), ("0", "off", "f", "false", "n", "no")


def lax_int(value: object) -> int | bool | None:
    """The int pydantic reads: the number; False when it reads none (a fraction, a list, a text it
    cannot read as one); None when absent."""
    if value is None or isinstance(value, bool):
        return None if value is None else int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < _I64 else False
    if isinstance(value, str):  # "7", " +7 ", "1_000", "7.00"; not "0x7", "7k", "7.5", "1e2"
        text = value.strip()
        if not _LAX_INT.fullmatch(text):
            return False
        try:
            return int(text.split(".")[0])
        except ValueError:  # more digits than Python converts: not judged here
            return None
    return False


def lax_bool(value: object) -> bool | None:
    """The bool pydantic reads (a JSON bool, 0 or 1, or one of its words, any case, no spaces);
    None when absent or refused (vLLM's own validation refuses it at start)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value) if value in (0, 1) else None
    if isinstance(value, str):
        word = value.lower()
        return True if word in _TRUE else False if word in _FALSE else None
    return None


def lax_true(value: object) -> bool:
    """Whether pydantic reads `value` as True."""
    return lax_bool(value) is True
