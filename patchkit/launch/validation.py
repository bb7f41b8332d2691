"""vLLM's own answers about a launch, each in a subprocess of the target's interpreter under a time
limit: its engine-config validation (patchkit/_target/engine_config.py) and what it says of a model
class (patchkit/_target/model_interface.py)."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from patchkit.base.enums import BuildStatus, WorkerStatus
from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import UNREAD_FIX, Finding, VllmVerdict, cannot_judge
from patchkit.launch.genconfig import AT_START  # the generation config: vLLM's front end reads it as it starts
from patchkit.launch.import_blame import blamed
from patchkit.launch.models import config_download, fetched_by, hub_cache
from patchkit.tree.target import WorkerFailed, run_worker

CHECK = "vllm-validation"
TIMEOUT = 180.0
# transformers' refusal when a model's directory lacks a file it needs (with --trust-remote-code, the
# code its config.json's auto_map names): a plain file name, bounded, as it is put into a command
_MISSING_FILE = re.compile(r"does not appear to have a file named ([\w\-]{1,100}(?:\.[\w\-]{1,20}){0,3})")


def engine_validation(python: str | None, command: LaunchCommand, *, fix: str | None = None) -> Finding:
    """vLLM's own validation of the launch (the first of engine_findings())."""
    return engine_findings(python, command, fix=fix)[0]


def engine_findings(python: str | None, command: LaunchCommand, *, fix: str | None = None) -> list[Finding]:
    """vLLM's validation of the launch, then (when it accepts it and names a drafter model) vLLM's
    own build of the drafter and load of its weights' headers (drafter-build)."""
    if python is None:
        return [cannot_judge(CHECK, "not run: no interpreter known for this target", "give --python PATH")]
    request = {
        "arguments": command.arguments,
        "serve": command.serve,
        "args": command.engine_args(),
        "cwd": command.working_directory(),
        "first_path": command.first_path(),
        "headless": command.headless,
        "build_within": BUILD_WITHIN,
    }
    try:
        answer = run_worker(
            python,
            "engine_config",
            request,
            timeout=TIMEOUT,
            doing=" (vLLM's engine-config validation)",
            in_process=False,
            isolated=False,
            env=command.environ,  # the launch's own: `env -i` leaves vLLM only its prefix
            options=command.loading_options(),  # vLLM loads the bytecode the launch would
            cwd=command.working_directory(),  # where relative PYTHONPATH entries point, as for the launch
        )
    except WorkerFailed as exc:
        stopped = plugin_stopped(exc.partial, exc) or middleware_stopped(exc.partial, exc)
        if stopped is not None:
            return [Finding(CHECK, False, *stopped)]
        if _building(exc.partial):  # vLLM accepted the launch; the drafter's build hung or ended the worker
            said = cannot_judge(BUILD, f"vLLM's build of the drafter did not end: {exc.message}", BUILD_GIVES)
            return [_verdict(python, command, {**exc.partial, "drafter": None}, fix), said]
        if exc.status is not None and exc.status < 0:  # killed: no verdict on the launch, and skipping it is no fix
            return [Finding(CHECK, False, exc.message, exc.hint)]
        return [Finding(CHECK, False, exc.message, "rerun with --no-import to skip vLLM's own validation")]
    stopped = plugin_stopped(answer) or middleware_stopped(answer)
    if stopped is not None:
        return [Finding(CHECK, False, *stopped)]
    if worker_status(answer) == WorkerStatus.NO_VLLM and not settings_blamed(answer):  # not VLLM_* ones alone
        answer = {**answer, "variables": blamed(python, command)}
    built = drafter_finding(answer) if worker_status(answer) == WorkerStatus.OK else None
    return [_verdict(python, command, answer, fix), *([built] if built is not None else [])]


BUILD = "drafter-build"
# get_quant_config (0.12-0.17) on a drafter whose config.json has no quantization_config
OVERRIDES_FAILED = "'function' object has no attribute 'get'"
BUILD_WITHIN = 60.0  # seconds for the drafter's build and load (the worker's TIMEOUT bounds the whole)
BUILD_GIVES = (
    "the static drafter checks still judge it; run preflight where the launch runs (its accelerator) for vLLM's build"
)


def _building(partial: dict[str, Any]) -> bool:
    drafter = partial.get("drafter")
    building = isinstance(drafter, dict) and _built(drafter) == BuildStatus.BUILDING
    return worker_status(partial) == WorkerStatus.OK and building


def _built(drafter: dict[str, Any]) -> BuildStatus | None:
    """The build's status as the enum (None: none, or unknown)."""
    said = drafter.get("status")
    return BuildStatus(said) if isinstance(said, str) and said in tuple(BuildStatus) else None


def drafter_finding(answer: dict[str, Any]) -> Finding | None:
    """The drafter-build finding of the worker's answer (patchkit/_target/drafter_build.py's), or
    None when it built none (no drafter model named)."""
    built = answer.get("drafter")
    if not isinstance(built, dict):
        return None
    method, model, named = (_short(built.get(key)) for key in ("method", "model", "class"))
    ranks = built.get("ranks")
    drafter = f"the {method} drafter {model}" + (f" (as rank 0 of -tp {ranks} too)" if type(ranks) is int else "")
    built_as = _built(built)
    if built_as == BuildStatus.BUILT and built.get("loaded") is True:
        said = (
            f"vLLM builds {drafter} ({named}) and loads its weights' names, shapes and dtypes (read from the headers)"
        )
        return Finding(BUILD, True, said)
    if built_as == BuildStatus.BUILT:
        return Finding(BUILD, True, f"vLLM builds {drafter} ({named}); with --load-format dummy it loads no weights")
    if built_as == BuildStatus.FAILED:
        error = _first_line(str(built.get("error", "")))
        what = (
            f"load the weights of {drafter} into {named or 'its class'}"
            if built.get("stage") == "load"
            else f"build {drafter}"
        )
        fix = (
            "mend the drafter's config.json or weights where vLLM's error points, or use a drafter made for this target"
            if OVERRIDES_FAILED not in error
            else UNREAD_FIX
        )
        return Finding(BUILD, False, f"vLLM cannot {what}: {error}: the launch fails once the target has loaded", fix)
    reason = _short(vllm_words(str(built.get("reason", "not said"))), 400)
    if OVERRIDES_FAILED in reason:  # draft_model: create_vllm_config_for_draft_model raises it, before the build
        error = reason.removeprefix("vLLM's build does not start here: ")  # drafter_build's words for its setup
        message = f"vLLM cannot build the drafter's config for {drafter}: {error}: the launch fails once the target has loaded"
        return Finding(BUILD, False, message, UNREAD_FIX)
    return cannot_judge(BUILD, f"vLLM's build of {drafter}: {reason}", BUILD_GIVES)


def _short(value: object, limit: int = 200) -> str:
    """A text of the worker's answer, bounded (it comes from the launch's files)."""
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


CPU = "judged on the CPU platform: no accelerator found"  # the clause every verdict on it ends with


def _verdict(python: str, command: LaunchCommand, answer: dict[str, Any], fix: str | None) -> Finding:
    """The finding the worker's answer gives; one judged on the CPU platform forced says so, and a
    refusal of that platform's own (vllm/platforms/cpu.py) is no verdict on the launch's machine."""
    status, error = worker_status(answer), vllm_words(str(answer.get("error", "")))
    differs = _read_otherwise(command, answer.get("reading"))
    if differs:
        message = f"vLLM's parser reads the command otherwise than patchkit did: {differs}"
        return Finding(CHECK, False, message, "patchkit's reading is wrong here: report it, with the command")
    names = settings_blamed(answer) if status == WorkerStatus.NO_VLLM else []
    if names:
        blamed = ", ".join(names)
        message = f"vLLM does not import in the launch's environment, for its {blamed} (it imports without): {error}"
        inherited = [name for name in names if name not in command.env]
        fix = f"correct or unset {blamed}" + (
            f" ({', '.join(inherited)}: the launch inherits it from the environment patchkit runs in)"
            if inherited
            else ""
        )
        return Finding(CHECK, False, f"{message}: the launch fails at start", fix)
    if status == WorkerStatus.MEMORY:
        bound = answer.get("bound")
        gib = f"{bound / (1 << 30):g} GiB" if type(bound) is int and bound > 0 else "its memory bound"
        return cannot_judge(
            CHECK,
            f"not run to the end: vLLM's import and engine config took more than {gib} here (patchkit's bound)",
            "look for a file the launch makes vLLM read as it imports (a VLLM_* setting naming a large file or a "
            "device), and fix that setting",
        )
    if status == WorkerStatus.NO_VLLM:
        return cannot_judge(
            CHECK,
            f"not run: vLLM does not import in {python}: {error}",
            "--python PATH of an environment where it does",
        )
    forced = answer.get("cpu") is True
    if forced and answer.get("cpu_refused") is True:
        message = f"cannot judge here: judged on the CPU platform (no accelerator found), which refuses: {error}"
        return Finding(CHECK, True, message, "run preflight where the launch runs, with its accelerator", judged=False)
    if status == WorkerStatus.OK:
        found = Finding(CHECK, True, "vLLM's create_engine_config() accepts the command")
    elif status == WorkerStatus.AFTER_LOAD:
        found = after_load_finding(answer)
    else:  # the clause before vLLM's own text, which may be long
        found = refusal(command, error, fix)
        lead = "vLLM refuses the command:"
        return (
            dataclasses.replace(found, message=found.message.replace(lead, f"{lead[:-1]} ({CPU}):", 1))
            if forced
            else found
        )
    return dataclasses.replace(found, message=f"{found.message} ({CPU})") if forced else found


_SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,80}")


def settings_blamed(answer: dict[str, Any]) -> list[str]:
    """The launch's settings vLLM's import raises with (the worker's VLLM_* ones, or import_blame's)."""
    said = answer.get("variables")
    said = said[:20] if isinstance(said, list) else []
    return [name for name in said if isinstance(name, str) and _SETTING.fullmatch(name)]


AFTER_LOAD = "vLLM refuses the launch once the model has loaded"


def after_load_finding(answer: dict[str, Any]) -> Finding:
    """A failed finding for what vLLM's server refuses, though create_engine_config() accepts the
    command: a --middleware build_app cannot take after the load, a generation config it cannot read
    (its front end reads it as it starts)."""
    value, error = str(answer.get("value", "")), _first_line(str(answer.get("error", "")))
    if answer.get("option") == "generation-config":
        if value in ("auto", "vllm"):  # both read the model's own as the front end starts
            message = f"vLLM cannot read the model's generation config ({error}): {AT_START}"
            fix = "fix the model's generation_config.json, or give --generation-config DIR holding a good one"
            return Finding(CHECK, False, message, fix)
        message = f"--generation-config {value}: vLLM cannot read it ({error}): {AT_START}"
        fix = "give a directory that holds generation_config.json (as the launch's directory sees it), or auto or vllm"
        return Finding(CHECK, False, message, fix)
    module, _, name = value.rpartition(".")
    said, fix = {
        "no-dot": ("no dot: vLLM splits it into a module and a name at the last dot", "give it as MODULE.NAME"),
        "import": (
            f"{module} does not import in the launch ({error})",
            f"install {module} where the launch imports it (its venv, or its PYTHONPATH)",
        ),
        "exit": (f"{module} exits when imported (sys.exit({error}))", _mend(module)),
        "attribute": (f"{module} has no {name}", f"name a class or an async function that {module} defines"),
        "kind": ("neither a class nor an async function", f"name a class or an async function that {module} defines"),
    }.get(str(answer.get("stage")), (error, "give an importable MODULE.NAME"))
    return Finding(CHECK, False, f"--middleware {value}: {said}: {AFTER_LOAD}", fix)


def vllm_words(error: str) -> str:
    """vLLM's message on one line, as its words read: its lines (pydantic's "1 validation error for
    VllmConfig", then the error) joined by "; ", blank ones dropped; a control character inside a
    line is still escaped where the finding is shown."""
    return "; ".join(line.strip() for line in error.splitlines() if line.strip()) or error


def _first_line(error: str) -> str:
    """An exception's first line, bounded: what a finding can hold on a line or two."""
    lines = error.strip().splitlines()
    line = lines[0] if lines else error
    return line if len(line) <= 200 else line[:197] + "..."


def refusal(command: LaunchCommand, error: str, fix: str | None) -> Finding:
    """vLLM's refusal of the launch, with `fix` (the sets' apply, or None); a model file it lacks has
    its own fix, which patching never gives."""
    missing = _MISSING_FILE.search(error)
    if missing is None or not command.model:
        return Finding(CHECK, False, f"vLLM refuses the command: {error}", fix)
    return Finding(CHECK, False, f"vLLM refuses the command: {error}", missing_file_fix(command, missing[1]))


def missing_file_fix(command: LaunchCommand, name: str) -> str:
    """What puts `name` beside the model's config.json: vLLM reads the remote code auto_map names
    when the launch has --trust-remote-code."""
    model = str(command.model)
    why = f"vLLM reads {name} beside config.json"
    if command.trust_remote_code:
        why += " (config.json's auto_map names it and the launch has --trust-remote-code)"
    if os.path.isdir(os.path.join(command.working_directory(), model)):
        return f"{why}: put {name} into the model's directory {model}, then run preflight again"
    revision = command.optional_text("revision")
    download = config_download(model, revision, hub_cache(command.environ), name)
    return f"{why}: fetch it too, {fetched_by(download)}, then run preflight again"


def _read_otherwise(command: LaunchCommand, reading: object) -> str | None:
    """Where vLLM's own reading (the worker's) differs from patchkit's, said; None when it agrees
    (or vLLM read nothing)."""
    if not isinstance(reading, dict):
        return None
    ours = {
        "model": command.model,
        "speculative_config": command.speculative_config,
        "tensor_parallel_size": command.tensor_parallel_size,
        "trust_remote_code": command.trust_remote_code,
    }
    if "tensor_parallel_size" in reading:
        reading = {**reading, "tensor_parallel_size": reading["tensor_parallel_size"] or 1}
    if "trust_remote_code" in reading:
        reading = {**reading, "trust_remote_code": bool(reading["trust_remote_code"])}
    differ = [
        f"{name}: vLLM {reading[name]!r}, patchkit {value!r}"
        for name, value in ours.items()
        if name in reading and reading[name] != value
    ]
    return "; ".join(differ) or None


def model_interface(python: str, command: LaunchCommand, architectures: list[str], function: str) -> VllmVerdict:
    """vLLM's own `function` (e.g. supports_eagle3) on its ModelRegistry's class for `architecture`:
    patchkit/_target/model_interface.py in the target's interpreter (`architectures`: config.json's, in
    order: vLLM builds the first it can load), with the launch's whole
    environment, working directory and first sys.path entry, under the same time limit."""
    asked = f"vLLM's {function}()"
    architecture = " or ".join(architectures)
    request = {"architectures": architectures, "function": function, "first_path": command.first_path()}
    try:
        answer = run_worker(
            python,
            "model_interface",
            request,
            timeout=TIMEOUT,
            doing=f" ({asked} on {architecture})",
            in_process=False,
            isolated=False,
            env=command.environ,
            options=command.loading_options(),
            cwd=command.working_directory(),
        )
    except WorkerFailed as exc:
        stopped = plugin_stopped(exc.partial, exc)
        return (
            VllmVerdict(None, f"{asked} not asked: {exc.message}") if stopped is None else VllmVerdict(False, *stopped)
        )
    stopped = plugin_stopped(answer)
    if stopped is not None:
        return VllmVerdict(False, *stopped)
    status, error = worker_status(answer), str(answer.get("error", ""))
    if status == WorkerStatus.OK:
        return _answered(asked, answer)
    if status == WorkerStatus.NO_VLLM:
        return VllmVerdict(None, f"{asked} not asked: vLLM does not import in {python}: {error}")
    if status == WorkerStatus.UNANSWERED:
        return VllmVerdict(None, f"{asked} not asked: {error}")
    if status == WorkerStatus.NOT_REGISTERED:
        return VllmVerdict(False, f"{asked}: {error}")
    return VllmVerdict(False, f"vLLM cannot load its class for {architecture}: {error}")


def worker_status(answer: dict[str, Any]) -> WorkerStatus | None:
    """The worker's status as the enum: the one place its plain string is read (None: none, or unknown)."""
    status = answer.get("status")
    try:
        return WorkerStatus(status) if isinstance(status, str) else None
    except ValueError:
        return None


def middleware_stopped(answer: dict[str, Any], failed: WorkerFailed | None = None) -> tuple[str, str] | None:
    """(message, fix) when a --middleware module ended the worker while it imported (os._exit, a
    signal; no `failed`: it exited 0) or hung there, as it ends the launch once the model has
    loaded. None otherwise."""
    value = answer.get("value")
    if worker_status(answer) != WorkerStatus.MIDDLEWARE_IMPORTING or not isinstance(value, str):
        return None
    module = value.rpartition(".")[0]
    if failed is not None and failed.timed_out:
        said = f"{module} did not finish importing within {TIMEOUT:g} s"
    else:
        status = 0 if failed is None else failed.status
        said = f"{module} ends the process when imported" + (f" (exit status {status})" if status is not None else "")
    return f"--middleware {value}: {said}: {AFTER_LOAD}", _mend(module)


def _mend(module: str) -> str:
    return (
        f"mend {module} (vLLM imports it in the API server, and the launch ends there), or leave that --middleware out"
    )


def plugin_stopped(answer: dict[str, Any], failed: WorkerFailed | None = None) -> tuple[str, str] | None:
    """(message, fix) when a vLLM general plugin stopped the worker, as it stops the launch: it raised
    (or called sys.exit), or it was running when the worker hung (`failed`, timed out) or ended
    (os._exit, a signal; the answer file then names it). None otherwise."""
    status, plugin = worker_status(answer), answer.get("plugin")
    if status not in (WorkerStatus.PLUGIN_FAILED, WorkerStatus.PLUGIN_RUNNING):
        return None
    named = f"the vllm.general_plugins entry point {plugin!r}" if isinstance(plugin, str) else "a general plugin"
    fix = f"fix or uninstall {named}, or leave it out with VLLM_PLUGINS"
    if status == WorkerStatus.PLUGIN_FAILED:
        return f"vLLM's launch stops at {named}, which raises: {answer.get('error', '')}", fix
    if failed is not None and failed.timed_out:
        return f"vLLM's launch hangs at {named}: it did not return within {TIMEOUT:g} s", fix
    ended = f" (exit status {failed.status})" if failed is not None and failed.status is not None else ""
    return f"vLLM's launch ends at {named}: it ended the process{ended}", fix


def _answered(asked: str, answer: dict[str, Any]) -> VllmVerdict:
    result, name, architecture = bool(answer.get("result")), answer.get("class"), answer.get("architecture")
    if answer.get("plugin") is not True:
        return VllmVerdict(result, f"{asked} is {result} for {name}")
    message = f"{asked} is {result} for {name}, which a vllm.general_plugins entry point registers for {architecture}"
    fix = None if result else f"uninstall the plugin that registers {name}, or leave it out with VLLM_PLUGINS"
    return VllmVerdict(result, message, fix)
