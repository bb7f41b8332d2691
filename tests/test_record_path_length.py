"""A record naming a path no file system holds (a name over 255 bytes, a path of thousands of bytes) is
damaged to every command, as the record's other path rules are: never an internal error midway."""

from __future__ import annotations

import pytest
from helpers import record_created, run_cli_judged, run_cli_read_only


@pytest.mark.parametrize(
    "path", ["vllm/" + "a" * 300 + ".py", "vllm/" + "abcdefgh/" * 460 + "x.py"], ids=["long-name", "long-path"]
)
@pytest.mark.parametrize("command", ["status", "verify", "apply"])
def test_a_recorded_path_too_long_for_a_file_is_damaged_to_every_command(run, tree, open_library, path, command):
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_created(tree, [path])
    done = run_cli_judged(command, "--target", tree, "--patches", open_library)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, said
    assert "state.json is damaged" in said and "move it aside" in said, said
    assert "internal error" not in said, said


def test_a_recorded_path_as_long_as_a_packages_file_is_read_as_any(run, tree, open_library):
    """The rule refuses only what cannot be a file: a long but real name stays a recorded file."""
    assert run("apply", "--target", tree, "--patches", open_library).exit_code == 0
    record_created(tree, ["vllm/" + "b" * 200 + ".py"])
    done = run_cli_read_only("status", "--target", tree, "--patches", open_library)
    assert done.returncode != 2 or "damaged" not in done.stderr, done.stderr
