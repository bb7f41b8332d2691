"""A distribution's entry_points.txt that vLLM's plugin loader cannot read: vLLM calls
importlib.metadata.entry_points(group=...) at start, which reads every distribution's file whole
(a link to /dev/zero without end, a fifo blocks it, a file that is not UTF-8 makes it raise).
`preflight` (with or without --no-import) and `run` fail the launch naming the file, never run
vLLM's loader on it, and pass a file importlib passes over (a directory, /dev/null).

Every file here is read by patchkit bounded and non-blocking; the stand-in `vllm` and the fake vLLM
never read it (the fake vLLM's import exits at once, so even a regression cannot read it)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import run_cli_judged
from importable_vllm import make_importable, write_plugin
from launch_fixtures import applied, findings, patchkit_run, stand_in_launch

LOADER = "vLLM's plugin loader"


def _other_distribution(where: Path, name: str) -> Path:
    """A distribution `name` on `where` (a plugin of its own), its entry_points.txt to be replaced."""
    write_plugin(where, name, "def register():\n    pass\n")
    path = where / f"{name}-1.0.dist-info" / "entry_points.txt"
    path.unlink()
    return path


def _endless(path: Path) -> str:
    path.symlink_to("/dev/zero")
    return "without end"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "block on it"


def _not_utf8(path: Path) -> str:
    path.write_bytes(b"[vllm.general_plugins]\nacme = acme_mod:r\xe9gister\n")
    return "raises on it"


@pytest.mark.parametrize("plant", [_endless, _fifo, _not_utf8])
def test_run_and_static_preflight_refuse_a_plugin_file_the_loader_cannot_read(tmp_path, plant):
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    path = _other_distribution(tmp_path / "plugs", "acme")
    said = plant(path)
    env = {**env, "PYTHONPATH": str(tmp_path / "plugs")}

    _pid, done = patchkit_run(tree, library, command, env, "-q")
    assert done.returncode == 1 and not marker.exists(), done.stderr
    flat = " ".join(done.stderr.split())
    assert str(path) in flat and LOADER in flat and said in flat, flat
    assert "plugins not judged" not in flat, flat
    assert f"rm -f -- {path}" in flat, flat  # the fix: remove it (or reinstall that distribution)

    args = ["preflight", "--no-import", "--target", tree, "--patches", library, "--format", "json", "--", *command]
    done = run_cli_judged(*args, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [f for f in json.loads(done.stdout)["findings"] if not f["ok"]]
    assert [f["check"] for f in failed] == ["launch-target"], failed
    assert str(path) in failed[0]["message"] and said in failed[0]["message"], failed


def test_a_file_importlib_passes_over_is_no_failure(tmp_path):
    """importlib.metadata reads a directory as no file and /dev/null as an empty one: vLLM starts."""
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    _other_distribution(tmp_path / "plugs", "adir").mkdir()
    _other_distribution(tmp_path / "plugs", "anull").symlink_to(os.devnull)
    env = {**env, "PYTHONPATH": str(tmp_path / "plugs")}
    _pid, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 7 and marker.exists(), done.stderr
    assert LOADER not in done.stderr and "plugins not judged" not in done.stderr, done.stderr


FAKE_VLLM_INIT = """
import os
open({mark!r}, "w").close()
os._exit(3)  # a regression that asks vLLM anyway never reaches its plugin loader
"""


@pytest.mark.parametrize("plant", [_endless, _fifo, _not_utf8])
def test_a_full_preflight_refuses_it_before_it_imports_vllm(tmp_path, plant):
    tree, library, command, env, _marker = stand_in_launch(tmp_path)
    applied(tree, library)
    env = {**env, **make_importable(tree)}
    imported = tmp_path / "vllm-imported"
    (tree / "vllm" / "__init__.py").write_text(FAKE_VLLM_INIT.format(mark=str(imported)))
    path = _other_distribution(tmp_path / "plugs", "acme")
    said = plant(path)
    env["PYTHONPATH"] += f"{os.pathsep}{tmp_path / 'plugs'}"

    args = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json"]
    done = run_cli_judged(*args, "--", *command, env=env)
    assert not imported.exists(), done.stdout + done.stderr  # neither vLLM's questions nor its validation ran
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [f for f in json.loads(done.stdout)["findings"] if not f["ok"]]
    assert [f["check"] for f in failed] == ["launch-target"] and said in failed[0]["message"], failed
    validation = findings(done)["vllm-validation"]
    assert validation["result"] == "cannot judge" and str(path) in validation["message"], validation


def test_each_kind_of_file_is_said_as_what_it_is(tmp_path):
    """Read bounded: a sparse file over the limit is never read, a socket never opened."""
    import socket

    from patchkit.distinfo.entry_points import ENTRY_POINTS_LIMIT, group_entry_points

    huge = _other_distribution(tmp_path, "huge")
    with huge.open("wb") as file:
        file.truncate(ENTRY_POINTS_LIMIT + 1)
    sock = _other_distribution(tmp_path, "sock")
    with tempfile.TemporaryDirectory(prefix="pk") as short, socket.socket(socket.AF_UNIX) as server:
        server.bind(os.path.join(short, "s"))  # a socket's path is short: linked to from the dist-info
        sock.symlink_to(os.path.join(short, "s"))
        found = group_entry_points([str(tmp_path)], "vllm.general_plugins", lambda module: False)
    said = dict(found.unreadable)
    assert f"{ENTRY_POINTS_LIMIT + 1:,} bytes, more than patchkit reads" in said[str(huge)], said
    assert "raises on it" in said[str(sock)], said
    assert found.names == [], found.names
