"""A set that creates a file where a file of that name already is, one no record names (review32
L1 n1): apply refuses (no hunk of a file to create is judged, --force or not), and status, apply
and preflight say what it is (a file the series creates, not patchkit's), never "differs from
stock where the series changes it", with the fix that works: the exact `mv` aside, then apply."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from helpers import (
    MODEL,
    MODEL_PY,
    SPEC,
    SPEC_PY,
    make_patch,
    pip_install,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    write_library,
)

ADDED = "vllm/acme_ext/hooks.py"


def _tree(tmp_path: Path, *, edited: bool = False) -> tuple[Path, Path]:
    site, library = tmp_path / "site", tmp_path / "lib"
    pip_install(site, "0.16.0", {SPEC: SPEC_PY, MODEL: MODEL_PY})
    spec = {SPEC: SPEC_PY.replace('"qwen",\n', '"qwen",\n    "gemma",\n')}
    series = [make_patch(tmp_path, site, {ADDED: "HOOKS = []\n"}), make_patch(tmp_path, site, spec)]
    write_library(library, {"0.16.0": series}, name="acme")
    (site / ADDED).parent.mkdir()
    (site / ADDED).write_text("MY_HOOKS = ['audit']\n")
    if edited:  # and a local edit inside the set's hunk of another file
        (site / SPEC).write_text(SPEC_PY.replace('"qwen",\n', '"qwen", "mine",\n'))
    return site, library


def _fix(said: str) -> str:
    commands = re.findall(r"`([^`]+)`", said.split("fix:", 1)[-1] if "fix:" in said else said.split("hint:", 1)[-1])
    assert commands, said
    return commands[0]


def test_a_file_the_set_creates_that_is_the_users_is_said_so_and_moved_aside_by_the_fix(tmp_path):
    site, library = _tree(tmp_path)
    for command in (["status"], ["apply", "--no-import"], ["apply", "--no-import", "--force"]):
        done = run_cli_judged(*command, "--target", site, "--patches", library)
        said = done.stdout + done.stderr
        assert done.returncode == 1, said
        assert f"{ADDED}, which the series creates, already exists and is not patchkit's" in said, said
        assert "where the series changes it" not in said and "fetch" not in said, said
    fix = _fix(run_cli_writing("apply", "--no-import", "--target", site, "--patches", library).stderr)
    assert fix.startswith(shlex.join(["mv", "--", str(site / ADDED), f"{site / ADDED}.mine"])), fix
    venv = str(Path(sys.executable).parent)
    paste = fix.replace("patchkit apply", f"{shlex.quote(sys.executable)} -m patchkit apply --no-import")
    done = subprocess.run(
        paste, shell=True, capture_output=True, text=True, env={**os.environ, "PATH": f"{venv}:/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / ADDED).read_text() == "HOOKS = []\n"
    assert (site / f"{ADDED}.mine").read_text() == "MY_HOOKS = ['audit']\n"


def test_with_an_edit_too_each_file_is_said_as_what_it_is(tmp_path):
    site, library = _tree(tmp_path, edited=True)
    done = run_cli_read_only("status", "--target", site, "--patches", library)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert f"{SPEC} differs from stock vLLM 0.16.0 where the series changes it" in said, said
    assert f"{ADDED}, which the series creates, already exists" in said, said
    assert shlex.join(["mv", "--", str(site / ADDED), f"{site / ADDED}.mine"]) in said, said
