"""The smallest correct raw copy of zip members (CPython's zipfile has no public API for it, gh-113924).

Reading: zipfile parses the central directory; every member is then held to the rules a wheel's
members must meet (patchkit treats an input wheel as untrusted, like a diff): a name the one path
rule accepts (fsutil.unsafe_reason), no duplicate, no symlink or special file in its mode bits, not
encrypted, a compression zipfile can read, and a local header that names it with its data inside
the file.

Writing: each member gets a fresh local header (its name, CRC, sizes; no data descriptor, no extra
field) and its compressed bytes: those of the input, copied as they are (os.copy_file_range, else
read/write) and never inflated, or new ones deflated here. Then one central directory with the new
offsets. zip64 is not written: an archive whose offsets, sizes or member count need it (beyond
4 GiB, 65,535 members) is refused, each batch of members before a byte of it is written.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import struct
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any

from patchkit.base.errors import BadInput
from patchkit.base.fsutil import unsafe_reason
from patchkit.distinfo.record import record_hash

ZIP32_LIMIT = 0xFFFFFFFF  # an offset or size must stay below it without zip64
MEMBER_LIMIT = 0xFFFF
# A member name's bounds (vLLM 0.16.0's longest: 145 bytes, 8 parts): a longer one installs nowhere useful.
NAME_BYTES_LIMIT = 1024
NAME_PARTS_LIMIT = 64

_LOCAL = struct.Struct("<4s2B4HL2L2H")  # 30 bytes
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # 46 bytes
_END = struct.Struct("<4s4H2LH")  # 22 bytes
_LOCAL_SIG = b"PK\x03\x04"
_CENTRAL_SIG = b"PK\x01\x02"
_END_SIG = b"PK\x05\x06"

_ENCRYPTED = 0x1
_DATA_DESCRIPTOR = 0x8
_UTF8_NAME = 0x800
_READABLE = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
# copy_file_range cannot copy between these two files: fall back to read/write
_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF}
_CHUNK = 1 << 20
_SMALL = 1 << 20  # a member's data up to this is written with its header, batched
_BATCH = 8 << 20
NEW_FILE_MODE = 0o100644 << 16  # a regular file, rw-r--r--, in a member's external attributes
SHOWN_LIMIT = 100  # a member name in a message: at most this many characters, its middle cut with …


def shown(name: str) -> str:
    """A member name as a message shows it: quoted (repr, so control characters are escaped), a long
    one with its middle replaced by … (a name may be 1,024 bytes; its start and file name tell it)."""
    quoted = repr(name)
    if len(quoted) <= SHOWN_LIMIT:
        return quoted
    keep = SHOWN_LIMIT - 1
    return quoted[: keep // 2] + "…" + quoted[-(keep - keep // 2) :]


@dataclass(frozen=True)
class Member:
    """One member of the input, as its central directory describes it, and where its data starts."""

    info: zipfile.ZipInfo
    data_offset: int

    @property
    def name(self) -> str:
        return self.info.orig_filename

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


@dataclass
class Entry:
    """One member of the output: its header fields, and its compressed bytes (`data`, or `source`'s
    data range in the input)."""

    name: str
    crc: int
    compress_size: int
    file_size: int
    compress_type: int
    date_time: tuple[int, int, int, int, int, int]
    external_attr: int = NEW_FILE_MODE
    internal_attr: int = 0
    flag_bits: int = 0
    create_system: int = 3
    create_version: int = 20
    extract_version: int = 20
    data: bytes | None = field(default=None, repr=False)
    source: Member | None = None
    digest: str | None = None  # its hash as RECORD writes it ("sha256=..."), once known

    @property
    def encoded_name(self) -> bytes:
        return self.name.encode("utf-8")

    @property
    def flags(self) -> int:
        utf8 = _UTF8_NAME if not self.name.isascii() else 0
        return (self.flag_bits & ~(_DATA_DESCRIPTOR | _UTF8_NAME)) | utf8

    def local_header(self) -> bytes:
        t, d = _dos_time(self.date_time)
        name = self.encoded_name
        return _LOCAL.pack(
            _LOCAL_SIG, self.extract_version, 0, self.flags, self.compress_type, t, d,
            self.crc, self.compress_size, self.file_size, len(name), 0,
        )  # fmt: skip

    def central_header(self, offset: int) -> bytes:
        t, d = _dos_time(self.date_time)
        name = self.encoded_name
        header = _CENTRAL.pack(
            _CENTRAL_SIG, self.create_version, self.create_system, self.extract_version, 0, self.flags,
            self.compress_type, t, d, self.crc, self.compress_size, self.file_size, len(name), 0, 0, 0,
            self.internal_attr, self.external_attr, offset,
        )  # fmt: skip
        return header + name


def raw(member: Member, name: str | None = None) -> Entry:
    """`member` copied as its compressed bytes, under its own name or `name`."""
    info = member.info
    return Entry(
        name=name or member.name,
        crc=info.CRC,
        compress_size=info.compress_size,
        file_size=info.file_size,
        compress_type=info.compress_type,
        date_time=info.date_time,
        external_attr=info.external_attr,
        internal_attr=info.internal_attr,
        flag_bits=info.flag_bits,
        create_system=info.create_system,
        create_version=info.create_version,
        extract_version=info.extract_version,
        source=member,
    )


def deflated(name: str, content: bytes, like: Member | None, date_time: tuple[int, int, int, int, int, int]) -> Entry:
    """A member holding `content`, deflated; with the mode and time of `like` (the member it
    replaces) if given."""
    packer = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    data = packer.compress(content) + packer.flush()
    return Entry(
        name=name,
        crc=zlib.crc32(content),
        compress_size=len(data),
        file_size=len(content),
        compress_type=zipfile.ZIP_DEFLATED,
        date_time=like.info.date_time if like else date_time,
        external_attr=like.info.external_attr if like else NEW_FILE_MODE,
        data=data,
        digest=record_hash(content),
    )


# --------------------------------------------------------------------------- reading


_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes, just before the end record
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")  # 56 bytes
_ZIP64_LOCATOR_SIG = b"PK\x06\x07"
_ZIP64_END_SIG = b"PK\x06\x06"
# A central directory this large lists far more members than MEMBER_LIMIT (vLLM 0.16.0's: 0.2 MB).
DIRECTORY_LIMIT = 64 << 20


def check_member_count(fd: int, label: str) -> None:
    """BadInput when the archive lists more members than patchkit writes (MEMBER_LIMIT), told from
    its end record and its central directory's entry headers, before zipfile parses any entry
    (200,000 entries cost it seconds). An archive without an end record is left to zipfile."""
    size = os.fstat(fd).st_size
    tail = os.pread(fd, min(size, _END.size + 0xFFFF), max(0, size - _END.size - 0xFFFF))
    at = tail.rfind(_END_SIG)
    if at < 0 or at + _END.size > len(tail):
        return
    _sig, _disk, _start, _here, count, directory, offset, _comment = _END.unpack_from(tail, at)
    if at >= _ZIP64_LOCATOR.size and tail[at - _ZIP64_LOCATOR.size :].startswith(_ZIP64_LOCATOR_SIG):
        end64 = _ZIP64_LOCATOR.unpack_from(tail, at - _ZIP64_LOCATOR.size)[2]
        record = os.pread(fd, _ZIP64_END.size, end64) if end64 < size else b""
        if len(record) == _ZIP64_END.size and record.startswith(_ZIP64_END_SIG):
            count, directory, offset = _ZIP64_END.unpack(record)[-3:]
    if count < MEMBER_LIMIT and directory <= DIRECTORY_LIMIT and offset + directory <= size:
        count = max(count, os.pread(fd, directory, offset).count(_CENTRAL_SIG))  # an end record may lie
    if count >= MEMBER_LIMIT:
        raise _too_many(label, f"its central directory lists {count:,} members")
    if directory > DIRECTORY_LIMIT:
        raise _too_many(label, f"its central directory is {directory / 2**20:,.0f} MiB")


def _too_many(label: str, what: str) -> BadInput:
    return BadInput(
        f"{label}: {what}; patchkit wheel takes wheels of fewer than {MEMBER_LIMIT:,} members (no zip64) "
        f"and a central directory of at most {DIRECTORY_LIMIT >> 20} MiB (vLLM's: about 2,000 members, "
        "0.2 MiB); refusing the wheel",
        hint="start from the release's stock wheel (`patchkit wheel VERSION` downloads it)",
    )


def members(zf: zipfile.ZipFile, fd: int, label: str) -> list[Member]:
    """Every member of the open archive, checked (see the module docstring); BadInput naming the
    first that is not acceptable. `fd` is the archive's file, `label` how messages name it."""
    size = os.fstat(fd).st_size
    seen: set[str] = set()
    out = []
    if len(zf.infolist()) >= MEMBER_LIMIT:  # more than its end record said (check_member_count)
        raise _too_many(label, f"its central directory holds {len(zf.infolist()):,} members")
    for info in zf.infolist():
        name = info.orig_filename
        problem = _name_problem(name, seen) or _kind_problem(info)
        if problem:
            raise BadInput(f"{label}: member {shown(name)} {problem}; refusing the wheel")
        seen.add(folded(name))
        out.append(Member(info, _data_offset(info, fd, size, label)))
    _refuse_overlaps(out, label)
    tree = _NameTree()
    for member in out:
        clash = None if member.is_dir else tree.add(member.name)
        if clash:
            raise BadInput(f"{label}: member {shown(member.name)} {clash}; refusing the wheel")
    return out


def _refuse_overlaps(members: list[Member], label: str) -> None:
    """BadInput when one member's header or data lies inside another's (a zip bomb that makes a
    small file list the same bytes many times over): in a true archive they follow each other."""
    ordered = sorted(members, key=lambda m: m.info.header_offset)
    for before, after in itertools.pairwise(ordered):
        if before.data_offset + before.info.compress_size > after.info.header_offset:
            raise BadInput(
                f"{label}: the data of {shown(before.name)} overlaps member {shown(after.name)} (a zip bomb?); refusing the wheel"
            )


def folded(name: str) -> str:
    """A name as a case-insensitive, normalising file system sees it: two members that fold alike
    would be one file there."""
    return unicodedata.normalize("NFC", name.rstrip("/")).casefold()


_FILE = None  # the key that marks a _NameTree node as a file


class _NameTree:
    """Names as a tree of their parts, so that a name under a file, or a file over other names, is
    found in time linear in the name's length (never by building each of its prefixes)."""

    def __init__(self) -> None:
        self.root: dict[str | None, Any] = {}  # a part -> the node of the names under it; _FILE -> True

    def add(self, name: str) -> str | None:
        """Record `name` (a directory entry if it ends in '/'); why it clashes, or None."""
        parts = name.rstrip("/").split("/")
        node = self.root
        for depth, part in enumerate(parts[:-1], start=1):
            node = node.setdefault(part, {})
            if _FILE in node:
                return f"would lie under {'/'.join(parts[:depth])}, a file"
        node = node.setdefault(parts[-1], {})
        if not name.endswith("/"):
            if any(key is not _FILE for key in node):
                return "would be a file where other members lie under it"
            node[_FILE] = True
        return None


def _name_problem(name: str, seen: set[str]) -> str | None:
    if len(name.encode("utf-8", "surrogateescape")) > NAME_BYTES_LIMIT:
        return f"is longer than {NAME_BYTES_LIMIT:,} bytes"
    if name.count("/") >= NAME_PARTS_LIMIT:
        return f"is deeper than {NAME_PARTS_LIMIT} directories"
    path = name[:-1] if name.endswith("/") else name
    reason = unsafe_reason(path)
    if reason:
        return reason
    if folded(name) in seen:
        return "appears twice (names that differ only in case or Unicode form are one file on many systems)"
    return None


def _kind_problem(info: zipfile.ZipInfo) -> str | None:
    kind = stat.S_IFMT(info.external_attr >> 16)
    if info.orig_filename.endswith("/") and info.file_size:
        return "is a directory entry that holds data"
    if kind == stat.S_IFLNK:
        return "is a symlink (its mode bits say so)"
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "is a special file (its mode bits say so)"
    if info.flag_bits & _ENCRYPTED:
        return "is encrypted"
    if info.compress_type not in _READABLE:
        return f"uses compression method {info.compress_type}, which zipfile cannot read"
    return None


def _data_offset(info: zipfile.ZipInfo, fd: int, size: int, label: str) -> int:
    """Where the member's compressed bytes start: after its local header, which must name it."""
    if not 0 <= info.header_offset < size:
        raise BadInput(f"{label}: the central directory puts {shown(info.orig_filename)} outside the file (damaged?)")
    # One read for the header and the name the central directory gives (a second if the header's is longer).
    header = os.pread(fd, _LOCAL.size + len(info.orig_filename.encode("utf-8")), info.header_offset)
    if len(header) < _LOCAL.size or header[:4] != _LOCAL_SIG:
        raise BadInput(f"{label}: no local header where the central directory puts {shown(info.orig_filename)}")
    name_length, extra_length = struct.unpack_from("<2H", header, 26)
    name = header[_LOCAL.size : _LOCAL.size + name_length]
    if len(name) < name_length:
        name = os.pread(fd, name_length, info.header_offset + _LOCAL.size)
    encoding = "utf-8" if info.flag_bits & _UTF8_NAME else "cp437"
    if name.decode(encoding, "replace") != info.orig_filename:
        raise BadInput(f"{label}: the local header of {shown(info.orig_filename)} names another file")
    start: int = info.header_offset + _LOCAL.size + name_length + extra_length  # unpack_from's "<2H": ints
    if start + info.compress_size > size:
        raise BadInput(f"{label}: the data of {shown(info.orig_filename)} runs past the end of the file (truncated?)")
    return start


# --------------------------------------------------------------------------- writing


class Writer:
    """An archive written member by member into the empty file `out` (raw entries' bytes come from
    `source`), then finished with its central directory. Each batch is checked to fit without zip64
    before a byte of it is written. Members are placed one after the other (one thread); their data
    may be filled in by several."""

    def __init__(self, out: int, source: int, label: str):
        self.out, self.source, self.label = out, source, label
        self.offset = 0  # where the next member goes
        self.count = 0
        self.directory = bytearray()
        self.names: set[str] = set()
        self.tree = _NameTree()  # every member written, as a tree: what lies under what

    def add(self, entries: list[Entry]) -> None:
        self.fill(self.place(entries))

    def place(self, entries: list[Entry]) -> list[tuple[Entry, int]]:
        """Give each entry its place after the last and write its local header there; the data of
        small entries too (read and written in batches: one write, not two system calls a member).
        Returns where each large one's data goes: fill() copies it, in any thread, while others
        are placed."""
        self._check(entries)
        places = []
        batch, batch_at = bytearray(), self.offset
        for entry in entries:
            self.directory += entry.central_header(self.offset)
            header = entry.local_header() + entry.encoded_name
            data_at = self.offset + len(header)
            if entry.compress_size <= _SMALL:
                batch += header
                batch += self._data(entry)
            else:
                batch += header
                places.append((entry, data_at))
            self.offset = data_at + entry.compress_size
            self.count += 1
            if entry.compress_size > _SMALL or len(batch) >= _BATCH:
                _pwrite(self.out, batch, batch_at)
                batch, batch_at = bytearray(), self.offset
        _pwrite(self.out, batch, batch_at)
        return places

    def _data(self, entry: Entry) -> bytes:
        if entry.source is None:
            assert entry.data is not None
            return entry.data
        data = os.pread(self.source, entry.compress_size, entry.source.data_offset)
        if len(data) != entry.compress_size:
            raise BadInput(f"{self.label}: the file ended while its members were copied (truncated while read?)")
        return data

    def fill(self, places: list[tuple[Entry, int]]) -> None:
        for entry, offset in places:
            if entry.source is not None:
                copy_range(self.source, entry.source.data_offset, self.out, offset, entry.compress_size, self.label)
            else:
                assert entry.data is not None
                _pwrite(self.out, entry.data, offset)

    def finish(self) -> None:
        end = _END.pack(_END_SIG, 0, 0, self.count, self.count, len(self.directory), self.offset, 0)
        _pwrite(self.out, bytes(self.directory) + end, self.offset)

    def _check(self, entries: list[Entry]) -> None:
        """BadInput when these entries would need zip64 (not written), or repeat a name (a renamed
        .data directory meeting a member already there)."""
        for entry in entries:
            if entry.name in self.names:
                raise BadInput(f"{self.label}: {shown(entry.name)} would be written twice; refusing the wheel")
            self._check_kind(entry.name)
            self.names.add(entry.name)
        if self.count + len(entries) >= MEMBER_LIMIT:
            raise BadInput(
                f"{self.label}: {self.count + len(entries)} members need zip64, which patchkit does not write"
            )
        offset = self.offset
        for entry in entries:
            if max(offset, entry.compress_size, entry.file_size) >= ZIP32_LIMIT:
                raise BadInput(
                    f"{self.label}: {shown(entry.name)} lies or reaches beyond 4 GiB: that needs zip64, "
                    "which patchkit does not write"
                )
            offset += _LOCAL.size + len(entry.encoded_name) + entry.compress_size
        directory = len(self.directory) + sum(_CENTRAL.size + len(e.encoded_name) for e in entries)
        if offset + directory >= ZIP32_LIMIT:
            raise BadInput(
                f"{self.label}: the central directory lies beyond 4 GiB: that needs zip64, which patchkit does not write"
            )

    def _check_kind(self, name: str) -> None:
        """BadInput when a new member would lie under a file member, or a file where members lie
        under it (installers cannot write either: a wheel built from one with a FILE named like a
        directory patchkit adds)."""
        clash = self.tree.add(name)
        if clash:
            raise BadInput(f"{self.label}: {shown(name)} {clash}; refusing the wheel")


def copy_range(src: int, src_offset: int, dst: int, dst_offset: int, count: int, label: str) -> None:
    """`count` bytes from `src` at `src_offset` to `dst` at `dst_offset`: in the kernel where it can
    (copy_file_range, no copy through user space), else read and write."""
    copy = getattr(os, "copy_file_range", None)
    while count:
        if copy is not None:
            try:
                done = copy(src, dst, count, src_offset, dst_offset)
            except OSError as exc:
                if exc.errno not in _NO_COPY_RANGE:
                    raise
                copy = None
                continue
        else:
            chunk = os.pread(src, min(count, _CHUNK), src_offset)
            _pwrite(dst, chunk, dst_offset)
            done = len(chunk)
        if not done:
            raise BadInput(f"{label}: the file ended while its members were copied (truncated while read?)")
        src_offset, dst_offset, count = src_offset + done, dst_offset + done, count - done


def _pwrite(fd: int, data: bytes | bytearray, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _dos_time(date_time: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    year, month, day, hour, minute, second = date_time
    return hour << 11 | minute << 5 | second // 2, (year - 1980) << 9 | month << 5 | day
