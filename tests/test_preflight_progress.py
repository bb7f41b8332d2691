"""`preflight` draws a live line in a terminal while it asks vLLM (new-user 22, M1: `--python` on a
real vLLM left the screen blank for minutes); none when stdout is piped, nor as JSON."""

from __future__ import annotations

import pytest
from helpers import on_a_terminal
from launch_fixtures import applied, stand_in_launch

HIDE_CURSOR = b"\x1b[?25l"  # what rich writes first when it draws a live line


@pytest.fixture
def launch(tmp_path, monkeypatch):
    tree, library, command, env, _marker = stand_in_launch(tmp_path)
    applied(tree, library)
    monkeypatch.setenv("PATH", env["PATH"])  # the stand-in `vllm` first, as the launch finds it
    return ["preflight", "--target", tree, "--patches", library], ["--", *command]


def drawn(args: list[object], *, stdout_terminal: bool) -> tuple[int, bytes]:
    return on_a_terminal(args, stdout_terminal=stdout_terminal, drop_env=("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"))


def test_preflight_shows_it_is_working_in_a_terminal(launch):
    options, command = launch
    code, shown = drawn([*options, *command], stdout_terminal=True)
    assert HIDE_CURSOR in shown and b"checking the launch" in shown, shown
    assert b"preflight: " in shown.split(HIDE_CURSOR)[-1], shown  # the findings after it, not under it
    assert code == 0, shown


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_preflight_draws_nothing_piped_or_as_json(launch, fmt):
    options, command = launch
    code, shown = drawn([*options, "--format", fmt, *command], stdout_terminal=fmt == "json")
    assert HIDE_CURSOR not in shown and b"checking the launch" not in shown, shown
    assert code == 0, shown
