"""Progress is drawn for a person only (issue 22): when stdout and stderr are both terminals and the
output is text; never when stdout is piped or the output is JSON (a reader of either gets none)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import make_patch, on_a_terminal, patched_spec, write_library, write_tree, write_wheel
from index_server import FILES, VERSION, WHEEL, build_wheel, isolate_cache, use_index

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


SPECULATIVE = "vllm/config/speculative.py"
DOWNLOAD_BAR = re.compile(rb"\d+(\.\d+)?/\d+(\.\d+)? [kMG]?B")


@pytest.fixture
def published(server, monkeypatch, tmp_path) -> Path:
    """A release on the local index (index_server), and a library whose series for it patches speculative.py."""
    isolate_cache(tmp_path, monkeypatch)
    server.publish(WHEEL, build_wheel())
    use_index(monkeypatch, server.index())
    stock = write_tree(tmp_path / "stock", VERSION, {SPECULATIVE: FILES[SPECULATIVE]})
    patch = make_patch(tmp_path, stock, {SPECULATIVE: FILES[SPECULATIVE] + b"# patched\n"})
    return write_library(tmp_path / "lib", {VERSION: [patch]}, supported=None, upstream=None)


def test_a_fetch_shows_its_progress_in_a_terminal_and_none_piped(published, tmp_path, monkeypatch):
    args = ["fetch", VERSION, "--all", "--dest"]
    code, drawn = stderr_drawn([*args, tmp_path / "shown"], stdout_terminal=True)
    assert code == 0 and HIDE_CURSOR in drawn, drawn
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "piped-cache"))  # the same work again: nothing cached
    code, drawn = stderr_drawn([*args, tmp_path / "piped"], stdout_terminal=False)
    assert code == 0 and HIDE_CURSOR not in drawn, drawn


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_verify_of_releases_shows_its_progress_in_a_terminal_only_as_text(published, fmt):
    args = ["verify", "--vllm-version", VERSION, "--patches", published, "--format", fmt]
    code, drawn = stderr_drawn(args, stdout_terminal=True)
    assert code == 0, drawn
    assert (HIDE_CURSOR in drawn) == (fmt == "text"), drawn
    code, drawn = stderr_drawn(args, stdout_terminal=False)
    assert code == 0 and HIDE_CURSOR not in drawn, drawn


def test_a_wheel_download_shows_its_progress_in_a_terminal_and_none_piped(published, tmp_path, monkeypatch):
    args = ["wheel", VERSION, "--patches", published, "--out"]
    code, drawn = stderr_drawn([*args, tmp_path / "shown"], stdout_terminal=True)
    assert code == 0 and DOWNLOAD_BAR.search(drawn), drawn  # "1.0/1.6 MB": the download's own bar
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "piped-cache"))  # downloaded again
    code, drawn = stderr_drawn([*args, tmp_path / "piped"], stdout_terminal=False)
    assert code == 0 and HIDE_CURSOR not in drawn, drawn
