"""patchkit installed with pipx: its interpreter is a venv of its own, not vLLM's. `patchkit run --
vllm serve ...` (vLLM's venv on PATH, no --target nor --python) judges the tree the command's `vllm`
imports, and every command it names carries that venv's --python, never patchkit's own interpreter;
each one, run as printed with patchkit's interpreter, does what it says (issue 20, launch30 item 4).

The pipx venv here runs this checkout's patchkit (a .pth) with no vllm on its path; vLLM's venv holds
the test tree (importable enough for apply's import probe) and a `vllm` script run by its python."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
from helpers import write_tree
from importable_vllm import make_importable
from launch_fixtures import KIMI_DRAFTER, KIMI_K25, serve, stock_files, write_eagle3_setup, write_model

import patchkit

STAND_IN = "import pathlib, sys\nprint('args', sys.argv[1:])\npathlib.Path({marker!r}).touch()\nsys.exit(7)\n"


@pytest.fixture
def pipx(tmp_path: Path):
    """(patchkit's pipx python, vLLM's venv python, its site-packages, library, command, env, marker)."""
    vllm_venv, own = tmp_path / "vllm-venv", tmp_path / "pipx-venv"
    venv.create(vllm_venv, with_pip=False, symlinks=True)
    [site] = vllm_venv.glob("lib/python*/site-packages")
    _, library = write_eagle3_setup(tmp_path)
    write_tree(site, "0.16.0", stock_files("0.16.0"))
    make_importable(site)
    marker = tmp_path / "launched"
    script = vllm_venv / "bin" / "vllm"
    script.write_text(f"#!{vllm_venv / 'bin' / 'python'}\n" + STAND_IN.format(marker=str(marker)))
    script.chmod(0o755)
    venv.create(own, with_pip=False, symlinks=True)
    [own_site] = own.glob("lib/python*/site-packages")
    checkout = Path(patchkit.__file__).resolve().parents[1]
    (own_site / "patchkit.pth").write_text(f"{checkout}\n{sysconfig.get_paths()['purelib']}\n")
    command = serve(write_model(tmp_path / "kimi", KIMI_K25), write_model(tmp_path / "drafter", KIMI_DRAFTER))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PATCHKIT_DEBUG")}
    env["PATH"] = f"{vllm_venv / 'bin'}{os.pathsep}{env['PATH']}"
    return own / "bin" / "python", vllm_venv / "bin" / "python", site, library, command, env, marker


def _patchkit(python: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "patchkit", *args], capture_output=True, text=True, env=env, timeout=120)


def _commands(text: str) -> list[list[str]]:
    """The patchkit commands a message names, as words."""
    return [shlex.split(found) for found in re.findall(r"`(patchkit [^`]*)`", " ".join(text.split()))]


def _python_named(words: list[str]) -> str | None:
    return words[words.index("--python") + 1] if "--python" in words else None


def test_run_from_a_pipx_install_names_vllms_python_and_its_fixes_work(pipx):
    own, vllm_python, site, library, command, env, marker = pipx
    no_vllm = subprocess.run([str(own), "-c", "import vllm"], capture_output=True, env=env, timeout=60)
    assert no_vllm.returncode != 0  # patchkit's own interpreter has no vllm to find
    refused = _patchkit(own, ["run", "--patches", str(library), "--", *command], env)
    assert refused.returncode == 1 and not marker.exists(), refused.stdout + refused.stderr
    named = _commands(refused.stdout + refused.stderr)
    assert [words[1] for words in named] == ["apply", "preflight"], named
    assert {_python_named(words) for words in named} == {str(vllm_python)}, named  # never pipx's python
    applied = _patchkit(own, [*named[0][1:], "--no-import"], env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (site / "patchkit_guard.py").exists()  # the guard went beside vLLM, not into pipx's venv
    launched = _patchkit(own, ["run", "--patches", str(library), "--", *command], env)
    assert launched.returncode == 7 and marker.exists(), launched.stdout + launched.stderr

    marker.unlink()
    with open(site / "vllm/v1/spec_decode/eagle.py", "a") as fh:
        fh.write("# tuned\n")
    drifted = _patchkit(own, ["run", "--patches", str(library), "--", *command], env)
    assert drifted.returncode == 1 and not marker.exists(), drifted.stdout + drifted.stderr
    fixes = [words for words in _commands(drifted.stdout) if words[1] in ("revert", "apply")]
    assert [words[1] for words in fixes] == ["revert", "apply"], drifted.stdout
    assert {_python_named(words) for words in fixes} == {str(vllm_python)}, fixes
    for words in fixes:
        done = _patchkit(own, [*words[1:], "--no-import"] if words[1] == "apply" else words[1:], env)
        assert done.returncode == 0, done.stdout + done.stderr
    assert _patchkit(own, ["run", "--patches", str(library), "--", *command], env).returncode == 7


def test_run_apply_from_a_pipx_install_applies_to_the_venv_the_launch_runs(pipx):
    own, _vllm_python, site, library, command, env, marker = pipx
    done = _patchkit(own, ["run", "--apply", "--patches", str(library), "--", *command], env)
    assert done.returncode == 7 and marker.exists(), done.stdout + done.stderr
    assert (site / ".patchkit/state.json").exists() and (site / "patchkit_guard.py").exists()
