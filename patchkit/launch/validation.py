"""vLLM's own engine-config validation of a launch, in a subprocess of the target's interpreter
(patchkit/_target/engine_config.py), under a time limit."""

from __future__ import annotations

from patchkit.launch.command import LaunchCommand
from patchkit.launch.engine import Finding

CHECK = "vllm-validation"
TIMEOUT = 180.0


def engine_validation(python: str | None, command: LaunchCommand, *, fix: str | None = None) -> Finding:
    from patchkit.target import WorkerFailed, run_worker

    if python is None:
        return Finding(CHECK, True, "skipped: no interpreter known for this target (give --python)")
    request = {"args": command.engine_args(), "env": command.env}
    try:
        answer = run_worker(
            python,
            "engine_config",
            request,
            timeout=TIMEOUT,
            doing=" (vLLM's engine-config validation)",
            in_process=False,
            isolated=False,
        )
    except WorkerFailed as exc:
        return Finding(CHECK, False, exc.message, "rerun with --no-import to skip vLLM's own validation")
    status, error = answer.get("status"), str(answer.get("error", ""))
    if status == "ok":
        return Finding(CHECK, True, "vLLM's create_engine_config() accepts the command")
    if status == "no-vllm":
        return Finding(CHECK, True, f"skipped: vLLM does not import in {python}: {error}")
    return Finding(CHECK, False, f"vLLM refuses the command: {error}", fix)
