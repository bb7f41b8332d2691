"""Review 7 of the launch (`preflight`, `run`): each finding's regression test, on inputs of its own.

H1: `run` (the static preflight, then exec) never asks vLLM what a general plugin does: a plugin that
re-registers the target's architecture builds another class than the one judged. `run` names every
general plugin the launch loads before it execs, on one line of 80 columns."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest
from helpers import run_cli_judged
from importable_vllm import (
    ARCH,
    PLAIN_CLASS,
    VLLMS_OWN,
    engine_args,
    importable_with_plugins,
    preflight_importing,
    write_plugin,
)
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    WARNING,
    applied,
    findings,
    patchkit_run,
    plain_launch,  # noqa: F401  (the fixture `launch`)
    serve,
    warnings,
    write_eagle3_setup,
    write_model,
)

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse
from patchkit.launch.preflight import launch_text_encoding, locale_text_encoding
from patchkit.launch.validation import plugin_stopped
from patchkit.tree.target import WorkerFailed, run_worker

ASKS = " asks vLLM to judge them"  # the hint under the warning: the full preflight of this tree


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
        assert warnings(done.stderr) == [f"{WARNING}acme"], done.stderr
        # the hint names the preflight of this tree and library (copied from there, it judges the same)
        hints = [line for line in done.stderr.splitlines() if line.startswith("hint:") and ASKS in line]
        assert len(hints) == 1, done.stderr
        assert f"patchkit preflight --target {tree} --patches {library} -- {shlex.join(command)}`{ASKS}" in hints[0]


def test_run_names_a_plugin_on_the_launchs_pythonpath_unless_vllm_plugins_leaves_it_out(launch, tmp_path):
    tree, library, command, env, _ = launch
    applied(tree, library)
    plug = write_plugin(tmp_path / "plug", "zeta", PLAIN_CLASS.format(name="zeta"))
    write_plugin(plug, "other", "def register():\n    pass\n")
    _, done = patchkit_run(tree, library, ["env", f"PYTHONPATH={plug}", *command], env)
    assert done.returncode == 7 and warnings(done.stderr) == [f"{WARNING}other, zeta"], done.stderr

    # vLLM's own rule (vllm.envs): VLLM_PLUGINS set is the comma-separated list of the plugins it loads
    expected = {"": [], "zeta,x": ["zeta"], " zeta,other": ["other"]}
    for allowed, named in expected.items():
        prefix = ["env", f"VLLM_PLUGINS={allowed}", f"PYTHONPATH={plug}"]
        _, done = patchkit_run(tree, library, [*prefix, *command], env)
        shown = [line.removeprefix(WARNING) for line in warnings(done.stderr)]
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
    assert line.startswith(WARNING) and re.search(r" \+[23],\d{3} more$", line), line
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

    # another distribution's plugin whose code is not vLLM's is named, under any name; one named
    # patchkit_guard takes the guard's place in vLLM's plugins when importlib.metadata reads it after the
    # guard's (the directory's listing order): then no launch guard runs, and run refuses
    info = write_plugin(tree, "impostor", "def register():\n    pass\n") / "impostor-1.0.dist-info"
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\npatchkit_guard = impostor_mod:register\n")
    _, done = patchkit_run(tree, library, command, env)
    if _read_last_of_the_guards_name(tree) == "impostor":
        assert done.returncode == 1 and "vLLM never runs the launch guard" in done.stdout + done.stderr, done.stdout
    else:
        assert done.returncode == 7 and warnings(done.stderr) == [f"{WARNING}patchkit_guard"], done.stderr


def _read_last_of_the_guards_name(site: Path) -> str:
    """The distribution whose `patchkit_guard` general plugin vLLM keeps: the last importlib.metadata reads."""
    return [
        dist.metadata["Name"]
        for dist in importlib.metadata.distributions(path=[str(site)])
        for point in dist.entry_points
        if point.group == "vllm.general_plugins" and point.name == "patchkit_guard"
    ][-1]


# --- M1, M2: a plugin's helper process holding the worker's error output is never waited for --------

CHILD = """
    import subprocess, sys

    def register():
        helper = subprocess.Popen(["sleep", "120"], start_new_session={own_session})
        open({pids!r}, "a").write(f"{{helper.pid}}\\n")
"""


def ask_vllm(tree: Path, plug: Path, timeout: float = 60) -> dict:
    """The model_interface worker's answer for DeepseekV3, in a subprocess with `plug` on its path."""
    env = {**os.environ, **importable_with_plugins(tree)}
    env["PYTHONPATH"] += f"{os.pathsep}{plug}"
    request = {"architectures": [ARCH], "function": "supports_eagle3", "first_path": None}
    return run_worker(
        sys.executable, "model_interface", request, timeout=timeout, in_process=False, isolated=False, env=env
    )


def helpers_of(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def ended(pid: int, within: float = 5) -> bool:
    """Whether `pid` ends within `within` seconds (a SIGKILL is delivered a moment later)."""
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.mark.parametrize("own_session", [False, True], ids=["child", "daemon"])
def test_a_plugins_helper_holding_stderr_does_not_hold_the_answer(tmp_path, own_session):
    tree, _ = write_eagle3_setup(tmp_path)
    pids = tmp_path / "pids"
    plug = write_plugin(tmp_path / "plug", "helping", CHILD.format(own_session=own_session, pids=str(pids)))
    started = time.monotonic()
    try:
        answer = ask_vllm(tree, plug)
        took = time.monotonic() - started
        assert answer["status"] == "ok" and took < 30, (answer, took)  # before: until the helper's exit (120 s)
        (helper,) = helpers_of(pids)
        # the worker's own session is cleared once it answered; a daemon in its own session is not patchkit's
        assert ended(helper) != own_session
    finally:
        for pid in helpers_of(pids) if pids.exists() else []:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # only the helpers this test's plugin started, by pid


HANGS = (
    CHILD
    + """
        import time
        time.sleep(600)
"""
)


def test_a_worker_past_its_time_is_killed_and_a_daemon_holding_stderr_not_waited_for(tmp_path):
    tree, _ = write_eagle3_setup(tmp_path)
    pids = tmp_path / "pids"
    plug = write_plugin(tmp_path / "plug", "stuck", HANGS.format(own_session=True, pids=str(pids)))
    started = time.monotonic()
    try:
        with pytest.raises(WorkerFailed) as failed:
            ask_vllm(tree, plug, timeout=3)
        took = time.monotonic() - started
        assert failed.value.timed_out and took < 30, took  # before: the kill, then until the daemon's exit
        stopped = plugin_stopped(failed.value.partial, failed.value)  # M3: the plugin it hung in is named
        assert stopped is not None and "hangs at the vllm.general_plugins entry point 'stuck'" in stopped[0], stopped
    finally:
        for pid in helpers_of(pids) if pids.exists() else []:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# --- M3: a plugin that ends the process (or hangs) in register() is named as the cause ----------------

ENDS = {
    "sys.exit": "import sys\n\ndef register():\n    sys.exit(0)\n",
    "os._exit": "import os\n\ndef register():\n    os._exit(0)\n",
    "SIGKILL": "import os, signal\n\ndef register():\n    os.kill(os.getpid(), signal.SIGKILL)\n",
}


# vLLM's engine arguments, just enough for the engine_config worker to get past them (with the short
# option the command uses, which the static reading looks for in this file)
FAKE_ARG_UTILS = engine_args('"model", nargs="?"', head='SHORT = ["-tp"]', config="return None")


def importable_with_engine(tree: Path) -> dict[str, str]:
    env = importable_with_plugins(tree)
    (tree / "vllm" / "engine").mkdir(exist_ok=True)
    (tree / "vllm" / "engine" / "arg_utils.py").write_text(FAKE_ARG_UTILS)
    return env


@pytest.mark.parametrize("how", list(ENDS))
def test_a_plugin_that_ends_the_process_is_named_by_both_questions_to_vllm(tmp_path, how):
    tree, library = write_eagle3_setup(tmp_path)
    command = serve(write_model(tmp_path / "models" / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    env = importable_with_engine(tree)
    applied(tree, library)
    alone = preflight_importing(tree, library, command, env)
    assert alone.returncode == 0, alone.stdout + alone.stderr  # both questions answered, without the plugin
    plug = write_plugin(tmp_path / "plug", "quitter", ENDS[how])
    done = preflight_importing(tree, library, command, {"PYTHONPATH": f"{env['PYTHONPATH']}:{plug}"})
    assert done.returncode == 1, done.stdout + done.stderr
    found = findings(done)
    for check in ("supports-eagle3", "vllm-validation"):
        assert not found[check]["ok"], found[check]
        assert "the vllm.general_plugins entry point 'quitter'" in found[check]["message"], found[check]
        assert "parser" not in found[check]["message"] and "'quitter'" in found[check]["fix"], found[check]


# --- L1: config.json's architectures holding other than names: vLLM refuses the model ---------------


@pytest.mark.parametrize("odd", [None, 1, ["KimiK25ForConditionalGeneration"]], ids=["null", "int", "list"])
def test_an_architecture_that_is_not_a_name_is_refused_before_the_launch(launch, tmp_path, odd):
    tree, library, command, env, marker = launch
    applied(tree, library)
    config = tmp_path / "kimi" / "config.json"
    data = json.loads(config.read_text())
    data["architectures"] = [odd, *data["architectures"]]
    config.write_text(json.dumps(data))
    _, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 1 and not marker.exists(), done.stdout + done.stderr
    assert f"{config}: its architectures hold {json.dumps(odd)}, not a name: vLLM refuses" in done.stdout


# --- L3: thousands of plugins in preflight --no-import's note: a few names and a count --------------


def test_the_not_judged_note_names_a_few_plugins_and_counts_the_rest(launch, tmp_path):
    tree, library, command, _, _ = launch
    applied(tree, library)
    many = tmp_path / "many"
    for number in range(3000):
        write_plugin(many, f"plugin_number_{number:04d}", "def register():\n    pass\n")
    args = ["preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--"]
    supports = findings(run_cli_judged(*args, "env", f"PYTHONPATH={many}", *command))["supports-eagle3"]
    note = supports["message"].split("; not judged: ")[1]
    assert note.startswith("the class the general plugins plugin_number_0000, plugin_number_0001"), note
    assert " +2,99" in note and " more may register for " in note and len(note) < 200, note  # before: 20,000


# --- L5: Python's own long option with a value, read as CPython reads it --------------------------


@pytest.mark.parametrize("mode", ["always", "never", "default"])
def test_pythons_check_hash_based_pycs_is_read_before_m(mode):
    words = ["python3", "-E", "--check-hash-based-pycs", mode, "-s", "-m", "vllm.entrypoints.cli.main", "serve"]
    read = parse([*words, "lab/m"], "0.16.0")
    assert read.model == "lab/m" and read.python_options() == ["-E", "-s"]


@pytest.mark.parametrize("spelled", [["--check-hash-based-pycs=never"], ["--check-hash-based-pycs", "sometimes"]])
def test_what_python_refuses_of_it_is_still_not_a_launch(spelled):
    """Python 3.11 refuses both (no `=` form; three modes): the launch never runs vLLM."""
    with pytest.raises(BadInput, match="not a vLLM launch"):
        parse(["python3", *spelled, "-m", "vllm.entrypoints.cli.main", "serve", "lab/m"], "0.16.0")


# --- review 6 L1: a --chat-template vLLM cannot load is a finding, not a lost load ------------------


def test_a_chat_template_vllm_cannot_load_is_refused_before_the_launch(launch, tmp_path):
    tree, library, command, env, marker = launch
    applied(tree, library)
    (tmp_path / "mine.jinja").write_text("{{ messages }}")
    _, done = patchkit_run(tree, library, [*command, "--chat-template", "template_basic.jinja"], env)
    assert done.returncode == 7, done.stdout + done.stderr  # no templates in the tree (fetched): cannot judge
    assert "holds no vllm/transformers_utils/chat_templates/ to tell" in " ".join(done.stderr.split()), done.stderr
    builtin = tree / "vllm" / "transformers_utils" / "chat_templates"
    builtin.mkdir(parents=True)
    (builtin / "template_basic.jinja").write_text("{{ messages }}")
    os.mkfifo(tmp_path / "fifo.jinja")
    loads = [str(tmp_path / "mine.jinja"), "template_basic.jinja", "{{ messages }}", ""]
    for template in loads:  # a file, vLLM's own template by name, the template itself, none
        _, done = patchkit_run(tree, library, [*command, "--chat-template", template], env)
        assert done.returncode == 7, (template, done.stdout + done.stderr)
    marker.unlink()
    refused = {"./missing.jinja": "no such file", str(tmp_path / "fifo.jinja"): "not a regular file"}
    for template, why in refused.items():
        _, done = patchkit_run(tree, library, [*command, "--chat-template", template], env)
        assert done.returncode == 1 and not marker.exists(), (template, done.stdout + done.stderr)
        assert f"--chat-template {template}: {why}" in done.stdout, done.stdout


# --- files vLLM opens only once the model has loaded: the SSL files, static LoRA adapters ------------


def test_ssl_files_vllm_could_not_open_after_the_load_are_refused_before_it(launch, tmp_path):
    tree, library, command, env, marker = launch
    applied(tree, library)
    (tmp_path / "key.pem").write_text("not PEM: OpenSSL refuses it (tests/test_after_load_files.py)\n")
    os.mkfifo(tmp_path / "cert.fifo")
    (tmp_path / "closed.pem").write_text("x")
    (tmp_path / "closed.pem").chmod(0)
    readable = ["--ssl-keyfile", str(tmp_path / "key.pem"), "--ssl-certfile", str(tmp_path / "key.pem")]
    _, done = patchkit_run(tree, library, [*command, *readable], env)
    assert done.returncode == 1 and "OpenSSL cannot load a certificate" in done.stdout, done.stdout + done.stderr
    refused = [
        ("--ssl-certfile", "./nokey.pem", "no such file"),
        ("--ssl-certfile", str(tmp_path / "cert.fifo"), "not a regular file"),
    ]
    if os.geteuid() != 0:  # root reads a file of mode 0 all the same
        refused.append(("--ssl-ca-certs", str(tmp_path / "closed.pem"), "Permission denied"))
    for option, value, why in refused:  # the CA file is read only when the launch serves TLS
        tls = ["--ssl-certfile", str(tmp_path / "key.pem")] if option == "--ssl-ca-certs" else []
        _, done = patchkit_run(tree, library, [*command, *tls, option, value], env)
        said = " ".join(done.stdout.split())
        assert done.returncode == 1 and not marker.exists(), (option, said + done.stderr)
        assert f"{option} {value}: {why}" in said and "vLLM refuses the launch once the model has loaded" in said, said


def test_a_static_lora_adapter_vllm_could_not_load_is_refused_and_a_hub_id_left_to_vllm(launch, tmp_path):
    tree, library, command, env, marker = launch
    applied(tree, library)
    adapter, empty = tmp_path / "adapter", tmp_path / "empty"
    adapter.mkdir()
    empty.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}')
    (adapter / "adapter_model.safetensors").write_bytes(b"\x02" + b"\x00" * 7 + b"{}")  # no tensor, a file
    good = ["a=" + str(adapter), json.dumps({"name": "b", "path": str(adapter)}), "c=org/adapter-on-the-hub"]
    _, done = patchkit_run(tree, library, [*command, "--enable-lora", "--lora-modules", *good], env)
    assert done.returncode == 7, done.stdout + done.stderr
    marker.unlink()
    for entry, path in [
        ("a=/nowhere/adapter", "/nowhere/adapter"),
        (json.dumps({"name": "e", "path": str(empty)}), str(empty)),
        ("r=./nowhere", "./nowhere"),  # no hub id either: the download fails, then the load
    ]:
        _, done = patchkit_run(tree, library, [*command, "--enable-lora", "--lora-modules", entry], env)
        said = " ".join(done.stdout.split())
        assert done.returncode == 1 and not marker.exists(), said + done.stderr
        assert f"--lora-modules {path}: adapter_config.json there: no such file" in said, said


# --- review 6: the static plugin scan follows the directories site-packages' .pth files add ---------


def test_a_plugin_in_a_directory_a_pth_file_adds_is_named(launch, tmp_path):
    tree, library, command, env, _ = launch
    applied(tree, library)
    write_plugin(tmp_path / "added", "by_pth", "def register():\n    pass\n")
    write_plugin(tmp_path / "absolute", "by_abs", "def register():\n    pass\n")
    (tree / "extra.pth").write_text(f"# a comment\n../added\nimport sys\n{tmp_path / 'absolute'}\n/nowhere\n")
    os.mkfifo(tree / "stuck.pth")  # read bounded, never waited on
    _, done = patchkit_run(tree, library, command, env)
    assert done.returncode == 7 and warnings(done.stderr) == [f"{WARNING}by_abs, by_pth"], done.stderr


# --- L4: full preflight holds the tree's lock only while it reads the tree, not while vLLM answers ----

SLOW = """
    import pathlib, time

    def register():
        pathlib.Path({started!r}).touch()
        deadline = time.monotonic() + 25
        while not pathlib.Path({answer!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
"""


def test_the_tree_lock_is_free_while_vllm_is_asked(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    command = serve(write_model(tmp_path / "models" / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    env = importable_with_plugins(tree)
    applied(tree, library)
    started, answer = tmp_path / "asked", tmp_path / "answer"  # vLLM answers once the test says so (25 s at most)
    plug = write_plugin(tmp_path / "plug", "slow", SLOW.format(started=str(started), answer=str(answer)))
    args = [
        "preflight",
        "--target",
        str(tree),
        "--python",
        sys.executable,
        "--patches",
        str(library),
        "--format",
        "json",
    ]
    first_env = {**os.environ, "PYTHONPATH": f"{env['PYTHONPATH']}:{plug}"}
    first = subprocess.Popen(
        [sys.executable, "-m", "patchkit", *args, "--", *command], env=first_env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), "the first preflight never asked vLLM"
        second = run_cli_judged(*args, "--no-import", "--", *command, env={"PATCHKIT_LOCK_TIMEOUT": "2"})
        assert second.returncode == 0, second.stdout + second.stderr  # before: "another patchkit is working on"
        assert first.poll() is None  # the first was still waiting for vLLM's answer all that time
        answer.touch()
        stdout, _ = first.communicate(timeout=200)
        assert first.returncode == 0 and findings(subprocess.CompletedProcess([], 0, stdout))["supports-eagle3"]["ok"]
    finally:
        if first.poll() is None:
            first.kill()  # this test's own preflight, by its Popen
            first.wait()


def test_a_record_that_changed_while_vllm_was_asked_is_cannot_judge(tmp_path):
    """The lock is not held while vLLM answers: a record that is not the same bytes afterwards (a
    patchkit writer ran; here the plugin stands in for one) makes the answer no answer."""
    tree, library = write_eagle3_setup(tmp_path)
    command = serve(write_model(tmp_path / "models" / "dsv3", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    env = importable_with_plugins(tree)
    applied(tree, library)
    record = tree / ".patchkit" / "state.json"
    body = f"import pathlib\n\ndef register():\n    p = pathlib.Path({str(record)!r})\n    p.write_text(p.read_text() + ' ')\n"
    plug = write_plugin(tmp_path / "plug", "writer", body)
    done = preflight_importing(tree, library, command, {"PYTHONPATH": f"{env['PYTHONPATH']}:{plug}"})
    assert done.returncode == 4 and "changed while preflight read it" in done.stdout + done.stderr, done.stdout


def test_a_chat_template_that_is_not_text_in_the_launch_encoding_is_refused(launch, tmp_path):
    """vLLM reads --chat-template with open().read() after the model loaded: bytes that do not decode
    raise UnicodeDecodeError, no OSError, so no built-in template stands in for them."""
    tree, library, command, env, marker = launch
    applied(tree, library)
    (tmp_path / "utf8.jinja").write_bytes("{{ messages }} été".encode())
    (tmp_path / "latin1.jinja").write_bytes("{{ messages }} été".encode("latin-1"))
    utf8 = {**env, "LC_ALL": "C.UTF-8"}
    _, done = patchkit_run(tree, library, [*command, "--chat-template", str(tmp_path / "utf8.jinja")], utf8)
    assert done.returncode == 7, done.stdout + done.stderr
    marker.unlink()
    _, done = patchkit_run(tree, library, [*command, "--chat-template", str(tmp_path / "latin1.jinja")], utf8)
    said = " ".join(done.stdout.split())
    assert done.returncode == 1 and not marker.exists(), said + done.stderr
    assert f"--chat-template {tmp_path / 'latin1.jinja'}: not utf-8 text (byte 0xe9 at offset 15)" in said, said
    assert "save the template as utf-8 text" in said, said


@pytest.mark.parametrize(
    ("environ", "encoding"),
    [
        ({}, "utf-8"),
        ({"LANG": "C"}, "utf-8"),
        ({"LANG": "en_US.ISO-8859-1"}, "iso8859-1"),
        ({"LANG": "en_US.ISO-8859-1", "PYTHONUTF8": "1"}, "utf-8"),
        ({"LANG": "de_DE.ISO-8859-15@euro", "LC_ALL": "POSIX"}, "utf-8"),
        ({"LC_CTYPE": "ja_JP.eucJP"}, "euc_jp"),
        ({"LANG": "xx_XX.no-such-codeset"}, "utf-8"),
    ],
)
def test_the_launch_encoding_told_from_the_variables_alone_follows_its_locale(environ, encoding):
    """What is said when the launch's Python cannot be asked (it is not found: the launch fails anyway)."""
    assert locale_text_encoding(environ) == encoding


def _installed(name: str) -> bool:
    said = subprocess.run(["locale", "-a"], capture_output=True, text=True, check=False).stdout.lower()
    return name.lower().replace("-", "") in said.replace("-", "")


@pytest.mark.parametrize(
    ("words", "options"),
    [
        (["LANG=en_US.ISO-8859-1"], []),  # installed here or not: only the launch's Python knows
        (["LC_ALL=C", "PYTHONUTF8=0"], []),  # UTF-8 mode off under C: ASCII
        (["LC_ALL=C"], ["-X", "utf8=0"]),
        (["LC_ALL=C", "PYTHONUTF8=0"], ["-E"]),  # -E: the variable is not read, C is coerced to UTF-8
        (["LC_ALL=C.UTF-8"], []),
        (["LANG=en_US.ISO-8859-1", "PYTHONUTF8=1"], []),
    ],
)
def test_the_template_is_judged_in_the_encoding_the_launchs_own_python_reads_it_in(tmp_path, words, options):
    """A --chat-template is text in the encoding open() reads it in: the launch's Python decides it at its
    start (a locale that is not installed is C to it, UTF-8 mode, -E, -X utf8), so patchkit asks that
    Python with the launch's environment and options, and agrees with a real read on every template."""
    templates = {
        "latin1": "{{ messages }} \u00e9t\u00e9".encode("latin-1"),
        "utf8": "{{ messages }} \u00e9t\u00e9".encode(),
    }
    command = parse(
        ["env", *words, sys.executable, *options, "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    )
    encoding = launch_text_encoding(command)
    env = {**os.environ, **dict(word.split("=", 1) for word in words)}
    for name, data in templates.items():
        path = tmp_path / f"{name}.jinja"
        path.write_bytes(data)
        read = subprocess.run([sys.executable, *options, "-c", f"open({str(path)!r}).read()"], env=env, check=False)
        try:
            data.decode(encoding)
            decodes = True
        except UnicodeDecodeError:
            decodes = False
        assert decodes == (read.returncode == 0), (words, options, name, encoding)
    if words == ["LANG=en_US.ISO-8859-1"] and not _installed("en_US.ISO-8859-1"):
        assert encoding == "utf-8"  # the case patchkit misjudged: that locale's name read as its codeset
