"""What patchkit prints when things go wrong: a machine-readable document on every failed run
(`--format json`, `--format junit`), and text that never crashes on a path the output encoding
cannot hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_clean_failure, make_patch, patched_spec, run_cli, snapshot, write_library, write_tree

SPEC = "vllm/config/spec.py"
ASCII_OUTPUT = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}


@pytest.fixture
def library(tmp_path, tree, scratch) -> Path:
    return write_library(tmp_path / "lib", {"0.16.0": [make_patch(scratch, tree, {SPEC: patched_spec()})]})


# --------------------------------------------------------------------------- text on any encoding


def odd_tree(tmp_path: Path, name: bytes) -> Path:
    """A target under a directory whose name is `name` (bytes: maybe not UTF-8 at all)."""
    return write_tree(tmp_path / os.fsdecode(name) / "site-packages")


@pytest.mark.parametrize(
    "name",
    [b"Z\xc3\xbcrich-\xe2\x86\x92-env", b"latin1-\xe9t\xe9"],  # "Zürich-→-env" in UTF-8; not UTF-8 at all
    ids=["non-ascii", "invalid-utf8"],
)
def test_status_apply_revert_print_paths_an_ascii_stdout_cannot_hold(tmp_path, library, name):
    tree = odd_tree(tmp_path, name)
    stock = snapshot(tree)
    outputs = []
    for argv in (["status"], ["apply"], ["status"], ["revert", "-v"]):
        done = run_cli(*argv, "--target", tree, "--patches", library, env=ASCII_OUTPUT)
        assert_clean_failure(done, 0)
        outputs.append(done.stdout)
    assert '"deepseek"' not in (tree / SPEC).read_text() and snapshot(tree) == stock
    escaped = name.decode("utf-8", "surrogateescape").encode("ascii", "backslashreplace").decode()
    assert all(escaped in out for out in outputs), outputs
    assert "state    applied" in outputs[2]


def test_an_error_naming_such_a_path_is_one_clean_line(tmp_path, library):
    missing = tmp_path / os.fsdecode(b"gone-\xc3\xa5-\xfe")
    done = run_cli("status", "--target", missing, "--patches", library, env=ASCII_OUTPUT)
    assert_clean_failure(done, 4)
    assert "gone-\\xe5-\\udcfe" in done.stderr


def test_a_stream_that_keeps_file_name_bytes_still_escapes_what_it_cannot_encode(tmp_path, library):
    """ASCII with surrogateescape: the non-UTF-8 byte goes out as it is, the `ø` as an escape."""
    tree = odd_tree(tmp_path, b"\xc3\xb8-\xfa")
    env = {**os.environ, "PYTHONIOENCODING": "ascii:surrogateescape"}
    argv = [sys.executable, "-m", "patchkit", "status", "--target", tree, "--patches", library]
    done = subprocess.run(argv, capture_output=True, env=env, timeout=300)  # bytes: stdout is not UTF-8
    assert done.returncode == 0, done.stderr
    assert b"\\xf8-\xfa/site-packages" in done.stdout
