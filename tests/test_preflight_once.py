"""What one preflight or run tells once (issue 21, house26): whether --python imports another vLLM than
the tree's, and the tree's record on run's fast path; and which passing findings are said as notes
(a flag of the finding, not how its text begins)."""

from __future__ import annotations

import pytest
from helpers import cli_runner
from launch_fixtures import (
    LEFT_OUT,
    TOOLS,
    eagle3_and_tools,  # noqa: F401  (the fixture `setup`)
    serve,
)

from patchkit.launch import preflight as preflight_mod
from patchkit.launch import shortcut
from patchkit.launch.command import frame
from patchkit.launch.findings import Finding
from patchkit.launch.preflight import TREE, PreflightResult
from patchkit.tree.target import Target


def test_a_pass_is_a_note_by_its_flag_not_by_how_its_text_begins():
    noted = Finding(TREE, True, "tools (--tool-call-parser demo) left out by --set: recorded applied", note=True)
    plain = Finding(TREE, True, "this launch needs nothing more: the eagle3 series is applied")
    result = PreflightResult(frame(["vllm", "serve", "org/m"]), findings=[plain, noted])
    assert result.notes == [noted.message]


@pytest.fixture
def imports_another_told(monkeypatch) -> list[int]:
    """Each time Target.python_imports_another is asked (two realpaths), appended to the list returned."""
    told: list[int] = []
    asked = Target.python_imports_another.fget
    assert asked is not None

    def counted(target: Target) -> bool:
        told.append(1)
        return asked(target)

    monkeypatch.setattr(Target, "python_imports_another", property(counted))
    return told


@pytest.mark.parametrize("chosen", [("--set", "eagle3"), ()], ids=["one set", "every covering set"])
def test_a_preflight_asks_once_whether_python_imports_another_vllm(request, imports_another_told, chosen):
    tree, lib, target, drafter = request.getfixturevalue("setup")
    done = cli_runner()("preflight", "--target", tree, "--patches", lib, *chosen, "--", *serve(target, drafter))
    assert done.exit_code == 1 and "is not applied" in done.output, done.output
    assert len(imports_another_told) == 1


def test_runs_fast_path_holds_the_record_it_read_once_for_a_set_left_out(request, monkeypatch):
    """The record recorded_state read and found as written answers which left-out sets are applied:
    its files are not hashed again (as_written), nor state.json read again."""
    tree, lib, target, drafter = request.getfixturevalue("setup")
    invoke = cli_runner()
    assert invoke("apply", "--target", tree, "--patches", lib, "--set", "eagle3", "--no-import").exit_code == 0
    held: list[int] = []
    written = shortcut.as_written

    def counted(root, state):
        held.append(1)
        return written(root, state)

    monkeypatch.setattr(shortcut, "as_written", counted)
    monkeypatch.setattr(preflight_mod, "as_written", counted)
    done = invoke("run", "--target", tree, "--patches", lib, "--set", "eagle3", "--", *serve(target, drafter, *TOOLS))
    assert done.exit_code == 1 and LEFT_OUT in done.output, done.output
    assert len(held) == 1
