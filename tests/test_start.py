"""A Ctrl-C while patchkit starts (its modules loading) exits 130 with no traceback (issue 20, L1)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from patchkit.base.errors import INTERRUPTED
from patchkit.cli import main, start

# Started in the subprocess (site imports sitecustomize from PYTHONPATH): a real SIGINT to the process
# itself the moment the module named in PATCHKIT_TEST_SIGINT_AT starts to load.
SITECUSTOMIZE = textwrap.dedent("""\
    import os, signal, sys

    class _InterruptWhenLoading:
        def find_spec(self, name, path=None, target=None):
            if name == os.environ["PATCHKIT_TEST_SIGINT_AT"]:
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, _InterruptWhenLoading())
    """)


@pytest.mark.parametrize(
    "module",
    ["patchkit.cli.main", "click", "patchkit.cli.commands.status", "patchkit.cli.ui", "patchkit.engine.inspection"],
)
def test_a_sigint_while_patchkit_loads_exits_130_quietly(tmp_path, module):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PATCHKIT_TEST_SIGINT_AT": module}
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "status", "--target", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == INTERRUPTED, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert "Aborted!" not in done.stderr, done.stderr  # click's word and exit 1 (review 6 L7)


# The second Ctrl-C, as Python's handler raises it: at the first instruction of the next function that
# starts, here the one that says the first (a real signal lands there only by a rare timing).
SECOND_AT_THE_REPORT = textwrap.dedent("""\
    import sys

    def _second(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_interrupted_while_loading":
            sys.setprofile(None)
            raise KeyboardInterrupt

    sys.setprofile(_second)
    """)


def test_a_second_sigint_as_the_first_is_said_while_loading_exits_130_quietly(tmp_path):
    """Two Ctrl-Cs while patchkit loads: the second, raised before _interrupted_while_loading had
    ignored the rest, escaped its except clause as a traceback (double SIGINT, a few in a thousand)."""
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE + SECOND_AT_THE_REPORT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PATCHKIT_TEST_SIGINT_AT": "patchkit.cli.main"}
    command = [sys.executable, "-c", "from patchkit.cli.start import main; main()", "status"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == INTERRUPTED, (done.returncode, done.stderr)
    assert done.stderr == start.BEFORE_ANY_CHANGE, done.stderr


def test_the_console_script_is_the_guarded_entry_point():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '\n[project.scripts]\npatchkit = "patchkit.cli.start:main"\n' in pyproject
    assert start.INTERRUPTED == INTERRUPTED


def test_the_entry_point_sets_the_collector_before_importing_anything_heavy():
    """Issue 21: Python's default threshold collected 14 times while dataclasses, typing and click were
    imported (~2.8 ms of every start-up); cli.start sets cli.main's threshold first."""
    code = (
        "import gc, patchkit.cli\n"
        "gc.collect()\n"
        "collected = []\n"
        "gc.callbacks.append(lambda phase, info: collected.append(phase))\n"
        "import patchkit.cli.start\n"
        "print(len(collected), gc.get_threshold())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split(maxsplit=1) == ["0", str(main.GC_THRESHOLD) + "\n"]
    assert start.GC_THRESHOLD == main.GC_THRESHOLD


def test_start_up_builds_no_enum_of_the_fleet_the_maintainer_tools_nor_the_matrix():
    """Issue 21: each enum costs start-up (~0.1 ms): base.enums holds the names of the layers below
    the commands; those of fleet, of refresh and port, and of the matrix live where they are used."""
    code = (
        "import patchkit.cli.main, patchkit.engine.resolve\n"
        "from patchkit.base.enums import StrEnum\n"
        "print(' '.join(sorted(c.__name__ for c in StrEnum.__subclasses__())))"
    )
    built = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "Outcome" in built
    elsewhere = {"NodeState", "FleetPhase", "RayFailure", "PatchChange", "SharedState", "PortOutcome", "MatrixCell"}
    assert elsewhere & set(built) == set()
