"""The files a launch names that vLLM opens only once the model has loaded: uvicorn's SSL key,
certificate and CA file (serve_http, after the engine is built) and the static LoRA adapters of
--lora-modules (init_static_loras). A missing or unreadable one fails the launch after a load of
minutes, so preflight and run judge them first, bounded and never blocking on a fifo."""

from __future__ import annotations

import json
import os
import re

from patchkit.base.fsutil import read_regular
from patchkit.launch.command import LaunchCommand

SSL_FILES = ("ssl-keyfile", "ssl-certfile", "ssl-ca-certs")
ADAPTER_CONFIG = "adapter_config.json"  # what vLLM's PEFTHelper.from_local_dir reads first
_LIMIT = 16 << 20  # a key, a certificate bundle or an adapter's config: far smaller
AFTER_LOAD = "vLLM refuses the launch once the model has loaded"


def late_file_problems(command: LaunchCommand) -> list[tuple[str, str]]:
    """(message, fix) for each such file vLLM could not read."""
    found = []
    for option in SSL_FILES:
        value = command.optional_text(option)
        why = None if value is None else _unreadable(os.path.join(command.working_directory(), value))
        if value is not None and why is not None:
            found.append((f"--{option} {value}: {why}: {AFTER_LOAD}", _FIX))
    return found + [problem for path in _lora_paths(command) if (problem := _lora_problem(path, command))]


_FIX = "give a readable file's path, as the launch's directory sees it"


def _unreadable(path: str) -> str | None:
    """Why open() in the launch could not read `path` (None: it can), never waiting on a fifo."""
    try:
        read_regular(path, 1, follow_symlinks=True, head=True)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:  # a fifo, a directory, a device, no permission
        return exc.strerror or str(exc)
    return None


# a name the hub could hold (`org/name`, `name`: huggingface_hub's repo id rule): vLLM downloads it; any other
# relative path it cannot find fails the download, then the load
_HUB_ID = re.compile(r"(?!.*(?:--|\.\.))[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?(?:/[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?)?")


def _lora_paths(command: LaunchCommand) -> list[str]:
    """The path of each --lora-modules entry (`name=path`, or JSON with a "path"), as written."""
    entries = command.options.get("lora-modules") or []
    paths = []
    for entry in entries if isinstance(entries, list) else []:
        text = str(entry)
        if text.lstrip().startswith("{"):
            with_path = _json_object(text).get("path")
            paths += [with_path] if isinstance(with_path, str) else []
        elif "=" in text:
            paths.append(text.split("=", 1)[1])
    return paths


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # the reading of the command refused it already
        return {}
    return value if isinstance(value, dict) else {}


def _home_expanded(path: str, command: LaunchCommand) -> str:
    """`~` as the launch's Python expands it: its HOME (`~user`: that user's home)."""
    home = command.environ.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return os.path.expanduser(path)


def _lora_problem(path: str, command: LaunchCommand) -> tuple[str, str] | None:
    """A local adapter (an absolute or `~` path, or a relative one that exists: vLLM's
    get_adapter_absolute_path) vLLM could not load; a hub id is vLLM's to download, not judged."""
    cwd = command.working_directory()
    local = _home_expanded(path, command) if path.startswith("~") else os.path.join(cwd, path)
    if not (os.path.isabs(path) or path.startswith("~") or os.path.lexists(local)) and _HUB_ID.fullmatch(path):
        return None
    why = _unreadable(os.path.join(local, ADAPTER_CONFIG))
    if why is None:
        return None
    fix = f"give the directory of a LoRA adapter (it holds {ADAPTER_CONFIG}), as the launch's directory sees it"
    return f"--lora-modules {path}: {ADAPTER_CONFIG} there: {why}: {AFTER_LOAD}", fix
