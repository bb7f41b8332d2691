"""`patchkit wheel`, review 4: what a wheel's .data members install, and the build's small answers."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from helpers import (
    assert_clean_failure,
    file_member,
    run_cli,
    spec_library,
    write_wheel,
)


@pytest.fixture
def library(tmp_path) -> Path:
    return spec_library(tmp_path)


def _nothing_written(done, out: Path, code: int) -> None:
    assert_clean_failure(done, code)
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    [
        # <prefix>/lib/pythonX.Y/site-packages: site-packages itself in a venv, another directory on
        # sys.path under a system or --prefix scheme (Debian's pip puts purelib in dist-packages)
        "vllm-0.16.0.data/data/lib/python3.12/site-packages/vllm/config/extra.py",
        "vllm-0.16.0.data/data/lib/python3/dist-packages/vllm/platforms/extra.py",
        "vllm-0.16.0.data/data/local/lib/python3.12/dist-packages/vllm.py",
        # purelib and platlib: a second source of vllm files beside the root's
        "vllm-0.16.0.data/purelib/vllm/config/extra.py",
        "vllm-0.16.0.data/platlib/vllm.py",
        "vllm-0.16.0.data/platlib/vllm.cpython-312-x86_64-linux-gnu.so",
        # the scripts directory, sys.path[0] when the `vllm` script runs: from scripts or from data's bin/
        "vllm-0.16.0.data/scripts/vllm.py",
        "vllm-0.16.0.data/data/bin/vllm.py",
        "vllm-0.16.0.data/data/bin/vllm/__init__.py",
        "vllm-0.16.0.data/data/Scripts/vllm.py",
    ],
)
def test_a_data_member_that_installs_a_vllm_module_onto_sys_path_is_refused(tmp_path, library, name):
    stock = write_wheel(tmp_path / "in", extra=[(file_member(name), b"print('stock copy')\n")])
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    _nothing_written(done, out, 2)
    assert f"member {name!r} lies outside vllm/" in done.stderr, done.stderr


def test_a_long_member_name_is_shortened_in_the_message(tmp_path, library):
    """A member name may be 1,024 bytes: the message shows its start and its end, cut with …"""
    name = "vllm-0.16.0.data/purelib/vllm/" + "/".join(["d" * 60] * 12) + "/spec.py"
    stock = write_wheel(tmp_path / "in", extra=[(file_member(name), b"x = 1\n")])
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    _nothing_written(done, out, 2)
    assert name not in done.stderr and "…" in done.stderr, done.stderr
    assert "'vllm-0.16.0.data/purel" in done.stderr and "/spec.py'" in done.stderr, done.stderr
    assert all(len(line) < 400 for line in done.stderr.splitlines()), done.stderr


# --------------------------------------------------------------------------- the lows


def _scratch_like(temp: Path, name: str) -> Path:
    """A scratch tree as a killed build leaves it: its marker among files written before and after it."""
    from patchkit.wheel import build

    scratch = temp / name
    (scratch / "vllm/config").mkdir(parents=True)
    for i in range(25):
        (scratch / f"a{i:02d}.py").write_text("x\n")
    (scratch / build._SCRATCH_MARKER).write_bytes(build._SCRATCH_MARKER_TEXT)
    for i in range(25):
        (scratch / f"z{i:02d}.py").write_text("x\n")
    (scratch / "vllm/config/spec.py").write_text("x\n")
    return scratch


def test_the_scratch_sweep_removes_the_marker_last(tmp_path, monkeypatch):
    """A sweep cut short (a crash, SIGKILL) must leave a directory the next sweep still knows as
    patchkit's: the marker goes after everything else in it, just before the directory."""
    import os
    import stat
    import time

    from patchkit.wheel import build

    temp = tmp_path / "temp"
    scratch = _scratch_like(temp, "patchkit-wheel-abcd1234")
    hour_ago = time.time() - 3600
    os.utime(scratch, (hour_ago, hour_ago))
    removed: list[str] = []
    real_unlink, real_rmdir = os.unlink, os.rmdir

    def unlink(path, *args, **kwargs):
        removed.append(os.path.basename(os.fsdecode(path)))
        return real_unlink(path, *args, **kwargs)

    def rmdir(path, *args, **kwargs):
        removed.append(os.path.basename(os.fsdecode(path)) + "/")
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "rmdir", rmdir)
    assert build._remove_abandoned(scratch, stat.S_IFDIR, before=time.time() - 600)
    assert not scratch.exists()
    assert removed[-2:] == [build._SCRATCH_MARKER, scratch.name + "/"], removed


def test_the_scratch_removal_holds_signals(tmp_path, monkeypatch):
    """Removing a scratch tree runs with signals deferred: an interrupt cannot leave it half removed."""
    import contextlib
    import stat
    import time

    from patchkit.base import signals
    from patchkit.wheel import build

    scratch = _scratch_like(tmp_path / "temp", "patchkit-wheel-efgh5678")
    held: list[bool] = []

    @contextlib.contextmanager
    def deferred():
        held.append(scratch.exists() and (scratch / build._SCRATCH_MARKER).exists())
        yield

    monkeypatch.setattr(signals, "deferred", deferred)
    assert build._remove_abandoned(scratch, stat.S_IFDIR, before=time.time() + 1)
    assert held == [True] and not scratch.exists()


def _with_record(wheel: Path, record: bytes) -> None:
    """The wheel with its RECORD replaced by `record` (every other member as it was)."""
    with zipfile.ZipFile(wheel) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in members:
            zf.writestr(info, record if info.filename.endswith(".dist-info/RECORD") else data)


def test_a_record_with_more_rows_than_the_wheel_has_members_is_refused_before_parsing(tmp_path, library):
    stock = write_wheel(tmp_path / "in")
    with zipfile.ZipFile(stock) as zf:
        record = zf.read("vllm-0.16.0.dist-info/RECORD")
        members = len(zf.infolist())
    _with_record(stock, record + b"".join(b"vllm/ghost%d.py,,\n" % i for i in range(20_000)))
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    _nothing_written(done, out, 2)
    assert "RECORD lists" in done.stderr and f"{members} members" in done.stderr, done.stderr


def test_the_stock_record_is_parsed_once_per_build(tmp_path, library, monkeypatch):
    from patchkit.base.options import Options
    from patchkit.distinfo import record
    from patchkit.wheel import build

    parsed: list[int] = []
    real = record.parse_record

    def counting(data, only=None, **how):
        parsed.append(len(data) if only is None else -1)
        return real(data, only, **how)

    monkeypatch.setattr(record, "parse_record", counting)  # the build's and the integrity check's reads
    result = build.build_patched_wheel(
        write_wheel(tmp_path / "in"), tmp_path / "out", Options(library=str(library)), label=None
    )
    assert result.path is not None
    # whole: once; the integrity check reads the rows of the files the series changes (at most once more)
    assert len([n for n in parsed if n >= 0]) == 1 and len(parsed) <= 2, parsed


def test_a_version_of_two_numbers_is_the_release_of_three():
    from patchkit.fetch.cache import normalize_version

    assert normalize_version("0.16") == "0.16.0"
    assert normalize_version(" 0.16 ") == "0.16.0"
    assert normalize_version("1") == "1.0.0"
    assert normalize_version("0.16rc1") == "0.16.0rc1"
    assert normalize_version("0.16.post1") == "0.16.0.post1"
    assert normalize_version("0.16.0.1") == "0.16.0.1"
    assert normalize_version("v0.16") == "0.16.0"


def test_wheel_of_a_short_version_downloads_and_caches_the_three_number_release(tmp_path, server, monkeypatch):
    from index_server import build_wheel, isolate_cache, use_index

    from patchkit.wheel.stock import checked_stock_wheel

    cache = isolate_cache(tmp_path, monkeypatch)
    name = "vllm-0.2.0-py3-none-any.whl"
    server.publish(name, build_wheel(version="0.2.0", blob_size=1024))
    use_index(monkeypatch, server.index())
    path, _identity = checked_stock_wheel("0.2")
    assert path == cache / "wheels" / "0.2.0" / name


def test_a_release_past_the_set_is_not_said_to_ship_the_change(tmp_path, library):
    """0.99.0 is no release the library knows: nothing to patch, said as the set declares it."""
    env = {"PATCHKIT_CACHE_DIR": str(tmp_path / "cache"), "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    for source in ("0.99.0", write_wheel(tmp_path / "in", version="0.99.0")):
        done = run_cli(
            "wheel", source, "--out", tmp_path / "out", "--patches", library, env=env
        )  # upstream = ">=0.18.0"
        _nothing_written(done, tmp_path / "out", 3)
        assert "ships this change itself" not in done.stderr, done.stderr
        assert "0.99.0" in done.stderr and ">=0.18.0" in done.stderr, done.stderr


@pytest.mark.parametrize("out", ["/proc", "/proc/sub", "/sys/kernel"])
def test_an_out_that_cannot_be_written_gets_a_short_hint(tmp_path, library, out):
    done = run_cli("wheel", write_wheel(tmp_path / "in"), "--out", out, "--patches", library)
    assert_clean_failure(done, 4)
    assert out in done.stderr and "hint: " in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3, done.stderr


@pytest.mark.parametrize(
    "name",
    [
        "evil.pth",  # the root: site-packages
        "vllm-0.16.0.data/purelib/Shadow.PTH",
        "vllm-0.16.0.data/data/lib/python3.12/site-packages/first.pth",
    ],
)
def test_a_member_that_installs_a_pth_file_into_site_packages_is_refused(tmp_path, library, name):
    """A .pth file runs at every start of Python (`import sys; sys.path.insert(0, ...)`): it could
    put another vllm ahead of the patched one. The class of the .data finding: refused, named."""
    line = b"import sys; sys.path.insert(0, '/elsewhere')\n"
    stock = write_wheel(tmp_path / "in", extra=[(file_member(name), line)])
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    _nothing_written(done, out, 2)
    assert f"member {name!r} lies outside vllm/" in done.stderr, done.stderr
