"""The shadow check counts only what Python's FileFinder imports: a regular file (a symlink to one
included), never a directory, a fifo or a symlink to a directory that merely has the right name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import make_patch, patched_spec, run_cli, write_tree

SOURCE = "vllm/config/spec.py"


def _tree_and_patch(tmp_path: Path) -> tuple[Path, Path]:
    tree = write_tree(tmp_path / "site")
    patch = tmp_path / "change.diff"
    patch.write_bytes(make_patch(tmp_path, tree, {SOURCE: patched_spec()}))
    return tree, patch


def _directory(path: Path) -> None:
    path.mkdir(parents=True)


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _link_to_directory(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "elsewhere").mkdir()
    path.symlink_to(path.parent / "elsewhere")


def _dangling_link(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(path.parent / "nothing-here")


NOT_FILES = {"directory": _directory, "fifo": _fifo, "link to a directory": _link_to_directory}
NAMES = [
    "vllm/config/spec/__init__.py",  # a package's __init__
    "vllm/config/spec/__init__.pyc",
    "vllm/config/spec.cpython-312-x86_64-linux-gnu.so",  # an extension module beside the source
    "vllm/config/spec.abi3.so",
]


@pytest.mark.parametrize("kind", [*NOT_FILES, "dangling link"])
@pytest.mark.parametrize("name", NAMES)
def test_a_name_that_is_not_a_regular_file_shadows_nothing(tmp_path, name, kind):
    """FileFinder takes `__init__` or an extension only when it is a regular file (_path_isfile):
    anything else of that name leaves the patched source the module imported, so apply and verify pass."""
    tree, patch = _tree_and_patch(tmp_path)
    make = {**NOT_FILES, "dangling link": _dangling_link}[kind]
    make(tree / name)
    done = run_cli("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_cli("verify", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kind", list(NOT_FILES))
def test_a_module_named_like_a_package_without_init_shadows_only_as_a_regular_file(tmp_path, kind):
    """vllm/config/ without __init__ loses to a module vllm/config.py, but only to a file of that name."""
    tree, patch = _tree_and_patch(tmp_path)
    (tree / "vllm/config/__init__.py").unlink(missing_ok=True)
    NOT_FILES[kind](tree / "vllm/config.py")
    done = run_cli("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", NAMES[:1] + NAMES[2:3])
def test_a_symlink_to_a_regular_file_still_shadows(tmp_path, name):
    """A symlink to a file is a file to FileFinder (it follows links): still refused."""
    tree, patch = _tree_and_patch(tmp_path)
    real = tmp_path / "real-module"
    real.write_bytes(b"x = 1\n")
    (tree / name).parent.mkdir(parents=True, exist_ok=True)
    (tree / name).symlink_to(real)
    done = run_cli("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"{name} is imported instead of {SOURCE}" in done.stderr


def test_a_directory_named_init_beside_a_real_package_init_is_not_what_counts(tmp_path):
    """A package with a real __init__.py shadows whatever else sits beside it."""
    tree, patch = _tree_and_patch(tmp_path)
    (tree / "vllm/config/spec/__init__.pyc").mkdir(parents=True)
    (tree / "vllm/config/spec/__init__.py").write_text("")
    done = run_cli("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "vllm/config/spec/__init__.py is imported instead" in done.stderr
