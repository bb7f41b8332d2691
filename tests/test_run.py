"""`patchkit run`: the preflight, then exec of the launch itself (same PID, exit status), or refusal.
A stand-in `vllm` script on PATH prints its PID and exits 7; the CLI runs as a real subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import (
    assert_clean_failure,
    make_patch,
    on_a_terminal,
    run_cli_read_only,
    run_cli_writing,
    snapshot,
    write_library,
)
from launch_fixtures import (
    DRAFTER,
    KIMI,
    REGISTRY,
    SPEC,
    patchkit_run,
    serve,
    stale_under_a_prefix,
    stand_in_launch,
    write_model,
)

from patchkit.launch.command import parse
from patchkit.launch.engine import tree_reader
from patchkit.launch.shortcut import _launch_setting
from patchkit.store.state import read_state


@pytest.fixture
def launch(tmp_path):
    return stand_in_launch(tmp_path, "--port", "8123")


def test_a_passing_preflight_becomes_the_command_same_pid_and_exit_status(launch):
    tree, library, command, env, marker = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    pid, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 7, done.stderr
    assert f"pid {pid}\n" in done.stdout
    assert "--port 8123" in done.stdout
    assert marker.exists()


def test_a_failing_preflight_does_not_launch_and_exits_1(launch):
    tree, library, command, env, marker = launch
    _, done = patchkit_run(tree, library, command, env)
    assert_clean_failure(done, 1)
    assert not marker.exists()
    assert "not launched" in done.stderr and "whitelist" in done.stdout
    # newuser15 6: run has no --no-import, so it never names it as why vLLM was not asked
    said = " ".join(done.stdout.split())
    assert "not asked: run checks the launch statically" in said and "--no-import" not in said, said


@pytest.fixture
def short_launch():
    """The launch set up under a short path, as a user's: its options fit a line of 80 columns."""
    made = Path(tempfile.mkdtemp(prefix="pk-", dir="/tmp"))
    yield stand_in_launch(made, "--port", "8123")
    shutil.rmtree(made, ignore_errors=True)


def test_a_failed_runs_hint_never_wraps_the_command_it_names(short_launch, monkeypatch):
    """New-user trial 14, item 22: at 80 columns the hint after a failed preflight wrapped the full
    preflight command over three lines inside its backquotes; pasted, the first line ran a
    preflight of the launch without its --speculative-config. Too wide for a line, it is said in
    words; piped (no width), the command is whole on one line; a `command` is never split."""
    tree, library, command, env, marker = short_launch
    monkeypatch.setenv("PATH", env["PATH"])
    args = ["run", "--target", tree, "--patches", library, "--", *command]  # a stock tree: it fails
    code, drawn = on_a_terminal(args, width=80, drop_env=("COLUMNS", "LINES", "FORCE_COLOR"))
    shown = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\r", "", drawn.decode())
    assert code in (1, 4) and not marker.exists(), shown
    error = shown[shown.index("error: not launched") :]
    assert all(line.count("`") % 2 == 0 for line in error.splitlines()), shown
    # what to do next, on one line: the fixes the preflight printed (its hint: how to check in full)
    assert error.splitlines()[0] == "error: not launched: the preflight failed: fix what it found, then run again"
    said = " ".join(error.split())
    assert "`patchkit preflight` with this run's options and launch checks it in full" in said, shown
    _, piped = patchkit_run(tree, library, command, env)
    hint = next(line for line in piped.stderr.splitlines() if line.startswith("hint:"))
    assert hint.startswith("hint: `patchkit preflight --target") and hint.endswith("` checks it in full"), hint
    assert all(word in hint for word in command[-2:]), hint


def test_no_preflight_launches_even_a_stock_tree(launch):
    tree, library, command, env, _ = launch
    pid, done = patchkit_run(tree, library, command, env, "--no-preflight")
    assert done.returncode == 7 and f"pid {pid}\n" in done.stdout


def test_apply_applies_a_not_applied_tree_then_launches(launch):
    tree, library, command, env, _ = launch
    stock = snapshot(tree)
    pid, done = patchkit_run(tree, library, command, env, "--apply")
    assert done.returncode == 7, done.stderr
    assert f"pid {pid}\n" in done.stdout
    assert snapshot(tree) != stock
    assert run_cli_read_only("status", "--target", tree, "--patches", library).returncode == 0
    assert "applied" in run_cli_read_only("status", "--target", tree, "--patches", library, "--format", "json").stdout


def test_an_unreadable_command_is_exit_2_and_nothing_runs(launch):
    tree, library, _, env, marker = launch
    _, done = patchkit_run(tree, library, ["vllm", "serve", "m", "-sc", "{'method': 'eagle3'}"], env)
    assert_clean_failure(done, 2)
    assert not marker.exists()


# --- the fast path on an applied tree (patchkit/launch/shortcut.py) --------------------------------


def own_cache(env: dict, tmp_path: Path) -> tuple[dict, Path]:
    cache = tmp_path / "own-cache"
    return {**env, "PATCHKIT_CACHE_DIR": str(cache)}, cache / "launch-findings"


# `run` with its exec replaced: the modules it loaded (start-up: each one is time before the launch).
LOADED_BY_RUN = """
import atexit, json, os, sys
from patchkit.cli.main import main
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
os.execvp = lambda *_: sys.exit(0)
sys.argv = ["patchkit", "run", *sys.argv[1:]]
main()
"""


def loaded_by_run(tree: Path, library: Path, command: list[str], env: dict, exit_code: int = 0) -> list[str]:
    args = ["--target", str(tree), "--patches", str(library), "--", *command]
    done = subprocess.run([sys.executable, "-c", LOADED_BY_RUN, *args], capture_output=True, text=True, env=env)
    assert done.returncode == exit_code, done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_the_fast_path_loads_no_lock_nor_the_transactions_recovery(launch):
    """Issue 21: `run`'s fast path reads the record without the lock; the transaction module (its
    lock, recovery, fcntl and mmap) loads only when the record does not answer."""
    tree, library, command, env, _ = launch
    locking = ("patchkit.engine.transaction", "patchkit.base.locks", "fcntl", "mmap")
    stock = loaded_by_run(tree, library, command, env, exit_code=1)  # no record: the preflight under the lock
    assert sorted(m for m in stock if m in locking) == sorted(locking)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    fast = loaded_by_run(tree, library, command, env)
    assert "patchkit.launch.shortcut" in fast and [m for m in fast if m in locking] == []


def test_the_fast_path_loads_no_logging_nor_the_integrity_check(launch):
    """Issue 21: the notes of the modules below the CLI reach the ui through base.notes, not the
    logging package (with traceback and string, ~2.5 ms of start-up); the installed RECORD is read
    by distinfo, without the integrity check's module (~1 ms)."""
    tree, library, command, env, _ = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    fast = loaded_by_run(tree, library, command, env)
    assert "patchkit.launch.shortcut" in fast and "logging" not in fast
    assert "patchkit.checks.integrity" not in fast


def test_the_fast_path_loads_no_table_report_nor_plan_of_the_ui(launch):
    """Issue 21: the ui package re-exports nothing, so `run`'s fast path loads only the ui modules
    it uses (the console, the run's document): no report, plan, steps or matrix module."""
    tree, library, command, env, _ = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    fast = loaded_by_run(tree, library, command, env)
    assert "patchkit.cli.ui.console" in fast
    unused = ("reports", "plan", "steps", "matrix", "screen")
    assert [m for m in fast if m.removeprefix("patchkit.cli.ui.") in unused] == []


def test_the_fast_path_loads_no_importlib_resources_nor_zipfile(launch):
    """Issue 21: the installed library and the guard's own module are found beside patchkit's
    modules (importlib.resources says the same of a package on disk, and loads tempfile's and
    zipfile's modules: ~3 ms)."""
    tree, library, command, env, _ = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    fast = loaded_by_run(tree, library, command, env)
    assert "patchkit.engine.guard" in fast
    assert [m for m in fast if m.startswith(("importlib.resources", "importlib.readers", "zipfile"))] == []


def test_a_warm_run_still_refuses_a_tree_changed_since_it_last_launched(launch, tmp_path):
    """The findings kept by one run answer the next only while every file they read is unchanged,
    and the record stands in for the series only while every file it records is as written."""
    tree, library, command, env, marker = launch
    env, kept = own_cache(env, tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    for _ in range(2):
        _, done = patchkit_run(tree, library, command, env)
        assert done.returncode == 7, done.stderr
    assert len(list(kept.glob("*.json"))) == 1

    registry = tree / REGISTRY
    stock_registry = registry.read_text()
    registry.write_text(
        stock_registry.replace('"KimiK25ForConditionalGeneration": ("kimi_k25", ', '"Other": ("kimi_k25", ')
    )
    marker.unlink()
    _, done = patchkit_run(tree, library, command, env)
    assert_clean_failure(done, 1)
    assert "supports-eagle3" in done.stdout and "does not register" in done.stdout and not marker.exists()

    registry.write_text(stock_registry)
    with (tree / KIMI).open("a") as handle:
        handle.write("# an edit after apply\n")
    _, done = patchkit_run(tree, library, command, env)
    assert_clean_failure(done, 1)
    assert "tree-state" in done.stdout and "changed after patchkit wrote them" in done.stdout
    assert not marker.exists()


def test_kept_findings_are_believed_only_under_this_users_seal(launch, tmp_path):
    """A kept entry edited to say every finding passed (its seal left as it was) is not believed."""
    tree, library, command, env, marker = launch
    env, kept = own_cache(env, tmp_path)
    narrow = write_model(tmp_path / "narrow-drafter", {**DRAFTER, "hidden_size": 4096, "target_hidden_size": 4096})
    command = serve(command[2], narrow)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    _, done = patchkit_run(tree, library, command, env)
    assert_clean_failure(done, 1)
    assert "drafter-hidden-size" in done.stdout

    (entry,) = kept.glob("*.json")
    planted = json.loads(entry.read_text())
    for finding in planted["entry"]["findings"]:
        finding["ok"], finding["fix"] = True, None
    entry.write_text(json.dumps(planted))
    _, done = patchkit_run(tree, library, command, env)
    assert_clean_failure(done, 1)
    assert "drafter expects hidden size 4096, target has 7168" in done.stdout and not marker.exists()


def test_a_fifo_in_the_set_keeps_nothing_and_never_hangs(launch, tmp_path):
    """The library is untrusted input: the fast path hashes the set's files into its key, each read as a
    regular file only, so a fifo planted there is never opened for reading; the launch goes on, unkept."""
    tree, library, command, env, _ = launch
    env, kept = own_cache(env, tmp_path)
    os.mkfifo(library / "eagle3" / "planted")
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    _, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 7, done.stderr
    assert not list(kept.glob("*.json"))


def test_a_damaged_record_is_refused_by_run_as_by_every_command(launch, tmp_path):
    """The fast path reads state.json as the untrusted input it is: a record that does not parse says
    nothing there, and the full way refuses it (exit 2, naming the file), after a warm run too."""
    tree, library, command, env, marker = launch
    env, _ = own_cache(env, tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    assert patchkit_run(tree, library, command, env)[1].returncode == 7
    marker.unlink()
    state = tree / ".patchkit" / "state.json"
    state.write_text(state.read_text().replace('"entries"', '"entries": 1, "x"', 1))
    _, done = patchkit_run(tree, library, command, env)
    assert_clean_failure(done, 2)
    assert "state.json" in done.stderr and not marker.exists()


def test_kept_findings_are_not_reused_for_a_launch_environment_that_imports_or_plugs_in_otherwise(launch, tmp_path):
    """PYTHONPATH or VLLM_PLUGINS changed in the environment the launch inherits: its own entry."""
    tree, library, command, env, _ = launch
    env, kept = own_cache(env, tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    for changed in ({}, {}, {"PYTHONPATH": str(tmp_path / "elsewhere")}, {"VLLM_PLUGINS": "other"}):
        _, done = patchkit_run(tree, library, command, {**env, **changed})
        assert done.returncode == 7, done.stderr
    assert len(list(kept.glob("*.json"))) == 3


# envs.py as 0.12+ spells it: entries outside any VLLM_ prefix, each read after the model's load
ENVS_READ_AFTER_LOAD = (
    "environment_variables = {\n"
    '    "VERBOSE": lambda: bool(int(os.getenv("VERBOSE", "0"))),\n'
    '    "Q_SCALE_CONSTANT": lambda: int(os.getenv("Q_SCALE_CONSTANT", "200")),\n'
    "}\n"
    "def enable_envs_cache():\n"
    "    pass\n"
)


def test_kept_findings_follow_every_variable_the_trees_envs_reads_in_each_order(launch, tmp_path):
    """review43a S8: VERBOSE=true fails vllm-environment; a run without it, then with it again, and a
    variable of envs.py set in the launch's own `env` prefix: each run's verdict is a fresh preflight's."""
    tree, library, command, env, marker = launch
    env, _ = own_cache(env, tmp_path)
    env = {k: v for k, v in env.items() if k not in ("VERBOSE", "Q_SCALE_CONSTANT")}
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / "vllm" / "envs.py").write_text(ENVS_READ_AFTER_LOAD)
    cases = [({"VERBOSE": "true"}, []), ({}, []), ({}, []), ({"VERBOSE": "true"}, []), ({}, ["Q_SCALE_CONSTANT=x"])]
    cases += [({}, []), ({}, ["Q_SCALE_CONSTANT=1"])]
    verdicts = []
    for variables, prefix in cases:
        launched = ["env", *prefix, *command] if prefix else command
        fresh = run_cli_read_only(
            "preflight",
            "--target",
            tree,
            "--patches",
            library,
            "--no-import",
            "--",
            *launched,
            env={**env, **variables},
        )
        _, done = patchkit_run(tree, library, launched, {**env, **variables})
        assert done.returncode == (7 if fresh.returncode == 0 else 1), (variables, prefix, fresh.stdout, done.stdout)
        assert marker.exists() == (fresh.returncode == 0)
        marker.unlink(missing_ok=True)
        verdicts.append(fresh.returncode)
    assert verdicts == [1, 0, 0, 1, 1, 0, 0]


@pytest.mark.parametrize(
    "variable", ["LANG=ja_JP.eucJP", "LC_ALL=ja_JP.SJIS", "LC_CTYPE=ja_JP.SJIS", "PATH=/elsewhere", "VERBOSE=1"]
)
def test_the_kept_findings_key_holds_the_locale_path_and_envs_variables(variable, tmp_path):
    """review43a S8: the chat template's encoding follows LANG/LC_*, the program's lookup PATH, the
    vllm-environment rule every variable of the tree's envs.py: each is part of the kept entry's key."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "envs.py").write_text(ENVS_READ_AFTER_LOAD)
    plain = parse(["/usr/bin/vllm", "serve", "m"])
    changed = parse(["env", variable, "/usr/bin/vllm", "serve", "m"])
    read = tree_reader(tmp_path)
    assert _launch_setting(plain, read) != _launch_setting(changed, read)


def test_a_launch_program_that_is_not_executable_says_which_file_and_how_to_fix_it(launch, tmp_path):
    """review30 L2: `vllm` on PATH without its executable bit: "cannot run vllm: Permission denied", no hint."""
    tree, library, command, env, marker = launch
    script = Path(env["PATH"].split(os.pathsep)[0]) / "vllm"
    script.chmod(0o644)
    _, done = patchkit_run(tree, library, command, env, "--no-preflight")
    assert_clean_failure(done, 4)
    said = " ".join(done.stderr.split())
    assert "cannot run vllm: Permission denied" in said, said
    assert f"{script} is not executable by you: make it so (`chmod +x {script}`)" in said, said
    assert not marker.exists()


def test_a_launch_program_not_on_path_says_how_to_name_it(launch, tmp_path):
    """`vllm` not on PATH: exit 4 with what to do, not a bare "No such file or directory"."""
    tree, library, command, env, marker = launch
    bare = {**env, "PATH": str(tmp_path / "empty")}
    _, done = patchkit_run(tree, library, command, bare, "--no-preflight")
    assert_clean_failure(done, 4)
    said = " ".join(done.stderr.split())
    assert "cannot run vllm: it is not on PATH" in said and "activate vLLM's venv" in said
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    (venv_bin / "vllm").write_text("#!/bin/sh\nexit 0\n")
    _, done = patchkit_run(tree, library, command, bare, "--no-preflight", "--python", str(venv_bin / "python"))
    assert_clean_failure(done, 4)
    assert f"`-- {venv_bin / 'vllm'} ...`" in " ".join(done.stderr.split()), done.stderr
    assert not marker.exists()


# `run` counting the parses of SpeculativeConfig's source (the command's findings), exec replaced.
PARSES_BY_RUN = """
import atexit, os, sys
from patchkit.launch import speculative
from patchkit.cli.main import main
parses = []
literal_tables = speculative.literal_tables
speculative.literal_tables = lambda source: parses.append(1) or literal_tables(source)
atexit.register(lambda: print(f"parses {len(parses)}", file=sys.stderr))
os.execvp = lambda *_: sys.exit(0)
sys.argv = ["patchkit", "run", *sys.argv[1:]]
main()
"""


def speculative_parses(tree: Path, library: Path, command: list[str], env: dict) -> tuple[int, str]:
    """(the times the run read SpeculativeConfig's Literals, its stdout)."""
    args = ["--target", str(tree), "--patches", str(library), "--", *command]
    done = subprocess.run([sys.executable, "-c", PARSES_BY_RUN, *args], capture_output=True, text=True, env=env)
    return int(done.stderr.strip().splitlines()[-1].split()[1]), done.stdout


def test_a_warm_run_keeps_the_commands_findings_and_judges_them_again_when_the_file_changes(launch, tmp_path):
    """Issue 21: the command's findings (SpeculativeConfig parsed from the installed source, ~4 ms)
    are kept with the set's: a warm run parses nothing; a SpeculativeConfig that changed since (one
    that no longer names eagle3) is parsed again, and refuses the launch."""
    tree, library, command, env, _ = launch
    env, kept = own_cache(env, tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    assert speculative_parses(tree, library, command, env)[0] == 1
    assert speculative_parses(tree, library, command, env)[0] == 0
    spec = tree / SPEC
    spec.write_text(spec.read_text().replace('Literal["eagle", "eagle3", ', 'Literal["eagle", '))
    parses, stdout = speculative_parses(tree, library, command, env)
    assert parses == 1 and "speculative-config" in stdout and "none of its methods" in stdout
    assert len(list(kept.glob("*.json"))) == 1  # the same key: its entry replaced


def test_patchkits_code_is_named_by_its_files_stat_and_a_rewrite_at_the_same_size_and_time_changes_it(tmp_path):
    """The key names patchkit's code by each file's stat, not its bytes: a file rewritten with the
    same size and its modification time set back still changes it (the change time moves)."""
    from patchkit.launch.shortcut import _code_files

    code = tmp_path / "patchkit"
    (code / "launch" / "__pycache__").mkdir(parents=True)
    (code / "launch" / "x.py").write_text("A = 1\n")
    (code / "launch" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    (code / "notes.txt").write_text("not code")
    before = _code_files(code)
    assert [name for name, *_ in before] == [os.path.join("launch", "x.py")]
    stat = (code / "launch" / "x.py").stat()
    time.sleep(0.01)
    (code / "launch" / "x.py").write_text("A = 2\n")
    os.utime(code / "launch" / "x.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = _code_files(code)
    assert after[0][:4] == before[0][:4] and after != before


def test_patchkits_code_and_library_are_named_by_relative_paths_worked_out_once_a_directory(tmp_path, monkeypatch):
    """Issue 21: each file named as os.path.relpath names it, its directory's relative path worked
    out once (relpath of each of patchkit's 150 files was ~1 ms of the fast path)."""
    from patchkit.launch.shortcut import _code_files, _files_digest

    code = tmp_path / "patchkit"
    for directory in ("", "launch", "cli/ui"):
        (code / directory).mkdir(parents=True, exist_ok=True)
        for name in ("a.py", "b.py", "c.py"):
            (code / directory / name).write_text(name)
    relpaths = []
    relpath = os.path.relpath
    monkeypatch.setattr(os.path, "relpath", lambda *args: relpaths.append(args) or relpath(*args))
    named = [name for name, *_ in _code_files(code)]
    assert named == sorted(relpath(path, code) for path in code.rglob("*.py")) and len(named) == 9
    assert len(relpaths) == 4  # one a directory
    digest = hashlib.sha256()
    for path in sorted(code.rglob("*.py"), key=str):
        digest.update(f"\0{relpath(path, code)}\0".encode() + path.read_bytes())
    assert _files_digest(code) == digest.hexdigest() and len(relpaths) == 8


# --- `run --apply` with several sets (issue 23) -----------------------------------------------------

TOOLS = "vllm/tool_parsers/demo_tool_parser.py"


@pytest.fixture
def two_sets(launch, tmp_path):
    """The launch's library with a second set, `tools` (one file of its own), after eagle3 in library.toml."""
    tree, library, command, env, marker = launch
    parser = tree / TOOLS
    parser.parent.mkdir(parents=True)
    parser.write_text("def parse(text):\n    return text\n")
    write_library(
        library,
        {"0.16.0": [make_patch(tmp_path, tree, {TOOLS: "def parse(text):\n    return text.strip()\n"})]},
        name="tools",
    )
    (library / "library.toml").write_text('order = ["eagle3", "tools"]\n')
    return tree, library, command, env, marker


def test_apply_applies_every_covering_set_each_recorded_then_launches(two_sets):
    tree, library, command, env, marker = two_sets
    stock = snapshot(tree)
    pid, done = patchkit_run(tree, library, command, env, "--apply")
    assert done.returncode == 7, done.stdout + done.stderr
    assert f"pid {pid}\n" in done.stdout and marker.exists()
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3", "tools"]
    assert "2 set(s) applied (eagle3, tools)" in done.stdout
    assert (tree / TOOLS).read_text().endswith("text.strip()\n")
    status = run_cli_read_only("status", "--target", tree, "--patches", library, "--format", "json")
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "applied"

    marker.unlink()  # applied: nothing more to apply, the launch goes on
    _, again = patchkit_run(tree, library, command, env, "--apply")
    assert again.returncode == 7 and marker.exists() and "applied (" not in again.stdout
    assert run_cli_writing("revert", "--target", tree, "--patches", library).returncode == 0
    assert snapshot(tree) == stock


def test_apply_applies_only_the_sets_not_applied(two_sets):
    tree, library, command, env, _ = two_sets
    assert (
        run_cli_writing("apply", "--target", tree, "--patches", library, "--set", "eagle3", "--no-import").returncode
        == 0
    )
    _, done = patchkit_run(tree, library, command, env, "--apply")
    assert done.returncode == 7, done.stdout + done.stderr
    assert "1 set(s) applied (tools)" in done.stdout
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3", "tools"]


def test_a_repeated_set_narrows_the_sets_run_applies(two_sets):
    tree, library, command, env, _ = two_sets
    _, done = patchkit_run(tree, library, command, env, "--apply", "--set", "tools", "--set", "eagle3")
    assert done.returncode == 7, done.stdout + done.stderr
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3", "tools"]

    assert run_cli_writing("revert", "--target", tree, "--patches", library).returncode == 0
    _, one = patchkit_run(tree, library, command, env, "--apply", "--set", "tools")
    assert [e.set_name for e in read_state(tree).entries] == ["tools"]  # eagle3 left as it is
    assert one.returncode == 7, one.stdout + one.stderr  # the preflight judges the tools set alone


def test_with_every_set_applied_a_warm_run_takes_the_fast_path_and_any_sets_change_leaves_it(two_sets):
    """Issue 21/23: a record of several sets answers for each of them (it used to need exactly one
    entry, so every run took the full way under the lock); a file of any one set changed since it
    was applied sends the run the full way again, which refuses it."""
    tree, library, command, env, marker = two_sets
    locking = ("patchkit.engine.transaction", "patchkit.base.locks", "fcntl", "mmap")
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    assert [e.set_name for e in read_state(tree).entries] == ["eagle3", "tools"]
    loaded_by_run(tree, library, command, env)  # cold: the findings are kept
    fast = loaded_by_run(tree, library, command, env)
    assert "patchkit.launch.shortcut" in fast and [m for m in fast if m in locking] == []

    for path in (TOOLS, KIMI):  # one file of each set, each changed alone
        original = (tree / path).read_text()
        (tree / path).write_text(original + "# an edit after apply\n")
        slow = loaded_by_run(tree, library, command, env, exit_code=1)
        assert sorted(m for m in slow if m in locking) == sorted(locking), path
        _, done = patchkit_run(tree, library, command, env)
        assert_clean_failure(done, 1)
        assert "changed after patchkit wrote them" in done.stdout and not marker.exists(), path
        (tree / path).write_text(original)
        assert [m for m in loaded_by_run(tree, library, command, env) if m in locking] == []


# `run` with its exec replaced, counting what it reads: each file of the tree opened, each directory
# of patchkit's code listed (audit events: whoever opens or lists them)
READS_BY_RUN = """
import atexit, json, os, sys
from collections import Counter
import patchkit
from patchkit.cli.main import main
opened, listed = Counter(), Counter()
code, tree = os.path.dirname(patchkit.__file__), os.path.realpath(sys.argv[2])
def count(event, args):
    if event in ("open", "os.scandir") and isinstance(args[0], str):
        path = os.path.realpath(args[0])
        if event == "open" and path.startswith(tree + os.sep):
            opened[os.path.relpath(path, tree)] += 1
        elif event == "os.scandir" and path.startswith(code):
            listed[path] += 1
sys.addaudithook(count)
atexit.register(lambda: print(json.dumps([opened, listed]), file=sys.stderr))
os.execvp = lambda *_: sys.exit(0)
sys.argv = ["patchkit", "run", *sys.argv[1:]]
main()
"""


def reads_by_run(tree: Path, library: Path, command: list[str], env: dict, *options: str) -> list[dict[str, int]]:
    """[{tree file: times opened}, {directory of patchkit's code: times listed}] of one `run`."""
    args = ["--target", str(tree), "--patches", str(library), *options, "--", *command]
    done = subprocess.run([sys.executable, "-c", READS_BY_RUN, *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_a_warm_run_checks_the_record_and_names_patchkits_code_once_however_many_sets(two_sets):
    """Issue 21: the record's check (each file of every set hashed) and the stat of patchkit's code
    are done once a run, not once a set: with two sets judged, the tools set's file is opened and
    patchkit's code listed as often as when eagle3 alone is (each set's run used to do both)."""
    tree, library, command, env, _ = two_sets
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    for options in ((), ("--set", "eagle3")):  # cold: each keeps its findings
        reads_by_run(tree, library, command, env, *options)
    opened_one, listed_one = reads_by_run(tree, library, command, env, "--set", "eagle3")
    opened_both, listed_both = reads_by_run(tree, library, command, env)
    assert "patchkit.engine.transaction" not in loaded_by_run(tree, library, command, env)  # the fast path
    assert opened_one[TOOLS] >= 1 and opened_both[TOOLS] == opened_one[TOOLS]
    assert listed_one and listed_both == listed_one


# `run` with its exec replaced, counting the hints it built (hints.command: each a command to paste)
HINTS_BY_RUN = """
import atexit, os, sys
from patchkit.base import hints
from patchkit.cli.main import main
built, command = [], hints.command
hints.command = lambda *words, **options: built.append(words) or command(*words, **options)
atexit.register(lambda: print(f"hints {len(built)}", file=sys.stderr))
os.execvp = lambda *_: sys.exit(0)
sys.argv = ["patchkit", "run", *sys.argv[1:]]
main()
"""


def test_a_passing_run_with_no_plugin_to_name_builds_no_hint(launch):
    """Issue 21: the full preflight's command (the hint under a failure, or under the plugins not
    judged) is built only when it is said: a passing launch with no general plugin builds none."""
    tree, library, command, env, _ = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    args = ["--target", str(tree), "--patches", str(library), "--", *command]
    for _ in range(2):  # cold, then the fast path
        done = subprocess.run([sys.executable, "-c", HINTS_BY_RUN, *args], capture_output=True, text=True, env=env)
        assert done.returncode == 0 and done.stderr.strip().splitlines()[-1] == "hints 0", done.stderr


def test_the_hint_of_a_refused_run_is_a_preflight_of_the_same_launch_as_printed(launch):
    """The hint names the launch whole (a `COMMAND` placeholder, pasted, was `not a vLLM launch`):
    copied as printed it checks that launch on that tree, and fails as run did."""
    tree, library, command, env, marker = launch  # a stock tree: the preflight refuses it
    _, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 1 and not marker.exists(), done.stderr
    (hint,) = [line for line in done.stderr.splitlines() if line.startswith("hint: `patchkit preflight")]
    words = shlex.split(hint.removeprefix("hint: ").split("`")[1])
    again = subprocess.run([sys.executable, "-m", *words], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "not a vLLM launch" not in again.stderr and "tree-state" in again.stdout, again.stdout


def test_the_fast_path_loads_no_workers_waits(launch):
    """A worker's process and its waits (patchkit.tree.process: select, selectors, subprocess) load
    only where a worker runs: tree.target, which every command loads, no longer imports them."""
    tree, library, command, env, _ = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    fast = loaded_by_run(tree, library, command, env)
    assert "patchkit.tree.target" in fast
    assert [m for m in fast if m in ("select", "selectors", "subprocess", "patchkit.tree.process")] == []


def test_run_help_states_the_exit_codes_a_failed_preflight_gives(run):
    """new-user s12 item 5: the help said 1 for any failed check; a missing config.json is 4."""
    said = " ".join(run("run", "--help").output.split())
    assert "exit code is 1." not in said
    for code, why in (("1", "a check failed"), ("3", "no patch set"), ("4", "config.json")):
        assert f"{code} " in said and why in said, said


def test_stale_bytecode_under_the_launchs_pycache_prefix_is_not_launched_and_its_removal_is_named(launch, tmp_path):
    """Issue 20 (review 18 H1): run's fast path reads the tree's state from its record and imports
    nothing, so only the bytecode under the launch's PYTHONPYCACHEPREFIX tells that the patch would
    never run; a warm run judges it again, and the named fix, run, lets the launch go."""
    tree, library, command, env, marker = launch
    env, _ = own_cache(env, tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    # the first launch is warm: its findings kept
    prefixed, pyc, done = stale_under_a_prefix(tree, library, command, env, marker, tmp_path / "pfx", KIMI)
    assert_clean_failure(done, 1)
    said = " ".join(done.stdout.split())
    assert not marker.exists() and f"{pyc} (under the pycache prefix) is unchecked-hash bytecode" in said, said
    fix = said.partition("run `rm -f -- ")[2].partition("`")[0]
    assert fix == str(pyc), said
    subprocess.run(["rm", "-f", "--", fix], check=True)
    assert patchkit_run(tree, library, prefixed, env)[1].returncode == 7


def test_a_mistyped_option_is_not_launched_and_gets_the_option_it_looks_like(launch):
    """New-user trial 26 s3: `--tensor-paralel-size 8` was refused with the parser's words alone:
    no `did you mean`, no fix, no line saying the launch did not run."""
    tree, library, command, env, marker = launch
    _, done = patchkit_run(tree, library, [*command, "--tensor-paralel-size", "8"], env)
    assert_clean_failure(done, 2)
    assert not marker.exists()
    said = " ".join(done.stderr.split())
    assert "unrecognized arguments: --tensor-paralel-size 8" in said, said
    assert "hint: did you mean --tensor-parallel-size?" in said, said
    assert said.rstrip().endswith("error: not launched: fix the launch command, then run it again"), said


@pytest.mark.parametrize("apply_first", [False, True])
def test_a_damaged_record_is_not_launched_saying_the_tree_needs_its_repair(launch, apply_first):
    """Review38 B8: a refusal of the tree's own record (exit 2) ended with "fix the launch command",
    though the command was right: the end says the tree needs the repair named above it, which
    once made lets the same command run."""
    tree, library, command, env, marker = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    record = Path(tree) / ".patchkit/state.json"
    good = record.read_bytes()
    record.write_text('{"chosen": [')
    _, done = patchkit_run(tree, library, command, env, *(["--apply"] if apply_first else []))
    assert_clean_failure(done, 2)
    said = " ".join(done.stderr.split())
    assert f"{record} is damaged" in said and not marker.exists(), said
    assert "fix the launch command" not in said, said
    if not apply_first:  # (--apply: apply's own refusal ends the run, as any failed apply)
        assert said.endswith("error: not launched: the tree needs the repair above first, then run it again"), said
    record.write_bytes(good)
    assert patchkit_run(tree, library, command, env)[1].returncode == 7


def test_stale_checked_hash_bytecode_stops_a_run_whose_python_never_checks_hashes(launch):
    """A checked-hash .pyc of the stock file runs unchecked under --check-hash-based-pycs never:
    run reads the option from the launch and does not launch; the .pyc gone, it launches."""
    import importlib.util
    import py_compile

    tree, library, command, env, marker = launch
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    python = Path(env["PATH"].split(os.pathsep)[0]) / "python3"  # the stand-in's launch; else this Python
    stand_in = (python.parent / "vllm").read_text().partition("\n")[2]
    python.write_text(f'#!/bin/sh\ncase " $* " in *" -m "*)\n{stand_in};;\nesac\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    env = {**env, "PYTHONPATH": str(tree)}  # its vLLM: the tree's
    stock = tree.parent / "stock-kimi_k25.py"
    stock.write_bytes(b"# the stock file, as an image compiled it\n")
    pyc = importlib.util.cache_from_source(str(tree / KIMI))
    checked = py_compile.PycInvalidationMode.CHECKED_HASH
    py_compile.compile(str(stock), cfile=pyc, doraise=True, invalidation_mode=checked)
    api = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", *command[2:]]
    first = patchkit_run(tree, library, api, env)[1]
    assert first.returncode == 7, first.stdout + first.stderr  # Python compares the hash: launched
    marker.unlink()
    never = ["python3", "--check-hash-based-pycs", "never", *api[1:]]
    _, done = patchkit_run(tree, library, never, env)
    assert_clean_failure(done, 1)
    said = " ".join(done.stdout.split())
    assert not marker.exists() and "is checked-hash bytecode compiled from other bytes than " + KIMI in said, said
    assert f"run `rm -f -- {pyc}`" in said, said
    os.unlink(pyc)
    assert patchkit_run(tree, library, never, env)[1].returncode == 7
