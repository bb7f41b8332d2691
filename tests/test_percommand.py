"""cli.percommand: a command run in a process that ran others (fleet's node agent, the tests' run_cli_in_process)
starts from none of their memos, as a new process does; and every memo a command fills is named there."""

from __future__ import annotations

import os
import re
import shutil
import sys

import helpers
import pytest
from helpers import MODEL, run_cli, run_cli_in_process
from launch_fixtures import write_eagle3_setup

from patchkit.base import seal
from patchkit.cli import percommand
from patchkit.cli.main import run_in_process
from patchkit.launch import serve_parser


def held() -> dict[str, object]:
    """Every module-level dict, list and set of patchkit's modules (its contents), and each functools cache's size."""
    found: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("patchkit") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if attr in percommand.KEPT.get(name, ()):
                continue
            if isinstance(value, (dict, list, set)):
                found[f"{name}.{attr}"] = repr(value)
            elif callable(getattr(value, "cache_info", None)):
                found[f"{name}.{attr}"] = value.cache_info().currsize
    return found


def test_every_memo_a_command_fills_is_forgotten_before_the_next(tree, open_library, tmp_path):
    percommand.forget()
    before = held()
    target = ("--target", tree, "--patches", open_library)
    python = ("--python", sys.executable, "--patches", open_library)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    for args in (
        ("status", "--format", "json", *target),
        ("apply", "--no-import", *target),
        ("verify", "--no-import", *target),
        ("preflight", "--no-import", *target, "--", "vllm", "serve", model),
        ("status", *python),
        ("revert", *target),
    ):
        run_cli_in_process(*args)  # it forgets after the command too: the memos are looked at here
        percommand.forget()
    changed = {name for name, value in held().items() if before.get(name, value) != value}
    assert changed == set(), f"memos a command fills that cli/percommand.py does not name: {sorted(changed)}"


def test_the_recorded_serve_parser_is_built_once_a_process_not_once_a_command(tmp_path):
    """cli.percommand.KEPT: vLLM's serve parser as patchkit records it is decided by patchkit's own files, so a
    command run after another in one process (fleet's node agent, run_cli_in_process) reads the launch with the
    parser already built, and reads it as a new process does."""
    tree, library = write_eagle3_setup(tmp_path)
    command = ("preflight", "--no-import", "--target", tree, "--patches", library, "--format", "json", "--")
    launch = ("vllm", "serve", "org/m", "--max-model-len", "4096")
    first = run_cli_in_process(*command, *launch)
    built = serve_parser._parser.cache_info().misses
    again = run_cli_in_process(*command, *launch)
    assert serve_parser._parser.cache_info().misses == built > 0, "the parser was built again"
    assert (again.returncode, again.stdout) == (first.returncode, first.stdout)
    alone = run_cli(*command, *launch)  # a process of its own
    assert (alone.returncode, alone.stdout) == (first.returncode, first.stdout)


def test_a_second_command_in_process_reads_its_own_state_directory_and_sees_the_tree_changed(
    tree, open_library, tmp_path, monkeypatch
):
    """The seal key is read once a process (functools.cache): a command fleet's agent runs after another
    (cli.run_in_process), with another XDG_STATE_HOME, keys its verdicts with that directory's key, as a new
    process would."""
    target = ("--target", tree, "--patches", open_library)
    for home in ("first", "second"):
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / home))
        code, out, err = run_in_process([str(a) for a in ("apply", "--dry-run", *target)])
        assert code == 0, out + err
        assert seal.key_path().is_file(), home
    assert run_cli_in_process("apply", *target).returncode == 0
    (tree / MODEL).write_text((tree / MODEL).read_text() + "# tuned\n")
    edited = run_cli_in_process("status", *target)
    assert edited.returncode == 1 and "edited" in edited.stdout + edited.stderr
    assert run_cli("status", *target).returncode == 1  # a process of its own says the same


def test_a_command_in_process_leaves_the_environment_and_directory_as_they_were(tree, tmp_path):
    environ, here = dict(os.environ), os.getcwd()
    done = run_cli_in_process("status", "--target", tree, env={"PATCHKIT_CACHE_DIR": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode in (0, 1, 3) and done.args[1:3] == ["-m", "patchkit"]
    assert (dict(os.environ), os.getcwd()) == (environ, here)


def test_a_read_only_command_runs_here_only_where_a_fork_would_serve_it_as_the_session(tree, open_library, monkeypatch):
    """helpers.run_cli_read_only: status, verify or preflight in this process where run_cli would fork it from
    the server as it is (the same output and exit code as that process); a process of its own where the
    start-up (PYTHON*, the locale), a PYTHONPATH or what the fork reads again (the fault plan) is its own."""
    where: list[str] = []
    monkeypatch.setattr(
        helpers, "run_cli_in_process", lambda *a, **k: where.append("here") or run_cli_in_process(*a, **k)
    )
    monkeypatch.setattr(helpers, "run_cli", lambda *a, **k: where.append("process") or run_cli(*a, **k))
    target = ("--target", tree, "--patches", open_library)
    here = helpers.run_cli_read_only("status", *target)
    process = run_cli("status", *target)
    assert (here.returncode, here.stdout, here.stderr) == (process.returncode, process.stdout, process.stderr)
    assert where == ["here"]
    for own in ({"PYTHONHASHSEED": "7"}, {"PYTHONPATH": str(tree.parent)}, {"PATCHKIT_FAULT_AFTER": "x"}):
        where.clear()
        done = helpers.run_cli_read_only("status", "-q", *target, env=own)
        assert where == ["process"] and done.returncode == process.returncode, (own, done.stderr)
    assert "PATCHKIT_FAULT_AFTER='x' is ignored" in done.stderr  # read where the command starts
    with pytest.raises(AssertionError, match="not a read-only command"):
        helpers.run_cli_read_only("apply", *target)


def _files(root) -> dict[str, object]:
    """Every path under `root`: a link's target, a directory's mode, a file's mode and bytes (the times a
    record notes, as "applied_at", masked: two runs differ there)."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        data = None if path.is_dir() or path.is_symlink() else path.read_bytes()
        data = data and re.sub(rb'"[0-9]{4}-[0-9]{2}-[0-9]{2}T[^"]*"', b'"TIME"', data)
        found[str(path.relative_to(root))] = os.readlink(path) if path.is_symlink() else (mode, data)
    return found


def test_apply_and_revert_run_here_where_a_fork_would_serve_them_and_write_what_the_process_writes(
    tree, open_library, monkeypatch
):
    """helpers.run_cli_writing: apply or revert in this process where run_cli would fork it as the session, with
    the exit code, output and files the process leaves (each run on the same tree, put back between them); a
    process of its own where the start-up or the fault plan is its own; never `run` (it execs the launch)."""
    where: list[str] = []
    monkeypatch.setattr(
        helpers, "run_cli_in_process", lambda *a, **k: where.append("here") or run_cli_in_process(*a, **k)
    )
    monkeypatch.setattr(helpers, "run_cli", lambda *a, **k: where.append("process") or run_cli(*a, **k))
    target = ("--target", tree, "--patches", open_library)
    stock = tree.with_name("stock")
    shutil.copytree(tree, stock, symlinks=True)
    for command in (("apply", "--no-import"), ("revert",)):
        process = run_cli(*command, *target)
        left = _files(tree)
        shutil.rmtree(tree)
        shutil.copytree(stock, tree, symlinks=True)
        here = helpers.run_cli_writing(*command, *target)
        assert (here.returncode, here.stdout, here.stderr) == (process.returncode, process.stdout, process.stderr)
        assert _files(tree) == left and process.returncode == 0, process.stdout + process.stderr
        shutil.rmtree(stock)
        shutil.copytree(tree, stock, symlinks=True)
    assert where == ["here", "here"]
    for own in ({"PYTHONHASHSEED": "7"}, {"PATCHKIT_FAULT_AFTER": "x"}):
        where.clear()
        done = helpers.run_cli_writing("apply", "--dry-run", "--no-import", *target, env=own)
        assert where == ["process"] and done.returncode == 0, (own, done.stderr)
    assert "PATCHKIT_FAULT_AFTER='x' is ignored" in done.stderr
    with pytest.raises(AssertionError, match="not a command run_cli_writing runs"):
        helpers.run_cli_writing("run", *target)


def test_recover_runs_here_where_a_fork_would_serve_it_and_writes_what_the_process_writes(
    tree, open_library, monkeypatch
):
    """helpers.run_cli_writing runs recover too (the rollback of a journal apply and revert run first): an apply
    cut short by a hard exit, then its journal recovered by a process and here from the same tree (put back
    between them): the same exit code, output and files."""
    where: list[str] = []
    monkeypatch.setattr(
        helpers, "run_cli_in_process", lambda *a, **k: where.append("here") or run_cli_in_process(*a, **k)
    )
    monkeypatch.setattr(helpers, "run_cli", lambda *a, **k: where.append("process") or run_cli(*a, **k))
    cut = run_cli(
        "apply", "--no-import", "--target", tree, "--patches", open_library, env={"PATCHKIT_FAULT_AFTER": "5:exit"}
    )
    assert cut.returncode == 70 and (tree / ".patchkit/journal.json").is_file(), cut.stdout + cut.stderr
    crashed = tree.with_name("crashed")
    shutil.copytree(tree, crashed, symlinks=True)
    process = run_cli("recover", "--target", tree)
    left = _files(tree)
    shutil.rmtree(tree)
    shutil.copytree(crashed, tree, symlinks=True)
    here = helpers.run_cli_writing("recover", "--target", tree)
    assert (here.returncode, here.stdout, here.stderr) == (process.returncode, process.stdout, process.stderr)
    assert _files(tree) == left and process.returncode == 0, process.stdout + process.stderr
    assert "rolled back" in process.stdout + process.stderr and not (tree / ".patchkit/journal.json").exists()
    assert where == ["here"]
