"""`patchkit wheel`, review 6: a stock wheel holds vllm/ and its dist-info, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_clean_failure, file_member, run_cli, spec_library, write_wheel


@pytest.fixture
def library(tmp_path) -> Path:
    return spec_library(tmp_path)


@pytest.mark.parametrize(
    "name",
    [
        # the interpreter the `vllm` script's shebang names, or the python3 first on PATH
        "vllm-0.16.0.data/scripts/python",
        "vllm-0.16.0.data/scripts/python3.12",
        "vllm-0.16.0.data/data/bin/python3",
        "vllm-0.16.0.data/data/Scripts/python.exe",
        # a stdlib module of a prefix install, imported at every start before site-packages
        "vllm-0.16.0.data/data/lib/python3.12/encodings/aliases.py",
        "vllm-0.16.0.data/headers/vllm.h",  # nothing under .data at all: no release has one
        # the root outside vllm/: a dependency's files, or a module of a name imported first
        "torch/__init__.py",
        "transformers/__init__.py",
        "_stock/vllm/__init__.py",
        "typing_extensions.py",
        "vllm.py",  # a module beside the package
        "VLLM/extra.py",  # vllm/ on a case-insensitive disk
    ],
)
def test_a_member_outside_vllm_and_its_dist_info_is_refused_by_name(tmp_path, library, name):
    """Every vLLM release's wheel (0.9.2 to 0.34.0, their fetched member lists) holds only vllm/ and
    vllm-V.dist-info/: any other member is refused, named, before anything is written."""
    stock = write_wheel(tmp_path / "in", extra=[(file_member(name), b"import sys; sys.path.insert(0, '/x')\n")])
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert_clean_failure(done, 2)
    assert f"member {name!r} lies outside vllm/ and vllm-0.16.0.dist-info/" in done.stderr, done.stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_a_wheel_of_vllm_and_its_dist_info_only_is_built(tmp_path, library):
    stock = write_wheel(tmp_path / "in", extra=[(file_member("vllm/extras/notes.txt"), b"x\n")])
    done = run_cli("wheel", stock, "--out", tmp_path / "out", "--patches", library)
    assert done.returncode == 0, done.stdout + done.stderr
