"""The launch's --check-hash-based-pycs, read where it reaches the interpreter, and stale bytecode
judged under it as CPython does: `default` loads unchecked-hash .pyc without the source, `never`
checked-hash too, `always` neither (it checks every hash-based .pyc against its source). No
environment variable sets it. A plain `#!` line passes what follows the interpreter as one word, so
Python refuses `--check-hash-based-pycs MODE` there (and a lone `--check-hash-based-pycs` takes the
script's path as its mode): the launch never starts. `env -S` splits it, as does pip's /bin/sh
wrapper's exec line: there it takes effect."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from launch_fixtures import KIMI, applied, patchkit_run, stand_in_launch

from patchkit._target import guard

UNCHECKED = py_compile.PycInvalidationMode.UNCHECKED_HASH
CHECKED = py_compile.PycInvalidationMode.CHECKED_HASH


@pytest.fixture
def launch(tmp_path):
    """An applied tree, its `python3` the real interpreter (vLLM imported from the tree), and a
    stand-in `vllm` script in Python (touches the marker, exits 7) whose #! line the test writes."""
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    bin_dir = Path(env["PATH"].split(os.pathsep)[0])
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    env = {**env, "PYTHONPATH": str(tree)}
    return tree, library, command, env, marker, bin_dir


def _script(bin_dir: Path, marker: Path, first_line: str) -> None:
    body = f"import pathlib, sys\npathlib.Path({str(marker)!r}).touch()\nsys.exit(7)\n"
    (bin_dir / "vllm").write_text(f"{first_line}\n{body}")


def _stale(tree: Path, mode: py_compile.PycInvalidationMode) -> str:
    """A .pyc of KIMI compiled from other (stock) bytes, hash-based of `mode`."""
    stock = tree.parent / "stock-kimi.py"
    stock.write_bytes(b"# the stock file, as an image compiled it\n")
    pyc = importlib.util.cache_from_source(str(tree / KIMI))
    py_compile.compile(str(stock), cfile=pyc, doraise=True, invalidation_mode=mode)
    return pyc


def _run(tree, library, command, env):
    return patchkit_run(tree, library, command, env)[1]


def test_env_s_gives_never_to_the_scripts_python(launch):
    tree, library, command, env, marker, bin_dir = launch
    _stale(tree, CHECKED)
    python = bin_dir / "python3"
    _script(bin_dir, marker, f"#!/usr/bin/env -S {python} --check-hash-based-pycs default")
    done = _run(tree, library, command, env)
    assert done.returncode == 7 and marker.exists(), done.stdout + done.stderr  # checked: Python compares it
    marker.unlink()
    _script(bin_dir, marker, f"#!/usr/bin/env -S {python} --check-hash-based-pycs never")
    done = _run(tree, library, command, env)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and not marker.exists(), said
    assert "is checked-hash bytecode compiled from other bytes than " + KIMI in said, said


def test_pips_wrapper_gives_never_to_its_python(launch):
    tree, library, command, env, marker, bin_dir = launch
    _stale(tree, CHECKED)
    python = bin_dir / "python3"
    wrapper = f"#!/bin/sh\n'''exec' \"{python}\" --check-hash-based-pycs never \"$0\" \"$@\"\n' '''"
    _script(bin_dir, marker, wrapper)
    done = _run(tree, library, command, env)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and not marker.exists(), said
    assert "is checked-hash bytecode compiled from other bytes than " + KIMI in said, said


@pytest.mark.parametrize(
    "argument", ["--check-hash-based-pycs never", "--check-hash-based-pycs", "--check-hash-based-pycs=never"]
)
def test_a_plain_shebang_cannot_give_it_and_python_refuses_the_script(launch, argument):
    tree, library, command, env, marker, bin_dir = launch
    _script(bin_dir, marker, f"#!{bin_dir / 'python3'} {argument}")
    assert subprocess.run([bin_dir / "vllm"], capture_output=True).returncode == 2  # Python's own refusal
    done = _run(tree, library, command, env)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and not marker.exists(), said
    assert f"Python refuses to start {bin_dir / 'vllm'}" in said and "so vLLM never starts" in said, said
    assert "#!/usr/bin/env -S" in said, said  # the fix: the form that gives it


def test_always_checks_unchecked_hash_bytecode_too(launch):
    """Under `always` Python compares an unchecked-hash .pyc's hash with the source and compiles the
    patched source: the launch runs the patch, so run launches; in the default mode it refuses."""
    tree, library, command, env, marker, bin_dir = launch
    pyc = _stale(tree, UNCHECKED)
    python = bin_dir / "python3"
    _script(bin_dir, marker, f"#!{python}")
    done = _run(tree, library, command, env)
    assert done.returncode == 1 and not marker.exists(), done.stdout + done.stderr
    assert f"stale bytecode: {KIMI}: __pycache__/{Path(pyc).name}: unchecked-hash" in done.stdout, done.stdout
    _script(bin_dir, marker, f"#!/usr/bin/env -S {python} --check-hash-based-pycs always")
    done = _run(tree, library, command, env)
    assert done.returncode == 7 and marker.exists(), done.stdout + done.stderr
    assert guard.stale_bytecode(str(tree), [KIMI], mode="always") == []  # the guard, run so, judges alike
    assert guard.stale_bytecode(str(tree), [KIMI], mode="default") != []
    for mode, runs_the_source in (("default", "False"), ("always", "True")):  # CPython itself
        argv = [python, "--check-hash-based-pycs", mode, "-c", RUNS_THE_SOURCE, str(tree / KIMI)]
        assert subprocess.run(argv, capture_output=True, text=True).stdout.strip() == runs_the_source, (mode, pyc)


RUNS_THE_SOURCE = """
import importlib.machinery, sys
path = sys.argv[1]
code = importlib.machinery.SourceFileLoader("k", path).get_code("k")
print(code.co_consts == compile(open(path).read(), path, "exec").co_consts)
"""
