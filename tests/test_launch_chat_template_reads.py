"""--chat-template read as vLLM's load_chat_template reads it (open().read(), else its built-in
template of that name, read the same way), after the model loaded: a file whose read fails
(/proc/self/mem), a fifo even where a built-in template has its name, a built-in template that is not
text fail the launch; a file larger than patchkit reads cannot be judged whole: said, never a pass."""

from __future__ import annotations

import json
import os

import pytest
from helpers import run_cli_judged
from launch_fixtures import applied, patchkit_run, stand_in_launch

from patchkit.launch.preflight import TEMPLATE_LIMIT

BUILTIN = "vllm/transformers_utils/chat_templates"


@pytest.fixture
def launch(tmp_path):
    tree, library, command, env, marker = stand_in_launch(tmp_path)
    applied(tree, library)
    (tree / BUILTIN).mkdir(parents=True)
    return tree, library, command, {**env, "LC_ALL": "C.UTF-8"}, marker


def test_a_template_whose_read_fails_is_refused(launch):
    tree, library, command, env, marker = launch
    _, done = patchkit_run(tree, library, [*command, "--chat-template", "/proc/self/mem"], env)
    said = " ".join(done.stdout.split())
    assert done.returncode == 1 and not marker.exists(), said + done.stderr
    assert "--chat-template /proc/self/mem: Input/output error, nor a template vLLM ships" in said, said


def test_a_fifo_is_refused_though_a_builtin_template_has_its_name(launch, tmp_path):
    """vLLM's open() of a fifo waits (no OSError): its built-in template of that name never stands in."""
    tree, library, command, env, _marker = launch
    (tree / BUILTIN / "chat.jinja").write_text("{{ messages }}")
    os.mkfifo(tmp_path / "chat.jinja")
    args = ["preflight", "--no-import", "--target", tree, "--patches", library, "--"]
    done = run_cli_judged(
        *args, *command, "--chat-template", "chat.jinja", env=env, cwd=tmp_path
    )  # in the fifo's directory
    said = " ".join(done.stdout.split())
    assert done.returncode == 1, said + done.stderr
    assert "--chat-template chat.jinja: not a regular file" in said and "would wait on it" in said, said


def test_a_builtin_template_is_read_as_the_given_file_is(launch):
    tree, library, command, env, marker = launch
    (tree / BUILTIN / "latin.jinja").write_bytes("{{ messages }} été".encode("latin-1"))
    (tree / BUILTIN / "plain.jinja").write_text("{{ messages }} été")
    _, done = patchkit_run(tree, library, [*command, "--chat-template", "plain.jinja"], env)
    assert done.returncode == 7 and marker.exists(), done.stdout + done.stderr
    marker.unlink()
    _, done = patchkit_run(tree, library, [*command, "--chat-template", "latin.jinja"], env)
    said = " ".join(done.stdout.split())
    assert done.returncode == 1 and not marker.exists(), said + done.stderr
    assert "--chat-template latin.jinja: not utf-8 text (byte 0xe9 at offset 15)" in said, said


def test_dev_null_is_an_empty_template(launch):
    tree, library, command, env, marker = launch
    _, done = patchkit_run(tree, library, [*command, "--chat-template", os.devnull], env)
    assert done.returncode == 7 and marker.exists(), done.stdout + done.stderr


def test_a_template_larger_than_patchkit_reads_cannot_be_judged(launch, tmp_path):
    """Its first 16 MiB are text: the rest is not judged, which is said (run warns, then execs;
    preflight counts it as cannot judge), never a pass."""
    tree, library, command, env, marker = launch
    large = tmp_path / "large.jinja"
    with large.open("wb") as file:  # sparse: NUL bytes are UTF-8 text
        file.truncate(TEMPLATE_LIMIT + 1)
    _, done = patchkit_run(tree, library, [*command, "--chat-template", str(large)], env)
    warned = " ".join(done.stderr.split())
    assert done.returncode == 7 and marker.exists(), done.stdout + done.stderr
    assert f"warning: command: cannot judge: --chat-template {large} is larger than the 16 MiB" in warned, warned
    assert f"iconv -f utf-8 -t utf-8 {large} > /dev/null" in warned, warned

    args = ["preflight", "--no-import", "--target", tree, "--patches", library, "--format", "json", "--"]
    done = run_cli_judged(*args, *command, "--chat-template", str(large), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    found = [f for f in json.loads(done.stdout)["findings"] if "--chat-template" in f["message"]]
    assert [f["result"] for f in found] == ["cannot judge"], found


def test_a_template_file_whose_name_holds_braces_is_read_as_a_file(launch, tmp_path):
    """vLLM's open() comes first, whatever the value holds: only a value that does not open is the
    template itself."""
    tree, library, command, env, _marker = launch
    (tmp_path / "{x}.jinja").write_bytes("{{ messages }} café".encode("latin-1"))
    os.mkfifo(tmp_path / "{fifo}")
    (tmp_path / "{dir}").mkdir()
    args = ["preflight", "--no-import", "--target", tree, "--patches", library, "--"]
    for value, why in {"{x}.jinja": "not utf-8 text (byte 0xe9 at offset 18)", "{fifo}": "would wait on it"}.items():
        done = run_cli_judged(*args, *command, "--chat-template", value, env=env, cwd=tmp_path)
        said = " ".join(done.stdout.split())
        assert done.returncode == 1 and f"--chat-template {value}: " in said and why in said, said + done.stderr
    for literal in ("{dir}", "{{ messages }}", "{nowhere}.jinja"):  # open() fails: the value is the template
        done = run_cli_judged(*args, *command, "--chat-template", literal, env=env, cwd=tmp_path)
        assert done.returncode == 0 and "--chat-template" not in done.stdout, done.stdout + done.stderr
