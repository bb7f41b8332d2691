"""Which of a launch's settings make vLLM's import raise (the package, then its engine arguments,
as patchkit/_target/engine_config.py imports them), when vLLM does not import in the launch's environment: torch reads TORCH_LOGS as it imports and raises on a name it does not know,
huggingface_hub int()s HF_HUB_ETAG_TIMEOUT, and so on. Each question is a fresh import in the
target's interpreter (patchkit/_target/engine_config.py, import_only), with some settings unset: a
package such as torch cannot be imported twice in one process."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from patchkit.base.enums import WorkerStatus
from patchkit.launch.command import LaunchCommand
from patchkit.tree.target import WorkerFailed, run_worker

BUDGET = 180.0  # seconds for all the fresh imports of one launch together
# what the launch inherits that the libraries vLLM imports read as they import (its `env` prefix's
# own settings are all asked about)
READ_AT_IMPORT = re.compile(
    r"(?:TORCH|PYTORCH|TORCHINDUCTOR|TORCHDYNAMO|TRITON|HF|HUGGINGFACE|TRANSFORMERS|TOKENIZERS)_"
)


def suspects(command: LaunchCommand) -> list[str]:
    """The settings asked about: every one the launch's `env` prefix gives, then those it inherits
    that READ_AT_IMPORT names. Not PYTHON* ones: unset, they change which vLLM is imported."""
    own = sorted(name for name in command.env if not name.startswith("PYTHON"))
    inherited = sorted(name for name in command.environ if READ_AT_IMPORT.match(name) and name not in command.env)
    return own + inherited


def blamed(python: str, command: LaunchCommand) -> list[str]:
    """The settings vLLM's import raises with, as the launch runs: when it imports with every suspect
    unset, those it does not import with alone (the others unset); all of a group whose members
    raise only together, or that the time left cannot split. [] when it does not import without them
    either (or there are none, or no answer within BUDGET)."""
    names = suspects(command)
    if not names:
        return []
    until = time.monotonic() + BUDGET

    def raises_with(kept: list[str]) -> bool | None:  # None: not answered
        return _raises(python, command, [name for name in names if name not in kept], until)

    if raises_with([]) is not False:
        return []
    return _narrowed(names, raises_with)


def _narrowed(names: list[str], raises_with: Callable[[list[str]], bool | None]) -> list[str]:
    """The members of `names` (the import raises with them all kept) it raises with, halving the group."""
    if len(names) == 1:
        return names
    found: list[str] = []
    for half in (names[: len(names) // 2], names[len(names) // 2 :]):
        raised = raises_with(half)
        if raised is None:
            return names
        if raised:
            found += _narrowed(half, raises_with)
    return found or names


def _raises(python: str, command: LaunchCommand, unset: list[str], until: float) -> bool | None:
    """Whether vLLM's import raises in the launch's environment with `unset` unset (None: no answer)."""
    left = until - time.monotonic()
    if left <= 1:
        return None
    environ = {name: value for name, value in command.environ.items() if name not in unset}
    try:
        answer = run_worker(
            python,
            "engine_config",
            {"import_only": True, "first_path": command.first_path()},
            timeout=left,
            doing=" (vLLM's import, without some of the launch's settings)",
            in_process=False,
            isolated=False,
            env=environ,
            options=command.loading_options(),
            cwd=command.working_directory(),
        )
    except WorkerFailed:
        return None
    status = WorkerStatus(answer["status"]) if answer.get("status") in tuple(WorkerStatus) else None
    return None if status not in (WorkerStatus.OK, WorkerStatus.NO_VLLM) else status == WorkerStatus.NO_VLLM
