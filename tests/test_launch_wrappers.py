"""A launch behind a wrapper (numactl, nice, taskset...) or the vllm script run as a file by a
python: refused (patchkit reads the launch itself), with what to give instead: the wrapper before
`patchkit run` (which execs the launch, so the binding holds), or the script alone / `python -m`.
What the hint names is a launch patchkit reads."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli, run_cli_in_process
from launch_fixtures import stand_in_launch

from patchkit.base.errors import BadInput
from patchkit.launch.command import API_SERVER as API
from patchkit.launch.command import frame


def hint_of(argv: list[str]) -> str:
    with pytest.raises(BadInput) as refused:
        frame(argv)
    assert refused.value.hint is not None, refused.value.message
    return refused.value.hint


@pytest.mark.parametrize(
    ("argv", "wrapper"),
    [
        (["numactl", "-N", "0", "vllm", "serve", "M"], ["numactl", "-N", "0"]),
        (["nice", "-n", "5", "vllm", "serve", "M", "--port", "9"], ["nice", "-n", "5"]),
        (["taskset", "-c", "0", "/v/bin/vllm", "serve", "M"], ["taskset", "-c", "0"]),
        (["srun", "--gpus", "8", "-N", "1", "vllm", "serve", "M"], ["srun", "--gpus", "8", "-N", "1"]),
        (
            ["env", "A=1", "numactl", "-m", "1", "python3", "-m", "vllm.entrypoints.cli.main", "serve", "M"],
            ["numactl", "-m", "1"],
        ),
        # review36 L4: an env after the wrapper stays in the launch (`env -i` before patchkit hides it)
        (["numactl", "-N", "0", "env", "-i", "HOME=/root", "/v/bin/vllm", "serve", "M"], ["numactl", "-N", "0"]),
        (["nice", "/usr/bin/env", "PYTHONPATH=/x", "vllm", "serve", "M"], ["nice"]),
    ],
)
def test_a_wrapped_launch_is_refused_naming_the_wrapper_before_patchkit_run(argv, wrapper):
    hint = hint_of(argv)
    checked, pasted = (shlex.split(said) for said in re.findall(r"`([^`]*)`", hint))
    assert checked[:2] == ["patchkit", "preflight"], hint  # a check needs no wrapper: it changes nothing read
    assert pasted[: len(wrapper) + 2] == [*wrapper, "patchkit", "run"], hint
    launch = pasted[pasted.index("--") + 1 :]
    at = argv.index(wrapper[0])
    assert argv[:at] + argv[at + len(wrapper) :] == launch, hint
    assert frame(launch).arguments[-1] == argv[-1]  # what it names is read as the launch
    assert checked[checked.index("--") + 1 :] == launch, hint


@pytest.mark.parametrize("python", [["python"], ["python3", "-u"], ["/venv/bin/python", "-X", "dev"]])
def test_the_vllm_script_run_by_a_python_is_refused_naming_the_launches_that_run_it(python):
    argv = [*python, "/venv/bin/vllm", "serve", "M", "--port", "9"]
    hint = hint_of(argv)
    named = [shlex.split(said) for said in re.findall(r"`([^`]*)`", hint)]
    assert named == [
        ["/venv/bin/vllm", "serve", "M", "--port", "9"],
        [*python, "-m", "vllm.entrypoints.cli.main", "serve", "M", "--port", "9"],
    ], hint
    for launch in named:
        assert frame(launch).serve and frame(launch).arguments == ["M", "--port", "9"]


def test_preflight_of_a_numactl_launch_says_what_to_do():
    done = run_cli_in_process("preflight", "--no-import", "--", "numactl", "-N", "0", "vllm", "serve", "M")
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "`numactl -N 0 patchkit run -- vllm serve M`" in said and "run execs the launch" in said, said


# a tool's `run` (uv, conda, pixi, poetry, hatch...) runs the launch in an environment the tool picks
# and activates: patchkit reads it only from inside, so the tool goes before patchkit, its words kept
@pytest.mark.parametrize(
    ("argv", "tool", "patchkit"),
    [
        (["uv", "run", "--with", "x", "vllm", "serve", "M"], ["uv", "run", "--with", "x"], "patchkit"),
        (
            ["uv", "--directory", "/p", "run", "/p/.venv/bin/vllm", "serve", "M"],
            ["uv", "--directory", "/p", "run"],
            "patchkit",
        ),
        (["conda", "run", "-n", "gpu", "vllm", "serve", "M"], ["conda", "run", "-n", "gpu"], "patchkit"),
        (
            ["conda", "run", "-p", "/e", "--", "python", "-m", API, "--model", "M"],
            ["conda", "run", "-p", "/e", "--"],
            "patchkit",
        ),
        (["micromamba", "run", "-n", "gpu", "vllm", "serve", "M"], ["micromamba", "run", "-n", "gpu"], "patchkit"),
        (["pixi", "run", "-e", "cuda", "vllm", "serve", "M"], ["pixi", "run", "-e", "cuda"], "patchkit"),
        (["poetry", "run", "vllm", "serve", "M", "--port", "9"], ["poetry", "run"], "patchkit"),
        (["hatch", "run", "gpu:vllm", "serve", "M"], ["hatch", "run"], "gpu:patchkit"),
        (
            ["env", "A=1", "pdm", "run", "python3", "-m", "vllm.entrypoints.cli.main", "serve", "M"],
            ["pdm", "run"],
            "patchkit",
        ),
        (["pipenv", "run", "vllm", "serve", "M"], ["pipenv", "run"], "patchkit"),
    ],
)
def test_a_launch_a_tool_runs_in_its_environment_is_refused_naming_the_tool_before_patchkit(argv, tool, patchkit):
    with pytest.raises(BadInput) as refused:
        frame(argv)
    assert f"`{tool[0]} run` runs it in an environment {tool[0]} picks" in refused.value.message
    hint = refused.value.hint
    put, checked, pasted = (shlex.split(said) for said in re.findall(r"`([^`]*)`", hint))
    assert put == tool, hint
    for verb, said in (("preflight", checked), ("run", pasted)):
        assert said[: len(tool) + 2] == [*tool, patchkit, verb], hint
        launch = said[said.index("--", len(tool) + 2) + 1 :]
        assert frame(launch).arguments[-1] == argv[-1], hint  # what it names is read as the launch
        words = [w.rpartition(":")[2] if w.endswith(":vllm") else w for w in argv if w not in tool]
        assert launch == words, hint  # the user's own launch, every word kept (env's too)


def test_uv_tool_run_is_no_environment_to_run_patchkit_in():
    """`uv tool run` (uvx) installs the program it names from the index: `uv tool run patchkit`
    would fetch PyPI's unrelated `patchkit`; no hint names it."""
    with pytest.raises(BadInput) as refused:
        frame(["uv", "tool", "run", "vllm", "serve", "M"])
    assert "not a vLLM launch: 'uv'" in refused.value.message and "patchkit" not in (refused.value.hint or "")


def test_the_hint_followed_runs_patchkits_check_inside_the_tools_environment(tmp_path):
    """The hint followed with a stand-in `poetry` (its `run` runs the rest with the environment's bin
    first on PATH, as poetry's does): patchkit reads the launch there (no longer refused as a wrapper)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "poetry").write_text('#!/bin/sh\nshift\nexec "$@"\n')  # `run`, then the command itself
    (bin_dir / "poetry").chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    refused = run_cli_in_process("preflight", "--no-import", "--", "poetry", "run", "vllm", "serve", "M")
    assert refused.returncode == 2, refused.stderr
    checked = shlex.split(re.findall(r"`([^`]*)`", " ".join(refused.stderr.split()))[-2])
    done = subprocess.run(checked, capture_output=True, text=True, env={**os.environ, "PATH": path}, timeout=300)
    assert checked[:3] == ["poetry", "run", "patchkit"] and "not a vLLM launch" not in done.stderr, done.stderr
    assert "vllm" in done.stderr + done.stdout and done.returncode in (1, 2, 4), done.stderr


def test_the_wrapper_hint_is_the_users_own_run_reordered_and_following_it_applies_and_launches(tmp_path):
    """review36 L4's residual: `patchkit run --apply ... -- nice -n 5 vllm serve ...` was told to
    run `nice -n 5 patchkit run --set ... -- ...`: without --apply, a unit rewritten from it no
    longer applies after an upgrade. The hint is the user's command, the wrapper first, every option
    kept; followed as written, it applies the sets and launches under nice."""
    tree, library, command, env, marker = stand_in_launch(tmp_path, "--port", "8123")
    wrapper = ["nice", "-n", "5"]
    done = run_cli("-q", "run", "--target", tree, "--patches", library, "--apply", "--", *wrapper, *command, env=env)
    assert done.returncode == 2 and not marker.exists(), done.stderr
    said = " ".join(done.stderr.split())
    checked, pasted = (shlex.split(named) for named in re.findall(r"`([^`]*)`", said[said.index("hint:") :]))
    assert pasted == [
        *wrapper, "patchkit", "-q", "run", "--target", str(tree), "--patches", str(library), "--apply", "--", *command
    ], said  # fmt: skip
    assert checked[:2] == ["patchkit", "preflight"] and "--apply" not in checked, said  # preflight takes no --apply
    here = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}  # where `patchkit` is
    followed = subprocess.run(pasted, env=here, capture_output=True, text=True, timeout=300, check=False)
    assert followed.returncode == 7 and marker.exists(), followed.stderr  # applied, then the launch ran
    assert "--port 8123" in followed.stdout
    assert run_cli("status", "--target", tree, "--patches", library).returncode == 0


def test_a_preflight_of_a_wrapped_launch_names_the_users_own_check_again():
    done = run_cli_in_process(
        "preflight", "--no-import", "--format", "json", "--", "taskset", "-c", "0", "vllm", "serve", "M"
    )
    assert done.returncode == 2, done.stderr
    hint = " ".join(json.loads(done.stdout)["hint"].split())
    checked, pasted = (shlex.split(named) for named in re.findall(r"`([^`]*)`", hint))
    assert checked == ["patchkit", "preflight", "--no-import", "--format", "json", "--", "vllm", "serve", "M"], hint
    assert pasted == ["taskset", "-c", "0", "patchkit", "run", "--", "vllm", "serve", "M"], hint


def test_a_tools_run_hint_keeps_the_users_own_options_too():
    """L4's class: the `uv run` / `conda run` hint named `patchkit run` with the selection alone."""
    done = run_cli("run", "--apply", "--set", "eagle3", "--", "uv", "run", "--with", "x", "vllm", "serve", "M")
    assert done.returncode == 2, done.stderr
    named = [shlex.split(said) for said in re.findall(r"`([^`]*)`", " ".join(done.stderr.split()))]
    assert named[-1] == [
        "uv", "run", "--with", "x", "patchkit", "run", "--apply", "--set", "eagle3", "--", "vllm", "serve", "M"
    ], named  # fmt: skip
    assert named[-2][:5] == ["uv", "run", "--with", "x", "patchkit"] and "--apply" not in named[-2], named


# a tool's or wrapper's option whose value is a word `vllm` (`conda run -n vllm`, `sudo -u vllm`,
# `-p /envs/vllm`): the launch starts at the program after the options and their values
@pytest.mark.parametrize(
    ("argv", "tool"),
    [
        (["uv", "run", "--with", "vllm", "vllm", "serve", "M"], ["uv", "run", "--with", "vllm"]),
        (
            ["uv", "run", "-w", "vllm", "--extra", "vllm", "vllm", "serve", "M"],
            ["uv", "run", "-w", "vllm", "--extra", "vllm"],
        ),
        (
            ["uv", "--directory", "/srv/vllm", "run", "--python", "3.12", "--", "vllm", "serve", "M"],
            ["uv", "--directory", "/srv/vllm", "run", "--python", "3.12", "--"],
        ),
        (["conda", "run", "-n", "vllm", "vllm", "serve", "M"], ["conda", "run", "-n", "vllm"]),
        (
            ["conda", "run", "-nvllm", "--cwd", "/vllm", "vllm", "serve", "M"],
            ["conda", "run", "-nvllm", "--cwd", "/vllm"],
        ),
        (["mamba", "run", "--name", "vllm", "vllm", "serve", "M"], ["mamba", "run", "--name", "vllm"]),
        (["micromamba", "run", "-p", "/envs/vllm", "vllm", "serve", "M"], ["micromamba", "run", "-p", "/envs/vllm"]),
        (["pixi", "run", "-e", "vllm", "vllm", "serve", "M"], ["pixi", "run", "-e", "vllm"]),
        (
            ["pixi", "run", "--manifest-path", "/p/vllm", "vllm", "serve", "M"],
            ["pixi", "run", "--manifest-path", "/p/vllm"],
        ),
        (["hatch", "-e", "vllm", "run", "vllm", "serve", "M"], ["hatch", "-e", "vllm", "run"]),
        (["poetry", "-C", "/srv/vllm", "run", "vllm", "serve", "M"], ["poetry", "-C", "/srv/vllm", "run"]),
        (["pdm", "-p", "/srv/vllm", "run", "vllm", "serve", "M"], ["pdm", "-p", "/srv/vllm", "run"]),
        (["pipenv", "--python", "vllm", "run", "vllm", "serve", "M"], ["pipenv", "--python", "vllm", "run"]),
    ],
)
def test_a_tools_option_valued_vllm_is_not_where_the_launch_starts(argv, tool):
    with pytest.raises(BadInput) as refused:
        frame(argv)
    put, checked, pasted = (shlex.split(said) for said in re.findall(r"`([^`]*)`", refused.value.hint))
    assert put == tool, refused.value.hint
    for verb, said in (("preflight", checked), ("run", pasted)):
        assert said[: len(tool) + 2] == [*tool, "patchkit", verb], refused.value.hint
        assert said[said.index("--", len(tool) + 2) + 1 :] == ["vllm", "serve", "M"], refused.value.hint


@pytest.mark.parametrize(
    ("argv", "wrapper"),
    [
        (["sudo", "-u", "vllm", "vllm", "serve", "M"], ["sudo", "-u", "vllm"]),
        (["sudo", "-g", "vllm", "-D", "/srv/vllm", "vllm", "serve", "M"], ["sudo", "-g", "vllm", "-D", "/srv/vllm"]),
        (["srun", "-J", "vllm", "vllm", "serve", "M"], ["srun", "-J", "vllm"]),
        (
            ["srun", "--job-name", "vllm", "-D", "/srv/vllm", "vllm", "serve", "M"],
            ["srun", "--job-name", "vllm", "-D", "/srv/vllm"],
        ),
        (["time", "-o", "vllm", "vllm", "serve", "M"], ["time", "-o", "vllm"]),
    ],
)
def test_a_wrappers_option_valued_vllm_is_not_where_the_launch_starts(argv, wrapper):
    checked, pasted = (shlex.split(said) for said in re.findall(r"`([^`]*)`", hint_of(argv)))
    assert checked[checked.index("--") + 1 :] == ["vllm", "serve", "M"]
    assert pasted == [*wrapper, "patchkit", "run", "--", "vllm", "serve", "M"]


@pytest.mark.parametrize(
    "argv",
    [
        ["uv", "run", "--not-an-uv-option", "vllm", "serve", "M"],
        ["uv", "run", "--not-an-uv-option", "x", "vllm", "serve", "M"],  # x: its value, or what uv runs
        ["conda", "--frobnicate", "vllm", "run", "vllm", "serve", "M"],
        ["sudo", "--frobnicate", "vllm", "serve", "M"],
    ],
)
def test_where_a_tools_words_end_cannot_be_told_no_command_line_is_named(argv):
    with pytest.raises(BadInput) as refused:
        frame(argv)
    assert "cannot tell where" in refused.value.message, refused.value.message
    quoted = re.findall(r"`([^`]*)`", refused.value.hint)
    assert quoted and all(argv[0] not in said and "serve" not in said for said in quoted), refused.value.hint


STAND_IN_TOOL = """#!{python}
import json, os, sys
valued = {valued!r}
words, at, kept = sys.argv[1:], 0, []
while at < len(words) and (words[at].startswith("-") or words[at] == "run"):
    if words[at] == "--":
        at += 1
        break
    step = 2 if words[at] in valued else 1
    kept += words[at : at + step]
    at += step
with open({record!r}, "w") as out:
    json.dump(kept, out)
os.execvp(words[at], words[at:])
"""


@pytest.mark.parametrize(
    ("argv", "valued", "own"),
    [
        (["conda", "run", "-n", "vllm", "vllm", "serve", "M"], ["-n"], ["run", "-n", "vllm"]),
        (["uv", "run", "--with", "vllm", "vllm", "serve", "M"], ["--with"], ["run", "--with", "vllm"]),
        (["sudo", "-u", "vllm", "vllm", "serve", "M"], ["-u"], ["-u", "vllm"]),
    ],
)
def test_the_hint_followed_with_a_value_vllm_gives_the_tool_its_own_value(tmp_path, argv, valued, own):
    """Each hint's launch line followed with a stand-in tool that reads its options as the real one
    does (a valued option takes the next word), records them and execs the rest: the tool gets its
    own words back (`-n vllm`, not `-n patchkit`), and patchkit reads the launch."""
    bin_dir, record = tmp_path / "bin", tmp_path / "options.json"
    bin_dir.mkdir()
    stand_in = bin_dir / argv[0]
    stand_in.write_text(STAND_IN_TOOL.format(python=sys.executable, valued=valued, record=str(record)))
    stand_in.chmod(0o755)
    refused = run_cli_in_process("run", "--", *argv)
    assert refused.returncode == 2, refused.stderr
    pasted = shlex.split(re.findall(r"`([^`]*)`", " ".join(refused.stderr.split()))[-1])
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(pasted, capture_output=True, text=True, env={**os.environ, "PATH": path}, timeout=300)
    assert json.loads(record.read_text()) == own
    assert "not a vLLM launch" not in done.stderr and done.returncode in (1, 2, 4), done.stderr


@pytest.mark.parametrize("program", ["patchkit", "pk", "/opt/tools/bin/patchkit"])
@pytest.mark.parametrize(("tool", "word"), [(["uv", "run", "--with", "x"], "vllm"), (["hatch", "run"], "gpu:vllm")])
def test_a_tools_run_hint_keeps_the_users_own_command_whatever_its_first_word(program, tool, word):
    """The hint's commands are built as words and the tool's put before them, not cut from a quoted
    string at a fixed width ("`patchkit " is 10 characters): the user's own command, whatever word
    starts it, comes back whole after the tool's words (hatch's ENV: prefixed to it)."""
    argv = [*tool, word, "serve", "M"]
    with pytest.raises(BadInput) as refused:
        frame(argv, invoked=("preflight", [program, "-q", "preflight", "--no-import", "--"]))
    put, checked, pasted = (shlex.split(said) for said in re.findall(r"`([^`]*)`", refused.value.hint or ""))
    first = f"gpu:{program}" if word.startswith("gpu:") else program
    assert put == tool
    assert checked == [*tool, first, "-q", "preflight", "--no-import", "--", "vllm", "serve", "M"], checked
    assert pasted[: len(tool) + 2] == [*tool, first.replace(program, "patchkit"), "run"], pasted


@pytest.mark.parametrize(
    ("argv", "assigned", "before"),
    [
        (["CUDA_VISIBLE_DEVICES=0,1", "vllm", "serve", "M"], ["CUDA_VISIBLE_DEVICES=0,1"], True),
        (["A=1", "B=x y", "/v/bin/vllm", "serve", "M", "--port", "9"], ["A=1", "B=x y"], True),
        (
            ["NCCL_SOCKET_IFNAME=^lo,docker0", "C=it's $HOME", "vllm", "serve", "M"],
            ["NCCL_SOCKET_IFNAME=^lo,docker0", "C=it's $HOME"],
            True,
        ),
        (["PYTHONPATH=/x", "vllm", "serve", "M"], ["PYTHONPATH=/x"], False),  # before patchkit it moves patchkit
    ],
)
def test_a_shells_variable_assignment_before_the_launch_is_refused_naming_env(argv, assigned, before):
    """A shell takes NAME=VALUE before a command as the command's environment; patchkit execs the
    launch with no shell: the hint writes it as env takes it (read and judged there), or before patchkit."""
    hint = hint_of(argv)
    named = [shlex.split(said) for said in re.findall(r"`([^`]*)`", hint)]
    launch = argv[len(assigned) :]
    assert named[0] == ["patchkit", "run", "--", "env", *assigned, *launch], hint
    assert frame(named[0][3:]).env == dict(word.split("=", 1) for word in assigned)
    assert named[1:] == ([[*assigned, "patchkit", "run", "--", *launch]] if before else []), hint
    if before:  # the line pasted into a shell gives patchkit those variables (a quoted NAME= is a command)
        names = [word.split("=", 1)[0] for word in assigned]
        line = re.findall(r"`([^`]*)`", hint)[1]
        printed = " ".join(f'"${name}"' for name in names)
        script = f'patchkit() {{ printf "%s\\n" {printed}; }}; {line}'
        shown = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
        assert shown.stdout.splitlines() == [word.split("=", 1)[1] for word in assigned], (line, shown)


def test_preflight_of_a_launch_behind_an_assignment_says_what_to_do():
    done = run_cli_in_process("preflight", "--no-import", "--", "CUDA_VISIBLE_DEVICES=0,1", "vllm", "serve", "M")
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "`patchkit preflight --no-import -- env CUDA_VISIBLE_DEVICES=0,1 vllm serve M`" in said, said
    assert "`CUDA_VISIBLE_DEVICES=0,1 patchkit preflight --no-import -- vllm serve M`" in said, said
