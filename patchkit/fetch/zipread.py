"""Members out of a wheel's bytes: the local header and inflate of a member cut from a range, and a
whole wheel on disk (after a fallback download). Every member's CRC and size are checked."""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from patchkit.base.errors import FetchError
from patchkit.fetch.net import Progress

if TYPE_CHECKING:  # pragma: no cover
    import zipfile

Blobs = dict[str, bytes]  # member name -> its bytes

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # 30 bytes
_LOCAL_SIG = b"PK\x03\x04"


class WheelSource(Protocol):
    """Where a wheel's members are read from: the index by ranges, or a file in the cache."""

    def infolist(self) -> list[zipfile.ZipInfo]: ...

    def read(self, infos: Iterable[zipfile.ZipInfo], say: Progress) -> Blobs: ...

    def close(self) -> None: ...


class LocalWheel:
    """A whole wheel in the cache, read with zipfile."""

    def __init__(self, path: Path):

        self.path = path
        try:
            self.zf = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as e:
            raise FetchError(
                f"cannot open the downloaded wheel {path}: {e}", hint=f"delete {path} and try again"
            ) from None

    def infolist(self) -> list[zipfile.ZipInfo]:
        return self.zf.infolist()

    def read(self, infos: Iterable[zipfile.ZipInfo], say: Progress) -> Blobs:

        out = {}
        for info in infos:
            try:
                out[info.filename] = self.zf.read(info)
            except (OSError, zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
                raise FetchError(
                    f"cannot read {info.filename} from {self.path}: {e}", hint=f"delete {self.path} and try again"
                ) from None
        return out

    def close(self) -> None:
        self.zf.close()


def member_from_run(data: bytes, run_start: int, info: zipfile.ZipInfo) -> bytes:
    """Member `info`'s contents out of `data`, the wheel's bytes from offset `run_start` on."""
    off = info.header_offset - run_start
    try:
        sig, _ver, _flags, _method, _t, _d, _crc, _cs, _us, n, m = _LOCAL_HEADER.unpack_from(data, off)
    except struct.error:
        raise FetchError(
            f"truncated local header for {info.filename} in the wheel", hint="the download was corrupted; try again"
        ) from None
    name = data[off + 30 : off + 30 + n]
    if sig != _LOCAL_SIG or (
        name.decode("utf-8", "replace") != info.filename and name.decode("cp437", "replace") != info.filename
    ):
        raise FetchError(f"bad local header for {info.filename} in the wheel", hint="the wheel looks malformed")
    begin = off + 30 + n + m
    comp = data[begin : begin + info.compress_size]
    if len(comp) != info.compress_size:
        raise FetchError(
            f"truncated data for {info.filename} in the wheel", hint="the download was corrupted; try again"
        )
    return inflate(info, comp)


def inflate(info: zipfile.ZipInfo, comp: bytes) -> bytes:

    if info.flag_bits & 0x1:
        raise FetchError(f"member {info.filename} of the wheel is encrypted", hint="the wheel looks malformed")
    if info.compress_type == zipfile.ZIP_STORED:
        raw = comp
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        d = zlib.decompressobj(-15)
        try:
            raw = d.decompress(comp) + d.flush()
        except zlib.error as e:
            raise FetchError(
                f"cannot inflate {info.filename} from the wheel: {e}", hint="the download was corrupted; try again"
            ) from None
    else:
        raise FetchError(
            f"member {info.filename} uses unsupported compression {info.compress_type}",
            hint="the wheel looks malformed",
        )
    if len(raw) != info.file_size or zlib.crc32(raw) != info.CRC:
        raise FetchError(
            f"CRC/size check failed for {info.filename} from the wheel", hint="the download was corrupted; try again"
        )
    return raw
