"""Finding vLLM and its version: --target layouts, --python without importing vllm, git checkouts."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import venv
from pathlib import Path

import pytest
from helpers import _git, assert_clean_failure, make_venv, purelib, run_cli_read_only, write_library, write_tree
from packaging.version import Version

from patchkit.base.errors import BadInput, NoPatchSet, TargetError
from patchkit.series.library import PATCH, UNSUPPORTED, UPSTREAM, choose_set, load_library, select
from patchkit.tree import target as target_mod
from patchkit.tree.version import detect


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
    assert "`patchkit fetch VERSION --dest" in info.value.hint  # state26: the tree lacks files; a version cannot help


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
    site = purelib(python)
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


def _metadata_fifo(path: Path, outside: Path) -> None:
    os.mkfifo(path)  # would block a reader forever


def _metadata_link_outside(path: Path, outside: Path) -> None:
    (outside / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n")
    path.symlink_to(outside / "METADATA")


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (lambda path, outside: path.write_bytes(b"Name: vllm\nVersion: 0.16.0\n\x00\x01\x02"), "is binary"),
        (lambda path, outside: path.write_bytes(b"Name: vllm\nVersion: 0.16.0\nSummary: caf\xe9\n"), "not UTF-8"),
        (_metadata_fifo, "is not a regular file"),
        (_metadata_link_outside, "leads outside the target"),
    ],
    ids=["nul-bytes", "latin-1", "fifo", "symlink-outside"],
)
def test_a_metadata_that_is_not_a_metadata_file_is_bad_input_naming_it(tmp_path, plant, why):
    root = write_tree(tmp_path / "site")
    outside = tmp_path / "outside"
    outside.mkdir()
    metadata = root / "vllm-0.16.0.dist-info" / "METADATA"
    metadata.unlink()
    plant(metadata, outside)
    done = run_cli_read_only("status", "--target", root)
    assert_clean_failure(done, 2)
    assert "vllm-0.16.0.dist-info/METADATA" in done.stderr and why in done.stderr
    assert "--vllm-version" in done.stderr
    assert run_cli_read_only("status", "--target", root, "--vllm-version", "0.16.0").returncode in (0, 1)


def test_a_huge_metadata_is_read_only_as_far_as_its_headers(tmp_path):
    root = write_tree(tmp_path / "site", "0.15.1")
    metadata = root / "vllm-0.15.1.dist-info" / "METADATA"
    metadata.write_bytes(metadata.read_bytes() + b"\n" + "é".encode() * (3 << 20))  # 6 MB of description
    assert detect(target_mod.from_directory(root)).version == Version("0.15.1")


@pytest.fixture
def linked_venv(tmp_path):
    """A venv as `python -m venv` makes it: bin/python a symlink to the base interpreter; vllm in it."""
    home = tmp_path / "work" / "venv"
    make_venv(home)
    python = home / "bin" / "python"
    site = purelib(python)
    write_tree(Path(site), "0.16.0", {"vllm/config/spec.py": "X = 1\n"})
    return python, Path(site)


@pytest.mark.parametrize("relative", ["venv/bin/python", "./venv/bin/python", "../work/venv/bin/python"])
def test_a_relative_python_is_read_from_the_working_directory_and_stays_the_venvs(linked_venv, relative):
    python, site = linked_venv
    assert python.is_symlink()  # a venv's python links to its base interpreter
    done = run_cli_read_only("status", "--python", relative, "--format", "json", cwd=python.parents[2])
    assert "Traceback" not in done.stderr, done.stderr
    data = json.loads(done.stdout)
    assert Path(data["target"]) == site.resolve(), data
    # the venv's own path, made absolute, not the base interpreter it links to
    assert data["found_by"] == f"--python {python}"


def test_a_relative_python_keeps_the_venv_path_unresolved(linked_venv, monkeypatch):
    python, site = linked_venv
    monkeypatch.chdir(python.parent)
    found = target_mod.resolve(None, "./python")
    assert found.python == str(python) and found.root == site.resolve()


def _junk_script(tmp: Path) -> str:
    script = tmp / "fake-python"
    script.write_text(
        "#!/bin/sh\necho 'Python 3.99 (definitely)'\nfor last; do :; done; echo '{\"python\": 1}' > \"$last\"\n"
    )
    script.chmod(0o755)
    return str(script)


def _silent_script(tmp: Path) -> str:
    script = tmp / "not-python"
    script.write_text("#!/bin/sh\nprintf '\\033[31mhello\\n'\nexit 0\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(
    ("python", "why"),
    [
        (lambda tmp: "/bin/false", "exit status 1"),
        (lambda tmp: str(tmp), "a directory, not an interpreter"),
        (_junk_script, "is not a Python interpreter patchkit can ask"),
        (_silent_script, "is not a Python interpreter (it ran, but gave no answer)"),
    ],
    ids=["false", "directory", "junk-answer", "no-answer"],
)
def test_a_python_that_is_not_an_interpreter_is_a_clean_target_error(tmp_path, python, why):
    done = run_cli_read_only("status", "--python", python(tmp_path))
    assert_clean_failure(done, 4)
    assert why in done.stderr


@pytest.mark.parametrize(
    "metadata",
    [
        b"Name: vllm\nVersion: 0.16.0\nSummary: caf\xe9\n",
        b"Metadata-Version: 2.1\nName: vllm\nAuthor: J\xf6rg\nVersion: 0.16.0\n",
    ],
    ids=["latin-1-summary", "latin-1-before-version"],
)
def test_python_whose_vllm_metadata_is_not_utf8_is_bad_input_naming_it(tmp_path, metadata):
    """importlib.metadata raises on it in the interpreter asked: the refusal --target gives, no traceback."""
    venv.create(tmp_path / "venv", with_pip=False)
    python = tmp_path / "venv" / "bin" / "python"
    site = write_tree(purelib(python))
    (site / "vllm-0.16.0.dist-info" / "METADATA").write_bytes(metadata)
    done = run_cli_read_only("status", "--python", python)
    assert_clean_failure(done, 2)
    assert "vllm-0.16.0.dist-info/METADATA is not UTF-8" in done.stderr and "--vllm-version" in done.stderr
    assert len(done.stderr) < 400, done.stderr
    assert run_cli_read_only("status", "--python", python, "--vllm-version", "0.16.0").returncode in (0, 1)


def test_python_whose_start_up_breaks_the_question_says_the_exception_not_a_traceback_tail(tmp_path):
    """A sitecustomize that breaks importlib.metadata in the interpreter asked: the worker's traceback
    ended the message as its last 300 characters, with no fix. The exception is said, and whose it is."""
    venv.create(tmp_path / "venv", with_pip=False)
    python = tmp_path / "venv" / "bin" / "python"
    site = write_tree(purelib(python))
    (site / "sitecustomize.py").write_text(
        "import importlib.metadata\n\n\ndef _broken(name):\n    raise RuntimeError('a site hook broke it')\n\n\n"
        "importlib.metadata.distribution = _broken\n"
    )
    done = run_cli_read_only("status", "--python", python)
    assert_clean_failure(done, 4)
    assert "RuntimeError: a site hook broke it" in done.stderr and "File " not in done.stderr, done.stderr
    assert "sitecustomize" in done.stderr.partition("hint:")[2], done.stderr
