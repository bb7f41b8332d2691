"""`patchkit wheel`, review 6: a stock wheel holds vllm/ and its dist-info, nothing else."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import SPEC_PY, TAGS, assert_clean_failure, file_member, publish_wheel, run_cli, spec_library, write_wheel

from patchkit.distinfo.record import record_hash


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


def _followed_in_a_shell(hint_line: str, cwd: Path, env: dict[str, str]) -> None:
    """Each backquoted command of a hint, run by sh as printed, in `cwd` (python3 and patchkit:
    this venv's)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    for command in re.findall(r"`([^`]+)`", hint_line):
        done = subprocess.run(
            ["sh", "-c", command], cwd=cwd, env={**os.environ, **env, "PATH": path}, capture_output=True, text=True
        )
        assert done.returncode == 0, (command, done.stdout + done.stderr)


@pytest.mark.parametrize("shape", [["--out", "dist", "--local-label", "site.7"], ["--format", "json"]])
def test_the_pip_download_hint_carries_the_options_that_shape_the_wheel(tmp_path, library, shape):
    # review 6 M3: `pip download … -d DIR`, then `patchkit wheel DIR/FILE.whl`: --out and --local-label
    # dropped (another version string in another place), and a placeholder file name (L1)
    wheels = write_wheel(tmp_path / "wheels").parent
    publish_wheel(wheels / f"vllm-0.16.0-{TAGS}.whl", tmp_path / "cache")  # cached by an earlier fetch
    env = {
        "PATCHKIT_CACHE_DIR": str(tmp_path / "cache"),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_NO_INDEX": "1",
    }
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli("wheel", "0.16.0", *shape, "--patches", library, env=env, cwd=work)
    assert_clean_failure(done, 4)
    hint = " ".join(done.stderr.split()).partition("hint: ")[2]
    assert "pip download" in hint, done.stderr
    _followed_in_a_shell(hint, work, env)
    where = work / "dist" if "--out" in shape else work
    label = "site.7" if "--local-label" in shape else "patchkit.demo"
    assert [p.name for p in where.glob(f"vllm-0.16.0+{label}-*.whl")], sorted(p.name for p in work.rglob("*"))


def test_a_record_hash_with_base64_padding_is_said_to_be_out_of_the_wheel_format(tmp_path, library):
    # review 6 L4: "a local edit, a different build of vLLM ..." for a true hash written with '=' padding
    padded = record_hash(SPEC_PY.encode()) + "="
    stock = write_wheel(tmp_path / "in", record={"vllm/config/spec.py": padded})
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert_clean_failure(done, 1)
    said = " ".join(done.stderr.split())
    assert "base64 padding" in said and "a local edit" not in said.partition("hint:")[0], done.stderr
    assert not out.exists() or list(out.iterdir()) == []


def _with_entry_points(wheel: Path, text: bytes) -> Path:
    """The wheel with its dist-info's entry_points.txt replaced by `text`."""
    name = "vllm-0.16.0.dist-info/entry_points.txt"
    out = wheel.parent / "ep" / wheel.name
    out.parent.mkdir()
    with zipfile.ZipFile(wheel) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            new.writestr(info, text if info.filename == name else old.read(info))
    return out


@pytest.mark.parametrize("script", ["python3", "python", "pip", "gui_scripts"])
def test_a_script_other_than_vllm_in_entry_points_is_refused(tmp_path, library, script):
    # the H1 class through the dist-info: pip writes a console script `python3` over bin/python3
    section = "gui_scripts" if script == "gui_scripts" else "console_scripts"
    name = "vllm-gui" if script == "gui_scripts" else script
    text = f"[console_scripts]\nvllm = vllm.entrypoints.cli:main\n[{section}]\n{name} = vllm.config:main\n"
    text = text.replace("[console_scripts]\n[console_scripts]", "[console_scripts]")
    stock = _with_entry_points(write_wheel(tmp_path / "in"), text.encode())
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert_clean_failure(done, 2)
    assert f"names the script {name!r}" in " ".join(done.stderr.split()), done.stderr
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize(
    "text",
    [
        "[console_scripts]\nvllm = vllm.entrypoints.cli:main\n  python3 = os:system\n",  # configparser: a continuation
        "[console_scripts]\nvllm = vllm.entrypoints.cli:main\n\tpip = os:system\n",
    ],
    ids=["indented", "tab"],
)
def test_an_indented_script_line_is_read_as_pip_reads_it_and_refused(tmp_path, library, text):
    """Review 10b M3: pip (importlib.metadata) strips each line and installs `python3` over
    bin/python3; configparser took the indented line for part of the `vllm` value."""
    stock = _with_entry_points(write_wheel(tmp_path / "in"), text.encode())
    out = tmp_path / "out"
    done = run_cli("wheel", stock, "--out", out, "--patches", library)
    assert_clean_failure(done, 2)
    name = text.splitlines()[-1].split("=")[0].strip()
    assert f"names the script {name!r}" in " ".join(done.stderr.split()), done.stderr
    assert not out.exists() or list(out.iterdir()) == []
