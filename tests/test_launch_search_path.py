"""The `vllm` (and the Python) a launch runs, looked up as glibc's execvp looks it up for `env`: with
no PATH (`env -i`, `env -u PATH`) only /bin:/usr/bin, an empty entry (`PATH=`, `PATH=:/x`) the
working directory. Each case is run for real too: a stand-in `vllm` prints that it ran, so the
test holds preflight's reading to what the launch does, not to a belief about it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli, run_cli_judged
from importable_vllm import venv_importing
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    applied,
    findings,
    patchkit_run,
    serve,
    stand_in_launch,
    write_eagle3_setup,
    write_model,
)

from patchkit.launch.interpreter import exec_search, script_python

RAN = "stand-in vllm ran"


def _stand_in(where: Path, python: str | Path) -> Path:
    """A `vllm` run by `python` that says it ran (and does nothing else)."""
    where.mkdir(parents=True, exist_ok=True)
    script = where / "vllm"
    script.write_text(f"#!{python}\nimport os, sys\nprint({RAN!r}, os.path.realpath(sys.argv[0]))\n")
    script.chmod(0o755)
    return script


@pytest.fixture(name="setup")
def _setup(tmp_path):
    """(tree applied, library, the venv's python importing it, its bin dir holding a stand-in vllm,
    the serve arguments after `vllm`)."""
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    venv_importing(tree, tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    bin_dir = _stand_in(tmp_path / "venv" / "bin", python).parent
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    return tree, library, python, bin_dir, launch[1:]


def _preflight(setup, prefix: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None):
    _tree, library, python, _, arguments = setup
    args = ["preflight", "--python", python, "--patches", library, "--no-import", "--format", "json", "--"]
    return run_cli_judged(*args, *prefix, "vllm", *arguments, cwd=cwd, env=env)


def _launched(prefix: list[str], arguments: list[str], *, cwd: Path | None = None, env=None):
    """The launch itself, run: (its exit status, whether the stand-in ran)."""
    done = subprocess.run(
        [*prefix, "vllm", *arguments], capture_output=True, text=True, cwd=cwd, env=env, timeout=60, check=False
    )
    return done.returncode, RAN in done.stdout


@pytest.mark.parametrize(
    "prefix",
    [["env", "-i"], ["env", "-u", "PATH"], ["env", "--unset=PATH"], ["/usr/bin/env", "-i", "HOME=/"]],
)
def test_a_launch_with_no_path_finds_no_vllm_outside_bin_and_preflight_says_so(setup, prefix):
    _tree, _library, _python, bin_dir, arguments = setup
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}  # patchkit's own PATH finds the stand-in
    assert _launched(prefix, arguments, env={**os.environ, **env}) == (127, False)  # the truth: no vllm runs
    done = _preflight(setup, prefix, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    target = findings(done)["launch-target"]
    assert not target["ok"], target
    assert (
        f"has no PATH, so execvp looks in {os.defpath} only, where there is no executable vllm" in target["message"]
    ), target
    assert str(bin_dir / "vllm") in target["fix"], target  # the one patchkit's PATH finds, by its path


def test_a_launch_path_without_vllm_is_said_and_one_with_it_passes(setup, tmp_path):
    _tree, _library, _python, bin_dir, arguments = setup
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _launched(["env", f"PATH={empty}"], arguments) == (127, False)
    done = _preflight(setup, ["env", f"PATH={empty}"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"the launch's PATH ({empty}) holds no executable vllm: env exits 127"
        in findings(done)["launch-target"]["message"]
    )
    assert _launched(["env", "-i", f"PATH={bin_dir}"], arguments) == (0, True)
    done = _preflight(setup, ["env", "-i", f"PATH={bin_dir}"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(f["ok"] for f in findings(done).values())


@pytest.mark.parametrize("path", ["", ":{empty}", "{empty}:"])
def test_an_empty_path_entry_is_the_working_directory_and_its_vllm_is_read(setup, tmp_path, path):
    """execvp reads an empty PATH entry as the working directory (shutil.which does not): the `vllm`
    there runs, and it is patchkit's own Python, which imports no vLLM: the launch runs no tree checked."""
    _tree, _library, _python, _bin_dir, arguments = setup
    empty = tmp_path / "empty"
    empty.mkdir()
    here = _stand_in(tmp_path / "here", sys.executable).parent
    prefix = ["env", "-i", f"PATH={path.format(empty=empty)}"]
    assert _launched(prefix, arguments, cwd=here) == (0, True)
    done = _preflight(setup, prefix, cwd=here)
    assert done.returncode == 1, done.stdout + done.stderr
    target = findings(done)["launch-target"]
    assert not target["ok"] and f"runs {sys.executable}" in target["message"], target


def test_exec_search_agrees_with_execvp(tmp_path, monkeypatch):
    """Each lookup compared with a real execvp (os.execvpe, glibc's search) in a child: the same file runs."""
    here = _stand_in(tmp_path / "here", sys.executable).parent
    denied = _stand_in(tmp_path / "denied", sys.executable)
    denied.chmod(0o644)  # execvp passes over it to the next entry
    later = _stand_in(tmp_path / "later", sys.executable).parent
    monkeypatch.chdir(here)
    for path in [None, "", ":", f"{tmp_path}/none", f"{denied.parent}:{later}", "../later", f":{later}", "/x:"]:
        child = "import os\nenv = dict(os.environ)\nenv.pop('PATH', None)\n"
        child += f"env['PATH'] = {path!r}\n" if path is not None else ""
        child += "os.execvpe('vllm', ['vllm'], env)\n"
        run = subprocess.run([sys.executable, "-c", child], text=True, capture_output=True, timeout=60, check=False)
        found = exec_search("vllm", path)
        ran = run.stdout.split()[-1] if RAN in run.stdout else None
        assert ran == (os.path.realpath(found) if found else None), (path, found, run.stdout, run.stderr)


def test_a_shebangs_env_that_unsets_path_looks_its_python_up_in_bin_only(tmp_path, monkeypatch):
    """`#!/usr/bin/env -S -u PATH NAME`: env takes PATH away before it looks NAME up."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    name = "python-env22-stand-in"
    (bin_dir / name).symlink_to(sys.executable)
    script = tmp_path / "vllm"
    script.write_text(f"#!/usr/bin/env -S -u PATH {name}\nprint({RAN!r})\n")
    script.chmod(0o755)
    for unset in (["-u", "PATH"], ["-uPATH"], ["--unset=PATH"], ["-i"]):
        script.write_text(f"#!/usr/bin/env -S {' '.join(unset)} {name}\nprint({RAN!r})\n")
        done = subprocess.run(
            [str(script)], env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 127 and RAN not in done.stdout, (unset, done)
        with pytest.raises(Exception, match="not on the launch's PATH"):
            script_python(script, str(bin_dir))
    script.write_text(f"#!/usr/bin/env -S {name}\nprint({RAN!r})\n")
    assert script_python(script, str(bin_dir))[0] == str(bin_dir / name)


def test_run_refuses_a_launch_whose_env_finds_no_vllm_and_launches_one_that_does(tmp_path):
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    _, done = patchkit_run(tree, library, ["env", "-i", *command], env)
    assert done.returncode == 1 and not marker.exists(), done.stdout + done.stderr  # was: env's exit 127
    assert "has no PATH, so execvp looks in" in done.stdout + done.stderr
    _, done = patchkit_run(tree, library, ["env", "-i", f"PATH={tmp_path / 'bin'}:/usr/bin:/bin", *command], env)
    assert done.returncode == 7 and marker.exists(), done.stdout + done.stderr  # the stand-in ran


def test_without_target_or_python_a_launch_its_env_finds_no_vllm_for_is_a_bad_command(setup):
    """No Python to ask where vLLM is: it said "patchkit cannot tell which Python runs vllm" (exit 4)
    and to give --python; the launch itself is what fails, and that is said, with its fix (exit 2)."""
    _, library, _, bin_dir, arguments = setup
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for verb in ("preflight", "run"):
        done = run_cli(verb, "--patches", library, "--", "env", "-i", "vllm", *arguments, env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "env exits 127 and vLLM never starts" in done.stderr, done.stderr
        assert f"name it by its path in the launch (`env ... {bin_dir / 'vllm'} ...`)" in done.stderr
