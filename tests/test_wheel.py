"""`patchkit wheel`: small vLLM wheels the tests build, patched into wheels that installer validates and installs."""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import os
import re
import shlex
import stat
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from helpers import (
    MODEL_PY,
    SPEC_PY,
    STOCK_FILES,
    TAGS,
    assert_clean_failure,
    default_signals,
    fingerprint,
    install,
    make_patch,
    patched_spec,
    record_hash,
    run_cli,
    write_library,
    write_tree,
    write_wheel,
)
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from patchkit.base.errors import BadInput, TargetError
from patchkit.base.options import Options
from patchkit.distinfo.provenance import read_provenance
from patchkit.wheel import rawzip
from patchkit.wheel.build import build_patched_wheel
from patchkit.wheel.label import labelled_version


@pytest.fixture
def library(tmp_path) -> Path:
    """A library whose 0.16.0 series adds "deepseek" to spec.py's list."""
    tree = write_tree(tmp_path / "stock")
    return write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )


def build(run, wheel: Path, out: Path, *args: object):
    return run("wheel", wheel, "--out", out, *args)


def raw_member(path: Path, info: zipfile.ZipInfo) -> bytes:
    """A member's compressed bytes, as stored."""
    with path.open("rb") as fh:
        fh.seek(info.header_offset)
        header = fh.read(30)
        name_length, extra_length = struct.unpack_from("<2H", header, 26)
        fh.seek(info.header_offset + 30 + name_length + extra_length)
        return fh.read(info.compress_size)


# --------------------------------------------------------------------------- the patched wheel


def test_the_patched_wheel_is_labelled_true_to_its_record_and_installs_patched(tmp_path, run, library):
    stock = write_wheel(tmp_path / "in")
    done = build(run, stock, tmp_path / "out", "--patches", library)
    assert done.exit_code == 0, done.output
    patched = tmp_path / "out" / f"vllm-0.16.0+patchkit.demo-{TAGS}.whl"
    assert done.stdout.strip().splitlines()[-1] == str(patched)  # what a script reads: the path alone
    # newuser16 6e: then the next step, the path absolute (stderr)
    assert (
        done.stderr.splitlines()[-1]
        == f"note: next: install it over the stock vLLM of that release: `pip install --no-deps {patched.resolve()}`"
    )
    assert sorted(os.listdir(tmp_path / "out")) == [patched.name]  # no temporary file left
    with zipfile.ZipFile(patched) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        metadata = zf.read("vllm-0.16.0+patchkit.demo.dist-info/METADATA").decode()
    assert not any(n.startswith("vllm-0.16.0.dist-info/") for n in names)
    assert names[-1] == "vllm-0.16.0+patchkit.demo.dist-info/RECORD"
    # only the header's Version changes; the body's "Version: 9" is text
    assert metadata.splitlines()[2] == "Version: 0.16.0+patchkit.demo"
    assert metadata.endswith("A long description.\nVersion: 9\n")
    site = install(patched, tmp_path / "prefix")
    assert (site / "vllm/config/spec.py").read_text() == patched_spec()
    assert (site / "vllm/models/model.py").read_text() == MODEL_PY
    assert (tmp_path / "prefix/scripts/vllm").exists()
    provenance = read_provenance(site / "vllm-0.16.0+patchkit.demo.dist-info")
    patch_file = library / "demo/0.16.0/0001-change.patch"
    assert (provenance.vllm_version, provenance.label, provenance.set_name) == ("0.16.0", "patchkit.demo", "demo")
    assert [(p.name, p.sha256) for p in provenance.patches] == [
        ("0001-change.patch", hashlib.sha256(patch_file.read_bytes()).hexdigest())
    ]
    assert provenance.patch_text("0001-change.patch") == patch_file.read_bytes()
    spec = provenance.files["vllm/config/spec.py"]
    assert spec.stock_sha256 == hashlib.sha256(SPEC_PY.encode()).hexdigest()
    assert spec.patched_sha256 == hashlib.sha256(patched_spec().encode()).hexdigest()
    assert list(provenance.files) == ["vllm/config/spec.py"]


def test_unchanged_members_are_their_stock_compressed_bytes(tmp_path, run, library):
    stock = write_wheel(tmp_path / "in")
    assert build(run, stock, tmp_path / "out", "--patches", library).exit_code == 0
    (patched,) = (tmp_path / "out").iterdir()
    renamed = {"vllm-0.16.0.dist-info/WHEEL", "vllm-0.16.0.dist-info/entry_points.txt"}
    with zipfile.ZipFile(stock) as before, zipfile.ZipFile(patched) as after:
        for name in [*(n for n in STOCK_FILES if n != "vllm/config/spec.py"), *renamed]:
            old = before.getinfo(name)
            new = after.getinfo(name.replace("vllm-0.16.0.dist-info", "vllm-0.16.0+patchkit.demo.dist-info"))
            fields = ("CRC", "compress_size", "file_size", "compress_type", "external_attr", "date_time")
            assert [getattr(new, f) for f in fields] == [getattr(old, f) for f in fields], name
            assert raw_member(patched, new) == raw_member(stock, old), name
        assert after.read("vllm/config/spec.py") == patched_spec().encode()


def test_a_streamed_stock_wheel_with_data_descriptors_and_zip64_extras(tmp_path, run, library):
    stock = write_wheel(tmp_path / "in", streamed=True)
    with zipfile.ZipFile(stock) as zf:
        assert all(info.flag_bits & 0x08 for info in zf.infolist())
    assert build(run, stock, tmp_path / "out", "--patches", library).exit_code == 0
    (patched,) = (tmp_path / "out").iterdir()
    with zipfile.ZipFile(patched) as zf:
        assert zf.testzip() is None
        so = zf.getinfo("vllm/_C.abi3.so")
        assert raw_member(patched, so) == raw_member(stock, zipfile.ZipFile(stock).getinfo("vllm/_C.abi3.so"))
    site = install(patched, tmp_path / "prefix")
    assert (site / "vllm/config/spec.py").read_text() == patched_spec()


def test_rows_the_stock_record_lacks_or_does_not_trust_are_hashed(tmp_path, run, library):
    so = STOCK_FILES["vllm/_C.abi3.so"]
    md5 = "md5=" + base64.urlsafe_b64encode(hashlib.md5(so).digest()).rstrip(b"=").decode()
    stock = write_wheel(tmp_path / "in", record={"vllm/_C.abi3.so": md5, "vllm/entrypoints/cli.py": None})
    assert build(run, stock, tmp_path / "out", "--patches", library).exit_code == 0
    (patched,) = (tmp_path / "out").iterdir()
    record = zipfile.ZipFile(patched).read("vllm-0.16.0+patchkit.demo.dist-info/RECORD").decode()
    assert f"vllm/_C.abi3.so,{record_hash(so)},{len(so)}\n" in record
    assert f"vllm/entrypoints/cli.py,{record_hash(STOCK_FILES['vllm/entrypoints/cli.py'])}," in record
    install(patched, tmp_path / "prefix")  # validate_record(validate_contents=True) first


def test_files_the_series_creates_and_deletes_and_the_stock_signature(tmp_path, run):
    tree = write_tree(tmp_path / "stock", files={"vllm/config/spec.py": SPEC_PY, "vllm/models/model.py": MODEL_PY})
    edits = {"vllm/models/model.py": None, "vllm/models/eagle3.py": "EAGLE3 = True\n"}
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, edits)]})
    signature = (_info("vllm-0.16.0.dist-info/RECORD.jws"), b"{}")
    stock = write_wheel(tmp_path / "in", extra=[signature])
    assert build(run, stock, tmp_path / "out", "--patches", library).exit_code == 0
    (patched,) = (tmp_path / "out").iterdir()
    names = zipfile.ZipFile(patched).namelist()
    assert "vllm/models/model.py" not in names and "vllm/models/eagle3.py" in names
    assert not any(n.endswith("RECORD.jws") for n in names)
    site = install(patched, tmp_path / "prefix")
    assert (site / "vllm/models/eagle3.py").read_text() == "EAGLE3 = True\n"
    files = read_provenance(site / "vllm-0.16.0+patchkit.demo.dist-info").files
    assert files["vllm/models/model.py"].patched_sha256 is None
    assert files["vllm/models/eagle3.py"].stock_sha256 is None


def test_the_same_stock_wheel_gives_the_same_bytes(tmp_path, run, library):
    stock = write_wheel(tmp_path / "in")
    assert build(run, stock, tmp_path / "one", "--patches", library).exit_code == 0
    assert build(run, stock, tmp_path / "two", "--patches", library).exit_code == 0
    (one,), (two,) = (tmp_path / "one").iterdir(), (tmp_path / "two").iterdir()
    assert one.read_bytes() == two.read_bytes()


def test_json_gives_the_wheel_its_sha256_the_patches_and_the_checks(tmp_path, library):
    stock = write_wheel(tmp_path / "in")
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library, "--format", "json")
    assert_clean_failure(done, 0)
    doc = json.loads(done.stdout)
    assert (doc["schema_version"], doc["ok"], doc["exit_code"], doc["result"]) == (1, True, 0, "ok")
    wheel = Path(doc["wheel"])
    assert wheel.parent == tmp_path / "out"
    assert doc["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert [p["name"] for p in doc["patches"]] == ["0001-change.patch"]
    assert {c["check"] for c in doc["checks"]} >= {"integrity", "syntax", "names", "probe"}
    assert not any(c["ok"] is False and c["level"] == "error" for c in doc["checks"])


def test_an_existing_local_label_is_extended(tmp_path, run, library):
    stock = write_wheel(tmp_path / "in", version="0.16.0+rocm631")
    done = build(run, stock, tmp_path / "out", "--patches", library, "--local-label", "Site_Build-7")
    assert done.exit_code == 0, done.output
    patched = tmp_path / "out" / f"vllm-0.16.0+rocm631.site.build.7-{TAGS}.whl"
    assert patched.is_file()
    site = install(patched, tmp_path / "prefix")
    dist_info = site / "vllm-0.16.0+rocm631.site.build.7.dist-info"
    assert "Version: 0.16.0+rocm631.site.build.7\n" in (dist_info / "METADATA").read_text()
    provenance = read_provenance(dist_info)
    assert (provenance.vllm_version, provenance.label) == ("0.16.0+rocm631", "site.build.7")


@pytest.mark.parametrize(
    ("stock", "label", "expected"),
    [
        ("0.16.0", "patchkit.eagle3", "0.16.0+patchkit.eagle3"),
        ("0.16.0", "+Patchkit.My_Set", "0.16.0+patchkit.my.set"),
        ("0.15.1+cu129", "patchkit.eagle3", "0.15.1+cu129.patchkit.eagle3"),
        ("0.17.0rc1", "x-1", "0.17.0rc1+x.1"),
    ],
)
def test_label_rules(stock, label, expected):
    version = labelled_version(Version(stock), label)
    assert str(version) == expected
    assert version in SpecifierSet(f"=={Version(stock).public}")  # a pin on the release still matches


@pytest.mark.parametrize("label", ["", "+", "a b", "patch!kit", "a..b", ".a", "é"])
def test_a_label_that_is_not_a_local_version_label_is_refused(tmp_path, label, library):
    stock = write_wheel(tmp_path / "in")
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library, "--local-label", label)
    assert_clean_failure(done, 2)
    assert "local label" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_label_too_long_for_a_file_name_is_refused_before_the_build(tmp_path, library):
    stock = write_wheel(tmp_path / "in")
    label = "a" * 129
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library, "--local-label", label)
    assert_clean_failure(done, 2)
    assert "is longer than 128 characters" in done.stderr
    assert not (tmp_path / "out").exists()
    assert labelled_version(Version("0.16.0+cu129"), "b" * 128).local == f"cu129.{'b' * 128}"  # the bound itself builds


def test_an_adhoc_patch_makes_a_wheel_of_its_own(tmp_path, run):
    tree = write_tree(tmp_path / "stock")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(tmp_path, tree, {"vllm/models/model.py": MODEL_PY + "\n\nVARIANT = 2\n"}))
    stock = write_wheel(tmp_path / "in")
    done = build(run, stock, tmp_path / "out", "--patch", diff)
    assert done.exit_code == 0, done.output
    (patched,) = (tmp_path / "out").iterdir()
    digest = hashlib.sha256(diff.read_bytes()).hexdigest()
    version = f"0.16.0+patchkit.adhoc.{hashlib.sha256(digest.encode()).hexdigest()[:12]}"
    assert patched.name == f"vllm-{version}-{TAGS}.whl"
    site = install(patched, tmp_path / "prefix")
    assert (site / "vllm/models/model.py").read_text().endswith("VARIANT = 2\n")
    provenance = read_provenance(site / f"vllm-{version}.dist-info")
    assert provenance.set_name is None
    assert [(p.name, p.sha256) for p in provenance.patches] == [("model.diff", digest)]
    assert provenance.read_patches()[0].files[0].path == "vllm/models/model.py"


@pytest.mark.parametrize("name", ["fix\\1.patch", "..patch\\x"])
def test_a_patch_name_the_installed_record_would_refuse_is_refused_at_build(tmp_path, name):
    tree = write_tree(tmp_path / "stock")
    diff = tmp_path / name
    diff.write_bytes(make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()}))
    done = run_cli("wheel", write_wheel(tmp_path / "in"), "--out", tmp_path / "out", "--patch", diff)
    assert_nothing_written(done, tmp_path / "out", 2)
    assert f"patch file name {name!r} contains a backslash" in done.stderr and "rename the patch file" in done.stderr


def test_two_patches_of_one_file_name_are_refused(tmp_path):
    tree = write_tree(tmp_path / "stock")
    edits = [{"vllm/models/model.py": MODEL_PY + "\nA = 1\n"}, {"vllm/config/spec.py": patched_spec()}]
    diffs = []
    for i, edit in enumerate(edits):
        (tmp_path / f"d{i}").mkdir()
        diffs.append(tmp_path / f"d{i}" / "fix.patch")
        diffs[-1].write_bytes(make_patch(tmp_path, tree, edit))
    done = run_cli(
        "wheel", write_wheel(tmp_path / "in"), "--out", tmp_path / "out", "--patch", diffs[0], "--patch", diffs[1]
    )
    assert_nothing_written(done, tmp_path / "out", 2)
    assert "share a file name" in done.stderr


def test_set_and_patch_exclude_each_other(tmp_path, library):
    diff = tmp_path / "x.diff"
    diff.write_bytes(b"")
    done = run_cli("wheel", write_wheel(tmp_path / "in"), "--patches", library, "--set", "demo", "--patch", diff)
    assert_clean_failure(done, 2)
    done = run_cli("wheel", write_wheel(tmp_path / "in"), "--patches", library, "--platform", "win_amd64")
    assert_clean_failure(done, 2)
    assert "--platform chooses the wheel of a VERSION" in done.stderr


# --------------------------------------------------------------------------- nothing written


def assert_nothing_written(done, out: Path, code: int) -> None:
    assert_clean_failure(done, code)
    assert not out.exists() or list(out.iterdir()) == []


def refused_wheel(tmp_path: Path, stock: Path, library: Path, *more: object):
    """`wheel` of `stock` refused as bad input (exit 2), nothing written into tmp_path/out."""
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library, *more)
    assert_nothing_written(done, out, 2)
    return done


def test_a_conflict_writes_no_wheel(tmp_path, library):
    files = {**STOCK_FILES, "vllm/config/spec.py": SPEC_PY.replace('"qwen"', '"mistral"').encode()}
    stock = write_wheel(tmp_path / "in", files=files)
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 1)
    assert "no wheel was written" in done.stderr
    assert "vllm/config/spec.py" in done.stderr


def test_a_failed_check_writes_no_wheel(tmp_path):
    tree = write_tree(tmp_path / "stock")
    undefined = MODEL_PY.replace("SupportsPP)", "SupportsPP, SupportsEagle3)")  # never imported: names fails
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/models/model.py": undefined})]}
    )
    out = tmp_path / "out"
    out.mkdir()
    before = fingerprint(out)
    done = run_cli("wheel", write_wheel(tmp_path / "in"), "--out", out, "--patches", library, "--format", "json")
    assert_nothing_written(done, out, 1)
    assert fingerprint(out) == before
    doc = json.loads(done.stdout)
    assert (doc["wheel"], doc["sha256"], doc["result"], doc["set"]) == (None, None, "check-failed", "demo")
    assert any(c["check"] == "names" and not c["ok"] for c in doc["checks"])


def test_a_stock_file_that_is_not_the_one_record_lists_writes_no_wheel(tmp_path, library):
    wrong = record_hash(b"something else")
    stock = write_wheel(tmp_path / "in", record={"vllm/config/spec.py": wrong})
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 1)
    assert "not the stock files" in done.stderr and "vllm/config/spec.py" in done.stderr
    assert "--force" not in done.stderr


@pytest.mark.parametrize("row", [None, "", "md5=1B2M2Y8AsgTpgAmY7PhCfg"])
def test_a_patched_file_its_record_cannot_vouch_for_writes_no_wheel(tmp_path, library, row):
    """No --force here: a series file RECORD leaves out, or lists without a hash wheels may use, fails integrity."""
    stock = write_wheel(
        tmp_path / "in",
        files={**STOCK_FILES, "vllm/config/spec.py": SPEC_PY.encode() + b"import os  # not stock\n"},
        record={"vllm/config/spec.py": row},
    )
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library, "-q", "--format", "json")
    assert_nothing_written(done, out, 1)
    document = json.loads(done.stdout)
    assert document["ok"] is False and document["wheel"] is None
    (row_,) = [c for c in document["checks"] if c["check"] == "integrity"]
    assert row_["path"] == "vllm/config/spec.py" and row_["level"] == "error" and not row_["ok"], row_


def test_a_member_whose_size_is_not_the_one_record_lists_is_refused(tmp_path, library):
    files = dict(STOCK_FILES)
    stock = write_wheel(tmp_path / "in", files=files)
    record = zipfile.ZipFile(stock).read("vllm-0.16.0.dist-info/RECORD").replace(b",16384\n", b",16385\n")
    rebuilt = write_wheel(tmp_path / "again", files=files)
    _replace_member(rebuilt, "vllm-0.16.0.dist-info/RECORD", record)
    done = run_cli("wheel", rebuilt, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 2)
    assert "not true to its RECORD" in done.stderr and "vllm/_C.abi3.so" in done.stderr


def _replace_member(path: Path, name: str, data: bytes) -> None:
    with zipfile.ZipFile(path) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, old in members:
            zf.writestr(info, data if info.filename == name else old)


def _info(name: str, mode: int = 0o100644) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (2026, 1, 2, 3, 4, 6))
    info.external_attr = mode << 16
    return info


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_info("vllm/../../etc/cron.d/x"), "contains '..'"),
        (_info("/tmp/planted.py"), "is absolute"),
        (_info("vllm\\models\\evil.py"), "contains a backslash"),
        (_info("vllm/./x.py"), "is not a normalized relative path"),
        (_info("vllm/config/spec.py"), "appears twice"),
        (_info("vllm/Config/spec.py"), "appears twice"),  # one file where names fold case
        (_info("vllm/config/spec.py/x.py"), "would lie under vllm/config/spec.py, a file"),
        (_info("vllm/" + "d/" * 600 + "x.py"), "is longer than 1,024 bytes"),
        (_info("vllm/" + "d/" * 70 + "x.py"), "is deeper than 64 directories"),
        (_info("vllm/link.py", 0o120777), "is a symlink"),
        (_info("vllm/fifo", 0o010644), "is a special file"),
    ],
)
def test_an_unsafe_member_is_refused(tmp_path, library, member, why):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate it is told to write
        stock = write_wheel(tmp_path / "in", extra=[(member, b"/etc/passwd")])
    done = refused_wheel(tmp_path, stock, library)
    assert why in done.stderr and "refusing the wheel" in done.stderr


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"not a zip at all", "not a zip archive"), (None, "no wheel file")],
)
def test_a_file_that_is_no_wheel_is_refused(tmp_path, library, content, why):
    path = tmp_path / f"vllm-0.16.0-{TAGS}.whl"
    if content is not None:
        path.write_bytes(content)
    done = run_cli("wheel", path, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 2)
    assert why in done.stderr
    if content is None:  # and what to give instead
        assert "hint: give the path of a wheel file, or a VERSION" in done.stderr, done.stderr


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EISDIR])
def test_a_write_into_out_that_fails_says_what_to_do(code):
    from patchkit.wheel.build import _write_error

    error = _write_error(Path("out/.vllm.whl.tmp"), OSError(code, os.strerror(code)))
    assert error.exit_code == 4 and error.hint and "--out" in error.hint, error.hint


def _damaged(path: Path, how: str) -> None:
    """`path` with one kind of damage zipfile meets only when it reads (or lists) the archive."""
    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    directory = struct.unpack_from("<L", data, end + 16)[0]
    if how == "deflate":  # spec.py's compressed bytes, the CRC left alone
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo("vllm/config/spec.py")
        start = info.header_offset + 30 + len(info.filename)
        data[start : start + 4] = b"\xff\xff\xff\xff"
    elif how == "version":  # the first member's "version needed to extract": 12.7
        data[directory + 6] = 127
    elif how == "offset":  # the central directory said to start further on: members at negative offsets
        struct.pack_into("<L", data, end + 16, directory + 4096)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("how", "why"),
    [("deflate", "cannot read vllm/config/spec.py"), ("version", "not a zip archive"), ("offset", "outside the file")],
)
def test_a_damaged_wheel_is_refused_naming_the_damage(tmp_path, library, how, why):
    stock = write_wheel(tmp_path / "in")
    _damaged(stock, how)
    done = refused_wheel(tmp_path, stock, library)
    assert why in done.stderr, done.stderr


def test_bytes_damaged_anywhere_are_refused_never_an_internal_error(tmp_path, library):
    """A bounded fuzz: one to four bytes of a small wheel changed, 150 times (a fixed seed)."""
    import random

    from patchkit.base.errors import PatchkitError

    base = write_wheel(tmp_path / "in").read_bytes()
    directory = struct.unpack_from("<L", base, base.rfind(b"PK\x05\x06") + 16)[0]
    rnd = random.Random(20)
    stock = tmp_path / "fuzz" / f"vllm-0.16.0-{TAGS}.whl"
    stock.parent.mkdir()
    for round_ in range(150):
        data = bytearray(base)
        for _ in range(rnd.choice([1, 2, 4])):
            at = rnd.randrange(directory, len(data)) if rnd.random() < 0.7 else rnd.randrange(len(data))
            data[at] = rnd.choice([0, 0xFF, 0x7F, 0x80, rnd.randrange(256), data[at] ^ (1 << rnd.randrange(8))])
        stock.write_bytes(bytes(data))
        try:
            build_patched_wheel(stock, tmp_path / f"out{round_}", Options(library=str(library)), label=None)
        except PatchkitError as exc:
            assert exc.exit_code in (1, 2, 3, 4), (round_, exc)


def test_a_wheel_that_already_holds_the_series_is_refused(tmp_path, run, library):
    assert build(run, write_wheel(tmp_path / "in"), tmp_path / "once", "--patches", library).exit_code == 0
    (patched,) = (tmp_path / "once").iterdir()
    done = run_cli("wheel", patched, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 2)
    said = " ".join(done.stderr.split())
    assert "its dist-info already holds vllm-0.16.0+patchkit.demo.dist-info/patchkit.json" in said, said
    assert "start from the release's stock wheel" in said


@pytest.mark.parametrize(
    ("version", "why"), [("0.10.2", "0.10.2"), ("0.18.1", "declares that vLLM >=0.18.0 ships its change itself")]
)
def test_a_release_without_a_series_makes_no_wheel(tmp_path, library, version, why):
    done = run_cli(
        "wheel", write_wheel(tmp_path / "in", version=version), "--out", tmp_path / "out", "--patches", library
    )
    assert_nothing_written(done, tmp_path / "out", 3)
    assert why in done.stderr


@pytest.mark.parametrize(
    ("version", "why"), [("0.10.2", "0.10.2"), ("0.18.1", "declares that vLLM >=0.18.0 ships its change itself")]
)
def test_a_version_without_a_series_is_exit_3_before_the_index_is_asked(tmp_path, library, version, why):
    env = {"PATCHKIT_CACHE_DIR": str(tmp_path / "cache"), "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    done = run_cli("wheel", version, "--out", tmp_path / "out", "--patches", library, env=env)
    assert_nothing_written(done, tmp_path / "out", 3)
    assert why in done.stderr and "index" not in done.stderr, done.stderr


def test_a_dist_info_of_another_version_than_the_file_name_is_refused(tmp_path, library):
    path = tmp_path / f"vllm-0.16.1-{TAGS}.whl"
    os.link(write_wheel(tmp_path / "in"), path)
    done = run_cli("wheel", path, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 2)
    assert "vllm-0.16.0.dist-info is not vllm 0.16.1's" in done.stderr


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        (b"Metadata-Version: 2.1\nName: vllm\n\nVersion: 0.16.0\n", "has no valid Version header"),
        (b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.15.1\n", "is not vllm 0.16.0's"),
        (b"Metadata-Version: 2.1\nName: not-vllm\nVersion: 0.16.0\n", "is not vllm 0.16.0's"),
        # read as version detection and importlib.metadata read it: the header block ends at a line that is none
        (b"Metadata-Version: 2.1\nName: vllm\nnot a header\nVersion: 0.16.0\n", "has no valid Version header"),
        (b"Metadata-Version: 2.1\nName: vllm\nVersion : 0.15.1\nVersion: 0.16.0\n", "has no valid Version header"),
    ],
)
def test_a_metadata_that_is_not_the_file_names_is_refused(tmp_path, library, metadata, why):
    stock = write_wheel(tmp_path / "in")
    _replace_member(stock, "vllm-0.16.0.dist-info/METADATA", metadata)
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 2)
    assert f"its METADATA {why}" in done.stderr


def test_a_wheel_of_another_project_is_refused(tmp_path, library):
    path = tmp_path / f"torch-2.9.0-{TAGS}.whl"
    os.link(write_wheel(tmp_path / "in"), path)
    done = run_cli("wheel", path, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 2)
    assert "not of vllm" in done.stderr


def test_an_archive_that_would_need_zip64_is_refused(tmp_path, library, monkeypatch):
    monkeypatch.setattr(rawzip, "ZIP32_LIMIT", 10_000)  # the stored .so is 16 KiB
    with pytest.raises(BadInput, match="zip64"):
        build_patched_wheel(write_wheel(tmp_path / "in"), tmp_path / "out", Options(library=str(library)), label=None)
    assert not (tmp_path / "out").exists()  # nor the --out it made (new-user 21, 7b)


@pytest.mark.parametrize("large", [False, True])  # written in batches; copied in the kernel
def test_a_write_that_fails_half_way_leaves_no_file(tmp_path, library, monkeypatch, large):
    from patchkit.checks import LARGEST_PARSED

    writes = []

    def full_disk_after_a_while(*args, **kwargs):
        writes.append(1)
        if large or len(writes) > 1:  # the big member's copy; the second batch of headers and data
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    files = {**STOCK_FILES, "vllm/_big.so": os.urandom(LARGEST_PARSED + 1)} if large else STOCK_FILES
    name = "copy_range" if large else "_pwrite"
    real = getattr(rawzip, name)
    monkeypatch.setattr(rawzip, name, full_disk_after_a_while)
    out = tmp_path / "out"
    with pytest.raises(TargetError, match="No space left"):
        build_patched_wheel(write_wheel(tmp_path / "in", files=files), out, Options(library=str(library)), label=None)
    assert not out.exists()  # nor the --out it made (new-user 21, 7b)


def test_without_copy_file_range_the_copy_is_read_and_written(tmp_path, library, monkeypatch):
    stock = write_wheel(tmp_path / "in")
    chosen = Options(library=str(library))
    ranged = build_patched_wheel(stock, tmp_path / "ranged", chosen, label=None).path
    assert ranged is not None

    def cross_device(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", cross_device)
    copied = build_patched_wheel(stock, tmp_path / "copied", chosen, label=None).path
    assert copied is not None and copied.read_bytes() == ranged.read_bytes()


# --------------------------------------------------------------------------- the provenance, read back


@pytest.fixture
def installed(tmp_path, run, library) -> Path:
    assert build(run, write_wheel(tmp_path / "in"), tmp_path / "out", "--patches", library).exit_code == 0
    (patched,) = (tmp_path / "out").iterdir()
    return install(patched, tmp_path / "prefix") / "vllm-0.16.0+patchkit.demo.dist-info"


def _edit_record(dist_info: Path, edit) -> None:
    path = dist_info / "patchkit.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d.update(schema_version=True), "schema_version"),
        (lambda d: d.pop("label"), "keys"),
        (lambda d: d["files"].update({"../../x.py": d["files"]["vllm/config/spec.py"]}), "contains '..'"),
        (lambda d: d["patches"].append({"name": "../p.patch", "sha256": "0" * 64}), "plain file name"),
        (lambda d: d["patches"][0].update(sha256="ABC"), "64 lowercase hex"),
        (lambda d: d["files"]["vllm/config/spec.py"].update(stock_sha256=None, patched_sha256=None), "neither"),
    ],
)
def test_a_damaged_provenance_record_is_refused(installed, edit, why):
    _edit_record(installed, edit)
    with pytest.raises(BadInput, match="damaged") as caught:
        read_provenance(installed)
    assert why in caught.value.message


def test_a_provenance_record_that_is_not_a_regular_file_is_refused(installed, tmp_path):
    outside = tmp_path / "planted.json"
    (installed / "patchkit.json").rename(outside)
    (installed / "patchkit.json").symlink_to(outside)
    with pytest.raises(BadInput, match="a symlink"):
        read_provenance(installed)
    (installed / "patchkit.json").unlink()
    os.mkfifo(installed / "patchkit.json")
    with pytest.raises(BadInput, match="not a regular file"):
        read_provenance(installed)
    (installed / "patchkit.json").unlink()
    with pytest.raises(FileNotFoundError):
        read_provenance(installed)


def test_a_patch_text_that_is_not_the_recorded_one_is_refused(installed):
    provenance = read_provenance(installed)
    (installed / "patchkit/0001-change.patch").write_bytes(b"tampered\n")
    with pytest.raises(BadInput, match="sha256 differs"):
        provenance.patch_text("0001-change.patch")
    (installed / "patchkit/0001-change.patch").unlink()
    (installed / "patchkit/0001-change.patch").symlink_to("/etc/passwd")
    with pytest.raises(BadInput, match="cannot read"):
        provenance.patch_text("0001-change.patch")
    assert stat.S_ISLNK(os.lstat(installed / "patchkit/0001-change.patch").st_mode)


@pytest.mark.parametrize(
    ("member", "why"),
    [
        ("vllm-0.16.0.dist-info/patchkit", "already holds vllm-0.16.0.dist-info/patchkit,"),
        ("vllm-0.16.0.dist-info/patchkit.json", "already holds vllm-0.16.0.dist-info/patchkit.json,"),
        ("vllm-0.16.0.dist-info/patchkit/x.patch", "already holds vllm-0.16.0.dist-info/patchkit/x.patch,"),
    ],
)
def test_a_dist_info_member_where_the_provenance_goes_is_refused(tmp_path, library, member, why):
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, member: b"x"})
    done = refused_wheel(tmp_path, stock, library)
    assert why in done.stderr and "refusing the wheel" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([(_info("vllm/caf\u00e9.py"), b"a = 1\n"), (_info("vllm/cafe\u0301.py"), b"a = 2\n")], "appears twice"),
        ([(_info("vllm/evil/"), b"payload")], "is a directory entry that holds data"),
        (
            [(_info("vllm-0.16.0.data/scripts/tool"), b"one"), (_info("vllm-0.16.0+x.data/scripts/tool"), b"two")],
            "lies outside vllm/",  # where the renamed .data directory would go: no .data is taken
        ),
    ],
)
def test_members_that_would_be_one_file_or_a_hollow_directory_are_refused(tmp_path, library, members, why):
    stock = write_wheel(tmp_path / "in", extra=members)
    done = refused_wheel(tmp_path, stock, library, "--local-label", "x")
    assert why in done.stderr and "refusing the wheel" in done.stderr


# --------------------------------------------------------------------------- vllm/ and its dist-info only


@pytest.mark.parametrize(
    "member",
    [
        "evil.data/purelib/vllm/config/spec.py",  # pip installs any top-level *.data directory as one
        "VLLM-0.16.0.data/platlib/vllm/config/spec.py",
        "vllm-0.16.0+x.data/purelib/vllm/models/model.py",
        "notes.data",  # a file at the top: pip still takes it for a .data directory's member
    ],
)
def test_a_member_of_a_data_directory_not_the_wheels_is_refused(tmp_path, library, member):
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, member: b"STOCK = 1\n"})
    done = refused_wheel(tmp_path, stock, library)
    assert member in done.stderr and "lies outside vllm/" in done.stderr, done.stderr


def test_a_file_the_series_creates_where_a_member_of_another_case_installs_is_refused(tmp_path):
    tree = write_tree(tmp_path / "stock", files={"vllm/config/spec.py": SPEC_PY})
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/models/eagle3.py": "EAGLE3 = True\n"})]}
    )
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, "vllm/models/Eagle3.py": b"OLD\n"})
    done = refused_wheel(tmp_path, stock, library)
    assert "the series creates vllm/models/eagle3.py, and member 'vllm/models/Eagle3.py' installs there" in done.stderr


_STALE_PYC = b"\xcb\x0d\x0d\x0a\x01\x00\x00\x00" + b"\x00" * 8 + b"stock code"  # unchecked-hash header


@pytest.mark.filterwarnings("ignore:Skip installing:RuntimeWarning")  # installer skips __pycache__; pip does not
def test_compiled_bytecode_of_a_patched_file_is_left_out(tmp_path, run):
    tree = write_tree(tmp_path / "stock")
    library = write_library(
        tmp_path / "lib",
        {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec(), "vllm/models/model.py": None})]},
    )
    dropped = [
        "vllm/config/__pycache__/spec.cpython-311.pyc",
        "vllm/config/__pycache__/spec.cpython-312.opt-1.pyc",
        "vllm/config/spec.pyc",  # legacy: imported once its source is gone
        "vllm/models/model.pyc",  # of a deleted source
        "vllm/models/__pycache__/model.cpython-311.pyc",
    ]
    kept = [
        "vllm/config/__pycache__/other.cpython-311.pyc",
        "vllm/__pycache__/spec.cpython-311.pyc",  # another directory's module
        "vllm/config/__pycache__/spec.cpython-311.x.pyc",  # no tag Python writes
    ]
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, **{m: _STALE_PYC for m in dropped + kept}})
    assert build(run, stock, tmp_path / "out", "--patches", library).exit_code == 0
    (patched,) = (tmp_path / "out").iterdir()
    with zipfile.ZipFile(patched) as zf:
        names = set(zf.namelist())
        record = zf.read("vllm-0.16.0+patchkit.demo.dist-info/RECORD").decode()
    assert not names & set(dropped) and not any(m in record for m in dropped), names
    assert set(kept) <= names
    site = install(patched, tmp_path / "prefix")
    assert (site / "vllm/config/spec.py").read_text() == patched_spec()


def test_a_series_file_beyond_what_the_checks_parse_is_refused_with_the_limit(tmp_path, library):
    from patchkit.checks import LARGEST_PARSED

    padded = SPEC_PY.encode() + b"#\n" * (LARGEST_PARSED // 2)  # a little over the limit, deflated to little
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, "vllm/config/spec.py": padded})
    assert stock.stat().st_size < 1 << 20
    done = refused_wheel(tmp_path, stock, library)
    assert "vllm/config/spec.py" in done.stderr and f"up to {LARGEST_PARSED >> 20} MiB" in done.stderr


# --------------------------------------------------------------------------- --out

PATCHED_NAME = f"vllm-0.16.0+patchkit.demo-{TAGS}.whl"


def _interrupted_run(stock: Path, out: Path, library: Path) -> str:
    """The temporary wheel a build SIGKILLed half-way leaves (as it starts writing the patched members)."""

    code = (
        "import os, signal, sys; from pathlib import Path\n"
        "from patchkit.base.options import Options; from patchkit.wheel.build import build_patched_wheel\n"
        "def say(message):\n"
        "    if message.startswith('writing'): os.kill(os.getpid(), signal.SIGKILL)\n"
        "build_patched_wheel(Path(sys.argv[1]), Path(sys.argv[2]), Options(library=sys.argv[3]), label=None, say=say)\n"
    )
    before = set(os.listdir(out))
    temp = out.parent / "temp"  # the scratch tree a kill leaves: not in the system's
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(temp)}
    done = subprocess.run([sys.executable, "-c", code, stock, out, library], capture_output=True, text=True, env=env)
    assert done.returncode == -9, done.stderr
    (left,) = set(os.listdir(out)) - before
    return left


def test_an_interrupted_runs_temporary_wheel_is_removed_by_the_next_run(tmp_path):
    import fcntl

    tree = write_tree(tmp_path / "stock")
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )
    out = tmp_path / "out"
    out.mkdir()
    stock = write_wheel(tmp_path / "in")
    first = _interrupted_run(stock, out, library)
    assert (out / first).stat().st_size > 16384  # the stock members were copied into it
    second = _interrupted_run(stock, out, library)  # it removed the first run's
    assert sorted(os.listdir(out)) == [second]
    running = out / f".{PATCHED_NAME}.patchkit-0123abcd.tmp"  # another build, writing now: locked
    running.write_bytes(b"PK")
    keep = {
        running.name: None,
        ".vllm-0.16.0-x.whl.patchkit-notahex0.tmp": b"mine",  # not patchkit's pattern
        f"{PATCHED_NAME}.patchkit-0123abcd.tmp": b"mine",  # not hidden: not patchkit's name
        "notes.tmp": b"mine",
    }
    for name, data in keep.items():
        if data is not None:
            (out / name).write_bytes(data)
    outside = tmp_path / "precious.bin"
    outside.write_bytes(b"precious")
    linked = out / f".{PATCHED_NAME}.patchkit-fedcba98.tmp"
    linked.symlink_to(outside)  # patchkit's name, but a symlink: never patchkit's file
    directory = out / f".{PATCHED_NAME}.patchkit-00000000.tmp"
    directory.mkdir()
    with running.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = run_cli("wheel", stock, "--out", out, "--patches", library, "-v")
    assert_clean_failure(done, 0)
    after = set(os.listdir(out))
    assert second not in after, after
    assert after == {PATCHED_NAME, *keep, linked.name, directory.name}
    assert outside.read_bytes() == b"precious" and linked.is_symlink()
    assert f"removed {out / second}" in done.stderr and first != second, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_temporary_wheel_is_kept(tmp_path, library):
    out = tmp_path / "out"
    out.mkdir()
    theirs = out / f".{PATCHED_NAME}.patchkit-0123abcd.tmp"
    theirs.write_bytes(b"PK")
    os.chown(theirs, 12345, 12345)
    done = run_cli("wheel", write_wheel(tmp_path / "in"), "--out", out, "--patches", library)
    assert_clean_failure(done, 0)
    assert theirs.read_bytes() == b"PK"


@pytest.mark.parametrize("mode", [0o644, 0o600])
def test_a_seal_key_others_can_read_is_said_once(tmp_path, library, mode):
    state = tmp_path / "state"
    key = state / "patchkit" / "cache-seal.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(os.urandom(32))
    key.chmod(mode)
    env = {"XDG_STATE_HOME": str(state), "PATCHKIT_CACHE_DIR": str(tmp_path / "cache")}
    # A labelled build (held to its own RECORD): a release cache sealed with another key is no evidence
    stock = write_wheel(tmp_path / "in", "0.16.0+site")
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library, env=env)
    assert_clean_failure(done, 0)
    said = done.stderr.count(f"chmod 600 {key}")
    assert said == (1 if mode == 0o644 else 0), done.stderr
    assert mode == 0o600 or "mode 0644" in done.stderr


def _cli_with(code: str, *args: object, env: dict[str, str] | None = None):
    """The CLI in a subprocess after `code` ran in it (a hook into the build: a signal at one step)."""
    main = "import sys; from patchkit.cli.main import main; sys.argv = ['patchkit', *sys.argv[1:]]; main()"
    return subprocess.run(
        [sys.executable, "-c", f"{code}\n{main}", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
        preexec_fn=default_signals,
    )


def test_an_interrupt_after_the_wheel_is_in_place_says_so(tmp_path, library):
    hook = (
        "import os, signal; from patchkit.wheel import build\n"
        "commit = build._Output.commit\n"
        "def late(self, final):\n"
        "    done = commit(self, final); os.kill(os.getpid(), signal.SIGINT); return done\n"
        "build._Output.commit = late\n"
    )
    out = tmp_path / "out"
    done = _cli_with(hook, "wheel", write_wheel(tmp_path / "in"), "--out", out, "--patches", library)
    assert_clean_failure(done, 130)
    assert f"interrupted after the wheel was written: it is in place, {out / PATCHED_NAME}" in done.stderr
    assert os.listdir(out) == [PATCHED_NAME]
    # new-user 21, 7b: the hint is the build as a command (`patchkit wheel` again named no release)
    again = re.search(r"not printed; `patchkit ([^`]*)` gives both", " ".join(done.stderr.split()))
    assert again, done.stderr
    rebuilt = run_cli(*shlex.split(again.group(1)), cwd=tmp_path / "in")
    assert_clean_failure(rebuilt, 0)
    assert rebuilt.stdout.splitlines()[-1] == str(out / PATCHED_NAME) and os.listdir(out) == [PATCHED_NAME]


@pytest.mark.parametrize("existed", [False, True], ids=["out-made", "out-there"])
@pytest.mark.parametrize(("signum", "code"), [("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT", 130)])
def test_a_signal_mid_build_leaves_nothing_and_says_so(tmp_path, library, signum, code, existed):
    hook = (
        "import os, signal; from patchkit.wheel import build\n"
        "check = build._plan_and_check\n"
        f"def stop(*args): os.kill(os.getpid(), signal.{signum}); return check(*args)\n"
        "build._plan_and_check = stop\n"
    )
    out, temp = tmp_path / "out", tmp_path / "temp"
    temp.mkdir()
    if existed:
        out.mkdir()
    stock = write_wheel(tmp_path / "in")
    done = _cli_with(hook, "wheel", stock, "--out", out / "dist", "--patches", library, env={"TMPDIR": str(temp)})
    assert_clean_failure(done, code)
    assert "interrupted before the wheel was written: this run left nothing in --out" in done.stderr
    # new-user 21, 7b: the directories it made for --out go too (an empty --out was left)
    assert os.listdir(temp) == []
    assert not (out / "dist").exists() and out.exists() == existed and (not existed or os.listdir(out) == [])


def test_a_killed_runs_scratch_tree_is_removed_by_the_next_run(tmp_path, library):
    import fcntl

    temp, out = tmp_path / "temp", tmp_path / "out"
    temp.mkdir()
    code = (
        "import os, signal, sys; from pathlib import Path\n"
        "from patchkit.base.options import Options; from patchkit.wheel.build import build_patched_wheel\n"
        "def say(message):\n"
        "    if message.startswith('writing'): os.kill(os.getpid(), signal.SIGKILL)\n"
        "build_patched_wheel(Path(sys.argv[1]), Path(sys.argv[2]), Options(library=sys.argv[3]), label=None, say=say)\n"
    )
    stock = write_wheel(tmp_path / "in")
    killed = subprocess.run(
        [sys.executable, "-c", code, stock, out, library], env={**os.environ, "TMPDIR": str(temp)}, capture_output=True
    )
    assert killed.returncode == -9
    (left,) = os.listdir(temp)
    assert left.startswith("patchkit-wheel-") and (temp / left / "vllm/config/spec.py").is_file()
    running = temp / "patchkit-wheel-running0"  # another build's, in use: locked
    running.mkdir()
    keep = [running.name, "patchkit-wheel-link_000", "patchkit-wheel-file_000", "patchkit-wheel-x", "mine"]
    (temp / keep[1]).symlink_to(tmp_path / "in")
    (temp / keep[2]).write_bytes(b"mine")
    for name in keep[3:]:
        (temp / name).mkdir()
    recent = temp / "patchkit-wheel-recent00"  # unlocked, but modified a minute ago: maybe an older patchkit's, running
    recent.mkdir()
    keep.append(recent.name)
    hour_ago = time.time() - 3600
    for name in [left, *keep[:-1]]:
        os.utime(temp / name, (hour_ago, hour_ago), follow_symlinks=False)
    os.utime(recent, (time.time() - 60,) * 2)
    fd = os.open(running, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = run_cli("wheel", stock, "--out", out, "--patches", library, "-v", env={"TMPDIR": str(temp)})
    finally:
        os.close(fd)
    assert_clean_failure(done, 0)
    assert sorted(os.listdir(temp)) == sorted(keep)
    assert f"removed {temp / left}" in done.stderr and (tmp_path / "in" / stock.name).is_file()


def test_a_sweep_between_another_runs_create_and_lock_cannot_remove_its_file(tmp_path, library, monkeypatch):
    """Concurrent builds into one --out: a sweep that lands as a run creates its temporary wheel."""
    import fcntl

    from patchkit.wheel import build as wheel_build

    out = tmp_path / "out"
    out.mkdir()
    real_flock, swept = fcntl.flock, []

    def sweep_first(fd, operation):
        if not swept and os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == str(out):
            swept.append(wheel_build._remove_leftovers(out))  # another run's sweep, just before the lock
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", sweep_first)
    result = build_patched_wheel(write_wheel(tmp_path / "in"), out, Options(library=str(library)), label=None)
    assert swept == [[]] and result.path == out / PATCHED_NAME and os.listdir(out) == [PATCHED_NAME]


@pytest.fixture
def small_tmpfs():
    """A 64 KiB tmpfs with 16 inodes (root only): a temporary directory that really fills up."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = Path(tempfile.mkdtemp(prefix="wheel-tmp-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=16", "tmpfs", mount]).returncode:
        mount.rmdir()
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", mount], check=True)
    mount.rmdir()


@pytest.mark.parametrize("full", ["space", "inodes"])
def test_a_full_temporary_directory_is_exit_4_naming_it(tmp_path, library, small_tmpfs, full):
    # Full but for two pages or inodes: Python's own probe of TMPDIR passes (a full one it skips), the scratch tree not.
    if full == "space":
        filler = os.open(small_tmpfs / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while os.write(filler, b"x" * 4096):
                pass
        os.ftruncate(filler, os.fstat(filler).st_size - 8192)
        os.close(filler)
    else:
        with contextlib.suppress(OSError):
            for i in range(64):
                (small_tmpfs / f"f{i}").touch()
        for name in sorted(os.listdir(small_tmpfs))[:2]:
            (small_tmpfs / name).unlink()
    before = set(os.listdir(small_tmpfs))
    out = tmp_path / "out"
    done = run_cli(
        "wheel", write_wheel(tmp_path / "in"), "--out", out, "--patches", library, env={"TMPDIR": str(small_tmpfs)}
    )
    assert_nothing_written(done, out, 4)
    assert f"temporary directory {small_tmpfs}" in done.stderr and "TMPDIR" in done.stderr, done.stderr
    assert set(os.listdir(small_tmpfs)) == before


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (
            lambda out, tmp: out.symlink_to(tmp / "missing-dir"),
            "is a symlink to {tmp}/missing-dir, which does not exist",
        ),
        (lambda out, tmp: out.write_bytes(b"x"), "--out {tmp}/out is a file, not a directory"),
        (lambda out, tmp: out.symlink_to(tmp / "in"), None),  # a symlink to a directory: used
    ],
)
def test_an_out_that_is_no_directory_says_what_it_is(tmp_path, library, make, why):
    stock = write_wheel(tmp_path / "in")
    out = tmp_path / "out"
    make(out, tmp_path)
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    if why is None:
        assert_clean_failure(done, 0)
        assert (tmp_path / "in" / PATCHED_NAME).is_file()
        return
    assert_clean_failure(done, 4)
    assert why.format(tmp=tmp_path) in done.stderr, done.stderr
    assert "File exists" not in done.stderr


def test_messages_say_what_is_in_the_way_and_what_to_do(tmp_path, library):
    stock = write_wheel(tmp_path / "in")
    fifo, directory = tmp_path / "vllm-0.16.0-py3-none-any.whl", tmp_path / f"vllm-0.16.0-{TAGS}.whl"
    os.mkfifo(fifo)
    directory.mkdir()
    for path in (fifo, directory):
        done = run_cli("wheel", path, "--patches", library)
        assert_clean_failure(done, 2)
        assert f"{path} is not a regular file" in done.stderr, done.stderr
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    done = run_cli("wheel", stock, "--out", loop, "--patches", library)
    assert_clean_failure(done, 4)
    assert "leads back to itself" in done.stderr and "create the directory" not in done.stderr, done.stderr
    out = tmp_path / "out"
    (out / PATCHED_NAME).mkdir(parents=True)
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert_clean_failure(done, 4)
    assert "Is a directory" in done.stderr and "hint: " in done.stderr and "remove or rename it" in done.stderr


def test_a_file_on_the_way_to_out_is_named(tmp_path, library):
    (tmp_path / "dist").write_bytes(b"x")
    dangling = tmp_path / "gone"
    dangling.symlink_to(tmp_path / "nowhere")
    stock = write_wheel(tmp_path / "in")
    done = run_cli("wheel", stock, "--out", tmp_path / "dist" / "sub", "--patches", library)
    assert_clean_failure(done, 4)
    assert f"{tmp_path}/dist (on the way to --out {tmp_path}/dist/sub) is a file" in done.stderr, done.stderr
    done = run_cli("wheel", stock, "--out", dangling / "sub", "--patches", library)
    assert_clean_failure(done, 4)
    assert f"{dangling} (on the way to --out {dangling}/sub) is a symlink to {tmp_path}/nowhere" in done.stderr


def test_members_too_large_for_any_series_are_copied_first_and_true(tmp_path, run, library):
    from patchkit.checks import LARGEST_PARSED

    big = os.urandom(LARGEST_PARSED + 1)
    files = {**STOCK_FILES, "vllm/_big.abi3.so": big}
    stock = write_wheel(tmp_path / "in", files=files)
    assert build(run, stock, tmp_path / "out", "--patches", library).exit_code == 0
    patched = tmp_path / "out" / PATCHED_NAME
    with zipfile.ZipFile(patched) as zf:
        names = zf.namelist()
        assert names[0] == "vllm/_big.abi3.so"
        assert raw_member(patched, zf.getinfo("vllm/_big.abi3.so")) == big
    site = install(patched, tmp_path / "prefix")  # RECORD validated against every member's bytes
    assert (site / "vllm/_big.abi3.so").read_bytes() == big
    assert (site / "vllm/config/spec.py").read_text() == patched_spec()


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("x = y" + ".a" * 200_000 + "\n", "nested deeper than this interpreter can compile"),
        ("def f():\n    pass\nreturn 1\n", "'return' outside function"),  # past the parser: the compiler's
        ("x = (\n", "line 1"),
    ],
)
def test_a_patched_file_python_cannot_compile_fails_syntax_and_writes_no_wheel(tmp_path, source, why):
    tree = write_tree(tmp_path / "stock")
    library = write_library(tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/models/deep.py": source})]})
    out = tmp_path / "out"
    done = run_cli("wheel", write_wheel(tmp_path / "in"), "--out", out, "--patches", library, "--format", "json")
    assert_nothing_written(done, out, 1)
    (row,) = [
        c for c in json.loads(done.stdout)["checks"] if c["check"] == "syntax" and c["path"] == "vllm/models/deep.py"
    ]
    assert row["ok"] is False and why in row["message"], row


def test_a_full_out_is_exit_4_with_a_hint(tmp_path, library, small_tmpfs):
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, "vllm/_C.abi3.so": os.urandom(96 << 10)})
    done = run_cli("wheel", stock, "--out", small_tmpfs, "--patches", library)
    assert_clean_failure(done, 4)
    assert "No space left on device" in done.stderr and "hint: free space there" in done.stderr, done.stderr
    assert os.listdir(small_tmpfs) == []


# --------------------------------------------------------------------------- a module Python imports first


@pytest.mark.parametrize(
    "shadowing",
    [
        "vllm/config/spec/__init__.py",  # a package of the same name comes first
        "vllm/config/spec/__init__.cpython-312-x86_64-linux-gnu.so",
        "vllm/config/spec.cpython-312-x86_64-linux-gnu.so",  # then an extension module
        "vllm/config/spec.abi3.so",
        "vllm/config/spec.so",
        "vllm/config/spec.cp312-win_amd64.pyd",
        "vllm/config.py",  # vllm/config/ has no __init__: a module of its name wins over it
        "vllm/config.abi3.so",
        "vllm/config/__init__.abi3.so",  # an extension __init__ on the way is the package, before __init__.py
        "vllm/__init__.cpython-311-x86_64-linux-gnu.so",
        "vllm/config/__init__.so",
    ],
)
def test_a_member_python_imports_instead_of_a_patched_source_is_refused(tmp_path, library, shadowing):
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, shadowing: b"\x7fELF or a package\n"})
    done = refused_wheel(tmp_path, stock, library)
    assert shadowing in done.stderr and "instead of the patched vllm/config/spec.py" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "beside",
    [
        "vllm/config/spec/notes.txt",  # a directory without __init__: a namespace portion, taken last
        "vllm/config/spec.pyc",  # legacy bytecode: after the source
        "vllm/config/spec.py.so",
        "vllm/config/specs.abi3.so",
        "vllm/config/spec.backup.so",  # no suffix an interpreter loads
    ],
)
def test_files_python_imports_after_a_patched_source_are_kept(tmp_path, run, library, beside):
    stock = write_wheel(tmp_path / "in", files={**STOCK_FILES, beside: b"kept\n"})
    done = build(run, stock, tmp_path / "out", "--patches", library)
    assert done.exit_code == 0, done.output


# --------------------------------------------------------------------------- too many members

MANY = 66_000  # beyond the 65,535 members patchkit writes (no zip64)


@pytest.fixture(scope="module")
def crowded_wheel(tmp_path_factory) -> Path:
    """A vLLM wheel of MANY members (zipfile writes its end records in zip64 form past 65,534)."""
    where = tmp_path_factory.mktemp("crowded")
    path = write_wheel(where / "in")
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as zf:
        for i in range(MANY):
            zf.writestr(f"vllm/x/m{i}.py", b"")
    return path


def _end_records_say(path: Path, count: int) -> None:
    """Both end records (zip64 and classic) rewritten to list `count` members: a lie."""
    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<2H", data, end + 8, min(count, 0xFFFF), min(count, 0xFFFF))
    end64 = data.rfind(b"PK\x06\x06")
    if end64 >= 0:
        struct.pack_into("<2Q", data, end64 + 24, count, count)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("lie", [None, 5], ids=["true-count", "end-record-says-5"])
def test_a_wheel_of_more_members_than_patchkit_writes_is_refused_before_they_are_parsed(
    tmp_path, library, monkeypatch, crowded_wheel, lie
):
    stock = tmp_path / "in" / crowded_wheel.name
    stock.parent.mkdir()
    stock.write_bytes(crowded_wheel.read_bytes())
    if lie is not None:
        _end_records_say(stock, lie)

    def no_parsing(*args, **kwargs):
        raise AssertionError("zipfile parsed the central directory")

    monkeypatch.setattr("patchkit.wheel.build.zipfile.ZipFile", no_parsing)
    with pytest.raises(BadInput, match="fewer than 65,535 members") as refused:
        build_patched_wheel(stock, tmp_path / "out", Options(library=str(library)), label=None)
    assert f"{MANY + 9:,} members" in refused.value.message  # and the wheel's own 9
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_an_end_record_listing_more_members_than_patchkit_writes_is_refused(tmp_path, library):
    stock = write_wheel(tmp_path / "in")
    _end_records_say(stock, 70_000)
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 2)
    assert "lists 65,535 members" in done.stderr and "fewer than 65,535" in done.stderr, done.stderr


def _sweep_with(tmp_path, library, temp, directories):
    hour_ago = time.time() - 3600
    for directory in directories:
        os.utime(directory, (hour_ago, hour_ago))
    stock = write_wheel(tmp_path / "in")
    return run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library, "-v", env={"TMPDIR": str(temp)})


def test_the_scratch_sweep_keeps_a_users_directory_of_a_scratch_trees_name(tmp_path, library):
    """A user's directory named like a scratch tree (an --out, say), old and unlocked, is never removed."""
    temp = tmp_path / "temp"
    users = temp / "patchkit-wheel-release1"
    (users / "sub").mkdir(parents=True)
    (users / "NOTES.txt").write_text("my notes")
    done = _sweep_with(tmp_path, library, temp, [users])
    assert_clean_failure(done, 0)
    assert os.listdir(temp) == [users.name] and (users / "NOTES.txt").read_text() == "my notes"
    assert "removed" not in done.stderr


def test_the_scratch_sweep_keeps_a_directory_with_a_forged_marker(tmp_path, library):
    from patchkit.wheel import build as wheel_build

    temp = tmp_path / "temp"
    link_marked, wrong_text = temp / "patchkit-wheel-linkmark", temp / "patchkit-wheel-wrongtxt"
    link_marked.mkdir(parents=True)
    wrong_text.mkdir()
    real_marker = tmp_path / "marker"  # the marker a symlink to a true one's text: not patchkit's
    real_marker.write_bytes(wheel_build._SCRATCH_MARKER_TEXT)
    (link_marked / wheel_build._SCRATCH_MARKER).symlink_to(real_marker)
    (wrong_text / wheel_build._SCRATCH_MARKER).write_text("mine")
    done = _sweep_with(tmp_path, library, temp, [link_marked, wrong_text])
    assert_clean_failure(done, 0)
    assert sorted(os.listdir(temp)) == [link_marked.name, wrong_text.name]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_report_that_cannot_be_written_says_the_wheel_is_in_place(tmp_path, library, fmt):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "PATCHKIT_DEBUG"}
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "patchkit",
                "wheel",
                write_wheel(tmp_path / "in"),
                "--out",
                out,
                "--patches",
                library,
                "--format",
                fmt,
            ],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=300,
        )
    assert done.returncode == 4, done.stderr
    assert "cannot write to stdout" in done.stderr and "Traceback" not in done.stderr
    assert f"the wheel was written: it is in place, {out / PATCHED_NAME}" in done.stderr
    assert os.listdir(out) == [PATCHED_NAME]


def test_a_file_over_members_listed_before_it_is_refused():
    tree = rawzip._NameTree()
    assert tree.add("vllm/a/b/c.py") is None and tree.add("vllm/a/") is None
    assert tree.add("vllm/a") == "would be a file where other members lie under it"
    assert tree.add("vllm/a/b/c.py/d") == "would lie under vllm/a/b/c.py, a file"


def test_the_deepest_name_allowed_costs_no_prefix_per_part(tmp_path, library):
    """The name bounds keep a hostile wheel's names small, and the checks walk each name once:
    thousands of members at the bounds build in seconds."""
    deep = "vllm/" + "/".join(f"d{i:03d}" for i in range(60)) + "/"
    extra = [(_info(f"{deep}f{i}.py"), b"") for i in range(3000)]
    stock = write_wheel(tmp_path / "in", extra=extra)
    started = time.monotonic()
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert_clean_failure(done, 0)
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    "name",
    [
        "vllm-0.16.0.data/data/lib/python3.11/vllm/config/spec.py",  # <prefix>/lib/python3.11: ahead of site-packages
        "vllm-0.16.0.data/data/lib/python3.12/lib-dynload/vllm.abi3.so",
        "vllm-0.16.0.data/scripts/vllm.py",  # bin/ is sys.path[0] when the vllm script runs
        "vllm-0.16.0.data/data/lib64/python3.13t/vllm.py",
    ],
)
def test_a_data_member_installing_vllm_outside_site_packages_is_refused(tmp_path, library, name):
    stock = write_wheel(tmp_path / "in", extra=[(_info(name), b"print('stock copy')\n")])
    done = refused_wheel(tmp_path, stock, library)
    assert f"member {name!r} lies outside vllm/" in done.stderr


def _with_overlapping_members(wheel: Path, count: int) -> None:
    """Append `count` stored members each of whose data is the next one's header and data (the
    non-recursive zip bomb): every one named by its local header, inside the file, its CRC true."""
    import zlib

    data = wheel.read_bytes()
    end = data.rfind(b"PK\x05\x06")
    entries, directory_size, directory_offset = struct.unpack_from("<H2L", data, end + 10)
    body, directory = data[:directory_offset], data[directory_offset : directory_offset + directory_size]
    tail, chain = b"x = 1\n" * 100, []
    for i in reversed(range(count)):
        name = f"vllm/overlap{i}.py".encode()
        crc = zlib.crc32(tail)
        header = struct.pack(
            "<4s2B4HL2L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0x5021, crc, len(tail), len(tail), len(name), 0
        )
        chain.append((name, crc, len(tail)))
        tail = header + name + tail
    offset = len(body)
    for name, crc, size in reversed(chain):
        directory += struct.pack(
            "<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, 0, 0, 0, 0x5021, crc, size, size, len(name), 0, 0, 0, 0,
            0o100644 << 16, offset,
        ) + name  # fmt: skip
        offset += 30 + len(name)
    total = entries + count
    record = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, total, total, len(directory), len(body) + len(tail), 0)
    wheel.write_bytes(body + tail + directory + record)


def test_members_whose_data_overlap_are_refused(tmp_path, library):
    stock = write_wheel(tmp_path / "in")
    _with_overlapping_members(stock, 3)
    with zipfile.ZipFile(stock) as zf:  # a readable archive, as far as this Python's zipfile checks
        assert zf.read("vllm/overlap0.py").endswith(b"x = 1\n")
    done = refused_wheel(tmp_path, stock, library)
    assert "the data of 'vllm/overlap0.py' overlaps member 'vllm/overlap1.py'" in done.stderr


def test_a_record_row_without_a_hash_is_said_to_be_listed_without_one(tmp_path, library):
    """Review 10b L3: `vllm/config/spec.py,,` was called "not listed in RECORD"; it is listed, with no hash."""
    stock = write_wheel(tmp_path / "in", record={"vllm/config/spec.py": ""})
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert_nothing_written(done, tmp_path / "out", 1)
    said = " ".join((done.stdout + done.stderr).split())
    assert "lists it without a hash" in said and "not listed in" not in said, said


@pytest.mark.parametrize("renamed", ["scratch", "output"])
@pytest.mark.parametrize(("signum", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_at_a_temporary_names_rename_leaves_nothing_and_says_so(tmp_path, library, renamed, signum, code):
    """A signal that lands during the rename that gives the scratch tree or the temporary wheel its
    name (as strace's `-e inject=rename:signal=SIGTERM` lands it) is handled once the rename is done:
    the file or directory goes under whichever name it then has, and "left nothing" is true."""
    target = r"\.tmp" if renamed == "output" else "patchkit-wheel-"
    hook = (
        "import os, re, signal\n"
        "rename = os.rename\n"
        "def aimed(src, dst, *args, **kwargs):\n"
        "    rename(src, dst, *args, **kwargs)\n"
        f"    if re.search({target!r}, os.fspath(dst)): os.kill(os.getpid(), signal.{signum})\n"
        "os.rename = aimed\n"
    )
    out, temp = tmp_path / "out", tmp_path / "temp"
    temp.mkdir()
    stock = write_wheel(tmp_path / "in")
    done = _cli_with(hook, "wheel", stock, "--out", out, "--patches", library, env={"TMPDIR": str(temp)})
    assert_clean_failure(done, code)
    assert "interrupted before the wheel was written: this run left nothing in --out" in done.stderr
    assert os.listdir(temp) == [] and not out.exists(), (os.listdir(temp), out.exists() and os.listdir(out))
