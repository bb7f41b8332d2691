"""Finding vLLM and its version: --target layouts, --python without importing vllm, git checkouts."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from helpers import _git, write_library, write_tree
from packaging.version import Version

from patchkit import target as target_mod
from patchkit.errors import BadInput, NoPatchSet, TargetError
from patchkit.library import PATCH, UNSUPPORTED, UPSTREAM, choose_set, load_library, select
from patchkit.version import detect


def test_metadata_version(tmp_path):
    root = write_tree(tmp_path / "site", "0.16.0")
    found = detect(target_mod.from_directory(root))
    assert found.version == Version("0.16.0") and "METADATA" in found.source


def test_pointing_at_the_package_itself_is_accepted(tmp_path):
    root = write_tree(tmp_path / "site")
    assert target_mod.from_directory(root / "vllm").root == root.resolve()


def test_version_file_of_a_source_checkout(tmp_path):
    root = tmp_path / "src"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "_version.py").write_text("__version__ = version = '0.16.1.dev12+gabc1234'\n")
    assert detect(target_mod.from_directory(root)).version == Version("0.16.1.dev12+gabc1234")


def test_git_describe_of_a_source_checkout(tmp_path):
    root = tmp_path / "checkout"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "one")
    _git(root, "tag", "v0.16.0")
    assert detect(target_mod.from_directory(root)).version == Version("0.16.0")
    (root / "vllm" / "x.py").write_text("")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "two")
    found = detect(target_mod.from_directory(root))
    assert found.version.public == "0.16.1.dev1" and "git describe" in found.source


def test_no_version_anywhere_is_a_clear_error(tmp_path):
    (tmp_path / "bare" / "vllm").mkdir(parents=True)
    with pytest.raises(TargetError, match="cannot tell which vLLM version") as info:
        detect(target_mod.from_directory(tmp_path / "bare"))
    assert "--vllm-version" in info.value.hint


def test_invalid_override_is_bad_input(tmp_path):
    with pytest.raises(BadInput):
        detect(target_mod.from_directory(write_tree(tmp_path / "s")), "not.a.version!")


@pytest.fixture
def eagle_like(tmp_path):
    lib = write_library(tmp_path / "lib", {"0.16.0": [b"--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1 +1 @@\n-a\n+b\n"]})
    return choose_set(load_library(lib), None)


@pytest.mark.parametrize(
    "version, kind",
    [
        ("0.16.0", PATCH),
        ("0.16.0+cu129", PATCH),
        ("0.18.0", UPSTREAM),
        ("0.18.1.dev3", UPSTREAM),
        ("0.33.0", UPSTREAM),
        ("0.10.2", UNSUPPORTED),
        ("0.9.0", UNSUPPORTED),
    ],
)
def test_selection(eagle_like, version, kind):
    selection = select(eagle_like, Version(version))
    assert selection.kind == kind
    if "+" in version:
        assert "local version label" in selection.note


@pytest.mark.parametrize("version", ["0.16.1.dev12+gabc1234", "0.15.0", "0.17.2.dev5"])
def test_versions_without_series_are_refused_clearly(eagle_like, version):
    with pytest.raises(NoPatchSet, match="no patch series"):
        select(eagle_like, Version(version))


def test_unsupported_message_names_the_range(eagle_like):
    assert ">=0.11.0" in select(eagle_like, Version("0.10.0")).note


@pytest.fixture(scope="module")
def fake_env(tmp_path_factory):
    """A real venv whose site-packages holds a vllm that would fail loudly if imported."""
    home = tmp_path_factory.mktemp("env")
    venv.create(home, with_pip=False)
    python = home / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    write_tree(Path(site), "0.16.0", {"vllm/config/spec.py": "X = 1\n"})
    (Path(site) / "vllm" / "__init__.py").write_text("raise RuntimeError('patchkit must not import vllm')\n")
    (Path(site) / "vllm-0.16.0.dist-info" / "RECORD").write_text("")
    return python, site


def test_python_option_finds_package_and_version_without_importing(fake_env, run):
    python, site = fake_env
    found = target_mod.from_interpreter(str(python))
    assert found.root == Path(site).resolve()
    assert found.installed_version == "0.16.0"
    assert os.path.samefile(found.python, python)
    assert detect(found).version == Version("0.16.0")
    result = run(
        "status",
        "--python",
        python,
        "--format",
        "json",
        "--patches",
        write_library(
            found.root.parent / "lib",
            {"0.16.0": [b"--- a/vllm/config/spec.py\n+++ b/vllm/config/spec.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n"]},
        ),
    )
    data = json.loads(result.stdout)
    assert data["state"] == "not-applied" and data["found_by"] == f"--python {python}"


def test_current_interpreter_without_vllm_suggests_options():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed in the test interpreter")
    with pytest.raises(TargetError) as info:
        target_mod.resolve(None, None)
    assert "--python" in info.value.hint and "--target" in info.value.hint


def test_missing_interpreter_is_a_target_error(tmp_path):
    with pytest.raises(TargetError, match="not found"):
        target_mod.from_interpreter(str(tmp_path / "no-python"))


def test_syntax_is_judged_by_the_target_interpreter(fake_env):
    """A subprocess compile in another interpreter reports errors like the in-process one."""
    from patchkit.checks.syntax import compile_sources

    python, _ = fake_env
    sources = {"ok.py": b"x = 1\n", "bad.py": b"from a import b, c,\n"}
    assert set(compile_sources(sources, str(python))) == {"bad.py"}
    assert set(compile_sources(sources, sys.executable)) == {"bad.py"}
