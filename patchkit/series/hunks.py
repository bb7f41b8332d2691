"""Where a patch's hunks land in a file's bytes, and what they make of it (or, reversed, what it
was): the plan's core, kept apart so a check of one file's bytes loads nothing else."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from patchkit.base.enums import FileKind
from patchkit.base.errors import quoted
from patchkit.base.hashing import joined
from patchkit.base.values import FrozenValue, frozen
from patchkit.series.patchfile import Hunk, Patch, byte_lines, decode


class Placement(NamedTuple):
    hunk: Hunk
    line: int  # 1-based line of the hunk's first source line where it lands
    position: int  # the byte where that line starts

    @property
    def offset(self) -> int:
        expected = self.hunk.source_start if self.hunk.source_count else self.hunk.source_start + 1
        return self.line - expected


# a file a patch would create (or rename to) is there already: no hunk of it is judged (Mismatch.reason)
NEW_FILE_EXISTS = "is a new file in the patch but already exists"
RENAME_TARGET_EXISTS = "is a rename target but already exists"


@frozen
class Mismatch(FrozenValue):
    """Why a file part of a patch does not apply: which hunk, what it expected, what is there."""

    path: str
    hunk_index: int  # 1-based
    line: int
    expected: str
    found: str | None
    reason: str

    def describe(self) -> str:
        if self.found is None:
            return f"{self.path}: {self.reason}"
        text = (
            f"{self.path}: hunk #{self.hunk_index} does not apply: expected at line {self.line} "
            f"{quoted(repr(self.expected.rstrip(chr(10))))}, found {quoted(repr(self.found.rstrip(chr(10))))}"
        )
        return text if self.reason == "context does not match" else f"{text} ({self.reason})"


def made_file(
    read: Callable[[str], bytes | None], path: str, patches: list[Patch], *, digest: bool = True
) -> bytes | None:
    """What the patches make of `path`, from the files before them as `read` gives them: a file they
    add grows from nothing, a renamed one from its old name; None when a part does not apply or the
    patches delete it or move it away."""
    parts = [f for p in patches for f in p.files if path in (f.path, f.source_path)]
    if not parts:
        return read(path)
    content = None if parts[0].kind == FileKind.ADD else read(parts[0].source_path or path)
    for part in parts:
        if (content is None) != (part.kind == FileKind.ADD) or part.kind == FileKind.DELETE:
            return None
        placements = place_hunks(path, content or b"", part.hunks)
        if isinstance(placements, Mismatch):
            return None
        content = splice(content or b"", placements, digest=digest)
    return content if parts[-1].path == path else None


def reverse_file(
    read: Callable[[str], bytes | None], path: str, patches: list[Patch], *, digest: bool = True
) -> bytes | None:
    """What `path` held before the patches, from the tree as `read` gives it: every change they
    make to it undone, last patch first (a deleted file comes back from the lines the patch removed,
    a renamed one from its new name); None when one does not reverse, or a patch adds it or renames
    it before the last. `digest=False`: the result is only compared, so a large one is not hashed."""
    parts = [f for p in patches for f in p.files if path in (f.path, f.source_path)]
    if not parts or any(f.kind == FileKind.ADD or (f.kind == FileKind.RENAME and f is not parts[-1]) for f in parts):
        return None
    if parts[-1].kind == FileKind.RENAME and parts[-1].source_path != path:
        return None  # `path` is where it went: before the patches it was not there
    content = read(parts[-1].path)
    for part in reversed(parts):
        if (content is None) != (part.kind == FileKind.DELETE):
            return None
        placements = place_hunks(path, content or b"", part.reversed().hunks)
        if isinstance(placements, Mismatch):
            return None
        content = splice(content or b"", placements, digest=digest)
    return content


def place_hunks(path: str, data: bytes, hunks: tuple[Hunk, ...]) -> tuple[Placement, ...] | Mismatch:
    """Place each hunk at its line, or the nearest exact match after the previous hunk.

    The file stays one block of bytes: a hunk's lines are searched for as one block that starts
    a line, and line numbers are counted newlines. Only a conflict splits the file into lines.
    """
    placements: list[Placement] = []
    position = line = 0  # where the previous hunk ended: byte position, 0-based line
    offset = 0
    for index, hunk in enumerate(hunks, 1):
        anchor = hunk.source_start - 1 if hunk.source_count else hunk.source_start
        expected = anchor + offset
        if hunk.source_count:
            found = _find(data, hunk.source, expected, position, line)
        else:
            found = _locate(data, max(expected, line), position, line)
        if found is None:
            return _mismatch(path, index, byte_lines(data), hunk, max(expected, line))
        at_line, at = found
        position, line = at + len(hunk.source), at_line + hunk.source_count
        offset = at_line - anchor
        placements.append(Placement(hunk, at_line + 1, at))
    return tuple(placements)


def splice(data: bytes, placements: tuple[Placement, ...], *, digest: bool = True) -> bytes:
    """`data` with each placed hunk's source lines replaced by its target lines (`digest`: a large
    result's sha256 computed on the side, for the record and the journal that will want it)."""
    whole = memoryview(data)  # its slices are views: the file is copied once, into the result
    out: list[bytes | memoryview] = []
    position = 0
    for placement in placements:
        out += (whole[position : placement.position], placement.hunk.target)
        position = placement.position + len(placement.hunk.source)
    out.append(whole[position:])
    return joined(out, prefix_of=data) if digest else b"".join(out)  # out[0] is the start of data


def _locate(data: bytes, wanted: int, position: int, line: int) -> tuple[int, int]:
    """(line, position) of the wanted line, counting on from a known one; past the last line, the end."""
    while line < wanted and position < len(data):
        position = data.find(b"\n", position) + 1 or len(data)
        line += 1
    return line, position


def _find(data: bytes, block: bytes, expected: int, position: int, line: int) -> tuple[int, int] | None:
    """The (line, position) nearest the expected line where `block` starts a line, not before the
    given (line, position); of two equally near, the earlier."""
    ends_file = not block.endswith(b"\n")  # a last line without its newline matches only at the end
    below: tuple[int, int] | None = None
    counted_to = position
    # bytes.find prepares a long needle anew per call: find the block's head, compare the block
    # there; after a few heads without it (repeated lines, a quadratic compare) find the whole block.
    needle, misses = block[:_HEAD], 0
    position = data.find(needle, position)
    while position != -1:
        starts_line = position == 0 or data[position - 1] == 10
        if starts_line and data.startswith(block, position) and (not ends_file or position + len(block) == len(data)):
            line += data.count(b"\n", counted_to, position)
            counted_to = position
            if line >= expected:
                if below is not None and expected - below[0] <= line - expected:
                    return below
                return line, position
            below = line, position
        elif starts_line and len(needle) < len(block):
            misses += 1
            if misses > _HEAD_MISSES:
                needle = block
        position = data.find(needle, position + 1)
    return below


_HEAD = 64  # bytes of a block searched for; a shorter needle is searched for without preparing it
_HEAD_MISSES = 8  # head found without its block this often: the whole block is searched for instead


def _mismatch(path: str, index: int, lines: list[bytes], hunk: Hunk, at: int) -> Mismatch:
    wanted = hunk.source_lines
    for i, want in enumerate(wanted):
        have = lines[at + i] if at + i < len(lines) else None
        if have != want:
            found = "<end of file>" if have is None else decode(have)
            same_text = have is not None and have.rstrip(b"\r\n") == want.rstrip(b"\r\n")
            return Mismatch(
                path,
                index,
                at + i + 1,
                decode(want),
                found,
                "line endings differ (CRLF vs LF)" if same_text else "context does not match",
            )
    return Mismatch(
        path, index, at + 1, decode(wanted[0]) if wanted else "", None, f"hunk #{index} does not fit in the file"
    )
