"""A path the OS refuses to look up (a name past 255 bytes, a symlink loop) given as --target, --patches,
--dest, --out or a wheel file, and a version of more digits than int() converts or longer than a cache
directory's name can be, are the user's input: a short error and exit 2 (4 for a target, as a missing
one), never exit 70 "patchkit bug"."""

from __future__ import annotations

import pytest
from helpers import run_cli, run_cli_read_only, run_cli_writing, write_tree

LONG_NAME = "y" * 300  # one component past NAME_MAX
HUGE = "9" * 5000  # past Python's 4,300-digit int() limit


@pytest.fixture
def loop(tmp_path):
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    return tmp_path / "l1"


def refused(done, code: int, said: str) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    assert said in done.stderr and "patchkit bug" not in done.stderr, done.stderr
    assert max(map(len, done.stderr.splitlines())) < 400, done.stderr  # the path shown shortened


@pytest.mark.parametrize("command", ["status", "verify", "apply", "revert", "recover"])
def test_a_target_the_os_refuses_is_a_target_error(tmp_path, loop, command):
    run = run_cli_read_only if command in ("status", "verify") else run_cli_writing
    refused(run(command, "--target", tmp_path / LONG_NAME), 4, ": File name too long")
    refused(run(command, "--target", loop), 4, "target directory")
    assert "Too many levels of symbolic links" in run(command, "--target", loop).stderr


def test_a_library_destination_or_wheel_the_os_refuses_is_bad_input(tmp_path, loop):
    tree = write_tree(tmp_path / "site")
    refused(run_cli_read_only("status", "--target", tree, "--patches", loop), 2, "patch library")
    refused(run_cli("fetch", "0.16.0", "--dest", loop / "x"), 2, "--dest")
    refused(run_cli("wheel", loop / "x.whl"), 2, "wheel")
    refused(run_cli("wheel", tmp_path / f"{LONG_NAME}.whl"), 2, ": File name too long")


def test_a_tree_version_of_more_digits_than_int_converts_is_bad_input(tmp_path):
    tree = write_tree(tmp_path / "site")
    metadata = tree / "vllm-0.16.0.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.16.0", f"Version: 0.16.{HUGE}"))
    for command in ("status", "verify"):
        refused(run_cli_read_only(command, "--target", tree), 2, "is not a valid version")
    for command in ("apply", "revert"):
        refused(run_cli_writing(command, "--target", tree), 2, "is not a valid version")
    refused(run_cli_read_only("status", "--target", tree, "--vllm-version", HUGE), 2, "--vllm-version")


@pytest.mark.parametrize("version", [HUGE, f"0.16.{'9' * 300}"])
def test_a_version_to_fetch_too_long_for_the_cache_is_bad_input(tmp_path, version):
    refused(run_cli("fetch", version, "--dest", tmp_path / "x"), 2, "not a vLLM version patchkit can fetch")
    refused(run_cli("wheel", version, "--out", tmp_path), 2, "not a vLLM version patchkit can fetch")
