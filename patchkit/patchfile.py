"""One patch: its DEP-3 header and its unified diff, parsed with unidiff into byte-exact hunks.

Text is decoded with `surrogateescape` everywhere, so non-UTF-8 bytes in a diff or a file
survive a round trip unchanged; line endings stay part of each line, so CRLF files work.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from patchkit.errors import BadInput

ENCODING = "utf-8"
ERRORS = "surrogateescape"
DEFAULT_ROOTS = ("vllm",)
DEV_NULL = "/dev/null"


def decode(data: bytes) -> str:
    return data.decode(ENCODING, ERRORS)


def encode(text: str) -> bytes:
    return text.encode(ENCODING, ERRORS)


_OTHER_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def split_lines(text: str) -> list[str]:
    """Split on "\\n" only (str.splitlines also splits on \\r, \\x0c, \\u2028 ...), keeping ends."""
    if not any(c in text for c in _OTHER_BREAKS):
        return text.splitlines(True)  # the same result when "\n" is the only break, and in C
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


@dataclass(frozen=True)
class Hunk:
    source_start: int  # 1-based, as in the "@@ -start,len" header
    source: tuple[str, ...]  # context and removed lines, exact line endings
    target: tuple[str, ...]  # context and added lines, exact line endings
    header: str

    def reversed(self) -> Hunk:
        return Hunk(self.source_start, self.target, self.source, self.header)


@dataclass(frozen=True)
class FilePatch:
    """The part of a diff that concerns one file."""

    source_path: str | None  # None for a new file
    target_path: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        return self.target_path or self.source_path  # type: ignore[return-value]

    @property
    def kind(self) -> str:
        if self.source_path is None:
            return "add"
        if self.target_path is None:
            return "delete"
        if self.source_path != self.target_path:
            return "rename"
        return "modify"

    def reversed(self) -> FilePatch:
        return FilePatch(self.target_path, self.source_path, tuple(h.reversed() for h in self.hunks))


@dataclass(frozen=True)
class Patch:
    name: str
    raw: bytes
    files: tuple[FilePatch, ...]
    header: dict[str, str] = field(default_factory=dict)
    path: Path | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def description(self) -> str:
        text = self.header.get("Description") or self.header.get("Subject") or ""
        return text.strip().splitlines()[0] if text.strip() else ""

    def reversed(self) -> Patch:
        files = tuple(f.reversed() for f in reversed(self.files))
        return Patch(self.name, self.raw, files, self.header, self.path)


def read_patch(path: Path, roots: tuple[str, ...] = DEFAULT_ROOTS) -> Patch:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read patch {path}: {exc.strerror}") from exc
    return parse_patch(raw, path.name, roots=roots, path=path)


def parse_patch(raw: bytes, name: str, *, roots: tuple[str, ...] = DEFAULT_ROOTS,
                path: Path | None = None) -> Patch:
    from unidiff import PatchSet
    from unidiff.errors import UnidiffParseError

    if b"\0" in raw or b"GIT binary patch" in raw:
        raise BadInput(f"{name}: binary data or a binary patch; only text diffs are supported")
    text = decode(raw)
    try:
        # unidiff validates the structure (headers, hunk line counts, binary entries); the
        # metadata-only parse is several times faster, and _hunk_bodies reads the lines after.
        parsed = PatchSet(text, metadata_only=True)
    except UnidiffParseError as exc:
        raise BadInput(f"{name}: malformed diff: {exc}") from exc
    bodies = _hunk_bodies(text, (hunk for patched_file in parsed for hunk in patched_file))
    files = tuple(_file_patch(name, pf, roots, bodies) for pf in parsed)
    if not files:
        raise BadInput(f"{name}: contains no diff (a patch must change something)")
    seen: set[str] = set()
    for fp in files:
        if fp.path in seen:
            raise BadInput(f"{name}: {fp.path} appears twice in one patch")
        seen.add(fp.path)
    return Patch(name=name, raw=raw, files=files, header=_dep3_header(text), path=path)


def _dep3_header(text: str) -> dict[str, str]:
    """DEP-3 fields are RFC 822 style lines at the top, before the first diff line."""
    match = _DIFF_START.search(text)
    head = text[:match.start()] if match else text
    # The header is prose for people: undecodable bytes become U+FFFD rather than surrogates,
    # which the email parser would hand back as Header objects that cannot be printed.
    head = encode(head).decode(ENCODING, "replace")
    message = HeaderParser().parsestr(head.rstrip("\n") + "\n\n")
    return {key: " ".join(value.split("\n")).strip() if key != "Description" else value
            for key, value in message.items()}


_DIFF_START = re.compile(r"^(?:diff |--- |Index: |---$)", re.MULTILINE)


def _file_patch(name: str, pf, roots: tuple[str, ...], bodies) -> FilePatch:
    if getattr(pf, "is_binary_file", False):
        raise BadInput(f"{name}: binary patch for {pf.path}; only text diffs are supported")
    # Only /dev/null marks a new or deleted file: unidiff's is_added_file also guesses "added"
    # from a lone @@ -0,0 hunk, which is just as well an edit of an empty file.
    source = None if pf.source_file == DEV_NULL else _safe_path(name, pf.source_file, roots)
    target = None if pf.target_file == DEV_NULL else _safe_path(name, pf.target_file, roots)
    if source is None and target is None:
        raise BadInput(f"{name}: a diff entry names no file")
    hunks = tuple(_hunk(name, pf.path, h, next(bodies)) for h in pf)
    info = "\n" + str(pf.patch_info or "")
    renamed = "\nrename from " in info and "\nrename to " in info
    if source and target and source != target and not renamed:
        raise BadInput(f"{name}: {source} and {target} differ without a rename header (truncated?)")
    if not hunks and not (renamed or (source is None and "\nnew file mode " in info)
                          or (target is None and "\ndeleted file mode " in info)):
        raise BadInput(f"{name}: the entry for {pf.path} has no hunks (truncated, or a mode-only change)")
    return FilePatch(source, target, hunks)


def _safe_path(name: str, raw_path: str, roots: tuple[str, ...]) -> str:
    """Strip the a/ b/ prefix and refuse anything that could leave the target tree."""
    raw_path = raw_path.strip()
    if raw_path.startswith(("a/", "b/")):
        raw_path = raw_path[2:]
    if "\\" in raw_path or raw_path.startswith("/") or not raw_path:
        raise BadInput(f"{name}: unsafe path {raw_path!r} (absolute or with backslashes)")
    parts = raw_path.split("/")
    if any(part in ("..", ".", "") for part in parts):
        raise BadInput(f"{name}: unsafe path {raw_path!r} ('..' or '.' components)")
    if parts[0] not in roots:
        allowed = ", ".join(f"{r}/" for r in roots)
        raise BadInput(f"{name}: path {raw_path!r} is outside the patched package ({allowed})")
    return raw_path


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _hunk_bodies(text: str, hunks):
    """Each hunk's (header numbers, source lines, target lines), in order, with exact line ends.

    `hunks` are unidiff's metadata-only hunks: they carry the counts unidiff validated, so a
    body is a slice of known length unless a "\\ No newline at end of file" marker is about.
    """
    lines = split_lines(text)
    markers = "\n\\" in text
    i, n = 0, len(lines)
    for hunk in hunks:
        while i < n and not (lines[i].startswith("@@ -") and _HUNK_HEADER.match(lines[i])):
            i += 1
        i += 1
        if markers:
            begin, i = i, _body_end(lines, i, hunk.source_length, hunk.target_length)
            source, target = _with_markers(lines[begin:i])
        else:
            body = lines[i:i + hunk.source_length + hunk.added]
            i += len(body)
            # a line that is only a newline is empty context: keep it whole
            source = [line[1:] if line[0] in " -" else line for line in body if line[0] != "+"]
            target = [line[1:] if line[0] in " +" else line for line in body if line[0] != "-"]
        yield source, target


def _body_end(lines: list[str], i: int, s_len: int, t_len: int) -> int:
    n = len(lines)
    while (s_len > 0 or t_len > 0) and i < n:
        kind = lines[i][0]
        if kind == "-":
            s_len -= 1
        elif kind == "+":
            t_len -= 1
        elif kind != "\\":
            s_len -= 1
            t_len -= 1
        i += 1
    while i < n and lines[i][0] == "\\":
        i += 1
    return i


def _with_markers(body: list[str]) -> tuple[list[str], list[str]]:
    """The slow path: "\\ No newline at end of file" takes the newline off the line before it."""
    source: list[str] = []
    target: list[str] = []
    last: list[list[str]] = []
    for line in body:
        kind = line[0]
        if kind == "\\":
            for side in last:
                if side[-1].endswith("\n"):
                    side[-1] = side[-1][:-1]
            continue
        value = line[1:] if kind in " -+" else line
        last = [source] if kind == "-" else [target] if kind == "+" else [source, target]
        for side in last:
            side.append(value)
    return source, target


def _hunk(name: str, path: str, hunk, body) -> Hunk:
    source, target = body
    if source == target:
        raise BadInput(f"{name}: hunk {hunk.source_start} of {path} changes nothing")
    header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    return Hunk(hunk.source_start, tuple(source), tuple(target), header)
