"""`patchkit wheel`, review 4: what a wheel's .data members install, and the build's small answers."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from helpers import assert_clean_failure, make_patch, patched_spec, run_cli, write_library, write_tree, write_wheel


@pytest.fixture
def library(tmp_path) -> Path:
    """A library whose 0.16.0 series adds "deepseek" to spec.py's list."""
    tree = write_tree(tmp_path / "stock")
    return write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )


def _info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (2026, 1, 2, 3, 4, 6))
    info.external_attr = 0o100644 << 16
    return info


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
    stock = write_wheel(tmp_path / "in", extra=[(_info(name), b"print('stock copy')\n")])
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    _nothing_written(done, out, 2)
    assert f"member {name!r} installs a vllm module" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "name",
    [
        "vllm-0.16.0.data/data/share/doc/vllm/README",  # data that is no module
        "vllm-0.16.0.data/scripts/vllm-helper",  # a script of another name
        "vllm-0.16.0.data/purelib/vllm_extras/x.py",  # another package
        "vllm-0.16.0.data/headers/vllm.h",
    ],
)
def test_a_data_member_that_installs_no_vllm_module_is_kept(tmp_path, library, name):
    stock = write_wheel(tmp_path / "in", extra=[(_info(name), b"data\n")])
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
    (patched,) = out.iterdir()
    assert name.replace("vllm-0.16.0.data", "vllm-0.16.0+patchkit.demo.data") in zipfile.ZipFile(patched).namelist()


def test_a_long_member_name_is_shortened_in_the_message(tmp_path, library):
    """A member name may be 1,024 bytes: the message shows its start and its end, cut with …"""
    name = "vllm-0.16.0.data/purelib/vllm/" + "/".join(["d" * 60] * 12) + "/spec.py"
    stock = write_wheel(tmp_path / "in", extra=[(_info(name), b"x = 1\n")])
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    _nothing_written(done, out, 2)
    assert name not in done.stderr and "…" in done.stderr, done.stderr
    assert "'vllm-0.16.0.data/purel" in done.stderr and "/spec.py'" in done.stderr, done.stderr
    assert all(len(line) < 400 for line in done.stderr.splitlines()), done.stderr
