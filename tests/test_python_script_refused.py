"""--python given a program's Python script (`--python $(which vllm)`) instead of an interpreter: refused
before it runs (it would start that program with the probe's arguments), naming the interpreter beside
it. A shell script that execs a Python (a pyenv shim) still runs as the interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import run_cli_read_only


def _bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    return bin_dir


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("form", ["shebang", "env", "pip-wrapper"])
def test_a_python_script_as_python_is_refused_unrun_naming_the_interpreter_beside_it(tmp_path, form):
    bin_dir = _bin(tmp_path)
    ran = tmp_path / "ran"
    body = f"import pathlib\npathlib.Path({str(ran)!r}).write_text('ran')\n"
    first = {
        "shebang": f"#!{bin_dir / 'python'}\n",
        "env": "#!/usr/bin/env python3\n",
        "pip-wrapper": f"#!/bin/sh\n'''exec' '{bin_dir / 'python'}' \"$0\" \"$@\"\n' '''\n",
    }[form]
    vllm = _script(bin_dir / "vllm", first + body)
    done = run_cli_read_only("status", "--python", vllm, cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 4, said
    assert "is a Python script" in said and "not a Python interpreter" in said, said
    assert f"give --python {bin_dir / 'python'}" in said, said
    assert not ran.exists(), "the script was run"


def test_a_shell_script_that_execs_a_python_still_runs_as_the_interpreter(tmp_path):
    shim = _script(tmp_path / "python-shim", f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    done = run_cli_read_only("status", "--python", shim, cwd=tmp_path)
    assert "is a Python script" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "hands_on", ["os.execv(real, [real, *sys.argv[1:]])", "sys.exit(subprocess.run([real, *sys.argv[1:]]).returncode)"]
)
def test_a_python_written_interpreter_wrapper_runs_as_the_interpreter_it_hands_on_to(tmp_path, hands_on):
    """Review 17 L2: an HPC module system's `#!/usr/bin/env python3` wrapper that execs the real
    interpreter was refused by its #! line alone. It hands its arguments on, so it is run once, as a
    launch would run it, and the interpreter it reaches answers: here, one with no vllm."""
    real = sys.executable
    wrapper = _script(
        tmp_path / "python-wrapper",
        f"#!/usr/bin/env python3\nimport os, subprocess, sys\nreal = {real!r}\n{hands_on}\n",
    )
    done = run_cli_read_only("status", "--python", wrapper, cwd=tmp_path)
    said = done.stdout + done.stderr
    assert "is a Python script" not in said, said
    assert done.returncode == 4 and f"vLLM is not installed for {wrapper}" in said, said
