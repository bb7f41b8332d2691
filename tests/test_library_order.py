"""Which library a command uses: --patches DIR, then $PATCHKIT_LIBRARY, then the installed one;
`list` and `status` say which, and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_patch, write_library

import patchkit
from patchkit.series import library

CHECKOUT_LIBRARY = Path(patchkit.__file__).resolve().parent.parent / "patches"
SPEC = "vllm/config/spec.py"


@pytest.fixture
def two_libraries(tmp_path, tree, scratch):
    """Two small libraries whose only set has a different name, so a listing tells them apart."""
    patch = make_patch(scratch, tree, {SPEC: (tree / SPEC).read_text() + "# patched\n"})
    first = write_library(tmp_path / "first", {"0.16.0": [patch]}, name="first")
    second = write_library(tmp_path / "second", {"0.16.0": [patch]}, name="second")
    return first, second


def listed(run, *args):
    result = run("list", "--format", "json", *args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    return data["library"], [s["name"] for s in data["sets"]]


def test_patches_option_wins_over_the_environment(run, two_libraries, monkeypatch):
    first, second = two_libraries
    monkeypatch.setenv(library.LIBRARY_ENV, str(second))
    where, sets = listed(run, "--patches", first)
    assert where == {"path": str(first.resolve()), "source": "--patches"}
    assert sets == ["first"]


def test_environment_wins_over_the_installed_library(run, two_libraries, monkeypatch):
    _, second = two_libraries
    monkeypatch.setenv(library.LIBRARY_ENV, str(second))
    where, sets = listed(run)
    assert where == {"path": str(second.resolve()), "source": "PATCHKIT_LIBRARY"}
    assert sets == ["second"]


def test_a_relative_environment_path_is_read_from_the_working_directory(run, two_libraries, monkeypatch):
    first, _ = two_libraries
    monkeypatch.chdir(first.parent)
    monkeypatch.setenv(library.LIBRARY_ENV, first.name)
    assert listed(run)[0]["path"] == str(first.resolve())


@pytest.mark.parametrize("value", ["", None])
def test_without_option_or_environment_the_installed_library_is_used(run, monkeypatch, value):
    if value is not None:
        monkeypatch.setenv(library.LIBRARY_ENV, value)  # set but empty counts as unset
    where, sets = listed(run)
    assert where == {"path": str(library.default_root()), "source": "installed"}
    assert "eagle3" in sets


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_an_environment_library_that_is_not_a_directory_is_bad_input(run, tmp_path, tree, monkeypatch, kind):
    path = tmp_path / "nowhere"
    if kind == "file":
        path.write_text("not a library\n")
    monkeypatch.setenv(library.LIBRARY_ENV, str(path))
    for command in (["list"], ["status", "--target", tree]):
        result = run(*command)
        assert result.exit_code == 2
        assert f"PATCHKIT_LIBRARY={path} is not a directory" in result.output


def test_list_text_names_the_library_and_its_source(run, two_libraries, monkeypatch):
    first, second = two_libraries
    assert f"library  {first.resolve()}  (--patches)" in run("list", "--patches", first).output
    monkeypatch.setenv(library.LIBRARY_ENV, str(second))
    assert f"library  {second.resolve()}  (PATCHKIT_LIBRARY)" in run("list").output


def test_status_names_the_library_and_its_source(run, tree, two_libraries, monkeypatch):
    first, second = two_libraries
    monkeypatch.setenv(library.LIBRARY_ENV, str(second))
    data = json.loads(run("status", "--target", tree, "--format", "json").stdout)
    assert data["library"] == {"path": str(second.resolve()), "source": "PATCHKIT_LIBRARY"}
    assert data["set"] == "second"
    text = run("status", "--target", tree, "--patches", first).output
    assert f"library  {first.resolve()}  (--patches)" in text
    assert "set      first" in text


def test_status_of_adhoc_patches_names_no_library(run, tree, scratch):
    diff = scratch / "one.patch"
    diff.write_bytes(make_patch(scratch, tree, {SPEC: (tree / SPEC).read_text() + "# patched\n"}))
    result = run("status", "--target", tree, "--patch", diff, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["library"] is None


def test_the_installed_library_is_the_packaged_one_when_the_package_carries_it(tmp_path, monkeypatch):
    """A wheel puts the library at patchkit/_library, beside the package's modules."""
    package = tmp_path / "site-packages" / "patchkit"
    (package / "_library" / "eagle3").mkdir(parents=True)
    monkeypatch.setattr(library, "PACKAGE_DIR", package)
    assert library.default_root() == (package / "_library").resolve()


def test_in_a_checkout_the_installed_library_is_patches_beside_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(library, "PACKAGE_DIR", tmp_path / "bare-package")
    assert library.default_root() == CHECKOUT_LIBRARY


def test_python_m_patchkit_from_another_directory_finds_the_library(tmp_path):
    """The interpreter running the tests (an editable install under `make`) as a user would run it."""
    env = {k: v for k, v in os.environ.items() if k != library.LIBRARY_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "patchkit", "list", "--format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    where = json.loads(result.stdout)["library"]
    assert where["source"] == "installed"
    assert (Path(where["path"]) / "eagle3" / "set.toml").read_bytes() == (
        CHECKOUT_LIBRARY / "eagle3" / "set.toml"
    ).read_bytes()
