"""The shadow check counts only what Python's FileFinder imports: a regular file (a symlink to one
included), never a directory, a fifo or a symlink to a directory that merely has the right name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import make_patch, patched_spec, run_cli_read_only, run_cli_writing, write_tree

from patchkit.checks import shadow
from patchkit.series.patchfile import parse_patch

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
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_cli_read_only("verify", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kind", list(NOT_FILES))
def test_a_module_named_like_a_package_without_init_shadows_only_as_a_regular_file(tmp_path, kind):
    """vllm/config/ without __init__ loses to a module vllm/config.py, but only to a file of that name."""
    tree, patch = _tree_and_patch(tmp_path)
    (tree / "vllm/config/__init__.py").unlink(missing_ok=True)
    NOT_FILES[kind](tree / "vllm/config.py")
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", NAMES[:1] + NAMES[2:3])
def test_a_symlink_to_a_regular_file_still_shadows(tmp_path, name):
    """A symlink to a file is a file to FileFinder (it follows links): still refused."""
    tree, patch = _tree_and_patch(tmp_path)
    real = tmp_path / "real-module"
    real.write_bytes(b"x = 1\n")
    (tree / name).parent.mkdir(parents=True, exist_ok=True)
    (tree / name).symlink_to(real)
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"{name} is imported instead of {SOURCE}" in done.stderr


def test_a_directory_named_init_beside_a_real_package_init_is_not_what_counts(tmp_path):
    """A package with a real __init__.py shadows whatever else sits beside it."""
    tree, patch = _tree_and_patch(tmp_path)
    (tree / "vllm/config/spec/__init__.pyc").mkdir(parents=True)
    (tree / "vllm/config/spec/__init__.py").write_text("")
    done = run_cli_writing("apply", "--target", tree, "--patch", patch, "--no-import")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "vllm/config/spec/__init__.py is imported instead" in done.stderr


def _series(tmp_path: Path, tree: Path, edits: dict[str, str | None]) -> list:
    return [parse_patch(make_patch(tmp_path, tree, edits), "series.diff")]


def test_the_planned_tree_lists_what_a_series_deletes_renames_away_and_creates(tmp_path):
    """A release diff may turn a module into a package: the planned listing of each directory drops
    the deleted module and holds the new package and every directory on the way to a new file."""
    tree = write_tree(tmp_path / "site")
    patches = _series(
        tmp_path,
        tree,
        {SOURCE: None, "vllm/config/spec/__init__.py": "x = 1\n", "vllm/new/deep/mod.py": "y = 2\n"},
    )
    names_in = shadow.planned(lambda d: sorted(os.listdir(tree / d)) if (tree / d).is_dir() else [], patches)
    assert names_in("vllm/config") == {"spec"}
    assert names_in("vllm") == {"__init__.py", "config", "models", "new"}
    assert names_in("vllm/new") == {"deep"} and names_in("vllm/new/deep") == {"mod.py"}
    assert shadow.tree_shadows(tree, patches) == {}


def test_the_planned_tree_lists_each_directory_once(tmp_path):
    """A release diff's 1,271 sources ask for their few hundred directories thousands of times
    (every source, every package on its way): the listing behind them runs once per directory."""
    tree = write_tree(
        tmp_path / "site", files={f"vllm/pkg{i}/mod{j}.py": "x = 1\n" for i in range(3) for j in range(4)}
    )
    patches = _series(tmp_path, tree, {f"vllm/pkg{i}/mod{j}.py": "x = 2\n" for i in range(3) for j in range(4)})
    asked: list[str] = []

    def listing(directory: str) -> list[str]:
        asked.append(directory)
        return sorted(os.listdir(tree / directory)) if (tree / directory).is_dir() else []

    names_in = shadow.planned(listing, patches)
    found = {path: hit for path in shadow.sources(patches) if (hit := shadow.shadow(path, names_in))}
    assert found == {}
    assert sorted(asked) == sorted(set(asked)), asked
