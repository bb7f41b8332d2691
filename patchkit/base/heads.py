"""Lines (the launch guard's problems) found by the path they begin with, in time linear in the
paths asked about.

A problem names its file first (`vllm/x.py is missing`, or the path's repr). Asking each recorded
path of each problem is the product of the two, and a record may name tens of thousands of files:
the lines are sorted once, and those beginning with a head are one bisection away (they are
consecutive in that order).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable


class Heads:
    """The lines given, by what they begin with."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._sorted = sorted(set(lines))

    def starting(self, head: str) -> list[str]:
        """The lines that begin with `head` (each once)."""
        at = bisect_left(self._sorted, head)
        found = []
        while at < len(self._sorted) and self._sorted[at].startswith(head):
            found.append(self._sorted[at])
            at += 1
        return found

    def any_starts(self, *heads: str) -> bool:
        """Whether a line begins with one of `heads`."""
        for head in heads:
            at = bisect_left(self._sorted, head)
            if at < len(self._sorted) and self._sorted[at].startswith(head):
                return True
        return False

    def naming(self, paths: Iterable[str]) -> set[str]:
        """The lines that begin with one of `paths` and a space (a problem of that file)."""
        return {line for path in paths for line in self.starting(f"{path} ")}

    def first_named(self, paths: Iterable[str]) -> dict[str, str]:
        """{line: the first of `paths` (in their order) it begins with, and a space}."""
        found: dict[str, str] = {}
        for path in paths:
            for line in self.starting(f"{path} "):
                found.setdefault(line, path)
        return found


def naming(lines: Iterable[str], paths: Iterable[str]) -> set[str]:
    """Of `lines`, those that begin with one of `paths` and a space."""
    return Heads(lines).naming(paths)
