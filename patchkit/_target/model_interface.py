"""vLLM's own answer about a model class: a function of vllm.model_executor.models.interfaces (for
example supports_eagle3) on the class vLLM's ModelRegistry resolves for an architecture, after vLLM's
general plugins ran as they run before vLLM builds a model (EngineArgs.__post_init__): a plugin may
register another class for the architecture.

request: {"architectures": [name, ...] (config.json's), "function": name in interfaces}
answer:  {"status": "ok", "architecture": the one vLLM builds (the first registered whose class loads),
          "class": "module.Class", "result": bool, "plugin": bool (a plugin registered it)}
       | {"status": "plugin-failed", "plugin": entry point name or None, "error": text}
       | {"status": "plugin-running", "plugin": name}: left in the answer file by a plugin that hung or
         ended the process while it ran
       | {"status": "no-vllm" | "unanswered" | "not-registered" | "error", "error": text}
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any

INTERFACES = "vllm.model_executor.models.interfaces"
PLUGINS = "vllm.plugins"
GENERAL_PLUGINS = "vllm.general_plugins"  # vllm.plugins.DEFAULT_PLUGINS_GROUP
ANSWER: list[str] = []  # the answer file, when run by path (in-process: none)


class PluginFailed(Exception):
    """A general plugin raised: vLLM's launch stops there (its loader calls each plugin unguarded)."""

    def __init__(self, name: str | None, error: str) -> None:
        super().__init__(error)
        self.name, self.error = name, error


def work(request: dict[str, Any]) -> dict[str, Any]:
    # run in the launch's own environment (patchkit passes it whole); offline added: nothing downloaded
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        registry = importlib.import_module("vllm.model_executor.models").ModelRegistry
        function = getattr(importlib.import_module(INTERFACES), request["function"])
        plugins = importlib.import_module(PLUGINS)
    except Exception as exc:  # vLLM does not import here: the question is skipped, not failed
        return {"status": "no-vllm", "error": _error_text(exc)}
    models = getattr(registry, "models", None)
    if not isinstance(models, dict):  # a registry of another shape: not asked, rather than a wrong "no"
        return {"status": "unanswered", "error": "this vLLM's ModelRegistry has no table of models"}
    architectures = request["architectures"]  # config.json's, in order: vLLM builds the first it can load
    in_tree = {name: models.get(name) for name in architectures}
    try:
        load_general_plugins(plugins)
    except PluginFailed as failed:
        return {"status": "plugin-failed", "plugin": failed.name, "error": failed.error}
    registered = [name for name in architectures if models.get(name) is not None]
    if not registered:
        return {"status": "not-registered", "error": f"vLLM's ModelRegistry has no {' or '.join(architectures)}"}
    failures = []
    for architecture in registered:  # as resolve_model_cls: one whose class does not import is passed over
        try:
            model_class = models[architecture].load_model_cls()
        except Exception as exc:  # the launch fails on it too, when no later one loads
            failures.append(_error_text(exc))
            continue
        try:
            result = bool(function(model_class))
        except Exception as exc:
            return {"status": "error", "error": _error_text(exc)}
        name = f"{model_class.__module__}.{model_class.__qualname__}"
        plugin = models[architecture] is not in_tree[architecture]
        return {"status": "ok", "architecture": architecture, "class": name, "result": result, "plugin": plugin}
    return {"status": "error", "error": "; ".join(failures)}


def load_general_plugins(plugins: Any) -> None:  # vllm.plugins
    """Run vLLM's general plugins as its load_general_plugins() does (its own loader picks them: the
    launch's VLLM_PLUGINS, a plugin that does not import skipped), naming a plugin that raises or
    exits; each plugin's name is in the answer file while it runs (one that hangs, or ends the
    process, is named by it)."""
    by_group = getattr(plugins, "load_plugins_by_group", None)
    if by_group is None:  # a vllm.plugins without it: its own loader, which names no plugin
        try:
            plugins.load_general_plugins()
        except Exception as exc:
            raise PluginFailed(None, _error_text(exc)) from exc
        return
    plugins.plugins_loaded = True  # as load_general_plugins() marks it: nothing runs twice
    for name, func in by_group(group=getattr(plugins, "DEFAULT_PLUGINS_GROUP", GENERAL_PLUGINS)).items():
        _running(str(name))
        try:
            func()
        except MemoryError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit() in a plugin: vLLM's process ends there too
            raise PluginFailed(str(name), _error_text(exc)) from exc
    _running(None)


def _running(plugin: str | None) -> None:
    """The general plugin about to run, in the answer file (none: removed) while the worker runs by path."""
    if not ANSWER:
        return
    if plugin is not None:
        write_answer(ANSWER[0], {"status": "plugin-running", "plugin": plugin})
    elif os.path.exists(ANSWER[0]):
        os.unlink(ANSWER[0])


def _error_text(exc: BaseException) -> str:
    """The exception as the answer carries it: its head (where the problem is named) and its end,
    the middle left out past 600 characters; pydantic's "For further information visit" lines dropped."""
    lines = traceback.format_exception_only(type(exc), exc)
    said = [line for line in "".join(lines).splitlines() if not line.strip().startswith("For further information")]
    text = "\n".join(said).strip()
    return text if len(text) <= 600 else f"{text[:450]} ... ({len(text) - 600:,} characters left out) ... {text[-150:]}"


def write_answer(path: str, answer: object) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(answer, f)
    os.replace(path + ".tmp", path)


def _unshadow() -> None:
    """Run by path, this directory is sys.path[0]: drop it, so that its modules shadow nothing of vLLM's."""
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == here:
        del sys.path[0]


if __name__ == "__main__":
    _unshadow()
    asked = json.load(sys.stdin)
    if isinstance(asked.get("first_path"), str):  # the launch's own sys.path[0], as Python puts it there
        sys.path.insert(0, asked["first_path"])
    ANSWER.append(sys.argv[1])
    write_answer(sys.argv[1], work(asked))
