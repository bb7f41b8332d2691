"""One patch: its DEP-3 header and its unified diff, read into byte-exact hunks.

unidiff reads the diff's file entries; the hunk bodies are read here, by their counts, as two
blocks of bytes each (what the hunk expects, what it leaves). Hunks stay bytes, so non-UTF-8
bytes and CRLF line endings survive unchanged; paths and messages are decoded with
`surrogateescape`. tests/test_reader.py holds the reader to unidiff's full parse.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from functools import cached_property, partial
from pathlib import Path

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchedFile, PatchSet

from patchkit.base import fsutil
from patchkit.base.enums import FileKind
from patchkit.base.errors import BadInput, escaped
from patchkit.base.fsutil import too_deep, unsafe_reason
from patchkit.base.values import FrozenValue, frozen

ENCODING = "utf-8"
ERRORS = "surrogateescape"
DEFAULT_ROOTS = ("vllm",)
DEV_NULL = "/dev/null"
REGULAR_MODES = ("100644", "100755", "100664")  # git's modes of a regular file (100664: old git)


def decode(data: bytes) -> str:
    return data.decode(ENCODING, ERRORS)


def encode(text: str) -> bytes:
    return text.encode(ENCODING, ERRORS)


def byte_lines(data: bytes) -> list[bytes]:
    """Split on b"\\n" only (bytes.splitlines also splits on a lone \\r), keeping line ends."""
    if b"\r" not in data:
        return data.splitlines(True)  # the same result when "\\n" is the only break, and in C
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


class Hunk:
    """One hunk as two blocks of bytes: the lines it expects and the lines it leaves, with exact
    line endings (a last line without its newline is a "\\ No newline at end of file").

    `target` may be given as a function that cuts it from the diff when first asked for: a dry
    run, which only places hunks, never needs it.
    """

    __slots__ = ("_target", "source", "source_count", "source_start", "target_count", "target_start")

    def __init__(
        self,
        source_start: int,
        target_start: int,
        source: bytes,
        target: bytes | Callable[[], bytes],
        source_count: int,
        target_count: int,
    ):
        self.source_start = source_start  # 1-based, as in the "@@ -start,len" header
        self.target_start = target_start
        self.source = source  # context and removed lines
        self._target = target  # context and added lines
        self.source_count = source_count  # lines in `source`
        self.target_count = target_count

    @property
    def target(self) -> bytes:
        if not isinstance(self._target, bytes):
            self._target = self._target()
        return self._target

    @property
    def header(self) -> str:
        return f"@@ -{self.source_start},{self.source_count} +{self.target_start},{self.target_count} @@"

    @property
    def source_lines(self) -> list[bytes]:
        return byte_lines(self.source)

    def changes_nothing(self) -> bool:
        # line counts that differ settle it without making the target
        return self.source_count == self.target_count and self.source == self.target

    def reversed(self) -> Hunk:
        return Hunk(
            self.target_start, self.source_start, self.target, self.source, self.target_count, self.source_count
        )

    def _key(self) -> tuple[int, int, bytes, bytes, int, int]:
        return self.source_start, self.target_start, self.source, self.target, self.source_count, self.target_count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hunk) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Hunk({self.header}, source={self.source!r}, target={self.target!r})"


@frozen
class FilePatch(FrozenValue):
    """The part of a diff that concerns one file."""

    source_path: str | None  # None for a new file
    target_path: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        return self.target_path or self.source_path  # type: ignore[return-value]

    @property
    def kind(self) -> FileKind:
        if self.source_path is None:
            return FileKind.ADD
        if self.target_path is None:
            return FileKind.DELETE
        if self.source_path != self.target_path:
            return FileKind.RENAME
        return FileKind.MODIFY

    def reversed(self) -> FilePatch:
        return FilePatch(self.target_path, self.source_path, tuple(h.reversed() for h in self.hunks))


@frozen
class Patch(FrozenValue):
    """A patch file: its name, its bytes and the files it changes."""

    name: str
    raw: bytes
    files: tuple[FilePatch, ...]
    path: Path | None = None

    @cached_property
    def header(self) -> dict[str, str]:
        """The DEP-3 fields, read when asked for (a large ad-hoc diff seldom has any)."""
        return _dep3_header(self.raw)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def description(self) -> str:
        text = self.header.get("Description") or self.header.get("Subject") or ""
        return text.strip().splitlines()[0] if text.strip() else ""

    def reversed(self) -> Patch:
        files = tuple(f.reversed() for f in reversed(self.files))
        return Patch(self.name, self.raw, files, self.path)


def touched_paths(patches: list[Patch]) -> list[str]:
    """Every file the patches name, a rename's source too, sorted."""
    return sorted(
        {f.path for p in patches for f in p.files} | {f.source_path for p in patches for f in p.files if f.source_path}
    )


PATCH_LIMIT = 64 << 20  # a patch larger than this is not a patch patchkit reads


def read_patch(path: Path, roots: tuple[str, ...] = DEFAULT_ROOTS, *, follow_symlinks: bool = False) -> Patch:
    """A patch file: a regular file of at most PATCH_LIMIT bytes (a fifo or a device is refused,
    never read); a symlink only with `follow_symlinks` (a path the user named, not a library's)."""
    try:
        raw = fsutil.read_regular(path, PATCH_LIMIT, follow_symlinks=follow_symlinks)
    except OSError as exc:
        raise BadInput(f"cannot read patch {path}: {exc.strerror}") from exc
    return parse_patch(raw, path.name, roots=roots, path=path)


def parse_patch(raw: bytes, name: str, *, roots: tuple[str, ...] = DEFAULT_ROOTS, path: Path | None = None) -> Patch:

    if b"\0" in raw or b"GIT binary patch" in raw:
        raise BadInput(f"{name}: binary data or a binary patch; only text diffs are supported")
    if not raw.endswith(b"\n") and raw.strip():  # strip() copies: a large diff ends in a newline
        # as git: the last line may be cut anywhere, a header as well as a hunk line
        raise BadInput(f"{name}: the last line has no line end: the diff looks truncated")
    skeleton, runs = read_hunks(name, raw)
    try:
        # unidiff reads the file entries (git headers, ---/+++ lines, renames, modes, binary
        # markers) from the diff with every hunk body cut to one line: that is where a diff's
        # grammar is subtle. The bodies, most of a large diff, are read here by their counts.
        parsed = PatchSet(decode(skeleton), metadata_only=True)
    except UnidiffParseError as exc:
        raise BadInput(f"{name}: malformed diff: {exc}") from exc
    if sum(len(patched_file) for patched_file in parsed) != len(runs):
        raise BadInput(f"{name}: malformed diff: a hunk header is not where a hunk can be")
    queue = iter(runs)
    files = tuple(_file_patch(name, pf, roots, [h for _ in pf for h in next(queue)]) for pf in parsed)
    if not files:
        raise BadInput(f"{name}: contains no diff (a patch must change something)")
    seen: set[str] = set()
    for fp in files:
        if fp.path in seen:
            raise BadInput(f"{name}: {fp.path} appears twice in one patch")
        seen.add(fp.path)
    return Patch(name=name, raw=raw, files=files, path=path)


def _dep3_header(raw: bytes) -> dict[str, str]:
    """DEP-3 fields are RFC 822 style lines at the top, before the first diff line."""
    match = re.compile(_DIFF_START).search(raw)
    # The header is prose for people: undecodable bytes become U+FFFD rather than surrogates,
    # which the email parser would hand back as Header objects that cannot be printed.
    head = (raw[: match.start()] if match else raw).decode(ENCODING, "replace")
    # lazy: only a patch with a mail header needs it
    from email.parser import HeaderParser

    message = HeaderParser().parsestr(head.rstrip("\n") + "\n\n")
    return {
        key: " ".join(value.split("\n")).strip() if key != "Description" else value for key, value in message.items()
    }


# The patterns here are text, compiled on first use (re keeps them): start-up compiles none a run does not use.
_DIFF_START = rb"(?m)^(?:diff |--- |Index: |---$)"


def _file_patch(name: str, pf: PatchedFile, roots: tuple[str, ...], hunks: list[Hunk]) -> FilePatch:
    if getattr(pf, "is_binary_file", False):
        raise BadInput(f"{name}: binary patch for {pf.path}; only text diffs are supported")
    # Only /dev/null marks a new or deleted file: unidiff's is_added_file also guesses "added"
    # from a lone @@ -0,0 hunk, which is just as well an edit of an empty file.
    source = None if pf.source_file == DEV_NULL else _safe_path(name, pf.source_file, roots)
    target = None if pf.target_file == DEV_NULL else _safe_path(name, pf.target_file, roots)
    if source is None and target is None:
        raise BadInput(f"{name}: a diff entry names no file")
    modes = {getattr(pf, "source_mode", None), getattr(pf, "target_mode", None)}
    odd_modes = sorted(str(mode) for mode in modes if mode is not None and mode not in REGULAR_MODES)
    if odd_modes:
        raise BadInput(
            f"{name}: {pf.path} has mode {', '.join(odd_modes)}: only regular files are "
            "patched (not symlinks or submodules)"
        )
    for hunk in hunks:
        if hunk.changes_nothing():
            raise BadInput(f"{name}: hunk {hunk.source_start} of {pf.path} changes nothing")
    info = "\n" + str(pf.patch_info or "")
    renamed = "\nrename from " in info and "\nrename to " in info
    _names_agree(name, info, roots, source, target)
    if source and target and source != target and not renamed:
        raise BadInput(f"{name}: {source} and {target} differ without a rename header (truncated?)")
    if not hunks and not (
        renamed
        or (source is None and "\nnew file mode " in info)
        or (target is None and "\ndeleted file mode " in info)
    ):
        raise BadInput(f"{name}: the entry for {pf.path} has no hunks (truncated, or a mode-only change)")
    return FilePatch(source, target, tuple(hunks))


# a git diff's extended header lines naming a path (no a/ b/ prefix), and the side each names
_NAMING = (("rename from ", 0), ("copy from ", 0), ("rename to ", 1), ("copy to ", 1))


def _names_agree(name: str, info: str, roots: tuple[str, ...], *sides: str | None) -> None:
    """`rename from`/`copy from` and `rename to`/`copy to` lines, each a safe path (git apply refuses
    ../x: "invalid path"), naming the file the entry's header names on that side: git apply takes
    the line's name, where the header's is what patchkit applies."""
    for line in info.split("\n"):
        for key, side in _NAMING:
            if line.startswith(key) and _safe_path(name, line[len(key) :], roots, prefixed=False) != sides[side]:
                raise BadInput(
                    f"{name}: '{escaped(line)}' names another file than its diff --git header "
                    f"({escaped(str(sides[side] or DEV_NULL))}): git apply takes the line's name",
                    hint=f"check {name}, or make it again: git diff -M",
                )


def _safe_path(name: str, raw_path: str, roots: tuple[str, ...], *, prefixed: bool = True) -> str:
    """Unquote, strip the a/ b/ prefix (`prefixed`) and refuse anything that could leave the target tree."""
    raw_path = raw_path.strip()
    if len(raw_path) > 1 and raw_path.startswith('"') and raw_path.endswith('"'):
        raw_path = _unquote(name, raw_path)
    if prefixed and raw_path.startswith(("a/", "b/")):
        raw_path = raw_path[2:]
    reason = unsafe_reason(raw_path)
    if reason:
        raise BadInput(f"{name}: unsafe path {raw_path!r} (the path {reason})")
    if too_deep(raw_path):  # patchkit records no such path: apply would write a record no command reads
        raise BadInput(
            f"{name}: the path {raw_path!r} {too_deep(raw_path)}",
            hint=f"check {name}: no file of vLLM lies that deep",
        )
    if raw_path.split("/", 1)[0] not in roots:
        allowed = ", ".join(f"{r}/" for r in roots)
        raise BadInput(f"{name}: path {raw_path!r} is outside the patched package ({allowed})")
    return raw_path


# git's C-style quoting of a path with special or non-ASCII bytes (quote.c: unquote_c_style)
_QUOTED_PART = rb'\\([0-3][0-7]{2}|[abfnrtv\\"])|([^\\"]+)'
_C_ESCAPES = {b"a": b"\a", b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v"}


def _unquote(name: str, quoted: str) -> str:
    """A path git quoted ("b/vllm/\\303\\251.py"): its escapes and octal bytes undone, decoded as
    every path is. An escape git does not write, or a bare quote inside, is a malformed diff."""
    body = encode(quoted[1:-1])
    parts: list[bytes] = []
    position = 0
    while position < len(body):
        match = re.compile(_QUOTED_PART).match(body, position)
        if match is None:
            raise BadInput(f"{name}: malformed diff: bad quoting in the path {quoted!r}")
        escape, plain = match.groups()
        if plain is not None:
            parts.append(plain)
        elif len(escape) == 3:
            parts.append(bytes([int(escape, 8)]))
        else:
            parts.append(_C_ESCAPES.get(escape, escape))
        position = match.end()
    return decode(b"".join(parts))


# unidiff's own hunk header pattern, for bytes (used with match(), which anchors it)
_HUNK_HEADER = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))?\ @@[ ]?(.*)")
_SKELETON_HUNK = b"@@ -1 +1 @@\n \n"
# the content of each line a side keeps (a bare line end is empty context and kept whole)
_SOURCE_LINE = re.compile(rb"\n(?:[ \-]|(?=[\r\n]))([^\n]*)")
_TARGET_LINE = re.compile(rb"\n(?:[ +]|(?=[\r\n]))([^\n]*)")
_MINUS, _PLUS, _SPACE, _MARKER, _CR = b"-", b"+", b" ", b"\\", b"\r"


def read_hunks(name: str, raw: bytes) -> tuple[bytes, list[list[Hunk]]]:
    """The diff with each run of hunks cut to one one-line hunk (for unidiff), and those runs.

    A body is as long as its header's counts say, as unidiff reads it: a line may begin with
    "-", "+", " " or "\\"; a bare line end is empty context.
    """
    text = b"\n" + raw  # so that every line, the first one too, starts after a newline
    skeleton: list[bytes] = []
    runs: list[list[Hunk]] = []
    position = 1  # the first line not read yet
    in_run = False
    next_file = 0  # the next "\ndiff " at or after the hunk being read; -1: there is none
    newline = text.find(b"\n@@ -")
    while newline != -1:
        header = newline + 1
        line_end = text.find(b"\n", header)
        line_end = len(text) if line_end == -1 else line_end
        match = _HUNK_HEADER.match(text, header, line_end)
        if match is None and ((in_run and header == position) or _follows_file_header(text, header)):
            line = text.count(b"\n", 0, header)  # the 1-based line number in `raw`: text starts with "\n"
            raise BadInput(
                f"{name}: malformed diff: line {line}: corrupt hunk header {decode(text[header:line_end])!r}"
            )
        if match is None:
            skeleton.append(text[position : line_end + 1])
            position, in_run = line_end + 1, False
            newline = text.find(b"\n@@ -", line_end)
            continue
        if header > position or not in_run:
            skeleton += (text[position:header], _SKELETON_HUNK)
            runs.append([])
        if next_file != -1 and next_file < line_end:
            next_file = text.find(b"\ndiff ", line_end)
        newline = text.find(b"\n@@ -", line_end)
        hunk, position = _read_hunk(name, text, line_end, match, _first(newline, next_file))
        runs[-1].append(hunk)
        in_run = True
    skeleton.append(text[position:])
    return b"".join(skeleton), runs


def _follows_file_header(text: bytes, line_start: int) -> bool:
    """Whether the line before the one at `line_start` is a "+++ " line: where git wants a hunk header
    (elsewhere, between files or in the DEP-3 header, git too ignores a line that is not one)."""
    previous = text.rfind(b"\n", 0, line_start - 1) + 1
    return text.startswith(b"+++ ", previous, line_start)


def _first(a: int, b: int) -> int:
    """The nearer of two find() results (-1: not found)."""
    return max(a, b) if a == -1 or b == -1 else min(a, b)


def _read_hunk(name: str, text: bytes, header_end: int, header: re.Match[bytes], stop: int) -> tuple[Hunk, int]:
    """The hunk whose header line ends (in a newline) at `header_end`, and where the diff goes on.

    The fast path: in git's output a body runs to the next hunk or file (the newline at `stop`),
    which the counts confirm; anything else is read a line at a time.
    """
    source_count = 1 if header[2] is None else int(header[2])
    target_count = 1 if header[4] is None else int(header[4])
    end = len(text) if stop == -1 else stop + 1
    if text[end - 1] == 10:
        hunk = _plain_hunk(text, header_end, end, header, source_count, target_count)
        if hunk is not None:
            return hunk, end
    body, end = _body(name, text, header_end + 1, header, source_count, target_count)
    source, target = _blocks_with_markers(body)
    return Hunk(int(header[1]), int(header[3]), source, target, source_count, target_count), end


def _plain_hunk(
    text: bytes, start: int, end: int, header: re.Match[bytes], source_count: int, target_count: int
) -> Hunk | None:
    """The hunk when its body (the lines after `start` up to the newline before `end`) is all
    source lines and added ones, as many as the counts say (no "\\" marker, nothing else); else None.

    Each test is a C-level pass over the body; a new file's hunk (the bulk of a release diff) needs
    two: all its lines are added ones."""
    lines = text.count(b"\n", start, end - 1)
    added = text.count(b"\n+", start, end)
    target = partial(_block, _TARGET_LINE, text, start, end) if target_count else b""
    if not source_count:
        ok = lines == added == target_count
        return Hunk(int(header[1]), int(header[3]), b"", target, 0, target_count) if ok else None
    if lines - added != source_count or lines - text.count(b"\n-", start, end) != target_count:
        return None
    source_lines = _SOURCE_LINE.findall(text, start, end)
    if len(source_lines) != source_count:
        return None
    source_lines.append(b"")  # the last line's newline, without copying the block once more
    return Hunk(int(header[1]), int(header[3]), b"\n".join(source_lines), target, source_count, target_count)


def _block(side: re.Pattern[bytes], text: bytes, start: int, end: int) -> bytes:
    """One side of a plain body: the lines it keeps, each without its first character."""
    return b"\n".join(side.findall(text, start, end)) + b"\n"


def _body(
    name: str, raw: bytes, position: int, header: re.Match[bytes], source_left: int, target_left: int
) -> tuple[list[bytes], int]:
    """The slow path, a line at a time: the body's lines (without line ends) and where it ends."""
    body: list[bytes] = []

    def take() -> bytes:
        nonlocal position
        end = raw.find(b"\n", position)
        end = len(raw) if end == -1 else end
        line, position = raw[position:end], end + 1
        body.append(line)
        return line

    while source_left > 0 or target_left > 0:
        if position >= len(raw):
            raise BadInput(f"{name}: malformed diff: hunk is shorter than expected: {decode(header[0])}")
        kind = take()[:1]
        if kind == _MINUS:
            source_left -= 1
        elif kind == _PLUS:
            target_left -= 1
        elif kind in (_SPACE, _CR) or kind == b"":
            source_left -= 1
            target_left -= 1
        elif kind != _MARKER:
            raise BadInput(f"{name}: malformed diff: hunk diff line expected: {decode(body[-1])!r}")
        if source_left < 0 or target_left < 0:
            raise BadInput(f"{name}: malformed diff: hunk is longer than expected: {decode(header[0])}")
    while raw.startswith(b"\\", position):
        take()
    return body, min(position, len(raw))


def _blocks_with_markers(body: list[bytes]) -> tuple[bytes, bytes]:
    """The slow path: "\\ No newline at end of file" takes the newline off the line before it."""
    source: list[bytes] = []
    target: list[bytes] = []
    last: list[list[bytes]] = []
    for line in body:
        kind = line[:1]
        if kind == _MARKER:
            for side in last:
                if side[-1].endswith(b"\n"):
                    side[-1] = side[-1][:-1]
            continue
        value = (line[1:] if kind in (_SPACE, _MINUS, _PLUS) else line) + b"\n"
        last = [source] if kind == _MINUS else [target] if kind == _PLUS else [source, target]
        for side in last:
            side.append(value)
    return b"".join(source), b"".join(target)
