"""`patchkit wheel FILE` of a labelled build (`0.16.0+NAME`), held to its own RECORD only: every member
the new RECORD vouches for is hashed against the stock RECORD's row, and a member whose CRC fails is
refused, not copied (review 18's M3: only the sizes were compared)."""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
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

from patchkit.base.errors import BadInput
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


# --------------------------------------------------------------------------- the members' seal
# Hashing every member costs what inflating the whole wheel costs (1.3 GB for vLLM 0.16.0), on every
# build: once they all hashed true, the cache seals that for the file as it was (issue 20's speed).


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """The members each build inflates to hash, in order; every file sealed though just written."""
    from patchkit.wheel import build, stock

    monkeypatch.setattr(stock, "SEAL_AFTER_NS", -1)
    names: list[str] = []
    digest_of = build.StockWheel.digest_of

    def counted(self, member, algorithm):
        names.append(member.name)
        return digest_of(self, member, algorithm)

    monkeypatch.setattr(build.StockWheel, "digest_of", counted)
    return names


def build_of(stock: Path, out: Path, library: Path, say=lambda message: None):
    from patchkit.base.options import Options
    from patchkit.wheel.build import build_patched_wheel

    return build_patched_wheel(stock, out, Options(library=str(library)), label=None, say=say)


BIG = os.urandom(LARGEST_PARSED + 1)


def sealed_labelled(tmp_path: Path, library: Path, hashed: list[str]) -> Path:
    """A true labelled wheel (a stored member copied first, as vLLM's .so files are) built once:
    every member with a hash in its RECORD hashed, and sealed."""
    stock = labelled(tmp_path / "in", extra={"vllm/_big.abi3.so": BIG})
    assert build_of(stock, tmp_path / "out0", library).path is not None
    assert {"vllm/_big.abi3.so", "vllm/_C.abi3.so", "vllm/entrypoints/cli.py"} <= set(hashed)
    hashed.clear()
    return stock


def test_an_unchanged_labelled_wheel_is_not_hashed_again(tmp_path, library, hashed):
    stock = sealed_labelled(tmp_path, library, hashed)
    said: list[str] = []
    again = build_of(stock, tmp_path / "out1", library, said.append)
    assert again.path is not None and hashed == [], hashed
    assert "its members hashed true before; the file is unchanged: not hashed again" in said
    first, second = (next((tmp_path / d).iterdir()).read_bytes() for d in ("out0", "out1"))
    assert first == second  # the same wheel, byte for byte
    copy = tmp_path / "copy" / stock.name  # the same bytes elsewhere: another file, hashed
    copy.parent.mkdir()
    copy.write_bytes(stock.read_bytes())
    assert build_of(copy, tmp_path / "out2", library).path is not None and "vllm/_big.abi3.so" in hashed


def test_a_touched_labelled_wheel_is_hashed_again(tmp_path, library, hashed):
    stock = sealed_labelled(tmp_path, library, hashed)
    os.utime(stock)  # the same bytes, a new mtime and ctime: another file for all patchkit knows
    assert build_of(stock, tmp_path / "out1", library).path is not None and "vllm/_big.abi3.so" in hashed
    hashed.clear()
    assert build_of(stock, tmp_path / "out2", library).path is not None and hashed == []  # sealed again


def _untrue_same_size(tmp_path: Path, stock: Path) -> bytes:
    """The bytes of a wheel of `stock`'s size whose stored `vllm/_big.abi3.so` differs in one byte
    (its CRC made to match), while its RECORD still gives the sealed wheel's hash."""
    other = labelled(tmp_path / "other", {"vllm/_big.abi3.so": same_length(BIG, 9)}, {"vllm/_big.abi3.so": BIG})
    data = other.read_bytes()
    assert len(data) == stock.stat().st_size
    return data


@pytest.mark.parametrize("how", ["edited in place, its mtime set back", "replaced by a file of the same size"])
def test_a_sealed_labelled_wheel_that_changed_is_never_trusted(tmp_path, library, hashed, how):
    stock = sealed_labelled(tmp_path, library, hashed)
    before = stock.stat()
    data = _untrue_same_size(tmp_path, stock)
    if how.startswith("edited"):
        with stock.open("r+b") as handle:  # the same inode
            handle.write(data)
    else:
        stock.with_suffix(".new").write_bytes(data)
        os.replace(stock.with_suffix(".new"), stock)
    os.utime(stock, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert stock.stat().st_size == before.st_size and stock.stat().st_mtime_ns == before.st_mtime_ns
    with pytest.raises(BadInput, match=r"is not true to its RECORD: 'vllm/_big\.abi3\.so' hashes to"):
        build_of(stock, tmp_path / "out1", library)
    assert not (tmp_path / "out1").exists()


def test_a_forged_or_linked_seal_is_only_a_hash(tmp_path, library, hashed):
    from patchkit.base.usercache import cache_dir
    from patchkit.wheel import stock as stock_module

    stock = sealed_labelled(tmp_path, library, hashed)
    (entry,) = (cache_dir() / stock_module.WHEEL_FILES).glob(f"*{stock_module.MEMBERS_SUFFIX}")
    sealed = json.loads(entry.read_text())
    forged = {**sealed, "seal": hmac.new(b"k" * 32, b"anything", hashlib.sha256).hexdigest()}
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps(sealed))
    for plant in (lambda: entry.write_text(json.dumps(forged)), lambda: entry.symlink_to(elsewhere)):
        entry.unlink()
        plant()
        assert build_of(stock, tmp_path / f"out{len(hashed)}", library).path is not None
        assert "vllm/_big.abi3.so" in hashed  # not believed: hashed (and sealed again, as a file)
        hashed.clear()
    assert entry.is_file() and not entry.is_symlink()
    assert build_of(stock, tmp_path / "out-last", library).path is not None and hashed == []


def test_a_wheel_changed_while_it_is_read_is_refused(tmp_path, library, hashed):
    """Sealed or not, the copies are taken from the file as it was when its members were vouched
    for: a write during the build (its ctime moves) is refused, nothing written."""
    stock = sealed_labelled(tmp_path, library, hashed)

    def touch(message: str) -> None:
        if message.startswith("copying the unchanged members"):
            os.utime(stock)

    with pytest.raises(BadInput, match="changed while it was read; refusing the wheel"):
        build_of(stock, tmp_path / "out1", library, touch)
    assert not (tmp_path / "out1").exists()
