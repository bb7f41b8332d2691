"""`patchkit wheel FILE` of a labelled build (`0.16.0+NAME`), held to its own RECORD only: every member
the new RECORD vouches for is hashed against the stock RECORD's row, and a member whose CRC fails is
refused, not copied (review 18's M3: only the sizes were compared)."""

from __future__ import annotations

import csv
import io
import os
import zipfile
from pathlib import Path

import pytest
from helpers import (
    STOCK_FILES,
    assert_clean_failure,
    install,
    make_patch,
    patched_spec,
    record_hash,
    run_cli,
    write_library,
    write_tree,
    write_wheel,
)

from patchkit.checks import LARGEST_PARSED

VERSION = "0.16.0+corp"
DIST = f"vllm-{VERSION}.dist-info"


@pytest.fixture
def library(tmp_path) -> Path:
    """A library whose 0.16.0 series changes spec.py."""
    tree = write_tree(tmp_path / "stock")
    return write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )


def labelled(where: Path, changed: dict[str, bytes] | None = None, extra: dict[str, bytes] | None = None) -> Path:
    """A labelled wheel whose RECORD lists the stock contents of every file, while `changed` members
    hold other bytes of the same length (so that the sizes agree)."""
    stock = {**STOCK_FILES, **(extra or {})}
    files = {**stock, **(changed or {})}
    assert all(len(files[name]) == len(stock[name]) for name in changed or {})
    return write_wheel(where, VERSION, files, record={name: record_hash(stock[name]) for name in changed or {}})


def same_length(data: bytes, at: int = 0) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]


def flip_stored_byte(path: Path, name: str) -> None:
    """One byte of a stored member's data flipped in place: its CRC (and RECORD) left as they were."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    assert info.compress_type == zipfile.ZIP_STORED
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename)
    assert data[start - len(info.filename) : start] == info.filename.encode()  # no extra field
    data[start + 7] ^= 0xFF
    path.write_bytes(bytes(data))


def refused(tmp_path: Path, stock: Path, library: Path):
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert_clean_failure(done, 2)
    assert not out.exists() or list(out.iterdir()) == [], list(out.iterdir())
    return " ".join(done.stderr.split())


CLI = STOCK_FILES["vllm/entrypoints/cli.py"]


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("vllm/entrypoints/cli.py", same_length(CLI)),  # deflated, copied after the series is known
        ("vllm/_C.abi3.so", same_length(STOCK_FILES["vllm/_C.abi3.so"], 100)),  # stored
        ("vllm/__init__.py", b'__version__ = "0.16.1"\n'),
    ],
)
def test_a_same_size_change_its_record_does_not_list_is_refused(tmp_path, library, name, data):
    said = refused(tmp_path, labelled(tmp_path / "in", {name: data}), library)
    assert f"vllm-0.16.0+corp-cp38-abi3-manylinux_2_31_x86_64.whl is not true to its RECORD: '{name}'" in said, said
    assert f"'{name}' hashes to '{record_hash(data)}', RECORD says '{record_hash(STOCK_FILES[name])}'" in said, said
    assert (
        "hint: its contents changed after its RECORD was written: download the wheel again, or build it again" in said
    )


def test_a_same_size_change_to_a_dist_info_member_is_refused(tmp_path, library):
    """The dist-info's members other than METADATA and RECORD are copied raw under the new name."""
    stock = write_wheel(tmp_path / "in", VERSION)
    name = f"{DIST}/entry_points.txt"
    with zipfile.ZipFile(stock) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(stock, "w") as zf:
        for info, data in members:
            zf.writestr(info, data.replace(b"cli:main", b"cli:mane") if info.filename == name else data)
    said = refused(tmp_path, stock, library)
    assert f"is not true to its RECORD: '{name}'" in said, said


def test_a_same_size_change_to_a_member_copied_first_is_refused(tmp_path, library):
    """A member too large for any series is copied while the series is resolved: hashed then too."""
    big = os.urandom(LARGEST_PARSED + 1)
    said = refused(
        tmp_path,
        labelled(tmp_path / "in", {"vllm/_big.abi3.so": same_length(big, 5)}, {"vllm/_big.abi3.so": big}),
        library,
    )
    assert "is not true to its RECORD: 'vllm/_big.abi3.so'" in said, said


def test_a_member_whose_crc_fails_is_refused(tmp_path, library):
    stock = labelled(tmp_path / "in")
    flip_stored_byte(stock, "vllm/_C.abi3.so")
    said = refused(tmp_path, stock, library)
    assert "'vllm/_C.abi3.so' is damaged" in said and "Bad CRC-32" in said, said
    assert "hint:" in said


def test_a_true_labelled_wheel_builds_with_a_record_true_to_every_member(tmp_path, library):
    big = os.urandom(LARGEST_PARSED + 1)
    stock = labelled(tmp_path / "in", extra={"vllm/_big.abi3.so": big})
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
    (patched,) = out.iterdir()
    with zipfile.ZipFile(patched) as zf:
        (record,) = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
        rows = list(csv.reader(io.StringIO(zf.read(record).decode())))
        for name, digest, size in rows:
            if name != record:
                assert (digest, size) == (record_hash(zf.read(name)), str(zf.getinfo(name).file_size)), name
        assert len(rows) == len(zf.namelist())
    install(patched, tmp_path / "prefix")
