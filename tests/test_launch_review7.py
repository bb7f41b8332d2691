"""Review 7 of the launch (`preflight`, `run`): each finding's regression test, on inputs of its own.

H1: `run` (the static preflight, then exec) never asks vLLM what a general plugin does: a plugin that
re-registers the target's architecture builds another class than the one judged. `run` names every
general plugin the launch loads before it execs, on one line of 80 columns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_cli
from launch_fixtures import DRAFTER, KIMI_K25, serve, write_eagle3_setup, write_model
from test_launch_review6 import PLAIN_CLASS, write_plugin
from test_run import patchkit_run

WARNING = "warning: plugins not judged: "
ASKS = "(`patchkit preflight` asks vLLM)"


@pytest.fixture
def launch(tmp_path):
    """(tree, library, command, env, marker): test_run's, a `vllm` on PATH that exits 7."""
    tree, library = write_eagle3_setup(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "launched"
    script = bin_dir / "vllm"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 7\n")
    script.chmod(0o755)
    command = serve(write_model(tmp_path / "kimi", KIMI_K25), write_model(tmp_path / "drafter", DRAFTER))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PATCHKIT_DEBUG", None)
    return tree, library, command, env, marker


def applied(tree: Path, library: Path) -> None:
    assert run_cli("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


# --- H1: run names the general plugins it did not judge, then execs -------------------------------


def test_run_names_a_plugin_beside_the_tree_before_it_execs(launch):
    tree, library, command, env, marker = launch
    applied(tree, library)
    _, alone = patchkit_run(tree, library, command, env)
    assert alone.returncode == 7 and warnings(alone.stderr) == [], alone.stderr  # the guard is no such plugin

    write_plugin(tree, "acme", PLAIN_CLASS.format(name="acme"))
    for options in ((), ("-v",), ("-q",)):
        _, done = patchkit_run(tree, library, command, env, *options)
        assert done.returncode == 7 and marker.exists(), done.stderr  # it still launches: vLLM may serve it
        assert warnings(done.stderr) == [f"{WARNING}acme {ASKS}"], done.stderr


def test_run_names_a_plugin_on_the_launchs_pythonpath_unless_vllm_plugins_leaves_it_out(launch, tmp_path):
    tree, library, command, env, _ = launch
    applied(tree, library)
    plug = write_plugin(tmp_path / "plug", "zeta", PLAIN_CLASS.format(name="zeta"))
    write_plugin(plug, "other", "def register():\n    pass\n")
    _, done = patchkit_run(tree, library, ["env", f"PYTHONPATH={plug}", *command], env)
    assert done.returncode == 7 and warnings(done.stderr) == [f"{WARNING}other, zeta {ASKS}"], done.stderr

    # vLLM's own rule (vllm.envs): VLLM_PLUGINS set is the comma-separated list of the plugins it loads
    expected = {"": [], "zeta,x": ["zeta"], " zeta,other": ["other"]}
    for allowed, named in expected.items():
        prefix = ["env", f"VLLM_PLUGINS={allowed}", f"PYTHONPATH={plug}"]
        _, done = patchkit_run(tree, library, [*prefix, *command], env)
        shown = [line.removeprefix(WARNING).removesuffix(f" {ASKS}") for line in warnings(done.stderr)]
        assert done.returncode == 7 and shown == named, (allowed, done.stderr)


def test_thousands_of_plugins_are_a_few_names_and_a_count_on_one_line(launch, tmp_path):
    tree, library, command, env, _ = launch
    applied(tree, library)
    many = tmp_path / "many"
    for number in range(3000):
        write_plugin(many, f"plugin_number_{number:04d}", "def register():\n    pass\n")
    write_plugin(many, "\x1b[31mred", "def register():\n    pass\n")  # shown escaped, never as a colour
    _, done = patchkit_run(tree, library, ["env", f"PYTHONPATH={many}", *command], env)
    (line,) = warnings(done.stderr)
    assert done.returncode == 7 and len(line) <= 80, line
    assert line.startswith(WARNING) and " +3,00" in line and f"more {ASKS}" in line, line
    assert "\x1b" not in done.stderr


def test_vllms_own_general_plugins_are_no_plugin_to_name(launch):
    """vLLM 0.16.0's own dist-info declares two general plugins (its LoRA resolvers, vLLM's code):
    part of the tree judged, not named on every launch."""
    tree, library, command, env, _ = launch
    applied(tree, library)
    (info,) = tree.glob("vllm-*.dist-info")
    (info / "entry_points.txt").write_text(VLLMS_OWN)
    _, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 7 and warnings(done.stderr) == [], done.stderr

    # another distribution's plugin whose code is not vLLM's is named, under any name
    write_plugin(tree, "patchkit_guard", "def register():\n    pass\n")
    _, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 7 and warnings(done.stderr) == [f"{WARNING}patchkit_guard {ASKS}"], done.stderr


VLLMS_OWN = """\
[console_scripts]
vllm = vllm.entrypoints.cli.main:main

[vllm.general_plugins]
lora_filesystem_resolver = vllm.plugins.lora_resolvers.filesystem_resolver:register_filesystem_resolver
lora_hf_hub_resolver = vllm.plugins.lora_resolvers.hf_hub_resolver:register_hf_hub_resolver
"""
