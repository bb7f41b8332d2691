"""`patchkit wheel`, review 5: members that install onto sys.path entries of a prefix install, and
the modules Python runs at every start."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import (
    assert_clean_failure,
    file_member,
    pip_env,
    publish_wheel,
    run_cli,
    spec_library,
    write_wheel,
)


@pytest.fixture
def library(tmp_path) -> Path:
    return spec_library(tmp_path)


def _zip_with_vllm() -> bytes:
    """A zip archive holding a vllm package, as Python imports from a zip on sys.path."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("vllm/__init__.py", "STOCK = True\n")
    return buffer.getvalue()


def _build(tmp_path: Path, library: Path, name: str, data: bytes):
    stock = write_wheel(tmp_path / "in", extra=[(file_member(name), data)])
    out = tmp_path / "out"
    return run_cli("wheel", stock, "--out", out, "--patches", library), out


def _refused(done, out: Path) -> None:
    assert_clean_failure(done, 2)
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    [
        "vllm-0.16.0.data/data/lib/python312.zip",  # sys.path[1] of pyenv, conda, the python:3.12 images
        "vllm-0.16.0.data/data/lib/python313t.zip",
        "vllm-0.16.0.data/data/lib64/PYTHON311.ZIP",
        "vllm-0.16.0.data/data/python312.zip",  # Windows: <prefix>\python312.zip
    ],
)
def test_a_data_member_that_installs_the_python_zip_on_sys_path_is_refused(tmp_path, library, name):
    done, out = _build(tmp_path, library, name, _zip_with_vllm())
    _refused(done, out)
    assert f"member {name!r} lies outside vllm/" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "name",
    [
        "vllm-0.16.0.data/data/lib/python312.zip/vllm/__init__.py",  # a directory of that name is on sys.path too
        "vllm-0.16.0.data/data/vllm.py",  # Windows: <prefix> itself is on sys.path
        "vllm-0.16.0.data/data/DLLs/vllm.pyd",  # Windows: <prefix>\DLLs
    ],
)
def test_a_data_member_that_installs_vllm_into_another_sys_path_entry_is_refused(tmp_path, library, name):
    done, out = _build(tmp_path, library, name, b"STOCK = True\n")
    _refused(done, out)
    assert f"member {name!r} lies outside vllm/" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "name",
    [
        "sitecustomize.py",  # the root: site-packages
        "usercustomize.py",
        "sitecustomize/__init__.py",
        "sitecustomize.cpython-312-x86_64-linux-gnu.so",
        "vllm-0.16.0.data/purelib/sitecustomize.py",
        "vllm-0.16.0.data/platlib/usercustomize.py",
        "vllm-0.16.0.data/data/lib/python3.12/sitecustomize.py",  # the stdlib directory of a prefix install
        "vllm-0.16.0.data/data/lib/python3.12/site-packages/usercustomize.py",
    ],
)
def test_a_member_that_installs_a_module_python_runs_at_start_is_refused(tmp_path, library, name):
    """site imports sitecustomize and usercustomize at every start of Python, as it runs .pth
    files: either can put another vllm ahead of the patched one."""
    done, out = _build(tmp_path, library, name, b"import sys; sys.path.insert(0, '/elsewhere')\n")
    _refused(done, out)
    assert f"member {name!r} lies outside vllm/" in done.stderr, done.stderr


@pytest.mark.parametrize("out", [None, "dist"])
def test_the_out_hint_in_a_working_directory_that_cannot_be_written_works_as_printed(tmp_path, library, out):
    """In a read-only working directory (/proc here, as a container's read-only root), ./dist fails
    as . did: the hint names a directory that can be written, and the build works there."""
    stock = write_wheel(tmp_path / "in")
    env = {"TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    given = [] if out is None else ["--out", out]
    done = run_cli("wheel", stock, "--patches", library, *given, env=env, cwd=Path("/proc"))
    assert_clean_failure(done, 4)
    hinted = re.search(r"such as (\S+)", " ".join(done.stderr.split()))
    assert hinted is not None and "./dist" not in done.stderr, done.stderr
    again = run_cli("wheel", stock, "--patches", library, "--out", hinted.group(1), env=env, cwd=Path("/proc"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(list((tmp_path / "tmp" / "dist").glob("*.whl"))) == 1


@pytest.mark.parametrize("path", ["vllm/config/spec.py", "vllm/models/model.py"])  # patched, unchanged
@pytest.mark.parametrize("bogus_first", [False, True])
def test_a_record_that_lists_a_file_twice_is_refused_as_malformed(tmp_path, library, path, bogus_first):
    # review 5 L2: the last row won: stock then bogus blamed the stock file (exit 1), bogus then stock built
    stock = write_wheel(tmp_path / "in")
    with zipfile.ZipFile(stock) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    bogus = f"{path},sha256=dHdvIHJvd3Mgb2YgdGhlIHNhbWUgZmlsZQ,17\n".encode()
    with zipfile.ZipFile(stock, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in members:
            if info.filename.endswith(".dist-info/RECORD"):
                data = bogus + data if bogus_first else data + bogus
            zf.writestr(info, data)
    done, out = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library), tmp_path / "out"
    _refused(done, out)
    assert f"the RECORD lists {path} twice" in done.stderr, done.stderr


def _local_sources(tmp_path: Path) -> tuple[Path, Path]:
    """A stock wheel in a directory (find-links) and a file:// simple index listing it."""
    wheel = write_wheel(tmp_path / "wheels")
    publish_wheel(wheel, tmp_path / "cache")  # the release's RECORD, cached by an earlier fetch
    page = tmp_path / "index" / "simple" / "vllm"
    page.mkdir(parents=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    page.joinpath("index.html").write_text(f'<a href="{wheel.as_uri()}#sha256={digest}">{wheel.name}</a>\n')
    return wheel.parent, page.parent


@pytest.mark.parametrize("source", ["file-index", "find-links"])
def test_a_pip_source_patchkit_does_not_read_is_said_with_the_pip_download_way_that_works(tmp_path, library, source):
    # review 5 M5: exit 4 "skipped (not http/https)" or "unset PIP_NO_INDEX", hints that cannot work there
    wheels, index = _local_sources(tmp_path)
    if source == "file-index":
        env = pip_env(tmp_path / "cache", index.as_uri() + "/")
    else:
        env = pip_env(tmp_path / "cache", find_links=str(wheels))
    out = tmp_path / "out"
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli("wheel", "0.16.0", "--out", out, "--patches", library, env=env, cwd=work)
    assert_clean_failure(done, 4)
    assert "which patchkit does not read" in done.stderr, done.stderr
    pip_way = re.search(
        r"run `([^`]+ -m pip download [^`]+)`, then `(patchkit wheel [^`]+)`", " ".join(done.stderr.split())
    )
    assert pip_way, done.stderr
    # the hint, followed as printed by a shell (python3 and patchkit: this venv's), gives the patched wheel
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    for command in pip_way.groups():
        followed = subprocess.run(
            ["sh", "-c", command], cwd=work, env={**os.environ, **env, "PATH": path}, capture_output=True, text=True
        )
        assert followed.returncode == 0, (command, followed.stdout + followed.stderr)
    assert list(out.glob("vllm-0.16.0+patchkit*.whl"))


@pytest.mark.parametrize("command", ["status", "verify", "apply"])
def test_a_vllm_imported_from_a_zip_archive_is_named_as_such(tmp_path, library, command):
    # review 5 L3: "cannot inspect .../python312.zip/.patchkit: Not a directory", no word of the archive
    archive = tmp_path / "prefix" / "python399.zip"
    archive.parent.mkdir()
    archive.write_bytes(_zip_with_vllm())
    done = run_cli(command, "--python", sys.executable, "--patches", library, env={"PYTHONPATH": str(archive)})
    assert_clean_failure(done, 4)
    said = " ".join(done.stderr.split())
    assert f"is inside the archive {archive}" in said and f"move {archive} off sys.path" in said, done.stderr
    assert ".patchkit" not in said
