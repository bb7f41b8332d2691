"""Progress is drawn for a person only (issue 22): when stdout and stderr are both terminals and the
output is text; never when stdout is piped or the output is JSON (a reader of either gets none)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_patch, on_a_terminal, patched_spec, write_library, write_tree, write_wheel

HIDE_CURSOR = b"\x1b[?25l"  # what rich writes first when it draws a live line (a bar, a spinner)


@pytest.fixture
def wheel_and_library(tmp_path) -> tuple[Path, Path]:
    tree = write_tree(tmp_path / "stock")
    library = write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )
    return write_wheel(tmp_path / "in"), library


def stderr_drawn(args: list[object], *, stdout_terminal: bool) -> tuple[int, bytes]:
    """`python -m patchkit ARGS` with stderr a terminal (and stdout too, or nothing): its exit code
    and the bytes drawn on the terminal."""
    return on_a_terminal(args, stdout_terminal=stdout_terminal, drop_env=("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"))


def test_a_wheel_build_shows_its_progress_in_a_terminal(wheel_and_library, tmp_path):
    wheel, library = wheel_and_library
    code, drawn = stderr_drawn(["wheel", wheel, "--out", tmp_path / "out", "--patches", library], stdout_terminal=True)
    assert code == 0, drawn
    assert HIDE_CURSOR in drawn


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_progress_when_stdout_is_piped_or_json(wheel_and_library, tmp_path, fmt):
    wheel, library = wheel_and_library
    args = ["wheel", wheel, "--out", tmp_path / fmt, "--patches", library, "--format", fmt]
    code, drawn = stderr_drawn(args, stdout_terminal=False)
    assert code == 0, drawn
    assert HIDE_CURSOR not in drawn, drawn
    if fmt == "json":  # stdout a terminal too: a JSON reader still gets no bar
        code, drawn = stderr_drawn([*args[:3], tmp_path / "again", *args[4:]], stdout_terminal=True)
        assert code == 0 and HIDE_CURSOR not in drawn, drawn
