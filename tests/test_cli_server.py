"""cli_server's forked `python -m patchkit` answers as a fresh interpreter does: the same exit code, stdout
and stderr, for the same arguments, environment and working directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import helpers
import pytest
from cli_server import run_patchkit, run_python_code
from helpers import LOAD_LIKE_VLLM, MODEL, MODEL_PY, make_patch, on_a_terminal, write_tree


def fresh(args: list[str], env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def answer(done: subprocess.CompletedProcess) -> tuple[int, str, str]:
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["nosuchcommand"],  # usage: 2
        ["status", "--target", "missing"],  # relative to the working directory: 4
        ["status", "--target", "site"],
        ["apply", "--dry-run", "--no-import", "--target", "site"],
        ["status", "--target", "site", "--format", "json"],
    ],
)
def test_a_forked_command_answers_as_a_fresh_interpreter(tmp_path, args):
    write_tree(tmp_path / "site")
    env = {**os.environ, "COLUMNS": "61"}
    assert answer(run_patchkit(args, env, tmp_path, 300)) == answer(fresh(args, env, tmp_path))


def test_the_command_sees_its_own_environment_not_the_servers(tmp_path):
    """PATCHKIT_LIBRARY set for one command only: the fork reads that library (here, none there)."""
    env = {**os.environ, "PATCHKIT_LIBRARY": str(tmp_path / "nowhere")}
    forked = run_patchkit(["list"], env, tmp_path, 300)
    assert answer(forked) == answer(fresh(["list"], env, tmp_path))
    assert forked.returncode != 0
    assert run_patchkit(["list"], dict(os.environ), tmp_path, 300).returncode == 0


def test_a_start_up_variable_runs_a_fresh_interpreter(tmp_path):
    """PYTHONIOENCODING is read once at start-up: a command that sets it is not forked but started."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii:strict"}
    done = run_patchkit(["status", "--target", "no-\u00e9"], env, tmp_path, 300)
    assert answer(done) == answer(fresh(["status", "--target", "no-\u00e9"], env, tmp_path))


def test_a_variable_the_servers_imports_read_runs_a_fresh_interpreter(tmp_path, monkeypatch):
    """HOME is read while the server imports patchkit (sysconfig's user base): a command with another HOME is
    started, not forked, and one with the session's HOME is forked."""
    started = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: started.append(argv) or real_run(argv, **kw))
    run_patchkit(["--version"], {**os.environ}, tmp_path, 300)
    assert started == []
    run_patchkit(["--version"], {**os.environ, "HOME": str(tmp_path)}, tmp_path, 300)
    assert started == [[sys.executable, "-m", "patchkit", "--version"]]


# A module patchkit imports after the server's imports (`fleet` imports Ray): where the command finds it
# shows its sys.path, the same in a fork as in a fresh interpreter.
FAKE_RAY = """\
import os, sys
print("ray found on", sys.path)
sys.stdout.flush()
os._exit(7)
"""


def _started_fresh(monkeypatch) -> list:
    started: list = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: started.append(argv) or real_run(argv, **kw))
    return started


def test_a_pythonpath_of_directories_the_server_imported_nothing_from_is_forked_with_its_sys_path(
    tmp_path, monkeypatch
):
    """PYTHONPATH's entries (relative to the working directory, an empty one the directory itself, a repeat
    kept once) come after sys.path[0] in the fork as in a fresh interpreter, and the command imports from them."""
    (tmp_path / "extra/ray").mkdir(parents=True)
    (tmp_path / "extra/ray/__init__.py").write_text(FAKE_RAY)
    started = _started_fresh(monkeypatch)
    for pythonpath in ("extra", f"extra::{tmp_path / 'nowhere'}:extra"):
        env = {**os.environ, "PYTHONPATH": pythonpath}
        forked = run_patchkit(["fleet", "status"], env, tmp_path, 300)
        assert started == []
        assert forked.stdout.startswith(f"ray found on ['{tmp_path}', '{tmp_path / 'extra'}'"), forked.stdout
        assert answer(forked) == answer(fresh(["fleet", "status"], env, tmp_path))
        assert forked.returncode == 7
        started.clear()  # fresh's


@pytest.mark.parametrize("shadow", ["click.py", "rich", "sitecustomize.py"])
def test_a_pythonpath_holding_a_module_the_server_imported_runs_a_fresh_interpreter(tmp_path, monkeypatch, shadow):
    """A directory holding a module the server imported (which the command would import from there), or a
    sitecustomize the interpreter's start-up runs: started, not forked."""
    (tmp_path / "extra/ray").mkdir(parents=True)
    (tmp_path / "extra/ray/__init__.py").write_text(FAKE_RAY)
    (tmp_path / "extra" / shadow).mkdir() if "." not in shadow else (tmp_path / "extra" / shadow).write_text("")
    started = _started_fresh(monkeypatch)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "extra")}
    run_patchkit(["fleet", "status"], env, tmp_path, 300)
    assert started == [[sys.executable, "-m", "patchkit", "fleet", "status"]]


def test_the_guard_loaded_in_a_fork_answers_as_in_a_fresh_interpreter(tmp_path, scratch, monkeypatch):
    """run_python_code (helpers.load_plugins_like_vllm) forks a server that imported importlib.metadata: on a
    tree the guard passes and one it refuses (its traceback), the answer is a fresh `python -c`'s, and the
    guard's bytecode is written as that one writes it."""
    site = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    assert (
        run_patchkit(["apply", "--target", str(site), "--patch", str(diff)], dict(os.environ), None, 300).returncode
        == 0
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
    argv = [sys.executable, "-c", LOAD_LIKE_VLLM, str(site)]
    for edit in ("", "# tuned\n"):
        with open(site / MODEL, "a") as fh:
            fh.write(edit)
        started = _started_fresh(monkeypatch)
        forked = run_python_code(LOAD_LIKE_VLLM, [str(site)], env, 300)
        assert started == []
        monkeypatch.undo()
        written = sorted(p.name for p in (site / "__pycache__").iterdir())
        shutil.rmtree(site / "__pycache__")
        assert answer(forked) == answer(subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300))
        assert written == sorted(p.name for p in (site / "__pycache__").iterdir())
        shutil.rmtree(site / "__pycache__")
        assert forked.returncode == (1 if edit else 0), forked.stdout + forked.stderr


# What another user's `python -c` is: who it runs as, what its start-up read, what it may read and write.
AS_ANOTHER_USER = """
import os, sys
print(os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups()))
print(os.environ.get("HOME"), os.getcwd(), sys.prefix, sys.flags.dont_write_bytecode, sys.path[0] == "")
print([os.access(path, os.R_OK | os.W_OK) for path in sys.argv[1:]])
print(open(sys.argv[1]).read())
"""


def test_code_run_as_another_user_is_forked_from_a_server_that_user_started_and_answers_as_setpriv_does(
    open_tmp_path, monkeypatch
):
    """run_python_code as nobody (helpers.load_plugins_as_another_user) forks a server that user started:
    the answer, a file only root reads refused with its traceback, is a fresh `setpriv ... python -c`'s."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to change user")
    closed = open_tmp_path / "closed"
    closed.write_text("root only\n")
    closed.chmod(0o600)
    readable = open_tmp_path / "readable"
    readable.write_text("anyone\n")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "HOME": "/nonexistent"}
    fresh = ["setpriv", f"--reuid={helpers.NOBODY}", f"--regid={helpers.NOBODY}", "--clear-groups", sys.executable]
    for path in (readable, closed):
        started = _started_fresh(monkeypatch)
        forked = run_python_code(AS_ANOTHER_USER, [str(path), str(readable)], env, 60, user=helpers.NOBODY)
        assert started == []
        monkeypatch.undo()
        argv = [*fresh, "-c", AS_ANOTHER_USER, str(path), str(readable)]
        assert answer(forked) == answer(subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60))
        assert forked.stdout.startswith(f"{helpers.NOBODY} {helpers.NOBODY} {helpers.NOBODY} {helpers.NOBODY} []\n")
        assert (forked.returncode, "PermissionError" in forked.stderr) == ((1, True) if path == closed else (0, False))


@pytest.mark.parametrize(
    ("args", "stdout_terminal"),
    [(["--help"], True), (["status", "--target", "site"], True), (["status", "--target", "missing"], False)],
)
def test_a_command_on_a_terminal_is_forked_and_draws_what_a_fresh_interpreter_draws(
    tmp_path, monkeypatch, args, stdout_terminal
):
    write_tree(tmp_path / "site")
    monkeypatch.chdir(tmp_path)
    fresh_drawn = []

    def fresh_only(*given: object) -> None:  # the fork refused: on_a_terminal starts a fresh interpreter
        fresh_drawn.append(True)

    with monkeypatch.context() as fresh_start:
        fresh_start.setattr(helpers, "run_patchkit_on", fresh_only)
        expected = on_a_terminal(args, width=50, stdout_terminal=stdout_terminal, drop_env=("COLUMNS", "LINES"))
    assert fresh_drawn
    monkeypatch.setattr(helpers, "subprocess", None)  # no fresh interpreter: the fork server's
    assert on_a_terminal(args, width=50, stdout_terminal=stdout_terminal, drop_env=("COLUMNS", "LINES")) == expected
    assert expected[1]  # something was drawn to compare
