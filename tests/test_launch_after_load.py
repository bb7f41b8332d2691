"""review34 F5 (--middleware), F6 (--generation-config inside vLLM's validation), F16 (the CPU platform
forced): what vLLM's server runs once the model has loaded, judged before the launch. The static
path asks the launch's Python whether it finds each --middleware module; vLLM's validation
(patchkit/_target/engine_config.py) imports it as build_app does and reads the generation config as
init_app_state does; a refusal of the forced CPU platform's own is "cannot judge here". The real
vLLM 0.16.0 is asked in tests/vllm_import/test_validation_after_load_real.py."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from helpers import run_cli_read_only
from importable_vllm import engine_args, venv_importing
from launch_fixtures import write_eagle3_setup, write_model

from patchkit._target import engine_config
from patchkit.launch.command import parse
from patchkit.launch.validation import _verdict, engine_validation
from patchkit.tree.target import run_worker

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
MIDDLEWARE = """
import sys
class Good:
    pass
async def good_function(request, call_next):
    return await call_next(request)
def plain_function(request, call_next):
    return call_next(request)
"""


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """A package `corp_mw` (its `mw` module) and a module that exits as it imports, on sys.path."""
    root = tmp_path / "mods"
    (root / "corp_mw").mkdir(parents=True)
    (root / "corp_mw" / "__init__.py").write_text("")
    (root / "corp_mw" / "mw.py").write_text(MIDDLEWARE)
    (root / "corp_exits.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(root))
    # each test's own: a corp_mw cached by an earlier test points at its directory, which pytest removes
    # after a passed test (test-fast's tmp_path_retention_policy=failed): corp_mw.mw then did not import
    _forget_modules()
    yield root
    _forget_modules()


def _forget_modules() -> None:
    for name in [name for name in sys.modules if name.split(".")[0] in ("corp_mw", "corp_exits")]:
        del sys.modules[name]


@pytest.mark.parametrize(
    ("value", "stage"),
    [
        ("corp_mw.mw.Good", None),
        ("corp_mw.mw.good_function", None),
        ("nodot", "no-dot"),
        ("corp_mw.absent.Good", "import"),
        ("no_such_module_anywhere.Thing", "import"),
        ("corp_exits.Thing", "exit"),
        (".Thing", "import"),
        ("corp_mw.mw.Missing", "attribute"),
        ("corp_mw.mw.plain_function", "kind"),
        ("corp_mw.mw.sys", "kind"),
    ],
)
def test_the_worker_reads_middleware_as_build_app_does(modules, value, stage):
    refused = engine_config.middleware_refusal(value)
    assert (None if refused is None else refused["stage"]) == stage, refused


def test_a_refusal_is_the_cpu_platforms_own_when_it_passed_through_its_file(tmp_path):
    cpu = "/venv/lib/python3.11/site-packages/vllm/platforms/cpu.py"
    other = "/venv/lib/python3.11/site-packages/vllm/config/vllm.py"
    scope: dict = {}
    exec(compile("def refuse():\n    raise RuntimeError('not on the CPU backend')\n", cpu, "exec"), scope)
    exec(compile("def check(f):\n    f()\n", other, "exec"), scope)
    try:
        scope["check"](scope["refuse"])
    except RuntimeError as exc:
        assert engine_config._raised_in_cpu_platform(exc)
    try:
        try:
            scope["check"](scope["refuse"])
        except RuntimeError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as exc:  # a refusal raised from the platform's, as pydantic wraps one
        assert engine_config._raised_in_cpu_platform(exc)
    try:
        scope["check"](lambda: 1 / 0)
    except ZeroDivisionError as exc:
        assert not engine_config._raised_in_cpu_platform(exc)


COMMAND = parse(["vllm", "serve", "/m"], "0.16.0")


def verdict(**answer):
    return _verdict("/venv/bin/python", COMMAND, answer, None)


def test_a_verdict_on_the_forced_cpu_platform_says_so_and_its_own_refusal_is_no_verdict():
    error = "RuntimeError: Chunked-prefill and prefix-cache on the CPU backend is not compatible with FP8 KV cache."
    refused = verdict(status="invalid", error=error, cpu=True, cpu_refused=True)
    assert refused.ok and not refused.judged, refused
    assert refused.message.startswith("cannot judge here: judged on the CPU platform (no accelerator found)")
    assert refused.message.endswith(error) and "accelerator" in str(refused.fix)
    passed = verdict(status="ok", cpu=True)
    assert passed.ok and passed.judged
    assert (
        passed.message
        == "vLLM's create_engine_config() accepts the command (judged on the CPU platform: no accelerator found)"
    )
    failed = verdict(status="invalid", error="ValueError: no such thing", cpu=True, cpu_refused=False)
    assert not failed.ok and failed.message == (
        "vLLM refuses the command (judged on the CPU platform: no accelerator found): ValueError: no such thing"
    )
    assert verdict(status="ok", cpu=False).message == "vLLM's create_engine_config() accepts the command"
    assert verdict(status="invalid", error="RuntimeError: x", cpu=False, cpu_refused=False).ok is False


def test_a_refusal_of_several_lines_reads_as_vllms_words_not_as_escapes():
    """Review38 B9: pydantic's refusal (a line break after "for VllmConfig") was shown with a
    visible \\x0a. Its lines read joined by "; "; a control character inside a line stays escaped
    where the finding is shown (it could harm a terminal)."""
    from patchkit.base.errors import escaped

    error = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
        "  Value error, Too large swap space. 32.0 GiB out of the 23.54 GiB total CPU memory\x1b[2J "
        "[type=value_error]\n\n    For further information visit https://errors.pydantic.dev/2.12/v/value_error"
    )
    for found in (
        verdict(status="invalid", error=error, cpu=True, cpu_refused=True),
        verdict(status="invalid", error=error, cpu=False, cpu_refused=False),
    ):
        shown = escaped(found.message)
        assert "\\x0a" not in shown and "\n" not in shown, shown
        assert "for VllmConfig; Value error, Too large swap space." in shown, shown
        assert "memory\\x1b[2J [type=value_error]; For further information" in shown, shown


def test_an_after_load_refusal_says_which_value_why_and_the_fix():
    found = verdict(
        status="after-load", option="middleware", value="corp.mw.Thing", stage="import",
        error="ModuleNotFoundError: No module named 'corp'", cpu=False,
    )  # fmt: skip
    assert not found.ok and found.message == (
        "--middleware corp.mw.Thing: corp.mw does not import in the launch (ModuleNotFoundError: No module named "
        "'corp'): vLLM refuses the launch once the model has loaded"
    )
    assert found.fix == "install corp.mw where the launch imports it (its venv, or its PYTHONPATH)"
    generation = verdict(
        status="after-load", option="generation-config", value="/gone/gen",
        error="ValueError: Invalid repository ID or local directory specified: '/gone/gen'.\nPlease verify", cpu=True,
    )  # fmt: skip
    assert generation.message == (
        "--generation-config /gone/gen: vLLM cannot read it (ValueError: Invalid repository ID or local directory "
        "specified: '/gone/gen'.): vLLM refuses the launch as it starts (judged on the CPU platform: "
        "no accelerator found)"
    )


def command_findings(done) -> list[dict]:
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]


def test_without_vllm_asked_the_launchs_python_is_asked_whether_it_finds_each_middleware_module(tmp_path):
    """The static path (--no-import): no dot, a top-level module the launch's Python does not find
    (one in the working directory is not on a `vllm` script's path): failed; one its site holds: no
    finding; a submodule not in its package's directories: cannot judge."""
    tree, library = write_eagle3_setup(tmp_path)
    vllm = venv_importing(tree, tmp_path / "venv")
    [site] = (tmp_path / "venv").glob("lib/python*/site-packages")
    (site / "corp_site").mkdir()
    (site / "corp_site" / "__init__.py").write_text("")
    (site / "corp_site" / "mw.py").write_text(MIDDLEWARE)
    work = tmp_path / "work"
    work.mkdir()
    (work / "corp_here.py").write_text(MIDDLEWARE)
    model = write_model(tmp_path / "llama", LLAMA)
    middleware = ["nodot", "corp_here.Good", "corp_site.mw.Good", "corp_site.other.Good"]
    launch = [str(vllm), "serve", str(model), *(f"--middleware={m}" for m in middleware)]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *launch, cwd=work
    )
    assert done.returncode == 1, done.stdout + done.stderr
    messages = [f["message"] for f in command_findings(done)]
    assert any(m.startswith("--middleware nodot: no dot") for m in messages), messages
    assert any(
        m.startswith("--middleware corp_here.Good: no module corp_here in the launch's Python") for m in messages
    )
    assert not any("corp_site.mw" in m for m in messages), messages
    unjudged = [f for f in command_findings(done) if f["result"] == "cannot judge"]
    assert [f["message"] for f in unjudged] == [
        "cannot judge: --middleware corp_site.other.Good: corp_site.other is not found without importing its "
        "package, which may provide it"
    ], messages
    python = tmp_path / "venv" / "bin" / "python"
    module_launch = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--",
        *module_launch, "--middleware", "corp_here.Good", cwd=work,
    )  # fmt: skip
    assert command_findings(done) == [], done.stdout  # `python -m` puts its working directory first
    safe = [str(python), "-P", "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--",
        "env", f"PYTHONPATH={work}", *safe, "--middleware", "corp_here.Good", "--middleware", "json.JSONDecoder",
        cwd=tmp_path,
    )  # fmt: skip
    assert command_findings(done) == [], done.stdout  # safe-path mode: PYTHONPATH's entry comes first


# a vLLM stand-in that finds no platform (the worker forces its CPU platform) and whose engine
# config refuses as 0.16.0 does on it: in the CPU platform's own file, in the configuration's words
# ("on current platform"), and for a reason of the launch's own
FAKE_PLATFORMS = """
class _Unspecified:
    def is_unspecified(self):
        return True


_current_platform = _Unspecified()


def __getattr__(name):
    if name == "current_platform":
        return _current_platform
    raise AttributeError(name)
"""
FAKE_CPU = """
class CpuPlatform:
    def is_unspecified(self):
        return False

    def check_and_update_config(self, values):
        if values["kv_cache_dtype"] == "fp8":
            raise RuntimeError("Chunked-prefill and prefix-cache on the CPU backend is not compatible with FP8 KV cache.")
"""
FAKE_ARG_UTILS = engine_args(
    '"--model"',
    '"--kv-cache-dtype", default="auto"',
    '"--enable-sleep-mode", action="store_true"',
    '"--max-model-len", type=int, default=None',
    '"--middleware", action="append", default=[]',
    config="""
        import vllm.platforms

        if self.values["enable_sleep_mode"]:
            raise ValueError("Sleep mode is not supported on current platform.")
        vllm.platforms.current_platform.check_and_update_config(self.values)
        if (self.values["max_model_len"] or 0) > 1024:
            raise ValueError("User-specified max_model_len (4096) is greater than the derived max_model_len (1024).")
        return object()
    """,
)


def stand_in_vllm(where: Path) -> None:
    """A vllm package of the stand-ins above: a CPU platform and the engine's arguments."""
    for name, text in {
        "vllm/__init__.py": "",
        "vllm/platforms/__init__.py": FAKE_PLATFORMS,
        "vllm/platforms/cpu.py": FAKE_CPU,
        "vllm/engine/__init__.py": "",
        "vllm/engine/arg_utils.py": FAKE_ARG_UTILS,
    }.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)


@pytest.mark.parametrize(
    ("options", "judged", "ok"),
    [
        ([], True, True),
        (["--kv-cache-dtype", "fp8"], False, True),
        (["--enable-sleep-mode"], False, True),
        (["--max-model-len", "4096"], True, False),
        (["--kv-cache-dtype", "fp8", "--middleware", "corp_nowhere.Thing"], True, False),  # fails on any platform
    ],
)
def test_the_worker_says_the_cpu_platform_was_forced_and_which_refusals_are_its_own(tmp_path, options, judged, ok):
    stand_in_vllm(tmp_path)
    arguments = ["--model", str(tmp_path), *options]
    request = {"arguments": arguments, "serve": False, "args": arguments, "cwd": str(tmp_path), "first_path": None}
    environ = {**os.environ, "PYTHONPATH": str(tmp_path)}
    answer = run_worker(
        sys.executable, "engine_config", request, timeout=60, in_process=False, isolated=False, env=environ
    )
    assert answer["cpu"] is True, answer
    found = _verdict(sys.executable, parse(["vllm", "serve", str(tmp_path), *options], "0.16.0"), answer, None)
    assert (found.judged, found.ok) == (judged, ok), found
    if not judged:
        assert found.message.startswith("cannot judge here: judged on the CPU platform (no accelerator found)"), found
    else:
        assert "(judged on the CPU platform: no accelerator found)" in found.message, found
    if "--middleware" in options:
        assert found.message.startswith("--middleware corp_nowhere.Thing: corp_nowhere does not import"), found


def test_a_middleware_module_that_leaves_a_thread_running_does_not_keep_the_worker(tmp_path):
    """vLLM's server lives on with such a thread; the worker answers and ends, not at its time limit."""
    stand_in_vllm(tmp_path)
    (tmp_path / "corp_threads.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\nclass M:\n    pass\n"
    )
    arguments = ["--model", str(tmp_path), "--middleware", "corp_threads.M"]
    request = {"arguments": arguments, "serve": False, "args": arguments, "cwd": str(tmp_path), "first_path": None}
    environ = {**os.environ, "PYTHONPATH": str(tmp_path)}
    started = time.monotonic()
    answer = run_worker(
        sys.executable, "engine_config", request, timeout=20, in_process=False, isolated=False, env=environ
    )
    assert answer["status"] == "ok" and time.monotonic() - started < 15, answer


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("import sys\nsys.exit(3)\n", "corp_ends exits when imported (sys.exit(3))"),
        ("import os\nos._exit(0)\n", "corp_ends ends the process when imported (exit status 0)"),
    ],
)
def test_a_middleware_module_that_ends_the_process_when_imported_is_named_with_its_fix(tmp_path, text, said):
    """review35 N13: not "does not import ... install it" (it is installed), not a failure of vLLM's
    engine-config validation whose fix skips the check: the module ends the launch, and it is the fix."""
    stand_in_vllm(tmp_path)
    (tmp_path / "corp_ends.py").write_text(text)
    launch = ["env", f"PYTHONPATH={tmp_path}", sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    command = parse([*launch, "--model", str(tmp_path), "--middleware", "corp_ends.Thing"], "0.16.0")
    found = engine_validation(sys.executable, command)
    assert not found.ok and found.message.startswith(f"--middleware corp_ends.Thing: {said}: vLLM refuses"), found
    assert str(found.fix).startswith("mend corp_ends ") and "--no-import" not in str(found.fix), found
