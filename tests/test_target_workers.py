"""patchkit/_target: the code run in the target's interpreter, as files of their own, through one runner."""

from __future__ import annotations

import ast
import json
import os
import sys
import threading
import warnings
from pathlib import Path

import pytest

import patchkit._target
from patchkit.base import remembered
from patchkit.base.errors import TargetError
from patchkit.tree import process
from patchkit.tree import target as target_mod
from patchkit.tree.target import WorkerFailed, run_worker

WORKERS_DIR = Path(patchkit._target.__file__).parent
WORKERS = sorted(p for p in WORKERS_DIR.glob("*.py") if p.name != "__init__.py")


def test_every_worker_is_there():
    # guard: not run by run_worker, but copied into the target (`apply`'s launch guard), held to the same rules;
    # drafter_build: engine_config's, loaded beside it by path
    assert {p.stem for p in WORKERS} == {
        "bytecode",
        "compile_sources",
        "drafter_build",
        "engine_config",
        "guard",
        "import_probe",
        "locate",
        "model_interface",
        "serve_reading",
        "serve_spec",
    }


@pytest.mark.parametrize("worker", WORKERS, ids=lambda p: p.name)
def test_a_worker_is_python_3_9_and_imports_only_the_standard_library(worker):
    tree = ast.parse(worker.read_bytes(), feature_version=(3, 9))  # SyntaxError for 3.10+ syntax
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"__future__"} <= sys.stdlib_module_names, worker.name


def test_a_worker_answers_the_same_in_process_and_by_path():
    request = {"sources": {"ok.py": "x = 1\n", "bad.py": "def f(:\n", "nul.py": "x = '\0'\n"}}
    in_process = run_worker(sys.executable, "compile_sources", request, timeout=60)
    by_path = run_worker(sys.executable, "compile_sources", request, timeout=60, in_process=False)
    assert by_path == in_process
    assert "ok.py" not in by_path and by_path["bad.py"].startswith("line 1: ")


def test_a_worker_that_fails_is_a_target_error_with_its_error_output():
    with pytest.raises(WorkerFailed) as failed:
        run_worker(sys.executable, "compile_sources", {"no sources": 1}, timeout=60, in_process=False)
    assert isinstance(failed.value, TargetError)
    assert failed.value.status == 1 and "KeyError" in failed.value.stderr
    assert failed.value.partial == {} and not failed.value.timed_out


def test_a_missing_interpreter_is_a_target_error(tmp_path):
    with pytest.raises(WorkerFailed, match="interpreter not found"):
        run_worker(str(tmp_path / "python"), "locate", {}, timeout=60)


def test_a_worker_past_its_timeout_is_killed_with_what_it_answered_so_far(tmp_path):
    """The import probe saves its answer after every step; a hang leaves the step it hung on."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    request = {"root": str(tmp_path), "modules": [], "probe": None, "version": None, "files": []}
    with pytest.raises(WorkerFailed) as failed:
        run_worker(sys.executable, "import_probe", request, timeout=2, in_process=False, isolated=False)
    assert failed.value.timed_out and "did not finish within 2 s" in failed.value.message
    assert failed.value.partial == {"done": False, "modules": {}, "step": "importing vllm"}


def test_locate_reports_this_interpreter_without_importing_vllm(tmp_path):
    answer = run_worker(sys.executable, "locate", {"package": "json"}, timeout=60, in_process=False)
    assert answer["python_version"] == list(sys.version_info[:3])
    assert Path(answer["package_dir"]) == Path(json.__file__).parent


def test_locate_sees_pythonpath_as_vllm_would(tmp_path, monkeypatch):
    """Not isolated (-I): a vllm found through PYTHONPATH is the one that interpreter runs."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert target_mod.from_interpreter(sys.executable).root == tmp_path.resolve()


def test_the_workers_directory_shadows_nothing_the_target_imports(tmp_path):
    """Run by path, a worker's directory would be sys.path[0]: its modules must not be importable there."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(
        "import importlib.util\nassert importlib.util.find_spec('locate') is None, 'shadowed'\n"
    )
    request = {"root": str(tmp_path), "modules": [], "probe": None, "version": None, "files": []}
    report = run_worker(sys.executable, "import_probe", request, timeout=60, in_process=False, isolated=False)
    assert report["done"] and report["vllm"]["ok"], report


def test_a_content_is_compiled_once_per_interpreter(tmp_path, monkeypatch):
    """apply checks the same contents as planned and as written: the second time costs no compile,
    unless another interpreter (or another content) is asked."""
    from patchkit.checks import syntax

    asked = []
    judge = syntax._judge

    def counting(sources, python):
        asked.append(sorted(sources))
        return judge(sources, python)

    monkeypatch.setattr(syntax, "_judge", counting)
    monkeypatch.setattr(syntax, "_JUDGED", {})
    monkeypatch.setattr(remembered, "_entry", lambda check, key: None)  # this process's memo alone
    first = syntax.compile_sources({"a.py": b"x = 1\n", "b.py": b"def f(:\n"}, sys.executable)
    assert list(first) == ["b.py"] and first["b.py"].startswith("line 1: ")
    again = syntax.compile_sources({"c.py": b"x = 1\n", "d.py": b"def f(:\n"}, sys.executable)  # moved, same bytes
    assert again == {"d.py": first["b.py"]} and asked == [["a.py", "b.py"]]
    assert syntax.compile_sources({"a.py": b"x = 2\n", "b.py": b"def f(:\n"}, sys.executable) == first
    assert asked[-1] == ["a.py"]  # only the changed content
    other = tmp_path / "python"
    other.symlink_to(sys.executable)
    assert syntax.compile_sources({"b.py": b"def f(:\n"}, str(other)) == first
    assert asked[-1] == ["b.py"]


def test_the_compile_memo_emptied_when_full_still_judges_what_it_held(monkeypatch):
    from patchkit.checks import syntax

    monkeypatch.setattr(syntax, "_JUDGED", {})
    syntax.compile_sources({f"f{i}.py": f"x = {i}\n".encode() for i in range(4097)}, None)
    assert syntax.compile_sources({"a.py": b"x = 0\n", "b.py": b"def (:\n"}, None) == {
        "b.py": syntax.compile_sources({"c.py": b"def (:\n"}, None)["c.py"]
    }


def test_a_wrapper_script_as_the_interpreter_is_asked_each_time(monkeypatch, tmp_path):
    """A `#!` script as --python may start another Python each time (a pyenv shim, a wrapper that
    reads the environment): its file does not name the compiler, so nothing is remembered for it."""
    from patchkit.checks import syntax

    asked = []
    judge = syntax._judge

    def counting(sources, python):
        asked.append(python)
        return judge(sources, python)

    monkeypatch.setattr(syntax, "_judge", counting)
    monkeypatch.setattr(syntax, "_JUDGED", {})
    monkeypatch.setattr(remembered, "_entry", lambda check, key: None)  # this process's memo alone
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    for _ in range(2):
        assert syntax.compile_sources({"b.py": b"def f(:\n"}, str(wrapper))["b.py"].startswith("line 1: ")
    assert asked == [str(wrapper), str(wrapper)] and syntax._JUDGED == {}
    syntax.compile_sources({"b.py": b"def f(:\n"}, sys.executable)
    syntax.compile_sources({"b.py": b"def f(:\n"}, sys.executable)
    assert asked[2:] == [sys.executable]  # a real interpreter's file: judged once


def test_an_interpreter_replaced_by_a_fifo_after_its_stat_does_not_hang_the_memo(monkeypatch, tmp_path):
    """The stat saw a regular file; by the open, a fifo is there (no writer ever comes): an open()
    would block for ever. Opened without blocking and looked at as opened, it names no compiler."""
    from patchkit.checks import syntax

    fifo = tmp_path / "python"
    os.mkfifo(fifo)
    regular = os.stat(sys.executable)

    class StatSeesAFile:  # os, save that the stat saw a regular file there
        def __getattr__(self, name):
            return getattr(os, name)

        def stat(self, path):
            return regular

    monkeypatch.setattr(syntax, "os", StatSeesAFile())
    found = []
    worker = threading.Thread(target=lambda: found.append(syntax._interpreter(str(fifo))), daemon=True)
    worker.start()
    worker.join(10)
    assert found == [None]


@pytest.mark.parametrize(
    "source",
    [b"x = 1\n", b"def f(:\n", b"def f():\n    pass\nreturn 1\n", b"x = 1\0\n", b"nonlocal x\n", b"\xff = 1\n"],
)
def test_this_interpreters_verdict_is_the_workers(source):
    """In-process, syntax compiles the bytes; a worker in its own process compiles the text: one verdict."""
    from patchkit.checks import syntax

    text = source.decode("utf-8", "surrogateescape")
    by_worker = run_worker(sys.executable, "compile_sources", {"sources": {"m.py": text}}, timeout=60, in_process=False)
    assert syntax._judge({"m.py": source}, None) == by_worker


def test_verdicts_are_remembered_across_runs_and_only_this_users(monkeypatch, tmp_path):
    """A new process (the memo empty) takes the sealed verdict instead of compiling; an entry this
    user's patchkit did not write is not believed."""
    from patchkit.checks import syntax

    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache"))
    asked = []
    judge = syntax._judge
    monkeypatch.setattr(
        syntax, "_judge", lambda sources, python: asked.append(sorted(sources)) or judge(sources, python)
    )
    sources = {"a.py": b"x = 1\n", "b.py": b"def f(:\n"}
    monkeypatch.setattr(syntax, "_JUDGED", {})
    first = syntax.compile_sources(sources, None)
    monkeypatch.setattr(syntax, "_JUDGED", {})  # the next run
    assert syntax.compile_sources(sources, None) == first and asked == [["a.py", "b.py"]]
    entries = sorted((tmp_path / "cache" / "verdicts" / "syntax").rglob("*.json"))
    assert len(entries) == 2
    for entry in entries:  # "compiles", for both, by someone without the key
        entry.write_text(json.dumps({"seal": "0" * 64, "verdict": None}))
    monkeypatch.setattr(syntax, "_JUDGED", {})
    assert syntax.compile_sources(sources, None) == first and asked[-1] == ["a.py", "b.py"]


@pytest.mark.parametrize("linked", ["verdicts", "verdicts/syntax"])
def test_a_symlinked_verdicts_directory_is_never_read_or_written_through(monkeypatch, tmp_path, linked):
    from patchkit.checks import syntax

    cache = tmp_path / "cache"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / linked).parent.mkdir(parents=True, exist_ok=True)
    (cache / linked).symlink_to(elsewhere)
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(cache))
    monkeypatch.setattr(syntax, "_JUDGED", {})
    assert syntax.compile_sources({"b.py": b"def f(:\n"}, None)
    assert list(elsewhere.rglob("*")) == []


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # reaped or a zombie: no longer running


def test_an_interrupt_kills_the_workers_whole_process_group(tmp_path):
    import signal
    import time

    pidfile = tmp_path / "grandchild"

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            process.run(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], "", timeout=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)


WARNS = {"literal.py": b"x = 1\nassert x is 1\n", "escape.py": b"pattern = '\\d'\n"}  # SyntaxWarnings


def test_a_warning_is_no_syntax_verdict_whatever_the_filters_of_patchkit_or_the_worker(monkeypatch):
    """'"is" with a literal' (a compiler warning) and an invalid escape: the module imports under the
    default filters, so it compiles. Under `-W error` (patchkit's own filters, or the worker's
    PYTHONWARNINGS) the verdict was "line 2: "is" with a literal", a failure for a file that runs."""
    from patchkit.checks import syntax

    monkeypatch.setattr(syntax, "_JUDGED", {})
    monkeypatch.setattr(remembered, "_entry", lambda check, key: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert syntax.compile_sources(WARNS, None) == {}
    monkeypatch.setenv("PYTHONWARNINGS", "error")
    request = {"sources": {path: data.decode() for path, data in WARNS.items()}}
    assert run_worker(sys.executable, "compile_sources", request, timeout=60, in_process=False) == {}
