"""A signal in a command's last moments, after its own handling of signals has ended (review 5
guard L6: a double Ctrl-C in the last 0.1 s of `revert` killed patchkit by SIGINT with nothing on
stderr, the revert done): the process exits 128 + the signal's number with the usual one-line
message, truthful that the change is in place."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import crash_trials as ct
import pytest
from helpers import MODEL_PY, make_patch, run_cli, write_tree

from patchkit.base import signals
from patchkit.cli import start

MODEL = "vllm/models/model.py"


def applied_site(tmp_path: Path, scratch: Path, *, apply: bool = True) -> tuple[Path, Path]:
    """A small tree and a patch of its model.py, applied by patchkit unless `apply` is false."""
    site = write_tree(tmp_path / "site")
    diff = tmp_path / "model.diff"
    diff.write_bytes(make_patch(scratch, site, {MODEL: MODEL_PY.replace("return x", "return x * 2")}))
    if apply:
        assert run_cli("apply", "--target", site, "--patch", diff).returncode == 0
    return site, diff


def revert_under(
    tmp_path: Path, scratch: Path, script: str, *script_args: str
) -> tuple[Path, subprocess.CompletedProcess]:
    """`patchkit revert` of an applied patch, run by `script` (its arguments, then patchkit's)."""
    site, diff = applied_site(tmp_path, scratch)
    revert = ["revert", "--target", str(site), "--patch", str(diff)]
    done = subprocess.run(
        [sys.executable, "-c", script, *script_args, *revert], capture_output=True, text=True, timeout=120
    )
    return site, done


def assert_said_once_in_place(done: subprocess.CompletedProcess, signum: int) -> None:
    """Exit 128 + the signal, the revert's own line, then the one interrupt line: the revert is in place."""
    assert done.returncode == 128 + signum, (done.returncode, done.stderr)
    assert "reverted" in done.stdout, done.stdout
    assert "interrupted after the revert was written: it is in place, the files restored" in done.stderr, done.stderr
    assert done.stderr.count("interrupted") == 1 and "Traceback" not in done.stderr, done.stderr


# patchkit's console script, with two signals sent as the command's handling of them ends
LATE = """
import os, signal, sys
from contextlib import contextmanager
from patchkit.base import signals
from patchkit.cli import main as cli

real = signals.handled
LATE = int(sys.argv[1])

@contextmanager
def handled():
    with real():
        yield
    os.kill(os.getpid(), LATE)
    os.kill(os.getpid(), LATE)

signals.handled = handled
sys.argv = ["patchkit", *sys.argv[2:]]
cli.main()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_revert_ended_its_handling_exits_with_the_message(tmp_path, scratch, signum):
    site, done = revert_under(tmp_path, scratch, LATE, str(int(signum)))
    assert_said_once_in_place(done, signum)
    assert (site / MODEL).read_text() == MODEL_PY and not Path(site / ".patchkit/journal.json").exists()


# the console script, with a signal sent in the process's very last steps (its atexit handlers run)
EXITING = """
import atexit, os, sys
SIGNUM = int(sys.argv[1])
atexit.register(lambda: os.kill(os.getpid(), SIGNUM))
sys.argv = ["patchkit", *sys.argv[2:]]
from patchkit.cli.start import main
main()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_process_exits_is_said_not_dropped(tmp_path, scratch, signum):
    """Review 6 L7: a double Ctrl-C at the end of a revert sometimes ended exit 0 with nothing said:
    the signal came after the late-signal check, while the interpreter exited, and was ignored."""
    site, done = revert_under(tmp_path, scratch, EXITING, str(int(signum)))
    assert_said_once_in_place(done, signum)
    assert (site / MODEL).read_text() == MODEL_PY


def test_the_start_up_line_is_the_one_patchkit_says_before_any_change():
    signals.new_run()  # nothing done yet (another test in this process may have run a command)
    assert f"error: {signals.interrupted_report()[0]}\n" == start.BEFORE_ANY_CHANGE


# the console script, with a Ctrl-C that lands while a finalizer runs during the revert: Python
# drops what the handler raised there (the command never sees it) and would print its traceback
SWALLOWED = """
import os, signal, sys
from patchkit.engine import operations

real = operations.fix_bytecode

class Drop:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100000):  # the handler runs here, inside the finalizer
            pass

def fix_bytecode(*args, **kwargs):
    Drop()
    return real(*args, **kwargs)

operations.fix_bytecode = fix_bytecode
sys.argv = ["patchkit", *sys.argv[1:]]
from patchkit.cli.start import main
main()
"""


def test_an_interrupt_python_drops_in_a_finalizer_is_still_said_at_the_exit(tmp_path, scratch):
    site, done = revert_under(tmp_path, scratch, SWALLOWED)
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "interrupted after the revert was written: it is in place, the files restored" in done.stderr, done.stderr
    assert done.stderr.count("interrupted") == 1, done.stderr
    assert (site / MODEL).read_text() == MODEL_PY


# the console script, with a Ctrl-C that lands in importlib's module-lock weakref callback (run as an
# import ends: a lazy import of the command's body), the first one the command runs
IN_IMPORT_CALLBACK = """
import os, signal, sys
from contextlib import contextmanager
from patchkit.base import signals

real = signals.handled

def probe(frame, event, _arg):
    code = frame.f_code
    if event == "call" and code.co_name == "cb" and code.co_filename == "<frozen importlib._bootstrap>":
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)  # handled at the callback's next call: inside it

@contextmanager
def handled():
    with real():
        sys.setprofile(probe)
        try:
            yield
        finally:
            sys.setprofile(None)

signals.handled = handled
sys.argv = ["patchkit", *sys.argv[1:]]
from patchkit.cli.start import main
main()
"""


def test_an_interrupt_in_an_imports_weakref_callback_prints_no_traceback(tmp_path, scratch):
    """Review 42b F5: a Ctrl-C of apply printed "Exception ignored in: <function
    _get_module_lock.<locals>.cb>" and a traceback ending in signals._raise: the handler raised inside
    importlib's callback, where Python can only print and drop it. It is said once, at the exit."""
    site, diff = applied_site(tmp_path, scratch, apply=False)
    apply = ["apply", "--target", str(site), "--patch", str(diff), "--no-import"]
    done = subprocess.run(
        [sys.executable, "-c", IN_IMPORT_CALLBACK, *apply], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("error: interrupted") == 1, done.stderr
    said = run_cli("status", "--target", site, "--patch", diff)
    assert said.returncode == 0, said.stdout + said.stderr  # whole: applied (the line says so) or stock


def test_an_interrupt_an_earlier_command_of_this_process_raised_is_not_the_next_ones(tmp_path, scratch):
    """A process forked from one where a signal was raised (a test run, a warm server) inherits the
    record of it: the next command must not end 'interrupted' for it."""
    site, diff = applied_site(tmp_path, scratch, apply=False)
    try:
        with pytest.raises(signals.Interrupted):
            signals._raise(signal.SIGINT, None)  # as a handled Ctrl-C in this process raises it
        code, out = ct.run_cli(["apply", "--target", str(site), "--patch", str(diff)])
    finally:
        signals._raised.clear()
    assert code == 0 and "interrupted" not in out, out


# `patchkit revert` whose resolving step imports a module defining a class, and a SIGTERM arriving as that class's
# body runs a descriptor's __set_name__ (as a lazy import of a dataclass module does): Python 3.11 wraps the
# handler's raise in "RuntimeError: Error calling __set_name__"
IN_SET_NAME = """
import os, signal, sys
from patchkit.cli import main as cli
from patchkit.cli.commands import revert

class Arrives:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGTERM)

real = revert.resolve_for_revert

def resolve_for_revert(*args, **kwargs):
    class Imported:
        field = Arrives()
    return real(*args, **kwargs)

revert.resolve_for_revert = resolve_for_revert
sys.argv = ["patchkit", *sys.argv[1:]]
cli.main()
"""


@pytest.mark.parametrize("debug", ["", "1"])
def test_a_signal_python_wraps_in_another_error_is_the_signal_not_a_bug(tmp_path, tmp_path_factory, debug):
    site, diff = applied_site(tmp_path, tmp_path_factory.mktemp("scratch"))
    revert = ["revert", "--target", str(site), "--patch", str(diff)]
    env = {**os.environ, "PATCHKIT_DEBUG": debug}
    done = subprocess.run(
        [sys.executable, "-c", IN_SET_NAME, *revert], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 128 + signal.SIGTERM, (done.returncode, done.stderr)
    assert "patchkit bug" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "interrupted before any change was made" in done.stderr, done.stderr
    assert run_cli("status", "--target", site, "--patch", diff).returncode == 0  # still applied, whole


# the console script with stderr as strict as stdout, and a Ctrl-C that arrives while patchkit sets the
# NTH stream's encoding errors (TextIOWrapper.reconfigure builds a new encoder, Python code that a signal
# can cut): a stream left without an encoder took the interrupt's own line with it (exit 4, nothing said)
IN_RECONFIGURE = """
import os, signal, sys
import encodings.utf_8 as utf_8

NTH, seen = int(sys.argv[1]), []
real_init = utf_8.IncrementalEncoder.__init__

def arriving(self, *args, **kwargs):
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "_replace_what_streams_cannot_encode":
        frame = frame.f_back
    if frame is not None:
        seen.append(1)
        if len(seen) == NTH:
            os.kill(os.getpid(), signal.SIGINT)
    real_init(self, *args, **kwargs)

utf_8.IncrementalEncoder.__init__ = arriving
sys.stderr = open(2, "w", encoding="utf-8", errors="strict", closefd=False)
sys.argv = ["patchkit", *sys.argv[2:]]
from patchkit.cli.start import main
main()
"""


@pytest.mark.parametrize("nth", [1, 2], ids=["stdout", "stderr"])
def test_a_ctrl_c_while_the_output_streams_are_set_up_is_said_and_exits_130(tmp_path, nth):
    site = write_tree(tmp_path / "site")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    done = subprocess.run(
        [sys.executable, "-c", IN_RECONFIGURE, str(nth), "status", "--target", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 130, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("interrupted before any change was made") == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
